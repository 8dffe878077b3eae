//! Tests of the command line itself: multi-call dispatch and `validate`.

mod dispatch;
mod extensions;
mod generated;
mod validate;
