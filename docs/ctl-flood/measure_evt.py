#!/usr/bin/env python3
"""Usage: PVNET=... FLOOD=... measure_evt.py LRO REPS SECONDS OUT.jsonl
g0's verified TCP stream from the remote host, with domain 2 (an attached external frontend)
idle (`alone`), or connected and notifying its event channel without pause
(crates/pvnet/examples/evtchn_flood.rs) from CPU 0 (`evt-cpu0`) or CPU 1 (`evt-cpu1`); and a
process that only burns a CPU beside it (`burn-cpu0`, `burn-cpu1`): what any CPU-bound process
there takes, the baseline the flood is judged against."""
import json, os, subprocess, sys, time

B = os.environ.get("PVNET", "target/release/pvnet")
FLOOD = os.environ.get("FLOOD", "target/release/examples/evtchn_flood")
lro = sys.argv[1]; reps = int(sys.argv[2]); secs = int(sys.argv[3]); out = open(sys.argv[4], "a")
def sh(*a): return subprocess.run(list(a), capture_output=True, text=True)
def one(sc, rid):
    r = sh(B, "up", "--id", rid, "--guests", "1", "--attach", "1", "--lro", lro)
    if r.returncode: raise SystemExit(r.stderr)
    srv = None; flood = None
    try:
        srv = subprocess.Popen([B, "exec", "--id", rid, "g0", B, "perf", "server"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        sh(B, "exec", "--id", rid, "remote", B, "perf", "ping", "10.77.0.10", "--count", "1")
        if sc.startswith("evt"):
            flood = subprocess.Popen(["taskset", "-c", sc[-1], FLOOD, f"/run/pvnet/{rid}/attach-2.sock", str(secs + 2)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            time.sleep(0.5)
        elif sc.startswith("burn"):
            flood = subprocess.Popen(["taskset", "-c", sc[-1], "timeout", str(secs + 2), "python3", "-c", "while True: pass"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            time.sleep(0.5)
        s = sh(B, "exec", "--id", rid, "remote", B, "perf", "stream", "10.77.0.10", "--duration", str(secs))
        v = json.loads(s.stdout[s.stdout.index("{"):])
        st = json.loads(sh(B, "stat", "--json", "--id", rid).stdout)
        sent = flood.communicate()[0].strip() if flood else None
        vif2 = [x for x in st["vifs"] if x["domid"] == 2][0]
        if not sc.startswith("evt"): sent = None
        rec = {"lro": lro, "scenario": sc, "g0_mbps": v["receiver"]["mbps"], "mismatches": v["receiver"]["mismatches"],
               "notifications_sent": sent, "vif2_state": vif2["state"], "vif2_events": vif2.get("events"), "vif2_late_eoi": vif2.get("late_eoi"),
               "daemon_run_ms": st.get("daemon_cpu", {}).get("run_ms")}
        out.write(json.dumps(rec) + "\n"); out.flush()
        print(rec, flush=True)
    finally:
        if flood and flood.poll() is None: flood.kill()
        if srv: srv.kill()
        sh(B, "down", "--id", rid)
for i in range(reps):
    for sc in ("alone", "burn-cpu0", "evt-cpu0", "burn-cpu1", "evt-cpu1"):
        one(sc, "ef10" + str(i % 10))
