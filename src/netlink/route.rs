//! rtnetlink (NETLINK_ROUTE): links and addresses read as streamed dumps (any number of
//! addresses costs one receive buffer; an interrupted dump is read again), a subscription to
//! address changes that says whether one can move what the agent resolves, and the kernel's
//! route lookup (which interface traffic to an address leaves). Hand-framed messages of a
//! few fixed layouts; no route library. What the node's addresses mean is `crate::addresses`.

use super::dump as netlink_dump;
use super::framing::{self, NLMSG_HDRLEN, NLM_F_DUMP};
use super::{interface_name, Queued, Socket, NETLINK_ROUTE};
use std::io;
use std::net::IpAddr;
use std::ops::ControlFlow;
use std::time::Duration;

const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
const RTM_NEWADDR: u16 = 20;
const RTM_DELADDR: u16 = 21;
const RTM_GETADDR: u16 = 22;
const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTMSG_LEN: usize = 12;
const IFLA_IFNAME: u16 = 3;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const IFA_FLAGS: u16 = 8;
const IFA_F_DADFAILED: u32 = 0x08;
const IFA_F_DEPRECATED: u32 = 0x20;
const IFA_F_TENTATIVE: u32 = 0x40;
/// The multicast groups of IPv4 and IPv6 address changes.
const RTMGRP_IPV4_IFADDR: u32 = 0x10;
const RTMGRP_IPV6_IFADDR: u32 = 0x100;
const IFINFOMSG_LEN: usize = 16;
const IFADDRMSG_LEN: usize = 8;
/// How long one dump may go without a part, and in all.
const DEADLINES: netlink_dump::Deadlines = netlink_dump::Deadlines {
    quiet: Duration::from_secs(5),
    overall: Duration::from_secs(30),
};
/// A dump interrupted by a concurrent change (interfaces coming and going by the thousand) is
/// started again within the same read for this long, and at least [`ATTEMPTS`] times.
const RETRY_WINDOW: Duration = Duration::from_secs(2);
const ATTEMPTS: usize = 5;

/// A dump request of `kind` whose family header is `header` (zeroed but for its family).
fn dump_request(kind: u16, header: &[u8], seq: u32) -> Vec<u8> {
    let mut out = framing::request(kind, NLM_F_DUMP, seq, NLMSG_HDRLEN + header.len());
    out.extend_from_slice(header);
    framing::finish(&mut out);
    out
}

