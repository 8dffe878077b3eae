//! nf_tables over netlink, the one place the backends speak it: transactions (one batch,
//! every message acknowledged), readings (dumps), and the ruleset generation id, all in
//! netlink-packet-netfilter's typed messages. Every reply is awaited with a deadline; an error
//! names the object the kernel refused, in nft's words, and the kernel's errno text.

#[cfg(test)]
pub(crate) mod fake_kernel;
pub(crate) mod foreign;
mod limits;
pub(crate) mod notify;
pub(crate) mod read;
pub(crate) mod script;
pub(crate) mod statement;
pub(crate) mod wire;

use crate::netlink::framing::{NLMSG_DONE, NLMSG_ERROR, NLM_F_DUMP_INTR};
pub(crate) use crate::netlink::sequence;
use crate::netlink::{Socket, NETLINK_NETFILTER};
use netlink_packet_netfilter::nftables::{GenAttribute, NfTablesMessage};
use netlink_packet_netfilter::{NetfilterMessageInner, NetfilterProtoFamily};
use std::io;
use std::time::{Duration, Instant};
use wire::Finished;

/// The longest a request waits for all of its replies.
pub(crate) const REPLY_DEADLINE: Duration = Duration::from_secs(5);
/// How often a dump that a concurrent commit interrupted is started again.
const DUMP_ATTEMPTS: usize = 5;

/// What carries requests to nf_tables and replies back: the kernel's netlink socket, or in
/// tests a socket that answers as they choose (or never).
pub(crate) trait Transport {
    fn send(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// The next datagram; `TimedOut` once `deadline` has passed.
    fn receive(&mut self, deadline: Instant) -> io::Result<Vec<u8>>;
    /// The socket a table this transport writes with the owner flag is held by; None when it
    /// cannot hold one (a test's socket).
    fn socket(&self) -> Option<SocketId> {
        None
    }
}

/// One opening of a netlink socket: its port (what nf_tables records as a table's owner) and
/// which opening of the process's socket it is. A port alone does not tell a socket opened
/// anew: the kernel hands out a freed port again (the process id first), while the table the
/// old socket held was orphaned when it closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SocketId {
    pub port: u32,
    pub opening: u64,
}

/// How many request sockets this process has opened (each a new [`SocketId::opening`]).
static OPENINGS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Why a request failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The kernel answered with an errno for the named object.
    Refused { what: String, errno: i32 },
    /// No (complete) answer in time, a broken reply, or the socket failed.
    Transport(String),
}

impl Failure {
    pub fn errno(&self) -> Option<i32> {
        match self {
            Failure::Refused { errno, .. } => Some(*errno),
            Failure::Transport(_) => None,
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Refused { what, errno } => write!(
                f,
                "nf_tables refused `{what}`: {}",
                io::Error::from_raw_os_error(*errno)
            ),
            Failure::Transport(detail) => write!(f, "nf_tables over netlink: {detail}"),
        }
    }
}

fn transport_failure(err: io::Error) -> Failure {
    if err.kind() == io::ErrorKind::TimedOut || err.kind() == io::ErrorKind::WouldBlock {
        Failure::Transport("no complete answer before the deadline".into())
    } else {
        Failure::Transport(err.to_string())
    }
}

/// The kernel's nfnetlink socket.
pub(crate) struct Kernel {
    socket: Socket,
    id: Option<SocketId>,
    send_buffer: usize,
    receive_buffer: Vec<u8>,
}

impl Kernel {
    pub fn open() -> io::Result<Self> {
        let socket = Socket::request(NETLINK_NETFILTER)?;
        // Room for the acknowledgements of a large batch (each error echoes its message).
        socket.grow_receive_buffer(4 << 20);
        let opening = OPENINGS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let id = socket.port().ok().map(|port| SocketId { port, opening });
        Ok(Kernel {
            socket,
            id,
            send_buffer: 0,
            receive_buffer: vec![0; RECEIVE_BUFFER],
        })
    }
}

