# The format check (tools/check_format.py, .clang-format) on the lines a change
# touches: this tree's own change passes; in a scratch repository a touched
# line laid out against .clang-format fails naming FILE:LINE, the house's
# compact one-liners pass, untouched old lines are not judged, and outside a
# repository the check is skipped.
. "$KEEL_SRC/tests/integration/lib.sh"
chk="$KEEL_SRC/tools/check_format.py"
if ! command -v clang-format > /dev/null; then fail format_tool "clang-format missing (make deps installs it)"; exit 0; fi
check format_this_change $PYTHON "$chk"

r="$T/repo"
mkdir -p "$r/src/m"
cp "$KEEL_SRC/.clang-format" "$r/"
g() { git -C "$r" -c user.name=t -c user.email=t@t "$@"; }
g init -q -b main
cat > "$r/src/m/a.c" <<'C'
/* scratch file */
int  old_untouched( int x ){ return x+1; }

static int f(int *p, int n) {
    int rc = 0;
    if (!p) { rc = -1; goto fail; }
    for (int i = 0; i < n; i++) p[i] = i;
fail:
    return rc;
}
C
g add -A && g commit -qm base
# a second commit in the house style: one-liners with several statements pass
sed -i 's|^    for (int i = 0; i < n; i++) p\[i\] = i;$|    for (int i = 0; i < n; i++) { p[i] = i; rc++; }\n    if (n > 3) { rc = 0; goto fail; }|' "$r/src/m/a.c"
g commit -qam compact
check format_house_one_liners_pass $PYTHON "$chk" --root "$r"

# working-tree edits laid out against the style fail, naming the line
expect_bad() { # NAME SED-EXPR PATTERN
  cp "$r/src/m/a.c" "$T/a.keep"
  sed -i "$2" "$r/src/m/a.c"
  $PYTHON "$chk" --root "$r" > "$T/fmt.out" 2>&1; local rc=$?
  cp "$T/a.keep" "$r/src/m/a.c"
  if [ "$rc" -eq 1 ] && grep -q -- "$3" "$T/fmt.out"; then pass "$1"
  else fail "$1" "exit $rc, expected 1 and '$3': $(head -c 400 "$T/fmt.out")"; fi
}
expect_bad format_refuses_two_space_indent 's|^    int rc = 0;$|  int rc = 0;|' 'src/m/a.c:5: layout differs'
expect_bad format_refuses_missing_spaces 's|^    int rc = 0;$|    int rc=0;|' 'should:     int rc = 0;'
expect_bad format_refuses_brace_on_own_line 's|^static int f(int \*p, int n) {$|static int f(int *p, int n)\n{|' 'src/m/a.c:4: layout differs'
expect_bad format_refuses_tab 's|^    int rc = 0;$|\tint rc = 0;|' 'src/m/a.c:5: layout differs'
long=$(printf 'x%.0s' $(seq 1 130))
expect_bad format_refuses_line_over_120 "s|^    int rc = 0;\$|    int rc = 0; /* $long */|" 'columns, the limit is 120'
# the untouched line 2 (bad, from the base commit) is never reported
$PYTHON "$chk" --root "$r" > "$T/fmt.out" 2>&1
if grep -q 'a.c:2:' "$T/fmt.out"; then fail format_ignores_untouched_lines "$(head -c 300 "$T/fmt.out")"
else pass format_ignores_untouched_lines; fi
# KEEL_FORMAT_BASE chooses the base: against the first commit line 2 is still untouched
KEEL_FORMAT_BASE=$(g rev-list --max-parents=0 HEAD) check format_base_override $PYTHON "$chk" --root "$r"

mkdir -p "$T/plain"
if out=$(cd "$T/plain" && GIT_CEILING_DIRECTORIES="$T" $PYTHON "$chk" --root "$T/plain" 2>&1) && [[ "$out" == *skipped* ]]; then
  pass format_skips_outside_git
else fail format_skips_outside_git "$out"; fi
rm -rf "$r"
