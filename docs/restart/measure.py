#!/usr/bin/env python3
"""Measures `pvnet restart-dd` (docs/restart.md): reconnection times idle and under load, what
two verified TCP streams (into guest 0, out of guest 1) lose through the restarts, and how long
the data path is out, from paced verified UDP streams' lost datagrams.

Usage (root, from the repository, after `cargo build --release -p pvnet`):
    python3 docs/restart/measure.py [--idle N] [--loaded N] [--secs S] > docs/restart/results.json
"""
import argparse
import json
import statistics
import subprocess
import sys
import threading
import time

P = "target/release/pvnet"


def sh(*args, check=True):
    r = subprocess.run([P, *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        sys.exit(f"pvnet {args}: {r.stderr}")
    return r.stdout


def restart(rid):
    return json.loads(sh("restart-dd", "--id", rid, "--json"))["last"]


def retrans(rid, role):
    """TcpRetransSegs of namespace `role` (its own /proc/net/snmp)."""
    out = sh("exec", "--id", rid, role, "cat", "/proc/net/snmp")
    lines = [l.split() for l in out.splitlines() if l.startswith("Tcp:")]
    return int(lines[1][lines[0].index("RetransSegs")])


def stream(rid, frm, to, addr, port, secs, out):
    srv = subprocess.Popen(
        [P, "exec", "--id", rid, to, P, "perf", "server", "--once", "--bind", f"0.0.0.0:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    r = sh("exec", "--id", rid, frm, P, "perf", "stream", addr, "--port", str(port),
           "--duration", str(secs), check=False)
    srv.wait(timeout=30)
    out.append(json.loads(r) if r.strip() else {"error": "no report"})


def loaded(rid, secs, restarts):
    flows = [("remote", "g0", "10.77.0.10", 5401), ("g1", "remote", "10.77.0.1", 5402)]
    before = {f[0]: retrans(rid, f[0]) for f in flows}
    outs = [[] for _ in flows]
    ts = [threading.Thread(target=stream, args=(rid, *f, secs, o)) for f, o in zip(flows, outs)]
    for t in ts:
        t.start()
    rs = []
    if restarts:
        gap = (secs - 2.0) / (restarts + 1)
        time.sleep(1.0)
        for _ in range(restarts):
            time.sleep(gap)
            rs.append(restart(rid))
    for t in ts:
        t.join()
    after = {f[0]: retrans(rid, f[0]) for f in flows}
    res = []
    for f, o in zip(flows, outs):
        v = o[0]
        rep = v.get("receiver", {})
        res.append({
            "flow": f"{f[0]}->{f[1]}",
            "sent": v.get("sent"),
            "received": rep.get("bytes"),
            "mismatches": rep.get("mismatches"),
            "intact": v.get("sent") == rep.get("bytes") and rep.get("mismatches") == 0,
            "mbps": rep.get("mbps"),
            "retrans_segs": after[f[0]] - before[f[0]],
        })
    return {"restarts": rs, "flows": res}


def udp(rid, frm, to, addr, port, secs, pps, out):
    srv = subprocess.Popen(
        [P, "exec", "--id", rid, to, P, "perf", "server", "--once", "--bind", f"0.0.0.0:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    r = sh("exec", "--id", rid, frm, P, "perf", "udp-stream", addr, "--port", str(port),
           "--size", "1000", "--rate", f"{pps // 1000}kpps", "--duration", str(secs),
           check=False)
    srv.wait(timeout=30)
    out.append(json.loads(r) if r.strip() else {"error": "no report"})


def outage(rid, secs, restarts, pps):
    """Paced verified UDP streams (into guest 0, out of guest 1) through `restarts` restarts:
    the datagrams lost, divided by the rate, are the time the data path was out."""
    flows = [("remote", "g0", "10.77.0.10", 5501), ("g1", "remote", "10.77.0.1", 5502)]
    outs = [[] for _ in flows]
    ts = [threading.Thread(target=udp, args=(rid, *f, secs, pps, o)) for f, o in zip(flows, outs)]
    for t in ts:
        t.start()
    rs = []
    if restarts:
        gap = (secs - 2.0) / (restarts + 1)
        time.sleep(1.0)
        for _ in range(restarts):
            time.sleep(gap)
            rs.append(restart(rid))
    for t in ts:
        t.join()
    res = []
    for f, o in zip(flows, outs):
        rep = o[0].get("receiver", {})
        pps_got = o[0].get("sender", {}).get("pps") or pps
        lost = rep.get("lost")
        res.append({
            "flow": f"{f[0]}->{f[1]}", "sent": rep.get("sent"), "lost": lost,
            "corrupt": rep.get("corrupt"), "pps": pps_got,
            "outage_ms_per_restart": (lost / pps_got * 1e3 / restarts)
            if restarts and lost is not None else None,
        })
    return {"restarts": rs, "flows": res}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--idle", type=int, default=15)
    ap.add_argument("--loaded", type=int, default=5, help="restarts per loaded run")
    ap.add_argument("--runs", type=int, default=3, help="loaded runs (and as many baselines)")
    ap.add_argument("--secs", type=int, default=12)
    ap.add_argument("--id", default="e5e5aa")
    ap.add_argument("--udp-only", action="store_true",
                    help="only the UDP outage runs (a separate results file)")
    ap.add_argument("--pps", type=int, default=2000,
                    help="datagrams/s of each UDP stream (low enough to lose none without restarts)")
    a = ap.parse_args()
    rid = a.id
    sh("up", "--id", rid, "--guests", "2")
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True).stdout.strip()
        load = open("/proc/loadavg").read().split()[:3]
        if a.udp_only:
            udp_runs = [{"baseline": outage(rid, a.secs, 0, a.pps),
                         "with_restarts": outage(rid, a.secs, a.loaded, a.pps)}
                        for _ in range(a.runs)]
            json.dump({"revision": rev, "loadavg_at_start": load, "pps": a.pps,
                       "udp": udp_runs}, sys.stdout, indent=1)
            print()
            return
        idle = [restart(rid) for _ in range(a.idle)]
        runs = []
        for _ in range(a.runs):
            runs.append({"baseline": loaded(rid, a.secs, 0),
                         "with_restarts": loaded(rid, a.secs, a.loaded)})
        udp_runs = [{"baseline": outage(rid, a.secs, 0, a.pps),
                     "with_restarts": outage(rid, a.secs, a.loaded, a.pps)}
                    for _ in range(a.runs)]
        st = json.loads(sh("stat", "--id", rid, "--json"))
        med = lambda xs: statistics.median(xs) if xs else None
        under = [r for run in runs for r in run["with_restarts"]["restarts"]]
        summary = {
            "revision": rev, "loadavg_at_start": load, "guests": 2,
            "idle": {k: med([r[k] for r in idle]) for k in
                     ("reconnect_ms", "down_ms", "teardown_ms", "ports_ms")},
            "idle_max_reconnect_ms": max(r["reconnect_ms"] for r in idle),
            "loaded": {k: med([r[k] for r in under]) for k in
                       ("reconnect_ms", "down_ms", "teardown_ms", "ports_ms")},
            "loaded_max_reconnect_ms": max(r["reconnect_ms"] for r in under),
            "queued_packets_dropped": sum(r["queued_packets_dropped"] for r in under),
            "all_intact": all(f["intact"] for run in runs for k in run
                              for f in run[k]["flows"]),
            "netfront": [{k: v["netfront"].get(k) for k in
                          ("disconnects", "reconnects", "tx_reposted",
                           "tx_lost_at_disconnect", "rx_reclaimed_at_disconnect",
                           "grants_leaked")} for v in st["vifs"]],
            "udp_outage_ms_per_restart": {
                fl: med([f["outage_ms_per_restart"] for run in udp_runs
                         for f in run["with_restarts"]["flows"] if f["flow"] == fl])
                for fl in ("remote->g0", "g1->remote")},
            "udp_baseline_lost": [f["lost"] for run in udp_runs
                                  for f in run["baseline"]["flows"]],
            "udp_reconnect_ms": med([r["reconnect_ms"] for run in udp_runs
                                     for r in run["with_restarts"]["restarts"]]),
            "restarts_total": st["restart"]["restarts"],
            "reconnections_total": st["restart"]["reconnections"],
        }
        json.dump({"summary": summary, "idle": idle, "runs": runs, "udp": udp_runs}, sys.stdout, indent=1)
        print()
    finally:
        sh("down", "--id", rid, check=False)


if __name__ == "__main__":
    main()
