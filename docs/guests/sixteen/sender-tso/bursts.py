"""Per flow, split the data segments into bursts (a gap of more than 200 us before the next
segment of the flow); how many bursts end with PSH, how many PSH end a burst, burst sizes."""
import struct, sys, collections
f = open(sys.argv[1], 'rb'); f.read(24)
pk = collections.defaultdict(list)
while True:
    h = f.read(16)
    if len(h) < 16: break
    ts, tu, incl, orig = struct.unpack('<IIII', h); p = f.read(incl)
    if len(p) < 54 or p[12:14] != b'\x08\x00' or p[23] != 6: continue
    ihl = (p[14] & 15) * 4; tot = struct.unpack('>H', p[16:18])[0]; t = 14 + ihl
    pay = tot - ihl - (p[t + 12] >> 4) * 4
    if pay > 0: pk[p[t:t + 4]].append((ts + tu / 1e6, bool(p[t + 13] & 8)))
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
