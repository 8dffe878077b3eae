//! rtnetlink (NETLINK_ROUTE): links and addresses read as streamed dumps (any number of
//! addresses costs one receive buffer; an interrupted dump is read again), a subscription to
//! address changes that says whether one can move what the agent resolves (registered with
//! the runtime here), and the kernel's route lookup (which interface traffic to an address
//! leaves). Messages are `netlink-packet-route`'s: requests written from its family headers,
//! answers and events decoded by its header and address-attribute types (of a link and a
//! route, only the one attribute read, by its kind and the crate's value parser); the socket,
//! its deadlines, sequence checks, interrupted dumps and lost notifications are ours
//! ([`Socket`], [`netlink_dump`]). A message is decoded attribute by attribute: one that does
//! not decode is skipped, and the walk ends at the first that does not frame. What the
//! node's addresses mean is `crate::addresses`.

use super::dump as netlink_dump;
use super::framing::{self, NLMSG_HDRLEN};
use super::{interface_name, Queued, Socket, NETLINK_ROUTE};
use netlink_packet_core::{
    parse_u32, DefaultNla, Emitable, NetlinkHeader, Nla, NlaBuffer, NlasIterator, Parseable,
    NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressFlags, AddressHeader};
use netlink_packet_route::link::{LinkAttribute, LinkHeader};
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteHeader};
use netlink_packet_route::AddressFamily;
use std::io;
use std::net::IpAddr;
use std::ops::ControlFlow;
use std::time::Duration;

/// The multicast groups of IPv4 and IPv6 address changes.
const ADDRESS_GROUPS: u32 = (libc::RTMGRP_IPV4_IFADDR | libc::RTMGRP_IPV6_IFADDR) as u32;
/// How long one dump may go without a part, and in all.
const DEADLINES: netlink_dump::Deadlines = netlink_dump::Deadlines {
    quiet: Duration::from_secs(5),
    overall: Duration::from_secs(30),
};
/// A dump interrupted by a concurrent change (interfaces coming and going by the thousand) is
/// started again within the same read for this long, and at least [`ATTEMPTS`] times.
const RETRY_WINDOW: Duration = Duration::from_secs(2);
const ATTEMPTS: usize = 5;

/// A request of type `kind` with `flags` (besides `NLM_F_REQUEST`) and sequence number
/// `seq`: the netlink header, the family's `header`, and `attributes`. Written part by part
/// rather than as a whole `RouteNetlinkMessage`, whose encoder would link every rtnetlink
/// message's (traffic control, neighbours, every kind of link) into the binary.
fn request(
    kind: u16,
    flags: u16,
    seq: u32,
    header: &impl Emitable,
    attributes: &[DefaultNla],
) -> Vec<u8> {
    let mut netlink = NetlinkHeader::default();
    netlink.message_type = kind;
    netlink.flags = NLM_F_REQUEST | flags;
    netlink.sequence_number = seq;
    let body = netlink.buffer_len() + header.buffer_len();
    netlink.length = (body + attributes.buffer_len()) as u32;
    let mut bytes = vec![0u8; netlink.length as usize];
    netlink.emit(&mut bytes);
    header.emit(&mut bytes[netlink.buffer_len()..]);
    attributes.emit(&mut bytes[body..]);
    bytes
}

/// The request for a dump of every interface.
fn links_request(seq: u32) -> Vec<u8> {
    request(
        libc::RTM_GETLINK,
        NLM_F_DUMP,
        seq,
        &LinkHeader::default(),
        &[],
    )
}

/// The request for a dump of every address of `family` (`AF_UNSPEC`: both).
fn addresses_request(family: i32, seq: u32) -> Vec<u8> {
    let header = AddressHeader {
        family: AddressFamily::from(family as u8),
        ..AddressHeader::default()
    };
    request(libc::RTM_GETADDR, NLM_F_DUMP, seq, &header, &[])
}

/// The request for the route traffic to `destination` takes (`ip route get`).
fn route_request(destination: IpAddr, seq: u32) -> Vec<u8> {
    let (address_family, destination_prefix_length) = match destination {
        IpAddr::V4(_) => (AddressFamily::Inet, 32),
        IpAddr::V6(_) => (AddressFamily::Inet6, 128),
    };
    let header = RouteHeader {
        address_family,
        destination_prefix_length,
        ..RouteHeader::default()
    };
    let address = RouteAddress::from(destination);
    let mut value = vec![0u8; address.buffer_len()];
    address.emit(&mut value);
    let kind = RouteAttribute::Destination(address).kind();
    request(
        libc::RTM_GETROUTE,
        0,
        seq,
        &header,
        &[DefaultNla::new(kind, value)],
    )
}

