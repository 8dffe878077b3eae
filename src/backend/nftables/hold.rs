//! Holding our table: on Linux 6.9 and later the agent makes its table with nf_tables' `owner`
//! and `persist` flags. While the socket that wrote it is open no other process may delete or
//! change it (`nft delete table` is refused with EPERM, `nft flush ruleset` passes over it),
//! so a neighbour's flush leaks nothing; when the process exits the table stays, orphaned,
//! and the next agent claims it with the same flags. Older kernels, and `--nftables-table-
//! owner=false`, leave the table unheld: a neighbour's flush is then repaired from its
//! notification.

use super::live::LiveTable;
use netlink_packet_netfilter::nftables::TableFlags;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// The kernel release that first keeps an owned table past its owner (`persist`): without
/// it an owned table would vanish with the agent, and a crash would leave pods unmasqueraded.
const PERSIST_SINCE: (u32, u32) = (6, 9);

/// Whether this process holds the tables it writes (`--nftables-table-owner`; on unless
/// turned off).
static WANTED: AtomicBool = AtomicBool::new(true);

/// Turns holding on or off for this process's writes.
pub(crate) fn set_wanted(on: bool) {
    WANTED.store(on, Ordering::Relaxed);
}

/// The flags of a held table.
pub(super) fn held_flags() -> TableFlags {
    TableFlags::Owner | TableFlags::Persisent
}

/// A kernel release's major and minor numbers (`6.18.44-fc` → (6, 18)).
fn release_numbers(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(['.', '-', '+']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// Whether this kernel keeps a held table when its owner goes (read once).
fn kernel_keeps_orphans() -> bool {
    static KEEPS: OnceLock<bool> = OnceLock::new();
    *KEEPS.get_or_init(|| {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let keeps = release_numbers(release.trim()).is_some_and(|found| found >= PERSIST_SINCE);
        if !keeps && WANTED.load(Ordering::Relaxed) {
            tracing::info!(
                kernel = release.trim(),
                "this kernel cannot keep a table past its owner (nf_tables' persist flag: Linux 6.9), so our table is not held; a neighbour's change to it is repaired as soon as its notification is heard"
            );
        }
        keeps
    })
}

/// Our socket (its netlink port, and which opening of the process's socket it is: a port can
/// come back on a socket opened anew, see [`crate::netlink::nf_tables::SocketId`]), and whether
/// the tables it writes are to be held by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Holder {
    pub port: Option<u32>,
    pub socket: Option<u64>,
    pub hold: bool,
}

impl Holder {
    /// The holder for `socket`: holding when it is wanted, the socket can hold (it has a
    /// port) and the kernel can keep the table past us.
    pub(super) fn of(socket: Option<crate::netlink::nf_tables::SocketId>) -> Self {
        let hold = WANTED.load(Ordering::Relaxed) && socket.is_some() && kernel_keeps_orphans();
        Holder {
            port: socket.map(|s| s.port),
            socket: socket.map(|s| s.opening),
            hold,
        }
    }
}

/// Where the live table stands against our holding it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Holding {
    /// Absent (the repair makes it, held when it is to be), held by our socket, or not to be
    /// held and without `persist`.
    Settled,
    /// Orphaned (`persist` without an owner: its agent exited): a table message with our
    /// flags claims it.
    Claim,
    /// `persist` is not as it is to be: a table made without it (by an older ipmasq, or with
    /// holding off) that is to be held, or an orphaned one that is not (holding turned off,
    /// or the kernel floor: nft 1.0.6 cannot even declare such a table). The flag cannot be
    /// changed on a table that exists, so the table is made anew, in the repair's one batch.
    Remake,
    /// Held by another open socket (another process of ours): nothing we send can change it.
    HeldElsewhere(u32),
}

/// Where `live` stands for `holder`.
pub(super) fn judge(live: &LiveTable, holder: Holder) -> Holding {
    if !live.table_exists {
        return Holding::Settled;
    }
    let owner = live
        .owner
        .filter(|_| live.flags.contains(TableFlags::Owner));
    let persists = live.flags.contains(TableFlags::Persisent);
    match owner {
        Some(owner) if Some(owner) != holder.port => Holding::HeldElsewhere(owner),
        _ if persists != holder.hold => Holding::Remake,
        _ if !holder.hold => Holding::Settled,
        Some(_) => Holding::Settled,
        None => Holding::Claim,
    }
}

/// What the agent says when another socket holds our table.
pub(super) fn held_elsewhere(family_word: &str, owner: u32) -> String {
    let table = super::TABLE;
    format!(
        "table {family_word} {table}: held by another process's netlink socket (port {owner}), which alone may change it (`nft list table {family_word} {table}` names its program): another ipmasq (an agent, or `agent --once`) is running in this network namespace; it is released when that process exits"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(flags: TableFlags, owner: Option<u32>) -> LiveTable {
        LiveTable {
            table_exists: true,
            flags,
            owner,
            ..LiveTable::default()
        }
    }

    #[test]
    fn kernel_releases_read_as_major_and_minor() {
        assert_eq!(release_numbers("6.18.44-fc-v782"), Some((6, 18)));
        assert_eq!(release_numbers("6.9.0"), Some((6, 9)));
        assert_eq!(release_numbers("5.14.0-427.el9.x86_64"), Some((5, 14)));
        assert_eq!(release_numbers("6"), None);
        assert!((6, 10) >= PERSIST_SINCE && (5, 19) < PERSIST_SINCE);
    }

    /// Every standing of a live table, for a socket of port 4242 that is to hold it, and for
    /// one that is not.
    #[test]
    fn the_table_is_claimed_remade_or_left_as_it_stands() {
        let held = held_flags();
        let holding = Holder {
            port: Some(4242),
            socket: Some(1),
            hold: true,
        };
        assert_eq!(judge(&LiveTable::default(), holding), Holding::Settled);
        assert_eq!(judge(&table(held, Some(4242)), holding), Holding::Settled);
        assert_eq!(
            judge(&table(TableFlags::Persisent, None), holding),
            Holding::Claim
        );
        assert_eq!(
            judge(&table(held, Some(77)), holding),
            Holding::HeldElsewhere(77)
        );
        assert_eq!(
            judge(&table(TableFlags::empty(), None), holding),
            Holding::Remake
        );
        // `nft`'s own `flags owner`, without persist: another's while its socket is open.
        assert_eq!(
            judge(&table(TableFlags::Owner, Some(77)), holding),
            Holding::HeldElsewhere(77)
        );
        let not_holding = Holder {
            port: Some(4242),
            socket: Some(1),
            hold: false,
        };
        assert_eq!(
            judge(&table(TableFlags::empty(), None), not_holding),
            Holding::Settled
        );
        // Orphaned with `persist`, holding off: made anew without it.
        assert_eq!(
            judge(&table(TableFlags::Persisent, None), not_holding),
            Holding::Remake
        );
        assert_eq!(
            judge(&table(held, Some(77)), not_holding),
            Holding::HeldElsewhere(77)
        );
    }
}
