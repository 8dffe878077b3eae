//! The statements of the pod share as nf_tables expressions, both ways: `ct state new`, a
//! dynamic set written from the packet path with a stateful expression in each element
//! (`update @s { ip saddr limit rate over R/second burst B packets }`,
//! `add @s { ip saddr ct count over N }`, the key optionally `ip saddr . ip daddr . th dport`;
//! or no expression, the key alone remembered until the set's timeout: `update @s { ip saddr }`),
//! the refusal's copy to NFLOG (`log prefix "P" group G snaplen S`) and `reject`. The
//! expressions the crate does not type are written by hand here (`dynset` nests one
//! expression of its own).

use super::statement::{Limiter, NflogCopy, Reject, ShareKey};
use super::wire::{be32, other_expr};
use crate::netlink::framing::{attribute, put_attribute, NLA_TYPE_MASK};
use netlink_packet_core::{DefaultNla, Nla};
use netlink_packet_netfilter::nftables::{
    Bitwise, Cmp, DataAttribute, ExpressionAttribute, Expressions, ListAttribute, Operator,
    Payload, Register,
};

type Expr = ListAttribute<ExpressionAttribute>;

/// `NF_CT_STATE_BIT(IP_CT_NEW)`: the bit of `ct state new`, in host order as `ct` loads it.
pub(super) const CT_STATE_NEW: u32 = 1 << 3;
/// `NFT_CT_STATE`, the `ct` key of the state.
const NFT_CT_STATE: u32 = 0;
/// `NFT_DYNSET_OP_ADD` and `NFT_DYNSET_OP_UPDATE`.
const DYNSET_OP_ADD: u32 = 0;
const DYNSET_OP_UPDATE: u32 = 1;
/// `NFTA_DYNSET_*` attributes.
const DYNSET_SET_NAME: u16 = 1;
const DYNSET_OP: u16 = 3;
const DYNSET_SREG_KEY: u16 = 4;
const DYNSET_SREG_DATA: u16 = 5;
const DYNSET_TIMEOUT: u16 = 6;
const DYNSET_EXPR: u16 = 7;
const DYNSET_FLAGS: u16 = 9;
const DYNSET_EXPRESSIONS: u16 = 10;
/// `NFT_DYNSET_F_INV`: the statement matches when the update fails.
const DYNSET_F_INV: u32 = 1;
/// `NFTA_EXPR_NAME`, `NFTA_EXPR_DATA`.
const EXPR_NAME: u16 = 1;
const EXPR_DATA: u16 = 2;
/// `NFTA_LIMIT_*`, `NFT_LIMIT_PKTS` and `NFT_LIMIT_F_INV` (`over`).
const LIMIT_RATE: u16 = 1;
const LIMIT_UNIT: u16 = 2;
const LIMIT_BURST: u16 = 3;
const LIMIT_TYPE: u16 = 4;
const LIMIT_FLAGS: u16 = 5;
const LIMIT_PKTS: u32 = 0;
const LIMIT_F_INV: u32 = 1;
/// `NFTA_CONNLIMIT_*` and `NFT_CONNLIMIT_F_INV` (`over`).
const CONNLIMIT_COUNT: u16 = 1;
const CONNLIMIT_FLAGS: u16 = 2;
const CONNLIMIT_F_INV: u32 = 1;
/// `NFT_REJECT_ICMP_UNREACH`, `NFT_REJECT_TCP_RST`; the administratively-prohibited codes
/// of ICMP (`ICMP_PKT_FILTERED`) and ICMPv6 (`ICMPV6_ADM_PROHIBITED`).
const REJECT_ICMP_UNREACH: u32 = 0;
const REJECT_TCP_RST: u32 = 1;
const ICMP_ADMIN_PROHIBITED: u8 = 13;
const ICMPV6_ADMIN_PROHIBITED: u8 = 1;
/// `NFTA_LOG_GROUP` (16 bits, network order), `NFTA_LOG_PREFIX` (NUL-terminated) and
/// `NFTA_LOG_SNAPLEN` (32 bits, network order): a copy to an NFLOG group. The others
/// (`NFTA_LOG_LEVEL`, `_QTHRESHOLD`, `_FLAGS`) we never write.
const LOG_GROUP: u16 = 1;
const LOG_PREFIX: u16 = 2;
const LOG_SNAPLEN: u16 = 3;
const NLA_F_NESTED: u16 = 0x8000;
/// `NFT_PAYLOAD_NETWORK_HEADER`, `NFT_PAYLOAD_TRANSPORT_HEADER`.
const NETWORK_HEADER: u32 = 1;
const TRANSPORT_HEADER: u32 = 2;

