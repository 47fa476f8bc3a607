#!/bin/bash
# N guests, fresh streams under adaptive; tcp:tcp_sendmsg_locked in the remote host's senders for
# the whole of the streams (4 s). A sendmsg that waits for send-buffer space (and pushes, setting PSH, before it
# sleeps) shows as two consecutive events of one sender with the same msg_left: nothing was
# copied between them. Counted against the writes, and the driver domain's segments per PSH.
# Usage: waits.sh [N=16] [MODE=xen]
set -u
P=${PVNET:-pvnet}; ID=a1a; N=${1:-16}; MODE=${2:-xen}; D=4; O=${OUT:-/tmp/pw}
T=/sys/kernel/tracing
mkdir -p $O
mountpoint -q $T || mount -t tracefs nodev $T
$P up --id $ID --guests $N --lro adaptive --mode $MODE >$O/up.log 2>&1 || { cat $O/up.log; exit 1; }
for i in $(seq 0 $((N-1))); do (taskset -c 0 $P exec --id $ID g$i $P perf server >/dev/null 2>&1 &); done
sleep 1
echo 0 > $T/tracing_on; echo > $T/trace; echo 32768 > $T/buffer_size_kb
echo 1 > $T/events/tcp/tcp_sendmsg_locked/enable
$P stat --id $ID --json > $O/stat0.json
echo 1 > $T/tracing_on
for i in $(seq 0 $((N-1))); do
  taskset -c 1 $P exec --id $ID remote $P perf stream 10.77.0.$((10+i)) --duration $D > $O/s$i.json 2>&1 &
done
sleep 2; $P exec --id $ID remote ss -tmi state established > $O/ss.txt
wait
echo 0 > $T/tracing_on
$P stat --id $ID --json > $O/stat1.json
echo 0 > $T/events/tcp/tcp_sendmsg_locked/enable
cat $T/trace > $O/trace.txt; echo > $T/trace; echo 1408 > $T/buffer_size_kb
$P down --id $ID >/dev/null 2>&1
python3 - $O $N <<'PY'
import json,re,sys,collections
o,n=sys.argv[1],int(sys.argv[2])
a=json.load(open(f'{o}/stat0.json'))['lro']; b=json.load(open(f'{o}/stat1.json'))['lro']
segs=b['segments_in']-a['segments_in']; psh=b['flush']['psh']-a['flush'].get('psh',0)
mb=sum(json.load(open(f'{o}/s{i}.json'))['receiver']['mbps'] for i in range(n))
ev=collections.defaultdict(list)
pat=re.compile(r'-(\d+)\s+\[\d+\].*?\s([\d.]+): tcp_sendmsg_locked: skb_addr (\S+) skb_len (\d+) msg_left (\d+) size_goal (\d+)')
for l in open(f'{o}/trace.txt'):
    m=pat.search(l)
    if m: ev[int(m[1])].append((float(m[2]),m[3],int(m[4]),int(m[5]),int(m[6])))
t0=min(es[0][0] for es in ev.values())
bw=collections.Counter(); bs=collections.Counter()
writes=waits=0; gaps=[]
for pid,es in ev.items():
    for p,q in zip(es,es[1:]):
        sec=int(q[0]-t0)
        if q[3]==65536: writes+=1; bs[sec]+=1
        if q[3]==p[3] and q[3]!=0 and q[3]!=65536:
            waits+=1; gaps.append(q[0]-p[0]); bw[sec]+=1
gaps.sort()
print(f'guests {n} {mb:.0f} Mbit/s; senders {len(ev)}; writes {writes}; waits for space {waits} '
      f'({waits/max(writes,1):.2f} per write; median wait {1e6*gaps[len(gaps)//2] if gaps else 0:.0f} us); '
      f'port: {segs/max(psh,1):.1f} segments per PSH = {65536/1448/(segs/max(psh,1)):.2f} PSH per 64 KiB write')
print('  per second of the streams, waits per write:', ' '.join(f'{s}:{bw[s]}/{bs[s]}' for s in sorted(bs)))
PY
