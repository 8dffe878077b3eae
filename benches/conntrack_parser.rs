//! The ctnetlink parser against `netlink-packet-netfilter`'s conntrack decoding: the same dump
//! of 100,000 entries, each parser producing what `src/conntrack/` needs (the `Flow`, and the
//! original tuple and zone a delete echoes). `cargo bench --bench conntrack_parser` (or
//! `scripts/bench --only conntrack-parser`) prints a Markdown table: median and spread of the
//! repetitions, ns per entry, allocations and peak heap per pass. A measurement, not a test:
//! `cargo test` does not run it, and a run without `--bench` says it is skipped.
//!
//! The dump is built once, encoded with the crate, in the layout a 6.18 kernel sent in a
//! capture (`conntrack -L` under strace, in a throwaway namespace): per entry the original and
//! reply tuples (nested, `NLA_F_NESTED`), status, mark, id, use, timeout and, for TCP, the
//! protoinfo (state, window scales, flags); no counters (`nf_conntrack_acct` off). A quarter
//! each of IPv4 TCP, IPv4 UDP, IPv6 TCP and IPv6 UDP; half of them masqueraded; one in 50 in
//! a conntrack zone (`CTA_ZONE` after the reply tuple, which the capture, in the default
//! zone, did not have), so the check that both parsers agree covers a delete's zone too.

use ipmasq::bench::{conntrack_entry, Family, Flow};
use netlink_packet_core::{DefaultNla, Emitable, Nla, ParseableParametrized, NLA_HEADER_SIZE};
use netlink_packet_netfilter::conntrack::{
    ConntrackAttribute, ConntrackMessage, IPTuple, ProtoInfo, ProtoInfoTCP, ProtoTuple, Protocol,
    Status, TCPFlags, Tuple,
};
use netlink_packet_netfilter::{
    NetfilterHeader, NetfilterMessage, NetfilterMessageInner, NetfilterProtoFamily,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const ENTRIES: usize = 100_000;
const REPETITIONS: usize = 15;
/// The rule: the crate replaces the hand parser if its median is at most this
/// multiple of the hand parser's.
const ALLOWED_RATIO: f64 = 1.2;
const CTNETLINK_NEW: u16 = 1 << 8;
const CTA_USE: u16 = 11;
const CTA_ID: u16 = 12;
const CTA_ZONE: u16 = 18;

/// The system allocator, counting while [`COUNTING`] is set (the timed runs leave it unset).
struct CountingAllocator;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);
static PEAK_BYTES: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
            let live = LIVE_BYTES.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK_BYTES.fetch_max(live, Ordering::Relaxed);
        }
        // SAFETY: the caller's layout, handed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        // SAFETY: a pointer this allocator returned, with its layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// What the policy reads of an entry, whichever parser produced it: the flow, and whether a
/// delete could be written (the original tuple, and the zone when there is one).
struct ForPolicy {
    flow: Flow,
    delete_bytes: usize,
}

fn address(index: usize, v4: [u8; 2], v6: u16, family: Family) -> IpAddr {
    let (high, low) = ((index >> 8) as u8, index as u8);
    match family {
        Family::V4 => IpAddr::V4(Ipv4Addr::new(v4[0], v4[1], high, low)),
        Family::V6 => IpAddr::V6(Ipv6Addr::new(v6, 0xdb8, 0, 0, 0, 0, index as u16, 1)),
    }
}

fn tuple(source: IpAddr, destination: IpAddr, protocol: Protocol, ports: (u16, u16)) -> Vec<Tuple> {
    vec![
        Tuple::Ip(vec![
            IPTuple::SourceAddress(source),
            IPTuple::DestinationAddress(destination),
        ]),
        Tuple::Proto(vec![
            ProtoTuple::Protocol(protocol),
            ProtoTuple::SourcePort(ports.0),
            ProtoTuple::DestinationPort(ports.1),
        ]),
    ]
}

fn u32_attribute(kind: u16, value: u32) -> ConntrackAttribute {
    ConntrackAttribute::Other(DefaultNla::new(kind, value.to_be_bytes().to_vec()))
}

fn tcp_flags(flags: u8, mask: u8) -> TCPFlags {
    TCPFlags::parse(&[flags, mask]).expect("two bytes")
}

