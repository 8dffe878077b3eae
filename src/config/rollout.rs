//! Config rollouts in waves: the next config is a ConfigMap beside the base (`<base>-next`,
//! the same `config` key) whose annotations hold its schedule (waves, soak, start, an optional
//! node selector), the invariants every node must keep, and the marks of a halt or an abort.
//! Which nodes a wave holds is a pure function of the node's name ([`bucket`]), so every agent
//! decides alone and `ipmasq fleet rollout status` can say who comes next. Pure: the agent,
//! `fleet rollout` and `validate` read and write the same words here.
//!
//! The wave in force at a time `t` is the last one whose start (`start + index × soak`) is at
//! or before `t`; a node is in it when its bucket is below the wave's percentage × 100. Once
//! the last wave has soaked the rollout is done, waiting for `promote`.

use super::selector::{Labels, Selector};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

/// The next config's ConfigMap is the base's name with this suffix.
pub const NEXT_SUFFIX: &str = "-next";
/// The waves: percentages of the fleet, increasing, comma-separated (`1,10,50,100`).
pub const WAVES: &str = "ipmasq.io/rollout-waves";
/// The soak between two waves, as a Go duration (`10m`).
pub const SOAK: &str = "ipmasq.io/rollout-soak";
/// When the first wave starts, RFC 3339 (`2026-11-29T15:00:00Z`).
pub const START: &str = "ipmasq.io/rollout-start";
/// Optional: only the nodes this label selector matches take part.
pub const NODE_SELECTOR: &str = "ipmasq.io/rollout-node-selector";
/// Optional: what must stay true on every node of the wave, one invariant a line.
pub const INVARIANTS: &str = "ipmasq.io/rollout-invariants";
/// Written by the first node that cannot take the next config: a JSON [`Halt`].
pub const HALTED: &str = "ipmasq.io/rollout-halted";
/// Written by `fleet rollout abort`: when (RFC 3339); every node is back on the base.
pub const ABORTED: &str = "ipmasq.io/rollout-aborted";
/// Written by `fleet rollout promote` before it rewrites the base: when (RFC 3339); from then
/// on no node writes a halt (a halt could otherwise land between the base's rewrite and the
/// rollout's deletion and send every node "back" to the new base).
pub const PROMOTING: &str = "ipmasq.io/rollout-promoting";
/// Written by `fleet rollout start`: the SHA-256 of the base's `config` text then (`none`
/// without one), so `promote` can refuse to overwrite an edit of the base made since.
pub const BASE_DIGEST: &str = "ipmasq.io/rollout-base-digest";

/// Buckets a node's name hashes into: a wave of `p` % holds the buckets below `p × 100`.
pub const BUCKETS: u32 = 10_000;

/// The next config's ConfigMap name for the base `base`.
pub fn next_name(base: &str) -> String {
    format!("{base}{NEXT_SUFFIX}")
}

/// `node`'s bucket in 0..10,000: bytes 8 to 15 of the SHA-256 of its name, big-endian, modulo
/// 10,000 (the same on every machine and version; bytes 0 to 7 place the node's status writes
/// in `--status-spread`, so the two do not go together).
pub fn bucket(node: &str) -> u32 {
    let hex = super::digest::sha256_hex(node.as_bytes());
    let hash = u64::from_str_radix(&hex[16..32], 16).unwrap_or_default();
    u32::try_from(hash % u64::from(BUCKETS)).unwrap_or_default()
}

/// What an invariant expects of a destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Expect {
    /// The packet keeps its pod source address.
    Keep,
    /// The packet is masqueraded.
    Masquerade,
}

/// `keep|masquerade DEST [from SRC] [via IFACE]`: what must stay true on every node of the
/// wave, judged on the live rules as `explain` judges them. A DEST that is a CIDR is judged at
/// its first and its last address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invariant {
    pub expect: Expect,
    pub destination: ipnet::IpNet,
    pub from: Option<IpAddr>,
    pub via: Option<String>,
}

