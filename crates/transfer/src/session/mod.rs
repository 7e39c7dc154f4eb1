//! The transfer's sessions as state machines (quinn-proto's `Connection` is the model):
//! messages, data connections, engine events and `now` in; messages, engine commands and
//! deadlines out. No sockets, no threads, no clock: the drivers in [`crate::server`] and
//! [`crate::client`] do the I/O, and every rule is unit-tested here.
//!
//! * [`endpoint`]: the server's control plane (connections, handshakes, admission per
//!   address, routing data connections, timeouts, log decisions).
//! * [`server`]: one admitted session at the server (phases, streams, stop, idle, lifetime).
//! * [`client`]: the client's session (handshake, phases, stream plan, stop and cap, stall
//!   detection).
//! * [`advise`]: the client's side of an advice (`tcptune advise`); the server's is an
//!   advice session of [`server`].
//! * [`guard`]: the small defences (replay cache, auth backoff, log limiter, rate limits,
//!   escaping).

pub(crate) mod advise;
pub mod client;
pub(crate) mod endpoint;
pub mod guard;
pub(crate) mod server;

#[cfg(test)]
mod fuzz;

/// A connection, as the driver numbers it.
pub type ConnId = u64;
/// A session, as the endpoint numbers it.
pub type SessionId = u64;
