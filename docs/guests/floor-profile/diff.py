# usage: diff.py ONE.txt ALL.txt N  -- the symbols whose per-byte share grew most from one guest to eight
import sys,collections
def load(p):
    d=collections.Counter()
    for l in open(p):
        f=l.split(None,2)
        if len(f)==3:
            try: d[(f[0],f[2].strip())]=float(f[1])
            except ValueError: pass
    return d
a,b=load(sys.argv[1]),load(sys.argv[2])
rows=sorted(set(a)|set(b),key=lambda k:-(b[k]-a[k]))
n=int(sys.argv[3])
print(f'{"role":9s} {"one":>6s} {"eight":>6s} {"diff":>6s} symbol')
for k in rows[:n]: print(f'{k[0]:9s} {a[k]:6.2f} {b[k]:6.2f} {b[k]-a[k]:+6.2f} {k[1]}')
print('...')
for k in rows[-5:]: print(f'{k[0]:9s} {a[k]:6.2f} {b[k]:6.2f} {b[k]-a[k]:+6.2f} {k[1]}')
