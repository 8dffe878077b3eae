//! The iptables programs of one variant (legacy or nft), resolved once, and the choice of
//! variant in auto mode.

use super::super::runner;
use crate::plan::Family;
use std::time::Duration;

/// Which iptables implementation to drive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Variant {
    Legacy,
    Nft,
}

impl Variant {
    pub fn as_str(self) -> &'static str {
        match self {
            Variant::Legacy => "legacy",
            Variant::Nft => "nft",
        }
    }
}

/// The tool of one variant and family, as an absolute path when it is on PATH (resolved once,
/// so no spawn searches PATH again).
fn tool(variant: Variant, family: Family, suffix: &str) -> String {
    let base = match family {
        Family::V4 => "iptables",
        Family::V6 => "ip6tables",
    };
    let specific = format!("{base}-{}{suffix}", variant.as_str());
    // Older images ship only the unsuffixed tools.
    let plain = format!("{base}{suffix}");
    runner::resolve(&specific)
        .or_else(|| runner::resolve(&plain))
        .map_or(specific, |p| p.display().to_string())
}

/// The programs a backend runs, resolved once.
#[derive(Clone, Debug)]
pub(super) struct Tools {
    pub save: [String; 2],
    pub restore: [String; 2],
    pub main: [String; 2],
}

impl Tools {
    pub fn new(variant: Variant) -> Self {
        let both = |suffix: &str| {
            [
                tool(variant, Family::V4, suffix),
                tool(variant, Family::V6, suffix),
            ]
        };
        Tools {
            save: both("-save"),
            restore: both("-restore"),
            main: both(""),
        }
    }

    pub fn save(&self, family: Family) -> &str {
        &self.save[slot(family)]
    }

    pub fn restore(&self, family: Family) -> &str {
        &self.restore[slot(family)]
    }

    pub fn main(&self, family: Family) -> &str {
        &self.main[slot(family)]
    }
}

fn slot(family: Family) -> usize {
    match family {
        Family::V4 => 0,
        Family::V6 => 1,
    }
}

/// The variant `iptables --version` names: `(legacy)` or `(nf_tables)`.
pub(super) fn variant_of_version(text: &str) -> Option<Variant> {
    if text.contains("(nf_tables)") {
        Some(Variant::Nft)
    } else if text.contains("(legacy)") {
        Some(Variant::Legacy)
    } else {
        None
    }
}

/// The variant the system's `iptables` command is (what upstream runs, and what an admin's
/// `iptables -t nat -L` shows), with how it was told; None when it is not installed or says
/// neither. Where its links point says it without a process; `iptables --version` only when
/// the name does not.
fn system_iptables() -> Option<(Variant, String)> {
    let program = runner::resolve("iptables")?;
    if let Some(found) = super::probe::system_iptables(&program) {
        return Some(found);
    }
    let out = runner::run(
        &program.display().to_string(),
        &["--version"],
        None,
        Duration::from_secs(5),
    )
    .ok()?;
    let line = out
        .stdout
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_string();
    variant_of_version(&line).map(|v| (v, line))
}

/// Why auto-detection chose a variant, for the startup log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Detection {
    pub variant: Variant,
    pub reason: String,
}

/// Chooses legacy or nft as kubernetes-sigs/iptables-wrappers does: kubelet's hint chains in
/// the mangle table first (nft, then legacy), otherwise whichever holds more rules. With no
/// evidence at all (neither holds a rule), the variant the system's `iptables` command is, so
/// the admin sees our rules where they look; nft when that cannot be told. The evidence comes
/// from the kernel (`probe`), not from running `-save` of both variants.
pub(crate) fn detect_variant() -> Detection {
    let nft = super::probe::nft_evidence().unwrap_or_default();
    if nft.hint {
        return Detection {
            variant: Variant::Nft,
            reason: "kubelet's hint chain is in iptables-nft".into(),
        };
    }
    let legacy = super::probe::legacy_evidence();
    if legacy.hint {
        return Detection {
            variant: Variant::Legacy,
            reason: "kubelet's hint chain is in iptables-legacy".into(),
        };
    }
    let (legacy_rules, nft_rules) = (legacy.rules, nft.rules);
    if legacy_rules == 0 && nft_rules == 0 {
        return match system_iptables() {
            Some((variant, version)) => Detection {
                variant,
                reason: format!(
                    "neither variant holds rules; the system's iptables is iptables-{} ({version})",
                    variant.as_str()
                ),
            },
            None => Detection {
                variant: Variant::Nft,
                reason: "neither variant holds rules and the system's iptables does not say which it is; nft".into(),
            },
        };
    }
    if legacy_rules > nft_rules {
        Detection {
            variant: Variant::Legacy,
            reason: format!("iptables-legacy holds more rules ({legacy_rules} vs {nft_rules})"),
        }
    } else {
        Detection {
            variant: Variant::Nft,
            reason: format!(
                "iptables-nft holds at least as many rules ({nft_rules} vs {legacy_rules})"
            ),
        }
    }
}
