//! What our nftables table should hold for a [`Ruleset`], as a model that both the script we
//! apply and the comparison with the live table are made from. One table per family
//! (`ip ipmasq`, `ip6 ipmasq`) with one interval set of the CIDRs that keep their source and
//! one nat chain hooked at postrouting.

use crate::backend::BackendError;
use crate::plan::{Action, ChainName, Family, Ruleset};
use ipnet::IpNet;
use std::fmt::Write as _;

/// Our table's name, in both families.
pub(crate) const TABLE: &str = "ipmasq";
/// The base chain.
pub(super) const CHAIN: &str = "postrouting";
/// The interval set of non-masquerade CIDRs.
pub(super) const SET: &str = "nomasq";
/// `srcnat + 10`, not `srcnat`: at equal priority the most recently loaded base chain runs
/// first, so the order against kube-proxy's masquerade would flip with restarts; at +10 ours
/// always runs after it, as upstream's jump appended to POSTROUTING does.
pub(super) const PRIORITY: &str = "srcnat + 10";
/// The same priority as nft reports it (srcnat is 100).
pub(super) const PRIORITY_VALUE: i64 = 110;
/// Comments: upstream's texts, so greps and runbooks find our rules in either backend.
pub(super) const NON_MASQ_COMMENT: &str =
    "ip-masq-agent: local traffic is not subject to MASQUERADE";
/// Comment of the rule that leaves traffic from outside `masqueradeSourceCIDRs` alone.
pub(super) const SOURCE_COMMENT: &str =
    "ipmasq: traffic from outside masqueradeSourceCIDRs is not subject to MASQUERADE";
pub(super) const MASQ_COMMENT: &str =
    "ip-masq-agent: outbound traffic is subject to MASQUERADE (must be last in chain)";

pub(super) fn entry_comment(chain: &ChainName) -> String {
    format!(
        "ip-masq-agent: ensure nat POSTROUTING directs all non-LOCAL destination traffic to our custom {chain} chain"
    )
}

/// `ip` or `ip6`: the table family and the payload protocol of `daddr`.
pub(super) fn family_word(family: Family) -> &'static str {
    match family {
        Family::V4 => "ip",
        Family::V6 => "ip6",
    }
}

pub(super) fn address_type(family: Family) -> &'static str {
    match family {
        Family::V4 => "ipv4_addr",
        Family::V6 => "ipv6_addr",
    }
}

/// One rule of our chain: a canonical text of its statements (also what live rules are read
/// back into) and its comment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct RuleSpec {
    pub statements: String,
    pub comment: String,
}

/// The desired table of one family.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct DesiredTable {
    pub family: Family,
    /// Non-overlapping, sorted ([`aggregate`]): an interval set refuses overlapping
    /// elements, and the listed elements then equal these exactly.
    pub elements: Vec<IpNet>,
    pub rules: Vec<RuleSpec>,
}

/// The masquerade statement with its port range and flags, in canonical form.
fn masquerade(ports: Option<String>, random_fully: bool) -> String {
    let mut text = String::from("masquerade");
    if let Some(ports) = ports {
        let _ = write!(text, " to :{ports}");
    }
    if random_fully {
        text.push_str(" fully-random");
    }
    text
}

