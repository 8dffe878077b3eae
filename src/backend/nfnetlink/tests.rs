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
    b.add_table(Family::V4, "ipmasq");
    b.add_set(Family::V4, "ipmasq", "nomasq", wire::TYPE_IPV4_ADDR, true);
    b.add_rule(
        Family::V4,
        ("ipmasq", "postrouting"),
        &[statement::Stmt::Verdict(statement::Verdict::Return)],
        Some("c"),
    )
    .expect("a rule");
    b.finish()
}

/// An NLMSG_ERROR for `seq` with `code` (0: an acknowledgement).
fn ack(seq: u32, code: i32) -> Vec<u8> {
    let mut msg = Vec::new();
    msg.extend_from_slice(&36u32.to_ne_bytes());
    msg.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
    msg.extend_from_slice(&0u16.to_ne_bytes());
    msg.extend_from_slice(&seq.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes());
    msg.extend_from_slice(&code.to_ne_bytes());
    msg.extend_from_slice(&[0; 16]);
    msg
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
