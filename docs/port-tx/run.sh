#!/bin/bash
# Old (101b03d: drops refused frames, default send buffer) against new (45b8846) in turns.
cd /work/main
OLD=/work/target-old/release/pvnet; NEW=/work/main/target/release/pvnet
D=/work/runs/porttx
for r in 1 2; do
  for v in old new; do
    B=$([ $v = old ] && echo $OLD || echo $NEW)
    echo "$(date +%T) tx $v $r"
    $B bench --configs linux@tx,xen@tx,adaptive@tx --reps 4 --duration 4 --paired-rounds 0 --out $D/tx-$v-$r > $D/tx-$v-$r.log 2>&1
  done
done
for v in old new; do
  B=$([ $v = old ] && echo $OLD || echo $NEW)
  echo "$(date +%T) restart $v"
  $B bench --scenario restart --reps 2 --out $D/restart-$v > $D/restart-$v.log 2>&1
done
echo "$(date +%T) done"
