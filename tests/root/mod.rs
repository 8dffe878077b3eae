//! Root tests: real iptables, nft and packets inside throwaway network namespaces.

/// Generates a `#[test]` per iptables variant (`nft::NAME`, `legacy::NAME`) for each function
/// `NAME(variant: &'static str)` of the calling module.
macro_rules! both_variants {
    ($($name:ident),* $(,)?) => {
        mod nft {
            $(#[test] #[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"] fn $name() { super::$name("nft") })*
        }
        mod legacy {
            $(#[test] #[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"] fn $name() { super::$name("legacy") })*
        }
    };
}

mod address_churn;
mod agent;
mod api_configmaps;
mod api_manners;
mod api_memory;
mod api_mode;
mod api_pools;
mod cluster;
mod config_file;
mod conntrack;
mod conntrack_health;
mod deploy;
mod egress;
mod extensions;
mod fake_api;
mod faults;
mod fits_terminal;
mod fleet;
mod flowcontrol;
mod foreign_nat_rules;
mod forgeries;
mod health;
mod image;
mod interface_names;
mod memory_limit;
mod metrics_reference;
mod mirror;
mod neighbour_flush;
mod netlink;
mod netns;
mod nftables;
mod node;
mod node_lock;
mod node_taint;
mod packets;
mod parse_budget;
mod pod_names;
mod pod_share;
mod reboot_guard;
mod rejected_config;
mod rollout;
mod seam;
mod show_cleanup;
mod snat_log;
mod snat_log_file;
mod snat_ports;
mod snat_stream;
mod state_dir;
mod stop_deadline;
mod untrusted_text;

/// An unreadable config is an I/O error (exit 2) that says what is wrong. As root every file
/// is readable, so the check runs as nobody.
#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn unreadable_config_is_a_clear_io_error() {
    netns::require_root();
    let dir = crate::util::Scratch::new("unreadable");
    let path = dir.write("config", "cidrLimit: 3\n");
    let status = std::process::Command::new("chmod")
        .arg("600")
        .arg(&path)
        .status()
        .expect("chmod");
    assert!(status.success());
    // The scratch directory must be traversable by nobody.
    let _ = std::process::Command::new("chmod")
        .arg("755")
        .arg(&dir.path)
        .status();
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(crate::util::binary())
        .arg("validate")
        .arg(&path)
        .output()
        .expect("run setpriv");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{stdout}");
    assert!(stdout.contains("permission denied"), "{stdout}");
}