/// The attributes after a message's family header, each still undecoded; the walk ends at
/// the first that does not frame.
fn attributes_after(payload: &[u8], header_len: usize) -> impl Iterator<Item = NlaBuffer<&[u8]>> {
    NlasIterator::new(payload.get(header_len..).unwrap_or_default()).map_while(Result::ok)
}

/// Whether an error says that every dump of a read was interrupted by concurrent changes (a
/// read to try again soon, not a fault).
pub fn is_interrupted(err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::Interrupted
}

/// A dump to make: its request for a sequence number, and what it lists (in errors).
struct Dump<'a, Request> {
    request: Request,
    what: &'a str,
}

/// How each attempt of a streamed dump starts its state (`start`), and when two interrupted
/// attempts `agree` enough to be taken.
pub(crate) struct Attempts<Start, Agree> {
    pub start: Start,
    pub agree: Agree,
}

/// One dump read to its end, streamed: every message's type and payload goes to `visit`
/// with a state fresh from `start`, and nothing else is kept, so any number of interfaces or
/// addresses costs one receive buffer. A dump a concurrent change interrupts is started
/// again (within [`RETRY_WINDOW`]), and two interrupted ones in a row whose states `agree`
/// says are the same are taken (on a node whose interfaces come and go every few
/// milliseconds, a dump of thousands of addresses is rarely whole, but an address that was
/// there all along is read by both); when none is, an error of kind `Interrupted`.
fn dump_streamed<S>(
    socket: &Socket,
    dump: Dump<impl Fn(u32) -> Vec<u8>>,
    attempts: Attempts<impl Fn() -> S, impl Fn(&S, &S) -> bool>,
    mut visit: impl FnMut(&mut S, u16, &[u8]),
) -> io::Result<S> {
    let Dump { request, what } = dump;
    let Attempts { start, agree } = attempts;
    let began = std::time::Instant::now();
    let mut attempt = 0;
    let mut interrupted: Option<S> = None;
    loop {
        let seq = crate::netlink::sequence(1);
        let mut state = start();
        let ended =
            netlink_dump::dump_each(socket, &request(seq), seq, DEADLINES, |kind, payload| {
                visit(&mut state, kind, payload);
                Ok(())
            })?;
        if ended == netlink_dump::Ended::Whole
            || interrupted
                .as_ref()
                .is_some_and(|before| agree(before, &state))
        {
            return Ok(state);
        }
        interrupted = Some(state);
        attempt += 1;
        if attempt >= ATTEMPTS && began.elapsed() >= RETRY_WINDOW {
            return Err(io::Error::new(
                io::ErrorKind::Interrupted,
                format!(
                    "{what}: every dump was interrupted by a concurrent change ({attempt} in {} ms)",
                    began.elapsed().as_millis()
                ),
            ));
        }
        // Let the burst of changes that interrupted it move on.
        std::thread::sleep(Duration::from_millis(attempt.min(20) as u64));
    }
}

/// The attempts of a dump that takes only a whole read (two interrupted ones never agree),
/// each starting from `start`.
pub(crate) fn whole_only<S, Start: Fn() -> S>(start: Start) -> Attempts<Start, fn(&S, &S) -> bool> {
    Attempts {
        start,
        agree: |_, _| false,
    }
}

/// An interface index and name from an RTM_NEWLINK payload. Only the name is decoded of its
/// attributes (the crate's whole attribute decoder would link every kind of link's into the
/// binary): up to its first NUL, and lossily, as before the crate: the kernel allows a name
/// that is not UTF-8, and such a link must still be listed (the crate's `parse_string` would
/// refuse it).
fn link_of(payload: &[u8]) -> Option<(u32, String)> {
    let header = LinkHeader::parse(payload).ok()?;
    let name_kind = LinkAttribute::IfName(String::new()).kind();
    let name = attributes_after(payload, header.buffer_len())
        .find(|attribute| attribute.kind() == name_kind)?;
    let bytes = name.value();
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    Some((
        header.index,
        String::from_utf8_lossy(&bytes[..end]).into_owned(),
    ))
}

/// One address as an RTM_NEWADDR (or RTM_DELADDR) payload lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Listed {
    pub index: u32,
    pub address: IpAddr,
    pub prefix_len: u8,
    /// `IFA_F_*`, from the header or (complete) from IFA_FLAGS.
    pub flags: AddressFlags,
}

