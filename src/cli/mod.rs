//! The one command-line definition of every applet and flag: the source of `--help`, the man
//! pages and the shell completions. Also the multi-call entry (argv[0] picks the applet) and
//! the translation of Go-style flags (`-flag`, `-flag=value`) that upstream's users type.

use crate::agent::logging::LogFormat;
use crate::backend::select::Choice;
use crate::backend::BackendId;
use crate::output::ColorChoice;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::ffi::OsString;
use std::path::PathBuf;

pub mod codes_reference;
pub mod config_page;
pub mod docs;
pub mod metrics_page;
pub use docs::after_help;

/// Where the endpoint listens unless `--metrics-addr` says otherwise.
pub const DEFAULT_METRICS_ADDR: &str = "127.0.0.1:9723";

/// The applets, sorted as `--list` prints them: the subcommands of the one clap definition.
pub fn applets() -> Vec<String> {
    use clap::CommandFactory;
    let mut names: Vec<String> = Cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    names.sort();
    names
}

/// The one clap definition, with the help of the flags the applets share worded for each
/// applet: `show` and `explain` take the agent's flags to judge as the agent would, and say
/// so instead of describing what the agent does with them. Parsing, help, man pages and
/// completions all come from here.
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    const JUDGE: &str =
        "with --config, judge the rules as an agent run with this flag would write them";
    let show: [(&str, String); 7] = [
        (
            "masq_chain",
            "The chain to show (the agent's --masq-chain)".into(),
        ),
        (
            "enable_ipv6",
            "Also show the IPv6 chain (ip6tables), as an agent run with --enable-ipv6 keeps it"
                .into(),
        ),
        (
            "nomasq_all_reserved_ranges",
            format!("The agent's --nomasq-all-reserved-ranges: {JUDGE}"),
        ),
        (
            "random_fully",
            format!("The agent's --random-fully: {JUDGE}"),
        ),
        ("to_ports", format!("The agent's --to-ports: {JUDGE}")),
        (
            "backend",
            "The backend whose rules to show (the agent's --backend); given, it wins over the running agent's backend".into(),
        ),
        (
            "iptables_mode",
            "Which iptables to read (the agent's --iptables-mode; auto: whichever holds rules); given, it wins over the running agent's backend"
                .into(),
        ),
    ];
    let explain: [(&str, String); 7] = [
        ("masq_chain", "The chain whose live rules to walk (the agent's --masq-chain)".into()),
        ("enable_ipv6", "Judge IPv6 destinations too, as an agent run with --enable-ipv6 does".into()),
        ("nomasq_all_reserved_ranges", "The agent's --nomasq-all-reserved-ranges: judge the config as an agent run with it reads it".into()),
        ("random_fully", "The agent's --random-fully: whether the MASQUERADE it reports carries it".into()),
        ("to_ports", "The agent's --to-ports: the source ports the MASQUERADE it reports uses".into()),
        ("backend", "The backend whose live rules to walk (the agent's --backend); given, it wins over the running agent's backend".into()),
        ("iptables_mode", "Which iptables to read the live rules from (the agent's --iptables-mode; auto: whichever holds rules); given, it wins over the running agent's backend".into()),
    ];
    let cleanup: [(&str, String); 2] = [
        ("backend", "The backend whose rules to remove [default: every backend]".into()),
        (
            "iptables_mode",
            "The iptables variant to clean: given as nft or legacy, only that one (unless --all-variants is given too); auto with --all-variants=false: whichever holds rules"
                .into(),
        ),
    ];
    let validate: [(&str, String); 2] = [
        ("enable_ipv6", "Judge as an agent run with --enable-ipv6 does: IPv6 CIDRs are an error without it".into()),
        ("nomasq_all_reserved_ranges", "Judge as an agent run with --nomasq-all-reserved-ranges does: its default list then keeps every RFC-reserved IPv4 range".into()),
    ];
    let mut command = Cli::command();
    for (applet, helps) in [
        ("show", &show[..]),
        ("explain", &explain[..]),
        ("cleanup", &cleanup[..]),
        ("validate", &validate[..]),
    ] {
        command = command.mut_subcommand(applet, |mut sub| {
            for (id, help) in helps {
                sub = sub.mut_arg(*id, |arg| arg.help(help.clone()).long_help(help.clone()));
            }
            sub
        });
    }
    command
}

/// The packagers' applet that writes man pages and completions. It stays outside the clap
/// definition it renders, so no help, man page or completion ever offers it.
pub const GENERATE_APPLET: &str = "generate";

/// The multi-call binary's own name.
pub const BINARY_NAME: &str = "ipmasq";

/// argv[0] names that select an applet without a subcommand.
const ARGV0_ALIASES: [(&str, &str); 1] = [("ip-masq-agent", "agent")];

const ABOUT: &str = "Masquerade pod traffic leaving the cluster: a drop-in ip-masq-agent";

const LONG_ABOUT: &str = "\
ipmasq keeps one nat chain (IP-MASQ-AGENT) on every node: RETURN for each non-masquerade CIDR \
(RFC 1918 and link-local by default), MASQUERADE for everything else, and a jump to it from \
POSTROUTING for non-LOCAL destinations. It reads upstream ip-masq-agent's config file and flags \
unchanged.

It is a multi-call binary: run `ipmasq APPLET ...`, or install it as `ip-masq-agent` to run the \
agent directly.";

/// `--version`'s long form: the version and the commit it was built from.
const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("IPMASQ_COMMIT"),
    ")"
);

#[derive(Parser, Debug)]
#[command(
    name = BINARY_NAME,
    version,
    long_version = LONG_VERSION,
    about = ABOUT,
    long_about = LONG_ABOUT,
    after_help = after_help(&docs::MAIN),
    arg_required_else_help = true,
    propagate_version = true,
    // Help wraps at the terminal's width, but no wider than reads well.
    max_term_width = 100
)]
pub struct Cli {
    /// Print the applet names, one per line, and exit
    #[arg(long, exclusive = true)]
    pub list: bool,

    #[command(subcommand)]
    pub applet: Option<Applet>,
}

#[derive(Subcommand, Debug)]
pub enum Applet {
    /// Run the masquerade agent (the ip-masq-agent daemon)
    #[command(after_help = after_help(&docs::AGENT))]
    Agent(Box<AgentArgs>),
    /// Check config files or ConfigMap manifests as the agent would read them
    #[command(after_help = after_help(&docs::VALIDATE))]
    Validate(ValidateArgs),
    /// Show the live masquerade chain of this node (and, with --config, whether it drifted)
    #[command(after_help = after_help(&docs::SHOW))]
    Show(ShowArgs),
    /// Remove the masquerade chain and its POSTROUTING jumps, from every iptables variant
    #[command(after_help = after_help(&docs::CLEANUP))]
    Cleanup(CleanupArgs),
    /// Say whether traffic to an address is masqueraded, by which rule and config entry
    #[command(after_help = after_help(&docs::EXPLAIN))]
    Explain(ExplainArgs),
    /// Every node's IPMasqAgentReady condition in one table: which config, which backend, in sync or not
    #[command(after_help = after_help(&docs::FLEET), long_about = docs::FLEET_ABOUT)]
    Fleet(FleetArgs),
    /// Which pod was behind the node's address and port at a time, from the agent's SNAT log
    #[command(after_help = after_help(&docs::WHO), long_about = docs::WHO_ABOUT)]
    Who(WhoArgs),
}

