//! nf_tables messages in netlink-packet-netfilter's types: the batch a transaction sends
//! (tables, chains, sets and their elements, rules), the requests a reading sends, and the
//! reading of what comes back (framed by `crate::netlink::framing`). Pure: nothing here
//! touches a socket.

use super::statement::{self, Stmt};
use crate::netlink::framing;
pub(crate) use crate::netlink::framing::{attributes, error_code, frames, Framed};
use crate::plan::Family;
use ipnet::IpNet;
use netlink_packet_core::{
    DefaultNla, NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_APPEND,
    NLM_F_CREATE, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_netfilter::nftables::{
    ChainAttribute, ChainMessage, DataAttribute, ExpressionAttribute, Expressions, GenMessage,
    Hook, HookNumber, InetHookNumber, ListAttribute, NfTablesMessage, RuleAttribute, RuleMessage,
    SetAttribute, SetDescription, SetElementAttribute, SetElementFlags, SetElementList,
    SetElementMessage, SetFlags, SetMessage, TableAttribute, TableFlags, TableMessage,
};
use netlink_packet_netfilter::none::ControlMessage;
use netlink_packet_netfilter::{NetfilterHeader, NetfilterMessage, NetfilterProtoFamily};
use std::net::IpAddr;

/// `NFNL_SUBSYS_NFTABLES`: the batch's resource id, and the high byte of nf_tables' message
/// types.
pub(crate) const NFNL_SUBSYS_NFTABLES: u16 = 10;
/// Set key types as nft declares them.
pub(crate) const TYPE_IPV4_ADDR: u32 = 7;
pub(crate) const TYPE_IPV6_ADDR: u32 = 8;
pub(crate) const TYPE_INET_PROTO: u32 = 12;
pub(crate) const TYPE_INET_SERVICE: u32 = 13;
/// The bits of one type in a concatenation's key type (nft's `TYPE_BITS`).
const CONCAT_TYPE_BITS: u32 = 6;
/// The udata TLV of a rule's comment (`NFTNL_UDATA_RULE_COMMENT`), and of a table's
/// (`NFTNL_UDATA_TABLE_COMMENT`): the same type, so one encoding serves both.
const UDATA_RULE_COMMENT: u8 = 0;
/// One element-list attribute holds at most 64 KiB; a message of elements stays below it.
const ELEMENT_BYTES_PER_MESSAGE: usize = 48 * 1024;
/// nf_tables' `NF_ACCEPT`, a base chain's policy.
const POLICY_ACCEPT: u32 = 1;

pub(crate) fn be32(v: u32) -> Vec<u8> {
    v.to_be_bytes().to_vec()
}

/// The value of attribute `kind` among `attrs` (flags masked off).
pub(crate) fn nla_value(attrs: &[DefaultNla], kind: u16) -> Option<Vec<u8>> {
    use netlink_packet_core::Nla;
    attrs
        .iter()
        .find(|a| a.kind() & framing::NLA_TYPE_MASK == kind)
        .map(|a| {
            let mut buf = vec![0; a.value_len()];
            a.emit_value(&mut buf);
            buf
        })
}

/// An expression the crate has no type for, by name and raw attributes.
pub(crate) fn other_expr(
    name: &str,
    attributes: Vec<DefaultNla>,
) -> ListAttribute<ExpressionAttribute> {
    ListAttribute::from(Expressions::Other {
        expression_type: name.to_string(),
        attributes,
    })
}

/// The table and the object a message's attributes name (`""` where they name none).
pub(crate) trait Named {
    fn names(&self) -> (&str, &str);
}

macro_rules! named {
    ($attribute:ty, $table:path, $name:path) => {
        impl Named for [$attribute] {
            fn names(&self) -> (&str, &str) {
                let mut found = ("", "");
                for attribute in self {
                    match attribute {
                        $table(table) => found.0 = table,
                        $name(name) => found.1 = name,
                        _ => {}
                    }
                }
                found
            }
        }
    };
}

named!(SetAttribute, SetAttribute::Table, SetAttribute::Name);
named!(ChainAttribute, ChainAttribute::Table, ChainAttribute::Name);
named!(RuleAttribute, RuleAttribute::Table, RuleAttribute::Chain);
named!(SetElementList, SetElementList::Table, SetElementList::Set);

impl Named for [TableAttribute] {
    fn names(&self) -> (&str, &str) {
        let name = self.iter().find_map(|a| match a {
            TableAttribute::Name(name) => Some(name.as_str()),
            _ => None,
        });
        ("", name.unwrap_or(""))
    }
}

/// A rule's expressions, handle and comment, as its attributes carry them.
pub(crate) fn rule_parts(
    attrs: &[RuleAttribute],
) -> (
    &[ListAttribute<ExpressionAttribute>],
    Option<u64>,
    Option<String>,
) {
    let mut found = (&[][..], None, None);
    for attribute in attrs {
        match attribute {
            RuleAttribute::Expressions(exprs) => found.0 = exprs.as_slice(),
            RuleAttribute::Handle(handle) => found.1 = Some(*handle),
            RuleAttribute::UserData(udata) => found.2 = comment_of(udata),
            _ => {}
        }
    }
    found
}

/// The key type of a concatenation of `types` (nft's encoding: each type in its own bits).
pub(crate) fn concat_type(types: &[u32]) -> u32 {
    types.iter().fold(0, |acc, t| (acc << CONCAT_TYPE_BITS) | t)
}

/// A set key type as nft names it (a concatenation's parts joined by ` . `).
pub(crate) fn key_type_name(key_type: u32) -> String {
    let one = |t: u32| match t {
        TYPE_IPV4_ADDR => Some("ipv4_addr"),
        TYPE_IPV6_ADDR => Some("ipv6_addr"),
        TYPE_INET_PROTO => Some("inet_proto"),
        TYPE_INET_SERVICE => Some("inet_service"),
        _ => None,
    };
    if let Some(name) = one(key_type) {
        return name.into();
    }
    let mask = (1 << CONCAT_TYPE_BITS) - 1;
    let mut parts = Vec::new();
    let mut rest = key_type;
    while rest != 0 {
        parts.push(one(rest & mask));
        rest >>= CONCAT_TYPE_BITS;
    }
    match parts.iter().rev().copied().collect::<Option<Vec<&str>>>() {
        Some(names) if names.len() > 1 => names.join(" . "),
        _ => format!("type {key_type}"),
    }
}

/// A set the packet path fills (`flags dynamic`), keyed by a pod's address or a
/// concatenation: what the pod share's limits keep their state in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DynamicSet {
    pub name: String,
    pub key_type: u32,
    pub key_len: u32,
    /// The elements' lifetime without traffic, in milliseconds (`flags timeout`).
    pub timeout_ms: Option<u64>,
    /// The most elements it holds.
    pub size: u32,
}

