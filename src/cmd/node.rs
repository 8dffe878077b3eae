//! One resolution of "this node" for `show`, `explain` and `cleanup`: the agent the state
//! directory names (running, stale or none), the backend to read, the rule flags, and the
//! config to judge against with where it came from — each resolved once, here, so the three
//! applets can never judge the same node differently.

use super::{choose_backend, Exit};
use crate::agent::state::{
    find_agent, read_applied, state_dir, AgentLookup, AgentState, ConfigRecord,
};
use crate::backend::select::{select, Choice, Selected};
use crate::backend::{Backend, BackendError, BackendId, Inspected, Inspection};
use crate::cli::{BackendFlags, RuleFlags};
use crate::config::{self, Config, ConfigSource};
use crate::output::{render_diagnostic, Styler};
use crate::plan::Family;
use std::path::{Path, PathBuf};

/// What an applet asks about the node.
pub struct Query<'a> {
    pub applet: &'static str,
    pub state_dir: Option<&'a Path>,
    pub backend: &'a BackendFlags,
    pub rules: &'a RuleFlags,
    /// `--config` / `--config-dir`, given by hand: it wins over the agent's.
    pub config: Option<ConfigSource>,
    /// What to judge against when no config is given and no agent runs (`explain`: the
    /// default path, as an agent started here would read it); None: no verdict (`show`).
    pub fallback: Option<ConfigSource>,
}

/// The node as resolved once.
pub struct ResolvedNode {
    pub agent: AgentLookup,
    /// The flags the rules are judged with: the running agent's, unless a config was given.
    pub flags: RuleFlags,
    pub selected: Selected,
    pub state_dir: PathBuf,
}

/// Where the config a verdict is judged against came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JudgedAgainst {
    /// `--config` / `--config-dir`.
    Given,
    /// The checked config the running agent recorded: exactly what it enforces.
    AgentRecord(ConfigRecord),
    /// The running agent's config path, read here (it recorded none).
    AgentPath,
    /// No agent: the path an agent started here would read.
    Fallback,
}

/// A config to judge against, and its story.
pub struct Judgement {
    pub config: Config,
    /// The file or directory, as the one who read it names it.
    pub source: String,
    pub against: JudgedAgainst,
    /// Said once, before the verdict: where the config came from when that is not obvious.
    pub note: Option<String>,
}

impl Judgement {
    /// The source for a verdict line: `/etc/config/ip-masq-agent`, or with the agent's
    /// reading `/etc/config/ip-masq-agent (as the agent read it at …)`.
    pub fn described(&self) -> String {
        match &self.against {
            JudgedAgainst::AgentRecord(record) => {
                let digest = record
                    .digest
                    .as_deref()
                    .map(|d| format!(", sha256 {}", &d[..d.len().min(12)]))
                    .unwrap_or_default();
                format!(
                    "{} (as the agent read it at {}{digest})",
                    self.source, record.read_at
                )
            }
            _ => self.source.clone(),
        }
    }
}

/// The flags a running agent applies, as an applet would take them on its command line.
fn agent_flags(agent: &AgentState, given: &RuleFlags) -> Option<RuleFlags> {
    let mut flags = given.clone();
    flags.masq_chain = agent.rules.masq_chain.parse().ok()?;
    flags.config_flags.enable_ipv6 = Some(agent.rules.enable_ipv6);
    flags.config_flags.nomasq_all_reserved_ranges = agent.rules.nomasq_all_reserved_ranges;
    flags.random_fully = agent.rules.random_fully;
    flags.to_ports = agent.rules.to_ports.parse().ok()?;
    Some(flags)
}

/// Whether the running agent's backend answers the flags: when neither `--backend` nor
/// `--iptables-mode` was given, or `--backend` alone admits the agent's backend and leaves the variant
/// open (`--backend=iptables` on a node whose agent runs iptables-legacy reads legacy). A
/// flag given otherwise wins: `show --backend=iptables` reads iptables whatever the agent runs.
fn follows_agent(flags: &BackendFlags, agent: &AgentState) -> bool {
    if !flags.given.any() {
        return true;
    }
    !flags.given.iptables_mode && flags.choice().admits(agent.backend)
}

/// The backend to read: the running agent's when the flags leave it open (see
/// [`follows_agent`]), else the one the flags pick.
fn backend_for(flags: &BackendFlags, agent: Option<&AgentState>) -> Selected {
    let agent_choice = agent
        .filter(|a| follows_agent(flags, a))
        .map(|a| Choice::Backend(a.backend));
    match agent_choice {
        Some(choice) => {
            let mut selected = select(choice);
            selected.reason = "the running agent's backend".into();
            selected
        }
        None => choose_backend(flags),
    }
}

/// Where a running agent reads its config (in its own mount namespace).
fn agent_config_source(agent: &AgentState) -> ConfigSource {
    match &agent.config_dir {
        Some(dir) => ConfigSource::Dir(dir.into()),
        None => ConfigSource::File(agent.config.clone().into()),
    }
}

