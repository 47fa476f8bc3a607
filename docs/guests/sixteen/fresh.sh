#!/bin/bash
# N guests under one LRO policy; N fresh verified streams at once from the remote host (as the
# bench's fresh testbeds run them), the driver domain's LRO counters before and after.
# Usage: fresh.sh [POLICY=adaptive] [N=16] [SECONDS=4] [MODE=xen|relay]
# Env: WMEM="min default max" sets the remote host's net.ipv4.tcp_wmem first;
#      SS=1 samples `ss -tin` in the remote host 2 s into the streams (/tmp/f-ss.txt).
set -u
P=${PVNET:-pvnet}; ID=a17; POL=${1:-adaptive}; N=${2:-16}; D=${3:-4}; MODE=${4:-xen}
$P up --id $ID --guests $N --lro $POL --mode $MODE >/tmp/f-up.log 2>&1 || { cat /tmp/f-up.log; exit 1; }
for i in $(seq 0 $((N-1))); do (taskset -c 0 $P exec --id $ID g$i $P perf server >/dev/null 2>&1 &); done
sleep 1
[ -n "${WMEM:-}" ] && $P exec --id $ID remote sysctl -w net.ipv4.tcp_wmem="$WMEM"
$P stat --id $ID --json > /tmp/f-0.json
for i in $(seq 0 $((N-1))); do
  taskset -c 1 $P exec --id $ID remote $P perf stream 10.77.0.$((10+i)) --duration $D > /tmp/f-s$i.json 2>&1 &
done
[ -n "${SS:-}" ] && { sleep 2; $P exec --id $ID remote ss -tin > /tmp/f-ss.txt; }
wait
$P stat --id $ID --json > /tmp/f-1.json
$P down --id $ID >/dev/null 2>&1
python3 - $N <<'PY'
import json,sys
n=int(sys.argv[1])
a=json.load(open('/tmp/f-0.json'))['lro']; b=json.load(open('/tmp/f-1.json'))['lro']
segs=b['segments_in']-a['segments_in']; aggs=b['aggregates_out']-a['aggregates_out']
fl={r:b['flush'][r]-a['flush'].get(r,0) for r in b['flush'] if b['flush'][r]-a['flush'].get(r,0)}
tot=0
for i in range(n):
    j=json.loads(open(f'/tmp/f-s{i}.json').read())
    assert j['receiver']['mismatches']==0 and j['receiver']['bytes']==j['sent'], j
    tot+=j['receiver']['mbps']
print('guests',n,'segs/agg',round(segs/max(aggs,1),1),'flush',fl,'sum mbps',round(tot))
PY
