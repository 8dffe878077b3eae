//! A fake nf_tables kernel for root-free tests: a [`Transport`] that applies batches to an
//! in-memory ruleset and answers as the kernel does (one layer below knftables' `fake.go`).
//!
//! Modelled: tables (name, comment udata, handle), chains (base hook, type, policy), sets
//! (key type and length, flags, `__set%d` names for anonymous ones, batch ids) with their
//! elements (key and interval-end flag), rules (expressions as the batch carried them, a
//! lookup's set resolved to its name, handles, append or prepend, comments), and the
//! generation id. A batch is all or nothing: every message is processed (later ones see the
//! earlier ones' changes), each one with `NLM_F_ACK` or an error answers with an
//! `NLMSG_ERROR` carrying its sequence number (an error echoes the whole message, an
//! acknowledgement its header), and only a batch without errors and with its end commits and
//! moves the generation by one. The errnos are the kernel's (checked on 6.18 with nft in a
//! throwaway namespace): ENOENT for a missing table, chain, set, element, rule handle or jump
//! target; EEXIST for an object created with `NLM_F_EXCL` that exists or a set declared again
//! with another type; EOPNOTSUPP for a base chain declared again with another hook; EBUSY for
//! a set a rule looks up or a chain a rule jumps to. Gets answer with the object and an
//! acknowledgement, dumps with `NLM_F_MULTI` parts ending in `NLMSG_DONE`, GETGEN with the id.
//!
//! Faults armed by a test break one answer each: cut short, with another sequence number,
//! an error for a message not in the batch, or a dump flagged `NLM_F_DUMP_INTR` (nothing
//! commits during a dump here otherwise).
//!
//! A socket subscribed with [`FakeKernel::subscribe`] hears every commit: one notification
//! per message of the batch (the kernel sends one per object it changed, none for a no-op
//! re-add, one per element), then NEWGEN with the new id; an [`FakeKernel::edit`] is heard as
//! a change to an unnamed table of each family. The backend does not listen to the fake (its
//! monitor is a kernel socket of its own): through the fake, every moved id means a full read.
//!
//! Not modelled: interval overlap checks, counters' values, objects, flowtables, table flags, `NLM_F_REPLACE`
//! and rule positions, and set element timeouts.

use super::wire::{self, Framed};
use super::Transport;
use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_APPEND, NLM_F_DUMP, NLM_F_EXCL,
};
use netlink_packet_netfilter::nftables::{
    ChainAttribute, ChainMessage, DataAttribute, ExpressionAttribute, Expressions, GenAttribute,
    GenMessage, Hook, Immediate, ListAttribute, Lookup, NfTablesMessage, RuleAttribute,
    RuleMessage, SetAttribute, SetDescription, SetElementAttribute, SetElementFlags,
    SetElementList, SetElementMessage, SetFlags, SetMessage, TableAttribute, TableMessage,
    VerdictAttribute,
};
use netlink_packet_netfilter::{
    NetfilterHeader, NetfilterMessage, NetfilterMessageInner, NetfilterProtoFamily,
};
use std::collections::{BTreeSet, VecDeque};
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NFNL_MSG_BATCH_BEGIN: u16 = 16;
const NFNL_MSG_BATCH_END: u16 = 17;
/// `NLM_F_CAPPED`: an acknowledgement echoes only the header of its message.
const NLM_F_CAPPED: u16 = 0x100;
/// `NLM_F_MULTI`: a part of a multi-part answer.
const NLM_F_MULTI: u16 = 0x2;
/// `NLM_F_DUMP_INTR`: the ruleset changed while the dump was made.
const NLM_F_DUMP_INTR: u16 = 0x10;
/// How many elements one part of a set-element dump carries.
const ELEMENTS_PER_PART: usize = 256;

/// A table in the fake ruleset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FakeTable {
    pub family: NetfilterProtoFamily,
    pub name: String,
    pub handle: u64,
    pub udata: Option<Vec<u8>>,
    pub chains: Vec<FakeChain>,
    pub sets: Vec<FakeSet>,
    next_handle: u64,
}

/// A chain: a base chain has its hook, type and policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FakeChain {
    pub name: String,
    pub handle: u64,
    pub hook: Option<Vec<Hook>>,
    pub kind: Option<String>,
    pub policy: Option<u32>,
    pub rules: Vec<FakeRule>,
}