impl ResolvedNode {
    /// Resolves the node for `query`: one read of the state directory.
    pub fn resolve(query: &Query<'_>) -> ResolvedNode {
        let state_dir = state_dir(query.state_dir);
        let agent = find_agent(&state_dir);
        let judged_by_agent = agent.running().filter(|_| query.config.is_none());
        let flags = judged_by_agent
            .and_then(|a| agent_flags(a, query.rules))
            .unwrap_or_else(|| query.rules.clone());
        let selected = backend_for(query.backend, agent.running());
        ResolvedNode {
            agent,
            flags,
            selected,
            state_dir,
        }
    }

    pub fn backend(&self) -> &dyn Backend {
        self.selected.backend.as_ref()
    }

    /// Reads one family of the backend in use; None when its tools are not installed (IPv6).
    pub fn inspect(&self, family: Family) -> Result<Option<Inspected>, BackendError> {
        inspect(self.backend(), family, &self.flags)
    }

    /// Our rules in every other backend, backend by backend, in `families` order: stale
    /// copies (two agents, a changed iptables mode, a switch of `--backend`). Each copy's nat
    /// hook runs as well as ours, so it acts on traffic until it is removed.
    pub fn stale_copies(&self, families: &[Family]) -> Vec<StaleCopy> {
        let in_use = self.backend().id();
        let names = crate::plan::Names::new(self.flags.masq_chain.clone());
        let mut found = Vec::new();
        for other in crate::backend::select::every_backend() {
            if other.id() == in_use {
                continue;
            }
            for &family in families {
                if !other.family_available(family) {
                    continue;
                }
                if let Ok(live) = other.inspect(family, &names) {
                    if live.inspection.holds_anything() {
                        found.push(StaleCopy {
                            backend: other.id(),
                            family,
                            inspection: live.inspection,
                        });
                    }
                }
            }
        }
        found
    }

    /// The config to judge against, once: the given one, else the running agent's recorded
    /// config (its path read here only when it recorded none, and said when it is not here),
    /// else the fallback. None: nothing to judge against. The error is the exit code after
    /// the reason was printed.
    pub fn judgement(&self, query: &Query<'_>) -> Result<Option<Judgement>, Exit> {
        let options = self.flags.config_flags.options();
        let applet = query.applet;
        if let Some(given) = &query.config {
            let config = load_config(given, &options, true, applet)?;
            return Ok(Some(Judgement {
                config,
                source: given.to_string(),
                against: JudgedAgainst::Given,
                note: None,
            }));
        }
        if let Some(agent) = self.agent.running() {
            return self.agent_judgement(agent, &options, applet).map(Some);
        }
        let Some(fallback) = &query.fallback else {
            return Ok(None);
        };
        let config = load_config(fallback, &options, false, applet)?;
        let stale = match &self.agent {
            AgentLookup::Stale(state) => format!(
                "no agent running (stale state of an agent that died: pid {}, {}); ",
                state.pid, state.backend
            ),
            _ => "no agent running; ".to_string(),
        };
        let note = if fallback.path().exists() {
            format!("{stale}judging against {fallback}, as an agent started here would read it")
        } else {
            format!("{stale}no file at {fallback}: judging against upstream's defaults, as an agent started here would")
        };
        Ok(Some(Judgement {
            config,
            source: fallback.to_string(),
            against: JudgedAgainst::Fallback,
            note: Some(note),
        }))
    }

    fn agent_judgement(
        &self,
        agent: &AgentState,
        options: &config::Options,
        applet: &str,
    ) -> Result<Judgement, Exit> {
        let source = agent_config_source(agent);
        let unreadable_record = match &agent.config_read {
            Some(record) => match read_applied(&self.state_dir, record)
                .and_then(|applied| applied.restore(options))
            {
                Ok(config) => {
                    return Ok(Judgement {
                        config,
                        source: record.path.clone(),
                        against: JudgedAgainst::AgentRecord(record.clone()),
                        note: None,
                    })
                }
                Err(reason) => Some(reason),
            },
            None => None,
        };
        let why_not_record = unreadable_record
            .map(|r| format!("its recorded config cannot be read ({r})"))
            .unwrap_or_else(|| {
                "it recorded no config (an older agent, or none accepted yet)".into()
            });
        let here = source.path().exists();
        if !here && agent.config_source != "defaults" {
            eprintln!(
                "ipmasq {applet}: the running agent (pid {}) reads {source} where it runs (another mount namespace, e.g. a pod), and {why_not_record}; {} does not exist here. Judge against a copy with --config FILE (e.g. `kubectl -n kube-system get configmap ip-masq-agent -o jsonpath='{{.data.config}}' > FILE`)",
                agent.pid,
                source.path().display()
            );
            return Err(Exit::Usage);
        }
        let config = load_config(&source, options, false, applet)?;
        Ok(Judgement {
            config,
            source: source.to_string(),
            against: JudgedAgainst::AgentPath,
            note: Some(format!(
                "the running agent's config, read here from {source}: {why_not_record}"
            )),
        })
    }
}

/// Our rules as another backend than the one in use holds them (see
/// [`ResolvedNode::stale_copies`]).
pub struct StaleCopy {
    pub backend: BackendId,
    pub family: Family,
    pub inspection: Inspection,
}

