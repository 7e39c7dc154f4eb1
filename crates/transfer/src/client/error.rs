//! How a client operation fails: [`ClientError`], with small typed enums for what was
//! invalid in the configuration ([`ConfigError`]), how the server broke the protocol
//! ([`ProtocolError`]) and which data stream could not be opened ([`StreamFailed`]), so a
//! caller can match on them.

use crate::proto::ProtoError;
use crate::report::Report;
use crate::session::client::Violation;
use std::net::{IpAddr, SocketAddr};

pub use crate::session::client::StreamFailed;

/// What is wrong with a configuration, found before anything is sent.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// No stream to send on (`-P 0`).
    #[error("at least one stream is needed (-P)")]
    NoStreams,
    /// `advise --max-streams 0`.
    #[error("at least one stream is needed (--max-streams)")]
    NoMaxStreams,
    /// Messages of zero bytes (`-l 0`).
    #[error("the message size must be at least 1 byte (-l)")]
    EmptyMessages,
    /// Neither a message count nor a duration (`-n 0`).
    #[error("at least one message is needed (-n)")]
    NoMessages,
    /// A duration (`-t`, `--max-time`) of zero.
    #[error("durations must be greater than zero")]
    ZeroDuration,
    /// More streams than `--max-streams` allows.
    #[error("{streams} streams requested (-P) but --max-streams is {max_streams}")]
    StreamsOverMax {
        /// Streams asked for (`-P`).
        streams: u32,
        /// `--max-streams`.
        max_streams: u32,
    },
    /// The local address to send from (`--bind`) could not be bound.
    #[error("{source}")]
    Bind {
        /// The address.
        ip: IpAddr,
        /// The failed bind, with its address.
        source: tcptune_sys::net::NetError,
    },
}

/// How the server broke the protocol.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    /// A message that breaks the session's rules (see [`Violation`]).
    #[error("{0}")]
    Violation(Violation),
    /// A message that does not decode.
    #[error("{0}")]
    Undecodable(ProtoError),
    /// The control loop was told a phase ended when none was running.
    #[error("a phase ended twice")]
    PhaseEndedTwice,
    /// The session ended without the answer it was for.
    #[error("no answer")]
    NoAnswer,
}

/// How a transfer failed. [`ClientError::report`] gives what was measured until then.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The configuration is invalid.
    #[error("{0}")]
    Config(ConfigError),
    /// The server's name did not resolve.
    #[error("resolving {target}: {source}")]
    Resolve {
        /// What was resolved.
        target: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// The server could not be reached.
    #[error("{source}{}", connect_hint(source))]
    Connect {
        /// The failed connect, with its address.
        source: tcptune_sys::net::NetError,
    },
    /// Something local failed (a socket option, randomness, the host's limits).
    #[error("{op}: {source}")]
    Local {
        /// What was attempted.
        op: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// The control connection failed.
    #[error("control connection to {addr}: {source}")]
    Control {
        /// The server.
        addr: SocketAddr,
        /// What went wrong.
        source: ProtoError,
    },
    /// The peer does not speak tcptune's protocol.
    #[error("{addr} does not answer like a tcptune server ({detail}); is it `tcptune serve`?")]
    NotTcptune {
        /// The server.
        addr: SocketAddr,
        /// What it answered.
        detail: String,
    },
    /// This client holds a shared secret and the server admitted it without checking it:
    /// nothing was sent (it could be anyone on the path).
    #[error("{addr} admitted this client without checking its shared secret, so it cannot be told from an impersonator on the path: nothing was sent. Start the server with the same --secret-file, or drop --secret-file here to reach a server that checks none")]
    SecretUnchecked {
        /// The server.
        addr: SocketAddr,
    },
    /// The server refused the test.
    #[error("the server refused: {reason}{}", retry_hint(reason, *retry_after_s))]
    Rejected {
        /// Why (the server's words).
        reason: String,
        /// When trying again may succeed.
        retry_after_s: Option<u64>,
    },
    /// The server did not answer in time.
    #[error("{0}")]
    Timeout(String),
    /// The server said something that makes no sense.
    #[error("protocol error: {0}")]
    Protocol(ProtocolError),
    /// A data stream could not be opened.
    #[error("opening a data stream: {0}")]
    Stream(StreamFailed),
    /// A byte mismatch or a short transfer.
    #[error("integrity failure: {reason}")]
    Integrity {
        /// What was wrong.
        reason: String,
        /// What was measured.
        report: Option<Box<Report>>,
    },
    /// The user interrupted before the transfer began (nothing was measured).
    #[error("interrupted before the transfer began")]
    Interrupted,
    /// A copy failed at either end (`tcptune cp`): a missing source, a full disk, a
    /// permission, a path outside the server's root; its kind decides the exit status.
    #[error("{0}")]
    File(crate::files::FileFailure),
    /// The transfer failed otherwise (a stream error, a stall, the server gave up).
    #[error("transfer failed: {reason}")]
    Transfer {
        /// What went wrong.
        reason: String,
        /// What was measured.
        report: Option<Box<Report>>,
    },
}

/// " (retry in N s)" unless the reason says so already.
fn retry_hint(reason: &str, after: Option<u64>) -> String {
    match after {
        Some(s) if !reason.contains("retry") => format!(" (retry in {s} s)"),
        _ => String::new(),
    }
}

/// What a failed connect most likely means, and what to do.
fn connect_hint(e: &tcptune_sys::net::NetError) -> &'static str {
    match e.source.kind() {
        std::io::ErrorKind::ConnectionRefused => {
            " (nothing listens there: is `tcptune serve` running on that host and port?)"
        }
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
            " (no answer: is the host up, and does a firewall let the port through?)"
        }
        _ => "",
    }
}

impl ClientError {
    /// The partial report, when the transfer got far enough to have one.
    pub fn report(&self) -> Option<&Report> {
        match self {
            ClientError::Integrity { report, .. } | ClientError::Transfer { report, .. } => {
                report.as_deref()
            }
            _ => None,
        }
    }

    /// Whether the server could not be reached or would not run the test (the CLI's exit
    /// status 3).
    pub fn is_connection(&self) -> bool {
        matches!(
            self,
            ClientError::Resolve { .. }
                | ClientError::Connect { .. }
                | ClientError::Control { .. }
                | ClientError::NotTcptune { .. }
                | ClientError::Rejected { .. }
                | ClientError::SecretUnchecked { .. }
                | ClientError::Timeout(_)
                | ClientError::Stream { .. }
        )
    }
}
