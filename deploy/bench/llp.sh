#!/usr/bin/env bash
# Both lower layers through dpwarpd on one DPDK port and core, measured in
# one run: deploy/bench/llp.sh [memif|net_tap] [SECONDS] (as root).
#
# dpwarpd runs the example configuration on the port asked (memif: the
# server end of a memif link, MTU 9000; net_tap: the example's TAP
# interface dpwarp0, MTU 1500, the client on Linux's end), its core pinned
# to CPU 0; bench clients, pinned to CPU 1, take turns against its bench
# service: MPA over TCP on tcp_port 18515 and DDP over SCTP over UDP on
# udp_port 9899, both served by the same core's tcp-lite stack. Printed:
# 64 KiB Write bandwidth and 64 B Write and Read latency over each, twice,
# and their ratios. Hugepages are reserved for the run when root has none
# (and given back).
set -euo pipefail
cd "$(dirname "$0")/../.."
port=${1:-memif}
secs=${2:-3}
case $port in memif | net_tap) ;; *) echo "usage: $0 [memif|net_tap] [SECONDS]" >&2; exit 2 ;; esac
cargo build --release --locked -q -p deploy -p bench
bin=$PWD/target/release
tmp=$(mktemp -d /tmp/dpwarp-llp.XXXXXX)
pages=/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
pages_before=$(cat "$pages" 2>/dev/null || echo 0)
dpid=""
cleanup() {
    [ -n "$dpid" ] && kill -KILL "$dpid" 2>/dev/null || true
    [ -w "$pages" ] && echo "$pages_before" > "$pages" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
[ "$pages_before" -ge 1024 ] || { [ -w "$pages" ] && echo 1024 > "$pages" || true; }

socket=/run/dpwarp/llp-$$.sock
case $port in
memif)
    sed -e 's/^driver = "net_tap"/driver = "memif"/' -e "s|^iface = \"dpwarp0\"|memif_socket = \"$socket\"|" \
        -e '/^host_address/d' -e 's/^mtu = 1500/mtu = 9000/' -e 's|address = "10.77.0.2/24"|address = "10.88.0.2/24"|' \
        -e "s|/run/dpwarpd/control.sock|$tmp/control.sock|" -e 's/127.0.0.1:9464/127.0.0.1:0/' \
        deploy/examples/dpwarpd.toml > "$tmp/dpwarpd.toml"
    server=10.88.0.2
    link=(--transport memif --memif-socket "$socket" --ip 10.88.0.1/24)
    ;;
net_tap)
    sed -e "s|/run/dpwarpd/control.sock|$tmp/control.sock|" -e 's/127.0.0.1:9464/127.0.0.1:0/' \
        deploy/examples/dpwarpd.toml > "$tmp/dpwarpd.toml"
    server=10.77.0.2
    link=()
    ;;
esac
"$bin/dpwarpd" "$tmp/dpwarpd.toml" 2> "$tmp/dpwarpd.log" &
dpid=$!
for _ in $(seq 1 400); do
    "$bin/dpwarpctl" -s "$tmp/control.sock" status 2>/dev/null | grep -q '"serving"' && break
    kill -0 "$dpid" 2>/dev/null || { cat "$tmp/dpwarpd.log"; exit 1; }
    sleep 0.025
done
grep -o 'DPDK[^)]*)' "$tmp/dpwarpd.log" | head -n 1 || true

run() { # run LLP ARGS...: the table row of one client's run
    local llp=$1 p=18515
    shift
    [ "$llp" = sctp ] && p=9899
    (cd "$tmp" && timeout $(( secs + 60 )) taskset -c 1 "$bin/bench" "$@" "$server" -p "$p" --llp "$llp" \
        -D "$secs" "${link[@]}" 2>&1 | grep -E '^ remote' | tail -n 1)
}
bw() { awk '{print $(NF-2)}' <<< "$1"; }          # MB/s
p50() { awk '{print $6 "/" $8}' <<< "$1"; }        # p50/p99, us
echo "dpwarpd on $port (CPU 0), one client at a time (CPU 1), ${secs} s each"
printf '%-28s %-22s %-22s %s\n' "" "MPA over TCP" "DDP over SCTP over UDP" "SCTP/MPA"
for r in 1 2; do
    m=$(run mpa write -s 65536); s=$(run sctp write -s 65536)
    printf '%-28s %-22s %-22s %s\n' "64 KiB Writes, MB/s ($r)" "$(bw "$m")" "$(bw "$s")" \
        "$(python3 -c "print(f'{$(bw "$s") / $(bw "$m"):.2f}x')")"
done
for op in write read; do
    m=$(run mpa "$op" -s 64 --lat); s=$(run sctp "$op" -s 64 --lat)
    printf '%-28s %-22s %-22s\n' "64 B $op p50/p99, us" "$(p50 "$m")" "$(p50 "$s")"
done
kill -TERM "$dpid"
wait "$dpid" || true
dpid=""
