#!/usr/bin/env bash
# The one test driver behind `make test`: runs the unit-test runner, then every
# integration test (tests/integration/*.sh and *.py, which start the real keel
# binary), counts PASS/FAIL lines and ends with "N passed, N failed".
# KEEL_TEST_ONLY=unit|integration limits the set; KEEL_TEST_FILTER=substr
# selects tests by name.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
BUILD=${BUILD:-build}
export BUILD KEEL="$root/$BUILD/keel" KEEL_HOOKS="$root/$BUILD/keel-hooks" KEEL_SRC="$root" PYTHON=/usr/bin/python3
export KEEL_TEST_TMP=$(mktemp -d "${TMPDIR:-/tmp}/keel-test-XXXXXX")
export KEEL_LOG_FORMAT=${KEEL_LOG_FORMAT:-text}
# The experiment store is found from the environment and the folders
# (kl_track_store_resolve): pin it so no test reads or writes the user's own
# store. No KEEL_TRACKING from outside; the per-user default lands in the
# test's temporary folder; the search for a keel-runs/ folder never looks at
# the repository root or above the temporary folder (a developer's
# ./keel-runs or a /tmp/keel-runs must not change what the tests see).
unset KEEL_TRACKING
export XDG_DATA_HOME="$KEEL_TEST_TMP/xdg-data"
export KEEL_TRACKING_CEILING="$root:$(dirname "$KEEL_TEST_TMP")"
log="$BUILD/test.log"
: > "$log"
passed=0; failed=0; failures=()

run_prog() { # name, command...
  local name=$1; shift
  local out="$KEEL_TEST_TMP/out.txt" t0=$(date +%s%N)
  echo "== $name: $*" >> "$log"
  "$@" 2>>"$log" | tee "$out" | grep --line-buffered -E '^(PASS|FAIL) '
  local rc=${PIPESTATUS[0]}
  cat "$out" >> "$log"
  local p f
  p=$(grep -c '^PASS ' "$out"); f=$(grep -c '^FAIL ' "$out")
  while IFS= read -r l; do failures+=("$l"); done < <(grep '^FAIL ' "$out")
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "FAIL $name: exited with status $rc (see $log)"; f=1
    failures+=("FAIL $name: exited with status $rc")
  fi
  passed=$((passed + p)); failed=$((failed + f))
  echo "$name: $p passed, $f failed ($(( ($(date +%s%N) - t0) / 1000000 )) ms)" >&2
  rm -f "$out"
}

only=${KEEL_TEST_ONLY:-all}
filter=${KEEL_TEST_FILTER:-}
if [ "$only" != integration ]; then
  run_prog unit "$BUILD/keel-unit" $filter
fi
if [ "$only" != unit ]; then
  for t in tests/integration/*.sh tests/integration/*.py; do
    [ -e "$t" ] || continue
    case "$(basename "$t")" in lib.sh | lib_*.sh) continue ;; esac # helpers, not tests
    [ -n "$filter" ] && [[ "$t" != *"$filter"* ]] && continue
    case "$t" in
      *.sh) run_prog "$(basename "$t")" bash "$t" ;;
      *.py) run_prog "$(basename "$t")" /usr/bin/python3 "$t" ;;
    esac
  done
fi
rm -rf "$KEEL_TEST_TMP"
if [ "$failed" -gt 0 ]; then
  echo "failures:"
  printf '  %s\n' "${failures[@]}"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
