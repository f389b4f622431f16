#!/usr/bin/env bash
# The appliance's goals, measured in one run on this host (Linux TCP over
# loopback, so it needs neither root nor a DPDK port, though the build needs
# DPDK's headers, and it uses curl and python3: scripts/lib.sh installs what
# is missing as root, or says what to install; the same cores as the bare
# server): deploy/bench/appliance.sh [SECONDS]
#
#  1. dpwarpd against the bare `bench --server`: the same client (64 QPs of
#     64 KiB Writes, pinned to CPU 1) against each, the server's core on
#     CPU 0; the ratio of their aggregate bandwidths.
#  2. The metrics endpoint's cost: CPU time of dpwarpd's metrics endpoint (its thread and its requests')
#     while it is scraped every second during run 1, as a share of a core.
#  3. Start to serving: dpwarpd's start until `dpwarpctl status` says so.
#  4. 64 clients of mixed services at once, all pinned to CPU 1: 48 bench
#     clients (one QP of 64 KiB Writes each), 8 perftest write_bw clients
#     (-D, a control and a data QP each) and 8 rping clients (4 KiB,
#     verified); the octets the daemon's core took in (its FPDU counter,
#     from the metrics) over 2 s while all 72 QPs are up, against run 1's
#     bare server; and, for the whole phase (64 processes starting on one
#     CPU take seconds), the same over the wall time from the first start
#     to the last end, and the sum of the clients' own rates.
#  5. Drain: SIGTERM while 64 QPs run, the drain deadline 1 s; the time
#     from the deadline to the daemon's exit.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/scripts/lib.sh"   # need_*
cd "$root"
need_rust
need_dpdk
need_apt curl curl
need_apt python3 python3
secs=${1:-5}
cargo build --release --locked -q -p deploy -p bench
bin=target/release
tmp=$(mktemp -d /tmp/dpwarp-appliance.XXXXXX)
pids=() cpids=() dpid="" cpid=""
# stop PID...: SIGTERM, up to 5 s to exit (dpwarpd drains for its 1 s
# deadline), then SIGKILL. A client's PID is timeout(1)'s, exec'd in its
# subshell, which passes SIGTERM on to the client; SIGKILL goes to
# timeout's process group too, where the client runs.
stop() {
    local p live _
    for p in "$@"; do kill -TERM "$p" 2>/dev/null || true; done
    for _ in $(seq 1 50); do
        live=""
        for p in "$@"; do kill -0 "$p" 2>/dev/null && live=1; done
        [ -n "$live" ] || return 0
        sleep 0.1
    done
    for p in "$@"; do kill -KILL -- "-$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null || true; done
}
cleanup() {
    stop ${dpid:+"$dpid"} ${cpid:+"$cpid"} "${cpids[@]}" "${pids[@]}"
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
    echo "appliance.sh: $*" >&2
    if [ -s "$tmp/dpwarpd.log" ]; then echo "--- dpwarpd's log:" >&2; cat "$tmp/dpwarpd.log" >&2; fi
    exit 1
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
bw() { awk '/^ remote / {print $5}' "$1"; }   # MB/s column of bench's table

port_a=$(free_port); port_b=$(free_port); metrics=$(free_port)
port_pt=$(free_port); port_rping=$(free_port)
# Phase 4's 48 bench clients all run on this host: the bench service's
# clients_per_host (half of clients_max, 32, by default) is all 64.
sed -e 's/driver = "net_tap"/driver = "kernel"/' -e 's|address = "10.77.0.2/24"|address = "127.0.0.1/8"|' \
    -e '/^iface/d' -e '/^host_address/d' -e '/^udp_port/d' -e 's/^mtu = 1500/mtu = 9000/' \
    -e "s|/run/dpwarpd/control.sock|$tmp/control.sock|" -e "s/127.0.0.1:9464/127.0.0.1:$metrics/" \
    -e "s/tcp_port = 18515/tcp_port = $port_b\nclients_per_host = 64/" -e 's/drain_deadline_ms = 5000/drain_deadline_ms = 1000/' \
    -e "s/tcp_port = 18521/tcp_port = $port_pt/" -e "s/tcp_port = 7174/tcp_port = $port_rping/" \
    -e "s/command = \"ib_write_bw\"/command = \"ib_write_bw -D $(( secs + 10 ))\"/" -e 's/clients_max = 4$/clients_max = 8/' \
    deploy/examples/dpwarpd.toml > "$tmp/dpwarpd.toml"
client() { # client PORT SECONDS OUT
    (cd "$tmp" && exec timeout $(( $2 + 60 )) taskset -c 1 "$OLDPWD/$bin/bench" write 127.0.0.1 -p "$1" \
        -q 64 -s 65536 -D "$2" > "$3" 2>&1)
}

echo "1. bare bench --server (CPU 0) <- client, 64 QPs of 64 KiB Writes (CPU 1), ${secs} s"
(cd "$tmp" && exec timeout $(( secs + 90 )) "$OLDPWD/$bin/bench" --server -p "$port_a" -l 0 > bare-server.txt 2>&1) &
pids+=($!)
sleep 1
client "$port_a" "$secs" "$tmp/bare.txt" || { cat "$tmp/bare.txt"; exit 1; }
bare=$(bw "$tmp/bare.txt")

start=$(date +%s%N)
"$bin/dpwarpd" "$tmp/dpwarpd.toml" 2> "$tmp/dpwarpd.log" &
dpid=$!
serving=""
for _ in $(seq 1 2000); do   # 20 s, and dpwarpctl's own time
    "$bin/dpwarpctl" -s "$tmp/control.sock" status 2>/dev/null | grep -q '"serving"' && { serving=1; break; }
    kill -0 "$dpid" 2>/dev/null || fail "dpwarpd exited before serving"
    sleep 0.01
done
[ -n "$serving" ] || fail "dpwarpd did not serve within 20 s"
serving_ms=$(ms "$start")
tid=$(grep -l '^dpwarpd-metrics$' /proc/$dpid/task/*/comm | head -n1 | xargs dirname | xargs basename)
# Nanoseconds the metrics endpoint has run: its accept thread (schedstat:
# finer than stat's ticks) and its requests' threads, each gone once it has
# answered, which the daemon sums itself.
requests_ns() {
    curl -sf --max-time 5 "http://127.0.0.1:$metrics/metrics" |
        awk '/^dpwarp_metrics_request_cpu_seconds_total/ {printf "%.0f", $2 * 1e9}'
}
ticks() { echo $(( $(awk '{print $1}' "/proc/$dpid/task/$tid/schedstat") + $(requests_ns) )); }
echo "   dpwarpd (CPU 0) <- the same client, scraped every second"
t0=$(ticks); w0=$(date +%s%N)
( for _ in $(seq 1 $(( secs + 3 ))); do curl -sf --max-time 5 "http://127.0.0.1:$metrics/metrics" > /dev/null || true; sleep 1; done ) &
scraper=$!; pids+=($scraper)
client "$port_b" "$secs" "$tmp/daemon.txt" || { cat "$tmp/daemon.txt"; exit 1; }
t1=$(ticks); wall_ms=$(ms "$w0")
wait "$scraper" 2>/dev/null || true
daemon=$(bw "$tmp/daemon.txt")
metrics_share=$(python3 -c "print(f'{100 * ($t1 - $t0) / 1e9 / ($wall_ms / 1000):.3f}')")

echo "4. dpwarpd (CPU 0) <- 64 clients at once (CPU 1): 48 bench write -q 1, 8 perftest write_bw -D, 8 rping, $(( secs + 10 )) s"
fpdu_rx() { curl -sf --max-time 5 "http://127.0.0.1:$metrics/metrics" | awk '/^dpwarp_core_fpdu_rx_bytes_total/ {s += $2} END {printf "%.0f", s}'; }
rx0=$(fpdu_rx); m0=$(date +%s%N)
cpids=()
for i in $(seq 1 48); do
    (cd "$tmp" && exec timeout $(( secs + 60 )) taskset -c 1 "$OLDPWD/$bin/bench" write 127.0.0.1 -p "$port_b" \
        -q 1 -s 65536 -D "$(( secs + 10 ))" > "mixed-bench-$i.txt" 2>&1) &
    cpids+=($!)
done
for i in $(seq 1 8); do
    (cd "$tmp" && exec timeout $(( secs + 60 )) taskset -c 1 "$OLDPWD/$bin/bench" perftest write_bw 127.0.0.1 \
        -p "$port_pt" -D "$(( secs + 10 ))" > "mixed-perftest-$i.txt" 2>&1) &
    cpids+=($!)
    (cd "$tmp" && exec timeout $(( secs + 60 )) taskset -c 1 "$OLDPWD/$bin/bench" rping -c -a 127.0.0.1 \
        -p "$port_rping" -C 5000 -S 4096 > "mixed-rping-$i.txt" 2>&1) &
    cpids+=($!)
done
qps() { "$bin/dpwarpctl" -s "$tmp/control.sock" stats | awk -F': ' '/"qps"/ {gsub(/[^0-9]/, "", $2); print $2; exit}'; }
full=
for _ in $(seq 1 400); do
    if [ "$(qps)" -ge 72 ]; then
        f0=$(fpdu_rx); t0f=$(date +%s%N); sleep 2; f1=$(fpdu_rx); full_ms=$(ms "$t0f"); q1=$(qps)
        [ "$q1" -ge 72 ] && full=$(python3 -c "print(f'{($f1 - $f0) / ($full_ms / 1000) / 1048576:.0f}')")
        break
    fi
    sleep 0.05
done
failed=0
for p in "${cpids[@]}"; do wait "$p" || failed=$((failed + 1)); done
cpids=()
mixed_ms=$(ms "$m0")
sleep 0.2   # a core publishes its counters every 50 ms
rx1=$(fpdu_rx)
[ "$failed" = 0 ] || { echo "$failed of 64 clients failed"; tail -n 3 "$tmp"/mixed-*.txt; exit 1; }
mixed_bench=$(for f in "$tmp"/mixed-bench-*.txt; do bw "$f"; done | awk '{s += $1} END {printf "%.0f", s}')
# MB/s here are perftest's, 2^20 octets, as bench's and perftest's tables print them.
mixed_pt=$(for f in "$tmp"/mixed-perftest-*.txt; do grep -A1 '#bytes' "$f" | tail -n1 | awk '{print $4}'; done \
    | awk '{s += $1} END {printf "%.0f", s}')
mixed=$(( mixed_bench + mixed_pt ))
wall=$(python3 -c "print(f'{($rx1 - $rx0) / ($mixed_ms / 1000) / 1048576:.0f}')")
wall_ratio=$(python3 -c "print(f'{$wall / $bare:.2f}')")
full_ratio=$( [ -n "$full" ] && python3 -c "print(f'{$full / $bare:.2f}')" || echo "-")

echo "5. drain: SIGTERM while 64 QPs run, deadline 1 s"
# As client, in the background: $cpid is timeout's.
(cd "$tmp" && exec timeout 90 taskset -c 1 "$OLDPWD/$bin/bench" write 127.0.0.1 -p "$port_b" \
    -q 64 -s 65536 -D 30 > drained.txt 2>&1) &
cpid=$!
up=""
for _ in $(seq 1 600); do   # 30 s, and dpwarpctl's own time
    "$bin/dpwarpctl" -s "$tmp/control.sock" stats 2>/dev/null | grep -q '"qps": 64' && { up=1; break; }
    kill -0 "$dpid" 2>/dev/null || fail "dpwarpd exited before the drain"
    kill -0 "$cpid" 2>/dev/null || fail "the drain's client exited before its 64 QPs were up: $(cat "$tmp/drained.txt")"
    sleep 0.05
done
[ -n "$up" ] || fail "the drain's client had not 64 QPs up after 30 s: $(cat "$tmp/drained.txt")"
sleep 1
term=$(date +%s%N)
kill -TERM "$dpid"
for _ in $(seq 1 6000); do kill -0 "$dpid" 2>/dev/null || break; sleep 0.005; done   # 30 s
drain_ms=$(ms "$term")
! kill -0 "$dpid" 2>/dev/null || fail "dpwarpd did not exit 30 s after SIGTERM (deadline 1 s)"
dpid=""
wait "$cpid" 2>/dev/null || true
cpid=""

ratio=$(python3 -c "print(f'{$daemon / $bare:.2f}')")
echo
echo "| what | measured | goal |"
echo "|---|---|---|"
echo "| 64 QPs x 64 KiB Writes, bare bench --server | $bare MB/s | |"
echo "| the same, dpwarpd (scraped every second) | $daemon MB/s: ${ratio}x | >= 0.9x |"
echo "| 64 clients at once: 48 bench (1 QP each) + 8 perftest write_bw + 8 rping, dpwarpd: octets in over 2 s with all 72 QPs up | ${full:-not reached (the clients did not overlap)} MB/s: ${full_ratio}x | >= 0.9x |"
echo "| the same, octets in over the whole phase, $mixed_ms ms from the first start to the last end | $wall MB/s: ${wall_ratio}x | |"
echo "| the same: the sum of the clients' own rates | $mixed MB/s (bench $mixed_bench, perftest $mixed_pt) | |"
echo "| metrics endpoint (its thread and its requests'), scraped every second | ${metrics_share}% of a core | < 1% |"
echo "| start to serving | $serving_ms ms | < 2000 ms |"
echo "| SIGTERM to exit, 64 busy QPs, deadline 1000 ms | $drain_ms ms: $(( drain_ms - 1000 )) ms past the deadline | < 1000 ms past |"
