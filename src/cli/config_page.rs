//! The text of `ipmasq-config(5)`, the config file's manual: keys and defaults, the YAML 1.1
//! and Go rules a file is read by, the extensions, how a directory is merged, and every
//! diagnostic code (from the code list itself, so none can be missing). `generate` renders it.

use crate::config::{Code, Severity, DEFAULT_CIDR_LIMIT, DEFAULT_CONFIG_PATH, RFC1918_RANGES};

use super::docs::roff_text as roff;

fn section(out: &mut String, title: &str) {
    out.push_str(&format!(".SH {title}\n"));
}

fn paragraph(out: &mut String, text: &str) {
    out.push_str(&format!(".PP\n{}\n", roff(text)));
}

fn item(out: &mut String, term: &str, text: &str) {
    out.push_str(&format!(".TP\n.B {}\n{}\n", roff(term), roff(text)));
}

/// The whole page, in roff.
pub fn config_page(version: &str) -> String {
    let date = crate::cli::docs::man_date();
    let mut out = format!(
        ".TH IPMASQ-CONFIG 5 \"{date}\" \"ipmasq {version}\" \"File Formats\"\n.SH NAME\nipmasq\\-config \\- the ip\\-masq\\-agent configuration file, as ipmasq reads it\n"
    );
    section(&mut out, "SYNOPSIS");
    paragraph(
        &mut out,
        &format!("{DEFAULT_CONFIG_PATH} (upstream's DaemonSet mounts the key `config` of the ConfigMap ip-masq-agent there; the packaged systemd unit reads /etc/ipmasq/config.yaml), or every ip-masq* file of a directory given to agent --config-dir."),
    );
    section(&mut out, "DESCRIPTION");
    paragraph(&mut out, "A YAML 1.1 or JSON mapping. A missing file, an empty one, or one holding only comments or null means the defaults. The agent re-reads it on every change of its directory and every resyncInterval; an invalid file is reported (with file, line, column and a hint) and the last valid config stays in force.");
    section(&mut out, "KEYS");
    item(
        &mut out,
        "nonMasqueradeCIDRs (list of CIDRs)",
        &format!("Destinations that keep the pod's source address. Default: {}. A list given replaces the defaults (with agent --nomasq-all-reserved-ranges the defaults also hold the reserved ranges); null and [] mean an empty list: everything but link-local is masqueraded. Entries stay in the order written, repeats included, as upstream writes one rule each.", RFC1918_RANGES.join(", ")),
    );
    item(
        &mut out,
        "cidrLimit (integer)",
        &format!("The most CIDRs the lists may hold (nonMasqueradeCIDRs plus forceMasqueradeCIDRs; link-local not counted). Default: {DEFAULT_CIDR_LIMIT}. It applies to the default list too."),
    );
    item(
        &mut out,
        "masqLinkLocal (boolean)",
        "Masquerade traffic to 169.254.0.0/16 too. Default: false (link-local keeps its source).",
    );
    item(
        &mut out,
        "masqLinkLocalIPv6 (boolean)",
        "Masquerade traffic to fe80::/10 too (with IPv6 enabled). Default: false.",
    );
    item(&mut out, "resyncInterval (Go duration)", "How often the file is re-read and the rules re-checked, as Go's time.ParseDuration reads it: 60s, 1m30s, 500ms. Default: 60s (or agent --resync-interval). Below 100ms, 100ms is used.");
    item(&mut out, "forceMasqueradeCIDRs (list of CIDRs; ipmasq extension)", "Destinations masqueraded even inside a non-masquerade range. The longest matching prefix across both lists decides: 10.0.0.0/8 kept with 10.8.0.0/16 forced masquerades exactly 10.8.0.0/16, and 10.8.1.0/24 kept inside that is kept again. The same CIDR in both lists is an error; a forced CIDR in no non-masquerade range changes nothing and is a warning.");
    item(&mut out, "masqueradeSourceCIDRs (list of CIDRs; ipmasq extension)", "When given, only traffic from these ranges (the pod CIDRs) is masqueraded; other sources leave untouched. A family without a listed range is not scoped; [] means unset.");
    item(&mut out, "enableIPv6 (boolean; ipmasq extension)", "Manage IPv6 too (ip6tables, or the ip6 table of the nftables backend), as agent --enable-ipv6 does, so a ConfigMap change alone turns IPv6 on (ip-masq-agent #53, #86). Default: false. An explicit --enable-ipv6 or --enable-ipv6=false on the agent's command line wins (a warning says so when they differ). Turned off again, the agent removes its IPv6 rules in the pass that reads the change.");
    item(&mut out, "outputAddress (address or prefix; ipmasq extension)", "IPv4 traffic that would be masqueraded is SNATed to this source instead (ip-masq-agent PR #103's key). A bare address (10.0.0.5) must be one the node holds; a prefix (10.0.0.0/24) means this node's own address inside it, the lowest when it holds several, so one ConfigMap serves a fleet whose nodes each have their own address. The agent resolves it from the node's addresses at its first pass, on SIGHUP, and when an address inside the value comes, goes or changes state (rtnetlink events, a burst settled into one pass within 200 ms; other addresses' changes cost nothing); without the event subscription, at every pass. It never SNATs to an address the node does not hold: when the node holds no such address (it left, or moved to another host as a VIP does), that family is masqueraded instead within a second of the address event, as upstream would, and the agent says so once (a WARN, the ipmasq_output_address_fallback gauge, /readyz, show and explain), until an address in the value is back. A deprecated IPv6 address is chosen only while no preferred one is in the value. --to-ports and --random-fully apply as they do to MASQUERADE. Tentative IPv6 addresses (duplicate detection not finished) are not used. An address with a prefix length (10.0.0.5/24) is an error that names both readings.");
    item(&mut out, "outputAddressIPv6 (address or prefix; ipmasq extension)", "The same for IPv6 traffic (with IPv6 enabled; otherwise it has no effect and is a warning).");
    item(&mut out, "outputInterfaces (list of interface names; ipmasq extension)", "When given, only traffic leaving a listed interface is masqueraded (or SNATed); traffic leaving any other interface is not touched by these rules. A trailing + or * is a wildcard (eth+ and eth* both mean every name starting with eth; written as iptables -o eth+ and nft oifname \"eth*\"). A name is what the kernel takes: 1 to 15 bytes, no /, : or white space (the kernel's, which counts the byte 0xA0 inside UTF-8 such as à), not . or ..; a pattern is at most 15 bytes with its wildcard, as iptables and nft refuse a longer one (a 15-byte stem matches only that name: write the name). At most 16 entries; one inside another listed pattern is a warning; [] means unset. ipmasq validate on a node says which pattern matches no interface there (info: nodes differ).");
    item(&mut out, "linkLocal (boolean; deprecated)", "non-masquerade-daemon's key, the inverse of masqLinkLocal; read with a warning, and an error when it contradicts masqLinkLocal.");
    section(&mut out, "READING RULES");
    paragraph(&mut out, "As upstream (Go's yaml.v2 into encoding/json): keys match case-insensitively; unknown keys are ignored (with a warning and a did-you-mean); the last of duplicate keys wins; only the first YAML document is read; anchors, aliases and merge keys (<<) work.");
    paragraph(&mut out, "YAML 1.1 scalars: yes, no, on, off, y and n are booleans; 0x40 and 010 are integers; a quoted value is a string, so masqLinkLocal: \"true\" is an error.");
    paragraph(&mut out, "A CIDR parses strictly (no leading zeros in an IPv4 octet, no whitespace, prefix in range) and must be aligned: 10.1.2.3/16 is an error that names 10.1.0.0/16. An IPv6 CIDR needs enableIPv6: true or agent --enable-ipv6.");
    section(&mut out, "EXTENSIONS");
    paragraph(&mut out, "A change of nonMasqueradeCIDRs, forceMasqueradeCIDRs, masqueradeSourceCIDRs, outputAddress or outputInterfaces (or of the address an outputAddress prefix resolves to) also reaches flows already running: in the pass that applies it, the agent deletes the conntrack entries whose NAT the change made wrong, so their next packet is tracked under the new rules (agent --conntrack-reset, by default for connectionless protocols only: deleting a TCP entry ends that connection). See ipmasq-agent(8).");
    paragraph(&mut out, "forceMasqueradeCIDRs, masqueradeSourceCIDRs, enableIPv6, outputAddress, outputAddressIPv6 and outputInterfaces are ipmasq's own. Upstream ip-masq-agent ignores them, so a file using them means something else there. ipmasq validate reports them at info level (never an error, not even with --strict). A file without them yields exactly upstream's rules.");
    section(&mut out, "MERGED DIRECTORIES");
    paragraph(&mut out, "With agent --config-dir DIR (ip-masq-agent-v2's layout: a projected volume of several ConfigMaps), every regular file of DIR whose name starts with ip-masq is read, in name order, and merged: lists are unions in that order with repeats dropped, starting empty as ip-masq-agent-v2's do: when files are there but none lists nonMasqueradeCIDRs, the merged list is empty and everything but link-local is masqueraded (warning empty-cidr-list), and only a directory without ip-masq* files means the defaults; each file is held to its own cidrLimit (64 unless it sets one), as v2 limits each file to 64 and never the merged list; outputInterfaces are united; masqLinkLocal, masqLinkLocalIPv6 and enableIPv6 are OR'd (each file's IPv6 CIDRs need IPv6 turned on in that file or by the flag); the shortest resyncInterval wins (v2 reads neither resyncInterval nor cidrLimit from a file); outputAddress (and outputAddressIPv6) may be given by several files only with one value, a different one is an error naming both places. One invalid file rejects the whole merge, naming the file, line and column; a CIDR forced in one file and non-masquerade in another is an error naming both places. ipmasq validate --merged DIR shows the merged lists with the file and line of every entry.");
    pools_and_policies(&mut out);
    differences(&mut out);
    section(&mut out, "DIAGNOSTICS");
    paragraph(&mut out, "Every finding has a stable code, printed as severity[code] by ipmasq validate and in the agent's log. Errors reject the config; warnings do not (validate --strict makes them errors); infos never fail.");
    for code in Code::ALL {
        let (severity, meaning) = code.describe();
        let severity = match severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "info",
        };
        item(
            &mut out,
            &format!("{} ({severity})", code.as_str()),
            meaning,
        );
    }
    section(&mut out, "EXAMPLE");
    out.push_str(".PP\n.RS 4\n.nf\n");
    out.push_str(&roff("nonMasqueradeCIDRs:\n  - 10.0.0.0/8\n  - 192.168.0.0/16\nforceMasqueradeCIDRs:\n  - 10.8.0.0/16\nmasqLinkLocal: false\nresyncInterval: 60s"));
    out.push_str("\n.fi\n.RE\n");
    section(&mut out, "FILES");
    item(
        &mut out,
        DEFAULT_CONFIG_PATH,
        "the agent's default config path (a ConfigMap volume)",
    );
    item(
        &mut out,
        "/etc/ipmasq/config.yaml",
        "the config of the packaged systemd unit",
    );
    section(&mut out, "\"SEE ALSO\"");
    out.push_str(".BR ipmasq (8) ,\n.BR ipmasq\\-agent (8) ,\n.BR ipmasq\\-validate (8) ,\n.BR ipmasq\\-explain (8)\n");
    out
}