/// A set's key type, flags and batch id, as its attributes declare them.
pub(crate) fn set_declaration(attrs: &[SetAttribute]) -> (Option<u32>, SetFlags, Option<u32>) {
    let mut found = (None, SetFlags::empty(), None);
    for attribute in attrs {
        match attribute {
            SetAttribute::KeyType(key) => found.0 = Some(*key),
            SetAttribute::Flags(flags) => found.1 = *flags,
            SetAttribute::Id(id) => found.2 = Some(*id),
            _ => {}
        }
    }
    found
}

/// A set by name and, when created in the same batch, by its batch id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SetRef {
    pub name: String,
    pub id: Option<u32>,
}

/// The keys of a set we write: address intervals, or l4 protocol numbers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Keys {
    Nets(Vec<IpNet>),
    Protocols(Vec<u8>),
}

/// An anonymous set a rule looks up, with its keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Anonymous {
    pub set: SetRef,
    pub keys: Keys,
}

pub(crate) fn nfproto(family: Family) -> NetfilterProtoFamily {
    match family {
        Family::V4 => NetfilterProtoFamily::IPv4,
        Family::V6 => NetfilterProtoFamily::IPv6,
    }
}

/// `NFT_MSG_NEWSETELEM` and `NFT_MSG_DELSETELEM`: message types within nf_tables.
const NFT_MSG_NEWSETELEM: u16 = 12;
const NFT_MSG_DELSETELEM: u16 = 14;
/// Set-element list attributes (`NFTA_SET_ELEM_LIST_*`), the list entry (`NFTA_LIST_ELEM`),
/// an element's key and flags (`NFTA_SET_ELEM_KEY`, `_FLAGS`) and a data value.
const ELEM_LIST_TABLE: u16 = 1;
const ELEM_LIST_SET: u16 = 2;
const ELEM_LIST_ELEMENTS: u16 = 3;
const ELEM_LIST_SET_ID: u16 = 4;
const LIST_ELEM: u16 = 1;
const ELEM_KEY: u16 = 1;
const ELEM_FLAGS: u16 = 3;
const DATA_VALUE: u16 = 1;
/// `NFT_SET_ELEM_INTERVAL_END`.
const ELEM_INTERVAL_END: u32 = 1;
/// `NLA_F_NESTED`: what the crate sets on every nested attribute, as the kernel expects.
const NLA_F_NESTED: u16 = 0x8000;

/// The netlink and nfnetlink headers of one message.
struct MessageHeader {
    kind: u16,
    flags: u16,
    sequence: u32,
    family: NetfilterProtoFamily,
}

/// Opens attribute `kind` at the end of `buf`; [`close_nla`] writes its length.
fn open_nla(buf: &mut Vec<u8>, kind: u16) -> usize {
    let start = buf.len();
    buf.extend_from_slice(&[0, 0]);
    buf.extend_from_slice(&kind.to_ne_bytes());
    start
}

/// Writes the length of the attribute opened at `start` and pads it to four bytes.
fn close_nla(buf: &mut Vec<u8>, start: usize) {
    let length = (buf.len() - start) as u16;
    buf[start..start + 2].copy_from_slice(&length.to_ne_bytes());
    framing::pad(buf);
}

fn put_nla(buf: &mut Vec<u8>, kind: u16, value: &[u8]) {
    let start = open_nla(buf, kind);
    buf.extend_from_slice(value);
    close_nla(buf, start);
}

