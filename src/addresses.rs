//! This node's own addresses and their changes, over rtnetlink (NETLINK_ROUTE): one dump of
//! interface names and addresses when `outputAddress` must be resolved, a subscription to
//! address events so the agent re-resolves when an address comes or goes, not at the next
//! resync, and the kernel's route lookup (which interface traffic to an address leaves).
//! Hand-framed messages of a few fixed layouts; no route library.

use crate::netlink_dump::{self, NLMSG_HDRLEN};
use crate::plan::egress::NodeAddress;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};
use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::time::Duration;

const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
const RTM_NEWADDR: u16 = 20;
const RTM_GETADDR: u16 = 22;
const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTMSG_LEN: usize = 12;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
const IFLA_IFNAME: u16 = 3;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const IFA_FLAGS: u16 = 8;
const IFA_F_DADFAILED: u32 = 0x08;
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
/// Attempts when a dump is interrupted by a concurrent change.
const ATTEMPTS: usize = 5;
/// The most addresses read (a node with more is not one this agent can pick from sanely).
const MAX_ADDRESSES: usize = 65_536;

/// The messages of a dump: each one's type and payload (after the netlink header).
type Messages = Vec<(u16, Vec<u8>)>;

/// A dump request of `kind` with a zeroed family header of `header` bytes.
fn dump_request(kind: u16, header: usize, seq: u32) -> Vec<u8> {
    let len = NLMSG_HDRLEN + header;
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&(len as u32).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.resize(len, 0);
    out
}

/// The messages of one dump (kind and payload after the netlink header); None when a change
/// interrupted it.
fn dump(socket: &Socket, kind: u16, header: usize, seq: u32) -> io::Result<Option<Messages>> {
    let mut found = Vec::new();
    let ended = netlink_dump::dump_each(
        socket,
        &dump_request(kind, header, seq),
        seq,
        DEADLINES,
        |kind, payload| {
            if found.len() >= MAX_ADDRESSES {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("more than {MAX_ADDRESSES} interfaces or addresses"),
                ));
            }
            found.push((kind, payload.to_vec()));
            Ok(())
        },
    )?;
    Ok((ended == netlink_dump::Ended::Whole).then_some(found))
}

/// A dump, started again while changes interrupt it.
fn dump_whole(socket: &Socket, kind: u16, header: usize, what: &str) -> io::Result<Messages> {
    for attempt in 0..ATTEMPTS {
        let seq = crate::backend::nfnetlink::sequence(1).wrapping_add(attempt as u32);
        if let Some(found) = dump(socket, kind, header, seq)? {
            return Ok(found);
        }
    }
    Err(io::Error::other(format!(
        "{what}: every dump was interrupted by a concurrent change"
    )))
}

/// An interface index and name from an RTM_NEWLINK payload.
fn link_of(payload: &[u8]) -> Option<(u32, String)> {
    let index = u32::from_ne_bytes(payload.get(4..8)?.try_into().ok()?);
    let attrs = payload.get(IFINFOMSG_LEN..)?;
    let name = crate::backend::nfnetlink::wire::attributes(attrs)
        .find_map(|(kind, value)| (kind == IFLA_IFNAME).then_some(value))?;
    let name = name.split(|b| *b == 0).next()?;
    Some((index, String::from_utf8_lossy(name).into_owned()))
}

