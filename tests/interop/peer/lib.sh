# shellcheck shell=bash
# Settings and helpers shared by the siw peer scripts in this directory.
# Sourced, never run. Everything here can be overridden from the environment.

PEER_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# Downloaded packages and built artifacts (kept between runs).
CACHE=${DPWARP_INTEROP_CACHE:-/var/cache/dpwarp-interop}
OUT=$CACHE/out
# Per-namespace run state: pidfiles, sockets, console log.
RUNBASE=${DPWARP_INTEROP_RUN:-/tmp/dpwarp-interop}

# The guest's L2 segment. It exists only inside the network namespace.
NS=${DPWARP_INTEROP_NS:-dpwinterop}
BRIDGE=br0
NS_ADDR=10.77.0.1       # the namespace's own address on br0
GUEST_ADDR=10.77.0.2    # the siw guest (eth0, rdma link siw0)
GUEST_MAC=52:54:00:77:00:02
PREFIX=24
GUEST_TAP=vmtap0        # tap that QEMU's virtio-net uses, inside the namespace

say() { echo "[${0##*/}] $*" >&2; }
die() { echo "[${0##*/}] error: $*" >&2; exit 1; }

need_root() { [ "$(id -u)" = 0 ] || die "run as root (network namespaces, taps, apt-get)"; }

# Install host packages that are missing (never upgrades anything present).
APT_TIMEOUT=${DPWARP_INTEROP_APT_TIMEOUT:-900}
host_pkgs() {
    local p missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    say "installing host packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    if ! timeout "$APT_TIMEOUT" apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; then
        timeout "$APT_TIMEOUT" apt-get update -q >/dev/null || die "apt-get update failed"
        timeout "$APT_TIMEOUT" apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null \
            || die "apt-get install ${missing[*]} failed"
    fi
}

run_dir() { echo "$RUNBASE/$NS"; }
ns_exists() { [ -e "/run/netns/$NS" ] && ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$NS"; }

# PID from a pidfile, printed only if that process is alive and its command
# name matches $2 (so a recycled PID is never touched).
live_pid() { # live_pid PIDFILE COMM-PREFIX
    local pid comm
    [ -s "$1" ] || return 1
    pid=$(tr -dc 0-9 < "$1")
    [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] || return 1
    comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
    case "$comm" in "$2"*) echo "$pid" ;; *) return 1 ;; esac
}
qemu_pid() { live_pid "$(run_dir)/qemu.pid" qemu-system; }

# Accept --ns NAME in any script; sets NS.
valid_ns() { [[ $1 =~ ^[A-Za-z0-9_.-]{1,15}$ ]] || die "bad namespace name '$1'"; }
