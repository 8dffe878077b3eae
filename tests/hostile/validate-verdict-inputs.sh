#!/bin/sh
# Regenerates the inputs that once passed `validate` and then failed on a node into DIR
# (default: the current directory), one file each; tests/cli/validate_verdicts.rs runs
# `ipmasq validate` on every one and checks its verdict. Each file is what was found to pass `validate` and then
# fail on a node, or to be read otherwise than upstream reads it.
set -eu
dir=${1:-.}
mkdir -p "$dir"
cd "$dir"

# Interface patterns: a 16-byte pattern, which iptables-restore ("must be shorter than IFNAMSIZ") and nft
# ("String exceeds maximum length of 16") refuse; and a name with the byte 0xA0 (à), white
# space to the kernel.
printf 'outputInterfaces: ["abcdefghijklmno+"]\n' >interface-pattern-16-bytes.yaml
printf 'outputInterfaces: ["abcdefghijklmno*"]\n' >interface-pattern-16-bytes-nft.yaml
printf 'outputInterfaces: ["eth\303\240"]\n' >interface-kernel-space.yaml

# A null list entry (upstream keeps the default 172.16.0.0/12 at that position).
printf 'nonMasqueradeCIDRs: [10.0.0.0/8, ~]\n' >null-entry.yaml

# --to-ports above 65535, as the agent's arguments.
printf -- '--to-ports=1024-70000\n' >to-ports-above-65535.args

# ip-masq-agent-v2 ConfigMaps. Files that list no CIDRs: v2's list starts empty.
configmap() { # name, config lines...
    name=$1
    shift
    printf 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  namespace: kube-system\ndata:\n  %s: |\n' "$name" "$name"
    for line in "$@"; do printf '    %s\n' "$line"; done
}
cidrs() { # second octet, count
    i=0
    list=""
    while [ "$i" -lt "$2" ]; do
        list="$list${list:+, }10.$1.$i.0/24"
        i=$((i + 1))
    done
    printf 'nonMasqueradeCIDRs: [%s]' "$list"
}
{
    configmap ip-masq-agent-cloud 'masqLinkLocal: false'
    printf -- '---\n'
    configmap ip-masq-agent-user 'masqLinkLocalIPv6: false'
} >v2-no-cidrs.yaml
# 40 CIDRs in each of two files: v2 limits each file to 64, never the merged 80.
{
    configmap ip-masq-agent-cloud "$(cidrs 1 40)"
    printf -- '---\n'
    configmap ip-masq-agent-user "$(cidrs 2 40)"
} >v2-80-cidrs-in-two-files.yaml
# 65 CIDRs in one file: over v2's 64.
configmap ip-masq-agent-user "$(cidrs 3 65)" >v2-65-cidrs-in-one-file.yaml

# One key in data and binaryData, which the API server refuses.
{
    printf 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ip-masq-agent\n  namespace: kube-system\n'
    printf 'data:\n  config: |\n    nonMasqueradeCIDRs: [10.0.0.0/8]\n'
    printf 'binaryData:\n  config: %s\n' "$(printf 'nonMasqueradeCIDRs: [10.0.0.0/8]\n' | base64 -w0)"
} >configmap-key-twice.yaml

# A ConfigMap without data.config, whose code JSON spelt otherwise than text.
printf 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ip-masq-agent\n  namespace: kube-system\ndata:\n  agent-config: |\n    cidrLimit: 3\n' >configmap-without-config.yaml
