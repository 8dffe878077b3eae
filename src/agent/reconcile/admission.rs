//! The admission stage of a pass: the bytes the source read are parsed and checked here
//! (within the per-file parse budget), and the config they make becomes the config in force
//! when it is valid and fits the agent's memory limit, or is refused (once logged and counted
//! per reason) while the last good config stays in force.

use super::node_facts::NodeFacts;
use super::source::SourceRead;
use crate::backend::Backend;
use crate::config::{self, Config, ConfigOrigin, Diagnostic};
use crate::plan::PlanOptions;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use tracing::{error, info, warn};

/// When and where the bytes of the config in force were read, their digest and (of a single
/// text) the text itself, shared with the source (API mode keeps it as last-known-good).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActiveRead {
    pub digest: Option<String>,
    pub at: std::time::SystemTime,
    /// How the source named them (the path, or the ConfigMap and its resource version).
    pub label: String,
    /// The text of one file or ConfigMap key (in API mode, the base ConfigMap's); None for
    /// the defaults and a merged directory.
    pub text: Option<std::sync::Arc<String>>,
    /// API mode, when node pools or EgressNATPolicies take part: every input.
    pub composed: Option<std::sync::Arc<config::composed::ComposedText>>,
}

/// The config the source holds, refused while the last good one stays in force: the mirror's
/// `ConfigRejected` and its Event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// The SHA-256 of the refused bytes (None: they could not be read, or a merged directory).
    pub digest: Option<String>,
    /// Why, one line per problem (`1:22: [code] …`), joined by `"; "`.
    pub diagnostic: String,
    /// Where the refused bytes came from (the path, or the ConfigMap and its resource version).
    pub source: String,
    /// The same problems, one each, starting with the file it is in (`PATH:1:22: [code] …`),
    /// for the state file: `show` quotes them on a host that has not the agent's view.
    pub located: Vec<String>,
}

/// What admission reports to the status stage.
#[derive(Clone, Debug, Default)]
pub struct AdmissionCounts {
    pub configs_accepted: u64,
    pub configs_rejected: u64,
    /// Whether the config in force is the one the source holds (false while a bad one is
    /// ignored).
    pub config_current: bool,
    pub non_masquerade_cidrs: usize,
}

/// What a config is judged with besides itself: how to parse and check it, the backend that
/// would write it (its memory model), the flags and the node facts it would be planned with.
pub struct AdmissionInputs<'a> {
    pub label: &'a str,
    pub options: &'a config::Options,
    pub backend: &'a dyn Backend,
    pub flags: &'a PlanOptions,
    pub node: &'a NodeFacts,
}

/// The last good config and what was said about the configs refused since.
#[derive(Default)]
pub struct Admission {
    /// The last valid config: enforced even while the source holds an invalid one.
    active: Option<Config>,
    /// Where the active config came from.
    origin: Option<ConfigOrigin>,
    /// The digest of the active config's bytes and when they were read.
    read: Option<ActiveRead>,
    /// Bumped whenever the config in force changes (the plan is made again).
    generation: u64,
    /// Fingerprint of the last config problem logged, so each is logged once per change.
    last_note: Option<u64>,
    /// Why the config the source holds was refused for memory, while it is: not ready.
    memory_refusal: Option<String>,
    /// The config the source holds, while it is refused.
    rejection: Option<Rejection>,
    pub counts: AdmissionCounts,
}

/// Most CIDRs of one list named in a log line; the rest are counted.
const LOGGED_CIDRS: usize = 20;

/// A list for a log line: the first [`LOGGED_CIDRS`] entries and how many more (a 25,000-CIDR
/// list is one short line, not 360 kB).
fn join(nets: &[ipnet::IpNet]) -> String {
    let mut text = nets
        .iter()
        .take(LOGGED_CIDRS)
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    if nets.len() > LOGGED_CIDRS {
        text.push_str(&format!(",... ({} in all)", nets.len()));
    }
    text
}