impl Listed {
    /// Whether the kernel can source from it: not tentative, not failed duplicate detection.
    pub fn usable(&self) -> bool {
        !self
            .flags
            .intersects(AddressFlags::Tentative | AddressFlags::Dadfailed)
    }

    /// Past its preferred lifetime (IPv6): still held, not for new flows while another is.
    pub fn deprecated(&self) -> bool {
        self.flags.contains(AddressFlags::Deprecated)
    }
}

/// The address of an RTM_NEWADDR/RTM_DELADDR payload, whatever its state.
pub(crate) fn listed(payload: &[u8]) -> Option<Listed> {
    let header = AddressHeader::parse(payload).ok()?;
    let mut flags = AddressFlags::from_bits_retain(u32::from(header.flags.bits()));
    // An address of another family than the message's is none.
    let of_family = |ip: IpAddr| {
        Some(ip).filter(|ip| match ip {
            IpAddr::V4(_) => header.family == AddressFamily::Inet,
            IpAddr::V6(_) => header.family == AddressFamily::Inet6,
        })
    };
    let (mut local, mut address) = (None, None);
    for attribute in attributes_after(payload, header.buffer_len()) {
        match AddressAttribute::parse(&attribute) {
            Ok(AddressAttribute::Local(ip)) => local = of_family(ip),
            Ok(AddressAttribute::Address(ip)) => address = of_family(ip),
            Ok(AddressAttribute::Flags(complete)) => flags = complete,
            _ => {}
        }
    }
    // IFA_LOCAL is the node's own end (IFA_ADDRESS the peer's on a point-to-point link).
    Some(Listed {
        index: header.index,
        address: local.or(address)?,
        prefix_len: header.prefix_len,
        flags,
    })
}

/// An address from an RTM_NEWADDR payload the node can send from; None for one the kernel
/// cannot source from yet or ever (tentative, failed duplicate detection).
pub(crate) fn address_of(payload: &[u8]) -> Option<Listed> {
    listed(payload).filter(Listed::usable)
}

/// A socket for rtnetlink requests.
pub(crate) fn socket() -> io::Result<Socket> {
    Socket::request(NETLINK_ROUTE)
}

/// Every interface's index and name, one dump streamed into a state fresh from `start` (see
/// [`dump_streamed`]).
pub(crate) fn links<S>(
    socket: &Socket,
    attempts: Attempts<impl Fn() -> S, impl Fn(&S, &S) -> bool>,
    mut visit: impl FnMut(&mut S, u32, String),
) -> io::Result<S> {
    dump_streamed(
        socket,
        Dump {
            request: links_request,
            what: "interfaces",
        },
        attempts,
        |state, kind, payload| {
            if let Some((index, name)) = (kind == libc::RTM_NEWLINK)
                .then(|| link_of(payload))
                .flatten()
            {
                visit(state, index, name);
            }
        },
    )
}

/// Every address of `family` (`AF_UNSPEC`: both) the node can send from, one dump streamed
/// into a state fresh from `start` (see [`dump_streamed`]).
pub(crate) fn usable_addresses<S>(
    socket: &Socket,
    family: i32,
    attempts: Attempts<impl Fn() -> S, impl Fn(&S, &S) -> bool>,
    mut visit: impl FnMut(&mut S, Listed),
) -> io::Result<S> {
    dump_streamed(
        socket,
        Dump {
            request: |seq| addresses_request(family, seq),
            what: "addresses",
        },
        attempts,
        |state, kind, payload| {
            if let Some(a) = (kind == libc::RTM_NEWADDR)
                .then(|| address_of(payload))
                .flatten()
            {
                visit(state, a);
            }
        },
    )
}

/// The kernel's route lookup, over one socket kept for a run of questions.
pub struct Routes {
    socket: Socket,
    seq: u32,
}

impl Routes {
    pub fn open() -> io::Result<Self> {
        Ok(Routes {
            socket: socket()?,
            seq: crate::netlink::sequence(1 << 16),
        })
    }

