# The keel command itself: help, version, usage errors with suggestions,
# global options and config precedence, run through the real binary.
. "$KEEL_SRC/tests/integration/lib.sh"

expect_rc cli_help 0 "$KEEL" --help && grep -q "Commands:" "$T/out" && pass cli_help_lists_commands || fail cli_help_lists_commands "no command list"
expect_rc cli_no_args_is_usage 2 "$KEEL"
expect_rc cli_version 0 "$KEEL" version && grep -q "^keel [0-9]" "$T/out" && grep -q "commit" "$T/out" && grep -q "sqlite" "$T/out" \
  && pass cli_version_fields || fail cli_version_fields "$(cat "$T/out")"
expect_rc cli_version_json 0 "$KEEL" version --json
$PYTHON -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["version"] and d["commit"] and d["compiler"] and "zstd" in d["libraries"]' "$T/out" \
  && pass cli_version_json_parses || fail cli_version_json_parses "$(cat "$T/out")"
expect_rc cli_unknown_command 2 "$KEEL" versoin && grep -q "did you mean 'version'" "$T/err" \
  && pass cli_unknown_command_suggests || fail cli_unknown_command_suggests "$(cat "$T/err")"
expect_rc cli_unknown_flag 2 "$KEEL" version --jsn && grep -q "did you mean --json" "$T/err" \
  && pass cli_unknown_flag_suggests || fail cli_unknown_flag_suggests "$(cat "$T/err")"
expect_rc cli_command_help 0 "$KEEL" version --help && grep -q "Usage: keel version" "$T/out" \
  && pass cli_command_help_text || fail cli_command_help_text "$(cat "$T/out")"
expect_rc cli_help_command 0 "$KEEL" help config
expect_rc cli_bad_threads 2 "$KEEL" --threads lots version && grep -q "threads" "$T/err" \
  && pass cli_bad_threads_message || fail cli_bad_threads_message "$(cat "$T/err")"
KEEL_LOG_LEVEL=loud "$KEEL" version > "$T/out" 2> "$T/err"; rc=$?
[ $rc -eq 2 ] && grep -q "KEEL_LOG_LEVEL" "$T/err" && pass cli_bad_env_value || fail cli_bad_env_value "rc=$rc $(cat "$T/err")"

# Every command listed in --help answers --help with exit 0.
"$KEEL" --help | awk '/^Commands:/{f=1;next} /^$/{f=0} f{print $1}' > "$T/cmds"
n=0; bad=""
while read -r c; do
  [ -z "$c" ] && continue; n=$((n+1))
  "$KEEL" "$c" --help > /dev/null 2>&1 || bad="$bad $c"
done < "$T/cmds"
[ $n -ge 3 ] && [ -z "$bad" ] && pass cli_every_command_has_help || fail cli_every_command_has_help "n=$n failing:$bad"

# Configuration precedence: default < spec file < environment < flag.
cat > "$T/spec.yaml" <<'Y'
train:
  epochs: 20
  lr: 0.01
threads: 1
Y
"$KEEL" config show "$T/spec.yaml" --json > "$T/cfg.json" 2> "$T/err" \
  && $PYTHON - "$T/cfg.json" <<'P' && pass config_show_file_values || fail config_show_file_values "$(cat "$T/err") $(cat "$T/cfg.json")"
import json, sys
s = {x["key"]: x for x in json.load(open(sys.argv[1]))["settings"]}
assert s["train.epochs"]["value"] == "20" and s["train.epochs"]["source"] == "file", s["train.epochs"]
assert s["train.epochs"]["origin"].endswith("spec.yaml:2:11"), s["train.epochs"]
assert s["log.level"]["source"] == "default"
P
KEEL_TRAIN_EPOCHS=30 KEEL_THREADS=2 "$KEEL" --threads 3 config show "$T/spec.yaml" --set train.lr=0.5 --json > "$T/cfg.json" 2> "$T/err" \
  && $PYTHON - "$T/cfg.json" <<'P' && pass config_precedence_env_and_flags || fail config_precedence_env_and_flags "$(cat "$T/err") $(cat "$T/cfg.json")"
import json, sys
s = {x["key"]: x for x in json.load(open(sys.argv[1]))["settings"]}
assert s["train.epochs"]["value"] == "30" and s["train.epochs"]["origin"] == "env KEEL_TRAIN_EPOCHS", s["train.epochs"]
assert s["threads"]["value"] == "3" and s["threads"]["origin"] == "flag --threads", s["threads"]
assert s["train.lr"]["value"] == "0.5" and s["train.lr"]["source"] == "flag", s["train.lr"]
P
printf 'threads: many\n' > "$T/bad.yaml"
expect_rc config_bad_type_fails 1 "$KEEL" config show "$T/bad.yaml" && grep -q "bad.yaml:1:10: threads: expected an integer, got \"many\"" "$T/err" \
  && pass config_bad_type_message || fail config_bad_type_message "$(cat "$T/err")"
"$KEEL" config show > "$T/out" 2>&1 && grep -q "SETTING" "$T/out" && grep -q "log.format" "$T/out" \
  && pass config_show_text || fail config_show_text "$(cat "$T/out")"
