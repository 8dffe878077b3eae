//! The prose of the command line that is not a flag: examples, exit statuses, files and
//! notes of each applet. `--help` and the man pages are both rendered from this one place.

/// The package's changelog: its newest entry dates the release, and so every man page.
const CHANGELOG: &str = include_str!("../../packaging/debian/changelog");

/// The date of the newest entry of a Debian changelog (its first ` -- MAINTAINER  DATE` line,
/// an RFC 2822 date) as YYYY-MM-DD: the date man pages carry. Derived from the package, not
/// from today, so a generation is the same on every day and machine.
pub fn release_date(changelog: &str) -> Option<String> {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let trailer = changelog.lines().find(|l| l.starts_with(" -- "))?;
    let (_, date) = trailer.rsplit_once("  ")?;
    // "Sat, 21 Nov 2026 00:00:00 +0000"
    let mut words = date.split_whitespace().skip(1);
    let day: u8 = words.next()?.parse().ok()?;
    let month_name = words.next()?;
    let month = MONTHS.iter().position(|m| *m == month_name)? + 1;
    let year: u16 = words.next()?.parse().ok()?;
    Some(format!("{year:04}-{month:02}-{day:02}"))
}

/// The date every man page carries: the newest changelog entry's.
pub fn man_date() -> String {
    release_date(CHANGELOG).unwrap_or_default()
}

/// One worked example.
pub struct Example {
    pub what: &'static str,
    pub command: &'static str,
}

/// An applet's documentation beyond its flags.
pub struct AppletDoc {
    pub examples: &'static [Example],
    /// (exit code, meaning)
    pub exit_status: &'static [(u8, &'static str)],
    /// (path, meaning)
    pub files: &'static [(&'static str, &'static str)],
    /// Free paragraphs (signals, behaviour worth knowing).
    pub notes: &'static [&'static str],
}

const CONFIG_FILES: &[(&str, &str)] = &[
    (
        "/etc/config/ip-masq-agent",
        "the agent's config (YAML or JSON), as upstream's DaemonSet mounts it from the ConfigMap key `config`; a missing file means upstream's defaults",
    ),
    (
        "/etc/ipmasq/config.yaml",
        "the config the packaged systemd unit passes with --config",
    ),
];

pub const MAIN: AppletDoc = AppletDoc {
    examples: &[
        Example {
            what: "Check a config as the agent would read it",
            command: "ipmasq validate /etc/config/ip-masq-agent",
        },
        Example {
            what: "Show the live chain of this node",
            command: "sudo ipmasq show",
        },
        Example {
            what: "Run the agent (also: install as ip-masq-agent and run that)",
            command: "sudo ipmasq agent --config /etc/ipmasq/config.yaml",
        },
        Example {
            what: "Print the applets",
            command: "ipmasq --list",
        },
    ],
    exit_status: &[
        (0, "success"),
        (
            1,
            "invalid input, drift, or a failed operation (see each applet)",
        ),
        (
            2,
            "usage error, unknown applet, or an input that could not be read",
        ),
        (3, "show: the rules are not installed"),
        (4, "permission denied: CAP_NET_ADMIN is needed"),
        (5, "iptables is not installed"),
        (10, "explain: traffic to DEST keeps its source address"),
        (11, "explain: the config and the live rules disagree"),
    ],
    files: CONFIG_FILES,
    notes: &[],
};

