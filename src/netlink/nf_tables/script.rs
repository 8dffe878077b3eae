//! A batch's bytes read back as nft syntax: what `--dry-run` prints and what errors name.
//! It is decoded from the very bytes a transaction sends, so the dry run and the apply cannot
//! differ; the golden files hold this text for every flag combination.

use super::statement;
use super::wire::{self, Anonymous, Keys, Named, SetRef};
use netlink_packet_netfilter::nftables::{
    ChainAttribute, ChainMessage, InetHookNumber, NfTablesMessage, RuleAttribute, SetAttribute,
    SetDescription, SetElementList, SetElementMessage, SetFlags, SetMessage, TableAttribute,
    TableFlags,
};
use netlink_packet_netfilter::{NetfilterMessageInner, NetfilterProtoFamily};
use std::fmt::Write as _;

fn family_word(family: NetfilterProtoFamily) -> &'static str {
    match family {
        NetfilterProtoFamily::IPv4 => "ip",
        NetfilterProtoFamily::IPv6 => "ip6",
        NetfilterProtoFamily::Inet => "inet",
        NetfilterProtoFamily::Bridge => "bridge",
        NetfilterProtoFamily::ARP => "arp",
        NetfilterProtoFamily::NetDev => "netdev",
        _ => "unknown",
    }
}

/// A priority as nft names it at a nat hook (`srcnat + 10`), else its number.
pub(crate) fn priority_text(kind: &str, hook: InetHookNumber, priority: i32) -> String {
    let base = match (kind, hook) {
        ("nat", InetHookNumber::PostRouting) => Some(("srcnat", 100)),
        ("nat", InetHookNumber::PreRouting) => Some(("dstnat", -100)),
        ("filter", InetHookNumber::Forward) => Some(("filter", 0)),
        _ => None,
    };
    match base {
        Some((name, value)) if priority == value => name.to_string(),
        Some((name, value)) if priority > value => format!("{name} + {}", priority - value),
        Some((name, value)) => format!("{name} - {}", value - priority),
        None => priority.to_string(),
    }
}

/// A set being declared, with the elements added to it by the messages that follow.
struct Declared {
    line: String,
    set: SetRef,
    anonymous: bool,
    key_type: u32,
    interval: bool,
    /// A dynamic set's flags, timeout and size as nft declares them (empty for another).
    dynamic: String,
    keys: Vec<(Vec<u8>, bool)>,
    /// The messages this line stands for (the declaration and its elements).
    seqs: Vec<u32>,
}

/// The text of elements' keys: CIDRs (interval sets) or protocol numbers.
fn element_text(declared: &Declared) -> String {
    if declared.key_type == wire::TYPE_INET_PROTO {
        let items: Vec<String> = declared
            .keys
            .iter()
            .map(|(k, _)| k[0].to_string())
            .collect();
        return items.join(", ");
    }
    if declared.interval {
        let (nets, odd) = wire::nets_of(declared.keys.clone());
        let mut items: Vec<String> = nets.iter().map(ToString::to_string).collect();
        items.extend(odd);
        return items.join(", ");
    }
    let items: Vec<String> = declared
        .keys
        .iter()
        .filter_map(|(k, _)| wire::key_address(k).map(|a| a.to_string()))
        .collect();
    items.join(", ")
}

/// Renders the batch as nft commands, one per line (anonymous sets folded into their rules).
pub(crate) fn render(bytes: &[u8]) -> String {
    lines(bytes).into_iter().map(|(_, line)| line).collect()
}

/// The nft command of the message with sequence number `seq`.
pub(crate) fn describe(bytes: &[u8], seq: u32) -> String {
    lines(bytes)
        .into_iter()
        .find(|(seqs, _)| seqs.contains(&seq))
        .map(|(_, l)| l.trim_end().to_string())
        .unwrap_or_else(|| format!("message {seq} of the batch"))
}

/// Closes a declared set: its line with the elements that followed it.
fn close(
    declared: Option<Declared>,
    out: &mut Vec<(Vec<u32>, String)>,
    anonymous: &mut Vec<Anonymous>,
) {
    let Some(d) = declared else {
        return;
    };
    if d.anonymous {
        let keys = if d.key_type == wire::TYPE_INET_PROTO {
            Keys::Protocols(d.keys.iter().map(|(k, _)| k[0]).collect())
        } else {
            Keys::Nets(wire::nets_of(d.keys.clone()).0)
        };
        anonymous.push(Anonymous { set: d.set, keys });
        out.push((d.seqs, String::new()));
        return;
    }
    let mut line = format!("{} {{ type {} ;", d.line, wire::key_type_name(d.key_type));
    if d.interval {
        line.push_str(" flags interval ;");
    }
    line.push_str(&d.dynamic);
    if !d.keys.is_empty() {
        let _ = write!(line, " elements = {{ {} }} ;", element_text(&d));
    }
    line.push_str(" }\n");
    out.push((d.seqs, line));
}

