#!/usr/bin/env bash
# System packages the project needs beyond Python: Java 17+ for Spark (hop analyze),
# Chromium for the report's browser test, and valgrind for bench.tracing_cache. As
# root, missing ones are installed from Debian's packages; otherwise we stop and say
# what to install.
set -euo pipefail

java_major() {
  command -v java >/dev/null 2>&1 || { echo 0; return; }
  java -version 2>&1 | awk -F'"' '/version/ {split($2, v, "."); print (v[1] == "1" ? v[2] : v[1]); exit}'
}

missing=()
[ "$(java_major)" -ge 17 ] 2>/dev/null || missing+=(openjdk-17-jre-headless)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v valgrind >/dev/null 2>&1 || missing+=(valgrind)
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "Missing system packages: ${missing[*]} (Java 17+ runs Spark; Chromium renders the report in tests; valgrind counts tracing's cost in bench.tracing_cache)." >&2
  echo "Install them, e.g.: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "Installing ${missing[*]} from Debian's packages" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
[ "$(java_major)" -ge 17 ] || { echo "Java 17 or newer is still missing" >&2; exit 1; }
