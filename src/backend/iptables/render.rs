//! Renders a neutral [`Ruleset`] exactly as `iptables-save` prints it. Rendering in the saved
//! form is what makes "in sync" a plain string comparison: when the live chain equals the
//! rendered one, nothing is written and packet counters survive.

use crate::config::egress::InterfacePattern;
use crate::plan::{Action, ChainName, Egress, Family, MasqueradeRequest, PortShare, Ruleset};
use ipnet::IpNet;
use std::fmt::{self, Write as _};

/// The built-in chain our jump lives in.
pub(super) const POSTROUTING: &str = "POSTROUTING";
pub(super) use crate::plan::{
    jump_comment, MASQ_COMMENT, NON_MASQ_COMMENT, SNAT_COMMENT, SOURCE_COMMENT,
};
/// Transport protocols `--to-ports` applies to, in the order rules are written (iptables
/// needs a protocol match for `--to-ports`, so each range is written once per protocol).
const PORT_PROTOCOLS: [&str; 3] = ["tcp", "udp", "sctp"];

/// The POSTROUTING jump as iptables-save prints it (without the leading `-A POSTROUTING`).
pub(super) fn jump_spec(chain: &ChainName) -> String {
    format!(
        "-m comment --comment \"{}\" -m addrtype ! --dst-type LOCAL -j {chain}",
        jump_comment(chain)
    )
}

/// A probability as the `statistic` match stores it: a 31-bit fixed-point fraction. Keeping
/// the stored form makes our rules compare equal to what iptables-save prints back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Probability(u32);

impl Probability {
    const SCALE: f64 = 2_147_483_648.0; // 0x80000000

    /// `numerator / denominator`, rounded as iptables' `lround(0x80000000 * p)`.
    pub(super) fn ratio(numerator: u32, denominator: u32) -> Self {
        let p = f64::from(numerator) / f64::from(denominator);
        Probability((p * Self::SCALE).round() as u32)
    }

    fn value(self) -> f64 {
        f64::from(self.0) / Self::SCALE
    }
}

impl fmt::Display for Probability {
    /// The text iptables-save prints (`%.11f`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.11}", self.value())
    }
}

/// Which traffic a rewriting line matches: every destination (None) or one, leaving any
/// interface (None) or one pattern.
#[derive(Clone, Copy, Debug)]
struct Scope<'a> {
    destination: Option<&'a IpNet>,
    interface: Option<&'a InterfacePattern>,
}

/// One rewriting line (MASQUERADE, or SNAT to the output address) for `scope`, for every
/// protocol or one `--to-ports` range of one protocol.
fn masquerade_line(
    chain: &ChainName,
    scope: Scope<'_>,
    port: Option<(&str, PortShare)>,
    request: &MasqueradeRequest,
) -> String {
    let Scope {
        destination,
        interface,
    } = scope;
    let mut line = format!("-A {chain}");
    if let Some(d) = destination {
        let _ = write!(line, " -d {d}");
    }
    if let Some(i) = interface {
        let _ = write!(line, " -o {}", i.iptables());
    }
    if let Some((protocol, _)) = port {
        let _ = write!(line, " -p {protocol}");
    }
    let comment = match request.egress {
        Egress::Masquerade => MASQ_COMMENT,
        Egress::Snat(_) | Egress::Unresolved(_) => SNAT_COMMENT,
    };
    let _ = write!(line, " -m comment --comment \"{comment}\"");
    if let Some((_, share)) = port.filter(|(_, s)| !s.is_certain()) {
        let p = Probability::ratio(share.taken, share.of);
        let _ = write!(line, " -m statistic --mode random --probability {p}");
    }
    match request.egress {
        Egress::Masquerade => {
            line.push_str(" -j MASQUERADE");
            if let Some((_, share)) = port {
                let _ = write!(line, " --to-ports {}", share.range);
            }
        }
        Egress::Snat(address) => {
            let _ = match (address, port) {
                (_, None) => write!(line, " -j SNAT --to-source {address}"),
                (std::net::IpAddr::V4(a), Some((_, share))) => {
                    write!(line, " -j SNAT --to-source {a}:{}", share.range)
                }
                (std::net::IpAddr::V6(a), Some((_, share))) => {
                    write!(line, " -j SNAT --to-source [{a}]:{}", share.range)
                }
            };
        }
        // Never applied (the backend refuses an unresolved plan); described for dry runs.
        Egress::Unresolved(target) => {
            let _ = write!(line, " -j SNAT --to-source <address in {target}>");
        }
    }
    if request.random_fully {
        line.push_str(" --random-fully");
    }
    line
}

