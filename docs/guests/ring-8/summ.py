# usage: summ.py DIR...  -- per --ring-frames value: the one-testbed 8 ÷ 1 of every run, and the
# fresh-testbed streams' port drops (frames the kernel dropped because the configuration's queue was full)
import json,sys,statistics as st,collections
rows=collections.defaultdict(list); drops=collections.defaultdict(list)
for p in sys.argv[1:]:
    d=json.load(open(f'{p}/results.json'))
    f=d['parameters'].get('ring_frames') or p.split('-')[-2]
    for o in d['scaling_one_testbed']:
        rows[(o['config'],f)].append((round(o['geomean'],3),round(st.median(o['one_mbps'])),round(st.median(o['all_mbps']))))
    for s in d['samples']:
        drops[(s['config'],f)].append((round(s['throughput_mbps']),s['port_drops']))
for k in sorted(rows): print(k, 'ratio, one, eight:', rows[k])
for k in sorted(drops): print(k, 'fresh Mbit/s, port drops:', drops[k])
