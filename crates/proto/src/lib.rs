//! tcptune's transfer protocol without I/O (quinn-proto beside quinn; smoltcp): the wire
//! messages, the client's session, the server's endpoint and sessions, the advice session
//! and the authentication proofs. No sockets, no threads, no clock, no randomness: every
//! call that depends on time takes `now`, random bytes (tokens, nonces, challenges) and the
//! wall clock for authentication come in as arguments. The drivers in `tcptune-transfer`
//! do the I/O and read the clock once per turn of their loop.
//!
//! * [`wire`]: framing, the control messages, the data connection's hello.
//! * [`session`]: the state machines. Their calling order is documented on the driving
//!   types: [`session::endpoint::Endpoint`] (the server's control plane),
//!   [`session::client::ClientSession`] (the client's transfer) and
//!   [`session::advise::AdviseClient`] (the client's advice).
//! * [`copy`]: the file copy's records, budgets and bookkeeping, and each side's
//!   conversation as a state machine.
//! * [`auth`]: the shared-secret proof and challenge answer (HMAC-SHA256).
//! * [`advice`]: the pure rules of `tcptune advise`.
//! * [`result`], [`files`], [`events`]: the plain types the messages and log events carry
//!   (a phase's result per end, the file copy's messages, the server's log events).
//! * `pair` (tests only): a client session against a server endpoint in memory under a simulated
//!   clock, for tests.

pub mod advice;
pub mod auth;
pub mod copy;
pub mod events;
pub mod files;
pub mod keys;
#[cfg(test)]
mod pair;
pub mod result;
pub mod session;
pub mod wire;

pub use session::guard::escape;