/// A rule: its expressions as the batch carried them (a lookup names its set), its comment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FakeRule {
    pub handle: u64,
    pub expressions: Vec<ListAttribute<ExpressionAttribute>>,
    pub udata: Option<Vec<u8>>,
}

/// A set and its elements: `(key, interval end)` each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FakeSet {
    pub name: String,
    pub handle: u64,
    pub flags: SetFlags,
    pub key_type: u32,
    pub key_len: u32,
    pub description: Option<Vec<SetDescription>>,
    pub elements: BTreeSet<(Vec<u8>, bool)>,
}

/// The whole in-memory ruleset of one network namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FakeRuleset {
    pub tables: Vec<FakeTable>,
    next_table_handle: u64,
}

/// What a fault strikes: the answer to the next batch, dump (or get), or GETGEN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Strikes {
    Batch,
    Dump,
    GetGen,
}

/// A hostile or broken answer, for the next request of its kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The answer's first datagram is cut in the middle of a message.
    Truncated,
    /// Every message of the answer carries another sequence number.
    WrongSequence,
    /// The batch is refused (nothing commits), but the error names a message that is not in it.
    ErrorForAnotherMessage,
    /// Every part of a dump carries `NLM_F_DUMP_INTR`, as when a commit came in during it.
    DumpInterrupted,
}

/// What the fake counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Batches received, committed or not.
    pub batches: usize,
    pub commits: usize,
    pub dumps: usize,
    pub gets: usize,
    pub getgens: usize,
}

#[derive(Debug, Default)]
struct Shared {
    ruleset: FakeRuleset,
    generation: u32,
    counts: Counts,
    faults: Vec<(Strikes, Fault)>,
    next_port: u32,
    /// The notifications waiting for each subscribed socket, by its port id.
    listeners: Vec<(u32, VecDeque<Vec<u8>>)>,
}

/// The fake kernel: cheap to clone, every clone and every socket sees one ruleset.
#[derive(Clone, Debug, Default)]
pub(crate) struct FakeKernel {
    shared: Arc<Mutex<Shared>>,
}

/// One netlink socket to the fake: answers queue here as the kernel would send them.
pub(crate) struct FakeSocket {
    shared: Arc<Mutex<Shared>>,
    port: u32,
    inbox: VecDeque<Vec<u8>>,
    /// Subscribed to the notifications (`NFNLGRP_NFTABLES`).
    listening: bool,
}

