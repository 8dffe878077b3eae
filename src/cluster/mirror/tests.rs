//! Unit tests of the mirror: the condition and its message written and read back, when a write
//! is due, and how `fleet` classifies what it reads.

use super::*;

const DIGEST: &str = "3f2a9c0d1e4b5a6f7081928374655647382910abcdef0123456789abcdef0123";

fn at(text: &str) -> Timestamp {
    text.parse().expect("a test timestamp")
}

fn status(outcome: Outcome, last_sync: &str) -> AgentStatus {
    AgentStatus {
        outcome,
        digest: Some(DIGEST.to_string()),
        backend: Some("nftables".to_string()),
        last_sync: at(last_sync),
        words: None,
    }
}

fn reported(condition: &NodeCondition) -> Reported {
    Reported::read(
        &condition.status,
        condition.reason.as_deref(),
        condition.message.as_deref(),
    )
}

#[test]
fn the_message_is_fields_then_words_and_reads_back() {
    let written = condition(&status(Outcome::InSync, "2026-11-26T04:22:00.75Z"), None);
    let text = written.message.clone().unwrap_or_default();
    assert_eq!(
        text,
        format!(
            "digest=sha256:{DIGEST} backend=nftables lastSync=2026-11-26T04:22:00Z; the rules in force match the config"
        )
    );
    let read = Message::parse(&text);
    assert_eq!(read.digest.as_deref(), Some(&*format!("sha256:{DIGEST}")));
    assert_eq!(read.backend.as_deref(), Some("nftables"));
    assert_eq!(read.last_sync, Some(at("2026-11-26T04:22:00Z")));
    assert_eq!(read.words, "the rules in force match the config");
    assert_eq!(read.render(), text, "render and parse are inverse");
}

#[test]
fn every_outcome_has_its_reason_and_status_and_round_trips() {
    let table = [
        (Outcome::InSync, "InSync", "True"),
        (Outcome::Drifted, "Drifted", "False"),
        (Outcome::Rejected, "ConfigRejected", "False"),
        (Outcome::NotReady, "NotReady", "False"),
        (Outcome::LastKnownGood, "LastKnownGood", "Unknown"),
        (Outcome::ApiViewStale, "ApiViewStale", "True"),
    ];
    for (outcome, reason, state) in table {
        let written = condition(&status(outcome, "2026-11-26T04:22:00Z"), None);
        assert_eq!(written.type_, "IPMasqAgentReady");
        assert_eq!(written.reason.as_deref(), Some(reason));
        assert_eq!(written.status, state);
        assert_eq!(Outcome::from_reason(reason), Some(outcome));
        let read = reported(&written);
        assert_eq!(read.message.digest, Some(format!("sha256:{DIGEST}")));
        assert_eq!(read.message.words, outcome.default_words());
    }
    assert_eq!(Outcome::from_reason("Bogus"), None);
}

#[test]
fn missing_fields_are_left_out_and_unknown_keys_ignored() {
    let mut early = status(Outcome::NotReady, "2026-11-26T04:22:00Z");
    early.digest = None;
    early.backend = None;
    let text = Message::of(&early).render();
    assert_eq!(
        text,
        "lastSync=2026-11-26T04:22:00Z; the rules of no config are installed yet"
    );
    let later = Message::parse(
        "generation=7 backend=iptables-nft lastSync=2026-11-26T04:22:00Z digest=sha256:ab; words; with a semicolon",
    );
    assert_eq!(later.digest.as_deref(), Some("sha256:ab"));
    assert_eq!(later.backend.as_deref(), Some("iptables-nft"));
    assert_eq!(later.words, "words; with a semicolon");
    let by_hand = Message::parse("set by hand; no fields here");
    assert_eq!(by_hand.digest, None);
    assert_eq!(by_hand.words, "set by hand; no fields here");
    assert_eq!(Message::parse("").words, "");
}

#[test]
fn words_are_one_bounded_line_and_fields_have_no_separators() {
    let mut noisy = status(Outcome::Drifted, "2026-11-26T04:22:00Z");
    noisy.words = Some(format!("line one\nline two\x1b[31m {}", "x".repeat(1000)));
    noisy.backend = Some("odd name;x".to_string());
    let text = Message::of(&noisy).render();
    assert!(!text.contains('\n') && !text.contains('\x1b'), "{text:?}");
    let read = Message::parse(&text);
    assert_eq!(read.words.chars().count(), WORDS_MAX);
    assert!(read.words.ends_with('…'));
    assert_eq!(read.backend.as_deref(), Some("odd_name_x"));
}

