#!/bin/bash
# observe where in-flight data sits: N guests, xen, everything guest-side on CPU 0
N=$1; id=$2; out=$3; LRO=${LRO:-off}
P=/work/main/target/release/pvnet
$P up --id $id --lro $LRO --guests $N > $out.up 2>&1 || { cat $out.up; exit 1; }
if [ -n "$DDNICE" ]; then renice -n $DDNICE -p $(pgrep -f "daemon --config ..id.:.$id") ; fi
for i in $(seq 0 $((N-1))); do
  (taskset -c 0 $P exec --id $id g$i $P perf server --once --bind 0.0.0.0:$((5201+i)) > /dev/null 2>&1 &)
done
sleep 1
for i in $(seq 0 $((N-1))); do
  (taskset -c 1 $P exec --id $id remote $P perf stream 10.77.0.$((10+i)) --port $((5201+i)) --duration 8 > $out.s$i.json 2>&1 &)
done
sleep 3
for k in 1 2 3; do
  echo "== sample $k" >> $out.ss
  $P exec --id $id remote ss -tin state established >> $out.ss 2>&1
  for i in $(seq 0 $((N-1))); do $P exec --id $id g$i ss -tnm state established >> $out.ss 2>&1; done
  $P stat --id $id > $out.stat$k.json 2>&1
  sleep 1
done
sleep 5
$P down --id $id > /dev/null 2>&1
python3 -c "
import json
t=0
for i in range($N):
    try: d=json.load(open('$out.s%d.json'%i)); t+=d['receiver']['mbps'] if 'receiver' in d else d.get('mbps',0)
    except Exception as e: print('err',i,e)
print('aggregate Mbit/s', round(t))"
