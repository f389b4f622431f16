# Shared by scripts/*.sh: set-up that installs only what is missing.
# shellcheck shell=bash

# The oldest Rust the workspace builds with (Cargo.toml rust-version).
RUST_MIN=1.89

die() { echo "dpwarp: $*" >&2; exit 1; }

# apt packages, installed only when a command is missing.
need_apt() { # need_apt COMMAND PACKAGE
    command -v "$1" >/dev/null 2>&1 && return 0
    [ "$(id -u)" = 0 ] || die "'$1' is missing: run as root, or apt-get install $2"
    echo "dpwarp: installing $2 (for $1)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >/dev/null \
        || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >/dev/null; } \
        || die "could not install $2 with apt-get"
}

# DPDK 22.11 and what its bindings are generated with (dataplane/dpdk-sys:
# bindgen needs libclang, the build finds DPDK with pkg-config).
need_dpdk() {
    if command -v pkg-config >/dev/null 2>&1 && pkg-config --atleast-version=22.11 libdpdk \
        && [ -n "$(ls /usr/lib/llvm-*/lib/libclang*.so* 2>/dev/null | head -n1)" ]; then
        return 0
    fi
    [ "$(id -u)" = 0 ] || die "DPDK 22.11 is missing: run as root, or apt-get install libdpdk-dev libclang-dev pkg-config"
    echo "dpwarp: installing DPDK 22.11 (libdpdk-dev, libclang-dev, pkg-config)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q libdpdk-dev libclang-dev pkg-config >/dev/null \
        || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q libdpdk-dev libclang-dev pkg-config >/dev/null; } \
        || die "could not install libdpdk-dev libclang-dev pkg-config with apt-get"
}

need_rust() {
    [ -d "$HOME/.cargo/bin" ] && PATH="$HOME/.cargo/bin:$PATH"
    command -v cargo >/dev/null 2>&1 || die "Rust is missing. Install Rust $RUST_MIN or newer with rustup \
(https://rustup.rs); Debian 12's packaged rustc (1.63) is too old."
    local have
    have=$(rustc --version | awk '{print $2}')
    [ "$(printf '%s\n%s\n' "$RUST_MIN" "$have" | sort -V | head -n1)" = "$RUST_MIN" ] \
        || die "rustc $have is older than $RUST_MIN: run 'rustup update stable'"
    need_apt cc gcc   # the linker rustc calls
}

# bounded SECONDS CMD...: runs CMD under `timeout SECONDS` and returns its
# status. timeout puts CMD in a process group of its own, which a Ctrl-C
# does not reach, and a SIGTERM to the script would run its EXIT trap while
# CMD ran on; so CMD runs in the background, and a SIGINT or SIGTERM to the
# script stops it (SIGTERM, SIGKILL 30 s later) before the script exits
# (130 or 143) and its EXIT trap runs. CMD runs in a session of its own
# (setsid: its id is timeout's PID), and whatever is left in that session
# when CMD ends is ended too: a `timeout` inside CMD makes a process group
# of its own, which timeout's signal to its group does not reach (found by
# a review: such commands, apt-get and fuzzers among them, ran on after
# CI's EXIT trap had cleaned up). A process that starts a session of its
# own (a QEMU guest, a nested `bounded`) is its starter's to stop.
bounded_end_session() { # bounded_end_session SID
    command -v pgrep >/dev/null 2>&1 || return 0
    pgrep -s "$1" >/dev/null 2>&1 || return 0
    pkill -TERM -s "$1" 2>/dev/null || true
    local i
    for i in 1 2 3 4 5 6 7 8 9 10; do
        pgrep -s "$1" >/dev/null 2>&1 || return 0
        sleep 0.5
    done
    pkill -KILL -s "$1" 2>/dev/null || true
}
bounded_pid=
bounded_sig=0
bounded() {
    local secs=$1 rc
    shift
    bounded_sig=0
    trap 'bounded_sig=130; kill -TERM "$bounded_pid" 2>/dev/null || true' INT
    trap 'bounded_sig=143; kill -TERM "$bounded_pid" 2>/dev/null || true' TERM
    # A background job of a script is no process group leader, so setsid
    # makes the session without forking: $! is timeout's PID and the
    # session's id.
    setsid timeout -k 30 "$secs" "$@" <&0 &
    bounded_pid=$!
    while :; do
        rc=0
        wait "$bounded_pid" || rc=$?
        # A caught signal ends wait early (128+N): wait on until CMD is gone.
        [ "$rc" -gt 128 ] && kill -0 "$bounded_pid" 2>/dev/null || break
    done
    bounded_end_session "$bounded_pid"
    bounded_pid=
    if [ "$bounded_sig" != 0 ]; then
        # Another signal must not cut the EXIT trap short: caught, dropped
        # (not ignored, which what the EXIT trap runs would inherit).
        trap : INT TERM
        exit "$bounded_sig"
    fi
    trap - INT TERM
    return "$rc"
}

# The repository's root (this file's directory's parent), wherever the
# script that sources it was started from.
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
