import sys,subprocess,re,collections
data,ps,scale=sys.argv[1],sys.argv[2],float(sys.argv[3])
role={}
for l in open(ps):
    f=l.split(None,1)
    if len(f)<2: continue
    pid,a=f
    if 'daemon' in a: role[pid]='daemon'
    elif 'guest-run' in a: role[pid]='netfront'
    elif 'perf server' in a: role[pid]='receiver'
out=subprocess.run(['perf','script','-i',data,'-F','pid,tid,ip,sym'],capture_output=True,text=True).stdout
agg=collections.Counter(); tot=collections.Counter(); n=0
for l in out.splitlines():
    f=l.split()
    if len(f)<2: continue
    pid=f[0].split('/')[0]; sym=' '.join(f[2:]) if len(f)>2 else '?'
    r=role.get(pid,'idle' if pid=='0' else 'other')
    agg[(r,sym)]+=1; tot[r]+=1; n+=1
for r,v in sorted(tot.items(),key=lambda x:-x[1]): print(f'{r:10s} {100*v/n*scale:6.1f}')
print()
for (r,s),v in agg.most_common(int(sys.argv[4])): print(f'{r:9s} {100*v/n*scale:5.2f} {s[:40]}')