/// Entry `index` of the dump, as `(message type, payload)`: the kernel's attribute order.
fn entry(index: usize) -> (u16, Vec<u8>) {
    let family = if index % 4 < 2 {
        Family::V4
    } else {
        Family::V6
    };
    let tcp = index.is_multiple_of(2);
    let pod = address(index, [192, 168], 0xfd00, family);
    let outside = address(index, [198, 51], 0x2001, family);
    let masqueraded = (index / 4).is_multiple_of(2);
    let node = match family {
        Family::V4 => IpAddr::V4(Ipv4Addr::new(203, 0, 113, 1)),
        Family::V6 => IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 1)),
    };
    let protocol = if tcp { Protocol::Tcp } else { Protocol::Udp };
    let (source_port, destination_port) = (32768 + (index % 28000) as u16, 443);
    let reply_to = if masqueraded { node } else { pod };
    let mut status = Status::Confirmed | Status::SeenReply | Status::Assured;
    if masqueraded {
        status |= Status::SrcNat | Status::SrcNatDone | Status::DstNatDone;
    }
    let mut attributes = vec![
        ConntrackAttribute::CtaTupleOrig(tuple(
            pod,
            outside,
            protocol,
            (source_port, destination_port),
        )),
        ConntrackAttribute::CtaTupleReply(tuple(
            outside,
            reply_to,
            protocol,
            (destination_port, source_port),
        )),
    ];
    if index % 50 == 49 {
        attributes.push(ConntrackAttribute::Other(DefaultNla::new(
            CTA_ZONE,
            vec![0, 5],
        )));
    }
    attributes.extend([
        ConntrackAttribute::CtaStatus(status),
        ConntrackAttribute::CtaMark(0),
        u32_attribute(CTA_ID, 0x9e37_79b9u32.wrapping_mul(index as u32 + 1)),
        u32_attribute(CTA_USE, 1),
        ConntrackAttribute::CtaTimeout(if tcp { 431_999 } else { 119 }),
    ]);
    if tcp {
        attributes.push(ConntrackAttribute::CtaProtoInfo(vec![ProtoInfo::TCP(
            vec![
                ProtoInfoTCP::State(3),
                ProtoInfoTCP::OriginalWindowScale(7),
                ProtoInfoTCP::ReplyWindowScale(7),
                ProtoInfoTCP::OriginalFlags(tcp_flags(0x23, 0x23)),
                ProtoInfoTCP::ReplyFlags(tcp_flags(0x23, 0x23)),
            ],
        )]));
    }
    let nfproto = match family {
        Family::V4 => NetfilterProtoFamily::IPv4,
        Family::V6 => NetfilterProtoFamily::IPv6,
    };
    let message = NetfilterMessage::new(
        NetfilterHeader::new(nfproto, 0, 0),
        ConntrackMessage::New(attributes),
    );
    let mut payload = vec![0; message.buffer_len()];
    message.emit(&mut payload);
    (CTNETLINK_NEW, payload)
}

/// Today's parser: `src/netlink/conntrack.rs`.
fn by_hand(kind: u16, payload: &[u8]) -> Option<ForPolicy> {
    if kind != CTNETLINK_NEW {
        return None;
    }
    let (flow, original, zone) = conntrack_entry(payload)?;
    Some(ForPolicy {
        flow,
        delete_bytes: original.len() + zone.map_or(0, <[u8]>::len),
    })
}

