//! Pure planning: a validated [`Config`] plus the agent's flags become a backend-neutral
//! [`Ruleset`] per IP family — an entry condition, an ordered list of destination decisions
//! and a masquerade request. Nothing here knows how a backend spells rules, and nothing
//! touches the system, so every flag combination is unit-tested without root. [`decide`] says
//! what a ruleset does with one packet: the one truth that tests, `show` and `explain` share.

pub(crate) mod decide;
pub mod egress;
#[cfg(test)]
mod hint_properties;
pub mod intervals;
pub mod live;
mod names;
mod ports;

pub use decide::{assumed_source, decide, decide_leaving, Reason};
pub use egress::ResolvedEgress;
pub use names::{
    jump_comment, ChainName, Names, DEFAULT_CHAIN, MASQ_COMMENT, NON_MASQ_COMMENT,
    POD_CONNECTIONS_COMMENT, POD_RATE_COMMENT, POD_SHARE_COMMENT, SNAT_COMMENT, SOURCE_COMMENT,
};
pub use ports::{PortShare, ToPorts};

use crate::config::egress::{EgressTarget, InterfacePattern};
use crate::config::{Config, LINK_LOCAL_V4, LINK_LOCAL_V6};
use ipnet::IpNet;
use std::fmt;

/// An IP family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub const ALL: [Family; 2] = [Family::V4, Family::V6];

    pub fn as_str(self) -> &'static str {
        match self {
            Family::V4 => "ipv4",
            Family::V6 => "ipv6",
        }
    }

    /// The link-local block of the family.
    pub fn link_local(self) -> IpNet {
        match self {
            Family::V4 => LINK_LOCAL_V4.parse().expect("constant"),
            Family::V6 => LINK_LOCAL_V6.parse().expect("constant"),
        }
    }

    /// Whether a network belongs to this family.
    pub fn holds(self, net: &IpNet) -> bool {
        self.holds_addr(net.addr())
    }

    /// Whether an address belongs to this family.
    pub fn holds_addr(self, addr: std::net::IpAddr) -> bool {
        match self {
            Family::V4 => addr.is_ipv4(),
            Family::V6 => addr.is_ipv6(),
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What happens to a packet's source address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// The packet keeps its (pod) source address.
    KeepSource,
    /// The packet is masqueraded to the node's address.
    Masquerade,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::KeepSource => "keep-source",
            Action::Masquerade => "masquerade",
        }
    }
}

/// Where a destination decision came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DecisionOrigin {
    /// The family's link-local block (kept unless `masqLinkLocal[IPv6]`).
    LinkLocal,
    /// Entry `index` (0-based) of the config's `nonMasqueradeCIDRs` (or of the default list).
    NonMasqueradeCidr { index: usize },
    /// Entry `index` (0-based) of the config's `forceMasqueradeCIDRs`.
    ForceMasqueradeCidr { index: usize },
}

/// One destination decision: traffic to `destination` gets `action`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub destination: IpNet,
    pub action: Action,
    pub origin: DecisionOrigin,
}

/// Which packets the ruleset looks at at all; the rest leave untouched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryScope {
    /// Packets to an address of this node are never masqueraded (upstream's `! LOCAL`).
    pub skip_local_destinations: bool,
    /// When not empty, only packets from these ranges are considered.
    pub source_ranges: Vec<IpNet>,
    /// When not empty, only packets leaving a matching interface are rewritten (the
    /// masquerade rules carry the match; a keep decision keeps whatever the interface).
    pub output_interfaces: Vec<InterfacePattern>,
}

impl Default for EntryScope {
    fn default() -> Self {
        EntryScope {
            skip_local_destinations: true,
            source_ranges: Vec::new(),
            output_interfaces: Vec::new(),
        }
    }
}

impl EntryScope {
    /// Whether a packet leaving `interface` may be rewritten.
    pub fn selects_interface(&self, interface: &str) -> bool {
        self.output_interfaces.is_empty()
            || self.output_interfaces.iter().any(|p| p.matches(interface))
    }
}

/// The source a rewritten packet gets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Egress {
    /// MASQUERADE: the outgoing interface's address, as upstream.
    #[default]
    Masquerade,
    /// SNAT to this address of the node (`outputAddress`).
    Snat(std::net::IpAddr),
    /// SNAT to the node's address the config names, not resolved here (no node addresses
    /// were read): what `validate` and `explain` describe, never what a backend writes.
    Unresolved(EgressTarget),
}