pub const AGENT: AppletDoc = AppletDoc {
    examples: &[
        Example {
            what: "As upstream's DaemonSet runs it (the image's entrypoint is ip-masq-agent)",
            command: "ip-masq-agent --masq-chain=IP-MASQ-AGENT --nomasq-all-reserved-ranges",
        },
        Example {
            what: "Print the transaction a sync would apply, change nothing",
            command: "ipmasq agent --config ./ip-masq-agent.yaml --dry-run",
        },
        Example {
            what: "One sync and exit (from a node bootstrap script, say)",
            command: "ipmasq agent --once --iptables-mode=nft",
        },
        Example {
            what: "The native nftables backend: one interval set, any number of CIDRs",
            command: "ipmasq agent --backend=nftables --enable-ipv6",
        },
    ],
    exit_status: &[
        (0, "stopped by SIGTERM or SIGINT; with --once, the rules are in place"),
        (1, "with --once or --dry-run: invalid config or a failed sync; a failed cleanup on exit; the endpoint could not listen; a flag value it refuses (--to-ports=10-5, a chain name iptables cannot take), as upstream"),
        (2, "usage error (an unknown flag, say)"),
    ],
    files: &[
        (
            "/etc/config/ip-masq-agent",
            "the agent's config (YAML or JSON), as upstream's DaemonSet mounts it from the ConfigMap key `config`; a missing file means upstream's defaults",
        ),
        (
            "/etc/ipmasq/config.yaml",
            "the config the packaged systemd unit passes with --config",
        ),
        (
            "/run/ipmasq/agent-net<inode>.json",
            "the running agent's settings (backend, flags, config), read by show and cleanup; removed when it stops",
        ),
        (
            "/run/ipmasq/agent-net<inode>-<chain>.lock",
            "the node lock: a second agent for the same chain in the same network namespace waits for it",
        ),
    ],
    notes: &[
        "SIGHUP re-reads the config and re-syncs at once; SIGTERM and SIGINT stop the agent, which removes its rules first only with --cleanup-on-exit (and not when systemd is restarting its unit: the next agent takes the rules over in place, so a restart or a package upgrade leaves no moment without masquerade). That stop ends within 20 s: a pass still running after 5 s has its firewall tool killed, and whatever could not be removed by the deadline is named in the log (exit 1).",
        "A config file rewritten in place is read once the writer closes it (after 5 s it is read as it is); a file emptied for a moment is taken as upstream's defaults only once it has stayed empty for 2 s.",
        "At start the agent reads its cgroup's memory limit (and says once when there is none, or when none can be read); a config whose estimated peak (the agent and the tool it runs, from the rules and set elements the backend writes for it, not the CIDRs it lists) exceeds 90 % of it is refused like an invalid one, the last good config stays in force and /readyz answers 503 with the reason.",
        "An invalid config is logged once per change; the last good config stays in force and drift is still repaired with it. A failed sync is retried after 1 s, doubling up to the resync interval.",
        "After each change it applies (a new config, a new output address), the agent reads the conntrack table over ctnetlink and deletes the entries whose NAT the change made wrong: the change alters the verdict for the flow's source and destination (after DNAT), and the entry holds what the rules no longer decide. Their next packet is tracked under the new rules. --conntrack-reset=connectionless (the default) deletes UDP, ICMP and other connectionless entries only; TCP, SCTP and DCCP connections would break, so they keep their old decision until they end unless --conntrack-reset=all; off deletes nothing. When the agent installs its rules from nothing (a fresh node, after a cleanup, a chain deleted under it), the flows tracked until then were decided without them, and those the rules now rewrite are reset the same way; when its rules were there already (a restart), what decided the tracked flows is unknown and they are left (explain DEST lists those that contradict the rules). ipmasq_conntrack_entries_reset_total counts the deleted entries; --dry-run lists the flows it would reset.",
        "--backend=nftables keeps tables ip ipmasq and ip6 ipmasq (chain postrouting at priority srcnat + 10, set nomasq; a list longer than 16,384 elements is spread over nomasq, nomasq_1, ... so that a change commits only the small sets it touches); a switch of backend removes the other backend's rules, only once the agent holds the node lock and its own rules are in force, so no flow goes unmasqueraded.",
    ],
};

pub const VALIDATE: AppletDoc = AppletDoc {
    examples: &[
        Example {
            what: "Check the file the agent would read (missing file = upstream defaults)",
            command: "ipmasq validate",
        },
        Example {
            what: "Lint a ConfigMap manifest in CI, treating warnings as errors",
            command: "ipmasq validate --strict k8s/ip-masq-agent.yaml",
        },
        Example {
            what: "Judge a dual-stack config exactly as an agent started with --enable-ipv6",
            command: "kubectl get cm -n kube-system ip-masq-agent -o yaml | ipmasq validate --enable-ipv6 -",
        },
        Example {
            what: "Machine-readable report for scripts",
            command: "ipmasq validate -o json config.yaml | jq '.results[].diagnostics[]'",
        },
    ],
    exit_status: &[
        (0, "every input is valid (files a directory skips as not ip-masq-agent configs never fail it)"),
        (1, "an input is invalid (or, with --strict, has warnings)"),
        (2, "usage error, or an input that could not be read"),
    ],
    files: CONFIG_FILES,
    notes: &[
        "A directory (ipmasq validate DIR) is a repository's as much as a node's: only the agent's configs in it are checked (a file named ip-masq*; a YAML or JSON mapping with a config key; a manifest with the agent's ConfigMap: named ip-masq*, holding an ip-masq* key, or a data.config with a config key; an EgressNATPolicy). Other files are skipped and counted; -v lists each with the reason. A file named on the command line is always checked.",
        "Every diagnostic code, with its severity, meaning and what to do: DIAGNOSTIC CODES in ipmasq-validate(8), and docs/reference/diagnostics.md in the source repository (the -o json report: docs/reference/validate-json.md).",
        "A valid config gets the agent's estimated peak memory per backend, from what each backend writes for it (rules, their text, set elements; not the CIDRs it lists): in the text report when some backend writes 1,000 rules or set elements or more, always in -o json (peakMemoryMiB, rendered).",
    ],
};

