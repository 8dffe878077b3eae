//! Another process's commits that change what we own in nf_tables, heard as the kernel
//! announces them (the group `nft monitor` reads): the agent repairs a neighbour's flush of our
//! jump or table within milliseconds instead of at the next resync. iptables-nft commits
//! through nf_tables too, so its changes are heard; iptables-legacy's are announced to no one.

use super::notify::{name_in, nfproto, table_name, NFGENMSG_LEN, NFNLGRP_NFTABLES, NFT_MSG_NEWGEN};
use super::wire::NFNL_SUBSYS_NFTABLES;
use crate::netlink::framing::{self, Broken, NLMSG_HDRLEN};
use crate::netlink::{Queued, Socket, NETLINK_NETFILTER};
use crate::plan::Family;
use std::io;
use std::os::fd::{AsRawFd, RawFd};

/// Room for a busy neighbour's notifications between two reads; beyond it the kernel drops
/// them and says so (a loss, heard as a touch).
const RECEIVE_BUFFER: usize = 1 << 20;

const NFT_MSG_DELTABLE: u16 = 2;
const NFT_MSG_NEWCHAIN: u16 = 3;
const NFT_MSG_DELCHAIN: u16 = 5;
const NFT_MSG_NEWRULE: u16 = 6;
const NFT_MSG_DELRULE: u16 = 8;
/// Kernels from 6.3 on: the `destroy` forms of deleting a table, a chain, a rule.
const NFT_MSG_DESTROYTABLE: u16 = 26;
const NFT_MSG_DESTROYCHAIN: u16 = 27;
const NFT_MSG_DESTROYRULE: u16 = 28;

/// A chain notification's own name.
const NFTA_CHAIN_NAME: u16 = 3;
/// A rule notification's chain.
const NFTA_RULE_CHAIN: u16 = 2;
/// NEWGEN: the process (thread) that committed, and its command name.
const NFTA_GEN_PROC_PID: u16 = 2;
const NFTA_GEN_PROC_NAME: u16 = 3;

/// What this agent owns in nf_tables, in the IPv4 and IPv6 families.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owned {
    /// A table of its own, whole (the nftables backend's `ipmasq`).
    Table(String),
    /// Chains in a shared table (iptables-nft: our chain and `POSTROUTING`, which holds our
    /// jump, in `nat`): a rule added or deleted in one of them, the chain itself, or the table
    /// deleted.
    Chains { table: String, chains: Vec<String> },
}

impl Owned {
    fn table(&self) -> &str {
        match self {
            Owned::Table(name) => name,
            Owned::Chains { table, .. } => table,
        }
    }

    /// Whether one object notification (its type and attributes) changes what we own.
    fn touched_by(&self, kind: u16, attrs: &[u8]) -> bool {
        // No readable table name: counted as ours, a pass costs less than a leak.
        let Some(table) = table_name(attrs) else {
            return true;
        };
        if table != self.table().as_bytes() {
            return false;
        }
        let Owned::Chains { chains, .. } = self else {
            return true;
        };
        let chain = match kind {
            NFT_MSG_DELTABLE | NFT_MSG_DESTROYTABLE => return true,
            NFT_MSG_NEWCHAIN | NFT_MSG_DELCHAIN | NFT_MSG_DESTROYCHAIN => {
                name_in(attrs, NFTA_CHAIN_NAME)
            }
            NFT_MSG_NEWRULE | NFT_MSG_DELRULE | NFT_MSG_DESTROYRULE => {
                name_in(attrs, NFTA_RULE_CHAIN)
            }
            _ => return false,
        };
        chain.is_none_or(|chain| chains.iter().any(|ours| ours.as_bytes() == chain))
    }
}

/// Who committed, as the kernel names it: the committing thread's id (in the kernel's first
/// process namespace) and its command name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committer {
    pub pid: u32,
    pub name: String,
}

/// What one read of the notifications heard.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Heard {
    /// Commits by another process that changed what we own, the last one's committer.
    pub foreign: u32,
    pub last: Option<Committer>,
    /// Notifications were dropped: what they said is unknown, so it counts as a change.
    pub lost: bool,
}

impl Heard {
    /// Whether a pass should look: a foreign change, or notifications lost.
    pub fn worth_a_pass(&self) -> bool {
        self.foreign > 0 || self.lost
    }
}

/// The notifications, framed and judged: pure bookkeeping, tested without a kernel.
#[derive(Debug)]
pub(crate) struct Tally {
    owned: Owned,
    /// The commit whose NEWGEN has not arrived yet touched what we own.
    pending: bool,
    /// Whether a thread id is one of this process's.
    is_ours: fn(u32) -> bool,
}

impl Tally {
    pub(crate) fn new(owned: Owned, is_ours: fn(u32) -> bool) -> Self {
        Tally {
            owned,
            pending: false,
            is_ours,
        }
    }

