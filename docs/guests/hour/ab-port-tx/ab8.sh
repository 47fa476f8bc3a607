#!/bin/bash
# The RX path at eight guests, old (101b03d) against new (9b4f186) in turns: does the port-TX change move xen's 8 ÷ 1?
OLD=/work/target-old/release/pvnet; NEW=/work/main/target/release/pvnet
D=/work/runs/ab8; mkdir -p $D
i=0
for v in new old new old; do
  i=$((i+1)); B=$([ $v = old ] && echo $OLD || echo $NEW)
  echo "$(date +%T) $i $v"
  $B bench --sweep guests --configs xen,relay --sweep-values 1,8 --reps 2 --duration 3 --paired-rounds 0 --scaling-rounds 40 --scaling-testbeds 8 --out $D/$i-$v > $D/$i-$v.log 2>&1
done
echo "$(date +%T) done"