/// `--iptables-mode`'s spelling: which iptables implementation the agent drives. Read only
/// through [`BackendFlags::choice`], which turns it into a backend's identity.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum IptablesModeArg {
    /// Whichever already holds rules (as kubernetes-sigs/iptables-wrappers decides); nft when neither
    Auto,
    /// iptables-nft (the nf_tables kernel API)
    Nft,
    /// iptables-legacy (the x_tables kernel API)
    Legacy,
}

/// `--config-source`'s spelling: where the agent reads its config.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigSourceArg {
    /// The file or directory kubelet mounts from the ConfigMap (upstream's way; the default)
    File,
    /// The ConfigMap itself, watched through the Kubernetes API
    Api,
}

/// The agent flags that shape the rules; shared by `agent` and `show`.
#[derive(Args, Debug, Clone)]
pub struct RuleFlags {
    /// Name of the nat chain for the masquerade rules
    #[arg(long, value_name = "NAME", default_value = crate::plan::DEFAULT_CHAIN)]
    pub masq_chain: crate::plan::ChainName,

    #[command(flatten)]
    pub config_flags: ConfigFlags,

    /// Add --random-fully to MASQUERADE rules (only where iptables supports it, >= 1.6.2)
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value = "true",
        default_missing_value = "true",
        value_parser = parse_go_bool
    )]
    pub random_fully: bool,

    /// Source ports for MASQUERADE, e.g. 1024-29999,32768-65535 (tcp, udp and sctp)
    #[arg(
        long,
        value_name = "PORTS",
        default_value = "",
        hide_default_value = true
    )]
    pub to_ports: crate::plan::ToPorts,
}

/// `--backend`'s spelling: the firewall backend. Read only through [`BackendFlags::choice`],
/// which turns it into a backend's identity.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendArg {
    /// A nat chain per CIDR, exactly as upstream ip-masq-agent (the drop-in default)
    Iptables,
    /// Native nftables: one table per family with an interval set, any number of CIDRs
    Nftables,
}

/// Which backend to drive; shared by `agent`, `show` and `cleanup`.
#[derive(Args, Debug, Clone, Copy)]
pub struct BackendFlags {
    /// The firewall backend
    #[arg(long, value_enum, value_name = "BACKEND", default_value_t = BackendArg::Iptables)]
    backend: BackendArg,

    /// Which iptables to drive
    #[arg(long, value_enum, value_name = "MODE", default_value_t = IptablesModeArg::Auto)]
    iptables_mode: IptablesModeArg,

    /// Which of the two were given on the command line (see [`from_matches`]).
    #[arg(skip)]
    pub given: GivenBackendFlags,
}

impl BackendFlags {
    /// The backend the two flags choose, by its identity: the one conversion from the flags'
    /// spelling (`--backend=nftables` wins over any `--iptables-mode`).
    pub fn choice(&self) -> Choice {
        match (self.backend, self.iptables_mode) {
            (BackendArg::Nftables, _) => Choice::Backend(BackendId::Nftables),
            (BackendArg::Iptables, IptablesModeArg::Auto) => Choice::DetectedIptables,
            (BackendArg::Iptables, IptablesModeArg::Nft) => Choice::Backend(BackendId::IptablesNft),
            (BackendArg::Iptables, IptablesModeArg::Legacy) => {
                Choice::Backend(BackendId::IptablesLegacy)
            }
        }
    }
}

/// Which of `--backend` and `--iptables-mode` the command line gave: a clap default has the
/// same value as the flag given with it, so only the parse can tell them apart, and an
/// explicit flag must win over the running agent's backend.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GivenBackendFlags {
    pub backend: bool,
    pub iptables_mode: bool,
}

impl GivenBackendFlags {
    /// Whether either flag was given.
    pub fn any(self) -> bool {
        self.backend || self.iptables_mode
    }
}

/// The parsed command line, with what was given (not defaulted) recorded where a default
/// and a given value must be told apart: `--backend`, `--iptables-mode`, `--all-variants`.
pub fn from_matches(matches: &clap::ArgMatches) -> Result<Cli, clap::Error> {
    use clap::parser::ValueSource;
    let mut cli = <Cli as clap::FromArgMatches>::from_arg_matches(matches)?;
    let Some((_, sub)) = matches.subcommand() else {
        return Ok(cli);
    };
    let given = |id: &str| sub.value_source(id) == Some(ValueSource::CommandLine);
    let backend_given = || GivenBackendFlags {
        backend: given("backend"),
        iptables_mode: given("iptables_mode"),
    };
    match &mut cli.applet {
        Some(Applet::Agent(args)) => {
            args.backend.given = backend_given();
            let file_flags_given = given("config") || given("config_dir");
            if let Some(conflict) = args.source_conflict(file_flags_given, given("configmap")) {
                return Err(clap::Error::raw(
                    clap::error::ErrorKind::ArgumentConflict,
                    format!("{conflict}\n"),
                ));
            }
        }
        Some(Applet::Show(args)) => args.backend.given = backend_given(),
        Some(Applet::Explain(args)) => args.backend.given = backend_given(),
        Some(Applet::Cleanup(args)) => {
            args.backend.given = backend_given();
            args.all_variants_given = given("all_variants");
        }
        Some(Applet::Validate(_)) | Some(Applet::Fleet(_)) | Some(Applet::Who(_)) | None => {}
    }
    Ok(cli)
}

#[derive(Args, Debug, Clone)]
pub struct AgentArgs {
    /// Config file (YAML or JSON); a missing file means upstream's defaults
    #[arg(long, value_name = "PATH", default_value = crate::config::DEFAULT_CONFIG_PATH)]
    pub config: PathBuf,

    /// Read every `ip-masq*` file in DIR, in name order, and merge them (ip-masq-agent-v2's
    /// layout: lists united, booleans OR'd, the shortest resyncInterval); replaces --config
    #[arg(long, value_name = "DIR", conflicts_with = "config")]
    pub config_dir: Option<PathBuf>,

