import json,sys,glob
for d in sorted(glob.glob(sys.argv[1] + '/psh-r*-m*' if len(sys.argv) > 1 else 'psh-r*-m*')):
    if d.endswith('.log'): continue
    try: r=json.load(open(d+'/results.json'))
    except Exception: continue
    m=r['machine']['memory_probe']; C=r['configs']
    line=[d.rstrip('/').split('/')[-1], f"cache {m['start']['cache_mib']}->{m['end']['cache_mib']}"]
    for c in ['adaptive','adaptive/g8','relay-adaptive','relay-adaptive/g8']:
        line.append(f"{c} {C[c]['throughput_mbps']:.0f}/{C[c]['lro_rate']:.1f}/cpb{C[c]['cycles_per_byte']['total']:.2f}")
    for s in r['scaling_one_testbed']:
        line.append(f"{s['config']} {s['geomean']:.3f} [{s['ci95'][0]:.3f},{s['ci95'][1]:.3f}]")
    for s in r['scaling_one_testbed_vs_floor']:
        line.append(f"vsfloor {s['quotient']:.3f} [{s['ci95'][0]:.3f},{s['ci95'][1]:.3f}]")
    print(' | '.join(line))
