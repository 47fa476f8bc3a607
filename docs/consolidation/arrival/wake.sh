#!/bin/bash
# per-process CPU and context switches over 3 s mid-stream: N guests, xen (LRO off)
N=$1; id=$2; out=$3; LRO=${LRO:-off}
P=/work/main/target/release/pvnet
$P up --id $id --lro $LRO --guests $N $UPARGS > $out.up 2>&1 || { cat $out.up; exit 1; }
for i in $(seq 0 $((N-1))); do
  (taskset -c 0 $P exec --id $id g$i $P perf server --once --bind 0.0.0.0:$((5201+i)) > /dev/null 2>&1 &)
done
sleep 1
for i in $(seq 0 $((N-1))); do
  (taskset -c 1 $P exec --id $id remote $P perf stream 10.77.0.$((10+i)) --port $((5201+i)) --duration 8 > $out.s$i.json 2>&1 &)
done
sleep 3
snap() { for p in $(pgrep -f "pvnet"); do
  c=$(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null | cut -c1-60)
  st=$(cat /proc/$p/stat 2>/dev/null | awk '{print $14+$15}')
  v=$(grep -E '^(voluntary|nonvoluntary)_ctxt' /proc/$p/status 2>/dev/null | awk '{print $2}' | tr '\n' ' ')
  ss=$(cat /proc/$p/schedstat 2>/dev/null)
  echo "$p|$c|$st|$v|$ss"; done; }
snap > $out.snap1; cat /proc/stat | head -3 > $out.cpu1
$P stat --id $id --json > $out.stat1.json 2>/dev/null
sleep 3
snap > $out.snap2; cat /proc/stat | head -3 > $out.cpu2
$P stat --id $id --json > $out.stat2.json 2>/dev/null
sleep 4
$P down --id $id > /dev/null 2>&1
python3 - $out $N <<'PY'
import json,sys
out,N=sys.argv[1],int(sys.argv[2])
def load(f):
    d={}
    for l in open(f):
        p=l.rstrip('\n').split('|')
        if len(p)<5 or not p[3].strip(): continue
        v=p[3].split(); s=p[4].split()
        d[p[0]]=(p[1],int(p[2]),int(v[0]),int(v[1]),int(s[0]),int(s[1]),int(s[2]))
    return d
a,b=load(out+'.snap1'),load(out+'.snap2')
t=0
for i in range(N):
    try: d=json.load(open(out+'.s%d.json'%i)); t+=d['receiver']['mbps'] if 'receiver' in d else d.get('mbps',0)
    except Exception as e: pass
print('aggregate Mbit/s', round(t))
groups={}
for p in b:
    if p not in a: continue
    c=b[p][0]
    k='daemon' if 'daemon' in c else 'guest' if ' guest' in c else 'server' if 'server' in c else 'stream' if 'stream' in c else c[:30]
    g=groups.setdefault(k,[0]*6)
    for j,x in enumerate((b[p][4]-a[p][4], b[p][5]-a[p][5], b[p][2]-a[p][2], b[p][3]-a[p][3], b[p][6]-a[p][6],1)):
        g[j]+=x
for k,g in groups.items():
    print(f"{k:8} n={g[5]} run={g[0]/1e6:.0f}ms wait={g[1]/1e6:.0f}ms vol={g[2]} invol={g[3]} slices={g[4]} run/slice={g[0]/max(g[4],1)/1e3:.1f}us")
PY
python3 -c "import json;d=json.load(open(\"$out.stat2.json\"));p=d[\"pnic\"];print(\"ring\",p[\"ring_frames\"],\"kernel_drops\",p[\"kernel_drops\"])"
