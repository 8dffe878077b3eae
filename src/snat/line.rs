//! The SNAT log's line, written by the agent and read by `ipmasq who`, owned here whole: a
//! JSON object with its keys in a fixed order (`time`, `event`, `proto`, `src`, `translated`,
//! `dst`, then on an `end` with accounting `packets` and `bytes`, both directions summed),
//! UTF-8, ended by `\n`; its times (RFC 3339 UTC to the microsecond, one calendar: jiff's),
//! its addresses' spelling, the default path, and the times `who --at` takes.
//!
//! A `refused` line says the pod share refused a pod's new connections ([`render_refusals`]):
//! `time` (the first refusal), `event`, `proto`, `src` (the pod's address, no port), `dst`
//! (`address:port`, or `*` for several destinations), in API mode `pod`, `uid` and `node`,
//! then `limit` (`rate` or `connections`), `refused` (how many) and `last` (the last one's
//! time). It has no `translated`: nothing was.

use crate::netlink::conntrack::{Event, EventKind, Flow};
use crate::plan::live::ShareLimit;
use k8s_openapi::jiff::{civil::DateTime, tz::Offset, tz::TimeZone, Timestamp};
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::time::{SystemTime, UNIX_EPOCH};

/// Where the agent writes its SNAT log when `--snat-log` names no other path, and where `who`
/// reads it.
pub const DEFAULT_SNAT_LOG: &str = "/var/log/ipmasq/snat.log";

/// A time in microseconds since the Unix epoch (the log's precision).
pub type Micros = i64;

/// `time` in the log's microseconds since the epoch.
pub fn micros_of(time: SystemTime) -> Micros {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_micros()).unwrap_or(i64::MAX)
}

/// `time` as RFC 3339 in UTC with microseconds and a `Z`: `2026-11-26T12:03:04.123456Z`.
pub fn rfc3339_micros(time: SystemTime) -> String {
    let micros = micros_of(time);
    let at = Timestamp::from_microsecond(micros).unwrap_or(Timestamp::MAX);
    let civil = Offset::UTC.to_datetime(at);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        civil.year(),
        civil.month(),
        civil.day(),
        civil.hour(),
        civil.minute(),
        civil.second(),
        civil.subsec_nanosecond() / 1000
    )
}

/// A line's `time` (`2026-11-26T12:03:04.123456Z`) in microseconds.
pub fn time_of(text: &str) -> Option<Micros> {
    text.parse::<Timestamp>().ok().map(|t| t.as_microsecond())
}

/// A time for the reader: RFC 3339 UTC, microseconds when there are any.
pub fn show_time(micros: Micros) -> String {
    Timestamp::from_microsecond(micros)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| format!("@{micros}µs"))
}

/// A time `--at` takes: RFC 3339 (`2026-11-26T12:03:04Z`, `…+01:00`, fractions), with a blank
/// for the `T`, and without an offset meaning UTC (as the log and most firewalls write);
/// also the web servers' and firewalls' common log format (`26/Nov/2026:12:03:04 +0000`) and
/// Unix seconds (`@1795694584`).
pub fn parse_time(text: &str) -> Result<Micros, String> {
    let trimmed = text.trim();
    if let Some(seconds) = trimmed.strip_prefix('@') {
        if let Ok(seconds) = seconds.parse::<f64>() {
            if seconds.is_finite() && seconds.abs() < 1e11 {
                return Ok((seconds * 1e6).round() as Micros);
            }
        }
    } else {
        let normal = trimmed.replacen(' ', "T", 1);
        if let Ok(time) = normal.parse::<Timestamp>() {
            return Ok(time.as_microsecond());
        }
        if let Ok(civil) = normal.trim_end_matches(['Z', 'z']).parse::<DateTime>() {
            if let Ok(zoned) = civil.to_zoned(TimeZone::UTC) {
                return Ok(zoned.timestamp().as_microsecond());
            }
        }
        let common = trimmed.trim_start_matches('[').trim_end_matches(']');
        if let Ok(time) = Timestamp::strptime("%d/%b/%Y:%H:%M:%S %z", common) {
            return Ok(time.as_microsecond());
        }
    }
    Err(format!(
        "{text:?} is no time: give RFC 3339 (2026-11-26T12:03:04Z, 2026-11-26 12:03:04 for UTC, \
         2026-11-26T13:03:04+01:00), the common log format (26/Nov/2026:12:03:04 +0000) or \
         Unix seconds (@1795694584)"
    ))
}

