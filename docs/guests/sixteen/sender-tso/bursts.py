"""Per flow, split the data segments into bursts (a gap of more than 200 us before the next
segment of the flow); how many bursts end with PSH, how many PSH end a burst, burst sizes."""
import sys, collections
from segs import segments
pk = collections.defaultdict(list)
for s in segments(sys.argv[1]):
    pk[(s.sport, s.dport)].append((s.ts, s.psh))
bursts = end_psh = psh = psh_end = 0; sizes = []
for es in pk.values():
    n = 0
    for i, (t, ps) in enumerate(es):
        n += 1
        last = i + 1 == len(es) or es[i + 1][0] - t > 200e-6
        psh += ps
        if last:
            if i + 1 == len(es): break  # the capture's end cuts the burst
            bursts += 1; sizes.append(n); n = 0
            end_psh += ps
        psh_end += ps and last
sizes.sort()
print(f'bursts {bursts}, median {sizes[len(sizes)//2] if sizes else 0} segments; ending with PSH '
      f'{100*end_psh/max(bursts,1):.0f} %; PSH ending a burst {100*psh_end/max(psh,1):.0f} % of {psh}')
