#!/usr/bin/env bash
# The main job. Until the benchmark exists (issue 7) it is the iWARP decoder
# over a bundled capture of real Linux siw traffic:
#   scripts/main.sh [FILE.pcap] [dpwarp-pcap options]
set -euo pipefail
. "$(dirname "$0")/lib.sh"
need_rust
file=${1:-tests/data/golden/rping_v2_p2p_write_rtr.pcap}
[ $# -gt 0 ] && shift
cargo build --release --locked -q -p dpwarp-pcap
exec target/release/dpwarp-pcap "$file" "$@"
