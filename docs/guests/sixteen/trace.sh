#!/bin/bash
# 16 (or N) guests, fresh streams; trace tcp:tcp_sendmsg_locked for 1 s in the middle and the LRO flush counters
set -u
P=${PVNET:-pvnet}; ID=a18; N=${1:-16}; MODE=${2:-xen}
T=/sys/kernel/tracing
$P up --id $ID --guests $N --lro adaptive --mode $MODE >/tmp/t-up.log 2>&1 || { cat /tmp/t-up.log; exit 1; }
for i in $(seq 0 $((N-1))); do (taskset -c 0 $P exec --id $ID g$i $P perf server >/dev/null 2>&1 &); done
sleep 1
echo 0 > $T/tracing_on; echo > $T/trace; echo 16384 > $T/buffer_size_kb
echo 1 > $T/events/tcp/tcp_sendmsg_locked/enable
$P stat --id $ID --json > /tmp/t-0.json
for i in $(seq 0 $((N-1))); do
  taskset -c 1 $P exec --id $ID remote $P perf stream 10.77.0.$((10+i)) --duration 4 > /tmp/t-s$i.json 2>&1 &
done
sleep 2; echo 1 > $T/tracing_on; sleep 1; echo 0 > $T/tracing_on
wait
$P stat --id $ID --json > /tmp/t-1.json
echo 0 > $T/events/tcp/tcp_sendmsg_locked/enable
cat $T/trace > /tmp/t-trace.txt; echo > $T/trace
$P down --id $ID >/dev/null 2>&1
python3 - <<'PY'
import json
a=json.load(open('/tmp/t-0.json'))['lro']; b=json.load(open('/tmp/t-1.json'))['lro']
segs=b['segments_in']-a['segments_in']; psh=b['flush']['psh']-a['flush'].get('psh',0)
print('segs/psh', round(segs/max(psh,1),1))
PY
