//! nf_tables change notifications (the multicast group `nft monitor` listens to), so that a
//! neighbour's commits cost nothing: the generation id says *that* something committed, the
//! notifications say *what*. A commit that touched no object of our table (in our family)
//! leaves our table as we last saw it, and the pass needs no re-read. Lost notifications
//! (ENOBUFS) or a generation whose notifications do not arrive in time mean one full read.

use super::wire::{self, NFNL_SUBSYS_NFTABLES};
use crate::netlink::framing::{self, Broken, NLMSG_HDRLEN};
use crate::netlink::{Queued, Socket, NETLINK_NETFILTER};
use crate::plan::Family;
use std::io;
use std::time::{Duration, Instant};

/// A commit's new generation: the last notification of every commit.
pub(super) const NFT_MSG_NEWGEN: u16 = 15;
const NFTA_GEN_ID: u16 = 1;
/// The nfgenmsg header before a notification's attributes.
pub(super) const NFGENMSG_LEN: usize = 4;

/// The value of the first netlink attribute of type `wanted` in `attrs` (flags masked off);
/// None when there is none or the attributes do not frame.
fn attribute(attrs: &[u8], wanted: u16) -> Option<&[u8]> {
    framing::attribute(attrs, wanted)
}

/// The nfnetlink multicast group of nf_tables object changes.
pub(super) const NFNLGRP_NFTABLES: u32 = 7;
/// In every object notification (table, chain, rule, set, element, object, flowtable), the
/// attribute of type 1 is the table's name.
const NFTA_TABLE_NAME_ATTR: u16 = 1;

/// A NUL-terminated name attribute's bytes, without the NUL (None: no such attribute).
pub(super) fn name_in(attrs: &[u8], kind: u16) -> Option<&[u8]> {
    attribute(attrs, kind).map(|v| v.split(|&b| b == 0).next().unwrap_or_default())
}

/// An object notification's table name.
pub(super) fn table_name(attrs: &[u8]) -> Option<&[u8]> {
    name_in(attrs, NFTA_TABLE_NAME_ATTR)
}
/// Room for notifications between two passes; beyond it the kernel drops them and says so.
const RECEIVE_BUFFER: usize = 4 << 20;
/// Touching generations remembered per family; more between two passes count as a loss.
const TOUCHES_KEPT: usize = 64;
/// How long a pass waits for the notifications of a generation it has already seen committed.
const CATCH_UP: Duration = Duration::from_millis(50);

fn slot(family: Family) -> usize {
    match family {
        Family::V4 => 0,
        Family::V6 => 1,
    }
}

pub(super) fn nfproto(family: Family) -> u8 {
    u8::from(wire::nfproto(family))
}

/// What the notifications said, per family: pure bookkeeping over the messages, so it is
/// tested without a kernel.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    table: String,
    /// The generation of the last NEWGEN seen.
    latest: Option<u32>,
    /// Touches of the commit whose NEWGEN has not arrived yet.
    pending: [bool; 2],
    /// The recent generations whose commits touched our table, per family (oldest first).
    touched_at: [std::collections::VecDeque<u32>; 2],
    /// Notifications were lost since the family's last full read.
    lost: [bool; 2],
}

/// `g` lies in `(from, to]`, counting across a wrap of the 32-bit id.
fn after_and_up_to(g: u32, from: u32, to: u32) -> bool {
    let span = to.wrapping_sub(from);
    let offset = g.wrapping_sub(from);
    offset != 0 && offset <= span
}

impl Ledger {
    pub fn new(table: &str) -> Self {
        Ledger {
            table: table.to_string(),
            ..Ledger::default()
        }
    }

    /// Takes in one datagram (one or more netlink messages).
    pub fn datagram(&mut self, data: &[u8]) {
        for message in framing::messages(data) {
            match message {
                Ok(message) => self.message(message),
                // Less than a header left: nothing more to read.
                Err(Broken::Short { .. }) => return,
                Err(Broken::Length { .. }) => {
                    // A message we cannot frame: assume it touched us.
                    self.pending = [true, true];
                    return;
                }
            }
        }
    }

    fn message(&mut self, msg: &[u8]) {
        let kind = u16::from_ne_bytes([msg[4], msg[5]]);
        if kind >> 8 != NFNL_SUBSYS_NFTABLES {
            return;
        }
        let Some(&family) = msg.get(NLMSG_HDRLEN) else {
            return;
        };
        let attrs = msg.get(NLMSG_HDRLEN + NFGENMSG_LEN..).unwrap_or_default();
        if kind & 0xff == NFT_MSG_NEWGEN {
            let Some(generation) = attribute(attrs, NFTA_GEN_ID)
                .and_then(|v| v.get(..4))
                .map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")))
            else {
                return;
            };
            for family in Family::ALL {
                if std::mem::take(&mut self.pending[slot(family)]) {
                    let touches = &mut self.touched_at[slot(family)];
                    if touches.len() == TOUCHES_KEPT {
                        touches.pop_front();
                        self.lost[slot(family)] = true;
                    }
                    touches.push_back(generation);
                }
            }
            self.latest = Some(generation);
            return;
        }
        for ours in Family::ALL {
            if family != nfproto(ours) {
                continue;
            }
            // No readable table name: assume it is ours.
            let named = table_name(attrs);
            if named.is_none_or(|name| name == self.table.as_bytes()) {
                self.pending[slot(ours)] = true;
            }
        }
    }

