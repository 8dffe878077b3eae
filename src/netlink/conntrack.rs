//! ctnetlink, the conntrack table over netlink: a family's entries dumped and parsed without
//! allocation per entry (a table holds hundreds of thousands), and deletes that echo an
//! entry's own original tuple, zone and id, batched and acknowledged while the dump runs.
//! Hand-framed messages of a few fixed layouts. Which entries to delete is decided above, in
//! `crate::conntrack`.
//!
//! The parser stays by hand, measured against `netlink-packet-netfilter` 0.4's conntrack
//! decoding (step 17's rule: the crate if its median is at most 1.2× this parser's). The
//! crate decodes all the policy needs (IPv4 and IPv6 tuples, ports, the id and the zone as
//! raw attributes, and re-emits the original tuple and zone byte for byte), but owns every
//! attribute and allocates per entry, and is several times slower on a 100,000-entry dump
//! (the figures: docs/benchmarks.md). Rerun: `cargo bench --bench conntrack_parser` or
//! `scripts/bench --only conntrack-parser` (`benches/conntrack_parser.rs`).

use super::dump::{self, Deadlines};
use super::framing::{self, NLMSG_ERROR, NLM_F_ACK, NLM_F_DUMP};
use super::{Socket, NETLINK_NETFILTER};
use crate::plan::Family;
use std::io;
use std::net::IpAddr;
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

pub(super) const NFNL_SUBSYS_CTNETLINK: u16 = 1;
const IPCTNL_MSG_CT_NEW: u16 = 0;
const IPCTNL_MSG_CT_GET: u16 = 1;
const IPCTNL_MSG_CT_DELETE: u16 = 2;
const NFGENMSG_LEN: usize = 4;
const CTA_TUPLE_ORIG: u16 = 1;
const CTA_TUPLE_REPLY: u16 = 2;
const CTA_ID: u16 = 12;
const CTA_ZONE: u16 = 18;
const CTA_TUPLE_IP: u16 = 1;
const CTA_TUPLE_PROTO: u16 = 2;
const CTA_IP_V4_SRC: u16 = 1;
const CTA_IP_V4_DST: u16 = 2;
const CTA_IP_V6_SRC: u16 = 3;
const CTA_IP_V6_DST: u16 = 4;
const CTA_PROTO_NUM: u16 = 1;
const CTA_PROTO_SRC_PORT: u16 = 2;
const CTA_PROTO_DST_PORT: u16 = 3;
/// An ICMP or ICMPv6 echo's identifier: in the tuple in place of ports (MASQUERADE rewrites
/// it as it rewrites a source port).
const CTA_PROTO_ICMP_ID: u16 = 4;
const CTA_PROTO_ICMPV6_ID: u16 = 7;
/// A dump may wait this long for its next part, and this long in all (a million entries
/// take a few seconds).
const DUMP_DEADLINES: Deadlines = Deadlines {
    quiet: Duration::from_secs(5),
    overall: Duration::from_secs(60),
};
/// Deletes are sent in datagrams of about this size (about 200 deletes), each batch
/// acknowledged before the next.
const DELETE_BATCH: usize = 16 * 1024;
/// The receive buffer asked for: room for a batch's acknowledgements many times over.
const RECEIVE_BUFFER: libc::c_int = 4 << 20;

/// A ctnetlink socket whose receive buffer holds a batch's acknowledgements: the kernel
/// queues one per delete, each charged far more than its bytes, and a full buffer drops them
/// (ENOBUFS).
pub(crate) fn socket() -> io::Result<Socket> {
    let socket = Socket::request(NETLINK_NETFILTER)?;
    socket.grow_receive_buffer(RECEIVE_BUFFER);
    Ok(socket)
}

fn nfproto(family: Family) -> u8 {
    match family {
        Family::V4 => libc::AF_INET as u8,
        Family::V6 => libc::AF_INET6 as u8,
    }
}

/// A ctnetlink request header: netlink header (length filled in later) and nfgenmsg.
fn request_header(message: u16, flags: u16, seq: u32, family: Family) -> Vec<u8> {
    let kind = (NFNL_SUBSYS_CTNETLINK << 8) | message;
    let mut out = framing::request(kind, flags, seq, 128);
    out.extend_from_slice(&[nfproto(family), 0, 0, 0]);
    out
}

fn finish(mut message: Vec<u8>) -> Vec<u8> {
    framing::finish(&mut message);
    message
}

/// The attributes of a payload with each one's whole bytes: `(type, value, whole)`.
fn raw_attributes(data: &[u8]) -> impl Iterator<Item = (u16, &[u8], &[u8])> {
    framing::attributes_whole(data)
}

/// A tuple's `(source, destination, protocol, source port, destination port)`.
/// Source, destination, protocol, source and destination ports, ICMP id.
type Tuple = (IpAddr, IpAddr, u8, Option<u16>, Option<u16>, Option<u16>);