    /// The interface traffic to `destination` leaves by, as `ip route get` says; None when
    /// there is no route (or it leaves by no interface: a blackhole, a prohibit).
    pub fn interface(&mut self, destination: IpAddr) -> io::Result<Option<String>> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        self.socket.send(&route_request(destination, seq))?;
        let deadline = std::time::Instant::now() + DEADLINES.quiet;
        let mut buffer = vec![0u8; 8 * 1024];
        self.socket.answers(
            super::Sequences {
                first: seq,
                count: 1,
            },
            deadline,
            &mut buffer,
            |framed| {
                if framed.kind == libc::RTM_NEWROUTE {
                    return ControlFlow::Break(Ok(route_interface_index(
                        &framed.bytes[NLMSG_HDRLEN..],
                    )
                    .and_then(interface_name)));
                }
                let code = framing::error_code(framed).unwrap_or(0);
                match -code {
                    0 => ControlFlow::Continue(()),
                    libc::ENETUNREACH | libc::EHOSTUNREACH | libc::EACCES | libc::EINVAL => {
                        ControlFlow::Break(Ok(None))
                    }
                    errno => ControlFlow::Break(Err(io::Error::from_raw_os_error(errno))),
                }
            },
        )
    }
}

/// The outgoing interface index of an RTM_NEWROUTE payload. Only RTA_OIF is decoded of its
/// attributes, as the crate decodes it (`parse_u32`: four bytes): its whole attribute decoder
/// would link every tunnel encapsulation's into the binary.
fn route_interface_index(payload: &[u8]) -> Option<u32> {
    let header = RouteHeader::parse(payload).ok()?;
    let oif_kind = RouteAttribute::Oif(0).kind();
    attributes_after(payload, header.buffer_len())
        .filter(|attribute| attribute.kind() == oif_kind)
        .find_map(|attribute| parse_u32(attribute.value()).ok())
}

/// A subscription to address changes (IPv4 and IPv6), read without blocking.
pub struct AddressEvents {
    socket: Socket,
}

impl AddressEvents {
    fn subscribe() -> io::Result<Self> {
        Ok(AddressEvents {
            socket: Socket::bound_to_groups(NETLINK_ROUTE, ADDRESS_GROUPS)?,
        })
    }

    /// A subscription registered with the current tokio runtime (the caller runs inside
    /// one), to be awaited for readiness and then [`drained`](Self::drain).
    pub fn registered() -> io::Result<tokio::io::unix::AsyncFd<AddressEvents>> {
        super::register(Self::subscribe()?, tokio::io::Interest::READABLE)
    }

    /// Reads every pending notification; whether one of them is about an address `matters`
    /// says may change what the agent resolves (lost notifications count as such a change:
    /// what they said is unknown).
    pub fn drain(&self, matters: impl Fn(IpAddr) -> bool) -> bool {
        let mut buffer = vec![0u8; 16 * 1024];
        let mut any = false;
        // An error ends the drain as an empty queue does: the next event reads again.
        let _ = self.socket.drain(&mut buffer, |queued| match queued {
            Queued::Datagram(datagram) => any |= notifications_matter(datagram, &matters),
            Queued::Lost => any = true,
        });
        any
    }
}

/// Whether one datagram of address notifications names an address `matters` admits (a
/// datagram that does not frame, or a notification that does not decode, is taken as one
/// that does).
fn notifications_matter(datagram: &[u8], matters: &impl Fn(IpAddr) -> bool) -> bool {
    let Ok(frames) = framing::frames(datagram) else {
        return true;
    };
    frames.iter().any(|framed| {
        matches!(framed.kind, libc::RTM_NEWADDR | libc::RTM_DELADDR)
            && framed
                .bytes
                .get(NLMSG_HDRLEN..)
                .and_then(listed)
                .is_none_or(|a| matters(a.address))
    })
}

impl std::os::fd::AsRawFd for AddressEvents {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.socket.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IFA_ADDRESS: u16 = 1;
    const IFA_LOCAL: u16 = 2;
    const IFA_CACHEINFO: u16 = 6;
    const IFA_FLAGS: u16 = 8;
    const IFLA_IFNAME: u16 = 3;
    const IFLA_MTU: u16 = 4;
    const RTA_DST: u16 = 1;
    const RTA_OIF: u16 = 4;
    const RTA_TABLE: u16 = 15;

    /// `header` followed by the attributes, each padded to four bytes.
    fn with_attributes(header: &[u8], attrs: &[(u16, &[u8])]) -> Vec<u8> {
        let mut out = header.to_vec();
        for (kind, value) in attrs {
            framing::put_attribute(&mut out, *kind, value);
        }
        out
    }

    fn addr_message(
        family: u8,
        prefix: u8,
        flags: u8,
        index: u32,
        attrs: &[(u16, &[u8])],
    ) -> Vec<u8> {
        let mut header = vec![family, prefix, flags, 0];
        header.extend_from_slice(&index.to_ne_bytes());
        with_attributes(&header, attrs)
    }

