#!/bin/bash
# A/B: PVNET_EXP_PSH_MERGE=1 against 0, same binary, alternating
# Needs psh-merge.patch applied and built (git apply docs/guests/sixteen/psh-merge/psh-merge.patch; cargo build --release).
cd "$(dirname "$0")/../../../.."
for r in 1 2; do
  for v in 1 0; do
    PVNET_EXP_PSH_MERGE=$v ./target/release/pvnet bench --sweep guests --configs adaptive,relay-adaptive --sweep-values 1,8 --reps 3 --duration 4 --paired-rounds 0 --scaling-rounds 40 --scaling-testbeds 8 --out docs/guests/sixteen/psh-merge/psh-r$r-m$v > docs/guests/sixteen/psh-merge/psh-r$r-m$v.log 2>&1
  done
done

