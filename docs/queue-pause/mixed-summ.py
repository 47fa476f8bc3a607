#!/usr/bin/env python3
"""Usage: mixed-summ.py DIR: the mixed-host A/B (mixed-ab.sh). Per configuration, guest 1's
TCP_RR p50/p99 beside the stream and guest 0's stream, each build's median over every
repetition, and new ÷ old per pair (the medians of a pair's two runs) with the pairs' range."""
import glob, json, os, statistics as st, sys
d = sys.argv[1]
runs = {}
for f in glob.glob(os.path.join(d, "*-*", "scenario-mixed.json")):
    tag, i = os.path.basename(os.path.dirname(f)).split("-")
    runs.setdefault(int(i), {})[tag] = json.load(open(f))
def vals(run, cfg, key):
    out = []
    for s in run["samples"]:
        if s["config"] != cfg: continue
        l = s["loaded"]
        out.append({"p50": l["rr"]["p50_us"], "p99": l["rr"]["p99_us"], "tps": l["rr"]["tps"], "mbps": l["throughput_mbps"]}[key])
    return out
pairs = [runs[i] for i in sorted(runs) if len(runs[i]) == 2]
cfgs = pairs[0]["new"]["configs"]
print(f"{len(pairs)} pairs; revisions old {pairs[0]['old']['revision']}, new {pairs[0]['new']['revision']}")
for cfg in cfgs:
    for key in ("p50", "p99", "tps", "mbps"):
        o = [v for p in pairs for v in vals(p["old"], cfg, key)]
        n = [v for p in pairs for v in vals(p["new"], cfg, key)]
        r = [st.median(vals(p["new"], cfg, key)) / st.median(vals(p["old"], cfg, key)) for p in pairs]
        print(f"{cfg:9} {key:5} old {st.median(o):8.1f}  new {st.median(n):8.1f}  new÷old {st.median(n)/st.median(o):.2f}; per pair {', '.join(f'{x:.2f}' for x in r)}")