    /// Takes in one datagram (one or more netlink messages), adding to `heard`.
    pub(crate) fn datagram(&mut self, data: &[u8], heard: &mut Heard) {
        for message in framing::messages(data) {
            match message {
                Ok(message) => self.message(message, heard),
                Err(Broken::Short { .. }) => return,
                Err(Broken::Length { .. }) => {
                    heard.lost = true;
                    return;
                }
            }
        }
    }

    fn message(&mut self, msg: &[u8], heard: &mut Heard) {
        let kind = u16::from_ne_bytes([msg[4], msg[5]]);
        if kind >> 8 != NFNL_SUBSYS_NFTABLES {
            return;
        }
        let kind = kind & 0xff;
        let Some(&family) = msg.get(NLMSG_HDRLEN) else {
            return;
        };
        let attrs = msg.get(NLMSG_HDRLEN + NFGENMSG_LEN..).unwrap_or_default();
        if kind == NFT_MSG_NEWGEN {
            if !std::mem::take(&mut self.pending) {
                return;
            }
            let pid = framing::attribute(attrs, NFTA_GEN_PROC_PID)
                .and_then(|v| v.get(..4))
                .map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")));
            if pid.is_some_and(self.is_ours) {
                return;
            }
            heard.foreign += 1;
            heard.last = Some(Committer {
                pid: pid.unwrap_or(0),
                name: name_in(attrs, NFTA_GEN_PROC_NAME)
                    .map(|n| String::from_utf8_lossy(n).into_owned())
                    .unwrap_or_default(),
            });
            return;
        }
        let ours = Family::ALL.into_iter().any(|f| nfproto(f) == family);
        if ours && self.owned.touched_by(kind, attrs) {
            self.pending = true;
        }
    }
}

/// Whether `tid` is a thread of this process (the nftables backend commits from the
/// reconcile thread). In a process namespace of its own the kernel's id is not ours to see:
/// then our own commits are heard as foreign, and each costs one pass that finds nothing to do.
fn is_this_process(tid: u32) -> bool {
    std::path::Path::new(&format!("/proc/self/task/{tid}")).exists()
}

/// A subscription to the commits that change what we own, read without blocking.
pub struct ForeignCommits {
    socket: Socket,
    buffer: Vec<u8>,
    tally: Tally,
}

impl ForeignCommits {
    /// Subscribes; every commit from now on is heard.
    pub fn subscribe(owned: Owned) -> io::Result<Self> {
        Ok(ForeignCommits {
            socket: Socket::member_of(NETLINK_NETFILTER, NFNLGRP_NFTABLES, RECEIVE_BUFFER)?,
            buffer: vec![0; 64 << 10],
            tally: Tally::new(owned, is_this_process),
        })
    }

    /// A subscription registered with the current tokio runtime (the caller runs inside one),
    /// to be awaited for readiness and then [`drained`](Self::drain).
    pub fn registered(owned: Owned) -> io::Result<tokio::io::unix::AsyncFd<Self>> {
        crate::netlink::register(Self::subscribe(owned)?, tokio::io::Interest::READABLE)
    }

    /// Reads every queued notification; what they said. A read that fails counts as a loss.
    pub fn drain(&mut self) -> Heard {
        let mut heard = Heard::default();
        let tally = &mut self.tally;
        let drained = self.socket.drain(&mut self.buffer, |queued| match queued {
            Queued::Datagram(datagram) => tally.datagram(datagram, &mut heard),
            Queued::Lost => {
                heard.lost = true;
                // A commit whose NEWGEN was dropped: its touch must not land on the next.
                tally.pending = false;
            }
        });
        if drained.is_err() {
            heard.lost = true;
        }
        heard
    }
}

impl AsRawFd for ForeignCommits {
    fn as_raw_fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::notify::notification as message;

    /// The kernel's values, written out so the tests do not take the code's word for them.
    const NFPROTO_IPV4: u8 = 2;
    const NFPROTO_IPV6: u8 = 10;

    fn newgen(pid: u32, name: &[u8]) -> Vec<u8> {
        message(
            NFT_MSG_NEWGEN,
            0,
            &[
                (1, &7u32.to_be_bytes()),
                (NFTA_GEN_PROC_PID, &pid.to_be_bytes()),
                (NFTA_GEN_PROC_NAME, name),
            ],
        )
    }

    /// Thread 1 is "ours" in these tests.
    fn ours(tid: u32) -> bool {
        tid == 1
    }

    fn iptables() -> Owned {
        Owned::Chains {
            table: "nat".into(),
            chains: vec!["IP-MASQ-AGENT".into(), "POSTROUTING".into()],
        }
    }

