#!/usr/bin/env python3
"""Driver-domain and guest CPU per byte and per packet of netback's grant mechanisms, end to
end (docs/premapped-static.md). As root, from the repository, after `cargo build --release`:

    python3 docs/premapped-static/measure.py [rounds] [seconds] [mechanisms...]

For each round, for each mechanism (interleaved, so the machine's drift spreads over all):
`pvnet up --guests 1 --grant M --guest-gso off` and `gso_max_segs 1` on the guest's and the
remote host's interfaces (no GSO anywhere: every packet on the rings one MTU-sized frame, as at
MTU 1500 without offloads), a verifying TCP stream remote -> g0 (RX) and g0 -> remote (TX) for `seconds` each;
around each stream the CPU time (ns, /proc/PID/task/*/schedstat) of the daemon (the driver
domain) and of the guest's netfront process, and the vif's packet and byte counters. Prints
one JSON line per measurement and a median table.
"""
import json, os, subprocess, sys, time, statistics

PVNET = os.path.abspath("target/release/pvnet")
MHZ = float(next(l.split(":")[1] for l in open("/proc/cpuinfo") if l.startswith("cpu MHz")))


def sh(*args, **kw):
    return subprocess.run([PVNET, *args], capture_output=True, text=True, **kw)


def cpu_ns(pid):
    total = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(open(f"/proc/{pid}/task/{t}/schedstat").read().split()[0])
        except OSError:
            pass
    return total


def vif(run_id):
    st = json.loads(sh("stat", "--id", run_id, "--json").stdout)
    return st["vifs"][0]["netback"]


def stream(run_id, src, dst, addr, secs):
    srv = subprocess.Popen([PVNET, "exec", "--id", run_id, dst, PVNET, "perf", "server", "--once"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(0.7)
    o = sh("exec", "--id", run_id, src, PVNET, "perf", "stream", addr, "--duration", str(secs))
    srv.wait(timeout=30)
    v = json.loads(o.stdout)
    assert v["receiver"]["mismatches"] == 0, v
    return v


def measure(run_id, info, direction, secs):
    dd, guest = info["pid"], info["guest_pids"][0]
    b = vif(run_id)
    c0 = (cpu_ns(dd), cpu_ns(guest))
    if direction == "rx":
        stream(run_id, "remote", "g0", "10.77.0.10", secs)
    else:
        stream(run_id, "g0", "remote", "10.77.0.1", secs)
    c1 = (cpu_ns(dd), cpu_ns(guest))
    a = vif(run_id)
    pk, by = f"{direction}_packets", f"{direction}_bytes"
    pkts, byts = a[pk] - b[pk], a[by] - b[by]
    cyc = lambda ns: ns * MHZ / 1e3
    dd_c, g_c = cyc(c1[0] - c0[0]), cyc(c1[1] - c0[1])
    return {
        "dir": direction, "packets": pkts, "bytes": byts,
        "dd_per_byte": dd_c / byts, "guest_per_byte": g_c / byts,
        "dd_per_packet": dd_c / pkts, "guest_per_packet": g_c / pkts,
        "mbps": byts * 8 / secs / 1e6,
    }


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    secs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    mechs = sys.argv[3:] or ["copy", "map", "persistent", "premapped", "static"]
    results = {}
    for r in range(rounds):
        for i, m in enumerate(mechs):
            run_id = f"e{r:01x}{i:01x}{os.getpid() & 0xff:02x}"
            up = sh("up", "--id", run_id, "--guests", "1", "--grant", m, "--guest-gso", "off")
            assert up.returncode == 0, up.stderr
            try:
                info = json.load(open(f"/run/pvnet/{run_id}/info.json"))
                for ns in [f"pvnet-{run_id}-g0", info["remote_ns"]]:
                    links = subprocess.run(["ip", "-n", ns, "-o", "link"], capture_output=True,
                                           text=True).stdout.splitlines()
                    for l in links:
                        name = l.split(": ")[1].split("@")[0]
                        if name != "lo":
                            subprocess.run(["ip", "-n", ns, "link", "set", name,
                                            "gso_max_segs", "1"], check=True)
                for d in ["rx", "tx"]:
                    x = measure(run_id, info, d, secs)
                    x.update(mech=m, round=r)
                    print(json.dumps(x), flush=True)
                    results.setdefault((m, d), []).append(x)
            finally:
                sh("down", "--id", run_id)
    print(f"\nmedians over {rounds} rounds, {secs} s streams, cycles at {MHZ:.0f} MHz")
    print(f"{'mech':<11}{'dir':<4}{'Mbit/s':>8}{'dd c/B':>8}{'gst c/B':>8}{'dd c/pkt':>10}{'gst c/pkt':>10}{'B/pkt':>7}")
    for (m, d), xs in results.items():
        med = lambda k: statistics.median(x[k] for x in xs)
        print(f"{m:<11}{d:<4}{med('mbps'):>8.0f}{med('dd_per_byte'):>8.2f}{med('guest_per_byte'):>8.2f}"
              f"{med('dd_per_packet'):>10.0f}{med('guest_per_packet'):>10.0f}{med('bytes') / med('packets'):>7.0f}")


if __name__ == "__main__":
    main()
