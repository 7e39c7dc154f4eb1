//! tcptune's transfer engine: a server and a client moving messages over parallel TCP
//! streams, running a tuner on every stream at both ends and reporting what happened.
//!
//! * [`server::run`] serves any number of clients (`tcptune serve`).
//! * [`client::run`] runs one transfer against a server and returns its [`report::Report`]
//!   (`tcptune send`).
//! * [`proto`] is the control protocol (framing, messages, data-connection hello);
//!   [`auth`] the optional shared-secret authentication.
//! * [`human`] formats a report for people.
//! * [`probe`] is the pre-transfer bandwidth probe, [`pathdb`] the client's use of the
//!   database of per-path measurements ([`tcptune_pathdb`]) that spares it on known paths.
//!
//! Data on every stream is a sequence of messages whose bytes the receiver verifies (see
//! the `pattern` module's documentation): a mismatch or a short transfer is an error.

mod assemble;
pub mod auth;
pub mod client;
mod engine;
pub mod human;
pub mod pathdb;
mod pattern;
mod phase;
pub mod probe;
pub mod proto;
pub mod report;
pub mod server;

pub use engine::{SideResult, StreamSide};

/// `now + d`, saturating (about a century ahead) instead of panicking on huge durations
/// from configuration.
pub(crate) fn after(d: std::time::Duration) -> std::time::Instant {
    let now = std::time::Instant::now();
    let cap = std::time::Duration::from_secs(100 * 365 * 86_400);
    now.checked_add(d.min(cap)).unwrap_or(now)
}
