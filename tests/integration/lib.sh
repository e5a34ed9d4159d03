# Helpers for integration tests: each check prints "PASS name" or "FAIL name: why".
# Environment from tests/run.sh: KEEL (the binary), KEEL_SRC, KEEL_TEST_TMP, PYTHON.
set -u
T=$(mktemp -d "$KEEL_TEST_TMP/it-XXXXXX")
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: ${2:-}"; }
# expect_rc NAME RC CMD... : runs CMD, output in $T/out and $T/err
expect_rc() {
  local name=$1 want=$2; shift 2
  "$@" > "$T/out" 2> "$T/err"; local rc=$?
  if [ "$rc" -eq "$want" ]; then pass "$name"; return 0; fi
  fail "$name" "exit $rc, expected $want; stderr: $(head -c 400 "$T/err")"; return 1
}
# check NAME CMD... : passes when CMD succeeds
check() {
  local name=$1; shift
  if "$@" > "$T/check.out" 2>&1; then pass "$name"; else fail "$name" "$(head -c 400 "$T/check.out")"; fi
}