/// One set-element message for `elements` (keys, and whether each ends an interval)
/// appended to `buf`: the bytes the crate's `SetElementMessage` emits, in one pass.
fn element_message(
    buf: &mut Vec<u8>,
    header: &MessageHeader,
    table: &str,
    set: &SetRef,
    elements: &[(Vec<u8>, bool)],
) {
    let start = buf.len();
    buf.extend_from_slice(&[0; 4]);
    buf.extend_from_slice(&header.kind.to_ne_bytes());
    buf.extend_from_slice(&header.flags.to_ne_bytes());
    buf.extend_from_slice(&header.sequence.to_ne_bytes());
    buf.extend_from_slice(&0u32.to_ne_bytes());
    buf.extend_from_slice(&[u8::from(header.family), 0, 0, 0]);
    for (kind, name) in [(ELEM_LIST_TABLE, table), (ELEM_LIST_SET, set.name.as_str())] {
        let at = open_nla(buf, kind);
        buf.extend_from_slice(name.as_bytes());
        buf.push(0);
        close_nla(buf, at);
    }
    if let Some(id) = set.id {
        put_nla(buf, ELEM_LIST_SET_ID, &id.to_be_bytes());
    }
    let list = open_nla(buf, ELEM_LIST_ELEMENTS | NLA_F_NESTED);
    for (key, end) in elements {
        let item = open_nla(buf, LIST_ELEM | NLA_F_NESTED);
        let key_at = open_nla(buf, ELEM_KEY | NLA_F_NESTED);
        put_nla(buf, DATA_VALUE, key);
        close_nla(buf, key_at);
        if *end {
            put_nla(buf, ELEM_FLAGS, &ELEM_INTERVAL_END.to_be_bytes());
        }
        close_nla(buf, item);
    }
    close_nla(buf, list);
    let length = (buf.len() - start) as u32;
    buf[start..start + 4].copy_from_slice(&length.to_ne_bytes());
}

/// A base chain's declaration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BaseChain {
    pub kind: String,
    pub hook: InetHookNumber,
    pub priority: i32,
}

/// The interval elements of `nets`: each a start and, unless it reaches the end of the
/// address space, an interval-end at the first address after it.
fn interval_elements(nets: &[IpNet]) -> Vec<(Vec<u8>, bool)> {
    let mut out = Vec::with_capacity(nets.len() * 2);
    for net in nets {
        match net {
            IpNet::V4(n) => {
                out.push((n.network().octets().to_vec(), false));
                if let Some(end) = u32::from(n.broadcast()).checked_add(1) {
                    out.push((end.to_be_bytes().to_vec(), true));
                }
            }
            IpNet::V6(n) => {
                out.push((n.network().octets().to_vec(), false));
                if let Some(end) = u128::from(n.broadcast()).checked_add(1) {
                    out.push((end.to_be_bytes().to_vec(), true));
                }
            }
        }
    }
    out
}

fn element(key: Vec<u8>, end: bool) -> ListAttribute<SetElementAttribute> {
    let mut attrs = vec![SetElementAttribute::Key(DataAttribute::Value(key))];
    if end {
        attrs.push(SetElementAttribute::Flags(SetElementFlags::IntervalEnd));
    }
    ListAttribute::Element(attrs)
}

/// The ranges of sorted interval keys (an end before a start at the same key): each a start
/// and the first key after it, None when it runs to the end of the address space. An end with
/// no start before it (nft's leading `0.0.0.0` end) is skipped.
pub(crate) fn ranges(mut keys: Vec<(Vec<u8>, bool)>) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    keys.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    let mut out = Vec::new();
    let mut open: Option<Vec<u8>> = None;
    for (key, end) in keys {
        match (end, open.take()) {
            (true, Some(start)) => out.push((start, Some(key))),
            (true, None) => {}
            (false, Some(start)) => {
                out.push((start, None));
                open = Some(key);
            }
            (false, None) => open = Some(key),
        }
    }
    if let Some(start) = open {
        out.push((start, None));
    }
    out
}

/// The CIDR of the range `[start, end)`, or its `a-b` text when it is not one.
pub(crate) fn range_net(start: &[u8], end: Option<&[u8]>) -> Result<IpNet, String> {
    let to_u128 = |b: &[u8]| b.iter().fold(0u128, |acc, x| (acc << 8) | u128::from(*x));
    let bits = (start.len() * 8) as u32;
    let first = to_u128(start);
    // The number of addresses, as a power of two when it is one.
    let span_bits = match end {
        Some(end) => {
            let span = to_u128(end).wrapping_sub(first);
            (span.is_power_of_two()).then(|| span.trailing_zeros())
        }
        None => {
            let after_last = if bits == 128 { 0 } else { 1u128 << bits };
            let span = after_last.wrapping_sub(first);
            if span == 0 && first == 0 {
                Some(bits)
            } else {
                span.is_power_of_two().then(|| span.trailing_zeros())
            }
        }
    };
    let addr = |v: u128| -> IpAddr {
        if bits == 32 {
            IpAddr::from((v as u32).to_be_bytes())
        } else {
            IpAddr::from(v.to_be_bytes())
        }
    };
    let aligned =
        span_bits.filter(|s| *s <= bits && (*s == 128 || first & ((1u128 << s) - 1) == 0));
    match aligned {
        Some(s) => IpNet::new(addr(first), (bits - s) as u8).map_err(|e| e.to_string()),
        None => {
            let last = match end {
                Some(end) => to_u128(end).wrapping_sub(1),
                None if bits == 128 => u128::MAX,
                None => (1u128 << bits) - 1,
            };
            Err(format!("{}-{}", addr(first), addr(last)))
        }
    }
}

