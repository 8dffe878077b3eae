//! ipmasq: a multi-call node-networking binary that replaces Kubernetes' ip-masq-agent.
//!
//! The library holds everything; `main.rs` only hands the process arguments to [`cmd::main`].

pub mod agent;
pub mod backend;
pub mod cli;
pub mod cmd;
pub mod config;
pub mod output;
pub mod plan;
