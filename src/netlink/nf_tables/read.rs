//! Readings of nf_tables objects over netlink: whether a table exists, a chain's hook, a set's
//! type and elements, a chain's rules as typed statements (anonymous sets resolved), and every
//! base chain of the namespace. What `show`, `explain`, the drift check and a take-over read.

use super::statement::{self, Stmt};
use super::wire::{self, Anonymous, Keys, SetRef};
use super::{query, Failure, Transport};
use crate::plan::Family;
use ipnet::IpNet;
use netlink_packet_netfilter::nftables::{
    ChainAttribute, ChainMessage, ExpressionAttribute, Expressions, ListAttribute, Lookup,
    NfTablesMessage, RuleAttribute, RuleMessage, SetAttribute, SetDescription, SetElementList,
    SetElementMessage, SetFlags, SetMessage, TableAttribute, TableFlags, TableMessage,
};
use netlink_packet_netfilter::NetfilterProtoFamily;

/// A chain as read: its name and, for a base chain, `(type, hook, priority, policy)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ChainReading {
    pub name: String,
    pub base: Option<(String, String, i64, String)>,
}

/// A rule as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RuleReading {
    pub handle: u64,
    pub stmts: Vec<Stmt>,
    pub comment: Option<String>,
}

/// A set as read: its key type name and flags as nft names them, and its elements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SetReading {
    pub key_type: String,
    pub flags: Vec<String>,
    pub nets: Vec<IpNet>,
    /// Elements that are no CIDR (ranges), as text.
    pub odd: Vec<String>,
}

fn missing(failure: &Failure) -> bool {
    failure.errno() == Some(libc::ENOENT)
}

/// A table as read: its comment (what nft lists as `comment "..."`), if it has one; its
/// flags (`dormant`, `owner`, `persist`: [`TableFlags`]); the netlink port of the socket that
/// holds it, while one does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TableReading {
    pub comment: Option<String>,
    pub flags: TableFlags,
    pub owner: Option<u32>,
}

impl TableReading {
    fn of(table: &TableMessage) -> Self {
        let mut reading = TableReading::default();
        for attribute in &table.attributes {
            match attribute {
                TableAttribute::UserData(udata) => reading.comment = wire::comment_of(udata),
                TableAttribute::Flags(flags) => reading.flags = *flags,
                TableAttribute::Owner(port) => reading.owner = Some(*port),
                _ => {}
            }
        }
        reading
    }
}

/// Table `name` of `family`, or None when it does not exist.
pub(crate) fn table(
    t: &mut dyn Transport,
    family: Family,
    name: &str,
) -> Result<Option<TableReading>, Failure> {
    let message = NfTablesMessage::GetTable(TableMessage {
        attributes: vec![TableAttribute::Name(name.into())],
    });
    match query(
        t,
        wire::nfproto(family),
        message,
        false,
        &format!("list table {name}"),
    ) {
        Ok(answers) => Ok(Some(
            answers
                .iter()
                .find_map(|(_, m)| match m {
                    NfTablesMessage::NewTable(table) => Some(TableReading::of(table)),
                    _ => None,
                })
                .unwrap_or_default(),
        )),
        Err(f) if missing(&f) => Ok(None),
        Err(f) => Err(f),
    }
}

/// Whether table `name` of `family` exists.
pub(crate) fn table_exists(
    t: &mut dyn Transport,
    family: Family,
    name: &str,
) -> Result<bool, Failure> {
    table(t, family, name).map(|found| found.is_some())
}

fn chain_reading(attrs: &[ChainAttribute]) -> ChainReading {
    let name = attrs
        .iter()
        .find_map(|a| match a {
            ChainAttribute::Name(n) => Some(n.clone()),
            _ => None,
        })
        .unwrap_or_default();
    let policy = attrs.iter().find_map(|a| match a {
        ChainAttribute::Policy(p) => Some(*p),
        _ => None,
    });
    let base = wire::base_chain_of(attrs).map(|(kind, hook, priority)| {
        let policy = match policy {
            Some(0) => "drop",
            _ => "accept",
        };
        (
            kind,
            wire::hook_name(hook),
            i64::from(priority),
            policy.to_string(),
        )
    });
    ChainReading { name, base }
}

/// Chain `chain` of table `table`, None when either is missing.
pub(crate) fn chain(
    t: &mut dyn Transport,
    family: Family,
    table: &str,
    chain: &str,
) -> Result<Option<ChainReading>, Failure> {
    let message = NfTablesMessage::GetChain(ChainMessage {
        attributes: vec![
            ChainAttribute::Table(table.into()),
            ChainAttribute::Name(chain.into()),
        ],
    });
    let what = format!("list chain {table} {chain}");
    match query(t, wire::nfproto(family), message, false, &what) {
        Ok(found) => Ok(found.into_iter().find_map(|(_, m)| match m {
            NfTablesMessage::NewChain(c) => Some(chain_reading(&c.attributes)),
            _ => None,
        })),
        Err(f) if missing(&f) => Ok(None),
        Err(f) => Err(f),
    }
}

