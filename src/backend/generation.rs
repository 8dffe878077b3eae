//! The nftables ruleset generation id over netlink (`NFT_MSG_GETGEN`): one request and one
//! reply of a few bytes, microseconds at any ruleset size. Every nftables commit in the
//! network namespace (ours, kube-proxy's, iptables-nft's) moves it, so an unchanged id means
//! nothing changed since it was read. Both the nftables backend and the iptables-nft variant
//! gate their passes on it; iptables-legacy's writes do not move it.

use super::netlink::{
    attribute, error_code, message, Requester, NFGENMSG_LEN, NFNL_SUBSYS_NFTABLES, NFTA_GEN_ID,
    NFT_MSG_GETGEN, NFT_MSG_NEWGEN, NLMSG_ERROR, NLMSG_HDRLEN, NLM_F_REQUEST,
};
use std::io;

/// The GETGEN request: a netlink header and an nfgenmsg, nothing else.
fn request(seq: u32) -> Vec<u8> {
    let kind = (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETGEN;
    message(kind, NLM_F_REQUEST, seq, (0, 0), &[])
}

/// The generation id in a NEWGEN reply, or the error the kernel answered with.
fn parse_reply(buf: &[u8]) -> io::Result<u32> {
    let bad =
        |what: &str| io::Error::new(io::ErrorKind::InvalidData, format!("GETGEN reply: {what}"));
    if buf.len() < NLMSG_HDRLEN {
        return Err(bad("short message"));
    }
    let len = u32::from_ne_bytes(buf[0..4].try_into().expect("4 bytes")) as usize;
    let kind = u16::from_ne_bytes(buf[4..6].try_into().expect("2 bytes"));
    let msg = buf.get(..len.min(buf.len())).ok_or_else(|| bad("length"))?;
    if kind == NLMSG_ERROR {
        let code = error_code(msg).ok_or_else(|| bad("short error"))?;
        return Err(io::Error::from_raw_os_error(-code));
    }
    if kind != (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWGEN {
        return Err(bad(&format!("unexpected message type {kind:#x}")));
    }
    let attrs = msg.get(NLMSG_HDRLEN + NFGENMSG_LEN..).unwrap_or_default();
    if let Some(id) = attribute(attrs, NFTA_GEN_ID).and_then(|v| v.get(..4)) {
        return Ok(u32::from_be_bytes(id.try_into().expect("4 bytes")));
    }
    Err(bad("no NFTA_GEN_ID"))
}

/// The current ruleset generation id of this network namespace.
pub(crate) fn generation() -> io::Result<u32> {
    let requester = Requester::open()?;
    requester.send(&request(1))?;
    parse_reply(&requester.receive()?)
}

/// What a backend knows to be live for one family: the generation id after its own last
/// apply (or last full comparison) and the ruleset that was in sync then.
#[derive(Clone, Debug, Default)]
pub(crate) struct Gate {
    known: [Option<(u32, crate::plan::Ruleset, usize)>; 2],
}

fn slot(family: crate::plan::Family) -> usize {
    match family {
        crate::plan::Family::V4 => 0,
        crate::plan::Family::V6 => 1,
    }
}

impl Gate {
    /// Whether `desired` is known to be live at generation `now`: nothing to read or write.
    pub fn in_sync(&self, now: Option<u32>, desired: &crate::plan::Ruleset) -> bool {
        self.known_at(now, desired.family)
            .is_some_and(|(ruleset, _)| ruleset == desired)
    }

    /// The ruleset known to be live at generation `now`, if nothing committed since we knew.
    pub fn known_at(
        &self,
        now: Option<u32>,
        family: crate::plan::Family,
    ) -> Option<(&crate::plan::Ruleset, usize)> {
        match (now, &self.known[slot(family)]) {
            (Some(now), Some((generation, ruleset, rules))) if *generation == now => {
                Some((ruleset, *rules))
            }
            _ => None,
        }
    }

    /// Records the state after a pass: `before` was read before the observation; `after`,
    /// when we applied a transaction, after it. Our own commit moves the id by exactly one;
    /// anything else means another writer came in between, so nothing is recorded.
    pub fn record(
        &mut self,
        desired: &crate::plan::Ruleset,
        rules: usize,
        before: Option<u32>,
        after: Option<Option<u32>>,
    ) {
        let generation = match after {
            None => before,
            Some(after) => match (before, after) {
                (Some(b), Some(a)) if a == b.wrapping_add(1) => Some(a),
                _ => None,
            },
        };
        self.known[slot(desired.family)] = generation.map(|g| (g, desired.clone(), rules));
    }

    /// The generation the family's known ruleset was live at.
    pub fn generation(&self, family: crate::plan::Family) -> Option<u32> {
        self.known[slot(family)].as_ref().map(|(g, _, _)| *g)
    }

    /// Moves the family's knowledge to generation `to`: the commits since changed nothing of
    /// ours (the change notifications say so).
    pub fn advance(&mut self, family: crate::plan::Family, to: u32) {
        if let Some((generation, _, _)) = &mut self.known[slot(family)] {
            *generation = to;
        }
    }

    /// Forgets a family (after a cleanup).
    pub fn forget(&mut self, family: crate::plan::Family) {
        self.known[slot(family)] = None;
    }
}

/// The generation id, or None when netlink cannot tell (then every pass compares fully).
pub(crate) fn current() -> Option<u32> {
    match generation() {
        Ok(id) => Some(id),
        Err(err) => {
            tracing::debug!(error = %err, "cannot read the nftables generation id");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_trusts_only_our_own_single_commit() {
        let ruleset = crate::plan::plan(
            &crate::config::Config::defaults(&crate::config::Options::default()),
            &crate::plan::PlanOptions::default(),
        )
        .remove(0);
        let mut gate = Gate::default();
        assert!(!gate.in_sync(Some(5), &ruleset));
        gate.record(&ruleset, 5, Some(5), Some(Some(6)));
        assert!(gate.in_sync(Some(6), &ruleset));
        assert!(!gate.in_sync(Some(7), &ruleset), "someone committed since");
        gate.record(&ruleset, 5, Some(7), Some(Some(9)));
        assert!(
            !gate.in_sync(Some(9), &ruleset),
            "another commit slipped in"
        );
        gate.record(&ruleset, 5, Some(9), None);
        assert!(gate.in_sync(Some(9), &ruleset), "compared in sync at 9");
        let mut other = ruleset.clone();
        other.decisions = ruleset.decisions[1..].into();
        assert!(!gate.in_sync(Some(9), &other), "a new plan is compared");
        assert!(!gate.in_sync(None, &ruleset), "no id, no trust");
        gate.forget(ruleset.family);
        assert!(!gate.in_sync(Some(9), &ruleset));
    }

    fn reply(kind: u16, payload: &[u8]) -> Vec<u8> {
        let mut msg = Vec::new();
        msg.extend_from_slice(&((NLMSG_HDRLEN + payload.len()) as u32).to_ne_bytes());
        msg.extend_from_slice(&kind.to_ne_bytes());
        msg.extend_from_slice(&[0; 10]);
        msg.extend_from_slice(payload);
        msg
    }

    #[test]
    fn request_is_a_bare_getgen() {
        let msg = request(7);
        assert_eq!(msg.len(), 20);
        assert_eq!(u16::from_ne_bytes([msg[4], msg[5]]), 0x0a10);
    }

    #[test]
    fn replies_are_parsed() {
        // nfgenmsg, then NFTA_GEN_ID (big-endian 0x01020304), then NFTA_GEN_PROC_PID.
        let mut payload = vec![0, 0, 0, 0];
        payload.extend_from_slice(&8u16.to_ne_bytes());
        payload.extend_from_slice(&1u16.to_ne_bytes());
        payload.extend_from_slice(&[1, 2, 3, 4]);
        payload.extend_from_slice(&8u16.to_ne_bytes());
        payload.extend_from_slice(&2u16.to_ne_bytes());
        payload.extend_from_slice(&[0, 0, 0, 9]);
        assert_eq!(parse_reply(&reply(0x0a0f, &payload)).unwrap(), 0x0102_0304);
        let err = parse_reply(&reply(NLMSG_ERROR, &(-1i32).to_ne_bytes())).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(1));
        assert!(parse_reply(&reply(0x0a0f, &[0, 0, 0, 0])).is_err());
        assert!(parse_reply(&[1, 2]).is_err());
    }
}
