"""Where the PSH segments end, per flow: the end offset modulo 65536 (a write is 64 KiB, so
every write's end falls on one residue per flow); the share of PSH at that flow's most common
residue, and the spacing of PSH in bytes."""
import sys, collections
from segs import segments
ends = collections.defaultdict(list)
for s in segments(sys.argv[1]):
    if s.psh:
        ends[(s.dst, s.sport, s.dport)].append((s.ts, (s.seq + s.payload) & 0xffffffff, s.payload))
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
