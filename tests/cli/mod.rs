//! Tests of the command line itself: multi-call dispatch and `validate`.

mod dispatch;
mod extensions;
mod generated;
mod hostile_input;
mod validate;
