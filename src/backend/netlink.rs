//! The one nfnetlink codec of the backends: message and attribute framing, the constants they
//! share, and request sockets whose every reply is awaited with a deadline (a kernel that does
//! not answer makes a pass fail with a timeout, never hang). Used by the generation id, the
//! set-element batches and the commit notifications.

use netlink_sys::{protocols::NETLINK_NETFILTER, Socket, SocketAddr};
use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;

/// nfnetlink subsystem of nf_tables.
pub(super) const NFNL_SUBSYS_NFTABLES: u16 = 10;
/// A commit's new generation: GETGEN's reply, and the last notification of every commit.
pub(super) const NFT_MSG_NEWGEN: u16 = 15;
pub(super) const NFT_MSG_GETGEN: u16 = 16;
pub(super) const NFTA_GEN_ID: u16 = 1;
pub(super) const NLM_F_REQUEST: u16 = 0x1;
pub(super) const NLM_F_ACK: u16 = 0x4;
pub(super) const NLM_F_CREATE: u16 = 0x400;
pub(super) const NLMSG_ERROR: u16 = 2;
pub(super) const NLA_F_NESTED: u16 = 0x8000;
pub(super) const NLMSG_HDRLEN: usize = 16;
pub(super) const NFGENMSG_LEN: usize = 4;
/// The longest a request waits for each reply.
pub(super) const REPLY_DEADLINE: Duration = Duration::from_secs(5);

/// The value of the first netlink attribute of type `wanted` in `attrs` (flags masked off);
/// None when there is none or the attributes do not frame.
pub(super) fn attribute(mut attrs: &[u8], wanted: u16) -> Option<&[u8]> {
    while attrs.len() >= 4 {
        let len = u16::from_ne_bytes([attrs[0], attrs[1]]) as usize;
        let kind = u16::from_ne_bytes([attrs[2], attrs[3]]) & 0x3fff;
        if len < 4 || len > attrs.len() {
            return None;
        }
        if kind == wanted {
            return Some(&attrs[4..len]);
        }
        attrs = attrs.get((len + 3) & !3..).unwrap_or_default();
    }
    None
}

/// Appends one netlink attribute, padded to 4 bytes.
pub(super) fn attr(buf: &mut Vec<u8>, kind: u16, payload: &[u8]) {
    let len = 4 + payload.len();
    buf.extend_from_slice(&(len as u16).to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(payload);
    buf.resize(buf.len() + (4 - len % 4) % 4, 0);
}

/// A nested attribute built by `fill`.
pub(super) fn nested(buf: &mut Vec<u8>, kind: u16, fill: impl FnOnce(&mut Vec<u8>)) {
    let mut inner = Vec::new();
    fill(&mut inner);
    attr(buf, kind | NLA_F_NESTED, &inner);
}

/// A NUL-terminated string attribute's payload.
pub(super) fn cstring(text: &str) -> Vec<u8> {
    let mut bytes = text.as_bytes().to_vec();
    bytes.push(0);
    bytes
}

/// One netlink message: header, nfgenmsg (`family`, version 0, `res_id`), attributes.
pub(super) fn message(
    kind: u16,
    flags: u16,
    seq: u32,
    (family, res_id): (u8, u16),
    attrs: &[u8],
) -> Vec<u8> {
    let len = NLMSG_HDRLEN + NFGENMSG_LEN + attrs.len();
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

/// The messages of a reply: `(type, whole message)` each, until the framing ends.
pub(super) fn messages(mut data: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if data.len() < NLMSG_HDRLEN {
            return None;
        }
        let len = u32::from_ne_bytes(data[0..4].try_into().expect("4 bytes")) as usize;
        let kind = u16::from_ne_bytes(data[4..6].try_into().expect("2 bytes"));
        if len < NLMSG_HDRLEN || len > data.len() {
            return None;
        }
        let msg = &data[..len];
        data = data.get((len + 3) & !3..).unwrap_or_default();
        Some((kind, msg))
    })
}

