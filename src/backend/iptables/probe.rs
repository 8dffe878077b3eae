//! What the kernel says about iptables without running a tool: the evidence auto mode weighs
//! (kubelet's hint chains, how many rules each variant holds) read from nf_tables over netlink
//! for iptables-nft and from x_tables' own socket options for iptables-legacy, and which
//! variant the system's `iptables` command is, from where its link points.

use super::tools::Variant;
use crate::netlink::nf_tables::{self, read, Transport};
use crate::netlink::xtables::{getsockopt, raw_socket};
use crate::plan::Family;
use netlink_packet_netfilter::nftables::{NfTablesMessage, RuleAttribute, RuleMessage};
use std::os::fd::OwnedFd;

/// Chains kubelet creates in the mangle table of the variant it uses.
pub(super) const HINTS: [&str; 2] = ["KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY"];
/// The tables iptables-nft keeps in nf_tables (and iptables-nft-save lists).
const XTABLES: [&str; 5] = ["filter", "nat", "mangle", "raw", "security"];

/// One variant's evidence: a hint chain in its mangle table, and how many rules it holds (in
/// both families, as `-save` would print them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Evidence {
    pub hint: bool,
    pub rules: usize,
}

/// iptables-nft's evidence, from nf_tables; None when nf_tables cannot be read.
pub(crate) fn nft_evidence() -> Option<Evidence> {
    nf_tables::with_kernel(|t| Ok(nft_evidence_over(t)))
        .ok()
        .flatten()
}

fn nft_evidence_over(t: &mut dyn Transport) -> Option<Evidence> {
    let mut evidence = Evidence::default();
    for family in Family::ALL {
        for hint in HINTS {
            evidence.hint |= read::chain(t, family, "mangle", hint).ok()?.is_some();
        }
        let message = NfTablesMessage::GetRule(RuleMessage { attributes: vec![] });
        let proto = nf_tables::wire::nfproto(family);
        let rules = nf_tables::query(t, proto, message, true, "list ruleset").ok()?;
        evidence.rules += rules
            .iter()
            .filter(|(_, m)| match m {
                NfTablesMessage::NewRule(r) => r.attributes.iter().any(
                    |a| matches!(a, RuleAttribute::Table(name) if XTABLES.contains(&name.as_str())),
                ),
                _ => false,
            })
            .count();
    }
    Some(evidence)
}

/// x_tables' socket options and the layout of their replies, per family.
struct Layout {
    names: &'static str,
    domain: libc::c_int,
    level: libc::c_int,
    /// `sizeof(struct ipt_entry)` up to `target_offset`, and where `next_offset` is.
    target_offset_at: usize,
}

const V4: Layout = Layout {
    names: "/proc/net/ip_tables_names",
    domain: libc::AF_INET,
    level: libc::SOL_IP,
    target_offset_at: 88,
};
const V6: Layout = Layout {
    names: "/proc/net/ip6_tables_names",
    domain: libc::AF_INET6,
    level: libc::SOL_IPV6,
    target_offset_at: 140,
};
/// `IPT_SO_GET_INFO` / `IP6T_SO_GET_INFO`, and `..._GET_ENTRIES`.
const SO_GET_INFO: libc::c_int = 64;
const SO_GET_ENTRIES: libc::c_int = 65;
const TABLE_NAME_LEN: usize = 32;
/// `struct ipt_getinfo`: name, valid_hooks, hook_entry[5], underflow[5], num_entries, size.
const GETINFO_LEN: usize = TABLE_NAME_LEN + 4 + 20 + 20 + 4 + 4;
/// `struct ipt_get_entries`: name, size, then the entries (8-aligned).
const GET_ENTRIES_HEADER: usize = 40;

/// One table's rules and user chains, from the entries the kernel hands back.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct TableEntries {
    pub rules: usize,
    pub chains: Vec<String>,
}

