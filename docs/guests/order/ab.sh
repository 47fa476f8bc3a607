#!/bin/sh
# xen's standing-testbed 8 ÷ 1 with its testbeds back to back (xen alone) and taking turns
# with linux's (linux,xen), alternating, twice.
set -e
B=target/release/pvnet  # run from the repository
for i in 1 2; do
  $B bench --sweep guests --configs xen --sweep-values 1,8 --reps 1 --duration 2 --paired-rounds 0 --scaling-rounds 80 --scaling-testbeds 16 --out docs/guests/order/alone-$i > docs/guests/order/alone-$i.log 2>&1
  $B bench --sweep guests --configs linux,xen --sweep-values 1,8 --reps 1 --duration 2 --paired-rounds 0 --scaling-rounds 80 --scaling-testbeds 16 --out docs/guests/order/turns-$i > docs/guests/order/turns-$i.log 2>&1
done