impl Invariant {
    /// The addresses the invariant is judged at: the destination's first and last.
    pub fn judged_at(&self) -> Vec<IpAddr> {
        let (first, last) = (self.destination.network(), self.destination.broadcast());
        if first == last {
            vec![first]
        } else {
            vec![first, last]
        }
    }
}

impl std::str::FromStr for Invariant {
    type Err = String;

    fn from_str(text: &str) -> Result<Invariant, String> {
        const SHAPE: &str = "keep|masquerade DEST [from SRC] [via IFACE]";
        let mut words = text.split_whitespace();
        let expect = match words.next() {
            Some("keep") => Expect::Keep,
            Some("masquerade") => Expect::Masquerade,
            Some(other) => {
                return Err(format!(
                    "{text:?}: starts with {other:?}, not keep or masquerade (the shape is {SHAPE})"
                ))
            }
            None => return Err(format!("an empty invariant (the shape is {SHAPE})")),
        };
        let destination = words
            .next()
            .ok_or_else(|| format!("{text:?}: no destination (the shape is {SHAPE})"))?;
        let destination = parse_destination(destination)
            .ok_or_else(|| format!("{text:?}: {destination:?} is not an address or a CIDR"))?;
        let mut invariant = Invariant {
            expect,
            destination,
            from: None,
            via: None,
        };
        while let Some(word) = words.next() {
            let value = words.next().ok_or_else(|| {
                format!("{text:?}: {word:?} wants a value (the shape is {SHAPE})")
            })?;
            match word {
                "from" if invariant.from.is_none() => {
                    let source = value
                        .parse()
                        .map_err(|_| format!("{text:?}: from {value:?} is not an address"))?;
                    if IpAddr::is_ipv4(&source) != invariant.destination.addr().is_ipv4() {
                        return Err(format!(
                            "{text:?}: the source and the destination are of two families"
                        ));
                    }
                    invariant.from = Some(source);
                }
                "via" if invariant.via.is_none() => invariant.via = Some(value.to_string()),
                _ => {
                    return Err(format!(
                        "{text:?}: {word:?} is not expected there (the shape is {SHAPE})"
                    ))
                }
            }
        }
        Ok(invariant)
    }
}

fn parse_destination(text: &str) -> Option<ipnet::IpNet> {
    if let Ok(address) = text.parse::<IpAddr>() {
        return Some(ipnet::IpNet::from(address));
    }
    let net: ipnet::IpNet = text.parse().ok()?;
    (net.trunc() == net).then_some(net)
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let word = match self.expect {
            Expect::Keep => "keep",
            Expect::Masquerade => "masquerade",
        };
        if self.destination.prefix_len() == self.destination.max_prefix_len() {
            write!(f, "{word} {}", self.destination.addr())?;
        } else {
            write!(f, "{word} {}", self.destination)?;
        }
        if let Some(from) = self.from {
            write!(f, " from {from}")?;
        }
        if let Some(via) = &self.via {
            write!(f, " via {via}")?;
        }
        Ok(())
    }
}

/// Why a node cannot take the next config, as the first node that saw it wrote it on the
/// `-next` ConfigMap ([`HALTED`]).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Halt {
    pub node: String,
    /// One word: `ConfigRejected`, `KernelRefused`, `InvariantBroken`, `NotSettled`.
    pub reason: String,
    /// What the node saw, in words (the diagnostic, the kernel's error, the broken invariant).
    pub diagnostic: String,
    /// The wave the rollout was in (0-based): `resume` starts it again there.
    pub wave: usize,
    /// When, RFC 3339.
    pub at: String,
}

/// Where a rollout stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Before its start, or in a wave.
    Running,
    /// A node could not take the next config: every node is on the base until `resume`.
    Halted,
    /// `fleet rollout abort`: every node is on the base.
    Aborted,
    /// The last wave has soaked: waiting for `promote`.
    Done,
}

/// A rollout as its annotations describe it.
#[derive(Clone, Debug, PartialEq)]
pub struct Rollout {
    /// The waves' percentages, increasing, each in 1..=100.
    pub waves: Vec<u32>,
    pub soak: Duration,
    pub start: Timestamp,
    /// The selector as written, and parsed.
    pub selector: Option<(String, Selector)>,
    pub invariants: Vec<Invariant>,
    pub halted: Option<Halt>,
    pub aborted: Option<String>,
}