/// An address from an RTM_NEWADDR payload: its interface index, address and prefix; None for
/// one the kernel cannot source from yet or ever (tentative, failed duplicate detection).
pub(crate) fn address_of(payload: &[u8]) -> Option<(u32, IpAddr, u8)> {
    let family = *payload.first()?;
    let prefix_len = *payload.get(1)?;
    let mut flags = u32::from(*payload.get(2)?);
    let index = u32::from_ne_bytes(payload.get(4..8)?.try_into().ok()?);
    let (mut local, mut address) = (None, None);
    for (kind, value) in crate::backend::nfnetlink::wire::attributes(payload.get(IFADDRMSG_LEN..)?)
    {
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
    if flags & (IFA_F_TENTATIVE | IFA_F_DADFAILED) != 0 {
        return None;
    }
    // IFA_LOCAL is the node's own end (IFA_ADDRESS the peer's on a point-to-point link).
    Some((index, local.or(address)?, prefix_len))
}

/// What this node has: every address it can send from (with its interface's name), and the
/// names of all its interfaces, sorted. One dump of each.
pub struct NodeView {
    pub addresses: Vec<NodeAddress>,
    pub interfaces: Vec<String>,
}

/// Reads the [`NodeView`] of this network namespace.
pub fn node_view() -> io::Result<NodeView> {
    let mut socket = Socket::new(NETLINK_ROUTE)?;
    socket.bind_auto()?;
    socket.connect(&SocketAddr::new(0, 0))?;
    let names: HashMap<u32, String> =
        dump_whole(&socket, RTM_GETLINK, IFINFOMSG_LEN, "interfaces")?
            .into_iter()
            .filter(|(kind, _)| *kind == RTM_NEWLINK)
            .filter_map(|(_, payload)| link_of(&payload))
            .collect();
    let mut addresses: Vec<NodeAddress> =
        dump_whole(&socket, RTM_GETADDR, IFADDRMSG_LEN, "addresses")?
            .into_iter()
            .filter(|(kind, _)| *kind == RTM_NEWADDR)
            .filter_map(|(_, payload)| address_of(&payload))
            .map(|(index, address, prefix_len)| NodeAddress {
                interface: names
                    .get(&index)
                    .cloned()
                    .unwrap_or_else(|| format!("if{index}")),
                address,
                prefix_len,
            })
            .collect();
    addresses.sort_by(|a, b| (a.address, &a.interface).cmp(&(b.address, &b.interface)));
    let mut interfaces: Vec<String> = names.into_values().collect();
    interfaces.sort();
    Ok(NodeView {
        addresses,
        interfaces,
    })
}

/// Every address this node holds and can send from, with its interface's name.
pub fn node_addresses() -> io::Result<Vec<NodeAddress>> {
    node_view().map(|view| view.addresses)
}

/// The addresses this node holds, for membership tests.
pub fn node_address_set() -> io::Result<std::collections::HashSet<IpAddr>> {
    Ok(node_addresses()?.into_iter().map(|a| a.address).collect())
}

/// The kernel's route lookup, over one socket kept for a run of questions.
pub struct Routes {
    socket: Socket,
    seq: u32,
}

impl Routes {
    pub fn open() -> io::Result<Self> {
        let mut socket = Socket::new(NETLINK_ROUTE)?;
        socket.bind_auto()?;
        socket.connect(&SocketAddr::new(0, 0))?;
        Ok(Routes {
            socket,
            seq: crate::backend::nfnetlink::sequence(1 << 16),
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
        let attr_len = 4 + octets.len();
        let len = NLMSG_HDRLEN + RTMSG_LEN + attr_len;
        let mut request = Vec::with_capacity(len);
        request.extend_from_slice(&(len as u32).to_ne_bytes());
        request.extend_from_slice(&RTM_GETROUTE.to_ne_bytes());
        request.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
        request.extend_from_slice(&seq.to_ne_bytes());
        request.extend_from_slice(&0u32.to_ne_bytes());
        let mut header = [0u8; RTMSG_LEN];
        header[0] = family;
        header[1] = (octets.len() * 8) as u8;
        request.extend_from_slice(&header);
        request.extend_from_slice(&(attr_len as u16).to_ne_bytes());
        request.extend_from_slice(&RTA_DST.to_ne_bytes());
        request.extend_from_slice(&octets);
        self.socket.send(&request, 0)?;
        let deadline = std::time::Instant::now() + DEADLINES.quiet;
        let mut buffer = vec![0u8; 8 * 1024];
        loop {
            crate::backend::nfnetlink::time_out_receives_at(&self.socket, deadline)?;
            let length = crate::backend::nfnetlink::receive_into(&self.socket, &mut buffer, 0)?;
            let frames =
                crate::backend::nfnetlink::wire::frames(&buffer[..length.min(buffer.len())])
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            for framed in frames.iter().filter(|f| f.seq == seq) {
                if framed.kind == RTM_NEWROUTE {
                    return Ok(route_interface_index(&framed.bytes[NLMSG_HDRLEN..])
                        .and_then(interface_name));
                }
                let code = crate::backend::nfnetlink::wire::error_code(framed).unwrap_or(0);
                match -code {
                    0 => {}
                    libc::ENETUNREACH | libc::EHOSTUNREACH | libc::EACCES | libc::EINVAL => {
                        return Ok(None)
                    }
                    errno => return Err(io::Error::from_raw_os_error(errno)),
                }
            }
        }
    }
}

/// The outgoing interface index of an RTM_NEWROUTE payload.
fn route_interface_index(payload: &[u8]) -> Option<u32> {
    crate::backend::nfnetlink::wire::attributes(payload.get(RTMSG_LEN..)?)
        .find(|(kind, value)| *kind == RTA_OIF && value.len() == 4)
        .map(|(_, value)| u32::from_ne_bytes(value.try_into().expect("4 bytes")))
}

/// The name of the interface with `index` in this network namespace.
fn interface_name(index: u32) -> Option<String> {
    let mut name = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: if_indextoname writes at most IF_NAMESIZE bytes, NUL included, into `name`.
    let found = unsafe { libc::if_indextoname(index, name.as_mut_ptr()) };
    if found.is_null() {
        return None;
    }
    // SAFETY: on success `name` holds a NUL-terminated string.
    let text = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) };
    Some(text.to_string_lossy().into_owned())
}

/// A subscription to address changes (IPv4 and IPv6), read without blocking.
pub struct AddressEvents {
    socket: Socket,
}

impl AddressEvents {
    pub fn subscribe() -> io::Result<Self> {
        let mut socket = Socket::new(NETLINK_ROUTE)?;
        socket.bind(&SocketAddr::new(0, RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR))?;
        socket.set_non_blocking(true)?;
        Ok(AddressEvents { socket })
    }

    /// Reads every pending notification; whether any arrived (or some were lost, which
    /// counts as a change too).
    pub fn drain(&self) -> bool {
        let mut buffer = vec![0u8; 16 * 1024];
        let mut any = false;
        loop {
            let mut slice = &mut buffer[..];
            match self.socket.recv(&mut slice, 0) {
                Ok(_) => any = true,
                Err(err) if err.raw_os_error() == Some(libc::ENOBUFS) => any = true,
                Err(_) => return any,
            }
        }
    }
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
            out.resize((out.len() + 3) & !3, 0);
        }
        out
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
        assert_eq!(address_of(&v4), Some((3, "10.0.0.5".parse().unwrap(), 24)));
        let v6: [u8; 16] = "fd00::5".parse::<std::net::Ipv6Addr>().unwrap().octets();
        let steady = addr_message(libc::AF_INET6 as u8, 64, 0, 4, &[(IFA_ADDRESS, &v6)]);
        assert_eq!(
            address_of(&steady).map(|a| a.1),
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
