#!/usr/bin/env bash
# examples/digits: the small CNN reaches >= 98 % test accuracy (one command).
. "$KEEL_SRC/tests/integration/lib.sh"
cp -r "$KEEL_SRC/examples/digits" "$T/digits"
rm -rf "$T/digits/data" "$T/digits"/out-*
if "$T/digits/run.sh" cnn "$KEEL" > "$T/cnn.txt" 2> "$T/cnn.err"; then
  acc=$(awk '/^accuracy/{sub("%","",$2); print $2}' "$T/cnn.txt")
  if awk -v a="${acc:-0}" 'BEGIN{exit !(a >= 98.0)}'; then pass train_digits_cnn_98; else fail train_digits_cnn_98 "test accuracy ${acc:-?}% < 98%"; fi
else
  fail train_digits_cnn_98 "run.sh cnn failed: $(tail -c 400 "$T/cnn.err")"
fi