fn tuple_of(value: &[u8]) -> Option<Tuple> {
    let (mut source, mut destination, mut protocol) = (None, None, None);
    let (mut source_port, mut destination_port, mut icmp_id) = (None, None, None);
    let address = |v: &[u8]| match v.len() {
        4 => Some(IpAddr::from(<[u8; 4]>::try_from(v).ok()?)),
        16 => Some(IpAddr::from(<[u8; 16]>::try_from(v).ok()?)),
        _ => None,
    };
    let port = |v: &[u8]| Some(u16::from_be_bytes(v.get(..2)?.try_into().ok()?));
    for (kind, value, _) in raw_attributes(value) {
        match kind {
            CTA_TUPLE_IP => {
                for (kind, value, _) in raw_attributes(value) {
                    match kind {
                        CTA_IP_V4_SRC | CTA_IP_V6_SRC => source = address(value),
                        CTA_IP_V4_DST | CTA_IP_V6_DST => destination = address(value),
                        _ => {}
                    }
                }
            }
            CTA_TUPLE_PROTO => {
                for (kind, value, _) in raw_attributes(value) {
                    match kind {
                        CTA_PROTO_NUM => protocol = value.first().copied(),
                        CTA_PROTO_SRC_PORT => source_port = port(value),
                        CTA_PROTO_DST_PORT => destination_port = port(value),
                        CTA_PROTO_ICMP_ID | CTA_PROTO_ICMPV6_ID => icmp_id = port(value),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Some((
        source?,
        destination?,
        protocol?,
        source_port,
        destination_port,
        icmp_id,
    ))
}

/// One entry of a dump (the payload after the netlink header), and the attributes that name
/// it for a delete: its original tuple and zone, whole.
pub(crate) struct Parsed<'a> {
    pub flow: Flow,
    original: &'a [u8],
    zone: Option<&'a [u8]>,
}

fn parse_entry(payload: &[u8]) -> Option<Parsed<'_>> {
    let family = match i32::from(*payload.first()?) {
        libc::AF_INET => Family::V4,
        libc::AF_INET6 => Family::V6,
        _ => return None,
    };
    let (mut original, mut reply, mut id, mut zone) = (None, None, None, None);
    for (kind, value, whole) in raw_attributes(payload.get(NFGENMSG_LEN..)?) {
        match kind {
            CTA_TUPLE_ORIG => original = Some((tuple_of(value)?, whole)),
            CTA_TUPLE_REPLY => reply = tuple_of(value),
            CTA_ID => id = Some(u32::from_be_bytes(value.get(..4)?.try_into().ok()?)),
            CTA_ZONE => zone = Some(whole),
            _ => {}
        }
    }
    let ((tuple, original), reply) = (original?, reply?);
    Some(Parsed {
        flow: Flow {
            family,
            protocol: tuple.2,
            source: tuple.0,
            destination: tuple.1,
            source_port: tuple.3,
            destination_port: tuple.4,
            reply_source: reply.0,
            reply_destination: reply.1,
            reply_destination_port: reply.4,
            icmp_id: tuple.5,
            reply_icmp_id: reply.5,
            id: id?,
        },
        original,
        zone,
    })
}

/// An entry's flow, and the bytes a delete echoes: the original tuple and the zone, whole.
#[doc(hidden)]
pub type EntryForBench<'a> = (Flow, &'a [u8], Option<&'a [u8]>);

/// [`parse_entry`] for `benches/conntrack_parser.rs`.
#[doc(hidden)]
pub fn parse_entry_for_bench(payload: &[u8]) -> Option<EntryForBench<'_>> {
    parse_entry(payload).map(|parsed| (parsed.flow, parsed.original, parsed.zone))
}

/// A delete of the entry `parsed` names, refused by the kernel if the entry with that tuple
/// has another id. The id hashes the entry's memory and original tuple, so an entry the same
/// flow re-created in the freed slot can carry the old id: it was made under the rules in
/// force, and deleting it costs a new entry at its next packet.
fn delete_request(parsed: &Parsed<'_>, seq: u32) -> Vec<u8> {
    let mut message = request_header(IPCTNL_MSG_CT_DELETE, NLM_F_ACK, seq, parsed.flow.family);
    message.extend_from_slice(parsed.original);
    framing::pad(&mut message);
    if let Some(zone) = parsed.zone {
        message.extend_from_slice(zone);
        framing::pad(&mut message);
    }
    framing::put_attribute(&mut message, CTA_ID, &parsed.flow.id.to_be_bytes());
    finish(message)
}

pub(crate) fn dump(
    socket: &Socket,
    family: Family,
    mut each: impl FnMut(&Parsed<'_>) -> io::Result<()>,
) -> io::Result<dump::Ended> {
    let seq = crate::netlink::sequence(1);
    let request = finish(request_header(IPCTNL_MSG_CT_GET, NLM_F_DUMP, seq, family));
    dump::dump_each(socket, &request, seq, DUMP_DEADLINES, |kind, payload| {
        if kind == (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW {
            if let Some(parsed) = parse_entry(payload) {
                each(&parsed)?;
            }
        }
        Ok(())
    })
}

/// Deletes sent and not yet acknowledged, over their own socket.
pub(crate) struct Deleter {
    socket: Socket,
    pending: Vec<u8>,
    pending_count: u32,
    first_seq: u32,
    next_seq: u32,
    pub deleted: usize,
    pub gone: usize,
}

impl Deleter {
    pub fn open() -> io::Result<Self> {
        let seq = crate::netlink::sequence(1 << 20);
        Ok(Deleter {
            socket: socket()?,
            pending: Vec::with_capacity(DELETE_BATCH + 256),
            pending_count: 0,
            first_seq: seq,
            next_seq: seq,
            deleted: 0,
            gone: 0,
        })
    }

    pub fn add(&mut self, parsed: &Parsed<'_>) -> io::Result<()> {
        let message = delete_request(parsed, self.next_seq);
        self.next_seq = self.next_seq.wrapping_add(1);
        self.pending.extend_from_slice(&message);
        self.pending_count += 1;
        if self.pending.len() >= DELETE_BATCH {
            self.flush()?;
        }
        Ok(())
    }

    /// Sends what is pending and reads one acknowledgement per delete; an entry already
    /// gone (ENOENT: expired, or replaced by a new one with another id) is counted apart.
    pub fn flush(&mut self) -> io::Result<()> {
        if self.pending_count == 0 {
            return Ok(());
        }
        self.socket.send(&self.pending)?;
        let sequences = super::Sequences {
            first: self.first_seq,
            count: self.pending_count,
        };
        self.pending.clear();
        self.pending_count = 0;
        self.first_seq = self.next_seq;
        let deadline = Instant::now() + DUMP_DEADLINES.quiet;
        let mut acknowledged = 0;
        let mut buffer = vec![0u8; 64 * 1024];
        self.socket
            .answers(sequences, deadline, &mut buffer, |framed| {
                if framed.kind != NLMSG_ERROR {
                    return ControlFlow::Continue(());
                }
                acknowledged += 1;
                match framing::error_code(framed).map(|c| -c) {
                    Some(0) => self.deleted += 1,
                    Some(libc::ENOENT) => self.gone += 1,
                    Some(errno) => {
                        return ControlFlow::Break(Err(io::Error::from_raw_os_error(errno)))
                    }
                    None => {
                        return ControlFlow::Break(Err(io::Error::from_raw_os_error(libc::EPROTO)))
                    }
                }
                if acknowledged == sequences.count {
                    ControlFlow::Break(Ok(()))
                } else {
                    ControlFlow::Continue(())
                }
            })
    }
}

/// ctnetlink's multicast groups of new and destroyed entries (NFNLGRP_CONNTRACK_NEW and
/// NFNLGRP_CONNTRACK_DESTROY); updates (NFNLGRP_CONNTRACK_UPDATE) are not joined.
const NFNLGRP_CONNTRACK_NEW: u32 = 1;
const NFNLGRP_CONNTRACK_DESTROY: u32 = 3;
const CTA_COUNTERS_ORIG: u16 = 9;
const CTA_COUNTERS_REPLY: u16 = 10;
const CTA_COUNTERS_PACKETS: u16 = 1;
const CTA_COUNTERS_BYTES: u16 = 2;
const CTA_COUNTERS32_PACKETS: u16 = 3;
const CTA_COUNTERS32_BYTES: u16 = 4;

/// A non-blocking socket in ctnetlink's new and destroy groups, both families, with a receive
/// buffer of `receive_buffer` bytes (beyond `rmem_max` as root). Every entry's events arrive
/// unless [`filter_to_source_nat`] is attached; those kept are judged above.
pub(crate) fn events(receive_buffer: usize) -> io::Result<Socket> {
    let mut socket = Socket::member_of(NETLINK_NETFILTER, NFNLGRP_CONNTRACK_NEW, receive_buffer)?;
    socket.join(NFNLGRP_CONNTRACK_DESTROY)?;
    Ok(socket)
}

/// Status bit of an entry whose source NAT changed its tuple (`IPS_SRC_NAT`, set when the
/// NAT binding is made, before the new event is sent, and kept to the entry's end).
const IPS_SRC_NAT: u32 = 1 << 4;
const CTA_STATUS: u16 = 3;
/// Where a ctnetlink message's attributes start: the netlink header and nfgenmsg.
const ATTRIBUTES_AT: u32 = (framing::NLMSG_HDRLEN + NFGENMSG_LEN) as u32;

/// Classic BPF, as `<linux/filter.h>` spells it: the few opcodes [`source_nat_filter`] uses.
mod cbpf {
    pub const LD: u16 = 0x00;
    pub const LDX: u16 = 0x01;
    pub const ALU: u16 = 0x04;
    pub const JMP: u16 = 0x05;
    pub const RET: u16 = 0x06;
    pub const MISC: u16 = 0x07;
    pub const W: u16 = 0x00;
    pub const H: u16 = 0x08;
    pub const IMM: u16 = 0x00;
    pub const ABS: u16 = 0x20;
    pub const IND: u16 = 0x40;
    pub const LEN: u16 = 0x80;
    pub const K: u16 = 0x00;
    pub const X: u16 = 0x08;
    pub const SUB: u16 = 0x10;
    pub const JEQ: u16 = 0x10;
    pub const JGE: u16 = 0x30;
    pub const JSET: u16 = 0x40;
    pub const TAX: u16 = 0x00;
    /// The ancillary load "offset of the netlink attribute of type X, searched from offset
    /// A" (0 when there is none): `SKF_AD_OFF + SKF_AD_NLATTR`.
    pub const NLATTR: u32 = (-0x1000i32 + 12) as u32;
}

/// One instruction, or a jump to the labels `(if true, if false)`, resolved by [`assemble`].
enum Step {
    Do(u16, u32),
    Jump(u16, u32, Label, Label),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Label {
    Next,
    Judge,
    Accept,
    Drop,
}

/// The program's steps with jumps to labels resolved into the relative offsets cBPF wants.
fn assemble(steps: &[(Option<Label>, Step)]) -> Vec<libc::sock_filter> {
    let at = |label: Label, from: usize| -> u8 {
        let target = match label {
            Label::Next => from + 1,
            _ => steps
                .iter()
                .position(|(l, _)| *l == Some(label))
                .unwrap_or(from + 1),
        };
        (target - from - 1) as u8
    };
    steps
        .iter()
        .enumerate()
        .map(|(i, (_, step))| match *step {
            Step::Do(code, k) => libc::sock_filter {
                code,
                jt: 0,
                jf: 0,
                k,
            },
            Step::Jump(code, k, yes, no) => libc::sock_filter {
                code,
                jt: at(yes, i),
                jf: at(no, i),
                k,
            },
        })
        .collect()
}

/// The events socket's filter, run by the kernel on each event before it is queued: an
/// event of an entry whose status lacks `IPS_SRC_NAT` is dropped there (a flow to a
/// non-masquerade CIDR, the node's own unNATed traffic: most of a node's flows), so it
/// neither costs a read nor fills the receive buffer. What the program cannot judge goes
/// through (fail open): a message of another type (NLMSG_ERROR, anything but a new or
/// destroyed entry), one too short, one without a status attribute or with one too short.
/// A destroy event carries the status too, so an SNATed flow's end is kept. The flows kept
/// are then judged in userspace as before ([`crate::snat::translated_by_masquerade`]): the
/// bit is set for kube-proxy's masquerade of a DNATed flow too.
pub(crate) fn source_nat_filter() -> Vec<libc::sock_filter> {
    use cbpf::*;
    // `ldh` reads big-endian; the message type is in host order.
    let loaded = |message: u16| {
        let kind = (NFNL_SUBSYS_CTNETLINK << 8) | message;
        u32::from(u16::from_be_bytes(kind.to_ne_bytes()))
    };
    let steps = [
        (None, Step::Do(LD | W | LEN, 0)),
        (
            None,
            Step::Jump(JMP | JGE | K, ATTRIBUTES_AT, Label::Next, Label::Accept),
        ),
        (None, Step::Do(LD | H | ABS, 4)),
        (
            None,
            Step::Jump(
                JMP | JEQ | K,
                loaded(IPCTNL_MSG_CT_NEW),
                Label::Judge,
                Label::Next,
            ),
        ),
        (
            None,
            Step::Jump(
                JMP | JEQ | K,
                loaded(IPCTNL_MSG_CT_DELETE),
                Label::Judge,
                Label::Accept,
            ),
        ),
        (Some(Label::Judge), Step::Do(LD | W | IMM, ATTRIBUTES_AT)),
        (None, Step::Do(LDX | W | IMM, CTA_STATUS.into())),
        (None, Step::Do(LD | W | ABS, NLATTR)),
        (
            None,
            Step::Jump(JMP | JEQ | K, 0, Label::Accept, Label::Next),
        ),
        (None, Step::Do(MISC | TAX, 0)),
        (None, Step::Do(LD | W | LEN, 0)),
        (None, Step::Do(ALU | SUB | X, 0)),
        // The attribute's header and its four bytes within the message.
        (
            None,
            Step::Jump(JMP | JGE | K, 8, Label::Next, Label::Accept),
        ),
        (None, Step::Do(LD | W | IND, 4)),
        (
            None,
            Step::Jump(JMP | JSET | K, IPS_SRC_NAT, Label::Accept, Label::Drop),
        ),
        (Some(Label::Drop), Step::Do(RET | K, 0)),
        (Some(Label::Accept), Step::Do(RET | K, u32::MAX)),
    ];
    assemble(&steps)
}

/// Attaches [`source_nat_filter`] to an [`events`] socket.
pub(crate) fn filter_to_source_nat(socket: &Socket) -> io::Result<()> {
    socket.attach_filter(&source_nat_filter())
}

/// Whether a conntrack event announces a new entry or the end of one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    New,
    End,
}

/// One conntrack event: the entry's flow, and on an end the packets and bytes of both
/// directions summed, when accounting (`nf_conntrack_acct`) gave them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    pub flow: Flow,
    pub counters: Option<(u64, u64)>,
}

/// A counter attribute's value: 64 bits, or the 32 of old kernels.
fn counter(value: &[u8]) -> Option<u64> {
    match value.len() {
        8 => Some(u64::from_be_bytes(value.try_into().ok()?)),
        4 => Some(u32::from_be_bytes(value.try_into().ok()?).into()),
        _ => None,
    }
}

/// The event a ctnetlink notification of message type `kind` carries (None for another
/// message, or one that does not parse).
pub(crate) fn parse_event(kind: u16, payload: &[u8]) -> Option<Event> {
    let kind = match kind {
        k if k == (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW => EventKind::New,
        k if k == (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_DELETE => EventKind::End,
        _ => return None,
    };
    let flow = parse_entry(payload)?.flow;
    let mut counters: Option<(u64, u64)> = None;
    if kind == EventKind::End {
        for (attribute, value, _) in raw_attributes(payload.get(NFGENMSG_LEN..)?) {
            if attribute != CTA_COUNTERS_ORIG && attribute != CTA_COUNTERS_REPLY {
                continue;
            }
            let (mut packets, mut bytes) = (0, 0);
            for (inner, value, _) in raw_attributes(value) {
                match inner {
                    CTA_COUNTERS_PACKETS | CTA_COUNTERS32_PACKETS => {
                        packets = counter(value).unwrap_or(0)
                    }
                    CTA_COUNTERS_BYTES | CTA_COUNTERS32_BYTES => {
                        bytes = counter(value).unwrap_or(0)
                    }
                    _ => {}
                }
            }
            let sum = counters.unwrap_or((0, 0));
            counters = Some((sum.0 + packets, sum.1 + bytes));
        }
    }
    Some(Event {
        kind,
        flow,
        counters,
    })
}

/// The events of one datagram read from an [`events`] socket, in order; a datagram that does
/// not frame gives none.
pub(crate) fn events_of(datagram: &[u8]) -> impl Iterator<Item = Event> + '_ {
    framing::frames(datagram)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|framed| parse_event(framed.kind, framed.bytes.get(framing::NLMSG_HDRLEN..)?))
}

/// Every entry of `family`, as `New` events (to seed what the events then keep current).
pub(crate) fn entries(family: Family, mut each: impl FnMut(Event)) -> io::Result<dump::Ended> {
    let socket = socket()?;
    dump(&socket, family, |parsed| {
        each(Event {
            kind: EventKind::New,
            flow: parsed.flow.clone(),
            counters: None,
        });
        Ok(())
    })
}

/// One tracked flow, as conntrack holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flow {
    pub family: Family,
    /// IP protocol number (6 TCP, 17 UDP, 1 ICMP, 58 ICMPv6, 132 SCTP, ...).
    pub protocol: u8,
    /// The original direction: where the first packet came from and went to.
    pub source: IpAddr,
    pub destination: IpAddr,
    pub source_port: Option<u16>,
    pub destination_port: Option<u16>,
    /// The reply direction: who answers (the destination after any DNAT) and to whom (the
    /// source after any SNAT).
    pub reply_source: IpAddr,
    pub reply_destination: IpAddr,
    /// The port the reply goes to: the source port the flow left with (after any SNAT).
    pub reply_destination_port: Option<u16>,
    /// An ICMP or ICMPv6 echo's identifier in the original direction (None for a protocol
    /// with ports): the pod's side of the flow, as a source port is.
    pub icmp_id: Option<u16>,
    /// The identifier in the reply direction: the one the flow left with (after any SNAT,
    /// which may rewrite it as it rewrites a source port).
    pub reply_icmp_id: Option<u16>,
    /// The kernel's id of the entry (what `conntrack -L -o id` prints).
    pub id: u32,
}

impl Flow {
    /// The destination our rules judged: nat postrouting runs after any DNAT, so the address
    /// that answers.
    pub fn judged_destination(&self) -> IpAddr {
        self.reply_source
    }

    /// The source port, or for ICMP the echo's identifier, which plays the port's role.
    pub fn source_port_or_id(&self) -> Option<u16> {
        self.source_port.or(self.icmp_id)
    }

    /// The source port the flow left with (after any SNAT), or for ICMP its identifier.
    pub fn translated_port_or_id(&self) -> Option<u16> {
        self.reply_destination_port.or(self.reply_icmp_id)
    }

    /// The source the flow leaves with, when NAT rewrote it.
    pub fn rewritten_to(&self) -> Option<IpAddr> {
        (self.reply_destination != self.source).then_some(self.reply_destination)
    }

    /// The protocol's name, as `conntrack -L` prints it.
    pub fn protocol_name(&self) -> String {
        match self.protocol {
            1 => "icmp".into(),
            6 => "tcp".into(),
            17 => "udp".into(),
            33 => "dccp".into(),
            58 => "icmpv6".into(),
            132 => "sctp".into(),
            136 => "udplite".into(),
            47 => "gre".into(),
            other => format!("proto {other}"),
        }
    }

    /// One line in `conntrack -L`'s words: protocol, the original tuple and where the
    /// source went.
    pub fn describe(&self) -> String {
        let port = |p: Option<u16>, name: &str| p.map_or(String::new(), |p| format!(" {name}={p}"));
        let now = match self.rewritten_to() {
            Some(to) => format!("source rewritten to {to}"),
            None => "source kept".into(),
        };
        let via = if self.reply_source != self.destination {
            format!(" (DNAT to {})", self.reply_source)
        } else {
            String::new()
        };
        format!(
            "{} src={} dst={}{}{}{via} id={}: {now}",
            self.protocol_name(),
            self.source,
            self.destination,
            port(self.source_port, "sport"),
            port(self.destination_port, "dport"),
            self.id,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::framing::{NLMSG_HDRLEN, NLM_F_REQUEST};

    fn attr(kind: u16, value: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(value);
        framing::pad(&mut out);
        out
    }

    fn nested(kind: u16, parts: &[Vec<u8>]) -> Vec<u8> {
        attr(kind | 0x8000, &parts.concat())
    }

    fn tuple(kind: u16, src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
        nested(
            kind,
            &[
                nested(
                    CTA_TUPLE_IP,
                    &[attr(CTA_IP_V4_SRC, &src), attr(CTA_IP_V4_DST, &dst)],
                ),
                nested(
                    CTA_TUPLE_PROTO,
                    &[
                        attr(CTA_PROTO_NUM, &[17]),
                        attr(CTA_PROTO_SRC_PORT, &sport.to_be_bytes()),
                        attr(CTA_PROTO_DST_PORT, &dport.to_be_bytes()),
                    ],
                ),
            ],
        )
    }

    /// The start of an entry: nfgenmsg, then both tuples of a UDP flow 192.168.1.2:40000 →
    /// 198.51.100.7:53 translated to 203.0.113.1.
    fn nfgenmsg_and_tuples() -> Vec<u8> {
        let mut payload = vec![libc::AF_INET as u8, 0, 0, 0];
        payload.extend(tuple(
            CTA_TUPLE_ORIG,
            [192, 168, 1, 2],
            [198, 51, 100, 7],
            40000,
            53,
        ));
        payload.extend(tuple(
            CTA_TUPLE_REPLY,
            [198, 51, 100, 7],
            [203, 0, 113, 1],
            53,
            40000,
        ));
        payload
    }

    /// A dumped entry as the kernel sends it: nfgenmsg, both tuples, status, id, zone.
    fn entry() -> Vec<u8> {
        let mut payload = nfgenmsg_and_tuples();
        payload.extend(attr(3, &0x1bau32.to_be_bytes()));
        payload.extend(attr(CTA_ID, &0xdead_beefu32.to_be_bytes()));
        payload.extend(attr(CTA_ZONE, &[0, 5, 0, 0]));
        payload
    }

    #[test]
    fn a_dumped_entry_parses_and_its_delete_echoes_tuple_zone_and_id() {
        let payload = entry();
        let parsed = parse_entry(&payload).expect("parses");
        assert_eq!(parsed.flow.protocol, 17);
        assert_eq!(parsed.flow.source, "192.168.1.2".parse::<IpAddr>().unwrap());
        assert_eq!(parsed.flow.destination_port, Some(53));
        assert_eq!(
            parsed.flow.rewritten_to(),
            Some("203.0.113.1".parse().unwrap())
        );
        assert_eq!(parsed.flow.id, 0xdead_beef);
        assert_eq!(
            parsed.flow.describe(),
            "udp src=192.168.1.2 dst=198.51.100.7 sport=40000 dport=53 id=3735928559: source rewritten to 203.0.113.1"
        );
        let request = delete_request(&parsed, 9);
        assert_eq!(
            u32::from_ne_bytes(request[..4].try_into().unwrap()) as usize,
            request.len()
        );
        assert_eq!(
            u16::from_ne_bytes([request[4], request[5]]),
            0x0102,
            "ctnetlink delete"
        );
        assert_eq!(
            u16::from_ne_bytes([request[6], request[7]]),
            NLM_F_REQUEST | NLM_F_ACK
        );
        let attrs: Vec<(u16, Vec<u8>)> = raw_attributes(&request[NLMSG_HDRLEN + NFGENMSG_LEN..])
            .map(|(k, v, _)| (k, v.to_vec()))
            .collect();
        let kinds: Vec<u16> = attrs.iter().map(|a| a.0).collect();
        assert_eq!(kinds, [CTA_TUPLE_ORIG, CTA_ZONE, CTA_ID]);
        assert_eq!(
            tuple_of(&attrs[0].1).unwrap().0,
            "192.168.1.2".parse::<IpAddr>().unwrap()
        );
        assert_eq!(attrs[2].1, 0xdead_beefu32.to_be_bytes());
    }

    #[test]
    fn events_carry_the_translated_port_and_on_an_end_both_directions_counters() {
        let mut payload = entry();
        let counters = |packets: u64, bytes: u64| {
            vec![
                attr(CTA_COUNTERS_PACKETS, &packets.to_be_bytes()),
                attr(CTA_COUNTERS_BYTES, &bytes.to_be_bytes()),
            ]
        };
        payload.extend(nested(CTA_COUNTERS_ORIG, &counters(3, 180)));
        payload.extend(nested(CTA_COUNTERS_REPLY, &counters(2, 120)));
        let new = parse_event(0x0100, &payload).expect("a new event");
        assert_eq!(new.kind, EventKind::New);
        assert_eq!(new.counters, None);
        assert_eq!(new.flow.reply_destination_port, Some(40000));
        let end = parse_event(0x0102, &payload).expect("a destroy event");
        assert_eq!(end.kind, EventKind::End);
        assert_eq!(end.counters, Some((5, 300)));
        // Without accounting, no counters.
        assert_eq!(parse_event(0x0102, &entry()).unwrap().counters, None);
        // Another subsystem's message is no event.
        assert!(parse_event(0x0200, &payload).is_none());
        // A datagram frames them in order.
        let mut datagram = framing::request(0x0102, 0, 0, 64);
        datagram.extend_from_slice(&payload);
        framing::finish(&mut datagram);
        let events: Vec<Event> = events_of(&datagram).collect();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].counters, Some((5, 300)));
    }

    /// An ICMP echo's tuple (`conntrack -L`'s `type=8 code=0 id=...`; the reply's `type=0`).
    fn icmp_tuple(kind: u16, src: [u8; 4], dst: [u8; 4], echo_type: u8, id: u16) -> Vec<u8> {
        nested(
            kind,
            &[
                nested(
                    CTA_TUPLE_IP,
                    &[attr(CTA_IP_V4_SRC, &src), attr(CTA_IP_V4_DST, &dst)],
                ),
                nested(
                    CTA_TUPLE_PROTO,
                    &[
                        attr(CTA_PROTO_NUM, &[1]),
                        attr(CTA_PROTO_ICMP_ID, &id.to_be_bytes()),
                        attr(5, &[echo_type]),
                        attr(6, &[0]),
                    ],
                ),
            ],
        )
    }

    #[test]
    fn an_icmp_echo_carries_its_id_in_both_directions_and_its_description_is_unchanged() {
        let mut payload = vec![libc::AF_INET as u8, 0, 0, 0];
        payload.extend(icmp_tuple(
            CTA_TUPLE_ORIG,
            [192, 168, 1, 2],
            [198, 51, 100, 7],
            8,
            0x1234,
        ));
        // MASQUERADE rewrote the id as it rewrites a port.
        payload.extend(icmp_tuple(
            CTA_TUPLE_REPLY,
            [198, 51, 100, 7],
            [203, 0, 113, 1],
            0,
            0x4321,
        ));
        payload.extend(attr(CTA_ID, &7u32.to_be_bytes()));
        let event = parse_event(0x0100, &payload).expect("a new event");
        let flow = &event.flow;
        assert_eq!((flow.source_port, flow.destination_port), (None, None));
        assert_eq!(
            (flow.icmp_id, flow.reply_icmp_id),
            (Some(0x1234), Some(0x4321))
        );
        assert_eq!(flow.source_port_or_id(), Some(0x1234));
        assert_eq!(flow.translated_port_or_id(), Some(0x4321));
        assert_eq!(
            flow.describe(),
            "icmp src=192.168.1.2 dst=198.51.100.7 id=7: source rewritten to 203.0.113.1"
        );
        // A flow with ports keeps them: the accessors are the ports.
        let udp = parse_entry(&entry()).expect("parses").flow;
        assert_eq!((udp.icmp_id, udp.reply_icmp_id), (None, None));
        assert_eq!(udp.source_port_or_id(), Some(40000));
    }

    /// A classic BPF interpreter for the opcodes [`source_nat_filter`] uses, with the
    /// kernel's semantics: a load past the packet ends the program with 0 (drop); the
    /// netlink attribute load is `nla_find` from offset A for type X (flags masked), 0 when
    /// not found or when the packet is too short.
    fn run_filter(program: &[libc::sock_filter], packet: &[u8]) -> u32 {
        use cbpf::*;
        let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
        let len = packet.len() as u32;
        let word = |at: u32| -> Option<u32> {
            let at = at as usize;
            Some(u32::from_be_bytes(packet.get(at..at + 4)?.try_into().ok()?))
        };
        let nlattr = |from: u32, kind: u32| -> u32 {
            if len < 4 || from > len - 4 {
                return 0;
            }
            let mut at = from as usize;
            while packet.len() - at >= 4 {
                let length = usize::from(u16::from_ne_bytes([packet[at], packet[at + 1]]));
                let found = u16::from_ne_bytes([packet[at + 2], packet[at + 3]]) & 0x3fff;
                if length < 4 || length > packet.len() - at {
                    return 0;
                }
                if u32::from(found) == kind {
                    return at as u32;
                }
                at += (length + 3) & !3;
            }
            0
        };
        loop {
            let instruction = program[pc];
            let (code, k) = (instruction.code, instruction.k);
            pc += 1;
            let class = code & 0x07;
            match class {
                LD | LDX => {
                    let value = match (code & 0xe0, code & 0x18) {
                        (IMM, _) => k,
                        (LEN, _) => len,
                        (ABS, _) if k == NLATTR => nlattr(a, x),
                        (ABS, W) => match word(k) {
                            Some(v) => v,
                            None => return 0,
                        },
                        (ABS, H) => match packet.get(k as usize..k as usize + 2) {
                            Some(b) => u32::from(u16::from_be_bytes([b[0], b[1]])),
                            None => return 0,
                        },
                        (IND, W) => match word(x.wrapping_add(k)) {
                            Some(v) => v,
                            None => return 0,
                        },
                        other => panic!("load {other:?} not interpreted"),
                    };
                    if class == LD {
                        a = value
                    } else {
                        x = value
                    }
                }
                ALU if code == ALU | SUB | X => a = a.wrapping_sub(x),
                MISC if code == MISC | TAX => x = a,
                RET => return k,
                JMP => {
                    let taken = match code & 0xf0 {
                        JEQ => a == k,
                        JGE => a >= k,
                        JSET => a & k != 0,
                        other => panic!("jump {other:#x} not interpreted"),
                    };
                    pc += usize::from(if taken {
                        instruction.jt
                    } else {
                        instruction.jf
                    });
                }
                _ => panic!("opcode {code:#x} not interpreted"),
            }
        }
    }

    /// A ctnetlink event of message type `kind` with `payload`, framed.
    fn framed_event(kind: u16, payload: &[u8]) -> Vec<u8> {
        let mut message = framing::request(kind, 0, 0, 64);
        message.extend_from_slice(payload);
        framing::finish(&mut message);
        message
    }

    /// [`entry`] with its status attribute set to `status` (or left out).
    fn entry_with_status(status: Option<u32>) -> Vec<u8> {
        let mut payload = nfgenmsg_and_tuples();
        if let Some(status) = status {
            payload.extend(attr(CTA_STATUS, &status.to_be_bytes()));
        }
        payload.extend(attr(CTA_ID, &7u32.to_be_bytes()));
        payload
    }

    #[test]
    fn the_kernel_filter_keeps_source_nated_entries_and_whatever_it_cannot_judge() {
        let program = source_nat_filter();
        assert!(program.len() < 64, "a short program");
        let (new, end) = (0x0100, 0x0102);
        let accepted = |packet: &[u8]| run_filter(&program, packet) != 0;
        // IPS_SEEN_REPLY | IPS_CONFIRMED | IPS_SRC_NAT (bit 4) | IPS_SRC_NAT_DONE; and a flow
        // only DNATed: IPS_DST_NAT (bit 5) | both NAT_DONE bits, no IPS_SRC_NAT.
        let nated = 0x2 | 0x8 | 0x10 | 0x80;
        let kept = 0x2 | 0x8 | 0x20 | 0x80 | 0x100;
        assert!(accepted(&framed_event(
            new,
            &entry_with_status(Some(nated))
        )));
        assert!(accepted(&framed_event(
            end,
            &entry_with_status(Some(nated))
        )));
        assert!(!accepted(&framed_event(
            new,
            &entry_with_status(Some(kept))
        )));
        assert!(!accepted(&framed_event(
            end,
            &entry_with_status(Some(kept))
        )));
        // The test entry of the parser's tests (status 0x1ba: SRC_NAT among others).
        assert!(accepted(&framed_event(new, &entry())));
        // No status: not judged.
        assert!(accepted(&framed_event(new, &entry_with_status(None))));
        // Another message type (an update, an error, another subsystem): not judged.
        for kind in [0x0101, framing::NLMSG_ERROR, 0x0200] {
            assert!(accepted(&framed_event(
                kind,
                &entry_with_status(Some(kept))
            )));
        }
        // A status attribute cut short at the message's end: not judged.
        let mut short = framed_event(new, &entry_with_status(None));
        short.extend_from_slice(&6u16.to_ne_bytes());
        short.extend_from_slice(&CTA_STATUS.to_ne_bytes());
        short.extend_from_slice(&[0, 0]);
        let whole = short.len() as u32;
        short[..4].copy_from_slice(&whole.to_ne_bytes());
        assert!(accepted(&short));
        // Too short for a ctnetlink message, or empty: not judged.
        let message = framed_event(new, &entry_with_status(Some(kept)));
        for cut in [0, 3, 6, 19] {
            assert!(accepted(&message[..cut]), "{cut} bytes");
        }
    }

    #[test]
    fn broken_entries_are_skipped_not_misread() {
        let payload = entry();
        for cut in [0, 3, 10, 40, payload.len() - 12] {
            // A cut inside the id or a tuple loses the entry; it is never half read.
            if let Some(parsed) = parse_entry(&payload[..cut]) {
                panic!("parsed a truncated entry ({cut} bytes): {:?}", parsed.flow);
            }
        }
        let mut other_family = entry();
        other_family[0] = 7;
        assert!(parse_entry(&other_family).is_none());
    }
}
