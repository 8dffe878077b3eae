//! ipmasq extension: each pod address's share of the node's egress — how many masqueraded
//! connections one source address may hold at once (`podConnectionLimit`) and how many new
//! ones it may open a second (`podNewConnectionRate`, `podNewConnectionBurst`, optionally per
//! destination): the values, their bounds and their spelling. The decoders live in
//! `check/share.rs`; the backends spell the values as kernel rules.

use serde::ser::{Serialize, SerializeMap, Serializer};
use std::fmt;

/// The largest `podConnectionLimit` (more than any node's conntrack table holds by default).
pub const MAX_CONNECTION_LIMIT: u32 = 1_000_000;
/// The largest `podNewConnectionRate` per second and `podNewConnectionBurst`.
pub const MAX_RATE: u32 = 100_000;
/// The smallest burst when the config gives none: the default of iptables' `hashlimit` and
/// nft's `limit`.
pub const DEFAULT_BURST: u32 = 5;

/// The burst when the config gives none: 5, or a fiftieth of the rate when that is more.
/// `hashlimit` adds its tokens once a kernel tick and never holds more than the burst, so a
/// burst under the tokens of one tick (rate / HZ, HZ from 100 to 1000) lowers the rate to
/// burst × HZ; a fiftieth of the rate keeps every HZ from 50 up exact.
pub fn default_burst(per_second: u32) -> u32 {
    DEFAULT_BURST.max(per_second.div_ceil(50))
}

/// New connections a second from one pod address (or to one destination of it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NewConnectionRate {
    /// New connections a second, from 1 to [`MAX_RATE`].
    pub per_second: u32,
    /// How many may open at once above the rate (the bucket's depth).
    pub burst: u32,
    /// The rate counts per (pod address, destination address, destination port), not per pod
    /// address.
    pub per_destination: bool,
}

impl fmt::Display for NewConnectionRate {
    /// `200/s burst 5`, `200/s burst 5 per destination`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/s burst {}", self.per_second, self.burst)?;
        if self.per_destination {
            f.write_str(" per destination")?;
        }
        Ok(())
    }
}

/// A pod address's share of the node's egress; both parts absent means no limit at all (and
/// no rule: the drop-in stays byte for byte).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PodShare {
    /// Masqueraded connections one pod address may hold at once.
    pub connection_limit: Option<u32>,
    /// New masqueraded connections a second one pod address may open.
    pub new_connection_rate: Option<NewConnectionRate>,
}

impl PodShare {
    /// Whether the config limits anything.
    pub fn is_limited(&self) -> bool {
        self.connection_limit.is_some() || self.new_connection_rate.is_some()
    }
}

impl fmt::Display for PodShare {
    /// `at most 512 connections at once, 200/s burst 5 new`, or `unlimited`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.connection_limit, self.new_connection_rate) {
            (None, None) => f.write_str("unlimited"),
            (Some(n), None) => write!(f, "at most {n} connections at once"),
            (None, Some(r)) => write!(f, "{r} new connections"),
            (Some(n), Some(r)) => write!(f, "at most {n} connections at once, {r} new"),
        }
    }
}

impl Serialize for PodShare {
    /// The config's keys, only those that limit something (a flattened part of `Config`).
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        if let Some(limit) = self.connection_limit {
            map.serialize_entry("podConnectionLimit", &limit)?;
        }
        if let Some(rate) = self.new_connection_rate {
            map.serialize_entry("podNewConnectionRate", &format!("{}/s", rate.per_second))?;
            map.serialize_entry("podNewConnectionBurst", &rate.burst)?;
            if rate.per_destination {
                map.serialize_entry("podNewConnectionRatePerDestination", &true)?;
            }
        }
        map.end()
    }
}

/// Why a `podNewConnectionRate` text is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RateError {
    #[error("must be written as `<count>/s`, e.g. \"200/s\"")]
    Syntax,
    #[error("must be from 1/s to {MAX_RATE}/s")]
    OutOfRange,
}

/// `"200/s"` (also `200/second`): new connections a second.
pub fn parse_rate(text: &str) -> Result<u32, RateError> {
    let (count, unit) = text.trim().split_once('/').ok_or(RateError::Syntax)?;
    if !matches!(unit.trim(), "s" | "second") {
        return Err(RateError::Syntax);
    }
    let count = count.trim();
    if count.is_empty() || !count.bytes().all(|b| b.is_ascii_digit()) {
        return Err(RateError::Syntax);
    }
    match count.parse::<u64>() {
        Ok(n) if (1..=u64::from(MAX_RATE)).contains(&n) => Ok(n as u32),
        _ => Err(RateError::OutOfRange),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_and_refuse() {
        assert_eq!(parse_rate("200/s"), Ok(200));
        assert_eq!(parse_rate(" 1/second "), Ok(1));
        assert_eq!(parse_rate("100000/s"), Ok(MAX_RATE));
        assert_eq!(parse_rate("100001/s"), Err(RateError::OutOfRange));
        assert_eq!(parse_rate("0/s"), Err(RateError::OutOfRange));
        assert_eq!(
            parse_rate("99999999999999999999/s"),
            Err(RateError::OutOfRange)
        );
        for bad in ["200", "200/m", "/s", "-1/s", "2.5/s", "x/s", ""] {
            assert_eq!(parse_rate(bad), Err(RateError::Syntax), "{bad:?}");
        }
    }

    #[test]
    fn a_share_is_said_in_words() {
        let rate = NewConnectionRate {
            per_second: 10,
            burst: DEFAULT_BURST,
            per_destination: true,
        };
        let share = PodShare {
            connection_limit: Some(80),
            new_connection_rate: Some(rate),
        };
        assert_eq!(
            share.to_string(),
            "at most 80 connections at once, 10/s burst 5 per destination new"
        );
        assert_eq!(PodShare::default().to_string(), "unlimited");
        assert!(!PodShare::default().is_limited());
        assert!(share.is_limited());
    }
}
