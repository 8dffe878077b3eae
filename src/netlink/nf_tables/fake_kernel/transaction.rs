//! How the fake applies one message of a batch to its working copy of the ruleset, with
//! the kernel's errnos (see the parent module for which).

use super::{family_matches, jumps, lookups, FakeChain, FakeRule, FakeRuleset, FakeSet, FakeTable};
use crate::netlink::nf_tables::wire;
use netlink_packet_core::{NLM_F_APPEND, NLM_F_EXCL};
use netlink_packet_netfilter::nftables::{
    ChainAttribute, ExpressionAttribute, Expressions, ListAttribute, Lookup, NfTablesMessage,
    RuleAttribute, SetAttribute, SetElementList, SetFlags, TableAttribute,
};
use netlink_packet_netfilter::NetfilterProtoFamily;
use std::collections::BTreeSet;

/// A batch in progress: the working copy and the sets it created, by batch id.
pub(super) struct Transaction {
    pub ruleset: FakeRuleset,
    pub set_ids: Vec<(u32, String, String)>,
}

impl Transaction {
    fn table(&mut self, family: NetfilterProtoFamily, name: &str) -> Result<&mut FakeTable, i32> {
        self.ruleset.table_mut(family, name).ok_or(libc::ENOENT)
    }

    /// The set a message names: by its batch id when it has one, else by name.
    fn set_name(&self, table: &str, name: &str, id: Option<u32>) -> String {
        id.and_then(|id| {
            self.set_ids
                .iter()
                .find(|(i, t, _)| *i == id && t == table)
                .map(|(_, _, n)| n.clone())
        })
        .unwrap_or_else(|| name.to_string())
    }

    pub fn apply(
        &mut self,
        family: NetfilterProtoFamily,
        message: NfTablesMessage,
        flags: u16,
    ) -> Result<(), i32> {
        let exclusive = flags & NLM_F_EXCL != 0;
        match message {
            NfTablesMessage::NewTable(m) => {
                let (_, name) = wire::Named::names(&m.attributes[..]);
                if name.is_empty() {
                    return Err(libc::EINVAL);
                }
                if self.ruleset.table(family, name).is_some() {
                    // An existing table keeps its own user data.
                    return if exclusive { Err(libc::EEXIST) } else { Ok(()) };
                }
                let udata = m.attributes.iter().find_map(|a| match a {
                    TableAttribute::UserData(u) => Some(u.clone()),
                    _ => None,
                });
                self.ruleset.next_table_handle += 1;
                let table = FakeTable {
                    family,
                    name: name.to_string(),
                    handle: self.ruleset.next_table_handle,
                    udata,
                    chains: Vec::new(),
                    sets: Vec::new(),
                    next_handle: 0,
                };
                self.ruleset.tables.push(table);
                Ok(())
            }
            NfTablesMessage::DeleteTable(m) => {
                let (_, name) = wire::Named::names(&m.attributes[..]);
                let before = self.ruleset.tables.len();
                self.ruleset
                    .tables
                    .retain(|t| !(family_matches(family, t.family) && t.name == name));
                if self.ruleset.tables.len() == before {
                    return Err(libc::ENOENT);
                }
                Ok(())
            }
            NfTablesMessage::NewChain(m) => self.new_chain(family, &m.attributes, exclusive),
            NfTablesMessage::DeleteChain(m) => self.delete_chain(family, &m.attributes),
            NfTablesMessage::NewRule(m) => self.new_rule(family, m.attributes, flags),
            NfTablesMessage::DeleteRule(m) => self.delete_rule(family, &m.attributes),
            NfTablesMessage::NewSet(m) => self.new_set(family, &m.attributes, exclusive),
            NfTablesMessage::DeleteSet(m) => self.delete_set(family, &m.attributes),
            NfTablesMessage::NewSetElement(m) => {
                self.elements(family, &m.attributes, Some(exclusive))
            }
            NfTablesMessage::DeleteSetElement(m) => self.elements(family, &m.attributes, None),
            _ => Err(libc::EOPNOTSUPP),
        }
    }

