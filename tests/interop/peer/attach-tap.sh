#!/bin/bash
# Put an existing TAP device on the siw peer's L2 segment: move it from the root
# namespace into the peer's namespace, enslave it to br0 and bring it up.
#
# Usage: tests/interop/peer/attach-tap.sh [--ns NAME] --tap TAPNAME
#
# For a userspace TCP/IP stack (such as the RNIC under test on tcp-lite) that
# has opened TAPNAME in the root namespace and keeps the fd open. The fd stays
# valid across the move; frames it writes then reach the guest (10.77.0.2)
# and the namespace (10.77.0.1) on br0, so the stack should use an address of
# its own in 10.77.0.0/24, e.g. 10.77.0.10. A TAP already inside the namespace
# is just enslaved and brought up. boot.sh must have run first; stop.sh
# deletes the TAP together with the namespace (the owner's fd then fails).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

TAP=
while [ $# -gt 0 ]; do
    case "$1" in
        --ns) valid_ns "$2"; NS=$2; shift 2 ;;
        --tap) TAP=$2; shift 2 ;;
        -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
        *) die "unknown argument $1" ;;
    esac
done
need_root
[[ $TAP =~ ^[A-Za-z0-9_.-]{1,15}$ ]] || die "--tap NAME required (a valid interface name)"
ns_exists || die "namespace $NS does not exist: boot.sh --ns $NS first"
ip -n "$NS" link show "$BRIDGE" > /dev/null 2>&1 || die "no $BRIDGE in namespace $NS"
[ "$TAP" != "$GUEST_TAP" ] || die "$TAP is the guest's own tap"

if ip -n "$NS" link show "$TAP" > /dev/null 2>&1; then
    say "$TAP is already in namespace $NS"
elif ip link show "$TAP" > /dev/null 2>&1; then
    [ -e "/sys/class/net/$TAP/tun_flags" ] || die "$TAP is not a TUN/TAP device"
    ip link set dev "$TAP" netns "$NS"
else
    die "no device $TAP in the root namespace or in $NS (its owner must create it first)"
fi
ip -n "$NS" link set "$TAP" master "$BRIDGE"
ip -n "$NS" link set "$TAP" up
say "$TAP is on $BRIDGE in $NS; guest $GUEST_ADDR, namespace $NS_ADDR"
echo "ATTACHED $TAP"
