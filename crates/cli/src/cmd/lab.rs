//! `tcptune lab` (being built; see its issue).

use std::process::ExitCode;

/// Options of `tcptune lab`.
#[derive(clap::Args, Debug)]
pub(crate) struct Opts {}

/// Run `tcptune lab`.
pub(crate) fn run(_opts: Opts) -> anyhow::Result<ExitCode> {
    anyhow::bail!("'tcptune lab' is not implemented yet")
}
