//! `tcptune watch` (being built; see its issue).

use std::process::ExitCode;

/// Options of `tcptune watch`.
#[derive(clap::Args, Debug)]
pub(crate) struct Opts {}

/// Run `tcptune watch`.
pub(crate) fn run(_opts: Opts) -> anyhow::Result<ExitCode> {
    anyhow::bail!("'tcptune watch' is not implemented yet")
}
