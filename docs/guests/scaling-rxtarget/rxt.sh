#!/bin/bash
# Exploratory: netfront keeping at most PVNET_RX_TARGET RX buffers posted (uncommitted hack),
# 64 against 256, interleaved, one-testbed 8 ÷ 1 and fresh 1- and 8-guest medians.
for r in 1 2; do
  for t in 256 64; do
    PVNET_RX_TARGET=$t /tmp/exp/pvnet-rxt bench --sweep guests --configs xen --sweep-values 1,8 --reps 2 --duration 3 --paired-rounds 0 --scaling-rounds 40 --out /tmp/exp/rxt-$t-$r > /tmp/exp/rxt-$t-$r.log 2>&1
    python3 - $t $r <<'PY'
import json,sys,statistics as st
t,r=sys.argv[1],sys.argv[2]
d=json.load(open(f'/tmp/exp/rxt-{t}-{r}/results.json'))
o=d['scaling_one_testbed'][0]
fresh={}
for s in d['samples']:
    if not s['warmup']: fresh.setdefault(s['config'],[]).append(round(s['throughput_mbps']))
print('target',t,'round',r,'one-testbed: one',round(st.median(o['one_mbps'])),'all',round(st.median(o['all_mbps'])),'ratio',round(o['geomean'],3),[round(x,3) for x in o['ci95']],'| fresh',fresh)
PY
  done
done
