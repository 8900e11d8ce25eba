#!/bin/bash
# proto_diff.sh [REV] [ROUNDS] — compare the msgpack codec of git revision REV (default main)
# with this tree's (build/libselroll.a: run `make` first) over tests/fuzz/corpus/fuzz_proto,
# its mutations and generated OBS and ACTION maps (tests/fuzz/proto_diff.c). Prints one line:
# how many decodes were compared; exits non-zero at the first difference.
set -euo pipefail
REV=${1:-main}
ROUNDS=${2:-300}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
[ -f "$ROOT/build/libselroll.a" ] || { echo "proto_diff: build/libselroll.a missing (run make)" >&2; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/inc/common"
for f in proto.h proto_int.h; do git -C "$ROOT" show "$REV:common/$f" > "$TMP/inc/common/$f"; done
for f in proto.c proto_dec.c proto_dec_result.c proto_enc.c proto_scan.c; do
    git -C "$ROOT" show "$REV:common/$f" > "$TMP/$f"
    cc -O2 -std=c11 -D_GNU_SOURCE -I"$TMP/inc" -I"$ROOT" -c "$TMP/$f" -o "$TMP/${f%.c}.o"
done
nm --defined-only -g "$TMP"/*.o | awk 'NF == 3 { print $3 " base_" $3 }' | sort -u > "$TMP/syms"
for o in "$TMP"/*.o; do objcopy --redefine-syms="$TMP/syms" "$o"; done
cc -O1 -std=c11 -D_GNU_SOURCE -I"$ROOT" "$ROOT/tests/fuzz/proto_diff.c" "$TMP"/proto*.o \
    "$ROOT/build/libselroll.a" -lmsgpackc -lpthread -lm -o "$TMP/proto_diff"
"$TMP/proto_diff" "$ROOT/tests/fuzz/corpus/fuzz_proto" "$ROUNDS"