    /// How long a writer may keep the config file open after changing it (a rewrite in place:
    /// `cat > FILE`, an editor saving) before the agent reads it as it is; until then the rules
    /// of the config in force stay. A rename into place (kubelet's ConfigMap volume, an atomic
    /// write) is read at once
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_writer_deadline)]
    pub config_writer_deadline: crate::config::GoDuration,

    /// Where the config comes from: the file (--config or --config-dir, as kubelet mounts the
    /// ConfigMap: a change arrives with kubelet's next volume sync, a minute or more), or the
    /// Kubernetes API (the ConfigMap --configmap watched: a change arrives in milliseconds; the
    /// config last applied is kept in --state-dir and applied at once when the API is away at
    /// start)
    #[arg(long, value_enum, value_name = "SOURCE", default_value_t = ConfigSourceArg::File)]
    pub config_source: ConfigSourceArg,

    /// With --config-source=api: the ConfigMap that holds the config (its data key `config`,
    /// the same text as the file); needs get, list and watch on configmaps in NAMESPACE
    #[arg(
        long,
        value_name = "NAMESPACE/NAME",
        default_value = crate::cluster::configmap::DEFAULT_CONFIGMAP
    )]
    pub configmap: crate::cluster::configmap::ConfigMapRef,

    /// With --config-source=api: the kubeconfig to reach the API with [default: the pod's
    /// service account]
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// With --config-source=api: this node's Node name, whose labels select the node pools
    /// [default: $NODE_NAME (the downward API's spec.nodeName), else the host name]
    #[arg(long, value_name = "NAME")]
    pub node_name: Option<String>,

    /// With --config-source=api: write this node's IPMasqAgentReady condition and an Event
    /// when a config is rejected (false: write nothing to the API, which is then only read;
    /// the agent needs no write permission at all)
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value = "true",
        default_missing_value = "true",
        value_parser = parse_go_bool
    )]
    pub node_status: bool,

    /// With --config-source=api: keep pods off this node until its rules are in. The agent
    /// removes the taint node.ipmasq.io/agent-not-ready from its own Node after its first sync
    /// whose rules it read back from the kernel, and puts it back (NoSchedule) when it cannot
    /// enforce: no usable config, a first sync that failed, a stop with --cleanup-on-exit, or a
    /// stop while the kubelet says the node is shutting down.
    /// The taint is put on new Nodes by the kubelet (--register-with-taints) or the node pool;
    /// needs patch on nodes (packaging/kubernetes/api-mode/rbac.yaml) and, to narrow that to
    /// this one taint of its own Node, the admission policy (packaging/kubernetes/admission)
    #[arg(long)]
    pub node_taint: bool,

    /// With --config-source=api: status writes come in cycles of this length on the wall
    /// clock, each node at its own place in the cycle (a hash of the node name) and at most
    /// once a cycle, so a fleet's writes are spread whatever the edit rate (5,000 nodes over
    /// 30s: about 170 writes/s); a write after a change waits for the node's place, at most
    /// this long; 0 writes at once. The rules never wait
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_fleet_duration)]
    pub status_spread: crate::config::GoDuration,
    /// With --config-source=api: when the API has not answered for an input (the ConfigMaps,
    /// the Node, the EgressNATPolicies) for this many seconds, the Node condition says
    /// ApiViewStale (status True: the rules are those of the last config seen; /readyz stays
    /// 200). A healthy idle watch hears a bookmark about once a minute (Kubernetes 1.27+) or is
    /// renewed after 115 s of silence; a CRD that is not served is asked every 5 minutes, so
    /// the EgressNATPolicies get 300 s more
    #[arg(long, value_name = "SECONDS", default_value_t = 180, value_parser = clap::value_parser!(u64).range(120..=86400))]
    pub api_view_stale_after: u64,

    /// Resync interval when no config sets resyncInterval, in seconds (ip-masq-agent-v2's
    /// flag) or as a Go duration [default: 60]
    #[arg(long, value_name = "SECONDS", value_parser = parse_resync_seconds)]
    pub resync_interval: Option<crate::config::GoDuration>,

    #[command(flatten)]
    pub rules: RuleFlags,

    #[command(flatten)]
    pub backend: BackendFlags,

    /// With --backend=nftables on Linux 6.9 or later: hold our tables (nf_tables' owner and
    /// persist flags), so that while the agent runs no other process can delete or change
    /// them (`nft delete table ip ipmasq` is refused, `nft flush ruleset` passes over them);
    /// they stay when the agent exits, for the next agent to claim. false: leave them open to
    /// everyone (a neighbour's change is then repaired as soon as its notification is heard)
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value = "true",
        default_missing_value = "true",
        value_parser = parse_go_bool
    )]
    pub nftables_table_owner: bool,

    /// Sync once, then exit (0 when the rules are in place)
    #[arg(long)]
    pub once: bool,

    /// With --once: never read the Kubernetes API. In API mode the pass applies the
    /// last-known-good saved by an earlier agent (see --last-known-good-dir), and fails when
    /// there is none; a file is read as always. For a unit ordered before the kubelet at boot
    /// (ipmasq-boot-guard.service), so the rules are in before any pod starts, whatever the
    /// network or the API can do yet
    #[arg(long, requires = "once")]
    pub offline: bool,

    /// Print the transaction a sync would apply and exit; change nothing
    #[arg(long)]
    pub dry_run: bool,

    /// After a change (or installing the rules from nothing), delete the conntrack entries
    /// whose NAT it made wrong, so their flows follow: connectionless flows (UDP, ICMP, ...; never end on their own), all (TCP and
    /// SCTP too: those connections break), or off
    #[arg(
        long,
        value_enum,
        value_name = "WHICH",
        default_value_t = crate::conntrack::judge::ResetScope::Connectionless
    )]
    pub conntrack_reset: crate::conntrack::judge::ResetScope,

    /// Remove the chain and its jump on SIGTERM/SIGINT, except when systemd restarts the unit
    /// (off: a rolling update must not leave a window without masquerade)
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value = "false",
        default_missing_value = "true",
        value_parser = parse_go_bool
    )]
    pub cleanup_on_exit: bool,

    /// Log line format (also spelt --logging-format, as Kubernetes components spell it)
    #[arg(
        long,
        visible_alias = "logging-format",
        value_enum,
        value_name = "FORMAT",
        default_value_t = LogFormat::Text
    )]
    pub log_format: LogFormat,

    /// Serve /healthz, /readyz and /metrics here (HOST:PORT), or `off`
    #[arg(
        long,
        value_name = "HOST:PORT|off",
        default_value = DEFAULT_METRICS_ADDR,
        value_parser = parse_metrics_addr
    )]
    pub metrics_addr: MetricsAddr,

    /// Log every flow our rules source-NATed, one JSON line at its start and one at its end
    /// (time, pod source, translated address:port, destination; packets and bytes when
    /// conntrack accounting is on), to PATH (appended to, rotated by size) or `-` (standard
    /// output); also keeps the SNAT port-pressure metrics. `ipmasq who` answers from it (it
    /// reads /var/log/ipmasq/snat.log unless given --log). It records who talked to whom: the
    /// file is created readable by its owner only, and an existing one readable by others is
    /// set to 0600 (with a warning)
    #[arg(long, value_name = "PATH|-")]
    pub snat_log: Option<std::ffi::OsString>,

    /// Rotate the SNAT log before it grows past SIZE bytes (suffix K, M or G: KiB, MiB, GiB)
    #[arg(long, value_name = "SIZE", default_value = "100M", value_parser = parse_size)]
    pub snat_log_max_size: u64,

    /// Rotated SNAT log files kept: PATH.1 (the newest) to PATH.N (the oldest)
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub snat_log_keep: u32,

    /// Keep the SNAT port-pressure metrics (ipmasq_snat_ports_in_use and the share taken
    /// toward the busiest destination) from conntrack's events, without --snat-log
    #[arg(long)]
    pub snat_port_pressure: bool,

    /// Directory of the running agent's state file [default: $IPMASQ_STATE_DIR, else
    /// /run/ipmasq]
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    /// With --config-source=api: directory of the last-known-good config, kept across
    /// reboots so a rebooted node applies it before the API answers. Made 0755 when missing;
    /// refused when it is a symlink, another user's, or writable by others [default:
    /// $IPMASQ_LAST_KNOWN_GOOD_DIR, else /var/lib/ipmasq]
    #[arg(long, value_name = "DIR")]
    pub last_known_good_dir: Option<PathBuf>,

    /// klog verbosity: 0-1 info, 2-4 debug, 5+ trace; from 6 the libraries' events too (the
    /// Kubernetes client's requests in API mode)
    #[arg(short = 'v', long = "v", value_name = "N", default_value_t = 0)]
    pub verbosity: u8,

    /// Accepted for klog compatibility; logs always go to stderr
    #[arg(
        long,
        hide = true,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = parse_go_bool
    )]
    pub logtostderr: Option<bool>,

    /// Accepted for klog compatibility; logs always go to stderr
    #[arg(
        long,
        hide = true,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = parse_go_bool
    )]
    pub alsologtostderr: Option<bool>,

    #[command(flatten)]
    pub klog: KlogCompat,
}

