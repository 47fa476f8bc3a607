#!/bin/bash
# A/B: the remote host's tcp_tso_rtt_log at its default (9) and at 12, N guests under adaptive,
# (Env POL: the LRO policy, default adaptive; off for `xen`) fresh 4 s streams, alternating; sum of the guests' Mbit/s and the port's segments per aggregate.
N=${1:-16}; R=${2:-3}
for r in $(seq 1 $R); do for L in 9 12; do
  NOCAP=1 RTTLOG=$L OUT=/tmp/ab-$L-$r ./sender-cap.sh $N xen >/dev/null 2>&1
  python3 - /tmp/ab-$L-$r $N $L <<'PY'
import json,sys
o,n,l=sys.argv[1],int(sys.argv[2]),sys.argv[3]
a=json.load(open(f'{o}/stat0.json'))['lro']; b=json.load(open(f'{o}/stat1.json'))['lro']
segs=aggs=psh=0
if a and b:
    segs=b['segments_in']-a['segments_in']; aggs=b['aggregates_out']-a['aggregates_out']; psh=b['flush']['psh']-a['flush'].get('psh',0)
mb=0
for i in range(n):
    j=json.load(open(f'{o}/s{i}.json')); assert j['receiver']['mismatches']==0 and j['receiver']['bytes']==j['sent']; mb+=j['receiver']['mbps']
print(f'rtt_log {l}: {mb:.0f} Mbit/s; ' + (f'{segs/aggs:.1f} segments per aggregate, {100*psh/aggs:.0f} % ended by PSH' if aggs else 'no aggregation'))
PY
done; done