impl DesiredTable {
    pub fn new(ruleset: &Ruleset) -> Result<Self, BackendError> {
        if !ruleset.entry.skip_local_destinations {
            return Err(BackendError::Unsupported(
                "the nftables backend always exempts local destinations".into(),
            ));
        }
        let family = ruleset.family;
        // Sorted, as nft lists them back and as the diff's merge expects. With forced CIDRs
        // the set holds what the longest prefix keeps: disjoint intervals, one lookup.
        let elements = if ruleset
            .decisions
            .iter()
            .any(|d| d.action == Action::Masquerade)
        {
            crate::plan::intervals::kept_by_longest_prefix(family, &ruleset.decisions)
        } else {
            aggregate(ruleset.non_masquerade().copied())
        };
        let mut rules = vec![RuleSpec {
            statements: "fib daddr type local return".into(),
            comment: entry_comment(&ruleset.names.chain),
        }];
        let sources = aggregate(ruleset.entry.source_ranges.iter().copied());
        if !sources.is_empty() {
            // As nft lists them back: a host prefix is a bare address.
            let spelled = |net: &IpNet| {
                if net.prefix_len() == net.max_prefix_len() {
                    net.addr().to_string()
                } else {
                    net.to_string()
                }
            };
            let listed = match sources.as_slice() {
                [one] => spelled(one),
                many => format!(
                    "{{ {} }}",
                    many.iter().map(spelled).collect::<Vec<_>>().join(", ")
                ),
            };
            rules.push(RuleSpec {
                statements: format!("{} saddr != {listed} return", family_word(family)),
                comment: SOURCE_COMMENT.into(),
            });
        }
        rules.push(RuleSpec {
            statements: format!("{} daddr @{SET} return", family_word(family)),
            comment: NON_MASQ_COMMENT.into(),
        });
        let request = &ruleset.masquerade;
        for share in &request.ports {
            let mut statements = String::from("meta l4proto { tcp, udp, sctp }");
            if !share.is_certain() {
                let _ = write!(
                    statements,
                    " numgen random mod {} < {}",
                    share.of, share.taken
                );
            }
            let _ = write!(
                statements,
                " counter {}",
                masquerade(Some(share.range.to_string()), request.random_fully)
            );
            rules.push(RuleSpec {
                statements,
                comment: MASQ_COMMENT.into(),
            });
        }
        rules.push(RuleSpec {
            statements: format!("counter {}", masquerade(None, request.random_fully)),
            comment: MASQ_COMMENT.into(),
        });
        Ok(DesiredTable {
            family,
            elements,
            rules,
        })
    }

    /// The set's declaration, with its elements when it has any.
    fn set_declaration(&self, with_elements: bool) -> String {
        let mut text = format!("{{ type {} ; flags interval ;", address_type(self.family));
        if with_elements && !self.elements.is_empty() {
            text.push_str(" elements = { ");
            for (i, e) in self.elements.iter().enumerate() {
                if i > 0 {
                    text.push_str(", ");
                }
                let _ = write!(text, "{e}");
            }
            text.push_str(" } ;");
        }
        text.push_str(" }");
        text
    }

    /// ONE `nft -f` transaction that makes the table this: the skeleton is declared (a no-op
    /// when it exists), the chain flushed, the set deleted and declared again with every
    /// element, and the rules added. The table and its hooked chain are kept (counters of the
    /// hook survive), unless `recreate`: then the table is deleted first (the hook or the set
    /// type changed, which nft cannot alter in place).
    pub fn script(&self, recreate: bool) -> String {
        let f = family_word(self.family);
        let size = self.elements.len() * 24 + 2048;
        let mut s = String::with_capacity(size);
        let _ = writeln!(s, "add table {f} {TABLE}");
        if recreate {
            let _ = writeln!(s, "delete table {f} {TABLE}");
            let _ = writeln!(s, "add table {f} {TABLE}");
        }
        let _ = writeln!(
            s,
            "add chain {f} {TABLE} {CHAIN} {{ type nat hook postrouting priority {PRIORITY} ; policy accept ; }}"
        );
        let _ = writeln!(
            s,
            "add set {f} {TABLE} {SET} {}",
            self.set_declaration(false)
        );
        let _ = writeln!(s, "flush chain {f} {TABLE} {CHAIN}");
        let _ = writeln!(s, "delete set {f} {TABLE} {SET}");
        let _ = writeln!(
            s,
            "add set {f} {TABLE} {SET} {}",
            self.set_declaration(true)
        );
        for rule in &self.rules {
            let _ = writeln!(
                s,
                "add rule {f} {TABLE} {CHAIN} {} comment \"{}\"",
                rule.statements, rule.comment
            );
        }
        s
    }

    /// A transaction that changes only the set's elements: deletions first (an aggregated
    /// element may replace the ones it now covers), then additions.
    pub fn element_script(&self, remove: &[IpNet], add: &[IpNet]) -> String {
        let f = family_word(self.family);
        let mut s = String::new();
        let list = |items: &[IpNet]| {
            items
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        if !remove.is_empty() {
            let _ = writeln!(s, "delete element {f} {TABLE} {SET} {{ {} }}", list(remove));
        }
        if !add.is_empty() {
            let _ = writeln!(s, "add element {f} {TABLE} {SET} {{ {} }}", list(add));
        }
        s
    }
}

/// The smallest sorted list of CIDRs for a set of CIDRs: what the interval set holds.
pub(super) use crate::plan::intervals::aggregate;
