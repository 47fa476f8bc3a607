#!/bin/bash
bin=/work/main/target/release/deps/system-7748dca564fdd74c
cd /work/main/crates/pvnet
for t in $($bin --list 2>/dev/null | grep ': test$' | sed 's/: test$//'); do
  r=$(/work/runs/cpuwrap.sh $bin "$t" --exact)
  echo "$t $r"
done