    fn delete_chain(
        &mut self,
        family: NetfilterProtoFamily,
        attrs: &[ChainAttribute],
    ) -> Result<(), i32> {
        let (table, name) = wire::Named::names(attrs);
        let table = self.table(family, table)?;
        let index = table
            .chains
            .iter()
            .position(|c| c.name == name)
            .ok_or(libc::ENOENT)?;
        if table.chain_in_use(name) {
            return Err(libc::EBUSY);
        }
        table.delete_rules(index, None)?;
        table.chains.remove(index);
        Ok(())
    }

    /// Deletes the rule a handle names, or every rule of the chain (of the table without one).
    fn delete_rule(
        &mut self,
        family: NetfilterProtoFamily,
        attrs: &[RuleAttribute],
    ) -> Result<(), i32> {
        let (table, chain) = wire::Named::names(attrs);
        let handle = attrs.iter().find_map(|a| match a {
            RuleAttribute::Handle(h) => Some(*h),
            _ => None,
        });
        let table = self.table(family, table)?;
        if chain.is_empty() {
            for index in 0..table.chains.len() {
                table.delete_rules(index, None)?;
            }
            return Ok(());
        }
        let index = table
            .chains
            .iter()
            .position(|c| c.name == chain)
            .ok_or(libc::ENOENT)?;
        table.delete_rules(index, handle)
    }

    fn delete_set(
        &mut self,
        family: NetfilterProtoFamily,
        attrs: &[SetAttribute],
    ) -> Result<(), i32> {
        let (table, name) = wire::Named::names(attrs);
        let table = self.table(family, table)?;
        if table.set(name).is_none() {
            return Err(libc::ENOENT);
        }
        if table.set_in_use(name) {
            return Err(libc::EBUSY);
        }
        table.sets.retain(|s| s.name != name);
        Ok(())
    }

    fn new_chain(
        &mut self,
        family: NetfilterProtoFamily,
        attrs: &[ChainAttribute],
        exclusive: bool,
    ) -> Result<(), i32> {
        let (table, name) = wire::Named::names(attrs);
        let hook = attrs.iter().find_map(|a| match a {
            ChainAttribute::Hook(h) => Some(h.clone()),
            _ => None,
        });
        let kind = attrs.iter().find_map(|a| match a {
            ChainAttribute::Type(t) => Some(t.clone()),
            _ => None,
        });
        let policy = attrs.iter().find_map(|a| match a {
            ChainAttribute::Policy(p) => Some(*p),
            _ => None,
        });
        let table = self.table(family, table)?;
        if name.is_empty() {
            return Err(libc::EINVAL);
        }
        if let Some(chain) = table.chain_mut(name) {
            if exclusive {
                return Err(libc::EEXIST);
            }
            // A hook cannot be changed in place: nft's "Operation not supported".
            if hook.is_some() && (chain.hook != hook || chain.kind != kind) {
                return Err(libc::EOPNOTSUPP);
            }
            if policy.is_some() {
                chain.policy = policy;
            }
            return Ok(());
        }
        let handle = table.handle();
        table.chains.push(FakeChain {
            name: name.to_string(),
            handle,
            policy: policy.filter(|_| hook.is_some()),
            hook,
            kind,
            rules: Vec::new(),
        });
        Ok(())
    }

    fn new_set(
        &mut self,
        family: NetfilterProtoFamily,
        attrs: &[SetAttribute],
        exclusive: bool,
    ) -> Result<(), i32> {
        let (table_name, name) = wire::Named::names(attrs);
        let (key_type, flags, id) = wire::set_declaration(attrs);
        let key_len = attrs
            .iter()
            .find_map(|a| match a {
                SetAttribute::KeyLen(l) => Some(*l),
                _ => None,
            })
            .ok_or(libc::EINVAL)?;
        let description = attrs.iter().find_map(|a| match a {
            SetAttribute::Description(d) => Some(d.clone()),
            _ => None,
        });
        let timeout = attrs.iter().find_map(|a| match a {
            SetAttribute::Timeout(ms) => Some(*ms),
            _ => None,
        });
        let table = self.table(family, table_name)?;
        let name = match name.strip_suffix("%d") {
            // The kernel names an anonymous set: the first free number.
            Some(prefix) => (0..)
                .map(|n| format!("{prefix}{n}"))
                .find(|candidate| table.set(candidate).is_none())
                .ok_or(libc::ENFILE)?,
            None if name.is_empty() => return Err(libc::EINVAL),
            None => name.to_string(),
        };
        let key_type = key_type.unwrap_or(0);
        if let Some(set) = table.set(&name) {
            if exclusive {
                return Err(libc::EEXIST);
            }
            if set.key_type != key_type || set.key_len != key_len || set.flags != flags {
                return Err(libc::EEXIST);
            }
        } else {
            let handle = table.handle();
            table.sets.push(FakeSet {
                name: name.clone(),
                handle,
                flags,
                key_type,
                key_len,
                timeout,
                description,
                elements: BTreeSet::new(),
            });
        }
        if let Some(id) = id {
            self.set_ids.push((id, table_name.to_string(), name));
        }
        Ok(())
    }