/// klog/glog flags an upstream DaemonSet may pass; accepted so the image swaps cleanly, and
/// ignored (logs always go to stderr; `--v` sets the level).
#[derive(Args, Debug, Clone, Default)]
pub struct KlogCompat {
    #[arg(long, hide = true, value_name = "SEVERITY")]
    pub stderrthreshold: Option<String>,
    #[arg(long = "log-dir", alias = "log_dir", hide = true, value_name = "DIR")]
    pub log_dir: Option<String>,
    #[arg(
        long = "log-file",
        alias = "log_file",
        hide = true,
        value_name = "FILE"
    )]
    pub log_file: Option<String>,
    #[arg(
        long = "log-file-max-size",
        alias = "log_file_max_size",
        hide = true,
        value_name = "MB"
    )]
    pub log_file_max_size: Option<String>,
    #[arg(long, hide = true, value_name = "PATTERN")]
    pub vmodule: Option<String>,
    #[arg(
        long = "log-backtrace-at",
        alias = "log_backtrace_at",
        hide = true,
        value_name = "FILE:LINE"
    )]
    pub log_backtrace_at: Option<String>,
    #[arg(
        long = "skip-headers",
        alias = "skip_headers",
        hide = true,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = parse_go_bool
    )]
    pub skip_headers: Option<bool>,
    #[arg(
        long = "add-dir-header",
        alias = "add_dir_header",
        hide = true,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = parse_go_bool
    )]
    pub add_dir_header: Option<bool>,
}

impl KlogCompat {
    /// The names of the flags that were given (for a start-up note that they are ignored).
    pub fn given(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        let flags: [(&'static str, bool); 8] = [
            ("--stderrthreshold", self.stderrthreshold.is_some()),
            ("--log-dir", self.log_dir.is_some()),
            ("--log-file", self.log_file.is_some()),
            ("--log-file-max-size", self.log_file_max_size.is_some()),
            ("--vmodule", self.vmodule.is_some()),
            ("--log-backtrace-at", self.log_backtrace_at.is_some()),
            ("--skip-headers", self.skip_headers.is_some()),
            ("--add-dir-header", self.add_dir_header.is_some()),
        ];
        for (name, set) in flags {
            if set {
                out.push(name);
            }
        }
        out
    }
}

#[derive(Args, Debug, Clone)]
pub struct ShowArgs {
    /// Also judge the live rules against this config (as the agent would read it)
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,

    #[command(flatten)]
    pub rules: RuleFlags,

    #[command(flatten)]
    pub backend: BackendFlags,

    /// Output format
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,

    /// Add each rule's comment to the tables (wider than 80 columns)
    #[arg(long)]
    pub wide: bool,

    /// Directory of the running agent's state file [default: $IPMASQ_STATE_DIR, else
    /// /run/ipmasq]
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    /// Colour the text output
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
}

#[derive(Args, Debug, Clone)]
pub struct ExplainArgs {
    /// The destination address to explain
    #[arg(value_name = "DEST")]
    pub destination: std::net::IpAddr,

    /// The source address (a pod) [default: the first address of the first
    /// masqueradeSourceCIDRs range of DEST's family, else any source]
    #[arg(long, value_name = "SRC")]
    pub from: Option<std::net::IpAddr>,

    /// The interface the traffic leaves by, for a config scoped with outputInterfaces
    /// [default: the interface of the kernel's route to DEST]
    #[arg(long, value_name = "IF")]
    pub out_interface: Option<String>,

    /// Explain with this config file [default: the running agent's config, else
    /// /etc/config/ip-masq-agent]
    #[arg(long, value_name = "PATH", conflicts_with = "config_dir")]
    pub config: Option<PathBuf>,

    /// Explain with the merged `ip-masq*` files of DIR (as `agent --config-dir`)
    #[arg(long, value_name = "DIR")]
    pub config_dir: Option<PathBuf>,

    #[command(flatten)]
    pub rules: RuleFlags,

    #[command(flatten)]
    pub backend: BackendFlags,

    /// Judge the config only; read neither the live rules nor the conntrack table (needs no
    /// privileges)
    #[arg(long)]
    pub no_live: bool,

    /// Directory of the running agent's state file [default: $IPMASQ_STATE_DIR, else
    /// /run/ipmasq]
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    /// Output format
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,

    /// Colour the text output
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
}

#[derive(Args, Debug, Clone)]
pub struct CleanupArgs {
    /// Name of the chain to remove
    #[arg(long, value_name = "NAME", default_value = crate::plan::DEFAULT_CHAIN)]
    pub masq_chain: crate::plan::ChainName,

    /// Clean both iptables-nft and iptables-legacy (the default, unless --iptables-mode=nft or
    /// =legacy is given); with =false only the variant --iptables-mode picks
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value = "true",
        default_missing_value = "true",
        value_parser = parse_go_bool
    )]
    pub all_variants: bool,

    /// Whether `--all-variants` was given on the command line (see [`from_matches`]).
    #[arg(skip)]
    pub all_variants_given: bool,

    #[command(flatten)]
    pub backend: BackendFlags,

    /// Print what would be removed; change nothing
    #[arg(long)]
    pub dry_run: bool,

    /// Directory of the running agent's state file [default: $IPMASQ_STATE_DIR, else
    /// /run/ipmasq]
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    /// Output format
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,

    /// Colour the text output
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
}

/// The agent flags that change how a config is judged; shared by `agent` and `validate`.
#[derive(Args, Debug, Clone, Copy, Default)]
pub struct ConfigFlags {
    /// Also manage IPv6 (ip6tables); IPv6 CIDRs are an error without it. Unset, enableIPv6
    /// in the config decides (default false); set, it wins over the config
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = parse_go_bool
    )]
    pub enable_ipv6: Option<bool>,

    /// Default list also skips masquerade for every RFC-reserved IPv4 range, not only RFC 1918
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value = "false",
        default_missing_value = "true",
        value_parser = parse_go_bool
    )]
    pub nomasq_all_reserved_ranges: bool,
}

