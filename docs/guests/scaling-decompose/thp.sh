#!/bin/bash
set -u
R=${1:-2}; C=${2:-xen}
BIN=/work/main/target/release/pvnet
for r in $(seq 1 $R); do
  for mode in never always; do
    echo $mode > /sys/kernel/mm/transparent_hugepage/shmem_enabled
    $BIN bench --sweep guests --configs $C --sweep-values 1,8 --reps 1 --duration 2 --paired-rounds 0 --scaling-rounds 40 --out /tmp/exp/thp-$mode-$r > /tmp/exp/thp-$mode-$r.log 2>&1
    grep -h ShmemHugePages /proc/meminfo
    python3 - "$mode" "$r" <<'PY'
import json,sys
n,r=sys.argv[1],sys.argv[2]
d=json.load(open(f'/tmp/exp/thp-{n}-{r}/results.json'))
import statistics as st
for o in d['scaling_one_testbed']:
    print(n, r, o['config'], 'one', round(st.median(o['one_mbps'])), 'all', round(st.median(o['all_mbps'])), 'ratio', round(o['geomean'],3), [round(x,3) for x in o['ci95']])
PY
  done
done
echo never > /sys/kernel/mm/transparent_hugepage/shmem_enabled