/// The nets of interval keys, and the ranges that are no CIDR (as `a-b`).
pub(crate) fn nets_of(keys: Vec<(Vec<u8>, bool)>) -> (Vec<IpNet>, Vec<String>) {
    let mut nets = Vec::new();
    let mut odd = Vec::new();
    for (start, end) in ranges(keys) {
        match range_net(&start, end.as_deref()) {
            Ok(net) => nets.push(net),
            Err(text) => odd.push(text),
        }
    }
    nets.sort();
    (nets, odd)
}

/// The keys of the elements of a set-element message: `(key, interval end)` each.
pub(crate) fn element_keys(list: &[SetElementList]) -> Vec<(Vec<u8>, bool)> {
    let mut out = Vec::new();
    for attr in list {
        let SetElementList::Elements(elements) = attr else {
            continue;
        };
        for e in elements {
            let ListAttribute::Element(attrs) = e else {
                continue;
            };
            let key = attrs.iter().find_map(|a| match a {
                SetElementAttribute::Key(DataAttribute::Value(k)) => Some(k.clone()),
                _ => None,
            });
            let end = attrs.iter().any(|a| {
                matches!(a, SetElementAttribute::Flags(f) if f.contains(SetElementFlags::IntervalEnd))
            });
            if let Some(key) = key {
                out.push((key, end));
            }
        }
    }
    out
}

/// A transaction under construction: begin, the messages, end. Every message asks for an
/// acknowledgement, so each one's fate is known by its sequence number.
pub(crate) struct Batch {
    bytes: Vec<u8>,
    first_seq: u32,
    next_seq: u32,
    next_set_id: u32,
    messages: usize,
}

impl Batch {
    pub fn new(first_seq: u32) -> Self {
        let mut batch = Batch {
            bytes: Vec::new(),
            first_seq,
            next_seq: first_seq,
            next_set_id: 1,
            messages: 0,
        };
        batch.control(ControlMessage::BatchBegin);
        batch
    }

    fn control(&mut self, message: ControlMessage) {
        let header = NetfilterHeader::new(NetfilterProtoFamily::Unspec, 0, NFNL_SUBSYS_NFTABLES);
        let mut msg = NetlinkMessage::new(
            NetlinkHeader::default(),
            NetlinkPayload::InnerMessage(NetfilterMessage::new(header, message)),
        );
        msg.header.flags = NLM_F_REQUEST;
        msg.header.sequence_number = self.next_seq;
        self.next_seq += 1;
        self.emit(msg);
    }

    fn emit(&mut self, mut msg: NetlinkMessage<NetfilterMessage>) {
        // finalize measures the message once; its header keeps the length.
        msg.finalize();
        let start = self.bytes.len();
        self.bytes.resize(start + msg.header.length as usize, 0);
        msg.serialize(&mut self.bytes[start..]);
    }

    fn push(&mut self, family: Family, flags: u16, message: NfTablesMessage) {
        let header = NetfilterHeader::new(nfproto(family), 0, 0);
        let mut msg = NetlinkMessage::new(
            NetlinkHeader::default(),
            NetlinkPayload::InnerMessage(NetfilterMessage::new(header, message)),
        );
        msg.header.flags = NLM_F_REQUEST | NLM_F_ACK | flags;
        msg.header.sequence_number = self.next_seq;
        self.next_seq += 1;
        self.messages += 1;
        self.emit(msg);
    }

    /// Declares `table`, with `comment` as nft stores a table's comment (a table that
    /// exists already keeps its own: the kernel does not update a table's user data), and
    /// `flags` when given (on a table that exists, the kernel takes them as an update: an
    /// orphaned `persist` table is claimed by `owner`).
    pub fn add_table(
        &mut self,
        family: Family,
        table: &str,
        comment: Option<&str>,
        flags: Option<TableFlags>,
    ) -> Result<(), String> {
        let mut attributes = vec![TableAttribute::Name(table.into())];
        if let Some(flags) = flags {
            attributes.push(TableAttribute::Flags(flags));
        }
        if let Some(comment) = comment {
            attributes.push(TableAttribute::UserData(comment_udata(comment)?));
        }
        self.push(
            family,
            NLM_F_CREATE,
            NfTablesMessage::NewTable(TableMessage { attributes }),
        );
        Ok(())
    }

    pub fn delete_table(&mut self, family: Family, table: &str) {
        self.push(
            family,
            0,
            NfTablesMessage::DeleteTable(TableMessage {
                attributes: vec![TableAttribute::Name(table.into())],
            }),
        );
    }

    pub fn add_base_chain(&mut self, family: Family, table: &str, chain: &str, base: &BaseChain) {
        self.push(
            family,
            NLM_F_CREATE,
            NfTablesMessage::NewChain(ChainMessage {
                attributes: vec![
                    ChainAttribute::Table(table.into()),
                    ChainAttribute::Name(chain.into()),
                    ChainAttribute::Hook(vec![
                        Hook::Number(HookNumber::Inet(base.hook)),
                        Hook::Priority(base.priority as u32),
                    ]),
                    ChainAttribute::Policy(POLICY_ACCEPT),
                    ChainAttribute::Type(base.kind.clone()),
                ],
            }),
        );
    }

