#!/usr/bin/env python3
"""Usage: summary.py FILE.jsonl...: g0's stream per scenario (median, Mbit/s), and the flood's
cost against a CPU-bound process on the same CPU (udp ÷ burn, medians), the datagrams a second g1 sent and the remote host received
(medians over both CPUs), and the stream's corrupted bytes, per file."""
import json, statistics, sys

for f in sys.argv[1:]:
    rows = [json.loads(l) for l in open(f)]
    med = {}
    for sc in ("alone", "burn-cpu0", "udp-cpu0", "burn-cpu1", "udp-cpu1"):
        v = [r["g0_mbps"] for r in rows if r["scenario"] == sc]
        med[sc] = statistics.median(v)
    pps = [r["udp"]["sender"]["pps"] for r in rows if r.get("udp")]
    got = [r["udp"]["receiver"]["pps"] for r in rows if r.get("udp")]
    bad = sum(r["mismatches"] for r in rows)
    print(f"| {f.split('/')[-1][:-6]} | {len(rows) // 5} | " + " | ".join(f"{med[s]:.0f}" for s in med)
          + f" | {med['udp-cpu0'] / med['burn-cpu0']:.2f} | {med['udp-cpu1'] / med['burn-cpu1']:.2f}"
          + f" | {statistics.median(pps) / 1000:.0f} k | {statistics.median(got) / 1000:.0f} k | {bad} |")