pub const EXPLAIN: AppletDoc = AppletDoc {
    examples: &[
        Example {
            what: "Is traffic to the metadata server masqueraded, and by which rule?",
            command: "sudo ipmasq explain 169.254.169.254",
        },
        Example {
            what: "From one pod, with the config alone (no privileges needed)",
            command: "ipmasq explain 10.8.3.4 --from 10.244.1.5 --config ./ip-masq-agent --no-live",
        },
        Example {
            what: "In a script: the verdict and whether the node agrees",
            command: "sudo ipmasq explain 8.8.8.8 -o json | jq '{outcome, config: .config.action, live: .live.action}'",
        },
    ],
    exit_status: &[
        (0, "traffic to DEST is masqueraded (config and live rules agree, or only one was read)"),
        (2, "usage error, or an invalid or unreadable config"),
        (10, "traffic to DEST keeps its source address"),
        (11, "the config and the live rules disagree"),
    ],
    files: CONFIG_FILES,
    notes: &[
        "Local destinations (addresses of this node) never enter the rules; explain judges DEST as a remote address.",
        "A rule with matches explain cannot judge (a hand-made one) is taken as not matching and listed. Without --from, a rule before ours that rewrites the source of traffic to DEST from other sources than the one assumed (iptables -s 10.0.0.0/8 -j MASQUERADE above our jump) is listed too.",
        "Our rules left in another backend (a stale copy, as show reports it: two agents, a changed --iptables-mode, a switch of --backend) are walked too, as their nat hook runs beside ours: a copy that masquerades what ours keep makes the live answer masquerade (a disagreement when the config keeps the source), and the command that removes that copy alone is printed.",
        "The text report fits the terminal: its lines wrap at COLUMNS, else at the terminal's width, else (piped to a file, a pager or a mail) at 80 columns; COLUMNS=1000 keeps them whole. -o json and -o yaml are never wrapped.",
        "When tracked flows to DEST were source-NATed, a ports line per translated address and protocol gives the SNAT port use toward DEST: the ports its busiest destination port takes against those MASQUERADE picks from (the kernel's 1024-65535 for a source port of 1024 and above, ICMP ids 0-65535, or --to-ports), warned at 80 %; -o json: conntrack.snatPorts. When the conntrack table cannot be read (no CAP_NET_ADMIN, no conntrack module), flows says why and the rest of the answer stands.",
    ],
};

pub const SHOW: AppletDoc = AppletDoc {
    examples: &[
        Example {
            what: "What is installed, with packet counters (80 columns; --wide adds comments)",
            command: "sudo ipmasq show",
        },
        Example {
            what: "Is the node in sync with the config the agent reads? Lists every difference",
            command:
                "sudo ipmasq show --config /etc/config/ip-masq-agent --nomasq-all-reserved-ranges",
        },
        Example {
            what: "For a support bundle or jq",
            command: "sudo ipmasq show -o json | jq '.families[] | {family, installed}'",
        },
        Example {
            what: "The nftables backend's tables",
            command: "sudo ipmasq show --backend=nftables",
        },
    ],
    exit_status: &[
        (0, "the rules are installed (and in sync with the running agent's or --config's settings)"),
        (1, "the rules drifted, our chain is in more than one iptables variant or backend, or the running agent rejected the config it reads (REJECTED: the last good config stays in force)"),
        (2, "usage error, or an invalid or missing --config"),
        (3, "the rules are not installed"),
        (4, "permission denied: needs CAP_NET_ADMIN (try sudo)"),
        (5, "iptables is not installed"),
    ],
    files: CONFIG_FILES,
    notes: &[
        "With an agent running on the node, show judges against its settings (its state file under /run/ipmasq) and names any flag given here that differs. It reads the agent's backend unless --backend or --iptables-mode is given: a flag given wins.",
        "The text report fits the terminal: its lines wrap at COLUMNS, else at the terminal's width, else (piped) at 80 columns; tables are 80 columns at most, unless --wide. COLUMNS=1000 keeps the lines whole. -o json and -o yaml are never wrapped.",
        "When the running agent refused the config it reads (invalid, unreadable, too large for its memory), show says REJECTED with the agent's diagnostics, the config that stays in force (its digest and when it was read) and the command that checks the file (ipmasq validate PATH), and exits 1; -o json carries it as configRejected. The verdict is then the config in force's, not the file's.",
        "The conntrack: lines are the node's conntrack table as the kernel counts it (ctnetlink, in show's network namespace): its fill against nf_conntrack_max, and the insert failures, drops and early drops since boot (conntrack -S's counters summed over the CPUs); warned at 80 % full (the failures since boot are printed, not warned: the alert IpmasqConntrackInsertsFailing watches their rate). -o json carries every counter as conntrack. They never change the exit code.",
    ],
};