/// An address and port as the log writes them (`a.b.c.d:port`, `[v6]:port`), the form `who`
/// looks for: a v4-mapped v6 address given on its command line as its v4 form.
pub fn endpoint_text(address: SocketAddr) -> String {
    SocketAddr::new(address.ip().to_canonical(), address.port()).to_string()
}

/// A line of the log as it is read back; unknown keys are ignored, so a later writer may add
/// some.
#[derive(serde::Deserialize)]
pub struct Record<'a> {
    #[serde(borrow)]
    pub time: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    pub event: std::borrow::Cow<'a, str>,
    /// A name (`"tcp"`) or a number.
    pub proto: serde_json::Value,
    #[serde(borrow)]
    pub src: std::borrow::Cow<'a, str>,
    /// Absent from a `refused` line only: nothing was translated.
    #[serde(borrow, default)]
    pub translated: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    pub dst: std::borrow::Cow<'a, str>,
    /// API mode: the pod (`namespace/name`) and its uid, when the agent knew them.
    #[serde(borrow, default)]
    pub pod: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    pub uid: Option<std::borrow::Cow<'a, str>>,
    /// API mode: the node that wrote the line.
    #[serde(borrow, default)]
    pub node: Option<std::borrow::Cow<'a, str>>,
    /// A `refused` line's limit, count and last refusal's time.
    #[serde(borrow, default)]
    pub limit: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    pub refused: Option<u64>,
    #[serde(borrow, default)]
    pub last: Option<std::borrow::Cow<'a, str>>,
}

/// The `event` of a line of refusals.
pub const REFUSED: &str = "refused";

impl<'a> Record<'a> {
    /// One line (without its `\n`), or why it is no line of the log.
    pub fn read(line: &'a [u8]) -> Result<Record<'a>, serde_json::Error> {
        serde_json::from_slice(line)
    }
}

/// `address:port`, an IPv6 address in brackets; a protocol without ports has port 0 (ICMP's
/// destination: its source and translated ones carry the echo's identifier instead).
fn endpoint(out: &mut String, address: IpAddr, port: Option<u16>) {
    let _ = write!(out, "{}", SocketAddr::new(address, port.unwrap_or(0)));
}

/// The protocol as the log names it: `tcp`, `udp`, `icmp`, `icmpv6` (strings), any other its
/// number (a JSON number).
fn protocol(out: &mut String, number: u8) {
    match number {
        6 => out.push_str("\"tcp\""),
        17 => out.push_str("\"udp\""),
        1 => out.push_str("\"icmp\""),
        58 => out.push_str("\"icmpv6\""),
        other => {
            let _ = write!(out, "{other}");
        }
    }
}

/// The protocol's name in labels: as in the log, or its number.
pub fn protocol_name(number: u8) -> String {
    match number {
        6 => "tcp".into(),
        17 => "udp".into(),
        1 => "icmp".into(),
        58 => "icmpv6".into(),
        other => other.to_string(),
    }
}

/// Where a line's flow came from, in API mode: the pod that held its source (when the pod
/// watch knew one) and the node.
#[derive(Clone, Copy, Debug)]
pub struct Origin<'a> {
    pub pod: Option<PodWords<'a>>,
    pub node: &'a str,
}

/// A pod as a line names it: `namespace/name` and its uid.
#[derive(Clone, Copy, Debug)]
pub struct PodWords<'a> {
    pub qualified: &'a str,
    pub uid: &'a str,
}

/// A JSON string, escaped.
fn string(out: &mut String, text: &str) {
    match serde_json::to_string(text) {
        Ok(quoted) => out.push_str(&quoted),
        Err(_) => out.push_str("\"\""),
    }
}

/// Appends the line of `event`, seen at `time`, to `out` (its `\n` included). The pod's
/// source is the original tuple's, the translated one the reply tuple's destination, and the
/// destination the original tuple's; in API mode `pod` (namespace/name) and `uid` when known,
/// and `node`, follow `dst`.
pub fn render(out: &mut String, time: SystemTime, event: &Event, origin: Option<Origin<'_>>) {
    let flow: &Flow = &event.flow;
    out.push_str("{\"time\":\"");
    out.push_str(&rfc3339_micros(time));
    out.push_str("\",\"event\":\"");
    out.push_str(match event.kind {
        EventKind::New => "new",
        EventKind::End => "end",
    });
    out.push_str("\",\"proto\":");
    protocol(out, flow.protocol);
    out.push_str(",\"src\":\"");
    endpoint(out, flow.source, flow.source_port_or_id());
    out.push_str("\",\"translated\":\"");
    endpoint(out, flow.reply_destination, flow.translated_port_or_id());
    out.push_str("\",\"dst\":\"");
    endpoint(out, flow.destination, flow.destination_port);
    out.push('"');
    origin_words(out, origin);
    if let (EventKind::End, Some((packets, bytes))) = (event.kind, event.counters) {
        let _ = write!(out, ",\"packets\":{packets},\"bytes\":{bytes}");
    }
    out.push_str("}\n");
}