/// How a packet that no decision keeps is masqueraded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MasqueradeRequest {
    /// `--to-ports` ranges with their shares; empty means the kernel's choice of port.
    pub ports: Vec<PortShare>,
    /// `--random-fully`: fully randomised source ports.
    pub random_fully: bool,
    /// Which source address.
    pub egress: Egress,
}

/// The desired state of one family, in neutral terms. Cheap to clone (the decisions are
/// shared), and two clones of one plan compare equal without walking their decisions, so a
/// steady pass over 100,000 CIDRs costs no copy and no comparison of them.
#[derive(Clone, Debug, Eq)]
pub struct Ruleset {
    pub family: Family,
    pub names: Names,
    pub entry: EntryScope,
    /// Evaluated in order; the first decision whose destination holds the packet's wins.
    /// Upstream's order: link-local first, then the config's list as written (duplicates kept).
    /// With forced CIDRs, the longest prefix first (stable), so the first match is the
    /// longest matching prefix across both lists.
    pub decisions: std::sync::Arc<[Decision]>,
    /// What every packet no decision matched gets.
    pub masquerade: MasqueradeRequest,
    /// Each pod address's share of the masqueraded traffic: new connections over it are
    /// refused before they are translated (none: no rule at all).
    pub pod_share: crate::config::pod_share::PodShare,
}

impl PartialEq for Ruleset {
    fn eq(&self, other: &Self) -> bool {
        self.family == other.family
            && self.names == other.names
            && self.entry == other.entry
            && self.masquerade == other.masquerade
            && self.pod_share == other.pod_share
            && (std::sync::Arc::ptr_eq(&self.decisions, &other.decisions)
                || self.decisions == other.decisions)
    }
}

impl Ruleset {
    /// Destinations that keep the source address, in decision order.
    pub fn non_masquerade(&self) -> impl Iterator<Item = &IpNet> {
        self.decisions
            .iter()
            .filter(|d| d.action == Action::KeepSource)
            .map(|d| &d.destination)
    }
}

/// The agent flags that shape the rules. Only flags: what the plan knows of the node (the
/// output addresses resolved on it, a [`ResolvedEgress`]) is an input of its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanOptions {
    pub chain: ChainName,
    /// `--random-fully`, already reduced to what the backend supports.
    pub random_fully: bool,
    pub to_ports: ToPorts,
    pub enable_ipv6: bool,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            chain: ChainName::default(),
            random_fully: true,
            to_ports: ToPorts::default(),
            enable_ipv6: false,
        }
    }
}

impl PlanOptions {
    /// The names the rules are installed under.
    pub fn names(&self) -> Names {
        Names::new(self.chain.clone())
    }
}

/// The families the agent manages: IPv6 too when the flag or the config turns it on (an
/// explicit `--enable-ipv6=false` has already turned the config's value off).
pub fn families(options: &PlanOptions, config: &Config) -> Vec<Family> {
    if options.enable_ipv6 || config.enable_ipv6 {
        vec![Family::V4, Family::V6]
    } else {
        vec![Family::V4]
    }
}

/// Plans one family in upstream's order: link-local kept (unless masqueraded), then one
/// decision per CIDR of the family in config order (duplicates kept); the rest is masqueraded.
/// Forced CIDRs add masquerade decisions, and then every decision is ordered longest prefix
/// first; without them upstream's order stands, so upstream's rules are written byte for byte.
/// `masqueradeSourceCIDRs` of the family scope the entry (none of the family: unscoped).
/// `egress` is the node's fact: the output addresses resolved on it (none resolved: a
/// configured output address stays `Unresolved`, which no backend writes).
pub fn plan_family(
    config: &Config,
    options: &PlanOptions,
    egress: &ResolvedEgress,
    family: Family,
) -> Ruleset {
    let mut decisions = Vec::new();
    let masq_link_local = match family {
        Family::V4 => config.masq_link_local,
        Family::V6 => config.masq_link_local_ipv6,
    };
    if !masq_link_local {
        decisions.push(Decision {
            destination: family.link_local(),
            action: Action::KeepSource,
            origin: DecisionOrigin::LinkLocal,
        });
    }
    decisions.extend(
        config
            .non_masquerade_cidrs
            .iter()
            .enumerate()
            .filter(|(_, c)| family.holds(c))
            .map(|(index, c)| Decision {
                destination: *c,
                action: Action::KeepSource,
                origin: DecisionOrigin::NonMasqueradeCidr { index },
            }),
    );
    let before = decisions.len();
    decisions.extend(
        config
            .force_masquerade_cidrs
            .iter()
            .enumerate()
            .filter(|(_, c)| family.holds(c))
            .map(|(index, c)| Decision {
                destination: *c,
                action: Action::Masquerade,
                origin: DecisionOrigin::ForceMasqueradeCidr { index },
            }),
    );
    if decisions.len() > before {
        decisions.sort_by_key(|d| std::cmp::Reverse(d.destination.prefix_len()));
    }
    Ruleset {
        family,
        names: options.names(),
        entry: EntryScope {
            skip_local_destinations: true,
            source_ranges: config
                .masquerade_source_cidrs
                .iter()
                .filter(|c| family.holds(c))
                .copied()
                .collect(),
            output_interfaces: config.output_interfaces.clone(),
        },
        decisions: decisions.into(),
        masquerade: MasqueradeRequest {
            ports: options.to_ports.shares(),
            random_fully: options.random_fully,
            egress: egress_of(config, egress, family),
        },
        pod_share: config.pod_share,
    }
}