pub const CLEANUP: AppletDoc = AppletDoc {
    examples: &[
        Example {
            what: "Remove IP-MASQ-AGENT and its jumps from both iptables variants and families",
            command: "sudo ipmasq cleanup",
        },
        Example {
            what: "See what would be removed for a custom chain, change nothing",
            command: "sudo ipmasq cleanup --masq-chain=MY-MASQ --dry-run",
        },
        Example {
            what: "Only the nftables backend's tables",
            command: "sudo ipmasq cleanup --backend=nftables",
        },
    ],
    exit_status: &[
        (0, "everything was removed, or there was nothing to remove"),
        (1, "a removal failed (every failure is reported)"),
        (2, "usage error (an unknown flag, say)"),
        (4, "permission denied: needs CAP_NET_ADMIN (try sudo)"),
        (5, "iptables is not installed"),
    ],
    files: &[],
    notes: &["Without --backend or --iptables-mode every backend is cleaned: both iptables variants and the nftables tables. A flag given is obeyed: --backend=nftables cleans only the nftables tables (only those carrying ipmasq's mark; a neighbour's table of the same name is left and named), --backend=iptables both iptables variants, --iptables-mode=nft or =legacy only that variant. Every other rule stays as it was; a rule of another chain that jumps to ours is named, and nothing is removed. A running agent will put the rules back: cleanup warns when one runs."],
};

/// `fleet --help`'s description: what it reads and what each status means.
pub const FLEET_ABOUT: &str = "\
Every node's IPMasqAgentReady condition in one table: which config, which backend, in sync or not.

In API mode (--config-source=api) each agent keeps the condition IPMasqAgentReady on its own Node, \
written only when it changes (no heartbeat: a steady agent writes nothing): a reason and a \
message with the config's digest (the SHA-256 of the ConfigMap's config text, as sha256sum \
prints it; with node pools or EgressNATPolicies, of their listing, see ipmasq-config(5)), the \
backend and the time of the pass that reached that state. fleet reads every Node in pages of \
--page-size (one list, no watch, nothing written), and the agents' pods (one list, \
--agent-selector in --agent-namespace), groups them by status, config digest and backend, \
names the nodes that are not in sync, and exits non-zero when any is, so CI and cron can gate \
on it. A dead agent writes nothing, so its pod speaks before its condition; and a condition \
written by any field manager but ipmasq is not the agent's word.