/// API mode's `pod`, `uid` (when the pod is known) and `node`.
fn origin_words(out: &mut String, origin: Option<Origin<'_>>) {
    if let Some(origin) = origin {
        if let Some(pod) = origin.pod {
            out.push_str(",\"pod\":");
            string(out, pod.qualified);
            out.push_str(",\"uid\":");
            string(out, pod.uid);
        }
        out.push_str(",\"node\":");
        string(out, origin.node);
    }
}

/// Where refused connections went: one destination, or several (`*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RefusedTo {
    One {
        address: IpAddr,
        /// TCP's, UDP's and SCTP's port; 0 for other protocols, as a flow's line writes it.
        port: Option<u16>,
    },
    Several,
}

/// A pod's new connections the pod share refused: of one protocol, to one destination (or
/// several), by one limit, counted between two times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refusals {
    pub first: SystemTime,
    pub last: SystemTime,
    pub protocol: u8,
    /// The pod's address.
    pub source: IpAddr,
    pub to: RefusedTo,
    pub limit: ShareLimit,
    pub count: u64,
}

/// The refusals the tests of the line and of `who` write: TCP from 192.168.1.5 to
/// 198.51.100.9:443, refused by the connection limit `count` times over 0.9 s from `first`.
#[cfg(test)]
pub fn sample_refusals(first: SystemTime, count: u64) -> Refusals {
    Refusals {
        first,
        last: first + std::time::Duration::from_millis(900),
        protocol: 6,
        source: "192.168.1.5".parse().expect("an address"),
        to: RefusedTo::One {
            address: "198.51.100.9".parse().expect("an address"),
            port: Some(443),
        },
        limit: ShareLimit::Connections,
        count,
    }
}

