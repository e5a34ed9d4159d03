#!/bin/sh
# Checks the Debian packages in mk/packages.txt and installs the missing ones.
# As root: apt-get update once, then apt-get install -y. Otherwise prints the
# exact command and fails. Fast (one dpkg-query) when nothing is missing.
set -eu
list="${1:-$(dirname "$0")/packages.txt}"
want=$(grep -v '^[[:space:]]*#' "$list" | awk 'NF{print $1}')
missing=""
for p in $want; do
  case $p in
    cmd:*) # "cmd:NAME PKG": install PKG only when no NAME command exists
      c=${p#cmd:}; command -v "$c" >/dev/null 2>&1 && continue
      p=$(grep "^cmd:$c[[:space:]]" "$list" | awk '{print $2}') ;;
  esac
  st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [ "$st" = "installed" ] || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "keel: missing Debian packages:$missing" >&2
if [ "$(id -u)" = 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends $missing >&2
else
  echo "keel: run as root:  apt-get update && apt-get install -y$missing" >&2
  exit 1
fi
