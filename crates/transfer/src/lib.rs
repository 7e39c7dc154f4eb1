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
//! * [`remote`] starts the far end over ssh (`tcptune cp HOST:PATH`, `send --ssh`): the
//!   line the far end prints, ssh's failures in one line, and the process's guard.
//! * [`probe`] is the pre-transfer bandwidth probe, [`pathdb`] the client's use of the
//!   database of per-path measurements ([`tcptune_pathdb`]) that spares it on known paths.
//!
//! Data on every stream is a sequence of messages whose bytes the receiver verifies (see
//! the `pattern` module's documentation): a mismatch or a short transfer is an error.
//!
//! # Where the clock is read
//!
//! The sessions ([`session`]) and everything below the drivers take the time as an
//! argument (`now: Instant`, or Unix seconds for records). The clock is read only by the
//! drivers, once per turn of their loop, when the turn's wait (`poll`, a blocking read or
//! write, a channel's `recv`) returned; that `now` is passed to everything the turn does.
//! `grep -rn "Instant::now\|SystemTime::now\|unix_now\|elapsed()" crates/transfer/src`
//! finds these, and only these:
//!
//! * The server's event loop (`server/driver.rs`): its start; per turn, the turn's `now`
//!   and wall-clock time (for authentication and the path database's records) after the
//!   wait, and one read right before the wait for its deadline (the turn's `now` would be
//!   stale by the turn's work, and a deadline would fire late).
//! * The path database's thread (`server/paths.rs`): one read of each clock per request,
//!   when it arrived (a lookup's freshness, the drain deadline at shutdown).
//! * The client's conversation (`client/conversation.rs`): the session's start; per phase
//!   its start (the engine's epoch), per turn the deadline of the wait and the turn's `now`
//!   after it, and the phase's end after its threads were joined (a blocking join: the
//!   probe's wall time); the goodbye's short flush loop, its start and one per turn.
//! * `tcptune advise` (`client/advise.rs`): the command's start and end (its wall time,
//!   around blocking connects and joins); the session's start with the Unix time of its
//!   authentication; per turn the deadline of the blocking read and the turn's `now`
//!   after it; the same two in the measurement's connect loop.
//! * A stream's data thread (`engine/stream.rs`): its start, then one read per turn, when
//!   its read or write returned (a blocking call: the time of the bytes it moved); the
//!   sender's wait for the receiver's close, its start and one per timed-out read. The
//!   threads' CPU time is read at their start and end.
//! * The sampler thread (`engine/sampler.rs`): one read at the top of each turn, after the
//!   wait for a command or the next sample; its CPU time at its start and end.
//! * The client's driver (`client/driver.rs`, a straight sequence of blocking steps, no
//!   loop): the session's start, the start of the rate's decision with the wall-clock time
//!   of its path-database lookup, the wall-clock time of a probe's record when the probe
//!   returned, the main phase's start, and the session's end by both clocks after the
//!   main phase's threads were joined (the round trips, the path database's record and the
//!   report's timestamp: `PathDbUse` and `assemble_at` take these as arguments); the
//!   authentication's Unix time when the control connection is opened.
//! * The copy's data threads (`engine/files.rs`): one read per turn in `Ctx::tick`, when a
//!   blocking call returned (a socket read or write, a file's `pread`, a wait on the shared
//!   queue, the walk of the sources, the plan of an earlier run's files); the copy's state
//!   machines (`tcptune_proto::copy`) get that `now`. `client/copy.rs` reads the command's
//!   start once and the time since it in its progress callback (what the bar shows).

pub use tcptune_proto::advice;
pub mod auth;
pub mod client;
mod engine;
pub mod files;
mod keys;
pub mod pathdb;
mod pattern;
mod phase;
// Not wired to the copy yet (no `cp --encrypt`): the cipher and nonce layout, tested alone.
pub mod probe;
#[cfg_attr(not(test), allow(dead_code))]
mod seal;
pub use tcptune_proto::wire as proto;
pub mod remote;
pub mod report;
pub mod server;
pub use tcptune_proto::session;

pub use engine::{SideResult, StreamSide};
pub use phase::PrepareError;
/// The report's spelling of the core types, under the name the file copy's report uses.
pub(crate) use report::serde as report_serde;
pub use report::{diagnose, human};
