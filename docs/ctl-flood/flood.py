#!/usr/bin/env python3
"""Usage: flood.py ATTACH_SOCKET SECONDS
Takes an attached domain's control socket (as an external frontend does, from the daemon's
attach socket) and sends xenstore reads on it without pause for SECONDS, never reading a
reply. Prints how many it sent."""
import array, json, socket, sys, time

path, secs = sys.argv[1], float(sys.argv[2])
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect(path)
_, anc, _, _ = s.recvmsg(65536, socket.CMSG_SPACE(4 * 8))
fds = array.array("i")
for _, _, data in anc:
    fds.frombytes(data[: len(data) - len(data) % 4])
ctl = socket.socket(fileno=fds[0])
req = json.dumps({"Xs": {"Read": {"path": "/local/domain/2/name"}}}).encode()
end, n = time.monotonic() + secs, 0
try:
    while time.monotonic() < end:
        for _ in range(100):
            ctl.send(req)
            n += 1
except OSError:
    pass  # the run went down
print(n)
