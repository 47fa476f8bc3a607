#!/usr/bin/env bash
# One line per run of run.sh (in the directory given, default this one): the standing
# testbeds' one guest and all eight, 8 / 1 with its interval, the senders' bytes in flight and
# RTT; the fresh testbeds' throughput and bytes in flight (BBR senders there: no ECN).
cd "${1:-$(dirname "$0")}"
for d in off-1 512-1 2048-1 off-2 512-2 2048-2; do
  r=$d/report.md
  [ -f $r ] || continue
  one=$(grep "| one guest (Mbit/s), median" $r | tail -1 | awk -F'|' '{print $3}')
  all=$(grep "| all guests (Mbit/s), median" $r | awk -F'|' '{print $3}')
  gm=$(grep "| ÷ one guest, geometric mean" $r | awk -F'|' '{print $3}')
  ci=$(grep "| 95 % confidence interval" $r | tail -1 | awk -F'|' '{print $3}')
  inf=$(grep "senders' bytes in flight, one guest" $r | awk -F'|' '{print $3}')
  rtt=$(grep "senders' smoothed RTT, one guest" $r | awk -F'|' '{print $3}')
  thr=$(grep -m1 "^| throughput (Mbit/s)" $r | awk -F'|' '{print $3"/"$4}')
  fin=$(grep -m1 "bytes in flight at the senders" $r | awk -F'|' '{print $3"/"$4}')
  echo "$d | standing 1:$one all:$all 8/1:$gm [$ci] inflight KiB:$inf rtt us:$rtt | fresh 1/8 Mbit/s:$thr inflight KiB:$fin"
done
