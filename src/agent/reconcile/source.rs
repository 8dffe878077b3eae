//! The source stage of a pass: where the config comes from (a file or a directory of files,
//! or in API mode the data key of a ConfigMap), read only when its bytes changed and only
//! once a writer is done with them (the API: once its first list is complete). It yields the
//! bytes it read ([`config::SourceText`]), never a parsed config: parsing and checking them
//! is admission's, the same for a file and a ConfigMap.

use crate::agent::last_known_good::LastKnownGood;
use crate::cluster::configmap::{ConfigMapFeed, ConfigMapRef, FeedState};
use crate::config::composed::{ComposedText, PoolText};
use crate::config::{self, ConfigOrigin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

/// How long a config file that was emptied must stay empty before its emptiness is taken as
/// "use the defaults": a writer that truncates and then writes (`cat > file`) leaves it empty
/// for a moment, and upstream's defaults in that moment would masquerade what the config keeps.
pub const BLANK_GRACE: Duration = Duration::from_secs(2);

/// Where the passes read their config: one variant per kind of source.
pub enum Source {
    /// `--config` (one file) or `--config-dir` (files merged).
    Files(FileSource),
    /// `--config-source=api`: the ConfigMap's data key, as the API watcher last saw it.
    Api(Box<ApiSource>),
}

/// What API mode is started with (`--config-source=api`).
#[derive(Clone, Debug)]
pub struct ApiSettings {
    /// `--configmap NAMESPACE/NAME` (data key `config`).
    pub configmap: ConfigMapRef,
    /// `--kubeconfig`, else the pod's service account.
    pub credentials: crate::cluster::Credentials,
    /// This node's name (`--node-name`, `$NODE_NAME`, the host name).
    pub node_name: Option<String>,
    /// The config last applied from the API, read from `last_known_good_dir` at start.
    pub last_known_good: Option<LastKnownGood>,
    /// `--last-known-good-dir`: where each config applied from the API is saved.
    pub last_known_good_dir: std::path::PathBuf,
    /// `last_known_good` was read from `last_known_good_dir` (false: from where agents before
    /// the reboot guard kept it, so the next config applied is saved there even unchanged).
    pub last_known_good_in_dir: bool,
    /// What the agent writes to the API about itself.
    pub status: StatusWrites,
}

/// What the agent writes to the API about itself (`--node-status`, `--status-spread`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusWrites {
    /// The Node condition and the Events are written (false: the API is only read).
    pub enabled: bool,
    /// A write after a change waits a per-node share of this (a hash of the node name).
    pub spread: std::time::Duration,
    /// `--node-taint`: the taint `node.ipmasq.io/agent-not-ready` on this Node follows what
    /// the agent can enforce.
    pub node_taint: bool,
}

impl Default for StatusWrites {
    fn default() -> StatusWrites {
        StatusWrites {
            enabled: true,
            spread: std::time::Duration::ZERO,
            node_taint: false,
        }
    }
}

/// How the source names a last-known-good config in log lines and the state file.
pub const LAST_KNOWN_GOOD: &str = "last-known-good";

/// What the source stage hands to admission.
pub enum SourceRead {
    /// Nothing new to judge: the config in force and every note about it stand.
    Nothing,
    /// The source cannot be read, and why.
    Unreadable(String),
    /// New bytes: the file's (or its absence), or the directory's files; not yet parsed.
    Read(config::SourceText),
}

impl Source {
    /// The ConfigMap's source in API mode, else the file or directory's.
    pub fn new(source: config::ConfigSource, api: Option<&ApiSettings>) -> Source {
        if let Some(api) = api {
            return Source::Api(Box::new(ApiSource {
                configmap: api.configmap.clone(),
                feed: crate::cluster::configmap::feed_for(api.node_name.as_deref()),
                last_known_good: api.last_known_good.clone(),
                node_name: api.node_name.clone(),
                on_next: None,
                latch: RolloutLatch::default(),
                rollout_said: None,
                handed: None,
                label: format!("configmap {}", api.configmap),
                parses_skipped: 0,
            }));
        }
        Source::Files(FileSource {
            source,
            cache: None,
            parses_skipped: 0,
            in_flux: Arc::default(),
            had_content: false,
            blank_since: None,
        })
    }

    /// How log lines name the source (`config = ...`).
    pub fn label(&self) -> String {
        match self {
            Source::Files(files) => files.source.to_string(),
            Source::Api(api) => api.label.clone(),
        }
    }

    /// Whether the config comes from a file or a directory (not the API).
    pub fn is_file(&self) -> bool {
        matches!(self, Source::Files(_))
    }

    /// Reads the config's bytes, when there is something new to read.
    pub fn read(&mut self) -> SourceRead {
        match self {
            Source::Files(files) => files.read(),
            Source::Api(api) => api.read(),
        }
    }

