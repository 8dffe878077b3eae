#!/usr/bin/env python3
"""Regenerates the multi-document alias bombs of Step 16 (issue 31, item 1).

Each file is YAML whose first document is a small valid config (or the ConfigMap that holds
one) and whose later documents are each an alias bomb sized to stay just under the per-document
parse budget ipmasq had before Step 16 (32 bytes of tree per byte of file, plus 4 MiB), so each
one passed and together they cost about 1.5 GB: `validate`, `show` and `explain` said "valid"
and the agent was OOM-killed on every start under the DaemonSet's 64 MiB. Upstream (yaml.v2)
reads only the first document.

Writes into OUT_DIR (default: the current directory):
  config.yaml     the agent's config file: 50 documents, about 951 KB
  configmap.yaml  a ConfigMap manifest whose `data.config` is config.yaml (under 1 MiB)
  manifest.yaml   a multi-document manifest: the ip-masq-agent ConfigMap, then 49 more
                  Kubernetes objects, each an alias bomb (under 1 MiB)

Usage: multi-document-alias-bombs.py [OUT_DIR] [--documents N] [--bytes SIZE]
Standard library only.
"""

import argparse
import os

# What one node of ipmasq's tree costs the budget before its text: `size_of::<Node>()` on
# 64-bit targets (a Value of 56 bytes and a Location of 32).
NODE_BYTES = 88
# The budget before Step 16, charged per document: 32 bytes per byte of file, plus 4 MiB.
OLD_BYTES_PER_SOURCE_BYTE = 32
OLD_FLOOR = 4 << 20
# Aim this far under the old per-document budget, so each document passed on its own.
FILL = 0.9

FIRST_CONFIG = "nonMasqueradeCIDRs:\n  - 10.0.0.0/8\nresyncInterval: 1h\n"


def bomb_document(size, budget, prefix=""):
    """One YAML document of exactly `size` bytes whose tree costs about FILL * budget.

    A long scalar anchored once (&s), a list of k aliases to it anchored (&l), and a list of k
    aliases to that list: (k + 2) * k copies of the scalar from 6 k bytes of aliases.
    `prefix` (e.g. a Kubernetes object's header) starts the document."""
    overhead = len(prefix) + 64
    best = None
    for k in range(1, 10_000):
        scalar = size - overhead - 6 * k
        if scalar < 1:
            break
        cost = (k + 2) * k * (NODE_BYTES + scalar)
        if cost > FILL * budget:
            break
        best = (k, scalar)
    if best is None:
        raise SystemExit(f"no bomb of {size} bytes fits a budget of {budget}")
    k, scalar = best
    body = (
        f"{prefix}s: &s {'x' * scalar}\n"
        f"l: &l [{','.join(['*s'] * k)}]\n"
        f"r: [{','.join(['*l'] * k)}]\n"
    )
    pad = size - len(body) - 1
    if pad < 1:
        raise SystemExit("document overhead miscounted")
    return body + "#" + "p" * (pad - 1) + "\n"


def config_text(documents, total):
    """The agent's file: a valid first document, then documents - 1 bombs, `total` bytes."""
    budget = OLD_BYTES_PER_SOURCE_BYTE * total + OLD_FLOOR
    first = FIRST_CONFIG
    each = (total - len(first)) // (documents - 1) - len("---\n")
    parts = [first]
    for _ in range(documents - 1):
        parts.append("---\n" + bomb_document(each, budget))
    return "".join(parts)


def configmap_text(config):
    """A ConfigMap of upstream's name whose `data.config` is `config`, as a literal block."""
    indented = "".join("    " + line + "\n" for line in config.splitlines())
    return (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ip-masq-agent\n"
        "  namespace: kube-system\ndata:\n  config: |\n" + indented
    )


def manifest_text(documents, total):
    """A manifest: upstream's ConfigMap, then documents - 1 ConfigMaps that are bombs."""
    first = configmap_text(FIRST_CONFIG)
    budget = OLD_BYTES_PER_SOURCE_BYTE * total + OLD_FLOOR
    each = (total - len(first)) // (documents - 1) - len("---\n")
    parts = [first]
    for index in range(1, documents):
        prefix = (
            f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: junk-{index}\n"
        )
        parts.append("---\n" + bomb_document(each, budget, prefix))
    return "".join(parts)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("out_dir", nargs="?", default=".")
    parser.add_argument("--documents", type=int, default=50)
    parser.add_argument("--bytes", type=int, default=951_000, help="size of config.yaml")
    args = parser.parse_args()
    if args.documents < 2:
        raise SystemExit("--documents must be at least 2")
    os.makedirs(args.out_dir, exist_ok=True)
    config = config_text(args.documents, args.bytes)
    files = {
        "config.yaml": config,
        "configmap.yaml": configmap_text(config),
        "manifest.yaml": manifest_text(args.documents, args.bytes),
    }
    for name, text in files.items():
        if len(text.encode()) > 1 << 20:
            raise SystemExit(f"{name} is {len(text)} bytes: over a ConfigMap's 1 MiB")
        with open(os.path.join(args.out_dir, name), "w", encoding="utf-8") as out:
            out.write(text)
        print(f"{name}: {len(text)} bytes")


if __name__ == "__main__":
    main()
