#!/bin/bash
# N guests, fresh streams under adaptive; the remote host's senders' sockets (`ss -tmi`) 1 s and
# 3 s in, and the remote namespace's TCP counters (nstat) over the streams; the LRO flush counters.
# Usage: cause.sh [N=16] [MODE=xen]   Env: WMEM="min default max" for the remote host first.
set -u
P=${PVNET:-pvnet}; ID=a19; N=${1:-16}; MODE=${2:-xen}; D=4; O=${OUT:-/tmp/pc}
mkdir -p $O
$P up --id $ID --guests $N --lro adaptive --mode $MODE >$O/up.log 2>&1 || { cat $O/up.log; exit 1; }
for i in $(seq 0 $((N-1))); do (taskset -c 0 $P exec --id $ID g$i $P perf server >/dev/null 2>&1 &); done
sleep 1
[ -n "${WMEM:-}" ] && $P exec --id $ID remote sysctl -w net.ipv4.tcp_wmem="$WMEM"
$P exec --id $ID remote nstat -n >/dev/null 2>&1
$P stat --id $ID --json > $O/stat0.json
for i in $(seq 0 $((N-1))); do
  taskset -c 1 $P exec --id $ID remote $P perf stream 10.77.0.$((10+i)) --duration $D > $O/s$i.json 2>&1 &
done
sleep 1; $P exec --id $ID remote ss -tmi state established > $O/ss1.txt
sleep 2; $P exec --id $ID remote ss -tmi state established > $O/ss3.txt
wait
$P exec --id $ID remote nstat -a > $O/nstat.txt 2>&1
$P stat --id $ID --json > $O/stat1.json
$P down --id $ID >/dev/null 2>&1
