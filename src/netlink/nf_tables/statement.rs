//! Rule statements as typed values, to and from nf_tables expressions: every statement our
//! rules use, and as much of a neighbour's nat rules as `show` and `explain` judge (the rest is
//! named, not guessed). Their text is nft's syntax, the canonical form the backend compares.

use super::wire::{be32, other_expr, Anonymous, Keys, SetRef};
use ipnet::IpNet;
use netlink_packet_core::DefaultNla;
use netlink_packet_netfilter::nftables::{
    Bitwise, Cmp, DataAttribute, ExpressionAttribute, Expressions, Immediate, ListAttribute,
    Lookup, Meta, MetaKey, Operator, Payload, Register, Verdict as WireVerdict, VerdictAttribute,
};
use std::fmt;
use std::net::IpAddr;

/// Which address of the packet a match reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Source,
    Destination,
}

/// A verdict statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum NftVerdict {
    Return,
    Accept,
    Drop,
    Continue,
    Jump(String),
    Goto(String),
}

/// The key a pod share's dynamic set is written with: the pod's source address, or that and
/// the destination address and port (`ip saddr . ip daddr . th dport`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ShareKey {
    pub v6: bool,
    pub per_destination: bool,
}

/// The stateful expression each element of a pod share's set holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Limiter {
    /// `limit rate over N/second burst B packets`: an `update` of the set.
    RateOver { per_second: u32, burst: u32 },
    /// `ct count over N`: an `add` to the set.
    CountOver(u32),
    /// No state: the key is remembered until the set's timeout, an `update` of the set
    /// (`update @pod_full { ip saddr }`).
    KeyOnly,
}

/// How a refused connection is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reject {
    /// `reject with tcp reset`.
    TcpReset,
    /// `reject with icmp admin-prohibited` (`icmpv6` in IPv6).
    AdminProhibited { v6: bool },
}

/// `log prefix "P" group G snaplen S`: a copy of the packet (its first `snaplen` bytes) sent
/// to NFLOG group `group`, tagged `prefix`. Read back only in this form: a log to the kernel's
/// log (a level), without a prefix, a group or a snaplen, with a queue threshold or flags, or
/// with a quote or a control character in its prefix, is not ours and reads as `[log]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NflogCopy {
    pub prefix: String,
    pub group: u16,
    pub snaplen: u32,
}

/// One statement of a rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Stmt {
    /// `fib daddr type local`.
    FibDaddrLocal,
    /// `ip saddr != 10.0.0.0/8`, `ip6 daddr { a, b }` (an anonymous set when several).
    Address {
        v6: bool,
        side: Side,
        negated: bool,
        nets: Vec<IpNet>,
    },
    /// `ip daddr @nomasq`: a named set.
    SetLookup {
        v6: bool,
        side: Side,
        negated: bool,
        set: String,
    },
    /// `meta l4proto { tcp, udp, sctp }`.
    Protocols(Vec<u8>),
    /// `numgen random mod OF < BELOW`.
    Numgen {
        modulus: u32,
        below: u32,
    },
    /// `counter` (the kernel's counts when read back).
    Counter {
        packets: u64,
        bytes: u64,
    },
    /// `masquerade [to :FIRST[-LAST]] [random] [fully-random] [persistent]`.
    Masquerade {
        ports: Option<(u16, u16)>,
        flags: u32,
    },
    /// `oifname "eth0"`, `oifname "eth*"`: the packet leaves a matching interface.
    OutputInterface(crate::config::egress::InterfacePattern),
    /// `snat to ADDR[:FIRST-LAST] [fully-random]`: one address (ours: `outputAddress`).
    Snat {
        to: IpAddr,
        ports: Option<(u16, u16)>,
        flags: u32,
    },
    /// `snat to ADDR` / `dnat to ADDR` of another form (read from a neighbour's rules only).
    Nat {
        kind: &'static str,
        to: String,
    },
    /// `ct state new`.
    CtStateNew,
    /// `update @pod_rate { ip saddr limit rate over 10/second burst 5 packets }`,
    /// `add @pod_conn { ip saddr ct count over 200 }`, `update @pod_full { ip saddr }`.
    SetUpdate {
        set: String,
        key: ShareKey,
        limiter: Limiter,
    },
    /// `reject with ...`.
    Reject(Reject),
    /// `log prefix "P" group G snaplen S`: the pod share's refusals copied to NFLOG.
    Log(NflogCopy),
    Verdict(NftVerdict),
    /// An expression this tool does not type, by its name.
    Other(String),
}

/// `NF_NAT_RANGE_*` flags of a masquerade.
pub(crate) const NAT_RANGE_PROTO_SPECIFIED: u32 = 0x2;
pub(crate) const NAT_RANGE_PROTO_RANDOM: u32 = 0x4;
pub(crate) const NAT_RANGE_PERSISTENT: u32 = 0x8;
pub(crate) const NAT_RANGE_PROTO_RANDOM_FULLY: u32 = 0x10;
const RTN_LOCAL: u32 = 2;
const NFT_FIB_RESULT_ADDRTYPE: u32 = 3;
const NFTA_FIB_F_DADDR: u32 = 2;
const NFT_NG_RANDOM: u32 = 1;
const NFT_BYTEORDER_HTON: u32 = 1;
const NFT_LOOKUP_F_INV: u32 = 1;
const NF_DROP: u32 = 0;
const NF_ACCEPT: u32 = 1;
const NFT_PAYLOAD_NETWORK_HEADER: u32 = 1;
/// IFNAMSIZ: an exact interface name is compared as this many bytes, zero-padded.
const IFNAMSIZ: usize = 16;
/// `NF_NAT_RANGE_MAP_IPS`: the kernel sets it on a nat expression with an address.
const NAT_RANGE_MAP_IPS: u32 = 0x1;
const NFT_NAT_SNAT: u32 = 0;
const NFPROTO_IPV4: u32 = 2;
const NFPROTO_IPV6: u32 = 10;
/// `protocol` names nft prints for the l4 protocols.
const PROTOCOL_NAMES: [(u8, &str); 6] = [
    (1, "icmp"),
    (6, "tcp"),
    (17, "udp"),
    (58, "ipv6-icmp"),
    (132, "sctp"),
    (136, "udplite"),
];

fn protocol_name(number: u8) -> String {
    PROTOCOL_NAMES
        .iter()
        .find(|(n, _)| *n == number)
        .map_or_else(|| number.to_string(), |(_, name)| (*name).to_string())
}

