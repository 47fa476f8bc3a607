#!/bin/bash
# A/B of two pvnet binaries on the one-testbed 8 ÷ 1 comparison, interleaved.
# usage: ab.sh NAME_A BIN_A NAME_B BIN_B ROUNDS CONFIGS
set -u
A=$1; BA=$2; B=$3; BB=$4; R=${5:-2}; C=${6:-xen}
for r in $(seq 1 $R); do
  for pair in "$A:$BA" "$B:$BB"; do
    n=${pair%%:*}; bin=${pair#*:}
    $bin bench --sweep guests --configs $C --sweep-values 1,8 --reps 1 --duration 2 --paired-rounds 0 --scaling-rounds 40 --out /tmp/exp/ab-$n-$r > /tmp/exp/ab-$n-$r.log 2>&1
    python3 - "$n" "$r" <<'PY'
import json,sys
n,r=sys.argv[1],sys.argv[2]
d=json.load(open(f'/tmp/exp/ab-{n}-{r}/results.json'))
for o in d['scaling_one_testbed']:
    import statistics as st
    print(n, r, o['config'], 'one', round(st.median(o['one_mbps'])), 'all', round(st.median(o['all_mbps'])), 'ratio', round(o['geomean'],3), [round(x,3) for x in o['ci95']], 'jain', round(o['jain_median'],3))
PY
  done
done
