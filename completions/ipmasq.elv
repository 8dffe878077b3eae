
use builtin;
use str;

set edit:completion:arg-completer[ipmasq] = {|@words|
    fn spaces {|n|
        builtin:repeat $n ' ' | str:join ''
    }
    fn cand {|text desc|
        edit:complex-candidate $text &display=$text' '(spaces (- 14 (wcswidth $text)))$desc
    }
    var command = 'ipmasq'
    for word $words[1..-1] {
        if (str:has-prefix $word '-') {
            break
        }
        set command = $command';'$word
    }
    var completions = [
        &'ipmasq'= {
            cand --list 'Print the applet names, one per line, and exit'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
            cand agent 'Run the masquerade agent (the ip-masq-agent daemon)'
            cand fleet 'Every node''s IPMasqAgentReady condition in one table: which config, which backend, in sync or not'
            cand who 'Which pod was behind the node''s address and port at a time, from the agent''s SNAT log'
            cand show 'Show the live masquerade chain of this node (and, with --config, whether it drifted)'
            cand explain 'Say whether traffic to an address is masqueraded, by which rule and config entry'
            cand cleanup 'Remove the masquerade chain and its POSTROUTING jumps, from every iptables variant'
            cand validate 'Check config files or ConfigMap manifests as the agent would read them'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'ipmasq;agent'= {
            cand --config 'Config file (YAML or JSON); a missing file means upstream''s defaults'
            cand --config-dir 'Read every `ip-masq*` file in DIR, in name order, and merge them (ip-masq-agent-v2''s layout: lists united, booleans OR''d, the shortest resyncInterval); replaces --config'
            cand --config-writer-deadline 'How long a writer may keep the config file open after changing it (a rewrite in place: `cat > FILE`, an editor saving) before the agent reads it as it is; until then the rules of the config in force stay. A rename into place (kubelet''s ConfigMap volume, an atomic write) is read at once'
            cand --config-source 'Where the config comes from: the file (--config or --config-dir, as kubelet mounts the ConfigMap: a change arrives with kubelet''s next volume sync, a minute or more), or the Kubernetes API (the ConfigMap --configmap watched: a change arrives in milliseconds; the config last applied is kept in --state-dir and applied at once when the API is away at start)'
            cand --configmap 'With --config-source=api: the ConfigMap that holds the config (its data key `config`, the same text as the file); needs get, list and watch on configmaps in NAMESPACE'
            cand --kubeconfig 'With --config-source=api: the kubeconfig to reach the API with [default: the pod''s service account]'
            cand --node-name 'With --config-source=api: this node''s Node name, whose labels select the node pools [default: $NODE_NAME (the downward API''s spec.nodeName), else the host name]'
            cand --node-status 'With --config-source=api: write this node''s IPMasqAgentReady condition and an Event when a config is rejected (false: write nothing to the API, which is then only read; the agent needs no write permission at all)'
            cand --status-spread 'With --config-source=api: status writes come in cycles of this length on the wall clock, each node at its own place in the cycle (a hash of the node name) and at most once a cycle, so a fleet''s writes are spread whatever the edit rate (5,000 nodes over 30s: about 170 writes/s); a write after a change waits for the node''s place, at most this long; 0 writes at once. The rules never wait'
            cand --api-view-stale-after 'With --config-source=api: when the API has not answered for an input (the ConfigMaps, the Node, the EgressNATPolicies) for this many seconds, the Node condition says ApiViewStale (status True: the rules are those of the last config seen; /readyz stays 200). A healthy idle watch hears a bookmark about once a minute (Kubernetes 1.27+) or is renewed after 115 s of silence; a CRD that is not served is asked every 5 minutes, so the EgressNATPolicies get 300 s more'
            cand --resync-interval 'Resync interval when no config sets resyncInterval, in seconds (ip-masq-agent-v2''s flag) or as a Go duration [default: 60]'
            cand --masq-chain 'Name of the nat chain for the masquerade rules'
            cand --enable-ipv6 'Also manage IPv6 (ip6tables); IPv6 CIDRs are an error without it. Unset, enableIPv6 in the config decides (default false); set, it wins over the config'
            cand --nomasq-all-reserved-ranges 'Default list also skips masquerade for every RFC-reserved IPv4 range, not only RFC 1918'
            cand --random-fully 'Add --random-fully to MASQUERADE rules (only where iptables supports it, >= 1.6.2)'
            cand --to-ports 'Source ports for MASQUERADE, e.g. 1024-29999,32768-65535 (tcp, udp and sctp)'
            cand --backend 'The firewall backend'
            cand --iptables-mode 'Which iptables to drive'
            cand --nftables-table-owner 'With --backend=nftables on Linux 6.9 or later: hold our tables (nf_tables'' owner and persist flags), so that while the agent runs no other process can delete or change them (`nft delete table ip ipmasq` is refused, `nft flush ruleset` passes over them); they stay when the agent exits, for the next agent to claim. false: leave them open to everyone (a neighbour''s change is then repaired as soon as its notification is heard)'
            cand --conntrack-reset 'After a change (or installing the rules from nothing), delete the conntrack entries whose NAT it made wrong, so their flows follow: connectionless flows (UDP, ICMP, ...; never end on their own), all (TCP and SCTP too: those connections break), or off'
            cand --cleanup-on-exit 'Remove the chain and its jump on SIGTERM/SIGINT, except when systemd restarts the unit (off: a rolling update must not leave a window without masquerade)'
            cand --log-format 'Log line format (also spelt --logging-format, as Kubernetes components spell it)'
            cand --logging-format 'Log line format (also spelt --logging-format, as Kubernetes components spell it)'
            cand --metrics-addr 'Serve /healthz, /readyz and /metrics here (HOST:PORT), or `off`'
            cand --snat-log 'Log every flow our rules source-NATed, one JSON line at its start and one at its end (time, pod source, translated address:port, destination; packets and bytes when conntrack accounting is on), to PATH (appended to, rotated by size) or `-` (standard output); also keeps the SNAT port-pressure metrics. `ipmasq who` answers from it (it reads /var/log/ipmasq/snat.log unless given --log). It records who talked to whom: the file is created readable by its owner only, and an existing one readable by others is set to 0600 (with a warning)'
            cand --snat-log-max-size 'Rotate the SNAT log before it grows past SIZE bytes (suffix K, M or G: KiB, MiB, GiB)'
            cand --snat-log-keep 'Rotated SNAT log files kept: PATH.1 (the newest) to PATH.N (the oldest)'
            cand --state-dir 'Directory of the running agent''s state file [default: $IPMASQ_STATE_DIR, else /run/ipmasq]'
            cand --last-known-good-dir 'With --config-source=api: directory of the last-known-good config, kept across reboots so a rebooted node applies it before the API answers. Made 0755 when missing; refused when it is a symlink, another user''s, or writable by others [default: $IPMASQ_LAST_KNOWN_GOOD_DIR, else /var/lib/ipmasq]'
            cand -v 'klog verbosity: 0-1 info, 2-4 debug, 5+ trace; from 6 the libraries'' events too (the Kubernetes client''s requests in API mode)'
            cand --v 'klog verbosity: 0-1 info, 2-4 debug, 5+ trace; from 6 the libraries'' events too (the Kubernetes client''s requests in API mode)'
            cand --logtostderr 'Accepted for klog compatibility; logs always go to stderr'
            cand --alsologtostderr 'Accepted for klog compatibility; logs always go to stderr'
            cand --stderrthreshold 'stderrthreshold'
            cand --log-dir 'log-dir'
            cand --log-file 'log-file'
            cand --log-file-max-size 'log-file-max-size'
            cand --vmodule 'vmodule'
            cand --log-backtrace-at 'log-backtrace-at'
            cand --skip-headers 'skip-headers'
            cand --add-dir-header 'add-dir-header'
            cand --node-taint 'With --config-source=api: keep pods off this node until its rules are in. The agent removes the taint node.ipmasq.io/agent-not-ready from its own Node after its first sync whose rules it read back from the kernel, and puts it back (NoSchedule) when it cannot enforce: no usable config, a first sync that failed, a stop with --cleanup-on-exit, or a stop while the kubelet says the node is shutting down. The taint is put on new Nodes by the kubelet (--register-with-taints) or the node pool; needs patch on nodes (packaging/kubernetes/api-mode/rbac.yaml) and, to narrow that to this one taint of its own Node, the admission policy (packaging/kubernetes/admission)'
            cand --once 'Sync once, then exit (0 when the rules are in place)'
            cand --offline 'With --once: never read the Kubernetes API. In API mode the pass applies the last-known-good saved by an earlier agent (see --last-known-good-dir), and fails when there is none; a file is read as always. For a unit ordered before the kubelet at boot (ipmasq-boot-guard.service), so the rules are in before any pod starts, whatever the network or the API can do yet'
            cand --dry-run 'Print the transaction a sync would apply and exit; change nothing'
            cand --snat-port-pressure 'Keep the SNAT port-pressure metrics (ipmasq_snat_ports_in_use and the share taken toward the busiest destination) from conntrack''s events, without --snat-log'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'ipmasq;fleet'= {
            cand --kubeconfig 'The kubeconfig to use (its current context) [default: as kubectl: $KUBECONFIG, else ~/.kube/config, else the pod''s service account]'
            cand -l 'Only the Nodes whose labels match this selector (kubectl''s -l), e.g. pool=gpu'
            cand --selector 'Only the Nodes whose labels match this selector (kubectl''s -l), e.g. pool=gpu'
            cand --timeout 'The deadline of the whole listing, every page included (a Go duration)'
            cand --page-size 'Nodes per page of the list (the server''s limit/continue paging)'
            cand --agent-pods 'Also read the agents'' pods (one list), so a node whose agent is not running, restarting or not ready is called so whatever its condition says (needs `list` on pods in --agent-namespace; false: judge by the conditions alone)'
            cand --agent-namespace 'The namespace of the agents'' DaemonSet'
            cand --agent-selector 'The label selector of the agents'' pods (the DaemonSet''s pod template labels)'
            cand -o 'Output format'
            cand --output 'Output format'
            cand --color 'Colour the text output'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
            cand rollout 'Roll a config change out in waves that halt themselves on the first failing node'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'ipmasq;fleet;rollout'= {
            cand --kubeconfig 'The kubeconfig to use (its current context) [default: as kubectl: $KUBECONFIG, else ~/.kube/config, else the pod''s service account]'
            cand --configmap 'The agents'' base ConfigMap; the rollout is NAME-next beside it'
            cand --timeout 'The deadline of every request and of the whole command (a Go duration)'
            cand -o 'Output format (status)'
            cand --output 'Output format (status)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
            cand start 'Create NAME-next from FILE with its schedule: the first wave starts at --start'
            cand status 'The wave, the nodes on the base, on the next config and failed, a halt and who is next'
            cand promote 'The next config becomes the base; the rollout''s ConfigMap is deleted'
            cand abort 'Every node back on the base at once; the rollout stays, marked aborted, for the record'
            cand resume 'After a halt: the rollout starts again from a wave (the first by default), now'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'ipmasq;fleet;rollout;start'= {
            cand --waves 'The waves, as percentages of the nodes, increasing (each node''s place is a hash of its name: a node once in stays in)'
            cand --soak 'The soak between two waves (a Go duration)'
            cand --start 'When the first wave starts (RFC 3339) [default: now]'
            cand --node-selector 'Only the nodes this label selector matches take part (kubectl''s -l syntax)'
            cand --invariant 'What must stay true on every node of the wave: keep|masquerade DEST [from SRC] [via IFACE] (repeatable), judged on the live rules as `explain` judges them'
            cand --kubeconfig 'The kubeconfig to use (its current context) [default: as kubectl: $KUBECONFIG, else ~/.kube/config, else the pod''s service account]'
            cand --configmap 'The agents'' base ConfigMap; the rollout is NAME-next beside it'
            cand --timeout 'The deadline of every request and of the whole command (a Go duration)'
            cand -o 'Output format (status)'
            cand --output 'Output format (status)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'ipmasq;fleet;rollout;status'= {
            cand --kubeconfig 'The kubeconfig to use (its current context) [default: as kubectl: $KUBECONFIG, else ~/.kube/config, else the pod''s service account]'
            cand --configmap 'The agents'' base ConfigMap; the rollout is NAME-next beside it'
            cand --timeout 'The deadline of every request and of the whole command (a Go duration)'
            cand -o 'Output format (status)'
            cand --output 'Output format (status)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'ipmasq;fleet;rollout;promote'= {
            cand --kubeconfig 'The kubeconfig to use (its current context) [default: as kubectl: $KUBECONFIG, else ~/.kube/config, else the pod''s service account]'
            cand --configmap 'The agents'' base ConfigMap; the rollout is NAME-next beside it'
            cand --timeout 'The deadline of every request and of the whole command (a Go duration)'
            cand -o 'Output format (status)'
            cand --output 'Output format (status)'
            cand --force 'Promote although the rollout is not done, a node of it failed, or the base was edited since the rollout started (that edit is then overwritten)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'ipmasq;fleet;rollout;abort'= {
            cand --kubeconfig 'The kubeconfig to use (its current context) [default: as kubectl: $KUBECONFIG, else ~/.kube/config, else the pod''s service account]'
            cand --configmap 'The agents'' base ConfigMap; the rollout is NAME-next beside it'
            cand --timeout 'The deadline of every request and of the whole command (a Go duration)'
            cand -o 'Output format (status)'
            cand --output 'Output format (status)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'ipmasq;fleet;rollout;resume'= {
            cand --from-wave 'The wave to start again from (1-based): the first by default, so the canary comes first again; the halted wave''s number skips the waves before it'
            cand --kubeconfig 'The kubeconfig to use (its current context) [default: as kubectl: $KUBECONFIG, else ~/.kube/config, else the pod''s service account]'
            cand --configmap 'The agents'' base ConfigMap; the rollout is NAME-next beside it'
            cand --timeout 'The deadline of every request and of the whole command (a Go duration)'
            cand -o 'Output format (status)'
            cand --output 'Output format (status)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'ipmasq;fleet;rollout;help'= {
            cand start 'Create NAME-next from FILE with its schedule: the first wave starts at --start'
            cand status 'The wave, the nodes on the base, on the next config and failed, a halt and who is next'
            cand promote 'The next config becomes the base; the rollout''s ConfigMap is deleted'
            cand abort 'Every node back on the base at once; the rollout stays, marked aborted, for the record'
            cand resume 'After a halt: the rollout starts again from a wave (the first by default), now'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'ipmasq;fleet;rollout;help;start'= {
        }
        &'ipmasq;fleet;rollout;help;status'= {
        }
        &'ipmasq;fleet;rollout;help;promote'= {
        }
        &'ipmasq;fleet;rollout;help;abort'= {
        }
        &'ipmasq;fleet;rollout;help;resume'= {
        }
        &'ipmasq;fleet;rollout;help;help'= {
        }
        &'ipmasq;fleet;help'= {
            cand rollout 'Roll a config change out in waves that halt themselves on the first failing node'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'ipmasq;fleet;help;rollout'= {
            cand start 'Create NAME-next from FILE with its schedule: the first wave starts at --start'
            cand status 'The wave, the nodes on the base, on the next config and failed, a halt and who is next'
            cand promote 'The next config becomes the base; the rollout''s ConfigMap is deleted'
            cand abort 'Every node back on the base at once; the rollout stays, marked aborted, for the record'
            cand resume 'After a halt: the rollout starts again from a wave (the first by default), now'
        }
        &'ipmasq;fleet;help;rollout;start'= {
        }
        &'ipmasq;fleet;help;rollout;status'= {
        }
        &'ipmasq;fleet;help;rollout;promote'= {
        }
        &'ipmasq;fleet;help;rollout;abort'= {
        }
        &'ipmasq;fleet;help;rollout;resume'= {
        }
        &'ipmasq;fleet;help;help'= {
        }
        &'ipmasq;who'= {
            cand --pod 'Instead of an address: every translation of this pod (NAMESPACE/NAME, as an agent in API mode names it in the log), and the new connections the pod share refused it, narrowed with --since and --until'
            cand --at 'Only the flows alive at this time (RFC 3339; 2026-11-26 12:03:04 is UTC; also 26/Nov/2026:12:03:04 +0000 and @UNIX-SECONDS) [default: every flow in the log]'
            cand --since 'Only the flows alive at or after this time (the forms of --at)'
            cand --until 'Only the flows alive at or before this time (the forms of --at)'
            cand --tolerance 'With --at: also the flows that ended or began this close to it (the reporter''s clock and the node''s differ; a Go duration)'
            cand --proto 'Only flows of this protocol (as the log names it: tcp, udp, icmp, icmpv6, or a number)'
            cand --log 'The SNAT log the agent writes (--snat-log); PATH.1 (newest) … PATH.N (oldest) are read too; - reads standard input (what an agent run with --snat-log - printed)'
            cand -o 'Output format'
            cand --output 'Output format'
            cand --color 'Colour the text output'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'ipmasq;show'= {
            cand --config 'Also judge the live rules against this config (as the agent would read it)'
            cand -o 'Output format'
            cand --output 'Output format'
            cand --state-dir 'Directory of the running agent''s state file [default: $IPMASQ_STATE_DIR, else /run/ipmasq]'
            cand --color 'Colour the text output'
            cand --masq-chain 'The chain to show (the agent''s --masq-chain)'
            cand --enable-ipv6 'Also show the IPv6 chain (ip6tables), as an agent run with --enable-ipv6 keeps it'
            cand --nomasq-all-reserved-ranges 'The agent''s --nomasq-all-reserved-ranges: with --config, judge the rules as an agent run with this flag would write them'
            cand --random-fully 'The agent''s --random-fully: with --config, judge the rules as an agent run with this flag would write them'
            cand --to-ports 'The agent''s --to-ports: with --config, judge the rules as an agent run with this flag would write them'
            cand --backend 'The backend whose rules to show (the agent''s --backend); given, it wins over the running agent''s backend'
            cand --iptables-mode 'Which iptables to read (the agent''s --iptables-mode; auto: whichever holds rules); given, it wins over the running agent''s backend'
            cand --wide 'Add each rule''s comment to the tables (wider than 80 columns)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'ipmasq;explain'= {
            cand --from 'The source address (a pod) [default: the first address of the first masqueradeSourceCIDRs range of DEST''s family, else any source]'
            cand --out-interface 'The interface the traffic leaves by, for a config scoped with outputInterfaces [default: the interface of the kernel''s route to DEST]'
            cand --config 'Explain with this config file [default: the running agent''s config, else /etc/config/ip-masq-agent]'
            cand --config-dir 'Explain with the merged `ip-masq*` files of DIR (as `agent --config-dir`)'
            cand --state-dir 'Directory of the running agent''s state file [default: $IPMASQ_STATE_DIR, else /run/ipmasq]'
            cand -o 'Output format'
            cand --output 'Output format'
            cand --color 'Colour the text output'
            cand --masq-chain 'The chain whose live rules to walk (the agent''s --masq-chain)'
            cand --enable-ipv6 'Judge IPv6 destinations too, as an agent run with --enable-ipv6 does'
            cand --nomasq-all-reserved-ranges 'The agent''s --nomasq-all-reserved-ranges: judge the config as an agent run with it reads it'
            cand --random-fully 'The agent''s --random-fully: whether the MASQUERADE it reports carries it'
            cand --to-ports 'The agent''s --to-ports: the source ports the MASQUERADE it reports uses'
            cand --backend 'The backend whose live rules to walk (the agent''s --backend); given, it wins over the running agent''s backend'
            cand --iptables-mode 'Which iptables to read the live rules from (the agent''s --iptables-mode; auto: whichever holds rules); given, it wins over the running agent''s backend'
            cand --no-live 'Judge the config only; read neither the live rules nor the conntrack table (needs no privileges)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'ipmasq;cleanup'= {
            cand --masq-chain 'Name of the chain to remove'
            cand --all-variants 'Clean both iptables-nft and iptables-legacy (the default, unless --iptables-mode=nft or =legacy is given); with =false only the variant --iptables-mode picks'
            cand --state-dir 'Directory of the running agent''s state file [default: $IPMASQ_STATE_DIR, else /run/ipmasq]'
            cand -o 'Output format'
            cand --output 'Output format'
            cand --color 'Colour the text output'
            cand --backend 'The backend whose rules to remove [default: every backend]'
            cand --iptables-mode 'The iptables variant to clean: given as nft or legacy, only that one (unless --all-variants is given too); auto with --all-variants=false: whichever holds rules'
            cand --dry-run 'Print what would be removed; change nothing'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'ipmasq;validate'= {
            cand --to-ports 'The agent''s --to-ports, checked as the agent checks it: a value it refuses (a port above 65535) is a usage error here too'
            cand -o 'Report format'
            cand --output 'Report format'
            cand --color 'Colour the text report'
            cand --node-labels 'Also show the config of a node with these labels (k=v,k2=v2, as kubelet''s --node-labels): which node pools (ip-masq-agent-* ConfigMaps with ipmasq.io/node-selector) apply to it, and the base and those pools merged, with the destinations of the run''s EgressNATPolicy objects added'
            cand --enable-ipv6 'Judge as an agent run with --enable-ipv6 does: IPv6 CIDRs are an error without it'
            cand --nomasq-all-reserved-ranges 'Judge as an agent run with --nomasq-all-reserved-ranges does: its default list then keeps every RFC-reserved IPv4 range'
            cand --strict 'Treat warnings as errors'
            cand --print-effective 'Also print the effective config (after defaults) of each valid input'
            cand -v 'List the files of a directory that were skipped as not ip-masq-agent configs, and why'
            cand --verbose 'List the files of a directory that were skipped as not ip-masq-agent configs, and why'
            cand --merged 'Merge each directory''s `ip-masq*` files as `agent --config-dir` does, and show the merged lists with the file and line of every entry'
            cand --no-node-checks 'Skip the checks against this machine''s addresses and interfaces (whether it holds the outputAddress, whether each outputInterfaces pattern matches an interface here): for a CI runner that is no node'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'ipmasq;help'= {
            cand agent 'Run the masquerade agent (the ip-masq-agent daemon)'
            cand fleet 'Every node''s IPMasqAgentReady condition in one table: which config, which backend, in sync or not'
            cand who 'Which pod was behind the node''s address and port at a time, from the agent''s SNAT log'
            cand show 'Show the live masquerade chain of this node (and, with --config, whether it drifted)'
            cand explain 'Say whether traffic to an address is masqueraded, by which rule and config entry'
            cand cleanup 'Remove the masquerade chain and its POSTROUTING jumps, from every iptables variant'
            cand validate 'Check config files or ConfigMap manifests as the agent would read them'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'ipmasq;help;agent'= {
        }
        &'ipmasq;help;fleet'= {
            cand rollout 'Roll a config change out in waves that halt themselves on the first failing node'
        }
        &'ipmasq;help;fleet;rollout'= {
            cand start 'Create NAME-next from FILE with its schedule: the first wave starts at --start'
            cand status 'The wave, the nodes on the base, on the next config and failed, a halt and who is next'
            cand promote 'The next config becomes the base; the rollout''s ConfigMap is deleted'
            cand abort 'Every node back on the base at once; the rollout stays, marked aborted, for the record'
            cand resume 'After a halt: the rollout starts again from a wave (the first by default), now'
        }
        &'ipmasq;help;fleet;rollout;start'= {
        }
        &'ipmasq;help;fleet;rollout;status'= {
        }
        &'ipmasq;help;fleet;rollout;promote'= {
        }
        &'ipmasq;help;fleet;rollout;abort'= {
        }
        &'ipmasq;help;fleet;rollout;resume'= {
        }
        &'ipmasq;help;who'= {
        }
        &'ipmasq;help;show'= {
        }
        &'ipmasq;help;explain'= {
        }
        &'ipmasq;help;cleanup'= {
        }
        &'ipmasq;help;validate'= {
        }
        &'ipmasq;help;help'= {
        }
    ]
    $completions[$command]
}
