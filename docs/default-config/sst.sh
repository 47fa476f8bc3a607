#!/bin/bash
# sst.sh ID SECS: per-transaction CPU ns and wakeups (schedstat) of each thread in the run's dd and g0 namespaces + its napi threads
P=${P:-/tmp/rrx/pvnet-base}
id=$1; S=$2
tids() { for r in dd g0; do for p in $(ip netns pids pvnet-$id-$r); do for t in /proc/$p/task/*; do echo ${t##*/}; done; done; done; for t in $(pgrep "^napi/pv${id}p-"); do echo $t; done; }
snap() { for t in $(tids); do echo "$t $(cat /proc/$t/comm | tr ' ' _) $(cat /proc/$t/schedstat)"; done; }
snap > /tmp/rrx/s0.$id
out=$(nice -n -20 taskset -c 1 ip netns exec pvnet-$id-remote $P perf rr 10.77.0.10 --port 5201 --duration $S 2>/dev/null)
snap > /tmp/rrx/s1.$id
python3 - "$id" "$out" <<'PY'
import sys,json
id,out=sys.argv[1],json.loads(sys.argv[2]); n=out["transactions"]
a={l.split()[0]:l.split() for l in open(f"/tmp/rrx/s0.{id}")}
tot=0;totw=0
for l in open(f"/tmp/rrx/s1.{id}"):
    t,c,rt,wt,pc=l.split()
    if t not in a: continue
    drt=(int(rt)-int(a[t][2]))/n; dpc=(int(pc)-int(a[t][4]))/n; dwt=(int(wt)-int(a[t][3]))/n
    if dpc>0.01: print(f"  {id} tid {t:>6} {c:24s} run {drt:8.0f} ns/tr  waitq {dwt:8.0f} ns/tr  slices {dpc:5.2f}/tr"); tot+=drt; totw+=dpc
print(f"{id}: tps {out['tps']:.0f} p50 {out['p50_us']} us; threads' CPU {tot:.0f} ns/tr, {totw:.2f} slices/tr")
PY
