//! The rules as the kernel holds them, in the words every backend reads them into: typed
//! `LiveRule`s of our chain, the entry jump's `HookStatus`, what runs `Before` it, as one
//! `Inspection`; and the verdict those live rules give a packet (`Inspection::evaluate`), which
//! `decide`, `explain` and the conntrack follow judge against. Pure values: the backends fill
//! them in, nothing here reads the kernel.

use super::Action;
use ipnet::IpNet;

/// Packet and byte counters of a rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub packets: u64,
    pub bytes: u64,
}

/// The addresses a rule matches: a set of prefixes, or everything outside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddressMatch {
    pub negated: bool,
    pub nets: Vec<IpNet>,
}

impl AddressMatch {
    pub fn holds(&self, addr: std::net::IpAddr) -> bool {
        self.nets.iter().any(|n| n.contains(&addr)) != self.negated
    }
}

impl std::fmt::Display for AddressMatch {
    /// `10.0.0.0/8`, `!10.0.0.0/8,192.168.0.0/16`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.negated {
            f.write_str("!")?;
        }
        let nets: Vec<String> = self.nets.iter().map(ToString::to_string).collect();
        f.write_str(&nets.join(","))
    }
}

/// What a live rule matches, typed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Matches {
    pub source: Option<AddressMatch>,
    pub destination: Option<AddressMatch>,
    /// Empty: every protocol.
    pub protocols: Vec<String>,
    /// Only packets leaving a matching interface (`-o eth+`, `oifname "eth*"`).
    pub output_interface: Option<crate::config::egress::InterfacePattern>,
    /// Matches no tool here can judge (a foreign or hand-edited rule), as the backend prints
    /// them: a walk takes such a rule as not matching and names it.
    pub unjudged: Vec<String>,
}

/// A share of new flows, exact: `taken` of every `of` (iptables' `--probability` is a decimal
/// with 11 digits, nftables' `numgen random mod OF < TAKEN` a fraction).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Weight {
    pub taken: u64,
    pub of: u64,
}

impl Weight {
    pub fn share(self) -> f64 {
        self.taken as f64 / self.of.max(1) as f64
    }
}

/// What a live rule does with a packet it matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuleVerdict {
    /// The source address is kept (iptables RETURN, nftables return).
    Keep,
    /// The source is rewritten: to the outgoing interface's address (MASQUERADE), or to
    /// `snat_to` (our SNAT to the output address).
    Masquerade {
        /// SNAT's address; None for MASQUERADE.
        snat_to: Option<std::net::IpAddr>,
        /// `--to-ports` / `to :A-B`.
        ports: Option<(u16, u16)>,
        /// The share of flows this rule takes (a port-range split), when not all.
        weight: Option<Weight>,
        fully_random: bool,
    },
    /// Anything else, as the backend prints it (`ACCEPT`, `snat to 1.2.3.4`, a jump).
    Foreign(String),
}

/// One rule of what we own, as it is live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveRule {
    /// 1-based position.
    pub number: usize,
    pub matches: Matches,
    pub verdict: RuleVerdict,
    pub comment: Option<String>,
    pub counters: Option<Counters>,
    /// The rule in the backend's own text.
    pub text: String,
}

/// One way traffic reaches our rules: an iptables jump from POSTROUTING, or our nftables
/// chain's own hook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryJump {
    /// 1-based position in the hook's chain; None for a base chain's hook itself.
    pub position: Option<usize>,
    /// The jump or hook in the backend's own text.
    pub text: String,
    pub counters: Option<Counters>,
    /// Local destinations leave before our rules (`-m addrtype ! --dst-type LOCAL`, or
    /// nftables' first rule `fib daddr type local return`).
    pub skips_local: bool,
}

/// How traffic reaches our rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case", rename_all_fields = "camelCase")]
pub enum HookStatus {
    /// Nothing sends traffic to our rules.
    NotHooked,
    /// Hooked once; local destinations skip our rules or do not.
    Hooked { skips_local: bool },
    /// Hooked more than once (duplicate jumps): each packet walks our rules again.
    HookedMoreThanOnce { copies: usize, skips_local: bool },
}

