#!/bin/bash
P=/work/main/target/release/pvnet
cd /work/runs/s30/gap
for r in 1 2; do
  for g in 50 1000; do
    mkdir -p g$g-$r
    (cd g$g-$r && PVNET_EXP_STREAM_GAP=$g $P bench --sweep guests --configs adaptive --sweep-values 1,8 --reps 3 --paired-rounds 0 --out . > bench.log 2>&1)
  done
done
touch done
