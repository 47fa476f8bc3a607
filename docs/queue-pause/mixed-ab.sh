#!/bin/sh
# Usage: OLD=... NEW=... mixed-ab.sh PAIRS OUTDIR
# The mixed host across the per-queue gate: `bench --scenario mixed` with each build in turn,
# the order alternating each pair.
set -e
pairs=$1; out=$2; mkdir -p "$out"
i=0
while [ $i -lt "$pairs" ]; do
  if [ $((i % 2)) -eq 0 ]; then order="old new"; else order="new old"; fi
  for tag in $order; do
    if [ $tag = old ]; then B=$OLD; else B=$NEW; fi
    "$B" bench --scenario mixed --configs xen,lro,adaptive --reps 3 --out "$out/$tag-$i" > "$out/$tag-$i.log" 2>&1
  done
  i=$((i + 1))
done
