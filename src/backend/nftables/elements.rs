//! Changing a few elements of our interval set in ONE nfnetlink batch (DELSETELEM then
//! NEWSETELEM), without the nft CLI: nft 1.0.6 loads the elements of every interval set in
//! the namespace for an `add element`, seconds at 100,000, while the batch costs what it
//! carries. Each CIDR is an interval: a start element and, unless it reaches the end of the
//! address space, an interval-end element at the first address after it.

use ipnet::IpNet;
use netlink_sys::{protocols::NETLINK_NETFILTER, Socket, SocketAddr};
use std::io;

const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
const NFNL_MSG_BATCH_END: u16 = 0x11;
const NFT_MSG_NEWSETELEM: u16 = 12;
const NFT_MSG_DELSETELEM: u16 = 14;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_CREATE: u16 = 0x400;
const NLMSG_ERROR: u16 = 2;
const NLA_F_NESTED: u16 = 0x8000;
const NFTA_SET_ELEM_LIST_TABLE: u16 = 1;
const NFTA_SET_ELEM_LIST_SET: u16 = 2;
const NFTA_SET_ELEM_LIST_ELEMENTS: u16 = 3;
const NFTA_LIST_ELEM: u16 = 1;
const NFTA_SET_ELEM_KEY: u16 = 1;
const NFTA_SET_ELEM_FLAGS: u16 = 3;
const NFTA_DATA_VALUE: u16 = 1;
const NFT_SET_ELEM_INTERVAL_END: u32 = 1;
const NFPROTO_IPV4: u8 = 2;
const NFPROTO_IPV6: u8 = 10;
/// More changes than this go through the whole-table transaction instead (one netlink
/// message must fit the socket's buffer).
pub(super) const MAX_BATCH_CIDRS: usize = 2000;

