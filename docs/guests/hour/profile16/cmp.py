import re,sys,json,collections
def load(name):
    d=collections.Counter()
    for l in open(name+'.top.txt'):
        m=re.match(r'\s*([\d.]+)%\s+\[(.)\]\s+(.*\S)',l)
        if m: d[m.group(3)]+=float(m.group(1))
    return d
def mbps(name,n):
    t=0
    for i in range(n):
        j=json.load(open(f'{name}.s{i}.json')); t+=j['receiver']['mbps'] if 'receiver' in j else j.get('mbps',0)
    return t
for mode in ['xen','relay']:
    one=[load(f'{mode}1-{r}') for r in (1,2)]; eight=[load(f'{mode}8-{r}') for r in (1,2)]
    t1=sum(mbps(f'{mode}1-{r}',1) for r in (1,2))/2; t8=sum(mbps(f'{mode}8-{r}',8) for r in (1,2))/2
    k=t1/t8
    a=collections.Counter(); b=collections.Counter()
    for c in one:
        for s,v in c.items(): a[s]+=v/2
    for c in eight:
        for s,v in c.items(): b[s]+=v/2*k
    print(f'== {mode}: one guest {t1:.0f} Mbit/s, eight {t8:.0f} (8/1 {t8/t1:.3f}); CPU per byte at eight = {100*k:.1f} % of one guest\'s')
    rows=sorted(set(a)|set(b), key=lambda s: -(b[s]-a[s]))
    print(f'{"symbol":45s} {"1 guest %":>9s} {"8, per byte of 1":>16s} {"growth":>7s}')
    for s in rows[:14]:
        print(f'{s[:45]:45s} {a[s]:9.2f} {b[s]:16.2f} {b[s]-a[s]:+7.2f}')
    print('...shrinking most:')
    for s in rows[-4:]:
        print(f'{s[:45]:45s} {a[s]:9.2f} {b[s]:16.2f} {b[s]-a[s]:+7.2f}')