/// Whether an error says that every dump of a read was interrupted by concurrent changes (a
/// read to try again soon, not a fault).
pub fn is_interrupted(err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::Interrupted
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
    (kind, header): (u16, &[u8]),
    what: &str,
    (start, agree): (impl Fn() -> S, impl Fn(&S, &S) -> bool),
    mut visit: impl FnMut(&mut S, u16, &[u8]),
) -> io::Result<S> {
    let began = std::time::Instant::now();
    let mut attempt = 0;
    let mut interrupted: Option<S> = None;
    loop {
        let seq = crate::netlink::sequence(1);
        let mut state = start();
        let ended = netlink_dump::dump_each(
            socket,
            &dump_request(kind, header, seq),
            seq,
            DEADLINES,
            |kind, payload| {
                visit(&mut state, kind, payload);
                Ok(())
            },
        )?;
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

/// For a dump whose interrupted reads are never taken.
pub(crate) fn never<S>(_: &S, _: &S) -> bool {
    false
}

/// An interface index and name from an RTM_NEWLINK payload.
fn link_of(payload: &[u8]) -> Option<(u32, String)> {
    let index = u32::from_ne_bytes(payload.get(4..8)?.try_into().ok()?);
    let attrs = payload.get(IFINFOMSG_LEN..)?;
    let name = framing::attributes(attrs)
        .find_map(|(kind, value)| (kind == IFLA_IFNAME).then_some(value))?;
    let name = name.split(|b| *b == 0).next()?;
    Some((index, String::from_utf8_lossy(name).into_owned()))
}

/// One address as an RTM_NEWADDR (or RTM_DELADDR) payload lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Listed {
    pub index: u32,
    pub address: IpAddr,
    pub prefix_len: u8,
    /// `IFA_F_*`, from the header or (complete) from IFA_FLAGS.
    pub flags: u32,
}

impl Listed {
    /// Whether the kernel can source from it: not tentative, not failed duplicate detection.
    pub fn usable(&self) -> bool {
        self.flags & (IFA_F_TENTATIVE | IFA_F_DADFAILED) == 0
    }

    /// Past its preferred lifetime (IPv6): still held, not for new flows while another is.
    pub fn deprecated(&self) -> bool {
        self.flags & IFA_F_DEPRECATED != 0
    }
}

/// The address of an RTM_NEWADDR/RTM_DELADDR payload, whatever its state.
pub(crate) fn listed(payload: &[u8]) -> Option<Listed> {
    let family = *payload.first()?;
    let prefix_len = *payload.get(1)?;
    let mut flags = u32::from(*payload.get(2)?);
    let index = u32::from_ne_bytes(payload.get(4..8)?.try_into().ok()?);
    let (mut local, mut address) = (None, None);
    for (kind, value) in framing::attributes(payload.get(IFADDRMSG_LEN..)?) {
        let ip = match (family as i32, value.len()) {
            (libc::AF_INET, 4) => Some(IpAddr::from(<[u8; 4]>::try_from(value).ok()?)),
            (libc::AF_INET6, 16) => Some(IpAddr::from(<[u8; 16]>::try_from(value).ok()?)),
            _ => None,
        };
        match kind {
            IFA_LOCAL => local = ip,
            IFA_ADDRESS => address = ip,
            IFA_FLAGS if value.len() == 4 => {
                flags = u32::from_ne_bytes(value.try_into().ok()?);
            }
            _ => {}
        }
    }
    // IFA_LOCAL is the node's own end (IFA_ADDRESS the peer's on a point-to-point link).
    Some(Listed {
        index,
        address: local.or(address)?,
        prefix_len,
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

/// The address-dump request header asking for one family (`AF_UNSPEC`: both).
fn address_header(family: i32) -> [u8; IFADDRMSG_LEN] {
    let mut header = [0u8; IFADDRMSG_LEN];
    header[0] = family as u8;
    header
}

/// Every interface's index and name, one dump streamed into a state fresh from `start` (see
/// [`dump_streamed`]).
pub(crate) fn links<S>(
    socket: &Socket,
    (start, agree): (impl Fn() -> S, impl Fn(&S, &S) -> bool),
    mut visit: impl FnMut(&mut S, u32, String),
) -> io::Result<S> {
    dump_streamed(
        socket,
        (RTM_GETLINK, &[0u8; IFINFOMSG_LEN]),
        "interfaces",
        (start, agree),
        |state, kind, payload| {
            if let Some((index, name)) = (kind == RTM_NEWLINK).then(|| link_of(payload)).flatten() {
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
    (start, agree): (impl Fn() -> S, impl Fn(&S, &S) -> bool),
    mut visit: impl FnMut(&mut S, Listed),
) -> io::Result<S> {
    dump_streamed(
        socket,
        (RTM_GETADDR, &address_header(family)),
        "addresses",
        (start, agree),
        |state, kind, payload| {
            if let Some(a) = (kind == RTM_NEWADDR).then(|| address_of(payload)).flatten() {
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
        let (family, octets) = match destination {
            IpAddr::V4(a) => (libc::AF_INET as u8, a.octets().to_vec()),
            IpAddr::V6(a) => (libc::AF_INET6 as u8, a.octets().to_vec()),
        };
        let len = NLMSG_HDRLEN + RTMSG_LEN + 4 + octets.len();
        let mut request = framing::request(RTM_GETROUTE, 0, seq, len);
        let mut header = [0u8; RTMSG_LEN];
        header[0] = family;
        header[1] = (octets.len() * 8) as u8;
        request.extend_from_slice(&header);
        framing::put_attribute(&mut request, RTA_DST, &octets);
        framing::finish(&mut request);
        self.socket.send(&request)?;
        let deadline = std::time::Instant::now() + DEADLINES.quiet;
        let mut buffer = vec![0u8; 8 * 1024];
        self.socket
            .answers((seq, 1), deadline, &mut buffer, |framed| {
                if framed.kind == RTM_NEWROUTE {
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
            })
    }
}

/// The outgoing interface index of an RTM_NEWROUTE payload.
fn route_interface_index(payload: &[u8]) -> Option<u32> {
    framing::attributes(payload.get(RTMSG_LEN..)?)
        .find(|(kind, value)| *kind == RTA_OIF && value.len() == 4)
        .map(|(_, value)| u32::from_ne_bytes(value.try_into().expect("4 bytes")))
}

/// A subscription to address changes (IPv4 and IPv6), read without blocking.
pub struct AddressEvents {
    socket: Socket,
}

impl AddressEvents {
    pub fn subscribe() -> io::Result<Self> {
        Ok(AddressEvents {
            socket: Socket::bound_to_groups(
                NETLINK_ROUTE,
                RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR,
            )?,
        })
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
/// datagram that does not frame is taken as one that does).
fn notifications_matter(datagram: &[u8], matters: &impl Fn(IpAddr) -> bool) -> bool {
    let Ok(frames) = framing::frames(datagram) else {
        return true;
    };
    frames.iter().any(|framed| {
        matches!(framed.kind, RTM_NEWADDR | RTM_DELADDR)
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

    fn addr_message(
        family: u8,
        prefix: u8,
        flags: u8,
        index: u32,
        attrs: &[(u16, &[u8])],
    ) -> Vec<u8> {
        let mut out = vec![family, prefix, flags, 0];
        out.extend_from_slice(&index.to_ne_bytes());
        for (kind, value) in attrs {
            let len = 4 + value.len();
            out.extend_from_slice(&(len as u16).to_ne_bytes());
            out.extend_from_slice(&kind.to_ne_bytes());
            out.extend_from_slice(value);
            framing::pad(&mut out);
        }
        out
    }

    fn framed(kind: u16, payload: &[u8]) -> Vec<u8> {
        let len = NLMSG_HDRLEN + payload.len();
        let mut out = Vec::new();
        out.extend_from_slice(&(len as u32).to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(&0u16.to_ne_bytes());
        out.extend_from_slice(&0u32.to_ne_bytes());
        out.extend_from_slice(&0u32.to_ne_bytes());
        out.extend_from_slice(payload);
        framing::pad(&mut out);
        out
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
        let outside = framed(RTM_NEWADDR, &v4([198, 51, 100, 7]));
        assert!(!notifications_matter(&outside, &inside));
        let deleted_inside = framed(RTM_DELADDR, &v4([203, 0, 113, 9]));
        assert!(notifications_matter(&deleted_inside, &inside));
        let both = [outside.clone(), deleted_inside].concat();
        assert!(notifications_matter(&both, &inside));
        let v6: [u8; 16] = "fe80::1".parse::<std::net::Ipv6Addr>().unwrap().octets();
        let link_local = framed(
            RTM_NEWADDR,
            &addr_message(libc::AF_INET6 as u8, 64, 0x40, 5, &[(IFA_ADDRESS, &v6)]),
        );
        assert!(!notifications_matter(&link_local, &inside));
        assert!(notifications_matter(&outside[..10], &inside), "truncated");
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
                (IFA_FLAGS, &IFA_F_DADFAILED.to_ne_bytes()),
            ],
        );
        assert_eq!(address_of(&failed_in_flags), None);
        assert_eq!(address_of(&[2, 24]), None, "truncated");
    }
}