    /// Adds (`exclusive` given) or deletes (None) the elements of a set-element message.
    fn elements(
        &mut self,
        family: NetfilterProtoFamily,
        list: &[SetElementList],
        exclusive: Option<bool>,
    ) -> Result<(), i32> {
        let (table_name, name) = wire::Named::names(list);
        let id = list.iter().find_map(|a| match a {
            SetElementList::SetId(i) => Some(*i),
            _ => None,
        });
        let name = self.set_name(table_name, name, id);
        let set = self
            .table(family, table_name)?
            .set_mut(&name)
            .ok_or(libc::ENOENT)?;
        for (key, end) in wire::element_keys(list) {
            if key.len() != set.key_len as usize {
                return Err(libc::EINVAL);
            }
            let element = (key, end && set.flags.contains(SetFlags::Interval));
            match exclusive {
                Some(exclusive) => {
                    if !set.elements.insert(element) && exclusive {
                        return Err(libc::EEXIST);
                    }
                }
                None => {
                    if !set.elements.remove(&element) {
                        return Err(libc::ENOENT);
                    }
                }
            }
        }
        Ok(())
    }

    fn new_rule(
        &mut self,
        family: NetfilterProtoFamily,
        attrs: Vec<RuleAttribute>,
        flags: u16,
    ) -> Result<(), i32> {
        let (table_name, chain_name) = wire::Named::names(&attrs[..]);
        let (table_name, chain_name) = (table_name.to_string(), chain_name.to_string());
        let mut expressions = Vec::new();
        let mut udata = None;
        for attr in attrs {
            match attr {
                RuleAttribute::Expressions(e) => expressions = e,
                RuleAttribute::UserData(u) => udata = Some(u),
                _ => {}
            }
        }
        // A lookup names its set as it is now called (an anonymous one by its batch id).
        for element in &mut expressions {
            let ListAttribute::Element(attrs) = element else {
                continue;
            };
            for attr in attrs {
                let ExpressionAttribute::Data(Expressions::Lookup(items)) = attr else {
                    continue;
                };
                let name = items.iter().find_map(|l| match l {
                    Lookup::Set(n) => Some(n.clone()),
                    _ => None,
                });
                let id = items.iter().find_map(|l| match l {
                    Lookup::SetId(i) => Some(*i),
                    _ => None,
                });
                let resolved = self.set_name(&table_name, &name.unwrap_or_default(), id);
                items.retain(|l| !matches!(l, Lookup::SetId(_)));
                for item in items.iter_mut() {
                    if let Lookup::Set(n) = item {
                        n.clone_from(&resolved);
                    }
                }
            }
        }
        let table = self.table(family, &table_name)?;
        if table.chain(&chain_name).is_none() {
            return Err(libc::ENOENT);
        }
        if lookups(&expressions).iter().any(|s| table.set(s).is_none()) {
            return Err(libc::ENOENT);
        }
        if jumps(&expressions).iter().any(|c| table.chain(c).is_none()) {
            return Err(libc::ENOENT);
        }
        let handle = table.handle();
        let rule = FakeRule {
            handle,
            expressions,
            udata,
        };
        let chain = table.chain_mut(&chain_name).ok_or(libc::ENOENT)?;
        if flags & NLM_F_APPEND != 0 {
            chain.rules.push(rule);
        } else {
            chain.rules.insert(0, rule);
        }
        Ok(())
    }
}
