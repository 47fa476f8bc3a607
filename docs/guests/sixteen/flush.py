# Why each bench repetition's aggregates left: the driver domain's LRO flush reasons, from
# results.json's samples (the daemon's `pvnet stat` after each stream). Usage: python3 flush.py g16c g16d
import json, sys
for run in sys.argv[1:]:
    r = json.load(open(run + '/results.json'))
    for smp in r['samples']:
        l = (smp.get('stat') or {}).get('lro') if not smp.get('warmup') else None
        if not l or not l.get('aggregates_out'):
            continue
        fl, aggs = l['flush'], l['aggregates_out']
        other = {k: v for k, v in fl.items() if v and k != 'psh'}
        print(f"{run} {smp['config']:20s} segments per aggregate {l['lro_rate']:5.1f}  aggregates {aggs:6d}  "
              f"ended by PSH {100 * fl.get('psh', 0) / aggs:5.1f} %  other reasons {other}")
