//! Exit codes shared by every subcommand, and the error type that carries one.
#![allow(dead_code)] // used by the subcommands as they land
//!
//! | code | meaning |
//! |-----:|---------|
//! | 0 | success |
//! | 1 | failure (for `doctor`: a finding of severity warning or worse stands) |
//! | 2 | usage error (bad option or value) |
//! | 3 | connection failure (unreachable, refused, timed out, handshake rejected) |
//! | 4 | integrity failure (a byte mismatch or a short transfer) |
//! | 5 | environment failure (not root, no `/dev/net/tun`, a name already taken) |
//! | 6 | not found (`cp`: a source, or the destination's directory) |
//! | 7 | permission denied (`cp`: locally, at a read-only server, a path outside its root) |
//! | 8 | no space left on the destination (`cp`) |
//! | 130 | interrupted (Ctrl-C) |

use std::fmt;

/// Success.
pub(crate) const OK: u8 = 0;
/// Generic failure.
pub(crate) const FAILURE: u8 = 1;
/// Usage error.
pub(crate) const USAGE: u8 = 2;
/// Connection failure.
pub(crate) const CONNECT: u8 = 3;
/// Integrity failure.
pub(crate) const INTEGRITY: u8 = 4;
/// Environment failure (privileges, missing devices).
pub(crate) const ENVIRONMENT: u8 = 5;
/// Not found (`cp`: a source or the destination's directory).
pub(crate) const NOT_FOUND: u8 = 6;
/// Permission denied (`cp`: locally, a read-only server, a path outside its root).
pub(crate) const PERMISSION: u8 = 7;
/// No space left on the destination (`cp`).
pub(crate) const NO_SPACE: u8 = 8;
/// Interrupted by Ctrl-C or SIGTERM (128 + 2, as shells report it).
pub(crate) const INTERRUPTED: u8 = 130;

/// An error that decides the exit code. Wrap an error in it with [`fail`]; `main` prints
/// the error chain and exits with `code`. Errors that are not a `Fail` exit with 1.
#[derive(Debug)]
pub(crate) struct Fail {
    /// Exit code.
    pub(crate) code: u8,
    /// What went wrong.
    pub(crate) error: anyhow::Error,
}

impl fmt::Display for Fail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#}", self.error)
    }
}

impl std::error::Error for Fail {}

/// Attach an exit code to an error.
pub(crate) fn fail(code: u8, error: impl Into<anyhow::Error>) -> anyhow::Error {
    anyhow::Error::new(Fail {
        code,
        error: error.into(),
    })
}