/// The registers a key's parts are loaded into: the source address at register 1, the
/// destination address and the port right after it (a concatenation is read as one run of
/// 32-bit registers from the first). Named as the kernel dumps them back: a 32-bit register
/// at the start of a 16-byte one by the 16-byte one's number (IPv6's port, 32-bit register 8,
/// is register 3).
pub(super) fn key_registers(v6: bool) -> [Register; 3] {
    if v6 {
        [Register::Reg1, Register::Reg2, Register::Reg3]
    } else {
        [Register::Reg1, Register::Reg32_01, Register::Reg32_02]
    }
}

/// `ct state new`: the state into register 1, its NEW bit kept, compared with zero.
pub(super) fn encode_ct_state_new(out: &mut Vec<Expr>) {
    out.push(other_expr(
        "ct",
        vec![
            DefaultNla::new(1, be32(1)),
            DefaultNla::new(2, be32(NFT_CT_STATE)),
        ],
    ));
    out.push(Expr::from(Expressions::Bitwise(vec![
        Bitwise::SourceRegister(Register::Reg1),
        Bitwise::DestinationRegister(Register::Reg1),
        Bitwise::Length(4),
        Bitwise::Mask(DataAttribute::Value(CT_STATE_NEW.to_ne_bytes().to_vec())),
        Bitwise::Xor(DataAttribute::Value(vec![0; 4])),
    ])));
    out.push(Expr::from(Expressions::Cmp(vec![
        Cmp::SourceRegister(Register::Reg1),
        Cmp::Op(Operator::NotEqual),
        Cmp::Data(DataAttribute::Value(vec![0; 4])),
    ])));
}

fn payload(register: Register, base: u32, offset: u32, len: u32) -> Expr {
    Expr::from(Expressions::Payload(vec![
        Payload::DestinationRegister(register),
        Payload::Base(base),
        Payload::Offset(offset),
        Payload::Len(len),
    ]))
}

/// One expression (`name` with its attributes) as `NFTA_DYNSET_EXPR` nests it.
fn nested_expression(name: &str, data: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut inner = Vec::new();
    for (kind, value) in data {
        put_attribute(&mut inner, *kind, value);
    }
    let mut out = Vec::new();
    let mut named = name.as_bytes().to_vec();
    named.push(0);
    put_attribute(&mut out, EXPR_NAME, &named);
    put_attribute(&mut out, EXPR_DATA | NLA_F_NESTED, &inner);
    out
}

