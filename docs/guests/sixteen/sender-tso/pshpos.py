"""Where the PSH segments end, per flow: the end offset modulo 65536 (a write is 64 KiB, so
every write's end falls on one residue per flow); the share of PSH at that flow's most common
residue, and the spacing of PSH in bytes."""
import struct, sys, collections
f = open(sys.argv[1], 'rb'); gh = f.read(24)
le = gh[:4] in (b'\xd4\xc3\xb2\xa1', b'\x4d\x3c\xb2\xa1')
ends = collections.defaultdict(list)
while True:
    h = f.read(16)
    if len(h) < 16: break
    ts, tu, incl, orig = struct.unpack('<IIII' if le else '>IIII', h)
    p = f.read(incl)
    if len(p) < 54 or p[12:14] != b'\x08\x00' or p[23] != 6: continue
    ihl = (p[14] & 15) * 4; tot = struct.unpack('>H', p[16:18])[0]
    t = 14 + ihl; doff = (p[t + 12] >> 4) * 4; pay = tot - ihl - doff
    if pay <= 0 or not p[t + 13] & 8: continue
    seq = struct.unpack('>I', p[t + 4:t + 8])[0]
    ends[(p[30:34], p[t:t + 4])].append((ts + tu / 1e6, (seq + pay) & 0xffffffff, pay))
tot_at = tot = 0; gaps = []; small = 0
for fl, es in ends.items():
    c = collections.Counter(e % 65536 for _, e, _ in es)
    r, k = c.most_common(1)[0]
    tot_at += k; tot += len(es)
    small += sum(1 for *_, pay in es if pay < 1448)
    s = sorted(e for _, e, _ in es)
    gaps += [(b - a) for a, b in zip(s, s[1:]) if 0 < b - a < 1 << 30]
gaps.sort()
q = lambda x: gaps[int(x * (len(gaps) - 1))]
print(f'PSH {tot}: at a write end {tot_at} ({100*tot_at/tot:.0f} %); on a short segment {small}; '
      f'spacing in MSS p10 {q(.1)/1448:.1f} p50 {q(.5)/1448:.1f} p90 {q(.9)/1448:.1f}')
hist = collections.Counter(min(round(g / 1448), 60) for g in gaps)
print('spacing (MSS: count):', ' '.join(f'{k}:{hist[k]}' for k in sorted(hist)))
