#!/bin/bash
# usage: rp-ab.sh ROUNDS CONFIGS PREFETCH...  -- the one-testbed 8 ÷ 1 (40 rounds) with each
# --ring-prefetch value in turn, ROUNDS times; one line per configuration and run: prefetch, round,
# config, one guest and eight (Mbit/s, medians of the slices), the ratio and its 95 % interval,
# and the fresh 8-guest stream's Mbit/s, port drops and retransmissions
set -u
R=$1; C=$2; shift 2
BIN=${BIN:-/work/main/target/release/pvnet}; TAG=${TAG:-}
OUT=${OUT:-/tmp/exp}
for r in $(seq 1 $R); do
  for a in "$@"; do
    n=rp$TAG-$a-$r
    $BIN bench --sweep guests --configs $C --sweep-values 1,8 --reps 1 --duration 2 --paired-rounds 0 --scaling-rounds 40 --ring-prefetch $a --out $OUT/$n > $OUT/$n.log 2>&1
    python3 "$(dirname "$0")/line.py" "$OUT/$n" "$a$TAG" "$r"
  done
done
