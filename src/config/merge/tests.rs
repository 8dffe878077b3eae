//! Merging the files of a config directory: unions, ORs, the shortest interval, limits and
//! contradictions across files, and the cache that skips an unchanged directory.

use super::*;
use crate::config::{ListName, Severity};

fn part(name: &str, text: &str) -> Part {
    let options = Options {
        merging: true,
        ..Options::default()
    };
    Part {
        name: name.into(),
        checked: check_text(text, &options),
    }
}

fn strings(nets: &[IpNet]) -> Vec<String> {
    nets.iter().map(ToString::to_string).collect()
}

#[test]
fn lists_unite_in_name_order_and_flags_combine() {
    let parts = [
        part(
            "ip-masq-agent",
            "nonMasqueradeCIDRs: [10.0.0.0/8, 172.16.0.0/12]\nresyncInterval: 60s\ncidrLimit: 4\n",
        ),
        part(
            "ip-masq-agent-user",
            "nonMasqueradeCIDRs: [172.16.0.0/12, 100.64.0.0/10]\nforceMasqueradeCIDRs: [10.8.0.0/16]\nmasqLinkLocal: true\nresyncInterval: 5s\n",
        ),
    ];
    let checked = merge(Path::new("/etc/config"), &parts, &Options::default());
    let config = checked.config().expect("valid merge");
    assert_eq!(
        strings(&config.non_masquerade_cidrs),
        ["10.0.0.0/8", "172.16.0.0/12", "100.64.0.0/10"]
    );
    assert_eq!(strings(&config.force_masquerade_cidrs), ["10.8.0.0/16"]);
    assert!(config.masq_link_local);
    assert_eq!(config.resync_interval.to_string(), "5s");
    assert_eq!(config.cidr_limit, 4);
    // Every entry knows its file and line.
    let place = config.place(ListName::NonMasquerade, 2);
    assert_eq!(place.file.as_deref(), Some("ip-masq-agent-user"));
    assert_eq!(place.to_string(), "ip-masq-agent-user:1:37");
    // Each file is within its own cidrLimit (the first: 2 + 0 forced within 4).
    assert!(checked
        .diagnostics()
        .iter()
        .all(|d| d.severity != Severity::Error));
}

/// ip-masq-agent-v2 checks each file against 64 CIDRs and never the merged list: each file is
/// held to its own `cidrLimit`, and a merged list longer than any file's limit is fine.
#[test]
fn the_limit_applies_to_each_file_as_in_v2() {
    let parts = [
        part(
            "ip-masq-a",
            "cidrLimit: 2\nnonMasqueradeCIDRs: [10.0.0.0/8, 172.16.0.0/12]\n",
        ),
        part("ip-masq-b", "nonMasqueradeCIDRs: [192.168.0.0/16]\n"),
    ];
    let checked = merge(Path::new("d"), &parts, &Options::default());
    assert_eq!(
        checked.config().expect("valid").non_masquerade_cidrs.len(),
        3
    );
    let over = part(
        "ip-masq-c",
        "cidrLimit: 1\nnonMasqueradeCIDRs: [10.0.0.0/8, 172.16.0.0/12]\n",
    );
    let checked = merge(Path::new("d"), &[over], &Options::default());
    assert!(checked.config().is_none());
    let error = checked.errors().next().unwrap();
    assert_eq!(error.code, Code::CidrLimitExceeded);
    assert_eq!(error.file.as_deref(), Some("ip-masq-c"));
    // 40 CIDRs in each of two files: 80 merged, as v2 takes them (each file under 64).
    let forty = |base: u8| {
        let list: Vec<String> = (0..40).map(|i| format!("10.{base}.{i}.0/24")).collect();
        format!("nonMasqueradeCIDRs: [{}]\n", list.join(", "))
    };
    let parts = [
        part("ip-masq-cloud", &forty(1)),
        part("ip-masq-user", &forty(2)),
    ];
    let checked = merge(Path::new("d"), &parts, &Options::default());
    assert_eq!(
        checked.config().expect("valid").non_masquerade_cidrs.len(),
        80
    );
    let sixty_five: Vec<String> = (0..65).map(|i| format!("10.3.{i}.0/24")).collect();
    let one = part(
        "ip-masq-user",
        &format!("nonMasqueradeCIDRs: [{}]\n", sixty_five.join(", ")),
    );
    let checked = merge(Path::new("d"), &[one], &Options::default());
    assert_eq!(
        checked.errors().next().unwrap().code,
        Code::CidrLimitExceeded
    );
}