    /// How soon the source must be read again whatever the triggers (None: no sooner than
    /// the interval).
    pub fn read_again_within(&self) -> Option<Duration> {
        match self {
            Source::Files(files) => files.read_again_within(),
            Source::Api(api) => api.read_again_within(),
        }
    }

    /// The rollout the API holds (API mode, while `NAME-next` exists and reads as one), and
    /// whether this node runs its next config.
    pub fn rollout_seen(&self) -> Option<RolloutSeen> {
        let Source::Api(api) = self else {
            return None;
        };
        let state = crate::cluster::configmap::lock(&api.feed);
        let next = state.next.as_ref()?;
        Some(RolloutSeen {
            rollout: config::rollout::Rollout::from_annotations(&next.annotations).ok()?,
            on_next: api.on_next.is_some(),
        })
    }

    /// Where the brake latches a rollout this node failed on (API mode).
    pub fn rollout_latch(&self) -> Option<RolloutLatch> {
        match self {
            Source::Files(_) => None,
            Source::Api(api) => Some(api.latch.clone()),
        }
    }

    /// Where this node stands in a rollout (API mode): Some while the config last read is the
    /// next config of a rollout in waves.
    pub fn on_next(&self) -> Option<&OnNext> {
        match self {
            Source::Files(_) => None,
            Source::Api(api) => api.on_next.as_deref(),
        }
    }
}

/// The config file or directory, with what the last read found.
pub struct FileSource {
    source: config::ConfigSource,
    /// What the last read found: unchanged bytes are not handed on (so never parsed again).
    cache: Option<config::ReadCache>,
    /// Config parses skipped because the bytes had not changed (for tests and debugging).
    pub parses_skipped: u64,
    /// Set while a writer has the config file open (the directory watch sees it modified and
    /// not yet closed): the file is not read until it is whole.
    pub in_flux: Arc<AtomicBool>,
    /// The last file read had content (so an empty one now is likely a rewrite in progress).
    had_content: bool,
    /// Since when the file has been seen empty after having content.
    pub blank_since: Option<Instant>,
}

impl FileSource {
    fn read(&mut self) -> SourceRead {
        let path = self.source.to_string();
        if self.in_flux.load(Ordering::Acquire) {
            debug!(config = %path, "the config file is being written; it is read once the writer closes it");
            return SourceRead::Nothing;
        }
        let text = match config::read_source_unless_unchanged(&self.source, &mut self.cache) {
            Ok(Some(text)) => text,
            Ok(None) => {
                self.parses_skipped += 1;
                return SourceRead::Nothing;
            }
            Err(err) => {
                self.cache = None;
                return SourceRead::Unreadable(err.to_string());
            }
        };
        let blank = text.is_blank();
        if blank && self.had_content {
            let since = *self.blank_since.get_or_insert_with(|| {
                info!(config = %path, grace_s = BLANK_GRACE.as_secs_f64(), "the config file was emptied; keeping the config in force unless it stays empty (a writer may be rewriting it in place)");
                Instant::now()
            });
            if since.elapsed() < BLANK_GRACE {
                // Read it again next pass, even if its stamp is unchanged.
                self.cache = None;
                return SourceRead::Nothing;
            }
        }
        self.blank_since = None;
        self.had_content = text.origin() == ConfigOrigin::File && !blank;
        SourceRead::Read(text)
    }

    /// Look again when the grace of an emptied file ends.
    fn read_again_within(&self) -> Option<Duration> {
        self.blank_since.map(|since| {
            BLANK_GRACE
                .saturating_sub(since.elapsed())
                .max(Duration::from_millis(10))
        })
    }
}

/// The config's inputs as the API watchers (`crate::cluster::configmap::watch` and
/// `crate::cluster::inputs`) publish them to the feed: the base ConfigMap's data key, the node
/// pools that select this node's labels (in name order) and every EgressNATPolicy, composed
/// ([`config::composed::ComposedText`]). Before the first list of every watched kind is
/// complete nothing is read from the API; the last-known-good (if the state directory holds
/// one) is handed on at once instead. A deleted base ConfigMap or a missing key is the file
/// mode's missing file (upstream's defaults). The same inputs are never handed on twice,
/// whatever the resource versions (a relist after `410 Gone`, an edit of another key or of a
/// label that selects no other pool).
pub struct ApiSource {
    configmap: ConfigMapRef,
    /// What the watchers publish.
    pub feed: ConfigMapFeed,
    /// Handed on at the first read when the API has not been listed yet.
    last_known_good: Option<LastKnownGood>,
    /// This node's name: which wave of a rollout holds it.
    node_name: Option<String>,
    /// Set while the inputs last read put this node on a rollout's next config.
    on_next: Option<Box<OnNext>>,
    /// The rollout this node failed on, if any: it stays on the base for that rollout
    /// whatever becomes of the halt it wrote.
    latch: RolloutLatch,
    /// The resource version of the next ConfigMap whose problems were last said (once each).
    rollout_said: Option<String>,
    /// The inputs last handed on.
    handed: Option<Box<ComposedText>>,
    /// Where the inputs last handed on came from (`configmap NS/NAME key config
    /// (resourceVersion N) + pools A, B + egressnatpolicies C`).
    label: String,
    /// Reads that found the inputs already handed on (for tests and debugging).
    pub parses_skipped: u64,
}

