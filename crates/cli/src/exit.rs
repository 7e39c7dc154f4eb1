//! Exit codes shared by every subcommand, the error type that carries one, and the one-line
//! form of an error.
//!
//! The table ([`TABLE`]) is printed by `tcptune --help`, copied in the README, and checked
//! by `tests/errors_cli.rs` against real runs.

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
/// Interrupted by SIGINT (Ctrl-C) or SIGTERM (128 + 2, as shells report it).
pub(crate) const INTERRUPTED: u8 = 130;

/// The exit codes of every subcommand, for `--help` and the README.
pub(crate) const TABLE: &str = "\
Exit status (every subcommand):
  0    success
  1    failure: doctor: a finding of severity warning or worse stands; lab: a cell has no
       successful run; serve -1: the session failed; paths: nothing recorded for HOST
  2    usage: a bad option or value, conflicting options, an unreadable --secret-file or plan,
       a secret under 128 bits, serve --root writable from other hosts without a secret
  3    connection: refused, unreachable, timed out, name not resolved, rejected by the server
       or no slot within --wait (send, cp, advise, doctor HOST); ssh failed (HOST:PATH, --ssh)
  4    integrity: a byte mismatch or a short transfer (send)
  5    environment: not root where root is needed (doctor --apply, agent, hold-limits; emu and
       lab when user namespaces are not allowed either), no /dev/net/tun, a name or port
       already taken (emu up, serve)
  6    not found: a source of cp, or the directory of its destination
  7    permission denied: cp locally, at a read-only server, or a path outside the server's
       shared directory
  8    no space left on cp's destination (the partial files stay for a resume)
  130  interrupted by Ctrl-C or SIGTERM (send prints what moved until then;
       cp keeps its partial files for a resume)
  emu run, emu exec and agent exec exit with CMD's status (128+N if signal N ended it).";

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
        f.write_str(&one_line(&self.error))
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

/// Attach an exit code to a message.
pub(crate) fn msg(code: u8, text: impl Into<String>) -> anyhow::Error {
    fail(code, anyhow::anyhow!(text.into()))
}

/// The exit code an error carries (1 unless it is a [`Fail`]).
pub(crate) fn code_of(e: &anyhow::Error) -> u8 {
    e.downcast_ref::<Fail>().map_or(FAILURE, |f| f.code)
}

/// An error and its causes on one line, `what: why`, leaving out a cause whose text the
/// line already holds (many errors repeat their source in their own message).
pub(crate) fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        let text = text.trim();
        if text.is_empty() || line.contains(text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(text);
    }
    line.replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_already_in_the_message_is_said_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory");
        let e = anyhow::Error::new(io).context("reading secret file /x: No such file or directory");
        assert_eq!(
            one_line(&e),
            "reading secret file /x: No such file or directory"
        );
        let wrapped = fail(USAGE, e);
        assert_eq!(
            one_line(&wrapped),
            "reading secret file /x: No such file or directory"
        );
        assert_eq!(code_of(&wrapped), USAGE);
    }
}