/// A host prefix is a bare address, as nft lists it.
fn spelled(net: &IpNet) -> String {
    if net.prefix_len() == net.max_prefix_len() {
        net.addr().to_string()
    } else {
        net.to_string()
    }
}

fn list(items: &[String]) -> String {
    match items {
        [one] => one.clone(),
        many => format!("{{ {} }}", many.join(", ")),
    }
}

impl fmt::Display for Stmt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let proto = |v6: bool| if v6 { "ip6" } else { "ip" };
        let field = |side: Side| match side {
            Side::Source => "saddr",
            Side::Destination => "daddr",
        };
        let not = |negated: bool| if negated { "!= " } else { "" };
        match self {
            Stmt::FibDaddrLocal => f.write_str("fib daddr type local"),
            Stmt::Address {
                v6,
                side,
                negated,
                nets,
            } => {
                let items: Vec<String> = nets.iter().map(spelled).collect();
                write!(
                    f,
                    "{} {} {}{}",
                    proto(*v6),
                    field(*side),
                    not(*negated),
                    list(&items)
                )
            }
            Stmt::SetLookup {
                v6,
                side,
                negated,
                set,
            } => write!(f, "{} {} {}@{set}", proto(*v6), field(*side), not(*negated)),
            Stmt::Protocols(numbers) => {
                let items: Vec<String> = numbers.iter().copied().map(protocol_name).collect();
                write!(f, "meta l4proto {}", list(&items))
            }
            Stmt::Numgen { modulus, below } => {
                write!(f, "numgen random mod {modulus} < {below}")
            }
            Stmt::Counter { .. } => f.write_str("counter"),
            Stmt::Masquerade { ports, flags } => {
                f.write_str("masquerade")?;
                match ports {
                    Some((a, b)) if a == b => write!(f, " to :{a}")?,
                    Some((a, b)) => write!(f, " to :{a}-{b}")?,
                    None => {}
                }
                write_nat_flags(f, *flags)
            }
            Stmt::OutputInterface(pattern) => write!(f, "oifname \"{}\"", pattern.nft()),
            Stmt::Snat { to, ports, flags } => {
                match (to, ports) {
                    (_, None) => write!(f, "snat to {to}")?,
                    (IpAddr::V4(a), Some((p, q))) => write!(f, "snat to {a}:{p}-{q}")?,
                    (IpAddr::V6(a), Some((p, q))) => write!(f, "snat to [{a}]:{p}-{q}")?,
                }
                write_nat_flags(f, *flags)
            }
            Stmt::Nat { kind, to } => write!(f, "{kind} to {to}"),
            Stmt::CtStateNew => f.write_str("ct state new"),
            Stmt::SetUpdate { set, key, limiter } => write_set_update(f, set, *key, *limiter),
            Stmt::Reject(reject) => write_reject(f, *reject),
            Stmt::Log(NflogCopy {
                prefix,
                group,
                snaplen,
            }) => write!(f, "log prefix \"{prefix}\" group {group} snaplen {snaplen}"),
            Stmt::Verdict(v) => match v {
                NftVerdict::Return => f.write_str("return"),
                NftVerdict::Accept => f.write_str("accept"),
                NftVerdict::Drop => f.write_str("drop"),
                NftVerdict::Continue => f.write_str("continue"),
                NftVerdict::Jump(chain) => write!(f, "jump {chain}"),
                NftVerdict::Goto(chain) => write!(f, "goto {chain}"),
            },
            Stmt::Other(name) => write!(f, "[{name}]"),
        }
    }
}

/// `update @set { ip saddr limit rate over ... }`, `add @set { ip saddr ct count over N }`,
/// `update @set { ip saddr }`.
fn write_set_update(
    f: &mut fmt::Formatter<'_>,
    set: &str,
    key: ShareKey,
    limiter: Limiter,
) -> fmt::Result {
    let p = if key.v6 { "ip6" } else { "ip" };
    let (verb, state) = match limiter {
        Limiter::RateOver { per_second, burst } => (
            "update",
            format!("limit rate over {per_second}/second burst {burst} packets"),
        ),
        Limiter::CountOver(count) => ("add", format!("ct count over {count}")),
        Limiter::KeyOnly => ("update", String::new()),
    };
    write!(f, "{verb} @{set} {{ {p} saddr ")?;
    if key.per_destination {
        write!(f, ". {p} daddr . th dport ")?;
    }
    if !state.is_empty() {
        write!(f, "{state} ")?;
    }
    f.write_str("}")
}

fn write_reject(f: &mut fmt::Formatter<'_>, reject: Reject) -> fmt::Result {
    match reject {
        Reject::TcpReset => f.write_str("reject with tcp reset"),
        Reject::AdminProhibited { v6 } => write!(
            f,
            "reject with {} admin-prohibited",
            if v6 { "icmpv6" } else { "icmp" }
        ),
    }
}

/// ` random`, ` fully-random`, ` persistent`, as nft prints a nat statement's flags.
fn write_nat_flags(f: &mut fmt::Formatter<'_>, flags: u32) -> fmt::Result {
    let named = [
        (NAT_RANGE_PROTO_RANDOM, "random"),
        (NAT_RANGE_PROTO_RANDOM_FULLY, "fully-random"),
        (NAT_RANGE_PERSISTENT, "persistent"),
    ];
    for (bit, name) in named {
        if flags & bit != 0 {
            write!(f, " {name}")?;
        }
    }
    Ok(())
}

/// A rule's statements as one line of nft syntax.
pub(crate) fn text(stmts: &[Stmt]) -> String {
    stmts
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" ")
}

type Expr = ListAttribute<ExpressionAttribute>;

fn expr(e: Expressions) -> Expr {
    Expr::from(e)
}

fn value(bytes: Vec<u8>) -> DataAttribute {
    DataAttribute::Value(bytes)
}

/// The payload load of an address field into register 1.
fn load_address(v6: bool, side: Side) -> Expr {
    let (offset, len) = match (v6, side) {
        (false, Side::Source) => (12, 4),
        (false, Side::Destination) => (16, 4),
        (true, Side::Source) => (8, 16),
        (true, Side::Destination) => (24, 16),
    };
    expr(Expressions::Payload(vec![
        Payload::DestinationRegister(Register::Reg1),
        Payload::Base(NFT_PAYLOAD_NETWORK_HEADER),
        Payload::Offset(offset),
        Payload::Len(len),
    ]))
}