    /// Notifications were dropped: every family needs a full read, and nothing heard so far
    /// can be framed any more (a commit's touches may have lost their NEWGEN): start afresh.
    pub fn lost(&mut self) {
        *self = Ledger {
            lost: [true, true],
            ..Ledger::new(&self.table)
        };
    }

    /// The family's table has been read in full: what was lost before the last drain (which
    /// came before the read) no longer matters. Touches stay: their generations tell.
    pub fn read_in_full(&mut self, family: Family) {
        self.lost[slot(family)] = false;
    }

    /// Whether every commit after generation `from` up to `to` is accounted for and none
    /// touched our table in `family`. (Commits after `to` are the next pass's business; a
    /// commit whose notifications are still arriving counts only if it may be `to` itself.)
    pub fn untouched(&mut self, family: Family, from: u32, to: u32) -> bool {
        // Touches at or before `from` can never matter again: the family's knowledge only
        // moves forward from there.
        self.touched_at[slot(family)]
            .retain(|&g| after_and_up_to(g, from, from.wrapping_add(1 << 30)));
        self.caught_up(to)
            && !self.lost[slot(family)]
            && (self.latest != Some(to) || !self.pending[slot(family)])
            && !self.touched_at[slot(family)]
                .iter()
                .any(|&g| after_and_up_to(g, from, to))
    }

    /// Whether the notifications of generation `to` (or a later one) have arrived.
    fn caught_up(&self, to: u32) -> bool {
        self.latest.is_some_and(|latest| {
            latest == to || after_and_up_to(latest, to, to.wrapping_add(1 << 30))
        })
    }
}

/// A subscription to the nf_tables notifications of this network namespace.
pub(crate) struct Monitor {
    socket: Socket,
    buffer: Vec<u8>,
    ledger: Ledger,
}

impl Monitor {
    /// Subscribes; from now on every commit's notifications queue up for [`Monitor::untouched`].
    pub fn subscribe(table: &str) -> io::Result<Monitor> {
        Ok(Monitor {
            socket: Self::socket()?,
            buffer: vec![0; 64 << 10],
            ledger: Ledger::new(table),
        })
    }

    /// A socket in the nf_tables group, with room for a busy neighbour's notifications.
    fn socket() -> io::Result<Socket> {
        Socket::member_of(NETLINK_NETFILTER, NFNLGRP_NFTABLES, RECEIVE_BUFFER)
    }

    /// After a loss: a fresh socket, so what was queued before (commits whose NEWGEN may have
    /// been dropped) can never be mistaken for a later commit's; every family reads in full.
    fn renew(&mut self) {
        self.ledger.lost();
        match Self::socket() {
            Ok(socket) => self.socket = socket,
            Err(err) => tracing::debug!(error = %err, "cannot renew the nf_tables subscription"),
        }
    }

    /// Reads every queued notification without waiting.
    fn drain(&mut self) {
        let ledger = &mut self.ledger;
        let drained = self.socket.drain(&mut self.buffer, |queued| match queued {
            Queued::Datagram(datagram) => ledger.datagram(datagram),
            Queued::Lost => {
                tracing::debug!("nf_tables notifications were lost; the next pass reads in full");
                ledger.lost();
            }
        });
        if let Err(err) = drained {
            tracing::debug!(error = %err, "reading nf_tables notifications failed");
            self.renew();
        }
    }

    /// Whether no commit after `from` up to `to` touched our table in `family`: drains the
    /// queue, waiting briefly for the notifications of `to` if they are not all there yet.
    pub fn untouched(&mut self, family: Family, from: u32, to: u32) -> bool {
        let deadline = Instant::now() + CATCH_UP;
        loop {
            self.drain();
            if self.ledger.lost[slot(family)] {
                return false;
            }
            if self.ledger.caught_up(to) {
                let untouched = self.ledger.untouched(family, from, to);
                if !untouched {
                    tracing::debug!(%family, from, to, ledger = ?self.ledger, "commits since the last read may have touched our table; reading it");
                }
                return untouched;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                tracing::debug!(%family, to, latest = ?self.ledger.latest, "the notifications of the current generation did not arrive in time; reading the table");
                return false;
            }
            self.socket.wait_readable(left);
        }
    }

    /// The family's table was just read in full.
    pub fn read_in_full(&mut self, family: Family) {
        self.ledger.read_in_full(family);
    }
}

