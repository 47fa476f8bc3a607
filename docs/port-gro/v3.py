#!/usr/bin/env python3
"""Port GRO's two rings from a bench's results.json (docs/port-gro.md, "TPACKET_V3"): every
measured repetition with the port's ring counters, then medians per configuration and the
ratios of port-gro-v3 to port-gro within the run."""
import json, statistics, sys

r = json.load(open(sys.argv[1]))
S = [s for s in r["samples"] if not s["warmup"]]
print("| config | rep | Mbit/s | c/B accounted | port | daemon | receiving side | c/B CPU 0 busy | TCP_RR/s | RR p50 us | block | frames/block | avg frame B | ring frozen | kernel drops | other runs up |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for s in S:
    pn = s["stat"].get("pnic") or {}
    fr = pn.get("rx_frames") or 0
    blocks = pn.get("rx_blocks") or 0
    acc, port, dmn = s["cycles_per_byte_accounted"], s["cycles_per_byte_port"], s.get("cycles_per_byte_daemon") or 0.0
    print(f"| `{s['config']}` | {s['rep']} | {s['throughput_mbps']:.0f} | {acc:.2f} | {port:.2f} | {dmn:.2f} | {acc - port - dmn:.2f} | "
          f"{s['cycles_per_byte_total']:.2f} | {s['rr_tps']:.0f} | {s['rr_p50_us']:.0f} | {pn.get('ring_block_size') or '–'} | "
          f"{(fr / blocks) if blocks else float('nan'):.1f} | {pn.get('rx_bytes', 0) / max(fr, 1):.0f} | {pn.get('kernel_ring_frozen', '–')} | "
          f"{pn.get('kernel_drops', '–')} | {len(s.get('concurrent_runs') or [])} |")
order = []
for s in S:
    if s["config"] not in order:
        order.append(s["config"])
cols = {
    "mbps": lambda s: s["throughput_mbps"],
    "acc": lambda s: s["cycles_per_byte_accounted"],
    "port": lambda s: s["cycles_per_byte_port"],
    "daemon": lambda s: s.get("cycles_per_byte_daemon") or 0.0,
    "recv": lambda s: s["cycles_per_byte_accounted"] - s["cycles_per_byte_port"] - (s.get("cycles_per_byte_daemon") or 0.0),
    "busy": lambda s: s["cycles_per_byte_total"],
    "rr": lambda s: s["rr_tps"],
    "p50": lambda s: s["rr_p50_us"],
}
m = {c: {k: statistics.median([f(s) for s in S if s["config"] == c]) for k, f in cols.items()} for c in order}
print()
print("medians:")
for c in order:
    print(c, {k: round(v, 2) for k, v in m[c].items()})
if "port-gro" in m and "port-gro-v3" in m:
    print()
    print("port-gro-v3 / port-gro:", {k: round(m["port-gro-v3"][k] / m["port-gro"][k], 3) for k in cols})
