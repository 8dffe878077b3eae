//! The fake kernel on its own: what it refuses, with the errnos the real kernel gives (each
//! checked on 6.18 with nft 1.0.6 in a throwaway `unshare -n` namespace), that a refused batch
//! changes nothing, how it acknowledges, and that its dumps end as the kernel's do.

use super::*;
use crate::netlink::nf_tables::statement::{NftVerdict, Side, Stmt};
use crate::netlink::nf_tables::wire::{
    BaseChain, Batch, Keys, SetRef, TYPE_IPV4_ADDR, TYPE_IPV6_ADDR,
};
use crate::netlink::nf_tables::{commit_within, generation_over, read, Failure};
use crate::plan::Family;
use netlink_packet_netfilter::nftables::InetHookNumber;
use std::time::Duration;

const V4: NetfilterProtoFamily = NetfilterProtoFamily::IPv4;

fn commit(kernel: &FakeKernel, batch: Batch) -> Result<(), Failure> {
    commit_within(
        &mut kernel.socket(),
        &batch.finish(),
        Duration::from_secs(1),
    )
}

fn nat_postrouting(priority: i32) -> BaseChain {
    BaseChain {
        kind: "nat".into(),
        hook: InetHookNumber::PostRouting,
        priority,
    }
}

/// Table `t` with base chain `c` and interval set `s` holding 10.0.0.0/8, a rule in `c`
/// looking `s` up, and a regular chain `d` that `c` jumps to.
fn populated() -> FakeKernel {
    let kernel = FakeKernel::new();
    let mut b = Batch::new(crate::netlink::nf_tables::sequence(64));
    b.add_table(Family::V4, "t", None, None).unwrap();
    b.add_base_chain(Family::V4, "t", "c", &nat_postrouting(110));
    let set = b.add_set(Family::V4, "t", "s", TYPE_IPV4_ADDR, true);
    b.elements(
        Family::V4,
        "t",
        &set,
        &Keys::Nets(vec!["10.0.0.0/8".parse().unwrap()]),
        true,
    );
    b.add_rule(
        Family::V4,
        "t",
        "c",
        &[
            Stmt::SetLookup {
                v6: false,
                side: Side::Destination,
                negated: false,
                set: "s".into(),
            },
            Stmt::Verdict(NftVerdict::Return),
        ],
        None,
    )
    .unwrap();
    commit(&kernel, b).expect("the setup commits");
    // A regular chain (the batch writer makes base chains only), then a jump to it.
    kernel.edit(|ruleset| {
        let table = ruleset.table_mut(V4, "t").unwrap();
        let handle = table.handle();
        table.chains.push(FakeChain {
            name: "d".into(),
            handle,
            hook: None,
            kind: None,
            policy: None,
            rules: Vec::new(),
        });
    });
    let mut b = batch();
    b.add_rule(
        Family::V4,
        "t",
        "c",
        &[Stmt::Verdict(NftVerdict::Jump("d".into()))],
        None,
    )
    .unwrap();
    commit(&kernel, b).expect("the setup commits");
    kernel
}

fn batch() -> Batch {
    Batch::new(crate::netlink::nf_tables::sequence(64))
}

/// A rule for a chain that does not exist: the kernel answers ENOENT and the fake does too;
/// the table added before it in the same batch is not made either (all or nothing), and the
/// generation stays.
#[test]
fn a_rule_for_a_missing_chain_is_refused_with_enoent_and_nothing_commits() {
    let kernel = FakeKernel::new();
    let before = kernel.generation();
    let mut b = batch();
    b.add_table(Family::V4, "t", None, None).unwrap();
    b.add_rule(
        Family::V4,
        "t",
        "nochain",
        &[Stmt::Verdict(NftVerdict::Return)],
        None,
    )
    .unwrap();
    let err = commit(&kernel, b).unwrap_err();
    assert_eq!(err.errno(), Some(libc::ENOENT), "{err}");
    assert!(
        err.to_string().contains("add rule ip t nochain return"),
        "the refused message is named: {err}"
    );
    assert_eq!(kernel.ruleset(), FakeRuleset::default());
    assert_eq!(kernel.generation(), before);
    assert_eq!(kernel.counts().commits, 0);
}

