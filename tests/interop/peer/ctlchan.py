#!/usr/bin/env python3
"""Host end of the siw peer's control channel (see guest-init for the protocol).

QEMU exposes the guest's virtio-serial port "dpw.ctl" as a unix socket; this
connects to it, sends one request and prints the reply. guest.sh wraps it.

usage: ctlchan.py SOCKET TIMEOUT run 'shell command'
       ctlchan.py SOCKET TIMEOUT put LOCAL_FILE GUEST_PATH

The command's output (stdout and stderr, merged, byte exact) goes to stdout and
its exit status becomes ours. 124: no answer within TIMEOUT (+ grace);
125: the channel failed. QEMU serves one client at a time, so concurrent
callers queue behind each other.
"""
import base64
import os
import re
import socket
import sys
import time

GRACE = 10.0  # seconds on top of the command's own timeout (transfer, queueing)


def fail(code, msg):
    print("ctlchan: " + msg, file=sys.stderr)
    sys.exit(code)


def main(argv):
    if len(argv) < 4 or argv[2] not in ("run", "put"):
        fail(2, "usage: ctlchan.py SOCKET TIMEOUT run CMD | put LOCAL GUESTPATH")
    sock_path, timeout, op = argv[0], int(float(argv[1])), argv[2]
    if timeout < 1:
        fail(2, "timeout must be at least 1 s")
    rid = "%x%x" % (os.getpid(), time.monotonic_ns() & 0xFFFFFFF)
    if op == "run":
        cmd = " ".join(argv[3:]).encode()
        request = b"R %s %d %s\n" % (rid.encode(), timeout, base64.b64encode(cmd))
    else:
        if len(argv) != 5:
            fail(2, "put needs LOCAL_FILE GUEST_PATH")
        with open(argv[3], "rb") as f:
            data = f.read()
        mode = os.stat(argv[3]).st_mode & 0o7777
        request = b"W %s %d %o %s\n" % (rid.encode(), len(data), mode,
                                        base64.b64encode(argv[4].encode())) + data

    began = time.monotonic()
    deadline = began + timeout + GRACE
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    while True:
        try:
            s.connect(sock_path)
            break
        except OSError as e:
            if time.monotonic() > deadline:
                fail(125, "cannot connect to %s: %s" % (sock_path, e))
            time.sleep(0.2)
    s.sendall(request)
    sent = time.monotonic() - began

    begin = re.compile(rb"@@dpw " + re.escape(rid.encode()) + rb" begin\n")
    end = re.compile(rb"@@dpw " + re.escape(rid.encode()) + rb" end (\d+)\n")
    buf = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            # The request's id, as the guest's console names it (its
            # "request" and "answered" lines), and how much of the answer
            # came.
            fail(124, "no reply within %d s (request %s sent after %.2f s; %s)"
                 % (timeout + GRACE, rid, sent,
                    "its answer had begun" if begin.search(buf) else "nothing of its answer came"))
        s.settimeout(left)
        try:
            chunk = s.recv(1 << 16)
        except socket.timeout:
            continue
        if not chunk:
            fail(125, "QEMU closed the control socket (guest gone?)")
        buf += chunk
        b = begin.search(buf)
        if not b:
            # keep only a tail that might hold a partial marker
            buf = buf[-256:]
            continue
        e = end.search(buf, b.end())
        if e:
            out = base64.b64decode(b"".join(buf[b.end():e.start()].split()))
            sys.stdout.buffer.write(out)
            sys.stdout.flush()
            s.close()
            return int(e.group(1))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
