#!/usr/bin/env python3
"""The hostile address changes of issue 31 item 4, regenerated in a network namespace the
caller made (never the machine's own): what a node with `outputAddress` must shrug off.

  flap NS DEV ADDRESS/LEN --period-ms 10 --seconds 20
      adds and deletes one address every period (ip's own batch mode on one process, so the
      generator's cost is not a process per change)
  addresses NS --count 20000 [--base 10.200.0.0]
      adds COUNT /32s to interfaces (1,000 each, veth ends named churnN): a node with many
      addresses (a load balancer's VIPs); `--remove` deletes those interfaces again
  veth NS --pairs 2000
      creates PAIRS veth pairs, brings both ends up (IPv6 link-local addresses come and go
      with them), then deletes them: a node where pods start and stop by the thousand

Prints one JSON line with what was done and how long it took. Used by the root tests
(tests/root/address_churn.rs) and `scripts/bench --only addresses`.
"""

import argparse
import ipaddress
import json
import subprocess
import sys
import time


def batch(ns, lines):
    """Runs ip commands in one `ip -batch` process in `ns` (-force: one failure does not stop
    the rest)."""
    subprocess.run(["ip", "-n", ns, "-force", "-batch", "-"], input="\n".join(lines) + "\n",
                   text=True, check=True, stdout=subprocess.DEVNULL)


def flap(args):
    ip = subprocess.Popen(["ip", "-n", args.ns, "-force", "-batch", "-"], stdin=subprocess.PIPE,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True, bufsize=1)
    period = args.period_ms / 1000
    started = time.monotonic()
    changes = 0
    next_at = started
    try:
        while time.monotonic() - started < args.seconds:
            verb = "add" if changes % 2 == 0 else "del"
            ip.stdin.write(f"address {verb} {args.address} dev {args.dev}\n")
            ip.stdin.flush()
            changes += 1
            next_at += period
            pause = next_at - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        if changes % 2 == 1:
            ip.stdin.write(f"address del {args.address} dev {args.dev}\n")
            changes += 1
    finally:
        ip.stdin.close()
        ip.wait()
    return {"changes": changes, "seconds": time.monotonic() - started}


def addresses(args):
    per = 1000
    devices = (args.count + per - 1) // per
    started = time.monotonic()
    if args.remove:
        batch(args.ns, [f"link del churn{d}" for d in range(devices)])
        return {"removed_devices": devices, "seconds": time.monotonic() - started}
    base = int(ipaddress.IPv4Address(args.base))
    lines = []
    for d in range(devices):
        # veth, not dummy: the dummy driver is not in every kernel a test runs on.
        lines.append(f"link add churn{d} type veth peer name churnp{d}")
        lines.append(f"link set churn{d} up")
    for i in range(args.count):
        lines.append(f"address add {ipaddress.IPv4Address(base + i)}/32 dev churn{i // per}")
    batch(args.ns, lines)
    return {"addresses": args.count, "devices": devices, "seconds": time.monotonic() - started}


def veth(args):
    started = time.monotonic()
    chunk = 100
    for first in range(0, args.pairs, chunk):
        last = min(first + chunk, args.pairs)
        batch(args.ns, [line for i in range(first, last) for line in (
            f"link add vc{i} type veth peer name vcp{i}",
            f"link set vc{i} up",
            f"link set vcp{i} up",
        )])
    created = time.monotonic() - started
    for first in range(0, args.pairs, chunk):
        last = min(first + chunk, args.pairs)
        batch(args.ns, [f"link del vc{i}" for i in range(first, last)])
    return {"pairs": args.pairs, "created_s": created, "seconds": time.monotonic() - started}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("flap")
    p.add_argument("ns")
    p.add_argument("dev")
    p.add_argument("address")
    p.add_argument("--period-ms", type=float, default=10)
    p.add_argument("--seconds", type=float, default=20)
    p = sub.add_parser("addresses")
    p.add_argument("ns")
    p.add_argument("--count", type=int, default=20000)
    p.add_argument("--base", default="10.200.0.0")
    p.add_argument("--remove", action="store_true")
    p = sub.add_parser("veth")
    p.add_argument("ns")
    p.add_argument("--pairs", type=int, default=2000)
    args = parser.parse_args()
    if not args.ns.startswith("ipmasq-"):
        sys.exit("address_churn: only in a namespace made for ipmasq's tests or bench (ipmasq-*)")
    done = {"flap": flap, "addresses": addresses, "veth": veth}[args.what](args)
    print(json.dumps({"what": args.what, **done}), flush=True)


if __name__ == "__main__":
    main()