impl FakeKernel {
    pub fn new() -> Self {
        let kernel = FakeKernel::default();
        kernel.lock().generation = 1;
        kernel
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new socket (its own port id and receive queue).
    pub fn socket(&self) -> FakeSocket {
        let mut shared = self.lock();
        shared.next_port += 1;
        FakeSocket {
            shared: Arc::clone(&self.shared),
            port: 1000 + shared.next_port,
            inbox: VecDeque::new(),
            listening: false,
        }
    }

    /// A socket subscribed to the notifications of every commit from now on.
    pub fn subscribe(&self) -> FakeSocket {
        let mut socket = self.socket();
        socket.listening = true;
        self.lock().listeners.push((socket.port, VecDeque::new()));
        socket
    }

    pub fn generation(&self) -> u32 {
        self.lock().generation
    }

    pub fn ruleset(&self) -> FakeRuleset {
        self.lock().ruleset.clone()
    }

    pub fn counts(&self) -> Counts {
        self.lock().counts.clone()
    }

    /// Arms `fault` for the next answer that `strikes` names.
    pub fn arm(&self, strikes: Strikes, fault: Fault) {
        self.lock().faults.push((strikes, fault));
    }

    /// Changes the ruleset behind every socket's back, as one commit (the id moves).
    pub fn edit(&self, change: impl FnOnce(&mut FakeRuleset)) {
        let mut shared = self.lock();
        change(&mut shared.ruleset);
        shared.generation = shared.generation.wrapping_add(1);
        // Which table changed is not known: notifications naming none, in both families.
        let mut told = Vec::new();
        for family in [NetfilterProtoFamily::IPv4, NetfilterProtoFamily::IPv6] {
            let anonymous = NfTablesMessage::NewTable(TableMessage { attributes: vec![] });
            told.push(nft_message(family, anonymous, (0, 0, 0), shared.generation));
        }
        shared.notify(told, 0);
    }
}

impl FakeKernel {
    /// Table `table` of `family` as its dumps answer over a socket (the table, its chains,
    /// each set followed by its elements, the rules), as one byte stream of those messages:
    /// what [`super::script::render`] reads back into nft syntax.
    pub fn listing(&self, family: NetfilterProtoFamily, table: &str) -> Result<Vec<u8>, String> {
        let mut socket = self.socket();
        let mut out = socket.answer(
            family,
            NfTablesMessage::GetTable(TableMessage {
                attributes: vec![TableAttribute::Name(table.into())],
            }),
            false,
        )?;
        out.extend(socket.answer(
            family,
            NfTablesMessage::GetChain(ChainMessage {
                attributes: vec![ChainAttribute::Table(table.into())],
            }),
            true,
        )?);
        let sets = socket.answer(
            family,
            NfTablesMessage::GetSet(SetMessage {
                attributes: vec![SetAttribute::Table(table.into())],
            }),
            true,
        )?;
        for framed in wire::frames(&sets)? {
            let name = match wire::parse(&framed)?.inner {
                NetfilterMessageInner::NfTables(NfTablesMessage::NewSet(set)) => {
                    wire::Named::names(&set.attributes[..]).1.to_string()
                }
                _ => continue,
            };
            out.extend_from_slice(framed.bytes);
            out.resize(out.len().next_multiple_of(4), 0);
            out.extend(socket.answer(
                family,
                NfTablesMessage::GetSetElement(SetElementMessage {
                    attributes: vec![
                        SetElementList::Table(table.into()),
                        SetElementList::Set(name),
                    ],
                }),
                true,
            )?);
        }
        out.extend(socket.answer(
            family,
            NfTablesMessage::GetRule(RuleMessage {
                attributes: vec![RuleAttribute::Table(table.into())],
            }),
            true,
        )?);
        Ok(out)
    }
}

impl FakeSocket {
    /// The object messages answering one request (acknowledgements and ends left out); an
    /// errno answer is an error.
    fn answer(
        &mut self,
        family: NetfilterProtoFamily,
        message: NfTablesMessage,
        dump: bool,
    ) -> Result<Vec<u8>, String> {
        let seq = super::sequence(1);
        self.send(&wire::request(family, message, dump, seq))
            .map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        while let Some(datagram) = self.inbox.pop_front() {
            for framed in wire::frames(&datagram)? {
                match framed.kind {
                    NLMSG_ERROR | NLMSG_DONE => match wire::error_code(&framed) {
                        Some(0) => {}
                        code => return Err(format!("errno {code:?}")),
                    },
                    _ => {
                        out.extend_from_slice(framed.bytes);
                        out.resize(out.len().next_multiple_of(4), 0);
                    }
                }
            }
        }
        Ok(out)
    }
}

impl FakeRuleset {
    pub fn table(&self, family: NetfilterProtoFamily, name: &str) -> Option<&FakeTable> {
        self.tables
            .iter()
            .find(|t| t.family == family && t.name == name)
    }

    pub fn table_mut(
        &mut self,
        family: NetfilterProtoFamily,
        name: &str,
    ) -> Option<&mut FakeTable> {
        self.tables
            .iter_mut()
            .find(|t| t.family == family && t.name == name)
    }
}

impl FakeTable {
    pub fn chain(&self, name: &str) -> Option<&FakeChain> {
        self.chains.iter().find(|c| c.name == name)
    }

    pub fn chain_mut(&mut self, name: &str) -> Option<&mut FakeChain> {
        self.chains.iter_mut().find(|c| c.name == name)
    }

    pub fn set(&self, name: &str) -> Option<&FakeSet> {
        self.sets.iter().find(|s| s.name == name)
    }

    pub fn set_mut(&mut self, name: &str) -> Option<&mut FakeSet> {
        self.sets.iter_mut().find(|s| s.name == name)
    }

    fn handle(&mut self) -> u64 {
        self.next_handle += 1;
        self.next_handle
    }

    /// Whether a rule of the table looks up set `name`.
    fn set_in_use(&self, name: &str) -> bool {
        self.chains
            .iter()
            .flat_map(|c| &c.rules)
            .any(|r| lookups(&r.expressions).iter().any(|set| set == name))
    }

    /// Whether a rule of another chain jumps (or goes) to chain `name`.
    fn chain_in_use(&self, name: &str) -> bool {
        self.chains
            .iter()
            .filter(|c| c.name != name)
            .flat_map(|c| &c.rules)
            .any(|r| jumps(&r.expressions).iter().any(|target| target == name))
    }