/// The sections on node pools and GKE's EgressNATPolicy (read from the API in API mode, from
/// manifests by `validate`).
fn pools_and_policies(out: &mut String) {
    section(out, "NODE POOLS");
    paragraph(out, "A ConfigMap in the base's namespace named ip-masq-agent-<pool> (any suffix) with the annotation ipmasq.io/node-selector is a node pool: its data.config applies to the nodes whose labels the selector matches, merged after the base config (the ConfigMap ip-masq-agent, key config) in ConfigMap name order, with the rules of MERGED DIRECTORIES. The selector is kubectl -l's syntax, parsed as Kubernetes' labels.Parse: a=b, a==b, a!=b, a in (x,y), a notin (x), a, !a, a>5, a<5, a comma is AND; keys are [prefix/]name (a DNS-subdomain prefix of at most 253 characters, a name of at most 63 letters, digits, -, _ or ., starting and ending with a letter or digit), values at most 63 such characters or empty. As in Kubernetes, a!=b and a notin (x) also select nodes without a, and the empty selector selects every node; one that does not parse selects no node and is an error (invalid-node-selector, naming the column and what was expected).");
    paragraph(out, "The base contributes its effective config, as a node without a pool enforces it: a base that lists no nonMasqueradeCIDRs contributes the defaults, so a pool that adds a range keeps them. A node that no pool selects gets the base exactly as the file mode reads it. Each pool is held to its own cidrLimit; a pool that contradicts the base rejects the config of the nodes it selects. The annotation on any other ConfigMap is ignored (ignored-node-selector). ipmasq validate checks each pool merged after the run's base, and validate --node-labels k=v,k2=v2 shows which pools apply to such a node and the merged config (with the destinations of the run's EgressNATPolicy objects added).");
    out.push_str(".PP\n.RS 4\n.nf\n");
    out.push_str(&roff("metadata:\n  name: ip-masq-agent-gpu\n  namespace: kube-system\n  annotations:\n    ipmasq.io/node-selector: \"pool in (gpu,tpu),!spot\"\ndata:\n  config: |\n    nonMasqueradeCIDRs: [100.64.0.0/10]"));
    out.push_str("\n.fi\n.RE\n");
    rollouts(out);
    section(out, "EGRESSNATPOLICY");
    paragraph(out, "GKE's EgressNATPolicy (apiVersion networking.gke.io/v1, cluster-scoped): spec.action: NoSNAT and spec.destinations: [{cidr: 10.0.0.0/8}, ...]. Each destination keeps the pod's source address: the policies' CIDRs are added to the config's nonMasqueradeCIDRs (its defaults when it lists none), in policy name order, repeats dropped, not counted against cidrLimit. GKE documents the policy for Autopilot clusters, which offer no ip-masq-agent ConfigMap, and no rule for combining the two; ipmasq takes the union, the conservative reading (a destination the config forces to be masqueraded is the error forced-and-kept). Destinations written as strings (destinations: [10.0.0.0/8]) are an error that shows the right shape (egress-nat-policy-shape); so is another action than NoSNAT (egress-nat-policy-action) and a bad CIDR (the codes of the config's CIDRs).");
    section(out, "IN API MODE");
    paragraph(out, "With agent --config-source=api the agent reads these inputs from the Kubernetes API itself: the ConfigMaps of the base's namespace (only the base and the ip-masq-agent-* pools with the annotation are kept), its own Node's labels (--node-name; without a node name, or while no Node has that name, no pool applies) and, where the CRD egressnatpolicies.networking.gke.io is served, every EgressNATPolicy. Nothing is applied before each of them has been listed once (a CRD that is not served counts as listed, with no policy; installed later, its policies apply within a minute, the watcher's longest backoff: 30 s plus a random jitter of up to as much again). The config of the node is the base, then the pools whose selector matches the Node's labels in name order, then the policies' destinations; a pool edit, a relabel of the Node or a policy added or deleted is applied at once.");
    paragraph(out, "The digest of that config (as the agent records it: configRead.digest in its state file, and ipmasq show): with no pool applying and no policy, the SHA-256 of the base's config text, as for a file; otherwise the SHA-256 of a listing in sha256sum's format, one line per input, the base first, then the pools in name order, then the policies in name order: \"<sha256 of the config text>  configmaps/<namespace>/<name>\" for the base and each pool (a missing text counts as empty) and \"<sha256 of the destinations>  egressnatpolicies/<name>\" for each policy, its spec.destinations[].cidr as written, each followed by a newline (what kubectl -o jsonpath='{range .spec.destinations[*]}{.cidr}{\"\\n\"}{end}' prints).");
}

