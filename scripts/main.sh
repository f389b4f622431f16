#!/usr/bin/env bash
# The main job: dpwarp's benchmark on its embedded default, two software
# RNICs (engine, tcp-lite TCP, RFC 6581 startup) over tcp-lite's in-memory
# link on one core: no NIC, no root, no DPDK. A short sweep: RDMA Write
# bandwidth over every size, then Write, Read and FetchAdd latency, the
# 64 KiB Write and 64 B Write latency also over Linux TCP in the same run,
# the 64 KiB Write also with TCP/IP checksums in software.
#   scripts/main.sh [OUTPUT_DIR]     (default bench-out)
# Tables go to stdout; histograms (.hgrm), interval logs (.hlog), plots
# (.svg) and JSON reports go to OUTPUT_DIR. `target/release/bench --help`
# lists every option; the README's "Benchmark" section explains them.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
need_rust
need_dpdk
out=${1:-bench-out}
cargo build --release --locked -q -p bench
bench=target/release/bench
mkdir -p "$out"
"$bench" write -a -n 200 --report_gbits --out "$out" --json "$out/write_bw_sweep.json"
echo
"$bench" write -s 65536 -D 3 --report_gbits --compare kernel --out "$out" --json "$out/write_bw_64k.json"
echo
# The same with smoltcp computing TCP/IP checksums, which a NIC offloads.
"$bench" write -s 65536 -D 3 --report_gbits --sw-checksums --out "$out" --json "$out/write_bw_64k_sw_checksums.json"
echo
"$bench" write -s 64 -D 3 --lat --compare kernel --out "$out" --json "$out/write_lat_64.json"
echo
"$bench" read -s 64 -D 2 --lat --out "$out" --json "$out/read_lat_64.json"
echo
"$bench" fetch_add -D 2 --lat --out "$out" --json "$out/fetch_add_lat.json"