fn mask(net: &IpNet) -> Vec<u8> {
    match net {
        IpNet::V4(n) => n.netmask().octets().to_vec(),
        IpNet::V6(n) => n.netmask().octets().to_vec(),
    }
}

fn address_bytes(addr: IpAddr) -> Vec<u8> {
    match addr {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

fn cmp(op: Operator, data: Vec<u8>) -> Expr {
    expr(Expressions::Cmp(vec![
        Cmp::SourceRegister(Register::Reg1),
        Cmp::Op(op),
        Cmp::Data(value(data)),
    ]))
}

fn lookup(set: &SetRef, negated: bool) -> Expr {
    let mut attrs = vec![
        Lookup::SourceRegister(Register::Reg1),
        Lookup::Set(set.name.clone()),
    ];
    if let Some(id) = set.id {
        attrs.push(Lookup::SetId(id));
    }
    if negated {
        attrs.push(Lookup::Flags(NFT_LOOKUP_F_INV));
    }
    expr(Expressions::Lookup(attrs))
}

fn immediate_register(register: Register, data: Vec<u8>) -> Expr {
    expr(Expressions::Immediate(vec![
        Immediate::DestinationRegister(register),
        Immediate::Data(value(data)),
    ]))
}

fn verdict_expr(v: &NftVerdict) -> Expr {
    let (code, chain) = match v {
        NftVerdict::Return => (WireVerdict::Return, None),
        NftVerdict::Accept => (WireVerdict::Other(NF_ACCEPT), None),
        NftVerdict::Drop => (WireVerdict::Other(NF_DROP), None),
        NftVerdict::Continue => (WireVerdict::Continue, None),
        NftVerdict::Jump(c) => (WireVerdict::Jump, Some(c.clone())),
        NftVerdict::Goto(c) => (WireVerdict::Goto, Some(c.clone())),
    };
    let mut attrs = vec![VerdictAttribute::Code(code)];
    attrs.extend(chain.map(VerdictAttribute::Chain));
    expr(Expressions::Immediate(vec![
        Immediate::DestinationRegister(Register::Verdict),
        Immediate::Data(DataAttribute::Verdict(attrs)),
    ]))
}

type NewSet<'a> = &'a mut dyn FnMut(Keys) -> SetRef;

/// Which address a match loads and how it compares: IPv6 or IPv4, source or destination,
/// negated or not.
#[derive(Clone, Copy, Debug)]
struct AddressTest {
    v6: bool,
    side: Side,
    negated: bool,
}

fn encode_address(
    test: AddressTest,
    nets: &[IpNet],
    out: &mut Vec<Expr>,
    new_set: NewSet<'_>,
) -> Result<(), String> {
    let AddressTest { v6, side, negated } = test;
    out.push(load_address(v6, side));
    let len = if v6 { 16 } else { 4 };
    match nets {
        [net] => {
            if net.prefix_len() != net.max_prefix_len() {
                out.push(expr(Expressions::Bitwise(vec![
                    Bitwise::SourceRegister(Register::Reg1),
                    Bitwise::DestinationRegister(Register::Reg1),
                    Bitwise::Length(len),
                    Bitwise::Mask(value(mask(net))),
                    Bitwise::Xor(value(vec![0; len as usize])),
                ])));
            }
            let op = if negated {
                Operator::NotEqual
            } else {
                Operator::Equal
            };
            out.push(cmp(op, address_bytes(net.network())));
        }
        [] => return Err("an empty address list".into()),
        many => {
            let set = new_set(Keys::Nets(many.to_vec()));
            out.push(lookup(&set, negated));
        }
    }
    Ok(())
}

fn encode_protocols(
    numbers: &[u8],
    out: &mut Vec<Expr>,
    new_set: NewSet<'_>,
) -> Result<(), String> {
    out.push(expr(Expressions::Meta(vec![
        Meta::DestinationRegister(Register::Reg1),
        Meta::Key(MetaKey::L4Proto),
    ])));
    match numbers {
        [one] => out.push(cmp(Operator::Equal, vec![*one])),
        [] => return Err("an empty protocol list".into()),
        many => {
            let set = new_set(Keys::Protocols(many.to_vec()));
            out.push(lookup(&set, false));
        }
    }
    Ok(())
}

fn encode_numgen(modulus: u32, below: u32, out: &mut Vec<Expr>) {
    out.push(other_expr(
        "numgen",
        vec![
            DefaultNla::new(1, be32(1)),
            DefaultNla::new(2, be32(modulus)),
            DefaultNla::new(3, be32(NFT_NG_RANDOM)),
            DefaultNla::new(4, be32(0)),
        ],
    ));
    // numgen writes host order; cmp compares bytes, so to network order first.
    out.push(other_expr(
        "byteorder",
        vec![
            DefaultNla::new(1, be32(1)),
            DefaultNla::new(2, be32(1)),
            DefaultNla::new(3, be32(NFT_BYTEORDER_HTON)),
            DefaultNla::new(4, be32(4)),
            DefaultNla::new(5, be32(4)),
        ],
    ));
    out.push(cmp(Operator::LessThan, be32(below)));
}

/// The ports go in registers 1 and 2 (network order), the masquerade reads them there.
fn encode_masquerade(ports: Option<(u16, u16)>, flags: u32, out: &mut Vec<Expr>) {
    let mut attrs = Vec::new();
    let mut flags = flags;
    if let Some((first, last)) = ports {
        out.push(immediate_register(
            Register::Reg1,
            first.to_be_bytes().to_vec(),
        ));
        out.push(immediate_register(
            Register::Reg2,
            last.to_be_bytes().to_vec(),
        ));
        flags |= NAT_RANGE_PROTO_SPECIFIED;
        attrs.push(DefaultNla::new(2, be32(1)));
        attrs.push(DefaultNla::new(3, be32(2)));
    }
    if flags != 0 {
        attrs.insert(0, DefaultNla::new(1, be32(flags)));
    }
    out.push(other_expr("masq", attrs));
}

/// `oifname`: the name into register 1, compared whole (zero-padded to IFNAMSIZ) for a name,
/// or its first bytes only for a wildcard, as nft encodes it.
fn encode_output_interface(pattern: &crate::config::egress::InterfacePattern, out: &mut Vec<Expr>) {
    out.push(expr(Expressions::Meta(vec![
        Meta::DestinationRegister(Register::Reg1),
        Meta::Key(MetaKey::Oifname),
    ])));
    let mut bytes = pattern.name.as_bytes().to_vec();
    if !pattern.wildcard {
        bytes.resize(IFNAMSIZ, 0);
    }
    out.push(cmp(Operator::Equal, bytes));
}

/// SNAT to one address: the address in register 1, the ports in registers 2 and 3.
fn encode_snat(to: IpAddr, ports: Option<(u16, u16)>, flags: u32, out: &mut Vec<Expr>) {
    let family = if to.is_ipv6() {
        NFPROTO_IPV6
    } else {
        NFPROTO_IPV4
    };
    out.push(immediate_register(Register::Reg1, address_bytes(to)));
    let mut attrs = vec![
        DefaultNla::new(1, be32(NFT_NAT_SNAT)),
        DefaultNla::new(2, be32(family)),
        DefaultNla::new(3, be32(1)),
    ];
    let mut flags = flags;
    if let Some((first, last)) = ports {
        out.push(immediate_register(
            Register::Reg2,
            first.to_be_bytes().to_vec(),
        ));
        out.push(immediate_register(
            Register::Reg3,
            last.to_be_bytes().to_vec(),
        ));
        attrs.push(DefaultNla::new(5, be32(2)));
        attrs.push(DefaultNla::new(6, be32(3)));
        flags |= NAT_RANGE_PROTO_SPECIFIED;
    }
    if flags != 0 {
        attrs.push(DefaultNla::new(7, be32(flags)));
    }
    out.push(other_expr("nat", attrs));
}

/// The expressions of `stmts`, and the anonymous sets they look up (to be added in the same
/// batch, before the rule); `new_set` names each anonymous set.
pub(crate) fn encode(stmts: &[Stmt], new_set: NewSet<'_>) -> Result<Vec<Expr>, String> {
    let mut out = Vec::new();
    for stmt in stmts {
        match stmt {
            Stmt::FibDaddrLocal => {
                out.push(other_expr(
                    "fib",
                    vec![
                        DefaultNla::new(1, be32(1)),
                        DefaultNla::new(2, be32(NFT_FIB_RESULT_ADDRTYPE)),
                        DefaultNla::new(3, be32(NFTA_FIB_F_DADDR)),
                    ],
                ));
                out.push(cmp(Operator::Equal, RTN_LOCAL.to_ne_bytes().to_vec()));
            }
            Stmt::Address {
                v6,
                side,
                negated,
                nets,
            } => {
                let test = AddressTest {
                    v6: *v6,
                    side: *side,
                    negated: *negated,
                };
                encode_address(test, nets, &mut out, new_set)?
            }
            Stmt::SetLookup {
                v6,
                side,
                negated,
                set,
            } => {
                out.push(load_address(*v6, *side));
                out.push(lookup(
                    &SetRef {
                        name: set.clone(),
                        id: None,
                    },
                    *negated,
                ));
            }
            Stmt::Protocols(numbers) => encode_protocols(numbers, &mut out, new_set)?,
            Stmt::Numgen { modulus, below } => encode_numgen(*modulus, *below, &mut out),
            Stmt::Counter { .. } => out.push(other_expr("counter", Vec::new())),
            Stmt::Masquerade { ports, flags } => encode_masquerade(*ports, *flags, &mut out),
            Stmt::OutputInterface(pattern) => encode_output_interface(pattern, &mut out),
            Stmt::Snat { to, ports, flags } => encode_snat(*to, *ports, *flags, &mut out),
            Stmt::CtStateNew => super::limits::encode_ct_state_new(&mut out),
            Stmt::SetUpdate { set, key, limiter } => {
                super::limits::encode_set_update(set, *key, *limiter, &mut out)
            }
            Stmt::Reject(reject) => super::limits::encode_reject(*reject, &mut out),
            Stmt::Log(copy) => super::limits::encode_log(copy, &mut out),
            Stmt::Verdict(v) => out.push(verdict_expr(v)),
            Stmt::Nat { .. } | Stmt::Other(_) => {
                return Err(format!("`{stmt}` is read, never written"));
            }
        }
    }
    Ok(out)
}

/// What a register holds while a rule's expressions are read.
#[derive(Clone, Debug)]
enum Loaded {
    Address {
        side: Side,
        len: u32,
    },
    Masked {
        side: Side,
        mask: Vec<u8>,
    },
    Protocol,
    OutputInterface,
    Fib {
        local_type: bool,
    },
    Numgen {
        modulus: u32,
    },
    Data(Vec<u8>),
    /// `ct state`, and its bits masked.
    CtState,
    CtBits(Vec<u8>),
    /// `th dport`.
    TransportDport,
    Unknown,
}

fn u32_of(attrs: &[DefaultNla], kind: u16) -> Option<u32> {
    super::wire::nla_value(attrs, kind).and_then(|v| {
        v.get(..4)
            .map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")))
    })
}

fn u64_of(attrs: &[DefaultNla], kind: u16) -> Option<u64> {
    super::wire::nla_value(attrs, kind).and_then(|v| {
        v.get(..8)
            .map(|b| u64::from_be_bytes(b.try_into().expect("8 bytes")))
    })
}

fn register_number(r: &Register) -> u32 {
    u32::from(*r)
}

/// The address of `bytes` (4 or 16 of them), zero-extended when shorter.
fn address_of(v6: bool, bytes: &[u8]) -> IpAddr {
    let mut full = [0u8; 16];
    let len = if v6 { 16 } else { 4 };
    for (i, b) in bytes.iter().take(len).enumerate() {
        full[i] = *b;
    }
    if v6 {
        IpAddr::from(full)
    } else {
        IpAddr::from([full[0], full[1], full[2], full[3]])
    }
}

/// A rule's expressions as statements; `anonymous` gives the keys of an anonymous set it
/// looks up (None when unknown).
pub(crate) fn decode(
    v6: bool,
    exprs: &[Expr],
    anonymous: &dyn Fn(&SetRef) -> Option<Anonymous>,
) -> Vec<Stmt> {
    let mut regs: std::collections::HashMap<u32, Loaded> = std::collections::HashMap::new();
    let mut out = Vec::new();
    for e in exprs {
        let ListAttribute::Element(attrs) = e else {
            out.push(Stmt::Other("expression".into()));
            continue;
        };
        let name = attrs.iter().find_map(|a| match a {
            ExpressionAttribute::Name(n) => Some(n.as_str()),
            _ => None,
        });
        let data = attrs.iter().find_map(|a| match a {
            ExpressionAttribute::Data(d) => Some(d),
            _ => None,
        });
        let (Some(name), Some(data)) = (name, data) else {
            out.push(Stmt::Other(name.unwrap_or("expression").into()));
            continue;
        };
        if let Some(stmt) = step(v6, name, data, &mut regs, anonymous) {
            out.push(stmt);
        }
    }
    out
}

/// One expression: updates the registers, and yields a statement when it completes one.
fn step(
    v6: bool,
    name: &str,
    data: &Expressions,
    regs: &mut std::collections::HashMap<u32, Loaded>,
    anonymous: &dyn Fn(&SetRef) -> Option<Anonymous>,
) -> Option<Stmt> {
    let unknown = || Some(Stmt::Other(name.to_string()));
    match data {
        Expressions::Payload(attrs) => loaded_payload(v6, attrs, regs),
        Expressions::Bitwise(attrs) => {
            let dreg = attrs.iter().find_map(|a| match a {
                Bitwise::DestinationRegister(r) => Some(register_number(r)),
                _ => None,
            })?;
            let mask = attrs.iter().find_map(|a| match a {
                Bitwise::Mask(DataAttribute::Value(m)) => Some(m.clone()),
                _ => None,
            });
            let loaded = match (regs.get(&dreg), mask) {
                (Some(Loaded::Address { side, .. }), Some(mask)) => {
                    Loaded::Masked { side: *side, mask }
                }
                (Some(Loaded::CtState), Some(mask)) => Loaded::CtBits(mask),
                _ => Loaded::Unknown,
            };
            regs.insert(dreg, loaded);
            None
        }
        Expressions::Meta(attrs) => {
            let dreg = attrs.iter().find_map(|a| match a {
                Meta::DestinationRegister(r) => Some(register_number(r)),
                _ => None,
            });
            let key = attrs.iter().find_map(|a| match a {
                Meta::Key(k) => Some(*k),
                _ => None,
            });
            match dreg {
                Some(r) => {
                    regs.insert(
                        r,
                        match key {
                            Some(MetaKey::L4Proto) => Loaded::Protocol,
                            Some(MetaKey::Oifname) => Loaded::OutputInterface,
                            _ => Loaded::Unknown,
                        },
                    );
                    None
                }
                None => unknown(),
            }
        }
        Expressions::Immediate(attrs) => {
            let dreg = attrs.iter().find_map(|a| match a {
                Immediate::DestinationRegister(r) => Some(register_number(r)),
                _ => None,
            })?;
            let content = attrs.iter().find_map(|a| match a {
                Immediate::Data(d) => Some(d),
                _ => None,
            })?;
            match content {
                DataAttribute::Verdict(v) => Some(Stmt::Verdict(verdict_of(v)?)),
                DataAttribute::Value(bytes) => {
                    regs.insert(dreg, Loaded::Data(bytes.clone()));
                    None
                }
                _ => unknown(),
            }
        }
        Expressions::Cmp(attrs) => compare(v6, attrs, regs).or_else(unknown),
        Expressions::Lookup(attrs) => look_up(v6, attrs, regs, anonymous).or_else(unknown),
        Expressions::Other {
            expression_type,
            attributes,
        } => other(v6, expression_type, attributes, regs),
        _ => unknown(),
    }
}

/// A payload load: an address field, or something this tool does not judge.
fn loaded_payload(
    v6: bool,
    attrs: &[Payload],
    regs: &mut std::collections::HashMap<u32, Loaded>,
) -> Option<Stmt> {
    let find = |f: fn(&Payload) -> Option<u32>| attrs.iter().find_map(f);
    let dreg = attrs.iter().find_map(|a| match a {
        Payload::DestinationRegister(r) => Some(register_number(r)),
        _ => None,
    })?;
    let base = find(|a| match a {
        Payload::Base(b) => Some(*b),
        _ => None,
    });
    let offset = find(|a| match a {
        Payload::Offset(o) => Some(*o),
        _ => None,
    });
    let len = find(|a| match a {
        Payload::Len(l) => Some(*l),
        _ => None,
    })
    .unwrap_or(0);
    let side = match (v6, base, offset) {
        (false, Some(1), Some(12)) | (true, Some(1), Some(8)) => Some(Side::Source),
        (false, Some(1), Some(16)) | (true, Some(1), Some(24)) => Some(Side::Destination),
        _ => None,
    };
    let loaded = match side {
        Some(side) => Loaded::Address { side, len },
        None if super::limits::is_transport_dport(base, offset, len) => Loaded::TransportDport,
        None => Loaded::Unknown,
    };
    regs.insert(dreg, loaded);
    None
}

/// A comparison of what a register holds.
fn compare(v6: bool, attrs: &[Cmp], regs: &std::collections::HashMap<u32, Loaded>) -> Option<Stmt> {
    let sreg = attrs.iter().find_map(|a| match a {
        Cmp::SourceRegister(r) => Some(register_number(r)),
        _ => None,
    })?;
    let op = attrs.iter().find_map(|a| match a {
        Cmp::Op(o) => Some(*o),
        _ => None,
    })?;
    let bytes = attrs.iter().find_map(|a| match a {
        Cmp::Data(DataAttribute::Value(b)) => Some(b.clone()),
        _ => None,
    })?;
    compared(v6, regs.get(&sreg).cloned(), &op, &bytes)
}

/// A set lookup of what a register holds.
fn look_up(
    v6: bool,
    attrs: &[Lookup],
    regs: &std::collections::HashMap<u32, Loaded>,
    anonymous: &dyn Fn(&SetRef) -> Option<Anonymous>,
) -> Option<Stmt> {
    let sreg = attrs.iter().find_map(|a| match a {
        Lookup::SourceRegister(r) => Some(register_number(r)),
        _ => None,
    })?;
    let name = attrs.iter().find_map(|a| match a {
        Lookup::Set(n) => Some(n.clone()),
        _ => None,
    })?;
    let id = attrs.iter().find_map(|a| match a {
        Lookup::SetId(i) => Some(*i),
        _ => None,
    });
    let negated = attrs
        .iter()
        .any(|a| matches!(a, Lookup::Flags(f) if f & NFT_LOOKUP_F_INV != 0));
    let set = SetRef { name, id };
    looked_up(v6, regs.get(&sreg).cloned(), set, negated, anonymous)
}

fn verdict_of(attrs: &[VerdictAttribute]) -> Option<NftVerdict> {
    let chain = attrs.iter().find_map(|a| match a {
        VerdictAttribute::Chain(c) => Some(c.clone()),
        _ => None,
    });
    let code = attrs.iter().find_map(|a| match a {
        VerdictAttribute::Code(c) => Some(*c),
        _ => None,
    })?;
    Some(match code {
        WireVerdict::Return => NftVerdict::Return,
        WireVerdict::Continue => NftVerdict::Continue,
        WireVerdict::Jump => NftVerdict::Jump(chain.unwrap_or_default()),
        WireVerdict::Goto => NftVerdict::Goto(chain.unwrap_or_default()),
        WireVerdict::Other(NF_ACCEPT) => NftVerdict::Accept,
        WireVerdict::Other(NF_DROP) => NftVerdict::Drop,
        _ => return None,
    })
}

/// The prefix length of a mask of leading ones, None when the mask has holes.
fn prefix_of_mask(mask: &[u8]) -> Option<u8> {
    let ones: u32 = mask.iter().map(|b| b.count_ones()).sum();
    let leading: u32 = mask
        .iter()
        .scan(true, |go, b| {
            let n = if *go { b.leading_ones() } else { 0 };
            *go = *go && *b == 0xff;
            Some(n)
        })
        .sum();
    (ones == leading).then_some(leading as u8)
}

fn compared(v6: bool, loaded: Option<Loaded>, op: &Operator, bytes: &[u8]) -> Option<Stmt> {
    let negated = match op {
        Operator::Equal => false,
        Operator::NotEqual => true,
        Operator::LessThan => {
            let Some(Loaded::Numgen { modulus }) = loaded else {
                return None;
            };
            let below = u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?);
            return Some(Stmt::Numgen { modulus, below });
        }
        _ => return None,
    };
    match loaded? {
        Loaded::Fib { local_type: true }
            if !negated && bytes == RTN_LOCAL.to_ne_bytes().as_slice() =>
        {
            Some(Stmt::FibDaddrLocal)
        }
        Loaded::Protocol if !negated && bytes.len() == 1 => Some(Stmt::Protocols(vec![bytes[0]])),
        Loaded::CtBits(mask)
            if negated
                && mask == super::limits::CT_STATE_NEW.to_ne_bytes()
                && bytes.iter().all(|b| *b == 0) =>
        {
            Some(Stmt::CtStateNew)
        }
        Loaded::OutputInterface if !negated => {
            let whole = bytes.len() == IFNAMSIZ;
            let name = bytes.split(|b| *b == 0).next().unwrap_or_default();
            if !whole && name.len() != bytes.len() {
                return None;
            }
            let mut text = String::from_utf8(name.to_vec()).ok()?;
            if !whole {
                text.push('*');
            }
            crate::config::egress::InterfacePattern::parse(&text)
                .ok()
                .map(Stmt::OutputInterface)
        }
        Loaded::Address { side, len } => {
            let max = if v6 { 128 } else { 32 };
            let prefix = (len * 8).min(max) as u8;
            let net = IpNet::new(address_of(v6, bytes), prefix).ok()?;
            Some(Stmt::Address {
                v6,
                side,
                negated,
                nets: vec![net],
            })
        }
        Loaded::Masked { side, mask } => {
            let net = IpNet::new(address_of(v6, bytes), prefix_of_mask(&mask)?).ok()?;
            Some(Stmt::Address {
                v6,
                side,
                negated,
                nets: vec![net],
            })
        }
        _ => None,
    }
}

fn looked_up(
    v6: bool,
    loaded: Option<Loaded>,
    set: SetRef,
    negated: bool,
    anonymous: &dyn Fn(&SetRef) -> Option<Anonymous>,
) -> Option<Stmt> {
    let is_anonymous = set.name.starts_with("__set");
    match loaded? {
        Loaded::Address { side, .. } if !is_anonymous => Some(Stmt::SetLookup {
            v6,
            side,
            negated,
            set: set.name,
        }),
        Loaded::Address { side, .. } => match anonymous(&set)?.keys {
            Keys::Nets(nets) => Some(Stmt::Address {
                v6,
                side,
                negated,
                nets,
            }),
            Keys::Protocols(_) => None,
        },
        Loaded::Protocol if !negated => match anonymous(&set)?.keys {
            Keys::Protocols(numbers) => Some(Stmt::Protocols(numbers)),
            Keys::Nets(_) => None,
        },
        _ => None,
    }
}

/// A dynset, reject or log we write, else the expression by its name.
fn pod_share_statement(
    v6: bool,
    name: &str,
    attrs: &[DefaultNla],
    regs: &std::collections::HashMap<u32, Loaded>,
) -> Stmt {
    let typed = match name {
        "dynset" => dynset(v6, attrs, regs),
        "log" => super::limits::log_of(attrs).map(Stmt::Log),
        _ => super::limits::reject_of(v6, attrs).map(Stmt::Reject),
    };
    typed.unwrap_or_else(|| Stmt::Other(name.to_string()))
}

/// A pod share's set update: the key read from the registers it was loaded into.
fn dynset(
    v6: bool,
    attrs: &[DefaultNla],
    regs: &std::collections::HashMap<u32, Loaded>,
) -> Option<Stmt> {
    let parts = super::limits::dynset_of(attrs)?;
    let [source, destination, port] = super::limits::key_registers(v6).map(u32::from);
    if parts.key_register != source
        || !matches!(
            regs.get(&source),
            Some(Loaded::Address {
                side: Side::Source,
                ..
            })
        )
    {
        return None;
    }
    let per_destination = matches!(
        regs.get(&destination),
        Some(Loaded::Address {
            side: Side::Destination,
            ..
        })
    ) && matches!(regs.get(&port), Some(Loaded::TransportDport));
    // The operation goes with the limiter: a rate refreshes (update), a count adds.
    if parts.add != matches!(parts.limiter, Limiter::CountOver(_)) {
        return None;
    }
    Some(Stmt::SetUpdate {
        set: parts.set,
        key: ShareKey {
            v6,
            per_destination,
        },
        limiter: parts.limiter,
    })
}

/// The expressions the crate does not type: fib, numgen, byteorder, counter, masq, nat, ct,
/// dynset, reject, log.
fn other(
    v6: bool,
    name: &str,
    attrs: &[DefaultNla],
    regs: &mut std::collections::HashMap<u32, Loaded>,
) -> Option<Stmt> {
    let reg_data = |regs: &std::collections::HashMap<u32, Loaded>, kind: u16| {
        u32_of(attrs, kind).and_then(|r| match regs.get(&r) {
            Some(Loaded::Data(d)) => Some(d.clone()),
            _ => None,
        })
    };
    let port = |d: Vec<u8>| d.get(..2).map(|b| u16::from_be_bytes([b[0], b[1]]));
    match name {
        "fib" => {
            let local_type = u32_of(attrs, 2) == Some(NFT_FIB_RESULT_ADDRTYPE)
                && u32_of(attrs, 3) == Some(NFTA_FIB_F_DADDR);
            regs.insert(u32_of(attrs, 1)?, Loaded::Fib { local_type });
            None
        }
        "numgen"
            if u32_of(attrs, 3) == Some(NFT_NG_RANDOM) && u32_of(attrs, 4).unwrap_or(0) == 0 =>
        {
            let modulus = u32_of(attrs, 2)?;
            regs.insert(u32_of(attrs, 1)?, Loaded::Numgen { modulus });
            None
        }
        "byteorder" => {
            // Keeps what a numgen loaded (converted for the comparison); anything else is
            // no longer judged.
            let (sreg, dreg) = (u32_of(attrs, 1)?, u32_of(attrs, 2)?);
            let kept = match regs.get(&sreg) {
                Some(n @ Loaded::Numgen { .. }) => n.clone(),
                _ => Loaded::Unknown,
            };
            regs.insert(dreg, kept);
            None
        }
        "ct" if u32_of(attrs, 2) == Some(0) => {
            regs.insert(u32_of(attrs, 1)?, Loaded::CtState);
            None
        }
        "dynset" | "reject" | "log" => Some(pod_share_statement(v6, name, attrs, regs)),
        "counter" => Some(Stmt::Counter {
            packets: u64_of(attrs, 2).unwrap_or(0),
            bytes: u64_of(attrs, 1).unwrap_or(0),
        }),
        "masq" => {
            let flags = u32_of(attrs, 1).unwrap_or(0);
            let first = reg_data(regs, 2).and_then(port);
            let last = reg_data(regs, 3).and_then(port).or(first);
            let ports = first.zip(last);
            Some(Stmt::Masquerade {
                ports,
                flags: flags & !NAT_RANGE_PROTO_SPECIFIED,
            })
        }
        "nat"
            if u32_of(attrs, 1) == Some(NFT_NAT_SNAT)
                && u32_of(attrs, 4).is_none_or(|max| Some(max) == u32_of(attrs, 3))
                && reg_data(regs, 3).is_some_and(|d| d.len() == if v6 { 16 } else { 4 }) =>
        {
            let to = address_of(v6, &reg_data(regs, 3)?);
            let first = reg_data(regs, 5).and_then(port);
            let last = reg_data(regs, 6).and_then(port).or(first);
            let flags = u32_of(attrs, 7).unwrap_or(0);
            Some(Stmt::Snat {
                to,
                ports: first.zip(last),
                flags: flags & !(NAT_RANGE_PROTO_SPECIFIED | NAT_RANGE_MAP_IPS),
            })
        }
        "nat" => {
            let kind = match u32_of(attrs, 1)? {
                0 => "snat",
                1 => "dnat",
                _ => return Some(Stmt::Other("nat".into())),
            };
            let to = reg_data(regs, 3).map_or_else(
                || "?".to_string(),
                |d| address_of(v6 || d.len() == 16, &d).to_string(),
            );
            Some(Stmt::Nat { kind, to })
        }
        _ => Some(Stmt::Other(name.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    /// Every statement our rules use survives encoding and decoding, and prints as nft does.
    #[test]
    fn our_statements_round_trip_through_expressions() {
        let rules: Vec<(Vec<Stmt>, &str)> = vec![
            (
                vec![Stmt::FibDaddrLocal, Stmt::Verdict(NftVerdict::Return)],
                "fib daddr type local return",
            ),
            (
                vec![
                    Stmt::Address {
                        v6: false,
                        side: Side::Source,
                        negated: true,
                        nets: vec![net("10.0.0.0/8"), net("192.168.0.1/32")],
                    },
                    Stmt::Verdict(NftVerdict::Return),
                ],
                "ip saddr != { 10.0.0.0/8, 192.168.0.1 } return",
            ),
            (
                vec![
                    Stmt::Address {
                        v6: true,
                        side: Side::Source,
                        negated: true,
                        nets: vec![net("fc00::/7")],
                    },
                    Stmt::Verdict(NftVerdict::Return),
                ],
                "ip6 saddr != fc00::/7 return",
            ),
            (
                vec![
                    Stmt::SetLookup {
                        v6: false,
                        side: Side::Destination,
                        negated: false,
                        set: "nomasq".into(),
                    },
                    Stmt::Verdict(NftVerdict::Return),
                ],
                "ip daddr @nomasq return",
            ),
            (
                vec![
                    Stmt::Protocols(vec![6, 17, 132]),
                    Stmt::Numgen {
                        modulus: 3,
                        below: 1,
                    },
                    Stmt::Counter {
                        packets: 0,
                        bytes: 0,
                    },
                    Stmt::Masquerade {
                        ports: Some((1024, 2047)),
                        flags: NAT_RANGE_PROTO_RANDOM_FULLY,
                    },
                ],
                "meta l4proto { tcp, udp, sctp } numgen random mod 3 < 1 counter masquerade to :1024-2047 fully-random",
            ),
            (
                vec![
                    Stmt::Counter {
                        packets: 0,
                        bytes: 0,
                    },
                    Stmt::Masquerade {
                        ports: None,
                        flags: 0,
                    },
                ],
                "counter masquerade",
            ),
        ];
        assert_round_trips(rules);
    }

    /// Each rule's text is nft's, and its expressions decode back into the same statements.
    fn assert_round_trips(rules: Vec<(Vec<Stmt>, &str)>) {
        for (stmts, expected) in rules {
            assert_eq!(text(&stmts), expected);
            let mut sets: Vec<Anonymous> = Vec::new();
            let exprs = encode(&stmts, &mut |keys| {
                let set = SetRef {
                    name: "__set%d".into(),
                    id: Some(sets.len() as u32 + 1),
                };
                sets.push(Anonymous {
                    set: set.clone(),
                    keys,
                });
                set
            })
            .unwrap();
            let v6 = expected.starts_with("ip6")
                || expected.contains("fd00::")
                || expected.contains(" ip6 ");
            let decoded = decode(v6, &exprs, &|r| sets.iter().find(|s| s.set == *r).cloned());
            assert_eq!(text(&decoded), expected);
        }
    }

    /// The egress statements (interface match, SNAT with ports and flags) as nft writes them.
    #[test]
    fn egress_statements_round_trip_through_expressions() {
        let rules: Vec<(Vec<Stmt>, &str)> = vec![
            (
                vec![
                    Stmt::OutputInterface(
                        crate::config::egress::InterfacePattern::parse("eth+").unwrap(),
                    ),
                    Stmt::Protocols(vec![6, 17, 132]),
                    Stmt::Counter {
                        packets: 0,
                        bytes: 0,
                    },
                    Stmt::Snat {
                        to: "10.0.0.5".parse().unwrap(),
                        ports: Some((1024, 2047)),
                        flags: NAT_RANGE_PROTO_RANDOM_FULLY,
                    },
                ],
                "oifname \"eth*\" meta l4proto { tcp, udp, sctp } counter snat to 10.0.0.5:1024-2047 fully-random",
            ),
            (
                vec![
                    Stmt::OutputInterface(
                        crate::config::egress::InterfacePattern::parse("abcdefghijklmno").unwrap(),
                    ),
                    Stmt::Snat {
                        to: "fd00::5".parse().unwrap(),
                        ports: None,
                        flags: 0,
                    },
                ],
                "oifname \"abcdefghijklmno\" snat to fd00::5",
            ),
        ];
        assert_round_trips(rules);
    }

    /// The pod share's statements: `ct state new`, the dynamic sets' updates (per pod and per
    /// destination, IPv4 and IPv6) and the refusals, as nft writes them.
    #[test]
    fn pod_share_statements_round_trip_through_expressions() {
        let update = |v6, per_destination, limiter| Stmt::SetUpdate {
            set: "pod_rate".into(),
            key: ShareKey {
                v6,
                per_destination,
            },
            limiter,
        };
        let rate = Limiter::RateOver {
            per_second: 2000,
            burst: 40,
        };
        let goto = Stmt::Verdict(NftVerdict::Goto("share_refuse".into()));
        let rules: Vec<(Vec<Stmt>, &str)> = vec![
            (
                vec![Stmt::CtStateNew, Stmt::Verdict(NftVerdict::Jump("share".into()))],
                "ct state new jump share",
            ),
            (
                vec![update(false, false, rate), goto.clone()],
                "update @pod_rate { ip saddr limit rate over 2000/second burst 40 packets } goto share_refuse",
            ),
            (
                vec![update(false, true, rate), goto.clone()],
                "update @pod_rate { ip saddr . ip daddr . th dport limit rate over 2000/second burst 40 packets } goto share_refuse",
            ),
            (
                vec![update(true, true, rate), goto.clone()],
                "update @pod_rate { ip6 saddr . ip6 daddr . th dport limit rate over 2000/second burst 40 packets } goto share_refuse",
            ),
            (
                vec![
                    update(true, false, Limiter::CountOver(200)),
                    Stmt::Counter {
                        packets: 0,
                        bytes: 0,
                    },
                    goto.clone(),
                ],
                "add @pod_rate { ip6 saddr ct count over 200 } counter goto share_refuse",
            ),
            (
                vec![
                    update(false, false, Limiter::CountOver(200)),
                    Stmt::Counter {
                        packets: 0,
                        bytes: 0,
                    },
                    Stmt::Log(NflogCopy {
                        prefix: "ipmasq-share-connections".into(),
                        group: 7373,
                        snaplen: 80,
                    }),
                    goto.clone(),
                ],
                "add @pod_rate { ip saddr ct count over 200 } counter log prefix \"ipmasq-share-connections\" group 7373 snaplen 80 goto share_refuse",
            ),
            (
                vec![Stmt::Protocols(vec![6]), Stmt::Reject(Reject::TcpReset)],
                "meta l4proto tcp reject with tcp reset",
            ),
            (
                vec![Stmt::Reject(Reject::AdminProhibited { v6: false })],
                "reject with icmp admin-prohibited",
            ),
            (
                vec![
                    update(false, false, Limiter::CountOver(200)),
                    Stmt::SetUpdate {
                        set: "pod_full".into(),
                        key: ShareKey {
                            v6: false,
                            per_destination: false,
                        },
                        limiter: Limiter::KeyOnly,
                    },
                    goto.clone(),
                ],
                "add @pod_rate { ip saddr ct count over 200 } update @pod_full { ip saddr } goto share_refuse",
            ),
        ];
        assert_round_trips(rules);
        let v6 = [Stmt::Reject(Reject::AdminProhibited { v6: true })];
        let exprs = encode(&v6, &mut |_| unreachable!()).unwrap();
        assert_eq!(
            text(&decode(true, &exprs, &|_| None)),
            "reject with icmpv6 admin-prohibited"
        );
    }

    /// A log to the kernel's log (`log prefix "x" level warn`) is not a copy to NFLOG: it
    /// reads as `[log]`, so a rule that holds one never compares equal to ours.
    #[test]
    fn a_log_of_another_form_reads_as_unknown() {
        let syslog = other_expr(
            "log",
            vec![
                DefaultNla::new(2, b"x\0".to_vec()),
                // NFTA_LOG_LEVEL: warn
                DefaultNla::new(5, be32(4)),
            ],
        );
        let goto = verdict_expr(&NftVerdict::Goto("share_refuse".into()));
        let stmts = decode(false, &[syslog, goto], &|_| None);
        assert_eq!(text(&stmts), "[log] goto share_refuse");
    }

    #[test]
    fn masks_are_prefixes_only_without_holes() {
        assert_eq!(prefix_of_mask(&[255, 0, 0, 0]), Some(8));
        assert_eq!(prefix_of_mask(&[255, 255, 240, 0]), Some(20));
        assert_eq!(prefix_of_mask(&[255, 0, 255, 0]), None);
        assert_eq!(prefix_of_mask(&[0, 0, 0, 0]), Some(0));
    }

    #[test]
    fn statements_it_only_reads_are_not_written() {
        let snat = [Stmt::Nat {
            kind: "snat",
            to: "192.0.2.1".into(),
        }];
        assert!(encode(&snat, &mut |_| unreachable!()).is_err());
    }
}
