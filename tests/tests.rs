//! Integration tests of the `ipmasq` binary: one crate, one module per area.

mod cli;
mod root;
mod util;
