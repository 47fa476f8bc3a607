#!/bin/bash
P=${P:-/tmp/rrx/pvnet-base}
R=$1; S=$2; shift 2; ids=("$@")
for r in $(seq 1 $R); do
  if (( r % 2 )); then order=("${ids[@]}"); else order=(); for ((i=${#ids[@]}-1;i>=0;i--)); do order+=("${ids[$i]}"); done; fi
  for id in "${order[@]}"; do
    out=$(nice -n -20 taskset -c 1 ip netns exec pvnet-$id-remote $P perf rr 10.77.0.10 --port 5201 --duration $S 2>/dev/null)
    echo "$r $id $(date +%s) $(cat /proc/loadavg | cut -d' ' -f1) $out"
  done
done
