# usage: line.py DIR SETTING ROUND  -- one line per configuration of a `--sweep guests
# --sweep-values 1,8 --scaling-rounds 40` report: the setting and round, then one guest and all
# eight on one testbed (Mbit/s, medians of the slices), their ratio with its 95 % interval, and
# the fresh 8-guest stream's Mbit/s, port drops and retransmissions
import json, statistics, sys

out, setting, rnd = sys.argv[1:4]
run = json.load(open(f'{out}/results.json'))
fresh = {s['config']: s for s in run['samples']}
for o in run['scaling_one_testbed']:
    s = fresh.get(o['config'], {})
    lo, hi = o['ci95']
    print(setting, rnd, o['config'],
          'one', round(statistics.median(o['one_mbps'])),
          'all', round(statistics.median(o['all_mbps'])),
          'ratio', round(o['geomean'], 3), [round(lo, 3), round(hi, 3)],
          'g8-fresh', round(s.get('throughput_mbps', 0)),
          'drops', s.get('port_drops'), 'retx', s.get('retransmissions'), flush=True)
