#!/bin/bash
cd /tmp/tclone
for b in grant_e2e hvm e2e many scaling jumbo consolidation gro lro soak hostile restart switch; do
  bin=$(ls target/release/deps/$b-* | grep -v '\.d$' | head -1)
  for t in $($bin --list 2>/dev/null | grep ': test$' | sed 's/: test$//'); do
    r=$(/work/runs/cpuwrap.sh $bin "$t" --exact)
    echo "$b $t $r"
  done
done
