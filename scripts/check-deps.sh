#!/usr/bin/env bash
# The dependency rules of STYLE.md §1.1: no DPDK below `dataplane`;
# rnic-engine and tcp-lite independent of each other; the sans-IO crates
# depend on nothing that opens sockets or starts threads for them.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
need_rust
fail=0
deps() { cargo tree --locked -q -p "$1" -e normal --prefix none | awk '{print $1}' | sort -u; }
forbid() { # forbid CRATE PATTERN WHY
    local tree hit
    # A failing cargo tree must fail the check, not pass it with no crates.
    tree=$(deps "$1") || { echo "dependency rules: 'cargo tree -p $1' failed" >&2; exit 1; }
    hit=$(echo "$tree" | grep -E "$2" || true)
    if [ -n "$hit" ]; then
        echo "dependency rule broken: $1 depends on $(echo "$hit" | tr '\n' ' ')($3)" >&2
        fail=1
    fi
}
forbid rnic-engine '(dpdk|^tcp-lite$|^control$|^dataplane$|^smoltcp$)' "the engine is sans-IO and independent of TCP"
forbid tcp-lite '(dpdk|^rnic-engine$|^control$|^dataplane$)' "tcp-lite is independent of the engine"
forbid control '(dpdk|^dataplane$)' "no DPDK below dataplane"
forbid sctp-lite '(dpdk|^rnic-engine$|^control$|^dataplane$|^tcp-lite$)' "sctp-lite is sans-IO SCTP, independent of the engine and TCP"
forbid dpwarp-capture '(dpdk|^rnic-engine$)' "the capture reader is protocol-neutral"
[ $fail = 0 ] && echo "dependency rules: ok"
exit $fail