impl ApiSource {
    fn read(&mut self) -> SourceRead {
        let feed = self.feed.clone();
        let state = feed.lock().unwrap_or_else(|e| e.into_inner());
        let (Some(current), true) = (&state.current, state.listed()) else {
            return match self.last_known_good.take() {
                Some(saved) => self.hand_last_known_good(saved, state.trouble()),
                None => SourceRead::Nothing,
            };
        };
        self.last_known_good = None;
        let now = k8s_openapi::jiff::Timestamp::now();
        self.say_unreadable_rollout(&state);
        let latched = self.latch.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let on_next = on_next(&state, self.node_name.as_deref(), now)
            .filter(|place| latched.as_deref() != Some(place.key.as_str()));
        let base = match &on_next {
            Some(place) => Some(place.text.clone()),
            None => current.text.clone(),
        };
        let composed = compose(&self.configmap, base, &state);
        if on_next.is_some() != self.on_next.is_some() {
            match &on_next {
                Some(place) => {
                    info!(configmap = %self.configmap.next_name(), wave = place.wave + 1, "this node is in the rollout's wave: taking the next config")
                }
                None => {
                    info!(configmap = %self.configmap, "this node is not on a rollout's next config: taking the base")
                }
            }
        }
        self.on_next = on_next.map(Box::new);
        let provenance = match &self.on_next {
            Some(place) => composed.provenance(&format!(
                "configmap {}/{} key {} (resourceVersion {}; rollout wave {})",
                self.configmap.namespace,
                self.configmap.next_name(),
                crate::cluster::configmap::CONFIG_KEY,
                place.resource_version,
                place.wave + 1
            )),
            None => composed.provenance(&current.provenance),
        };
        drop(state);
        if self.handed.as_deref() == Some(&composed) {
            if self.label.starts_with(LAST_KNOWN_GOOD) {
                info!(config = %provenance, "the API's config is the last-known-good already in force");
                self.label = provenance;
            }
            self.parses_skipped += 1;
            return SourceRead::Nothing;
        }
        self.hand(composed, provenance)
    }

    /// The saved config, handed on before the API's first list (which replaces it).
    fn hand_last_known_good(&mut self, saved: LastKnownGood, trouble: Option<&str>) -> SourceRead {
        let why = match trouble {
            Some(_) => "the API is unreachable",
            None => "the API's first list is not complete yet",
        };
        warn!(
            configmap = %self.configmap,
            from = %saved.provenance,
            saved_at = %saved.saved_at,
            "applying the last-known-good config at once: {why}; the API's config replaces it once listed"
        );
        let composed = ComposedText::new(
            &self.configmap.namespace,
            &self.configmap.name,
            saved.text.map(Arc::new),
            saved.pools,
            saved.policies,
        );
        self.hand(
            composed,
            format!("{LAST_KNOWN_GOOD} ({})", saved.provenance),
        )
    }

    fn hand(&mut self, composed: ComposedText, provenance: String) -> SourceRead {
        self.handed = Some(Box::new(composed.clone()));
        self.label = provenance;
        let too_large = |text: &str| text.len() as u64 > config::MAX_CONFIG_BYTES;
        if composed.base.as_deref().is_some_and(|t| too_large(t))
            || composed
                .pools
                .iter()
                .any(|p| p.text.as_deref().is_some_and(too_large))
        {
            return SourceRead::Unreadable(format!(
                "{}: larger than the {} byte limit for a config",
                self.label,
                config::MAX_CONFIG_BYTES
            ));
        }
        if !composed.is_base_only() {
            return SourceRead::Read(config::SourceText::Composed(Arc::new(composed)));
        }
        match composed.base {
            None => SourceRead::Read(config::SourceText::Missing),
            Some(text) => SourceRead::Read(config::SourceText::File(text)),
        }
    }
}

/// A rollout as the agent last saw it, for `/metrics`.
#[derive(Clone, Debug, PartialEq)]
pub struct RolloutSeen {
    pub rollout: config::rollout::Rollout,
    /// This node ran the next config at its last pass.
    pub on_next: bool,
}