/// The errno of an NLMSG_ERROR message (0 for an acknowledgement).
pub(super) fn error_code(msg: &[u8]) -> Option<i32> {
    msg.get(NLMSG_HDRLEN..NLMSG_HDRLEN + 4)
        .map(|b| i32::from_ne_bytes(b.try_into().expect("4 bytes")))
}

/// Sets a `SOL_SOCKET` option of `socket` to `value`.
pub(super) fn set_option<T>(socket: &Socket, option: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: setsockopt reads `size_of::<T>()` bytes of `value`; the fd is the socket's own.
    let set = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if set == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A request socket to nf_tables whose receives give up after [`REPLY_DEADLINE`].
pub(super) struct Requester {
    socket: Socket,
}

impl Requester {
    pub fn open() -> io::Result<Self> {
        let mut socket = Socket::new(NETLINK_NETFILTER)?;
        socket.bind_auto()?;
        socket.connect(&SocketAddr::new(0, 0))?;
        let timeout = libc::timeval {
            // A few seconds fit every libc's time_t (musl's included).
            tv_sec: REPLY_DEADLINE.as_secs().try_into().unwrap_or(5),
            tv_usec: 0,
        };
        set_option(&socket, libc::SO_RCVTIMEO, &timeout)?;
        Ok(Requester { socket })
    }

    pub fn send(&self, buf: &[u8]) -> io::Result<()> {
        self.socket.send(buf, 0).map(|_| ())
    }

    /// The next reply datagram; a timeout when the kernel has not answered in time.
    pub fn receive(&self) -> io::Result<Vec<u8>> {
        match self.socket.recv_from_full() {
            Ok((reply, _)) => Ok(reply),
            Err(err)
                if matches!(
                    err.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "nf_tables did not answer within {}s",
                        REPLY_DEADLINE.as_secs()
                    ),
                ))
            }
            Err(err) => Err(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_frame_and_pad() {
        let mut buf = Vec::new();
        attr(&mut buf, 1, b"abc");
        nested(&mut buf, 2, |inner| attr(inner, 3, &7u32.to_be_bytes()));
        // 4 + 3 padded to 8; the nest: 4 + (4 + 4).
        assert_eq!(buf.len(), 8 + 12);
        assert_eq!(attribute(&buf, 1), Some(&b"abc"[..]));
        let inner = attribute(&buf, 2).expect("the nested attribute");
        assert_eq!(attribute(inner, 3), Some(&7u32.to_be_bytes()[..]));
        assert_eq!(attribute(&buf, 9), None);
        assert_eq!(attribute(&[8, 0, 1, 0], 1), None, "a length past the end");
    }

    /// An NLMSG_ERROR as the kernel sends it: header, errno, the request's header.
    fn error_message(seq: u32, code: i32) -> Vec<u8> {
        let len = (NLMSG_HDRLEN + 4 + NLMSG_HDRLEN) as u32;
        let mut msg = Vec::new();
        msg.extend_from_slice(&len.to_ne_bytes());
        msg.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        msg.extend_from_slice(&0u16.to_ne_bytes());
        msg.extend_from_slice(&seq.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        msg.extend_from_slice(&code.to_ne_bytes());
        msg.extend_from_slice(&[0; NLMSG_HDRLEN]);
        msg
    }

    #[test]
    fn messages_walk_a_reply_and_read_errors() {
        let mut reply = error_message(1, 0);
        reply.extend(error_message(2, -libc::ENOENT));
        reply.extend_from_slice(&[1, 2, 3]);
        let found: Vec<(u16, Option<i32>)> = messages(&reply)
            .map(|(kind, msg)| (kind, error_code(msg)))
            .collect();
        assert_eq!(
            found,
            [(NLMSG_ERROR, Some(0)), (NLMSG_ERROR, Some(-libc::ENOENT))],
            "a trailing fragment is not a message"
        );
    }
}