/// The lines of the batch, each with the sequence numbers of the messages it stands for.
fn lines(bytes: &[u8]) -> Vec<(Vec<u32>, String)> {
    let Ok(framed) = wire::frames(bytes) else {
        return vec![(Vec::new(), "# a batch that does not frame\n".into())];
    };
    let mut out = Vec::new();
    let mut anonymous: Vec<Anonymous> = Vec::new();
    let mut declared: Option<Declared> = None;
    for f in &framed {
        let Ok(message) = wire::parse(f) else {
            out.push((vec![f.seq], format!("# message {} does not parse\n", f.seq)));
            continue;
        };
        let family = message.header.family;
        let NetfilterMessageInner::NfTables(m) = message.inner else {
            continue;
        };
        // Elements that extend the set just declared belong to its line.
        if let (NfTablesMessage::NewSetElement(e), Some(d)) = (&m, declared.as_mut()) {
            let (_, target) = e.attributes.names();
            let id = e.attributes.iter().find_map(|a| match a {
                SetElementList::SetId(i) => Some(*i),
                _ => None,
            });
            if target == d.set.name && (id.is_none() || id == d.set.id) {
                d.keys.extend(wire::element_keys(&e.attributes));
                d.seqs.push(f.seq);
                continue;
            }
        }
        close(declared.take(), &mut out, &mut anonymous);
        match message_line(family_word(family), family, &m, &anonymous) {
            Line::Text(text) => out.push((vec![f.seq], text)),
            Line::Set(mut d) => {
                d.seqs.push(f.seq);
                declared = Some(d);
            }
        }
    }
    close(declared, &mut out, &mut anonymous);
    out
}

enum Line {
    Text(String),
    Set(Declared),
}

/// A table's flags as nft spells them (`owner,persist`); a bit nft has no word for, in hex.
fn table_flag_words(flags: TableFlags) -> String {
    let mut words = Vec::new();
    for (flag, word) in [
        (TableFlags::Dormant, "dormant"),
        (TableFlags::Owner, "owner"),
        (TableFlags::Persisent, "persist"),
    ] {
        if flags.contains(flag) {
            words.push(word.to_string());
        }
    }
    let known = TableFlags::Dormant | TableFlags::Owner | TableFlags::Persisent;
    let other = flags.bits() & !known.bits();
    if other != 0 {
        words.push(format!("{other:#x}"));
    }
    words.join(",")
}

fn message_line(
    f: &str,
    family: NetfilterProtoFamily,
    m: &NfTablesMessage,
    anonymous: &[Anonymous],
) -> Line {
    let text = match m {
        NfTablesMessage::NewTable(t) | NfTablesMessage::DeleteTable(t) => {
            let verb = if matches!(m, NfTablesMessage::NewTable(_)) {
                "add"
            } else {
                "delete"
            };
            let (_, name) = t.attributes.names();
            let mut body = String::new();
            for attribute in &t.attributes {
                match attribute {
                    TableAttribute::Flags(flags) => {
                        body.push_str(&format!(" flags {} ;", table_flag_words(*flags)));
                    }
                    TableAttribute::UserData(udata) => {
                        if let Some(comment) = wire::comment_of(udata) {
                            body.push_str(&format!(" comment \"{comment}\" ;"));
                        }
                    }
                    _ => {}
                }
            }
            if body.is_empty() {
                format!("{verb} table {f} {name}\n")
            } else {
                format!("{verb} table {f} {name} {{{body} }}\n")
            }
        }
        NfTablesMessage::NewChain(c) | NfTablesMessage::DeleteChain(c) => chain_line(f, m, c),
        NfTablesMessage::DeleteRule(r) => {
            let (table, chain) = r.attributes.names();
            match r.attributes.iter().find_map(|a| match a {
                RuleAttribute::Handle(h) => Some(*h),
                _ => None,
            }) {
                Some(handle) => format!("delete rule {f} {table} {chain} handle {handle}\n"),
                None => format!("flush chain {f} {table} {chain}\n"),
            }
        }
        NfTablesMessage::NewRule(r) => rule_line(f, family, r, anonymous),
        NfTablesMessage::NewSet(s) => return Line::Set(set_declared(f, s)),
        NfTablesMessage::DeleteSet(s) => {
            let (table, name) = s.attributes.names();
            format!("delete set {f} {table} {name}\n")
        }
        NfTablesMessage::NewSetElement(e) | NfTablesMessage::DeleteSetElement(e) => {
            element_line(f, m, e)
        }
        other => format!("# {:?}\n", other.message_type()),
    };
    Line::Text(text)
}