/// The rollout (its [`OnNext::key`]) the brake judged this node cannot keep: shared by the
/// source, which then keeps the node on the base for that rollout, and the brake, which sets it.
pub type RolloutLatch = Arc<std::sync::Mutex<Option<String>>>;

/// Where a node stands in a rollout while it runs the next config: what the next
/// ConfigMap's resource version was, the wave, the invariants, and the next config's text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OnNext {
    pub resource_version: String,
    /// The rollout as one attempt: its start and the next text's SHA-256 (a halt's own write,
    /// or an edit of another annotation, leaves it; resume moves the start).
    pub key: String,
    pub wave: usize,
    pub invariants: Vec<config::rollout::Invariant>,
    pub text: Arc<String>,
    /// `fleet rollout promote` has claimed the rollout: no halt is written any more.
    pub promoting: bool,
}

/// This node's place in the rollout the feed holds, when it runs the next config at `now`
/// (a rollout whose annotations do not read is no rollout: `validate` says why).
fn on_next(
    state: &FeedState,
    node_name: Option<&str>,
    now: k8s_openapi::jiff::Timestamp,
) -> Option<OnNext> {
    let next = state.next.as_ref()?;
    let node_name = node_name?;
    // A next ConfigMap without its `config` key is no rollout: not upstream's defaults.
    let text = next.text.clone()?;
    let rollout = config::rollout::Rollout::from_annotations(&next.annotations).ok()?;
    let labels = state.node.as_ref().and_then(|node| node.labels());
    if !rollout.runs_next(node_name, labels, now) {
        return None;
    }
    Some(OnNext {
        resource_version: next.resource_version.clone(),
        key: rollout.key(&text),
        wave: rollout.wave_at(now)?,
        invariants: rollout.invariants,
        text,
        promoting: next.annotations.contains_key(config::rollout::PROMOTING),
    })
}

impl ApiSource {
    /// Says (once per resource version) why the next ConfigMap is no rollout the agent can
    /// follow: no `config` key, or annotations that do not read. The node keeps the base.
    fn say_unreadable_rollout(&mut self, state: &FeedState) {
        let Some(next) = &state.next else {
            return;
        };
        if self.rollout_said.as_deref() == Some(next.resource_version.as_str()) {
            return;
        }
        self.rollout_said = Some(next.resource_version.clone());
        let configmap = format!(
            "{}/{}",
            self.configmap.namespace,
            self.configmap.next_name()
        );
        if next.text.is_none() {
            warn!(%configmap, "the rollout's ConfigMap has no config key: it is no rollout, this node keeps the base (`ipmasq validate` checks it)");
        } else if let Err(errors) = config::rollout::Rollout::from_annotations(&next.annotations) {
            let said: Vec<String> = errors.iter().map(ToString::to_string).collect();
            warn!(%configmap, errors = %said.join("; "), "the rollout's annotations do not read: it is no rollout, this node keeps the base (`ipmasq validate` checks it)");
        }
    }

    /// At once when the brake latched the rollout this node runs; else how soon this node
    /// joins the rollout's wave (the inputs are read again then).
    fn read_again_within(&self) -> Option<Duration> {
        let latched = self.latch.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if self
            .on_next
            .as_ref()
            .is_some_and(|place| latched.as_deref() == Some(place.key.as_str()))
        {
            return Some(Duration::ZERO);
        }
        let node_name = self.node_name.as_deref()?;
        let state = crate::cluster::configmap::lock(&self.feed);
        let next = state.next.as_ref()?;
        let rollout = config::rollout::Rollout::from_annotations(&next.annotations).ok()?;
        let labels = state.node.as_ref().and_then(|node| node.labels());
        let now = k8s_openapi::jiff::Timestamp::now();
        let at = rollout.joins_at(node_name, labels, now)?;
        let wait = now.duration_until(at).unsigned_abs();
        Some(wait + Duration::from_millis(1))
    }
}

/// The inputs as the feed holds them, once listed: the base text (the next config's on a
/// node in a rollout's wave), the pools that select the Node's labels (none when the Node is
/// unknown) and every policy.
fn compose(target: &ConfigMapRef, base: Option<Arc<String>>, state: &FeedState) -> ComposedText {
    let labels = state.node.as_ref().and_then(|node| node.labels());
    let pools = state
        .pools
        .iter()
        .filter(|(_, pool)| labels.is_some_and(|labels| pool.selects(labels)))
        .map(|(name, pool)| PoolText {
            name: name.clone(),
            selector: pool.selector.clone(),
            text: pool.text.clone(),
        })
        .collect();
    let policies = state
        .policies
        .iter()
        .flat_map(|policies| policies.values().cloned())
        .collect();
    ComposedText::new(&target.namespace, &target.name, base, pools, policies)
}
