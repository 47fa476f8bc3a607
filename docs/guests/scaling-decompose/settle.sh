#!/bin/bash
for r in 1 2; do for v in 0.3 1.5; do
  PVNET_SETTLE=$v /work/main/target/release/pvnet bench --sweep guests --configs adaptive,xen --sweep-values 1,8 --reps 1 --duration 2 --paired-rounds 0 --scaling-rounds 20 --out /tmp/exp/settle-$v-$r > /tmp/exp/settle-$v-$r.log 2>&1
  python3 -c "
import json,statistics as st
d=json.load(open('/tmp/exp/settle-$v-$r/results.json'))
for o in d['scaling_one_testbed']:
    print('settle $v', $r, o['config'], 'one', round(st.median(o['one_mbps'])), 'all', round(st.median(o['all_mbps'])), 'ratio', round(o['geomean'],3), [round(x,3) for x in o['ci95']], 'jain slice med', round(o['jain_median'],3), 'min', round(min(o.get('jain', [0]) or [0]),3) if isinstance(o.get('jain'),list) else '', 'overall', round(o.get('jain_overall',0),3), flush=True)
"
done; done