    /// Deletes every rule of a chain (`flush chain`).
    pub fn flush_chain(&mut self, family: Family, table: &str, chain: &str) {
        self.delete_rules(family, table, chain, None);
    }

    pub fn delete_chain(&mut self, family: Family, table: &str, chain: &str) {
        self.push(
            family,
            0,
            NfTablesMessage::DeleteChain(ChainMessage {
                attributes: vec![
                    ChainAttribute::Table(table.into()),
                    ChainAttribute::Name(chain.into()),
                ],
            }),
        );
    }

    pub fn delete_rule(&mut self, family: Family, table: &str, chain: &str, handle: u64) {
        self.delete_rules(family, table, chain, Some(handle));
    }

    /// Deletes the rule with `handle` of a chain, or every rule of it without one.
    fn delete_rules(&mut self, family: Family, table: &str, chain: &str, handle: Option<u64>) {
        let mut attributes = vec![
            RuleAttribute::Table(table.into()),
            RuleAttribute::Chain(chain.into()),
        ];
        attributes.extend(handle.map(RuleAttribute::Handle));
        self.push(
            family,
            0,
            NfTablesMessage::DeleteRule(RuleMessage { attributes }),
        );
    }

    /// Declares a set (a no-op when it exists with the same type); returns how the batch
    /// refers to it.
    pub fn add_set(
        &mut self,
        family: Family,
        table: &str,
        name: &str,
        key_type: u32,
        interval: bool,
    ) -> SetRef {
        let id = self.next_set_id;
        self.next_set_id += 1;
        let key_len = match key_type {
            TYPE_IPV6_ADDR => 16,
            TYPE_INET_PROTO => 1,
            _ => 4,
        };
        let anonymous = name.starts_with("__set");
        let mut flags = SetFlags::empty();
        if anonymous {
            flags |= SetFlags::Anonymous | SetFlags::Constant;
        }
        if interval {
            flags |= SetFlags::Interval;
        }
        let mut attributes = vec![
            SetAttribute::Table(table.into()),
            SetAttribute::Name(name.into()),
            SetAttribute::Flags(flags),
            SetAttribute::KeyType(key_type),
            SetAttribute::KeyLen(key_len),
            SetAttribute::Id(id),
        ];
        if anonymous {
            attributes.push(SetAttribute::Description(vec![SetDescription::Size(0)]));
        }
        self.push(
            family,
            NLM_F_CREATE,
            NfTablesMessage::NewSet(SetMessage { attributes }),
        );
        SetRef {
            name: name.into(),
            id: Some(id),
        }
    }

    /// Declares a dynamic set (a no-op when it exists declared the same).
    pub fn add_dynamic_set(&mut self, family: Family, table: &str, set: &DynamicSet) -> SetRef {
        let id = self.next_set_id;
        self.next_set_id += 1;
        let mut flags = SetFlags::Eval;
        let mut attributes = vec![
            SetAttribute::Table(table.into()),
            SetAttribute::Name(set.name.clone()),
        ];
        if let Some(timeout) = set.timeout_ms {
            flags |= SetFlags::Timeout;
            attributes.push(SetAttribute::Timeout(timeout));
        }
        attributes.extend([
            SetAttribute::Flags(flags),
            SetAttribute::KeyType(set.key_type),
            SetAttribute::KeyLen(set.key_len),
            SetAttribute::Id(id),
            SetAttribute::Description(vec![SetDescription::Size(set.size)]),
        ]);
        self.push(
            family,
            NLM_F_CREATE,
            NfTablesMessage::NewSet(SetMessage { attributes }),
        );
        SetRef {
            name: set.name.clone(),
            id: Some(id),
        }
    }

    /// Declares a regular chain (a no-op when it exists).
    pub fn add_chain(&mut self, family: Family, table: &str, chain: &str) {
        self.push(
            family,
            NLM_F_CREATE,
            NfTablesMessage::NewChain(ChainMessage {
                attributes: vec![
                    ChainAttribute::Table(table.into()),
                    ChainAttribute::Name(chain.into()),
                ],
            }),
        );
    }

    pub fn delete_set(&mut self, family: Family, table: &str, name: &str) {
        self.push(
            family,
            0,
            NfTablesMessage::DeleteSet(SetMessage {
                attributes: vec![
                    SetAttribute::Table(table.into()),
                    SetAttribute::Name(name.into()),
                ],
            }),
        );
    }

