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
//! Not modelled: interval overlap checks, counters' values, objects, flowtables, table
//! flags, `NLM_F_REPLACE` and rule positions, and set element timeouts.
//!
//! The batch's messages are applied by `transaction`, gets and dumps answered by `dump`.

use super::wire::{self, Framed};
use super::Transport;
use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_DUMP};
use netlink_packet_netfilter::nftables::{
    ChainAttribute, ChainMessage, DataAttribute, ExpressionAttribute, Expressions, GenAttribute,
    GenMessage, Hook, Immediate, ListAttribute, Lookup, NfTablesMessage, RuleAttribute,
    RuleMessage, SetAttribute, SetDescription, SetElementList, SetElementMessage, SetFlags,
    SetMessage, TableAttribute, TableMessage, VerdictAttribute,
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
    /// A dynamic set's default timeout, in milliseconds.
    pub timeout: Option<u64>,
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
            told.push(nft_message(
                family,
                anonymous,
                Envelope {
                    flags: 0,
                    seq: 0,
                    port: 0,
                },
                shared.generation,
            ));
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
            crate::netlink::framing::pad(&mut out);
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
                        crate::netlink::framing::pad(&mut out);
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
    crate::netlink::framing::pad(&mut msg);
    msg
}

/// The netlink header's fields a kernel message is sent with: its flags, the sequence number
/// it answers (0: a notification) and the port it goes to.
#[derive(Clone, Copy, Debug)]
struct Envelope {
    flags: u16,
    seq: u32,
    port: u32,
}

/// An nf_tables message as the kernel sends it.
fn nft_message(
    family: NetfilterProtoFamily,
    message: NfTablesMessage,
    envelope: Envelope,
    generation: u32,
) -> Vec<u8> {
    let Envelope { flags, seq, port } = envelope;
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

/// The notification of a committed message: the message itself, as an event (no request or
/// acknowledgement flags). The kernel's carry the object as it now is; what a listener reads
/// of them (the family and the table's name, attribute 1 of every object) is the same.
fn notification(request: &Request) -> Vec<u8> {
    let mut told = request.bytes.clone();
    told[6..8].copy_from_slice(&0u16.to_ne_bytes());
    crate::netlink::framing::pad(&mut told);
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
            Envelope {
                flags: 0,
                seq: 0,
                port,
            },
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
                Envelope {
                    flags: 0,
                    seq: request.seq,
                    port,
                },
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
                        Envelope {
                            flags: NLM_F_MULTI,
                            seq: request.seq,
                            port,
                        },
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
                        Envelope {
                            flags: 0,
                            seq: request.seq,
                            port,
                        },
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

mod dump;
#[cfg(test)]
mod tests;
mod transaction;

use dump::objects;
use transaction::Transaction;