/// Appends the `refused` line of `refusals` to `out` (its `\n` included); in API mode the
/// pod (when known) and the node follow `dst`, as on a flow's line.
pub fn render_refusals(out: &mut String, refusals: &Refusals, origin: Option<Origin<'_>>) {
    out.push_str("{\"time\":\"");
    out.push_str(&rfc3339_micros(refusals.first));
    out.push_str("\",\"event\":\"");
    out.push_str(REFUSED);
    out.push_str("\",\"proto\":");
    protocol(out, refusals.protocol);
    let _ = write!(
        out,
        ",\"src\":\"{}\",\"dst\":\"",
        refusals.source.to_canonical()
    );
    match refusals.to {
        RefusedTo::One { address, port } => endpoint(out, address.to_canonical(), port),
        RefusedTo::Several => out.push('*'),
    }
    out.push('"');
    origin_words(out, origin);
    let _ = writeln!(
        out,
        ",\"limit\":\"{}\",\"refused\":{},\"last\":\"{}\"}}",
        refusals.limit.as_str(),
        refusals.count,
        rfc3339_micros(refusals.last)
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Family;
    use std::time::Duration;

    fn event(kind: EventKind, v6: bool, counters: Option<(u64, u64)>) -> Event {
        let (source, destination, translated): (IpAddr, IpAddr, IpAddr) = if v6 {
            (
                "fd00::5".parse().unwrap(),
                "2001:db8::9".parse().unwrap(),
                "2001:db8:1::1".parse().unwrap(),
            )
        } else {
            (
                "192.168.1.5".parse().unwrap(),
                "198.51.100.9".parse().unwrap(),
                "203.0.113.1".parse().unwrap(),
            )
        };
        Event {
            kind,
            counters,
            flow: Flow {
                family: if v6 { Family::V6 } else { Family::V4 },
                protocol: 6,
                source,
                destination,
                source_port: Some(40002),
                destination_port: Some(443),
                reply_source: destination,
                reply_destination: translated,
                reply_destination_port: Some(40002),
                icmp_id: None,
                reply_icmp_id: None,
                id: 1,
            },
        }
    }

    #[test]
    fn times_are_utc_with_microseconds() {
        let at = UNIX_EPOCH + Duration::new(1_795_694_584, 123_456_789);
        assert_eq!(rfc3339_micros(at), "2026-11-26T12:03:04.123456Z");
        assert_eq!(rfc3339_micros(UNIX_EPOCH), "1970-01-01T00:00:00.000000Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // the leap day of 2000
        assert_eq!(rfc3339_micros(leap), "2000-02-29T00:00:00.000000Z");
    }

    #[test]
    fn lines_follow_the_contract_key_order_and_parse_as_json() {
        let at = UNIX_EPOCH + Duration::new(1_795_694_584, 123_456_000);
        let mut out = String::new();
        render(&mut out, at, &event(EventKind::New, false, None), None);
        assert_eq!(
            out,
            "{\"time\":\"2026-11-26T12:03:04.123456Z\",\"event\":\"new\",\"proto\":\"tcp\",\"src\":\"192.168.1.5:40002\",\"translated\":\"203.0.113.1:40002\",\"dst\":\"198.51.100.9:443\"}\n"
        );
        out.clear();
        render(
            &mut out,
            at,
            &event(EventKind::End, true, Some((12, 3400))),
            None,
        );
        assert_eq!(
            out,
            "{\"time\":\"2026-11-26T12:03:04.123456Z\",\"event\":\"end\",\"proto\":\"tcp\",\"src\":\"[fd00::5]:40002\",\"translated\":\"[2001:db8:1::1]:40002\",\"dst\":\"[2001:db8::9]:443\",\"packets\":12,\"bytes\":3400}\n"
        );
        let parsed: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(parsed["bytes"], 3400);
        out.clear();
        let mut other = event(EventKind::End, false, None);
        other.flow.protocol = 132;
        render(&mut out, at, &other, None);
        assert!(out.contains("\"proto\":132,"), "{out}");
        assert!(!out.contains("packets"), "{out}");
        serde_json::from_str::<serde_json::Value>(&out).unwrap();
    }

    /// A `refused` line: its keys in order, a pod's address without a port, `*` for several
    /// destinations, the pod and node in API mode; read back with no `translated`.
    #[test]
    fn a_line_of_refusals_follows_its_contract_and_reads_back() {
        let first = UNIX_EPOCH + Duration::new(1_795_694_584, 123_456_000);
        let refusals = sample_refusals(first, 3800);
        let mut out = String::new();
        render_refusals(&mut out, &refusals, None);
        assert_eq!(
            out,
            "{\"time\":\"2026-11-26T12:03:04.123456Z\",\"event\":\"refused\",\"proto\":\"tcp\",\"src\":\"192.168.1.5\",\"dst\":\"198.51.100.9:443\",\"limit\":\"connections\",\"refused\":3800,\"last\":\"2026-11-26T12:03:05.023456Z\"}\n"
        );
        let origin = Origin {
            pod: Some(PodWords {
                qualified: "web/api-0",
                uid: "u-1",
            }),
            node: "node-a",
        };
        let several = Refusals {
            protocol: 1,
            to: RefusedTo::Several,
            limit: ShareLimit::Rate,
            source: "::ffff:192.168.1.5".parse().unwrap(),
            ..refusals
        };
        out.clear();
        render_refusals(&mut out, &several, Some(origin));
        let record = Record::read(out.trim_end().as_bytes()).unwrap();
        assert_eq!(record.event, REFUSED);
        assert_eq!(record.src, "192.168.1.5");
        assert_eq!(record.dst, "*");
        assert_eq!(record.translated, None);
        assert_eq!(record.pod.as_deref(), Some("web/api-0"));
        assert_eq!(record.node.as_deref(), Some("node-a"));
        assert_eq!(record.limit.as_deref(), Some("rate"));
        assert_eq!(record.refused, Some(3800));
        assert_eq!(
            record.last.as_deref().and_then(time_of),
            Some(micros_of(several.last))
        );
        assert_eq!(time_of(&record.time), Some(micros_of(first)));
    }

    /// API mode: the pod, its uid and the node follow `dst`, before an end's counters, and
    /// read back; without a pod known, the node alone.
    #[test]
    fn an_api_mode_line_names_the_pod_and_the_node_and_reads_back() {
        let at = UNIX_EPOCH + Duration::new(1_795_694_584, 0);
        let origin = Origin {
            pod: Some(PodWords {
                qualified: "web/api-0",
                uid: "6f1c",
            }),
            node: "node-a",
        };
        let mut out = String::new();
        render(
            &mut out,
            at,
            &event(EventKind::End, false, Some((1, 2))),
            Some(origin),
        );
        assert!(
            out.contains(
                "\"dst\":\"198.51.100.9:443\",\"pod\":\"web/api-0\",\"uid\":\"6f1c\",\"node\":\"node-a\",\"packets\":1,"
            ),
            "{out}"
        );
        let record = Record::read(out.trim_end().as_bytes()).unwrap();
        assert_eq!(record.pod.as_deref(), Some("web/api-0"));
        assert_eq!(record.uid.as_deref(), Some("6f1c"));
        assert_eq!(record.node.as_deref(), Some("node-a"));
        out.clear();
        let unknown = Origin {
            pod: None,
            node: "node-a",
        };
        render(
            &mut out,
            at,
            &event(EventKind::New, false, None),
            Some(unknown),
        );
        assert!(
            out.ends_with("\"dst\":\"198.51.100.9:443\",\"node\":\"node-a\"}\n"),
            "{out}"
        );
        let record = Record::read(out.trim_end().as_bytes()).unwrap();
        assert_eq!((record.pod, record.node.as_deref()), (None, Some("node-a")));
    }

    /// What the writer renders, the reader reads back: every field, and the time to the
    /// microsecond through the one calendar.
    #[test]
    fn a_rendered_line_reads_back_whole() {
        for (micros, v6) in [
            (1_795_694_584_123_456i64, false),
            (951_782_400_000_001, true),
        ] {
            let at = UNIX_EPOCH + Duration::from_micros(micros as u64);
            let mut out = String::new();
            render(&mut out, at, &event(EventKind::End, v6, Some((1, 2))), None);
            let line = out.strip_suffix('\n').expect("one line");
            let record = Record::read(line.as_bytes()).expect("reads back");
            assert_eq!(time_of(&record.time), Some(micros), "{line}");
            assert_eq!(parse_time(&record.time), Ok(micros), "{line}");
            assert_eq!(
                (&*record.event, record.proto.as_str()),
                ("end", Some("tcp"))
            );
            let flow = event(EventKind::End, v6, None).flow;
            let src = endpoint_text(SocketAddr::new(flow.source, 40002));
            let translated = endpoint_text(SocketAddr::new(flow.reply_destination, 40002));
            let dst = endpoint_text(SocketAddr::new(flow.destination, 443));
            assert_eq!(
                (
                    &*record.src,
                    record.translated.as_deref().unwrap(),
                    &*record.dst
                ),
                (&*src, &*translated, &*dst)
            );
        }
    }

    #[test]
    fn times_users_paste_parse() {
        let utc = parse_time("2026-11-26T12:03:04Z").unwrap();
        for same in [
            "2026-11-26 12:03:04",
            "2026-11-26T12:03:04",
            "2026-11-26T12:03:04.000Z",
            "2026-11-26T13:03:04+01:00",
            "26/Nov/2026:12:03:04 +0000",
            "[26/Nov/2026:13:03:04 +0100]",
            "@1795694584",
        ] {
            assert_eq!(parse_time(same), Ok(utc), "{same}");
        }
        assert_eq!(show_time(utc), "2026-11-26T12:03:04Z");
        for bad in ["yesterday", "", "2026-13-01T00:00:00Z", "@x"] {
            assert!(parse_time(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_icmp_echo_logs_its_ids_in_place_of_ports() {
        let at = UNIX_EPOCH + Duration::new(1_795_694_584, 123_456_000);
        let mut echo = event(EventKind::New, false, None);
        echo.flow.protocol = 1;
        (echo.flow.source_port, echo.flow.destination_port) = (None, None);
        echo.flow.reply_destination_port = None;
        (echo.flow.icmp_id, echo.flow.reply_icmp_id) = (Some(4660), Some(17185));
        let mut out = String::new();
        render(&mut out, at, &echo, None);
        assert_eq!(
            out,
            "{\"time\":\"2026-11-26T12:03:04.123456Z\",\"event\":\"new\",\"proto\":\"icmp\",\"src\":\"192.168.1.5:4660\",\"translated\":\"203.0.113.1:17185\",\"dst\":\"198.51.100.9:0\"}\n"
        );
    }
}
