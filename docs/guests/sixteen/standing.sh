#!/bin/bash
# 16 guests, adaptive; one verified stream per guest; slices with 1, 8, 16 guests streaming;
# lro stat snapshots between them. Args: lro policy (default adaptive)
set -u
P=${PVNET:-pvnet}; ID=a16; POL=${1:-adaptive}; N=${2:-16}
$P up --id $ID --guests $N --lro $POL >/tmp/g16x-up.log 2>&1 || { cat /tmp/g16x-up.log; exit 1; }
for i in $(seq 0 $((N-1))); do
  (taskset -c 0 $P exec --id $ID g$i $P perf server >/dev/null 2>&1 &)
done
sleep 1
TO=""; for i in $(seq 0 $((N-1))); do TO="$TO --to 10.77.0.$((10+i)):5201"; done
EIGHT=$(seq -s, 0 7)
mkfifo /tmp/g16x-fifo
(taskset -c 1 $P exec --id $ID remote $P perf streams $TO < /tmp/g16x-fifo > /tmp/g16x-streams.out 2>&1 &)
exec 3>/tmp/g16x-fifo
snap() { $P stat --id $ID --json > /tmp/g16x-stat-$1.json; }
snap 0
echo "0.3 3 0" >&3; sleep 3.8; snap 1
echo "0.3 3 $EIGHT" >&3; sleep 3.8; snap 8
echo "0.3 3 all" >&3; sleep 3.8; snap 16
exec 3>&-
sleep 2
$P down --id $ID >/dev/null 2>&1; rm -f /tmp/g16x-fifo
cat /tmp/g16x-streams.out | cut -c1-300