/// Each error of `checked`, one line each, starting with the file it is in (`path` when the
/// diagnostic names none: a single file or ConfigMap).
fn located(path: &str, checked: &config::Checked) -> Vec<String> {
    checked
        .errors()
        .map(|d| match (&d.file, d.location) {
            (Some(_), _) => d.one_line(),
            (None, Some(_)) => format!("{path}:{}", d.one_line()),
            (None, None) => format!("{path}: {}", d.one_line()),
        })
        .collect()
}

fn fingerprint(diagnostics: &[Diagnostic]) -> u64 {
    let mut hasher = DefaultHasher::new();
    for d in diagnostics {
        d.one_line().hash(&mut hasher);
    }
    hasher.finish()
}

/// How many rules (iptables) or set elements (nftables) fit the usable share of `limit`
/// with `backend`, in its words (`16500 rules`).
pub fn what_fits(backend: &dyn Backend, limit: u64) -> String {
    let model = backend.id().memory_model();
    model
        .unit
        .words(model.ceiling(limit / 100 * crate::backend::USABLE_PERCENT))
}

impl Admission {
    /// The config in force (None before a valid one was read).
    pub fn config(&self) -> Option<&Config> {
        self.active.as_ref()
    }

    pub fn origin(&self) -> Option<&ConfigOrigin> {
        self.origin.as_ref()
    }

    pub fn read(&self) -> Option<&ActiveRead> {
        self.read.as_ref()
    }

    /// Changes whenever the config in force does.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Why the config the source holds is refused for memory, while it is.
    pub fn memory_refusal(&self) -> Option<&String> {
        self.memory_refusal.as_ref()
    }

    /// The config the source holds, while it is refused (None once a valid one is read).
    pub fn rejection(&self) -> Option<&Rejection> {
        self.rejection.as_ref()
    }

    /// Parses and checks what the source read, and judges it; the config in force changes
    /// only to a valid one.
    pub fn admit(&mut self, read: SourceRead, inputs: &AdmissionInputs) {
        let path = inputs.label;
        let (loaded, text, composed) = match read {
            SourceRead::Nothing => {
                // The same bytes under a new name (API mode: the last-known-good found to be
                // the API's config): the config in force is now known by that name.
                if let Some(read) = self.read.as_mut().filter(|read| read.label != path) {
                    read.label = path.to_string();
                }
                return;
            }
            SourceRead::Read(text) => {
                if let Some(reason) = inputs_too_large_for_memory(&text, inputs) {
                    self.refuse_for_memory(reason, None, path);
                    return;
                }
                (
                    text.check(inputs.options),
                    match &text {
                        config::SourceText::File(text) => Some(text.clone()),
                        config::SourceText::Composed(composed) => composed.base.clone(),
                        config::SourceText::Missing | config::SourceText::Dir { .. } => None,
                    },
                    match text {
                        config::SourceText::Composed(composed) => Some(composed),
                        _ => None,
                    },
                )
            }
            SourceRead::Unreadable(message) => {
                self.rejection = Some(Rejection {
                    digest: None,
                    diagnostic: message.clone(),
                    source: path.to_string(),
                    located: vec![format!("{path}: {message}")],
                });
                let kept = WhatStays {
                    enforcing: "keeping the rules of the last good config",
                    before_any: "no rules are installed until it can be read",
                };
                self.refuse_for(&message, kept, |kept| {
                    error!(config = %path, error = %message, "cannot read config; {kept}");
                });
                return;
            }
        };
        let checked = loaded.checked;
        let refusal = checked
            .config()
            .and_then(|c| too_large_for_memory(c, inputs));
        if refusal.is_none() {
            self.memory_refusal = None;
        }
        if let Some(reason) = refusal {
            self.refuse_for_memory(reason, loaded.digest.clone(), path);
            return;
        }
        match checked.config().cloned() {
            None => {
                let note = fingerprint(checked.diagnostics());
                let problems: Vec<String> = checked.errors().map(Diagnostic::one_line).collect();
                self.rejection = Some(Rejection {
                    digest: loaded.digest.clone(),
                    diagnostic: problems.join("; "),
                    source: path.to_string(),
                    located: located(path, &checked),
                });
                self.refuse(note, |enforcing| {
                    let kept = if enforcing {
                        "keeping the last good config in force"
                    } else {
                        "no rules are installed until it is fixed"
                    };
                    error!(config = %path, errors = %problems.join("; "), "invalid config rejected; {kept}");
                });
            }
            Some(new) => {
                let read = ActiveRead {
                    digest: loaded.digest,
                    at: std::time::SystemTime::now(),
                    label: path.to_string(),
                    text,
                    composed,
                };
                self.accept(new, &checked, loaded.origin, read);
            }
        }
    }