    fn framed(kind: u16, payload: &[u8]) -> Vec<u8> {
        let mut out = framing::request(kind, 0, 0, 0);
        out[6..8].copy_from_slice(&0u16.to_ne_bytes());
        out.extend_from_slice(payload);
        framing::finish(&mut out);
        framing::pad(&mut out);
        out
    }

    /// The requests the crate builds are the bytes the hand framing sent: the link dump (an
    /// `ifinfomsg` of zeros), the address dump of a family (an `ifaddrmsg` of zeros but its
    /// family), the route lookup (an `rtmsg` with the family and a full-length destination,
    /// and RTA_DST).
    #[test]
    fn requests_are_the_bytes_the_hand_framing_sent() {
        let hand = |kind: u16, flags: u16, body: &[u8], attrs: &[(u16, &[u8])]| {
            let mut out = framing::request(kind, flags, 77, 0);
            out.extend_from_slice(&with_attributes(body, attrs));
            framing::finish(&mut out);
            out
        };
        assert_eq!(
            links_request(77),
            hand(18, framing::NLM_F_DUMP, &[0; 16], &[])
        );
        for family in [libc::AF_UNSPEC, libc::AF_INET, libc::AF_INET6] {
            assert_eq!(
                addresses_request(family, 77),
                hand(
                    22,
                    framing::NLM_F_DUMP,
                    &[family as u8, 0, 0, 0, 0, 0, 0, 0],
                    &[]
                ),
                "family {family}"
            );
        }
        let mut v4 = [0u8; 12];
        (v4[0], v4[1]) = (libc::AF_INET as u8, 32);
        assert_eq!(
            route_request("203.0.113.9".parse().unwrap(), 77),
            hand(26, 0, &v4, &[(RTA_DST, &[203, 0, 113, 9])])
        );
        let mut v6 = [0u8; 12];
        (v6[0], v6[1]) = (libc::AF_INET6 as u8, 128);
        let destination: std::net::Ipv6Addr = "2001:db8::9".parse().unwrap();
        assert_eq!(
            route_request(IpAddr::V6(destination), 77),
            hand(26, 0, &v6, &[(RTA_DST, &destination.octets())])
        );
    }

    /// Only a notification about an address the predicate admits (one inside a configured
    /// value) is a change worth a pass; a tentative one counts too (its state will change),
    /// and a datagram that does not frame is taken as one.
    #[test]
    fn only_notifications_inside_a_configured_value_matter() {
        let inside = |a: IpAddr| {
            "203.0.113.0/24"
                .parse::<ipnet::IpNet>()
                .unwrap()
                .contains(&a)
        };
        let v4 = |octets: [u8; 4]| {
            addr_message(
                libc::AF_INET as u8,
                32,
                0,
                3,
                &[(IFA_LOCAL, &octets), (IFA_ADDRESS, &octets)],
            )
        };
        let outside = framed(libc::RTM_NEWADDR, &v4([198, 51, 100, 7]));
        assert!(!notifications_matter(&outside, &inside));
        let deleted_inside = framed(libc::RTM_DELADDR, &v4([203, 0, 113, 9]));
        assert!(notifications_matter(&deleted_inside, &inside));
        let both = [outside.clone(), deleted_inside].concat();
        assert!(notifications_matter(&both, &inside));
        let v6: [u8; 16] = "fe80::1".parse::<std::net::Ipv6Addr>().unwrap().octets();
        let link_local = framed(
            libc::RTM_NEWADDR,
            &addr_message(libc::AF_INET6 as u8, 64, 0x40, 5, &[(IFA_ADDRESS, &v6)]),
        );
        assert!(!notifications_matter(&link_local, &inside));
        assert!(notifications_matter(&outside[..10], &inside), "truncated");
        let headless = framed(libc::RTM_NEWADDR, &[2, 24]);
        assert!(notifications_matter(&headless, &inside), "undecodable");
    }

