# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_ipmasq_global_optspecs
    string join \n list h/help V/version
end

function __fish_ipmasq_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_ipmasq_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_ipmasq_using_subcommand
    set -l cmd (__fish_ipmasq_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c ipmasq -n "__fish_ipmasq_needs_command" -l list -d 'Print the applet names, one per line, and exit'
complete -c ipmasq -n "__fish_ipmasq_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c ipmasq -n "__fish_ipmasq_needs_command" -s V -l version -d 'Print version'
complete -c ipmasq -n "__fish_ipmasq_needs_command" -f -a "agent" -d 'Run the masquerade agent (the ip-masq-agent daemon)'
complete -c ipmasq -n "__fish_ipmasq_needs_command" -f -a "fleet" -d 'Every node\'s IPMasqAgentReady condition in one table: which config, which backend, in sync or not'
complete -c ipmasq -n "__fish_ipmasq_needs_command" -f -a "who" -d 'Which pod was behind the node\'s address and port at a time, from the agent\'s SNAT log'
complete -c ipmasq -n "__fish_ipmasq_needs_command" -f -a "show" -d 'Show the live masquerade chain of this node (and, with --config, whether it drifted)'
complete -c ipmasq -n "__fish_ipmasq_needs_command" -f -a "explain" -d 'Say whether traffic to an address is masqueraded, by which rule and config entry'
complete -c ipmasq -n "__fish_ipmasq_needs_command" -f -a "cleanup" -d 'Remove the masquerade chain and its POSTROUTING jumps, from every iptables variant'
complete -c ipmasq -n "__fish_ipmasq_needs_command" -f -a "validate" -d 'Check config files or ConfigMap manifests as the agent would read them'
complete -c ipmasq -n "__fish_ipmasq_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l config -d 'Config file (YAML or JSON); a missing file means upstream\'s defaults' -r -F
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l config-dir -d 'Read every `ip-masq*` file in DIR, in name order, and merge them (ip-masq-agent-v2\'s layout: lists united, booleans OR\'d, the shortest resyncInterval); replaces --config' -r -F
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l config-writer-deadline -d 'How long a writer may keep the config file open after changing it (a rewrite in place: `cat > FILE`, an editor saving) before the agent reads it as it is; until then the rules of the config in force stay. A rename into place (kubelet\'s ConfigMap volume, an atomic write) is read at once' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l config-source -d 'Where the config comes from: the file (--config or --config-dir, as kubelet mounts the ConfigMap: a change arrives with kubelet\'s next volume sync, a minute or more), or the Kubernetes API (the ConfigMap --configmap watched: a change arrives in milliseconds; the config last applied is kept in --state-dir and applied at once when the API is away at start)' -r -f -a "file\t'The file or directory kubelet mounts from the ConfigMap (upstream\'s way; the default)'
api\t'The ConfigMap itself, watched through the Kubernetes API'"
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l configmap -d 'With --config-source=api: the ConfigMap that holds the config (its data key `config`, the same text as the file); needs get, list and watch on configmaps in NAMESPACE' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l kubeconfig -d 'With --config-source=api: the kubeconfig to reach the API with [default: the pod\'s service account]' -r -F
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l node-name -d 'With --config-source=api: this node\'s Node name, whose labels select the node pools [default: $NODE_NAME (the downward API\'s spec.nodeName), else the host name]' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l node-status -d 'With --config-source=api: write this node\'s IPMasqAgentReady condition and an Event when a config is rejected (false: write nothing to the API, which is then only read; the agent needs no write permission at all)' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l status-spread -d 'With --config-source=api: status writes come in cycles of this length on the wall clock, each node at its own place in the cycle (a hash of the node name) and at most once a cycle, so a fleet\'s writes are spread whatever the edit rate (5,000 nodes over 30s: about 170 writes/s); a write after a change waits for the node\'s place, at most this long; 0 writes at once. The rules never wait' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l api-view-stale-after -d 'With --config-source=api: when the API has not answered for an input (the ConfigMaps, the Node, the EgressNATPolicies) for this many seconds, the Node condition says ApiViewStale (status True: the rules are those of the last config seen; /readyz stays 200). A healthy idle watch hears a bookmark about once a minute (Kubernetes 1.27+) or is renewed after 115 s of silence; a CRD that is not served is asked every 5 minutes, so the EgressNATPolicies get 300 s more' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l resync-interval -d 'Resync interval when no config sets resyncInterval, in seconds (ip-masq-agent-v2\'s flag) or as a Go duration [default: 60]' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l masq-chain -d 'Name of the nat chain for the masquerade rules' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l enable-ipv6 -d 'Also manage IPv6 (ip6tables); IPv6 CIDRs are an error without it. Unset, enableIPv6 in the config decides (default false); set, it wins over the config' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l nomasq-all-reserved-ranges -d 'Default list also skips masquerade for every RFC-reserved IPv4 range, not only RFC 1918' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l random-fully -d 'Add --random-fully to MASQUERADE rules (only where iptables supports it, >= 1.6.2)' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l to-ports -d 'Source ports for MASQUERADE, e.g. 1024-29999,32768-65535 (tcp, udp and sctp)' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l backend -d 'The firewall backend' -r -f -a "iptables\t'A nat chain per CIDR, exactly as upstream ip-masq-agent (the drop-in default)'
nftables\t'Native nftables: one table per family with an interval set, any number of CIDRs'"
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l iptables-mode -d 'Which iptables to drive' -r -f -a "auto\t'Whichever already holds rules (as kubernetes-sigs/iptables-wrappers decides); nft when neither'
nft\t'iptables-nft (the nf_tables kernel API)'
legacy\t'iptables-legacy (the x_tables kernel API)'"
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l nftables-table-owner -d 'With --backend=nftables on Linux 6.9 or later: hold our tables (nf_tables\' owner and persist flags), so that while the agent runs no other process can delete or change them (`nft delete table ip ipmasq` is refused, `nft flush ruleset` passes over them); they stay when the agent exits, for the next agent to claim. false: leave them open to everyone (a neighbour\'s change is then repaired as soon as its notification is heard)' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l conntrack-reset -d 'After a change (or installing the rules from nothing), delete the conntrack entries whose NAT it made wrong, so their flows follow: connectionless flows (UDP, ICMP, ...; never end on their own), all (TCP and SCTP too: those connections break), or off' -r -f -a "off\t'Delete no entry: every flow keeps its old decision until it ends'
connectionless\t'Delete the entries of connectionless flows (UDP, UDP-Lite, ICMP, ICMPv6, GRE, any protocol but TCP, SCTP and DCCP)'
all\t'Delete every contradicting entry, TCP, SCTP and DCCP included (their connections break and are made again under the new decision)'"
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l cleanup-on-exit -d 'Remove the chain and its jump on SIGTERM/SIGINT, except when systemd restarts the unit (off: a rolling update must not leave a window without masquerade)' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l log-format -l logging-format -d 'Log line format (also spelt --logging-format, as Kubernetes components spell it)' -r -f -a "text\t''
json\t''"
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l metrics-addr -d 'Serve /healthz, /readyz and /metrics here (HOST:PORT), or `off`' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l snat-log -d 'Log every flow our rules source-NATed, one JSON line at its start and one at its end (time, pod source, translated address:port, destination; packets and bytes when conntrack accounting is on), to PATH (appended to, rotated by size) or `-` (standard output); also keeps the SNAT port-pressure metrics. `ipmasq who` answers from it (it reads /var/log/ipmasq/snat.log unless given --log). It records who talked to whom: the file is created readable by its owner only, and an existing one readable by others is set to 0600 (with a warning)' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l snat-log-max-size -d 'Rotate the SNAT log before it grows past SIZE bytes (suffix K, M or G: KiB, MiB, GiB)' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l snat-log-keep -d 'Rotated SNAT log files kept: PATH.1 (the newest) to PATH.N (the oldest)' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l state-dir -d 'Directory of the running agent\'s state file [default: $IPMASQ_STATE_DIR, else /run/ipmasq]' -r -F
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l last-known-good-dir -d 'With --config-source=api: directory of the last-known-good config, kept across reboots so a rebooted node applies it before the API answers. Made 0755 when missing; refused when it is a symlink, another user\'s, or writable by others [default: $IPMASQ_LAST_KNOWN_GOOD_DIR, else /var/lib/ipmasq]' -r -F
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -s v -l v -d 'klog verbosity: 0-1 info, 2-4 debug, 5+ trace; from 6 the libraries\' events too (the Kubernetes client\'s requests in API mode)' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l logtostderr -d 'Accepted for klog compatibility; logs always go to stderr' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l alsologtostderr -d 'Accepted for klog compatibility; logs always go to stderr' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l stderrthreshold -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l log-dir -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l log-file -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l log-file-max-size -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l vmodule -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l log-backtrace-at -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l skip-headers -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l add-dir-header -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l node-taint -d 'With --config-source=api: keep pods off this node until its rules are in. The agent removes the taint node.ipmasq.io/agent-not-ready from its own Node after its first sync whose rules it read back from the kernel, and puts it back (NoSchedule) when it cannot enforce: no usable config, a first sync that failed, a stop with --cleanup-on-exit, or a stop while the kubelet says the node is shutting down. The taint is put on new Nodes by the kubelet (--register-with-taints) or the node pool; needs patch on nodes (packaging/kubernetes/api-mode/rbac.yaml) and, to narrow that to this one taint of its own Node, the admission policy (packaging/kubernetes/admission)'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l once -d 'Sync once, then exit (0 when the rules are in place)'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l offline -d 'With --once: never read the Kubernetes API. In API mode the pass applies the last-known-good saved by an earlier agent (see --last-known-good-dir), and fails when there is none; a file is read as always. For a unit ordered before the kubelet at boot (ipmasq-boot-guard.service), so the rules are in before any pod starts, whatever the network or the API can do yet'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l dry-run -d 'Print the transaction a sync would apply and exit; change nothing'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -l snat-port-pressure -d 'Keep the SNAT port-pressure metrics (ipmasq_snat_ports_in_use and the share taken toward the busiest destination) from conntrack\'s events, without --snat-log'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand agent" -s V -l version -d 'Print version'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand fleet; and not __fish_seen_subcommand_from rollout help" -l kubeconfig -d 'The kubeconfig to use (its current context) [default: as kubectl: $KUBECONFIG, else ~/.kube/config, else the pod\'s service account]' -r -F
complete -c ipmasq -n "__fish_ipmasq_using_subcommand fleet; and not __fish_seen_subcommand_from rollout help" -s l -l selector -d 'Only the Nodes whose labels match this selector (kubectl\'s -l), e.g. pool=gpu' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand fleet; and not __fish_seen_subcommand_from rollout help" -l timeout -d 'The deadline of the whole listing, every page included (a Go duration)' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand fleet; and not __fish_seen_subcommand_from rollout help" -l page-size -d 'Nodes per page of the list (the server\'s limit/continue paging)' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand fleet; and not __fish_seen_subcommand_from rollout help" -l agent-pods -d 'Also read the agents\' pods (one list), so a node whose agent is not running, restarting or not ready is called so whatever its condition says (needs `list` on pods in --agent-namespace; false: judge by the conditions alone)' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand fleet; and not __fish_seen_subcommand_from rollout help" -l agent-namespace -d 'The namespace of the agents\' DaemonSet' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand fleet; and not __fish_seen_subcommand_from rollout help" -l agent-selector -d 'The label selector of the agents\' pods (the DaemonSet\'s pod template labels)' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand fleet; and not __fish_seen_subcommand_from rollout help" -s o -l output -d 'Output format' -r -f -a "text\t'For people (tables, compiler-style messages)'
json\t'A stable JSON document for scripts (see docs/reference/json.md)'
yaml\t'The same document as YAML, for support bundles'"
complete -c ipmasq -n "__fish_ipmasq_using_subcommand fleet; and not __fish_seen_subcommand_from rollout help" -l color -d 'Colour the text output' -r -f -a "auto\t'Only when writing to a terminal and NO_COLOR is unset'
always\t''
never\t''"
complete -c ipmasq -n "__fish_ipmasq_using_subcommand fleet; and not __fish_seen_subcommand_from rollout help" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand fleet; and not __fish_seen_subcommand_from rollout help" -s V -l version -d 'Print version'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand fleet; and not __fish_seen_subcommand_from rollout help" -f -a "rollout" -d 'Roll a config change out in waves that halt themselves on the first failing node'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand fleet; and not __fish_seen_subcommand_from rollout help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand fleet; and __fish_seen_subcommand_from rollout" -l kubeconfig -d 'The kubeconfig to use (its current context) [default: as kubectl: $KUBECONFIG, else ~/.kube/config, else the pod\'s service account]' -r -F
complete -c ipmasq -n "__fish_ipmasq_using_subcommand fleet; and __fish_seen_subcommand_from rollout" -l configmap -d 'The agents\' base ConfigMap; the rollout is NAME-next beside it' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand fleet; and __fish_seen_subcommand_from rollout" -l timeout -d 'The deadline of every request and of the whole command (a Go duration)' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand fleet; and __fish_seen_subcommand_from rollout" -s o -l output -d 'Output format (status)' -r -f -a "text\t'For people (tables, compiler-style messages)'
json\t'A stable JSON document for scripts (see docs/reference/json.md)'
yaml\t'The same document as YAML, for support bundles'"
complete -c ipmasq -n "__fish_ipmasq_using_subcommand fleet; and __fish_seen_subcommand_from rollout" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand fleet; and __fish_seen_subcommand_from rollout" -s V -l version -d 'Print version'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand fleet; and __fish_seen_subcommand_from rollout" -f -a "start" -d 'Create NAME-next from FILE with its schedule: the first wave starts at --start'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand fleet; and __fish_seen_subcommand_from rollout" -f -a "status" -d 'The wave, the nodes on the base, on the next config and failed, a halt and who is next'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand fleet; and __fish_seen_subcommand_from rollout" -f -a "promote" -d 'The next config becomes the base; the rollout\'s ConfigMap is deleted'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand fleet; and __fish_seen_subcommand_from rollout" -f -a "abort" -d 'Every node back on the base at once; the rollout stays, marked aborted, for the record'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand fleet; and __fish_seen_subcommand_from rollout" -f -a "resume" -d 'After a halt: the rollout starts again from a wave (the first by default), now'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand fleet; and __fish_seen_subcommand_from rollout" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand fleet; and __fish_seen_subcommand_from help" -f -a "rollout" -d 'Roll a config change out in waves that halt themselves on the first failing node'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand fleet; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand who" -l pod -d 'Instead of an address: every translation of this pod (NAMESPACE/NAME, as an agent in API mode names it in the log), and the new connections the pod share refused it, narrowed with --since and --until' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand who" -l at -d 'Only the flows alive at this time (RFC 3339; 2026-11-26 12:03:04 is UTC; also 26/Nov/2026:12:03:04 +0000 and @UNIX-SECONDS) [default: every flow in the log]' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand who" -l since -d 'Only the flows alive at or after this time (the forms of --at)' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand who" -l until -d 'Only the flows alive at or before this time (the forms of --at)' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand who" -l tolerance -d 'With --at: also the flows that ended or began this close to it (the reporter\'s clock and the node\'s differ; a Go duration)' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand who" -l proto -d 'Only flows of this protocol (as the log names it: tcp, udp, icmp, icmpv6, or a number)' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand who" -l log -d 'The SNAT log the agent writes (--snat-log); PATH.1 (newest) … PATH.N (oldest) are read too; - reads standard input (what an agent run with --snat-log - printed)' -r -F
complete -c ipmasq -n "__fish_ipmasq_using_subcommand who" -s o -l output -d 'Output format' -r -f -a "text\t'For people (tables, compiler-style messages)'
json\t'A stable JSON document for scripts (see docs/reference/json.md)'
yaml\t'The same document as YAML, for support bundles'"
complete -c ipmasq -n "__fish_ipmasq_using_subcommand who" -l color -d 'Colour the text output' -r -f -a "auto\t'Only when writing to a terminal and NO_COLOR is unset'
always\t''
never\t''"
complete -c ipmasq -n "__fish_ipmasq_using_subcommand who" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand who" -s V -l version -d 'Print version'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand show" -l config -d 'Also judge the live rules against this config (as the agent would read it)' -r -F
complete -c ipmasq -n "__fish_ipmasq_using_subcommand show" -s o -l output -d 'Output format' -r -f -a "text\t'For people (tables, compiler-style messages)'
json\t'A stable JSON document for scripts (see docs/reference/json.md)'
yaml\t'The same document as YAML, for support bundles'"
complete -c ipmasq -n "__fish_ipmasq_using_subcommand show" -l state-dir -d 'Directory of the running agent\'s state file [default: $IPMASQ_STATE_DIR, else /run/ipmasq]' -r -F
complete -c ipmasq -n "__fish_ipmasq_using_subcommand show" -l color -d 'Colour the text output' -r -f -a "auto\t'Only when writing to a terminal and NO_COLOR is unset'
always\t''
never\t''"
complete -c ipmasq -n "__fish_ipmasq_using_subcommand show" -l masq-chain -d 'The chain to show (the agent\'s --masq-chain)' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand show" -l enable-ipv6 -d 'Also show the IPv6 chain (ip6tables), as an agent run with --enable-ipv6 keeps it' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand show" -l nomasq-all-reserved-ranges -d 'The agent\'s --nomasq-all-reserved-ranges: with --config, judge the rules as an agent run with this flag would write them' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand show" -l random-fully -d 'The agent\'s --random-fully: with --config, judge the rules as an agent run with this flag would write them' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand show" -l to-ports -d 'The agent\'s --to-ports: with --config, judge the rules as an agent run with this flag would write them' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand show" -l backend -d 'The backend whose rules to show (the agent\'s --backend); given, it wins over the running agent\'s backend' -r -f -a "iptables\t'A nat chain per CIDR, exactly as upstream ip-masq-agent (the drop-in default)'
nftables\t'Native nftables: one table per family with an interval set, any number of CIDRs'"
complete -c ipmasq -n "__fish_ipmasq_using_subcommand show" -l iptables-mode -d 'Which iptables to read (the agent\'s --iptables-mode; auto: whichever holds rules); given, it wins over the running agent\'s backend' -r -f -a "auto\t'Whichever already holds rules (as kubernetes-sigs/iptables-wrappers decides); nft when neither'
nft\t'iptables-nft (the nf_tables kernel API)'
legacy\t'iptables-legacy (the x_tables kernel API)'"
complete -c ipmasq -n "__fish_ipmasq_using_subcommand show" -l wide -d 'Add each rule\'s comment to the tables (wider than 80 columns)'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand show" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand show" -s V -l version -d 'Print version'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand explain" -l from -d 'The source address (a pod) [default: the first address of the first masqueradeSourceCIDRs range of DEST\'s family, else any source]' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand explain" -l out-interface -d 'The interface the traffic leaves by, for a config scoped with outputInterfaces [default: the interface of the kernel\'s route to DEST]' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand explain" -l config -d 'Explain with this config file [default: the running agent\'s config, else /etc/config/ip-masq-agent]' -r -F
complete -c ipmasq -n "__fish_ipmasq_using_subcommand explain" -l config-dir -d 'Explain with the merged `ip-masq*` files of DIR (as `agent --config-dir`)' -r -F
complete -c ipmasq -n "__fish_ipmasq_using_subcommand explain" -l state-dir -d 'Directory of the running agent\'s state file [default: $IPMASQ_STATE_DIR, else /run/ipmasq]' -r -F
complete -c ipmasq -n "__fish_ipmasq_using_subcommand explain" -s o -l output -d 'Output format' -r -f -a "text\t'For people (tables, compiler-style messages)'
json\t'A stable JSON document for scripts (see docs/reference/json.md)'
yaml\t'The same document as YAML, for support bundles'"
complete -c ipmasq -n "__fish_ipmasq_using_subcommand explain" -l color -d 'Colour the text output' -r -f -a "auto\t'Only when writing to a terminal and NO_COLOR is unset'
always\t''
never\t''"
complete -c ipmasq -n "__fish_ipmasq_using_subcommand explain" -l masq-chain -d 'The chain whose live rules to walk (the agent\'s --masq-chain)' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand explain" -l enable-ipv6 -d 'Judge IPv6 destinations too, as an agent run with --enable-ipv6 does' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand explain" -l nomasq-all-reserved-ranges -d 'The agent\'s --nomasq-all-reserved-ranges: judge the config as an agent run with it reads it' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand explain" -l random-fully -d 'The agent\'s --random-fully: whether the MASQUERADE it reports carries it' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand explain" -l to-ports -d 'The agent\'s --to-ports: the source ports the MASQUERADE it reports uses' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand explain" -l backend -d 'The backend whose live rules to walk (the agent\'s --backend); given, it wins over the running agent\'s backend' -r -f -a "iptables\t'A nat chain per CIDR, exactly as upstream ip-masq-agent (the drop-in default)'
nftables\t'Native nftables: one table per family with an interval set, any number of CIDRs'"
complete -c ipmasq -n "__fish_ipmasq_using_subcommand explain" -l iptables-mode -d 'Which iptables to read the live rules from (the agent\'s --iptables-mode; auto: whichever holds rules); given, it wins over the running agent\'s backend' -r -f -a "auto\t'Whichever already holds rules (as kubernetes-sigs/iptables-wrappers decides); nft when neither'
nft\t'iptables-nft (the nf_tables kernel API)'
legacy\t'iptables-legacy (the x_tables kernel API)'"
complete -c ipmasq -n "__fish_ipmasq_using_subcommand explain" -l no-live -d 'Judge the config only; read neither the live rules nor the conntrack table (needs no privileges)'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand explain" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand explain" -s V -l version -d 'Print version'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand cleanup" -l masq-chain -d 'Name of the chain to remove' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand cleanup" -l all-variants -d 'Clean both iptables-nft and iptables-legacy (the default, unless --iptables-mode=nft or =legacy is given); with =false only the variant --iptables-mode picks' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand cleanup" -l state-dir -d 'Directory of the running agent\'s state file [default: $IPMASQ_STATE_DIR, else /run/ipmasq]' -r -F
complete -c ipmasq -n "__fish_ipmasq_using_subcommand cleanup" -s o -l output -d 'Output format' -r -f -a "text\t'For people (tables, compiler-style messages)'
json\t'A stable JSON document for scripts (see docs/reference/json.md)'
yaml\t'The same document as YAML, for support bundles'"
complete -c ipmasq -n "__fish_ipmasq_using_subcommand cleanup" -l color -d 'Colour the text output' -r -f -a "auto\t'Only when writing to a terminal and NO_COLOR is unset'
always\t''
never\t''"
complete -c ipmasq -n "__fish_ipmasq_using_subcommand cleanup" -l backend -d 'The backend whose rules to remove [default: every backend]' -r -f -a "iptables\t'A nat chain per CIDR, exactly as upstream ip-masq-agent (the drop-in default)'
nftables\t'Native nftables: one table per family with an interval set, any number of CIDRs'"
complete -c ipmasq -n "__fish_ipmasq_using_subcommand cleanup" -l iptables-mode -d 'The iptables variant to clean: given as nft or legacy, only that one (unless --all-variants is given too); auto with --all-variants=false: whichever holds rules' -r -f -a "auto\t'Whichever already holds rules (as kubernetes-sigs/iptables-wrappers decides); nft when neither'
nft\t'iptables-nft (the nf_tables kernel API)'
legacy\t'iptables-legacy (the x_tables kernel API)'"
complete -c ipmasq -n "__fish_ipmasq_using_subcommand cleanup" -l dry-run -d 'Print what would be removed; change nothing'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand cleanup" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand cleanup" -s V -l version -d 'Print version'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand validate" -l to-ports -d 'The agent\'s --to-ports, checked as the agent checks it: a value it refuses (a port above 65535) is a usage error here too' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand validate" -s o -l output -d 'Report format' -r -f -a "text\t'For people (tables, compiler-style messages)'
json\t'A stable JSON document for scripts (see docs/reference/json.md)'
yaml\t'The same document as YAML, for support bundles'"
complete -c ipmasq -n "__fish_ipmasq_using_subcommand validate" -l color -d 'Colour the text report' -r -f -a "auto\t'Only when writing to a terminal and NO_COLOR is unset'
always\t''
never\t''"
complete -c ipmasq -n "__fish_ipmasq_using_subcommand validate" -l node-labels -d 'Also show the config of a node with these labels (k=v,k2=v2, as kubelet\'s --node-labels): which node pools (ip-masq-agent-* ConfigMaps with ipmasq.io/node-selector) apply to it, and the base and those pools merged, with the destinations of the run\'s EgressNATPolicy objects added' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand validate" -l enable-ipv6 -d 'Judge as an agent run with --enable-ipv6 does: IPv6 CIDRs are an error without it' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand validate" -l nomasq-all-reserved-ranges -d 'Judge as an agent run with --nomasq-all-reserved-ranges does: its default list then keeps every RFC-reserved IPv4 range' -r
complete -c ipmasq -n "__fish_ipmasq_using_subcommand validate" -l strict -d 'Treat warnings as errors'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand validate" -l print-effective -d 'Also print the effective config (after defaults) of each valid input'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand validate" -s v -l verbose -d 'List the files of a directory that were skipped as not ip-masq-agent configs, and why'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand validate" -l merged -d 'Merge each directory\'s `ip-masq*` files as `agent --config-dir` does, and show the merged lists with the file and line of every entry'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand validate" -l no-node-checks -d 'Skip the checks against this machine\'s addresses and interfaces (whether it holds the outputAddress, whether each outputInterfaces pattern matches an interface here): for a CI runner that is no node'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand validate" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand validate" -s V -l version -d 'Print version'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand help; and not __fish_seen_subcommand_from agent fleet who show explain cleanup validate help" -f -a "agent" -d 'Run the masquerade agent (the ip-masq-agent daemon)'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand help; and not __fish_seen_subcommand_from agent fleet who show explain cleanup validate help" -f -a "fleet" -d 'Every node\'s IPMasqAgentReady condition in one table: which config, which backend, in sync or not'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand help; and not __fish_seen_subcommand_from agent fleet who show explain cleanup validate help" -f -a "who" -d 'Which pod was behind the node\'s address and port at a time, from the agent\'s SNAT log'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand help; and not __fish_seen_subcommand_from agent fleet who show explain cleanup validate help" -f -a "show" -d 'Show the live masquerade chain of this node (and, with --config, whether it drifted)'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand help; and not __fish_seen_subcommand_from agent fleet who show explain cleanup validate help" -f -a "explain" -d 'Say whether traffic to an address is masqueraded, by which rule and config entry'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand help; and not __fish_seen_subcommand_from agent fleet who show explain cleanup validate help" -f -a "cleanup" -d 'Remove the masquerade chain and its POSTROUTING jumps, from every iptables variant'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand help; and not __fish_seen_subcommand_from agent fleet who show explain cleanup validate help" -f -a "validate" -d 'Check config files or ConfigMap manifests as the agent would read them'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand help; and not __fish_seen_subcommand_from agent fleet who show explain cleanup validate help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c ipmasq -n "__fish_ipmasq_using_subcommand help; and __fish_seen_subcommand_from fleet" -f -a "rollout" -d 'Roll a config change out in waves that halt themselves on the first failing node'
