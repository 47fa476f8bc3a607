#!/bin/bash
# N guests, fresh streams under adaptive: tcpdump on the remote host's own interface (what its
# TCP hands the device, before any segmentation: TSO/GSO skbs) for 1 s, 2 s in; and at the port.
set -u
P=${PVNET:-pvnet}; ID=a1b; N=${1:-16}; MODE=${2:-xen}; D=4; O=${OUT:-/tmp/psc}
mkdir -p $O
$P up --id $ID --guests $N --lro ${POL:-adaptive} --mode $MODE >$O/up.log 2>&1 || { cat $O/up.log; exit 1; }
for i in $(seq 0 $((N-1))); do (taskset -c 0 $P exec --id $ID g$i $P perf server >/dev/null 2>&1 &); done
sleep 1
IF=$($P exec --id $ID remote ip -o link show | awk -F': ' '$2!="lo"{print $2}' | cut -d@ -f1 | head -1)
$P exec --id $ID remote ethtool -k $IF > $O/ethtool.txt 2>&1
[ -n "${RTTLOG:-}" ] && $P exec --id $ID remote sysctl -w net.ipv4.tcp_tso_rtt_log=$RTTLOG
$P stat --id $ID --json > $O/stat0.json
for i in $(seq 0 $((N-1))); do
  taskset -c 1 $P exec --id $ID remote $P perf stream 10.77.0.$((10+i)) --duration $D ${PACE:+--pace $PACE} > $O/s$i.json 2>&1 &
done
sleep 2
$P exec --id $ID remote ss -tmi state established > $O/ss.txt
[ -z "${NOCAP:-}" ] && $P exec --id $ID remote timeout 1 tcpdump -i $IF -Q out -s 96 -w $O/remote.pcap 'tcp and dst net 10.77.0.0/24' > $O/tcpdump.log 2>&1
wait
$P stat --id $ID --json > $O/stat1.json
$P down --id $ID >/dev/null 2>&1
echo "if $IF"; cat $O/tcpdump.log | tail -3
