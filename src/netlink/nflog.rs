//! nfnetlink_log (NFLOG): one group's copies of packets, bound on a socket of the caller's
//! network namespace, read as each packet's prefix (the rule that logged it), protocol,
//! addresses and destination port. The group's buffering is set so that a burst arrives in a
//! few datagrams; what the socket's buffer cannot hold the kernel drops and says (ENOBUFS).

use super::framing::{self, NLMSG_ERROR, NLM_F_ACK};
use super::{Queued, Sequences, Socket, NETLINK_NETFILTER};
use crate::plan::Family;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

const NFNL_SUBSYS_ULOG: u16 = 4;
const NFULNL_MSG_PACKET: u16 = 0;
const NFULNL_MSG_CONFIG: u16 = 1;
const NFULA_CFG_CMD: u16 = 1;
const NFULA_CFG_MODE: u16 = 2;
const NFULA_CFG_NLBUFSIZ: u16 = 3;
const NFULA_CFG_TIMEOUT: u16 = 4;
const NFULA_CFG_QTHRESH: u16 = 5;
const NFULNL_CFG_CMD_BIND: u8 = 1;
const NFULNL_COPY_PACKET: u8 = 2;
const NFULA_PAYLOAD: u16 = 9;
const NFULA_PREFIX: u16 = 10;
const NFGENMSG_LEN: usize = 4;
/// The kernel gathers copies into one datagram of at most this many bytes…
const GATHER_BYTES: u32 = 64 << 10;
/// …or this many copies…
const GATHER_COPIES: u32 = 64;
/// …or for at most this long (hundredths of a second: 0.1 s).
const GATHER_HUNDREDTHS: u32 = 10;
/// The binding's answer comes at once.
const ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// One logged packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoggedPacket<'a> {
    /// The logging rule's prefix (empty when it gave none).
    pub prefix: &'a str,
    pub family: Family,
    /// The IP protocol number (for IPv6, the first header after the fixed one).
    pub protocol: u8,
    pub source: IpAddr,
    pub destination: IpAddr,
    /// TCP, UDP, SCTP and UDP-Lite's destination port; None for other protocols and for a
    /// copy too short to hold it.
    pub destination_port: Option<u16>,
}

/// What a reader finds queued.
pub enum Logged<'a> {
    Packet(LoggedPacket<'a>),
    /// The kernel dropped copies the socket's buffer could not hold.
    Lost,
}

/// A socket bound to one NFLOG group: the group's copies come to it, and to no one else,
/// until it is closed.
pub struct LogGroup {
    socket: Socket,
    buffer: Vec<u8>,
}

impl LogGroup {
    /// Binds `group` in the caller's network namespace, asking for `snaplen` bytes of each
    /// packet and a receive buffer of `receive_buffer` bytes. Another socket holding the group
    /// is `EBUSY` (`io::ErrorKind::ResourceBusy`).
    pub fn bind(group: u16, snaplen: u32, receive_buffer: usize) -> io::Result<LogGroup> {
        let socket = Socket::request(NETLINK_NETFILTER)?;
        socket.grow_receive_buffer(libc::c_int::try_from(receive_buffer).unwrap_or(i32::MAX));
        let seq = super::sequence(1);
        socket.send(&config_request(group, snaplen, seq))?;
        let mut buffer = vec![0u8; 8192];
        let sequences = Sequences {
            first: seq,
            count: 1,
        };
        let deadline = Instant::now() + ANSWER_WITHIN;
        socket.answers(sequences, deadline, &mut buffer, |framed| {
            if framed.kind != NLMSG_ERROR {
                return ControlFlow::Continue(());
            }
            ControlFlow::Break(framing::acknowledged(framed))
        })?;
        socket.set_non_blocking()?;
        Ok(LogGroup {
            socket,
            buffer: vec![0u8; GATHER_BYTES as usize * 2],
        })
    }

    /// Waits until a copy is queued or `timeout` has passed.
    pub fn wait(&self, timeout: Duration) {
        self.socket.wait_readable(timeout);
    }

