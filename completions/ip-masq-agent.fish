complete -c ip-masq-agent -l config -d 'Config file (YAML or JSON); a missing file means upstream\'s defaults' -r -F
complete -c ip-masq-agent -l config-dir -d 'Read every `ip-masq*` file in DIR, in name order, and merge them (ip-masq-agent-v2\'s layout: lists united, booleans OR\'d, the shortest resyncInterval); replaces --config' -r -F
complete -c ip-masq-agent -l config-writer-deadline -d 'How long a writer may keep the config file open after changing it (a rewrite in place: `cat > FILE`, an editor saving) before the agent reads it as it is; until then the rules of the config in force stay. A rename into place (kubelet\'s ConfigMap volume, an atomic write) is read at once' -r
complete -c ip-masq-agent -l config-source -d 'Where the config comes from: the file (--config or --config-dir, as kubelet mounts the ConfigMap: a change arrives with kubelet\'s next volume sync, a minute or more), or the Kubernetes API (the ConfigMap --configmap watched: a change arrives in milliseconds; the config last applied is kept in --state-dir and applied at once when the API is away at start)' -r -f -a "file\t'The file or directory kubelet mounts from the ConfigMap (upstream\'s way; the default)'
api\t'The ConfigMap itself, watched through the Kubernetes API'"
complete -c ip-masq-agent -l configmap -d 'With --config-source=api: the ConfigMap that holds the config (its data key `config`, the same text as the file); needs get, list and watch on configmaps in NAMESPACE' -r
complete -c ip-masq-agent -l kubeconfig -d 'With --config-source=api: the kubeconfig to reach the API with [default: the pod\'s service account]' -r -F
complete -c ip-masq-agent -l node-name -d 'With --config-source=api: this node\'s Node name, whose labels select the node pools [default: $NODE_NAME (the downward API\'s spec.nodeName), else the host name]' -r
complete -c ip-masq-agent -l node-status -d 'With --config-source=api: write this node\'s IPMasqAgentReady condition and an Event when a config is rejected (false: write nothing to the API, which is then only read; the agent needs no write permission at all)' -r
complete -c ip-masq-agent -l status-spread -d 'With --config-source=api: status writes come in cycles of this length on the wall clock, each node at its own place in the cycle (a hash of the node name) and at most once a cycle, so a fleet\'s writes are spread whatever the edit rate (5,000 nodes over 30s: about 170 writes/s); a write after a change waits for the node\'s place, at most this long; 0 writes at once. The rules never wait' -r
complete -c ip-masq-agent -l api-view-stale-after -d 'With --config-source=api: when the API has not answered for an input (the ConfigMaps, the Node, the EgressNATPolicies) for this many seconds, the Node condition says ApiViewStale (status True: the rules are those of the last config seen; /readyz stays 200). A healthy idle watch hears a bookmark about once a minute (Kubernetes 1.27+) or is renewed after 115 s of silence; a CRD that is not served is asked every 5 minutes, so the EgressNATPolicies get 300 s more' -r
complete -c ip-masq-agent -l resync-interval -d 'Resync interval when no config sets resyncInterval, in seconds (ip-masq-agent-v2\'s flag) or as a Go duration [default: 60]' -r
complete -c ip-masq-agent -l masq-chain -d 'Name of the nat chain for the masquerade rules' -r
complete -c ip-masq-agent -l enable-ipv6 -d 'Also manage IPv6 (ip6tables); IPv6 CIDRs are an error without it. Unset, enableIPv6 in the config decides (default false); set, it wins over the config' -r
complete -c ip-masq-agent -l nomasq-all-reserved-ranges -d 'Default list also skips masquerade for every RFC-reserved IPv4 range, not only RFC 1918' -r
complete -c ip-masq-agent -l random-fully -d 'Add --random-fully to MASQUERADE rules (only where iptables supports it, >= 1.6.2)' -r
complete -c ip-masq-agent -l to-ports -d 'Source ports for MASQUERADE, e.g. 1024-29999,32768-65535 (tcp, udp and sctp)' -r
complete -c ip-masq-agent -l backend -d 'The firewall backend' -r -f -a "iptables\t'A nat chain per CIDR, exactly as upstream ip-masq-agent (the drop-in default)'
nftables\t'Native nftables: one table per family with an interval set, any number of CIDRs'"
complete -c ip-masq-agent -l iptables-mode -d 'Which iptables to drive' -r -f -a "auto\t'Whichever already holds rules (as kubernetes-sigs/iptables-wrappers decides); nft when neither'
nft\t'iptables-nft (the nf_tables kernel API)'
legacy\t'iptables-legacy (the x_tables kernel API)'"
complete -c ip-masq-agent -l nftables-table-owner -d 'With --backend=nftables on Linux 6.9 or later: hold our tables (nf_tables\' owner and persist flags), so that while the agent runs no other process can delete or change them (`nft delete table ip ipmasq` is refused, `nft flush ruleset` passes over them); they stay when the agent exits, for the next agent to claim. false: leave them open to everyone (a neighbour\'s change is then repaired as soon as its notification is heard)' -r
complete -c ip-masq-agent -l conntrack-reset -d 'After a change (or installing the rules from nothing), delete the conntrack entries whose NAT it made wrong, so their flows follow: connectionless flows (UDP, ICMP, ...; never end on their own), all (TCP and SCTP too: those connections break), or off' -r -f -a "off\t'Delete no entry: every flow keeps its old decision until it ends'
connectionless\t'Delete the entries of connectionless flows (UDP, UDP-Lite, ICMP, ICMPv6, GRE, any protocol but TCP, SCTP and DCCP)'
all\t'Delete every contradicting entry, TCP, SCTP and DCCP included (their connections break and are made again under the new decision)'"
complete -c ip-masq-agent -l cleanup-on-exit -d 'Remove the chain and its jump on SIGTERM/SIGINT, except when systemd restarts the unit (off: a rolling update must not leave a window without masquerade)' -r
complete -c ip-masq-agent -l log-format -l logging-format -d 'Log line format (also spelt --logging-format, as Kubernetes components spell it)' -r -f -a "text\t''
json\t''"
complete -c ip-masq-agent -l metrics-addr -d 'Serve /healthz, /readyz and /metrics here (HOST:PORT), or `off`' -r
complete -c ip-masq-agent -l snat-log -d 'Log every flow our rules source-NATed, one JSON line at its start and one at its end (time, pod source, translated address:port, destination; packets and bytes when conntrack accounting is on), to PATH (appended to, rotated by size) or `-` (standard output); also keeps the SNAT port-pressure metrics. `ipmasq who` answers from it (it reads /var/log/ipmasq/snat.log unless given --log). It records who talked to whom: the file is created readable by its owner only, and an existing one readable by others is set to 0600 (with a warning)' -r
complete -c ip-masq-agent -l snat-log-max-size -d 'Rotate the SNAT log before it grows past SIZE bytes (suffix K, M or G: KiB, MiB, GiB)' -r
complete -c ip-masq-agent -l snat-log-keep -d 'Rotated SNAT log files kept: PATH.1 (the newest) to PATH.N (the oldest)' -r
complete -c ip-masq-agent -l state-dir -d 'Directory of the running agent\'s state file [default: $IPMASQ_STATE_DIR, else /run/ipmasq]' -r -F
complete -c ip-masq-agent -l last-known-good-dir -d 'With --config-source=api: directory of the last-known-good config, kept across reboots so a rebooted node applies it before the API answers. Made 0755 when missing; refused when it is a symlink, another user\'s, or writable by others [default: $IPMASQ_LAST_KNOWN_GOOD_DIR, else /var/lib/ipmasq]' -r -F
complete -c ip-masq-agent -s v -l v -d 'klog verbosity: 0-1 info, 2-4 debug, 5+ trace; from 6 the libraries\' events too (the Kubernetes client\'s requests in API mode)' -r
complete -c ip-masq-agent -l logtostderr -d 'Accepted for klog compatibility; logs always go to stderr' -r
complete -c ip-masq-agent -l alsologtostderr -d 'Accepted for klog compatibility; logs always go to stderr' -r
complete -c ip-masq-agent -l stderrthreshold -r
complete -c ip-masq-agent -l log-dir -r
complete -c ip-masq-agent -l log-file -r
complete -c ip-masq-agent -l log-file-max-size -r
complete -c ip-masq-agent -l vmodule -r
complete -c ip-masq-agent -l log-backtrace-at -r
complete -c ip-masq-agent -l skip-headers -r
complete -c ip-masq-agent -l add-dir-header -r
complete -c ip-masq-agent -l node-taint -d 'With --config-source=api: keep pods off this node until its rules are in. The agent removes the taint node.ipmasq.io/agent-not-ready from its own Node after its first sync whose rules it read back from the kernel, and puts it back (NoSchedule) when it cannot enforce: no usable config, a first sync that failed, a stop with --cleanup-on-exit, or a stop while the kubelet says the node is shutting down. The taint is put on new Nodes by the kubelet (--register-with-taints) or the node pool; needs patch on nodes (packaging/kubernetes/api-mode/rbac.yaml) and, to narrow that to this one taint of its own Node, the admission policy (packaging/kubernetes/admission)'
complete -c ip-masq-agent -l once -d 'Sync once, then exit (0 when the rules are in place)'
complete -c ip-masq-agent -l offline -d 'With --once: never read the Kubernetes API. In API mode the pass applies the last-known-good saved by an earlier agent (see --last-known-good-dir), and fails when there is none; a file is read as always. For a unit ordered before the kubelet at boot (ipmasq-boot-guard.service), so the rules are in before any pod starts, whatever the network or the API can do yet'
complete -c ip-masq-agent -l dry-run -d 'Print the transaction a sync would apply and exit; change nothing'
complete -c ip-masq-agent -l snat-port-pressure -d 'Keep the SNAT port-pressure metrics (ipmasq_snat_ports_in_use and the share taken toward the busiest destination) from conntrack\'s events, without --snat-log'
complete -c ip-masq-agent -s h -l help -d 'Print help (see more with \'--help\')'
complete -c ip-masq-agent -s V -l version -d 'Print version'
