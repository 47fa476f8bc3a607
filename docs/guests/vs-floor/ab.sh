#!/bin/bash
# xen's one-testbed 8 ÷ 1 at --budget 64 and 256, alternating.
cd /work/main
for run in 1 2; do
  for b in 64 256; do
    ./target/release/pvnet bench --sweep guests --configs xen --sweep-values 1,8 --reps 1 --duration 2 --paired-rounds 0 --scaling-rounds 80 --budget $b --out /tmp/sw/ab-$b-$run > /tmp/sw/ab-$b-$run.log 2>&1
    echo "$b $run $(grep -A6 'Against one guest on one testbed' /tmp/sw/ab-$b-$run/report.md | sed -n 7,9p | tr '\n' ' ')"
  done
done
