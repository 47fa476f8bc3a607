#!/bin/bash
# ../../../consolidation/arrival/prof.sh N ID OUT (the perf profile of CPU 0 with N guests
# streaming, the senders' work on CPU 1) in mode MODE (xen or relay), then its top symbols in
# OUT.top.txt, which cmp.py reads. As root, from the repository's root.
here=$(dirname "$0")
MODE=${MODE:-xen} bash "$here/../../../consolidation/arrival/prof.sh" "$@" || exit 1
perf report -i "$3.data" --no-children --sort sym --stdio 2>/dev/null | grep -v "^#" | grep -v "^$" | head -60 > "$3.top.txt"
