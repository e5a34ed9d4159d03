# The include check (tools/check_deps.py) against docs/architecture.md's module
# table: today's tree passes, and a copy of it with one new forbidden include
# of each kind fails, naming file:line and the rule.
. "$KEEL_SRC/tests/integration/lib.sh"
chk="$KEEL_SRC/tools/check_deps.py"
check deps_tree_matches_architecture_table $PYTHON "$chk"

# A copy of the tree to break: sources, public headers and the table.
w="$T/tree"
mkdir -p "$w/docs"
cp -r "$KEEL_SRC/src" "$KEEL_SRC/app" "$KEEL_SRC/include" "$w/"
cp "$KEEL_SRC/docs/architecture.md" "$w/docs/"
check deps_copy_passes $PYTHON "$chk" --root "$w"

# expect_violation NAME FILE TEXT PATTERN: with TEXT added as FILE, the check
# fails and its output matches PATTERN; FILE is removed afterwards.
expect_violation() {
  local name=$1 file=$2 text=$3 pat=$4
  printf '/* test file */\n%s\n' "$text" > "$w/$file"
  $PYTHON "$chk" --root "$w" > "$T/deps.out" 2>&1; local rc=$?
  rm -f "$w/$file"
  if [ "$rc" -eq 1 ] && grep -q -- "$pat" "$T/deps.out"; then pass "$name"
  else fail "$name" "exit $rc, expected 1 and '$pat'; output: $(head -c 400 "$T/deps.out")"; fi
}
expect_violation deps_refuses_upward_module_include src/tensor/zz_bad.c '#include "keel/serve.h"' \
  'src/tensor/zz_bad.c:2: tensor includes "keel/serve.h": public header of module serve, which tensor may not use'
expect_violation deps_refuses_other_private_header src/feature/zz_bad.c '#include "data/data_int.h"' \
  'src/feature/zz_bad.c:2: feature includes "data/data_int.h": private header of module data'
expect_violation deps_refuses_unlisted_library src/tune/zz_bad.c '#include <sqlite3.h>' \
  'src/tune/zz_bad.c:2: tune includes <sqlite3.h>: header of outside library sqlite3, which tune may not use'
expect_violation deps_refuses_unknown_header src/core/zz_bad.c '#include <nosuchlib/nosuch.h>' \
  'src/core/zz_bad.c:2: core includes <nosuchlib/nosuch.h>: header in no table'
expect_violation deps_refuses_unowned_public_header include/keel/zz_bad.h '#include "keel/train.h"' \
  'include/keel/zz_bad.h:1: public header owned by no module'

# a new module folder must get a row before its includes count as checked
mkdir -p "$w/src/newmod"
expect_violation deps_refuses_folder_without_row src/newmod/a.c '#include "keel/core.h"' \
  'src/newmod/: module folder in no row of docs/architecture.md'
rmdir "$w/src/newmod"

# The table is exact both ways: an entry no file uses is stale, and a cycle fails.
sed 's/| `src\/doctor\/` \(.*\)| core | - |$/| `src\/doctor\/` \1| core, tensor | - |/' "$KEEL_SRC/docs/architecture.md" > "$w/docs/architecture.md"
$PYTHON "$chk" --root "$w" > "$T/deps.out" 2>&1; rc=$?
if [ "$rc" -eq 1 ] && grep -q 'module doctor lists uses tensor, but no file of doctor includes its headers' "$T/deps.out"; then
  pass deps_reports_stale_table_entry
else fail deps_reports_stale_table_entry "exit $rc; $(head -c 400 "$T/deps.out")"; fi
sed 's/| `src\/core\/` \(.*\)| `core.h` | - |/| `src\/core\/` \1| `core.h` | pipeline |/' "$KEEL_SRC/docs/architecture.md" > "$w/docs/architecture.md"
printf '/* test file */\n#include "keel/pipeline.h"\n' > "$w/src/core/zz_cycle.c"
$PYTHON "$chk" --root "$w" > "$T/deps.out" 2>&1; rc=$?
rm -f "$w/src/core/zz_cycle.c"
if [ "$rc" -eq 1 ] && grep -q 'module edges form a cycle: .*core' "$T/deps.out"; then pass deps_refuses_cycle
else fail deps_refuses_cycle "exit $rc; $(head -c 400 "$T/deps.out")"; fi
rm -rf "$w"