#[test]
fn the_transition_time_moves_only_with_the_status() {
    let first = condition(&status(Outcome::InSync, "2026-11-26T04:00:00Z"), None);
    let drifted = condition(
        &status(Outcome::Drifted, "2026-11-26T04:10:00Z"),
        Some(&first),
    );
    assert_eq!(
        drifted.last_transition_time.as_ref().map(|t| t.0),
        Some(at("2026-11-26T04:10:00Z"))
    );
    let rejected = condition(
        &status(Outcome::Rejected, "2026-11-26T04:20:00Z"),
        Some(&drifted),
    );
    assert_eq!(
        rejected.last_transition_time.as_ref().map(|t| t.0),
        Some(at("2026-11-26T04:10:00Z")),
        "False stays False: the transition is the earlier one"
    );
    assert_eq!(
        rejected.last_heartbeat_time.as_ref().map(|t| t.0),
        Some(at("2026-11-26T04:20:00Z"))
    );
}

#[test]
fn a_write_is_due_only_on_a_real_change_never_for_time_alone() {
    let first = condition(&status(Outcome::InSync, "2026-11-26T04:00:00Z"), None);
    assert!(write_needed(None, &first), "no condition yet");
    let pass = |outcome, time| condition(&status(outcome, time), Some(&first));
    let same = pass(Outcome::InSync, "2026-11-26T04:01:00Z");
    assert!(!write_needed(Some(&first), &same));
    let a_day_later = pass(Outcome::InSync, "2026-11-27T04:00:00Z");
    assert!(
        !write_needed(Some(&first), &a_day_later),
        "no heartbeat: time alone is never a change"
    );
    let drifted = pass(Outcome::Drifted, "2026-11-26T04:00:01Z");
    assert!(write_needed(Some(&first), &drifted));
    let mut other_config = status(Outcome::InSync, "2026-11-26T04:00:01Z");
    other_config.digest = Some("00".repeat(32));
    assert!(write_needed(
        Some(&first),
        &condition(&other_config, Some(&first))
    ));
    let mut other_backend = status(Outcome::InSync, "2026-11-26T04:00:01Z");
    other_backend.backend = Some("iptables-nft".into());
    assert!(write_needed(
        Some(&first),
        &condition(&other_backend, Some(&first))
    ));
    let mut other_words = status(Outcome::InSync, "2026-11-26T04:00:01Z");
    other_words.words = Some("something else".into());
    assert!(write_needed(
        Some(&first),
        &condition(&other_words, Some(&first))
    ));
    let by_hand = NodeCondition {
        message: Some("written by hand".into()),
        ..first.clone()
    };
    assert!(
        write_needed(Some(&by_hand), &same),
        "a message in another shape is rewritten"
    );
}

#[test]
fn the_apply_patch_holds_our_condition_alone() {
    let written = condition(&status(Outcome::Rejected, "2026-11-26T04:22:00Z"), None);
    let body = apply_patch("node-1", &written);
    assert_eq!(body["apiVersion"], "v1");
    assert_eq!(body["kind"], "Node");
    assert_eq!(body["metadata"], serde_json::json!({"name": "node-1"}));
    let conditions = body["status"]["conditions"]
        .as_array()
        .expect("a list of conditions");
    assert_eq!(conditions.len(), 1);
    assert_eq!(
        conditions[0],
        serde_json::json!({
            "type": "IPMasqAgentReady",
            "status": "False",
            "reason": "ConfigRejected",
            "message": format!("digest=sha256:{DIGEST} backend=nftables lastSync=2026-11-26T04:22:00Z; the newest config was rejected; the last good config stays in force"),
            "lastHeartbeatTime": "2026-11-26T04:22:00Z",
            "lastTransitionTime": "2026-11-26T04:22:00Z",
        })
    );
    assert_eq!(body.as_object().map(|o| o.len()), Some(4), "{body}");
}

#[test]
fn a_rejection_event_is_a_warning_about_the_node() {
    let about = EventAbout {
        namespace: "kube-system".into(),
        node: "node-1".into(),
        node_uid: Some("uid-1".into()),
    };
    let event = rejection_event(
        &about,
        "config:3:5: error[cidr-not-aligned]: CIDR \"10.1.2.3/16\" is not aligned\x1b[2J",
        at("2026-11-26T04:22:00Z"),
    );
    let json = serde_json::to_value(&event).expect("an Event serializes");
    assert_eq!(json["reason"], "ConfigRejected");
    assert_eq!(json["type"], "Warning");
    assert_eq!(
        json["metadata"]["namespace"], "kube-system",
        "the agent's own namespace, where the RBAC grants events create"
    );
    assert_eq!(json["action"], EVENT_ACTION);
    assert_eq!(json["eventTime"], "2026-11-26T04:22:00.000000Z");
    assert_eq!(event_namespace("kube-system"), "kube-system");
    assert_eq!(event_namespace("default"), "default");
    assert_eq!(
        event_namespace("ipmasq"),
        "kube-system",
        "a Node's Events are taken only in default or kube-system"
    );
    assert_eq!(json["metadata"]["generateName"], "node-1.ipmasq-");
    assert_eq!(
        json["involvedObject"],
        serde_json::json!({"apiVersion": "v1", "kind": "Node", "name": "node-1", "uid": "uid-1"})
    );
    let message = json["message"].as_str().unwrap_or_default();
    assert!(message.contains("error[cidr-not-aligned]"), "{message}");
    assert!(
        !message.contains('\x1b'),
        "terminal controls escaped: {message:?}"
    );
    let long = rejection_event(&about, &"x".repeat(5000), at("2026-11-26T04:22:00Z"));
    assert_eq!(
        long.message.map(|m| m.chars().count()),
        Some(EVENT_MESSAGE_MAX)
    );
}