/// The key's loads, then the dynamic set's update with the limiter in each element (none for
/// [`Limiter::KeyOnly`]).
pub(super) fn encode_set_update(set: &str, key: ShareKey, limiter: Limiter, out: &mut Vec<Expr>) {
    let [source, destination, port] = key_registers(key.v6);
    let (saddr, daddr, len) = if key.v6 { (8, 24, 16) } else { (12, 16, 4) };
    out.push(payload(source, NETWORK_HEADER, saddr, len));
    if key.per_destination {
        out.push(payload(destination, NETWORK_HEADER, daddr, len));
        out.push(payload(port, TRANSPORT_HEADER, 2, 2));
    }
    let (op, expression) = match limiter {
        Limiter::RateOver { per_second, burst } => (
            DYNSET_OP_UPDATE,
            Some(nested_expression(
                "limit",
                &[
                    (LIMIT_RATE, u64::from(per_second).to_be_bytes().to_vec()),
                    (LIMIT_UNIT, 1u64.to_be_bytes().to_vec()),
                    (LIMIT_BURST, be32(burst)),
                    (LIMIT_TYPE, be32(LIMIT_PKTS)),
                    (LIMIT_FLAGS, be32(LIMIT_F_INV)),
                ],
            )),
        ),
        Limiter::CountOver(count) => (
            DYNSET_OP_ADD,
            Some(nested_expression(
                "connlimit",
                &[
                    (CONNLIMIT_COUNT, be32(count)),
                    (CONNLIMIT_FLAGS, be32(CONNLIMIT_F_INV)),
                ],
            )),
        ),
        Limiter::KeyOnly => (DYNSET_OP_UPDATE, None),
    };
    let mut name = set.as_bytes().to_vec();
    name.push(0);
    let mut attrs = vec![
        DefaultNla::new(DYNSET_SET_NAME, name),
        DefaultNla::new(DYNSET_OP, be32(op)),
        DefaultNla::new(DYNSET_SREG_KEY, be32(u32::from(source))),
    ];
    if let Some(expression) = expression {
        attrs.push(DefaultNla::new(DYNSET_EXPR | NLA_F_NESTED, expression));
    }
    out.push(other_expr("dynset", attrs));
}

/// `reject with tcp reset`, or ICMP's (ICMPv6's) administratively prohibited.
pub(super) fn encode_reject(reject: Reject, out: &mut Vec<Expr>) {
    let attrs = match reject {
        Reject::TcpReset => vec![DefaultNla::new(1, be32(REJECT_TCP_RST))],
        Reject::AdminProhibited { v6 } => vec![
            DefaultNla::new(1, be32(REJECT_ICMP_UNREACH)),
            DefaultNla::new(
                2,
                vec![if v6 {
                    ICMPV6_ADMIN_PROHIBITED
                } else {
                    ICMP_ADMIN_PROHIBITED
                }],
            ),
        ],
    };
    out.push(other_expr("reject", attrs));
}

/// `log prefix "P" group G snaplen S`, its attributes in the order nft sends them (and the
/// kernel dumps them).
pub(super) fn encode_log(copy: &NflogCopy, out: &mut Vec<Expr>) {
    let mut prefix = copy.prefix.as_bytes().to_vec();
    prefix.push(0);
    out.push(other_expr(
        "log",
        vec![
            DefaultNla::new(LOG_PREFIX, prefix),
            DefaultNla::new(LOG_GROUP, copy.group.to_be_bytes().to_vec()),
            DefaultNla::new(LOG_SNAPLEN, be32(copy.snaplen)),
        ],
    ));
}

/// A log expression's copy to NFLOG, when it is of the form we write: a prefix, a group and
/// a snaplen, and nothing else (no level, queue threshold or flags); the prefix without a
/// quote or a control character, so the statement's text reads as one.
pub(super) fn log_of(attrs: &[DefaultNla]) -> Option<NflogCopy> {
    let ours = |a: &DefaultNla| {
        matches!(
            a.kind() & NLA_TYPE_MASK,
            LOG_GROUP | LOG_PREFIX | LOG_SNAPLEN
        )
    };
    if !attrs.iter().all(ours) {
        return None;
    }
    let value = |kind| super::wire::nla_value(attrs, kind);
    let prefix = value(LOG_PREFIX)?;
    let prefix = String::from_utf8(prefix.strip_suffix(&[0]).unwrap_or(&prefix).to_vec()).ok()?;
    if prefix.chars().any(|c| c == '"' || c.is_control()) {
        return None;
    }
    let group = u16::from_be_bytes(value(LOG_GROUP)?.get(..2)?.try_into().ok()?);
    let snaplen = u32::from_be_bytes(value(LOG_SNAPLEN)?.get(..4)?.try_into().ok()?);
    Some(NflogCopy {
        prefix,
        group,
        snaplen,
    })
}

fn u32_in(data: &[u8], kind: u16) -> Option<u32> {
    let v = attribute(data, kind)?;
    Some(u32::from_be_bytes(v.get(..4)?.try_into().ok()?))
}

