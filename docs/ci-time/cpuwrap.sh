#!/bin/bash
# usage: cpuwrap.sh cmd...   prints wall and system-wide busy fraction over the command
read -r _ a b c d e f g h _ < /proc/stat; t0=$((a+b+c+d+e+f+g+h)); i0=$((d+e)); s0=$(date +%s.%N)
"$@" > /tmp/cpuwrap.out 2>&1; rc=$?
read -r _ a b c d e f g h _ < /proc/stat; t1=$((a+b+c+d+e+f+g+h)); i1=$((d+e)); s1=$(date +%s.%N)
echo "rc=$rc wall=$(echo "$s1-$s0"|bc) busy=$(echo "scale=3;1-($i1-$i0)/($t1-$t0)"|bc)"
