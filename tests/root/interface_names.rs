//! `outputInterfaces` names at the edges, against the real tools: every name `validate`
//! accepts is installed by each backend and read back in sync; every name it rejects is one a
//! backend's own tool refuses (iptables-restore, nft) or the kernel gives no interface.

use super::egress::ipmasq_on;
use super::netns::Netns;
use crate::util::{ipmasq, Scratch};

/// The backends under test: the iptables variants and nftables.
const BACKENDS: [&str; 3] = ["nft", "legacy", "nftables"];

/// Names `validate` accepts: the longest name, the longest pattern of each wildcard, and
/// characters the kernel and both tools take as they are.
const ACCEPTED: [&str; 10] = [
    "abcdefghijklmno",
    "abcdefghijklmn+",
    "abcdefghijklmn*",
    "!eth0",
    "-eth0",
    "eth#0",
    "eth,0",
    "eth\\0",
    "eth!é",
    "e%d",
];

/// Patterns of 16 bytes: a 15-byte stem and its wildcard, which iptables-restore and nft
/// refuse (validate accepted them before, and the iptables backend failed every pass).
const REFUSED_BY_THE_TOOLS: [&str; 2] = ["abcdefghijklmno+", "abcdefghijklmno*"];

/// Names no interface can have: the kernel refuses to create them.
const REFUSED_BY_THE_KERNEL: [&str; 4] = ["abcdefghijklmnop", "ethà", "a/b", "a:b"];

/// The config listing `name` as its one output interface (JSON, so any character is quoted).
fn config_with(name: &str) -> String {
    format!(
        "outputInterfaces: [{}]\n",
        serde_json::to_string(name).expect("a string")
    )
}

/// `validate`'s verdict on `name` (exit code and the codes of its findings).
fn verdict(dir: &Scratch, name: &str) -> (i32, String) {
    let file = dir.write("interfaces.yaml", &config_with(name));
    let run = ipmasq(&[
        "validate",
        "--no-node-checks",
        "-o",
        "json",
        &file.display().to_string(),
    ]);
    (run.code, run.stdout)
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn every_interface_name_validate_accepts_each_backend_installs() {
    let ns = Netns::new("ifnames");
    let dir = Scratch::new("ifnames");
    for name in ACCEPTED {
        let (code, report) = verdict(&dir, name);
        assert_eq!(code, 0, "validate rejects {name:?}: {report}");
        let config = dir.write("ip-masq-agent", &config_with(name));
        let config = format!("--config={}", config.display());
        for backend in BACKENDS {
            let args = |extra: &[&str]| {
                let mut args: Vec<String> = vec!["agent".into(), "--once".into(), config.clone()];
                args.extend(extra.iter().map(|s| s.to_string()));
                args
            };
            let install = ipmasq_on(&ns, backend, args(&[]));
            assert_eq!(
                install.code, 0,
                "{backend} does not install {name:?}: {}",
                install.stderr
            );
            let again = ipmasq_on(&ns, backend, args(&["--dry-run"]));
            assert!(
                again.code == 0 && again.stdout.contains("in sync, nothing to apply"),
                "{backend}: {name:?} does not read back in sync: {}{}",
                again.stdout,
                again.stderr
            );
            let cleanup = ipmasq_on(&ns, backend, vec!["cleanup".into()]);
            assert_eq!(cleanup.code, 0, "{backend}: {}", cleanup.stderr);
        }
    }
}

#[test]
#[ignore = "needs root (network namespaces): run scripts/test as root, or cargo test -- --include-ignored"]
fn every_interface_name_validate_rejects_is_refused_below() {
    let ns = Netns::new("ifnames-refused");
    let dir = Scratch::new("ifnames-refused");
    for name in REFUSED_BY_THE_TOOLS.iter().chain(&REFUSED_BY_THE_KERNEL) {
        let (code, report) = verdict(&dir, name);
        assert_eq!(code, 1, "validate accepts {name:?}: {report}");
        assert!(
            report.contains("\"invalid-interface\""),
            "{name:?}: {report}"
        );
    }
    for pattern in REFUSED_BY_THE_TOOLS {
        let stem = &pattern[..pattern.len() - 1];
        for variant in ["nft", "legacy"] {
            let restore = ns
                .command(
                    std::path::Path::new(&format!("iptables-{variant}-restore")),
                    &["--noflush"],
                )
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .and_then(|mut child| {
                    use std::io::Write;
                    let script = format!(
                        "*nat\n:IFNAME-PROBE - [0:0]\n-A IFNAME-PROBE -o {stem}+ -j MASQUERADE\nCOMMIT\n"
                    );
                    child
                        .stdin
                        .take()
                        .expect("stdin")
                        .write_all(script.as_bytes())?;
                    child.wait_with_output()
                })
                .expect("run iptables-restore");
            assert!(
                !restore.status.success()
                    && String::from_utf8_lossy(&restore.stderr).contains("IFNAMSIZ"),
                "iptables-{variant}-restore takes `-o {stem}+`: {}",
                String::from_utf8_lossy(&restore.stderr)
            );
        }
        let nft = ns.exec(
            "nft",
            &[&format!(
                "add table ip ifname_probe; add chain ip ifname_probe c; add rule ip ifname_probe c oifname \"{stem}*\" masquerade"
            )],
        );
        assert!(
            nft.code != 0 && nft.stderr.contains("exceeds maximum length"),
            "nft takes oifname \"{stem}*\": {}",
            nft.stderr
        );
    }
    for name in REFUSED_BY_THE_KERNEL {
        let create = ns.exec(
            "ip",
            &[
                "link", "add", "name", name, "type", "veth", "peer", "name", "ifprobe",
            ],
        );
        assert_ne!(
            create.code, 0,
            "the kernel made an interface named {name:?}"
        );
    }
    // The names it accepts at the edge are ones the kernel gives an interface.
    for name in ["abcdefghijklmno", "eth!é", "-eth0"] {
        let create = ns.exec(
            "ip",
            &[
                "link", "add", "name", name, "type", "veth", "peer", "name", "ifprobe",
            ],
        );
        assert_eq!(create.code, 0, "{name:?}: {}", create.stderr);
        ns.sh("ip link del ifprobe");
    }
}
