#!/bin/bash
# usage: q-ab.sh ROUNDS CONFIGS -- per round: 4c6b98f at --ring-prefetch 0, 4c6b98f at 4, and the
# build that also loads the status word the kernel reads a quarter of the ring ahead (q) at 4
set -u
for r in $(seq 1 $1); do
  BIN=/tmp/exp/pvnet-4c6b98f TAG=o$r ./rp-ab.sh 1 $2 0 4
  BIN=/tmp/exp/pvnet-q TAG=q$r ./rp-ab.sh 1 $2 4
done
