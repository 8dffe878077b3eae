//! Address sets as integer intervals: the smallest CIDR list for a set of CIDRs, the
//! complement of a set, and the addresses a list of decisions keeps by longest-prefix match.
//! Neutral arithmetic that backends without first-match rule lists (nftables' interval sets)
//! and scoping rules need.

use super::{Action, Decision, Family};
use ipnet::IpNet;

/// A network as an inclusive integer range (IPv4 in the low 32 bits).
fn range(net: &IpNet) -> (u128, u128) {
    match net {
        IpNet::V4(n) => (
            u128::from(u32::from(n.network())),
            u128::from(u32::from(n.broadcast())),
        ),
        IpNet::V6(n) => (u128::from(n.network()), u128::from(n.broadcast())),
    }
}

fn bits(family: Family) -> u32 {
    match family {
        Family::V4 => 32,
        Family::V6 => 128,
    }
}

/// The CIDRs of `family` that hold no address of `nets` (their complement), smallest list.
pub fn complement(family: Family, nets: &[IpNet]) -> Vec<IpNet> {
    let ranges = merge(nets.iter().filter(|n| family.holds(n)).map(range).collect());
    let last_address = if family == Family::V4 {
        u128::from(u32::MAX)
    } else {
        u128::MAX
    };
    let mut out = Vec::new();
    let mut next = Some(0u128);
    for (first, last) in ranges {
        if let Some(from) = next {
            if first > from {
                blocks(from, first - 1, bits(family), &mut out);
            }
        }
        next = last.checked_add(1);
    }
    if let Some(from) = next.filter(|&n| n <= last_address) {
        blocks(from, last_address, bits(family), &mut out);
    }
    out
}

/// The addresses `decisions` keep when the longest matching prefix decides (a tie between
/// equal CIDRs goes to the earlier decision), as the smallest sorted CIDR list. CIDRs nest or
/// are disjoint, so one sweep over them sorted by start (outer first) with a stack of the
/// open ones paints every address with its innermost decision.
pub fn kept_by_longest_prefix(family: Family, decisions: &[Decision]) -> Vec<IpNet> {
    let mut out = Vec::new();
    for (first, last) in kept_ranges(family, decisions) {
        blocks(first, last, bits(family), &mut out);
    }
    out
}

/// [`kept_by_longest_prefix`] as sorted, merged inclusive integer ranges (see [`number`]).
pub fn kept_ranges(family: Family, decisions: &[Decision]) -> Vec<(u128, u128)> {
    let mut items: Vec<(u128, u8, usize)> = decisions
        .iter()
        .enumerate()
        .filter(|(_, d)| family.holds(&d.destination))
        .map(|(i, d)| (range(&d.destination).0, d.destination.prefix_len(), i))
        .collect();
    items.sort_unstable();
    items.dedup_by_key(|(first, prefix, _)| (*first, *prefix));
    let mut kept: Vec<(u128, u128)> = Vec::new();
    let mut paint = |from: u128, to: u128, index: usize| {
        if from <= to && decisions[index].action == Action::KeepSource {
            kept.push((from, to));
        }
    };
    // Open decisions (index, last address) and the first address not yet painted.
    let mut open: Vec<(usize, u128)> = Vec::new();
    let mut cursor: Option<u128> = Some(0);
    for (first, _, index) in items {
        let last = range(&decisions[index].destination).1;
        while let Some(&(top, top_last)) = open.last() {
            if top_last >= first {
                break;
            }
            if let Some(from) = cursor {
                paint(from, top_last, top);
            }
            cursor = top_last.checked_add(1);
            open.pop();
        }
        if let (Some(&(top, _)), Some(from)) = (open.last(), cursor) {
            if first > from {
                paint(from, first - 1, top);
            }
        }
        cursor = Some(first);
        open.push((index, last));
    }
    while let Some((top, top_last)) = open.pop() {
        if let Some(from) = cursor {
            paint(from, top_last, top);
        }
        cursor = top_last.checked_add(1);
    }
    merge(kept)
}

/// An address as the integer the ranges here are made of (IPv4 in the low 32 bits).
pub fn number(addr: std::net::IpAddr) -> u128 {
    match addr {
        std::net::IpAddr::V4(a) => u128::from(u32::from(a)),
        std::net::IpAddr::V6(a) => u128::from(a),
    }
}

/// Whether sorted, disjoint `ranges` hold `value`.
pub fn ranges_hold(ranges: &[(u128, u128)], value: u128) -> bool {
    let after = ranges.partition_point(|(first, _)| *first <= value);
    after > 0 && ranges[after - 1].1 >= value
}

/// The smallest list of CIDRs that covers exactly what `nets` cover, sorted (IPv4 first):
/// what `IpNet::aggregate` returns, computed on integers (sort the intervals, merge the ones
/// that overlap or touch, cut each merged range into aligned blocks), several times faster at
/// 100,000 CIDRs, where it is most of the cost of a one-CIDR change.
pub fn aggregate(nets: impl Iterator<Item = IpNet>) -> Vec<IpNet> {
    let mut v4: Vec<(u128, u128)> = Vec::new();
    let mut v6: Vec<(u128, u128)> = Vec::new();
    for net in nets {
        match net {
            IpNet::V4(n) => v4.push((
                u128::from(u32::from(n.network())),
                u128::from(u32::from(n.broadcast())),
            )),
            IpNet::V6(n) => v6.push((u128::from(n.network()), u128::from(n.broadcast()))),
        }
    }
    let mut out = Vec::with_capacity(v4.len() + v6.len());
    for (ranges, bits) in [(v4, 32u32), (v6, 128u32)] {
        for (first, last) in merge(ranges) {
            blocks(first, last, bits, &mut out);
        }
    }
    out
}

/// Sorts inclusive ranges and merges those that overlap or touch.
pub fn merge(mut ranges: Vec<(u128, u128)>) -> Vec<(u128, u128)> {
    ranges.sort_unstable();
    let mut merged: Vec<(u128, u128)> = Vec::with_capacity(ranges.len());
    for (first, last) in ranges {
        match merged.last_mut() {
            Some(prev) if first <= prev.1.saturating_add(1) => prev.1 = prev.1.max(last),
            _ => merged.push((first, last)),
        }
    }
    merged
}

/// Cuts the inclusive range `first..=last` of a `bits`-bit space into aligned CIDR blocks.
pub fn blocks(mut first: u128, last: u128, bits: u32, out: &mut Vec<IpNet>) {
    loop {
        // The largest block that starts at `first` (alignment) and stays within `last`.
        let align = if first == 0 {
            bits
        } else {
            first.trailing_zeros().min(bits)
        };
        let span = last - first;
        let fits = if span == u128::MAX {
            128
        } else {
            127 - (span + 1).leading_zeros()
        };
        let size_log2 = align.min(fits).min(bits);
        let prefix = (bits - size_log2) as u8;
        let net = if bits == 32 {
            IpNet::V4(
                ipnet::Ipv4Net::new(std::net::Ipv4Addr::from(first as u32), prefix)
                    .expect("prefix within 32"),
            )
        } else {
            IpNet::V6(
                ipnet::Ipv6Net::new(std::net::Ipv6Addr::from(first), prefix)
                    .expect("prefix within 128"),
            )
        };
        out.push(net);
        let block_last = if size_log2 >= 128 {
            u128::MAX
        } else {
            first + ((1u128 << size_log2) - 1)
        };
        if block_last >= last {
            return;
        }
        first = block_last + 1;
    }
}
