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
    python3 - "$OUT/$n" "$a" "$r" "$TAG" <<'PY'
import json,sys,statistics as st
n,f,r,TAG=sys.argv[1:5]
d=json.load(open(f'{n}/results.json'))
fresh={s['config']:s for s in d['samples']}
for o in d['scaling_one_testbed']:
    s=fresh.get(o['config'],{})
    print(f+TAG, r, o['config'], 'one', round(st.median(o['one_mbps'])), 'all', round(st.median(o['all_mbps'])), 'ratio', round(o['geomean'],3), [round(x,3) for x in o['ci95']], 'g8-fresh', round(s.get('throughput_mbps',0)), 'drops', s.get('port_drops'), 'retx', s.get('retransmissions'), flush=True)
PY
  done
done
