#!/usr/bin/env python3
"""Usage: OLD=... NEW=... idle-ab.py LRO ROUNDS SECONDS OUT.jsonl
The idle case on one testbed per build: both builds' testbeds (two guests, g1 idle, pinned to
CPU 0 as `up` does by default) are up at once, and each round streams into g0 of one, then of
the other (the order alternating each round), so both builds meet the same moments of the host.
Per stream: g0's Mbit/s, the bytes verified, and the CPU seconds of the daemon and of g0's
netfront process (utime + stime from /proc) per GB received."""
import json, os, subprocess, sys, time
bins = {"old": os.environ["OLD"], "new": os.environ["NEW"]}
ids = {"old": "a1d1e0", "new": "a1d1e1"}
lro, rounds, secs, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), open(sys.argv[4], "a")
HZ = os.sysconf("SC_CLK_TCK")
def sh(*a): return subprocess.run(list(a), capture_output=True, text=True)
def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / HZ
info, srv = {}, []
try:
    for tag, B in bins.items():
        r = sh(B, "up", "--id", ids[tag], "--guests", "2", "--lro", lro)
        if r.returncode: raise SystemExit(r.stderr)
        info[tag] = json.load(open(f"/run/pvnet/{ids[tag]}/info.json"))
        srv.append(subprocess.Popen([B, "exec", "--id", ids[tag], "g0", B, "perf", "server"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    time.sleep(0.5)
    for tag, B in bins.items():
        sh(B, "exec", "--id", ids[tag], "remote", B, "perf", "ping", "10.77.0.10", "--count", "1")
    for i in range(rounds):
        for tag in (("old", "new") if i % 2 == 0 else ("new", "old")):
            B, inf = bins[tag], info[tag]
            c0 = (cpu(inf["pid"]), cpu(inf["guest_pids"][0]))
            s = sh(B, "exec", "--id", ids[tag], "remote", B, "perf", "stream", "10.77.0.10", "--duration", str(secs))
            c1 = (cpu(inf["pid"]), cpu(inf["guest_pids"][0]))
            v = json.loads(s.stdout[s.stdout.index("{"):])["receiver"]
            gb = v["bytes"] / 1e9
            d = json.loads(sh(B, "stat", "--json", "--id", ids[tag]).stdout)["daemon"]
            rec = {"round": i, "tag": tag, "lro": lro, "g0_mbps": v["mbps"], "bytes": v["bytes"], "mismatches": v["mismatches"],
                   "daemon_s_per_gb": (c1[0] - c0[0]) / gb, "netfront_s_per_gb": (c1[1] - c0[1]) / gb,
                   "queues_paused": d.get("pnic_queues_paused"), "deferred": d.get("pnic_deferred")}
            out.write(json.dumps(rec) + "\n"); out.flush()
            print(rec, flush=True)
finally:
    for p in srv: p.kill()
    for tag, B in bins.items(): sh(B, "down", "--id", ids[tag])
