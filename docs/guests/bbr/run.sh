#!/bin/bash
# BBR's state at the remote host's senders, one guest streaming and then eight, on one testbed.
# usage: run.sh ID LRO(off|adaptive) MODE(xen|relay)
set -u
P=/work/main/target/release/pvnet
ID=$1; LRO=$2; MODE=$3; OUT=/work/runs/bbr/$ID; mkdir -p $OUT
$P up --id $ID --guests 8 --mode $MODE $( [ $MODE = xen ] && echo --lro $LRO ) --sender-cpu 1 > $OUT/up.log 2>&1 || { cat $OUT/up.log; exit 1; }
TO=""
for i in 0 1 2 3 4 5 6 7; do
  (setsid $P exec --id $ID g$i taskset -c 0 $P perf server --bind 0.0.0.0:5500 > /dev/null 2>&1 &)
  TO="$TO --to 10.77.0.$((10+i)):5500"
done
sleep 1
mkfifo $OUT/ctl
$P exec --id $ID remote taskset -c 1 $P perf streams $TO < $OUT/ctl > $OUT/slices.jsonl 2> $OUT/streams.err &
SP=$!
exec 3> $OUT/ctl
sample() { # label seconds
  local end=$((SECONDS+$2))
  while [ $SECONDS -lt $end ]; do
    echo "### $1 $(date +%s.%N)" >> $OUT/ss.txt
    $P exec --id $ID remote ss -tin state established dport = :5500 >> $OUT/ss.txt 2>&1
    sleep 0.5
  done
}
for r in 1 2 3; do
  echo "1 6 0" >&3; sleep 1.2; sample one-$r 5
  echo "1 6 all" >&3; sleep 1.2; sample all-$r 5
done
exec 3>&-
wait $SP; echo "streams rc=$?" >> $OUT/streams.err
$P down --id $ID >> $OUT/up.log 2>&1
