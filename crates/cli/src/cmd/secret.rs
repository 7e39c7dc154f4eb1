//! `tcptune secret new`: make a shared secret; and reading `--secret-file` the same way for
//! every subcommand (too short refused, a file others may read warned about).

use crate::exit;
use crate::out;
use std::path::Path;
use std::process::ExitCode;
use tcptune_transfer::auth::{self, Secret, SecretError, SecretFile};

/// The command that makes a strong secret file, offered wherever a secret is refused.
pub(crate) const MAKE_ONE: &str = "umask 077; tcptune secret new > FILE";

/// Options of `tcptune secret`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
A shared secret authenticates clients to `tcptune serve --secret-file FILE`; the clients
(send, cp, advise) give the same file with --secret-file. Make one on the server and copy it
to the clients over a channel you trust (scp), readable by its owner only:

  umask 077; tcptune secret new > /etc/tcptune.secret
  tcptune serve --root /srv/data --secret-file /etc/tcptune.secret

What --secret-file accepts: at least 128 bits, counted after removing surrounding
whitespace: 32 hex digits if the file holds only hex digits, 22 characters if it holds other
text (base64, a passphrase), else 16 bytes. A shorter secret (a short password) is refused at
both ends. A file that its group or others may read or write is used with a warning.")]
pub(crate) struct Opts {
    #[command(subcommand)]
    command: Sub,
}

#[derive(clap::Subcommand, Debug)]
enum Sub {
    /// Print a new secret on stdout: 256 random bits from the kernel as 64 hex digits and a
    /// newline, which --secret-file accepts as it is.
    New,
}

/// Run `tcptune secret`.
pub(crate) fn run(opts: Opts) -> anyhow::Result<ExitCode> {
    match opts.command {
        Sub::New => {
            let hex = auth::new_secret_hex().map_err(|e| {
                exit::msg(
                    exit::ENVIRONMENT,
                    format!("reading random bytes from the kernel (getrandom): {e}"),
                )
            })?;
            out::line(&hex);
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Read `--secret-file PATH`: a usage error (exit 2) in one line when it cannot be read
/// (`unreadable_fix` says what to do then) or is too short (a strong one is offered), and a
/// one-line warning on stderr when its group or others may read or write it.
pub(crate) fn load(path: &Path, unreadable_fix: &str) -> anyhow::Result<Secret> {
    let secret = Secret::from_file(path).map_err(|e| {
        let fix = match e {
            SecretError::Weak { .. } => {
                format!("make a strong one with `{MAKE_ONE}` and give it to both ends")
            }
            _ => unreadable_fix.to_string(),
        };
        exit::msg(exit::USAGE, format!("--secret-file: {e}: {fix}"))
    })?;
    if let Some(warning) = permissions_warning(path) {
        eprintln!("tcptune: warning: {warning}");
    }
    Ok(secret)
}

/// The warning for a secret file its group or others may use, as ssh gives for a key.
pub(crate) fn permissions_warning(path: &Path) -> Option<String> {
    auth::loose_permissions(path).map(|mode| {
        format!(
            "secret file {} has mode {mode:04o}: its group or others may read or write it (chmod 600 {})",
            path.display(),
            path.display()
        )
    })
}
