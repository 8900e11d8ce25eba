#!/usr/bin/env bash
# it_deploy.sh: the launch files under deploy/ checked without a cluster (tests/py/deploy_check.py):
# the Kubernetes manifests parsed (python3-yaml) and checked for the fields each kind needs and
# for their cross-references (selectors, ports, volumes, the HPA's target and metric, probes on
# /health, Redis with AOF); every selroll invocation in the manifests, the systemd units and the
# Slurm script checked against the options of its role (`selroll ROLE --help`), and the INI files'
# keys too; the systemd units' restart policies; the Containerfile's runtime packages against the
# libraries bin/selroll links. Then every systemd unit through `systemd-analyze verify` (systemd's
# own parser: unknown keys and sections, bad values, missing executables, broken dependencies),
# in a private root holding the units, the system's unit files and bin/selroll as
# /usr/local/bin/selroll; any message counts as a failure. Then the Kubernetes manifests against
# the Kubernetes API's schemas (tests/k8s/validate.mjs: types, required fields, enums; fields the
# schemas do not name are not refused).
set -u
ROOT=$(cd "$(dirname "$0")" && while [ ! -f Makefile ] && [ "$PWD" != / ]; do cd ..; done; pwd)
cd "$ROOT"
PY=${SELROLL_PYTHON:-/usr/bin/python3}
if ! "$PY" -c 'import yaml' 2>/dev/null; then
  echo "FAIL it_deploy: $PY has no yaml module (Debian package python3-yaml; scripts/deps.sh --test installs it)"
  exit 1
fi
"$PY" tests/py/deploy_check.py --selroll "$ROOT/bin/selroll" --deploy "$ROOT/deploy"
fail=$?

if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "FAIL systemd: no systemd-analyze (Debian package systemd; scripts/deps.sh --test installs it)"
  exit 1
fi
R=$(mktemp -d)
trap 'rm -rf "$R"' EXIT
mkdir -p "$R/usr/local/bin" "$R/etc/systemd/system" "$R/usr/lib/systemd"
cp "$ROOT/bin/selroll" "$R/usr/local/bin/selroll"
cp -a /usr/lib/systemd/system "$R/usr/lib/systemd/"
cp "$ROOT"/deploy/systemd/*.service "$R/etc/systemd/system/"
for u in "$ROOT"/deploy/systemd/*.service; do
  b=$(basename "$u")
  msg=$(systemd-analyze verify --root="$R" "$R/etc/systemd/system/$b" 2>&1); rc=$?
  if [ $rc -eq 0 ] && [ -z "$msg" ]; then
    echo "ok   systemd: systemd-analyze verify $b"
  else
    echo "FAIL systemd: systemd-analyze verify $b (exit $rc):"; sed 's/^/     /' <<<"$msg"; fail=1
  fi
done

# the Kubernetes manifests against the Kubernetes API's schemas (tests/k8s/validate.mjs; the
# schemas ship in its npm packages, installed by scripts/deps.sh --test from package-lock.json)
command -v node >/dev/null 2>&1 || { echo "FAIL k8s schema: node is missing (run scripts/deps.sh --test)"; exit 1; }
if [ ! -d tests/k8s/node_modules/kubernetes-models ]; then
  (cd tests/k8s && npm ci --no-audit --no-fund --silent) || { echo "FAIL k8s schema: npm ci in tests/k8s failed"; exit 1; }
fi
k8s_json() {   # k8s_json FILE...: the YAML documents of FILEs as a JSON array of {file, doc}
  "$PY" -c '
import json, os, sys, yaml
out = []
for f in sys.argv[1:]:
    with open(f) as fh:
        out += [{"file": os.path.basename(f), "doc": d} for d in yaml.safe_load_all(fh) if d]
print(json.dumps(out))' "$@"
}
k8s_json "$ROOT"/deploy/k8s/*.yaml | (cd tests/k8s && node validate.mjs) || fail=1
# the validator itself: tests/k8s/bad.yaml (a string containerPort) must fail
if k8s_json tests/k8s/bad.yaml | (cd tests/k8s && node validate.mjs) >"$R/bad.out" 2>&1; then
  echo "FAIL k8s schema: tests/k8s/bad.yaml passed the validator"; fail=1
else
  echo "ok   k8s schema: the validator refuses tests/k8s/bad.yaml ($(grep -o 'containerPort must be [a-z]*' "$R/bad.out"))"
fi
exit $fail
