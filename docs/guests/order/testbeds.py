"""Each standing-testbed comparison in the given bench output directories: its 8 ÷ 1
(geometric mean over the testbeds, 95 % interval), the one-guest and all-guest medians, and
each testbed's own geometric mean, in the order the testbeds ran.

    python3 testbeds.py sweep alone-1 turns-1 alone-2 turns-2
"""
import json
import math
import statistics
import sys

for f in sys.argv[1:]:
    d = json.load(open(f + "/results.json"))
    for o in d["scaling_one_testbed"]:
        r, k, means = o["ratios"], 0, []
        for n in o["testbed_rounds"]:
            means.append(math.exp(sum(math.log(x) for x in r[k:k + n]) / n))
            k += n
        lo, hi = o["ci95"]
        print(f"{f.rstrip('/').split('/')[-1]:10s} {o['config']:18s} {o['geomean']:.3f} "
              f"[{lo:.2f}, {hi:.2f}] one {statistics.median(o['one_mbps']):.0f} "
              f"all {statistics.median(o['all_mbps']):.0f} | "
              + " ".join(f"{x:.2f}" for x in means))