/// The section on rollouts in waves: the next config's ConfigMap and its annotations.
fn rollouts(out: &mut String) {
    section(out, "ROLLOUTS IN WAVES");
    paragraph(out, "In API mode a config change can roll out in waves: the next config is the ConfigMap ip-masq-agent-next beside the base (key config, read and checked as the base; it is no node pool), annotated with its schedule. ipmasq fleet rollout start writes it; validate checks it (rollout-annotation). The annotations: ipmasq.io/rollout-waves, the waves as percentages of the nodes, increasing, in 1..100 (1,10,50,100); ipmasq.io/rollout-soak, the time between two waves, a Go duration of at least 1s (10m); ipmasq.io/rollout-start, when the first wave starts, RFC 3339; ipmasq.io/rollout-node-selector, optional, a label selector: only the nodes it matches take part; ipmasq.io/rollout-invariants, optional, one invariant a line, keep|masquerade DEST [from SRC] [via IFACE] (DEST an address or a CIDR, judged at its first and last address; SRC by default as explain assumes it: the first host of the family's first masqueradeSourceCIDRs, else any). Written by the agents and the tool: ipmasq.io/rollout-halted, JSON {node, reason, diagnostic, wave, at}, reason ConfigRejected (admission refused the next config: invalid, too large, refused for memory), KernelRefused (the transaction failed) InvariantBroken (an invariant is false on the node's live rules) or NotSettled (the rules were changed under the agent and repaired in 3 passes in a row after it applied the next config); ipmasq.io/rollout-aborted, the time of fleet rollout abort.");
    paragraph(out, "A node's place is bytes 8 to 15 of the SHA-256 of its name (printf NAME | sha256sum, hex digits 17 to 32), big-endian, modulo 10,000; wave i (0-based) starts at start + i x soak and holds the places below its percentage x 100, so a node once in stays in and a node added later follows the same function. A node runs the next config in place of the base's text (its pools and policies composed after it as ever) while its wave has started, it is selected, and the rollout is neither halted nor aborted; otherwise the base. A node of the wave that cannot keep the next config writes the halt (a merge patch at the resource version it read: the first writer wins); every agent sees it through its ConfigMap watch and returns to the base. A rollout whose annotations do not read is ignored by the agents (they keep the base). The rollout is done once the last wave has soaked (start + waves x soak); fleet rollout promote writes the next text into the base and deletes ip-masq-agent-next, resume clears a halt and moves the start so that wave --from-wave (the first by default) starts now; promote first marks the rollout ipmasq.io/rollout-promoting (no node halts it from then on) and, unless --force, refuses a rollout that is not done, has a failed node, or whose base was edited since start (ipmasq.io/rollout-base-digest). A node that fails goes back to the base at once and stays there for that attempt (its start and the next text), whatever becomes of its halt. In file mode none of this applies.");
    out.push_str(".PP\n.RS 4\n.nf\n");
    out.push_str(&roff("metadata:\n  name: ip-masq-agent-next\n  namespace: kube-system\n  annotations:\n    ipmasq.io/rollout-waves: \"1,10,50,100\"\n    ipmasq.io/rollout-soak: 10m\n    ipmasq.io/rollout-start: \"2026-12-01T09:00:00Z\"\n    ipmasq.io/rollout-invariants: |\n      keep 10.0.0.0/8\n      masquerade 8.8.8.8\ndata:\n  config: |\n    nonMasqueradeCIDRs: [10.0.0.0/8, 100.64.0.0/10]"));
    out.push_str("\n.fi\n.RE\n");
}

