#!/usr/bin/env bash
# What a node's neighbours and operators can do to the agent, played against a binary in a
# throwaway network namespace (and a private state directory), one line per check: a symlink
# planted at the node lock and a lock that cannot be taken, a neighbour's `table ip6 ipmasq`
# and `cleanup`, an explicit --backend against the running agent's, the Accept header's
# q-values at /metrics, and a config key or a failure that would forge or mislead a log line.
# Exit 0 when every check holds; before the fixes each of them failed.
#
#   sudo tests/hostile/lock-neighbours-flags-accept-logs.sh [path/to/ipmasq]   (default: target/debug/ipmasq)
#
# Needs root (ip netns), iptables, nft and python3. Touches nothing outside the namespace and
# the temporary directory, both removed on exit (also on failure).
set -uo pipefail

bin=$(realpath "${1:-target/debug/ipmasq}")
if [ "$(id -u)" -ne 0 ]; then
  echo "lock-neighbours-flags-accept-logs: SKIPPED: needs root to create a network namespace" >&2
  exit 2
fi
ns="ipmasq-hostile-misc-$$"
scratch=$(mktemp -d)
state="$scratch/state"
agent_pid=""
finish() {
  if [ -n "$agent_pid" ]; then
    kill "$agent_pid" 2>/dev/null
    wait "$agent_pid" 2>/dev/null
  fi
  ip netns del "$ns" 2>/dev/null
  rm -rf "$scratch"
}
trap finish EXIT
trap 'exit 130' INT TERM
ip netns add "$ns"
ip netns exec "$ns" ip link set lo up
mkdir -p "$state"

in_ns() { ip netns exec "$ns" env IPMASQ_STATE_DIR="$state" "$@"; }
failures=0
check() {
  local what=$1
  shift
  if "$@" >/dev/null 2>&1; then
    echo "ok    $what"
  else
    echo "FAIL  $what"
    failures=$((failures + 1))
  fi
}
# Waits up to 20 s for a command to succeed (an event, not a guess of how long it takes).
within_20s() {
  local deadline=$((SECONDS + 20))
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -ge "$deadline" ] && return 1
    sleep 0.1
  done
}

# The node lock: a symlink planted at the node lock's path.
inode=$(ip netns exec "$ns" stat -L -c %i /proc/self/ns/net)
lock="$state/agent-net$inode-IP-MASQ-AGENT.lock"
echo precious >"$scratch/victim"
ln -s "$scratch/victim" "$lock"
out=$(in_ns "$bin" agent --once --iptables-mode=nft --config=/nonexistent/x 2>&1)
check "lock: a planted symlink at the lock is replaced (and said), never followed" \
  grep -q "replaced what was planted at the node lock's path" <<<"$out"
check "lock: the symlink's target keeps its bytes" grep -qx precious "$scratch/victim"
check "lock: the agent did not run unlocked" bash -c '! grep -q "running without it" <<<"$1"' _ "$out"
in_ns "$bin" cleanup >/dev/null 2>&1
rm -f "$lock"
mkdir "$lock"
in_ns "$bin" agent --once --iptables-mode=nft --config=/nonexistent/x >"$scratch/once.log" 2>&1
code=$?
check "lock: a lock that cannot be taken: --once fails (exit 1)" test "$code" -eq 1
check "lock: ... and touches no rule" bash -c '! ip netns exec "$1" iptables-nft-save -t nat | grep -q IP-MASQ-AGENT' _ "$ns"
rmdir "$lock"

# A neighbour's `table ip6 ipmasq` and `cleanup`.
in_ns nft add table ip6 ipmasq
in_ns nft add chain ip6 ipmasq theirs '{ type filter hook output priority 0; }'
out=$(in_ns "$bin" cleanup --backend=nftables 2>&1)
check "table: cleanup leaves a neighbour's table ip6 ipmasq" in_ns nft list table ip6 ipmasq
check "table: ... and says why" grep -q "left table ip6 ipmasq: not ours" <<<"$out"

# An explicit flag: show --backend=iptables on a node whose agent runs nftables.
# Started directly (not through a function, which would fork a subshell): `ip netns exec`
# and `env` exec, so $! is the agent itself.
ip netns exec "$ns" env IPMASQ_STATE_DIR="$state" "$bin" agent --backend=nftables \
  --config=/nonexistent/x --metrics-addr=127.0.0.1:9733 >"$scratch/agent.log" 2>&1 &
agent_pid=$!
ready() { in_ns python3 -c 'import urllib.request; urllib.request.urlopen("http://127.0.0.1:9733/readyz", timeout=2)'; }
check "the agent on nftables is ready" within_20s ready
backend_of() { in_ns "$bin" "$@" -o json 2>/dev/null | python3 -c 'import json, sys; print(json.load(sys.stdin)["backend"])'; }
check "flags: show without flags reads the running agent's backend" \
  test "$(backend_of show)" = nftables
check "flags: show --backend=iptables reads iptables" \
  bash -c 'case "$1" in iptables-*) ;; *) exit 1 ;; esac' _ "$(backend_of show --backend=iptables)"
check "flags: show --iptables-mode=legacy reads iptables-legacy" \
  test "$(backend_of show --iptables-mode=legacy)" = iptables-legacy
out=$(in_ns "$bin" cleanup --backend=iptables 2>&1)
check "flags: cleanup --backend=iptables leaves the agent's nftables table" in_ns nft list table ip ipmasq

# /metrics: Accept negotiated by q-value.
content_type() {
  in_ns python3 -c 'import sys, urllib.request
r = urllib.request.urlopen(urllib.request.Request("http://127.0.0.1:9733/metrics", headers={"Accept": sys.argv[1]}), timeout=5)
print(r.headers["Content-Type"])' "$1"
}
check "accept: text/plain;q=0.9,application/openmetrics-text;q=0.1 gets the text format" \
  bash -c '[[ "$1" == text/plain* ]]' _ "$(content_type 'text/plain;q=0.9,application/openmetrics-text;q=0.1')"
check "accept: what Prometheus sends gets OpenMetrics" \
  bash -c '[[ "$1" == application/openmetrics-text* ]]' _ \
  "$(content_type 'application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1')"
kill "$agent_pid"
wait "$agent_pid" 2>/dev/null
agent_pid=""

# Logs: a config key that would forge a field; --once promising a retry.
printf '"x level=ERROR": 1\n' >"$scratch/config"
out=$(in_ns "$bin" agent --dry-run --iptables-mode=nft --config="$scratch/config" 2>&1)
check "log: the message is quoted, the key inside it" \
  grep -qF 'WARN "1:1: [unknown-key] unknown key `x level=ERROR` is ignored' <<<"$out"
mkdir "$scratch/fakes"
printf '#!/bin/sh\necho "iptables-restore: simulated failure" >&2\nexit 1\n' >"$scratch/fakes/iptables-nft-restore"
chmod +x "$scratch/fakes/iptables-nft-restore"
out=$(ip netns exec "$ns" env IPMASQ_STATE_DIR="$state" PATH="$scratch/fakes:$PATH" \
  "$bin" agent --once --iptables-mode=nft --config=/nonexistent/x 2>&1)
check "log: a failing --once says what failed" grep -q "simulated failure" <<<"$out"
check "log: ... without promising a retry" bash -c '! grep -q "retry" <<<"$1"' _ "$out"

echo "lock-neighbours-flags-accept-logs: $failures failed"
[ "$failures" -eq 0 ]
