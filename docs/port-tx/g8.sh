#!/bin/bash
# Eight guests sending out at once: before (101b03d) and after (29f9e01) the port's back-pressure, in turns.
OLD=/work/target-old/release/pvnet; NEW=/work/main/target/release/pvnet
D=/work/runs/txsweep
mkdir -p $D
for v in old new old new; do
  B=$([ $v = old ] && echo $OLD || echo $NEW)
  n=$(ls -d $D/$v-* 2>/dev/null | wc -l); n=$((n+1))
  echo "$(date +%T) $v $n"
  $B bench --sweep guests --direction tx --configs linux,xen,adaptive --sweep-values 1,8 --reps 4 --duration 4 --paired-rounds 0 --scaling-rounds 0 --out $D/$v-$n > $D/$v-$n.log 2>&1
done
echo "$(date +%T) done"
