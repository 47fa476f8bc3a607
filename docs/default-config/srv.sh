#!/bin/bash
P=${P:-/tmp/rrx/pvnet-base}
for id in "$@"; do taskset -c 0 ip netns exec pvnet-$id-g0 $P perf server --bind 0.0.0.0:5201 >/dev/null 2>&1 & echo $! >> /tmp/rrx/srv.pids; done
