#!/usr/bin/env python3
"""New UDP flows from a pod to an outside address, and what the outside sees of their source.

scripts/systemd-test runs `send` in the pod's network namespace and `receive` in the outside
one, while the agent restarts: every datagram leaves from a fresh socket (a new source port, so
a new conntrack flow that takes its NAT decision at that moment), so a single moment without
our jump shows up as datagrams carrying the pod's own address.

  flows.py receive PORT READY_FILE RESULT_JSON   until a datagram says END
  flows.py send HOST:PORT RATE STOP_FILE RESULT_JSON   until STOP_FILE exists, then END
"""

import json
import os
import socket
import sys
import time


def receive(port, ready_file, result_file):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.bind(("0.0.0.0", port))
    open(ready_file, "w").close()
    by_source = {}
    while True:
        data, (source, _) = sock.recvfrom(64)
        if data == b"END":
            break
        by_source[source] = by_source.get(source, 0) + 1
        if len(by_source) == 1 and by_source[source] == 1:
            # The first datagram: the path works (the test waits for this file).
            open(ready_file + ".first", "w").close()
    with open(result_file, "w") as out:
        json.dump({"by_source": by_source, "total": sum(by_source.values())}, out)


def send(destination, rate, stop_file, result_file):
    host, port = destination.rsplit(":", 1)
    target = (host, int(port))
    period = 1.0 / rate
    started = time.monotonic()
    sent = 0
    while sent % 100 != 0 or not os.path.exists(stop_file):
        # Paced against the clock from the start, so a slow moment is caught up on.
        ahead = started + sent * period - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.sendto(b"flow", target)
        sent += 1
    elapsed = time.monotonic() - started
    # The end marker, after the last flow; several, as one datagram may be lost.
    for _ in range(5):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.sendto(b"END", target)
        time.sleep(0.05)
    with open(result_file, "w") as out:
        json.dump({"flows": sent, "seconds": elapsed, "per_second": sent / elapsed}, out)


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "receive":
        receive(int(args[0]), args[1], args[2])
    elif mode == "send":
        send(args[0], float(args[1]), args[2], args[3])
    else:
        sys.exit(f"flows.py: unknown mode {mode}")
