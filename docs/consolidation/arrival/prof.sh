#!/bin/bash
N=$1; id=$2; out=$3
P=/work/main/target/release/pvnet
$P up --id $id ${MODE:+--mode $MODE} --lro ${LRO:-off} --guests $N --sender-cpu 1 > /dev/null 2>&1 || exit 1
for i in $(seq 0 $((N-1))); do
  (taskset -c 0 $P exec --id $id g$i $P perf server --once --bind 0.0.0.0:$((5201+i)) > /dev/null 2>&1 &)
done
sleep 1
for i in $(seq 0 $((N-1))); do
  (taskset -c 1 $P exec --id $id remote $P perf stream 10.77.0.$((10+i)) --port $((5201+i)) --duration 9 > $out.s$i.json 2>&1 &)
done
sleep 3
perf record $PERFG -e cpu-clock -C 0 -F 2999 -o $out.data -- sleep 5 2> /dev/null
sleep 3
$P down --id $id > /dev/null 2>&1
python3 -c "
import json
t=0
for i in range($N):
    d=json.load(open('$out.s%d.json'%i)); t+=d['receiver']['mbps'] if 'receiver' in d else d.get('mbps',0)
print('aggregate Mbit/s', round(t))"