/// The rewriting part: per interface pattern (or once, unscoped), per protocol one line per
/// `--to-ports` range, then the catch-all.
fn masquerade_lines(
    chain: &ChainName,
    destination: Option<&IpNet>,
    interfaces: &[InterfacePattern],
    request: &MasqueradeRequest,
) -> Vec<String> {
    let mut lines = Vec::new();
    let scopes: Vec<Option<&InterfacePattern>> = if interfaces.is_empty() {
        vec![None]
    } else {
        interfaces.iter().map(Some).collect()
    };
    for interface in scopes {
        for protocol in PORT_PROTOCOLS {
            for share in &request.ports {
                lines.push(masquerade_line(
                    chain,
                    Scope {
                        destination,
                        interface,
                    },
                    Some((protocol, *share)),
                    request,
                ));
            }
        }
        lines.push(masquerade_line(
            chain,
            Scope {
                destination,
                interface,
            },
            None,
            request,
        ));
    }
    lines
}

/// A ruleset rendered once per pass: the chain's lines and the canonical jump.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Rendered {
    pub family: Family,
    pub chain: ChainName,
    /// `-A CHAIN ...` lines, in order.
    pub lines: Vec<String>,
    /// The canonical POSTROUTING jump spec.
    pub jump: String,
}

/// Renders the chain's lines one at a time (each into `line`, handed to `each`), so a steady
/// pass can compare a long chain without holding a second copy of it.
fn for_each_line(ruleset: &Ruleset, mut each: impl FnMut(&str)) {
    let chain = &ruleset.names.chain;
    let mut line = String::with_capacity(160);
    for gate in source_gate(ruleset) {
        line.clear();
        let _ = write!(
            line,
            "-A {chain} {gate} -m comment --comment \"{SOURCE_COMMENT}\" -j RETURN"
        );
        each(&line);
    }
    for decision in ruleset.decisions.iter() {
        match decision.action {
            Action::KeepSource => {
                line.clear();
                let _ = write!(
                    line,
                    "-A {chain} -d {} -m comment --comment \"{NON_MASQ_COMMENT}\" -j RETURN",
                    decision.destination
                );
                each(&line);
            }
            Action::Masquerade => {
                for masq in masquerade_lines(
                    chain,
                    Some(&decision.destination),
                    &ruleset.entry.output_interfaces,
                    &ruleset.masquerade,
                ) {
                    each(&masq);
                }
            }
        }
    }
    for masq in masquerade_lines(
        chain,
        None,
        &ruleset.entry.output_interfaces,
        &ruleset.masquerade,
    ) {
        each(&masq);
    }
}

/// The source matches of the rules that return traffic from outside the entry's source
/// ranges, first in the chain: one `! -s` for one range; for several (iptables cannot negate
/// a union) one `-s` per CIDR of their complement. Nothing when the entry is unscoped.
pub(super) fn source_gate(ruleset: &Ruleset) -> Vec<String> {
    let sources = crate::plan::intervals::aggregate(ruleset.entry.source_ranges.iter().copied());
    match sources.as_slice() {
        [] => Vec::new(),
        [one] => vec![format!("! -s {one}")],
        many => crate::plan::intervals::complement(ruleset.family, many)
            .iter()
            .map(|net| format!("-s {net}"))
            .collect(),
    }
}

/// Whether `live` holds exactly the chain `ruleset` renders to, line for line, without
/// rendering it all at once.
pub(super) fn matches<S: AsRef<str>>(ruleset: &Ruleset, live: &[S]) -> bool {
    let mut index = 0;
    let mut same = true;
    for_each_line(ruleset, |line| {
        same = same && live.get(index).is_some_and(|l| l.as_ref() == line);
        index += 1;
    });
    same && index == live.len()
}

impl Rendered {
    pub fn new(ruleset: &Ruleset) -> Self {
        let chain = &ruleset.names.chain;
        let mut lines = Vec::with_capacity(ruleset.decisions.len() + 1);
        for_each_line(ruleset, |line| lines.push(line.to_string()));
        Rendered {
            family: ruleset.family,
            chain: chain.clone(),
            lines,
            jump: jump_spec(chain),
        }
    }
}

/// How many rules `Rendered::new(ruleset)` writes, without rendering them.
pub(super) fn rule_count(ruleset: &Ruleset) -> usize {
    let masquerade = (PORT_PROTOCOLS.len() * ruleset.masquerade.ports.len() + 1)
        * ruleset.entry.output_interfaces.len().max(1);
    ruleset
        .decisions
        .iter()
        .map(|d| match d.action {
            Action::KeepSource => 1,
            Action::Masquerade => masquerade,
        })
        .sum::<usize>()
        + masquerade
        + source_gate_len(ruleset)
}

/// How many rules `Rendered::new(ruleset)` writes and their text's bytes (a newline each, as
/// iptables-restore reads them), spelt one at a time and not kept.
pub(super) fn rule_count_and_text_bytes(ruleset: &Ruleset) -> (usize, usize) {
    let (mut rules, mut bytes) = (0, 0);
    for_each_line(ruleset, |line| {
        rules += 1;
        bytes += line.len() + 1;
    });
    (rules, bytes)
}

/// How many rules [`source_gate`] writes, without spelling them.
fn source_gate_len(ruleset: &Ruleset) -> usize {
    let sources = crate::plan::intervals::aggregate(ruleset.entry.source_ranges.iter().copied());
    match sources.len() {
        0 | 1 => sources.len(),
        _ => crate::plan::intervals::complement(ruleset.family, &sources).len(),
    }
}