/// Every base chain of the namespace, with its family and table.
pub(crate) fn base_chains(
    t: &mut dyn Transport,
) -> Result<Vec<(NetfilterProtoFamily, String, ChainReading)>, Failure> {
    let message = NfTablesMessage::GetChain(ChainMessage { attributes: vec![] });
    let found = query(
        t,
        NetfilterProtoFamily::Unspec,
        message,
        true,
        "list chains",
    )?;
    Ok(found
        .into_iter()
        .filter_map(|(family, m)| match m {
            NfTablesMessage::NewChain(c) => {
                let table = c.attributes.iter().find_map(|a| match a {
                    ChainAttribute::Table(n) => Some(n.clone()),
                    _ => None,
                })?;
                let reading = chain_reading(&c.attributes);
                reading.base.is_some().then_some((family, table, reading))
            }
            _ => None,
        })
        .collect())
}

/// The elements of set `set` (by name) as raw keys.
fn element_keys(
    t: &mut dyn Transport,
    family: NetfilterProtoFamily,
    table: &str,
    set: &str,
) -> Result<Vec<(Vec<u8>, bool)>, Failure> {
    let message = NfTablesMessage::GetSetElement(SetElementMessage {
        attributes: vec![
            SetElementList::Table(table.into()),
            SetElementList::Set(set.into()),
        ],
    });
    let what = format!("list set {table} {set}");
    let found = query(t, family, message, true, &what)?;
    let mut keys = Vec::new();
    for (_, m) in found {
        if let NfTablesMessage::NewSetElement(e) = m {
            keys.extend(wire::element_keys(&e.attributes));
        }
    }
    Ok(keys)
}

/// The declaration of set `set`: key type and flags; None when it does not exist.
fn set_declaration(
    t: &mut dyn Transport,
    family: NetfilterProtoFamily,
    table: &str,
    set: &str,
) -> Result<Option<(u32, SetFlags)>, Failure> {
    let message = NfTablesMessage::GetSet(SetMessage {
        attributes: vec![
            SetAttribute::Table(table.into()),
            SetAttribute::Name(set.into()),
        ],
    });
    let what = format!("list set {table} {set}");
    let found = match query(t, family, message, false, &what) {
        Ok(found) => found,
        Err(f) if missing(&f) => return Ok(None),
        Err(f) => return Err(f),
    };
    Ok(found.into_iter().find_map(|(_, m)| match m {
        NfTablesMessage::NewSet(s) => {
            let (key_type, flags, _) = wire::set_declaration(&s.attributes);
            Some((key_type?, flags))
        }
        _ => None,
    }))
}

/// The sets of table `table` whose names `wanted` accepts: their types, flags and elements,
/// in the kernel's order. One dump of the table's set declarations, then one of each wanted
/// set's elements; empty when the table does not exist.
pub(crate) fn sets(
    t: &mut dyn Transport,
    family: Family,
    table: &str,
    wanted: impl Fn(&str) -> bool,
) -> Result<Vec<(String, SetReading)>, Failure> {
    let proto = wire::nfproto(family);
    let message = NfTablesMessage::GetSet(SetMessage {
        attributes: vec![SetAttribute::Table(table.into())],
    });
    let what = format!("list sets table {table}");
    let found = match query(t, proto, message, true, &what) {
        Ok(found) => found,
        Err(f) if missing(&f) => return Ok(Vec::new()),
        Err(f) => return Err(f),
    };
    let declared: Vec<(String, u32, SetFlags)> = found
        .into_iter()
        .filter_map(|(_, m)| match m {
            NfTablesMessage::NewSet(s) => {
                let (key_type, flags, _) = wire::set_declaration(&s.attributes);
                let name = s.attributes.into_iter().find_map(|a| match a {
                    SetAttribute::Name(name) => Some(name),
                    _ => None,
                })?;
                Some((name, key_type?, flags))
            }
            _ => None,
        })
        .filter(|(name, _, _)| wanted(name))
        .collect();
    let mut out = Vec::with_capacity(declared.len());
    for (name, key_type, flags) in declared {
        let keys = element_keys(t, proto, table, &name)?;
        let (nets, odd) = wire::nets_of(keys);
        let mut named = Vec::new();
        for (flag, word) in [
            (SetFlags::Constant, "constant"),
            (SetFlags::Interval, "interval"),
            (SetFlags::Timeout, "timeout"),
        ] {
            if flags.contains(flag) {
                named.push(word.to_string());
            }
        }
        let reading = SetReading {
            key_type: wire::key_type_name(key_type),
            flags: named,
            nets,
            odd,
        };
        out.push((name, reading));
    }
    Ok(out)
}