impl StaleCopy {
    /// The command that removes this backend's copy and nothing else (both families).
    pub fn cleanup_command(backend: BackendId) -> String {
        format!("ipmasq cleanup --all-variants=false {}", backend.flag())
    }
}

/// Reads one family; IPv6 counts as absent when its tools are not installed (a missing IPv4
/// tool is an error worth its own exit status).
pub fn inspect(
    backend: &dyn Backend,
    family: Family,
    flags: &RuleFlags,
) -> Result<Option<Inspected>, BackendError> {
    if family == Family::V6 && !backend.family_available(family) {
        return Ok(None);
    }
    let names = crate::plan::Names::new(flags.masq_chain.clone());
    backend.inspect(family, &names).map(Some)
}

/// Loads a config as the agent would; prints its problems (as `applet`) and returns the exit
/// code when it is invalid. `must_exist`: a path given by hand must name a file (the agent
/// would fall back to defaults, which is rarely what a typo meant).
pub fn load_config(
    source: &ConfigSource,
    options: &config::Options,
    must_exist: bool,
    applet: &str,
) -> Result<Config, Exit> {
    let path = source.path();
    if must_exist && std::fs::symlink_metadata(path).is_err() {
        eprintln!(
            "ipmasq {applet}: {}: no such file or directory (the agent would use the defaults; to judge against them, omit the flag while no agent runs)",
            path.display()
        );
        return Err(Exit::Usage);
    }
    let loaded = config::load_source(source, options).map_err(|err| {
        eprintln!("ipmasq {applet}: {err}");
        Exit::Usage
    })?;
    if let Some(config) = loaded.checked.config() {
        return Ok(config.clone());
    }
    let text = match source {
        ConfigSource::File(p) => std::fs::read_to_string(p).ok(),
        ConfigSource::Dir(_) => None,
    };
    let name = path.display().to_string();
    for d in loaded.checked.errors() {
        eprint!(
            "{}",
            render_diagnostic(&Styler::plain(), &name, text.as_deref(), d)
        );
    }
    eprintln!("ipmasq {applet}: {source} is invalid (the agent would keep its last good config)");
    Err(Exit::Usage)
}

#[cfg(test)]
mod tests {
    use crate::backend::BackendId;

    fn show_flags(argv: &[&str]) -> crate::cli::BackendFlags {
        let argv = [&["ipmasq", "show"][..], argv].concat();
        let matches = crate::cli::command().try_get_matches_from(argv).unwrap();
        match crate::cli::from_matches(&matches).unwrap().applet {
            Some(crate::cli::Applet::Show(args)) => args.backend,
            other => panic!("{other:?}"),
        }
    }

    /// The running agent's backend is read only when no flag chooses another: a clap
    /// default (`--backend=iptables`, `--iptables-mode=auto`) is not a flag given.
    #[test]
    fn a_backend_flag_given_wins_over_the_running_agents() {
        let agent = |backend| {
            let mut state: crate::agent::state::AgentState = serde_json::from_str(
                r#"{"schemaVersion":1,"pid":1,"version":"0","backend":"nftables","backendChoice":"x","config":"c","configSource":"file","rules":{"masqChain":"IP-MASQ-AGENT","enableIPv6":false,"nomasqAllReservedRanges":false,"randomFully":true,"toPorts":""},"instance":"i"}"#,
            )
            .unwrap();
            state.backend = backend;
            state
        };
        let follows =
            |argv: &[&str], backend| super::follows_agent(&show_flags(argv), &agent(backend));
        assert!(follows(&[], BackendId::Nftables));
        assert!(follows(&[], BackendId::IptablesLegacy));
        assert!(!follows(&["--backend=iptables"], BackendId::Nftables));
        assert!(!follows(&["--backend", "iptables"], BackendId::Nftables));
        assert!(!follows(&["--iptables-mode=nft"], BackendId::Nftables));
        assert!(!follows(&["--iptables-mode=auto"], BackendId::Nftables));
        assert!(!follows(&["--backend=nftables"], BackendId::IptablesNft));
        assert!(!follows(
            &["--iptables-mode=nft"],
            BackendId::IptablesLegacy
        ));
        // The agent's kind named, the variant left open: the agent's variant.
        assert!(follows(&["--backend=iptables"], BackendId::IptablesLegacy));
        assert!(follows(&["--backend=nftables"], BackendId::Nftables));
    }

    #[test]
    fn every_suggested_flag_parses_and_chooses_that_backend() {
        use clap::Parser;
        for id in BackendId::ALL {
            let cli = crate::cli::Cli::try_parse_from(["ipmasq", "cleanup", id.flag()])
                .unwrap_or_else(|e| panic!("{}: {e}", id.flag()));
            let Some(crate::cli::Applet::Cleanup(args)) = cli.applet else {
                panic!("cleanup")
            };
            assert_eq!(
                args.backend.choice(),
                crate::backend::select::Choice::Backend(id),
                "{id}"
            );
        }
    }
}
