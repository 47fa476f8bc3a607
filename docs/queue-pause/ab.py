#!/usr/bin/env python3
"""Usage: OLD=... NEW=... ab.py LRO REPS SECONDS OUT.jsonl [SCENARIOS]
A/B: g0's TCP stream beside a hostile g1 (two guests, a receive queue each).
scenarios: alone (g1 idle), flooded (g1 well-behaved, 1 Gbit/s of UDP at it), stopped (g1 SIGSTOPped, 1 Gbit/s UDP at it),
descheduled (g1 stopped 30 ms of every 40, 1 Gbit/s UDP at it)."""
import json, os, signal, subprocess, sys, time, threading
# OLD: a build of f851e06 (one gate for the whole port); NEW: a build of 2761386 or later.
bins = {"old": os.environ.get("OLD", "old/pvnet"), "new": os.environ.get("NEW", "target/release/pvnet")}
BLAST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "blast.py")
TAGS = os.environ.get("TAGS", "old,new").split(",")
lro = sys.argv[1]; reps = int(sys.argv[2]); secs = int(sys.argv[3]); out = open(sys.argv[4], "a")
scen = sys.argv[5].split(",") if len(sys.argv) > 5 else ["alone", "flooded", "stopped", "descheduled"]
def sh(*a, **k): return subprocess.run(list(a), capture_output=True, text=True, **k)
def one(tag, sc, rid):
    B = bins[tag]
    r = sh(B, "up", "--id", rid, "--guests", "2", "--lro", lro)
    if r.returncode: raise SystemExit(r.stderr)
    try:
        srv = [subprocess.Popen([B, "exec", "--id", rid, g, B, "perf", "server"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for g in ("g0", "g1")]
        time.sleep(0.5)
        for ip in ("10.77.0.10", "10.77.0.11"):
            sh(B, "exec", "--id", rid, "remote", B, "perf", "ping", ip, "--count", "1")
        g1 = json.load(open(f"/run/pvnet/{rid}/info.json"))["guest_pids"][1]
        stop = threading.Event()
        def toggler():
            if sc == "stopped":
                os.kill(g1, signal.SIGSTOP); stop.wait(); os.kill(g1, signal.SIGCONT)
            elif sc == "descheduled":
                while not stop.is_set():
                    os.kill(g1, signal.SIGSTOP); time.sleep(0.030); os.kill(g1, signal.SIGCONT); time.sleep(0.010)
                os.kill(g1, signal.SIGCONT)
        t = threading.Thread(target=toggler); t.start()
        flood = None
        if sc != "alone":
            flood = subprocess.Popen([B, "exec", "--id", rid, "remote", "python3", BLAST, "10.77.0.11", "1e9", str(secs + 1)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            time.sleep(0.3)
        s = sh(B, "exec", "--id", rid, "remote", B, "perf", "stream", "10.77.0.10", "--duration", str(secs))
        stop.set(); t.join()
        sent = flood.communicate()[0].split() if flood else None
        v = json.loads(s.stdout[s.stdout.index("{"):])
        st = json.loads(sh(B, "stat", "--json", "--id", rid).stdout)
        d = st["daemon"]
        rec = {"tag": tag, "lro": lro, "scenario": sc, "g0_mbps": v["receiver"]["mbps"], "mismatches": v["receiver"]["mismatches"],
               "deferred": d.get("pnic_deferred"), "queues_paused": d.get("pnic_queues_paused"), "stalls": d.get("pnic_stalls"),
               "flood_sent": sent, "g1_rx_packets": st["vifs"][1]["netback"].get("rx_packets"), "g1_rx_queue_full": st["vifs"][1]["netback"].get("rx_queue_full"),
               "leases_detached": d.get("leases_detached"), "sleeps_detaching": d.get("sleeps_detaching"), "sleeps_detaching_all": d.get("sleeps_detaching_all"), "aging_detached": d.get("aging_detached"), "kernel_drops": [q.get("kernel_drops") for q in st["pnic"].get("rx_queues", [])]}
        out.write(json.dumps(rec) + "\n"); out.flush()
        print(rec, flush=True)
    finally:
        for p in srv: p.kill()
        sh(B, "down", "--id", rid)
for i in range(reps):
    for sc in scen:
        for tag in (TAGS if i % 2 == 0 else TAGS[::-1]):
            one(tag, sc, "c0ffe" + str(i % 10))