fn chain_line(f: &str, m: &NfTablesMessage, c: &ChainMessage) -> String {
    let (table, name) = c.attributes.names();
    if matches!(m, NfTablesMessage::DeleteChain(_)) {
        format!("delete chain {f} {table} {name}\n")
    } else {
        let mut line = format!("add chain {f} {table} {name}");
        if let Some((kind, hook, priority)) = wire::base_chain_of(&c.attributes) {
            let policy = c.attributes.iter().find_map(|a| match a {
                ChainAttribute::Policy(p) => Some(*p),
                _ => None,
            });
            let _ = write!(
                line,
                " {{ type {kind} hook {} priority {} ;{} }}",
                wire::hook_name(hook),
                priority_text(&kind, hook, priority),
                match policy {
                    Some(1) => " policy accept ;",
                    Some(0) => " policy drop ;",
                    _ => "",
                }
            );
        }
        line.push('\n');
        line
    }
}

fn set_declared(f: &str, s: &SetMessage) -> Declared {
    let (table, name) = s.attributes.names();
    let (key_type, flags, id) = wire::set_declaration(&s.attributes);
    let mut dynamic = String::new();
    if flags.contains(SetFlags::Eval) {
        let timeout = s.attributes.iter().find_map(|a| match a {
            SetAttribute::Timeout(ms) => Some(*ms),
            _ => None,
        });
        let size = s.attributes.iter().find_map(|a| match a {
            SetAttribute::Description(parts) => parts.iter().find_map(|p| match p {
                SetDescription::Size(size) => Some(*size),
                _ => None,
            }),
            _ => None,
        });
        match timeout {
            Some(ms) if ms % 1000 == 0 => {
                let _ = write!(dynamic, " flags dynamic,timeout ; timeout {}s ;", ms / 1000);
            }
            Some(ms) => {
                let _ = write!(dynamic, " flags dynamic,timeout ; timeout {ms}ms ;");
            }
            None => dynamic.push_str(" flags dynamic ;"),
        }
        if let Some(size) = size {
            let _ = write!(dynamic, " size {size} ;");
        }
    }
    Declared {
        line: format!("add set {f} {table} {name}"),
        set: SetRef {
            name: name.to_string(),
            id,
        },
        anonymous: flags.contains(SetFlags::Anonymous),
        key_type: key_type.unwrap_or(0),
        interval: flags.contains(SetFlags::Interval),
        dynamic,
        keys: Vec::new(),
        seqs: Vec::new(),
    }
}

fn element_line(f: &str, m: &NfTablesMessage, e: &SetElementMessage) -> String {
    let verb = if matches!(m, NfTablesMessage::NewSetElement(_)) {
        "add"
    } else {
        "delete"
    };
    let (table, set) = e.attributes.names();
    let (nets, odd) = wire::nets_of(wire::element_keys(&e.attributes));
    let mut items: Vec<String> = nets.iter().map(ToString::to_string).collect();
    items.extend(odd);
    format!(
        "{verb} element {f} {table} {set} {{ {} }}\n",
        items.join(", ")
    )
}

fn rule_line(
    f: &str,
    family: NetfilterProtoFamily,
    r: &netlink_packet_netfilter::nftables::RuleMessage,
    anonymous: &[Anonymous],
) -> String {
    let (table, chain) = r.attributes.names();
    let (exprs, _, comment) = wire::rule_parts(&r.attributes);
    let v6 = family == NetfilterProtoFamily::IPv6;
    let stmts = statement::decode(v6, exprs, &|set| {
        anonymous.iter().find(|a| a.set == *set).cloned()
    });
    let mut line = format!("add rule {f} {table} {chain} {}", statement::text(&stmts));
    if let Some(comment) = comment {
        let _ = write!(line, " comment \"{comment}\"");
    }
    line.push('\n');
    line
}
