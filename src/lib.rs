//! ipmasq: a multi-call node-networking binary that replaces Kubernetes' ip-masq-agent.
//!
//! The library holds everything; `main.rs` only hands the process arguments to [`cmd::main`].
//! `unsafe` is denied everywhere but the ground floor, `src/netlink/`.
#![deny(unsafe_code)]

pub(crate) mod addresses;
pub(crate) mod agent;
pub(crate) mod backend;
pub(crate) mod cli;
/// The Kubernetes client and the node's name: public for API mode's applets and tests.
pub mod cluster;
pub mod cmd;
/// The config reader is public for the fuzz targets (`fuzz/`).
pub mod config;
pub(crate) mod conntrack;
#[allow(unsafe_code)]
pub(crate) mod netlink;
pub(crate) mod output;
pub(crate) mod plan;
pub(crate) mod snat;
pub(crate) mod terminal;
pub(crate) mod text;

/// The ctnetlink entry parser alone, for `benches/conntrack_parser.rs`; not an API.
#[doc(hidden)]
pub mod bench {
    pub use crate::netlink::conntrack::{parse_entry_for_bench as conntrack_entry, Flow};
    pub use crate::plan::Family;
}