    /// Deletes the rules of chain `index` matching `handle` (every one without), with the
    /// anonymous sets only they looked up.
    fn delete_rules(&mut self, index: usize, handle: Option<u64>) -> Result<(), i32> {
        let rules = &mut self.chains[index].rules;
        let gone: Vec<FakeRule> = match handle {
            Some(handle) => {
                let at = rules
                    .iter()
                    .position(|r| r.handle == handle)
                    .ok_or(libc::ENOENT)?;
                vec![rules.remove(at)]
            }
            None => std::mem::take(rules),
        };
        for name in gone.iter().flat_map(|r| lookups(&r.expressions)) {
            let anonymous = self
                .set(&name)
                .is_some_and(|s| s.flags.contains(SetFlags::Anonymous));
            if anonymous && !self.set_in_use(&name) {
                self.sets.retain(|s| s.name != name);
            }
        }
        Ok(())
    }
}

/// The sets a rule's expressions look up, by name.
fn lookups(expressions: &[ListAttribute<ExpressionAttribute>]) -> Vec<String> {
    let mut found = Vec::new();
    for attr in expression_data(expressions) {
        if let Expressions::Lookup(items) = attr {
            found.extend(items.iter().filter_map(|l| match l {
                Lookup::Set(name) => Some(name.clone()),
                _ => None,
            }));
        }
    }
    found
}

/// The chains a rule's expressions jump or go to.
fn jumps(expressions: &[ListAttribute<ExpressionAttribute>]) -> Vec<String> {
    let mut found = Vec::new();
    for attr in expression_data(expressions) {
        if let Expressions::Immediate(items) = attr {
            for item in items {
                if let Immediate::Data(DataAttribute::Verdict(verdict)) = item {
                    found.extend(verdict.iter().filter_map(|v| match v {
                        VerdictAttribute::Chain(chain) => Some(chain.clone()),
                        _ => None,
                    }));
                }
            }
        }
    }
    found
}

fn expression_data(
    expressions: &[ListAttribute<ExpressionAttribute>],
) -> impl Iterator<Item = &Expressions> {
    expressions.iter().flat_map(|e| match e {
        ListAttribute::Element(attrs) => attrs
            .iter()
            .filter_map(|a| match a {
                ExpressionAttribute::Data(data) => Some(data),
                _ => None,
            })
            .collect::<Vec<_>>(),
        _ => Vec::new(),
    })
}

/// One framed message's header fields, kept for its answer.
struct Request {
    kind: u16,
    flags: u16,
    seq: u32,
    bytes: Vec<u8>,
}

impl Request {
    fn of(framed: &Framed<'_>) -> Self {
        Request {
            kind: framed.kind,
            flags: framed.flags,
            seq: framed.seq,
            bytes: framed.bytes.to_vec(),
        }
    }
}

/// An `NLMSG_ERROR` answering `request` with `errno` (0: an acknowledgement).
fn error_message(request: &Request, errno: i32, port: u32) -> Vec<u8> {
    let echoed: &[u8] = if errno == 0 {
        &request.bytes[..16]
    } else {
        &request.bytes
    };
    let flags = if errno == 0 { NLM_F_CAPPED } else { 0 };
    let mut payload = (-errno).to_ne_bytes().to_vec();
    payload.extend_from_slice(echoed);
    raw(NLMSG_ERROR, flags, request.seq, port, &payload)
}

/// A netlink message of `kind` with `payload`.
fn raw(kind: u16, flags: u16, seq: u32, port: u32, payload: &[u8]) -> Vec<u8> {
    let mut msg = Vec::with_capacity(16 + payload.len());
    msg.extend_from_slice(&(16 + payload.len() as u32).to_ne_bytes());
    msg.extend_from_slice(&kind.to_ne_bytes());
    msg.extend_from_slice(&flags.to_ne_bytes());
    msg.extend_from_slice(&seq.to_ne_bytes());
    msg.extend_from_slice(&port.to_ne_bytes());
    msg.extend_from_slice(payload);
    msg.resize(msg.len().next_multiple_of(4), 0);
    msg
}

/// An nf_tables message as the kernel sends it.
fn nft_message(
    family: NetfilterProtoFamily,
    message: NfTablesMessage,
    (flags, seq, port): (u16, u32, u32),
    generation: u32,
) -> Vec<u8> {
    let mut msg = NetlinkMessage::new(
        NetlinkHeader::default(),
        NetlinkPayload::InnerMessage(NetfilterMessage::new(
            NetfilterHeader::new(family, 0, (generation & 0xffff) as u16),
            message,
        )),
    );
    msg.header.flags = flags;
    msg.header.sequence_number = seq;
    msg.header.port_number = port;
    msg.finalize();
    let mut buf = vec![0; msg.buffer_len()];
    msg.serialize(&mut buf);
    buf
}

fn done(seq: u32, port: u32, errno: i32) -> Vec<u8> {
    raw(NLMSG_DONE, NLM_F_MULTI, seq, port, &(-errno).to_ne_bytes())
}

/// Whether a family of a request matches a table's (`Unspec` matches every family).
fn family_matches(asked: NetfilterProtoFamily, table: NetfilterProtoFamily) -> bool {
    asked == NetfilterProtoFamily::Unspec || asked == table
}

/// A batch in progress: the working copy and the sets it created, by batch id.
struct Transaction {
    ruleset: FakeRuleset,
    set_ids: Vec<(u32, String, String)>,
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

