# bench/serve/lib_clicks.sh: sourced by the A/B serving benchmarks (monitor.sh, predlog.sh). clicks_ab builds,
# in the current folder, the monitored clicks model of tests/integration/serve/helpers.py (fit, apply, train on
# clickgen rows: 2 raw inputs, 9 feature slots, 1 output), two repositories A/ctr/1 and B/ctr/1 holding it, and
# body.json: a :predict body of 8 records. Needs $K (the keel binary) and $PY. ab_start SIDE [serve options]
# starts `keel serve $w/SIDE` on a free port (pid_SIDE, port_SIDE; its pid appended to $pids).
clicks_ab() {
  cat > spec.yaml <<'EOF'
label: {column: clicked, type: int32}
features:
  - {name: price_z, transform: standardize, input: item_price, type: float64, fill: 0}
  - {name: log_price, transform: log1p, input: item_price, type: float64, fill: 0}
  - {name: cat, transform: onehot, input: category, type: string}
EOF
  cat > model.yaml <<'EOF'
seed: 1
input: {shape: [9]}
layers: [{type: linear, out: 8}, {type: relu}, {type: linear, out: 1}]
loss: {type: bce_with_logits}
optimizer: {type: adamw, lr: 0.01}
train: {epochs: 2, batch_size: 64}
data: {dataset: fds, label: clicked, split: {train: 0.8, val: 0.2, test: 0.0, shuffle: false}}
EOF
  mkdir -p f
  "$K" features fit spec.yaml --data clickgen:6000:1 --out f/features.json > /dev/null
  "$K" features apply f/features.json --data clickgen:6000:1 --out fds > /dev/null
  "$K" train model.yaml --out model > /dev/null
  "$K" data gen-clicks live.csv --rows 64 --seed 9 > /dev/null
  local s f
  for s in A B; do
    mkdir -p "$s/ctr/1"
    for f in $($PY -c 'import json,sys; print(" ".join(json.load(open("model/meta.json"))["files"]))') meta.json; do
      cp "model/$f" "$s/ctr/1/"
    done
  done
  $PY - <<'EOF'
import csv, json
rows = list(csv.DictReader(open("live.csv")))[:8]
recs = [{"item_price": float(r["item_price"]) if r["item_price"] else None, "category": r["category"],
         "ts": r["ts"].replace(" ", "T") + "Z"} for r in rows]
json.dump({"instances": recs}, open("body.json", "w"))
EOF
}

ab_start() {
  local s=$1 i; shift
  "$K" serve "$w/$s" --port 0 --workers 1 --http-threads 2 --no-access-log "$@" > "$w/$s.out" 2> "$w/$s.err" &
  pids="$pids $!"; eval "pid_$s=$!"
  for i in $(seq 150); do grep -q listening "$w/$s.out" 2>/dev/null && break; sleep 0.1; done
  eval "port_$s=$(sed -n 's/.*:\([0-9]*\)$/\1/p' "$w/$s.out")"
}
