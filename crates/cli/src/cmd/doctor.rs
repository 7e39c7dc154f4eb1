//! `tcptune doctor` (being built; see its issue).

use std::process::ExitCode;

/// Options of `tcptune doctor`.
#[derive(clap::Args, Debug)]
pub(crate) struct Opts {}

/// Run `tcptune doctor`.
pub(crate) fn run(_opts: Opts) -> anyhow::Result<ExitCode> {
    anyhow::bail!("'tcptune doctor' is not implemented yet")
}
