//! The file copy's protocol without I/O (see the transfer crate's `files` module for the
//! conversation): the records on the data streams ([`wire`]), what a manifest may cost
//! ([`budget`], [`manifest_in`], [`check`]), the sender's queue ([`queue`]), the receiver's
//! table ([`table`]), the BLAKE3 checksums ([`digest`]), and stream 0's conversation of each
//! side as a state machine ([`sender::Sender`], [`receiver::Receiver`]). The executors that
//! touch the file system (walking, planning, reading and writing blocks) stay in
//! `tcptune-transfer`; they are driven by the actions these machines give.

pub mod budget;
pub mod check;
pub mod digest;
#[cfg(test)]
mod fuzz;
pub mod manifest_in;
#[cfg(test)]
mod pair;
pub mod queue;
pub mod receiver;
pub mod sender;
pub mod table;
pub mod wire;

use crate::files::{FailKind, FileFailure};

/// Rounds of sending before blocks that keep failing their checksums fail the copy.
pub const MAX_ROUNDS: u32 = 4;

/// A failure for a protocol violation of the peer.
pub fn violation(msg: impl std::fmt::Display) -> FileFailure {
    FileFailure::new(
        FailKind::Protocol,
        format!("the peer broke the file protocol: {msg}"),
    )
}
