//! What `/healthz`, `/readyz` and `/metrics` answer and when, in words: the one text the
//! agent's man page (ipmasq-agent(8)) and `docs/reference/endpoints.md` are generated from,
//! each answer tied to the [`Case`] a unit test puts `health.rs` in to hold the binary to it.

/// A state of the agent an endpoint answers for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Case {
    /// The loop finished a pass recently.
    Alive,
    /// A pass has run longer than the stall limit.
    PassOverran,
    /// No pass finished within the stall limit.
    LoopStuck,
    /// No pass has run yet.
    Starting,
    /// No valid config was ever read: no rules are installed.
    NoValidConfig,
    /// The config in force is installed and the last sync succeeded.
    InForce,
    /// The file turned invalid (or unreadable) while the last good config stays in force.
    RejectedWhileLastGoodInForce,
    /// A config refused because it cannot fit the agent's memory limit.
    RefusedForMemory,
    /// The last sync failed.
    SyncFailed,
    /// A family masquerades because the node holds no address its output address names.
    OutputAddressFallback,
    /// Any state: `/metrics` always answers.
    Always,
}

/// One answer of an endpoint.
pub struct Answer {
    /// Read by the test that puts the agent in this state.
    #[cfg_attr(not(test), allow(dead_code))]
    pub case: Case,
    /// When it is given, for people.
    pub when: &'static str,
    pub status: u16,
    /// What the body says.
    pub body: &'static str,
}

/// One endpoint.
pub struct Endpoint {
    pub path: &'static str,
    /// What it is for and which probe should use it.
    pub purpose: &'static str,
    pub answers: &'static [Answer],
}

/// Why a rejected config leaves the agent ready, for the docs (and the decision's record):
/// readiness says "our rules are in force", and they are — the last good config's.
pub const READINESS_RATIONALE: &str = "Readiness means that rules of a valid config are in force. A DaemonSet's readiness gates its rollouts: a pod that starts with no valid config (or whose config cannot fit its memory limit, a property of the pod spec the rollout changes) is not ready, so a bad rollout stops. A running pod whose config turns invalid keeps enforcing its last good config: it stays ready, because the same ConfigMap would make every pod of the DaemonSet unready at once, stall unrelated rollouts and page on every node, while the rules in force are unchanged. That case is what ipmasq_config_current at 0, the IpmasqConfigRejected alert, ipmasq show (REJECTED) and the body of /readyz report.";

/// Every endpoint the agent serves on --metrics-addr.
pub const ENDPOINTS: &[Endpoint] = &[
    Endpoint {
        path: "/healthz",
        purpose: "Liveness: the reconcile loop is alive. Use it for the liveness probe: a restart helps only a stuck loop, so an invalid config or a failed sync never fails it.",
        answers: &[
            Answer {
                case: Case::Alive,
                when: "a pass finished within the stall limit (three resync intervals, at least 60 s), or the agent started less than that ago",
                status: 200,
                body: "ok",
            },
            Answer {
                case: Case::PassOverran,
                when: "the pass under way has run longer than the stall limit",
                status: 503,
                body: "reconcile pass overran: running for Ns (limit Ns)",
            },
            Answer {
                case: Case::LoopStuck,
                when: "no pass finished within the stall limit",
                status: 503,
                body: "reconcile loop stuck: no pass finished for Ns (limit Ns)",
            },
        ],
    },
    Endpoint {
        path: "/readyz",
        purpose: "Readiness: the rules of a valid config are in force. Use it for the readiness probe.",
        answers: &[
            Answer {
                case: Case::Starting,
                when: "before the first pass",
                status: 503,
                body: "starting: no sync has run yet",
            },
            Answer {
                case: Case::NoValidConfig,
                when: "no valid config has been read since the agent started (the file is invalid or unreadable): no rules are installed",
                status: 503,
                body: "no valid config has been applied yet",
            },
            Answer {
                case: Case::InForce,
                when: "the rules of the config in force are installed and the last sync succeeded; in API mode also while the API has not answered for a while (the rules are right for the last config seen: ipmasq_api_view_age_seconds and the Node condition's ApiViewStale say how old that is)",
                status: 200,
                body: "ok",
            },
            Answer {
                case: Case::RejectedWhileLastGoodInForce,
                when: "a rejected config: the file turned invalid or unreadable while the last good config stays in force",
                status: 200,
                body: "ok, then a line `config rejected, the last good config stays in force: DIAGNOSTICS`",
            },
            Answer {
                case: Case::RefusedForMemory,
                when: "the config read cannot fit the agent's memory limit (refused; the last good config, if any, stays in force)",
                status: 503,
                body: "the estimate and the limit to raise",
            },
            Answer {
                case: Case::SyncFailed,
                when: "the last sync failed (retried after 1 s, doubling up to the resync interval)",
                status: 503,
                body: "last sync failed: ERROR",
            },
            Answer {
                case: Case::OutputAddressFallback,
                when: "a family masquerades because the node holds no address its outputAddress names",
                status: 200,
                body: "ok, then a line `output address fallback: REASON` per family",
            },
        ],
    },
    Endpoint {
        path: "/metrics",
        purpose: "The agent's metrics, for Prometheus: each is listed in ipmasq-agent(8), under HEALTH AND METRICS.",
        answers: &[Answer {
            case: Case::Always,
            when: "always, whatever the agent's state",
            status: 200,
            body: "the Prometheus text format (0.0.4), or OpenMetrics 1.0 when the Accept header prefers it",
        }],
    },
];

