//! One line of the SNAT log: a JSON object with its keys in a fixed order (`time`, `event`,
//! `proto`, `src`, `translated`, `dst`, then on an `end` with accounting `packets` and
//! `bytes`, both directions summed), UTF-8, ended by `\n`. `ipmasq who` reads these lines.

use crate::netlink::conntrack::{Event, EventKind, Flow};
use std::fmt::Write as _;
use std::net::IpAddr;
use std::time::{SystemTime, UNIX_EPOCH};

/// `time` as RFC 3339 in UTC with microseconds and a `Z`: `2026-11-26T12:03:04.123456Z`.
pub fn rfc3339_micros(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let seconds = since.as_secs();
    let (days, in_day) = ((seconds / 86_400) as i64, seconds % 86_400);
    let (year, month, day) = crate::text::civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        in_day / 3600,
        in_day / 60 % 60,
        in_day % 60,
        since.subsec_micros()
    )
}

/// `address:port`, an IPv6 address in brackets; a protocol without ports has port 0 (ICMP's
/// destination: its source and translated ones carry the echo's identifier instead).
fn endpoint(out: &mut String, address: IpAddr, port: Option<u16>) {
    let port = port.unwrap_or(0);
    let _ = match address {
        IpAddr::V4(v4) => write!(out, "{v4}:{port}"),
        IpAddr::V6(v6) => write!(out, "[{v6}]:{port}"),
    };
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

/// Appends the line of `event`, seen at `time`, to `out` (its `\n` included). The pod's
/// source is the original tuple's, the translated one the reply tuple's destination, and the
/// destination the original tuple's.
pub fn render(out: &mut String, time: SystemTime, event: &Event) {
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
    if let (EventKind::End, Some((packets, bytes))) = (event.kind, event.counters) {
        let _ = write!(out, ",\"packets\":{packets},\"bytes\":{bytes}");
    }
    out.push_str("}\n");
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
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339_micros(leap), "2000-02-29T00:00:00.000000Z");
    }

    #[test]
    fn lines_follow_the_contract_key_order_and_parse_as_json() {
        let at = UNIX_EPOCH + Duration::new(1_795_694_584, 123_456_000);
        let mut out = String::new();
        render(&mut out, at, &event(EventKind::New, false, None));
        assert_eq!(
            out,
            "{\"time\":\"2026-11-26T12:03:04.123456Z\",\"event\":\"new\",\"proto\":\"tcp\",\"src\":\"192.168.1.5:40002\",\"translated\":\"203.0.113.1:40002\",\"dst\":\"198.51.100.9:443\"}\n"
        );
        out.clear();
        render(&mut out, at, &event(EventKind::End, true, Some((12, 3400))));
        assert_eq!(
            out,
            "{\"time\":\"2026-11-26T12:03:04.123456Z\",\"event\":\"end\",\"proto\":\"tcp\",\"src\":\"[fd00::5]:40002\",\"translated\":\"[2001:db8:1::1]:40002\",\"dst\":\"[2001:db8::9]:443\",\"packets\":12,\"bytes\":3400}\n"
        );
        let parsed: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(parsed["bytes"], 3400);
        out.clear();
        let mut other = event(EventKind::End, false, None);
        other.flow.protocol = 132;
        render(&mut out, at, &other);
        assert!(out.contains("\"proto\":132,"), "{out}");
        assert!(!out.contains("packets"), "{out}");
        serde_json::from_str::<serde_json::Value>(&out).unwrap();
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
        render(&mut out, at, &echo);
        assert_eq!(
            out,
            "{\"time\":\"2026-11-26T12:03:04.123456Z\",\"event\":\"new\",\"proto\":\"icmp\",\"src\":\"192.168.1.5:4660\",\"translated\":\"203.0.113.1:17185\",\"dst\":\"198.51.100.9:0\"}\n"
        );
    }
}