Statuses: in-sync (InSync: the rules of the newest config are installed and match it); drifted \
(Drifted: the live rules differ and the repair failed); rejected (ConfigRejected: the newest \
config was refused, the last good one stays in force; `kubectl get events \
--field-selector reason=ConfigRejected` shows why); not-ready (NotReady: no config's rules \
installed: not yet, or removed by --cleanup-on-exit); stale (the agent's word may be old: the \
Node's own Ready condition is not True, so the node or its kubelet is down, or the agent enforces \
its last-known-good config because it cannot read the API); agent-not-ready (the agent's pod \
runs but is not ready); agent-down (the agent's pod is not running: pending, waiting such as \
CrashLoopBackOff, ended, or restarted within 10 minutes); no-agent (no agent pod on the node); \
untrusted (the condition was written, wholly or in part, by another field manager than ipmasq); \
unknown (no IPMasqAgentReady condition: no agent in API mode runs there, or one this version \
cannot read).

Credentials are found as kubectl finds them; the user needs `list` on `nodes`, and on `pods` in \
--agent-namespace (when the pods cannot be listed, fleet says so and judges by the conditions \
alone).";

pub const FLEET: AppletDoc = AppletDoc {
    examples: &[
        Example {
            what: "Which nodes enforce which config, and are they in sync?",
            command: "ipmasq fleet",
        },
        Example {
            what: "Gate a rollout in CI: exit 1 while any node of the pool is not in sync",
            command: "ipmasq fleet -l cloud.google.com/gke-nodepool=gpu --kubeconfig ./ci.kubeconfig >/dev/null",
        },
        Example {
            what: "The nodes not in sync, for a script",
            command: "ipmasq fleet -o json | jq -r '.nodes[] | select(.status != \"in-sync\") | .name'",
        },
    ],
    exit_status: &[
        (0, "every node listed is in sync (or none matched)"),
        (1, "some node is drifted, rejected, not-ready, stale, agent-not-ready, agent-down, no-agent, untrusted or unknown"),
        (2, "usage error; no credentials; the API server could not be reached, refused the list (401, 403) or did not answer within --timeout"),
    ],
    files: &[(
        "~/.kube/config",
        "the kubeconfig kubectl reads when neither --kubeconfig nor $KUBECONFIG names one",
    )],
    notes: &["The message of the condition reads `digest=sha256:HEX backend=NAME lastSync=YYYY-MM-DDTHH:MM:SSZ; words` (kubectl describe node shows it too); -o json prints {\"nodes\": [{\"name\", \"status\", \"configDigest\", \"backend\", \"lastSync\", \"writers\", \"agent\"}]}, one entry per node in the server's order (by name), null where the condition says nothing; writers are the condition's field managers, agent the node's agent pod ({\"pod\", \"state\", \"phase\", \"ready\", \"restarts\", \"words\"}) or null.", "The text names up to 20 nodes not in sync, shared among their statuses so every status present is named (each with how many more it has); a node's reason wraps at COLUMNS, else at the terminal's width, else (piped) at 80 columns."],
};

/// `fleet rollout --help`'s description: what a rollout is and how it halts.
pub const ROLLOUT_ABOUT: &str = "\
Roll a config change out in waves that halt themselves on the first failing node.

The next config is a ConfigMap beside the base, NAME-next (the same `config` key, read and \
checked as the base is), annotated with its schedule: the waves (percentages of the nodes), the \
soak between two waves, the start and an optional node selector (ipmasq.io/rollout-*, see \
ipmasq-config(5)). Each agent in API mode decides alone whether its node is in the wave in force: \
a node's place is bytes 8 to 15 of the SHA-256 of its name modulo 10,000, and a wave of P % \
holds the places below P x 100, so a node once in stays in and status can say who comes next. \
No controller runs: the wave follows from the start and the soak.

A node of the wave that cannot keep the next config (admission refuses it, the kernel refuses \
the transaction, or an --invariant is broken on its live rules) writes the halt on NAME-next \
(ipmasq.io/rollout-halted: the node, the reason, what it saw); every agent sees it through its \
ConfigMap watch and goes back to the base at once, and no node outside the wave ever takes the \
next config. resume starts the rollout again from its first wave (or --from-wave); abort puts \
every node back on the base; promote makes the next config the base (the nodes already on it \
change no rule) and deletes NAME-next.

The user needs get, create, update, patch and delete on ConfigMaps in the namespace, and list \
on nodes (status).";

pub const ROLLOUT: AppletDoc = AppletDoc {
    examples: &[
        Example {
            what: "Start: 1 %, 10 %, 50 %, then every node, 10 minutes apart, halting if a node masquerades the cluster's ranges",
            command: "ipmasq fleet rollout start next.yaml --waves 1,10,50,100 --soak 10m --invariant 'keep 10.0.0.0/8' --invariant 'masquerade 8.8.8.8'",
        },
        Example {
            what: "In CI: wait for the rollout to be done, stop on a halt",
            command: "until ipmasq fleet rollout status -o json | jq -e '.state == \"done\"' >/dev/null; do ipmasq fleet rollout status >/dev/null || exit 1; sleep 30; done; ipmasq fleet rollout promote",
        },
        Example {
            what: "Why did it halt, and who is on which config?",
            command: "ipmasq fleet rollout status",
        },
    ],
    exit_status: ROLLOUT_EXIT,
    files: &[(
        "~/.kube/config",
        "the kubeconfig kubectl reads when neither --kubeconfig nor $KUBECONFIG names one",
    )],
    notes: &["status -o json prints {\"state\": \"running|halted|aborted|done\", \"wave\": N (1-based, null before the start), \"waves\": [...], \"soak\", \"start\", \"nodes\": {\"base\": [...], \"next\": [...], \"failed\": [...], \"pending\": [...]}, \"halted\": {\"node\", \"reason\", \"diagnostic\", \"wave\", \"at\"} or null, \"nextWave\": {\"wave\", \"at\", \"nodes\": [...]} or null}. A node is on base or next when the digest of its IPMasqAgentReady condition is that of its config composed with the base or with the next text (pools and EgressNATPolicies included); failed when it is the halting node, or is in the wave and reports ConfigRejected, NotReady or Drifted; pending otherwise (a node of the wave still reporting the base: its condition's write waits for its slot in --status-spread)."],
};

/// The exit statuses every `fleet rollout` action shares.
const ROLLOUT_EXIT: &[(u8, &str)] = &[
    (0, "done; status: the rollout runs or is done and no node failed"),
    (1, "refused by the rollout's state or the input (said on stderr), or overtaken by a change of the rollout meanwhile; status: halted, aborted, or a node of the wave failed"),
    (2, "usage error; no credentials; the API server could not be reached, refused a request or did not answer within --timeout"),
    (3, "there is no rollout (NAME-next does not exist)"),
];

/// `fleet rollout start`'s page.
pub const ROLLOUT_START: AppletDoc = AppletDoc {
    examples: &[Example {
        what: "Half the GPU pool, then all of it, 30 minutes apart, from 22:00 UTC",
        command: "ipmasq fleet rollout start next.yaml --waves 50,100 --soak 30m --start 2026-12-01T22:00:00Z --node-selector pool=gpu --invariant 'keep 10.0.0.0/8'",
    }],
    exit_status: ROLLOUT_EXIT,
    files: &[],
    notes: &["FILE is checked as the agents check a config first; a FILE with errors starts nothing. A rollout that runs, is halted or is done (waiting for promote) refuses a second start; an aborted one is replaced."],
};

/// `fleet rollout status`'s page.
pub const ROLLOUT_STATUS: AppletDoc = AppletDoc {
    examples: &[Example {
        what: "Gate a pipeline on the rollout",
        command: "ipmasq fleet rollout status -o json | jq -r .state",
    }],
    exit_status: ROLLOUT_EXIT,
    files: &[],
    notes: &[],
};

/// `fleet rollout promote`'s page.
pub const ROLLOUT_PROMOTE: AppletDoc = AppletDoc {
    examples: &[Example {
        what: "Make the next config the base once every wave has soaked",
        command: "ipmasq fleet rollout promote",
    }],
    exit_status: ROLLOUT_EXIT,
    files: &[],
    notes: &["A halted or aborted rollout is not promoted; without --force neither is one that is not done, one with a failed node, nor one whose base was edited since start. Promote first claims the rollout (ipmasq.io/rollout-promoting, at the version read: no node halts it from then on), then writes the base, then deletes NAME-next at the claimed version: nodes already on the next config compose the same text and change no rule."],
};

/// `fleet rollout abort`'s page.
pub const ROLLOUT_ABORT: AppletDoc = AppletDoc {
    examples: &[Example {
        what: "Put every node back on the base now",
        command: "ipmasq fleet rollout abort",
    }],
    exit_status: ROLLOUT_EXIT,
    files: &[],
    notes: &[],
};

/// `fleet rollout resume`'s page.
pub const ROLLOUT_RESUME: AppletDoc = AppletDoc {
    examples: &[Example {
        what: "After mending what halted it, start the halted wave again",
        command: "ipmasq fleet rollout resume",
    }],
    exit_status: ROLLOUT_EXIT,
    files: &[],
    notes: &["The halt is cleared and the start moved so that wave --from-wave (the first by default) starts now with a fresh soak; the waves after it follow on schedule. Each resume is a new attempt: a node that latched the halted one takes part again."],
};

/// `who --help`'s description: what it reads and how a flow is matched.
pub const WHO_ABOUT: &str = "\
Which pod was behind the node's address and port at a time, from the agent's SNAT log.

Masquerading hides the pod behind the node's address: an abuse report, a firewall log or a \
partner names 203.0.113.1:40002, not a pod. An agent run with --snat-log writes one JSON line \
when conntrack creates a flow our rules translated (event new) and one when it ends (event end), \
with the pod's source, the translated source and the destination. who reads that log, its rotated \
files PATH.N (oldest) … PATH.1 first, and prints the flows through ADDRESS:PORT whose lifetime \
meets --at (± --tolerance), or every flow through it without --at.

A flow is a new line and the later end line of the same proto, src, translated and dst. A flow \
with no new line (it began before the log, or the file with it was rotated away) started before \
the log: it counts as alive at any time up to its end. A flow with no end line is open (or its \
end was lost to an agent restart or a dropped event): alive from its start on, unless a later \
flow to the same destination took the same translated port, which proves it was over by then \
(conntrack holds one flow per reply tuple); that time is its end, marked inferred.

Only the lines that hold \"ADDRESS:PORT\" are parsed (the rest is searched as bytes) and at most \
the newest 1000 flows are kept, so memory stays bounded whatever the log's size; a line that cannot be read is counted, skipped and said \
once on stderr.";

pub const WHO: AppletDoc = AppletDoc {
    examples: &[
        Example {
            what: "Which pod was 203.0.113.1:40002 at the time of an abuse report?",
            command: "ipmasq who 203.0.113.1:40002 --at 2026-11-26T12:03:04Z",
        },
        Example {
            what: "A time pasted from a web server's log, TCP only, a wider window",
            command: "ipmasq who 203.0.113.1:40002 --at '26/Nov/2026:13:03:04 +0100' --proto tcp --tolerance 5s",
        },
        Example {
            what: "Every flow through the port in a copied log, for a script",
            command: "ipmasq who [2001:db8::1]:40002 --log ./snat.log -o json | jq -r '.flows[].src'",
        },
    ],
    exit_status: &[
        (0, "at least one flow answers"),
        (1, "no flow through ADDRESS:PORT (at --at) in the log"),
        (2, "usage error; no log at --log (nor rotated files); a file could not be read"),
    ],
    files: &[(
        crate::snat::line::DEFAULT_SNAT_LOG,
        "the SNAT log read without --log (the path to give the agent's --snat-log); .1 … .N are its rotated files, .1 the newest",
    )],
    notes: &[
        "-o json prints {\"address\", \"at\", \"tolerance\", \"proto\", \"files\" (oldest first), \"logStart\", \"logEnd\" (the first and last record's times), \"flows\": [{\"proto\", \"src\", \"translated\", \"dst\", \"start\", \"end\", \"endInferred\"}], \"skippedLines\", \"omittedFlows\"}; start is null for a flow that began before the log, end null for one with no end known. At most the newest 1000 flows are listed; omittedFlows counts the older ones (narrow with --at or --proto).",
        "The log records every masqueraded flow (who talked to which address, when): keep it only as long as your privacy rules allow, readable by root alone.",
    ],
};

/// The longest line of an example, its ` \\` included: the example fits an 80-column terminal in
/// `--help` (indented 2) and in the man page (indented 11).
pub const EXAMPLE_WIDTH: usize = 68;

/// An example's command as it is printed: one line when it fits [`EXAMPLE_WIDTH`], else broken
/// at spaces outside quotes, each line but the last ending in ` \\` (the shell's continuation,
/// so a copied example still runs) and each continuation line indented by two more spaces.
/// `indent` starts every line after the first.
pub fn example_lines(command: &str, indent: &str) -> String {
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    for c in command.chars() {
        match (c, quote) {
            (' ', None) => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
                continue;
            }
            ('\'' | '"', None) => quote = Some(c),
            (c, Some(q)) if c == q => quote = None,
            _ => {}
        }
        word.push(c);
    }
    if !word.is_empty() {
        words.push(word);
    }
    // Lines of words; a break never separates a flag from its value, nor a command after a
    // pipe from its first argument.
    let mut lines: Vec<Vec<String>> = vec![Vec::new()];
    let width = |line: &[String]| line.iter().map(|w| w.len() + 1).sum::<usize>();
    for word in words {
        let continuation = if lines.len() > 1 { 2 } else { 0 };
        let current = lines.last_mut().expect("one line at least");
        if !current.is_empty() && continuation + width(current) + word.len() + 2 > EXAMPLE_WIDTH {
            let mut carried = Vec::new();
            while current.len() > 1 {
                let last = &current[current.len() - 1];
                let before = &current[current.len() - 2];
                let flag_awaiting_value =
                    last.starts_with('-') && !last.contains('=') && !word.starts_with('-');
                if flag_awaiting_value || before == "|" {
                    carried.insert(0, current.pop().expect("more than one word"));
                } else {
                    break;
                }
            }
            lines.push(carried);
        }
        lines.last_mut().expect("one line at least").push(word);
    }
    let lines: Vec<String> = lines.iter().map(|line| line.join(" ")).collect();
    let last = lines.len() - 1;
    lines
        .iter()
        .enumerate()
        .map(|(i, line)| {
            let lead = if i == 0 {
                String::new()
            } else {
                format!("{indent}  ")
            };
            let tail = if i < last { " \\" } else { "" };
            format!("{lead}{line}{tail}")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The text `--help` shows after the flags.
pub fn after_help(doc: &AppletDoc) -> String {
    let mut out = String::from("Examples:\n");
    for (i, example) in doc.examples.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&format!(
            "  # {}:\n  {}\n",
            example.what,
            example_lines(example.command, "  ")
        ));
    }
    for note in doc.notes {
        out.push('\n');
        out.push_str(note);
        out.push('\n');
    }
    out.push_str("\nExit status:");
    // Codes padded to the widest, so two-digit codes keep the meanings in one column.
    let width = doc
        .exit_status
        .iter()
        .map(|(code, _)| code.to_string().len())
        .max()
        .unwrap_or(1);
    for (code, meaning) in doc.exit_status {
        out.push_str(&format!("\n  {code:<width$}  {meaning}"));
    }
    out
}

/// Escapes text for roff: backslashes, and a leading `.` or `'` that would read as a request.
pub(crate) fn roff_text(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    if escaped.starts_with('.') || escaped.starts_with('\'') {
        format!("\\&{escaped}")
    } else {
        escaped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_release_date_is_the_newest_changelog_entry() {
        let changelog = "ipmasq (0.2.0-1) unstable; urgency=medium\n\n  * Two.\n\n -- A <a@b.invalid>  Tue, 05 Jan 2027 10:00:00 +0000\n\nipmasq (0.1.0-1) unstable; urgency=medium\n\n  * One.\n\n -- A <a@b.invalid>  Sat, 21 Nov 2026 00:00:00 +0000\n";
        assert_eq!(release_date(changelog).as_deref(), Some("2027-01-05"));
        assert_eq!(release_date("no trailer\n"), None);
        assert_eq!(man_date(), release_date(CHANGELOG).unwrap());
    }

    const EVERY_APPLET: [&AppletDoc; 8] = [
        &MAIN, &AGENT, &VALIDATE, &SHOW, &CLEANUP, &EXPLAIN, &FLEET, &WHO,
    ];

    /// Every example fits the width, and a wrapped one is the same command: each line but the
    /// last ends in the shell's ` \`, and joined again the words are the example's.
    #[test]
    fn wrapped_examples_fit_and_continue_with_a_backslash() {
        let mut wrapped = 0;
        for doc in EVERY_APPLET {
            for example in doc.examples {
                let text = example_lines(example.command, "  ");
                let lines: Vec<&str> = text.lines().collect();
                for (i, line) in lines.iter().enumerate() {
                    let indent = if i == 0 { 0 } else { 2 };
                    assert!(
                        line.len() - indent <= EXAMPLE_WIDTH || !line.trim().contains(' '),
                        "{line:?} is wider than {EXAMPLE_WIDTH}"
                    );
                    assert_eq!(line.ends_with(" \\"), i + 1 < lines.len(), "{text}");
                }
                let joined: Vec<&str> = text.split_whitespace().filter(|w| *w != "\\").collect();
                let original: Vec<&str> = example.command.split_whitespace().collect();
                assert_eq!(joined, original);
                wrapped += usize::from(lines.len() > 1);
            }
        }
        assert!(wrapped > 3, "{wrapped} examples wrapped");
    }

    /// `ipmasq --help` lists every status an applet can exit with (explain's 10 and 11 too).
    #[test]
    fn the_top_level_exit_statuses_cover_every_applet() {
        for doc in EVERY_APPLET {
            for (code, meaning) in doc.exit_status {
                assert!(
                    MAIN.exit_status.iter().any(|(main, _)| main == code),
                    "{code} ({meaning}) is missing from ipmasq --help's exit statuses"
                );
            }
        }
    }

    #[test]
    fn a_short_command_stays_on_one_line() {
        assert_eq!(example_lines("ipmasq --list", "  "), "ipmasq --list");
    }
}
