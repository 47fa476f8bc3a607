#!/usr/bin/env python3
"""Writes the seed corpora under fuzz/corpus/<target>/ (small, committed).

Seeds come from the unit tests' inputs: the captured frames of `crates/wire/src/fixtures.rs`
and the frame shapes of `crates/dd/tests/lro_common`, the messages of `crates/hv/src/ctl.rs`
and `crates/guest/src/proto.rs`, and, for the targets that read their input through
`arbitrary::Unstructured`, byte strings that encode the scenarios of the unit tests
(`lro_rules.rs`, `ring_path.rs`, the store tests, `differential.rs`'s fixed run) in the
order the targets consume them (one byte per small choice, `int_in_range` taking the value
modulo the range size, big-endian for 16-bit ranges).
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(bytes(data))


def csum(b):
    if len(b) % 2:
        b = b + b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


MAC_A = bytes([0x00, 0x16, 0x3E, 0x00, 0x00, 0x0A])
MAC_B = bytes([0x00, 0x16, 0x3E, 0x00, 0x00, 0x0B])
SYN4 = bytes.fromhex(
    "4500003c1af84000400 6f9af0a0909010a090902 8d2a0050f05a11f200000000a002faf0e1280000"
    "020405b40402080af0b6c5500000000001030 30a".replace(" ", ""))
UDP4 = bytes.fromhex(
    "450000216822400040 11ac950a0909010a090902d50d1388000dad5768656c6c6f".replace(" ", ""))
SYN6 = bytes.fromhex(
    "6009e66300280640fd000000000000000000000000000001fd000000000000000000000000000002"
    "b69600508a25601900000000a002fd20a1410000020405a00402080a421ecc66000000000103030a")


def eth(ethertype, ip):
    return MAC_A + MAC_B + struct.pack("!H", ethertype) + ip


def tcp4(seq, payload, flags=0x18, ip_opts=b""):
    src, dst = bytes([192, 0, 2, 1]), bytes([198, 51, 100, 7])
    opts = bytes([1, 1, 8, 10, 0, 0, 0x30, 0x39, 0xDE, 0xAD, 0xBE, 0xEF])
    tcp = struct.pack("!HHIIBBHHH", 40000, 5001, seq, 7, (32 // 4) << 4, flags, 501, 0, 0) + opts + payload
    c = csum(src + dst + struct.pack("!BBH", 0, 6, len(tcp)) + tcp)
    tcp = tcp[:16] + struct.pack("!H", c) + tcp[18:]
    hl = 20 + len(ip_opts)
    ip = struct.pack("!BBHHHBBH4s4s", 0x40 | hl // 4, 0, hl + len(tcp), 100, 0x4000, 64, 6, 0, src, dst) + ip_opts
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    return ip + tcp


def tcp6(seq, payload, ext=b"", first_nh=6):
    src = bytes.fromhex("fd000000000000000000000000000001")
    dst = bytes.fromhex("fd000000000000000000000000000002")
    tcp = struct.pack("!HHIIBBHHH", 40000, 5001, seq, 7, 5 << 4, 0x10, 501, 0, 0) + payload
    c = csum(src + dst + struct.pack("!I", len(tcp)) + b"\0\0\0\x06" + tcp)
    tcp = tcp[:16] + struct.pack("!H", c) + tcp[18:]
    ip = struct.pack("!IHBB", 0x60000000, len(ext) + len(tcp), first_nh, 64) + src + dst
    return ip + ext + tcp


# ---------------------------------------------------------------- wire
write("wire", "syn4", eth(0x0800, SYN4))
write("wire", "syn6", eth(0x86DD, SYN6))
write("wire", "udp4", eth(0x0800, UDP4))
write("wire", "data4_padded", eth(0x0800, tcp4(1000, b"hello world")) + b"\0" * 5)
write("wire", "data4_ipopts", eth(0x0800, tcp4(5, b"x" * 20, ip_opts=bytes([1, 1, 1, 0]))))
hbh = bytes([6, 0, 1, 4, 0, 0, 0, 0])  # hop-by-hop, PadN, next header TCP
write("wire", "data6_hbh", eth(0x86DD, tcp6(9, b"abcdef", ext=hbh, first_nh=0)))
write("wire", "vlan", MAC_A + MAC_B + bytes([0x81, 0x00, 0, 5, 0x08, 0x00]) + SYN4)
write("wire", "vnet_mac", bytes([1, 4, 66, 0, 0xA8, 5, 34, 0, 16, 0]) + b"00:16:3e:00:00:0a")

# ---------------------------------------------------------------- ctl (selector byte + JSON)
def ctl(name, sel, msg):
    write("ctl", name, bytes([sel]) + json.dumps(msg, separators=(",", ":")).encode())


ctl("from_xs_read", 0, {"Xs": {"Read": {"path": "/local/domain/1/device/vif/0/state"}}})
ctl("from_xs_watch", 0, {"Xs": {"Watch": {"path": "/local/domain/0/backend/vif/1/0", "token": "be"}}})
ctl("from_ready_fd", 0x80, "Ready")
ctl("from_failed", 0, {"Failed": "netfront: no rings"})
ctl("to_boot", 1, {"Boot": {"domid": 1, "mem_pages": 256, "grant_frames": 4,
                            "device_path": "/local/domain/1/device/vif/0", "evtchn_port": 3,
                            "ifname": "eth0", "ipv4": "10.0.0.2", "prefix": 24}})
ctl("to_watch", 1, {"Watch": {"path": "/local/domain/0/backend/vif/1/0/state", "token": "be"}})
ctl("xs_write", 2, {"Write": {"path": "/local/domain/1/device/vif/0/state", "value": "4"}})
ctl("reply_list", 3, {"List": ["state", "mac"]})
write("ctl", "garbage", b"\x00{\"Xs\":")

# ---------------------------------------------------------------- lro (Unstructured)
def lro_header(mode=0, policy=(0,), max_flows=3, mss=(2, 2, 2, 2), chains=(0, 1), queues=1,
               two_guests=False):
    b = [queues - 1] + [0] * 8  # receive queues, then the 4-tuple hash's salt (u64)
    b += [mode]
    b += list(policy)
    b += [max_flows - 1]
    b += [1 if two_guests else 0]  # flows 1 and 3 to a second guest
    b += list(mss)
    b += list(chains)
    return b


def frame(flow, kind, meta=0):
    return [0, flow, kind, meta]


# With one queue, the end of its poll at the clock's time (the choice of queue takes no byte).
END_POLL, EXPIRE = [9, 0], [13]


def end_poll(queue, at_newest=False):
    """The end of `queue`'s poll (of three), at its newest frame's time or the clock's."""
    return [9, queue, 1 if at_newest else 0]


