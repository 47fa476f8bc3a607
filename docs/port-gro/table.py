#!/usr/bin/env python3
"""The table of docs/port-gro.md from a bench's results.json: medians over the measured
repetitions; ratios against `linux` and `linux-gro` of the same run."""
import json, statistics, sys

r = json.load(open(sys.argv[1] if len(sys.argv) > 1 else "bench/results.json"))
S = [s for s in r["samples"] if not s["warmup"]]
order = []
for s in S:
    if s["config"] not in order:
        order.append(s["config"])

def med(c, f):
    xs = [f(s) for s in S if s["config"] == c]
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None

cols = {
    "mbps": lambda s: s["throughput_mbps"],
    "busy": lambda s: s["cycles_per_byte_total"],
    "acc": lambda s: s.get("cycles_per_byte_accounted"),
    "port": lambda s: s.get("cycles_per_byte_port"),
    "daemon": lambda s: s.get("cycles_per_byte_daemon") or 0.0,
    "recv": lambda s: s["cycles_per_byte_accounted"] - s["cycles_per_byte_port"] - (s.get("cycles_per_byte_daemon") or 0.0),
    "rr": lambda s: s["rr_tps"],
    "busy_rx": lambda s: s["rx_cpu_busy"],
    "busy_tx": lambda s: s["tx_cpu_busy"],
}
m = {c: {k: med(c, f) for k, f in cols.items()} for c in order}
print("| config | Mbit/s | × linux | × linux-gro | c/B accounted | × linux | × linux-gro | port | daemon | receiving side | c/B CPU 0 busy | TCP_RR/s |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for c in order:
    x = m[c]
    rl = lambda k, b: f"{x[k] / m[b][k]:.2f}" if b in m and m[b][k] else "–"
    print(f"| `{c}` | {x['mbps']:.0f} | {rl('mbps','linux')} | {rl('mbps','linux-gro')} | {x['acc']:.2f} | {rl('acc','linux')} | {rl('acc','linux-gro')} | {x['port']:.2f} | {x['daemon']:.2f} | {x['recv']:.2f} | {x['busy']:.2f} | {x['rr']:.0f} |")
xen = m.get("xen", {}).get("rr")
if xen:
    print()
    for c in order:
        print(f"- `{c}` TCP_RR {m[c]['rr'] / xen:.3f}× xen; reps {sum(1 for s in S if s['config'] == c)}; CPU busy rx/tx {m[c]['busy_rx']:.2f}/{m[c]['busy_tx']:.2f}")
print()
print("concurrent runs:", sorted({o for s in S for o in s.get("concurrent_runs", [])}))
