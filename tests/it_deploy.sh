#!/usr/bin/env bash
# it_deploy.sh: the launch files under deploy/ checked without a cluster (tests/py/deploy_check.py):
# the Kubernetes manifests parsed (python3-yaml) and checked for the fields each kind needs and
# for their cross-references (selectors, ports, volumes, the HPA's target and metric, probes on
# /health, Redis with AOF); every selroll invocation in the manifests, the systemd units and the
# Slurm script checked against the options of its role (`selroll ROLE --help`), and the INI files'
# keys too; the systemd units' restart policies; the Containerfile's runtime packages against the
# libraries bin/selroll links.
set -u
ROOT=$(cd "$(dirname "$0")" && while [ ! -f Makefile ] && [ "$PWD" != / ]; do cd ..; done; pwd)
cd "$ROOT"
PY=${SELROLL_PYTHON:-/usr/bin/python3}
if ! "$PY" -c 'import yaml' 2>/dev/null; then
  echo "FAIL it_deploy: $PY has no yaml module (Debian package python3-yaml; scripts/deps.sh --test installs it)"
  exit 1
fi
"$PY" tests/py/deploy_check.py --selroll "$ROOT/bin/selroll" --deploy "$ROOT/deploy"