    #[test]
    fn addresses_take_the_local_end_and_skip_tentative_ones() {
        let v4 = addr_message(
            libc::AF_INET as u8,
            24,
            0,
            3,
            &[(IFA_ADDRESS, &[10, 0, 0, 9]), (IFA_LOCAL, &[10, 0, 0, 5])],
        );
        let got = address_of(&v4).unwrap();
        assert_eq!(
            (got.index, got.address, got.prefix_len),
            (3, "10.0.0.5".parse().unwrap(), 24)
        );
        let v6: [u8; 16] = "fd00::5".parse::<std::net::Ipv6Addr>().unwrap().octets();
        let steady = addr_message(libc::AF_INET6 as u8, 64, 0, 4, &[(IFA_ADDRESS, &v6)]);
        assert_eq!(
            address_of(&steady).map(|a| a.address),
            Some("fd00::5".parse().unwrap())
        );
        let tentative = addr_message(libc::AF_INET6 as u8, 64, 0x40, 4, &[(IFA_ADDRESS, &v6)]);
        assert_eq!(address_of(&tentative), None);
        let failed_in_flags = addr_message(
            libc::AF_INET6 as u8,
            64,
            0,
            4,
            &[
                (IFA_ADDRESS, &v6),
                (IFA_FLAGS, &AddressFlags::Dadfailed.bits().to_ne_bytes()),
            ],
        );
        assert_eq!(address_of(&failed_in_flags), None);
        assert_eq!(address_of(&[2, 24]), None, "truncated");
    }

    /// The flags of IFA_FLAGS replace the header's (which hold only the low eight), an
    /// attribute that does not decode is skipped, one of another family than the message's
    /// is no address, and the walk ends at an attribute that does not frame.
    #[test]
    fn address_attributes_are_read_one_by_one() {
        let v6: [u8; 16] = "fd00::7".parse::<std::net::Ipv6Addr>().unwrap().octets();
        let deprecated = addr_message(
            libc::AF_INET6 as u8,
            64,
            0x40,
            4,
            &[
                (IFA_CACHEINFO, &[1, 2, 3]),
                (IFA_ADDRESS, &v6),
                (IFA_FLAGS, &AddressFlags::Deprecated.bits().to_ne_bytes()),
            ],
        );
        let got = address_of(&deprecated).expect("usable: IFA_FLAGS says not tentative");
        assert!(got.deprecated());
        assert_eq!(got.address, IpAddr::from(v6));
        let crossed = addr_message(libc::AF_INET as u8, 24, 0, 4, &[(IFA_ADDRESS, &v6)]);
        assert_eq!(listed(&crossed), None);
        let mut cut = addr_message(
            libc::AF_INET as u8,
            24,
            0,
            4,
            &[(IFA_LOCAL, &[10, 0, 0, 5])],
        );
        cut.extend_from_slice(&[200, 0, 2, 0]);
        assert_eq!(
            listed(&cut).map(|a| a.address),
            Some("10.0.0.5".parse().unwrap())
        );
    }

    /// A link's index and name, whatever its other attributes hold (one the crate could not
    /// decode does not lose the name).
    #[test]
    fn a_link_is_its_index_and_name() {
        let mut header = [0u8; 16];
        header[4..8].copy_from_slice(&7u32.to_ne_bytes());
        let link = with_attributes(&header, &[(IFLA_MTU, &[0, 5]), (IFLA_IFNAME, b"eth0\0")]);
        assert_eq!(link_of(&link), Some((7, "eth0".to_string())));
        let nameless = with_attributes(&header, &[(IFLA_MTU, &1500u32.to_ne_bytes())]);
        assert_eq!(link_of(&nameless), None);
        assert_eq!(link_of(&header[..10]), None, "truncated");
        // A name that is not UTF-8 is still a link (the kernel allows it), read lossily; what
        // follows the first NUL is not the name.
        let odd = with_attributes(&header, &[(IFLA_IFNAME, b"e\xfft0\0junk")]);
        assert_eq!(link_of(&odd), Some((7, "e\u{fffd}t0".to_string())));
    }

    /// A route's outgoing interface is its RTA_OIF; a route without one (a blackhole) has none.
    #[test]
    fn a_route_leaves_by_its_oif() {
        let mut header = [0u8; 12];
        (header[0], header[1], header[7]) = (libc::AF_INET as u8, 32, 1);
        let route = with_attributes(
            &header,
            &[
                (RTA_TABLE, &254u32.to_ne_bytes()),
                (RTA_DST, &[203, 0, 113, 9]),
                (RTA_OIF, &5u32.to_ne_bytes()),
            ],
        );
        assert_eq!(route_interface_index(&route), Some(5));
        let blackhole = with_attributes(&header, &[(RTA_DST, &[203, 0, 113, 9])]);
        assert_eq!(route_interface_index(&blackhole), None);
        let short_oif = with_attributes(&header, &[(RTA_OIF, &[5, 0])]);
        assert_eq!(route_interface_index(&short_oif), None);
    }
}
