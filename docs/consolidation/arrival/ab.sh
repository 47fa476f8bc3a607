#!/bin/bash
# A/B of netfront budget: N guests, xen, sender work on CPU 1; prints aggregate, in flight, rtt
N=$1; id=$2; out=$3
P=${PV:-/work/main/target/release/pvnet}
$P up --id $id --lro ${LRO:-off} --guests $N --sender-cpu 1 > /dev/null 2>&1 || exit 1
if [ -n "$DDFIFO" ]; then for p in $(pgrep -f "daemon --config"); do chrt -f -p 1 $p; done; fi
for i in $(seq 0 $((N-1))); do
  (taskset -c 0 $P exec --id $id g$i $P perf server --once --bind 0.0.0.0:$((5201+i)) > /dev/null 2>&1 &)
done
sleep 1
for i in $(seq 0 $((N-1))); do
  (taskset -c 1 $P exec --id $id remote $P perf stream 10.77.0.$((10+i)) --port $((5201+i)) --duration 6 > $out.s$i.json 2>&1 &)
done
sleep 4
$P stat --id $id --json > $out.stat.json 2>/dev/null
sleep 4
$P down --id $id > /dev/null 2>&1
python3 - $out $N "$TAG" <<'PY'
import json,sys
out,N,tag=sys.argv[1],int(sys.argv[2]),sys.argv[3]
t=0;fl=0;rtt=[];per=[]
for i in range(N):
    d=json.load(open(out+'.s%d.json'%i)); t+=d['receiver']['mbps']; per.append(d['receiver']['mbps'])
    fl+=d['sender']['in_flight_bytes']; rtt.append(d['sender']['rtt_us'])
rtt.sort()
jain=sum(per)**2/(N*sum(x*x for x in per))
st=json.load(open(out+".stat.json"))
l=st.get("lro") or {}
print(json.dumps({k:l.get(k) for k in ("segments_in","aggregates_out","flushes") if k in l})[:300], st["daemon"].get("lro_timer_deferred"))
print(f"{tag:10} N={N} agg={t:.0f} jain={jain:.3f} inflight={fl/1024:.0f}KiB rtt_med={rtt[N//2]/1000:.1f}ms")
PY