/// Each refusal the real kernel gives for these requests, and no change from any of them.
#[test]
fn refusals_carry_the_errnos_the_kernel_gives() {
    type Build = fn(&mut Batch);
    let cases: [(&str, Build, i32); 9] = [
        (
            "delete set ip t s (a rule looks it up)",
            |b| b.delete_set(Family::V4, "t", "s"),
            libc::EBUSY,
        ),
        (
            "delete chain ip t d (a rule jumps to it)",
            |b| b.delete_chain(Family::V4, "t", "d"),
            libc::EBUSY,
        ),
        (
            "add chain ip t c at another priority",
            |b| b.add_base_chain(Family::V4, "t", "c", &nat_postrouting(100)),
            libc::EOPNOTSUPP,
        ),
        (
            "add set ip t s of another type",
            |b| {
                b.add_set(Family::V4, "t", "s", TYPE_IPV6_ADDR, true);
            },
            libc::EEXIST,
        ),
        (
            "delete element ip t s { 192.168.0.0/16 } (not in it)",
            |b| {
                let set = SetRef {
                    name: "s".into(),
                    id: None,
                };
                let nets = Keys::Nets(vec!["192.168.0.0/16".parse().unwrap()]);
                b.elements(Family::V4, "t", &set, &nets, false);
            },
            libc::ENOENT,
        ),
        (
            "add rule ip t c jump nowhere",
            |b| {
                let jump = [Stmt::Verdict(NftVerdict::Jump("nowhere".into()))];
                b.add_rule(Family::V4, "t", "c", &jump, None).unwrap();
            },
            libc::ENOENT,
        ),
        (
            "delete table ip nope",
            |b| b.delete_table(Family::V4, "nope"),
            libc::ENOENT,
        ),
        (
            "delete rule ip t c handle 999",
            |b| b.delete_rule(Family::V4, "t", "c", 999),
            libc::ENOENT,
        ),
        (
            "add rule ip t c ip daddr @missing return",
            |b| {
                let lookup = [
                    Stmt::SetLookup {
                        v6: false,
                        side: Side::Destination,
                        negated: false,
                        set: "missing".into(),
                    },
                    Stmt::Verdict(NftVerdict::Return),
                ];
                b.add_rule(Family::V4, "t", "c", &lookup, None).unwrap();
            },
            libc::ENOENT,
        ),
    ];
    for (what, build, errno) in cases {
        let kernel = populated();
        let (ruleset, generation) = (kernel.ruleset(), kernel.generation());
        let mut b = batch();
        build(&mut b);
        let err = commit(&kernel, b).expect_err(what);
        assert_eq!(err.errno(), Some(errno), "{what}: {err}");
        assert_eq!(kernel.ruleset(), ruleset, "{what} changed nothing");
        assert_eq!(kernel.generation(), generation, "{what}");
    }
}

/// What the kernel accepts although it looks like a conflict: a table, chain, set or element
/// added again (no `NLM_F_EXCL`), a chain deleted with its rules, a set deleted once the rule
/// that looked it up is gone in the same batch.
#[test]
fn adding_again_and_deleting_in_order_are_accepted() {
    let kernel = populated();
    let generation = kernel.generation();
    let mut b = batch();
    b.add_table(Family::V4, "t", Some("another comment"), None)
        .unwrap();
    b.add_base_chain(Family::V4, "t", "c", &nat_postrouting(110));
    let set = b.add_set(Family::V4, "t", "s", TYPE_IPV4_ADDR, true);
    let nets = Keys::Nets(vec!["10.0.0.0/8".parse().unwrap()]);
    b.elements(Family::V4, "t", &set, &nets, true);
    b.flush_chain(Family::V4, "t", "c");
    b.delete_set(Family::V4, "t", "s");
    b.delete_chain(Family::V4, "t", "d");
    commit(&kernel, b).expect("accepted");
    assert_eq!(kernel.generation(), generation + 1);
    let ruleset = kernel.ruleset();
    let table = ruleset.table(V4, "t").unwrap();
    assert_eq!(table.udata, None, "an existing table keeps its user data");
    assert!(table.set("s").is_none() && table.chain("d").is_none());
    assert!(table.chain("c").unwrap().rules.is_empty());
}

/// A rule that copies packets to NFLOG (`log prefix .. group .. snaplen ..`, the pod share's
/// refusals) is accepted, and a dump gives its expressions back as sent: the kernel dumps a
/// log's prefix, group and snaplen in the order nft sends them.
#[test]
fn a_log_expression_is_accepted_and_dumped_back() {
    use crate::netlink::nf_tables::statement::NflogCopy;
    let kernel = populated();
    let stmts = [
        Stmt::Counter {
            packets: 0,
            bytes: 0,
        },
        Stmt::Log(NflogCopy {
            prefix: "ipmasq-share-rate".into(),
            group: 7373,
            snaplen: 80,
        }),
        Stmt::Verdict(NftVerdict::Jump("d".into())),
    ];
    let mut b = batch();
    b.add_rule(Family::V4, "t", "c", &stmts, Some("logged"))
        .unwrap();
    commit(&kernel, b).expect("accepted");
    let rules = read::rules(&mut kernel.socket(), V4, "t", "c").unwrap();
    let rule = rules.last().expect("the rule appended");
    assert_eq!(rule.stmts, stmts);
    assert_eq!(rule.comment.as_deref(), Some("logged"));
}

