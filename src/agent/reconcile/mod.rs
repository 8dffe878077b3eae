//! One reconcile pass, as a sequence of stages each with its own inputs and outputs:
//! *source* (the config file or directory: the bytes read, when they changed) → *admission*
//! (parse, checks, the memory limit; the last good config kept) → *node facts* (the output addresses resolved, the memory limit) →
//! *plan* (pure: config + flags + node facts) → *enforce* (the backend's sync, the conntrack
//! follow) → *status* (what health and metrics report). [`Reconciler::pass`] drives them.

mod admission;
mod enforce;
mod node_facts;
mod planner;
mod source;
mod status;

pub use admission::{ActiveRead, Rejection};
pub use source::{ApiSettings, OnNext, RolloutLatch, RolloutSeen, StatusWrites, LAST_KNOWN_GOOD};
pub use status::Status;

use crate::backend::{BackendError, SyncReport};
use crate::config::{self, Config, ConfigOrigin};
use crate::plan::PlanOptions;
use admission::{Admission, AdmissionInputs};
use enforce::{Enforcer, RetryNote};
use node_facts::NodeReader;
use planner::{PlanInputs, Planner};
#[cfg(test)]
use source::BLANK_GRACE;
use source::{Source, SourceRead};
use status::PassReport;
use std::time::{Duration, Instant};

/// The first retry after a failed sync comes this soon (then 2 s, 4 s, ... up to the interval).
pub const FIRST_RETRY: Duration = Duration::from_secs(1);

/// The wait after `failures` failed syncs in a row: the interval when there is none, else
/// [`FIRST_RETRY`] doubled per further failure, capped at the interval.
fn backoff(failures: u32, interval: Duration) -> Duration {
    match failures {
        0 => interval,
        n => FIRST_RETRY
            .saturating_mul(1 << (n - 1).min(16))
            .min(interval),
    }
}

/// What the agent was started with: its flags, which no pass writes (what a pass learns of
/// the node is a node fact, handed to the plan beside them).
#[derive(Clone, Debug)]
pub struct Settings {
    /// Where the config is read (the source stage is made from it at start), unless `api`.
    pub config: config::ConfigSource,
    /// `--config-source=api`: the ConfigMap read from the Kubernetes API instead of `config`.
    pub api: Option<ApiSettings>,
    /// How admission parses and checks what the source read.
    pub options: config::Options,
    /// The flags that shape the rules (the node's output addresses are no flag: the plan
    /// stage takes them from the node facts).
    pub plan: PlanOptions,
    pub dry_run: bool,
    /// One pass and out (`--once`, `--dry-run`): a failure is not retried, and its log line
    /// does not say it will be.
    pub single_pass: bool,
    /// Which conntrack entries a change deletes (`--conntrack-reset`).
    pub conntrack_reset: crate::conntrack::judge::ResetScope,
}

/// The outcome of one pass.
#[derive(Debug)]
pub enum Pass {
    /// Rules checked (and repaired where needed) for every family.
    Synced(Vec<SyncReport>),
    /// No valid config has been seen yet: nothing is installed.
    NoValidConfig,
    /// The backend failed; the previous rules stay as they are.
    Failed(BackendError),
}

/// The reconcile loop's state: the flags and one value per stage.
pub struct Reconciler {
    pub settings: Settings,
    source: Source,
    admission: Admission,
    node: NodeReader,
    planner: Planner,
    enforcer: Enforcer,
    pub status: Status,
    /// The next pass acts on the config in force without reading the file (see
    /// [`Reconciler::keep_the_config_file_unread`]).
    keep_config_file_unread: bool,
}

impl Reconciler {
    pub fn new(settings: Settings, backend: Box<dyn crate::backend::Backend>) -> Self {
        Reconciler {
            source: Source::new(settings.config.clone(), settings.api.as_ref()),
            settings,
            admission: Admission::default(),
            node: NodeReader::new(),
            planner: Planner::default(),
            enforcer: Enforcer::new(backend),
            status: Status::default(),
            keep_config_file_unread: false,
        }
    }

    /// One full pass: read the config's bytes, admit them (parse, check), then (with a config
    /// in force) read the node facts, plan, enforce; then the status.
    pub fn pass(&mut self) -> Pass {
        let read = self.read_source();
        let label = self.source.label();
        self.admission.admit(
            read,
            &AdmissionInputs {
                label: &label,
                options: &self.settings.options,
                backend: self.enforcer.backend(),
                flags: &self.settings.plan,
                node: self.node.facts(),
            },
        );
        let started = Instant::now();
        let result = self.sync();
        let now = Instant::now();
        self.status.record(&PassReport {
            pass: &result,
            timing: (started, now),
            admission: &self.admission,
            enforce: &self.enforcer.counts,
            egress_fallback: &self.node.fallbacks,
        });
        self.status.next_pass_in = self.next_wait();
        result
    }

    /// What the source holds now, unless this pass keeps the config file unread.
    fn read_source(&mut self) -> SourceRead {
        let keep = std::mem::take(&mut self.keep_config_file_unread);
        if keep && self.source.is_file() && self.admission.config().is_some() {
            return SourceRead::Nothing;
        }
        self.source.read()
    }

    /// What woke the next pass (a neighbour's commit, an address change) cannot have changed
    /// the config file: that pass acts on the config in force and leaves the file unread. A
    /// writer may be mid-way through the file before the watch has told the event loop, and
    /// the watch starts its own pass once the writer is done. Without a config in force the
    /// file is read all the same. API mode reads its feed as always.
    pub fn keep_the_config_file_unread(&mut self) {
        self.keep_config_file_unread = true;
    }

    /// Node facts, plan and enforce, for the config in force.
    fn sync(&mut self) -> Pass {
        let Some(config) = self.admission.config() else {
            return Pass::NoValidConfig;
        };
        let retry = self.retry_note();
        let families = crate::plan::families(&self.settings.plan, config);
        if let Err(err) = self.node.resolve_egress(Some(config), &families) {
            return self.enforcer.node_unusable(err, &retry);
        }
        let planned = self.planner.plan(&PlanInputs {
            config: (config, self.admission.generation()),
            node: (self.node.facts(), self.node.generation()),
            flags: &self.settings.plan,
        });
        self.enforcer.enforce(planned, &self.settings, &retry)
    }

    pub fn backend_name(&self) -> String {
        self.enforcer.backend().name()
    }

    pub fn backend_id(&self) -> crate::backend::BackendId {
        self.enforcer.backend().id()
    }

    /// The config in force (None before a valid one was read).
    pub fn config_in_force(&self) -> Option<&Config> {
        self.admission.config()
    }

    /// Where the config in force came from.
    pub fn config_origin(&self) -> Option<&ConfigOrigin> {
        self.admission.origin()
    }

    /// The digest of the config in force's bytes and when they were read.
    pub fn config_read(&self) -> Option<&ActiveRead> {
        self.admission.read()
    }