    /// Takes a valid config into force; logs it when it changed (and its warnings when they
    /// did), and notes where and when its bytes were read.
    fn accept(
        &mut self,
        new: Config,
        checked: &config::Checked,
        origin: ConfigOrigin,
        read: ActiveRead,
    ) {
        let path = read.label.as_str();
        let note = fingerprint(checked.diagnostics());
        let changed = self.active.as_ref() != Some(&new);
        if changed || self.last_note != Some(note) {
            if changed {
                self.counts.configs_accepted += 1;
                let source = source_word(&origin, &read);
                info!(
                    config = %path,
                    source = %source,
                    nonMasqueradeCIDRs = %join(&new.non_masquerade_cidrs),
                    forceMasqueradeCIDRs = %join(&new.force_masquerade_cidrs),
                    masqueradeSourceCIDRs = %join(&new.masquerade_source_cidrs),
                    masqLinkLocal = new.masq_link_local,
                    masqLinkLocalIPv6 = new.masq_link_local_ipv6,
                    enableIPv6 = new.enable_ipv6,
                    resyncInterval = %new.resync_interval,
                    "config accepted"
                );
            }
            for warning in checked.warnings() {
                warn!(config = %path, "{}", warning.one_line());
            }
            self.last_note = Some(note);
        }
        self.counts.non_masquerade_cidrs = new.non_masquerade_cidrs.len();
        if changed {
            self.generation += 1;
        }
        self.active = Some(new);
        self.origin = Some(origin);
        self.read = Some(read);
        self.rejection = None;
        self.counts.config_current = true;
    }

    /// A config (or its inputs) that cannot fit the memory this agent has: refused, the
    /// reason said (the log, the state, `show`, not ready), the last good config kept.
    fn refuse_for_memory(&mut self, reason: String, digest: Option<String>, path: &str) {
        self.rejection = Some(Rejection {
            digest,
            diagnostic: reason.clone(),
            source: path.to_string(),
            located: vec![format!("{path}: {reason}")],
        });
        let kept = WhatStays {
            enforcing: "keeping the last good config in force",
            before_any: "no rules are installed until it fits",
        };
        self.refuse_for(&reason, kept, |kept| {
            error!(config = %path, reason = %reason, "config refused: it cannot fit the memory this agent has; {kept}");
        });
        self.memory_refusal = Some(reason);
    }

    /// [`Self::refuse`] for one reason: `log` gets the words for what stays in force.
    fn refuse_for(&mut self, reason: &str, kept: WhatStays, log: impl FnOnce(&str)) {
        let note = fingerprint(&[Diagnostic::error(config::Code::Io, reason.to_string())]);
        self.refuse(note, |enforcing| {
            log(if enforcing {
                kept.enforcing
            } else {
                kept.before_any
            })
        });
    }