    /// Adds (or, with `add` false, deletes) the elements for `keys`, in as many messages as
    /// their size needs. Encoded by hand (see [`element_message`]): the crate's encoder
    /// measures each nested list again at every level (its cost: docs/benchmarks.md).
    pub fn elements(&mut self, family: Family, table: &str, set: &SetRef, keys: &Keys, add: bool) {
        let raw: Vec<(Vec<u8>, bool)> = match keys {
            Keys::Nets(nets) => interval_elements(nets),
            Keys::Protocols(p) => p.iter().map(|n| (vec![*n], false)).collect(),
        };
        let per_element = raw.first().map_or(16, |(k, _)| 24 + k.len());
        let per_message = (ELEMENT_BYTES_PER_MESSAGE / per_element).max(2) & !1;
        for chunk in raw.chunks(per_message) {
            let (kind, flags) = if add {
                (NFT_MSG_NEWSETELEM, NLM_F_CREATE)
            } else {
                (NFT_MSG_DELSETELEM, 0)
            };
            let header = MessageHeader {
                kind: (NFNL_SUBSYS_NFTABLES << 8) | kind,
                flags: NLM_F_REQUEST | NLM_F_ACK | flags,
                sequence: self.next_seq,
                family: nfproto(family),
            };
            element_message(&mut self.bytes, &header, table, set, chunk);
            self.next_seq += 1;
            self.messages += 1;
        }
    }

    /// Appends a rule (its anonymous sets first), with `comment` as nft stores it.
    pub fn add_rule(
        &mut self,
        family: Family,
        table: &str,
        chain: &str,
        stmts: &[Stmt],
        comment: Option<&str>,
    ) -> Result<(), String> {
        let mut anonymous = Vec::new();
        let mut next_id = self.next_set_id;
        let exprs = statement::encode(stmts, &mut |keys| {
            let set = SetRef {
                name: "__set%d".into(),
                id: Some(next_id),
            };
            next_id += 1;
            anonymous.push(Anonymous {
                set: set.clone(),
                keys,
            });
            set
        })?;
        for set in anonymous {
            let (key_type, interval) = match (&set.keys, family) {
                (Keys::Protocols(_), _) => (TYPE_INET_PROTO, false),
                (Keys::Nets(_), Family::V4) => (TYPE_IPV4_ADDR, true),
                (Keys::Nets(_), Family::V6) => (TYPE_IPV6_ADDR, true),
            };
            let made = self.add_set(family, table, &set.set.name, key_type, interval);
            debug_assert_eq!(made, set.set);
            self.elements(family, table, &made, &set.keys, true);
        }
        let mut attributes = vec![
            RuleAttribute::Table(table.into()),
            RuleAttribute::Chain(chain.into()),
            RuleAttribute::Expressions(exprs),
        ];
        if let Some(comment) = comment {
            attributes.push(RuleAttribute::UserData(comment_udata(comment)?));
        }
        self.push(
            family,
            NLM_F_CREATE | NLM_F_APPEND,
            NfTablesMessage::NewRule(RuleMessage { attributes }),
        );
        Ok(())
    }

    /// The batch's bytes, with its end, and the sequence numbers of its first and last
    /// acknowledged messages.
    pub fn finish(mut self) -> Finished {
        self.control(ControlMessage::BatchEnd);
        Finished {
            first_seq: self.first_seq + 1,
            last_seq: self.next_seq - 2,
            messages: self.messages,
            bytes: self.bytes,
        }
    }
}

/// A complete batch, ready to send.
#[derive(Clone, Debug)]
pub(crate) struct Finished {
    pub bytes: Vec<u8>,
    pub first_seq: u32,
    pub last_seq: u32,
    pub messages: usize,
}

/// A rule's or a table's comment as nft stores it: a udata TLV, NUL-terminated.
fn comment_udata(comment: &str) -> Result<Vec<u8>, String> {
    let len = comment.len() + 1;
    let len = u8::try_from(len).map_err(|_| format!("a comment of {len} bytes (at most 255)"))?;
    let mut out = vec![UDATA_RULE_COMMENT, len];
    out.extend_from_slice(comment.as_bytes());
    out.push(0);
    Ok(out)
}

/// The comment in a rule's or a table's udata, if it has one.
pub(crate) fn comment_of(udata: &[u8]) -> Option<String> {
    let mut rest = udata;
    while rest.len() >= 2 {
        let (kind, len) = (rest[0], rest[1] as usize);
        let value = rest.get(2..2 + len)?;
        if kind == UDATA_RULE_COMMENT {
            let text = value.strip_suffix(&[0]).unwrap_or(value);
            return Some(String::from_utf8_lossy(text).into_owned());
        }
        rest = &rest[2 + len..];
    }
    None
}

/// A request: a dump (`NLM_F_DUMP`) or a single get, of `message` in `family`.
pub(crate) fn request(
    family: NetfilterProtoFamily,
    message: NfTablesMessage,
    dump: bool,
    seq: u32,
) -> Vec<u8> {
    let mut msg = NetlinkMessage::new(
        NetlinkHeader::default(),
        NetlinkPayload::InnerMessage(NetfilterMessage::new(
            NetfilterHeader::new(family, 0, 0),
            message,
        )),
    );
    msg.header.flags = NLM_F_REQUEST | if dump { NLM_F_DUMP } else { NLM_F_ACK };
    msg.header.sequence_number = seq;
    msg.finalize();
    let mut buf = vec![0; msg.buffer_len()];
    msg.serialize(&mut buf);
    buf
}