/// Rules a packet meets at the nat postrouting hook before ours: iptables' POSTROUTING rules
/// above our jump (kube-proxy's `KUBE-POSTROUTING` jump), or another table's nat postrouting
/// base chain at a priority that runs first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Before {
    /// Where, in the backend's words: `POSTROUTING`, `table ip nat chain POSTROUTING`.
    pub place: String,
    /// The chain's priority, when it is a base chain of its own.
    pub priority: Option<i64>,
    pub rules: Vec<LiveRule>,
    /// A keep verdict ends the walk before our rules (a RETURN in POSTROUTING itself); in
    /// another base chain it only ends that chain.
    pub keep_ends_walk: bool,
}

/// Which part of a pod's share refused a new connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ShareLimit {
    /// `podNewConnectionRate`.
    Rate,
    /// `podConnectionLimit`.
    Connections,
}

impl ShareLimit {
    pub const ALL: [ShareLimit; 2] = [ShareLimit::Rate, ShareLimit::Connections];

    /// The comment of the rule that refuses for this limit, on every backend: how the live
    /// rules' counters are told apart.
    pub fn rule_comment(self) -> &'static str {
        match self {
            ShareLimit::Rate => super::POD_RATE_COMMENT,
            ShareLimit::Connections => super::POD_CONNECTIONS_COMMENT,
        }
    }

    /// The metric's `limit` label and `show`'s word.
    pub fn as_str(self) -> &'static str {
        match self {
            ShareLimit::Rate => "rate",
            ShareLimit::Connections => "connections",
        }
    }

    /// The prefix of the NFLOG copy each backend's refusing rule sends to
    /// [`SHARE_LOG_GROUP`]: how the SNAT log tells which limit refused a pod. No blank and
    /// no quote in it, so iptables-save prints it back as written.
    pub fn log_prefix(self) -> &'static str {
        match self {
            ShareLimit::Rate => "ipmasq-share-rate",
            ShareLimit::Connections => "ipmasq-share-connections",
        }
    }

    /// The limit whose refusals carry `prefix` ([`ShareLimit::log_prefix`]).
    pub fn of_log_prefix(prefix: &str) -> Option<ShareLimit> {
        ShareLimit::ALL
            .into_iter()
            .find(|limit| limit.log_prefix() == prefix)
    }
}

/// The NFLOG group (`nfnetlink_log`) each refusal of the pod share is copied to, on every
/// backend; the agent with `--snat-log` binds it and writes who was refused. A group has one
/// listener per network namespace: another program holding it costs the log its refusals,
/// never the refusal itself. A packet logged to a group nobody binds is not copied.
pub const SHARE_LOG_GROUP: u16 = 7373;
/// How many bytes of a refused packet the copy carries: the IP header and the ports.
pub const SHARE_LOG_SNAPLEN: u32 = 80;

/// New connections one part of the pod share refused, as the rule's counter says (since the
/// rule was written: a config change that rewrites it starts again from 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ShareRefusals {
    pub limit: ShareLimit,
    pub refused: u64,
}

impl ShareRefusals {
    /// Adds one rule's refusals to `tally` under its limit: a limit may refuse by two rules
    /// (the count, and the pods it remembers over it) and is one figure.
    pub fn tally(tally: &mut Vec<ShareRefusals>, limit: ShareLimit, refused: u64) {
        match tally.iter_mut().find(|r| r.limit == limit) {
            Some(sum) => sum.refused += refused,
            None => tally.push(ShareRefusals { limit, refused }),
        }
    }
}

/// The pod share's rules as the kernel holds them.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct LiveShare {
    /// Every part of ours is there (chains, and the hook's jump).
    pub installed: bool,
    pub refusals: Vec<ShareRefusals>,
}

/// What one family holds of ours.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Inspection {
    /// What runs before our rules at the same hook.
    pub before: Vec<Before>,
    /// The pod share's rules, when there are any of ours.
    pub pod_share: Option<LiveShare>,
    pub installed: bool,
    pub rules: Vec<LiveRule>,
    pub entry_jumps: Vec<EntryJump>,
    /// How many rules the hook's chain holds in all (iptables' POSTROUTING).
    pub hook_rules: usize,
}

