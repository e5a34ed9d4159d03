#!/usr/bin/env bash
# examples/defects at test size: the one command (run.sh: datagen -> pack ->
# train through the loader -> eval on the test shards) runs end to end on a
# copy of the example folder. Accuracy at this size is not the example's
# goal (that is measured at 20k images: docs/images.md); the run must finish
# and report it.
. "$KEEL_SRC/tests/integration/lib.sh"
mkdir -p "$T/defects" && cp "$KEEL_SRC"/examples/defects/*.sh "$KEEL_SRC"/examples/defects/*.yaml "$T/defects/" || exit 1
if N=240 TEST_N=60 SIZE=96 THREADS=2 bash "$T/defects/run.sh" "$KEEL" > "$T/run.log" 2>&1; then
  pass examples_defects_runs
  if grep -Eq '^accuracy +[0-9.]+%' "$T/run.log"; then pass examples_defects_reports_accuracy
  else fail examples_defects_reports_accuracy "no accuracy line: $(tail -c 300 "$T/run.log")"; fi
  if [ -f "$T/defects/out-cnn/model.onnx" ]; then pass examples_defects_model
  else fail examples_defects_model "no out-cnn/model.onnx"; fi
else
  fail examples_defects_runs "$(tail -c 400 "$T/run.log")"
fi
