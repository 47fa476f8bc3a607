"""Per flow: data packets, their sizes, PSH packets, bytes; from a pcap (Ethernet, snaplen >= 54)."""
import sys, collections
from segs import segments
pk = collections.Counter(); psh = collections.Counter(); by = collections.Counter(); big = collections.Counter()
for s in segments(sys.argv[1]):
    fl = (s.dst, s.sport, s.dport)
    pk[fl] += 1; by[fl] += s.payload
    if s.payload > 1448: big[fl] += 1
    if s.psh: psh[fl] += 1
P = sum(pk.values()); S = sum(psh.values()); B = sum(by.values())
print(f'flows {len(pk)}; packets {P} (over one MSS: {sum(big.values())}); PSH {S}; '
      f'{B/1448/max(S,1):.1f} MSS of data per PSH; {B/65536/max(S,1):.2f} 64 KiB writes per PSH -> {S*65536/B:.2f} PSH per write')