/// The declarations of table `table`'s sets whose names `wanted` accepts (no elements: a
/// dynamic set's elements are the packet path's state, not ours to compare), each with its
/// flags; empty when the table does not exist.
pub(crate) fn dynamic_sets(
    t: &mut dyn Transport,
    family: Family,
    table: &str,
    wanted: impl Fn(&str) -> bool,
) -> Result<Vec<(wire::DynamicSet, SetFlags)>, Failure> {
    let message = NfTablesMessage::GetSet(SetMessage {
        attributes: vec![SetAttribute::Table(table.into())],
    });
    let what = format!("list sets table {table}");
    let found = match query(t, wire::nfproto(family), message, true, &what) {
        Ok(found) => found,
        Err(f) if missing(&f) => return Ok(Vec::new()),
        Err(f) => return Err(f),
    };
    let mut out = Vec::new();
    for (_, m) in found {
        let NfTablesMessage::NewSet(s) = m else {
            continue;
        };
        let mut set = wire::DynamicSet {
            name: String::new(),
            key_type: 0,
            key_len: 0,
            timeout_ms: None,
            size: 0,
        };
        let mut flags = SetFlags::empty();
        for attribute in s.attributes {
            match attribute {
                SetAttribute::Name(name) => set.name = name,
                SetAttribute::KeyType(key) => set.key_type = key,
                SetAttribute::KeyLen(len) => set.key_len = len,
                SetAttribute::Timeout(ms) => set.timeout_ms = Some(ms),
                SetAttribute::Flags(f) => flags = f,
                SetAttribute::Description(parts) => {
                    for part in parts {
                        if let SetDescription::Size(size) = part {
                            set.size = size;
                        }
                    }
                }
                _ => {}
            }
        }
        if wanted(&set.name) {
            out.push((set, flags));
        }
    }
    Ok(out)
}

/// The anonymous sets `rules` look up.
fn anonymous_names(rules: &[RuleMessage]) -> Vec<String> {
    let mut names = Vec::new();
    for rule in rules {
        for attr in &rule.attributes {
            let RuleAttribute::Expressions(exprs) = attr else {
                continue;
            };
            for e in exprs {
                let ListAttribute::Element(attrs) = e else {
                    continue;
                };
                for a in attrs {
                    if let ExpressionAttribute::Data(Expressions::Lookup(l)) = a {
                        for item in l {
                            if let Lookup::Set(name) = item {
                                if name.starts_with("__set") && !names.contains(name) {
                                    names.push(name.clone());
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    names
}

/// The rules of chain `chain` (an `inet` table's too), typed; empty when it does not exist.
pub(crate) fn rules(
    t: &mut dyn Transport,
    family: NetfilterProtoFamily,
    table: &str,
    chain: &str,
) -> Result<Vec<RuleReading>, Failure> {
    let message = NfTablesMessage::GetRule(RuleMessage {
        attributes: vec![
            RuleAttribute::Table(table.into()),
            RuleAttribute::Chain(chain.into()),
        ],
    });
    let what = format!("list chain {table} {chain}");
    let found = match query(t, family, message, true, &what) {
        Ok(found) => found,
        Err(f) if missing(&f) => return Ok(Vec::new()),
        Err(f) => return Err(f),
    };
    let messages: Vec<RuleMessage> = found
        .into_iter()
        .filter_map(|(_, m)| match m {
            NfTablesMessage::NewRule(r) => Some(r),
            _ => None,
        })
        .collect();
    let mut anonymous = Vec::new();
    for name in anonymous_names(&messages) {
        let Some((key_type, _)) = set_declaration(t, family, table, &name)? else {
            continue;
        };
        let keys = element_keys(t, family, table, &name)?;
        let keys = if key_type == wire::TYPE_INET_PROTO {
            Keys::Protocols(
                keys.iter()
                    .filter_map(|(k, _)| k.first().copied())
                    .collect(),
            )
        } else {
            Keys::Nets(wire::nets_of(keys).0)
        };
        anonymous.push(Anonymous {
            set: SetRef { name, id: None },
            keys,
        });
    }
    let v6 = family == NetfilterProtoFamily::IPv6;
    Ok(messages
        .iter()
        .map(|r| {
            let (exprs, handle, comment) = wire::rule_parts(&r.attributes);
            let stmts = statement::decode(v6, exprs, &|set| {
                anonymous.iter().find(|a| a.set.name == set.name).cloned()
            });
            RuleReading {
                handle: handle.unwrap_or(0),
                stmts,
                comment,
            }
        })
        .collect())
}
