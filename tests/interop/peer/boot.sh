#!/bin/bash
# Boot the siw peer: one QEMU guest running Linux soft-iWARP, on a bridge inside
# a network namespace of its own. Needs build.sh's artifacts; run as root.
#
# Usage: tests/interop/peer/boot.sh [--ns NAME] [--siw k=v,k=v] [options]
#   --ns NAME        network namespace to create (default dpwinterop); also
#                    names the run directory /tmp/dpwarp-interop/NAME
#   --siw k=v,...    siw module parameters at load time, e.g.
#                    --siw mpa_crc_required=1,peer_to_peer=1 (see README.md)
#   --siw-lo         also add an siw link siw_lo on the guest's lo
#   --offload        keep virtio-net checksum/TSO/GSO offloads (default off:
#                    every frame on br0 is a real segment, as on a wire)
#   --mem MB         guest memory (default 1024)    --smp N   vCPUs (default 2)
#   --accel A        auto | tcg | kvm (default auto: KVM only when kvm_intel or
#                    kvm_amd is loaded; a PVM /dev/kvm hangs a stock kernel)
#   --timeout SECS   how long to wait for the guest (default 60)
#   --lifetime SECS  QEMU is killed by timeout(1) after SECS (default 14400;
#                    0 = no limit). stop.sh ends it earlier.
#
# Network (everything exists only inside the namespace):
#   br0 10.77.0.1/24 -- vmtap0 -- guest eth0 10.77.0.2 (siw0), MAC 52:54:00:77:00:02
# Processes run with `ip netns exec NAME ...` use 10.77.0.1; attach-tap.sh
# puts another TAP device (e.g. the RNIC under test) on br0.
#
# On success prints "READY 10.77.0.2" on stdout. Run directory: qemu.pid,
# console.log (guest serial console), ctl.sock (control channel, guest.sh),
# mon.sock (QEMU monitor), qemu.log (QEMU's own messages).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

SIWARGS= SIWLO=0 OFFLOAD=0 MEM=1024 SMP=2 ACCEL=auto WAIT=60 LIFETIME=14400
while [ $# -gt 0 ]; do
    case "$1" in
        --ns) valid_ns "$2"; NS=$2; shift 2 ;;
        --siw) SIWARGS=$2; shift 2 ;;
        --siw-lo) SIWLO=1; shift ;;
        --offload) OFFLOAD=1; shift ;;
        --mem) MEM=$2; shift 2 ;;
        --smp) SMP=$2; shift 2 ;;
        --accel) ACCEL=$2; shift 2 ;;
        --timeout) WAIT=$2; shift 2 ;;
        --lifetime) LIFETIME=$2; shift 2 ;;
        -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
done
need_root
[[ $SIWARGS =~ ^([A-Za-z0-9_]+=[A-Za-z0-9]+(,[A-Za-z0-9_]+=[A-Za-z0-9]+)*)?$ ]] \
    || die "--siw wants k=v[,k=v...], got '$SIWARGS'"
KERNEL=$OUT/vmlinuz INITRD=$OUT/initramfs.cpio.gz
[ -f "$KERNEL" ] && [ -f "$INITRD" ] || die "no guest image in $OUT: run build.sh first"
host_pkgs qemu-system-x86 iproute2 python3

RUN=$(run_dir)
if pid=$(qemu_pid); then die "a guest already runs for $NS (pid $pid): stop.sh --ns $NS first"; fi
mkdir -p "$RUN"
rm -f "$RUN"/{qemu.pid,timeout.pid,ctl.sock,mon.sock,console.log,qemu.log}

if [ "$ACCEL" = auto ]; then
    ACCEL=tcg
    if [ -c /dev/kvm ] && [ ! -d /sys/module/kvm_pvm ] \
        && { [ -d /sys/module/kvm_intel ] || [ -d /sys/module/kvm_amd ]; }; then ACCEL=kvm; fi
fi
case "$ACCEL" in
    tcg) ACCEL_ARGS=(-machine q35 -accel tcg,thread=multi,tb-size=256 -cpu max) ;;
    kvm) ACCEL_ARGS=(-machine q35 -accel kvm -cpu host,-arch-capabilities) ;;
    *) die "--accel must be auto, tcg or kvm" ;;
esac

# ---------------------------------------------------------------- namespace
# A namespace left over from an earlier run is reused once emptied of its tap.
ns_exists || ip netns add "$NS"
nsip() { ip -n "$NS" "$@"; }
nsip link set lo up
ip netns exec "$NS" sysctl -q -w net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 \
    net.ipv4.ip_forward=0 > /dev/null
