"""Per flow: the TSO burst Linux's autosizing predicts from the sender's `ss -tmi` (pacing rate/1024
+ 64 KiB >> (min RTT in us >> tcp_tso_rtt_log), in segments of the MSS, at most 45) against the
median burst the capture saw (segments between gaps of more than 200 us) and its PSH spacing."""
import re, sys, collections, statistics as st
from segs import segments
d = sys.argv[1]; rttlog = int(sys.argv[2]) if len(sys.argv) > 2 else 9
pred = {}
for blk in re.split(r'\n(?=\S)', open(f'{d}/ss.txt').read()):
    m = re.search(r'10\.77\.0\.1:(\d+)\s+10\.77', blk)
    if not m: continue
    rate = re.search(r'pacing_rate ([\d.]+)([MG])bps', blk); mrtt = re.search(r'minrtt:([\d.]+)', blk)
    if not rate or not mrtt: continue
    bps = float(rate[1]) * (1e9 if rate[2] == 'G' else 1e6) / 8
    r = int(float(mrtt[1]) * 1000) >> rttlog
    b = bps / 1024 + (65536 >> r if r < 32 else 0)
    pred[int(m[1])] = (min(b / 1448, 45), float(mrtt[1]), bps * 8 / 1e6)
pk = collections.defaultdict(list)
for s in segments(f'{d}/remote.pcap'):
    pk[s.sport].append(s.ts)
rows = []
for port, ts in pk.items():
    sizes, n = [], 0
    for a, b in zip(ts, ts[1:]):
        n += 1
        if b - a > 200e-6: sizes.append(n); n = 0
    if port in pred and sizes:
        rows.append((pred[port][1], pred[port][2], pred[port][0], st.median(sizes)))
rows.sort()
print('min RTT ms | pacing Mbit/s | predicted burst | seen (median)')
for r in rows: print(f'{r[0]:6.3f} | {r[1]:7.0f} | {r[2]:5.1f} | {r[3]:5.1f}')