/// What the live rules do with one packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveVerdict {
    pub action: Action,
    /// Index into `Inspection::rules` of the rule that decided; None when the packet never
    /// entered (nothing installed, not hooked, a local destination skipped) or fell off the end.
    pub rule: Option<usize>,
    pub reason: LiveReason,
    /// Rules with matches this walk cannot judge (foreign options), taken as not matching.
    pub unjudged: Vec<usize>,
    /// The rule before ours that decided.
    pub decided_before: Option<BeforeRule>,
    /// Rules before ours this walk cannot judge: they may decide first.
    pub may_decide_first: Vec<BeforeRule>,
}

/// A rule that runs before ours: `(stage, rule)` indices into [`Inspection::before`].
pub type BeforeRule = (usize, usize);

/// What a rule before ours does with a packet it matches.
enum BeforeEffect {
    /// It rewrites the source (SNAT, MASQUERADE): the NAT is decided there.
    Rewrites,
    /// It accepts or returns: the packet leaves that chain.
    Keeps,
    /// Anything else (a jump to another chain, a mark, a drop): not judged here.
    Unknown,
}

fn before_effect(verdict: &RuleVerdict) -> BeforeEffect {
    match verdict {
        RuleVerdict::Masquerade { .. } => BeforeEffect::Rewrites,
        RuleVerdict::Keep => BeforeEffect::Keeps,
        RuleVerdict::Foreign(text) => match text.split_whitespace().next().unwrap_or_default() {
            "SNAT" | "snat" | "MASQUERADE" | "masquerade" => BeforeEffect::Rewrites,
            "ACCEPT" | "accept" | "RETURN" | "return" => BeforeEffect::Keeps,
            _ => BeforeEffect::Unknown,
        },
    }
}

/// Why the live rules gave their verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LiveReason {
    NotInstalled,
    NoEntryJump,
    /// The destination is an address of this node, and local destinations skip our rules.
    LocalDestination,
    /// A rule that runs before ours decided (another table's snat, a RETURN above our jump).
    DecidedBefore,
    RuleMatched,
    FellThrough,
}

impl Inspection {
    /// How traffic reaches our rules.
    pub fn entry(&self) -> HookStatus {
        let skips_local =
            !self.entry_jumps.is_empty() && self.entry_jumps.iter().all(|j| j.skips_local);
        match self.entry_jumps.len() {
            0 => HookStatus::NotHooked,
            1 => HookStatus::Hooked { skips_local },
            copies => HookStatus::HookedMoreThanOnce {
                copies,
                skips_local,
            },
        }
    }

    /// Walks the live rules as the kernel does for a packet from `src` to `dst` (`local`: an
    /// address of this node): first match wins, a keep verdict keeps the source, a masquerade
    /// rewrites it; a port-range rule counts as masquerading whatever its protocol or weight
    /// (every such rule masquerades).
    pub fn evaluate(
        &self,
        src: std::net::IpAddr,
        dst: std::net::IpAddr,
        local: bool,
    ) -> LiveVerdict {
        self.evaluate_leaving(src, dst, local, None)
    }

    /// [`Inspection::evaluate`] for a packet leaving `interface`; without one, a rule that
    /// matches on the outgoing interface cannot be judged.
    pub fn evaluate_leaving(
        &self,
        src: std::net::IpAddr,
        dst: std::net::IpAddr,
        local: bool,
        interface: Option<&str>,
    ) -> LiveVerdict {
        let (decided_before, may_decide_first) = self.walk_before(src, dst);
        if let Some((stage, rule)) = decided_before {
            let rewrites = matches!(
                before_effect(&self.before[stage].rules[rule].verdict),
                BeforeEffect::Rewrites
            );
            return LiveVerdict {
                action: if rewrites {
                    Action::Masquerade
                } else {
                    Action::KeepSource
                },
                rule: None,
                reason: LiveReason::DecidedBefore,
                unjudged: Vec::new(),
                decided_before,
                may_decide_first,
            };
        }
        let outcome = |action, rule, reason, unjudged| LiveVerdict {
            action,
            rule,
            reason,
            unjudged,
            decided_before: None,
            may_decide_first: may_decide_first.clone(),
        };
        let keep = |reason| outcome(Action::KeepSource, None, reason, Vec::new());
        if !self.installed {
            return keep(LiveReason::NotInstalled);
        }
        match self.entry() {
            HookStatus::NotHooked => return keep(LiveReason::NoEntryJump),
            HookStatus::Hooked { skips_local: true }
            | HookStatus::HookedMoreThanOnce {
                skips_local: true, ..
            } if local => return keep(LiveReason::LocalDestination),
            _ => {}
        }
        let mut unjudged = Vec::new();
        for (index, rule) in self.rules.iter().enumerate() {
            let action = match rule.verdict {
                RuleVerdict::Keep => Action::KeepSource,
                RuleVerdict::Masquerade { .. } => Action::Masquerade,
                RuleVerdict::Foreign(_) => {
                    unjudged.push(index);
                    continue;
                }
            };
            let m = &rule.matches;
            if !m.unjudged.is_empty() {
                unjudged.push(index);
                continue;
            }
            let leaves = match (&m.output_interface, interface) {
                (None, _) => true,
                (Some(pattern), Some(name)) => pattern.matches(name),
                (Some(_), None) => {
                    unjudged.push(index);
                    continue;
                }
            };
            let holds =
                |side: &Option<AddressMatch>, addr| side.as_ref().is_none_or(|s| s.holds(addr));
            if leaves && holds(&m.destination, dst) && holds(&m.source, src) {
                return outcome(action, Some(index), LiveReason::RuleMatched, unjudged);
            }
        }
        outcome(Action::KeepSource, None, LiveReason::FellThrough, unjudged)
    }

