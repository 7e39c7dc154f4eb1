//! `tcptune emu` (being built; see its issue).

use std::process::ExitCode;

/// Options of `tcptune emu`.
#[derive(clap::Args, Debug)]
pub(crate) struct Opts {}

/// Run `tcptune emu`.
pub(crate) fn run(_opts: Opts) -> anyhow::Result<ExitCode> {
    anyhow::bail!("'tcptune emu' is not implemented yet")
}
