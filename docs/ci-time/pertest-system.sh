#!/bin/bash
# Every test of the `system` binary alone, timed with the share of both CPUs busy meanwhile:
#   cargo test --release -p pvnet --test system --no-run   # prints the binary's path
#   pertest-system.sh target/release/deps/system-<hash> > per-test.txt
if [[ ! -x ${1:-} ]]; then
    echo "usage: pertest-system.sh path/to/the/system/test/binary" >&2
    exit 2
fi
bin=$(realpath "$1")
here=$(dirname "$(realpath "$0")")
cd "$(dirname "$bin")/../../../crates/pvnet" || exit 1
for t in $("$bin" --list 2>/dev/null | grep ': test$' | sed 's/: test$//'); do
    echo "$t $("$here/cpuwrap.sh" "$bin" "$t" --exact)"
done
