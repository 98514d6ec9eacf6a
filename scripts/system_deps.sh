#!/usr/bin/env bash
# System packages the project and its tests need beyond Python. As root, missing ones
# are installed from Debian's packages; otherwise we stop and say what to install.
#
#   Java 17+ (openjdk-17-jre-headless)  Spark: hop analyze, hop validate   capability java
#   openssl                             test certificates for TLS          capability openssl
#   iproute2 (ip)                       network namespaces, multi-host test capability netns
#   chromium                            renders the report in a test       capability chromium
#   valgrind                            cachegrind: bench.tracing_cache    capability valgrind
#   e2fsprogs (chattr)                  an output folder that refuses files capability immutable_folders
#   python3-venv                        `$PYTHON -m venv` for .venv/ (only while there is none)
#
# tests/capabilities.py probes the same tools when the tests run: a test whose tool is
# missing fails unless HOP_TEST_SKIP names it (docs/testing.md). The netns capability
# also needs root, which no package gives: as another user we say so and carry on.
set -euo pipefail

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

java_major() {
  command -v java >/dev/null 2>&1 || { echo 0; return; }
  java -version 2>&1 | awk -F'"' '/version/ {split($2, v, "."); print (v[1] == "1" ? v[2] : v[1]); exit}'
}

have() {  # COMMAND [PATH...]: on PATH, or at one of the paths (ip is in /usr/sbin)
  local name=$1
  shift
  command -v "$name" >/dev/null 2>&1 && return 0
  for path in "$@"; do [ -x "$path" ] && return 0; done
  return 1
}

missing=()
[ "$(java_major)" -ge 17 ] 2>/dev/null || missing+=(openjdk-17-jre-headless)
have openssl || missing+=(openssl)
have ip /usr/sbin/ip /sbin/ip || missing+=(iproute2)
have chromium || have chromium-browser || missing+=(chromium)
have valgrind || missing+=(valgrind)
have chattr /usr/bin/chattr /bin/chattr || missing+=(e2fsprogs)
if [ ! -x "$VENV/bin/python" ] && ! "$PYTHON" -c 'import ensurepip' >/dev/null 2>&1; then
  missing+=(python3-venv)
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "Not root: tests that need network namespaces (capability netns) will fail;" \
    "run them as root, or skip them with HOP_TEST_SKIP=netns (docs/testing.md)." >&2
fi
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "Missing system packages: ${missing[*]} (see the list at the top of $0)." >&2
  echo "Install them, e.g.: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "Installing ${missing[*]} from Debian's packages" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
[ "$(java_major)" -ge 17 ] || { echo "Java 17 or newer is still missing" >&2; exit 1; }