/// Every message asking for it gets one answer with its sequence number: an acknowledgement
/// (its header echoed) or its errno (the whole message echoed); the batch's begin and end
/// get none.
#[test]
fn every_message_is_answered_once_by_its_sequence_number() {
    let kernel = FakeKernel::new();
    let mut b = batch();
    b.add_table(Family::V4, "t", None, None).unwrap();
    b.delete_set(Family::V4, "t", "absent");
    b.add_base_chain(Family::V4, "t", "c", &nat_postrouting(110));
    let done = b.finish();
    let mut socket = kernel.socket();
    socket.send(&done.bytes).unwrap();
    let sent = wire::frames(&done.bytes).unwrap();
    let mut answers = Vec::new();
    while let Ok(datagram) = socket.receive(Instant::now()) {
        for framed in wire::frames(&datagram).unwrap() {
            assert_eq!(framed.kind, NLMSG_ERROR);
            let code = wire::error_code(&framed).unwrap();
            let echoed = &framed.bytes[20..];
            let original = sent.iter().find(|f| f.seq == framed.seq).unwrap();
            if code == 0 {
                assert_eq!(echoed, &original.bytes[..16]);
            } else {
                assert_eq!(echoed, original.bytes);
            }
            answers.push((framed.seq, code));
        }
    }
    let first = done.first_seq;
    assert_eq!(
        answers,
        [(first, 0), (first + 1, -libc::ENOENT), (first + 2, 0)]
    );
    assert_eq!(kernel.generation(), 1, "a refused batch moves nothing");
}

/// A batch that never ends is not committed.
#[test]
fn a_batch_without_its_end_commits_nothing() {
    let kernel = FakeKernel::new();
    let mut b = batch();
    b.add_table(Family::V4, "t", None, None).unwrap();
    let done = b.finish();
    let framed = wire::frames(&done.bytes).unwrap();
    let end = framed.last().unwrap().bytes.len();
    let mut socket = kernel.socket();
    socket.send(&done.bytes[..done.bytes.len() - end]).unwrap();
    assert_eq!(kernel.ruleset(), FakeRuleset::default());
    assert_eq!(kernel.generation(), 1);
}

/// A dump arrives in parts flagged multi-part, each with the request's sequence number, and
/// ends with NLMSG_DONE; the reader takes it all in. A get of what is missing is ENOENT, which
/// the reader takes for "absent". GETGEN answers the id, which every commit moves by one.
#[test]
fn dumps_end_with_done_and_the_generation_moves_per_commit() {
    let kernel = FakeKernel::new();
    let mut socket = kernel.socket();
    assert_eq!(generation_over(&mut socket).unwrap(), 1);
    let nets: Vec<ipnet::IpNet> = (0..1000u32)
        .map(|i| {
            ipnet::IpNet::new(
                std::net::IpAddr::from((0x0a00_0000 + i * 4).to_be_bytes()),
                30,
            )
            .unwrap()
        })
        .collect();
    let mut b = batch();
    b.add_table(Family::V4, "t", None, None).unwrap();
    let set = b.add_set(Family::V4, "t", "s", TYPE_IPV4_ADDR, true);
    b.elements(Family::V4, "t", &set, &Keys::Nets(nets.clone()), true);
    commit(&kernel, b).unwrap();
    assert_eq!(generation_over(&mut socket).unwrap(), 2);

    let seq = crate::netlink::nf_tables::sequence(1);
    let request = NfTablesMessage::GetSetElement(SetElementMessage {
        attributes: vec![
            SetElementList::Table("t".into()),
            SetElementList::Set("s".into()),
        ],
    });
    socket.send(&wire::request(V4, request, true, seq)).unwrap();
    let mut kinds = Vec::new();
    while let Ok(datagram) = socket.receive(Instant::now()) {
        for framed in wire::frames(&datagram).unwrap() {
            assert_eq!(framed.seq, seq);
            assert_ne!(framed.flags & NLM_F_MULTI, 0);
            kinds.push(framed.kind);
        }
    }
    assert!(kinds.len() > 3, "several parts: {}", kinds.len());
    assert_eq!(kinds.last(), Some(&NLMSG_DONE));
    assert!(kinds[..kinds.len() - 1].iter().all(|k| *k == 0x0a0c));

    let sets = read::sets(&mut socket, Family::V4, "t", |_| true).unwrap();
    assert_eq!(sets.len(), 1);
    assert_eq!(sets[0].1.nets, nets);
    assert_eq!(
        read::table(&mut socket, Family::V4, "absent").unwrap(),
        None
    );
    assert_eq!(
        read::chain(&mut socket, Family::V4, "t", "absent").unwrap(),
        None
    );
    assert!(read::rules(&mut socket, V4, "absent", "c")
        .unwrap()
        .is_empty());
}

