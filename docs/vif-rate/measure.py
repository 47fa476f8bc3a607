#!/usr/bin/env python3
"""docs/vif-rate.md: how close a guest's TCP stream comes to its transmit rate (`--vif-rate`),
what it loses, and whether an unlimited neighbour streaming at the same time is held to it.

One run of two PV guests; for each rate, `pvnet set --vif-rate g0=RATE`, then g0 and g1 each
stream to the remote host for SECONDS at once (g1 unlimited). Records the receivers' Mbit/s,
g0's smoothed RTT, the TCP segments g0 retransmitted, g0's eth0 TX drops and its vif's credit
waits, as JSON lines on stdout.

Usage: sudo measure.py PVNET [SECONDS]
"""
import json
import subprocess
import sys
import threading

PVNET = sys.argv[1]
SECS = sys.argv[2] if len(sys.argv) > 2 else "4"
RATES = ["off", "8Mb/s@100ms", "40Mb/s@20ms", "200Mb/s", "1Gb/s", "1Gb/s@1ms", "2Gb/s@10ms"]


def pv(*args, check=True):
    r = subprocess.run([PVNET, *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise SystemExit(f"{args}: {r.stderr}")
    return r.stdout


def guest_counters(rid):
    dev = pv("exec", "--id", rid, "g0", "cat", "/proc/net/dev")
    drops = next(int(l.split()[12]) for l in dev.splitlines() if l.strip().startswith("eth0:"))
    snmp = pv("exec", "--id", rid, "g0", "cat", "/proc/net/snmp").splitlines()
    tcp = [l.split() for l in snmp if l.startswith("Tcp:")]
    retrans = int(tcp[1][tcp[0].index("RetransSegs")])
    return drops, retrans


def stream(rid, role, port, out):
    srv = subprocess.Popen([PVNET, "exec", "--id", rid, "remote", PVNET, "perf", "server",
                            "--once", "--bind", f"0.0.0.0:{port}"], stdout=subprocess.DEVNULL)
    import time
    time.sleep(0.5)
    o = pv("exec", "--id", rid, role, PVNET, "perf", "stream", "10.77.0.1", "--port", str(port),
           "--duration", SECS)
    srv.wait()
    out[role] = json.loads(o)


def main():
    rid = "5a7e01"
    pv("up", "--guests", "2", "--id", rid)
    try:
        for rate in RATES:
            pv("set", "--id", rid, "--vif-rate", f"g0={rate}")
            d0, r0 = guest_counters(rid)
            w0 = json.loads(pv("stat", "--id", rid, "--json"))["vifs"][0]["netback"]["tx_credit_waits"]
            out = {}
            ts = [threading.Thread(target=stream, args=(rid, g, p, out))
                  for g, p in (("g0", 5410), ("g1", 5411))]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            d1, r1 = guest_counters(rid)
            st = json.loads(pv("stat", "--id", rid, "--json"))
            v0 = st["vifs"][0]
            print(json.dumps({
                "rate": rate,
                "rate_bits_per_sec": (v0["rate"] or {}).get("bits_per_sec"),
                "g0_mbps": out["g0"]["receiver"]["mbps"],
                "g0_mismatches": out["g0"]["receiver"]["mismatches"],
                "g0_rtt_us": out["g0"]["sender"].get("rtt_us"),
                "g0_retrans_segs": r1 - r0,
                "g0_eth0_tx_drops": d1 - d0,
                "g0_credit_waits": v0["netback"]["tx_credit_waits"] - w0,
                "g1_mbps": out["g1"]["receiver"]["mbps"],
                "g1_mismatches": out["g1"]["receiver"]["mismatches"],
                "loop_passes": st["daemon"]["loop_passes"],
            }), flush=True)
    finally:
        pv("down", "--id", rid, check=False)


main()
