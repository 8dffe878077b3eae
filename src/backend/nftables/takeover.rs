//! Taking over from iptables-nft in one transaction: its chain and its POSTROUTING jumps live in
//! nf_tables too (table `ip nat` / `ip6 nat`), so the first install of our table can delete
//! them in the same `nft -f` batch. There is then no moment with both or neither.

use super::render::family_word;
use crate::plan::Family;
use serde_json::Value;

/// The nft statements that delete iptables-nft's `chain` and every POSTROUTING rule jumping
/// to it, from two `nft -j` listings: the family's chains, and its nat POSTROUTING chain
/// (either may be empty: no such table or chain). None when there is nothing to delete.
pub(super) fn deletions(
    family: Family,
    chain: &str,
    chains_listing: &str,
    postrouting_listing: &str,
) -> Option<String> {
    let f = family_word(family);
    let objects = |listing: &str| -> Vec<Value> {
        serde_json::from_str::<Value>(listing)
            .ok()
            .and_then(|v| v.get("nftables").and_then(Value::as_array).cloned())
            .unwrap_or_default()
    };
    let mut script = String::new();
    for object in objects(postrouting_listing) {
        let Some(rule) = object.get("rule") else {
            continue;
        };
        let in_nat_postrouting = rule["table"] == "nat" && rule["chain"] == "POSTROUTING";
        let jumps_to_chain = rule["expr"]
            .as_array()
            .is_some_and(|exprs| exprs.iter().any(|e| e["jump"]["target"] == chain));
        if let (true, true, Some(handle)) =
            (in_nat_postrouting, jumps_to_chain, rule["handle"].as_u64())
        {
            script.push_str(&format!(
                "delete rule {f} nat POSTROUTING handle {handle}\n"
            ));
        }
    }
    let chain_exists = objects(chains_listing).iter().any(|object| {
        object
            .get("chain")
            .is_some_and(|c| c["table"] == "nat" && c["name"] == chain)
    });
    if chain_exists {
        script.push_str(&format!("flush chain {f} nat {chain}\n"));
        script.push_str(&format!("delete chain {f} nat {chain}\n"));
    }
    (!script.is_empty()).then_some(script)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `nft -j list chain ip nat POSTROUTING` prints for iptables-nft's rules: kube-proxy's
    /// jump, and ours (a comment and an addrtype match, then the jump).
    const POSTROUTING: &str = r#"{"nftables": [{"metainfo": {"version": "1.0.6"}},
      {"chain": {"family": "ip", "table": "nat", "name": "POSTROUTING", "handle": 2}},
      {"rule": {"family": "ip", "table": "nat", "chain": "POSTROUTING", "handle": 7,
        "expr": [{"counter": {"packets": 0, "bytes": 0}}, {"jump": {"target": "KUBE-POSTROUTING"}}]}},
      {"rule": {"family": "ip", "table": "nat", "chain": "POSTROUTING", "handle": 9,
        "comment": "ip-masq-agent: ensure nat POSTROUTING directs all non-LOCAL destination traffic to our custom IP-MASQ-AGENT chain",
        "expr": [{"xt": {"type": "match", "name": "addrtype"}}, {"counter": {"packets": 0, "bytes": 0}},
                 {"jump": {"target": "IP-MASQ-AGENT"}}]}}]}"#;

    const CHAINS: &str = r#"{"nftables": [{"metainfo": {"version": "1.0.6"}},
      {"chain": {"family": "ip", "table": "nat", "name": "POSTROUTING", "handle": 2}},
      {"chain": {"family": "ip", "table": "nat", "name": "IP-MASQ-AGENT", "handle": 4}},
      {"chain": {"family": "ip", "table": "filter", "name": "IP-MASQ-AGENT", "handle": 1}}]}"#;

    #[test]
    fn our_jump_and_chain_are_deleted_and_nothing_else() {
        let script = deletions(Family::V4, "IP-MASQ-AGENT", CHAINS, POSTROUTING).unwrap();
        assert_eq!(
            script,
            "delete rule ip nat POSTROUTING handle 9\nflush chain ip nat IP-MASQ-AGENT\ndelete chain ip nat IP-MASQ-AGENT\n"
        );
    }

    #[test]
    fn nothing_to_take_over_is_none() {
        assert_eq!(deletions(Family::V6, "IP-MASQ-AGENT", "", ""), None);
        let others = CHAINS.replace(
            "\"IP-MASQ-AGENT\", \"handle\": 4",
            "\"OTHER\", \"handle\": 4",
        );
        let only_kube = POSTROUTING.replace("\"target\": \"IP-MASQ-AGENT\"", "\"target\": \"X\"");
        assert_eq!(
            deletions(Family::V4, "IP-MASQ-AGENT", &others, &only_kube),
            None
        );
    }
}