    /// Where this node stands in a rollout in waves (API mode): Some while the config last
    /// read is the rollout's next config.
    pub fn on_next(&self) -> Option<&source::OnNext> {
        self.source.on_next()
    }

    /// Whether the rules in force for every family are in the kernel, read back now (no
    /// remembered state trusted): what `--node-taint` removes the taint after. False before a
    /// sync, or when a family cannot be read.
    pub fn rules_read_back(&self) -> bool {
        self.enforcer.rules_read_back()
    }

    /// Whether the kernel holds rules of ours in any family (a previous agent's, kept across
    /// a restart): read now. False when no family can be read.
    pub fn holds_rules_of_ours(&self) -> bool {
        crate::plan::Family::ALL
            .into_iter()
            .filter(|family| self.enforcer.backend().family_available(*family))
            .any(|family| self.inspect(family).is_ok_and(|live| live.installed))
    }

    /// Where the brake latches a rollout this node failed on (API mode).
    pub fn rollout_latch(&self) -> Option<RolloutLatch> {
        self.source.rollout_latch()
    }

    /// The rollout the API holds and whether this node runs its next config (API mode).
    pub fn rollout_seen(&self) -> Option<RolloutSeen> {
        self.source.rollout_seen()
    }

    /// The live rules of `family` as the backend reads them (a rollout's invariants are judged
    /// on them, as `explain` judges a packet).
    pub fn inspect(
        &self,
        family: crate::plan::Family,
    ) -> Result<crate::backend::Inspection, crate::backend::BackendError> {
        self.enforcer
            .backend()
            .inspect(family, &self.settings.plan.names())
            .map(|inspected| inspected.inspection)
    }

    /// The config the source holds, while it is refused (invalid, unreadable, too large).
    pub fn rejection(&self) -> Option<&Rejection> {
        self.admission.rejection()
    }

    /// Set while a writer has the config file open (the directory watch sees it modified and
    /// not yet closed): the file is not read until it is whole.
    pub fn config_in_flux(&self) -> std::sync::Arc<std::sync::atomic::AtomicBool> {
        match &self.source {
            Source::Files(files) => files.in_flux.clone(),
            Source::Api(_) => std::sync::Arc::default(),
        }
    }

    /// In API mode, where the ConfigMap watcher publishes what it sees (None with a file).
    pub fn api_feed(&self) -> Option<crate::cluster::configmap::ConfigMapFeed> {
        match &self.source {
            Source::Files(_) => None,
            Source::Api(api) => Some(api.feed.clone()),
        }
    }

    /// Set by the event loop while it is subscribed to address changes: then a resolution
    /// stands until a change that matters is reported, and a steady pass reads no address.
    pub fn address_events(&self) -> std::sync::Arc<std::sync::atomic::AtomicBool> {
        self.node.address_events.clone()
    }

    /// What reading the memory limit found at start.
    pub fn memory_limit_found(&self) -> &crate::agent::memory::Limit {
        &self.node.memory_limit_found
    }

    /// What the conntrack reset of the last pass did (a dry run: would do), per family.
    pub fn conntrack_reports(&self) -> &[(crate::plan::Family, crate::conntrack::ResetReport)] {
        &self.enforcer.conntrack_reports
    }

    /// The resync interval of the config in force (upstream's 60s before any is valid).
    pub fn interval(&self) -> Duration {
        self.admission
            .config()
            .map_or(Duration::from_secs(60), Config::resync)
    }

    /// The node lock is ours: the backend may take over another's leftovers at its first
    /// install (see [`crate::backend::Backend::take_over_at_first_install`]).
    pub fn take_over_leftovers(&mut self) {
        if !self.settings.dry_run {
            self.enforcer.backend_mut().take_over_at_first_install();
        }
    }

    /// How many rules (iptables) or set elements (nftables) fit the usable share of `limit`
    /// with this backend, in its words (`16500 rules`).
    pub fn what_fits(&self, limit: u64) -> String {
        admission::what_fits(self.enforcer.backend(), limit)
    }

    /// How long to wait before the next pass: the resync interval, or, after failed syncs, a
    /// backoff from [`FIRST_RETRY`] doubling per failure, never longer than the interval.
    pub fn next_wait(&self) -> Duration {
        let mut wait = backoff(self.status.consecutive_failures, self.interval());
        if self.node.reread_soon {
            wait = wait.min(FIRST_RETRY);
        }
        match self.source.read_again_within() {
            Some(within) => wait.min(within),
            None => wait,
        }
    }

    /// Whether the active config names an output address: then the node's addresses are
    /// read at every pass, and an address change is worth a pass.
    pub fn uses_node_addresses(&self) -> bool {
        self.admission.config().is_some_and(|config| {
            let families = crate::plan::families(&self.settings.plan, config);
            crate::plan::egress::names_output_address(config, &families)
        })
    }

    /// The output addresses the active config names for the managed families: only an
    /// address change inside one of them can change what a pass resolves.
    pub fn egress_targets(&self) -> Vec<crate::config::egress::EgressTarget> {
        self.admission.config().map_or_else(Vec::new, |config| {
            let families = crate::plan::families(&self.settings.plan, config);
            crate::plan::egress::targets(config, &families)
        })
    }

    /// The pod share of the active config, when it sets one: what a scrape reads the
    /// refusals of.
    pub fn share_in_force(&self) -> Option<crate::agent::health::ShareInForce> {
        let config = self.admission.config()?;
        config
            .pod_share
            .is_limited()
            .then(|| crate::agent::health::ShareInForce {
                names: self.settings.plan.names(),
                families: crate::plan::families(&self.settings.plan, config),
            })
    }

    /// An address change that can move the output address was reported, or an operator asked
    /// for a fresh look (SIGHUP): the next pass reads the node's addresses.
    pub fn addresses_may_have_changed(&mut self) {
        self.node.addresses_may_have_changed();
    }

    /// Whether IPv6 is managed now (the flag, or the active config's `enableIPv6`).
    pub fn ipv6_managed(&self) -> bool {
        self.admission
            .config()
            .map_or(self.settings.plan.enable_ipv6, |config| {
                crate::plan::families(&self.settings.plan, config)
                    .contains(&crate::plan::Family::V6)
            })
    }

