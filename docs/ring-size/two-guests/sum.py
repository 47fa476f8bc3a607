"""The figures of docs/ring-size.md, "Two guests": port drops per stream and the pairs'
throughput ratios. Run from this directory: python3 sum.py"""
import functools
import json
import math
import statistics as st

CONFIGS = ["relay-adaptive/g2", "adaptive/g2", "xen/g2"]
PAIRS = [("def-1", "8192-1"), ("def-2", "8192-2"), ("def-3", "8192-3"), ("def-4", "8192-4")]


@functools.cache
def streams(run):
    """(config, Mbit/s, port drops) of every measured stream of a run, read once."""
    with open(f"{run}/results.json") as f:
        d = json.load(f)
    return [(x["config"], x["throughput_mbps"], x["port_drops"] or 0)
            for x in d["samples"] if not x.get("warmup")]


def median(run, config):
    return st.median(m for c, m, _ in streams(run) if c == config)


for arm, runs in [("4096 (default before)", [a for a, _ in PAIRS]),
                  ("8192", [b for _, b in PAIRS]), ("8192, the new default", ["new-1"])]:
    print(arm)
    for config in CONFIGS:
        drops = [d for r in runs for c, _, d in streams(r) if c == config]
        hit = [d for d in drops if d]
        print(f"  {config:18s} {len(hit)}/{len(drops)} streams dropped frames at the port"
              f" ({sum(hit)} frames{', at most %d' % max(hit) if hit else ''})")
print("8192 against 4096, ratio of the medians per pair, geometric mean [95 %, t over 4 pairs]")
for config in CONFIGS:
    logs = [math.log(median(b, config) / median(a, config)) for a, b in PAIRS]
    m, h = st.mean(logs), 3.182 * st.stdev(logs) / math.sqrt(len(logs))
    print(f"  {config:18s} {[round(median(a, config)) for a, _ in PAIRS]} -> "
          f"{[round(median(b, config)) for _, b in PAIRS]}: "
          f"{math.exp(m):.3f} [{math.exp(m - h):.3f}, {math.exp(m + h):.3f}]")
