#!/bin/bash
# A/B of the data path without a rate: bd4da07 (before the credit) against the new binary,
# alternating, two runs each.
set -e
D=/work/runs/ab-rate
for i in 1 2; do
  for v in old new; do
    if [ $v = old ]; then B=/tmp/oldbd/target/release/pvnet; else B=/work/main/target/release/pvnet; fi
    echo "== $v $i $(date +%T)"
    $B bench --configs xen,adaptive --reps 6 --duration 4 --paired-rounds 0 --out $D/$v-$i > $D/$v-$i.log 2>&1
  done
done
echo "== done $(date +%T)"