/// The GETGEN request.
pub(crate) fn getgen(seq: u32) -> Vec<u8> {
    let mut msg = NetlinkMessage::new(
        NetlinkHeader::default(),
        NetlinkPayload::InnerMessage(NetfilterMessage::new(
            NetfilterHeader::new(NetfilterProtoFamily::Unspec, 0, 0),
            NfTablesMessage::GetGen(GenMessage { attributes: vec![] }),
        )),
    );
    msg.header.flags = NLM_F_REQUEST;
    msg.header.sequence_number = seq;
    msg.finalize();
    let mut buf = vec![0; msg.buffer_len()];
    msg.serialize(&mut buf);
    buf
}

fn attr_string(value: &[u8]) -> String {
    String::from_utf8_lossy(value.strip_suffix(&[0]).unwrap_or(value)).into_owned()
}

/// A set-element message decoded by hand: the crate's parser formats the whole payload into
/// an error context for every element it reads, which is quadratic in a message's size.
fn parse_elements(framed: &Framed<'_>, new: bool) -> Result<NetfilterMessage, String> {
    let family = *framed
        .bytes
        .get(16)
        .ok_or("a truncated set-element message")?;
    let mut list = Vec::new();
    for (kind, value) in attributes(framed.bytes.get(20..).unwrap_or_default()) {
        match kind {
            1 => list.push(SetElementList::Table(attr_string(value))),
            2 => list.push(SetElementList::Set(attr_string(value))),
            4 if value.len() >= 4 => list.push(SetElementList::SetId(u32::from_be_bytes(
                value[..4].try_into().expect("4 bytes"),
            ))),
            3 => {
                let mut elements = Vec::new();
                for (_, element) in attributes(value) {
                    let mut key = None;
                    let mut end = false;
                    for (kind, value) in attributes(element) {
                        match kind {
                            1 => {
                                key = attributes(value)
                                    .find(|(k, _)| *k == 1)
                                    .map(|(_, v)| v.to_vec())
                            }
                            3 if value.len() >= 4 => {
                                end = u32::from_be_bytes(value[..4].try_into().expect("4 bytes"))
                                    & 1
                                    != 0
                            }
                            _ => {}
                        }
                    }
                    if let Some(key) = key {
                        elements.push(self::element(key, end));
                    }
                }
                list.push(SetElementList::Elements(elements));
            }
            _ => {}
        }
    }
    let message = SetElementMessage { attributes: list };
    let inner = if new {
        NfTablesMessage::NewSetElement(message)
    } else {
        NfTablesMessage::DeleteSetElement(message)
    };
    Ok(NetfilterMessage::new(
        NetfilterHeader::new(NetfilterProtoFamily::from(family), 0, 0),
        inner,
    ))
}

/// A framed nf_tables message, parsed.
pub(crate) fn parse(framed: &Framed<'_>) -> Result<NetfilterMessage, String> {
    // NEWSETELEM and DELSETELEM of nf_tables.
    match framed.kind {
        0x0a0c => return parse_elements(framed, true),
        0x0a0e => return parse_elements(framed, false),
        _ => {}
    }
    let msg = NetlinkMessage::<NetfilterMessage>::deserialize(framed.bytes)
        .map_err(|e| format!("an nf_tables message that does not parse: {e}"))?;
    match msg.payload {
        NetlinkPayload::InnerMessage(inner) => Ok(inner),
        other => Err(format!(
            "an unexpected netlink message (type {})",
            other.message_type()
        )),
    }
}

/// The chain hooked by a base chain's attributes: `(type, hook, priority)`.
pub(crate) fn base_chain_of(attrs: &[ChainAttribute]) -> Option<(String, InetHookNumber, i32)> {
    let kind = attrs.iter().find_map(|a| match a {
        ChainAttribute::Type(t) => Some(t.clone()),
        _ => None,
    })?;
    let hook = attrs.iter().find_map(|a| match a {
        ChainAttribute::Hook(h) => Some(h),
        _ => None,
    })?;
    let number = hook.iter().find_map(|h| match h {
        Hook::Number(HookNumber::Inet(n)) => Some(*n),
        _ => None,
    })?;
    let priority = hook.iter().find_map(|h| match h {
        Hook::Priority(p) => Some(*p as i32),
        _ => None,
    })?;
    Some((kind, number, priority))
}

pub(crate) fn hook_name(hook: InetHookNumber) -> String {
    match hook {
        InetHookNumber::PreRouting => "prerouting".into(),
        InetHookNumber::LocalIn => "input".into(),
        InetHookNumber::Forward => "forward".into(),
        InetHookNumber::LocalOut => "output".into(),
        InetHookNumber::PostRouting => "postrouting".into(),
        InetHookNumber::Ingress => "ingress".into(),
        InetHookNumber::Other(n) => n.to_string(),
        other => format!("{other:?}").to_lowercase(),
    }
}