    /// Walks what runs before our rules: the first rule there that surely decides, and the
    /// rules before it that may (their matches or verdicts cannot be judged here).
    fn walk_before(
        &self,
        src: std::net::IpAddr,
        dst: std::net::IpAddr,
    ) -> (Option<BeforeRule>, Vec<BeforeRule>) {
        let mut may = Vec::new();
        for (s, stage) in self.before.iter().enumerate() {
            for (r, rule) in stage.rules.iter().enumerate() {
                let m = &rule.matches;
                let effect = before_effect(&rule.verdict);
                if !m.unjudged.is_empty() || matches!(effect, BeforeEffect::Unknown) {
                    may.push((s, r));
                    continue;
                }
                let holds =
                    |side: &Option<AddressMatch>, addr| side.as_ref().is_none_or(|a| a.holds(addr));
                if !(holds(&m.destination, dst) && holds(&m.source, src)) {
                    continue;
                }
                match effect {
                    BeforeEffect::Keeps if !stage.keep_ends_walk => break,
                    _ => return (Some((s, r)), may),
                }
            }
        }
        (None, may)
    }

    /// Rules before ours that rewrite the source of traffic to `dst` from the sources they
    /// name, `src` not among them, up to where the walk for `src` is decided: what an answer
    /// for an assumed source must still name, as they decide first for other sources.
    pub fn rewrites_for_other_sources(
        &self,
        src: std::net::IpAddr,
        dst: std::net::IpAddr,
    ) -> Vec<BeforeRule> {
        let (decided, _) = self.walk_before(src, dst);
        let mut found = Vec::new();
        for (s, stage) in self.before.iter().enumerate() {
            for (r, rule) in stage.rules.iter().enumerate() {
                if decided == Some((s, r)) {
                    return found;
                }
                let m = &rule.matches;
                let other_sources = m.source.as_ref().is_some_and(|a| !a.holds(src));
                let to_dst = m.destination.as_ref().is_none_or(|a| a.holds(dst));
                if m.unjudged.is_empty()
                    && other_sources
                    && to_dst
                    && matches!(before_effect(&rule.verdict), BeforeEffect::Rewrites)
                {
                    found.push((s, r));
                }
            }
        }
        found
    }

    /// Whether anything of ours is there.
    pub fn holds_anything(&self) -> bool {
        self.installed || !self.entry_jumps.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::ShareLimit;

    #[test]
    fn each_limit_is_read_back_from_its_log_prefix_and_nothing_else_is() {
        for limit in [ShareLimit::Rate, ShareLimit::Connections] {
            assert_eq!(ShareLimit::of_log_prefix(limit.log_prefix()), Some(limit));
            assert!(!limit.log_prefix().contains([' ', '"', '\'']));
        }
        assert_eq!(ShareLimit::of_log_prefix("ipmasq-share"), None);
        assert_eq!(ShareLimit::of_log_prefix(""), None);
    }
}