/// The faults a test arms break one answer each, as described.
#[test]
fn armed_faults_break_one_answer() {
    let kernel = FakeKernel::new();
    kernel.arm(Strikes::GetGen, Fault::Truncated);
    let err = generation_over(&mut kernel.socket()).unwrap_err();
    assert!(err.to_string().contains("truncated"), "{err}");
    assert_eq!(
        generation_over(&mut kernel.socket()).unwrap(),
        1,
        "one answer only"
    );

    kernel.arm(Strikes::Dump, Fault::WrongSequence);
    let err = read::table(&mut kernel.socket(), Family::V4, "t").unwrap_err();
    assert!(err.to_string().contains("deadline"), "{err}");

    kernel.arm(Strikes::Dump, Fault::DumpInterrupted);
    let dumps = kernel.counts().dumps;
    assert!(read::rules(&mut kernel.socket(), V4, "t", "c")
        .unwrap()
        .is_empty());
    assert_eq!(
        kernel.counts().dumps,
        dumps + 2,
        "the interrupted dump is made again"
    );

    kernel.arm(Strikes::Batch, Fault::ErrorForAnotherMessage);
    let mut b = batch();
    b.add_table(Family::V4, "t", None, None).unwrap();
    let err = commit(&kernel, b).unwrap_err();
    assert!(err.to_string().contains("deadline"), "{err}");
    assert_eq!(kernel.ruleset(), FakeRuleset::default());
}

/// What a subscribed socket hears, fed to the backend's notification ledger.
fn hear(
    listener: &mut FakeSocket,
    ledger: &mut crate::netlink::nf_tables::notify::Ledger,
) -> usize {
    let mut heard = 0;
    while let Ok(datagram) = listener.receive(Instant::now()) {
        ledger.datagram(&datagram);
        heard += 1;
    }
    heard
}

/// A commit's notifications tell the backend's ledger what it touched: a neighbour's table
/// leaves ours untouched, a commit to ours (or an edit of an unknown table) does not; a
/// refused batch is not heard at all.
#[test]
fn notifications_tell_a_neighbours_commit_from_one_that_touched_our_table() {
    let kernel = FakeKernel::new();
    let mut listener = kernel.subscribe();
    let mut ledger = crate::netlink::nf_tables::notify::Ledger::new("ipmasq");
    let start = kernel.generation();

    let mut b = batch();
    b.add_table(Family::V4, "kube-nat", None, None).unwrap();
    b.add_base_chain(Family::V4, "kube-nat", "post", &nat_postrouting(100));
    commit(&kernel, b).unwrap();
    assert_eq!(
        hear(&mut listener, &mut ledger),
        3,
        "two objects and NEWGEN"
    );
    let theirs = kernel.generation();
    assert!(ledger.untouched(Family::V4, start, theirs));

    let mut b = batch();
    b.add_table(Family::V4, "ipmasq", None, None).unwrap();
    commit(&kernel, b).unwrap();
    hear(&mut listener, &mut ledger);
    let ours = kernel.generation();
    assert!(!ledger.untouched(Family::V4, theirs, ours));
    assert!(ledger.untouched(Family::V6, theirs, ours));

    let mut b = batch();
    b.delete_table(Family::V4, "absent");
    commit(&kernel, b).unwrap_err();
    assert_eq!(hear(&mut listener, &mut ledger), 0, "nothing committed");

    kernel.edit(|_| {});
    hear(&mut listener, &mut ledger);
    assert!(!ledger.untouched(Family::V6, ours, kernel.generation()));
    assert!(
        kernel.socket().receive(Instant::now()).is_err(),
        "an unsubscribed socket hears nothing"
    );
}
