# Tracking and registry commands end to end: simulate runs, list with
# filters (and a filter syntax error naming the column), show, compare,
# plot, export, the registry (register, alias, history, resolve, verify of a
# corrupted object). tests/integration/track_pg.sh runs it again against
# PostgreSQL: KEEL_TEST_TRACKING (the store URL) and KEEL_ARTIFACTS set.
. "$KEEL_SRC/tests/integration/lib.sh"
export KEEL_TRACKING="${KEEL_TEST_TRACKING:-$T/store}"
OBJECTS="${KEEL_ARTIFACTS:-$KEEL_TRACKING/objects}"
K=$KEEL

expect_rc track_cli_simulate_a 0 $K runs simulate --experiment ads --name a --steps 40 --param lr=0.001 --tag team=ads
expect_rc track_cli_simulate_b 0 $K runs simulate --experiment ads --name b --steps 60 --metrics 3 --param lr=0.01 --tag team=search
expect_rc track_cli_simulate_c 0 $K --tracking "$KEEL_TRACKING" runs simulate --experiment other --name c --steps 20 --param lr=0.001 --tag team=ads --status failed

expect_rc track_cli_list 0 $K runs list
if [ "$(grep -c -E '^[0-9]+ ' "$T/out")" = 3 ]; then pass track_cli_list_rows; else fail track_cli_list_rows "$(cat "$T/out")"; fi

expect_rc track_cli_filter 0 $K runs list --filter 'metrics.acc > 0.5 and params.lr = "0.001" and tags.team = "ads"' --json
if $PYTHON -c 'import json,sys; r=json.load(open(sys.argv[1])); assert sorted(x["name"] for x in r)==["a","c"], r' "$T/out" 2>"$T/py"; then
  pass track_cli_filter_result; else fail track_cli_filter_result "$(cat "$T/py")"; fi

expect_rc track_cli_filter_status 0 $K runs list --filter 'status = failed' --json
$PYTHON -c 'import json,sys; r=json.load(open(sys.argv[1])); assert [x["name"] for x in r]==["c"]' "$T/out" && pass track_cli_filter_status_result || fail track_cli_filter_status_result "$(cat "$T/out")"

expect_rc track_cli_sort 0 $K runs list --sort '-metrics.acc' --metric acc
first=$(awk 'NR==2{print $3}' "$T/out")
[ "$first" = b ] && pass track_cli_sort_order || fail track_cli_sort_order "first row $first: $(cat "$T/out")"

expect_rc track_cli_filter_error 1 $K runs list --filter 'metrics.acc > 0.5 and params.lr = = 1'
grep -q 'column 35' "$T/err" && pass track_cli_filter_error_column || fail track_cli_filter_error_column "$(cat "$T/err")"

expect_rc track_cli_show 0 $K runs show 2
grep -q 'lr  *0.01' "$T/out" && grep -q 'loss' "$T/out" && pass track_cli_show_content || fail track_cli_show_content "$(cat "$T/out")"
expect_rc track_cli_show_missing 1 $K runs show 99

expect_rc track_cli_compare 0 $K runs compare 1 2
grep -q '^\* lr' "$T/out" && grep -q '^  experiment' "$T/out" && pass track_cli_compare_diff || fail track_cli_compare_diff "$(cat "$T/out")"

expect_rc track_cli_plot 0 $K runs plot 1 2 --metric loss --out "$T/loss.svg"
if [ "$(grep -c '<path class="series"' "$T/loss.svg")" = 2 ] && grep -q 'class="legend"' "$T/loss.svg"; then
  pass track_cli_plot_svg; else fail track_cli_plot_svg "no 2 series/legend"; fi
$PYTHON -c 'import sys,xml.dom.minidom; xml.dom.minidom.parse(sys.argv[1])' "$T/loss.svg" && pass track_cli_plot_xml || fail track_cli_plot_xml "invalid XML"

