#!/bin/bash
# Sixteen fresh streams under adaptive, `--mode relay` and `--mode xen` alternating, R rounds:
# how many flows' minimum RTT (ss, 2 s in) is over 512 us, the port's segments per aggregate,
# the streams' Mbit/s together.
R=${1:-8}
for r in $(seq 1 $R); do for m in relay xen; do
  NOCAP=1 OUT=/tmp/md-$m-$r ./sender-cap.sh 16 $m >/dev/null 2>&1
  python3 - /tmp/md-$m-$r $m <<'PY'
import json,re,sys
o,m=sys.argv[1:]
rtts=[float(x) for x in re.findall(r'minrtt:([\d.]+)',open(f'{o}/ss.txt').read())]
a=json.load(open(f'{o}/stat0.json'))['lro']; b=json.load(open(f'{o}/stat1.json'))['lro']
mb=0
for i in range(16):
    j=json.load(open(f'{o}/s{i}.json')); assert j['receiver']['mismatches']==0 and j['receiver']['bytes']==j['sent']; mb+=j['receiver']['mbps']
print(f"{m:5s} flows over 0.512 ms: {sum(r>0.512 for r in rtts):2d} of {len(rtts)}; segments per aggregate {(b['segments_in']-a['segments_in'])/(b['aggregates_out']-a['aggregates_out']):5.1f}; {mb:5.0f} Mbit/s")
PY
done; done
