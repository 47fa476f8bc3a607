import sys,json,statistics as st,collections,math
name={"1":"xen","2":"adaptive","3":"port-gro","4":"port-gro+adaptive","5":"port-gro, NAPI not threaded (diagnostic)"}
rows=[]
for l in open(sys.argv[1]):
    p=l.split(" ",4)
    if len(p)<5 or not p[4].strip().startswith("{"): continue
    d=json.loads(p[4]); rows.append((int(p[0]),p[1],float(p[3]),d))
loads=[r[2] for r in rows]
print(f"{len(rows)} RR slices; load average {min(loads)}-{max(loads)} (median {st.median(loads)})")
by=collections.defaultdict(dict)
for r,i,ld,d in rows: by[r][i]=d
out=[]
for v in "12345":
    tps=[];p50=[];rat=[];p50d=[]
    for r,m in by.items():
        for tb in "bc":
            i=tb+v; x=tb+"1"
            if i in m:
                tps.append(m[i]["tps"]); p50.append(m[i]["p50_us"])
                if x in m: rat.append(m[i]["tps"]/m[x]["tps"]); p50d.append(m[i]["p50_us"]-m[x]["p50_us"])
    q=st.quantiles(rat,n=4)
    gm=math.exp(st.mean(math.log(x) for x in rat))
    print(f"| {name[v]} | {len(tps)} | {st.median(tps):.0f} | {min(tps):.0f}–{max(tps):.0f} | {st.median(rat):.3f} | {q[0]:.3f}–{q[2]:.3f} | {gm:.3f} | {st.median(p50):.1f} | {st.median(p50d):+.1f} |")
