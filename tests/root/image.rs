//! The container image scripts/build-image makes, run as a DaemonSet runs it: podman inside a
//! throwaway network namespace, every capability dropped but NET_ADMIN and NET_RAW, a
//! read-only root, the ConfigMap mounted at /etc/config. Podman never gets a network of its
//! own here (`--network=ns:` or `none`): its default network would write the host's firewall.
//!
//! scripts/test builds the image first and runs these; without podman it skips them and says
//! so. `IPMASQ_IMAGE` names another image to test.

use super::agent::configmap_dir;
use super::health::{get, ADDR};
use super::netns::{wait_until, Netns};
use crate::util::{Run, Scratch};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

const PATIENCE: Duration = Duration::from_secs(20);

fn image() -> String {
    std::env::var("IPMASQ_IMAGE").unwrap_or_else(|_| "localhost/ipmasq:test".into())
}

/// Podman as it works on Debian 12 as root here: runc, cgroupfs, no default ulimits (they
/// exceed what the host allows), given through a containers.conf of the test's own.
struct Podman {
    conf: PathBuf,
}

impl Podman {
    fn new() -> Podman {
        super::netns::require_root();
        let conf = super::netns::scratch_file(
            "containers.conf",
            "[containers]\ndefault_ulimits = []\n\n[engine]\nruntime = \"runc\"\n\
             cgroup_manager = \"cgroupfs\"\nevents_logger = \"file\"\n",
        );
        let podman = Podman { conf };
        let found = podman.run(&["image", "exists", &image()]);
        assert_eq!(
            found.code,
            0,
            "the image {} is missing: run scripts/build-image (scripts/test does) — {}",
            image(),
            found.stderr
        );
        podman
    }

    fn run(&self, args: &[&str]) -> Run {
        Command::new("podman")
            .args(args)
            .env("CONTAINERS_CONF", &self.conf)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("podman is not installed ({e}): scripts/test installs it"))
            .into()
    }
}

/// A container, force-removed on drop (so a failing test leaves none behind).
struct Container<'a> {
    podman: &'a Podman,
    name: String,
}

impl Container<'_> {
    fn logs(&self) -> String {
        let run = self.podman.run(&["logs", &self.name]);
        format!("{}{}", run.stdout, run.stderr)
    }
}

impl Drop for Container<'_> {
    fn drop(&mut self) {
        let _ = self
            .podman
            .run(&["rm", "--force", "--time", "0", &self.name]);
    }
}

/// `podman run` of the image in `ns` the way the DaemonSet runs it; `extra` goes before the
/// image (podman's options), `args` after it (the agent's).
fn run_in<'a>(
    podman: &'a Podman,
    ns: &Netns,
    config_dir: &std::path::Path,
    extra: &[&str],
    args: &[&str],
) -> (Container<'a>, Run) {
    let name = format!("{}-agent", ns.name);
    let network = format!("--network=ns:/run/netns/{}", ns.name);
    let volume = format!("{}:/etc/config:ro", config_dir.display());
    let mut all = vec![
        "run",
        "--name",
        &name,
        "--pull=never",
        &network,
        "--cap-drop=all",
        "--cap-add=NET_ADMIN,NET_RAW",
        "--read-only",
        "--volume",
        &volume,
    ];
    all.extend_from_slice(extra);
    let image = image();
    all.push(&image);
    all.extend_from_slice(args);
    let run = podman.run(&all);
    (Container { podman, name }, run)
}

const FIRST: &str = "nonMasqueradeCIDRs:\n  - 10.0.0.0/8\nresyncInterval: 1h\n";
const SECOND: &str = "nonMasqueradeCIDRs:\n  - 172.16.0.0/12\nresyncInterval: 1h\n";