/// A decoded address key.
pub(crate) fn key_address(key: &[u8]) -> Option<IpAddr> {
    match key.len() {
        4 => Some(IpAddr::from(<[u8; 4]>::try_from(key).ok()?)),
        16 => Some(IpAddr::from(<[u8; 16]>::try_from(key).ok()?)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    /// The hand-encoded element messages are the crate's `SetElementMessage` byte for byte:
    /// both families, named and anonymous sets, adds and deletes, keys with and without the
    /// interval-end flag.
    #[test]
    fn hand_encoded_elements_equal_the_crates_encoding() {
        let cases = [
            (
                Family::V4,
                vec![
                    net("10.0.0.0/8"),
                    net("192.168.0.0/16"),
                    net("255.255.255.0/24"),
                ],
            ),
            (Family::V6, vec![net("fd00::/8"), net("fe80::/10")]),
        ];
        for (family, nets) in cases {
            for set in [
                SetRef {
                    name: "nomasq".into(),
                    id: None,
                },
                SetRef {
                    name: "__set%d".into(),
                    id: Some(3),
                },
            ] {
                for add in [true, false] {
                    let mut ours = Batch::new(7);
                    ours.elements(family, "ipmasq", &set, &Keys::Nets(nets.clone()), add);
                    let mut list = vec![
                        SetElementList::Table("ipmasq".into()),
                        SetElementList::Set(set.name.clone()),
                    ];
                    if let Some(id) = set.id {
                        list.push(SetElementList::SetId(id));
                    }
                    let elements = interval_elements(&nets)
                        .into_iter()
                        .map(|(key, end)| element(key, end))
                        .collect();
                    list.push(SetElementList::Elements(elements));
                    let message = SetElementMessage { attributes: list };
                    let mut theirs = Batch::new(7);
                    if add {
                        theirs.push(
                            family,
                            NLM_F_CREATE,
                            NfTablesMessage::NewSetElement(message),
                        );
                    } else {
                        theirs.push(family, 0, NfTablesMessage::DeleteSetElement(message));
                    }
                    assert_eq!(
                        ours.bytes, theirs.bytes,
                        "{family:?} {} add={add}",
                        set.name
                    );
                    assert_eq!(ours.messages, theirs.messages);
                    assert_eq!(ours.next_seq, theirs.next_seq);
                }
            }
        }
    }

    #[test]
    fn intervals_decode_back_into_their_nets() {
        let nets = vec![
            net("10.0.0.0/8"),
            net("11.0.0.0/8"),
            net("192.168.1.1/32"),
            net("255.0.0.0/8"),
        ];
        let (back, odd) = nets_of(interval_elements(&nets));
        assert_eq!(back, nets);
        assert!(odd.is_empty());
        // nft's leading end element at 0.0.0.0 is no range.
        let mut keys = interval_elements(&[net("10.0.0.0/8")]);
        keys.push((vec![0, 0, 0, 0], true));
        assert_eq!(nets_of(keys).0, vec![net("10.0.0.0/8")]);
        // A range that is no CIDR is reported as one.
        let keys = vec![(vec![10, 0, 0, 0], false), (vec![10, 0, 0, 3], true)];
        assert_eq!(nets_of(keys).1, vec!["10.0.0.0-10.0.0.2".to_string()]);
        let v6 = [net("fd00::/8"), net("::/0")];
        assert_eq!(nets_of(interval_elements(&v6[..1])).0, v6[..1].to_vec());
        assert_eq!(nets_of(interval_elements(&v6[1..])).0, v6[1..].to_vec());
        assert_eq!(
            nets_of(interval_elements(&[net("0.0.0.0/0")])).0,
            vec![net("0.0.0.0/0")]
        );
    }

    #[test]
    fn comments_are_udata_tlvs() {
        let udata = comment_udata("abc").unwrap();
        assert_eq!(udata, [0, 4, b'a', b'b', b'c', 0]);
        assert_eq!(comment_of(&udata).as_deref(), Some("abc"));
        assert_eq!(comment_of(&[1, 1, 9, 0, 2, b'x', 0]).as_deref(), Some("x"));
        assert!(comment_udata(&"x".repeat(300)).is_err());
        assert_eq!(comment_of(&[0, 9, 1]), None, "a length past the end");
    }

    #[test]
    fn element_messages_stay_below_the_attribute_limit() {
        let nets: Vec<IpNet> = (0..10_000u32)
            .map(|i| IpNet::new(IpAddr::from((0x0a00_0000 + i * 4).to_be_bytes()), 30).unwrap())
            .collect();
        let mut batch = Batch::new(1);
        let set = batch.add_set(Family::V4, "t", "s", TYPE_IPV4_ADDR, true);
        batch.elements(Family::V4, "t", &set, &Keys::Nets(nets.clone()), true);
        let done = batch.finish();
        let framed = frames(&done.bytes).unwrap();
        assert!(framed.len() > 3, "split into several messages");
        let mut keys = Vec::new();
        for f in &framed[2..framed.len() - 1] {
            assert!(f.bytes.len() < 65_000);
            let netfilter_packet = parse(f).unwrap();
            let netlink_packet_netfilter::NetfilterMessageInner::NfTables(
                NfTablesMessage::NewSetElement(m),
            ) = netfilter_packet.inner
            else {
                panic!("a set-element message");
            };
            keys.extend(element_keys(&m.attributes));
        }
        assert_eq!(nets_of(keys).0, nets);
        assert_eq!(done.first_seq, 2);
        assert_eq!(done.last_seq as usize, 1 + done.messages);
    }

    #[test]
    fn truncated_datagrams_do_not_frame() {
        let bytes = getgen(3);
        assert_eq!(frames(&bytes).unwrap().len(), 1);
        assert!(frames(&bytes[..bytes.len() - 1]).is_err());
        assert!(frames(&bytes[..10]).is_err());
    }
}
