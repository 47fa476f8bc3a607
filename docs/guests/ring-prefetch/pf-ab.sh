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
    python3 - "$OUT/$n" "$a" "$r" <<'PY'
import json,sys,statistics as st
n,f,r=sys.argv[1:4]
d=json.load(open(f'{n}/results.json'))
fresh={s['config']:s for s in d['samples'] if s['config'].endswith('/g8')}
for o in d['scaling_one_testbed']:
    s=fresh.get(o['config']+'/g8',{})
    print(f, r, o['config'], 'one', round(st.median(o['one_mbps'])), 'all', round(st.median(o['all_mbps'])), 'ratio', round(o['geomean'],3), [round(x,3) for x in o['ci95']], 'g8-fresh', round(s.get('throughput_mbps',0)), 'drops', s.get('port_drops'), 'retx', s.get('retransmissions'), flush=True)
PY
  done
done
