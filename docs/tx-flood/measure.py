#!/usr/bin/env python3
"""Usage: PVNET=... [MODE=xen] [UP_ARGS="--vif-rate g1=10Mb/s"] measure.py LRO REPS SECONDS OUT.jsonl
In `--mode relay` (or MODE) (the floor: a guest is a namespace behind a TAP the daemon serves), g0's
verified TCP stream from the remote host, with g1 idle (`alone`), or g1 sending 18-byte UDP
datagrams to the remote host as fast as it can, through its TAP (`udp-cpu0`, `udp-cpu1`: the
sender pinned to that CPU); and g1 only burning that CPU (`burn-cpu0`, `burn-cpu1`): what any
CPU-bound process there takes, the baseline the flood is judged against. LRO: `none` or a
policy (`adaptive`). As the bench places them: g0's receiver on CPU 0 with the driver domain
and the guests, the remote host's sender and the flood's receiver on CPU 1."""
import json, os, subprocess, sys, time

B = os.environ.get("PVNET", "target/release/pvnet")
MODE = os.environ.get("MODE", "relay")
UP_ARGS = os.environ.get("UP_ARGS", "").split()
lro = sys.argv[1]; reps = int(sys.argv[2]); secs = int(sys.argv[3]); out = open(sys.argv[4], "a")
def sh(*a): return subprocess.run(list(a), capture_output=True, text=True)
def one(sc, rid):
    up = [B, "up", "--id", rid, "--guests", "2", "--mode", MODE] + UP_ARGS + ([] if lro == "none" else ["--lro", lro])
    r = sh(*up)
    if r.returncode: raise SystemExit(r.stderr)
    procs = []
    try:
        procs.append(subprocess.Popen([B, "exec", "--id", rid, "g0", "taskset", "-c", "0", B, "perf", "server"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        procs.append(subprocess.Popen([B, "exec", "--id", rid, "remote", "taskset", "-c", "1", B, "perf", "server"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(0.5)
        sh(B, "exec", "--id", rid, "remote", B, "perf", "ping", "10.77.0.10", "--count", "1")
        sh(B, "exec", "--id", rid, "g1", B, "perf", "ping", "10.77.0.1", "--count", "1")
        flood = None
        if sc != "alone":
            cpu = sc[-1]
            cmd = ["udp-stream", "10.77.0.1", "--size", "18", "--duration", str(secs + 2)] if sc.startswith("udp") else ["burn", "--duration", str(secs + 2)]
            flood = subprocess.Popen([B, "exec", "--id", rid, "g1", "taskset", "-c", cpu, B, "perf"] + cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            time.sleep(0.5)
        st0 = json.loads(sh(B, "stat", "--json", "--id", rid).stdout)
        s = sh(B, "exec", "--id", rid, "remote", "taskset", "-c", "1", B, "perf", "stream", "10.77.0.10", "--duration", str(secs))
        v = json.loads(s.stdout[s.stdout.index("{"):])
        st = json.loads(sh(B, "stat", "--json", "--id", rid).stdout)
        sent = None
        if flood:
            o = flood.communicate()[0]
            if sc.startswith("udp") and "{" in o:
                sent = json.loads(o[o.index("{"):])
        def loops(x): return x.get("daemon", {}).get("loop_passes", 0)
        rec = {"mode": MODE, "up_args": UP_ARGS, "lro": lro, "scenario": sc, "g0_mbps": v["receiver"]["mbps"], "mismatches": v["receiver"]["mismatches"],
               "udp": None if not sent else {k: sent.get(k) for k in ("sender", "receiver")},
               "relay": st.get("relay"), "vif2": next((x for x in st.get("vifs", []) if x.get("domid") == 2), None), "loop_passes": loops(st) - loops(st0),
               "daemon_run_ms": st.get("daemon_cpu", {}).get("run_ms")}
        out.write(json.dumps(rec) + "\n"); out.flush()
        print(json.dumps({k: rec[k] for k in ("lro", "scenario", "g0_mbps", "mismatches", "loop_passes")}), flush=True)
    finally:
        for p in procs:
            p.kill()
        sh(B, "down", "--id", rid)
for i in range(reps):
    for sc in ("alone", "burn-cpu0", "udp-cpu0", "burn-cpu1", "udp-cpu1"):
        one(sc, "7f" + str(i % 10))
