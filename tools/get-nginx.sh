#!/usr/bin/env bash
# Puts Debian's nginx binary at build/nginx/usr/sbin/nginx for the deployment
# test (tests/integration/deploy_nginx.py), WITHOUT installing the package:
# Debian's nginx package starts and enables a system nginx on port 80 when it
# is installed, which a build machine must not get. This downloads the .deb
# with `apt-get download` (an ordinary apt client call, no root needed when the
# package lists are present) and unpacks it with dpkg-deb. Its libraries
# (libpcre2-8-0, libssl3, zlib1g, libcrypt1) are already on every machine that
# builds keel. Prints the binary's path.
set -eu
dest=${1:-build/nginx}
mkdir -p "$dest"; dest=$(cd "$dest" && pwd)
bin="$dest/usr/sbin/nginx"
if [ -x "$bin" ] && "$bin" -v >/dev/null 2>&1; then echo "$bin"; exit 0; fi
mkdir -p "$dest/deb"
dl() { (cd "$dest/deb" && apt-get download -q nginx >/dev/null 2>"$dest/deb/apt.err"); }
if ! dl; then
  # no package lists yet (a fresh machine): refresh them once as root
  if [ "$(id -u)" = 0 ]; then apt-get update -qq >/dev/null 2>&1 || true; fi
  dl || { echo "get-nginx: apt-get download nginx failed: $(tail -2 "$dest/deb/apt.err")" >&2; exit 1; }
fi
deb=$(ls -t "$dest"/deb/nginx_*.deb | head -1)
dpkg-deb -x "$deb" "$dest"
"$bin" -v >/dev/null 2>&1 || { echo "get-nginx: $bin does not run: $("$bin" -v 2>&1 | head -2)" >&2; exit 1; }
echo "$bin"
