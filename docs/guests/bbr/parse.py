"""The streaming flows' BBR state from `ss -tin` samples (ss.txt of run.sh), per state of the
path: `one` where guest 0's flow alone had data in flight, `all` where all eight had, with the
sum over the flows per sample. A sample is classed by what it saw, not by the phase label
run.sh wrote: the slices (7 s each) outran the script's sampling phases, so the labels drifted
into the neighbouring slice (the counts printed first)."""
import json, re, sys, statistics as st
for d in sys.argv[1:]:
    txt = open(f"{d}/ss.txt").read()
    rows = {"one": [], "all": []}
    sums = []
    labels = {"one": [0, 0, 0], "all": [0, 0, 0]}  # label -> samples seeing 1, 8, other
    for block in txt.split("### ")[1:]:
        label = block.split()[0].split("-")[0]
        flows = [(int(g) - 10, info) for g, info in
                 re.findall(r"10\.77\.0\.(\d+):5500\s*\n\s*(.*)", block)]
        sending = [f for f in flows if re.search(r"unacked:(\d+)", f[1])]
        phase = {1: "one", 8: "all"}.get(len(sending))
        labels[label][{"one": 0, "all": 1, None: 2}[phase]] += 1
        if phase is None or (phase == "one" and sending[0][0] != 0):
            continue
        tot = 0
        for guest, info in sending:
            g = lambda k: re.search(k, info)
            unacked = int(g(r"unacked:(\d+)").group(1)) * 1448
            tot += unacked
            bw = float(g(r"bw:(\d+)bps").group(1)) / 8
            mrtt = float(g(r"mrtt:([\d.]+)").group(1)) / 1e3
            rtt = float(g(r"rtt:([\d.]+)/").group(1)) / 1e3
            cwnd = int(g(r"cwnd:(\d+)").group(1)) * 1448
            rows[phase].append((guest, bw, mrtt, rtt, cwnd, unacked))
        if phase == "all":
            sums.append(tot)
    for label, (n1, n8, other) in labels.items():
        print(f"{d} samples labelled {label}: {n1} saw one flow sending, {n8} eight, {other} other")
    for phase, r in rows.items():
        med = lambda i: st.median(x[i] for x in r)
        print(f"{d} {phase}: {len(r)} flow samples; per flow: BBR bw {med(1)*8/1e9:.2f} Gbit/s, "
              f"mrtt {med(2)*1e3:.3f} ms, srtt {med(3)*1e3:.2f} ms, cwnd {med(4)/1e3:.0f} kB, "
              f"in flight {med(5)/1e3:.0f} kB; cwnd/(2*bw*mrtt) {st.median(x[4]/(2*x[1]*x[2]) for x in r):.0f}, "
              f"cwnd/(bw*100ms) {st.median(x[4]/(x[1]*0.1) for x in r):.2f}")
    print(f"{d} all: in flight over the eight flows, median of samples {st.median(sums)/1e6:.2f} MB")

# The slices' rates: one guest against all eight (6-s slices, each after 1 s to settle).
for d in sys.argv[1:]:
    sl = [json.loads(l) for l in open(f"{d}/slices.jsonl") if l.startswith('{"active"')]
    one = [sum(s["bytes"]) * 8 / s["seconds"] / 1e6 for s in sl if len(s["active"]) == 1]
    al = [sum(s["bytes"]) * 8 / s["seconds"] / 1e6 for s in sl if len(s["active"]) == 8]
    print(f"{d}: one guest {[round(x) for x in one]} Mbit/s, eight {[round(x) for x in al]}, "
          f"eight / one {[round(a / o, 3) for o, a in zip(one, al)]}")