/// ip-masq-agent-v2 starts from an empty list and unites what the files list: files that
/// list no CIDRs leave it empty (everything but link-local masqueraded), with a warning; only
/// a directory without any `ip-masq*` file means the defaults.
#[test]
fn a_list_no_file_gives_is_empty_as_in_v2() {
    let parts = [part(
        "ip-masq-user",
        "forceMasqueradeCIDRs: [10.8.0.0/16]\nmasqLinkLocal: true\n",
    )];
    let checked = merge(Path::new("d"), &parts, &Options::default());
    let config = checked.config().unwrap();
    assert!(config.non_masquerade_cidrs.is_empty());
    let warning = checked
        .diagnostics()
        .iter()
        .find(|d| d.code == Code::EmptyCidrList)
        .expect("the empty list is said");
    assert!(
        warning.message.contains("ip-masq-agent-v2"),
        "{}",
        warning.message
    );
    let none = merge(Path::new("d"), &[], &Options::default());
    assert_eq!(
        strings(&none.config().unwrap().non_masquerade_cidrs),
        ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]
    );
}

#[test]
fn a_contradiction_across_files_names_both_places() {
    let parts = [
        part(
            "ip-masq-agent",
            "nonMasqueradeCIDRs:\n  - 10.0.0.0/8\n  - 10.8.0.0/16\n",
        ),
        part("ip-masq-user", "forceMasqueradeCIDRs:\n  - 10.8.0.0/16\n"),
    ];
    let checked = merge(Path::new("d"), &parts, &Options::default());
    assert!(checked.config().is_none());
    let error = checked.errors().next().unwrap();
    assert_eq!(error.code, Code::ForcedAndKept);
    assert_eq!(error.file.as_deref(), Some("ip-masq-user"));
    assert_eq!(error.location.unwrap().line, 2);
    assert!(
        error.message.contains("ip-masq-agent:3:5"),
        "{}",
        error.message
    );
    assert!(error
        .one_line()
        .starts_with("ip-masq-user:2:5: [forced-and-kept]"));
}

#[test]
fn one_invalid_file_rejects_the_merge_and_names_its_file() {
    let parts = [
        part("ip-masq-agent", "nonMasqueradeCIDRs: [10.0.0.0/8]\n"),
        part("ip-masq-user", "nonMasqueradeCIDRs: [10.0.0.1/8]\n"),
    ];
    let checked = merge(Path::new("d"), &parts, &Options::default());
    assert!(checked.config().is_none());
    let error = checked.errors().next().unwrap();
    assert_eq!(error.code, Code::CidrNotAligned);
    assert_eq!(
        error.one_line().split(": ").next(),
        Some("ip-masq-user:1:22")
    );
}

#[test]
fn an_empty_directory_means_defaults_with_a_warning() {
    let checked = merge(Path::new("/etc/config"), &[], &Options::default());
    assert_eq!(
        checked.config(),
        Some(&Config::defaults(&Options::default()))
    );
    assert_eq!(checked.diagnostics()[0].code, Code::NoConfigFiles);
}

