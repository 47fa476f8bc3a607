#!/bin/bash
P=/work/main/target/release/pvnet
cd /work/runs/s30/sched
for r in 1 2; do
  mkdir -p batch$r other$r
  (cd batch$r && $P bench --sweep guests --configs xen,adaptive --sweep-values 1,8 --reps 3 --paired-rounds 0 --out . > bench.log 2>&1)
  (cd other$r && PVNET_EXP_NOBATCH=1 $P bench --sweep guests --configs xen,adaptive --sweep-values 1,8 --reps 3 --paired-rounds 0 --out . > bench.log 2>&1)
done
touch done
