#!/usr/bin/env python3
"""Usage: OLD=... NEW=... measure.py LRO REPS SECONDS OUT.jsonl
g0's verified TCP stream from the remote host, with domain 2 (an attached external frontend)
idle (`alone`) or flooding its control socket with xenstore reads (flood.py) from CPU 0 (the
receiving CPU, where the guests run by default) or CPU 1 (as under --placement spread/free).
Each scenario with the OLD and the NEW binary, alternating which goes first."""
import json, os, subprocess, sys, time

bins = {"old": os.environ.get("OLD", "old/pvnet"), "new": os.environ.get("NEW", "target/release/pvnet")}
FLOOD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "flood.py")
lro = sys.argv[1]; reps = int(sys.argv[2]); secs = int(sys.argv[3]); out = open(sys.argv[4], "a")
def sh(*a): return subprocess.run(list(a), capture_output=True, text=True)
def one(tag, sc, rid):
    B = bins[tag]
    r = sh(B, "up", "--id", rid, "--guests", "1", "--attach", "1", "--lro", lro)
    if r.returncode: raise SystemExit(r.stderr)
    srv = None; flood = None
    try:
        srv = subprocess.Popen([B, "exec", "--id", rid, "g0", B, "perf", "server"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        sh(B, "exec", "--id", rid, "remote", B, "perf", "ping", "10.77.0.10", "--count", "1")
        if sc != "alone":
            cpu = sc[-1]
            flood = subprocess.Popen(["taskset", "-c", cpu, "python3", FLOOD, f"/run/pvnet/{rid}/attach-2.sock", str(secs + 2)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            time.sleep(0.3)
        s = sh(B, "exec", "--id", rid, "remote", B, "perf", "stream", "10.77.0.10", "--duration", str(secs))
        v = json.loads(s.stdout[s.stdout.index("{"):])
        st = json.loads(sh(B, "stat", "--json", "--id", rid).stdout)
        sent = flood.communicate()[0].strip() if flood else None
        vif2 = [x for x in st["vifs"] if x["domid"] == 2][0]
        rec = {"tag": tag, "lro": lro, "scenario": sc, "g0_mbps": v["receiver"]["mbps"], "mismatches": v["receiver"]["mismatches"],
               "flood_sent": sent, "ctl": vif2.get("ctl"), "daemon_run_ms": st.get("daemon_cpu", {}).get("run_ms")}
        out.write(json.dumps(rec) + "\n"); out.flush()
        print(rec, flush=True)
    finally:
        if flood and flood.poll() is None: flood.kill()
        if srv: srv.kill()
        sh(B, "down", "--id", rid)
for i in range(reps):
    for sc in ("alone", "flood-cpu0", "flood-cpu1"):
        for tag in (("old", "new") if i % 2 == 0 else ("new", "old")):
            one(tag, sc, "cf10" + str(i % 10))