impl Transport for Kernel {
    fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        // One datagram must fit the send buffer: grow it for a large batch (nft does too).
        if bytes.len() + 4096 > self.send_buffer && bytes.len() > 64 * 1024 {
            let size = libc::c_int::try_from(bytes.len() + 65536).unwrap_or(libc::c_int::MAX);
            if self.socket.set_option(libc::SO_SNDBUFFORCE, &size).is_err() {
                self.socket.set_option(libc::SO_SNDBUF, &size)?;
            }
            self.send_buffer = bytes.len() + 65536;
        }
        self.socket.send(bytes)
    }

    fn receive(&mut self, deadline: Instant) -> io::Result<Vec<u8>> {
        self.socket.time_out_receives_at(deadline)?;
        // A peek with the whole buffer first: the kernel sizes a dump's next part by the
        // largest buffer its reader offered (up to 32 KiB). Reading each datagram with a
        // buffer of exactly its size kept the parts at one page, and nf_tables walks a set
        // from its start again for every part: 1.7 s of kernel time for a 100,000-CIDR set.
        let length = self
            .socket
            .receive_into(&mut self.receive_buffer, libc::MSG_PEEK | libc::MSG_TRUNC)?;
        if length > self.receive_buffer.len() {
            self.receive_buffer.resize(length, 0);
        }
        let length = self.socket.receive_into(&mut self.receive_buffer, 0)?;
        Ok(self.receive_buffer[..length.min(self.receive_buffer.len())].to_vec())
    }

    fn socket(&self) -> Option<SocketId> {
        self.id
    }
}

/// The buffer every datagram is received into (see [`Kernel::receive`]).
const RECEIVE_BUFFER: usize = 64 * 1024;

/// The process's one request socket to nf_tables, kept open: closing a netlink socket right
/// after a commit waits for the kernel to free what the commit replaced (an RCU grace period,
/// measured in docs/benchmarks.md), which would fall inside every pass.
static SHARED: std::sync::Mutex<Option<Kernel>> = std::sync::Mutex::new(None);

/// Runs `request` over the shared socket (opened at first use). A transport failure drops the
/// socket, so no late reply can meet the next request.
pub(crate) fn with_kernel<T>(
    request: impl FnOnce(&mut dyn Transport) -> Result<T, Failure>,
) -> Result<T, Failure> {
    let mut slot = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    if slot.is_none() {
        let opened = Kernel::open().map_err(|err| match err.raw_os_error() {
            Some(errno) => Failure::Refused {
                what: "open a netlink socket".into(),
                errno,
            },
            None => Failure::Transport(err.to_string()),
        })?;
        *slot = Some(opened);
    }
    let kernel = slot.as_mut().expect("opened above");
    let outcome = request(kernel);
    if matches!(outcome, Err(Failure::Transport(_))) {
        *slot = None;
    }
    outcome
}

/// Sends a finished batch and waits, until `within` has passed, for every message's
/// acknowledgement. The first refusal (named by its message, in nft syntax) fails it: the
/// kernel then applied nothing.
pub(crate) fn commit_within(
    transport: &mut dyn Transport,
    batch: &Finished,
    within: Duration,
) -> Result<(), Failure> {
    if batch.messages == 0 {
        return Ok(());
    }
    let deadline = Instant::now() + within;
    transport.send(&batch.bytes).map_err(transport_failure)?;
    let mut waiting = batch.messages;
    let mut refused: Option<(u32, i32)> = None;
    while waiting > 0 {
        let datagram = transport.receive(deadline).map_err(transport_failure)?;
        for framed in wire::frames(&datagram).map_err(Failure::Transport)? {
            if framed.kind != NLMSG_ERROR {
                continue;
            }
            let code = wire::error_code(&framed)
                .ok_or_else(|| Failure::Transport("a truncated acknowledgement".into()))?;
            let in_batch = (batch.first_seq..=batch.last_seq).contains(&framed.seq);
            let whole_batch = framed.seq == batch.first_seq.wrapping_sub(1);
            if !in_batch && !whole_batch {
                // Not an answer to this batch.
                continue;
            }
            if code != 0 && refused.is_none() {
                refused = Some((framed.seq, -code));
            }
            if whole_batch {
                // An error for the batch as a whole (its begin): no other answer follows.
                waiting = 0;
                break;
            }
            // An error for one message comes with no separate acknowledgement of it.
            waiting = waiting.saturating_sub(1);
        }
    }
    match refused {
        None => Ok(()),
        Some((seq, errno)) => Err(Failure::Refused {
            what: script::describe(&batch.bytes, seq),
            errno,
        }),
    }
}