/// The crate's decoding of the message, then the same fields read off its attributes.
fn by_crate(kind: u16, payload: &[u8]) -> Option<ForPolicy> {
    let message = NetfilterMessage::parse_with_param(payload, kind).ok()?;
    let family = match message.header.family {
        NetfilterProtoFamily::IPv4 => Family::V4,
        NetfilterProtoFamily::IPv6 => Family::V6,
        _ => return None,
    };
    let NetfilterMessageInner::Conntrack(ConntrackMessage::New(attributes)) = &message.inner else {
        return None;
    };
    let (mut original, mut reply, mut id, mut zone) = (None, None, None, None);
    for attribute in attributes {
        match attribute {
            ConntrackAttribute::CtaTupleOrig(tuples) => {
                original = Some((read_tuple(tuples)?, attribute))
            }
            ConntrackAttribute::CtaTupleReply(tuples) => reply = read_tuple(tuples),
            ConntrackAttribute::Other(other) if other.kind() == CTA_ID => {
                let mut value = [0; 4];
                other.emit_value(&mut value);
                id = Some(u32::from_be_bytes(value));
            }
            ConntrackAttribute::Other(other) if other.kind() == CTA_ZONE => zone = Some(other),
            _ => {}
        }
    }
    let ((tuple, original), reply) = (original?, reply?);
    Some(ForPolicy {
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
            // The library's tuples are read for ports only (the bench's flows are TCP and UDP).
            icmp_id: None,
            reply_icmp_id: None,
            id: id?,
        },
        // As the hand parser counts them: the zone's own length, without its padding.
        delete_bytes: original.buffer_len() + zone.map_or(0, |z| NLA_HEADER_SIZE + z.value_len()),
    })
}

/// A tuple's `(source, destination, protocol, source port, destination port)`.
type FlowTuple = (IpAddr, IpAddr, u8, Option<u16>, Option<u16>);