    /// Reads every copy queued (until `deadline`, when one is given), each to `each`.
    pub fn drain(
        &mut self,
        deadline: Option<Instant>,
        mut each: impl FnMut(Logged<'_>),
    ) -> io::Result<()> {
        self.socket
            .drain_by(&mut self.buffer, deadline, |queued| match queued {
                Queued::Datagram(datagram) => {
                    for packet in packets_of(datagram) {
                        each(Logged::Packet(packet));
                    }
                }
                Queued::Lost => each(Logged::Lost),
            })
    }
}

fn message_kind(message: u16) -> u16 {
    (NFNL_SUBSYS_ULOG << 8) | message
}

/// The one request that binds `group` and sets its copy mode and gathering.
fn config_request(group: u16, snaplen: u32, seq: u32) -> Vec<u8> {
    let mut out = framing::request(message_kind(NFULNL_MSG_CONFIG), NLM_F_ACK, seq, 96);
    out.extend_from_slice(&[libc::AF_UNSPEC as u8, 0]);
    out.extend_from_slice(&group.to_be_bytes());
    framing::put_attribute(&mut out, NFULA_CFG_CMD, &[NFULNL_CFG_CMD_BIND]);
    let mut mode = snaplen.to_be_bytes().to_vec();
    mode.extend_from_slice(&[NFULNL_COPY_PACKET, 0]);
    framing::put_attribute(&mut out, NFULA_CFG_MODE, &mode);
    framing::put_attribute(&mut out, NFULA_CFG_NLBUFSIZ, &GATHER_BYTES.to_be_bytes());
    framing::put_attribute(
        &mut out,
        NFULA_CFG_TIMEOUT,
        &GATHER_HUNDREDTHS.to_be_bytes(),
    );
    framing::put_attribute(&mut out, NFULA_CFG_QTHRESH, &GATHER_COPIES.to_be_bytes());
    framing::finish(&mut out);
    out
}

/// The packets of one datagram; a message that is no packet, or whose copy holds no IP
/// header, is passed over.
fn packets_of(datagram: &[u8]) -> impl Iterator<Item = LoggedPacket<'_>> {
    framing::messages(datagram)
        .map_while(Result::ok)
        .filter_map(|message| {
            let kind = u16::from_ne_bytes([*message.get(4)?, *message.get(5)?]);
            if kind != message_kind(NFULNL_MSG_PACKET) {
                return None;
            }
            packet_of(message.get(framing::NLMSG_HDRLEN + NFGENMSG_LEN..)?)
        })
}

/// One packet message's attributes.
fn packet_of(attributes: &[u8]) -> Option<LoggedPacket<'_>> {
    let payload = framing::attribute(attributes, NFULA_PAYLOAD)?;
    let prefix = framing::attribute(attributes, NFULA_PREFIX).unwrap_or_default();
    let prefix = prefix.split(|b| *b == 0).next().unwrap_or_default();
    let headers = headers_of(payload)?;
    Some(LoggedPacket {
        prefix: std::str::from_utf8(prefix).unwrap_or_default(),
        family: headers.family,
        protocol: headers.protocol,
        source: headers.source,
        destination: headers.destination,
        destination_port: headers.destination_port,
    })
}

/// What a packet's IP header (and its transport header's first bytes) say.
struct Headers {
    family: Family,
    protocol: u8,
    source: IpAddr,
    destination: IpAddr,
    destination_port: Option<u16>,
}

