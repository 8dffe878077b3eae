//! How the fake answers a get or a dump: the objects of its ruleset as the kernel lists
//! them (a table, chain, set or rule message each; a set's elements in parts).

use super::{family_matches, FakeChain, FakeRule, FakeRuleset, FakeSet, FakeTable};
use crate::netlink::nf_tables::wire;
use netlink_packet_netfilter::nftables::{
    ChainAttribute, ChainMessage, DataAttribute, ListAttribute, NfTablesMessage, RuleAttribute,
    RuleMessage, SetAttribute, SetElementAttribute, SetElementFlags, SetElementList,
    SetElementMessage, SetMessage, TableAttribute, TableMessage,
};
use netlink_packet_netfilter::NetfilterProtoFamily;

/// How many elements one part of a set-element dump carries.
const ELEMENTS_PER_PART: usize = 256;

fn table_message(table: &FakeTable) -> NfTablesMessage {
    let mut attributes = vec![
        TableAttribute::Name(table.name.clone()),
        TableAttribute::Handle(table.handle),
    ];
    attributes.extend(table.udata.clone().map(TableAttribute::UserData));
    NfTablesMessage::NewTable(TableMessage { attributes })
}

fn chain_message(table: &FakeTable, chain: &FakeChain) -> NfTablesMessage {
    let mut attributes = vec![
        ChainAttribute::Table(table.name.clone()),
        ChainAttribute::Name(chain.name.clone()),
        ChainAttribute::Handle(chain.handle),
    ];
    attributes.extend(chain.hook.clone().map(ChainAttribute::Hook));
    attributes.extend(chain.policy.map(ChainAttribute::Policy));
    attributes.extend(chain.kind.clone().map(ChainAttribute::Type));
    NfTablesMessage::NewChain(ChainMessage { attributes })
}

fn rule_message(table: &FakeTable, chain: &FakeChain, rule: &FakeRule) -> NfTablesMessage {
    let mut attributes = vec![
        RuleAttribute::Table(table.name.clone()),
        RuleAttribute::Chain(chain.name.clone()),
        RuleAttribute::Handle(rule.handle),
        RuleAttribute::Expressions(rule.expressions.clone()),
    ];
    attributes.extend(rule.udata.clone().map(RuleAttribute::UserData));
    NfTablesMessage::NewRule(RuleMessage { attributes })
}

fn set_message(table: &FakeTable, set: &FakeSet) -> NfTablesMessage {
    let mut attributes = vec![
        SetAttribute::Table(table.name.clone()),
        SetAttribute::Name(set.name.clone()),
        SetAttribute::Handle(set.handle),
        SetAttribute::Flags(set.flags),
        SetAttribute::KeyType(set.key_type),
        SetAttribute::KeyLen(set.key_len),
    ];
    attributes.extend(set.description.clone().map(SetAttribute::Description));
    attributes.extend(set.timeout.map(SetAttribute::Timeout));
    NfTablesMessage::NewSet(SetMessage { attributes })
}

/// The parts of a set's element dump.
fn element_messages(table: &FakeTable, set: &FakeSet) -> Vec<NfTablesMessage> {
    let elements: Vec<_> = set.elements.iter().collect();
    elements
        .chunks(ELEMENTS_PER_PART)
        .map(|chunk| {
            let list = chunk
                .iter()
                .map(|(key, end)| {
                    let mut attrs =
                        vec![SetElementAttribute::Key(DataAttribute::Value(key.clone()))];
                    if *end {
                        attrs.push(SetElementAttribute::Flags(SetElementFlags::IntervalEnd));
                    }
                    ListAttribute::Element(attrs)
                })
                .collect();
            NfTablesMessage::NewSetElement(SetElementMessage {
                attributes: vec![
                    SetElementList::Table(table.name.clone()),
                    SetElementList::Set(set.name.clone()),
                    SetElementList::Elements(list),
                ],
            })
        })
        .collect()
}

type Objects = Vec<(NetfilterProtoFamily, NfTablesMessage)>;

/// The objects a get (one) or a dump (every match) answers with; an errno as the kernel's.
pub(super) fn objects(
    ruleset: &FakeRuleset,
    family: NetfilterProtoFamily,
    request: &NfTablesMessage,
    dump: bool,
) -> Result<Objects, i32> {
    let tables = ruleset
        .tables
        .iter()
        .filter(move |t| family_matches(family, t.family));
    let named_table = |name: &str| -> Result<&FakeTable, i32> {
        ruleset
            .tables
            .iter()
            .find(|t| family_matches(family, t.family) && t.name == name)
            .ok_or(libc::ENOENT)
    };
    let mut out = Vec::new();
    match request {
        NfTablesMessage::GetTable(m) => {
            let (_, name) = wire::Named::names(&m.attributes[..]);
            if dump {
                out.extend(tables.map(|t| (t.family, table_message(t))));
            } else {
                let table = named_table(name)?;
                out.push((table.family, table_message(table)));
            }
        }
        NfTablesMessage::GetChain(m) => {
            let (table, name) = wire::Named::names(&m.attributes[..]);
            if dump {
                for t in tables.filter(|t| table.is_empty() || t.name == table) {
                    out.extend(t.chains.iter().map(|c| (t.family, chain_message(t, c))));
                }
            } else {
                let t = named_table(table)?;
                let chain = t.chain(name).ok_or(libc::ENOENT)?;
                out.push((t.family, chain_message(t, chain)));
            }
        }
        NfTablesMessage::GetRule(m) => {
            // A rule dump filters by table and chain; it checks neither exists.
            let (table, chain) = wire::Named::names(&m.attributes[..]);
            for t in tables.filter(|t| table.is_empty() || t.name == table) {
                for c in t
                    .chains
                    .iter()
                    .filter(|c| chain.is_empty() || c.name == chain)
                {
                    out.extend(c.rules.iter().map(|r| (t.family, rule_message(t, c, r))));
                }
            }
            if !dump {
                return Err(libc::EOPNOTSUPP);
            }
        }
        NfTablesMessage::GetSet(m) => {
            let (table, name) = wire::Named::names(&m.attributes[..]);
            if dump {
                let chosen: Vec<&FakeTable> = if table.is_empty() {
                    tables.collect()
                } else {
                    vec![named_table(table)?]
                };
                for t in chosen {
                    out.extend(t.sets.iter().map(|s| (t.family, set_message(t, s))));
                }
            } else {
                let t = named_table(table)?;
                let set = t.set(name).ok_or(libc::ENOENT)?;
                out.push((t.family, set_message(t, set)));
            }
        }
        NfTablesMessage::GetSetElement(m) => {
            let (table, name) = wire::Named::names(&m.attributes[..]);
            let t = named_table(table)?;
            let set = t.set(name).ok_or(libc::ENOENT)?;
            out.extend(element_messages(t, set).into_iter().map(|e| (t.family, e)));
        }
        _ => return Err(libc::EOPNOTSUPP),
    }
    Ok(out)
}
