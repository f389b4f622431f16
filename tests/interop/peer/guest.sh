#!/bin/bash
# Run a shell command in the siw peer guest, or copy a file into it, over the
# guest's virtio-serial control channel (not the network, so captures on br0
# stay clean). Output (stdout+stderr) is printed; the exit status is the
# command's.
#
# Usage: tests/interop/peer/guest.sh [--ns NAME] [-t SECS] 'shell command'
#        tests/interop/peer/guest.sh [--ns NAME] [-t SECS] --put LOCAL GUESTPATH
#   --ns NAME  namespace/instance given to boot.sh (default dpwinterop)
#   -t SECS    the command (with everything it started in the foreground) is
#              killed after SECS (default 60); exit status 124 if no reply
#
# The command runs under dash (busybox provides the usual tools) in /root, in
# a session of its own, with stdin from /dev/null. Background jobs survive the
# call, e.g.
#   guest.sh 'rping -s -a 10.77.0.2 -v -C 3 > /tmp/rping-s.log 2>&1 &'
#   guest.sh 'rping -c -a 10.77.0.2 -v -C 3'; guest.sh 'cat /tmp/rping-s.log'
# Redirect a background job's output to a file, as above (otherwise it is
# lost). Binary output is passed through unchanged: guest.sh 'cat /tmp/x.pcap' > x.pcap
set -euo pipefail
. "$(dirname "$0")/lib.sh"

TMO=60 PUT=()
while [ $# -gt 0 ]; do
    case "$1" in
        --ns) valid_ns "$2"; NS=$2; shift 2 ;;
        -t) [[ $2 =~ ^[0-9]+$ ]] || die "-t needs whole seconds"; TMO=$2; shift 2 ;;
        --put) [ $# -ge 3 ] || die "--put LOCAL GUESTPATH"; PUT=("$2" "$3"); shift 3 ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        --) shift; break ;;
        *) break ;;
    esac
done
SOCK=$(run_dir)/ctl.sock
qemu_pid > /dev/null || die "no running guest for namespace $NS (boot.sh --ns $NS first)"
[ -S "$SOCK" ] || die "control socket $SOCK missing"

# The python client enforces the deadline itself; timeout(1) is the backstop.
if [ ${#PUT[@]} -eq 2 ]; then
    [ -f "${PUT[0]}" ] || die "${PUT[0]}: no such file"
    exec timeout -k 5 $((TMO + 30)) python3 "$PEER_DIR/ctlchan.py" "$SOCK" "$TMO" put "${PUT[0]}" "${PUT[1]}"
fi
[ $# -gt 0 ] || die "no command given (see --help)"
exec timeout -k 5 $((TMO + 30)) python3 "$PEER_DIR/ctlchan.py" "$SOCK" "$TMO" run "$*"