/// One annotation that does not say what it must, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnnotationError {
    pub annotation: &'static str,
    pub reason: String,
}

impl fmt::Display for AnnotationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.annotation, self.reason)
    }
}

/// The waves' text (`1,10,50,100`): percentages in 1..=100, strictly increasing.
pub fn parse_waves(text: &str) -> Result<Vec<u32>, String> {
    let mut waves: Vec<u32> = Vec::new();
    for part in text.split(',') {
        let part = part.trim();
        let wave: u32 = part.parse().map_err(|_| {
            format!("{part:?} is not a whole percentage (waves are like 1,10,50,100)")
        })?;
        if !(1..=100).contains(&wave) {
            return Err(format!("{wave} is not a percentage in 1..100"));
        }
        if waves.last().is_some_and(|last| *last >= wave) {
            return Err(format!(
                "{wave} does not grow on the wave before it: waves only widen"
            ));
        }
        waves.push(wave);
    }
    Ok(waves)
}

/// The waves as `fleet rollout start --waves` takes them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waves(pub Vec<u32>);

impl std::str::FromStr for Waves {
    type Err = String;

    fn from_str(text: &str) -> Result<Waves, String> {
        parse_waves(text).map(Waves)
    }
}

/// The soak's text, a Go duration of at least one second (`10m`).
pub fn parse_soak(text: &str) -> Result<Duration, String> {
    let soak = super::duration::parse_go_duration(text)
        .ok()
        .and_then(|d| d.to_std())
        .ok_or_else(|| format!("{text:?} is not a duration like 30s, 10m or 1h"))?;
    if soak < Duration::from_secs(1) {
        return Err(format!("{text:?} is shorter than a second"));
    }
    Ok(soak)
}

/// The invariants' text: one a line (blank lines skipped).
pub fn parse_invariants(text: &str) -> Result<Vec<Invariant>, String> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(str::parse)
        .collect()
}

/// `result`'s value, or its error noted against `annotation`.
fn noted<T>(
    errors: &mut Vec<AnnotationError>,
    annotation: &'static str,
    result: Result<T, String>,
) -> Option<T> {
    result
        .map_err(|reason| errors.push(AnnotationError { annotation, reason }))
        .ok()
}