/// The section on where ipmasq decides differently from upstream, on purpose (the table of
/// deliberate differences in docs/reference/config.md, in the manual's words).
fn differences(out: &mut String) {
    section(out, "DIFFERENCES FROM UPSTREAM");
    paragraph(out, "Where ipmasq decides differently from upstream ip-masq-agent (v2.12, and ip-masq-agent-v2 for merged directories), on purpose; ipmasq validate says each one:");
    for (input, what) in [
        ("an IPv4-mapped IPv6 CIDR (::ffff:172.16.0.0/108)", "upstream accepts it and iptables then fails every resync; ipmasq rejects it, naming the IPv4 form (ipv4-mapped-cidr)."),
        ("resyncInterval: 0s or negative", "upstream busy-loops; ipmasq rejects it (non-positive-duration)."),
        ("cidrLimit: -1", "both reject it; ipmasq says it must not be negative (negative-cidr-limit)."),
        ("linkLocal: false", "non-masquerade-daemon's key, ignored by upstream; ipmasq reads it as masqLinkLocal: true with a warning (deprecated-link-local), and as an error when it contradicts masqLinkLocal."),
        ("several case variants of one key", "upstream takes the alphabetically last spelling; ipmasq the last in the file, with warnings (key-case, duplicate-key)."),
        ("a file over 8 MiB, a directory, a symlink loop, a FIFO", "a read error in both; ipmasq says which (io)."),
        ("several errors", "upstream reports the first; ipmasq all, each with line and column."),
        ("a file starting with { that is not strict JSON (a YAML flow map, a trailing comma, a comment)", "upstream rejects it; ipmasq applies it with the warning upstream-rejects."),
        ("a null list entry (nonMasqueradeCIDRs: [10.0.0.0/8, ~])", "upstream keeps the default at that position (172.16.0.0/12 here: Go decodes the list over its defaults, and null leaves an element as it was; a null past the defaults, and any in an ip-masq-agent-v2 file, is \"\" and rejected); ipmasq rejects every null entry (invalid-cidr), naming the CIDR upstream would have used."),
        ("--to-ports with a port above 65535", "upstream passes it to iptables-restore, which refuses it at every resync, so its chain stays empty and nothing is masqueraded; the ipmasq agent refuses to start (exit 1), and validate --to-ports refuses it the same way (exit 2)."),
        ("ip-masq-agent-v2 files that list no CIDRs", "v2 starts the merged list empty: everything but link-local is masqueraded; ipmasq does the same, with the warning empty-cidr-list (a v1 file alone would keep the defaults)."),
        ("ip-masq-agent-v2 files with more than 64 CIDRs in all", "v2 limits each file to 64, never the merged list; so does ipmasq (each file's own cidrLimit, 64 unless it sets one)."),
        ("an invalid ip-masq-agent-v2 file", "v2 exits (its pod restarts); ipmasq keeps the last good merge in force and logs the error."),
        ("a ConfigMap with one key in both data and binaryData", "the API server refuses to store it; ipmasq validate rejects it (configmap-key-twice), its JSON result naming the ConfigMap's namespace and name."),
    ] {
        item(out, input, what);
    }
}
