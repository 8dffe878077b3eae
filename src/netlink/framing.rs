//! Netlink framing, the one place it is spelled: a request's header, attributes and length
//! written; the messages of a datagram and the attributes of a payload (each padded to four
//! bytes) read.

use std::fmt;

/// The netlink header every message starts with.
pub(crate) const NLMSG_HDRLEN: usize = 16;
/// Message types every protocol shares: an error (errno 0: an acknowledgement), a dump's end.
pub(crate) const NLMSG_ERROR: u16 = 2;
pub(crate) const NLMSG_DONE: u16 = 3;
/// Header flags: a request, one that wants an acknowledgement, a dump (root and match).
pub(crate) const NLM_F_REQUEST: u16 = 1;
pub(crate) const NLM_F_ACK: u16 = 4;
pub(crate) const NLM_F_DUMP: u16 = 0x300;
/// The flag of a dump's part that a concurrent change interrupted the dump.
pub(crate) const NLM_F_DUMP_INTR: u16 = 0x10;
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

/// The start of a request of type `kind`: its netlink header with `NLM_F_REQUEST | flags`
/// and sequence number `seq`, its length left to [`finish`], in a buffer of `capacity`.
pub(crate) fn request(kind: u16, flags: u16, seq: u32, capacity: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(capacity.max(NLMSG_HDRLEN));
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(&(NLM_F_REQUEST | flags).to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out
}

/// Writes a message's length into its header.
pub(crate) fn finish(message: &mut [u8]) {
    let len = message.len() as u32;
    message[..4].copy_from_slice(&len.to_ne_bytes());
}

/// Appends attribute `kind` holding `value`, padded to four bytes.
pub(crate) fn put_attribute(buf: &mut Vec<u8>, kind: u16, value: &[u8]) {
    buf.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(value);
    pad(buf);
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

/// An NLMSG_ERROR as a result: Ok for an acknowledgement (errno 0), else the errno (EPROTO
/// when the message is too short to carry one).
pub(crate) fn acknowledged(framed: &Framed<'_>) -> std::io::Result<()> {
    match error_code(framed).unwrap_or(-libc::EPROTO) {
        0 => Ok(()),
        code => Err(std::io::Error::from_raw_os_error(-code)),
    }
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
    fn a_request_is_its_header_its_body_and_padded_attributes() {
        let mut request = super::request(22, NLM_F_DUMP, 7, 0);
        request.extend_from_slice(&[2, 0, 0, 0]);
        put_attribute(&mut request, 1, &[10, 0, 0, 1, 9]);
        finish(&mut request);
        let mut expected = Vec::new();
        expected.extend_from_slice(&32u32.to_ne_bytes());
        expected.extend_from_slice(&22u16.to_ne_bytes());
        expected.extend_from_slice(&0x301u16.to_ne_bytes());
        expected.extend_from_slice(&7u32.to_ne_bytes());
        expected.extend_from_slice(&[0, 0, 0, 0, 2, 0, 0, 0]);
        expected.extend_from_slice(&9u16.to_ne_bytes());
        expected.extend_from_slice(&1u16.to_ne_bytes());
        expected.extend_from_slice(&[10, 0, 0, 1, 9, 0, 0, 0]);
        assert_eq!(request, expected);
        let framed = frames(&request).unwrap();
        assert_eq!((framed[0].kind, framed[0].seq), (22, 7));
        assert_eq!(
            attribute(&framed[0].bytes[20..], 1),
            Some(&[10, 0, 0, 1, 9][..])
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
