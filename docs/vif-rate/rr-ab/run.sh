#!/bin/bash
# TCP_RR alone, bd4da07 (old) against the new binary, alternating: `up --lro off` (the `xen`
# configuration), a server in g0, 4 s of 1-byte transactions from the remote host on CPU 1.
D=/work/runs/rr-ab
for i in 1 2 3 4 5 6; do
  for v in old new; do
    if [ $v = old ]; then B=/tmp/oldbd/target/release/pvnet; else B=/work/main/target/release/pvnet; fi
    id=$(printf '%x' $((0xa000 + i * 2 + ( $( [ $v = new ] && echo 1 || echo 0 ) ))))
    $B up --id $id --lro off > /dev/null || exit 1
    $B exec --id $id g0 $B perf server --once > /dev/null 2>&1 &
    sleep 0.7
    r=$($B exec --id $id remote taskset -c 1 $B perf rr 10.77.0.10 --duration 4)
    echo "{\"v\": \"$v\", \"i\": $i, \"rr\": $r}"
    wait
    $B down --id $id > /dev/null
  done
done
