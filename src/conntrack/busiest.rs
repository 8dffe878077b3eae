//! The pod addresses with the most masqueraded flows in the conntrack table, from one dump:
//! what `show` and `explain` name beside the pod share (`podConnectionLimit`), so an operator
//! sees which pod is at its share, not only that someone is. Every source-NATed entry counts,
//! closing TCP connections too until the kernel forgets them (`connlimit` stops counting
//! those earlier), so a pod may show a little above its limit.

use super::judge::Flow;
use crate::plan::Family;
use serde::Serialize;
use std::collections::HashMap;
use std::net::IpAddr;

/// How many pods are named.
pub const NAMED: usize = 5;

/// One pod address and the masqueraded connections it holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodConnections {
    pub address: IpAddr,
    pub connections: usize,
}

/// The busiest pod addresses of a family's table.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Busiest {
    /// Entries read.
    pub examined: usize,
    /// At most [`NAMED`], the most connections first (ties by address).
    pub pods: Vec<PodConnections>,
}

impl Busiest {
    /// `192.168.1.2 3, 192.168.1.3 1`: the pods, busiest first (None when there is none).
    pub fn listed(&self) -> Option<String> {
        (!self.pods.is_empty()).then(|| {
            self.pods
                .iter()
                .map(|p| format!("{} {}", p.address, p.connections))
                .collect::<Vec<_>>()
                .join(", ")
        })
    }
}

/// Counts the source-NATed flows per original source address; the top [`NAMED`].
#[derive(Default)]
pub struct Tally {
    examined: usize,
    by_source: HashMap<IpAddr, usize>,
}

impl Tally {
    pub fn add(&mut self, flow: &Flow) {
        self.examined += 1;
        if flow.rewritten_to().is_some() {
            *self.by_source.entry(flow.source).or_default() += 1;
        }
    }

    pub fn busiest(self) -> Busiest {
        let mut pods: Vec<PodConnections> = self
            .by_source
            .into_iter()
            .map(|(address, connections)| PodConnections {
                address,
                connections,
            })
            .collect();
        pods.sort_by(|a, b| {
            b.connections
                .cmp(&a.connections)
                .then(a.address.cmp(&b.address))
        });
        pods.truncate(NAMED);
        Busiest {
            examined: self.examined,
            pods,
        }
    }
}

/// The busiest pod addresses of `family` in the caller's network namespace (one dump).
pub fn read(family: Family) -> std::io::Result<Busiest> {
    let mut tally = Tally::default();
    super::each_flow(family, |flow| tally.add(flow))?;
    Ok(tally.busiest())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(source: &str, rewritten: bool) -> Flow {
        let source: IpAddr = source.parse().unwrap();
        let destination: IpAddr = "203.0.113.2".parse().unwrap();
        Flow {
            family: Family::V4,
            protocol: 6,
            source,
            destination,
            source_port: Some(40000),
            destination_port: Some(443),
            reply_source: destination,
            reply_destination: if rewritten {
                "203.0.113.1".parse().unwrap()
            } else {
                source
            },
            reply_destination_port: Some(40000),
            icmp_id: None,
            reply_icmp_id: None,
            id: 1,
        }
    }

    #[test]
    fn the_busiest_are_counted_by_masqueraded_flows_and_named_first() {
        let mut tally = Tally::default();
        for _ in 0..3 {
            tally.add(&flow("192.168.1.2", true));
        }
        tally.add(&flow("192.168.1.3", true));
        for _ in 0..9 {
            tally.add(&flow("192.168.1.4", false));
        }
        for i in 10..20 {
            tally.add(&flow(&format!("192.168.2.{i}"), true));
        }
        let busiest = tally.busiest();
        assert_eq!(busiest.examined, 23);
        assert_eq!(busiest.pods.len(), NAMED);
        assert_eq!(busiest.pods[0].address.to_string(), "192.168.1.2");
        assert_eq!(busiest.pods[0].connections, 3);
        assert!(
            busiest
                .pods
                .iter()
                .all(|p| p.address.to_string() != "192.168.1.4"),
            "kept flows are no share"
        );
        assert_eq!(busiest.pods[1].address.to_string(), "192.168.1.3");
        assert!(busiest
            .listed()
            .unwrap()
            .starts_with("192.168.1.2 3, 192.168.1.3 1, "));
        assert_eq!(Busiest::default().listed(), None);
    }
}