/// Walks a table's entries: each ERROR target heads a user chain (its name is the data) or
/// ends the table; every built-in chain ends in its policy and every user chain in a RETURN.
pub(super) fn parse_entries(blob: &[u8], target_offset_at: usize, hooks: u32) -> TableEntries {
    let mut entries = 0usize;
    let mut errors = Vec::new();
    let mut at = 0usize;
    while at + target_offset_at + 4 <= blob.len() {
        let field = |o: usize| u16::from_ne_bytes([blob[at + o], blob[at + o + 1]]) as usize;
        let (target_offset, next_offset) = (field(target_offset_at), field(target_offset_at + 2));
        if next_offset == 0 || at + next_offset > blob.len() {
            break;
        }
        let target = &blob[at + target_offset.min(next_offset)..at + next_offset];
        // xt_entry_target: u16 size, name[29], revision; then the target's data.
        let name = target.get(2..31).map(cstr).unwrap_or_default();
        if name == "ERROR" {
            errors.push(target.get(32..64).map(cstr).unwrap_or_default());
        }
        entries += 1;
        at += next_offset;
    }
    // The last ERROR ends the table; each other heads a user chain with a RETURN at its end.
    let user_chains = errors.len().saturating_sub(1);
    let overhead = errors.len() + hooks.count_ones() as usize + user_chains;
    errors.pop();
    TableEntries {
        rules: entries.saturating_sub(overhead),
        chains: errors,
    }
}

