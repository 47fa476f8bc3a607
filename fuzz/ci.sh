#!/usr/bin/env bash
# Short fuzzing run for CI: builds every cargo-fuzz target with nightly and runs each for a few
# seconds from its committed seed corpus (fuzz/corpus/<target>/; new inputs go to a scratch
# directory, the committed corpus is left as it is). Fails on any crash, leak, timeout or
# out-of-memory, leaving the reproducer in fuzz/artifacts/<target>/.
#
# Without a nightly toolchain or cargo-fuzz (and unable to install them) it says so loudly and
# exits 0: the fuzz targets are extra checks, the tests and lints are the gate.
#
# Usage: fuzz/ci.sh [build|run] (default: both). `build` only builds the targets; `run` runs
# them (building first if needed). .ci/run builds beside the tests and runs after them.
#
# Environment: FUZZ_SECONDS (default 5) per target; FUZZ_TARGETS (default: all) to pick some.
set -uo pipefail
cd "$(dirname "$0")"

phase=${1:-all}
case $phase in
    all | build | run) ;;
    *)
        echo "fuzz/ci.sh: unknown phase '$phase': want build, run or nothing (both)" >&2
        exit 2
        ;;
esac

skip() {
    echo "################################################################################" >&2
    echo "## fuzz/ci.sh: SKIPPING THE FUZZ TARGETS: $1" >&2
    echo "## (the fuzz targets were NOT built and NOT run)" >&2
    echo "################################################################################" >&2
    exit 0
}

if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    echo "fuzz/ci.sh: no nightly toolchain, installing it" >&2
    rustup toolchain install nightly --profile minimal >&2 || skip "no nightly toolchain and it cannot be installed"
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz/ci.sh: cargo-fuzz missing, installing it" >&2
    cargo install cargo-fuzz --locked >&2 || skip "cargo-fuzz is missing and cannot be installed"
fi

seconds=${FUZZ_SECONDS:-5}
targets=${FUZZ_TARGETS:-$(cargo fuzz list)}
set -e
if [[ $phase != run ]]; then
    cargo +nightly fuzz build
fi
if [[ $phase == build ]]; then
    echo "fuzz/ci.sh: built $(echo $targets)"
    exit 0
fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failed=()
for t in $targets; do
    mkdir -p "$scratch/$t"
    echo "== fuzz $t: ${seconds}s from corpus/$t"
    # -rss_limit_mb: the targets keep a few MiB per input; 2 GiB catches runaway allocation.
    if ! cargo +nightly fuzz run "$t" "$scratch/$t" "corpus/$t" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=20 -print_final_stats=1 \
        2>"$scratch/$t.log"; then
        failed+=("$t")
        grep -v '^"' "$scratch/$t.log" | tail -40 >&2
    else
        grep -E '^stat::(number_of_executed_units|average_exec_per_sec)' "$scratch/$t.log" | tr '\n' ' '
        echo
    fi
done
if ((${#failed[@]})); then
    echo "fuzz/ci.sh: FAILED: ${failed[*]} (reproducers in fuzz/artifacts/)" >&2
    exit 1
fi
echo "fuzz/ci.sh: all targets ran ${seconds}s without a finding"
