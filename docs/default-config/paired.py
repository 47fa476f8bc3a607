#!/usr/bin/env python3
"""Paired TCP_RR on one port-gro testbed and one connection: variant A (as built: threaded NAPI,
SCHED_FIFO 50, CPU 0) against variant B switched live at the port between 0.1 s slices."""
import subprocess, sys, json, math, statistics as st, os, time, glob
P = "/tmp/rrx/pvnet-base"
rid, variant, rounds, sl = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
dev = f"pv{rid}p"; dd = f"pvnet-{rid}-dd"
def sh(c): subprocess.run(c, shell=True, check=True)
def napi_pids():
    out = []
    for p in glob.glob("/proc/[0-9]*/comm"):
        try:
            if open(p).read().startswith(f"napi/{dev}-"): out.append(p.split("/")[2])
        except OSError: pass
    return out
def pin():
    for pid in napi_pids():
        sh(f"taskset -p 1 {pid} >/dev/null; chrt -f -p 50 {pid}")
def set_variant(on):
    if variant == "threaded":   # B: NAPI in the softirq of the CPU that scheduled it (the sender's)
        sh(f"ip netns exec {dd} sh -c 'echo {0 if on else 1} > /sys/class/net/{dev}/threaded'")
        if not on: pin()
    elif variant == "rps":      # B: no RPS on the port (the NAPI thread already runs on CPU 0)
        sh(f"ip netns exec {dd} sh -c 'echo {0 if on else 1} > /sys/class/net/{dev}/queues/rx-0/rps_cpus'")
    elif variant == "none":     # A/A
        pass
c = subprocess.Popen(["nice","-n","-20","taskset","-c","1","ip","netns","exec",f"pvnet-{rid}-remote",P,"perf","rr","10.77.0.10","--port","5201","--stepped","--duration",str(rounds*2*sl)],
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
def slice_():
    c.stdin.write(f"{sl}\n"); c.stdin.flush(); d=json.loads(c.stdout.readline()); d["tps"]=d["transactions"]/d["seconds"]; d["p50_us"]=0; return d
ratios=[]; a_t=[]; b_t=[]; a_p=[]; b_p=[]
for r in range(rounds):
    res={}
    for on in ((False, True) if r % 2 == 0 else (True, False)):
        set_variant(on); res[on] = slice_()
    set_variant(False)
    a, b = res[False], res[True]
    if a["tps"] > 0 and b["tps"] > 0:
        ratios.append(b["tps"]/a["tps"]); a_t.append(a["tps"]); b_t.append(b["tps"]); a_p.append(a["p50_us"]); b_p.append(b["p50_us"])
c.stdin.close(); c.wait()
logs=[math.log(x) for x in ratios]; k=16; n=len(logs)//k
bm=[st.mean(logs[i*n:(i+1)*n]) for i in range(k)]
m=st.mean(bm); se=st.stdev(bm)/math.sqrt(k); t=2.131
print(json.dumps({"variant":variant,"rounds":len(ratios),"A_tps_median":round(st.median(a_t)),"B_tps_median":round(st.median(b_t)),
 "B_over_A_median":round(st.median(ratios),4),"B_over_A_geomean":round(math.exp(m),4),"ci95":[round(math.exp(m-t*se),4),round(math.exp(m+t*se),4)],
 "load":open("/proc/loadavg").read().split()[0]}))