fn read_tuple(tuples: &[Tuple]) -> Option<FlowTuple> {
    let (mut source, mut destination, mut protocol, mut ports) = (None, None, None, (None, None));
    for tuple in tuples {
        match tuple {
            Tuple::Ip(parts) => {
                for part in parts {
                    match part {
                        IPTuple::SourceAddress(a) => source = Some(*a),
                        IPTuple::DestinationAddress(a) => destination = Some(*a),
                        _ => {}
                    }
                }
            }
            Tuple::Proto(parts) => {
                for part in parts {
                    match part {
                        ProtoTuple::Protocol(p) => protocol = Some(u8::from(*p)),
                        ProtoTuple::SourcePort(p) => ports.0 = Some(*p),
                        ProtoTuple::DestinationPort(p) => ports.1 = Some(*p),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Some((source?, destination?, protocol?, ports.0, ports.1))
}

/// The crate's original tuple and zone re-emitted (padded), for the check that a delete built
/// from them would carry the bytes today's delete echoes.
fn crate_delete_attributes(kind: u16, payload: &[u8]) -> Option<Vec<u8>> {
    let message = NetfilterMessage::parse_with_param(payload, kind).ok()?;
    let NetfilterMessageInner::Conntrack(ConntrackMessage::New(attributes)) = message.inner else {
        return None;
    };
    let original = attributes
        .iter()
        .find(|a| matches!(a, ConntrackAttribute::CtaTupleOrig(_)))?;
    let zone = attributes
        .iter()
        .find(|a| matches!(a, ConntrackAttribute::Other(z) if z.kind() == CTA_ZONE));
    let mut bytes = Vec::new();
    for attribute in std::iter::once(original).chain(zone) {
        let start = bytes.len();
        bytes.resize(start + attribute.buffer_len(), 0);
        attribute.emit(&mut bytes[start..]);
    }
    Some(bytes)
}

/// The hand parser's original tuple and zone as `src/netlink/conntrack.rs`'s delete writes
/// them: each whole, padded to four bytes.
fn hand_delete_attributes(payload: &[u8]) -> Option<Vec<u8>> {
    let (_, original, zone) = conntrack_entry(payload)?;
    let mut bytes = Vec::new();
    for attribute in std::iter::once(original).chain(zone) {
        bytes.extend_from_slice(attribute);
        bytes.resize(bytes.len() + (4 - bytes.len() % 4) % 4, 0);
    }
    Some(bytes)
}

type Parser = fn(u16, &[u8]) -> Option<ForPolicy>;

/// One pass over the dump: every entry parsed and handed on; the number of entries read.
fn pass(dump: &[(u16, Vec<u8>)], parser: Parser) -> usize {
    let mut read = 0;
    for (kind, payload) in dump {
        if let Some(entry) = parser(*kind, black_box(payload)) {
            black_box(&entry);
            read += 1;
        }
    }
    read
}

/// Allocations and peak heap (above what was live before) of one pass.
fn counted_pass(dump: &[(u16, Vec<u8>)], parser: Parser) -> (usize, usize) {
    ALLOCATIONS.store(0, Ordering::Relaxed);
    LIVE_BYTES.store(0, Ordering::Relaxed);
    PEAK_BYTES.store(0, Ordering::Relaxed);
    COUNTING.store(true, Ordering::Relaxed);
    black_box(pass(dump, parser));
    COUNTING.store(false, Ordering::Relaxed);
    (
        ALLOCATIONS.load(Ordering::Relaxed),
        PEAK_BYTES.load(Ordering::Relaxed),
    )
}

/// Both parsers agree on every entry: the same flow, and a delete of the same size; and the
/// crate's original tuple and zone, re-emitted, are the bytes today's delete echoes.
fn check_agreement(dump: &[(u16, Vec<u8>)]) -> Result<(), String> {
    for (index, (kind, payload)) in dump.iter().enumerate() {
        let hand =
            by_hand(*kind, payload).ok_or(format!("entry {index}: the hand parser skipped it"))?;
        let decoded =
            by_crate(*kind, payload).ok_or(format!("entry {index}: the crate skipped it"))?;
        if hand.flow != decoded.flow || hand.delete_bytes != decoded.delete_bytes {
            return Err(format!(
                "entry {index}: {:?} against {:?}",
                hand.flow, decoded.flow
            ));
        }
        if crate_delete_attributes(*kind, payload) != hand_delete_attributes(payload) {
            return Err(format!(
                "entry {index}: the crate re-emits another tuple or zone"
            ));
        }
    }
    Ok(())
}

fn median(sorted: &[Duration]) -> Duration {
    sorted[sorted.len() / 2]
}

fn ms(duration: Duration) -> String {
    format!("{:.2} ms", duration.as_secs_f64() * 1e3)
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!(
            "conntrack_parser: skipped (a measurement: run `cargo bench --bench conntrack_parser`)"
        );
        return;
    }
    let built = Instant::now();
    let dump: Vec<(u16, Vec<u8>)> = (0..ENTRIES).map(entry).collect();
    let bytes: usize = dump.iter().map(|(_, p)| p.len() + 16).sum();
    eprintln!(
        "built {ENTRIES} entries ({:.1} MiB with their netlink headers) in {:.0} ms",
        bytes as f64 / 1_048_576.0,
        built.elapsed().as_secs_f64() * 1e3
    );
    if let Err(disagreement) = check_agreement(&dump) {
        eprintln!("conntrack_parser: the parsers disagree: {disagreement}");
        std::process::exit(1);
    }
    let parsers: [(&str, Parser); 2] = [
        ("hand parser (src/netlink/conntrack.rs)", by_hand),
        ("netlink-packet-netfilter 0.4", by_crate),
    ];
    for (_, parser) in parsers {
        assert_eq!(
            pass(&dump, parser),
            ENTRIES,
            "a warm-up pass reads every entry"
        );
    }
    let mut times = [Vec::new(), Vec::new()];
    for _ in 0..REPETITIONS {
        for (slot, (_, parser)) in parsers.iter().enumerate() {
            let started = Instant::now();
            black_box(pass(&dump, *parser));
            times[slot].push(started.elapsed());
        }
    }
    println!("| parser, {ENTRIES} entries, {REPETITIONS} repetitions | median | min – max | ns per entry (median) | allocations per entry | peak heap of a pass |");
    println!("|---|---|---|---|---|---|");
    let mut medians = Vec::new();
    for ((name, parser), times) in parsers.iter().zip(times.iter_mut()) {
        times.sort();
        let middle = median(times);
        medians.push(middle);
        let (allocations, peak) = counted_pass(&dump, *parser);
        println!(
            "| {name} | {} | {} – {} | {:.0} | {:.1} | {} B |",
            ms(middle),
            ms(times[0]),
            ms(times[times.len() - 1]),
            middle.as_nanos() as f64 / ENTRIES as f64,
            allocations as f64 / ENTRIES as f64,
            peak,
        );
    }
    let ratio = medians[1].as_secs_f64() / medians[0].as_secs_f64();
    println!();
    println!(
        "crate / hand, medians: {ratio:.2}x (the rule: at most {ALLOWED_RATIO}x moves the parsing onto the crate: {})",
        if ratio <= ALLOWED_RATIO { "it does" } else { "it stays by hand" }
    );
}
