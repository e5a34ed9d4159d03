"""Named time zones in the ingest timestamp rule, cross-checked against
Python's zoneinfo (the same compiled tzdata) as the reference: naive local
times in zones with DST on both hemispheres, half-hour and 45-minute offsets,
negative DST (Europe/Dublin), abolished DST (America/Sao_Paulo) and dates
after 2037 (the TZif footer rule) — random times from 1850 to 2100 plus
every 15 minutes of the days around each clock change in 40 sampled years.
Local times skipped by a clock change are rejected naming the zone; times
that occur twice follow `ambiguous: earliest | latest` and are rejected by
default. Unknown zones fail at schema load naming the line."""
import datetime as dt
import json, os, random, subprocess, sys, tempfile
from zoneinfo import ZoneInfo

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "pylib"))
import report as rep  # noqa: E402
from report import report  # noqa: E402

KEEL = os.environ["KEEL"]
T = tempfile.mkdtemp(dir=os.environ.get("KEEL_TEST_TMP"))
UTC = dt.timezone.utc
ZONES = ["Europe/Berlin", "America/New_York", "Australia/Sydney", "Asia/Kolkata", "America/Sao_Paulo",
         "Pacific/Chatham", "Europe/Dublin", "America/St_Johns", "Africa/Casablanca", "Asia/Tehran"]
rng = random.Random(7)


def times_for(zone):
    z = ZoneInfo(zone)
    out = set()
    t0 = dt.datetime(1850, 1, 1).timestamp()
    t1 = dt.datetime(2100, 12, 31).timestamp()
    for _ in range(1200):
        out.add(dt.datetime(1970, 1, 1) + dt.timedelta(seconds=rng.randrange(int(t0), int(t1))))
    for year in rng.sample(range(1900, 2101), 40):
        prev = None
        day = dt.datetime(year, 1, 1, 12)
        while day.year == year:
            off = day.replace(tzinfo=z).utcoffset()
            if prev is not None and off != prev:
                base = day - dt.timedelta(days=1, hours=12)
                for q in range(0, 2 * 96):
                    out.add(base + dt.timedelta(minutes=15 * q))
            prev = off
            day += dt.timedelta(days=1)
    return sorted(out)


def reference(zone, naive):
    z = ZoneInfo(zone)
    a, b = naive.replace(tzinfo=z, fold=0), naive.replace(tzinfo=z, fold=1)
    if a.astimezone(UTC).astimezone(z).replace(tzinfo=None) != naive:
        return "gap", None, None
    ua, ub = a.astimezone(UTC), b.astimezone(UTC)
    return ("ambiguous" if ua != ub else "ok"), min(ua, ub), max(ua, ub)


def ingest(zone, rows, policy):
    name = zone.replace("/", "_") + "_" + (policy or "default")
    csv = os.path.join(T, name + ".csv")
    with open(csv, "w") as f:
        f.write("id,ts\n")
        for i, t in enumerate(rows):
            f.write("%d,%s\n" % (i, t.strftime("%Y-%m-%d %H:%M:%S")))
    schema = os.path.join(T, name + ".yaml")
    amb = ", ambiguous: %s" % policy if policy else ""
    with open(schema, "w") as f:
        f.write("dialect: {format: csv, header: true}\ncolumns:\n  - {name: id, type: int64, nullable: false}\n"
                "  - {name: ts, type: timestamp, timezone: %s%s}\n" % (zone, amb))
    out = os.path.join(T, name + ".d")
    r = subprocess.run([KEEL, "ingest", csv, "--schema", schema, "--out", out, "--max-reject-ratio", "1", "--json"],
                       capture_output=True, text=True)
    if r.returncode:
        return None, r.stderr
    h = subprocess.run([KEEL, "data", "head", out, "-n", str(len(rows) + 1), "--json"], capture_output=True, text=True)
    got = {}
    for ln in h.stdout.splitlines():
        j = json.loads(ln)
        got[j["id"]] = dt.datetime.strptime(j["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    rej = []
    vdir = json.loads(r.stdout)["path"]
    rp = os.path.join(vdir, "rejects.jsonl")
    if os.path.exists(rp):
        rej = [json.loads(x) for x in open(rp)]
    return (got, rej), None


total = 0
for zone in ZONES:
    rows = times_for(zone)
    ref = [reference(zone, t) for t in rows]
    for policy in ("earliest", "latest", None):
        res, err = ingest(zone, rows, policy)
        tag = "ingest_tz_%s_%s" % (zone.replace("/", "_").lower(), policy or "reject")
        if res is None:
            report(tag, False, err)
            continue
        got, rej = res
        bad = []
        rejected_lines = {x["line"] for x in rej}
        for i, (t, (kind, early, late)) in enumerate(zip(rows, ref)):
            line = i + 2
            if kind == "gap" or (kind == "ambiguous" and policy is None):
                if i in got or line not in rejected_lines:
                    bad.append((str(t), kind, "not rejected", got.get(i)))
            else:
                want = late if policy == "latest" else early
                if got.get(i) != want:
                    bad.append((str(t), kind, "got %s" % got.get(i), "want %s" % want))
        msgs_ok = all(("does not exist in " + zone) in x["error"] or ("occurs twice in " + zone) in x["error"] for x in rej)
        n_gap = sum(k == "gap" for k, _, _ in ref)
        n_amb = sum(k == "ambiguous" for k, _, _ in ref)
        total += len(rows)
        report(tag, not bad and msgs_ok, "%d rows (%d skipped, %d repeated local times): %d mismatches, first %s" %
               (len(rows), n_gap, n_amb, len(bad), bad[:3]))

# a zone that does not exist, and ambiguous on a fixed offset: errors naming the schema line
bad_schema = os.path.join(T, "bad.yaml")
with open(bad_schema, "w") as f:
    f.write("dialect: {format: csv, header: true}\ncolumns:\n  - {name: ts, type: timestamp, timezone: Mars/Olympus}\n")
open(os.path.join(T, "one.csv"), "w").write("ts\n2023-01-01 00:00:00\n")
r = subprocess.run([KEEL, "ingest", os.path.join(T, "one.csv"), "--schema", bad_schema, "--out", os.path.join(T, "x")],
                   capture_output=True, text=True)
report("ingest_tz_unknown_zone_error", r.returncode != 0 and "bad.yaml:3" in r.stderr and "unknown zone" in r.stderr, r.stderr)
with open(bad_schema, "w") as f:
    f.write("dialect: {format: csv, header: true}\ncolumns:\n  - {name: ts, type: timestamp, timezone: +02:00, ambiguous: latest}\n")
r = subprocess.run([KEEL, "ingest", os.path.join(T, "one.csv"), "--schema", bad_schema, "--out", os.path.join(T, "x")],
                   capture_output=True, text=True)
report("ingest_tz_ambiguous_needs_zone", r.returncode != 0 and "bad.yaml:3" in r.stderr and "ambiguous applies" in r.stderr, r.stderr)
print("ingest_tz: %d local times in %d zones checked against zoneinfo" % (total, len(ZONES)))
sys.exit(1 if rep.failed else 0)
