-- wrk script: POST the binary-extension request in $BODY_FILE; its JSON
-- header length is in $HEADER_LEN (Inference-Header-Content-Length)
local f = assert(io.open(os.getenv("BODY_FILE"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/octet-stream"
wrk.headers["Inference-Header-Content-Length"] = os.getenv("HEADER_LEN")
