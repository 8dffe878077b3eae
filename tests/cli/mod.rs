//! Tests that need no privileges: the command line itself (multi-call dispatch, `validate`,
//! generated files) and the shape of the code.

mod backend_names;
mod code_shape;
mod dispatch;
mod docs;
mod extensions;
mod fits_terminal;
mod fleet;
mod floors;
mod generated;
mod habits;
mod hostile_input;
mod netlink_floor;
mod runbooks;
mod validate;
mod validate_ci;
mod validate_pools;
mod validate_verdicts;
mod who;