impl ConfigFlags {
    /// `--enable-ipv6`'s value (false when not given).
    pub fn ipv6(&self) -> bool {
        self.enable_ipv6.unwrap_or(false)
    }

    pub fn options(&self) -> crate::config::Options {
        crate::config::Options {
            enable_ipv6: self.ipv6(),
            enable_ipv6_given: self.enable_ipv6.is_some(),
            nomasq_all_reserved_ranges: self.nomasq_all_reserved_ranges,
            merging: false,
            default_resync_interval: None,
        }
    }
}

/// `--resync-interval`: whole seconds as ip-masq-agent-v2 takes them, or a Go duration; at
/// least the agent's floor.
fn parse_resync_seconds(text: &str) -> Result<crate::config::GoDuration, String> {
    let duration = match text.parse::<u32>() {
        Ok(seconds) => crate::config::GoDuration(i64::from(seconds) * 1_000_000_000),
        Err(_) => crate::config::parse_go_duration(text).map_err(|e| e.to_string())?,
    };
    if duration < crate::config::MIN_RESYNC_INTERVAL {
        return Err(format!(
            "{duration} is below the floor of {}; give whole seconds, e.g. 60",
            crate::config::MIN_RESYNC_INTERVAL
        ));
    }
    Ok(duration)
}

impl AgentArgs {
    /// Why the flags given do not fit `--config-source`, in words that say what to do: the
    /// API's flags without `--config-source=api`, or a config path with it.
    pub fn source_conflict(&self, file_flags_given: bool, configmap_given: bool) -> Option<String> {
        match self.config_source {
            ConfigSourceArg::File => {
                let api_flags: Vec<&str> = [
                    ("--configmap", configmap_given),
                    ("--kubeconfig", self.kubeconfig.is_some()),
                    ("--node-name", self.node_name.is_some()),
                    ("--node-taint", self.node_taint),
                    ("--last-known-good-dir", self.last_known_good_dir.is_some()),
                ]
                .into_iter()
                .filter_map(|(flag, given)| given.then_some(flag))
                .collect();
                (!api_flags.is_empty()).then(|| {
                    let (verb, them) = if api_flags.len() == 1 {
                        ("applies", "it")
                    } else {
                        ("apply", "them")
                    };
                    format!(
                        "{} only {verb} with --config-source=api: add --config-source=api to read the config from the Kubernetes API, or drop {them} to read the file",
                        api_flags.join(", ")
                    )
                })
            }
            ConfigSourceArg::Api if file_flags_given => Some(
                "--config-source=api reads the ConfigMap named by --configmap, not --config or --config-dir: drop them, or use --config-source=file".to_string(),
            ),
            ConfigSourceArg::Api => (self.node_taint && !self.node_status).then(|| {
                "--node-taint writes the Node's taint, and --node-status=false writes nothing to the API: drop one of them".to_string()
            }),
        }
    }

    /// Where the config is read: `--config-dir`, else `--config`.
    pub fn config_source(&self) -> crate::config::ConfigSource {
        match &self.config_dir {
            Some(dir) => crate::config::ConfigSource::Dir(dir.clone()),
            None => crate::config::ConfigSource::File(self.config.clone()),
        }
    }

    /// The config-judging options, with `--resync-interval`.
    pub fn config_options(&self) -> crate::config::Options {
        crate::config::Options {
            default_resync_interval: self.resync_interval,
            ..self.rules.config_flags.options()
        }
    }
}

/// Output format: one vocabulary for every applet that prints.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    /// For people (tables, compiler-style messages)
    Text,
    /// A stable JSON document for scripts (see docs/reference/json.md)
    Json,
    /// The same document as YAML, for support bundles
    Yaml,
}

#[derive(Args, Debug)]
pub struct ValidateArgs {
    /// Config files, ConfigMap manifests or directories of them; `-` reads stdin
    /// [default: /etc/config/ip-masq-agent]
    #[arg(value_name = "FILE|-")]
    pub files: Vec<PathBuf>,

    #[command(flatten)]
    pub config: ConfigFlags,

    /// The agent's --to-ports, checked as the agent checks it: a value it refuses (a port
    /// above 65535) is a usage error here too
    #[arg(
        long,
        value_name = "PORTS",
        default_value = "",
        hide_default_value = true
    )]
    pub to_ports: crate::plan::ToPorts,

    /// Treat warnings as errors
    #[arg(long)]
    pub strict: bool,

    /// Report format
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,

    /// Also print the effective config (after defaults) of each valid input
    #[arg(long)]
    pub print_effective: bool,

    /// List the files of a directory that were skipped as not ip-masq-agent configs, and why
    #[arg(short = 'v', long)]
    pub verbose: bool,

    /// Merge each directory's `ip-masq*` files as `agent --config-dir` does, and show the
    /// merged lists with the file and line of every entry
    #[arg(long)]
    pub merged: bool,

    /// Colour the text report
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,

    /// Skip the checks against this machine's addresses and interfaces (whether it holds the
    /// outputAddress, whether each outputInterfaces pattern matches an interface here): for a
    /// CI runner that is no node
    #[arg(long)]
    pub no_node_checks: bool,

    /// Also show the config of a node with these labels (k=v,k2=v2, as kubelet's
    /// --node-labels): which node pools (ip-masq-agent-* ConfigMaps with
    /// ipmasq.io/node-selector) apply to it, and the base and those pools merged, with the
    /// destinations of the run's EgressNATPolicy objects added
    #[arg(long, value_name = "LABELS", value_parser = parse_node_labels)]
    pub node_labels: Option<crate::config::selector::Labels>,
}

/// `--node-labels`: `k=v` pairs separated by commas, each key and value as Kubernetes takes
/// a label's.
fn parse_node_labels(value: &str) -> Result<crate::config::selector::Labels, String> {
    use crate::config::selector::{check_label_key, check_label_value};
    let mut labels = crate::config::selector::Labels::new();
    for pair in value.split(',').filter(|p| !p.is_empty()) {
        let (key, label) = pair.split_once('=').ok_or_else(|| {
            format!("{pair:?} is not KEY=VALUE (e.g. pool=gpu,topology.kubernetes.io/zone=a)")
        })?;
        check_label_key(key).map_err(|why| format!("label key {key:?}: {why}"))?;
        check_label_value(label).map_err(|why| format!("label {key}={label:?}: {why}"))?;
        labels.insert(key.to_string(), label.to_string());
    }
    Ok(labels)
}

#[derive(Args, Debug, Clone)]
pub struct FleetArgs {
    /// The kubeconfig to use (its current context) [default: as kubectl: $KUBECONFIG, else
    /// ~/.kube/config, else the pod's service account]
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// Only the Nodes whose labels match this selector (kubectl's -l), e.g. pool=gpu
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    pub selector: Option<String>,