/// The agent in the image: the chain from the mounted config, a ConfigMap swap applied
/// without waiting for the hour-long resync, /healthz, and exit 0 on SIGTERM with the rules
/// left in place (upstream's behaviour).
#[test]
#[ignore = "needs root and podman with the image scripts/build-image makes: scripts/test runs it"]
fn image_runs_the_agent_as_a_daemonset_would() {
    let podman = Podman::new();
    let ns = Netns::new("image");
    let config = Scratch::new("image-config");
    configmap_dir(&config.path, 1, FIRST);
    let metrics = format!("--metrics-addr={ADDR}");
    let (agent, started) = run_in(&podman, &ns, &config.path, &["--detach"], &[&metrics]);
    assert_eq!(started.code, 0, "podman run: {}", started.stderr);

    let has = |needle: &str| ns.save("nft", false, Some("nat")).contains(needle);
    assert!(
        wait_until(PATIENCE, || has("-A IP-MASQ-AGENT -d 10.0.0.0/8 ")),
        "no chain from the mounted config:\n{}\n{}",
        ns.save("nft", false, Some("nat")),
        agent.logs()
    );
    let saved = ns.save("nft", false, Some("nat"));
    assert!(
        saved.contains("-A POSTROUTING -m comment --comment \"ip-masq-agent: ensure nat POSTROUTING directs all non-LOCAL destination traffic to our custom IP-MASQ-AGENT chain\" -m addrtype ! --dst-type LOCAL -j IP-MASQ-AGENT"),
        "{saved}"
    );
    assert!(saved.contains("-j MASQUERADE --random-fully"), "{saved}");
    assert!(wait_until(PATIENCE, || get(&ns, "/healthz") == (200, "ok\n".into())));

    configmap_dir(&config.path, 2, SECOND);
    assert!(
        wait_until(PATIENCE, || has("-d 172.16.0.0/12 ")
            && !has("-d 10.0.0.0/8 ")),
        "the swapped ConfigMap was not applied:\n{}\n{}",
        ns.save("nft", false, Some("nat")),
        agent.logs()
    );
    assert_eq!(get(&ns, "/readyz").0, 200, "{}", agent.logs());

    let killed = podman.run(&["kill", "--signal", "TERM", &agent.name]);
    assert_eq!(killed.code, 0, "podman kill: {}", killed.stderr);
    let waited = podman.run(&["wait", &agent.name]);
    assert_eq!(waited.code, 0, "podman wait: {}", waited.stderr);
    assert_eq!(waited.stdout.trim(), "0", "exit status\n{}", agent.logs());
    let logs = agent.logs();
    assert!(
        logs.contains("\"stopping; rules stay in place\" signal=\"SIGTERM\""),
        "{logs}"
    );
    assert!(!logs.contains("ERROR") && !logs.contains("WARN"), "{logs}");
    assert!(has("-d 172.16.0.0/12 "), "rules stay after SIGTERM");
}

/// The other backends work inside the image (legacy iptables; nftables over netlink with no
/// `nft` in it), IPv6 included,
/// and the multi-call binary answers under its own name.
#[test]
#[ignore = "needs root and podman with the image scripts/build-image makes: scripts/test runs it"]
fn image_carries_every_backends_tools() {
    let podman = Podman::new();
    let config = Scratch::new("image-backends");
    configmap_dir(&config.path, 1, FIRST);

    let ns = Netns::new("image-legacy");
    let (agent, run) = run_in(
        &podman,
        &ns,
        &config.path,
        &[],
        &["--once", "--iptables-mode=legacy", "--enable-ipv6"],
    );
    assert_eq!(run.code, 0, "{}{}", run.stderr, agent.logs());
    assert!(ns
        .save("legacy", false, Some("nat"))
        .contains("-A IP-MASQ-AGENT -d 10.0.0.0/8 "));
    let saved6 = ns.save("legacy", true, Some("nat"));
    assert!(
        saved6.contains("-A IP-MASQ-AGENT -m comment --comment \"ip-masq-agent: outbound traffic is subject to MASQUERADE (must be last in chain)\" -j MASQUERADE"),
        "{saved6}"
    );
    drop(agent);

    let ns = Netns::new("image-nft");
    let (agent, run) = run_in(
        &podman,
        &ns,
        &config.path,
        &[],
        &["--once", "--backend=nftables"],
    );
    assert_eq!(run.code, 0, "{}{}", run.stderr, agent.logs());
    let listed = ns.exec("nft", &["list", "ruleset"]).stdout;
    assert!(listed.contains("10.0.0.0/8"), "{listed}");
    assert!(listed.contains("masquerade"), "{listed}");
    drop(agent);

    let ns = Netns::new("image-validate");
    let (validator, run) = run_in(
        &podman,
        &ns,
        &config.path,
        &["--entrypoint", "/usr/sbin/ipmasq"],
        &["validate", "/etc/config/ip-masq-agent", "-o", "json"],
    );
    assert_eq!(run.code, 0, "{}{}", run.stderr, validator.logs());
    assert!(run.stdout.contains("\"valid\": true"), "{}", run.stdout);
}

