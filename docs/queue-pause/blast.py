import socket, sys, time
dst, rate, secs = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
size = 1400; pps = rate / (size * 8)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
buf = b"\x5a" * size
t0 = time.monotonic(); sent = 0; fails = 0
while True:
    now = time.monotonic() - t0
    if now >= secs: break
    want = int(now * pps)
    while sent < want:
        try: s.sendto(buf, (dst, 9))
        except OSError: fails += 1
        sent += 1
    time.sleep(0.0005)
print(sent, fails)