    fn heard(owned: Owned, batches: &[Vec<u8>]) -> Heard {
        let mut tally = Tally::new(owned, ours);
        let mut heard = Heard::default();
        for batch in batches {
            tally.datagram(batch, &mut heard);
        }
        heard
    }

    #[test]
    fn a_neighbours_flush_of_our_table_is_heard_with_its_committer() {
        let mut flush = message(NFT_MSG_DELTABLE, NFPROTO_IPV4, &[(1, b"ipmasq\0")]);
        flush.extend(newgen(4242, b"nft\0"));
        let got = heard(Owned::Table("ipmasq".into()), &[flush]);
        assert_eq!(got.foreign, 1);
        assert_eq!(
            got.last,
            Some(Committer {
                pid: 4242,
                name: "nft".into()
            })
        );
        assert!(got.worth_a_pass());
    }

    #[test]
    fn our_own_commits_and_other_tables_are_not_heard() {
        // Our own commit of our table, then a neighbour's commit of kube-proxy's table, of a
        // table of our name in the inet family, and an empty commit.
        let mut own = message(NFT_MSG_NEWRULE, NFPROTO_IPV4, &[(1, b"ipmasq\0")]);
        own.extend(newgen(1, b"reconcile\0"));
        let mut theirs = message(NFT_MSG_NEWRULE, NFPROTO_IPV4, &[(1, b"kube-proxy\0")]);
        theirs.extend(message(NFT_MSG_DELTABLE, 1, &[(1, b"ipmasq\0")]));
        theirs.extend(newgen(99, b"nft\0"));
        let empty = newgen(99, b"nft\0");
        let got = heard(Owned::Table("ipmasq".into()), &[own, theirs, empty]);
        assert_eq!(got, Heard::default());
        assert!(!got.worth_a_pass());
    }

    #[test]
    fn in_a_shared_table_only_our_chains_count() {
        // kube-proxy rewriting its own chains in nat: not ours.
        let mut kube = message(
            NFT_MSG_NEWRULE,
            NFPROTO_IPV4,
            &[(1, b"nat\0"), (NFTA_RULE_CHAIN, b"KUBE-SERVICES\0")],
        );
        kube.extend(message(
            NFT_MSG_NEWCHAIN,
            NFPROTO_IPV4,
            &[(1, b"nat\0"), (NFTA_CHAIN_NAME, b"KUBE-SEP-X\0")],
        ));
        kube.extend(newgen(7, b"iptables-nft-re\0"));
        assert_eq!(heard(iptables(), &[kube]).foreign, 0);
        // `iptables -t nat -F POSTROUTING` (IPv6 too), our chain deleted, the table deleted.
        for touch in [
            message(
                NFT_MSG_DELRULE,
                NFPROTO_IPV6,
                &[(1, b"nat\0"), (NFTA_RULE_CHAIN, b"POSTROUTING\0")],
            ),
            message(
                NFT_MSG_DELCHAIN,
                NFPROTO_IPV4,
                &[(1, b"nat\0"), (NFTA_CHAIN_NAME, b"IP-MASQ-AGENT\0")],
            ),
            message(NFT_MSG_DESTROYTABLE, NFPROTO_IPV4, &[(1, b"nat\0")]),
        ] {
            let mut commit = touch;
            commit.extend(newgen(8, b"iptables\0"));
            assert_eq!(heard(iptables(), &[commit]).foreign, 1);
        }
        // A rule in a table of another name but with our chain's name: not ours.
        let mut other = message(
            NFT_MSG_DELRULE,
            NFPROTO_IPV4,
            &[(1, b"filter\0"), (NFTA_RULE_CHAIN, b"POSTROUTING\0")],
        );
        other.extend(newgen(8, b"iptables\0"));
        assert_eq!(heard(iptables(), &[other]).foreign, 0);
    }

    #[test]
    fn a_commit_split_across_datagrams_and_a_broken_message() {
        let first = message(NFT_MSG_DELTABLE, NFPROTO_IPV6, &[(1, b"ipmasq\0")]);
        let second = newgen(5, b"nft\0");
        assert_eq!(
            heard(Owned::Table("ipmasq".into()), &[first, second]).foreign,
            1
        );
        // A message without a table name counts as ours.
        let mut nameless = message(NFT_MSG_DELRULE, NFPROTO_IPV4, &[]);
        nameless.extend(newgen(5, b"nft\0"));
        assert_eq!(heard(iptables(), &[nameless]).foreign, 1);
        // A length that runs past the datagram: a loss.
        let mut broken = message(NFT_MSG_DELTABLE, NFPROTO_IPV4, &[(1, b"nat\0")]);
        broken[0] = 0xff;
        let got = heard(iptables(), &[broken]);
        assert!(got.lost && got.worth_a_pass(), "{got:?}");
    }
}