    fn apply(
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

/// The notification of a committed message: the message itself, as an event (no request or
/// acknowledgement flags). The kernel's carry the object as it now is; what a listener reads
/// of them (the family and the table's name, attribute 1 of every object) is the same.
fn notification(request: &Request) -> Vec<u8> {
    let mut told = request.bytes.clone();
    told[6..8].copy_from_slice(&0u16.to_ne_bytes());
    told.resize(told.len().next_multiple_of(4), 0);
    told
}

impl Shared {
    /// Queues a commit's notifications, then its NEWGEN, for every subscribed socket.
    fn notify(&mut self, mut told: Vec<Vec<u8>>, port: u32) {
        let gen = GenMessage {
            attributes: vec![GenAttribute::Id(self.generation)],
        };
        told.push(nft_message(
            NetfilterProtoFamily::Unspec,
            NfTablesMessage::NewGen(gen),
            (0, 0, port),
            self.generation,
        ));
        for (_, queue) in &mut self.listeners {
            queue.extend(told.iter().cloned());
        }
    }

    /// Takes the armed fault for `strikes`, if any.
    fn fault(&mut self, strikes: Strikes) -> Option<Fault> {
        let at = self.faults.iter().position(|(s, _)| *s == strikes)?;
        Some(self.faults.remove(at).1)
    }

    /// Processes a batch; the answers, one datagram each.
    fn batch(
        &mut self,
        requests: &[(Request, Option<NetfilterMessage>)],
        port: u32,
    ) -> Vec<Vec<u8>> {
        self.counts.batches += 1;
        let mut transaction = Transaction {
            ruleset: self.ruleset.clone(),
            set_ids: Vec::new(),
        };
        let mut answers = Vec::new();
        let mut failed = false;
        let mut ended = false;
        for (request, message) in requests {
            match request.kind {
                NFNL_MSG_BATCH_BEGIN => continue,
                NFNL_MSG_BATCH_END => {
                    ended = true;
                    break;
                }
                _ => {}
            }
            let outcome = match message {
                Some(NetfilterMessage {
                    header,
                    inner: NetfilterMessageInner::NfTables(m),
                    ..
                }) => transaction.apply(header.family, m.clone(), request.flags),
                _ => Err(libc::EINVAL),
            };
            let errno = outcome.err().unwrap_or(0);
            failed |= errno != 0;
            if request.flags & NLM_F_ACK != 0 || errno != 0 {
                answers.push(error_message(request, errno, port));
            }
        }
        let fault = self.fault(Strikes::Batch);
        if fault == Some(Fault::ErrorForAnotherMessage) {
            let last = requests.iter().map(|(r, _)| r.seq).max().unwrap_or(0);
            let stranger = Request {
                kind: 0,
                flags: 0,
                seq: last.wrapping_add(1000),
                bytes: vec![0; 16],
            };
            answers.pop();
            answers.push(error_message(&stranger, libc::ENOENT, port));
            return answers;
        }
        if !failed && ended {
            self.ruleset = transaction.ruleset;
            self.generation = self.generation.wrapping_add(1);
            self.counts.commits += 1;
            let told = requests
                .iter()
                .filter(|(r, _)| !matches!(r.kind, NFNL_MSG_BATCH_BEGIN | NFNL_MSG_BATCH_END))
                .map(|(r, _)| notification(r))
                .collect();
            self.notify(told, port);
        }
        tamper(answers, fault)
    }

    /// Answers a get or a dump.
    fn query(
        &mut self,
        request: &Request,
        message: Option<NetfilterMessage>,
        port: u32,
    ) -> Vec<Vec<u8>> {
        let dump = request.flags & NLM_F_DUMP == NLM_F_DUMP;
        let Some(NetfilterMessage {
            header,
            inner: NetfilterMessageInner::NfTables(m),
            ..
        }) = message
        else {
            return vec![error_message(request, libc::EINVAL, port)];
        };
        if let NfTablesMessage::GetGen(_) = m {
            self.counts.getgens += 1;
            let gen = GenMessage {
                attributes: vec![
                    GenAttribute::Id(self.generation),
                    GenAttribute::ProcPid(std::process::id()),
                    GenAttribute::ProcName("ipmasq".into()),
                ],
            };
            let reply = nft_message(
                NetfilterProtoFamily::Unspec,
                NfTablesMessage::NewGen(gen),
                (0, request.seq, port),
                self.generation,
            );
            let fault = self.fault(Strikes::GetGen);
            return tamper(vec![reply], fault);
        }
        if dump {
            self.counts.dumps += 1;
        } else {
            self.counts.gets += 1;
        }
        let found = objects(&self.ruleset, header.family, &m, dump);
        let mut answers = Vec::new();
        match found {
            Err(errno) => answers.push(error_message(request, errno, port)),
            Ok(objects) if dump => {
                for (family, object) in objects {
                    answers.push(nft_message(
                        family,
                        object,
                        (NLM_F_MULTI, request.seq, port),
                        self.generation,
                    ));
                }
                answers.push(done(request.seq, port, 0));
            }
            Ok(objects) => {
                for (family, object) in objects {
                    answers.push(nft_message(
                        family,
                        object,
                        (0, request.seq, port),
                        self.generation,
                    ));
                }
                if request.flags & NLM_F_ACK != 0 {
                    answers.push(error_message(request, 0, port));
                }
            }
        }
        let fault = self.fault(Strikes::Dump);
        tamper(answers, fault)
    }
}

/// The answers as `fault` breaks them.
fn tamper(mut answers: Vec<Vec<u8>>, fault: Option<Fault>) -> Vec<Vec<u8>> {
    match fault {
        None | Some(Fault::ErrorForAnotherMessage) => {}
        Some(Fault::Truncated) => {
            if let Some(first) = answers.first_mut() {
                let keep = (first.len() / 2).max(1);
                first.truncate(keep);
            }
        }
        Some(Fault::DumpInterrupted) => {
            for answer in &mut answers {
                if answer.len() >= 8 {
                    let flags = u16::from_ne_bytes([answer[6], answer[7]]) | NLM_F_DUMP_INTR;
                    answer[6..8].copy_from_slice(&flags.to_ne_bytes());
                }
            }
        }
        Some(Fault::WrongSequence) => {
            for answer in &mut answers {
                if answer.len() >= 12 {
                    let seq = u32::from_ne_bytes([answer[8], answer[9], answer[10], answer[11]]);
                    answer[8..12].copy_from_slice(&seq.wrapping_add(7919).to_ne_bytes());
                }
            }
        }
    }
    answers
}

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
fn objects(
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

impl Transport for FakeSocket {
    fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        let framed =
            wire::frames(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        let requests: Vec<(Request, Option<NetfilterMessage>)> = framed
            .iter()
            .map(|f| {
                let batch_control = matches!(f.kind, NFNL_MSG_BATCH_BEGIN | NFNL_MSG_BATCH_END);
                let message = (!batch_control).then(|| wire::parse(f).ok()).flatten();
                (Request::of(f), message)
            })
            .collect();
        let answers = match requests.first() {
            Some((first, _)) if first.kind == NFNL_MSG_BATCH_BEGIN => {
                shared.batch(&requests, self.port)
            }
            _ => {
                let mut answers = Vec::new();
                for (request, message) in requests {
                    answers.extend(shared.query(&request, message, self.port));
                }
                answers
            }
        };
        self.inbox.extend(answers);
        Ok(())
    }

    /// The next answer; the fake answers as it receives, so an empty queue means no answer
    /// will come: `TimedOut` at once, whatever the deadline.
    fn receive(&mut self, _deadline: Instant) -> io::Result<Vec<u8>> {
        if let Some(answer) = self.inbox.pop_front() {
            return Ok(answer);
        }
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        let port = self.port;
        shared
            .listeners
            .iter_mut()
            .find(|(listener, _)| self.listening && *listener == port)
            .and_then(|(_, queue)| queue.pop_front())
            .ok_or_else(|| io::ErrorKind::TimedOut.into())
    }
}

#[cfg(test)]
mod tests;
