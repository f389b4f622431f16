#!/usr/bin/env bash
# Every test of the workspace, from a fresh clone: scripts/test.sh
set -euo pipefail
. "$(dirname "$0")/lib.sh"
need_rust
need_dpdk
need_apt ip iproute2   # the TAP tests build network namespaces
need_apt ethtool ethtool   # the AF_PACKET tests: Linux completes its checksums on a veth
# dpwarp-pcap's and the SCTP core's captures are compared with tshark's
# reading; required here, so that a missing tshark fails them instead of
# skipping the comparison (found by a review).
need_apt tshark tshark
export DPWARP_REQUIRE_TSHARK=1
scripts/check-deps.sh
cargo test --workspace --locked --all-targets
cargo test --workspace --locked --doc
# The sctp-proto fork's own tests (third_party/sctp-proto/DPWARP.md: each
# change has one there); it is not a workspace member.
cargo test --locked --manifest-path third_party/sctp-proto/Cargo.toml
# The smoltcp fork's unit tests, upstream's and the fork's own
# (third_party/smoltcp/DPWARP.md); not a workspace member either.
cargo test --locked --manifest-path third_party/smoltcp/Cargo.toml --lib \
    --features socket-tcp-cubic,socket-tcp-reno
