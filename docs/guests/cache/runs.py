"""The quick runs of this directory against the cache probe and the neighbour.

    python3 runs.py

For each run: `xen`'s and `relay`'s 8 ÷ 1 over sixteen standing testbeds (geometric mean, 95 %
interval), their quotient, and for q1-q6 the mean of the cache probe's idle samples
(`cliff.log`, ns per dependent random read over 8, 12, 16, 24, 64 MiB of 2 MiB pages, CPU 0)
taken in the 40 s before the run's start and after its end (`cliff.marks`); then the
correlation of each probe size with the three figures over q1-q6.
"""
import json
import os
import statistics as st

here = os.path.dirname(os.path.abspath(__file__))


def ratios(d):
    j = json.load(open(os.path.join(here, d, "results.json")))
    r = {o["config"]: o for o in j["scaling_one_testbed"]}
    return r["xen/g8"], r["relay/g8"]


def fmt(o):
    lo, hi = o["ci95"]
    return f"{o['geomean']:.3f} [{lo:.3f}, {hi:.3f}]"


marks = {}
for line in open(os.path.join(here, "cliff.marks")):
    t, what, path = line.split()
    marks.setdefault("q" + path.rsplit("-", 1)[1], {})[what] = float(t)
probe = [list(map(float, l.split())) for l in open(os.path.join(here, "cliff.log"))]
rows = []
for d in sorted(marks):
    v = marks[d]
    s = [p for p in probe if v["start"] - 40 <= p[0] <= v["start"] or v["end"] <= p[0] <= v["end"] + 40]
    cache = [st.mean(p[i] for p in s) for i in range(1, 6)]
    x, r = ratios(d)
    rows.append((x["geomean"], r["geomean"], x["geomean"] / r["geomean"], cache))
    print(f"{d}  xen {fmt(x)}  relay {fmt(r)}  xen/relay {x['geomean'] / r['geomean']:.3f}  "
          f"probe 8/12/16/24/64 MiB: " + " ".join(f"{c:.0f}" for c in cache) + f" ns ({len(s)} samples)")
for i, mib in enumerate([8, 12, 16, 24, 64]):
    c = [row[3][i] for row in rows]
    print(f"{mib:2d} MiB: correlation with xen {st.correlation(c, [r[0] for r in rows]):+.2f}, "
          f"relay {st.correlation(c, [r[1] for r in rows]):+.2f}, xen/relay {st.correlation(c, [r[2] for r in rows]):+.2f}")
for d in sorted(x for x in os.listdir(here) if x.startswith("t")):
    if os.path.exists(os.path.join(here, d, "results.json")):
        x, r = ratios(d)
        print(f"{d:4s} xen {fmt(x)}  relay {fmt(r)}  xen/relay {x['geomean'] / r['geomean']:.3f}")
