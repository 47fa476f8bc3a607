#!/bin/bash
# N guests, fresh streams; capture the physical port 1 s into them; count PSH per data segment per flow
set -u
P=${PVNET:-pvnet}; ID=a19; N=${1:-16}; MODE=${2:-xen}
$P up --id $ID --guests $N --lro adaptive --mode $MODE >/tmp/c-up.log 2>&1 || { cat /tmp/c-up.log; exit 1; }
for i in $(seq 0 $((N-1))); do (taskset -c 0 $P exec --id $ID g$i $P perf server >/dev/null 2>&1 &); done
sleep 1
$P stat --id $ID --json > /tmp/c-0.json
for i in $(seq 0 $((N-1))); do
  taskset -c 1 $P exec --id $ID remote $P perf stream 10.77.0.$((10+i)) --duration 4 > /tmp/c-s$i.json 2>&1 &
done
sleep 1.5; $P capture --id $ID pnic -w /tmp/c.pcap --duration 1 > /tmp/c-cap.log 2>&1
wait; tail -1 /tmp/c-cap.log
$P stat --id $ID --json > /tmp/c-1.json
$P down --id $ID >/dev/null 2>&1
python3 - <<'PY'
import json,struct,collections
a=json.load(open('/tmp/c-0.json'))['lro']; b=json.load(open('/tmp/c-1.json'))['lro']
segs=b['segments_in']-a['segments_in']; psh=b['flush']['psh']-a['flush'].get('psh',0)
print('lro: segs/psh', round(segs/max(psh,1),1))
f=open('/tmp/c.pcap','rb'); gh=f.read(24)
le = gh[:4] in (b'\xd4\xc3\xb2\xa1', b'\x4d\x3c\xb2\xa1')
n=0; data=collections.Counter(); pshc=collections.Counter(); lens=collections.Counter()
while True:
    h=f.read(16)
    if len(h)<16: break
    ts,tu,incl,orig=struct.unpack('<IIII' if le else '>IIII',h)
    p=f.read(incl); n+=1
    if len(p)<54 or p[12:14]!=b'\x08\x00': continue
    ihl=(p[14]&15)*4; tot=struct.unpack('>H',p[16:18])[0]
    if p[23]!=6: continue
    t=14+ihl; doff=(p[t+12]>>4)*4; fl=p[t+13]
    pay=tot-ihl-doff
    if pay<=0: continue
    key=(p[26:30],p[30:34],p[t:t+4])
    data[key]+=1; lens[pay]+=1
    if fl&8: pshc[key]+=1
print('frames',n,'data segs',sum(data.values()),'psh',sum(pshc.values()),'segs/psh', round(sum(data.values())/max(1,sum(pshc.values())),1))
print('payload sizes', lens.most_common(5))
print('per flow segs/psh', sorted(round(data[k]/max(pshc[k],1),1) for k in data))
PY
