//! Existing flows follow a rules change: the kernel decides NAT on a flow's first packet, so
//! after a change the agent reads the conntrack table over ctnetlink and deletes exactly the
//! entries whose NAT the change made wrong (see [`judge`]), in the same pass; their next
//! packet is tracked anew under the rules in force. The table is read and written over
//! `crate::netlink::conntrack`.

pub mod busiest;
pub mod health;
pub mod judge;

use crate::netlink::conntrack::{self as ctnetlink, Deleter};
use crate::netlink::dump::Ended;
use crate::plan::Family;
use judge::{Decides, Disposition, Flow, ResetContext, ResetScope};
use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Most flows a dry run or a log names; the rest are counted.
pub const LISTED: usize = 50;

/// Reads every entry of `family` and hands each flow to `each`; how many there were, and
/// whether the dump was whole.
pub fn each_flow(family: Family, mut each: impl FnMut(&Flow)) -> io::Result<(usize, bool)> {
    let socket = ctnetlink::socket()?;
    let mut seen = 0;
    let ended = ctnetlink::dump(&socket, family, |parsed| {
        seen += 1;
        each(&parsed.flow);
        Ok(())
    })?;
    Ok((seen, ended == Ended::Whole))
}

/// What one reset did (or, in a dry run, would do).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResetReport {
    /// Entries read.
    pub examined: usize,
    /// Entries deleted (in a dry run: that would be).
    pub reset: usize,
    /// Entries to delete that were gone when the delete came (expired, or replaced).
    pub gone: usize,
    /// Contradicting entries left alone: their protocol is outside the reset scope.
    pub left: usize,
    /// The first [`LISTED`] flows reset (or to be), described.
    pub listed: Vec<String>,
    /// The first [`LISTED`] flows left, described.
    pub listed_left: Vec<String>,
    /// A concurrent change interrupted the dump: some entries may not have been read.
    pub interrupted: bool,
    pub took: Duration,
}

/// Counts a flow and names the first [`LISTED`] of them.
fn note(count: &mut usize, listed: &mut Vec<String>, flow: &Flow, now: judge::Outcome) {
    *count += 1;
    if listed.len() < LISTED {
        listed.push(format!("{} (now: {now})", flow.describe()));
    }
}

/// How many flows this network namespace tracks (its `nf_conntrack_count`); None when the
/// kernel does not say (conntrack not loaded, no /proc).
fn tracked_here() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/net/netfilter/nf_conntrack_count")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Reads `family`'s conntrack table and deletes (unless `dry_run`) the entries whose NAT the
/// change from `before` to `after` made wrong, within `scope`.
pub fn reset(
    family: Family,
    before: &dyn Decides,
    after: &dyn Decides,
    scope: ResetScope,
    dry_run: bool,
) -> io::Result<ResetReport> {
    let started = Instant::now();
    if tracked_here() == Some(0) {
        // Nothing tracked in this network namespace: no dump (even an empty one walks every
        // bucket of the kernel's table: docs/benchmarks.md says how long).
        return Ok(ResetReport {
            took: started.elapsed(),
            ..ResetReport::default()
        });
    }
    let addresses = crate::addresses::node_address_set()?;
    let is_node_address = |a: IpAddr| addresses.contains(&a);
    let mut routes: Option<crate::addresses::Routes> = None;
    let mut known: HashMap<IpAddr, Option<String>> = HashMap::new();
    let mut interface_to = |destination: IpAddr| {
        known
            .entry(destination)
            .or_insert_with(|| {
                if routes.is_none() {
                    routes = crate::addresses::Routes::open().ok();
                }
                routes.as_mut()?.interface(destination).ok().flatten()
            })
            .clone()
    };
    let mut node = ResetContext {
        is_node_address: &is_node_address,
        interface_to: &mut interface_to,
        scope,
    };
    let mut deleter = if dry_run {
        None
    } else {
        Some(Deleter::open()?)
    };
    let mut report = ResetReport::default();
    let socket = ctnetlink::socket()?;
    let ended = ctnetlink::dump(&socket, family, |parsed| {
        report.examined += 1;
        match judge::dispose(&parsed.flow, before, after, &mut node) {
            Disposition::Untouched => {}
            Disposition::Reset { now } => {
                note(&mut report.reset, &mut report.listed, &parsed.flow, now);
                if let Some(deleter) = deleter.as_mut() {
                    deleter.add(parsed)?;
                }
            }
            Disposition::Left { now } => {
                note(&mut report.left, &mut report.listed_left, &parsed.flow, now)
            }
        }
        Ok(())
    })?;
    if let Some(mut deleter) = deleter {
        deleter.flush()?;
        report.reset = deleter.deleted;
        report.gone = deleter.gone;
    }
    report.interrupted = ended == Ended::Interrupted;
    report.took = started.elapsed();
    Ok(report)
}
