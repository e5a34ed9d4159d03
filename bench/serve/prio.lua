-- wrk script: POST $BODY_FILE with X-Priority: $PRIORITY
local f = assert(io.open(os.getenv("BODY_FILE"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
wrk.headers["X-Priority"] = os.getenv("PRIORITY") or "2"
