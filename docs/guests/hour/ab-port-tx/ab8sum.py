import json,glob,os
for d in sorted(glob.glob('docs/guests/hour/ab-port-tx/*-*/results.json')):
    r=json.load(open(d))
    name=os.path.basename(os.path.dirname(d))
    p=r['machine'].get('memory_probe',{})
    line=[name, r['revision'][:7], f"probe 8MiB {p['start']['random_read_ns_8mib']}->{p['end']['random_read_ns_8mib']} 64MiB {p['start']['random_read_ns_64mib']}->{p['end']['random_read_ns_64mib']}"]
    for o in r.get('scaling_one_testbed') or []:
        line.append(f"{o['config']} {o['geomean']:.3f} [{o['ci95'][0]:.3f}, {o['ci95'][1]:.3f}]")
    for v in r.get('scaling_one_testbed_vs_floor') or []:
        line.append(f"÷floor {v['quotient']:.3f} [{v['ci95'][0]:.3f}, {v['ci95'][1]:.3f}]")
    print(' | '.join(line))
