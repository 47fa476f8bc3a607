#!/bin/bash
# usage: prof2.sh ID OUT  (xen, 8 guests on one testbed; phase one: guest 0 streams; phase all: 8 stream)
# environment: MODE (up --mode), LRO (default off), BUDGET (up --budget, default its own), RING (up --ring-frames), PF (up --ring-prefetch), PERFG=-g for call graphs
id=$1; out=$2; N=8
P=/work/main/target/release/pvnet
$P up --id $id ${MODE:+--mode $MODE} --lro ${LRO:-off} ${BUDGET:+--budget $BUDGET} ${RING:+--ring-frames $RING} ${PF:+--ring-prefetch $PF} --guests $N --sender-cpu 1 > $out.up.log 2>&1 || { cat $out.up.log; exit 1; }
for i in $(seq 0 $((N-1))); do
  taskset -c 0 $P exec --id $id g$i $P perf server --bind 0.0.0.0:$((5201+i)) > /dev/null 2>&1 &
  spid=$!
  sleep 0.2
  for p in $(pgrep -P $spid) $spid; do
    g=$(ls -d /sys/fs/cgroup/cpu/pvnet-*$id*/guest$i 2>/dev/null | head -1)
    [ -n "$g" ] && for t in $(ls /proc/$p/task); do echo $t > $g/tasks 2>/dev/null; done
  done
done
sleep 1
ps -eo pid,args > $out.ps
run_phase() {
  ph=$1; shift
  for i in "$@"; do
    (taskset -c 1 $P exec --id $id remote $P perf stream 10.77.0.$((10+i)) --port $((5201+i)) --duration 9 > $out.$ph.s$i.json 2>&1 &)
  done
  sleep 3
  $P stat --id $id --json > $out.$ph.stat0.json 2>/dev/null
  perf record $PERFG -e cpu-clock -C 0 -F 2999 -o $out.$ph.data -- sleep 4 2> /dev/null
  $P stat --id $id --json > $out.$ph.stat1.json 2>/dev/null
  sleep 3.5
  python3 - $out $ph "$@" <<'PY'
import json,sys
out,ph=sys.argv[1],sys.argv[2]
t=0
for i in sys.argv[3:]:
    d=json.load(open(f'{out}.{ph}.s{i}.json')); t+=d['receiver']['mbps'] if 'receiver' in d else d.get('mbps',0)
print(ph,'aggregate Mbit/s', round(t))
PY
}
run_phase one 0
run_phase all 0 1 2 3 4 5 6 7
$P down --id $id > /dev/null 2>&1