/// Appends one netlink attribute, padded to 4 bytes.
fn attr(buf: &mut Vec<u8>, kind: u16, payload: &[u8]) {
    let len = 4 + payload.len();
    buf.extend_from_slice(&(len as u16).to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(payload);
    buf.resize(buf.len() + (4 - len % 4) % 4, 0);
}

/// A nested attribute built by `fill`.
fn nested(buf: &mut Vec<u8>, kind: u16, fill: impl FnOnce(&mut Vec<u8>)) {
    let mut inner = Vec::new();
    fill(&mut inner);
    attr(buf, kind | NLA_F_NESTED, &inner);
}

fn cstring(text: &str) -> Vec<u8> {
    let mut bytes = text.as_bytes().to_vec();
    bytes.push(0);
    bytes
}

/// One netlink message: header, nfgenmsg, attributes.
fn message(kind: u16, flags: u16, seq: u32, family: u8, res_id: u16, attrs: &[u8]) -> Vec<u8> {
    let len = 16 + 4 + attrs.len();
    let mut msg = Vec::with_capacity(len);
    msg.extend_from_slice(&(len as u32).to_ne_bytes());
    msg.extend_from_slice(&kind.to_ne_bytes());
    msg.extend_from_slice(&flags.to_ne_bytes());
    msg.extend_from_slice(&seq.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes());
    msg.push(family);
    msg.push(0);
    msg.extend_from_slice(&res_id.to_be_bytes());
    msg.extend_from_slice(attrs);
    msg
}

/// The key bytes of an address (network order), and of the first address after a network
/// (None past the end of the address space).
fn bounds(net: &IpNet) -> (Vec<u8>, Option<Vec<u8>>) {
    match net {
        IpNet::V4(n) => {
            let start = u32::from(n.network());
            let end = u32::from(n.broadcast()).checked_add(1);
            (
                start.to_be_bytes().to_vec(),
                end.map(|e| e.to_be_bytes().to_vec()),
            )
        }
        IpNet::V6(n) => {
            let start = u128::from(n.network());
            let end = u128::from(n.broadcast()).checked_add(1);
            (
                start.to_be_bytes().to_vec(),
                end.map(|e| e.to_be_bytes().to_vec()),
            )
        }
    }
}

/// The element list attribute for `nets`: each as its start and interval-end elements.
fn element_list(nets: &[IpNet]) -> Vec<u8> {
    let mut list = Vec::new();
    nested(&mut list, NFTA_SET_ELEM_LIST_ELEMENTS, |elements| {
        for net in nets {
            let (start, end) = bounds(net);
            nested(elements, NFTA_LIST_ELEM, |e| {
                nested(e, NFTA_SET_ELEM_KEY, |k| attr(k, NFTA_DATA_VALUE, &start));
            });
            if let Some(end) = end {
                nested(elements, NFTA_LIST_ELEM, |e| {
                    nested(e, NFTA_SET_ELEM_KEY, |k| attr(k, NFTA_DATA_VALUE, &end));
                    attr(
                        e,
                        NFTA_SET_ELEM_FLAGS,
                        &NFT_SET_ELEM_INTERVAL_END.to_be_bytes(),
                    );
                });
            }
        }
    });
    list
}

/// The whole batch: begin, the deletions, the additions, end. Returns it with the number of
/// acknowledgements to expect.
pub(super) fn batch(
    v6: bool,
    table: &str,
    set: &str,
    remove: &[IpNet],
    add: &[IpNet],
) -> (Vec<u8>, usize) {
    let family = if v6 { NFPROTO_IPV6 } else { NFPROTO_IPV4 };
    let mut buf = message(
        NFNL_MSG_BATCH_BEGIN,
        NLM_F_REQUEST,
        1,
        0,
        NFNL_SUBSYS_NFTABLES,
        &[],
    );
    let mut seq = 2;
    let mut acks = 0;
    for (kind, flags, nets) in [
        (NFT_MSG_DELSETELEM, NLM_F_REQUEST | NLM_F_ACK, remove),
        (
            NFT_MSG_NEWSETELEM,
            NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE,
            add,
        ),
    ] {
        if nets.is_empty() {
            continue;
        }
        let mut attrs = Vec::new();
        attr(&mut attrs, NFTA_SET_ELEM_LIST_TABLE, &cstring(table));
        attr(&mut attrs, NFTA_SET_ELEM_LIST_SET, &cstring(set));
        attrs.extend_from_slice(&element_list(nets));
        buf.extend_from_slice(&message(
            (NFNL_SUBSYS_NFTABLES << 8) | kind,
            flags,
            seq,
            family,
            0,
            &attrs,
        ));
        seq += 1;
        acks += 1;
    }
    buf.extend_from_slice(&message(
        NFNL_MSG_BATCH_END,
        NLM_F_REQUEST,
        seq,
        0,
        NFNL_SUBSYS_NFTABLES,
        &[],
    ));
    (buf, acks)
}

/// Sends the batch and waits for every acknowledgement; the first error fails it (the kernel
/// then applied nothing: a batch commits as a whole).
pub(super) fn apply(
    v6: bool,
    table: &str,
    set: &str,
    remove: &[IpNet],
    add: &[IpNet],
) -> io::Result<()> {
    let (buf, mut acks) = batch(v6, table, set, remove, add);
    if acks == 0 {
        return Ok(());
    }
    let mut socket = Socket::new(NETLINK_NETFILTER)?;
    socket.bind_auto()?;
    socket.connect(&SocketAddr::new(0, 0))?;
    socket.send(&buf, 0)?;
    while acks > 0 {
        let (reply, _) = socket.recv_from_full()?;
        let mut rest = reply.as_slice();
        while rest.len() >= 16 {
            let len = u32::from_ne_bytes(rest[0..4].try_into().expect("4 bytes")) as usize;
            let kind = u16::from_ne_bytes(rest[4..6].try_into().expect("2 bytes"));
            if len < 16 || len > rest.len() {
                break;
            }
            if kind == NLMSG_ERROR && len >= 20 {
                let code = i32::from_ne_bytes(rest[16..20].try_into().expect("4 bytes"));
                if code != 0 {
                    return Err(io::Error::from_raw_os_error(-code));
                }
                acks -= 1;
            }
            rest = &rest[(len + 3) & !3..];
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_have_a_start_and_an_end_past_the_network() {
        let (start, end) = bounds(&"10.0.0.0/8".parse().unwrap());
        assert_eq!(start, [10, 0, 0, 0]);
        assert_eq!(end.unwrap(), [11, 0, 0, 0]);
        let (_, end) = bounds(&"255.0.0.0/8".parse().unwrap());
        assert_eq!(end, None, "reaches the end of the address space");
        let (start, end) = bounds(&"fd00::/8".parse().unwrap());
        assert_eq!(start[0], 0xfd);
        assert_eq!(end.unwrap()[0], 0xfe);
    }

    #[test]
    fn a_batch_is_framed_and_counts_its_acknowledgements() {
        let one: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let (buf, acks) = batch(false, "ipmasq", "nomasq", &one, &one);
        assert_eq!(acks, 2);
        // begin, del, new, end: walk the lengths.
        let mut kinds = Vec::new();
        let mut rest = buf.as_slice();
        while !rest.is_empty() {
            let len = u32::from_ne_bytes(rest[0..4].try_into().unwrap()) as usize;
            kinds.push(u16::from_ne_bytes(rest[4..6].try_into().unwrap()));
            rest = &rest[len..];
        }
        assert_eq!(kinds, [0x10, 0x0a0e, 0x0a0c, 0x11]);
        let (_, acks) = batch(false, "ipmasq", "nomasq", &[], &[]);
        assert_eq!(acks, 0);
    }
}
