//! Hostile replies without a kernel: a peer socket that never answers, answers half a message,
//! or refuses one message of a batch. Each request fails with a clear error by its deadline.

use super::*;
use crate::plan::Family;
use std::os::unix::net::UnixDatagram;

/// A transport whose replies come from a test's end of a socket pair.
struct Peer {
    ours: UnixDatagram,
}

impl Transport for Peer {
    fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.ours.send(bytes).map(|_| ())
    }

    fn receive(&mut self, deadline: Instant) -> io::Result<Vec<u8>> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.ours.set_read_timeout(Some(left))?;
        let mut buf = vec![0; 1 << 20];
        let n = self.ours.recv(&mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }
}

fn pair() -> (Peer, UnixDatagram) {
    let (ours, theirs) = UnixDatagram::pair().expect("a socket pair");
    (Peer { ours }, theirs)
}

/// A small batch: table, set, rule.
fn batch() -> Finished {
    let mut b = wire::Batch::new(100);
    b.add_table(Family::V4, "ipmasq", None, None).unwrap();
    b.add_set(Family::V4, "ipmasq", "nomasq", wire::TYPE_IPV4_ADDR, true);
    b.add_rule(
        Family::V4,
        "ipmasq",
        "postrouting",
        &[statement::Stmt::Verdict(statement::NftVerdict::Return)],
        Some("c"),
    )
    .expect("a rule");
    b.finish()
}

/// A netlink message of `kind` for `seq` carrying `payload`.
fn nlmsg(kind: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
    let mut msg = Vec::new();
    msg.extend_from_slice(&(16 + payload.len() as u32).to_ne_bytes());
    msg.extend_from_slice(&kind.to_ne_bytes());
    msg.extend_from_slice(&0u16.to_ne_bytes());
    msg.extend_from_slice(&seq.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes());
    msg.extend_from_slice(payload);
    msg
}

/// An NLMSG_ERROR for `seq` with `code` (0: an acknowledgement).
fn ack(seq: u32, code: i32) -> Vec<u8> {
    let mut payload = code.to_ne_bytes().to_vec();
    payload.extend_from_slice(&[0; 16]);
    nlmsg(NLMSG_ERROR, seq, &payload)
}

#[test]
fn a_peer_that_never_answers_fails_the_commit_by_its_deadline() {
    let (mut peer, _theirs) = pair();
    let started = Instant::now();
    let err = commit_within(&mut peer, &batch(), Duration::from_millis(200)).unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(err.to_string().contains("no complete answer"), "{err}");
}

#[test]
fn a_truncated_reply_is_an_error_not_a_hang() {
    let (mut peer, theirs) = pair();
    let done = batch();
    let mut half = ack(done.first_seq, 0);
    half.truncate(20);
    theirs.send(&half).unwrap();
    let err = commit_within(&mut peer, &done, Duration::from_secs(2)).unwrap_err();
    assert!(err.to_string().contains("truncated"), "{err}");
}

#[test]
fn a_refused_message_is_named_in_nft_syntax_with_the_errno_text() {
    let (mut peer, theirs) = pair();
    let done = batch();
    assert_eq!(done.messages, 3);
    let mut replies = ack(done.first_seq, 0);
    replies.extend(ack(done.first_seq + 1, -libc::EEXIST));
    replies.extend(ack(done.first_seq + 2, 0));
    theirs.send(&replies).unwrap();
    let err = commit_within(&mut peer, &done, Duration::from_secs(2)).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("add set ip ipmasq nomasq { type ipv4_addr ; flags interval ; }"),
        "{text}"
    );
    assert!(text.contains("File exists"), "{text}");
    assert_eq!(err.errno(), Some(libc::EEXIST));
}

#[test]
fn every_acknowledgement_arriving_is_success() {
    let (mut peer, theirs) = pair();
    let done = batch();
    for seq in done.first_seq..=done.last_seq {
        theirs.send(&ack(seq, 0)).unwrap();
    }
    commit_within(&mut peer, &done, Duration::from_secs(2)).expect("acknowledged");
    // A whole-batch error (for its begin) ends the wait at once.
    let (mut peer, theirs) = pair();
    theirs
        .send(&ack(done.first_seq - 1, -libc::ENOMEM))
        .unwrap();
    let err = commit_within(&mut peer, &done, Duration::from_secs(2)).unwrap_err();
    assert_eq!(err.errno(), Some(libc::ENOMEM));
}

#[test]
fn a_dump_answered_with_garbage_fails_cleanly() {
    let (mut peer, theirs) = pair();
    theirs.send(&[1, 2, 3, 4, 5]).unwrap();
    let err = read::table_exists(&mut peer, Family::V4, "ipmasq").unwrap_err();
    assert!(err.to_string().contains("truncated"), "{err}");
}

/// A part of dump `seq`'s answer: a table.
fn dump_part(seq: u32) -> Vec<u8> {
    wire::request(
        wire::nfproto(Family::V4),
        NfTablesMessage::NewTable(netlink_packet_netfilter::nftables::TableMessage {
            attributes: vec![netlink_packet_netfilter::nftables::TableAttribute::Name(
                "t".into(),
            )],
        }),
        false,
        seq,
    )
}

/// The end of dump `seq`'s answer.
fn dump_done(seq: u32) -> Vec<u8> {
    nlmsg(NLMSG_DONE, seq, &[0; 4])
}

/// A peer sending `parts` parts of dump `seq` (forever when None), `gap` apart, then its end.
fn trickle(theirs: UnixDatagram, seq: u32, parts: Option<usize>, gap: Duration) {
    std::thread::spawn(move || {
        let mut sent = 0;
        while parts.is_none_or(|n| sent < n) {
            std::thread::sleep(gap);
            if theirs.send(&dump_part(seq)).is_err() {
                return;
            }
            sent += 1;
        }
        let _ = theirs.send(&dump_done(seq));
    });
}

/// A dump whose parts keep coming is read to its end although it takes longer than the
/// quiet deadline; one that keeps trickling forever ends at the overall deadline.
#[test]
fn a_slow_dump_is_read_while_it_progresses_and_ended_by_its_overall_deadline() {
    let (mut peer, theirs) = pair();
    trickle(theirs, 41, Some(6), Duration::from_millis(100));
    let patience = Patience {
        quiet: Duration::from_millis(400),
        overall: Duration::from_secs(20),
    };
    let found = answers(
        &mut peer,
        Awaited {
            seq: 41,
            dump: true,
            what: "a slow dump",
        },
        patience,
    )
    .expect("read to its end")
    .expect("not interrupted");
    assert_eq!(found.len(), 6);

    let (mut peer, theirs) = pair();
    trickle(theirs, 42, None, Duration::from_millis(20));
    let patience = Patience {
        quiet: Duration::from_millis(400),
        overall: Duration::from_millis(300),
    };
    let started = Instant::now();
    let err = answers(
        &mut peer,
        Awaited {
            seq: 42,
            dump: true,
            what: "an endless dump",
        },
        patience,
    )
    .unwrap_err();
    assert!(err.to_string().contains("deadline"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));

    // Silence ends it after `quiet`.
    let (mut peer, _theirs) = pair();
    let patience = Patience {
        quiet: Duration::from_millis(100),
        overall: Duration::from_secs(20),
    };
    let err = answers(
        &mut peer,
        Awaited {
            seq: 43,
            dump: true,
            what: "a silent dump",
        },
        patience,
    )
    .unwrap_err();
    assert!(err.to_string().contains("deadline"), "{err}");
}
