//! The ground floor: every netlink socket the program opens, below the backends and the
//! node's readers. One socket type for every protocol (nf_tables, ctnetlink, rtnetlink):
//! requests bound to the kernel, multicast subscriptions, receive buffers (and the ENOBUFS a
//! full one means), a deadline on every receive, and one sequence counter; [`dump`] reads a
//! dump to its end, [`framing`] frames messages and walks attributes. One module per protocol
//! above them: [`nf_tables`], [`conntrack`] (ctnetlink), [`route`] (rtnetlink), and [`xtables`] (x_tables' socket
//! options, not netlink). Every `unsafe` of the program is in this folder (the crate denies it
//! elsewhere), with [`register`], the one readiness registration with tokio, and [`image`],
//! the program's own read-only pages given back after the first sync.

pub(crate) mod conntrack;
pub(crate) mod conntrack_stats;
pub(crate) mod dump;
pub(crate) mod framing;
pub(crate) mod image;
pub(crate) mod nf_tables;
pub(crate) mod nflog;
pub(crate) mod route;
pub(crate) mod xtables;

pub(crate) use netlink_sys::protocols::{NETLINK_NETFILTER, NETLINK_ROUTE};
use netlink_sys::SocketAddr;
use std::io;
use std::ops::ControlFlow;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

static SEQUENCE: AtomicU32 = AtomicU32::new(1);

/// A fresh run of `n` sequence numbers, unique in the process across protocols.
pub(crate) fn sequence(n: u32) -> u32 {
    SEQUENCE.fetch_add(n.max(1), Ordering::Relaxed)
}

/// The sequence numbers of one request's messages: `count` of them from `first` (wrapping).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sequences {
    pub first: u32,
    pub count: u32,
}

impl Sequences {
    /// Whether `seq` is one of them.
    fn holds(self, seq: u32) -> bool {
        seq.wrapping_sub(self.first) < self.count
    }
}

/// What a subscriber finds queued.
pub(crate) enum Queued<'a> {
    /// One datagram of notifications.
    Datagram(&'a [u8]),
    /// The kernel dropped notifications that did not fit the receive buffer.
    Lost,
}

/// A netlink socket of one protocol.
pub(crate) struct Socket {
    socket: netlink_sys::Socket,
}

impl Socket {
    /// A socket for requests to the kernel: bound to an address the kernel picks, connected
    /// to the kernel.
    pub fn request(protocol: isize) -> io::Result<Socket> {
        let mut socket = netlink_sys::Socket::new(protocol)?;
        socket.bind_auto()?;
        socket.connect(&SocketAddr::new(0, 0))?;
        Ok(Socket { socket })
    }

    /// A non-blocking socket in the multicast group numbered `group`, whose receive buffer is
    /// `receive_buffer` (root may exceed `rmem_max`; otherwise the ordinary limit applies).
    pub fn member_of(protocol: isize, group: u32, receive_buffer: usize) -> io::Result<Socket> {
        let mut socket = Socket {
            socket: netlink_sys::Socket::new(protocol)?,
        };
        socket.socket.bind_auto()?;
        let size = receive_buffer as libc::c_int;
        if socket.set_option(libc::SO_RCVBUFFORCE, &size).is_err() {
            socket.socket.set_rx_buf_sz(receive_buffer)?;
        }
        socket.socket.add_membership(group)?;
        socket.socket.set_non_blocking(true)?;
        Ok(socket)
    }

    /// Makes receives return at once when nothing is queued (for [`Socket::drain`]).
    pub fn set_non_blocking(&self) -> io::Result<()> {
        self.socket.set_non_blocking(true)
    }

    /// Joins one more multicast group of the socket's protocol.
    pub fn join(&mut self, group: u32) -> io::Result<()> {
        self.socket.add_membership(group)
    }

    /// A non-blocking socket bound to the legacy multicast groups of bit mask `groups`.
    pub fn bound_to_groups(protocol: isize, groups: u32) -> io::Result<Socket> {
        let mut socket = netlink_sys::Socket::new(protocol)?;
        socket.bind(&SocketAddr::new(0, groups))?;
        socket.set_non_blocking(true)?;
        Ok(Socket { socket })
    }

