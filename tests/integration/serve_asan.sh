#!/usr/bin/env bash
# The server's integration tests under AddressSanitizer + UBSan (issue 22):
# builds build/san-address-undefined/keel with the Makefile's SANITIZE
# mechanism (the objects CI's `make test-unit SANITIZE=address,undefined`
# reuses) and runs every serve integration test (tests/integration/serve_*.py
# and quickstart_serve.py) against it with KEEL pointing at it. Any ASan/UBSan report fails: halt_on_error, the
# reports go to files checked at the end, and leak detection stays on (the
# server exits cleanly on SIGTERM, which every test checks: a report makes
# that exit code non-zero). Test names get the prefix asan_.
# KEEL_ASAN_TESTS overrides the list; skipped when the whole `make test`
# already runs under a sanitizer (KEEL is one then).
set -u
cd "$(dirname "$0")/../.."
if [ -n "${SANITIZE:-}" ]; then
  echo "PASS serve_asan_skipped_already_sanitized"
  exit 0
fi
san=build/san-address-undefined
tmp=$(mktemp -d "${KEEL_TEST_TMP:-/tmp}/serve-asan-XXXXXX")
t0=$(date +%s)
if ! make --no-print-directory -j"${JOBS:-$(nproc)}" BUILD="$san" SANITIZE=address,undefined "$san/keel" > "$tmp/build.log" 2>&1; then
  echo "FAIL serve_asan_build: $(tail -5 "$tmp/build.log" | tr '\n' ' ')"
  exit 1
fi
echo "serve_asan: build $(( $(date +%s) - t0 )) s" >&2
export KEEL="$PWD/$san/keel"
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:exitcode=86:log_path=$tmp/asan"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:exitcode=87:log_path=$tmp/ubsan"
export LSAN_OPTIONS="exitcode=86"
tests=${KEEL_ASAN_TESTS:-$(cd tests/integration && ls serve_*.py quickstart_serve.py | sed 's/\.py$//')}
rc=0
for t in $tests; do
  t1=$(date +%s)
  /usr/bin/python3 "tests/integration/$t.py" > "$tmp/$t.out" 2>&1
  trc=$?
  sed -n 's/^\(PASS\|FAIL\) /\1 asan_/p' "$tmp/$t.out"
  if [ "$trc" -ne 0 ] && ! grep -q '^FAIL ' "$tmp/$t.out"; then
    echo "FAIL asan_$t: exited with status $trc: $(tail -3 "$tmp/$t.out" | tr '\n' ' ')"
    rc=1
  fi
  echo "serve_asan: $t $(( $(date +%s) - t1 )) s" >&2
done
# every report, of any process (servers killed by a test included)
reports=$(ls "$tmp"/asan.* "$tmp"/ubsan.* 2>/dev/null)
if [ -n "$reports" ]; then
  for f in $reports; do
    echo "FAIL serve_asan_report $(basename "$f"): $(grep -m3 -E 'ERROR|runtime error|SUMMARY' "$f" | tr '\n' ' ')"
    sed -n '1,60p' "$f" >&2
  done
  rc=1
else
  echo "PASS serve_asan_no_reports"
fi
echo "serve_asan: total $(( $(date +%s) - t0 )) s" >&2
rm -rf "$tmp"
exit $rc
