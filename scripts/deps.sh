#!/bin/sh
# Installs the build and test dependencies from Debian's archive; a no-op when present.
# libmicrohttpd and libcurl: `1bit serve` (HTTP, -hf downloads); node and npm: tests/e2e;
# clang (with libFuzzer): make fuzz.
set -e
need=""
for p in build-essential libjansson-dev libpcre2-dev libutf8proc-dev libicu-dev xz-utils pkg-config clang; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need="$need $p"
done
for p in libmicrohttpd-dev libcurl4-openssl-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need="$need $p"
done
# node may come from elsewhere (e.g. NodeSource's package, which bundles npm): ask for the commands.
command -v node >/dev/null 2>&1 || need="$need nodejs"
command -v npm >/dev/null 2>&1 || need="$need npm"
[ -z "$need" ] && exit 0
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
echo "installing:$need" >&2
$SUDO apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need
