#!/usr/bin/env bash
# Files that are not what a command expects: /dev/zero, a FIFO, a folder
# where a file is named (inspect, schema check, features describe, config
# show, a train spec's data.x) fail at once with "not a regular file"
# instead of reading until memory runs out or waiting on a pipe; a YAML
# config whose aliases expand exponentially ("billion laughs") is refused
# by the document loader's cap instead of walked.
. "$KEEL_SRC/tests/integration/lib.sh"
mkfifo "$T/fifo"

# fast_fail NAME CMD...: exit 1 within 10 s, stderr names the problem
fast_fail() {
  local name=$1 want=$2; shift 2
  local t0=$(date +%s%N)
  timeout 10 "$@" > "$T/out" 2> "$T/err" < /dev/null; local rc=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  if [ $rc -eq 1 ] && grep -q "$want" "$T/err" && [ $ms -lt 5000 ]; then pass "$name"
  else fail "$name" "exit $rc after ${ms} ms; stderr: $(head -c 300 "$T/err")"; fi
}

fast_fail hostile_inspect_dev_zero "/dev/zero: not a regular file" "$KEEL" inspect /dev/zero
fast_fail hostile_inspect_fifo "not a regular file" "$KEEL" inspect "$T/fifo"
fast_fail hostile_inspect_folder "not a regular file" "$KEEL" inspect "$T"
fast_fail hostile_schema_check_dev_zero "/dev/zero: not a regular file" "$KEEL" schema check /dev/zero
fast_fail hostile_features_describe_fifo "not a regular file" "$KEEL" features describe "$T/fifo"
fast_fail hostile_config_show_dev_zero "/dev/zero: not a regular file" "$KEEL" config show /dev/zero

cat > "$T/spec.yaml" <<Y
input: {shape: [4]}
layers:
  - {type: linear, out: 2}
loss: {type: cross_entropy}
optimizer: {type: sgd, lr: 0.1}
train: {epochs: 1, batch_size: 2}
data: {x: /dev/zero, y: $T/fifo}
Y
fast_fail hostile_train_x_dev_zero "/dev/zero: not a regular file" "$KEEL" train "$T/spec.yaml" --out "$T/run" --quiet

# billion laughs: 9 levels of 10 aliases = 10^9 scalars when walked
{
  echo 'a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]'
  for i in 1 2 3 4 5 6 7 8 9; do
    p=$((i-1)); echo "a$i: &a$i [*a$p, *a$p, *a$p, *a$p, *a$p, *a$p, *a$p, *a$p, *a$p, *a$p]"
  done
} > "$T/laughs.yaml"
fast_fail hostile_config_show_billion_laughs "limit of a YAML document" "$KEEL" config show "$T/laughs.yaml"
grep -q "1000000 nodes" "$T/err" && pass hostile_billion_laughs_names_cap || fail hostile_billion_laughs_names_cap "$(head -c 300 "$T/err")"

# subgraphs nested 40 deep (If inside If ...): refused at the loader's bound
# instead of recursing until the stack ends
$PYTHON - "$T/nested.onnx" <<'P'
import sys
from onnx import helper, TensorProto
leaf = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "leaf", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
g = leaf
for i in range(40):  # nested through then_branch only: the file grows linearly
    node = helper.make_node("If", ["c"], ["y"], then_branch=g, else_branch=leaf)
    g = helper.make_graph([node], "g%d" % i, [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
top = helper.make_graph(g.node, "top", [helper.make_tensor_value_info("c", TensorProto.BOOL, []), helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
open(sys.argv[1], "wb").write(helper.make_model(top, opset_imports=[helper.make_opsetid("", 16)]).SerializeToString())
P
fast_fail hostile_inspect_nested_subgraphs "subgraphs nested deeper than 32" "$KEEL" inspect "$T/nested.onnx"
