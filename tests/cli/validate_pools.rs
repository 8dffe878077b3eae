//! `ipmasq validate` on node pools (`ip-masq-agent-*` ConfigMaps with
//! `ipmasq.io/node-selector`) and GKE's EgressNATPolicy: text and JSON reports, exit codes.

use crate::util::{ipmasq, Scratch};
use serde_json::Value;

fn configmap(name: &str, annotations: &str, cidrs: &[&str]) -> String {
    let list: String = cidrs.iter().map(|c| format!("      - {c}\n")).collect();
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: kube-system\n{annotations}data:\n  config: |\n    nonMasqueradeCIDRs:\n{list}")
}

fn pool(name: &str, selector: &str, cidrs: &[&str]) -> String {
    configmap(
        name,
        &format!("  annotations:\n    ipmasq.io/node-selector: '{selector}'\n"),
        cidrs,
    )
}

fn policy(name: &str, destinations: &str) -> String {
    format!("apiVersion: networking.gke.io/v1\nkind: EgressNATPolicy\nmetadata:\n  name: {name}\nspec:\n  action: NoSNAT\n  destinations:\n{destinations}")
}

fn json(file: &str) -> (i32, Value) {
    let run = ipmasq(&["validate", "-o", "json", file]);
    let value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}{}", run.stdout, run.stderr));
    (run.code, value)
}

fn result<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["results"]
        .as_array()
        .expect("results")
        .iter()
        .find(|r| r["configMap"]["name"] == name || r["egressNATPolicy"]["name"] == name)
        .unwrap_or_else(|| panic!("no result for {name}: {report:#}"))
}

fn codes(result: &Value) -> Vec<&str> {
    result["diagnostics"]
        .as_array()
        .expect("diagnostics")
        .iter()
        .filter_map(|d| d["code"].as_str())
        .collect()
}

