#!/usr/bin/env bash
# ECN marking at the port's backlog, an experiment (docs/guest-scaling.md, "ECN at the port's
# backlog"). Run as root from the repository's root with ce.patch applied and built
# (`git apply docs/guests/ecn/ce.patch && cargo build --release`), and cubic allowed in the
# namespaces (`echo "reno bbr cubic" > /proc/sys/net/ipv4/tcp_allowed_congestion_control`;
# put the old list back after). The patch's PVNET_EXP_CC and PVNET_EXP_ECN set the remote
# host's congestion control and tcp_ecn for the standing testbeds' senders only; PVNET_EXP_CE
# marks CE once that many frames wait over all the port's receive queues.
# Two passes of: no marking, CE at 512, CE at 2048; `xen`, 1 and 8 guests. Output: $OUT/<v>-<pass>.
set -u
out_dir=${OUT:-/tmp/ce}
mkdir -p "$out_dir"
for pass in 1 2; do
  for v in off 512 2048; do
    if [ $v = off ]; then E=""; else E="PVNET_EXP_CE=$v"; fi
    out=$out_dir/$v-$pass
    echo "== $v pass $pass $(date -u +%T)"
    env $E PVNET_EXP_CC=cubic PVNET_EXP_ECN=1 ./target/release/pvnet bench --sweep guests --configs xen \
      --sweep-values 1,8 --reps 1 --duration 2 --paired-rounds 0 --scaling-rounds 48 --scaling-testbeds 6 \
      --out "$out" > "$out.log" 2>&1 || echo "failed: $out"
  done
done
echo "== done $(date -u +%T)"