#[test]
fn fleet_classifies_by_reason_status_and_the_nodes_readiness() {
    let ready = Some(ConditionStatus::True);
    let read = |outcome| reported(&condition(&status(outcome, "2026-11-26T04:20:00Z"), None));
    for (outcome, want) in [
        (Outcome::InSync, FleetStatus::InSync),
        (Outcome::Drifted, FleetStatus::Drifted),
        (Outcome::Rejected, FleetStatus::Rejected),
        (Outcome::NotReady, FleetStatus::NotReady),
        (Outcome::LastKnownGood, FleetStatus::Stale),
        (Outcome::ApiViewStale, FleetStatus::Stale),
    ] {
        assert_eq!(classify(Some(&read(outcome)), ready), want, "{outcome:?}");
        assert_eq!(
            classify(Some(&read(outcome)), None),
            want,
            "{outcome:?}: a Node without a Ready condition is judged by ours alone"
        );
        for down in [ConditionStatus::False, ConditionStatus::Unknown] {
            assert_eq!(
                classify(Some(&read(outcome)), Some(down)),
                FleetStatus::Stale,
                "{outcome:?} on a Node whose Ready is {down:?}"
            );
        }
    }
    assert_eq!(classify(None, ready), FleetStatus::Unknown);
    assert_eq!(
        classify(None, Some(ConditionStatus::Unknown)),
        FleetStatus::Unknown,
        "no condition of ours: unknown, whatever the node"
    );
    let old = read(Outcome::InSync);
    assert_eq!(
        classify(Some(&old), ready),
        FleetStatus::InSync,
        "the age of lastSync is no staleness: a steady agent writes nothing"
    );
    let no_time = Reported::read("True", Some("InSync"), Some("by hand"));
    assert_eq!(classify(Some(&no_time), ready), FleetStatus::InSync);
    let contradiction = Reported::read("False", Some("InSync"), None);
    assert_eq!(classify(Some(&contradiction), ready), FleetStatus::Unknown);
    let newer_reason = Reported::read("False", Some("SomethingNew"), None);
    assert_eq!(classify(Some(&newer_reason), ready), FleetStatus::Unknown);
    let spelled: Vec<&str> = FleetStatus::ALL.iter().map(|s| s.as_str()).collect();
    assert_eq!(
        spelled,
        [
            "in-sync",
            "drifted",
            "rejected",
            "not-ready",
            "stale",
            "agent-not-ready",
            "agent-down",
            "no-agent",
            "untrusted",
            "unknown"
        ]
    );
    for status in FleetStatus::ALL {
        assert_eq!(
            serde_json::to_value(status).ok(),
            Some(serde_json::Value::from(status.as_str()))
        );
    }
}

#[test]
fn only_a_condition_the_agent_alone_wrote_is_trusted() {
    assert_eq!(condition_fields_key(), "k:{\"type\":\"IPMasqAgentReady\"}");
    let ours = vec![FIELD_MANAGER.to_string()];
    assert!(written_by_us(&ours));
    assert!(!written_by_us(&[]), "no writer recorded");
    assert!(!written_by_us(&["kubectl-patch".to_string()]));
    assert!(!written_by_us(&[
        FIELD_MANAGER.to_string(),
        "kubectl-edit".to_string()
    ]));
}

#[test]
fn fleet_looks_for_the_pods_the_shipped_daemonset_makes() {
    let daemonset = include_str!("../../../packaging/kubernetes/base/daemonset.yaml");
    let (key, value) = DEFAULT_AGENT_SELECTOR.split_once('=').expect("key=value");
    let template = daemonset
        .split_once("  template:")
        .map(|(_, t)| t)
        .expect("a pod template");
    assert!(
        template.contains(&format!("{key}: {value}")),
        "the pod template's labels carry {DEFAULT_AGENT_SELECTOR}"
    );
    assert!(daemonset.contains(&format!("namespace: {DEFAULT_AGENT_NAMESPACE}")));
}