/// Reads the IP header at the start of `packet`.
fn headers_of(packet: &[u8]) -> Option<Headers> {
    let (family, protocol, source, destination, transport) = match packet.first()? >> 4 {
        4 => {
            let length = usize::from(packet[0] & 0x0f) * 4;
            let at = |i: usize| -> Option<[u8; 4]> { packet.get(i..i + 4)?.try_into().ok() };
            (
                Family::V4,
                *packet.get(9)?,
                IpAddr::V4(Ipv4Addr::from(at(12)?)),
                IpAddr::V4(Ipv4Addr::from(at(16)?)),
                packet.get(length.max(20)..).unwrap_or_default(),
            )
        }
        6 => {
            let at = |i: usize| -> Option<[u8; 16]> { packet.get(i..i + 16)?.try_into().ok() };
            (
                Family::V6,
                *packet.get(6)?,
                IpAddr::V6(Ipv6Addr::from(at(8)?)),
                IpAddr::V6(Ipv6Addr::from(at(24)?)),
                packet.get(40..).unwrap_or_default(),
            )
        }
        _ => return None,
    };
    let destination_port = match protocol {
        6 | 17 | 132 | 136 => transport
            .get(2..4)
            .map(|port| u16::from_be_bytes([port[0], port[1]])),
        _ => None,
    };
    Some(Headers {
        family,
        protocol,
        source,
        destination,
        destination_port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A packet message as the kernel sends it: header, nfgenmsg, then attributes.
    fn packet_message(family: u8, prefix: &str, payload: &[u8]) -> Vec<u8> {
        let mut out = framing::request(message_kind(NFULNL_MSG_PACKET), 0, 0, 256);
        out.extend_from_slice(&[family, 0, 0x1c, 0xcd]);
        framing::put_attribute(&mut out, 1, &[0x08, 0x00, 2, 0]);
        let mut text = prefix.as_bytes().to_vec();
        text.push(0);
        framing::put_attribute(&mut out, NFULA_PREFIX, &text);
        framing::put_attribute(&mut out, NFULA_PAYLOAD, payload);
        framing::finish(&mut out);
        out
    }

    fn ipv4_tcp(source: [u8; 4], destination: [u8; 4], port: u16) -> Vec<u8> {
        let mut packet = vec![0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0];
        packet.extend_from_slice(&source);
        packet.extend_from_slice(&destination);
        packet.extend_from_slice(&40002u16.to_be_bytes());
        packet.extend_from_slice(&port.to_be_bytes());
        packet.extend_from_slice(&[0; 16]);
        packet
    }

    #[test]
    fn a_datagram_of_copies_is_read_as_packets_with_their_prefix() {
        let mut datagram = packet_message(
            2,
            "ipmasq-share-rate",
            &ipv4_tcp([192, 168, 1, 5], [203, 0, 113, 2], 443),
        );
        let mut v6 = vec![0x60, 0, 0, 0, 0, 8, 17, 64];
        v6.extend_from_slice(&"fd00::5".parse::<Ipv6Addr>().unwrap().octets());
        v6.extend_from_slice(&"2001:db8::9".parse::<Ipv6Addr>().unwrap().octets());
        v6.extend_from_slice(&[0x9c, 0x42, 0, 53, 0, 8, 0, 0]);
        datagram.extend(packet_message(10, "", &v6));
        let mut icmp = ipv4_tcp([192, 168, 1, 6], [198, 51, 100, 1], 0);
        icmp[9] = 1;
        datagram.extend(packet_message(2, "ipmasq-share-connections", &icmp));
        let packets: Vec<LoggedPacket<'_>> = packets_of(&datagram).collect();
        assert_eq!(
            packets,
            [
                LoggedPacket {
                    prefix: "ipmasq-share-rate",
                    family: Family::V4,
                    protocol: 6,
                    source: "192.168.1.5".parse().unwrap(),
                    destination: "203.0.113.2".parse().unwrap(),
                    destination_port: Some(443),
                },
                LoggedPacket {
                    prefix: "",
                    family: Family::V6,
                    protocol: 17,
                    source: "fd00::5".parse().unwrap(),
                    destination: "2001:db8::9".parse().unwrap(),
                    destination_port: Some(53),
                },
                LoggedPacket {
                    prefix: "ipmasq-share-connections",
                    family: Family::V4,
                    protocol: 1,
                    source: "192.168.1.6".parse().unwrap(),
                    destination: "198.51.100.1".parse().unwrap(),
                    destination_port: None,
                },
            ]
        );
    }

    #[test]
    fn a_copy_without_an_ip_header_or_another_message_is_passed_over() {
        let mut datagram = packet_message(2, "x", &[0x45, 0, 0]);
        datagram.extend(packet_message(2, "x", &[]));
        let mut other = framing::request(message_kind(NFULNL_MSG_CONFIG), 0, 0, 32);
        other.extend_from_slice(&[2, 0, 0, 0]);
        framing::finish(&mut other);
        datagram.extend(other);
        assert_eq!(packets_of(&datagram).count(), 0);
    }

    #[test]
    fn the_binding_asks_for_the_group_the_copy_and_the_gathering() {
        let request = config_request(7373, 80, 9);
        let attributes = &request[framing::NLMSG_HDRLEN + NFGENMSG_LEN..];
        assert_eq!(
            &request[framing::NLMSG_HDRLEN + 2..][..2],
            &7373u16.to_be_bytes()
        );
        assert_eq!(
            framing::attribute(attributes, NFULA_CFG_CMD),
            Some(&[NFULNL_CFG_CMD_BIND][..])
        );
        assert_eq!(
            framing::attribute(attributes, NFULA_CFG_MODE),
            Some(&[0, 0, 0, 80, NFULNL_COPY_PACKET, 0][..])
        );
        assert_eq!(
            framing::attribute(attributes, NFULA_CFG_QTHRESH),
            Some(&GATHER_COPIES.to_be_bytes()[..])
        );
    }
}
