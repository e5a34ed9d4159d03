#!/usr/bin/env bash
# Writes the command reference (docs/commands.md) from the keel binary's own
# --help output: `keel --help` lists the commands, and every help text with a
# "Commands:" section (app_dispatch, or a command that names its subcommands
# there) lists the subcommands, recursively. No hand-kept list of commands.
# Fails (exit 1) when a command's --help does not exit 0 or does not start
# with "Usage: keel <command>", so an inconsistent command is caught here.
# Usage: tools/gen-command-docs.sh [KEEL] [OUT]   (make docs)
set -eu
keel=${1:-build/keel}
out=${2:-docs/commands.md}
[ -x "$keel" ] || { echo "gen-command-docs: $keel is not an executable (run make first)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the help texts must not depend on who runs them
export LC_ALL=C
unset KEEL_THREADS KEEL_LOG_LEVEL KEEL_LOG_FORMAT KEEL_TRACKING KEEL_MEMORY_LIMIT 2>/dev/null || true

# subcommand names listed in the "Commands:" section of a help text (stdin)
subcommands() { awk '/^Commands:$/ {f = 1; next} f && /^$/ {f = 0} f && /^  [a-z]/ {print $1}'; }

body="$tmp/body"; toc="$tmp/toc"; : > "$body"; : > "$toc"
bad=0
# emit WORDS...: appends the help of `keel WORDS --help` and recurses
emit() {
  local words="$*" h="$tmp/h" rc=0 depth=$# anchor
  "$keel" "$@" --help > "$h" 2> "$tmp/err" || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "gen-command-docs: 'keel $words --help' exited $rc: $(head -c 300 "$tmp/err")" >&2; bad=1; return
  fi
  if ! head -1 "$h" | grep -q "^Usage: keel $words\( \|$\)"; then
    echo "gen-command-docs: 'keel $words --help' does not start with 'Usage: keel $words': $(head -1 "$h")" >&2
    bad=1; return
  fi
  if grep -q '^```' "$h"; then echo "gen-command-docs: 'keel $words --help' contains a code fence" >&2; bad=1; fi
  anchor="keel-${words// /-}"
  printf '%*s- [`keel %s`](#%s)\n' $(( (depth - 1) * 2 )) '' "$words" "$anchor" >> "$toc"
  { printf '\n%s keel %s\n\n```text\n' "$( [ "$depth" -eq 1 ] && echo '##' || echo '###')" "$words"
    sed 's/[[:space:]]*$//' "$h"; printf '```\n'; } >> "$body"
  local subs; subs=$(subcommands < "$h")
  local s; for s in $subs; do emit "$@" "$s"; done
}

"$keel" --help > "$tmp/top" 2> "$tmp/err" || { echo "gen-command-docs: 'keel --help' failed" >&2; exit 1; }
cmds=$(subcommands < "$tmp/top")
[ -n "$cmds" ] || { echo "gen-command-docs: no commands found in 'keel --help'" >&2; exit 1; }
for c in $cmds; do emit "$c"; done
[ "$bad" -eq 0 ] || exit 1

mkdir -p "$(dirname "$out")"
{
  echo '# keel command reference'
  echo
  echo 'Generated from the `--help` output of every command and subcommand by'
  echo '`make docs` (`tools/gen-command-docs.sh`). Do not edit by hand: `make test`'
  echo 'fails when this file is stale. The guides in this folder explain the commands;'
  echo 'this page is the exact text each one prints for `--help`.'
  echo
  echo '## keel'
  echo
  echo '```text'
  sed 's/[[:space:]]*$//' "$tmp/top"
  echo '```'
  echo
  echo '## Contents'
  echo
  cat "$toc"
  cat "$body"
} > "$tmp/out.md"
mv "$tmp/out.md" "$out"
echo "gen-command-docs: wrote $out ($(grep -c '^- \|^  - ' "$toc") commands)" >&2
