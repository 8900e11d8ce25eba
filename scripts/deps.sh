#!/usr/bin/env bash
# deps.sh: install, only when missing, every Debian package that selroll's build and tests need.
# Idempotent and quiet when everything is present. Run as root (or through sudo).
set -u

PKGS=(
  gcc libc6-dev make pkg-config git ca-certificates
  libzmq3-dev libmsgpack-dev libhiredis-dev libcmocka-dev
  libcurl4-openssl-dev libcjson-dev libmicrohttpd-dev
  redis-server redis-tools valgrind
  python3 python3-zmq python3-msgpack python3-yaml curl
  iproute2 procps
  clang libclang-rt-dev   # make fuzz: clang -fsanitize=fuzzer needs libclang-rt-dev (libFuzzer)
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps.sh: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
  else
    echo "deps.sh: not root and no sudo: install these packages yourself: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
if ! $SUDO apt-get update -qq >"$log" 2>&1; then
  echo "deps.sh: apt-get update failed (is the Debian package registry reachable?):" >&2
  tail -n 5 "$log" >&2
  rm -f "$log"
  exit 1
fi
if ! $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$log" 2>&1; then
  echo "deps.sh: apt-get install failed for: ${missing[*]}" >&2
  tail -n 10 "$log" >&2
  rm -f "$log"
  exit 1
fi
rm -f "$log"
echo "deps.sh: done"