impl Rollout {
    /// The rollout the annotations describe; every annotation that is wrong, said.
    pub fn from_annotations(
        annotations: &BTreeMap<String, String>,
    ) -> Result<Rollout, Vec<AnnotationError>> {
        let mut errors = Vec::new();
        let mut required = |annotation: &'static str| match annotations.get(annotation) {
            Some(text) => Some(text.clone()),
            None => {
                errors.push(AnnotationError {
                    annotation,
                    reason: "missing (`ipmasq fleet rollout start` writes every one)".into(),
                });
                None
            }
        };
        let (waves, soak, start) = (required(WAVES), required(SOAK), required(START));
        let waves = waves.and_then(|text| noted(&mut errors, WAVES, parse_waves(&text)));
        let soak = soak.and_then(|text| noted(&mut errors, SOAK, parse_soak(&text)));
        let start = start.and_then(|text| {
            noted(
                &mut errors,
                START,
                text.parse::<Timestamp>()
                    .map_err(|err| format!("{text:?} is not an RFC 3339 time: {err}")),
            )
        });
        let selector = annotations.get(NODE_SELECTOR).and_then(|text| {
            noted(
                &mut errors,
                NODE_SELECTOR,
                Selector::parse(text)
                    .map(|selector| (text.clone(), selector))
                    .map_err(|err| err.to_string()),
            )
        });
        let invariants = annotations
            .get(INVARIANTS)
            .map_or(Some(Vec::new()), |text| {
                noted(&mut errors, INVARIANTS, parse_invariants(text))
            });
        let halted = annotations.get(HALTED).and_then(|text| {
            noted(
                &mut errors,
                HALTED,
                serde_json::from_str::<Halt>(text).map_err(|err| format!("not a halt: {err}")),
            )
        });
        let aborted = annotations.get(ABORTED).cloned();
        match (waves, soak, start, invariants) {
            (Some(waves), Some(soak), Some(start), Some(invariants)) if errors.is_empty() => {
                Ok(Rollout {
                    waves,
                    soak,
                    start,
                    selector,
                    invariants,
                    halted,
                    aborted,
                })
            }
            _ => Err(errors),
        }
    }

    /// The annotations `fleet rollout start` writes for this rollout.
    pub fn annotations(&self) -> BTreeMap<String, String> {
        let mut annotations = BTreeMap::from([
            (
                WAVES.to_string(),
                self.waves
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            (
                SOAK.to_string(),
                super::duration::GoDuration::from_std(self.soak).to_string(),
            ),
            (START.to_string(), self.start.to_string()),
        ]);
        if let Some((text, _)) = &self.selector {
            annotations.insert(NODE_SELECTOR.to_string(), text.clone());
        }
        if !self.invariants.is_empty() {
            let lines: Vec<String> = self.invariants.iter().map(ToString::to_string).collect();
            annotations.insert(INVARIANTS.to_string(), lines.join("\n"));
        }
        annotations
    }

    /// This rollout of `text` as one attempt: its start and the text's SHA-256 (the brake's
    /// latch; `resume` moves the start, so a resumed rollout is a new attempt).
    pub fn key(&self, text: &str) -> String {
        format!(
            "{} {}",
            self.start,
            super::digest::sha256_hex(text.as_bytes())
        )
    }

    /// When wave `index` starts.
    pub fn wave_start(&self, index: usize) -> Timestamp {
        let offset = self
            .soak
            .saturating_mul(u32::try_from(index).unwrap_or(u32::MAX));
        self.start
            .checked_add(SignedDuration::try_from(offset).unwrap_or(SignedDuration::MAX))
            .unwrap_or(Timestamp::MAX)
    }

    /// The wave in force at `now` (0-based; None before the start). A halt holds the wave it
    /// was in.
    pub fn wave_at(&self, now: Timestamp) -> Option<usize> {
        if let Some(halt) = &self.halted {
            return Some(halt.wave.min(self.waves.len().saturating_sub(1)));
        }
        (0..self.waves.len())
            .rev()
            .find(|index| self.wave_start(*index) <= now)
    }

    /// Where the rollout stands at `now`.
    pub fn state(&self, now: Timestamp) -> State {
        if self.aborted.is_some() {
            State::Aborted
        } else if self.halted.is_some() {
            State::Halted
        } else if self.wave_start(self.waves.len()) <= now {
            State::Done
        } else {
            State::Running
        }
    }

    /// Whether a node with these labels takes part (the node selector; all without one).
    pub fn selects(&self, labels: Option<&Labels>) -> bool {
        match &self.selector {
            None => true,
            Some((_, selector)) => labels.is_some_and(|labels| selector.matches(labels)),
        }
    }

    /// The first wave that holds `node` (None: it is in none, its bucket above the last).
    pub fn wave_of(&self, node: &str) -> Option<usize> {
        let bucket = bucket(node);
        self.waves.iter().position(|wave| bucket < wave * 100)
    }

    /// Whether `node` (with `labels`) runs the next config at `now`: the rollout neither halted
    /// nor aborted, the node selected, and its wave started.
    pub fn runs_next(&self, node: &str, labels: Option<&Labels>, now: Timestamp) -> bool {
        if self.halted.is_some() || self.aborted.is_some() || !self.selects(labels) {
            return false;
        }
        match (self.wave_of(node), self.wave_at(now)) {
            (Some(wave), Some(current)) => wave <= current,
            _ => false,
        }
    }

    /// When `node` joins the next config, while it has not yet (None: never, or already).
    pub fn joins_at(
        &self,
        node: &str,
        labels: Option<&Labels>,
        now: Timestamp,
    ) -> Option<Timestamp> {
        if self.halted.is_some() || self.aborted.is_some() || !self.selects(labels) {
            return None;
        }
        let at = self.wave_start(self.wave_of(node)?);
        (at > now).then_some(at)
    }

    /// When the next wave starts after `now`, while one is still to come.
    pub fn next_wave_after(&self, now: Timestamp) -> Option<(usize, Timestamp)> {
        if self.halted.is_some() || self.aborted.is_some() {
            return None;
        }
        (0..self.waves.len())
            .map(|index| (index, self.wave_start(index)))
            .find(|(_, at)| *at > now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn rollout() -> Rollout {
        Rollout::from_annotations(&annotations(&[
            (WAVES, "1,10,50,100"),
            (SOAK, "10m"),
            (START, "2026-11-29T12:00:00Z"),
        ]))
        .unwrap()
    }

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn the_bucket_is_stable_and_spreads_evenly() {
        assert_eq!(bucket("node-a"), bucket("node-a"));
        let mut in_ten_percent = 0;
        for i in 0..10_000 {
            let b = bucket(&format!("node-{i}"));
            assert!(b < BUCKETS);
            if b < 1_000 {
                in_ten_percent += 1;
            }
        }
        assert!(
            (900..1_100).contains(&in_ten_percent),
            "10 % of 10,000 names: {in_ten_percent}"
        );
        // Recomputable by hand: bytes 8..15 of `printf node-a | sha256sum`, modulo 10,000.
        let hex = crate::config::digest::sha256_hex(b"node-a");
        let by_hand = u64::from_str_radix(&hex[16..32], 16).unwrap() % 10_000;
        assert_eq!(u64::from(bucket("node-a")), by_hand);
    }

    #[test]
    fn waves_follow_from_the_start_and_the_soak_and_a_node_once_in_stays_in() {
        let rollout = rollout();
        assert_eq!(rollout.wave_at(at("2026-11-29T11:59:59Z")), None);
        assert_eq!(rollout.wave_at(at("2026-11-29T12:00:00Z")), Some(0));
        assert_eq!(rollout.wave_at(at("2026-11-29T12:19:59Z")), Some(1));
        assert_eq!(rollout.wave_at(at("2026-11-29T12:30:00Z")), Some(3));
        assert_eq!(rollout.state(at("2026-11-29T12:39:59Z")), State::Running);
        assert_eq!(rollout.state(at("2026-11-29T12:40:00Z")), State::Done);
        let nodes: Vec<String> = (0..1_000).map(|i| format!("n{i}")).collect();
        let mut before = 0;
        for minute in 0..45 {
            let now = at("2026-11-29T12:00:00Z")
                .checked_add(SignedDuration::from_mins(minute))
                .unwrap();
            let running = nodes
                .iter()
                .filter(|n| rollout.runs_next(n, None, now))
                .count();
            assert!(running >= before, "a node once in stays in");
            before = running;
            let share = rollout.waves[rollout.wave_at(now).unwrap()] as usize;
            let exact = nodes
                .iter()
                .filter(|n| bucket(n) < share as u32 * 100)
                .count();
            assert_eq!(running, exact, "minute {minute}");
        }
        assert_eq!(before, 1_000, "the last wave holds every node");
    }

    #[test]
    fn a_halt_or_an_abort_puts_every_node_back_and_holds_the_wave() {
        let mut rollout = rollout();
        let late = at("2026-11-29T13:00:00Z");
        assert!(rollout.runs_next("n1", None, late));
        rollout.halted = Some(Halt {
            node: "n7".into(),
            reason: "InvariantBroken".into(),
            diagnostic: "keep 10.0.0.0/8: masqueraded".into(),
            wave: 1,
            at: "2026-11-29T12:12:00Z".into(),
        });
        assert_eq!(rollout.state(late), State::Halted);
        assert_eq!(rollout.wave_at(late), Some(1));
        assert!(!rollout.runs_next("n1", None, late));
        assert_eq!(rollout.next_wave_after(late), None);
        rollout.halted = None;
        rollout.aborted = Some("2026-11-29T12:13:00Z".into());
        assert_eq!(rollout.state(late), State::Aborted);
        assert!(!rollout.runs_next("n1", None, late));
    }

    #[test]
    fn the_selector_limits_the_rollout_to_its_nodes() {
        let mut with = annotations(&[
            (WAVES, "100"),
            (SOAK, "1m"),
            (START, "2026-11-29T12:00:00Z"),
            (NODE_SELECTOR, "pool=gpu"),
        ]);
        let rollout = Rollout::from_annotations(&with).unwrap();
        let now = at("2026-11-29T12:00:01Z");
        let gpu: Labels = [("pool".to_string(), "gpu".to_string())].into();
        assert!(rollout.runs_next("n1", Some(&gpu), now));
        assert!(!rollout.runs_next("n1", Some(&Labels::new()), now));
        assert!(
            !rollout.runs_next("n1", None, now),
            "labels unknown: not in"
        );
        with.insert(NODE_SELECTOR.into(), "pool in (".into());
        let errors = Rollout::from_annotations(&with).unwrap_err();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].annotation, NODE_SELECTOR);
    }

    #[test]
    fn every_wrong_annotation_is_said() {
        let errors = Rollout::from_annotations(&annotations(&[
            (WAVES, "10,5"),
            (SOAK, "10"),
            (INVARIANTS, "keep 10.0.0.0/8\nallow 8.8.8.8"),
        ]))
        .unwrap_err();
        let said: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(said.len(), 4, "{said:#?}");
        assert!(said[0].starts_with(START), "{said:#?}");
        assert!(said[1].contains("waves only widen"), "{said:#?}");
        assert!(said[2].contains("not a duration"), "{said:#?}");
        assert!(said[3].contains("not keep or masquerade"), "{said:#?}");
        assert!(parse_waves("0,100").is_err());
        assert!(parse_waves("1,101").is_err());
        assert!(parse_soak("500ms").is_err());
    }

    #[test]
    fn invariants_read_and_print_alike() {
        for text in [
            "keep 10.0.0.0/8",
            "masquerade 8.8.8.8",
            "keep 192.168.0.0/16 from 10.1.2.3 via eth0",
            "masquerade 2001:db8::/32 via ens3",
        ] {
            let invariant: Invariant = text.parse().unwrap();
            assert_eq!(invariant.to_string(), text);
        }
        let keep: Invariant = "keep 10.0.0.0/8".parse().unwrap();
        assert_eq!(keep.expect, Expect::Keep);
        assert_eq!(
            keep.judged_at(),
            [
                "10.0.0.0".parse::<IpAddr>().unwrap(),
                "10.255.255.255".parse().unwrap()
            ]
        );
        for bad in [
            "",
            "drop 1.2.3.4",
            "keep",
            "keep 10.0.0.1/8",
            "keep 1.2.3.4 from",
            "keep 1.2.3.4 from ::1",
            "keep 1.2.3.4 to 5.6.7.8",
            "keep 1.2.3.4 via a via b",
        ] {
            assert!(bad.parse::<Invariant>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_annotations_written_read_back_as_the_same_rollout() {
        let mut rollout = rollout();
        rollout.invariants = parse_invariants("keep 10.0.0.0/8\nmasquerade 8.8.8.8").unwrap();
        rollout.selector = Some(("pool=gpu".into(), Selector::parse("pool=gpu").unwrap()));
        let again = Rollout::from_annotations(&rollout.annotations()).unwrap();
        assert_eq!(again, rollout);
        let node = (0..100)
            .map(|i| format!("n{i}"))
            .find(|n| rollout.wave_of(n) == Some(2))
            .unwrap();
        let now = at("2026-11-29T12:05:00Z");
        assert_eq!(
            rollout.joins_at(&node, None, now),
            None,
            "not selected without labels"
        );
        rollout.selector = None;
        assert_eq!(
            rollout.joins_at(&node, None, now),
            Some(at("2026-11-29T12:20:00Z"))
        );
        assert_eq!(
            rollout.next_wave_after(now),
            Some((1, at("2026-11-29T12:10:00Z")))
        );
    }
}
