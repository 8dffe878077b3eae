//! Changing a few elements of our interval set in ONE nfnetlink batch (DELSETELEM then
//! NEWSETELEM), without the nft CLI: nft 1.0.6 loads the elements of every interval set in
//! the namespace for an `add element`, seconds at 100,000, while the batch costs what it
//! carries. Each CIDR is an interval: a start element and, unless it reaches the end of the
//! address space, an interval-end element at the first address after it.

use crate::backend::netlink::{
    attr, cstring, error_code, message, messages, nested, Requester, NFNL_SUBSYS_NFTABLES,
    NLMSG_ERROR, NLM_F_ACK, NLM_F_CREATE, NLM_F_REQUEST,
};
use ipnet::IpNet;
use std::io;

const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
const NFNL_MSG_BATCH_END: u16 = 0x11;
const NFT_MSG_NEWSETELEM: u16 = 12;
const NFT_MSG_DELSETELEM: u16 = 14;
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
        (0, NFNL_SUBSYS_NFTABLES),
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
            (family, 0),
            &attrs,
        ));
        seq += 1;
        acks += 1;
    }
    buf.extend_from_slice(&message(
        NFNL_MSG_BATCH_END,
        NLM_F_REQUEST,
        seq,
        (0, NFNL_SUBSYS_NFTABLES),
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
    let requester = Requester::open()?;
    requester.send(&buf)?;
    while acks > 0 {
        let reply = requester.receive()?;
        for (kind, msg) in messages(&reply) {
            if kind != NLMSG_ERROR {
                continue;
            }
            match error_code(msg) {
                Some(0) => acks -= 1,
                Some(code) => return Err(io::Error::from_raw_os_error(-code)),
                None => {}
            }
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