    /// The deadline of the whole listing, every page included (a Go duration)
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_fleet_timeout)]
    pub timeout: crate::config::GoDuration,

    /// Nodes per page of the list (the server's limit/continue paging)
    #[arg(long, value_name = "N", default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub page_size: u32,

    /// Also read the agents' pods (one list), so a node whose agent is not running, restarting
    /// or not ready is called so whatever its condition says (needs `list` on pods in
    /// --agent-namespace; false: judge by the conditions alone)
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value = "true",
        default_missing_value = "true",
        value_parser = parse_go_bool
    )]
    pub agent_pods: bool,

    /// The namespace of the agents' DaemonSet
    #[arg(long, value_name = "NAMESPACE", default_value = crate::cluster::mirror::DEFAULT_AGENT_NAMESPACE)]
    pub agent_namespace: String,

    /// The label selector of the agents' pods (the DaemonSet's pod template labels)
    #[arg(long, value_name = "SELECTOR", default_value = crate::cluster::mirror::DEFAULT_AGENT_SELECTOR)]
    pub agent_selector: String,

    /// Output format
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,

    /// Colour the text output
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,

    #[command(subcommand)]
    pub command: Option<FleetCommand>,
}

/// What `fleet` does besides listing the nodes.
#[derive(Subcommand, Debug, Clone)]
pub enum FleetCommand {
    /// Roll a config change out in waves that halt themselves on the first failing node
    #[command(after_help = after_help(&docs::ROLLOUT), long_about = docs::ROLLOUT_ABOUT)]
    Rollout(RolloutArgs),
}

#[derive(Args, Debug, Clone)]
pub struct RolloutArgs {
    /// The kubeconfig to use (its current context) [default: as kubectl: $KUBECONFIG, else
    /// ~/.kube/config, else the pod's service account]
    #[arg(long, value_name = "PATH", global = true)]
    pub kubeconfig: Option<PathBuf>,

    /// The agents' base ConfigMap; the rollout is NAME-next beside it
    #[arg(long, value_name = "NAMESPACE/NAME", default_value = crate::cluster::configmap::DEFAULT_CONFIGMAP, global = true)]
    pub configmap: crate::cluster::configmap::ConfigMapRef,

    /// The deadline of every request and of the whole command (a Go duration)
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_fleet_timeout, global = true)]
    pub timeout: crate::config::GoDuration,

    /// Output format (status)
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text, global = true)]
    pub output: OutputFormat,

    #[command(subcommand)]
    pub action: RolloutAction,
}

/// One step of a rollout.
#[derive(Subcommand, Debug, Clone)]
pub enum RolloutAction {
    /// Create NAME-next from FILE with its schedule: the first wave starts at --start
    Start(RolloutStartArgs),
    /// The wave, the nodes on the base, on the next config and failed, a halt and who is next
    Status,
    /// The next config becomes the base; the rollout's ConfigMap is deleted
    Promote(RolloutPromoteArgs),
    /// Every node back on the base at once; the rollout stays, marked aborted, for the record
    Abort,
    /// After a halt: the rollout starts again from a wave (the first by default), now
    Resume(RolloutResumeArgs),
}

#[derive(Args, Debug, Clone)]
pub struct RolloutPromoteArgs {
    /// Promote although the rollout is not done, a node of it failed, or the base was edited
    /// since the rollout started (that edit is then overwritten)
    #[arg(long)]
    pub force: bool,
}

#[derive(Args, Debug, Clone)]
pub struct RolloutResumeArgs {
    /// The wave to start again from (1-based): the first by default, so the canary comes
    /// first again; the halted wave's number skips the waves before it
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub from_wave: u32,
}

#[derive(Args, Debug, Clone)]
pub struct RolloutStartArgs {
    /// The next config (YAML or JSON, as the ConfigMap's `config` key holds it)
    #[arg(value_name = "FILE")]
    pub file: PathBuf,

    /// The waves, as percentages of the nodes, increasing (each node's place is a hash of its
    /// name: a node once in stays in)
    #[arg(long, value_name = "PERCENTS", default_value = "1,10,50,100")]
    pub waves: crate::config::rollout::Waves,

    /// The soak between two waves (a Go duration)
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = crate::config::rollout::parse_soak)]
    pub soak: std::time::Duration,

    /// When the first wave starts (RFC 3339) [default: now]
    #[arg(long, value_name = "TIME")]
    pub start: Option<k8s_openapi::jiff::Timestamp>,

    /// Only the nodes this label selector matches take part (kubectl's -l syntax)
    #[arg(long, value_name = "SELECTOR")]
    pub node_selector: Option<String>,

    /// What must stay true on every node of the wave: keep|masquerade DEST [from SRC] [via
    /// IFACE] (repeatable), judged on the live rules as `explain` judges them
    #[arg(long = "invariant", value_name = "INVARIANT")]
    pub invariants: Vec<crate::config::rollout::Invariant>,
}

#[derive(Args, Debug, Clone)]
#[command(group(clap::ArgGroup::new("whose").required(true).args(["address", "pod"])))]
pub struct WhoArgs {
    /// The node's address and port as the outside saw them (the translated source), e.g.
    /// 203.0.113.1:40002 or [2001:db8::1]:40002
    #[arg(value_name = "ADDRESS:PORT")]
    pub address: Option<std::net::SocketAddr>,

    /// Instead of an address: every translation of this pod (NAMESPACE/NAME, as an agent in
    /// API mode names it in the log), and the new connections the pod share refused it,
    /// narrowed with --since and --until
    #[arg(long, value_name = "NAMESPACE/NAME", value_parser = parse_pod_name)]
    pub pod: Option<String>,

    /// Only the flows alive at this time (RFC 3339; 2026-11-26 12:03:04 is UTC; also
    /// 26/Nov/2026:12:03:04 +0000 and @UNIX-SECONDS) [default: every flow in the log]
    #[arg(long, value_name = "TIME", value_parser = crate::snat::line::parse_time)]
    pub at: Option<crate::snat::line::Micros>,

    /// Only the flows alive at or after this time (the forms of --at)
    #[arg(long, value_name = "TIME", value_parser = crate::snat::line::parse_time, conflicts_with = "at")]
    pub since: Option<crate::snat::line::Micros>,

    /// Only the flows alive at or before this time (the forms of --at)
    #[arg(long, value_name = "TIME", value_parser = crate::snat::line::parse_time, conflicts_with = "at")]
    pub until: Option<crate::snat::line::Micros>,

    /// With --at: also the flows that ended or began this close to it (the reporter's clock
    /// and the node's differ; a Go duration)
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_fleet_duration)]
    pub tolerance: crate::config::GoDuration,

    /// Only flows of this protocol (as the log names it: tcp, udp, icmp, icmpv6, or a number)
    #[arg(long, value_name = "PROTO")]
    pub proto: Option<String>,

    /// The SNAT log the agent writes (--snat-log); PATH.1 (newest) … PATH.N (oldest) are read
    /// too; - reads standard input (what an agent run with --snat-log - printed)
    #[arg(long, value_name = "PATH", default_value = crate::snat::line::DEFAULT_SNAT_LOG)]
    pub log: PathBuf,

    /// Output format
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,

    /// Colour the text output
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
}

/// `who --pod`: NAMESPACE/NAME, each part a name the API accepts (lowercase letters, digits,
/// `-` and `.`).
fn parse_pod_name(text: &str) -> Result<String, String> {
    let name_like = |part: &str| {
        !part.is_empty()
            && part.len() <= 253
            && part
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    };
    match text.split_once('/') {
        Some((namespace, name)) if name_like(namespace) && name_like(name) => Ok(text.to_string()),
        _ => Err(format!(
            "{text:?} is no pod: give NAMESPACE/NAME, e.g. default/web-0"
        )),
    }
}