    /// A config that cannot be taken (unreadable, invalid, too large): counted and logged
    /// once per distinct reason (`note`), by `log`, told whether a good config is still in
    /// force; the config in force stays.
    fn refuse(&mut self, note: u64, log: impl FnOnce(bool)) {
        if self.last_note != Some(note) {
            self.last_note = Some(note);
            self.counts.configs_rejected += 1;
            log(self.active.is_some());
        }
        self.counts.config_current = false;
    }
}

/// The words a refusal's log line gives for what stays in force.
#[derive(Clone, Copy, Debug)]
struct WhatStays {
    /// While a good config is enforced.
    enforcing: &'static str,
    /// Before there is one.
    before_any: &'static str,
}

/// Why the inputs the source read cannot even be held and checked within the agent's memory
/// limit, if they cannot: the API's composed inputs (the base ConfigMap, node pools and
/// EgressNATPolicies, each with no file's budget and together without a cap) judged by their
/// text before they are parsed ([`crate::agent::memory::input_too_large`]). A file or a
/// directory is parsed against its own budget and judged by its rules after.
fn inputs_too_large_for_memory(
    text: &config::SourceText,
    inputs: &AdmissionInputs,
) -> Option<String> {
    let config::SourceText::Composed(composed) = text else {
        return None;
    };
    let what = format!(
        "the API's inputs ({} node pools, {} EgressNATPolicies)",
        composed.pools.len(),
        composed.policies.len()
    );
    crate::agent::memory::input_too_large(&what, composed.text_bytes(), inputs.node.memory_limit)
}

