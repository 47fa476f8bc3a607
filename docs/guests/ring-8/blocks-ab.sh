#!/bin/bash
# block-size A/B: PVNET_EXP_BLOCK_KIB=2048 against the default geometry, alternating
for r in 1 2; do
  for v in 2048 off; do
    n=${OUT:-/tmp/blk}/ab-$v-$r
    if [ $v = off ]; then E=""; else E="PVNET_EXP_BLOCK_KIB=$v"; fi
    env $E /work/main/target/release/pvnet bench --sweep guests --configs xen,adaptive --sweep-values 1,8 --reps 1 --duration 2 --paired-rounds 0 --scaling-rounds 40 --out $n > $n.log 2>&1
    python3 - $n $v $r <<'PY'
import json,sys,statistics as st
n,v,r=sys.argv[1:4]
d=json.load(open(f'{n}/results.json'))
rf={s['config']:(s['stat']['pnic']['ring_frames'],s['port_drops']) for s in d['samples']}
for o in d['scaling_one_testbed']:
    print(v, r, o['config'], round(o['geomean'],3), [round(x,3) for x in o['ci95']], round(st.median(o['one_mbps'])), round(st.median(o['all_mbps'])), 'fresh g8 ring,drops', rf.get(o['config']), flush=True)
PY
  done
done