fn u64_in(data: &[u8], kind: u16) -> Option<u64> {
    let v = attribute(data, kind)?;
    Some(u64::from_be_bytes(v.get(..8)?.try_into().ok()?))
}

/// The limiter a dynset nests (`NFTA_DYNSET_EXPR`'s bytes), when it is one we write.
pub(super) fn limiter_of(nested: &[u8]) -> Option<Limiter> {
    let name = attribute(nested, EXPR_NAME)?;
    let name = name.strip_suffix(&[0]).unwrap_or(name);
    let data = attribute(nested, EXPR_DATA)?;
    match name {
        b"limit"
            if u64_in(data, LIMIT_UNIT) == Some(1)
                && u32_in(data, LIMIT_TYPE).unwrap_or(LIMIT_PKTS) == LIMIT_PKTS
                && u32_in(data, LIMIT_FLAGS) == Some(LIMIT_F_INV) =>
        {
            Some(Limiter::RateOver {
                per_second: u32::try_from(u64_in(data, LIMIT_RATE)?).ok()?,
                burst: u32_in(data, LIMIT_BURST).unwrap_or(0),
            })
        }
        b"connlimit" if u32_in(data, CONNLIMIT_FLAGS) == Some(CONNLIMIT_F_INV) => {
            Some(Limiter::CountOver(u32_in(data, CONNLIMIT_COUNT)?))
        }
        _ => None,
    }
}

/// A dynset's set, operation (`add` true, `update` false), key register and limiter.
pub(super) struct DynsetParts {
    pub set: String,
    pub add: bool,
    pub key_register: u32,
    pub limiter: Limiter,
}

/// The parts of a dynset we write; None for another (a map, a deletion, two expressions, or
/// one we do not write).
pub(super) fn dynset_of(attrs: &[DefaultNla]) -> Option<DynsetParts> {
    let value = |kind| super::wire::nla_value(attrs, kind);
    let name = value(DYNSET_SET_NAME)?;
    let set = String::from_utf8(name.strip_suffix(&[0]).unwrap_or(&name).to_vec()).ok()?;
    // A number of `len` bytes in network order (None: absent or shorter).
    let number = |kind, len: usize| {
        let v = value(kind)?;
        let bytes = v.get(..len)?;
        Some(bytes.iter().fold(0u64, |n, b| n << 8 | u64::from(*b)))
    };
    let op = u32::try_from(number(DYNSET_OP, 4)?).ok()?;
    let key_register = u32::try_from(number(DYNSET_SREG_KEY, 4)?).ok()?;
    let add = match op {
        DYNSET_OP_ADD => true,
        DYNSET_OP_UPDATE => false,
        _ => return None,
    };
    // A map's data, an element timeout of its own, an inverted match or several expressions
    // make another statement than ours (the kernel dumps a timeout of 0 and the flags).
    if value(DYNSET_SREG_DATA).is_some()
        || value(DYNSET_EXPRESSIONS).is_some()
        || number(DYNSET_TIMEOUT, 8).unwrap_or(0) != 0
        || number(DYNSET_FLAGS, 4).unwrap_or(0) & u64::from(DYNSET_F_INV) != 0
    {
        return None;
    }
    let limiter = match value(DYNSET_EXPR) {
        Some(nested) => limiter_of(&nested)?,
        None => Limiter::KeyOnly,
    };
    Some(DynsetParts {
        set,
        add,
        key_register,
        limiter,
    })
}

/// A reject expression's statement, when it is one we write for `v6`.
pub(super) fn reject_of(v6: bool, attrs: &[DefaultNla]) -> Option<Reject> {
    let kind = u32::from_be_bytes(
        super::wire::nla_value(attrs, 1)?
            .get(..4)?
            .try_into()
            .ok()?,
    );
    let code = super::wire::nla_value(attrs, 2).and_then(|c| c.first().copied());
    let prohibited = if v6 {
        ICMPV6_ADMIN_PROHIBITED
    } else {
        ICMP_ADMIN_PROHIBITED
    };
    match (kind, code) {
        (REJECT_TCP_RST, _) => Some(Reject::TcpReset),
        (REJECT_ICMP_UNREACH, Some(c)) if c == prohibited => Some(Reject::AdminProhibited { v6 }),
        _ => None,
    }
}

