#!/usr/bin/env bash
# The main job: dpwarp's benchmark over DPDK. Two software RNICs (engine,
# tcp-lite TCP, RFC 6581 startup on a control-plane thread each), each on a
# pinned poll-mode core of its own, joined by DPDK memif (shared memory: no
# NIC needed), with the in-memory link (both RNICs on one core) and Linux
# TCP (a core each) in the same runs for comparison:
#   RDMA Write bandwidth over every size; 64 KiB Writes at MTU 9000 and
#   1500; 64 B Writes with 128 in flight; 64 B Write, Read and FetchAdd
#   latency; the 64 KiB Write with TCP/IP checksums in software; and the
#   smoltcp device layer's cost per packet beside a raw DPDK loop; and
#   64 KiB and 64 B Writes on one and then two pinned cores (--cores 1,2),
#   and with one core flooded; 1 and 1,024 QPs on one core; MPA
#   connection establishments per second (bench connect); and 64 KiB
#   Writes over DDP over SCTP (RFC 5043) on one and then two cores.
#   scripts/main.sh [OUTPUT_DIR]     (default bench-out)
# As root it reserves 2 MiB hugepages for DPDK (and gives them back at the
# end); without root, or without the memory, DPDK runs on ordinary pages
# (slower) and says so. Tables go to stdout; histograms (.hgrm), interval
# logs (.hlog), plots (.svg) and JSON reports go to OUTPUT_DIR.
# Each run is bounded (10 minutes); a SIGINT or SIGTERM stops the running
# one before the hugepages are given back.
# `target/release/bench --help` lists every option; the README's
# "Benchmark" section explains them.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
need_rust
need_dpdk
out=${1:-bench-out}
cargo build --release --locked -q -p bench
bench=target/release/bench
mkdir -p "$out"

# Hugepages: 1024 pages of 2 MiB (the benchmark's EAL takes 1 GiB), reserved
# on top of what is there, only when root and only if the memory is free;
# on exit, whatever happens, the pages this script added are given back
# (the count less them: not the count it found, which would take or leave
# pages of a run that changed it meanwhile). Until then their number is in
# target/main-hugepages-added, for .ci/run to give back if this is killed.
pages=/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
added=0
added_file=target/main-hugepages-added
give_back() { # builtins only: nothing a late signal can kill
    [ "$added" -gt 0 ] || return 0
    local now
    read -r now < "$pages"
    echo $((now > added ? now - added : 0)) > "$pages"
    added=0
    echo 0 > "$added_file"
}
if [ "$(id -u)" = 0 ] && [ -w "$pages" ]; then
    before=$(cat "$pages")
    avail_kb=$(awk '/MemAvailable/ {print $2}' /proc/meminfo)
    if [ "$avail_kb" -gt $((4 * 1024 * 1024)) ]; then
        trap give_back EXIT
        echo $((before + 1024)) > "$pages"
        read -r now < "$pages"
        added=$((now > before ? now - before : 0))
        echo "$added" > "$added_file"
        echo "main.sh: reserved $added 2 MiB hugepages for DPDK (returned at the end)"
    else
        echo "main.sh: less than 4 GiB free: DPDK runs without hugepages"
    fi
else
    echo "main.sh: not root: DPDK runs without hugepages (--no-huge), slower"
fi
echo

bounded 600 "$bench" write -a -n 200 --transport memif --report_gbits --out "$out" --json "$out/write_bw_sweep.json"
echo
bounded 600 "$bench" write -s 65536 -D 3 --transport memif --compare embedded,kernel --report_gbits --out "$out" --json "$out/write_bw_64k.json"
echo
bounded 600 "$bench" write -s 65536 -D 3 --transport memif --mtu 1500 --compare kernel --report_gbits --out "$out" --json "$out/write_bw_64k_mtu1500.json"
echo
bounded 600 "$bench" write -s 64 -D 3 --transport memif --compare embedded,kernel --report_gbits --out "$out" --json "$out/write_rate_64.json"
echo
bounded 600 "$bench" write -s 64 -D 3 --lat --transport memif --compare embedded,kernel --out "$out" --json "$out/write_lat_64.json"
echo
bounded 600 "$bench" read -s 64 -D 2 --lat --transport memif --compare embedded --out "$out" --json "$out/read_lat_64.json"
echo
bounded 600 "$bench" fetch_add -D 2 --lat --transport memif --compare embedded --out "$out" --json "$out/fetch_add_lat.json"
echo
# TCP/IP checksums computed in software on both cores (memif, a memory
# wire, needs none by default).
bounded 600 "$bench" write -s 65536 -D 3 --transport memif --sw-checksums --report_gbits --out "$out" --json "$out/write_bw_64k_sw_checksums.json"
echo
bounded 600 "$bench" port -D 2 --json "$out/port_cost.json"
echo
# Many cores: the same workload on one and then on two pinned cores, each
# core running both ends of its own connections over a memif pair of its
# own (nothing shared on the hot path), and the scaling.
bounded 600 "$bench" write -s 65536 -D 3 -q 2 --cores 1,2 --transport memif --report_gbits --json "$out/write_bw_64k_cores.json"
echo
bounded 600 "$bench" write -s 64 -D 3 -q 2 --cores 1,2 --transport memif --report_gbits --json "$out/write_rate_64_cores.json"
echo
# The same two cores, then core 0 flooding its peer with TCP connections
# that never start MPA while core 1 runs its share: what core 1 keeps.
bounded 600 "$bench" write -s 64 -D 3 -q 2 --cores 2 --flood 1000 --transport memif --report_gbits --json "$out/write_rate_64_flood.json"
echo
# Many QPs on one core: 1 and then 1,024 QPs, 8 Writes in flight each.
bounded 600 "$bench" write -s 65536 -D 3 -q 1 -t 8 --transport memif --report_gbits --json "$out/write_bw_64k_1qp.json"
echo
bounded 600 "$bench" write -s 65536 -D 3 -q 1024 -t 8 --transport memif --report_gbits --json "$out/write_bw_64k_1024qps.json"
echo
# 64 B Write latency of one QP beside 255 busy ones (8 Writes in flight
# each) on the same cores; then beside 1,023, the measured QP urgent (its
# cores serve it first and keep their turns short; the busy QPs pay).
bounded 600 "$bench" write -s 64 -D 3 --lat --active 255 -t 8 --transport memif --out "$out" --json "$out/write_lat_64_beside_255.json"
echo
bounded 600 "$bench" write -s 64 -D 3 --lat --active 1023 -t 8 --urgent --transport memif --out "$out" --json "$out/write_lat_64_beside_1023_urgent.json"
echo
# The same latency beside 1,023 QPs that are connected and idle: an idle QP
# costs a turn nothing.
bounded 600 "$bench" write -s 64 -D 3 --lat --idle 1023 --transport memif --out "$out" --json "$out/write_lat_64_beside_1023_idle.json"
echo
# Connection establishment: TCP and RFC 6581's enhanced MPA startup to Full
# Operation on both ends, closed in order, 16 at a time, one control-plane
# thread; embedded, then kernel TCP.
bounded 600 "$bench" connect -D 5 --json "$out/connect.json"
echo
# DDP over SCTP (RFC 5043 over UDP, RFC 6951) instead of MPA over TCP:
# 64 KiB Writes on one and then two pinned cores over memif, each core an
# association of its own.
bounded 600 "$bench" write -s 65536 -D 3 -q 2 --llp sctp --cores 1,2 --transport memif --report_gbits --json "$out/write_bw_64k_sctp_cores.json"
