#!/bin/bash
# Ring cost with 64 KiB frames: native linux-gro stream, with no reader / a V2 / a V3 ring reader on the port.
P=/work/wt/portgro/target/release/pvnet; R=/work/wt/portgro/target/release/examples/ringcost; I=$1; ROUNDS=${2:-2}
$P up --id $I --mode linux --port-gro --sender-cpu 1 >/dev/null || exit 1
IF=pv${I}p
busy() { awk '/^cpu0 /{print $2+$3+$4+$7+$8+$9, $8}' /proc/stat; }
ip netns exec pvnet-$I-dd taskset -c 0 $P perf server >/dev/null 2>&1 &
SRV=$!
sleep 1
for r in $(seq $ROUNDS); do for mode in none v2 v3; do
  if [ $mode != none ]; then ip netns exec pvnet-$I-dd taskset -c 0 $R $IF $mode 5 > /tmp/rc-$mode.json & RP=$!; sleep 0.3; fi
  read b0 s0 < <(busy)
  OUT=$(ip netns exec pvnet-$I-remote taskset -c 1 $P perf stream 10.77.0.2 --duration 4 | tail -1)
  read b1 s1 < <(busy)
  [ $mode != none ] && wait $RP
  BYTES=$(echo "$OUT" | python3 -c 'import json,sys; print(json.load(sys.stdin)["receiver"]["bytes"])')
  echo "$mode bytes=$BYTES cpu0_busy_ticks=$((b1-b0)) softirq_ticks=$((s1-s0)) ns_per_byte=$(python3 -c "print(round(($b1-$b0)*1e7/$BYTES,3))") reader=$( [ $mode != none ] && cat /tmp/rc-$mode.json)"
done; done
kill $SRV 2>/dev/null
$P down --id $I >/dev/null
