#!/usr/bin/env bash
# The installed appliance, as a user meets it: the dpwarp package's dpwarpd
# started from its installed files with the installed example config
# (/etc/dpwarp/dpwarpd.toml: net_tap, no NIC), driven by dpwarp-bench
# clients over the TAP interface, watched with dpwarpctl and the metrics
# endpoint, drained with SIGTERM. Needs root and the package installed
# (scripts/package.sh; dpkg -i target/debian/dpwarp_*.deb). Bounded: every
# step has a timeout, and the daemon it started is stopped on any exit.
set -euo pipefail
config=/etc/dpwarp/dpwarpd.toml
log=$(mktemp /tmp/dpwarpd-smoke.XXXXXX)
pid=""
fail() { echo "appliance smoke: $*" >&2; echo "--- dpwarpd's log:" >&2; cat "$log" >&2; exit 1; }
out=""
w="" r="" u=""
# dpwarpd makes its control socket's directory (systemd's RuntimeDirectory=
# does under the unit); started by hand here, the directory is ours to take
# down unless it was there before.
made_rundir=""
[ -d /run/dpwarpd ] || made_rundir=1
# On any exit: SIGTERM to the clients (each PID is timeout's, exec'd in its
# subshell, which passes the signal on) and to dpwarpd (which drains, for
# the installed config's 5 s deadline at most), up to 10 s for them to go,
# then SIGKILL (to timeout's process group, where its client runs). Killed
# at once, dpwarpd left its DPDK runtime directory and control socket.
stop() {
    local p live="" _
    local all=($w $r $u $pid)
    for p in "${all[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for _ in $(seq 1 100); do
        live=""
        for p in "${all[@]}"; do kill -0 "$p" 2>/dev/null && live=1; done
        [ -n "$live" ] || break
        sleep 0.1
    done
    if [ -n "$live" ]; then
        for p in "${all[@]}"; do kill -KILL -- "-$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null || true; done
    fi
    rm -f "$log"
    [ -n "$out" ] && rm -rf "$out"
    [ -n "$made_rundir" ] && rmdir /run/dpwarpd 2>/dev/null
    return 0
}
trap stop EXIT
for c in dpwarpd dpwarpctl dpwarp-bench dpwarp-setup; do
    command -v "$c" >/dev/null || fail "$c is not installed"
done
systemd-analyze verify /lib/systemd/system/dpwarpd.service || fail "systemd-analyze verify refused the unit"
dpwarpd --check "$config" || fail "the installed config does not check"

start=$(date +%s%N)
# Not under timeout(1): $pid must be dpwarpd itself, for the signals below
# and for the trap, which stops it on any exit (its own bound).
dpwarpd "$config" 2>"$log" >/dev/null &
pid=$!
for _ in $(seq 1 400); do
    dpwarpctl status 2>/dev/null | grep -q '"state": "serving"' && break
    kill -0 "$pid" 2>/dev/null || fail "dpwarpd exited before serving"
    sleep 0.025
done
dpwarpctl status | grep -q '"state": "serving"' || fail "dpwarpd never served"
echo "appliance smoke: start to serving: $(( ($(date +%s%N) - start) / 1000000 )) ms"
[ "$(stat -c %a /run/dpwarpd/control.sock)" = 600 ] || fail "the control socket is not 0600"

# Three clients at once over the TAP interface (10.77.0.1 -> 10.77.0.2):
# two over MPA (TCP port 18515), one over DDP over SCTP (UDP port 9899,
# on the same DPDK port and core).
out=$(mktemp -d /tmp/dpwarp-smoke-out.XXXXXX)
(cd "$out" && exec timeout 60 dpwarp-bench write 10.77.0.2 -p 18515 -s 65536 -D 3 > w.txt 2>&1) &
w=$!
(cd "$out" && exec timeout 60 dpwarp-bench read 10.77.0.2 -p 18515 -s 4096 -q 4 -D 3 > r.txt 2>&1) &
r=$!
(cd "$out" && exec timeout 60 dpwarp-bench write 10.77.0.2 -p 9899 --llp sctp -s 65536 -D 3 > u.txt 2>&1) &
u=$!
sleep 1.5
conns=$(dpwarpctl connections | grep -c '"qp"' || true)
[ "$conns" -ge 6 ] || fail "dpwarpctl connections shows $conns connections, want 6 during the runs"
dpwarpctl connections | grep -q '"llp": "sctp"' || fail "dpwarpctl connections lists no DDP over SCTP stream"
wait "$w" || fail "the Write client failed: $(cat "$out/w.txt")"
wait "$r" || fail "the Read client failed: $(cat "$out/r.txt")"
wait "$u" || fail "the DDP over SCTP Write client failed: $(cat "$out/u.txt")"
w="" r="" u=""
grep -E '^ remote' "$out/w.txt" "$out/r.txt" "$out/u.txt"
rm -rf "$out"
out=""

metrics=$(timeout 10 curl -sf http://127.0.0.1:9464/metrics) || fail "no metrics"
accepted=$(echo "$metrics" | awk '/^dpwarp_service_connections_accepted_total{service="bench"}/ {print $2}')
[ "$accepted" = 6 ] || fail "metrics: $accepted connections accepted, want 6"
echo "$metrics" | grep -q '^dpwarp_sctp_segments_total{udp_port="9899",direction="rx"} [1-9]' \
    || fail "metrics: no DDP over SCTP segments received"
echo "$metrics" | grep -q '^dpwarp_core_rx_packets_total{core="0"' || fail "metrics: no per-core packets"
for _ in $(seq 1 100); do
    leased=$(dpwarpctl stats | awk -F': ' '/"memory_leased"/ {gsub(",","",$2); print $2}')
    [ "$leased" = 0 ] && break
    sleep 0.05
done
[ "$leased" = 0 ] || fail "memory still leased after the clients left: $leased"

kill -TERM "$pid"
term=$(date +%s%N)
for _ in $(seq 1 1500); do kill -0 "$pid" 2>/dev/null || break; sleep 0.02; done
! kill -0 "$pid" 2>/dev/null || fail "dpwarpd did not exit 30 s after SIGTERM"
wait "$pid" && code=0 || code=$?
[ "$code" = 0 ] || fail "dpwarpd exited $code after SIGTERM"
echo "appliance smoke: SIGTERM to exit (idle): $(( ($(date +%s%N) - term) / 1000000 )) ms"
grep -q 'drained: dpwarpd exits' "$log" || fail "no drain in the log"
grep -q 'connection accepted' "$log" || fail "no connection events in the log"
[ ! -e /run/dpwarpd/control.sock ] || fail "the control socket stayed"
! ip link show dpwarp0 >/dev/null 2>&1 || fail "the TAP interface stayed"
pid=""
echo "appliance smoke: ok"