def lag(queue, us):
    """Queue `queue`'s frames arrive `us` behind the clock (16-bit range: big-endian)."""
    return [14, 4, queue, us >> 8, us & 0xFF]


def resize(n):
    return [14, 5, n - 1]


def advance(us):
    return [11, us]


# lro_rules: a stream of in-order segments merges, flushed at the end of the poll.
write("lro", "stream4", lro_header() + sum([frame(0, 0) for _ in range(8)], []) + END_POLL)
# Two IPv4 and two IPv6 flows interleaved, PSH ends an aggregate, partial checksums.
write("lro", "interleaved", lro_header(policy=(1, 1)) + sum(
    [frame(f, 0, f % 3) for _ in range(4) for f in range(4)], []) + frame(2, 1) + END_POLL)
# Timeout policy: held across polls, leaves on expiry.
write("lro", "timeout", lro_header(policy=(2, 0, 100)) + sum([frame(1, 0) for _ in range(5)], [])
      + END_POLL + advance(120) + EXPIRE)
# Refusals: duplicate, gap, bad checksum, not TCP, SYN, pure ACK, FIN, CWR (lro_rules).
write("lro", "refusals", lro_header(mss=(0, 3, 5, 2)) + sum(
    [frame(0, k) for k in (0, 0, 3, 4, 7, 8, 6, 5, 13, 14, 0)], []) + END_POLL)
# Adaptive policy, page mode, small segments of a long IPv6 extension chain.
write("lro", "adaptive_v6", lro_header(mode=1, policy=(3,), mss=(3, 3, 3, 3), chains=(2, 2))
      + [3] + sum([frame(3, 0) for _ in range(6)], []) + END_POLL + advance(30)
      + sum([frame(3, 0) for _ in range(6)], []) + END_POLL)

# Three receive queues, two of them behind the clock, each poll ended at its newest frame or
# the clock, then the port down to one queue (the engines that go flush and keep their counts).
write("lro", "queues3", lro_header(policy=(3,), queues=3) + lag(1, 300) + lag(2, 40)
      + sum([frame(f, 0, f % 3) for _ in range(3) for f in range(4)], [])
      + end_poll(0) + end_poll(1, True) + end_poll(2) + advance(20)
      + sum([frame(f, 0) for f in range(4)], []) + end_poll(1) + resize(1) + END_POLL)

# Two guests in a full table of three (each capped at two): every new flow makes the table
# choose whose oldest aggregate leaves (the guest holding the most, the newcomer's on a tie).
write("lro", "two_guests", lro_header(policy=(1, 3), max_flows=3, two_guests=True) + sum(
    [frame(f, 0) for _ in range(3) for f in (1, 0, 2, 3)], []) + END_POLL)

# ---------------------------------------------------------------- xenstore (Unstructured)
WORDS = ["local", "domain", "0", "1", "2", "3", "backend", "vif", "device", "state", "a-b", "10"]
NO, YES = 0xFF, 0