    /// Sets a `SOL_SOCKET` option of the socket to `value`.
    pub fn set_option<T>(&self, option: libc::c_int, value: &T) -> io::Result<()> {
        // SAFETY: setsockopt reads `size_of::<T>()` bytes of `value`; the fd is the socket's own.
        let set = unsafe {
            libc::setsockopt(
                self.socket.as_raw_fd(),
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

    /// Attaches a classic BPF program the kernel runs on every datagram before queueing it
    /// (`SO_ATTACH_FILTER`): one it returns 0 for is dropped, unread and uncounted.
    pub fn attach_filter(&self, program: &[libc::sock_filter]) -> io::Result<()> {
        let length = u16::try_from(program.len())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let program = libc::sock_fprog {
            len: length,
            // The kernel copies the program during the call and never writes to it.
            filter: program.as_ptr().cast_mut(),
        };
        self.set_option(libc::SO_ATTACH_FILTER, &program)
    }

    /// Asks for a receive buffer of `size` bytes: beyond `rmem_max` when allowed (root),
    /// else up to it; a refusal of both leaves the buffer as it was.
    pub fn grow_receive_buffer(&self, size: libc::c_int) {
        if self.set_option(libc::SO_RCVBUFFORCE, &size).is_err() {
            let _ = self.set_option(libc::SO_RCVBUF, &size);
        }
    }

    /// The socket's netlink port id, as the kernel bound it (what nf_tables records as the
    /// owner of a table this socket holds).
    pub fn port(&self) -> io::Result<u32> {
        let mut address = SocketAddr::new(0, 0);
        self.socket.get_address(&mut address)?;
        Ok(address.port_number())
    }

    /// Sends one datagram.
    pub fn send(&self, bytes: &[u8]) -> io::Result<()> {
        self.socket.send(bytes, 0).map(|_| ())
    }

    /// Makes the socket's next receives give up at `deadline` (`TimedOut` once it has passed).
    pub fn time_out_receives_at(&self, deadline: Instant) -> io::Result<()> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        let timeout = libc::timeval {
            tv_sec: left.as_secs().try_into().unwrap_or(5),
            tv_usec: left.subsec_micros().max(1).into(),
        };
        self.set_option(libc::SO_RCVTIMEO, &timeout)
    }

    /// One `recv` into `buffer` with `flags`; a timeout is `TimedOut`. With `MSG_TRUNC`, the
    /// datagram's whole length even when it exceeds the buffer.
    pub fn receive_into(&self, mut buffer: &mut [u8], flags: libc::c_int) -> io::Result<usize> {
        self.socket.recv(&mut buffer, flags).map_err(|err| {
            if err.kind() == io::ErrorKind::WouldBlock {
                io::ErrorKind::TimedOut.into()
            } else {
                err
            }
        })
    }

    /// One `recv` into `buffer` with `flags`, given up at `deadline` (`TimedOut`).
    pub fn receive_by(
        &self,
        buffer: &mut [u8],
        flags: libc::c_int,
        deadline: Instant,
    ) -> io::Result<usize> {
        self.time_out_receives_at(deadline)?;
        self.receive_into(buffer, flags)
    }

    /// Receives into `buffer` until `each` is done, by `deadline`: every message whose
    /// sequence number is one of `sequences` goes to `each`, in order (others are not answers
    /// to this request); a datagram that does not frame is `InvalidData`.
    pub fn answers<T>(
        &self,
        sequences: Sequences,
        deadline: Instant,
        buffer: &mut [u8],
        mut each: impl FnMut(&framing::Framed<'_>) -> ControlFlow<io::Result<T>>,
    ) -> io::Result<T> {
        loop {
            let length = self.receive_by(buffer, 0, deadline)?;
            let frames = framing::frames(&buffer[..length.min(buffer.len())])
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            for framed in frames.iter().filter(|f| sequences.holds(f.seq)) {
                if let ControlFlow::Break(done) = each(framed) {
                    return done;
                }
            }
        }
    }

    /// Reads every datagram queued on a non-blocking socket, without waiting: each goes to
    /// `each` as [`Queued::Datagram`], and a loss the kernel reports (ENOBUFS: the receive
    /// buffer overflowed and notifications were dropped) as [`Queued::Lost`]. Ends when the
    /// queue is empty; another error ends it with that error.
    pub fn drain(&self, buffer: &mut [u8], each: impl FnMut(Queued<'_>)) -> io::Result<()> {
        self.drain_by(buffer, None, each)
    }

    /// [`Socket::drain`], given up at `deadline` when one is given (what is still queued then
    /// stays queued): a drain that cannot outlast a stop however fast datagrams arrive.
    pub fn drain_by(
        &self,
        buffer: &mut [u8],
        deadline: Option<Instant>,
        mut each: impl FnMut(Queued<'_>),
    ) -> io::Result<()> {
        loop {
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                return Ok(());
            }
            // `recv` advances the slice it fills: hand it a fresh one each time.
            let mut free = &mut buffer[..];
            match self.socket.recv(&mut free, 0) {
                Ok(n) => each(Queued::Datagram(&buffer[..n.min(buffer.len())])),
                Err(err) if err.raw_os_error() == Some(libc::ENOBUFS) => each(Queued::Lost),
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => return Err(err),
            }
        }
    }

    /// Waits until a datagram is queued or `timeout` has passed (whichever comes first).
    pub fn wait_readable(&self, timeout: Duration) {
        let mut poll = libc::pollfd {
            fd: self.socket.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, valid for the call.
        unsafe {
            libc::poll(&mut poll, 1, timeout.as_millis().max(1) as libc::c_int);
        }
    }
}

impl AsRawFd for Socket {
    fn as_raw_fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }
}

/// A descriptor owner whose descriptor is the same for its whole life and closed only when it
/// is dropped: the condition under which tokio may watch the descriptor for as long as it holds
/// the owner. Implemented only for the owners this floor vouches for.
pub(crate) trait StableDescriptor: AsRawFd + private::Sealed {}

mod private {
    pub trait Sealed {}
    impl Sealed for super::route::AddressEvents {}
    impl Sealed for super::nf_tables::foreign::ForeignCommits {}
    impl Sealed for inotify::Inotify {}
}

impl StableDescriptor for route::AddressEvents {}
impl StableDescriptor for nf_tables::foreign::ForeignCommits {}
/// The config directory watch's inotify instance (not netlink, but the same kind of
/// registration, so it lives beside the one netlink needs).
impl StableDescriptor for inotify::Inotify {}

/// Registers `owner` with the current tokio runtime (the caller runs inside one) for readiness
/// of `interest`; the returned `AsyncFd` owns it. The program's one readiness registration.
pub(crate) fn register<T: StableDescriptor>(
    owner: T,
    interest: tokio::io::Interest,
) -> io::Result<tokio::io::unix::AsyncFd<T>> {
    // SAFETY: a `StableDescriptor` reports the same descriptor for its whole life and closes it
    // only on drop; the AsyncFd takes ownership of the owner, so the descriptor outlives the
    // registration. (tokio deprecated the safe-looking `AsyncFd::new` as unsound for owners
    // without that guarantee, and points to `register`.)
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(owner, interest) }
        .map_err(io::Error::from)
}

/// The name of the interface with `index` in this network namespace.
pub(crate) fn interface_name(index: u32) -> Option<String> {
    let mut name = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: if_indextoname writes at most IF_NAMESIZE bytes, NUL included, into `name`.
    let found = unsafe { libc::if_indextoname(index, name.as_mut_ptr()) };
    if found.is_null() {
        return None;
    }
    // SAFETY: on success `name` holds a NUL-terminated string.
    let text = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) };
    Some(text.to_string_lossy().into_owned())
}
