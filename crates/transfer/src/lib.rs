//! tcptune's transfer engine: a server and a client moving messages over parallel TCP
//! streams, running a tuner on every stream at both ends and reporting what happened.
//!
//! * [`session`]: the sessions as sans-IO state machines (the server's endpoint and
//!   sessions, the client's session), re-exported from [`tcptune_proto`]: every rule of the
//!   conversation, unit-tested without sockets.
//! * [`server::run`] serves any number of clients on one port (`tcptune serve`): an event
//!   loop that drives the server's state machines.
//! * [`client::run`] runs one transfer against a server and returns its [`report::Report`]
//!   (`tcptune send`).
//! * [`proto`] is the wire protocol (framing, messages, data-connection hello), re-exported
//!   from [`tcptune_proto::wire`]; [`auth`] the optional shared-secret authentication.
//! * [`report`] is the report: its types, how it is assembled from both ends' results,
//!   what it says about itself ([`diagnose`]) and how it reads for people ([`human`]).
//! * [`probe`] is the pre-transfer bandwidth probe, [`pathdb`] the client's use of the
//!   database of per-path measurements ([`tcptune_pathdb`]) that spares it on known paths.
//!
//! Data on every stream is a sequence of messages whose bytes the receiver verifies (see
//! the `pattern` module's documentation): a mismatch or a short transfer is an error.

pub use tcptune_proto::advice;
pub mod auth;
pub mod client;
mod engine;
pub mod files;
pub mod pathdb;
mod pattern;
mod phase;
pub mod probe;
pub use tcptune_proto::wire as proto;
pub mod report;
pub mod server;
pub use tcptune_proto::session;

pub use engine::{SideResult, StreamSide};
pub use phase::PrepareError;
/// The report's spelling of the core types, under the name the file copy's report uses.
pub(crate) use report::serde as report_serde;
pub use report::{diagnose, human};
