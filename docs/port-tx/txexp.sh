#!/bin/bash
# usage: txexp.sh ID SNDBUF both|alone
P=/work/main/target/release/pvnet; ID=$1
PVNET_SNDBUF=$2 $P up --id $ID --guests 2 >/dev/null 2>&1 || { echo up failed; exit 1; }
rt(){ ip netns exec pvnet-$ID-$1 awk '/^Tcp:/{n++; if(n==1){for(i=1;i<=NF;i++) if($i=="RetransSegs") k=i} else print $k}' /proc/net/snmp; }
ip netns exec pvnet-$ID-remote taskset -c 1 $P perf server --once --bind 0.0.0.0:5301 >/dev/null 2>&1 &
[ "$3" = both ] && { ip netns exec pvnet-$ID-g0 taskset -c 0 $P perf server --once --bind 0.0.0.0:5201 >/dev/null 2>&1 & }
sleep 0.5
[ "$3" = both ] && { ip netns exec pvnet-$ID-remote taskset -c 1 $P perf stream 10.77.0.10 --port 5201 --duration 6 > /tmp/in.$ID.json & }
ip netns exec pvnet-$ID-g1 taskset -c 0 $P perf stream 10.77.0.1 --port 5301 --duration 6 > /tmp/out.$ID.json
wait
o=$(python3 -c 'import json; d=json.load(open("/tmp/out.'$ID'.json")); print(round(d["receiver"]["mbps"]), d["sent"]==d["receiver"]["bytes"])')
i=$([ "$3" = both ] && python3 -c 'import json; d=json.load(open("/tmp/in.'$ID'.json")); print(round(d["receiver"]["mbps"]))')
wb=$($P stat --id $ID --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["pnic"]["tx_would_block"], d["daemon"]["pnic_send_errors"])')
echo "sndbuf=$2 $3: out_mbps,intact=$o in_mbps=$i g1_retrans=$(rt g1) would_block,send_errors=$wb"
$P down --id $ID >/dev/null