fn cstr(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// One legacy table's entries, read with the socket options iptables-legacy-save uses.
fn legacy_table(layout: &Layout, fd: &OwnedFd, table: &str) -> Option<TableEntries> {
    let mut info = vec![0u8; GETINFO_LEN];
    let name = table.as_bytes();
    if name.len() >= TABLE_NAME_LEN {
        return None;
    }
    info[..name.len()].copy_from_slice(name);
    if !getsockopt(fd, layout.level, SO_GET_INFO, &mut info) {
        return None;
    }
    let word = |o: usize| u32::from_ne_bytes(info[o..o + 4].try_into().expect("4 bytes"));
    let hooks = word(TABLE_NAME_LEN);
    let size = word(GETINFO_LEN - 4) as usize;
    let mut entries = vec![0u8; GET_ENTRIES_HEADER + size];
    entries[..name.len()].copy_from_slice(name);
    entries[TABLE_NAME_LEN..TABLE_NAME_LEN + 4].copy_from_slice(&(size as u32).to_ne_bytes());
    if !getsockopt(fd, layout.level, SO_GET_ENTRIES, &mut entries) {
        return None;
    }
    Some(parse_entries(
        &entries[GET_ENTRIES_HEADER..],
        layout.target_offset_at,
        hooks,
    ))
}

/// iptables-legacy's evidence. Only tables that already exist in this namespace are read (the
/// kernel lists them), so reading creates none.
pub(crate) fn legacy_evidence() -> Evidence {
    let mut evidence = Evidence::default();
    for layout in [V4, V6] {
        let Ok(names) = std::fs::read_to_string(layout.names) else {
            continue;
        };
        let Some(fd) = raw_socket(layout.domain) else {
            continue;
        };
        for table in names.lines().map(str::trim).filter(|t| !t.is_empty()) {
            let Some(found) = legacy_table(&layout, &fd, table) else {
                continue;
            };
            evidence.rules += found.rules;
            evidence.hint |=
                table == "mangle" && found.chains.iter().any(|c| HINTS.contains(&c.as_str()));
        }
    }
    evidence
}

/// Whether iptables-nft's nat table of `family` holds chain `chain`; None when nf_tables
/// cannot be read.
pub(crate) fn nft_holds_chain(family: Family, chain: &str) -> Option<bool> {
    nft_table_holds_any(family, "nat", &[chain])
}

/// Whether iptables-nft's table `table` of `family` holds any of `chains` (one socket for all
/// of them); None when nf_tables cannot be read.
pub(crate) fn nft_table_holds_any(family: Family, table: &str, chains: &[&str]) -> Option<bool> {
    nf_tables::with_kernel(|t| {
        for chain in chains {
            if read::chain(t, family, table, chain)?.is_some() {
                return Ok(true);
            }
        }
        Ok(false)
    })
    .ok()
}

/// Whether nf_tables holds a nat table of `family` (iptables-nft's); None when it cannot tell.
pub(crate) fn nft_nat_table_exists(family: Family) -> Option<bool> {
    nf_tables::with_kernel(|t| read::table_exists(t, family, "nat")).ok()
}

/// Whether iptables-legacy's nat table of `family` exists and holds chain `chain` (a table
/// that does not exist is not created by asking); None when it cannot be read.
pub(crate) fn legacy_holds_chain(family: Family, chain: &str) -> Option<bool> {
    legacy_table_holds_any(family, "nat", &[chain])
}

/// Whether iptables-legacy's table `table` of `family` exists and holds any of `chains` (the
/// table read once for all of them).
pub(crate) fn legacy_table_holds_any(family: Family, table: &str, chains: &[&str]) -> Option<bool> {
    let layout = match family {
        Family::V4 => V4,
        Family::V6 => V6,
    };
    let Ok(names) = std::fs::read_to_string(layout.names) else {
        // No x_tables in this kernel or namespace: no legacy table, nothing of ours.
        return Some(false);
    };
    if !names.lines().any(|t| t.trim() == table) {
        return Some(false);
    }
    let fd = raw_socket(layout.domain)?;
    let found = legacy_table(&layout, &fd, table)?;
    Some(found.chains.iter().any(|c| chains.contains(&c.as_str())))
}

/// The variant the system's `iptables` is, from where its links point
/// (`/usr/sbin/iptables -> /etc/alternatives/iptables -> /usr/sbin/iptables-nft`, or
/// `xtables-nft-multi`); None when the name does not say.
pub(crate) fn system_iptables(program: &std::path::Path) -> Option<(Variant, String)> {
    let target = std::fs::canonicalize(program).ok()?;
    let name = target.file_name()?.to_string_lossy().into_owned();
    let variant = if name.contains("nft") {
        Variant::Nft
    } else if name.contains("legacy") {
        Variant::Legacy
    } else {
        return None;
    };
    Some((
        variant,
        format!("{} -> {}", program.display(), target.display()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A v4 entry of `len` bytes whose target (at 112) is `target` with `data`.
    fn entry(target: &str, data: &str, len: usize) -> Vec<u8> {
        let mut e = vec![0u8; len];
        e[88..90].copy_from_slice(&112u16.to_ne_bytes());
        e[90..92].copy_from_slice(&(len as u16).to_ne_bytes());
        e[112..114].copy_from_slice(&((len - 112) as u16).to_ne_bytes());
        e[114..114 + target.len()].copy_from_slice(target.as_bytes());
        e[144..144 + data.len()].copy_from_slice(data.as_bytes());
        e
    }

    #[test]
    fn entries_count_rules_and_name_user_chains() {
        // Two built-in chains (policies), one user chain with one rule and its RETURN, one
        // rule in a built-in chain, and the table's final ERROR.
        let mut blob = Vec::new();
        blob.extend(entry("", "", 152)); // a rule in PREROUTING
        blob.extend(entry("", "", 152)); // PREROUTING's policy
        blob.extend(entry("", "", 152)); // POSTROUTING's policy
        blob.extend(entry("ERROR", "KUBE-IPTABLES-HINT", 176));
        blob.extend(entry("", "", 152)); // its rule
        blob.extend(entry("", "", 152)); // its RETURN
        blob.extend(entry("ERROR", "ERROR", 176));
        let found = parse_entries(&blob, 88, 0b1_0001);
        assert_eq!(found.rules, 2);
        assert_eq!(found.chains, ["KUBE-IPTABLES-HINT"]);
        assert_eq!(parse_entries(&blob[..10], 88, 1), TableEntries::default());
    }
}
