//! `tcptune completions SHELL` and `tcptune man`: shell completions and man pages generated
//! from the command-line definition itself, so they never drift from `--help`. Both are
//! hidden from the command list; the README says how to install them.

use crate::{exit, out};
use anyhow::Context;
use std::path::PathBuf;
use std::process::ExitCode;

/// Options of `tcptune completions`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
Examples:
  tcptune completions bash > /etc/bash_completion.d/tcptune
  tcptune completions zsh > \"${fpath[1]}/_tcptune\"
  tcptune completions fish > ~/.config/fish/completions/tcptune.fish")]
pub(crate) struct CompletionsOpts {
    /// The shell.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

/// Options of `tcptune man`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
Examples:
  tcptune man | man -l -
  tcptune man --dir /usr/local/share/man/man1   # tcptune.1, tcptune-send.1, ...")]
pub(crate) struct ManOpts {
    /// Write tcptune.1 and one page per subcommand (tcptune-send.1, ...) into DIR instead of
    /// printing tcptune.1.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// Print the completion script.
pub(crate) fn completions(o: CompletionsOpts, mut cmd: clap::Command) -> anyhow::Result<ExitCode> {
    let mut buf = Vec::new();
    clap_complete::generate(o.shell, &mut cmd, "tcptune", &mut buf);
    out::text(&String::from_utf8_lossy(&buf));
    Ok(ExitCode::SUCCESS)
}

/// Print or write the man pages.
pub(crate) fn man(o: ManOpts, cmd: clap::Command) -> anyhow::Result<ExitCode> {
    match o.dir {
        Some(dir) => {
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("creating {}", dir.display()))
                .map_err(|e| exit::fail(exit::FAILURE, e))?;
            clap_mangen::generate_to(cmd, &dir)
                .with_context(|| format!("writing the man pages into {}", dir.display()))?;
        }
        None => {
            let mut buf = Vec::new();
            clap_mangen::Man::new(cmd)
                .render(&mut buf)
                .context("rendering the man page")?;
            out::text(&String::from_utf8_lossy(&buf));
        }
    }
    Ok(ExitCode::SUCCESS)
}
