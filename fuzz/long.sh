#!/usr/bin/env bash
# Long fuzzing runs (issue 22: 10^7 executions per target, outside CI), one target after the
# other, one process, at nice 19: never -jobs/-fork, the machine is shared.
#
# Built without AddressSanitizer (`-s none`, into target/long/ so the CI build is left alone):
# 3-6x fewer cycles per execution (docs/fuzzing.md). Every harness assertion, bounds check and
# overflow check stays; what is given up is ASan's watch over the documented unsafe copies
# (a heap overflow there goes unnoticed unless it crashes). CI (ci.sh) keeps ASan.
#
# Each run starts from a copy of corpus/<target>/ (the committed corpus is left as it is) and
# writes its log to long/<target>.log; a crash leaves its reproducer in long/artifacts/<target>/.
#
# Usage: bash long.sh [TARGET...]   (default: every target)
# Environment: RUNS (default 10000000) executions per target; CONTINUE=1 starts from the corpus
# a previous long run left in long/corpus-<target>/ (to finish a run that was cut short: set
# RUNS to what it still lacks). Never stop a run with SIGSTOP: libFuzzer counts the stop into
# the unit's time and ends the run with a spurious timeout.
set -euo pipefail
cd "$(dirname "$0")"

runs=${RUNS:-10000000}
targets=${*:-$(cargo fuzz list)}
cargo +nightly fuzz build -s none --target-dir target/long
bin=target/long/x86_64-unknown-linux-gnu/release
mkdir -p long
for t in $targets; do
    mkdir -p "long/artifacts/$t"
    if [ "${CONTINUE:-0}" = 1 ] && [ -d "long/corpus-$t" ]; then
        from="long/corpus-$t (continued)"
    else
        rm -rf "long/corpus-$t"
        mkdir -p "long/corpus-$t"
        cp "corpus/$t"/* "long/corpus-$t/"
        from="corpus/$t"
    fi
    cp -f "long/$t.log" "long/$t.log.prev" 2>/dev/null || true
    echo "== $t: $runs executions from $from, started $(date -u +%FT%TZ)"
    status=0
    nice -n 19 "$bin/$t" "long/corpus-$t" -runs="$runs" -rss_limit_mb=2048 -timeout=20 \
        -print_final_stats=1 -artifact_prefix="long/artifacts/$t/" >"long/$t.log" 2>&1 || status=$?
    echo "== $t: exit $status, ended $(date -u +%FT%TZ)"
    grep -aE '^#[0-9]+\s+DONE|^stat::' "long/$t.log" || true
done
