#!/usr/bin/env python3
"""Usage: idle-summ.py FILE.jsonl...: per file, new ÷ old medians and the paired ratios'
median with a bootstrap 95 % interval (round by round, the two builds' streams of one round)."""
import json, random, statistics as st, sys
def boot(xs, n=4000):
    random.seed(1)
    ms = sorted(st.median(random.choices(xs, k=len(xs))) for _ in range(n))
    return ms[int(0.025 * n)], ms[int(0.975 * n)]
for f in sys.argv[1:]:
    recs = [json.loads(l) for l in open(f)]
    by = {}
    for r in recs: by.setdefault(r["round"], {})[r["tag"]] = r
    pairs = [v for v in by.values() if "old" in v and "new" in v]
    print(f"{f}: {len(pairs)} rounds, mismatches {sum(r['mismatches'] for r in recs)}, queues paused (new, cumulative) {max(r['queues_paused'] or 0 for r in recs)}")
    for key in ("g0_mbps", "daemon_s_per_gb", "netfront_s_per_gb"):
        o = [p["old"][key] for p in pairs]; n = [p["new"][key] for p in pairs]
        ratios = [b / a for a, b in zip(o, n)]
        lo, hi = boot(ratios)
        print(f"  {key}: old {st.median(o):.3f}, new {st.median(n):.3f}; paired new÷old median {st.median(ratios):.3f} [{lo:.3f}, {hi:.3f}]")
