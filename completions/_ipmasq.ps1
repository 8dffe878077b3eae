
using namespace System.Management.Automation
using namespace System.Management.Automation.Language

Register-ArgumentCompleter -Native -CommandName 'ipmasq' -ScriptBlock {
    param($wordToComplete, $commandAst, $cursorPosition)

    $commandElements = $commandAst.CommandElements
    $command = @(
        'ipmasq'
        for ($i = 1; $i -lt $commandElements.Count; $i++) {
            $element = $commandElements[$i]
            if ($element -isnot [StringConstantExpressionAst] -or
                $element.StringConstantType -ne [StringConstantType]::BareWord -or
                $element.Value.StartsWith('-') -or
                $element.Value -eq $wordToComplete) {
                break
        }
        $element.Value
    }) -join ';'

    $completions = @(switch ($command) {
        'ipmasq' {
            [CompletionResult]::new('--list', '--list', [CompletionResultType]::ParameterName, 'Print the applet names, one per line, and exit')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('agent', 'agent', [CompletionResultType]::ParameterValue, 'Run the masquerade agent (the ip-masq-agent daemon)')
            [CompletionResult]::new('fleet', 'fleet', [CompletionResultType]::ParameterValue, 'Every node''s IPMasqAgentReady condition in one table: which config, which backend, in sync or not')
            [CompletionResult]::new('who', 'who', [CompletionResultType]::ParameterValue, 'Which pod was behind the node''s address and port at a time, from the agent''s SNAT log')
            [CompletionResult]::new('show', 'show', [CompletionResultType]::ParameterValue, 'Show the live masquerade chain of this node (and, with --config, whether it drifted)')
            [CompletionResult]::new('explain', 'explain', [CompletionResultType]::ParameterValue, 'Say whether traffic to an address is masqueraded, by which rule and config entry')
            [CompletionResult]::new('cleanup', 'cleanup', [CompletionResultType]::ParameterValue, 'Remove the masquerade chain and its POSTROUTING jumps, from every iptables variant')
            [CompletionResult]::new('validate', 'validate', [CompletionResultType]::ParameterValue, 'Check config files or ConfigMap manifests as the agent would read them')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'ipmasq;agent' {
            [CompletionResult]::new('--config', '--config', [CompletionResultType]::ParameterName, 'Config file (YAML or JSON); a missing file means upstream''s defaults')
            [CompletionResult]::new('--config-dir', '--config-dir', [CompletionResultType]::ParameterName, 'Read every `ip-masq*` file in DIR, in name order, and merge them (ip-masq-agent-v2''s layout: lists united, booleans OR''d, the shortest resyncInterval); replaces --config')
            [CompletionResult]::new('--config-writer-deadline', '--config-writer-deadline', [CompletionResultType]::ParameterName, 'How long a writer may keep the config file open after changing it (a rewrite in place: `cat > FILE`, an editor saving) before the agent reads it as it is; until then the rules of the config in force stay. A rename into place (kubelet''s ConfigMap volume, an atomic write) is read at once')
            [CompletionResult]::new('--config-source', '--config-source', [CompletionResultType]::ParameterName, 'Where the config comes from: the file (--config or --config-dir, as kubelet mounts the ConfigMap: a change arrives with kubelet''s next volume sync, a minute or more), or the Kubernetes API (the ConfigMap --configmap watched: a change arrives in milliseconds; the config last applied is kept in --state-dir and applied at once when the API is away at start)')
            [CompletionResult]::new('--configmap', '--configmap', [CompletionResultType]::ParameterName, 'With --config-source=api: the ConfigMap that holds the config (its data key `config`, the same text as the file); needs get, list and watch on configmaps in NAMESPACE')
            [CompletionResult]::new('--kubeconfig', '--kubeconfig', [CompletionResultType]::ParameterName, 'With --config-source=api: the kubeconfig to reach the API with [default: the pod''s service account]')
            [CompletionResult]::new('--node-name', '--node-name', [CompletionResultType]::ParameterName, 'With --config-source=api: this node''s Node name, whose labels select the node pools [default: $NODE_NAME (the downward API''s spec.nodeName), else the host name]')
            [CompletionResult]::new('--node-status', '--node-status', [CompletionResultType]::ParameterName, 'With --config-source=api: write this node''s IPMasqAgentReady condition and an Event when a config is rejected (false: write nothing to the API, which is then only read; the agent needs no write permission at all)')
            [CompletionResult]::new('--status-spread', '--status-spread', [CompletionResultType]::ParameterName, 'With --config-source=api: status writes come in cycles of this length on the wall clock, each node at its own place in the cycle (a hash of the node name) and at most once a cycle, so a fleet''s writes are spread whatever the edit rate (5,000 nodes over 30s: about 170 writes/s); a write after a change waits for the node''s place, at most this long; 0 writes at once. The rules never wait')
            [CompletionResult]::new('--api-view-stale-after', '--api-view-stale-after', [CompletionResultType]::ParameterName, 'With --config-source=api: when the API has not answered for an input (the ConfigMaps, the Node, the EgressNATPolicies) for this many seconds, the Node condition says ApiViewStale (status True: the rules are those of the last config seen; /readyz stays 200). A healthy idle watch hears a bookmark about once a minute (Kubernetes 1.27+) or is renewed after 115 s of silence; a CRD that is not served is asked every 5 minutes, so the EgressNATPolicies get 300 s more')
            [CompletionResult]::new('--resync-interval', '--resync-interval', [CompletionResultType]::ParameterName, 'Resync interval when no config sets resyncInterval, in seconds (ip-masq-agent-v2''s flag) or as a Go duration [default: 60]')
            [CompletionResult]::new('--masq-chain', '--masq-chain', [CompletionResultType]::ParameterName, 'Name of the nat chain for the masquerade rules')
            [CompletionResult]::new('--enable-ipv6', '--enable-ipv6', [CompletionResultType]::ParameterName, 'Also manage IPv6 (ip6tables); IPv6 CIDRs are an error without it. Unset, enableIPv6 in the config decides (default false); set, it wins over the config')
            [CompletionResult]::new('--nomasq-all-reserved-ranges', '--nomasq-all-reserved-ranges', [CompletionResultType]::ParameterName, 'Default list also skips masquerade for every RFC-reserved IPv4 range, not only RFC 1918')
            [CompletionResult]::new('--random-fully', '--random-fully', [CompletionResultType]::ParameterName, 'Add --random-fully to MASQUERADE rules (only where iptables supports it, >= 1.6.2)')
            [CompletionResult]::new('--to-ports', '--to-ports', [CompletionResultType]::ParameterName, 'Source ports for MASQUERADE, e.g. 1024-29999,32768-65535 (tcp, udp and sctp)')
            [CompletionResult]::new('--backend', '--backend', [CompletionResultType]::ParameterName, 'The firewall backend')
            [CompletionResult]::new('--iptables-mode', '--iptables-mode', [CompletionResultType]::ParameterName, 'Which iptables to drive')
            [CompletionResult]::new('--nftables-table-owner', '--nftables-table-owner', [CompletionResultType]::ParameterName, 'With --backend=nftables on Linux 6.9 or later: hold our tables (nf_tables'' owner and persist flags), so that while the agent runs no other process can delete or change them (`nft delete table ip ipmasq` is refused, `nft flush ruleset` passes over them); they stay when the agent exits, for the next agent to claim. false: leave them open to everyone (a neighbour''s change is then repaired as soon as its notification is heard)')
            [CompletionResult]::new('--conntrack-reset', '--conntrack-reset', [CompletionResultType]::ParameterName, 'After a change (or installing the rules from nothing), delete the conntrack entries whose NAT it made wrong, so their flows follow: connectionless flows (UDP, ICMP, ...; never end on their own), all (TCP and SCTP too: those connections break), or off')
            [CompletionResult]::new('--cleanup-on-exit', '--cleanup-on-exit', [CompletionResultType]::ParameterName, 'Remove the chain and its jump on SIGTERM/SIGINT, except when systemd restarts the unit (off: a rolling update must not leave a window without masquerade)')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format (also spelt --logging-format, as Kubernetes components spell it)')
            [CompletionResult]::new('--logging-format', '--logging-format', [CompletionResultType]::ParameterName, 'Log line format (also spelt --logging-format, as Kubernetes components spell it)')
            [CompletionResult]::new('--metrics-addr', '--metrics-addr', [CompletionResultType]::ParameterName, 'Serve /healthz, /readyz and /metrics here (HOST:PORT), or `off`')
            [CompletionResult]::new('--snat-log', '--snat-log', [CompletionResultType]::ParameterName, 'Log every flow our rules source-NATed, one JSON line at its start and one at its end (time, pod source, translated address:port, destination; packets and bytes when conntrack accounting is on), to PATH (appended to, rotated by size) or `-` (standard output); also keeps the SNAT port-pressure metrics. `ipmasq who` answers from it (it reads /var/log/ipmasq/snat.log unless given --log). It records who talked to whom: the file is created readable by its owner only, and an existing one readable by others is set to 0600 (with a warning)')
            [CompletionResult]::new('--snat-log-max-size', '--snat-log-max-size', [CompletionResultType]::ParameterName, 'Rotate the SNAT log before it grows past SIZE bytes (suffix K, M or G: KiB, MiB, GiB)')
            [CompletionResult]::new('--snat-log-keep', '--snat-log-keep', [CompletionResultType]::ParameterName, 'Rotated SNAT log files kept: PATH.1 (the newest) to PATH.N (the oldest)')
            [CompletionResult]::new('--state-dir', '--state-dir', [CompletionResultType]::ParameterName, 'Directory of the running agent''s state file [default: $IPMASQ_STATE_DIR, else /run/ipmasq]')
            [CompletionResult]::new('--last-known-good-dir', '--last-known-good-dir', [CompletionResultType]::ParameterName, 'With --config-source=api: directory of the last-known-good config, kept across reboots so a rebooted node applies it before the API answers. Made 0755 when missing; refused when it is a symlink, another user''s, or writable by others [default: $IPMASQ_LAST_KNOWN_GOOD_DIR, else /var/lib/ipmasq]')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'klog verbosity: 0-1 info, 2-4 debug, 5+ trace; from 6 the libraries'' events too (the Kubernetes client''s requests in API mode)')
            [CompletionResult]::new('--v', '--v', [CompletionResultType]::ParameterName, 'klog verbosity: 0-1 info, 2-4 debug, 5+ trace; from 6 the libraries'' events too (the Kubernetes client''s requests in API mode)')
            [CompletionResult]::new('--logtostderr', '--logtostderr', [CompletionResultType]::ParameterName, 'Accepted for klog compatibility; logs always go to stderr')
            [CompletionResult]::new('--alsologtostderr', '--alsologtostderr', [CompletionResultType]::ParameterName, 'Accepted for klog compatibility; logs always go to stderr')
            [CompletionResult]::new('--stderrthreshold', '--stderrthreshold', [CompletionResultType]::ParameterName, 'stderrthreshold')
            [CompletionResult]::new('--log-dir', '--log-dir', [CompletionResultType]::ParameterName, 'log-dir')
            [CompletionResult]::new('--log-file', '--log-file', [CompletionResultType]::ParameterName, 'log-file')
            [CompletionResult]::new('--log-file-max-size', '--log-file-max-size', [CompletionResultType]::ParameterName, 'log-file-max-size')
            [CompletionResult]::new('--vmodule', '--vmodule', [CompletionResultType]::ParameterName, 'vmodule')
            [CompletionResult]::new('--log-backtrace-at', '--log-backtrace-at', [CompletionResultType]::ParameterName, 'log-backtrace-at')
            [CompletionResult]::new('--skip-headers', '--skip-headers', [CompletionResultType]::ParameterName, 'skip-headers')
            [CompletionResult]::new('--add-dir-header', '--add-dir-header', [CompletionResultType]::ParameterName, 'add-dir-header')
            [CompletionResult]::new('--node-taint', '--node-taint', [CompletionResultType]::ParameterName, 'With --config-source=api: keep pods off this node until its rules are in. The agent removes the taint node.ipmasq.io/agent-not-ready from its own Node after its first sync whose rules it read back from the kernel, and puts it back (NoSchedule) when it cannot enforce: no usable config, a first sync that failed, a stop with --cleanup-on-exit, or a stop while the kubelet says the node is shutting down. The taint is put on new Nodes by the kubelet (--register-with-taints) or the node pool; needs patch on nodes (packaging/kubernetes/api-mode/rbac.yaml) and, to narrow that to this one taint of its own Node, the admission policy (packaging/kubernetes/admission)')
            [CompletionResult]::new('--once', '--once', [CompletionResultType]::ParameterName, 'Sync once, then exit (0 when the rules are in place)')
            [CompletionResult]::new('--offline', '--offline', [CompletionResultType]::ParameterName, 'With --once: never read the Kubernetes API. In API mode the pass applies the last-known-good saved by an earlier agent (see --last-known-good-dir), and fails when there is none; a file is read as always. For a unit ordered before the kubelet at boot (ipmasq-boot-guard.service), so the rules are in before any pod starts, whatever the network or the API can do yet')
            [CompletionResult]::new('--dry-run', '--dry-run', [CompletionResultType]::ParameterName, 'Print the transaction a sync would apply and exit; change nothing')
            [CompletionResult]::new('--snat-port-pressure', '--snat-port-pressure', [CompletionResultType]::ParameterName, 'Keep the SNAT port-pressure metrics (ipmasq_snat_ports_in_use and the share taken toward the busiest destination) from conntrack''s events, without --snat-log')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'ipmasq;fleet' {
            [CompletionResult]::new('--kubeconfig', '--kubeconfig', [CompletionResultType]::ParameterName, 'The kubeconfig to use (its current context) [default: as kubectl: $KUBECONFIG, else ~/.kube/config, else the pod''s service account]')
            [CompletionResult]::new('-l', '-l', [CompletionResultType]::ParameterName, 'Only the Nodes whose labels match this selector (kubectl''s -l), e.g. pool=gpu')
            [CompletionResult]::new('--selector', '--selector', [CompletionResultType]::ParameterName, 'Only the Nodes whose labels match this selector (kubectl''s -l), e.g. pool=gpu')
            [CompletionResult]::new('--timeout', '--timeout', [CompletionResultType]::ParameterName, 'The deadline of the whole listing, every page included (a Go duration)')
            [CompletionResult]::new('--page-size', '--page-size', [CompletionResultType]::ParameterName, 'Nodes per page of the list (the server''s limit/continue paging)')
            [CompletionResult]::new('--agent-pods', '--agent-pods', [CompletionResultType]::ParameterName, 'Also read the agents'' pods (one list), so a node whose agent is not running, restarting or not ready is called so whatever its condition says (needs `list` on pods in --agent-namespace; false: judge by the conditions alone)')
            [CompletionResult]::new('--agent-namespace', '--agent-namespace', [CompletionResultType]::ParameterName, 'The namespace of the agents'' DaemonSet')
            [CompletionResult]::new('--agent-selector', '--agent-selector', [CompletionResultType]::ParameterName, 'The label selector of the agents'' pods (the DaemonSet''s pod template labels)')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'Colour the text output')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('rollout', 'rollout', [CompletionResultType]::ParameterValue, 'Roll a config change out in waves that halt themselves on the first failing node')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'ipmasq;fleet;rollout' {
            [CompletionResult]::new('--kubeconfig', '--kubeconfig', [CompletionResultType]::ParameterName, 'The kubeconfig to use (its current context) [default: as kubectl: $KUBECONFIG, else ~/.kube/config, else the pod''s service account]')
            [CompletionResult]::new('--configmap', '--configmap', [CompletionResultType]::ParameterName, 'The agents'' base ConfigMap; the rollout is NAME-next beside it')
            [CompletionResult]::new('--timeout', '--timeout', [CompletionResultType]::ParameterName, 'The deadline of every request and of the whole command (a Go duration)')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Output format (status)')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Output format (status)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('start', 'start', [CompletionResultType]::ParameterValue, 'Create NAME-next from FILE with its schedule: the first wave starts at --start')
            [CompletionResult]::new('status', 'status', [CompletionResultType]::ParameterValue, 'The wave, the nodes on the base, on the next config and failed, a halt and who is next')
            [CompletionResult]::new('promote', 'promote', [CompletionResultType]::ParameterValue, 'The next config becomes the base; the rollout''s ConfigMap is deleted')
            [CompletionResult]::new('abort', 'abort', [CompletionResultType]::ParameterValue, 'Every node back on the base at once; the rollout stays, marked aborted, for the record')
            [CompletionResult]::new('resume', 'resume', [CompletionResultType]::ParameterValue, 'After a halt: the rollout starts again from a wave (the first by default), now')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'ipmasq;fleet;rollout;start' {
            [CompletionResult]::new('--waves', '--waves', [CompletionResultType]::ParameterName, 'The waves, as percentages of the nodes, increasing (each node''s place is a hash of its name: a node once in stays in)')
            [CompletionResult]::new('--soak', '--soak', [CompletionResultType]::ParameterName, 'The soak between two waves (a Go duration)')
            [CompletionResult]::new('--start', '--start', [CompletionResultType]::ParameterName, 'When the first wave starts (RFC 3339) [default: now]')
            [CompletionResult]::new('--node-selector', '--node-selector', [CompletionResultType]::ParameterName, 'Only the nodes this label selector matches take part (kubectl''s -l syntax)')
            [CompletionResult]::new('--invariant', '--invariant', [CompletionResultType]::ParameterName, 'What must stay true on every node of the wave: keep|masquerade DEST [from SRC] [via IFACE] (repeatable), judged on the live rules as `explain` judges them')
            [CompletionResult]::new('--kubeconfig', '--kubeconfig', [CompletionResultType]::ParameterName, 'The kubeconfig to use (its current context) [default: as kubectl: $KUBECONFIG, else ~/.kube/config, else the pod''s service account]')
            [CompletionResult]::new('--configmap', '--configmap', [CompletionResultType]::ParameterName, 'The agents'' base ConfigMap; the rollout is NAME-next beside it')
            [CompletionResult]::new('--timeout', '--timeout', [CompletionResultType]::ParameterName, 'The deadline of every request and of the whole command (a Go duration)')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Output format (status)')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Output format (status)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'ipmasq;fleet;rollout;status' {
            [CompletionResult]::new('--kubeconfig', '--kubeconfig', [CompletionResultType]::ParameterName, 'The kubeconfig to use (its current context) [default: as kubectl: $KUBECONFIG, else ~/.kube/config, else the pod''s service account]')
            [CompletionResult]::new('--configmap', '--configmap', [CompletionResultType]::ParameterName, 'The agents'' base ConfigMap; the rollout is NAME-next beside it')
            [CompletionResult]::new('--timeout', '--timeout', [CompletionResultType]::ParameterName, 'The deadline of every request and of the whole command (a Go duration)')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Output format (status)')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Output format (status)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'ipmasq;fleet;rollout;promote' {
            [CompletionResult]::new('--kubeconfig', '--kubeconfig', [CompletionResultType]::ParameterName, 'The kubeconfig to use (its current context) [default: as kubectl: $KUBECONFIG, else ~/.kube/config, else the pod''s service account]')
            [CompletionResult]::new('--configmap', '--configmap', [CompletionResultType]::ParameterName, 'The agents'' base ConfigMap; the rollout is NAME-next beside it')
            [CompletionResult]::new('--timeout', '--timeout', [CompletionResultType]::ParameterName, 'The deadline of every request and of the whole command (a Go duration)')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Output format (status)')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Output format (status)')
            [CompletionResult]::new('--force', '--force', [CompletionResultType]::ParameterName, 'Promote although the rollout is not done, a node of it failed, or the base was edited since the rollout started (that edit is then overwritten)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'ipmasq;fleet;rollout;abort' {
            [CompletionResult]::new('--kubeconfig', '--kubeconfig', [CompletionResultType]::ParameterName, 'The kubeconfig to use (its current context) [default: as kubectl: $KUBECONFIG, else ~/.kube/config, else the pod''s service account]')
            [CompletionResult]::new('--configmap', '--configmap', [CompletionResultType]::ParameterName, 'The agents'' base ConfigMap; the rollout is NAME-next beside it')
            [CompletionResult]::new('--timeout', '--timeout', [CompletionResultType]::ParameterName, 'The deadline of every request and of the whole command (a Go duration)')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Output format (status)')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Output format (status)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'ipmasq;fleet;rollout;resume' {
            [CompletionResult]::new('--from-wave', '--from-wave', [CompletionResultType]::ParameterName, 'The wave to start again from (1-based): the first by default, so the canary comes first again; the halted wave''s number skips the waves before it')
            [CompletionResult]::new('--kubeconfig', '--kubeconfig', [CompletionResultType]::ParameterName, 'The kubeconfig to use (its current context) [default: as kubectl: $KUBECONFIG, else ~/.kube/config, else the pod''s service account]')
            [CompletionResult]::new('--configmap', '--configmap', [CompletionResultType]::ParameterName, 'The agents'' base ConfigMap; the rollout is NAME-next beside it')
            [CompletionResult]::new('--timeout', '--timeout', [CompletionResultType]::ParameterName, 'The deadline of every request and of the whole command (a Go duration)')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Output format (status)')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Output format (status)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'ipmasq;fleet;rollout;help' {
            [CompletionResult]::new('start', 'start', [CompletionResultType]::ParameterValue, 'Create NAME-next from FILE with its schedule: the first wave starts at --start')
            [CompletionResult]::new('status', 'status', [CompletionResultType]::ParameterValue, 'The wave, the nodes on the base, on the next config and failed, a halt and who is next')
            [CompletionResult]::new('promote', 'promote', [CompletionResultType]::ParameterValue, 'The next config becomes the base; the rollout''s ConfigMap is deleted')
            [CompletionResult]::new('abort', 'abort', [CompletionResultType]::ParameterValue, 'Every node back on the base at once; the rollout stays, marked aborted, for the record')
            [CompletionResult]::new('resume', 'resume', [CompletionResultType]::ParameterValue, 'After a halt: the rollout starts again from a wave (the first by default), now')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'ipmasq;fleet;rollout;help;start' {
            break
        }
        'ipmasq;fleet;rollout;help;status' {
            break
        }
        'ipmasq;fleet;rollout;help;promote' {
            break
        }
        'ipmasq;fleet;rollout;help;abort' {
            break
        }
        'ipmasq;fleet;rollout;help;resume' {
            break
        }
        'ipmasq;fleet;rollout;help;help' {
            break
        }
        'ipmasq;fleet;help' {
            [CompletionResult]::new('rollout', 'rollout', [CompletionResultType]::ParameterValue, 'Roll a config change out in waves that halt themselves on the first failing node')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'ipmasq;fleet;help;rollout' {
            [CompletionResult]::new('start', 'start', [CompletionResultType]::ParameterValue, 'Create NAME-next from FILE with its schedule: the first wave starts at --start')
            [CompletionResult]::new('status', 'status', [CompletionResultType]::ParameterValue, 'The wave, the nodes on the base, on the next config and failed, a halt and who is next')
            [CompletionResult]::new('promote', 'promote', [CompletionResultType]::ParameterValue, 'The next config becomes the base; the rollout''s ConfigMap is deleted')
            [CompletionResult]::new('abort', 'abort', [CompletionResultType]::ParameterValue, 'Every node back on the base at once; the rollout stays, marked aborted, for the record')
            [CompletionResult]::new('resume', 'resume', [CompletionResultType]::ParameterValue, 'After a halt: the rollout starts again from a wave (the first by default), now')
            break
        }
        'ipmasq;fleet;help;rollout;start' {
            break
        }
        'ipmasq;fleet;help;rollout;status' {
            break
        }
        'ipmasq;fleet;help;rollout;promote' {
            break
        }
        'ipmasq;fleet;help;rollout;abort' {
            break
        }
        'ipmasq;fleet;help;rollout;resume' {
            break
        }
        'ipmasq;fleet;help;help' {
            break
        }
        'ipmasq;who' {
            [CompletionResult]::new('--pod', '--pod', [CompletionResultType]::ParameterName, 'Instead of an address: every translation of this pod (NAMESPACE/NAME, as an agent in API mode names it in the log), and the new connections the pod share refused it, narrowed with --since and --until')
            [CompletionResult]::new('--at', '--at', [CompletionResultType]::ParameterName, 'Only the flows alive at this time (RFC 3339; 2026-11-26 12:03:04 is UTC; also 26/Nov/2026:12:03:04 +0000 and @UNIX-SECONDS) [default: every flow in the log]')
            [CompletionResult]::new('--since', '--since', [CompletionResultType]::ParameterName, 'Only the flows alive at or after this time (the forms of --at)')
            [CompletionResult]::new('--until', '--until', [CompletionResultType]::ParameterName, 'Only the flows alive at or before this time (the forms of --at)')
            [CompletionResult]::new('--tolerance', '--tolerance', [CompletionResultType]::ParameterName, 'With --at: also the flows that ended or began this close to it (the reporter''s clock and the node''s differ; a Go duration)')
            [CompletionResult]::new('--proto', '--proto', [CompletionResultType]::ParameterName, 'Only flows of this protocol (as the log names it: tcp, udp, icmp, icmpv6, or a number)')
            [CompletionResult]::new('--log', '--log', [CompletionResultType]::ParameterName, 'The SNAT log the agent writes (--snat-log); PATH.1 (newest) … PATH.N (oldest) are read too; - reads standard input (what an agent run with --snat-log - printed)')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'Colour the text output')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'ipmasq;show' {
            [CompletionResult]::new('--config', '--config', [CompletionResultType]::ParameterName, 'Also judge the live rules against this config (as the agent would read it)')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--state-dir', '--state-dir', [CompletionResultType]::ParameterName, 'Directory of the running agent''s state file [default: $IPMASQ_STATE_DIR, else /run/ipmasq]')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'Colour the text output')
            [CompletionResult]::new('--masq-chain', '--masq-chain', [CompletionResultType]::ParameterName, 'The chain to show (the agent''s --masq-chain)')
            [CompletionResult]::new('--enable-ipv6', '--enable-ipv6', [CompletionResultType]::ParameterName, 'Also show the IPv6 chain (ip6tables), as an agent run with --enable-ipv6 keeps it')
            [CompletionResult]::new('--nomasq-all-reserved-ranges', '--nomasq-all-reserved-ranges', [CompletionResultType]::ParameterName, 'The agent''s --nomasq-all-reserved-ranges: with --config, judge the rules as an agent run with this flag would write them')
            [CompletionResult]::new('--random-fully', '--random-fully', [CompletionResultType]::ParameterName, 'The agent''s --random-fully: with --config, judge the rules as an agent run with this flag would write them')
            [CompletionResult]::new('--to-ports', '--to-ports', [CompletionResultType]::ParameterName, 'The agent''s --to-ports: with --config, judge the rules as an agent run with this flag would write them')
            [CompletionResult]::new('--backend', '--backend', [CompletionResultType]::ParameterName, 'The backend whose rules to show (the agent''s --backend); given, it wins over the running agent''s backend')
            [CompletionResult]::new('--iptables-mode', '--iptables-mode', [CompletionResultType]::ParameterName, 'Which iptables to read (the agent''s --iptables-mode; auto: whichever holds rules); given, it wins over the running agent''s backend')
            [CompletionResult]::new('--wide', '--wide', [CompletionResultType]::ParameterName, 'Add each rule''s comment to the tables (wider than 80 columns)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'ipmasq;explain' {
            [CompletionResult]::new('--from', '--from', [CompletionResultType]::ParameterName, 'The source address (a pod) [default: the first address of the first masqueradeSourceCIDRs range of DEST''s family, else any source]')
            [CompletionResult]::new('--out-interface', '--out-interface', [CompletionResultType]::ParameterName, 'The interface the traffic leaves by, for a config scoped with outputInterfaces [default: the interface of the kernel''s route to DEST]')
            [CompletionResult]::new('--config', '--config', [CompletionResultType]::ParameterName, 'Explain with this config file [default: the running agent''s config, else /etc/config/ip-masq-agent]')
            [CompletionResult]::new('--config-dir', '--config-dir', [CompletionResultType]::ParameterName, 'Explain with the merged `ip-masq*` files of DIR (as `agent --config-dir`)')
            [CompletionResult]::new('--state-dir', '--state-dir', [CompletionResultType]::ParameterName, 'Directory of the running agent''s state file [default: $IPMASQ_STATE_DIR, else /run/ipmasq]')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'Colour the text output')
            [CompletionResult]::new('--masq-chain', '--masq-chain', [CompletionResultType]::ParameterName, 'The chain whose live rules to walk (the agent''s --masq-chain)')
            [CompletionResult]::new('--enable-ipv6', '--enable-ipv6', [CompletionResultType]::ParameterName, 'Judge IPv6 destinations too, as an agent run with --enable-ipv6 does')
            [CompletionResult]::new('--nomasq-all-reserved-ranges', '--nomasq-all-reserved-ranges', [CompletionResultType]::ParameterName, 'The agent''s --nomasq-all-reserved-ranges: judge the config as an agent run with it reads it')
            [CompletionResult]::new('--random-fully', '--random-fully', [CompletionResultType]::ParameterName, 'The agent''s --random-fully: whether the MASQUERADE it reports carries it')
            [CompletionResult]::new('--to-ports', '--to-ports', [CompletionResultType]::ParameterName, 'The agent''s --to-ports: the source ports the MASQUERADE it reports uses')
            [CompletionResult]::new('--backend', '--backend', [CompletionResultType]::ParameterName, 'The backend whose live rules to walk (the agent''s --backend); given, it wins over the running agent''s backend')
            [CompletionResult]::new('--iptables-mode', '--iptables-mode', [CompletionResultType]::ParameterName, 'Which iptables to read the live rules from (the agent''s --iptables-mode; auto: whichever holds rules); given, it wins over the running agent''s backend')
            [CompletionResult]::new('--no-live', '--no-live', [CompletionResultType]::ParameterName, 'Judge the config only; read neither the live rules nor the conntrack table (needs no privileges)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'ipmasq;cleanup' {
            [CompletionResult]::new('--masq-chain', '--masq-chain', [CompletionResultType]::ParameterName, 'Name of the chain to remove')
            [CompletionResult]::new('--all-variants', '--all-variants', [CompletionResultType]::ParameterName, 'Clean both iptables-nft and iptables-legacy (the default, unless --iptables-mode=nft or =legacy is given); with =false only the variant --iptables-mode picks')
            [CompletionResult]::new('--state-dir', '--state-dir', [CompletionResultType]::ParameterName, 'Directory of the running agent''s state file [default: $IPMASQ_STATE_DIR, else /run/ipmasq]')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Output format')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'Colour the text output')
            [CompletionResult]::new('--backend', '--backend', [CompletionResultType]::ParameterName, 'The backend whose rules to remove [default: every backend]')
            [CompletionResult]::new('--iptables-mode', '--iptables-mode', [CompletionResultType]::ParameterName, 'The iptables variant to clean: given as nft or legacy, only that one (unless --all-variants is given too); auto with --all-variants=false: whichever holds rules')
            [CompletionResult]::new('--dry-run', '--dry-run', [CompletionResultType]::ParameterName, 'Print what would be removed; change nothing')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'ipmasq;validate' {
            [CompletionResult]::new('--to-ports', '--to-ports', [CompletionResultType]::ParameterName, 'The agent''s --to-ports, checked as the agent checks it: a value it refuses (a port above 65535) is a usage error here too')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Report format')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Report format')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'Colour the text report')
            [CompletionResult]::new('--node-labels', '--node-labels', [CompletionResultType]::ParameterName, 'Also show the config of a node with these labels (k=v,k2=v2, as kubelet''s --node-labels): which node pools (ip-masq-agent-* ConfigMaps with ipmasq.io/node-selector) apply to it, and the base and those pools merged, with the destinations of the run''s EgressNATPolicy objects added')
            [CompletionResult]::new('--enable-ipv6', '--enable-ipv6', [CompletionResultType]::ParameterName, 'Judge as an agent run with --enable-ipv6 does: IPv6 CIDRs are an error without it')
            [CompletionResult]::new('--nomasq-all-reserved-ranges', '--nomasq-all-reserved-ranges', [CompletionResultType]::ParameterName, 'Judge as an agent run with --nomasq-all-reserved-ranges does: its default list then keeps every RFC-reserved IPv4 range')
            [CompletionResult]::new('--strict', '--strict', [CompletionResultType]::ParameterName, 'Treat warnings as errors')
            [CompletionResult]::new('--print-effective', '--print-effective', [CompletionResultType]::ParameterName, 'Also print the effective config (after defaults) of each valid input')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'List the files of a directory that were skipped as not ip-masq-agent configs, and why')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'List the files of a directory that were skipped as not ip-masq-agent configs, and why')
            [CompletionResult]::new('--merged', '--merged', [CompletionResultType]::ParameterName, 'Merge each directory''s `ip-masq*` files as `agent --config-dir` does, and show the merged lists with the file and line of every entry')
            [CompletionResult]::new('--no-node-checks', '--no-node-checks', [CompletionResultType]::ParameterName, 'Skip the checks against this machine''s addresses and interfaces (whether it holds the outputAddress, whether each outputInterfaces pattern matches an interface here): for a CI runner that is no node')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'ipmasq;help' {
            [CompletionResult]::new('agent', 'agent', [CompletionResultType]::ParameterValue, 'Run the masquerade agent (the ip-masq-agent daemon)')
            [CompletionResult]::new('fleet', 'fleet', [CompletionResultType]::ParameterValue, 'Every node''s IPMasqAgentReady condition in one table: which config, which backend, in sync or not')
            [CompletionResult]::new('who', 'who', [CompletionResultType]::ParameterValue, 'Which pod was behind the node''s address and port at a time, from the agent''s SNAT log')
            [CompletionResult]::new('show', 'show', [CompletionResultType]::ParameterValue, 'Show the live masquerade chain of this node (and, with --config, whether it drifted)')
            [CompletionResult]::new('explain', 'explain', [CompletionResultType]::ParameterValue, 'Say whether traffic to an address is masqueraded, by which rule and config entry')
            [CompletionResult]::new('cleanup', 'cleanup', [CompletionResultType]::ParameterValue, 'Remove the masquerade chain and its POSTROUTING jumps, from every iptables variant')
            [CompletionResult]::new('validate', 'validate', [CompletionResultType]::ParameterValue, 'Check config files or ConfigMap manifests as the agent would read them')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'ipmasq;help;agent' {
            break
        }
        'ipmasq;help;fleet' {
            [CompletionResult]::new('rollout', 'rollout', [CompletionResultType]::ParameterValue, 'Roll a config change out in waves that halt themselves on the first failing node')
            break
        }
        'ipmasq;help;fleet;rollout' {
            [CompletionResult]::new('start', 'start', [CompletionResultType]::ParameterValue, 'Create NAME-next from FILE with its schedule: the first wave starts at --start')
            [CompletionResult]::new('status', 'status', [CompletionResultType]::ParameterValue, 'The wave, the nodes on the base, on the next config and failed, a halt and who is next')
            [CompletionResult]::new('promote', 'promote', [CompletionResultType]::ParameterValue, 'The next config becomes the base; the rollout''s ConfigMap is deleted')
            [CompletionResult]::new('abort', 'abort', [CompletionResultType]::ParameterValue, 'Every node back on the base at once; the rollout stays, marked aborted, for the record')
            [CompletionResult]::new('resume', 'resume', [CompletionResultType]::ParameterValue, 'After a halt: the rollout starts again from a wave (the first by default), now')
            break
        }
        'ipmasq;help;fleet;rollout;start' {
            break
        }
        'ipmasq;help;fleet;rollout;status' {
            break
        }
        'ipmasq;help;fleet;rollout;promote' {
            break
        }
        'ipmasq;help;fleet;rollout;abort' {
            break
        }
        'ipmasq;help;fleet;rollout;resume' {
            break
        }
        'ipmasq;help;who' {
            break
        }
        'ipmasq;help;show' {
            break
        }
        'ipmasq;help;explain' {
            break
        }
        'ipmasq;help;cleanup' {
            break
        }
        'ipmasq;help;validate' {
            break
        }
        'ipmasq;help;help' {
            break
        }
    })

    $completions.Where{ $_.CompletionText -like "$wordToComplete*" } |
        Sort-Object -Property ListItemText
}