    /// What a failure's log line says about the retry: the backoff the failure being handled
    /// will lead to (it is not counted yet), none for a single pass, which does not retry.
    fn retry_note(&self) -> RetryNote {
        let single_pass = self.settings.single_pass;
        RetryNote {
            retry_in_s: (!single_pass).then(|| {
                backoff(self.status.consecutive_failures + 1, self.interval()).as_secs_f64()
            }),
            will_retry: if single_pass { "" } else { "; will retry" },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::enforce::ResetBasis;
    use super::*;
    use crate::backend::fake::{FakeBackend, FakeFamily};
    use crate::plan::Family;

    /// The stages' state the tests look at or set, reached through the reconciler.
    impl Reconciler {
        fn config_parses_skipped(&self) -> u64 {
            match &self.source {
                Source::Files(files) => files.parses_skipped,
                Source::Api(api) => api.parses_skipped,
            }
        }

        fn blank_since(&mut self) -> &mut Option<Instant> {
            match &mut self.source {
                Source::Files(files) => &mut files.blank_since,
                Source::Api(_) => unreachable!("an API source has no emptied file"),
            }
        }

        fn reset_basis(
            &mut self,
            ruleset: &crate::plan::Ruleset,
            jump_missing: bool,
        ) -> Option<ResetBasis> {
            let bypassed = enforce::Bypassed {
                jump_missing,
                drifted: false,
            };
            self.enforcer.reset_basis(ruleset, bypassed, &self.settings)
        }

        /// A sync that repaired drift (the jump in place).
        fn reset_basis_after_drift(
            &mut self,
            ruleset: &crate::plan::Ruleset,
        ) -> Option<ResetBasis> {
            let bypassed = enforce::Bypassed {
                jump_missing: false,
                drifted: true,
            };
            self.enforcer.reset_basis(ruleset, bypassed, &self.settings)
        }
    }

    struct Fixture {
        dir: std::path::PathBuf,
        fake: FakeBackend,
        reconciler: Reconciler,
    }

    fn fixture(name: &str) -> Fixture {
        let dir = std::env::temp_dir().join(format!("ipmasq-rec-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fake = FakeBackend::default();
        let settings = Settings {
            config: config::ConfigSource::File(dir.join("config")),
            api: None,
            options: config::Options::default(),
            plan: PlanOptions::default(),
            dry_run: false,
            single_pass: false,
            // The fake backend's rules are in no kernel: a reset would read (and delete from)
            // the conntrack table of the namespace the tests run in.
            conntrack_reset: crate::conntrack::judge::ResetScope::Off,
        };
        let reconciler = Reconciler::new(settings, Box::new(fake.clone()));
        Fixture {
            dir,
            fake,
            reconciler,
        }
    }

    /// A reconciler in API mode on the fake backend, with `saved` as its last-known-good.
    fn api_fixture(name: &str, saved: Option<&str>) -> Fixture {
        let mut f = fixture(name);
        let configmap: crate::cluster::configmap::ConfigMapRef =
            crate::cluster::configmap::DEFAULT_CONFIGMAP
                .parse()
                .unwrap();
        let last_known_good = saved.map(|text| crate::agent::last_known_good::LastKnownGood {
            schema_version: crate::agent::last_known_good::SCHEMA_VERSION,
            configmap: configmap.to_string(),
            provenance: "configmap kube-system/ip-masq-agent key config (resourceVersion 1)".into(),
            digest: None,
            saved_at: "2026-01-01T00:00:00Z".into(),
            text: Some(text.into()),
            pools: Vec::new(),
            policies: Vec::new(),
            node: Some("node-a".into()),
            seal: None,
        });
        let mut settings = f.reconciler.settings.clone();
        settings.api = Some(ApiSettings {
            configmap,
            credentials: crate::cluster::Credentials::InCluster,
            node_name: Some("node-a".into()),
            last_known_good,
            last_known_good_dir: "/nonexistent".into(),
            last_known_good_in_dir: true,
            status: Default::default(),
        });
        f.reconciler = Reconciler::new(settings, Box::new(f.fake.clone()));
        // The Node and the policies listed (no label, no policy): the ConfigMap's list gates.
        let feed = f.reconciler.api_feed().unwrap();
        crate::cluster::inputs::publish_node(
            &feed,
            crate::cluster::configmap::NodeLabels::Labels(Default::default()),
        );
        crate::cluster::inputs::publish_policies(&feed, Default::default());
        f
    }

    /// What the watcher would publish: the ConfigMap at `version` with `text` (None: deleted).
    fn api_event(f: &Fixture, version: u32, text: Option<&str>) -> bool {
        let target = crate::cluster::configmap::DEFAULT_CONFIGMAP
            .parse()
            .unwrap();
        let object = text.map(|text| {
            let mut object = k8s_openapi::api::core::v1::ConfigMap::default();
            object.metadata.resource_version = Some(version.to_string());
            object.data = Some([("config".to_string(), text.to_string())].into());
            object
        });
        let data = crate::cluster::configmap::ConfigMapData::of(&target, object.as_ref());
        crate::cluster::configmap::publish(&f.reconciler.api_feed().unwrap(), data)
    }

    #[test]
    fn api_mode_applies_nothing_before_the_first_list_then_each_new_text_once() {
        let mut f = api_fixture("api", None);
        write(&f, "nonMasqueradeCIDRs: [10.9.0.0/16]\n");
        assert!(
            matches!(f.reconciler.pass(), Pass::NoValidConfig),
            "no list yet: nothing applied, and the file is not read"
        );
        assert_eq!(f.fake.state().applies, 0);
        api_event(&f, 5, Some("nonMasqueradeCIDRs: [10.0.0.0/8]\n"));
        assert!(matches!(f.reconciler.pass(), Pass::Synced(_)));
        assert_eq!(cidr_rules(&f), ["169.254.0.0/16", "10.0.0.0/8"]);
        let read = f.reconciler.config_read().unwrap();
        assert_eq!(
            read.label,
            "configmap kube-system/ip-masq-agent key config (resourceVersion 5)"
        );
        assert_eq!(
            read.text.as_deref().map(String::as_str),
            Some("nonMasqueradeCIDRs: [10.0.0.0/8]\n")
        );
        // A relist (410 Gone) with the same text: no pass asked for, nothing parsed again.
        assert!(!api_event(
            &f,
            9,
            Some("nonMasqueradeCIDRs: [10.0.0.0/8]\n")
        ));
        f.reconciler.pass();
        assert_eq!(f.reconciler.config_parses_skipped(), 1);
        assert_eq!(f.reconciler.status.configs_accepted, 1);
        // An invalid edit: the last good config stays in force.
        assert!(api_event(
            &f,
            10,
            Some("nonMasqueradeCIDRs: [10.1.2.3/8]\n")
        ));
        f.reconciler.pass();
        assert_eq!(cidr_rules(&f), ["169.254.0.0/16", "10.0.0.0/8"]);
        assert!(!f.reconciler.status.config_current);
        // Deleted: the missing file's defaults.
        assert!(api_event(&f, 11, None));
        f.reconciler.pass();
        assert_eq!(
            cidr_rules(&f),
            [
                "169.254.0.0/16",
                "10.0.0.0/8",
                "172.16.0.0/12",
                "192.168.0.0/16"
            ]
        );
    }

    #[test]
    fn api_mode_starts_from_the_last_known_good_until_the_api_is_listed() {
        let mut f = api_fixture("api-lkg", Some("nonMasqueradeCIDRs: [10.0.0.0/8]\n"));
        assert!(matches!(f.reconciler.pass(), Pass::Synced(_)));
        assert_eq!(cidr_rules(&f), ["169.254.0.0/16", "10.0.0.0/8"]);
        assert!(f
            .reconciler
            .config_read()
            .unwrap()
            .label
            .starts_with(LAST_KNOWN_GOOD));
        // The API lists the same text: nothing is applied again.
        api_event(&f, 3, Some("nonMasqueradeCIDRs: [10.0.0.0/8]\n"));
        f.reconciler.pass();
        assert_eq!(f.reconciler.status.configs_accepted, 1);
        assert_eq!(f.reconciler.config_parses_skipped(), 1);
        // The config in force is now known by its API source (the state file, the mirror).
        assert_eq!(
            f.reconciler.config_read().unwrap().label,
            "configmap kube-system/ip-masq-agent key config (resourceVersion 3)"
        );
        // Then an edit replaces it.
        api_event(&f, 4, Some("nonMasqueradeCIDRs: [172.16.0.0/12]\n"));
        f.reconciler.pass();
        assert_eq!(cidr_rules(&f), ["169.254.0.0/16", "172.16.0.0/12"]);
    }

    #[test]
    fn api_mode_prefers_a_completed_list_to_the_last_known_good() {
        let mut f = api_fixture("api-listed", Some("nonMasqueradeCIDRs: [10.0.0.0/8]\n"));
        api_event(&f, 7, Some("nonMasqueradeCIDRs: [192.168.0.0/16]\n"));
        f.reconciler.pass();
        assert_eq!(cidr_rules(&f), ["169.254.0.0/16", "192.168.0.0/16"]);
        assert_eq!(f.reconciler.status.configs_accepted, 1);
    }

    fn pool(selector: &str, text: &str) -> crate::cluster::configmap::PoolData {
        crate::cluster::configmap::PoolData {
            selector: selector.into(),
            text: Some(text.into()),
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> crate::cluster::configmap::NodeLabels {
        crate::cluster::configmap::NodeLabels::Labels(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn api_mode_waits_for_every_kind_then_composes_pools_and_policies() {
        let mut f = api_fixture("api-pools", None);
        let feed = f.reconciler.api_feed().unwrap();
        // Back to "not listed" for the Node and the policies.
        {
            let mut state = feed.lock().unwrap();
            state.node = None;
            state.policies = None;
        }
        let target: crate::cluster::configmap::ConfigMapRef =
            crate::cluster::configmap::DEFAULT_CONFIGMAP
                .parse()
                .unwrap();
        let mut base = k8s_openapi::api::core::v1::ConfigMap::default();
        base.metadata.resource_version = Some("4".into());
        base.data = Some(
            [(
                "config".to_string(),
                "nonMasqueradeCIDRs: [10.0.0.0/8]\n".to_string(),
            )]
            .into(),
        );
        let pools = [(
            "ip-masq-agent-gpu".to_string(),
            pool("pool=gpu", "nonMasqueradeCIDRs: [100.64.0.0/10]\n"),
        )]
        .into();
        crate::cluster::configmap::publish_listing(
            &feed,
            crate::cluster::configmap::ConfigMapData::of(&target, Some(&base)),
            pools,
        );
        crate::cluster::inputs::publish_node(&feed, labels(&[("pool", "gpu")]));
        assert!(
            matches!(f.reconciler.pass(), Pass::NoValidConfig),
            "the policies are not listed yet: nothing applied"
        );
        assert_eq!(f.fake.state().applies, 0);
        let policy = crate::config::composed::PolicyText {
            name: "keep".into(),
            text: r#"{"apiVersion":"networking.gke.io/v1","kind":"EgressNATPolicy","metadata":{"name":"keep"},"spec":{"action":"NoSNAT","destinations":[{"cidr":"198.51.100.0/24"}]}}"#.into(),
        };
        crate::cluster::inputs::publish_policies(&feed, [("keep".to_string(), policy)].into());
        assert!(matches!(f.reconciler.pass(), Pass::Synced(_)));
        assert_eq!(
            cidr_rules(&f),
            [
                "169.254.0.0/16",
                "10.0.0.0/8",
                "100.64.0.0/10",
                "198.51.100.0/24"
            ],
            "the first rules applied hold the pool and the policy"
        );
        assert_eq!(f.fake.state().applies, 1);
        let read = f.reconciler.config_read().unwrap().clone();
        assert_eq!(
            read.label,
            "configmap kube-system/ip-masq-agent key config (resourceVersion 4) + pools ip-masq-agent-gpu + egressnatpolicies keep"
        );
        let composed = read.composed.clone().unwrap();
        assert_eq!(read.digest, composed.digest());
        // Relabelled: the pool no longer applies.
        assert!(crate::cluster::inputs::publish_node(
            &feed,
            labels(&[("pool", "cpu")])
        ));
        f.reconciler.pass();
        assert_eq!(
            cidr_rules(&f),
            ["169.254.0.0/16", "10.0.0.0/8", "198.51.100.0/24"]
        );
        // The same labels again: nothing new.
        assert!(!crate::cluster::inputs::publish_node(
            &feed,
            labels(&[("pool", "cpu")])
        ));
        assert_last_known_good_reproduces(&read, &target);
    }

    #[test]
    fn api_mode_without_a_node_name_or_node_applies_no_pool() {
        for node in [
            crate::cluster::configmap::NodeLabels::Unnamed,
            crate::cluster::configmap::NodeLabels::NotFound,
        ] {
            let mut f = api_fixture("api-unnamed", None);
            let feed = f.reconciler.api_feed().unwrap();
            crate::cluster::inputs::publish_node(&feed, node);
            let target: crate::cluster::configmap::ConfigMapRef =
                crate::cluster::configmap::DEFAULT_CONFIGMAP
                    .parse()
                    .unwrap();
            // The empty selector selects every node that has labels to match.
            let pools = [(
                "ip-masq-agent-all".to_string(),
                pool("", "nonMasqueradeCIDRs: [100.64.0.0/10]\n"),
            )]
            .into();
            crate::cluster::configmap::publish_listing(
                &feed,
                crate::cluster::configmap::ConfigMapData::of(&target, None),
                pools,
            );
            assert!(matches!(f.reconciler.pass(), Pass::Synced(_)));
            assert!(!cidr_rules(&f).contains(&"100.64.0.0/10".to_string()));
            assert!(f.reconciler.config_read().unwrap().composed.is_none());
        }
    }

    /// The last-known-good saved from a composed read gives a new agent the same config.
    fn assert_last_known_good_reproduces(
        read: &ActiveRead,
        target: &crate::cluster::configmap::ConfigMapRef,
    ) {
        let composed = read.composed.clone().unwrap();
        // The last-known-good saved from the composed read reproduces the same config.
        let saved = crate::agent::last_known_good::LastKnownGood {
            schema_version: crate::agent::last_known_good::SCHEMA_VERSION,
            configmap: target.to_string(),
            provenance: read.label.clone(),
            digest: read.digest.clone(),
            saved_at: "2026-01-01T00:00:00Z".into(),
            text: read.text.as_deref().cloned(),
            pools: composed.pools.clone(),
            policies: composed.policies.clone(),
            node: None,
            seal: None,
        };
        let mut g = api_fixture("api-pools-lkg", None);
        let mut settings = g.reconciler.settings.clone();
        settings.api.as_mut().unwrap().last_known_good = Some(saved);
        g.reconciler = Reconciler::new(settings, Box::new(g.fake.clone()));
        assert!(matches!(g.reconciler.pass(), Pass::Synced(_)));
        assert_eq!(
            cidr_rules(&g),
            [
                "169.254.0.0/16",
                "10.0.0.0/8",
                "100.64.0.0/10",
                "198.51.100.0/24"
            ]
        );
        assert_eq!(g.reconciler.config_read().unwrap().digest, read.digest);
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn write(f: &Fixture, text: &str) {
        std::fs::write(f.dir.join("config"), text).unwrap();
    }

    /// The pass after `burst` (commands queued for the reconcile thread, as one burst).
    fn pass_after(f: &mut Fixture, burst: &[crate::agent::Trigger]) -> Pass {
        let (commands, queue) = std::sync::mpsc::channel();
        for &trigger in burst {
            commands.send(crate::agent::Command::Pass(trigger)).unwrap();
        }
        let woke = crate::agent::next_trigger(&mut f.reconciler, &queue);
        assert_eq!(
            woke.map(|t| format!("{t:?}")),
            Some(format!("{:?}", burst[0]))
        );
        f.reconciler.pass()
    }

    /// A pass that a neighbour's commit or an address change woke acts on the config in force
    /// and leaves the file unread (a writer may be mid-way); a burst that also holds a trigger
    /// a config change can start reads it, and so does a reconciler without a config yet.
    #[test]
    fn a_pass_no_config_change_woke_leaves_the_config_file_unread() {
        use crate::agent::Trigger;
        let mut f = fixture("unread");
        write(&f, "nonMasqueradeCIDRs: [10.0.0.0/8]\n");
        f.reconciler.keep_the_config_file_unread();
        assert!(
            matches!(f.reconciler.pass(), Pass::Synced(_)),
            "no config yet: read"
        );
        assert_eq!(cidr_rules(&f), ["169.254.0.0/16", "10.0.0.0/8"]);

        write(&f, "nonMasqueradeCIDRs: [100.64\n");
        assert!(matches!(
            pass_after(&mut f, &[Trigger::ForeignChange, Trigger::AddressChanged]),
            Pass::Synced(_)
        ));
        assert!(
            f.reconciler.rejection().is_none(),
            "the half-written file was read"
        );
        assert_eq!(cidr_rules(&f), ["169.254.0.0/16", "10.0.0.0/8"]);

        write(&f, "nonMasqueradeCIDRs: [100.64.0.0/10]\n");
        pass_after(&mut f, &[Trigger::ForeignChange, Trigger::ConfigChanged]);
        assert_eq!(cidr_rules(&f), ["169.254.0.0/16", "100.64.0.0/10"]);

        write(&f, "nonMasqueradeCIDRs: [10.0.0.0/8]\n");
        pass_after(&mut f, &[Trigger::ForeignChange]);
        assert_eq!(cidr_rules(&f), ["169.254.0.0/16", "100.64.0.0/10"]);
        // Once only: the next pass reads the file again.
        f.reconciler.pass();
        assert_eq!(cidr_rules(&f), ["169.254.0.0/16", "10.0.0.0/8"]);
    }

    /// The non-masquerade CIDRs of the installed IPv4 ruleset.
    fn cidr_rules(f: &Fixture) -> Vec<String> {
        f.fake
            .live(Family::V4)
            .ruleset
            .map(|r| r.non_masquerade().map(ToString::to_string).collect())
            .unwrap_or_default()
    }

    #[test]
    fn missing_file_installs_defaults_then_steady_state_writes_nothing() {
        let mut f = fixture("defaults");
        assert!(matches!(f.reconciler.pass(), Pass::Synced(_)));
        assert_eq!(
            cidr_rules(&f),
            [
                "169.254.0.0/16",
                "10.0.0.0/8",
                "172.16.0.0/12",
                "192.168.0.0/16"
            ]
        );
        assert_eq!(f.fake.state().applies, 1);
        for _ in 0..3 {
            f.reconciler.pass();
        }
        assert_eq!(f.fake.state().applies, 1, "in sync: no writes");
        assert_eq!(f.fake.state().syncs, 4, "one sync per family and pass");
        assert_eq!(f.reconciler.status.syncs_ok, 4);
    }

    /// The answers of `/healthz` and `/readyz` checked against their documented status.
    #[derive(Default)]
    struct Documented {
        answered: Vec<(String, crate::agent::endpoints::Case)>,
    }

    impl Documented {
        fn check(
            &mut self,
            path: &str,
            case: crate::agent::endpoints::Case,
            answer: Result<String, String>,
        ) {
            let got = if answer.is_ok() { 200 } else { 503 };
            assert_eq!(
                crate::agent::endpoints::documented_status(path, case),
                Some(got),
                "{path} in {case:?} answers {got} ({answer:?}), not what the docs say"
            );
            self.answered.push((path.to_string(), case));
        }
    }

    fn snapshot_of(f: &Fixture) -> crate::agent::health::Snapshot {
        let mut snapshot =
            crate::agent::health::Snapshot::new(crate::backend::BackendId::IptablesNft);
        snapshot.status = f.reconciler.status.clone();
        snapshot
    }

    /// Liveness in each of its states, and readiness before the first pass.
    fn check_start_and_liveness(documented: &mut Documented) {
        use crate::agent::endpoints::Case;
        use crate::agent::health::{liveness, readiness, stall_limit};
        let s = snapshot_of(&fixture("endpoints-start"));
        documented.check("/readyz", Case::Starting, readiness(&s));
        documented.check("/healthz", Case::Alive, liveness(&s, s.started));
        let stall = stall_limit(s.interval) + Duration::from_secs(1);
        documented.check("/healthz", Case::LoopStuck, liveness(&s, s.started + stall));
        let mut overran = s.clone();
        overran.status.last_pass = Some(s.started + stall);
        overran.running_since = Some(s.started + Duration::from_secs(1));
        let later = s.started + stall + Duration::from_secs(1);
        documented.check("/healthz", Case::PassOverran, liveness(&overran, later));
    }

    /// Readiness through real passes: invalid at start, in force, rejected after a good one,
    /// refused for memory, a failed sync, an output address fallback.
    fn check_readiness_through_passes(documented: &mut Documented) {
        use crate::agent::endpoints::Case;
        use crate::agent::health::readiness;
        let mut f = fixture("endpoints-invalid");
        write(&f, "nonMasqueradeCIDRs: [10.1.2.3/8]\n");
        f.reconciler.pass();
        documented.check("/readyz", Case::NoValidConfig, readiness(&snapshot_of(&f)));
        write(&f, "nonMasqueradeCIDRs: [10.0.0.0/8]\n");
        f.reconciler.pass();
        documented.check("/readyz", Case::InForce, readiness(&snapshot_of(&f)));
        write(&f, "nonMasqueradeCIDRs: [10.1.2.3/8]\n");
        f.reconciler.pass();
        let rejected = readiness(&snapshot_of(&f));
        assert!(
            rejected.as_ref().is_ok_and(|body| body
                .contains("config rejected, the last good config stays in force: ")
                && body.contains(&format!("{}:1:", f.dir.join("config").display()))
                && body.contains("[cidr-not-aligned]")),
            "{rejected:?}"
        );
        documented.check("/readyz", Case::RejectedWhileLastGoodInForce, rejected);
        f.reconciler.node.set_memory_limit(Some(64 << 20));
        write_distinct_cidrs(&f, 60_000);
        f.reconciler.pass();
        documented.check(
            "/readyz",
            Case::RefusedForMemory,
            readiness(&snapshot_of(&f)),
        );
        f.reconciler.node.set_memory_limit(None);
        write(&f, "nonMasqueradeCIDRs: [10.0.0.0/8]\n");
        f.fake.set_live(Family::V4, FakeFamily::default());
        f.fake.state().fail_apply = Some("refused".into());
        f.reconciler.pass();
        documented.check("/readyz", Case::SyncFailed, readiness(&snapshot_of(&f)));
        let mut fallback = snapshot_of(&f);
        fallback.status.not_ready = None;
        fallback
            .status
            .egress_fallback
            .insert(Family::V4, Some("no such address".into()));
        documented.check("/readyz", Case::OutputAddressFallback, readiness(&fallback));
    }

    /// Every answer `/healthz` and `/readyz` are documented to give (the one text of
    /// `agent::endpoints`, which the man page and docs/reference/endpoints.md are made of)
    /// is what they answer in that state, reached by real passes where a pass reaches it.
    #[test]
    fn the_endpoints_answer_as_documented() {
        let mut documented = Documented::default();
        check_start_and_liveness(&mut documented);
        check_readiness_through_passes(&mut documented);
        for endpoint in crate::agent::endpoints::ENDPOINTS
            .iter()
            .filter(|e| e.path != "/metrics")
        {
            for answer in endpoint.answers {
                assert!(
                    documented
                        .answered
                        .contains(&(endpoint.path.to_string(), answer.case)),
                    "{} {:?} is documented but not checked",
                    endpoint.path,
                    answer.case
                );
            }
        }
    }

    #[test]
    fn invalid_config_keeps_the_last_good_one_and_keeps_healing() {
        let mut f = fixture("keep");
        write(&f, "nonMasqueradeCIDRs: [10.0.0.0/8]\n");
        f.reconciler.pass();
        write(&f, "nonMasqueradeCIDRs: [10.1.2.3/8]\n");
        f.reconciler.pass();
        assert_eq!(cidr_rules(&f), ["169.254.0.0/16", "10.0.0.0/8"]);
        assert!(!f.reconciler.status.config_current);
        assert_eq!(f.reconciler.status.configs_rejected, 1);
        let rejection = f
            .reconciler
            .rejection()
            .expect("the refused config, for the mirror");
        assert_eq!(
            rejection.digest,
            Some(crate::config::digest::sha256_hex(
                b"nonMasqueradeCIDRs: [10.1.2.3/8]\n"
            ))
        );
        assert!(
            rejection.diagnostic.contains("[cidr-not-aligned]"),
            "{rejection:?}"
        );
        assert!(rejection.source.ends_with("config"), "{rejection:?}");
        // Drift while the file is bad is still repaired with the last good config.
        f.fake.set_live(Family::V4, FakeFamily::default());
        f.reconciler.pass();
        assert_eq!(cidr_rules(&f), ["169.254.0.0/16", "10.0.0.0/8"]);
        assert_eq!(
            f.reconciler.status.configs_rejected, 1,
            "counted once per change"
        );
        // Fixing the file applies the new config.
        write(&f, "nonMasqueradeCIDRs: [192.168.0.0/16]\n");
        f.reconciler.pass();
        assert_eq!(cidr_rules(&f), ["169.254.0.0/16", "192.168.0.0/16"]);
        assert!(f.reconciler.status.config_current);
        assert_eq!(f.reconciler.rejection(), None, "no refusal once fixed");
    }

    #[test]
    fn a_config_with_an_unsupported_key_is_rejected_not_applied() {
        let mut f = fixture("complex-key");
        write(&f, "? [a, b]\n: 1\n");
        assert!(matches!(f.reconciler.pass(), Pass::NoValidConfig));
        assert_eq!(f.fake.state().applies, 0);
        assert_eq!(f.reconciler.status.configs_rejected, 1);
    }

    #[test]
    fn an_unchanged_file_is_not_parsed_again() {
        let mut f = fixture("cache");
        write(&f, "nonMasqueradeCIDRs: [10.0.0.0/8]\n");
        f.reconciler.pass();
        f.reconciler.pass();
        f.reconciler.pass();
        assert_eq!(f.reconciler.config_parses_skipped(), 2);
        write(&f, "nonMasqueradeCIDRs: [10.0.0.0/8, 192.168.0.0/16]\n");
        f.reconciler.pass();
        assert_eq!(
            f.reconciler.config_parses_skipped(),
            2,
            "a change is parsed"
        );
        assert_eq!(cidr_rules(&f).len(), 3);
    }

    #[test]
    fn invalid_at_start_installs_nothing_until_fixed() {
        let mut f = fixture("start");
        write(&f, "resyncInterval: 1d\n");
        assert!(matches!(f.reconciler.pass(), Pass::NoValidConfig));
        assert_eq!(f.fake.state().applies, 0);
        assert!(f.reconciler.status.not_ready.is_some());
        write(&f, "resyncInterval: 5s\n");
        assert!(matches!(f.reconciler.pass(), Pass::Synced(_)));
        assert_eq!(f.reconciler.interval(), Duration::from_secs(5));
        assert!(f.reconciler.status.not_ready.is_none());
    }

    /// `cat > file` leaves the file empty for a moment: the config in force stays until the
    /// file has stayed empty for [`BLANK_GRACE`]; an empty file at start is the defaults.
    #[test]
    fn an_emptied_file_is_the_defaults_only_once_it_stays_empty() {
        let mut f = fixture("emptied");
        write(&f, "nonMasqueradeCIDRs: [10.0.0.0/8, 100.64.0.0/10]\n");
        f.reconciler.pass();
        write(&f, "");
        f.reconciler.pass();
        assert_eq!(
            cidr_rules(&f),
            ["169.254.0.0/16", "10.0.0.0/8", "100.64.0.0/10"]
        );
        assert!(f.reconciler.next_wait() <= BLANK_GRACE);
        // The writer finishes: its config, never the defaults in between.
        write(&f, "nonMasqueradeCIDRs: [100.64.0.0/10]\n");
        f.reconciler.pass();
        assert_eq!(cidr_rules(&f), ["169.254.0.0/16", "100.64.0.0/10"]);
        assert_eq!(f.reconciler.status.configs_accepted, 2);
        // Emptied for good: the defaults once the grace has passed.
        write(&f, "");
        f.reconciler.pass();
        assert_eq!(cidr_rules(&f), ["169.254.0.0/16", "100.64.0.0/10"]);
        *f.reconciler.blank_since() = Some(Instant::now() - BLANK_GRACE);
        f.reconciler.pass();
        assert_eq!(cidr_rules(&f).len(), 4, "the defaults");
        // While a writer holds the file, it is not read at all.
        f.reconciler
            .config_in_flux()
            .store(true, std::sync::atomic::Ordering::Release);
        write(&f, "nonMasqueradeCIDRs: [10.0.0.0/8\n");
        f.reconciler.pass();
        assert_eq!(cidr_rules(&f).len(), 4);
        assert_eq!(f.reconciler.status.configs_rejected, 0);
    }

    /// Writes a config of `count` distinct /24s inside 10.0.0.0/8 (and a `cidrLimit` that
    /// admits them).
    fn write_distinct_cidrs(f: &Fixture, count: u32) {
        let many: Vec<String> = (0..count)
            .map(|i| format!("10.{}.{}.0/24", i >> 8 & 0xff, i & 0xff))
            .collect();
        write(
            f,
            &format!(
                "cidrLimit: 100000\nnonMasqueradeCIDRs: [{}]\n",
                many.join(",")
            ),
        );
    }

    /// A list whose estimated peak exceeds the memory limit is refused: the last good config
    /// stays in force, the agent is not ready, and a list that fits is taken again.
    #[test]
    fn a_config_that_cannot_fit_the_memory_limit_is_refused() {
        let mut f = fixture("memory");
        f.reconciler.node.set_memory_limit(Some(64 << 20));
        write(&f, "nonMasqueradeCIDRs: [10.0.0.0/8]\n");
        f.reconciler.pass();
        assert!(f.reconciler.status.not_ready.is_none());
        // The fake's model: 8 MiB + 10 MiB per 10,000 CIDRs; 57.6 MiB usable of 64.
        write_distinct_cidrs(&f, 60_000);
        assert!(matches!(f.reconciler.pass(), Pass::Synced(_)));
        assert_eq!(cidr_rules(&f), ["169.254.0.0/16", "10.0.0.0/8"]);
        let reason = f.reconciler.status.not_ready.clone().unwrap();
        assert!(
            reason.contains("more than 90% of this agent's memory limit of 64.0 MiB"),
            "{reason}"
        );
        assert!(
            reason.contains(
                "for this config (60000 CIDRs listed) the fake backend writes 60002 rules: about 68.0 MiB at the peak"
            ),
            "{reason}"
        );
        assert!(reason.contains("at most about 49599 rules fit"), "{reason}");
        assert!(
            reason.contains("raise the container's memory limit to at least 76.0 MiB"),
            "{reason}"
        );
        assert_eq!(f.reconciler.status.configs_rejected, 1);
        assert!(!f.reconciler.status.config_current);
        f.reconciler.pass();
        assert_eq!(
            f.reconciler.status.configs_rejected, 1,
            "counted once per change"
        );
        write(&f, "nonMasqueradeCIDRs: [192.168.0.0/16]\n");
        f.reconciler.pass();
        assert_eq!(cidr_rules(&f), ["169.254.0.0/16", "192.168.0.0/16"]);
        assert!(f.reconciler.status.not_ready.is_none());
    }

    /// A peak just over the usable share of 64 MiB: the limit suggested is above the one the
    /// agent has (it once said "raise the container's memory limit to at least 64.0 MiB" to
    /// an agent with 64 MiB: 90 % of the limit and the suggestion both rounded down).
    #[test]
    fn a_peak_just_over_the_limit_never_suggests_the_limit_the_agent_has() {
        let mut f = fixture("memory-edge");
        f.reconciler.node.set_memory_limit(Some(64 << 20));
        // The fake's model: 8 MiB + 1 MiB per 1,000 rules; 49,600 CIDRs and more are over the
        // 57.6 MiB usable.
        write_distinct_cidrs(&f, 49_600);
        f.reconciler.pass();
        let reason = f.reconciler.status.not_ready.clone().unwrap();
        assert!(
            !reason.contains("at least 64.0 MiB"),
            "suggests the limit the agent has: {reason}"
        );
        assert!(
            reason.contains("raise the container's memory limit to at least 65.0 MiB"),
            "{reason}"
        );
    }

    #[test]
    fn an_empty_file_at_start_is_the_defaults() {
        let mut f = fixture("empty-start");
        write(&f, "");
        f.reconciler.pass();
        assert_eq!(cidr_rules(&f).len(), 4);
    }

    #[test]
    fn removed_file_means_defaults() {
        let mut f = fixture("removed");
        write(&f, "nonMasqueradeCIDRs: [10.0.0.0/8]\n");
        f.reconciler.pass();
        std::fs::remove_file(f.dir.join("config")).unwrap();
        f.reconciler.pass();
        assert_eq!(cidr_rules(&f).len(), 4);
    }

    #[test]
    fn apply_failure_is_reported_and_retried() {
        let mut f = fixture("fail");
        f.fake.state().fail_apply = Some("boom".into());
        assert!(matches!(f.reconciler.pass(), Pass::Failed(_)));
        assert_eq!(f.reconciler.status.syncs_failed, 1);
        assert!(f
            .reconciler
            .status
            .not_ready
            .as_deref()
            .unwrap()
            .contains("boom"));
        f.fake.state().fail_apply = None;
        assert!(matches!(f.reconciler.pass(), Pass::Synced(_)));
        assert_eq!(
            f.reconciler.status.drift_repairs.get("chain_missing"),
            Some(&1)
        );
        assert_eq!(
            f.reconciler.status.drift_repairs.get("jump_missing"),
            Some(&1)
        );
    }

    #[test]
    fn failed_syncs_are_retried_with_a_bounded_exponential_backoff() {
        let mut f = fixture("backoff");
        write(&f, "resyncInterval: 10s\n");
        f.fake.state().fail_apply = Some("locked".into());
        let mut waits = Vec::new();
        for _ in 0..6 {
            assert!(matches!(f.reconciler.pass(), Pass::Failed(_)));
            waits.push(f.reconciler.status.next_pass_in.as_secs());
        }
        assert_eq!(waits, [1, 2, 4, 8, 10, 10]);
        f.fake.state().fail_apply = None;
        assert!(matches!(f.reconciler.pass(), Pass::Synced(_)));
        assert_eq!(f.reconciler.status.consecutive_failures, 0);
        assert_eq!(f.reconciler.status.next_pass_in, Duration::from_secs(10));
    }

    #[test]
    fn a_config_change_is_applied_not_counted_as_drift() {
        let mut f = fixture("config-applied");
        write(&f, "nonMasqueradeCIDRs: [10.0.0.0/8]\n");
        f.reconciler.pass();
        let at_start = f.reconciler.status.drift_repairs.clone();
        assert_eq!(f.reconciler.status.config_changes_applied, 0);
        write(&f, "nonMasqueradeCIDRs: [10.0.0.0/8, 192.168.0.0/16]\n");
        let Pass::Synced(reports) = f.reconciler.pass() else {
            panic!("should sync")
        };
        assert!(
            reports.iter().any(|r| !r.in_sync()),
            "the change was written"
        );
        assert_eq!(f.reconciler.status.config_changes_applied, 1);
        assert_eq!(
            f.reconciler.status.drift_repairs, at_start,
            "a config change is not a drift repair"
        );
        // The same rules rewritten by someone else, the config unchanged: drift.
        let mut live = f.fake.live(Family::V4);
        live.ruleset = None;
        live.jumps = 1;
        f.fake.set_live(Family::V4, live);
        f.reconciler.pass();
        assert_eq!(f.reconciler.status.config_changes_applied, 1);
        assert_ne!(f.reconciler.status.drift_repairs, at_start);
    }

    #[test]
    fn injected_drift_is_counted_by_repair_kind() {
        let mut f = fixture("drift");
        f.reconciler.pass();
        let mut live = f.fake.live(Family::V4);
        live.jumps = 3;
        f.fake.set_live(Family::V4, live);
        let Pass::Synced(reports) = f.reconciler.pass() else {
            panic!("should sync")
        };
        assert_eq!(reports[0].repairs(), ["jump_duplicate"]);
        assert_eq!(
            f.reconciler.status.drift_repairs.get("jump_duplicate"),
            Some(&1)
        );
    }

    #[test]
    fn dry_run_writes_nothing_but_reports_the_transaction() {
        let mut f = fixture("dry");
        f.reconciler.settings.dry_run = true;
        let Pass::Synced(reports) = f.reconciler.pass() else {
            panic!("dry run should plan")
        };
        assert_eq!(f.fake.state().applies, 0);
        assert!(reports[0].transaction.is_some());
        assert_eq!(reports[0].repairs(), ["chain_missing", "jump_missing"]);
    }

    /// An output address the plan could not resolve (no address of the node read) is never
    /// handed to the backend: the family fails the pass in the backend's own words, and
    /// nothing is synced.
    #[test]
    fn an_unresolved_output_address_never_reaches_the_backend() {
        let f = fixture("unresolved");
        let config =
            config::check_text("outputAddress: 203.0.113.9\n", &config::Options::default())
                .into_config()
                .expect("a valid config");
        let mut planner = Planner::default();
        let facts = node_facts::NodeFacts::default();
        let planned = planner.plan(&PlanInputs {
            config: (&config, 1),
            node: (&facts, 0),
            flags: &PlanOptions::default(),
        });
        assert!(
            matches!(
                planned,
                [Err(enforce::Unresolved {
                    family: Family::V4,
                    ..
                })]
            ),
            "{planned:?}"
        );
        let mut enforcer = Enforcer::new(Box::new(f.fake.clone()));
        let retry = RetryNote {
            retry_in_s: None,
            will_retry: "",
        };
        let Pass::Failed(err) = enforcer.enforce(planned, &f.reconciler.settings, &retry) else {
            panic!("an unresolved output address must fail the pass")
        };
        assert_eq!(
            err.to_string(),
            "the output address 203.0.113.9 is not resolved to an address of this node"
        );
        assert_eq!(f.fake.state().syncs, 0, "nothing reached the backend");
        // Resolved (the node holds it), the same config is synced.
        let facts = node_facts::NodeFacts {
            egress: crate::plan::ResolvedEgress {
                v4: Some("203.0.113.9".parse().unwrap()),
                ..Default::default()
            },
            memory_limit: None,
        };
        let planned = planner.plan(&PlanInputs {
            config: (&config, 1),
            node: (&facts, 1),
            flags: &PlanOptions::default(),
        });
        assert!(matches!(
            enforcer.enforce(planned, &f.reconciler.settings, &retry),
            Pass::Synced(_)
        ));
        assert_eq!(f.fake.state().syncs, 1);
    }

    fn v4_ruleset(cidrs: &str) -> crate::plan::Ruleset {
        let config = config::check_text(
            &format!("nonMasqueradeCIDRs: [{cidrs}]"),
            &config::Options::default(),
        )
        .into_config()
        .expect("a valid config");
        crate::plan::plan_family(
            &config,
            &PlanOptions::default(),
            &crate::plan::ResolvedEgress::default(),
            Family::V4,
        )
    }

    #[test]
    fn a_reset_judges_flows_by_the_rules_they_were_decided_by() {
        use crate::conntrack::judge::ResetScope;
        let mut f = fixture("basis");
        let (one, two) = (
            v4_ruleset("10.0.0.0/8"),
            v4_ruleset("10.0.0.0/8, 203.0.113.0/24"),
        );
        let rec = &mut f.reconciler;
        rec.settings.conntrack_reset = ResetScope::Connectionless;
        // A restart: rules of ours were there, what decided the tracked flows is unknown.
        assert_eq!(rec.reset_basis(&one, false), None);
        // A steady pass.
        assert_eq!(rec.reset_basis(&one, false), None);
        // A change: the flows were decided by the rules in force before.
        assert_eq!(
            rec.reset_basis(&two, false),
            Some(ResetBasis::Previous(one.clone()))
        );
        // The chain and jump deleted under the agent and put back, the same rules: the flows
        // of the gap were decided without rules of ours.
        assert_eq!(rec.reset_basis(&two, true), Some(ResetBasis::NoRulesOfOurs));
        // Our chain flushed under the agent, the jump in place, the same rules: the same.
        assert_eq!(
            rec.reset_basis_after_drift(&two),
            Some(ResetBasis::NoRulesOfOurs)
        );
        // A change of plan that also wrote: judged by the rules before, as any change.
        assert_eq!(
            rec.reset_basis_after_drift(&one),
            Some(ResetBasis::Previous(two.clone()))
        );
        assert_eq!(
            rec.reset_basis(&two, false),
            Some(ResetBasis::Previous(one.clone()))
        );
        // A fresh node (or after a cleanup): the same.
        let mut fresh = fixture("basis-fresh");
        fresh.reconciler.settings.conntrack_reset = ResetScope::All;
        assert_eq!(
            fresh.reconciler.reset_basis(&one, true),
            Some(ResetBasis::NoRulesOfOurs)
        );
        // Turned off: never, and what is in force is still recorded.
        rec.settings.conntrack_reset = ResetScope::Off;
        assert_eq!(rec.reset_basis(&one, true), None);
        rec.settings.conntrack_reset = ResetScope::Connectionless;
        assert_eq!(rec.reset_basis(&one, false), None);
        // A dry run compares what changed with the live rules.
        rec.settings.dry_run = true;
        assert_eq!(rec.reset_basis(&two, true), Some(ResetBasis::Live));
        assert_eq!(rec.reset_basis(&two, true), None);
    }
}