/// Why `config` cannot be applied within the agent's memory limit, if it cannot: its
/// estimated peak (agent and tools, with this backend, from the rules and set elements its
/// plan renders) above the usable share of the limit.
fn too_large_for_memory(config: &Config, inputs: &AdmissionInputs) -> Option<String> {
    use crate::agent::memory;
    let limit = inputs.node.memory_limit?;
    let usable = limit / 100 * crate::backend::USABLE_PERCENT;
    let backend = inputs.backend;
    let rulesets = crate::plan::plan(config, inputs.flags, &inputs.node.egress);
    let estimate = crate::backend::Estimate::of(backend.id(), &rulesets);
    if estimate.peak <= usable {
        return None;
    }
    let nftables = crate::backend::BackendId::Nftables;
    let lighter = if backend.id() == nftables {
        String::new()
    } else {
        Some(crate::backend::Estimate::of(nftables, &rulesets))
            .filter(|e| e.peak <= usable)
            .map(|e| {
                format!(
                    ", or use --backend=nftables (it writes {}: about {})",
                    e.footprint,
                    crate::text::mib(e.peak)
                )
            })
            .unwrap_or_default()
    };
    Some(format!(
        "for this config ({} CIDRs listed) the {} backend writes {}: about {} at the peak, more than {}% of this agent's memory limit of {} (at most about {} fit); raise the container's memory limit to at least {}, shorten the lists{lighter}",
        config.non_masquerade_cidrs.len()
            + config.force_masquerade_cidrs.len()
            + config.masquerade_source_cidrs.len(),
        backend.name(),
        estimate.footprint,
        crate::text::mib(estimate.peak),
        crate::backend::USABLE_PERCENT,
        crate::text::mib(limit),
        what_fits(backend, limit),
        crate::text::mib(memory::suggested_limit(estimate.peak, limit)),
    ))
}
/// Where an accepted config came from, in the log's `source` word: `file`, `merged files`,
/// `defaults (no config file)` in file mode; in API mode `configmap`, with `+pool` and
/// `+policy` when node pools or EgressNATPolicies take part, `configmap (not found:
/// defaults)`, or `last-known-good`.
fn source_word(origin: &ConfigOrigin, read: &ActiveRead) -> String {
    let api = read.label.starts_with("configmap ");
    if read.label.starts_with(super::LAST_KNOWN_GOOD) {
        return super::LAST_KNOWN_GOOD.to_string();
    }
    match origin {
        ConfigOrigin::Defaults if api => "configmap (not found: defaults)".to_string(),
        ConfigOrigin::Defaults => "defaults (no config file)".to_string(),
        ConfigOrigin::File if api => "configmap".to_string(),
        ConfigOrigin::File => "file".to_string(),
        ConfigOrigin::Dir => "merged files".to_string(),
        ConfigOrigin::Composed => {
            let mut word = "configmap".to_string();
            if let Some(composed) = &read.composed {
                if !composed.pools.is_empty() {
                    word.push_str("+pool");
                }
                if !composed.policies.is_empty() {
                    word.push_str("+policy");
                }
            }
            word
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::composed::{ComposedText, PolicyText};
    use std::sync::Arc;

    fn composed(policies: usize, bytes_each: usize) -> SourceRead {
        let policies = (0..policies)
            .map(|n| PolicyText {
                name: format!("policy-{n}"),
                text: format!(
                    "{{\"apiVersion\":\"networking.gke.io/v1\",\"kind\":\"EgressNATPolicy\",\"metadata\":{{\"name\":\"policy-{n}\"}},\"spec\":{{\"action\":\"NoSNAT\",\"destinations\":[{{\"cidr\":\"198.51.100.0/24\"}}]}}}}{}",
                    " ".repeat(bytes_each)
                ),
            })
            .collect();
        let text = ComposedText::new(
            "kube-system",
            "ip-masq-agent",
            Some(Arc::new("nonMasqueradeCIDRs: [10.0.0.0/8]\n".into())),
            Vec::new(),
            policies,
        );
        SourceRead::Read(config::SourceText::Composed(Arc::new(text)))
    }

    /// EgressNATPolicies have no file's budget and no cap together: they are judged by their
    /// text before they are parsed, refused with the reason (not ready, counted), the last
    /// good config kept.
    #[test]
    fn policies_that_cannot_fit_the_memory_limit_are_refused_before_they_are_parsed() {
        let backend = crate::backend::fake::FakeBackend::default();
        let options = config::Options::default();
        let flags = PlanOptions::default();
        let mut node = NodeFacts {
            egress: Default::default(),
            memory_limit: Some(64 << 20),
        };
        let mut admission = Admission::default();
        fn inputs<'a>(
            node: &'a NodeFacts,
            options: &'a config::Options,
            backend: &'a dyn Backend,
            flags: &'a PlanOptions,
        ) -> AdmissionInputs<'a> {
            AdmissionInputs {
                label: "configmap kube-system/ip-masq-agent + egressnatpolicies",
                options,
                backend,
                flags,
                node,
            }
        }
        admission.admit(
            composed(2, 1_000),
            &inputs(&node, &options, &backend, &flags),
        );
        let kept = admission.config().cloned().expect("small policies fit");
        // 8 policies of 1 MiB: 80 MiB while read and checked, over 57.6 MiB usable.
        admission.admit(
            composed(8, 1 << 20),
            &inputs(&node, &options, &backend, &flags),
        );
        let reason = admission.memory_refusal().cloned().expect("refused");
        assert!(
            reason.starts_with("the API's inputs (0 node pools, 8 EgressNATPolicies): "),
            "{reason}"
        );
        assert!(reason.contains("memory limit of 64.0 MiB"), "{reason}");
        assert_eq!(admission.config(), Some(&kept), "the last good kept");
        assert_eq!(admission.counts.configs_rejected, 1);
        assert!(!admission.counts.config_current);
        let rejection = admission.rejection().expect("said in the state");
        assert_eq!(rejection.diagnostic, reason);
        // Without a limit the same inputs are parsed and judged by their rules.
        node.memory_limit = None;
        admission.admit(
            composed(8, 1 << 20),
            &inputs(&node, &options, &backend, &flags),
        );
        assert!(admission.memory_refusal().is_none());
        assert!(admission.counts.config_current);
    }
}
