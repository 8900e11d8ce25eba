#!/usr/bin/env bash
# deps.sh [--test]: install, only when missing, every Debian package that selroll's build and
# `make run` need; with --test also what the tests need (valgrind, Python with zmq, msgpack,
# pytest, numpy and torch with OpenBLAS for the neural agent, chromium and node for the
# dashboard's browser test, prometheus, clang for fuzzing, iproute2 for the network-namespace
# tests, slurm-wlm and munge for the Slurm cluster of tests/it_slurm.sh).
# Idempotent and quiet when everything is present. Run as root (or
# through sudo).
set -u

PKGS=(
  gcc libc6-dev make pkg-config git ca-certificates
  libzmq3-dev libmsgpack-dev libhiredis-dev libcmocka-dev
  libcurl4-openssl-dev libcjson-dev libmicrohttpd-dev
  redis-server redis-tools
)
TEST=0
[ "${1:-}" = --test ] && TEST=1
if [ $TEST = 1 ]; then
  PKGS+=(
    valgrind
    python3 python3-zmq python3-msgpack python3-yaml python3-pytest python3-numpy curl
    python3-torch libopenblas0-pthread  # the neural agent (python/selroll/neural); OpenBLAS: torch's matmuls
    python3-redis           # optional for python/selroll (its registry speaks RESP without it); tested both ways
    iproute2 procps systemd  # systemd: systemd-analyze verify in tests/it_deploy.sh
    slurm-wlm munge         # tests/it_slurm.sh: slurmctld, slurmd, sbatch... on test hosts
    chromium prometheus
    clang libclang-rt-dev   # make fuzz: clang -fsanitize=fuzzer needs libclang-rt-dev (libFuzzer)
  )
  # The dashboard's browser test runs playwright-core under node; a node from elsewhere that
  # brings its own npm is kept.
  command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || PKGS+=(nodejs npm)
fi

# browser_deps installs playwright-core for the dashboard's browser test (tests/browser) and
# kubernetes-models for the manifests' schema check (tests/k8s) from the npm registry, once:
# `npm ci` against the committed package-lock.json files. Only with --test.
browser_deps() {
  [ $TEST = 1 ] || return 0
  command -v npm >/dev/null 2>&1 || return 0
  if [ ! -d "$(dirname "$0")/../tests/browser/node_modules/playwright-core" ]; then
    echo "deps.sh: npm ci in tests/browser"
    (cd "$(dirname "$0")/../tests/browser" && npm ci --no-audit --no-fund --silent) ||
      echo "deps.sh: npm ci in tests/browser failed (is the npm registry reachable?)" >&2
  fi
  # tests/it_deploy.sh: kubernetes-models, the Kubernetes API's schemas for the manifests
  if [ ! -d "$(dirname "$0")/../tests/k8s/node_modules/kubernetes-models" ]; then
    echo "deps.sh: npm ci in tests/k8s"
    (cd "$(dirname "$0")/../tests/k8s" && npm ci --no-audit --no-fund --silent) ||
      echo "deps.sh: npm ci in tests/k8s failed (is the npm registry reachable?)" >&2
  fi
}

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && { browser_deps; exit 0; }

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
browser_deps
echo "deps.sh: done"