/// `fleet`'s durations: a Go duration, not negative.
fn parse_fleet_duration(text: &str) -> Result<crate::config::GoDuration, String> {
    let duration = crate::config::parse_go_duration(text).map_err(|e| e.to_string())?;
    if duration.0 < 0 {
        return Err(format!("{duration} is negative; give e.g. 15m or 0"));
    }
    Ok(duration)
}

/// `agent --config-writer-deadline`: a Go duration, not negative, at most an hour (a writer
/// that holds the file longer is stuck, and the config must not wait on it forever).
fn parse_writer_deadline(text: &str) -> Result<crate::config::GoDuration, String> {
    let duration = parse_fleet_duration(text)?;
    if duration.0 > 3_600 * 1_000_000_000 {
        return Err(format!("{duration} is over an hour; give e.g. 5s or 2m"));
    }
    Ok(duration)
}

/// `fleet --timeout`: a Go duration above 0.
fn parse_fleet_timeout(text: &str) -> Result<crate::config::GoDuration, String> {
    let duration = parse_fleet_duration(text)?;
    if duration.0 == 0 {
        return Err("a deadline of 0 leaves no time to list anything; give e.g. 60s".into());
    }
    Ok(duration)
}

/// `--metrics-addr`: an address to serve health and metrics on, or none (`off`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetricsAddr(pub Option<std::net::SocketAddr>);

/// A size in bytes, with an optional binary suffix: `K`, `M` or `G` (`KiB`, `MiB`, `GiB`).
fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let (digits, unit) = match trimmed.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => trimmed.split_at(at),
        None => (trimmed, ""),
    };
    let shift = match unit {
        "" => 0,
        "K" | "Ki" | "KiB" => 10,
        "M" | "Mi" | "MiB" => 20,
        "G" | "Gi" | "GiB" => 30,
        _ => {
            return Err(format!(
                "{text:?}: a size is a number of bytes, with K, M or G after it"
            ))
        }
    };
    let number: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?}: a size is a number of bytes, with K, M or G after it"))?;
    match number.checked_mul(1 << shift) {
        Some(0) | None => Err(format!("{text:?}: a size between 1 byte and 16 EiB")),
        Some(bytes) => Ok(bytes),
    }
}

fn parse_metrics_addr(value: &str) -> Result<MetricsAddr, String> {
    if value == "off" {
        return Ok(MetricsAddr(None));
    }
    value
        .parse()
        .map(|a| MetricsAddr(Some(a)))
        .map_err(|_| format!("{value:?} is not HOST:PORT (e.g. 127.0.0.1:9723, [::1]:9723) or off"))
}

/// Go's `strconv.ParseBool`, which its `flag` package uses for boolean flags.
pub fn parse_go_bool(value: &str) -> Result<bool, String> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!(
            "invalid boolean {value:?}: use true or false (Go's 1, t, T, TRUE, True, 0, f, F, FALSE, False also work)"
        )),
    }
}

/// Why the command line names no runnable applet.
#[derive(Debug, thiserror::Error)]
pub enum AppletError {
    #[error(
        "unknown applet '{name}'{}; the applets are: {}. Run `{BINARY_NAME} --list` or `{BINARY_NAME} --help`",
        suggest_applet(name).map(|a| format!(" (did you mean '{a}'?)")).unwrap_or_default(),
        applets().join(", ")
    )]
    Unknown { name: String },
}

/// The applet a mistyped name most likely meant: within two edits, or a prefix of it.
fn suggest_applet(name: &str) -> Option<String> {
    applets()
        .into_iter()
        .map(|a| (strsim::levenshtein(name, &a), a))
        .filter(|(distance, a)| *distance <= 2 || (name.len() >= 2 && a.starts_with(name)))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, a)| a)
}

/// Turns the process arguments into the multi-call form `ipmasq APPLET ARGS...`.
///
/// argv[0]'s basename selects an applet when it names one (`ip-masq-agent`, or
/// `ipmasq-validate` and the like); otherwise the first argument is the applet. Go-style
/// single-dash long flags are rewritten to clap's double-dash form.
pub fn multicall_args(args: Vec<OsString>) -> Result<Vec<OsString>, AppletError> {
    let mut args = args.into_iter();
    let argv0 = args.next().unwrap_or_else(|| BINARY_NAME.into());
    let rest: Vec<OsString> = args.collect();
    let base = std::path::Path::new(&argv0)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let from_argv0 = ARGV0_ALIASES
        .iter()
        .find(|(alias, _)| *alias == base)
        .map(|(_, applet)| *applet)
        .or_else(|| {
            base.strip_prefix("ipmasq-")
                .filter(|name| applets().iter().any(|a| a == name))
        });
    let (applet, applet_args) = match from_argv0 {
        Some(applet) => (applet.to_string(), rest),
        None => {
            let Some(first) = rest.first() else {
                return Ok(vec![BINARY_NAME.into()]);
            };
            let first = first.to_string_lossy().into_owned();
            if first.starts_with('-') || first == "help" {
                // Top-level flags (--help, --version, --list) and `help`: clap handles them.
                let mut out = vec![OsString::from(BINARY_NAME)];
                out.extend(rest);
                return Ok(out);
            }
            if first != GENERATE_APPLET && !applets().contains(&first) {
                return Err(AppletError::Unknown { name: first });
            }
            (first, rest.into_iter().skip(1).collect())
        }
    };
    let mut out = vec![OsString::from(BINARY_NAME), OsString::from(&applet)];
    out.extend(go_style_flags(&applet, applet_args));
    Ok(out)
}

/// Long flag names an applet accepts, from the clap definition itself.
fn long_flags(applet: &str) -> Vec<String> {
    let command = command();
    command
        .find_subcommand(applet)
        .map(|sub| {
            sub.get_arguments()
                .flat_map(|a| {
                    a.get_long()
                        .into_iter()
                        .chain(a.get_all_aliases().unwrap_or_default())
                        .map(str::to_string)
                        .collect::<Vec<_>>()
                })
                .chain(["help".to_string(), "version".to_string()])
                .collect()
        })
        .unwrap_or_default()
}

