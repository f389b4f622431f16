#!/bin/bash
# Stop the siw peer: end its QEMU (by the PID in the run directory's pidfile,
# SIGTERM then SIGKILL after 5 s) and delete its network namespace with br0,
# the guest's tap and any tap attach-tap.sh moved in. Safe to run when nothing
# is running. The console log stays in the run directory for post-mortems.
#
# Usage: tests/interop/peer/stop.sh [--ns NAME]     (default dpwinterop)
set -uo pipefail
. "$(dirname "$0")/lib.sh"

while [ $# -gt 0 ]; do
    case "$1" in
        --ns) valid_ns "$2"; NS=$2; shift 2 ;;
        -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
        *) die "unknown argument $1" ;;
    esac
done
need_root
RUN=$(run_dir)

# end_pid PIDFILE COMM: TERM, wait up to 5 s, then KILL; only a live process
# whose name matches (a recycled PID is left alone).
end_pid() {
    local pid i
    pid=$(live_pid "$1" "$2") || return 0
    kill -TERM "$pid" 2> /dev/null
    for i in $(seq 50); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2> /dev/null; then kill -KILL "$pid" 2> /dev/null; sleep 0.2; fi
    say "stopped $2 (pid $pid)"
}
end_pid "$RUN/qemu.pid" qemu-system
# timeout(1) around QEMU exits by itself once QEMU is gone; give it a moment.
for i in $(seq 20); do live_pid "$RUN/timeout.pid" timeout > /dev/null || break; sleep 0.1; done
end_pid "$RUN/timeout.pid" timeout
rm -f "$RUN"/{qemu.pid,timeout.pid,ctl.sock,mon.sock}

if ns_exists; then
    ip netns del "$NS" && say "deleted namespace $NS"
fi
exit 0
