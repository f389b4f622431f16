#!/usr/bin/env bash
# Builds the Debian package of the appliance (dpwarpd, dpwarpctl,
# dpwarp-bench, dpwarp-setup, the systemd unit and the example config):
#   scripts/package.sh        -> target/debian/dpwarp_VERSION_amd64.deb
set -euo pipefail
. "$(dirname "$0")/lib.sh"
need_rust
need_dpdk
if ! command -v cargo-deb >/dev/null 2>&1; then
    echo "dpwarp: installing cargo-deb" >&2
    bounded 1200 cargo install --locked cargo-deb --version 2.9.0
fi
cargo build --release --locked -p deploy -p bench
cargo deb --locked -p deploy --no-build
ls target/debian/dpwarp_*.deb