/// Rewrites `-flag` and `-flag=value` (Go's flag package) to `--flag...` for the applet's
/// known long flags. Short flags, `-` (stdin) and everything after `--` are left alone.
fn go_style_flags(applet: &str, args: Vec<OsString>) -> Vec<OsString> {
    let longs = long_flags(applet);
    let mut out = Vec::with_capacity(args.len());
    let mut passthrough = false;
    for arg in args {
        let text = arg.to_string_lossy();
        if passthrough || text == "--" {
            passthrough = true;
            out.push(arg);
            continue;
        }
        if let Some(body) = text.strip_prefix('-').filter(|b| !b.starts_with('-')) {
            let name = body.split('=').next().unwrap_or_default();
            if name.len() > 1 && longs.iter().any(|l| l == name) {
                out.push(OsString::from(format!("-{text}")));
                continue;
            }
        }
        out.push(arg);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    fn strings(args: Vec<OsString>) -> Vec<String> {
        args.into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn clap_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    /// component-base's spelling of the log format flag is accepted, in both forms.
    #[test]
    fn logging_format_is_accepted_as_kubernetes_spells_it() {
        for argv in [
            &["ipmasq", "agent", "--logging-format=json"][..],
            &["ipmasq", "agent", "--logging-format", "json"][..],
            &["ipmasq", "agent", "--log-format=json"][..],
        ] {
            let cli = Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
            let Some(Applet::Agent(args)) = cli.applet else {
                panic!("agent")
            };
            assert_eq!(args.log_format, LogFormat::Json, "{argv:?}");
        }
    }

    /// The writer deadline takes a Go duration from 0 to an hour; the agent's default is 5 s.
    #[test]
    fn the_config_writer_deadline_is_bounded() {
        let deadline = |argv: &[&str]| match Cli::try_parse_from(argv) {
            Ok(Cli {
                applet: Some(Applet::Agent(args)),
                ..
            }) => Ok(args.config_writer_deadline.to_std()),
            Ok(_) => panic!("agent"),
            Err(err) => Err(err.to_string()),
        };
        let secs = |s| Ok(Some(std::time::Duration::from_secs(s)));
        assert_eq!(deadline(&["ipmasq", "agent"]), secs(5));
        assert_eq!(
            deadline(&["ipmasq", "agent", "--config-writer-deadline=2m"]),
            secs(120)
        );
        assert_eq!(
            deadline(&["ipmasq", "agent", "--config-writer-deadline=1h"]),
            secs(3600)
        );
        assert_eq!(
            deadline(&["ipmasq", "agent", "--config-writer-deadline=0"]),
            secs(0)
        );
        let over = deadline(&["ipmasq", "agent", "--config-writer-deadline=61m"]).unwrap_err();
        assert!(over.contains("over an hour"), "{over}");
        let negative = deadline(&["ipmasq", "agent", "--config-writer-deadline=-1s"]).unwrap_err();
        assert!(negative.contains("negative"), "{negative}");
    }

    #[test]
    fn the_long_version_names_the_commit() {
        use clap::CommandFactory;
        let long = Cli::command().render_long_version();
        assert!(long.contains(env!("CARGO_PKG_VERSION")), "{long}");
        assert!(
            long.contains(concat!("(commit ", env!("IPMASQ_COMMIT"), ")")),
            "{long}"
        );
        assert_ne!(env!("IPMASQ_COMMIT"), "", "the build script sets it");
    }

    #[test]
    fn argv0_selects_the_applet() {
        let args = multicall_args(os(&["/usr/bin/ip-masq-agent", "--enable-ipv6"])).unwrap();
        assert_eq!(strings(args), ["ipmasq", "agent", "--enable-ipv6"]);
        let args = multicall_args(os(&["ipmasq-validate", "x.yaml"])).unwrap();
        assert_eq!(strings(args), ["ipmasq", "validate", "x.yaml"]);
    }

    #[test]
    fn first_argument_selects_the_applet() {
        let args = multicall_args(os(&["ipmasq", "validate", "-"])).unwrap();
        assert_eq!(strings(args), ["ipmasq", "validate", "-"]);
        let args = multicall_args(os(&["./target/debug/ipmasq", "--list"])).unwrap();
        assert_eq!(strings(args), ["ipmasq", "--list"]);
    }

    #[test]
    fn a_mistyped_applet_gets_a_did_you_mean() {
        let err = multicall_args(os(&["ipmasq", "shwo"])).unwrap_err();
        assert!(err.to_string().contains("(did you mean 'show'?)"), "{err}");
        let err = multicall_args(os(&["ipmasq", "valid"])).unwrap_err();
        assert!(
            err.to_string().contains("(did you mean 'validate'?)"),
            "{err}"
        );
        let err = multicall_args(os(&["ipmasq", "frobnicate"])).unwrap_err();
        assert!(!err.to_string().contains("did you mean"), "{err}");
    }

    #[test]
    fn unknown_applet_is_a_clear_error() {
        let err = multicall_args(os(&["ipmasq", "frobnicate"])).unwrap_err();
        assert!(err.to_string().contains("unknown applet 'frobnicate'"));
        assert!(err
            .to_string()
            .contains("agent, cleanup, explain, fleet, show, validate, who"));
    }

    #[test]
    fn go_style_flags_are_rewritten() {
        let args = multicall_args(os(&[
            "ipmasq",
            "validate",
            "-enable-ipv6",
            "-nomasq-all-reserved-ranges=false",
            "-o",
            "json",
            "-",
            "--",
            "-strict",
        ]))
        .unwrap();
        assert_eq!(
            strings(args),
            [
                "ipmasq",
                "validate",
                "--enable-ipv6",
                "--nomasq-all-reserved-ranges=false",
                "-o",
                "json",
                "-",
                "--",
                "-strict"
            ]
        );
    }

    #[test]
    fn klog_flags_of_upstream_daemonsets_are_accepted() {
        let args = multicall_args(os(&[
            "ip-masq-agent",
            "--v=2",
            "--logtostderr",
            "-stderrthreshold=INFO",
            "--log_dir=/tmp",
            "-alsologtostderr=false",
            "--skip_headers",
        ]))
        .unwrap();
        let cli = Cli::try_parse_from(args).unwrap();
        let Some(Applet::Agent(agent)) = cli.applet else {
            panic!()
        };
        assert_eq!(agent.verbosity, 2);
        assert_eq!(
            agent.klog.given(),
            ["--stderrthreshold", "--log-dir", "--skip-headers"]
        );
    }

    #[test]
    fn go_booleans_parse() {
        for t in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_go_bool(t), Ok(true));
        }
        for f in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_go_bool(f), Ok(false));
        }
        assert!(parse_go_bool("yes").is_err());
        let cli = Cli::try_parse_from(["ipmasq", "validate", "--enable-ipv6=false"]).unwrap();
        let Some(Applet::Validate(v)) = cli.applet else {
            panic!()
        };
        assert_eq!(
            v.config.enable_ipv6,
            Some(false),
            "given: it wins over the file"
        );
        let cli = Cli::try_parse_from(["ipmasq", "validate"]).unwrap();
        let Some(Applet::Validate(v)) = cli.applet else {
            panic!()
        };
        assert_eq!(v.config.enable_ipv6, None, "not given: the file decides");
        let cli = Cli::try_parse_from(["ipmasq", "validate", "--enable-ipv6", "f.yaml"]).unwrap();
        let Some(Applet::Validate(v)) = cli.applet else {
            panic!()
        };
        assert_eq!(v.config.enable_ipv6, Some(true));
        assert_eq!(v.files, [PathBuf::from("f.yaml")]);
    }

    #[test]
    fn snat_log_sizes_take_binary_suffixes_and_refuse_zero_and_overflow() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("100M"), Ok(100 << 20));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size(" 2G "), Ok(2 << 30));
        for bad in ["0", "0M", "", "M", "10T", "1.5G", "-1", "17179869184G"] {
            assert!(parse_size(bad).is_err(), "{bad:?} accepted");
        }
    }
}
