#!/usr/bin/env python3
"""The A/B of the data path without a rate (docs/vif-rate.md): new ÷ old, the mean of two bench
runs each, from `{old,new}-{1,2}.json` (each run's results.json) in DIR (default: here)."""
import json
import sys

d = sys.argv[1] if len(sys.argv) > 1 else "."


def load(v, i):
    return json.load(open(f"{d}/{v}-{i}.json"))["configs"]


rows = [("throughput", lambda c: c["throughput_mbps"]), ("TCP_RR", lambda c: c["rr_tps"]),
        ("driver domain, cycles/byte", lambda c: c["cycles_per_byte"]["daemon"]),
        ("all domains, cycles/byte", lambda c: c["cycles_per_byte"]["total"])]
print("| new ÷ old (mean of 2 runs each) | `xen` | `adaptive` |")
print("|---|---:|---:|")
for name, f in rows:
    cells = []
    for cfg in ("xen", "adaptive"):
        old = sum(f(load("old", i)[cfg]) for i in (1, 2)) / 2
        new = sum(f(load("new", i)[cfg]) for i in (1, 2)) / 2
        cells.append(f"{new / old:.3f}")
    print(f"| {name} | " + " | ".join(cells) + " |")
for v in ("old", "new"):
    for i in (1, 2):
        c = load(v, i)
        print(v, i, {k: (round(c[k]["throughput_mbps"]), round(c[k]["rr_tps"])) for k in ("xen", "adaptive")})
