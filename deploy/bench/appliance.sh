#!/usr/bin/env bash
# The appliance's goals, measured in one run on this host (Linux TCP over
# loopback, so it needs neither root nor DPDK; the same cores as the bare
# server): deploy/bench/appliance.sh [SECONDS]
#
#  1. dpwarpd against the bare `bench --server`: the same client (64 QPs of
#     64 KiB Writes, pinned to CPU 1) against each, the server's core on
#     CPU 0; the ratio of their aggregate bandwidths.
#  2. The metrics endpoint's cost: CPU time of dpwarpd's metrics thread
#     while it is scraped every second during run 1, as a share of a core.
#  3. Start to serving: dpwarpd's start until `dpwarpctl status` says so.
#  4. Drain: SIGTERM while 64 QPs run, the drain deadline 1 s; the time
#     from the deadline to the daemon's exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-5}
cargo build --release --locked -q -p deploy -p bench
bin=target/release
tmp=$(mktemp -d /tmp/dpwarp-appliance.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
bw() { awk '/^ remote / {print $5}' "$1"; }   # MB/s column of bench's table

port_a=$(free_port); port_b=$(free_port); metrics=$(free_port)
sed -e 's/driver = "net_tap"/driver = "kernel"/' -e 's|address = "10.77.0.2/24"|address = "127.0.0.1/8"|' \
    -e '/^iface/d' -e '/^host_address/d' -e 's/^mtu = 1500/mtu = 9000/' \
    -e "s|/run/dpwarpd/control.sock|$tmp/control.sock|" -e "s/127.0.0.1:9464/127.0.0.1:$metrics/" \
    -e "s/tcp_port = 18515/tcp_port = $port_b/" -e 's/drain_deadline_ms = 5000/drain_deadline_ms = 1000/' \
    deploy/examples/dpwarpd.toml > "$tmp/dpwarpd.toml"
client() { # client PORT SECONDS OUT
    (cd "$tmp" && timeout $(( $2 + 60 )) taskset -c 1 "$OLDPWD/$bin/bench" write 127.0.0.1 -p "$1" \
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
dpid=$!; pids+=($dpid)
until "$bin/dpwarpctl" -s "$tmp/control.sock" status 2>/dev/null | grep -q '"serving"'; do
    kill -0 "$dpid" || { cat "$tmp/dpwarpd.log"; exit 1; }
    sleep 0.01
done
serving_ms=$(ms "$start")
tid=$(grep -l '^dpwarpd-metrics$' /proc/$dpid/task/*/comm | head -n1 | xargs dirname | xargs basename)
# Nanoseconds the thread has run (schedstat: finer than stat's ticks).
ticks() { awk '{print $1}' "/proc/$dpid/task/$tid/schedstat"; }
echo "   dpwarpd (CPU 0) <- the same client, scraped every second"
t0=$(ticks); w0=$(date +%s%N)
( for _ in $(seq 1 $(( secs + 3 ))); do curl -sf "http://127.0.0.1:$metrics/metrics" > /dev/null || true; sleep 1; done ) &
scraper=$!; pids+=($scraper)
client "$port_b" "$secs" "$tmp/daemon.txt" || { cat "$tmp/daemon.txt"; exit 1; }
t1=$(ticks); wall_ms=$(ms "$w0")
wait "$scraper" 2>/dev/null || true
daemon=$(bw "$tmp/daemon.txt")
metrics_share=$(python3 -c "print(f'{100 * ($t1 - $t0) / 1e9 / ($wall_ms / 1000):.3f}')")

echo "4. drain: SIGTERM while 64 QPs run, deadline 1 s"
client "$port_b" 30 "$tmp/drained.txt" &
cpid=$!; pids+=($cpid)
until "$bin/dpwarpctl" -s "$tmp/control.sock" stats | grep -q '"qps": 64'; do sleep 0.05; done
sleep 1
term=$(date +%s%N)
kill -TERM "$dpid"
while kill -0 "$dpid" 2>/dev/null; do sleep 0.005; done
drain_ms=$(ms "$term")
wait "$cpid" 2>/dev/null || true

ratio=$(python3 -c "print(f'{$daemon / $bare:.2f}')")
echo
echo "| what | measured | goal |"
echo "|---|---|---|"
echo "| 64 QPs x 64 KiB Writes, bare bench --server | $bare MB/s | |"
echo "| the same, dpwarpd (scraped every second) | $daemon MB/s: ${ratio}x | >= 0.9x |"
echo "| metrics thread, scraped every second | ${metrics_share}% of a core | < 1% |"
echo "| start to serving | $serving_ms ms | < 2000 ms |"
echo "| SIGTERM to exit, 64 busy QPs, deadline 1000 ms | $drain_ms ms: $(( drain_ms - 1000 )) ms past the deadline | < 1000 ms past |"