/// The messages a request answers with (a dump's until its end, a get's one message), parsed;
/// an errno answer is `Refused` naming `what`. A dump a concurrent commit interrupted is
/// started again.
pub(crate) fn query(
    transport: &mut dyn Transport,
    family: NetfilterProtoFamily,
    message: NfTablesMessage,
    dump: bool,
    what: &str,
) -> Result<Vec<(NetfilterProtoFamily, NfTablesMessage)>, Failure> {
    for _ in 0..DUMP_ATTEMPTS {
        let seq = sequence(1);
        transport
            .send(&wire::request(family, message.clone(), dump, seq))
            .map_err(transport_failure)?;
        match answers(transport, Awaited { seq, dump, what }, DUMP_PATIENCE)? {
            Some(found) => return Ok(found),
            None => continue,
        }
    }
    Err(Failure::Transport(format!(
        "{what}: every dump was interrupted by a concurrent commit"
    )))
}

/// How long the answer to a request may take: at most `quiet` without a part of it (a dump's
/// parts come one per read; a large set's dump takes longer than one reply deadline on a busy
/// node, but it never stalls), and at most `overall` in all.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Patience {
    pub quiet: Duration,
    pub overall: Duration,
}

/// A dump's patience: [`REPLY_DEADLINE`] between parts, a minute in all.
pub(crate) const DUMP_PATIENCE: Patience = Patience {
    quiet: REPLY_DEADLINE,
    overall: Duration::from_secs(60),
};

impl Patience {
    fn next_deadline(&self, started: Instant) -> Instant {
        (Instant::now() + self.quiet).min(started + self.overall)
    }
}

/// The request whose answers are awaited: its sequence number, whether it is a dump, and what
/// it asks for (in errors).
#[derive(Clone, Copy, Debug)]
struct Awaited<'a> {
    seq: u32,
    dump: bool,
    what: &'a str,
}

/// The answers to the awaited request; None when a dump was interrupted.
fn answers(
    transport: &mut dyn Transport,
    awaited: Awaited<'_>,
    patience: Patience,
) -> Result<Option<Vec<(NetfilterProtoFamily, NfTablesMessage)>>, Failure> {
    let Awaited { seq, dump, what } = awaited;
    let started = Instant::now();
    let mut deadline = patience.next_deadline(started);
    let mut found = Vec::new();
    let mut interrupted = false;
    loop {
        let datagram = transport.receive(deadline).map_err(transport_failure)?;
        for framed in wire::frames(&datagram).map_err(Failure::Transport)? {
            if framed.seq != seq {
                continue;
            }
            deadline = patience.next_deadline(started);
            interrupted |= framed.flags & NLM_F_DUMP_INTR != 0;
            match framed.kind {
                NLMSG_DONE => return Ok((!interrupted).then_some(found)),
                NLMSG_ERROR => {
                    let code = wire::error_code(&framed).unwrap_or(-libc::EPROTO);
                    if code != 0 {
                        return Err(Failure::Refused {
                            what: what.to_string(),
                            errno: -code,
                        });
                    }
                    if !dump {
                        return Ok(Some(found));
                    }
                }
                _ => {
                    let message = wire::parse(&framed).map_err(Failure::Transport)?;
                    if let NetfilterMessageInner::NfTables(m) = message.inner {
                        found.push((message.header.family, m));
                    }
                }
            }
        }
    }
}

/// The current ruleset generation id of this network namespace: one request, one reply.
pub(crate) fn generation() -> Result<u32, Failure> {
    with_kernel(generation_over)
}

pub(crate) fn generation_over(transport: &mut dyn Transport) -> Result<u32, Failure> {
    let seq = sequence(1);
    transport
        .send(&wire::getgen(seq))
        .map_err(transport_failure)?;
    let deadline = Instant::now() + REPLY_DEADLINE;
    loop {
        let datagram = transport.receive(deadline).map_err(transport_failure)?;
        for framed in wire::frames(&datagram).map_err(Failure::Transport)? {
            if framed.seq != seq {
                continue;
            }
            if framed.kind == NLMSG_ERROR {
                let code = wire::error_code(&framed).unwrap_or(-libc::EPROTO);
                return Err(Failure::Refused {
                    what: "the ruleset generation".into(),
                    errno: -code,
                });
            }
            let message = wire::parse(&framed).map_err(Failure::Transport)?;
            if let NetfilterMessageInner::NfTables(NfTablesMessage::NewGen(gen)) = message.inner {
                return gen
                    .attributes
                    .iter()
                    .find_map(|a| match a {
                        GenAttribute::Id(id) => Some(*id),
                        _ => None,
                    })
                    .ok_or_else(|| Failure::Transport("a generation reply without its id".into()));
            }
        }
    }
}

#[cfg(test)]
mod tests;