expect_rc track_cli_export_csv 0 $K runs export --format csv --out "$T/runs.csv"
$PYTHON -c '
import csv,sys
rows=list(csv.DictReader(open(sys.argv[1])))
assert len(rows)==3, rows
assert rows[0]["params.lr"]=="0.001" and rows[1]["tags.team"]=="search", rows
assert float(rows[1]["metrics.m2"])==float(rows[1]["metrics.m2"])' "$T/runs.csv" 2>"$T/py" && pass track_cli_export_csv_content || fail track_cli_export_csv_content "$(cat "$T/py")"
expect_rc track_cli_export_json 0 $K runs export --format json --filter 'experiment = "ads"'
$PYTHON -c 'import json,sys; r=json.load(open(sys.argv[1])); assert len(r)==2 and r[0]["points"]==80' "$T/out" 2>"$T/py" && pass track_cli_export_json_content || fail track_cli_export_json_content "$(cat "$T/py")"
expect_rc track_cli_export_history 0 $K runs export --format csv --history --filter 'id = 1'
[ "$(wc -l < "$T/out")" = 81 ] && pass track_cli_export_history_rows || fail track_cli_export_history_rows "$(wc -l < "$T/out") lines"

# registry
mkdir -p "$T/model/sub"
printf 'weights-1' > "$T/model/model.onnx"
printf 'vocab' > "$T/model/sub/vocab.txt"
echo '{"run_id": 2, "inputs":[{"name":"x","dtype":"float32","shape":[-1,4]}],"outputs":[{"name":"y","dtype":"float32","shape":[-1,3]}]}' > "$T/model/meta.json"
expect_rc track_cli_register_1 0 $K models register "$T/model" --name iris
printf 'weights-2' > "$T/model/model.onnx"
expect_rc track_cli_register_2 0 $K models register "$T/model" --name iris --alias challenger
expect_rc track_cli_alias 0 $K models alias iris champion 1
sleep 0.01
t_mid=$(date -u +%Y-%m-%dT%H:%M:%S.%6NZ)
sleep 0.01
expect_rc track_cli_alias_2 0 $K models alias iris champion 2
expect_rc track_cli_history 0 $K models history iris
[ "$(grep -c champion "$T/out")" = 2 ] && pass track_cli_history_rows || fail track_cli_history_rows "$(cat "$T/out")"
expect_rc track_cli_history_at 0 $K models history iris --at "$t_mid"
grep -q 'iris@champion -> version 1' "$T/out" && pass track_cli_history_at_version || fail track_cli_history_at_version "$(cat "$T/out")"
expect_rc track_cli_models_show 0 $K models show iris --json
$PYTHON -c '
import json,sys
m=json.load(open(sys.argv[1]))
assert m["aliases"]=={"champion":2,"challenger":2}, m["aliases"]
v=m["versions"][0]
assert v["run_id"]==2 and v["signature"]["inputs"][0]["shape"]==[-1,4], v
assert sorted(f["path"] for f in v["files"])==["meta.json","model.onnx","sub/vocab.txt"]' "$T/out" 2>"$T/py" && pass track_cli_models_show_content || fail track_cli_models_show_content "$(cat "$T/py")"
expect_rc track_cli_models_list 0 $K models list
expect_rc track_cli_resolve 0 $K models resolve iris@champion "$T/res"
[ "$(cat "$T/res/model.onnx")" = weights-2 ] && [ -f "$T/res/sub/vocab.txt" ] && pass track_cli_resolve_files || fail track_cli_resolve_files "$(ls -R "$T/res")"
expect_rc track_cli_verify_ok 0 $K models verify

# corrupt the stored object of version 1's model.onnx
h=$(printf 'weights-1' | sha256sum | cut -d' ' -f1)
obj="$OBJECTS/${h:0:2}/${h:2}"
chmod u+w "$obj" && printf 'tampered!' > "$obj"
expect_rc track_cli_verify_corrupt 1 $K models verify
grep -q 'iris/1: model.onnx: sha256 mismatch' "$T/err" && pass track_cli_verify_names_file || fail track_cli_verify_names_file "$(cat "$T/err")"
expect_rc track_cli_resolve_tampered 1 $K models resolve iris/1 "$T/res1"
[ ! -e "$T/res1/model.onnx" ] && pass track_cli_tampered_not_served || fail track_cli_tampered_not_served "model.onnx written"
expect_rc track_cli_verify_v2_ok 0 $K models verify iris/2
expect_rc track_cli_usage 2 $K runs list --bogus
exit 0