/// One nf_tables notification as the kernel frames it: `kind`, nfgenmsg of `family`, then the
/// attributes (for the tests here and in `foreign`).
#[cfg(test)]
pub(crate) fn notification(kind: u16, family: u8, attrs: &[(u16, &[u8])]) -> Vec<u8> {
    let mut body = vec![family, 0, 0, 0];
    for (kind, value) in attrs {
        let len = 4 + value.len();
        body.extend_from_slice(&(len as u16).to_ne_bytes());
        body.extend_from_slice(&kind.to_ne_bytes());
        body.extend_from_slice(value);
        framing::pad(&mut body);
    }
    let mut msg = Vec::new();
    msg.extend_from_slice(&((NLMSG_HDRLEN + body.len()) as u32).to_ne_bytes());
    msg.extend_from_slice(&((NFNL_SUBSYS_NFTABLES << 8) | kind).to_ne_bytes());
    msg.extend_from_slice(&[0; 10]);
    msg.extend_from_slice(&body);
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    const NFPROTO_IPV4: u8 = 2;
    const NFPROTO_IPV6: u8 = 10;

    use super::notification as message;

    fn newgen(generation: u32) -> Vec<u8> {
        message(
            NFT_MSG_NEWGEN,
            0,
            &[(NFTA_GEN_ID, &generation.to_be_bytes())],
        )
    }

    const NEWSETELEM: u16 = 12;
    const DELTABLE: u16 = 2;
    const NEWRULE: u16 = 6;

    #[test]
    fn a_neighbours_commits_leave_our_table_untouched() {
        let mut ledger = Ledger::new("ipmasq");
        // kube-proxy's table, and a table of ours in another family.
        let mut batch = message(NEWRULE, NFPROTO_IPV4, &[(1, b"kube-proxy\0")]);
        batch.extend(message(NEWRULE, 1, &[(1, b"ipmasq\0")]));
        batch.extend(newgen(11));
        ledger.datagram(&batch);
        ledger.datagram(&newgen(12));
        assert!(ledger.untouched(Family::V4, 10, 12));
        assert!(ledger.untouched(Family::V6, 10, 12));
        assert!(!ledger.untouched(Family::V4, 10, 13), "13 not seen yet");
        assert!(!ledger.caught_up(13));
        // Commits after the range do not matter, touching or not.
        let mut later = message(NEWSETELEM, NFPROTO_IPV4, &[(1, b"ipmasq\0")]);
        later.extend(newgen(13));
        ledger.datagram(&later);
        assert!(ledger.untouched(Family::V4, 10, 12));
        assert!(!ledger.untouched(Family::V4, 10, 13));
    }

    #[test]
    fn a_touch_of_our_table_is_seen_in_its_family_only() {
        let mut ledger = Ledger::new("ipmasq");
        let mut batch = message(
            NEWSETELEM,
            NFPROTO_IPV4,
            &[(1, b"ipmasq\0"), (2, b"nomasq\0")],
        );
        batch.extend(newgen(21));
        ledger.datagram(&batch);
        ledger.datagram(&newgen(22));
        assert!(!ledger.untouched(Family::V4, 20, 22));
        assert!(ledger.untouched(Family::V6, 20, 22));
        // Our own commit at 21, recorded: only what came after matters.
        assert!(ledger.untouched(Family::V4, 21, 22));
        // A flush of the ruleset deletes our table too.
        let mut flush = message(DELTABLE, NFPROTO_IPV6, &[(1, b"ipmasq\0")]);
        flush.extend(newgen(23));
        ledger.datagram(&flush);
        assert!(!ledger.untouched(Family::V6, 22, 23));
        // A message without a table name counts as ours.
        let mut odd = message(NEWRULE, NFPROTO_IPV4, &[]);
        odd.extend(newgen(24));
        ledger.datagram(&odd);
        assert!(!ledger.untouched(Family::V4, 23, 24));
    }

    #[test]
    fn lost_notifications_mean_a_full_read() {
        let mut ledger = Ledger::new("ipmasq");
        ledger.datagram(&newgen(5));
        // Touches queued before the loss whose NEWGEN was dropped: never pinned on a later
        // commit.
        ledger.datagram(&message(NEWSETELEM, NFPROTO_IPV4, &[(1, b"ipmasq\0")]));
        ledger.lost();
        ledger.datagram(&newgen(6));
        assert!(!ledger.untouched(Family::V4, 5, 6));
        ledger.read_in_full(Family::V4);
        ledger.datagram(&newgen(7));
        assert!(ledger.untouched(Family::V4, 6, 7), "{ledger:?}");
        assert!(!ledger.untouched(Family::V6, 6, 7));
        // More touching commits between two passes than are remembered: a loss.
        for g in 8..8 + TOUCHES_KEPT as u32 + 1 {
            let mut touch = message(NEWSETELEM, NFPROTO_IPV4, &[(1, b"ipmasq\0")]);
            touch.extend(newgen(g));
            ledger.datagram(&touch);
        }
        ledger.datagram(&newgen(100));
        assert!(!ledger.untouched(Family::V4, 99, 100));
    }

    #[test]
    fn generations_compare_across_a_wrap() {
        assert!(after_and_up_to(1, u32::MAX - 1, 3));
        assert!(after_and_up_to(u32::MAX, u32::MAX - 1, 3));
        assert!(!after_and_up_to(u32::MAX - 1, u32::MAX - 1, 3));
        assert!(!after_and_up_to(4, u32::MAX - 1, 3));
    }
}
