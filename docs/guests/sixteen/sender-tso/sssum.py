"""Medians over a `ss -tmi` sample of the senders' sockets: rwnd-limited share, cwnd, pacing rate, unsent bytes, snd_wnd."""
import re, sys, statistics as st
txt = open(sys.argv[1]).read()
def med(pat):
    v = [float(m) for m in re.findall(pat, txt)]
    return round(st.median(v)) if v else None
rl = [float(x) for x in re.findall(r'rwnd_limited:\d+ms\(([\d.]+)%\)', txt)]
sl = [float(x) for x in re.findall(r'sndbuf_limited:\d+ms\(([\d.]+)%\)', txt)]
n = len(re.findall(' cwnd:', txt))
cw, pr, ns, sw = med(r' cwnd:(\d+)'), med(r'pacing_rate ([\d.]+)Mbps'), med(r'notsent:(\d+)'), med(r'snd_wnd:(\d+)')
print(f"sockets {n}; rwnd-limited median {st.median(rl + [0]*(n-len(rl))):.1f} % of busy time; sndbuf-limited {st.median(sl + [0]*(n-len(sl))):.1f} %; "
      f"cwnd {cw}; pacing {pr} Mbit/s; notsent {ns} B; snd_wnd {sw} B")