/// The source of the family's rewritten packets: SNAT to the resolved output address when the
/// config names one (and it is one the config admits); masquerade when it names none, or
/// when the node holds no address it names (never SNAT to an address the node lacks: the
/// replies would go elsewhere).
fn egress_of(config: &Config, egress: &ResolvedEgress, family: Family) -> Egress {
    let Some(target) = config.output_address_of(family == Family::V6) else {
        return Egress::Masquerade;
    };
    match egress.of(family) {
        Some(address) if target.admits(address) => Egress::Snat(address),
        _ if egress.falls_back(family) => Egress::Masquerade,
        _ => Egress::Unresolved(target),
    }
}

/// Plans every managed family: the config, the flags, and the node's resolved output
/// addresses (see [`plan_family`]).
pub fn plan(config: &Config, options: &PlanOptions, egress: &ResolvedEgress) -> Vec<Ruleset> {
    families(options, config)
        .into_iter()
        .map(|f| plan_family(config, options, egress, f))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Options;

    #[test]
    fn default_plan_is_upstreams_order() {
        let config = Config::defaults(&Options::default());
        let sets = plan(&config, &PlanOptions::default(), &ResolvedEgress::default());
        assert_eq!(sets.len(), 1);
        let dests: Vec<String> = sets[0].non_masquerade().map(ToString::to_string).collect();
        assert_eq!(
            dests,
            [
                "169.254.0.0/16",
                "10.0.0.0/8",
                "172.16.0.0/12",
                "192.168.0.0/16"
            ]
        );
        assert_eq!(sets[0].decisions[0].origin, DecisionOrigin::LinkLocal);
        assert_eq!(
            sets[0].decisions[3].origin,
            DecisionOrigin::NonMasqueradeCidr { index: 2 }
        );
        assert!(sets[0].entry.skip_local_destinations);
        assert!(sets[0].masquerade.random_fully);
        assert!(sets[0].masquerade.ports.is_empty());
    }

    #[test]
    fn families_split_the_list_and_link_local_flags_apply_per_family() {
        let mut config = Config::defaults(&Options::default());
        config.non_masquerade_cidrs = vec![
            "fd00::/8".parse().unwrap(),
            "10.0.0.0/8".parse().unwrap(),
            "10.0.0.0/8".parse().unwrap(),
        ];
        config.masq_link_local = true;
        let options = PlanOptions {
            enable_ipv6: true,
            ..PlanOptions::default()
        };
        let sets = plan(&config, &options, &ResolvedEgress::default());
        let v4: Vec<String> = sets[0].non_masquerade().map(ToString::to_string).collect();
        let v6: Vec<String> = sets[1].non_masquerade().map(ToString::to_string).collect();
        assert_eq!(v4, ["10.0.0.0/8", "10.0.0.0/8"]);
        assert_eq!(v6, ["fe80::/10", "fd00::/8"]);
        // Origins index the config's list, across families.
        assert_eq!(
            sets[1].decisions[1].origin,
            DecisionOrigin::NonMasqueradeCidr { index: 0 }
        );
        assert_eq!(
            sets[0].decisions[1].origin,
            DecisionOrigin::NonMasqueradeCidr { index: 2 }
        );
    }

    #[test]
    fn to_ports_become_shares() {
        let options = PlanOptions {
            to_ports: "1024-29999,32768-65535".parse().unwrap(),
            ..PlanOptions::default()
        };
        let set = plan_family(
            &Config::defaults(&Options::default()),
            &options,
            &ResolvedEgress::default(),
            Family::V4,
        );
        assert_eq!(set.masquerade.ports.len(), 2);
        assert_eq!(set.masquerade.ports[0].taken, 28976);
        assert_eq!(set.masquerade.ports[1].range.to_string(), "32768-65535");
    }
}
