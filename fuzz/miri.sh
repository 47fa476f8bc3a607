#!/usr/bin/env bash
# Miri (issue 22) over the unit tests of the code that touches shared memory: the rings and slots
# (`pvnet-netif`), the grant tables, guest memory, machine frames and foreign access
# (`pvnet-hv`), and netback against the mock guest (`pvnet-dd`). Not in CI: interpreted, these
# take minutes where the native tests take seconds. What Miri cannot run (eventfd and poll,
# SCM_RIGHTS, memfd and file mappings, mincore, the file system proptest persists its failures
# in) is left out here or marked `#[cfg_attr(miri, ignore = "...")]`; docs/fuzzing.md says
# which and why.
#
# Usage: bash fuzz/miri.sh [PART...]   parts: netif hv dd (default: all three), at nice 19.
# Installs the nightly toolchain's `miri` component if it is missing (rustup; the component
# brings `rust-src`, from which Miri builds its own standard library once).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo +nightly miri --version >/dev/null 2>&1; then
    echo "== installing Miri for the nightly toolchain"
    rustup component add --toolchain nightly miri
fi
# Quiet when it works; its own words when it does not.
setup=$(cargo +nightly miri setup 2>&1) || { echo "$setup" >&2; exit 1; }
echo "# $(cargo +nightly miri --version), $(date -u +%FT%TZ), revision $(git rev-parse --short HEAD)"

miri() {
    echo "# cargo +nightly miri test $*"
    # Cargo's progress lines left out; every test line and all of a finding (Miri's report of
    # undefined behaviour spans many lines: where, why, the backtrace) kept.
    nice -n 19 cargo +nightly miri test "$@" 2>&1 |
        grep -vE '^ *(Compiling|Finished|Running|Doc-tests) |^running [0-9]+ tests?$|^$'
}

for part in ${*:-netif hv dd}; do
    case $part in
    netif) miri -p pvnet-netif --lib ;;
    hv) miri -p pvnet-hv --lib -- grant:: mem:: frames:: foreign:: ;;
    dd)
        # netback's own unit tests, then the data path's tests that drive netback through the
        # mock guest only (no event channel): the hostile rings, the well-formed TX ring and
        # a reconnection.
        miri -p pvnet-dd --lib -- netback::
        miri -p pvnet-dd --test datapath_tests -- ring_path::hostile_ ring_path::mock_ mock_reconnect::
        ;;
    *)
        echo "unknown part '$part': netif, hv or dd" >&2
        exit 2
        ;;
    esac
done
