"""PASS/FAIL lines for the Python integration tests (tests/run.sh counts
them): report(name, ok, why) prints one; failed counts the FAILs."""
failed = 0


def report(name, ok, why=""):
    global failed
    if ok:
        print(f"PASS {name}", flush=True)
    else:
        failed += 1
        print(f"FAIL {name}: {why}"[:1500], flush=True)
