//! `tcptune serve` (being built; see its issue).

use std::process::ExitCode;

/// Options of `tcptune serve`.
#[derive(clap::Args, Debug)]
pub(crate) struct Opts {}

/// Run `tcptune serve`.
pub(crate) fn run(_opts: Opts) -> anyhow::Result<ExitCode> {
    anyhow::bail!("'tcptune serve' is not implemented yet")
}