#[test]
fn only_ip_masq_files_take_part_and_an_unchanged_directory_is_not_read_again() {
    let dir = std::env::temp_dir().join(format!("ipmasq-merge-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("..2026_11_22")).unwrap();
    std::fs::write(
        dir.join("..2026_11_22/ip-masq-b"),
        "nonMasqueradeCIDRs: [172.16.0.0/12]\n",
    )
    .unwrap();
    std::os::unix::fs::symlink("..2026_11_22", dir.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/ip-masq-b", dir.join("ip-masq-b")).unwrap();
    std::fs::write(dir.join("ip-masq-a"), "nonMasqueradeCIDRs: [10.0.0.0/8]\n").unwrap();
    std::fs::write(dir.join("notes.txt"), "not a config").unwrap();
    std::fs::create_dir(dir.join("ip-masq-dir")).unwrap();
    let names: Vec<String> = part_paths(&dir)
        .unwrap()
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["ip-masq-a", "ip-masq-b"]);
    let mut cache = None;
    let source = crate::config::ConfigSource::Dir(dir.clone());
    let loaded = crate::config::read_source_unless_unchanged(&source, &mut cache)
        .unwrap()
        .unwrap()
        .check(&Options::default());
    assert_eq!(loaded.origin, crate::config::ConfigOrigin::Dir);
    assert_eq!(
        strings(&loaded.checked.config().unwrap().non_masquerade_cidrs),
        ["10.0.0.0/8", "172.16.0.0/12"]
    );
    assert!(
        crate::config::read_source_unless_unchanged(&source, &mut cache)
            .unwrap()
            .is_none()
    );
    std::fs::write(dir.join("ip-masq-c"), "masqLinkLocal: true\n").unwrap();
    let loaded = crate::config::read_source_unless_unchanged(&source, &mut cache)
        .unwrap()
        .unwrap()
        .check(&Options::default());
    assert!(loaded.checked.config().unwrap().masq_link_local);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn output_addresses_must_agree_across_files_and_interfaces_unite() {
    let parts = [
        part(
            "ip-masq-agent",
            "outputAddress: 10.0.0.0/24\noutputInterfaces: [eth0]\n",
        ),
        part("ip-masq-b", "outputInterfaces: [ens+, eth0]\n"),
    ];
    let checked = merge(Path::new("d"), &parts, &Options::default());
    let config = checked.config().expect("valid merge");
    assert_eq!(config.output_address.unwrap().to_string(), "10.0.0.0/24");
    let patterns: Vec<String> = config
        .output_interfaces
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(patterns, ["ens+", "eth0"]);
    let parts = [
        part("ip-masq-agent", "outputAddress: 10.0.0.0/24\n"),
        part("ip-masq-b", "\noutputAddress: 10.0.0.7\n"),
    ];
    let checked = merge(Path::new("d"), &parts, &Options::default());
    assert!(checked.config().is_none());
    let error = checked.errors().next().unwrap();
    assert_eq!(error.code, Code::OutputAddressConflict);
    assert_eq!(error.file.as_deref(), Some("ip-masq-b"));
    assert_eq!(error.location.unwrap().line, 2);
    assert!(
        error.message.contains("ip-masq-agent:1:1"),
        "{}",
        error.message
    );
}

#[test]
fn one_file_gives_the_pod_share_and_another_share_is_a_conflict() {
    let share = "podConnectionLimit: 300\npodNewConnectionRate: 100/s\n";
    let parts = [
        part("ip-masq-a", "nonMasqueradeCIDRs: [10.0.0.0/8]\n"),
        part("ip-masq-b", share),
        part("ip-masq-c", share),
    ];
    let checked = merge(Path::new("/etc/config"), &parts, &Options::default());
    let config = checked.config().expect("the same share twice is one share");
    assert_eq!(config.pod_share.connection_limit, Some(300));
    assert_eq!(
        config.provenance.pod_share.as_ref().unwrap().to_string(),
        "ip-masq-b:1:1"
    );
    let parts = [
        part("ip-masq-a", share),
        part("ip-masq-b", "podConnectionLimit: 200\n"),
    ];
    let checked = merge(Path::new("/etc/config"), &parts, &Options::default());
    assert!(checked.config().is_none());
    let conflict = checked
        .diagnostics()
        .iter()
        .find(|d| d.code == Code::PodShareConflict)
        .expect("a conflict");
    assert_eq!(conflict.file.as_deref(), Some("ip-masq-b"));
    assert!(
        conflict
            .message
            .contains("contradicts the one at ip-masq-a:1:1"),
        "{}",
        conflict.message
    );
}
