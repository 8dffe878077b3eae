//! One netlink dump read to its end, message by message, within deadlines: the loop the
//! rtnetlink reader (links, addresses) and the conntrack reader share. A part that does not
//! come in time, a reply that does not frame, or an error the kernel sends ends the dump
//! with an error; nothing is kept here, so a dump of any size costs one receive buffer.

use super::framing::{self, NLMSG_DONE, NLMSG_ERROR, NLMSG_HDRLEN, NLM_F_DUMP_INTR};
use super::Socket;
use std::io;
use std::time::{Duration, Instant};

/// The largest datagram a dump sends: the kernel caps a dump's parts at 32 KiB.
const RECEIVE_BUFFER: usize = 64 * 1024;

/// How long a dump may wait for its next part, and for all of them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Deadlines {
    pub quiet: Duration,
    pub overall: Duration,
}

/// How a dump ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Every part arrived.
    Whole,
    /// A concurrent change interrupted it (the kernel flagged a part): what was seen may
    /// miss or repeat objects.
    Interrupted,
}

/// Sends `request` (a dump request with sequence number `seq`) and hands every answer's type
/// and payload (after the netlink header) to `each`, until the kernel says done. An error
/// from `each` ends the dump with it.
pub(crate) fn dump_each(
    socket: &Socket,
    request: &[u8],
    seq: u32,
    deadlines: Deadlines,
    mut each: impl FnMut(u16, &[u8]) -> io::Result<()>,
) -> io::Result<Ended> {
    socket.send(request)?;
    let started = Instant::now();
    let mut buffer = vec![0u8; RECEIVE_BUFFER];
    let mut interrupted = false;
    loop {
        let deadline = (Instant::now() + deadlines.quiet).min(started + deadlines.overall);
        let length = socket.receive_by(&mut buffer, libc::MSG_TRUNC, deadline)?;
        if length > buffer.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a dump part of {length} bytes, larger than any the kernel sends"),
            ));
        }
        let frames = framing::frames(&buffer[..length])
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        for framed in frames {
            if framed.seq != seq {
                continue;
            }
            interrupted |= framed.flags & NLM_F_DUMP_INTR != 0;
            match framed.kind {
                NLMSG_DONE => {
                    return Ok(if interrupted {
                        Ended::Interrupted
                    } else {
                        Ended::Whole
                    })
                }
                NLMSG_ERROR => framing::acknowledged(&framed)?,
                kind => each(kind, &framed.bytes[NLMSG_HDRLEN..])?,
            }
        }
    }
}
