#!/bin/sh
# scripts/neural_pretrain.sh WORK [pretrain options...]: runs `python3 -m selroll.neural pretrain`
# in chunks (each at most --chunk-minutes, saving and resuming WORK/state.pt) until it reports done
# (exit 0) or fails. nice'd, one torch thread. Log: WORK/log.txt. Safe to stop and run again.
set -u
work=${1:?usage: scripts/neural_pretrain.sh WORK [pretrain options]}
shift
here=$(cd "$(dirname "$0")/.." && pwd)
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
while :; do
    PYTHONPATH="$here/python" SELROLL_BIN="$here/bin/selroll" nice -n 10 /usr/bin/python3 -m selroll.neural pretrain \
        --work "$work" "$@"
    rc=$?
    [ "$rc" -eq 3 ] || exit "$rc"
done