/// The endpoints' introduction, before the list.
pub const INTRODUCTION: &str = "The agent serves three endpoints on --metrics-addr (default 127.0.0.1:9723; off disables them). Each answers with a status and a short text body:";

/// The status `path` answers with in `case`, as documented.
#[cfg(test)]
pub fn documented_status(path: &str, case: Case) -> Option<u16> {
    ENDPOINTS
        .iter()
        .find(|e| e.path == path)?
        .answers
        .iter()
        .find(|a| a.case == case)
        .map(|a| a.status)
}

/// `docs/reference/endpoints.md`: the same text as the man page, in markdown.
pub fn markdown() -> String {
    let mut out = String::from(
        "<!-- Generated by `cargo run -- generate .` from src/agent/endpoints.rs; edit that file, not this one. -->\n\n# Health and metrics endpoints\n\n",
    );
    out.push_str(INTRODUCTION);
    out.push_str("\n\n");
    for endpoint in ENDPOINTS {
        out.push_str(&format!(
            "## `{}`\n\n{}\n\n",
            endpoint.path, endpoint.purpose
        ));
        out.push_str("| When | Status | Body |\n|---|---|---|\n");
        for answer in endpoint.answers {
            out.push_str(&format!(
                "| {} | {} | {} |\n",
                answer.when.replace('|', "\\|"),
                answer.status,
                answer.body.replace('|', "\\|")
            ));
        }
        out.push('\n');
    }
    out.push_str("## Why a rejected config leaves the agent ready\n\n");
    out.push_str(READINESS_RATIONALE);
    out.push('\n');
    out
}

/// The man page's list of endpoints: a tagged paragraph per endpoint, an indented line per
/// answer (`roff` escapes the text).
pub fn roff(roff: impl Fn(&str) -> String) -> String {
    let mut out = format!(".PP\n{}\n", roff(INTRODUCTION));
    for endpoint in ENDPOINTS {
        out.push_str(&format!(
            ".TP\n.B {}\n{}\n",
            endpoint.path,
            roff(endpoint.purpose)
        ));
        for answer in endpoint.answers {
            out.push_str(&format!(
                ".RS\n.IP \\(bu 2\n{}\n.RE\n",
                roff(&format!(
                    "{}: {}. Body: {}.",
                    answer.status, answer.when, answer.body
                ))
            ));
        }
    }
    out.push_str(&format!(".PP\n{}\n", roff(READINESS_RATIONALE)));
    out
}
