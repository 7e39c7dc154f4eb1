//! The transfer's sessions as state machines (quinn-proto's `Connection` is the model):
//! messages, data connections, engine events and `now` in; messages, engine commands and
//! deadlines out. No sockets, no threads, no clock: the drivers in the transfer crate's
//! `server` and `client` modules do the I/O, and every rule is unit-tested here.
//!
//! * [`endpoint`]: the server's control plane (connections, handshakes, admission per
//!   address, routing data connections, timeouts, log decisions).
//! * [`server`]: one admitted session at the server (phases, streams, stop, idle, lifetime).
//! * [`client`]: the client's session (handshake, phases, stream plan, stop and cap, stall
//!   detection).
//! * [`advise`]: the client's side of an advice (`tcptune advise`); the server's is an
//!   advice session of [`server`].
//! * [`fair`]: the fair shares of the path between the bulk sessions of one server.
//! * [`guard`]: the small defences (replay cache, auth backoff, log limiter, rate limits,
//!   escaping).

pub mod advise;
pub mod client;
pub mod endpoint;
pub mod fair;
pub mod guard;
pub mod server;

#[cfg(test)]
pub(crate) mod fuzz;

/// A connection, as the driver numbers it.
pub type ConnId = u64;

/// A client's answer to a server's challenge `nonce` (hex) for `token`: none when the
/// client has no secret, was challenged already (a second challenge is a violation) or the
/// nonce is not 32 bytes of hex. Shared by the transfer and the advice sessions.
pub(crate) fn challenge_answer(
    auth: &Option<(crate::auth::Secret, [u8; 32], u64)>,
    challenged: bool,
    nonce: &str,
    token: &[u8; 16],
) -> Option<[u8; 32]> {
    match (auth, crate::wire::from_hex::<32>(nonce)) {
        _ if challenged => None,
        (Some((secret, _, _)), Some(n)) => Some(secret.answer(&n, token)),
        _ => None,
    }
}
/// A session, as the endpoint numbers it.
pub type SessionId = u64;

/// What the transfer's engine tells a session (at either end) about its data streams.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Stream `index`'s data thread finished.
    StreamDone(u32),
    /// Stream `index`'s sender wrote its last byte and closed its side; its thread now waits
    /// for the receiver to close (every byte delivered) before it finishes.
    StreamWritten(u32),
    /// Received data did not verify.
    Integrity(String),
    /// A tuner asks for more streams.
    MoreStreams(tcptune_core::StreamRequest),
    /// A copy failed at this end (a missing source, a full disk, a peer that broke the
    /// file protocol): the session ends, saying why.
    FileFailed(crate::files::FileFailure),
}
