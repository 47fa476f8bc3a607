#!/bin/bash
# every 0.5 s: the bench's current step, and the senders' bytes in flight (sum of unacked x mss)
log=$1; out=$2
while [ ! -f /work/runs/s30/chain.done ]; do
  step=$(tail -1 $log 2>/dev/null | sed 's/.*\] //; s/ |.*//')
  ns=$(ip netns list | awk '/-remote/{print $1; exit}')
  if [ -n "$ns" ]; then
    ip netns exec $ns ss -tin state established 2>/dev/null | python3 -c "
import sys,re
t=sys.stdin.read()
un=[int(x) for x in re.findall(r'unacked:(\d+)',t)]
cw=[int(x) for x in re.findall(r'cwnd:(\d+)',t)]
rtt=[float(x) for x in re.findall(r' rtt:([\d.]+)/',t)]
n=len(rtt)
print('$(date +%s.%N)'[:14], '$step'.replace(' ','_'), n, sum(un), sum(cw), round(sum(rtt)/max(n,1),2))" >> $out
  fi
  sleep 0.5
done
