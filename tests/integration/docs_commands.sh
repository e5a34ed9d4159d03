# The command reference docs/commands.md must match the --help of the keel
# being tested: regenerate it into $T and compare. Also checks that the
# generator catches a command whose --help is broken.
. "$KEEL_SRC/tests/integration/lib.sh"
gen="$KEEL_SRC/tools/gen-command-docs.sh"
if bash "$gen" "$KEEL" "$T/commands.md" 2> "$T/gen.err"; then
  pass docs_commands_generate
  if diff -u "$KEEL_SRC/docs/commands.md" "$T/commands.md" > "$T/diff" 2>&1; then
    pass docs_commands_fresh
  else
    fail docs_commands_fresh "docs/commands.md is stale: run make docs ($(grep -c '^[-+][^-+]' "$T/diff") changed lines; first: $(grep -m1 '^[-+][^-+]' "$T/diff"))"
  fi
else
  fail docs_commands_generate "$(head -c 400 "$T/gen.err")"
fi
# every command of 'keel --help' and every subcommand listed is in the reference
n=$(grep -c '^```text$' "$T/commands.md" 2>/dev/null || echo 0)
top=$("$KEEL" --help | awk '/^Commands:$/{f=1;next} f&&/^$/{f=0} f{print $1}' | wc -l)
if [ "$n" -gt "$top" ] && grep -q '^### keel tune show$' "$T/commands.md"; then pass docs_commands_complete
else fail docs_commands_complete "$n help texts for $top commands, or keel tune show missing"; fi
# a fake keel whose subcommand's --help exits 1 makes the generator fail, naming it
cat > "$T/fake-keel" <<'FAKE'
#!/bin/sh
case "$*" in
  --help) printf 'Usage: keel COMMAND\n\nCommands:\n  good   fine\n  broken not fine\n\n' ;;
  "good --help") printf 'Usage: keel good\n\nfine\n' ;;
  *) echo "no help" >&2; exit 1 ;;
esac
FAKE
chmod +x "$T/fake-keel"
if bash "$gen" "$T/fake-keel" "$T/fake.md" 2> "$T/fake.err"; then
  fail docs_commands_catches_broken_help "the generator accepted a command whose --help exits 1"
elif grep -q "keel broken --help" "$T/fake.err"; then pass docs_commands_catches_broken_help
else fail docs_commands_catches_broken_help "$(head -c 300 "$T/fake.err")"; fi
