"""Per flow: data packets, their sizes, PSH packets, bytes; from a pcap (Ethernet, snaplen >= 54)."""
import struct, sys, collections
f = open(sys.argv[1], 'rb'); gh = f.read(24)
le = gh[:4] in (b'\xd4\xc3\xb2\xa1', b'\x4d\x3c\xb2\xa1')
pk = collections.Counter(); psh = collections.Counter(); by = collections.Counter(); big = collections.Counter()
while True:
    h = f.read(16)
    if len(h) < 16: break
    ts, tu, incl, orig = struct.unpack('<IIII' if le else '>IIII', h)
    p = f.read(incl)
    if len(p) < 54 or p[12:14] != b'\x08\x00' or p[23] != 6: continue
    ihl = (p[14] & 15) * 4; tot = struct.unpack('>H', p[16:18])[0]
    t = 14 + ihl; doff = (p[t + 12] >> 4) * 4; pay = tot - ihl - doff
    if tot == 0: pay = orig - 14 - ihl - doff  # TSO skb: IP total length may be 0
    if pay <= 0: continue
    fl = (p[26:30], p[30:34], p[t:t + 4])
    pk[fl] += 1; by[fl] += pay
    if pay > 1448: big[fl] += 1
    if p[t + 13] & 8: psh[fl] += 1
P = sum(pk.values()); S = sum(psh.values()); B = sum(by.values())
print(f'flows {len(pk)}; packets {P} (over one MSS: {sum(big.values())}); PSH {S}; '
      f'{B/1448/max(S,1):.1f} MSS of data per PSH; {B/65536/max(S,1):.2f} 64 KiB writes per PSH -> {S*65536/B:.2f} PSH per write')
