#!/bin/bash
# usage: pf-ab.sh ROUNDS CONFIGS AHEAD...  -- the one-testbed 8 ÷ 1 (40 rounds) with each
# PVNET_EXP_RING_AHEAD value in turn, ROUNDS times
set -u
R=$1; C=$2; shift 2
BIN=/work/main/target/release/pvnet
OUT=${OUT:-/tmp/exp}
for r in $(seq 1 $R); do
  for a in "$@"; do
    n=pf-${a/:/k}-$r
    PVNET_EXP_RING_AHEAD=${a%:*} PVNET_EXP_RING_KAHEAD=${a#*:} $BIN bench --sweep guests --configs $C --sweep-values 1,8 --reps 1 --duration 2 --paired-rounds 0 --scaling-rounds 40 --out $OUT/$n > $OUT/$n.log 2>&1
    python3 "$(dirname "$0")/line.py" "$OUT/$n" "$a" "$r"
  done
done
