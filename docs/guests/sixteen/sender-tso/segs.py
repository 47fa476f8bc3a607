"""The TCP data segments of a pcap (Ethernet, IPv4, snaplen >= 54), for the scripts beside it."""
import struct
from typing import Iterator, NamedTuple


class Seg(NamedTuple):
    ts: float      # capture time, s
    dst: bytes     # IPv4 destination
    sport: int
    dport: int
    seq: int
    payload: int   # bytes of data
    psh: bool


def segments(path: str) -> Iterator[Seg]:
    """Every segment that carries data, in capture order."""
    with open(path, 'rb') as f:
        gh = f.read(24)
        end = '<' if gh[:4] in (b'\xd4\xc3\xb2\xa1', b'\x4d\x3c\xb2\xa1') else '>'
        while True:
            h = f.read(16)
            if len(h) < 16:
                return
            ts, tu, incl, orig = struct.unpack(end + 'IIII', h)
            p = f.read(incl)
            if len(p) < 54 or p[12:14] != b'\x08\x00' or p[23] != 6:
                continue
            ihl = (p[14] & 15) * 4
            tot = struct.unpack('>H', p[16:18])[0]
            t = 14 + ihl
            doff = (p[t + 12] >> 4) * 4
            pay = (tot or orig - 14) - ihl - doff  # a TSO skb may carry IP total length 0
            if pay <= 0:
                continue
            sport, dport, seq = struct.unpack('>HHI', p[t:t + 8])
            yield Seg(ts + tu / 1e6, p[30:34], sport, dport, seq, pay, bool(p[t + 13] & 8))
