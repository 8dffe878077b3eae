//! Netlink framing, the one place it is spelled: the messages of a datagram, the attributes
//! of a payload (each padded to four bytes), and the padding a hand-written attribute needs.

use std::fmt;

/// The netlink header every message starts with.
pub(crate) const NLMSG_HDRLEN: usize = 16;
/// An attribute's type without its nested and byte-order flags.
pub(crate) const NLA_TYPE_MASK: u16 = 0x3fff;

/// `len` rounded up to netlink's four-byte alignment.
pub(crate) const fn align(len: usize) -> usize {
    (len + 3) & !3
}

/// Pads `buf` with zeros to netlink's four-byte alignment.
pub(crate) fn pad(buf: &mut Vec<u8>) {
    buf.resize(align(buf.len()), 0);
}

/// Where the framing of a datagram broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Broken {
    /// Fewer bytes left than a netlink header.
    Short { left: usize },
    /// A header whose length is below a header's or beyond what arrived.
    Length { says: usize, left: usize },
}

impl fmt::Display for Broken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Broken::Short { left } => write!(f, "a truncated netlink message ({left} bytes)"),
            Broken::Length { says, left } => write!(
                f,
                "a truncated netlink message (says {says} bytes, {left} arrived)"
            ),
        }
    }
}

/// The messages of a datagram, each whole (header included); after a break, its `Err` and
/// nothing more.
pub(crate) fn messages(mut data: &[u8]) -> impl Iterator<Item = Result<&[u8], Broken>> {
    std::iter::from_fn(move || {
        if data.is_empty() {
            return None;
        }
        if data.len() < NLMSG_HDRLEN {
            let left = data.len();
            data = &[];
            return Some(Err(Broken::Short { left }));
        }
        let len = u32::from_ne_bytes(data[0..4].try_into().expect("4 bytes")) as usize;
        if len < NLMSG_HDRLEN || len > data.len() {
            let left = data.len();
            data = &[];
            return Some(Err(Broken::Length { says: len, left }));
        }
        let message = &data[..len];
        data = data.get(align(len)..).unwrap_or_default();
        Some(Ok(message))
    })
}

/// One framed message of a datagram: its header fields and whole bytes.
pub(crate) struct Framed<'a> {
    pub kind: u16,
    pub flags: u16,
    pub seq: u32,
    pub bytes: &'a [u8],
}

/// The messages of a datagram; Err when the framing breaks (a truncated reply).
pub(crate) fn frames(data: &[u8]) -> Result<Vec<Framed<'_>>, String> {
    let mut out = Vec::new();
    for message in messages(data) {
        let bytes = message.map_err(|broken| broken.to_string())?;
        out.push(Framed {
            kind: u16::from_ne_bytes(bytes[4..6].try_into().expect("2 bytes")),
            flags: u16::from_ne_bytes(bytes[6..8].try_into().expect("2 bytes")),
            seq: u32::from_ne_bytes(bytes[8..12].try_into().expect("4 bytes")),
            bytes,
        });
    }
    Ok(out)
}

/// The errno an NLMSG_ERROR carries (0: an acknowledgement).
pub(crate) fn error_code(framed: &Framed<'_>) -> Option<i32> {
    framed
        .bytes
        .get(16..20)
        .map(|b| i32::from_ne_bytes(b.try_into().expect("4 bytes")))
}

/// The attributes of a payload with each one's whole bytes (header and value, unpadded):
/// `(type without flags, value, whole)`; the walk ends at the first that does not frame.
pub(crate) fn attributes_whole(mut data: &[u8]) -> impl Iterator<Item = (u16, &[u8], &[u8])> {
    std::iter::from_fn(move || {
        if data.len() < 4 {
            return None;
        }
        let len = usize::from(u16::from_ne_bytes([data[0], data[1]]));
        let kind = u16::from_ne_bytes([data[2], data[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > data.len() {
            return None;
        }
        let whole = &data[..len];
        data = data.get(align(len)..).unwrap_or_default();
        Some((kind, &whole[4..], whole))
    })
}

/// The attributes of a netlink attribute payload: `(type without flags, value)` each.
pub(crate) fn attributes(data: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    attributes_whole(data).map(|(kind, value, _)| (kind, value))
}

/// The value of the first attribute of type `wanted` in `data`.
pub(crate) fn attribute(data: &[u8], wanted: u16) -> Option<&[u8]> {
    attributes(data).find_map(|(kind, value)| (kind == wanted).then_some(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(kind: u16, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&((NLMSG_HDRLEN + payload.len()) as u32).to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(&[0; 10]);
        out.extend_from_slice(payload);
        pad(&mut out);
        out
    }

    #[test]
    fn a_datagram_splits_into_its_messages_and_stops_at_a_break() {
        let mut datagram = message(20, &[1, 2, 3]);
        datagram.extend(message(3, &[]));
        let kinds: Vec<u16> = frames(&datagram).unwrap().iter().map(|f| f.kind).collect();
        assert_eq!(kinds, [20, 3]);
        let short = [datagram.clone(), vec![0; 5]].concat();
        assert_eq!(
            frames(&short).err().as_deref(),
            Some("a truncated netlink message (5 bytes)")
        );
        let mut lying = message(20, &[]);
        lying[0] = 200;
        assert_eq!(
            messages(&lying).collect::<Vec<_>>(),
            [Err(Broken::Length {
                says: 200,
                left: 16
            })]
        );
    }

    #[test]
    fn attributes_are_walked_with_their_flags_masked_and_stop_at_a_break() {
        let mut data = Vec::new();
        for (kind, value) in [(1u16 | 0x8000, &b"abc"[..]), (2, &[9, 9, 9, 9][..])] {
            data.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
            data.extend_from_slice(&kind.to_ne_bytes());
            data.extend_from_slice(value);
            pad(&mut data);
        }
        let walked: Vec<(u16, &[u8])> = attributes(&data).collect();
        assert_eq!(walked, [(1, &b"abc"[..]), (2, &[9, 9, 9, 9][..])]);
        assert_eq!(attributes_whole(&data).next().unwrap().2.len(), 7);
        assert_eq!(attribute(&data, 2), Some(&[9, 9, 9, 9][..]));
        assert_eq!(attributes(&data[..10]).count(), 1, "the second is cut");
    }
}