/// A pool is reported as one, with its selector and its base, and checked merged after the
/// base: its effective config holds both lists. A base in another file of the run counts.
#[test]
fn pools_are_reported_with_their_selector_and_merged_after_the_base() {
    let dir = Scratch::new("pools");
    let base = configmap("ip-masq-agent", "", &["10.0.0.0/8"]);
    let gpu = pool(
        "ip-masq-agent-gpu",
        "pool in (gpu,tpu),!spot",
        &["100.64.0.0/10"],
    );
    let file = dir.write("pools.yaml", &format!("{base}---\n{gpu}"));
    let (code, report) = json(&file.display().to_string());
    assert_eq!(code, 0, "{report:#}");
    let gpu_result = result(&report, "ip-masq-agent-gpu");
    assert_eq!(gpu_result["kind"], "configmap");
    assert_eq!(gpu_result["pool"]["selector"], "pool in (gpu,tpu),!spot");
    assert_eq!(gpu_result["pool"]["base"], "kube-system/ip-masq-agent");
    assert_eq!(
        gpu_result["effective"]["nonMasqueradeCIDRs"],
        serde_json::json!(["10.0.0.0/8", "100.64.0.0/10"])
    );
    let base_result = result(&report, "ip-masq-agent");
    assert!(base_result.get("pool").is_none(), "{base_result:#}");
    assert_eq!(
        base_result["effective"]["nonMasqueradeCIDRs"],
        serde_json::json!(["10.0.0.0/8"])
    );
    // Text: the label says it is a pool, with its selector and base.
    let run = ipmasq(&["validate", &file.display().to_string()]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert!(
        run.stdout.contains("(ConfigMap kube-system/ip-masq-agent-gpu, document 2, node pool `pool in (gpu,tpu),!spot` merged after ConfigMap kube-system/ip-masq-agent): valid"),
        "{}",
        run.stdout
    );
    // The base in another file of the run; without any base, the defaults.
    let base_file = dir.write("base.yaml", &base);
    let pool_file = dir.write("gpu.yaml", &gpu);
    let run = ipmasq(&[
        "validate",
        "-o",
        "json",
        &base_file.display().to_string(),
        &pool_file.display().to_string(),
    ]);
    let report: Value = serde_json::from_str(&run.stdout).expect("JSON");
    assert_eq!(
        result(&report, "ip-masq-agent-gpu")["pool"]["base"],
        "kube-system/ip-masq-agent"
    );
    let (code, report) = json(&pool_file.display().to_string());
    assert_eq!(code, 0);
    let alone = result(&report, "ip-masq-agent-gpu");
    assert_eq!(alone["pool"]["base"], Value::Null);
    assert_eq!(
        alone["effective"]["nonMasqueradeCIDRs"],
        serde_json::json!([
            "10.0.0.0/8",
            "172.16.0.0/12",
            "192.168.0.0/16",
            "100.64.0.0/10"
        ])
    );
}

/// A selector that is no label selector fails the pool, saying where and why; a pool that
/// contradicts its base fails; the annotation on a ConfigMap that cannot be a pool is a warning.
#[test]
fn bad_selectors_and_contradictions_fail_the_pool() {
    let dir = Scratch::new("bad-pools");
    let base = configmap("ip-masq-agent", "", &["10.0.0.0/8"]);
    let bad = pool("ip-masq-agent-bad", "pool in (gpu tpu)", &["100.64.0.0/10"]);
    let file = dir.write("bad.yaml", &format!("{base}---\n{bad}"));
    let (code, report) = json(&file.display().to_string());
    assert_eq!(code, 1, "{report:#}");
    let bad_result = result(&report, "ip-masq-agent-bad");
    assert_eq!(codes(bad_result), ["invalid-node-selector"]);
    let finding = &bad_result["diagnostics"][0];
    assert_eq!(finding["line"], 17);
    assert!(
        finding["message"]
            .as_str()
            .unwrap()
            .contains("column 14: found `tpu`, expected `,` or `)`"),
        "{finding:#}"
    );
    assert_eq!(result(&report, "ip-masq-agent")["valid"], true);
    let run = ipmasq(&["validate", &file.display().to_string()]);
    assert_eq!(run.code, 1);
    assert!(
        run.stdout
            .contains("bad.yaml:17:30: error[invalid-node-selector]"),
        "{}",
        run.stdout
    );

    let forced = configmap("ip-masq-agent", "", &["10.0.0.0/8"]).replace(
        "    nonMasqueradeCIDRs:\n",
        "    forceMasqueradeCIDRs: [100.64.0.0/10]\n    nonMasqueradeCIDRs:\n",
    );
    let clash = pool("ip-masq-agent-clash", "pool=x", &["100.64.0.0/10"]);
    let file = dir.write("clash.yaml", &format!("{forced}---\n{clash}"));
    let (code, report) = json(&file.display().to_string());
    assert_eq!(code, 1);
    assert!(
        codes(result(&report, "ip-masq-agent-clash")).contains(&"forced-and-kept"),
        "{report:#}"
    );

    let ignored = configmap(
        "ip-masq-agent",
        "  annotations:\n    ipmasq.io/node-selector: pool=gpu\n",
        &["10.0.0.0/8"],
    );
    let file = dir.write("ignored.yaml", &ignored);
    let (code, report) = json(&file.display().to_string());
    assert_eq!(code, 0, "a warning");
    assert_eq!(
        codes(result(&report, "ip-masq-agent")),
        ["ignored-node-selector"]
    );
    let run = ipmasq(&["validate", "--strict", &file.display().to_string()]);
    assert_eq!(run.code, 1);
}

/// GKE's EgressNATPolicy: the documented shape is valid and lists what it keeps; the
/// widespread list of strings, another action and a bad CIDR are errors; alone or beside
/// ConfigMaps.
#[test]
fn egress_nat_policies_are_read_and_the_malformed_shape_refused() {
    let dir = Scratch::new("egress-nat");
    let good = policy("default", "  - cidr: 10.0.0.0/8\n  - cidr: 100.64.0.0/10\n");
    let file = dir.write("good.yaml", &good);
    let (code, report) = json(&file.display().to_string());
    assert_eq!(code, 0, "{report:#}");
    let entry = result(&report, "default");
    assert_eq!(entry["kind"], "egressnatpolicy");
    assert_eq!(entry["egressNATPolicy"]["document"], 1);
    assert_eq!(
        entry["egressNATPolicy"]["destinations"],
        serde_json::json!(["10.0.0.0/8", "100.64.0.0/10"])
    );
    assert_eq!(entry["effective"], Value::Null);
    let run = ipmasq(&["validate", &file.display().to_string()]);
    assert_eq!(run.code, 0);
    assert!(
        run.stdout.contains("good.yaml (EgressNATPolicy default, document 1): valid\n  keeps the pod's address (NoSNAT) for: 10.0.0.0/8, 100.64.0.0/10\n"),
        "{}",
        run.stdout
    );

    let strings = policy("strings", "  - 10.0.0.0/8\n");
    let snat = policy("snat", "  - cidr: 10.0.0.0/8\n").replace("NoSNAT", "SNAT");
    let cidr = policy("cidr", "  - cidr: 10.1.2.3/8\n");
    let base = configmap("ip-masq-agent", "", &["10.0.0.0/8"]);
    let file = dir.write(
        "bad.yaml",
        &format!("{base}---\n{strings}---\n{snat}---\n{cidr}"),
    );
    let (code, report) = json(&file.display().to_string());
    assert_eq!(code, 1);
    assert_eq!(result(&report, "ip-masq-agent")["valid"], true);
    assert_eq!(
        codes(result(&report, "strings")),
        ["egress-nat-policy-shape"]
    );
    assert_eq!(codes(result(&report, "snat")), ["egress-nat-policy-action"]);
    assert_eq!(codes(result(&report, "cidr")), ["cidr-not-aligned"]);
    assert_eq!(
        result(&report, "strings")["egressNATPolicy"]["destinations"],
        serde_json::json!([])
    );
    let run = ipmasq(&["validate", &file.display().to_string()]);
    assert_eq!(run.code, 1);
    assert!(
        run.stdout
            .contains("= hint: write `- cidr: 10.0.0.0/8` (destinations: [{cidr: 10.0.0.0/8}])"),
        "{}",
        run.stdout
    );
}

/// `--node-labels`: the config of such a node, the base and the pools that select it merged
/// in name order; a node no pool selects gets the base alone; labels are checked as
/// Kubernetes checks them (a usage error otherwise).
#[test]
fn node_labels_show_which_pools_apply_and_the_merged_config() {
    let dir = Scratch::new("node-labels");
    let base = configmap("ip-masq-agent", "", &["10.0.0.0/8"]);
    let zone = pool(
        "ip-masq-agent-zone-a",
        "topology.kubernetes.io/zone=a",
        &["198.18.0.0/15"],
    );
    let gpu = pool(
        "ip-masq-agent-gpu",
        "pool in (gpu,tpu),!spot",
        &["100.64.0.0/10"],
    );
    let file = dir.write("pools.yaml", &format!("{base}---\n{zone}---\n{gpu}"));
    let file = file.display().to_string();
    let node = |labels: &str| {
        let run = ipmasq(&["validate", "-o", "json", "--node-labels", labels, &file]);
        let report: Value = serde_json::from_str(&run.stdout).expect("JSON");
        assert_eq!(run.code, 0, "{report:#}");
        let last = report["results"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone();
        assert_eq!(last["kind"], "merged");
        last
    };
    let both = node("pool=gpu,topology.kubernetes.io/zone=a");
    assert_eq!(both["node"]["base"], "kube-system/ip-masq-agent");
    assert_eq!(
        both["node"]["pools"],
        serde_json::json!(["ip-masq-agent-gpu", "ip-masq-agent-zone-a"])
    );
    assert_eq!(
        both["effective"]["nonMasqueradeCIDRs"],
        serde_json::json!(["10.0.0.0/8", "100.64.0.0/10", "198.18.0.0/15"])
    );
    let spot = node("pool=gpu,spot=");
    assert_eq!(spot["node"]["pools"], serde_json::json!([]));
    assert_eq!(
        spot["effective"]["nonMasqueradeCIDRs"],
        serde_json::json!(["10.0.0.0/8"])
    );
    let run = ipmasq(&["validate", "--node-labels", "pool=tpu", &file]);
    assert_eq!(run.code, 0);
    assert!(
        run.stdout.contains(
            "node pool=tpu (ConfigMap kube-system/ip-masq-agent + pool ip-masq-agent-gpu): valid"
        ),
        "{}",
        run.stdout
    );
    for bad in ["pool", "Pool.Example/x=1", "pool=-gpu"] {
        let run = ipmasq(&["validate", "--node-labels", bad, &file]);
        assert_eq!(run.code, 2, "{bad}: {}", run.stderr);
    }
    // The run's EgressNATPolicy destinations are kept on the node too (after the pools).
    let policy_file = dir.write("policy.yaml", &policy("extra", "  - cidr: 192.0.2.0/24\n"));
    let policy_file = policy_file.display().to_string();
    let run = ipmasq(&[
        "validate",
        "-o",
        "json",
        "--node-labels",
        "pool=gpu",
        &file,
        &policy_file,
    ]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    let report: Value = serde_json::from_str(&run.stdout).expect("JSON");
    let last = report["results"].as_array().unwrap().last().unwrap();
    assert_eq!(
        last["node"]["egressNATPolicies"],
        serde_json::json!(["extra"])
    );
    assert_eq!(
        last["effective"]["nonMasqueradeCIDRs"],
        serde_json::json!(["10.0.0.0/8", "100.64.0.0/10", "192.0.2.0/24"])
    );
    let run = ipmasq(&["validate", "--node-labels", "", &policy_file]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert!(
        run.stdout
            .contains("node with no labels (the defaults + EgressNATPolicy extra): valid"),
        "{}",
        run.stdout
    );
    // Without the flag, no node result.
    let (_, report) = json(&file);
    assert!(report["results"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r.get("node").is_none()));
}

/// The next config of a rollout in waves (`ip-masq-agent-next`) is checked as a config, and
/// its `ipmasq.io/rollout-*` annotations as the agents read them: each wrong one is an error at
/// its line; a node selector there is no pool's and is said to be ignored.
#[test]
fn the_next_config_of_a_rollout_is_checked_with_its_schedule() {
    let dir = Scratch::new("rollout-next");
    let good = configmap(
        "ip-masq-agent-next",
        "  annotations:\n    ipmasq.io/rollout-waves: '1,10,50,100'\n    ipmasq.io/rollout-soak: 10m\n    ipmasq.io/rollout-start: '2026-11-29T12:00:00Z'\n    ipmasq.io/rollout-invariants: |\n      keep 10.0.0.0/8\n      masquerade 8.8.8.8 via eth0\n",
        &["10.0.0.0/8"],
    );
    let file = dir.write("good.yaml", &good).display().to_string();
    let (code, report) = json(&file);
    assert_eq!(code, 0, "{report:#}");
    let found = result(&report, "ip-masq-agent-next");
    assert!(codes(found).is_empty(), "{found:#}");
    assert!(
        found["pool"].is_null(),
        "the next config is no pool: {found:#}"
    );

    let bad = configmap(
        "ip-masq-agent-next",
        "  annotations:\n    ipmasq.io/node-selector: pool=gpu\n    ipmasq.io/rollout-waves: '50,10'\n    ipmasq.io/rollout-soak: 10\n",
        &["10.0.0.0/8"],
    );
    let file = dir.write("bad.yaml", &bad).display().to_string();
    let (code, report) = json(&file);
    assert_eq!(code, 1, "{report:#}");
    let found = result(&report, "ip-masq-agent-next");
    assert_eq!(
        codes(found),
        ["ignored-node-selector", "rollout-annotation"],
        "{found:#}"
    );
    let run = ipmasq(&["validate", &file]);
    assert!(
        run.stdout
            .contains("annotation ipmasq.io/rollout-soak must be a string"),
        "{}",
        run.stdout
    );
    let bad = configmap(
        "ip-masq-agent-next",
        "  annotations:\n    ipmasq.io/rollout-waves: '50,10'\n    ipmasq.io/rollout-soak: 1s\n    ipmasq.io/rollout-invariants: keep 10.0.0.1/8\n",
        &["10.0.0.0/8"],
    );
    let file = dir.write("bad2.yaml", &bad).display().to_string();
    let run = ipmasq(&["validate", &file]);
    assert_eq!(run.code, 1);
    for said in [
        "bad2.yaml:7:30: error[rollout-annotation]: annotation ipmasq.io/rollout-waves: 10 does not grow",
        "annotation ipmasq.io/rollout-start: missing",
        "annotation ipmasq.io/rollout-invariants: \"keep 10.0.0.1/8\": \"10.0.0.1/8\" is not an address or a CIDR",
    ] {
        assert!(run.stdout.contains(said), "{said}\n{}", run.stdout);
    }
}