/// The file system of a container of `image` (created, never started, removed after) as a
/// tar file in `dir`.
fn export_filesystem(podman: &Podman, image: &str, create_args: &[&str], dir: &Scratch) -> PathBuf {
    // Named after the scratch directory (test and pid): tests run in parallel.
    let name = format!(
        "ipmasq-export-{}",
        dir.path
            .file_name()
            .expect("scratch name")
            .to_string_lossy()
    );
    let args = [
        &["create", "--name", &name, "--network=none"][..],
        create_args,
        &[image],
    ]
    .concat();
    let created = podman.run(&args);
    assert_eq!(created.code, 0, "{}", created.stderr);
    let container = Container { podman, name };
    let tar = dir.path.join("image.tar");
    let exported = podman.run(&[
        "export",
        "--output",
        &tar.display().to_string(),
        &container.name,
    ]);
    assert_eq!(exported.code, 0, "{}", exported.stderr);
    tar
}

/// What the image holds: the agent and its tools, the packages' copyrights and dpkg records
/// for scanners; no shell, no apt, no docs or locales.
#[test]
#[ignore = "needs root and podman with the image scripts/build-image makes: scripts/test runs it"]
fn image_holds_only_what_the_agent_needs() {
    let podman = Podman::new();
    let dir = Scratch::new("image-contents");
    let tar = export_filesystem(&podman, &image(), &[], &dir);
    let listing = Command::new("tar")
        .arg("-tf")
        .arg(&tar)
        .output()
        .expect("tar -t");
    let files: Vec<String> = String::from_utf8_lossy(&listing.stdout)
        .lines()
        .map(|l| l.trim_start_matches("./").trim_end_matches('/').to_string())
        .collect();
    let has = |path: &str| files.iter().any(|f| f == path);
    for needed in [
        "usr/sbin/ipmasq",
        "usr/bin/ip-masq-agent",
        "usr/sbin/iptables-nft-restore",
        "usr/sbin/iptables-legacy-save",
        "usr/sbin/ip6tables-nft-save",
        "var/lib/dpkg/status.d/iptables",
        "usr/share/doc/iptables/copyright",
        "usr/share/doc/ipmasq/copyright",
        "usr/share/doc/ipmasq/sbom.spdx.json",
    ] {
        assert!(has(needed), "{needed} missing from the image");
    }
    for absent in [
        "usr/bin/sh",
        "usr/bin/bash",
        "usr/bin/apt",
        "usr/bin/dpkg",
        "usr/bin/perl",
        // The nftables backend speaks netlink itself: no nft program, no libnftables.
        "usr/sbin/nft",
        "var/lib/dpkg/status.d/nftables",
    ] {
        assert!(!has(absent), "{absent} is in the image");
    }
    let extra_docs: Vec<&String> = files
        .iter()
        .filter(|f| {
            (f.starts_with("usr/share/doc/")
                && f.matches('/').count() > 3
                && !f.ends_with("/copyright")
                && *f != "usr/share/doc/ipmasq/sbom.spdx.json")
                || f.starts_with("usr/share/locale/")
                || f.starts_with("usr/share/man/")
        })
        .collect();
    assert!(
        extra_docs.is_empty(),
        "docs or locales kept: {extra_docs:?}"
    );
}

/// The image says where it comes from (OCI labels: source, version, revision) and what its
/// binary bundles: an SPDX SBOM naming every crate the .deb's copyright file names.
#[test]
#[ignore = "needs root and podman with the image scripts/build-image makes: scripts/test runs it"]
fn image_carries_labels_and_an_sbom_of_its_crates() {
    let podman = Podman::new();
    let inspect = podman.run(&["image", "inspect", "--format", "{{json .Labels}}", &image()]);
    assert_eq!(inspect.code, 0, "{}", inspect.stderr);
    let labels: serde_json::Value = serde_json::from_str(&inspect.stdout).expect("labels JSON");
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        labels["org.opencontainers.image.version"], version,
        "{labels}"
    );
    assert!(
        labels["org.opencontainers.image.source"]
            .as_str()
            .is_some_and(|s| s.starts_with("https://")),
        "{labels}"
    );
    let revision = labels["org.opencontainers.image.revision"]
        .as_str()
        .unwrap_or_default();
    assert!(
        revision.len() == 40 && revision.chars().all(|c| c.is_ascii_hexdigit()),
        "{labels}"
    );
    let name = format!("ipmasq-image-sbom-{}", std::process::id());
    let created = podman.run(&["create", "--name", &name, "--network=none", &image()]);
    assert_eq!(created.code, 0, "{}", created.stderr);
    let container = Container {
        podman: &podman,
        name,
    };
    let dir = Scratch::new("image-sbom");
    let sbom_path = dir.path.join("sbom.json");
    let copied = podman.run(&[
        "cp",
        &format!("{}:/usr/share/doc/ipmasq/sbom.spdx.json", container.name),
        &sbom_path.display().to_string(),
    ]);
    assert_eq!(copied.code, 0, "{}", copied.stderr);
    let sbom: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&sbom_path).expect("sbom"))
            .expect("SPDX JSON");
    assert_eq!(sbom["spdxVersion"], "SPDX-2.3");
    let crates: Vec<String> = sbom["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .skip(1)
        .map(|p| {
            format!(
                "Files: vendor/{}-{}/*",
                p["name"].as_str().unwrap_or(""),
                p["versionInfo"].as_str().unwrap_or("")
            )
        })
        .collect();
    let listed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/packaging/debian/copyright"
    ))
    .expect("packaging/debian/copyright");
    let named: Vec<&str> = listed
        .lines()
        .filter(|l| l.starts_with("Files: vendor/"))
        .collect();
    assert_eq!(
        crates, named,
        "the SBOM and the copyright file name the same crates"
    );
    assert!(
        crates.iter().any(|c| c.starts_with("Files: vendor/tokio-")),
        "{crates:?}"
    );
}

