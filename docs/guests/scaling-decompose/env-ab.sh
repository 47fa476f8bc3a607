#!/bin/bash
# usage: env-ab.sh VAR ROUNDS CONFIGS VALUES...
set -u
V=$1; R=$2; C=$3; shift 3
BIN=/work/main/target/release/pvnet
for r in $(seq 1 $R); do
  for val in "$@"; do
    n=$V-$(echo $val | tr / _)-$r
    if [ "$val" = off ]; then E=""; else E="$V=$val"; fi
    env $E $BIN bench --sweep guests --configs $C --sweep-values 1,8 --reps 1 --duration 2 --paired-rounds 0 --scaling-rounds 40 --out /tmp/exp/$n > /tmp/exp/$n.log 2>&1
    python3 - "$n" "$val" "$r" <<'PY'
import json,sys,statistics as st
n,val,r=sys.argv[1:4]
d=json.load(open(f'/tmp/exp/{n}/results.json'))
for o in d['scaling_one_testbed']:
    print(val, r, o['config'], 'one', round(st.median(o['one_mbps'])), 'all', round(st.median(o['all_mbps'])), 'ratio', round(o['geomean'],3), [round(x,3) for x in o['ci95']], flush=True)
PY
  done
done