/// Whether `data` (a payload's base, offset and length) is `th dport`.
pub(super) fn is_transport_dport(base: Option<u32>, offset: Option<u32>, len: u32) -> bool {
    base == Some(TRANSPORT_HEADER) && offset == Some(2) && len == 2
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_netfilter::nftables::ExpressionAttribute;

    fn copy(prefix: &str) -> NflogCopy {
        NflogCopy {
            prefix: prefix.into(),
            group: 7373,
            snaplen: 80,
        }
    }

    /// The attributes of the one expression `encode_log` writes, with its name.
    fn encoded(copy: &NflogCopy) -> (String, Vec<DefaultNla>) {
        let mut out = Vec::new();
        encode_log(copy, &mut out);
        let [Expr::Element(attrs)] = &out[..] else {
            panic!("one expression: {out:?}")
        };
        let name = attrs.iter().find_map(|a| match a {
            ExpressionAttribute::Name(n) => Some(n.clone()),
            _ => None,
        });
        let data = attrs.iter().find_map(|a| match a {
            ExpressionAttribute::Data(Expressions::Other { attributes, .. }) => {
                Some(attributes.clone())
            }
            _ => None,
        });
        (name.unwrap(), data.unwrap())
    }

    /// The log is written as `nft --debug=mnl add rule ... log prefix "ipmasq-share-rate"
    /// group 7373 snaplen 80` sends it (nft 1.0.6): the prefix with its NUL, the group in 16
    /// bits, the snaplen in 32, in that order; and read back the same.
    #[test]
    fn the_log_is_written_as_nft_writes_it_and_read_back() {
        let rate = copy("ipmasq-share-rate");
        let (name, attrs) = encoded(&rate);
        assert_eq!(name, "log");
        let kinds: Vec<u16> = attrs.iter().map(Nla::kind).collect();
        assert_eq!(kinds, [LOG_PREFIX, LOG_GROUP, LOG_SNAPLEN]);
        let value = |kind| super::super::wire::nla_value(&attrs, kind).unwrap();
        assert_eq!(value(LOG_PREFIX), b"ipmasq-share-rate\0");
        assert_eq!(value(LOG_GROUP), [0x1c, 0xcd]);
        assert_eq!(value(LOG_SNAPLEN), [0, 0, 0, 0x50]);
        assert_eq!(log_of(&attrs), Some(rate));
        let connections = copy("ipmasq-share-connections");
        assert_eq!(log_of(&encoded(&connections).1), Some(connections));
    }

    /// A log of another form is not ours: to the kernel's log (a level), with flags or a
    /// queue threshold, without its prefix, group or snaplen, or with a prefix that would
    /// not print back as one (a quote, a control character).
    #[test]
    fn a_log_of_another_form_is_not_read_as_ours() {
        let (_, ours) = encoded(&copy("ipmasq-share-rate"));
        let with = |extra: DefaultNla| {
            let mut attrs = ours.clone();
            attrs.push(extra);
            attrs
        };
        // NFTA_LOG_QTHRESHOLD is 4, NFTA_LOG_LEVEL 5, NFTA_LOG_FLAGS 6.
        let threshold = DefaultNla::new(4, 1u16.to_be_bytes().to_vec());
        let level = DefaultNla::new(5, be32(4));
        let flags = DefaultNla::new(6, be32(1));
        for attrs in [with(level), with(threshold), with(flags)] {
            assert_eq!(log_of(&attrs), None, "{attrs:?}");
        }
        for missing in [LOG_PREFIX, LOG_GROUP, LOG_SNAPLEN] {
            let attrs: Vec<DefaultNla> = ours
                .iter()
                .filter(|a| a.kind() != missing)
                .cloned()
                .collect();
            assert_eq!(log_of(&attrs), None, "without {missing}");
        }
        for prefix in ["a\" group 1", "a\u{1b}[2J"] {
            assert_eq!(log_of(&encoded(&copy(prefix)).1), None, "{prefix:?}");
        }
    }
}
