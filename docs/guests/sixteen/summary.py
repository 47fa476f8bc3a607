import json,sys
r=json.load(open(sys.argv[1]+'/results.json'))
m=r['machine']['memory_probe']; print('revision', r.get('revision'), 'cache', m['start']['cache_mib'], '->', m['end']['cache_mib'])
C=r['configs']
ns=sorted({int(k.split('/g')[1]) if '/g' in k else 1 for k in C})
print('fresh aggregate Mbit/s (median of reps), LRO segs/agg, cycles/byte total, Jain')
for base in [b for b in ['linux','xen','adaptive','relay','relay-adaptive'] if b in C]:
    cells=[]
    for n in ns:
        c=C[base if n==1 else f'{base}/g{n}']
        lro=c.get('lro_rate'); j=c.get('jain')
        cells.append(f"{c['throughput_mbps']:.0f}" + (f"/{lro:.1f}" if lro else '') + f" cpb{c['cycles_per_byte']['total']:.2f}" + (f" J{j:.3f}" if j else '') + f" pg[{(c['per_guest_mbps'].get('min') or 0):.0f}-{(c['per_guest_mbps'].get('max') or 0):.0f}]")
    print(f'{base:15s}', ' | '.join(cells))
def med(v):
    v=sorted(v); n=len(v)
    return None if n==0 else (v[n//2] if n%2 else (v[n//2-1]+v[n//2])/2)
def fmt(x, scale=1):
    return '-' if x is None else f'{x/scale:.0f}'
for s in r['scaling_one_testbed']:
    print(s['config'], round(s['geomean'],3), [round(x,3) for x in s['ci95']], s.get('verdict'), 'jain_overall', round(s['jain_overall'],3), 'median', round(s['jain_median'],3),'min',round(s['jain_min'],3), 'bytes_verified', s.get('bytes_verified'))
    # The slices' medians, as the report's standing table gives them: one guest and all, the
    # senders' bytes in flight (KiB) and smoothed RTT (us), one guest -> all.
    se=s.get('senders', {})
    print('  one', fmt(med(s['one_mbps'])), 'all', fmt(med(s['all_mbps'])), 'Mbit/s;',
          'in flight KiB', fmt(med(se.get('in_flight_one', [])), 1024), '->', fmt(med(se.get('in_flight_all', [])), 1024) + ';',
          'rtt us', fmt(med(se.get('rtt_one_us', []))), '->', fmt(med(se.get('rtt_all_us', []))))
for s in r['scaling_one_testbed_vs_floor']:
    print(s['config'],'/',s['floor'], round(s['quotient'],3), [round(x,3) for x in s['ci95']])
