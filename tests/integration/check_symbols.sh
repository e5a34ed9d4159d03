# The prefix check (tools/check_symbols.py): today's build/libkeel.a defines no
# global symbol without the kl_ prefix (generated protobuf-c objects keep
# onnx__), and an archive with such a symbol, or a public header tree with a
# type defined twice, fails naming the object, the symbol and the places.
. "$KEEL_SRC/tests/integration/lib.sh"
chk="$KEEL_SRC/tools/check_symbols.py"
check symbols_library_has_only_kl_globals $PYTHON "$chk"

# expect_bad NAME PATTERN ARGS...: the check exits 1 and its output matches PATTERN
expect_bad() {
  local name=$1 pat=$2; shift 2
  $PYTHON "$chk" "$@" > "$T/sym.out" 2>&1; local rc=$?
  if [ "$rc" -eq 1 ] && grep -q -- "$pat" "$T/sym.out"; then pass "$name"
  else fail "$name" "exit $rc, expected 1 and '$pat'; output: $(head -c 400 "$T/sym.out")"; fi
}
# mkar ARCHIVE OBJECT C-TEXT: an archive holding one object compiled from C-TEXT
mkar() {
  printf '%s\n' "$3" > "$T/src.c"
  cc -c -o "$T/$2" "$T/src.c" && rm -f "$1" && ar rcs "$1" "$T/$2"
}
mkar "$T/good.a" good.o 'static int helper(int x) { return x + 1; } int kl__x_shared(int x) { return helper(x); }
int kl_x_public(void) { return 0; }'
check symbols_static_and_kl_pass $PYTHON "$chk" --lib "$T/good.a"
mkar "$T/bad.a" bad.o 'int sv_helper(int x) { return x; } int kl_ok(void) { return 1; } int sv_table[4] = {1};'
expect_bad symbols_refuse_unprefixed_function 'bad.o: sv_helper (T): global symbol without the kl_ prefix' --lib "$T/bad.a"
expect_bad symbols_refuse_unprefixed_data 'bad.o: sv_table (D)' --lib "$T/bad.a"
if grep -q 'kl_ok' "$T/sym.out"; then fail symbols_pass_kl_names "$(head -c 300 "$T/sym.out")"
else pass symbols_pass_kl_names; fi
mkar "$T/gen.a" onnx.pb-c.o 'int onnx__model__pack(void) { return 0; } int other_global(void) { return 1; }'
expect_bad symbols_generated_objects_keep_their_prefix 'onnx.pb-c.o: other_global (T): generated object, expected prefix onnx__' \
  --lib "$T/gen.a"
if grep -q 'onnx__model__pack' "$T/sym.out"; then fail symbols_allow_generated_prefix "$(head -c 300 "$T/sym.out")"
else pass symbols_allow_generated_prefix; fi
expect_rc symbols_missing_library_is_usage_error 2 $PYTHON "$chk" --lib "$T/none.a"

# a public type defined in two headers
w="$T/tree"
mkdir -p "$w/include"
cp -r "$KEEL_SRC/include/keel" "$w/include/"
check symbols_headers_copy_pass $PYTHON "$chk" --root "$w" --lib "$T/good.a"
printf '/* test header */\ntypedef struct kl_tensor {\n    int x;\n} kl_tensor;\n' > "$w/include/keel/zz_dup.h"
expect_bad symbols_refuse_public_type_twice 'public type kl_tensor defined twice: .*include/keel/zz_dup.h:4' \
  --root "$w" --lib "$T/good.a"
rm -rf "$w"
