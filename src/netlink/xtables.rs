//! x_tables' socket options (not netlink: `getsockopt` on a raw IP socket, as
//! iptables-legacy-save reads its tables): the socket and the call, the only `unsafe` of the
//! xtables probe. What the replies mean is read in `backend::iptables::probe`.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A raw socket of `domain` (`AF_INET`, `AF_INET6`) to ask x_tables on; None when refused.
pub(crate) fn raw_socket(domain: libc::c_int) -> Option<OwnedFd> {
    // SAFETY: a plain socket(2) call; the descriptor is owned at once.
    let raw = unsafe { libc::socket(domain, libc::SOCK_RAW, libc::IPPROTO_RAW) };
    // SAFETY: `raw` is a fresh descriptor nothing else owns.
    (raw >= 0).then(|| unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Reads socket option `option` of `level` into `buf` (which carries the request in);
/// whether the kernel answered.
pub(crate) fn getsockopt(
    fd: &OwnedFd,
    level: libc::c_int,
    option: libc::c_int,
    buf: &mut [u8],
) -> bool {
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `buf`, which is that long.
    unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            option,
            buf.as_mut_ptr().cast(),
            &mut len,
        ) == 0
    }
}
