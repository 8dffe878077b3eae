#!/usr/bin/env python3
"""Hostile configs whose listed CIDRs are few but whose rendered rules are many.

The memory model once counted the CIDRs a config lists; these configs list about 2,000 and
render tens of thousands of iptables rules, which is what the tools' memory follows:

  sources            COUNT masqueradeSourceCIDRs (default 2,000 scattered /32s; --prefix):
                     iptables cannot negate a union, so it writes one `-s BLOCK -j RETURN`
                     per block of their complement (39,903 rules for the defaults, 23,903
                     for /24s);
  forced-interfaces  COUNT forceMasqueradeCIDRs inside 10.0.0.0/8 (default 2,000) and
                     INTERFACES outputInterfaces (default 16): iptables writes one MASQUERADE
                     rule per forced CIDR and interface (32,000 for the defaults);
  plain              COUNT nonMasqueradeCIDRs (/32s, none adjacent): one rule each, the list
                     the model was first measured with.

Deterministic (seeded), stdlib only; prints the YAML to stdout. Each config is valid under
the default cidrLimit except `plain` and `forced-interfaces`, which set cidrLimit to fit.
"""

import argparse
import ipaddress
import random


def scattered_blocks(count, prefix, seed):
    """`count` distinct IPv4 blocks of length `prefix`, spread over the unicast space."""
    rng = random.Random(seed)
    blocks = set()
    size = 1 << (32 - prefix)
    while len(blocks) < count:
        # 1.0.0.0 to 223.255.255.255: unicast, as a pod CIDR list could be.
        start = rng.randrange(1 << 24, 224 << 24) // size * size
        blocks.add(ipaddress.IPv4Network((start, prefix)))
    return sorted(blocks)


def flow_list(key, nets):
    return f"{key}: [{', '.join(str(n) for n in nets)}]\n"


def sources(args):
    return ("resyncInterval: 1h\n"
            + flow_list("masqueradeSourceCIDRs", scattered_blocks(args.count, args.prefix, args.seed)))


def forced_interfaces(args):
    # Every other /24 of 10.0.0.0/8 from 10.0.0.0: inside the kept 10.0.0.0/8, none adjacent.
    forced = [ipaddress.IPv4Network((0x0A000000 + 2 * i * 256, 24)) for i in range(args.count)]
    interfaces = [f"eth{i}" for i in range(args.interfaces)]
    return (f"cidrLimit: {args.count + 1}\nresyncInterval: 1h\n"
            + flow_list("nonMasqueradeCIDRs", [ipaddress.IPv4Network("10.0.0.0/8")])
            + flow_list("forceMasqueradeCIDRs", forced)
            + f"outputInterfaces: [{', '.join(interfaces)}]\n")


def plain(args):
    nets = [ipaddress.IPv4Network((0x0A000000 + 2 * i, 32)) for i in range(args.count)]
    return (f"cidrLimit: {max(args.count, 64)}\nresyncInterval: 1h\n"
            + flow_list("nonMasqueradeCIDRs", nets))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__.split("\n", 2)[2],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("shape", choices=["sources", "forced-interfaces", "plain"])
    parser.add_argument("--count", type=int, default=2000, help="CIDRs in the list (default 2000)")
    parser.add_argument("--interfaces", type=int, default=16, help="outputInterfaces (forced-interfaces; default 16)")
    parser.add_argument("--prefix", type=int, default=32, help="the sources' prefix length (sources; default 32)")
    parser.add_argument("--seed", type=int, default=16, help="the random list's seed (sources; default 16)")
    args = parser.parse_args()
    make = {"sources": sources, "forced-interfaces": forced_interfaces, "plain": plain}[args.shape]
    print(make(args), end="")


if __name__ == "__main__":
    main()