/// The manifest list holds the amd64 and the arm64 image. The arm64 image's programs are
/// arm64 and run under qemu-aarch64 (user-mode, no binfmt): the static ipmasq as it is, and
/// the dynamic iptables (legacy and nft) and nft with the image itself as their root (`-L`),
/// which proves its library closure and loader complete; its iptables alternatives point where
/// amd64's do.
#[test]
#[ignore = "needs root and podman with the image scripts/build-image makes: scripts/test runs it"]
fn multiarch_list_holds_amd64_and_arm64_and_the_arm64_image_runs_under_qemu() {
    let podman = Podman::new();
    let version = env!("CARGO_PKG_VERSION");
    let list = format!("localhost/ipmasq-multiarch:{version}");
    let inspect = podman.run(&["manifest", "inspect", &list]);
    assert_eq!(inspect.code, 0, "{}", inspect.stderr);
    let manifest: serde_json::Value = serde_json::from_str(&inspect.stdout).expect("manifest JSON");
    let mut arches: Vec<&str> = manifest["manifests"]
        .as_array()
        .expect("manifests")
        .iter()
        .filter_map(|m| m["platform"]["architecture"].as_str())
        .collect();
    arches.sort_unstable();
    assert_eq!(arches, ["amd64", "arm64"], "{}", inspect.stdout);
    let arm = format!("localhost/ipmasq:{version}-arm64");
    let arch = podman.run(&["image", "inspect", "--format", "{{.Architecture}}", &arm]);
    assert_eq!(arch.stdout.trim(), "arm64", "{}", arch.stderr);

    let dir = Scratch::new("image-arm64");
    let tar = export_filesystem(&podman, &arm, &["--arch", "arm64"], &dir);
    let root = dir.path.join("root");
    std::fs::create_dir(&root).expect("mkdir");
    let unpacked = Command::new("tar")
        .arg("-xf")
        .arg(&tar)
        .arg("-C")
        .arg(&root)
        .status();
    assert!(unpacked.is_ok_and(|s| s.success()));
    let qemu = |args: &[&str]| {
        let out = Command::new("qemu-aarch64")
            .args(args)
            .output()
            .expect("qemu-aarch64");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let at = |rel: &str| root.join(rel).display().to_string();
    let sysroot = root.display().to_string();
    let (ok, said) = qemu(&[&at("usr/sbin/ipmasq"), "--version"]);
    assert!(
        ok && said.starts_with(&format!("ipmasq {version} (commit ")),
        "{said}"
    );
    let (ok, said) = qemu(&[
        "-L",
        &sysroot,
        &at("usr/sbin/xtables-legacy-multi"),
        "iptables",
        "-V",
    ]);
    assert!(ok && said.contains("(legacy)"), "{said}");
    // qemu-user translates no nf_tables netlink socket, so iptables-nft stops at its first
    // netlink call, saying so: it got there, so the loader found every library.
    let (_, said) = qemu(&[
        "-L",
        &sysroot,
        &at("usr/sbin/xtables-nft-multi"),
        "iptables",
        "-V",
    ]);
    assert!(
        said.contains("Failed to initialize nft: Protocol not supported")
            && !said.contains("error while loading shared libraries"),
        "xtables-nft-multi: {said}"
    );
    let link = |rel: &str| {
        std::fs::read_link(root.join(rel))
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    };
    assert_eq!(link("usr/sbin/iptables"), "/etc/alternatives/iptables");
    assert!(
        link("etc/alternatives/iptables").starts_with("/usr/sbin/iptables-"),
        "{}",
        link("etc/alternatives/iptables")
    );
    assert_eq!(link("usr/bin/ip-masq-agent"), "../sbin/ipmasq");
}