if ! nsip link show "$BRIDGE" > /dev/null 2>&1; then
    nsip link add "$BRIDGE" type bridge stp_state 0 forward_delay 0
fi
nsip addr replace "$NS_ADDR/$PREFIX" dev "$BRIDGE"
nsip link set "$BRIDGE" up
nsip link del "$GUEST_TAP" 2> /dev/null || true
nsip tuntap add dev "$GUEST_TAP" mode tap
nsip link set "$GUEST_TAP" master "$BRIDGE" up

# ---------------------------------------------------------------- QEMU
NIC=virtio-net-pci,netdev=net0,mac=$GUEST_MAC,romfile=
if [ "$OFFLOAD" = 0 ]; then
    for f in csum gso guest_csum guest_tso4 guest_tso6 guest_ecn guest_ufo host_tso4 host_tso6 host_ecn host_ufo mrg_rxbuf; do
        NIC+=",$f=off"
    done
fi
CMDLINE="console=ttyS0 loglevel=4 panic=-1 rdinit=/init dpw.ip=$GUEST_ADDR/$PREFIX dpw.lo=$SIWLO"
[ -n "$SIWARGS" ] && CMDLINE+=" dpw.siw=$SIWARGS"
LIMIT=()
[ "$LIFETIME" != 0 ] && LIMIT=(timeout -k 10 "$LIFETIME")

T0=$(date +%s.%N)
# setsid: QEMU must outlive this script and ignore the caller's Ctrl-C. It runs
# inside the namespace because it opens the tap there.
setsid ip netns exec "$NS" "${LIMIT[@]}" qemu-system-x86_64 \
    -name "dpw-peer-$NS" "${ACCEL_ARGS[@]}" -smp "$SMP" -m "$MEM" \
    -nodefaults -no-user-config -display none -vga none -no-reboot \
    -kernel "$KERNEL" -initrd "$INITRD" -append "$CMDLINE" \
    -serial "file:$RUN/console.log" \
    -monitor "unix:$RUN/mon.sock,server=on,wait=off" \
    -chardev "socket,id=ctl,path=$RUN/ctl.sock,server=on,wait=off" \
    -device virtio-serial-pci -device virtserialport,chardev=ctl,name=dpw.ctl \
    -device virtio-rng-pci \
    -netdev "tap,id=net0,ifname=$GUEST_TAP,script=no,downscript=no" \
    -device "$NIC" \
    -pidfile "$RUN/qemu.pid" \
    < /dev/null > "$RUN/qemu.log" 2>&1 &
LAUNCHED=$!
[ "$LIFETIME" != 0 ] && echo "$LAUNCHED" > "$RUN/timeout.pid"

fail() {
    echo "[boot.sh] $*" >&2
    [ -f "$RUN/console.log" ] && { echo "--- last console lines:" >&2; tail -n 15 "$RUN/console.log" >&2; }
    [ -s "$RUN/qemu.log" ] && { echo "--- qemu.log:" >&2; cat "$RUN/qemu.log" >&2; }
    echo "[boot.sh] the namespace and anything left are removed by: stop.sh --ns $NS" >&2
    exit 1
}
elapsed() { echo "$(date +%s.%N) $T0" | awk '{printf "%.1f", $1 - $2}'; }
over() { awk -v a="$(elapsed)" -v b="$WAIT" 'BEGIN{exit !(a >= b)}'; }

# 1. the guest prints READY on its console
while ! grep -q '^dpw-peer: READY' "$RUN/console.log" 2> /dev/null; do
    sleep 0.2
    if ! kill -0 "$LAUNCHED" 2> /dev/null; then fail "QEMU exited during boot"; fi
    if over; then fail "guest not ready after ${WAIT} s"; fi
done
grep -E '^dpw-peer: (ERROR|warning)' "$RUN/console.log" >&2 || true
grep -q '^dpw-peer: ERROR' "$RUN/console.log" && fail "guest reported an error"
# 2. the control channel answers
left=$(awk -v a="$(elapsed)" -v b="$WAIT" 'BEGIN{l = int(b - a); print (l < 5 ? 5 : l)}')
out=$("$PEER_DIR/guest.sh" --ns "$NS" -t "$left" 'rdma link show siw0/1 && cat /sys/module/siw/parameters/mpa_version') \
    || fail "control channel does not answer"
grep -q 'state ACTIVE' <<< "$out" || fail "siw0 not active: $out"

say "$ACCEL guest up in $(elapsed) s (pid $(qemu_pid)); console $RUN/console.log"
say "$(grep -o 'siw: .*' "$RUN/console.log" | head -n1)"
echo "READY $GUEST_ADDR"
