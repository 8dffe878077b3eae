//! Which pod held an address when: the time-indexed directory the SNAT log names pods from
//! (API mode). The pod watch (`crate::cluster::pods`) tells it each pod's addresses as the
//! API says them, with the moment the agent heard; a line is resolved at its flow's time, so
//! an address a new pod got a second after the old one left names each pod for its own
//! flows. An address two pods claim at once (the old one still terminating) is the newer
//! claim's: the network plugin hands an address out again only once its old sandbox is gone.
//! Claims that ended longer ago than [`RETENTION`] are forgotten.

use super::line::Micros;
use super::pressure::{original_tuple, OriginalTuple};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, RwLock};

/// How long a claim is kept after it ended: an `end` event of a flow its pod opened comes
/// when conntrack drops the entry, at most a few minutes after the flow's last packet (an
/// established TCP entry idle for days is the exception, and is resolved by its `new`'s pod
/// while the agent still tracks it).
pub const RETENTION: Micros = 15 * 60 * 1_000_000;

/// The most claims kept: live ones are a node's pods' addresses (a few hundred); ended ones
/// beyond this are forgotten oldest first, so pods churning faster than the retention cannot
/// grow the directory.
pub const MAX_CLAIMS: usize = 65_536;

/// A pod as the log names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PodIdentity {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl PodIdentity {
    /// `namespace/name`, as the log and `who --pod` spell it.
    pub fn qualified(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// One pod's hold on one address, from `from` until `until` (open while it still holds it).
#[derive(Clone, Debug)]
struct Claim {
    pod: Arc<PodIdentity>,
    from: Micros,
    until: Option<Micros>,
}

impl Claim {
    fn held_at(&self, at: Micros) -> bool {
        self.from <= at && self.until.is_none_or(|until| at < until)
    }
}

/// The directory: claims by address, and each live pod's addresses by uid.
#[derive(Debug, Default)]
pub struct PodDirectory {
    claims: HashMap<IpAddr, Vec<Claim>>,
    addresses_of: HashMap<String, (Arc<PodIdentity>, Vec<IpAddr>)>,
    /// Claims kept, and how many there were after the last pruning (pruned again once they
    /// have doubled, or pass the cap: amortised).
    kept: usize,
    pruned_at: usize,
}

/// The directory as the watch writes it and the event thread reads it.
pub type SharedPods = Arc<RwLock<PodDirectory>>;

impl PodDirectory {
    /// `pod` holds exactly `addresses` from `at` on: claims it no longer has end at `at`,
    /// new ones start there.
    pub fn holds(&mut self, pod: PodIdentity, addresses: Vec<IpAddr>, at: Micros) {
        let uid = pod.uid.clone();
        let before = self
            .addresses_of
            .get(&uid)
            .map(|(_, addresses)| addresses.clone())
            .unwrap_or_default();
        let pod = Arc::new(pod);
        for gone in before.iter().filter(|a| !addresses.contains(a)) {
            self.end(*gone, &uid, at);
        }
        for new in addresses.iter().filter(|a| !before.contains(a)) {
            self.claims.entry(*new).or_default().push(Claim {
                pod: pod.clone(),
                from: at,
                until: None,
            });
            self.kept += 1;
        }
        // The same claims under a renamed identity would be a new uid: only the addresses
        // change here.
        if addresses.is_empty() {
            self.addresses_of.remove(&uid);
        } else {
            self.addresses_of.insert(uid, (pod, addresses));
        }
        self.prune(at);
    }

    /// Forgets the claims that ended more than [`RETENTION`] before `at`, and past
    /// [`MAX_CLAIMS`] the ended ones of the older half of the span kept, again until under it.
    fn prune(&mut self, at: Micros) {
        if self.kept <= 2 * self.pruned_at + 1024 && self.kept <= MAX_CLAIMS {
            return;
        }
        let mut horizon = at - RETENTION;
        self.forget_before(horizon);
        while self.kept > MAX_CLAIMS && horizon < at {
            horizon += (at - horizon) / 2 + 1;
            self.forget_before(horizon);
        }
        self.pruned_at = self.kept;
    }

    /// The pod `uid` is gone at `at`: its claims end.
    pub fn gone(&mut self, uid: &str, at: Micros) {
        if let Some((_, addresses)) = self.addresses_of.remove(uid) {
            for address in addresses {
                self.end(address, uid, at);
            }
        }
    }

    /// Every pod not in `live` is gone at `at` (after a full list: what it did not name).
    pub fn keep_only(&mut self, live: &std::collections::HashSet<String>, at: Micros) {
        let gone: Vec<String> = self
            .addresses_of
            .keys()
            .filter(|uid| !live.contains(*uid))
            .cloned()
            .collect();
        for uid in gone {
            self.gone(&uid, at);
        }
    }

    fn end(&mut self, address: IpAddr, uid: &str, at: Micros) {
        if let Some(claims) = self.claims.get_mut(&address) {
            for claim in claims
                .iter_mut()
                .filter(|c| c.pod.uid == uid && c.until.is_none())
            {
                claim.until = Some(at.max(claim.from));
            }
        }
    }

    fn forget_before(&mut self, horizon: Micros) {
        self.claims.retain(|_, claims| {
            claims.retain(|c| c.until.is_none_or(|until| until >= horizon));
            !claims.is_empty()
        });
        self.kept = self.claims.values().map(Vec::len).sum();
    }

    /// The pod that held `address` at `at`: of the claims that held it then, the newest.
    pub fn at(&self, address: IpAddr, at: Micros) -> Option<Arc<PodIdentity>> {
        self.claims
            .get(&address.to_canonical())?
            .iter()
            .filter(|c| c.held_at(at))
            .max_by_key(|c| c.from)
            .map(|c| c.pod.clone())
    }

    /// The one pod that held `address` in all the claims kept up to `at` (those of the
    /// retention): a flow's end whose start is unknown is that pod's; when the address
    /// changed hands, it could be either's, and is no one's.
    pub fn sole_holder(&self, address: IpAddr, at: Micros) -> Option<Arc<PodIdentity>> {
        let mut holders = self
            .claims
            .get(&address.to_canonical())?
            .iter()
            .filter(|c| c.from <= at);
        let first = holders.next()?;
        holders
            .all(|c| c.pod.uid == first.pod.uid)
            .then(|| first.pod.clone())
    }

    /// Pods known with at least one address.
    pub fn live_pods(&self) -> usize {
        self.addresses_of.len()
    }

    /// Claims kept (live, and ended ones not yet forgotten).
    pub fn claims(&self) -> usize {
        self.kept
    }
}

/// API mode's naming of pods in the SNAT log: the directory the pod watch keeps, and this
/// node's name.
#[derive(Clone, Debug)]
pub struct PodNames {
    pub directory: SharedPods,
    pub node: String,
}

/// Names the pod behind each event: a `new` by the pod that held its source when the agent
/// read it, an `end` by the pod its `new` named (flows remembered by original tuple, at most
/// `cap` of them: past that, and after events were lost, the memory starts again). An `end`
/// with no `new` remembered (opened before the agent, or forgotten) names the address's
/// holder only when one pod alone held it through the retention: otherwise no pod.
pub struct Namer {
    pub names: PodNames,
    opened_by: HashMap<OriginalTuple, Arc<PodIdentity>>,
    cap: usize,
}

impl Namer {
    pub fn new(names: PodNames, cap: usize) -> Namer {
        Namer {
            names,
            opened_by: HashMap::new(),
            cap: cap.max(1),
        }
    }

    /// The pod of `event`, heard at `at`.
    pub fn pod_of(
        &mut self,
        event: &crate::netlink::conntrack::Event,
        at: Micros,
    ) -> Option<Arc<PodIdentity>> {
        use crate::netlink::conntrack::EventKind;
        let source = event.flow.source;
        let key = original_tuple(&event.flow);
        match event.kind {
            EventKind::New => {
                let pod = self.directory().at(source, at);
                if let Some(pod) = &pod {
                    if self.opened_by.len() >= self.cap {
                        self.opened_by.clear();
                    }
                    self.opened_by.insert(key, pod.clone());
                }
                pod
            }
            EventKind::End => match self.opened_by.remove(&key) {
                Some(pod) => Some(pod),
                None => self.directory().sole_holder(source, at),
            },
        }
    }

    /// Events were lost: the `end`s of flows remembered may never come.
    pub fn forget_flows(&mut self) {
        self.opened_by = HashMap::new();
    }

    fn directory(&self) -> std::sync::RwLockReadGuard<'_, PodDirectory> {
        self.names
            .directory
            .read()
            .unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str) -> PodIdentity {
        PodIdentity {
            namespace: "default".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        }
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn an_address_reused_a_second_later_names_each_pod_for_its_own_time() {
        let mut pods = PodDirectory::default();
        let address = ip("192.168.1.5");
        pods.holds(pod("a"), vec![address], 1_000_000);
        pods.gone("uid-a", 5_000_000);
        pods.holds(pod("b"), vec![address], 6_000_000);
        let name = |at| pods.at(address, at).map(|p| p.name.clone());
        assert_eq!(name(999_999), None);
        assert_eq!(name(1_000_000).as_deref(), Some("a"));
        assert_eq!(name(4_999_999).as_deref(), Some("a"));
        assert_eq!(name(5_500_000), None);
        assert_eq!(name(6_000_000).as_deref(), Some("b"));
        // An end of unknown start heard between the two: a alone held it so far.
        assert_eq!(pods.sole_holder(address, 5_500_000).unwrap().name, "a");
        // After b took it, an end of unknown start could be either's: no one's.
        assert!(pods.sole_holder(address, 6_500_000).is_none());
        assert_eq!(pods.live_pods(), 1);
    }

    fn event(
        kind: crate::netlink::conntrack::EventKind,
        port: u16,
        id: u32,
    ) -> crate::netlink::conntrack::Event {
        let flow = crate::netlink::conntrack::Flow {
            family: crate::plan::Family::V4,
            protocol: 17,
            source: ip("192.168.1.5"),
            destination: ip("198.51.100.9"),
            source_port: Some(port),
            destination_port: Some(53),
            reply_source: ip("198.51.100.9"),
            reply_destination: ip("203.0.113.1"),
            reply_destination_port: Some(port),
            icmp_id: None,
            reply_icmp_id: None,
            id,
        };
        crate::netlink::conntrack::Event {
            kind,
            flow,
            counters: None,
        }
    }

    /// An `end` names its `new`'s pod even after the address changed hands, two live flows
    /// sharing a conntrack id keep their own pods, and an `end` whose `new` is unknown names
    /// no one once two pods held the address.
    #[test]
    fn an_end_names_its_news_pod_and_an_unknown_end_only_a_sole_holder() {
        use crate::netlink::conntrack::EventKind::{End, New};
        let directory: SharedPods = Default::default();
        let names = PodNames {
            directory: directory.clone(),
            node: "node-a".into(),
        };
        let mut namer = Namer::new(names, 100);
        let address = ip("192.168.1.5");
        directory
            .write()
            .unwrap()
            .holds(pod("a"), vec![address], 1_000_000);
        let name = |pod: Option<Arc<PodIdentity>>| pod.map(|p| p.name.clone());
        assert_eq!(
            name(namer.pod_of(&event(New, 1000, 7), 2_000_000)).as_deref(),
            Some("a")
        );
        // Before a's new lines had ends, an unknown flow's end: a alone held the address.
        assert_eq!(
            name(namer.pod_of(&event(End, 999, 1), 2_500_000)).as_deref(),
            Some("a")
        );
        directory.write().unwrap().gone("uid-a", 3_000_000);
        directory
            .write()
            .unwrap()
            .holds(pod("b"), vec![address], 3_100_000);
        // b's flow has the same conntrack id as a's, on another tuple.
        assert_eq!(
            name(namer.pod_of(&event(New, 2000, 7), 3_200_000)).as_deref(),
            Some("b")
        );
        assert_eq!(
            name(namer.pod_of(&event(End, 1000, 7), 3_300_000)).as_deref(),
            Some("a")
        );
        assert_eq!(
            name(namer.pod_of(&event(End, 2000, 7), 3_400_000)).as_deref(),
            Some("b")
        );
        // An end of a flow the agent never saw open: a or b, so no one.
        assert_eq!(namer.pod_of(&event(End, 3000, 9), 3_500_000), None);
        // Events lost: what was remembered is forgotten, and said as no one.
        assert_eq!(
            name(namer.pod_of(&event(New, 4000, 10), 3_600_000)).as_deref(),
            Some("b")
        );
        namer.forget_flows();
        assert_eq!(namer.pod_of(&event(End, 4000, 10), 3_700_000), None);
    }

    #[test]
    fn the_newer_claim_wins_while_the_old_pod_still_terminates() {
        let mut pods = PodDirectory::default();
        let address = ip("192.168.1.5");
        pods.holds(pod("old"), vec![address], 1_000_000);
        pods.holds(pod("new"), vec![address], 2_000_000);
        assert_eq!(pods.at(address, 3_000_000).unwrap().name, "new");
        assert_eq!(pods.at(address, 1_500_000).unwrap().name, "old");
    }

    #[test]
    fn a_changed_address_list_ends_and_starts_claims_and_a_list_ends_the_missing() {
        let mut pods = PodDirectory::default();
        let (v4, v6) = (ip("192.168.1.5"), ip("fd00::5"));
        pods.holds(pod("a"), vec![v4], 1_000_000);
        pods.holds(pod("a"), vec![v4, v6], 2_000_000);
        pods.holds(pod("a"), vec![v6], 3_000_000);
        assert_eq!(pods.at(v4, 2_500_000).unwrap().name, "a");
        assert!(pods.at(v4, 3_000_000).is_none());
        assert_eq!(pods.at(v6, 3_000_000).unwrap().name, "a");
        // A v4-mapped address asked for is its v4 form.
        assert!(pods.at(ip("::ffff:192.168.1.5"), 2_500_000).is_some());
        pods.keep_only(&Default::default(), 4_000_000);
        assert!(pods.at(v6, 4_000_000).is_none());
        assert_eq!(pods.live_pods(), 0);
    }

    #[test]
    fn churn_faster_than_the_retention_keeps_at_most_the_cap() {
        let mut pods = PodDirectory::default();
        for i in 0..(MAX_CLAIMS as i64 + 1000) {
            let address = IpAddr::from([10, (i >> 16) as u8, (i >> 8) as u8, i as u8]);
            pods.holds(pod(&format!("p{i}")), vec![address], i * 10);
            pods.gone(&format!("uid-p{i}"), i * 10 + 5);
        }
        assert!(pods.claims() <= MAX_CLAIMS, "{}", pods.claims());
        assert_eq!(pods.live_pods(), 0);
    }

    #[test]
    fn ended_claims_are_forgotten_after_the_retention_live_ones_never() {
        let mut pods = PodDirectory::default();
        pods.holds(pod("a"), vec![ip("192.168.1.5")], 0);
        pods.gone("uid-a", 1_000_000);
        pods.holds(pod("b"), vec![ip("192.168.1.6")], 0);
        pods.forget_before(1_000_000);
        assert_eq!(pods.claims(), 2, "ended at the horizon: kept");
        pods.forget_before(1_000_001);
        assert_eq!(pods.claims(), 1);
        assert_eq!(pods.at(ip("192.168.1.5"), 500_000), None);
        assert_eq!(pods.at(ip("192.168.1.6"), 500_000).unwrap().name, "b");
    }
}
