//! `tcptune send` (being built; see its issue).

use std::process::ExitCode;

/// Options of `tcptune send`.
#[derive(clap::Args, Debug)]
pub(crate) struct Opts {}

/// Run `tcptune send`.
pub(crate) fn run(_opts: Opts) -> anyhow::Result<ExitCode> {
    anyhow::bail!("'tcptune send' is not implemented yet")
}
