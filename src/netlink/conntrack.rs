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
//! attribute: 11.5 allocations per entry against none here. On one 100,000-entry dump (IPv4
//! and IPv6, TCP and UDP, the attributes a 6.18 kernel sends), median of 15 passes, on 2
//! Xeon cores shared with other builds (load 7), 2026-11-26, three runs: 7.3 ms against
//! 78.0 ms (73 against 780 ns per entry, 10.7×; the quietest run, spread 7.1–11.3 and
//! 76.4–91.2 ms), 16.8 against 191.2 ms (11.4×), 26.0 against 234.7 ms (9.0×). Rerun:
//! `cargo bench --bench conntrack_parser` or `scripts/bench --only conntrack-parser`
//! (`benches/conntrack_parser.rs`).

use super::dump::{self, Deadlines};
use super::framing::{self, NLMSG_ERROR, NLM_F_ACK, NLM_F_DUMP};
use super::{Socket, NETLINK_NETFILTER};
use crate::plan::Family;
use std::io;
use std::net::IpAddr;
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

const NFNL_SUBSYS_CTNETLINK: u16 = 1;
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
type Tuple = (IpAddr, IpAddr, u8, Option<u16>, Option<u16>);

fn tuple_of(value: &[u8]) -> Option<Tuple> {
    let (mut source, mut destination, mut protocol) = (None, None, None);
    let (mut source_port, mut destination_port) = (None, None);
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
        let (first, count) = (self.first_seq, self.pending_count);
        self.pending.clear();
        self.pending_count = 0;
        self.first_seq = self.next_seq;
        let deadline = Instant::now() + DUMP_DEADLINES.quiet;
        let mut acknowledged = 0;
        let mut buffer = vec![0u8; 64 * 1024];
        self.socket
            .answers((first, count), deadline, &mut buffer, |framed| {
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
                if acknowledged == count {
                    ControlFlow::Break(Ok(()))
                } else {
                    ControlFlow::Continue(())
                }
            })
    }
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
    /// The port the reply goes to: the source port the flow leaves with (after any SNAT).
    pub reply_destination_port: Option<u16>,
    /// The kernel's id of the entry (what `conntrack -L -o id` prints).
    pub id: u32,
}

impl Flow {
    /// The destination our rules judged: nat postrouting runs after any DNAT, so the address
    /// that answers.
    pub fn judged_destination(&self) -> IpAddr {
        self.reply_source
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

    /// A dumped entry as the kernel sends it: nfgenmsg, both tuples, status, id, zone.
    fn entry() -> Vec<u8> {
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