def xs_path(components, prefix=True):
    b = [NO, YES if prefix else NO, len(components)]
    for c in components:
        b += [NO, WORDS.index(c)]
    return b


def xs(who, op, comps, extra=(), prefix=True):
    # who, path, op, extra (value/token choice), take events, no domain removal
    return [who] + xs_path(comps, prefix) + [op] + list(extra) + [YES, NO]


write("xenstore", "own_state", xs(1, 1, ["1", "device", "vif", "0", "state"], [NO, 2])
      + xs(1, 0, ["1", "device", "vif", "0", "state"]))
write("xenstore", "other_guest", xs(1, 1, ["2", "device", "vif", "0", "state"], [NO, 3])
      + xs(2, 3, ["1", "device"]) + xs(2, 4, ["1"]))
write("xenstore", "backend_watch", xs(1, 5, ["0", "backend", "vif", "1", "0"], [NO, 3])
      + xs(0, 1, ["0", "backend", "vif", "1", "0", "state"][:5], [NO, 2])
      + xs(0, 3, ["0", "backend"]) + xs(1, 7, ["0", "backend", "vif", "1", "0"], [YES]))
write("xenstore", "root_and_quota", xs(3, 4, [], prefix=False) + xs(3, 1, ["3", "a-b", "a-b", "a-b", "10"], [NO, 4])
      + xs(0, 3, ["3"]))

# ---------------------------------------------------------------- netback (Unstructured)
def nb_header(sg=1, gso=1, notify=1):
    return [sg, gso, gso, notify, 0]


def nb_tx(length, seed):
    return [0] + list(struct.pack("!H", length - 14)) + [seed]


def nb_rx_bufs(n):
    b = [6, n - 1]
    for i in range(n):
        b += [YES, YES, i % 3, NO] + list(struct.pack("<H", i))
    return b


def nb_enqueue(length, seed):
    return [10] + list(struct.pack("!H", length)) + [seed, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]


TX_POLL, RX_FLUSH, TAKE = [11, 63], [12], [13]
write("netback", "tx_three", nb_header() + nb_tx(60, 1) + nb_tx(1514, 2) + nb_tx(14, 3) + TX_POLL + TAKE)
write("netback", "rx_flush", nb_header() + nb_rx_bufs(4) + nb_enqueue(1514, 7) + nb_enqueue(60, 8)
      + RX_FLUSH + TAKE)
# ring_path: a producer index far ahead is fatal; netback then leaves the rings alone.
write("netback", "tx_overflow", nb_header() + nb_tx(60, 1) + [5, 2] + list(struct.pack("<I", 0x80000000))
      + TX_POLL + nb_rx_bufs(2) + nb_enqueue(60, 1) + RX_FLUSH + TX_POLL)
# A rate of 2000 bytes a millisecond: two of three frames in a window (the third waits for
# credit), the clock moved a millisecond, the third.
RATE_2000 = [14, NO] + list(struct.pack("!I", 1999))[1:] + [0, 0]
CLOCK_1MS = [15] + list(struct.pack("!I", 1_000_000))
write("netback", "tx_rate", nb_header() + RATE_2000 + [b for i in range(3) for b in nb_tx(1000, i)]
      + TX_POLL + TAKE + CLOCK_1MS + TX_POLL + TAKE)
# A TX request with a grant ref outside the table.
write("netback", "tx_bad_gref", nb_header() + [2, NO] + list(struct.pack("<IHHHH", 99999, 0, 0, 1, 60))
      + [1] + TX_POLL)

# ---------------------------------------------------------------- ne2000 (Unstructured)
CR = [0x21, 0x22, 0x62, 0xA2, 0xE2, 0x0A, 0x12, 0x1A, 0x26, 0x20, 0x61, 0x25]


def outb(port, value):
    if port == 0:
        return [0, 0, YES, CR.index(value)]
    return [0, 1, port - 1, value]


def ne_frame(dst_choice, length, seed):
    # length in 1400..=1600 (choice 1)
    return [24, dst_choice, 1, length - 1400, seed]


big = [YES]
for _ in range(10):
    big += ne_frame(0, 1514, 0x5A)
big += outb(0x03, 0x57) + ne_frame(0, 1514, 0x5A)
tx = []
for p, x in [(0x0A, 100), (0x0B, 0), (0x08, 0), (0x09, 0x40), (0, 0x12)]:
    tx += outb(p, x)
tx += [22, 64] + list(range(64))
for p, x in [(0x04, 0x40), (0x05, 64), (0x06, 0), (0, 0x26)]:
    tx += outb(p, x)
write("ne2000", "fixed_run", big + tx)
write("ne2000", "receive_read", [YES] + ne_frame(1, 1500, 3) + [0, 3, 7] + [20, 64] + [0, 4, 2])
write("ne2000", "no_init_reset", [NO] + [0, 6] + [0, 7, 0x1f, 2, 1, 2, 3, 4] + ne_frame(3, 1450, 9))
