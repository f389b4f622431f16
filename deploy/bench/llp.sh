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
# and their ratios. Hugepages are reserved for the run when root has fewer
# than 1024 (and those given back).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/lib.sh   # need_*; it moves to the repository's root too
port=${1:-memif}
secs=${2:-3}
case $port in memif | net_tap) ;; *) echo "usage: $0 [memif|net_tap] [SECONDS]" >&2; exit 2 ;; esac
need_rust
need_dpdk
need_apt python3 python3
cargo build --release --locked -q -p deploy -p bench
bin=$PWD/target/release
tmp=$(mktemp -d /tmp/dpwarp-llp.XXXXXX)
pages=/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
pages_before=$(cat "$pages" 2>/dev/null || echo 0)
added=0   # hugepages this script reserved: the only ones it gives back
socket=/run/dpwarp/llp-$$.sock
dpid=""
# SIGTERM, up to 10 s to exit (it drains for the example's 5 s deadline),
# then SIGKILL: killed at once, dpwarpd left its DPDK runtime directory,
# control socket and memif socket behind.
stop_dpwarpd() {
    local _
    kill -TERM "$dpid" 2>/dev/null || return 0
    for _ in $(seq 1 100); do kill -0 "$dpid" 2>/dev/null || return 0; sleep 0.1; done
    echo "llp.sh: dpwarpd did not exit 10 s after SIGTERM: killed" >&2
    kill -KILL "$dpid" 2>/dev/null || true
}
cleanup() {
    if [ -n "$dpid" ]; then stop_dpwarpd; fi
    rm -f "$socket"
    if [ "$added" -gt 0 ] && [ -w "$pages" ]; then
        local now; now=$(cat "$pages")
        echo $(( now > added ? now - added : 0 )) > "$pages" || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
    echo "llp.sh: $*" >&2
    if [ -s "$tmp/dpwarpd.log" ]; then echo "--- dpwarpd's log:" >&2; cat "$tmp/dpwarpd.log" >&2; fi
    exit 1
}
if [ "$pages_before" -lt 1024 ] && [ -w "$pages" ]; then
    echo 1024 > "$pages" || true
    added=$(( $(cat "$pages") - pages_before ))
    [ "$added" -ge 0 ] || added=0
fi

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
serving=""
for _ in $(seq 1 400); do   # 10 s, and dpwarpctl's own time
    "$bin/dpwarpctl" -s "$tmp/control.sock" status 2>/dev/null | grep -q '"serving"' && { serving=1; break; }
    kill -0 "$dpid" 2>/dev/null || fail "dpwarpd exited before serving"
    sleep 0.025
done
[ -n "$serving" ] || fail "dpwarpd did not serve within 10 s"
grep -o 'DPDK[^)]*)' "$tmp/dpwarpd.log" | head -n 1 || true

run() { # run LLP ARGS...: the table row of one client's run, or fail with its output
    local llp=$1 p=18515 out rc row
    shift
    [ "$llp" = sctp ] && p=9899
    out=$(cd "$tmp" && timeout $(( secs + 60 )) taskset -c 1 "$bin/bench" "$@" "$server" -p "$p" --llp "$llp" \
        -D "$secs" "${link[@]}" 2>&1) && rc=0 || rc=$?
    row=$(grep -E '^ remote' <<< "$out" | tail -n 1) || true
    [ -n "$row" ] || fail "bench $* --llp $llp gave no result (exit $rc); its output:
$out"
    [ "$rc" = 0 ] || fail "bench $* --llp $llp exited $rc; its output:
$out"
    echo "$row"
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
stop_dpwarpd
wait "$dpid" || true
dpid=""
