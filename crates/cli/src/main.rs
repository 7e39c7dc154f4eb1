//! The `tcptune` command: a thin layer over the library crates. Each subcommand is a module
//! in `cmd/` with an options struct and a `run` function.

mod cmd;
mod exit;
mod out;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Make bulk TCP transfers fill long fat pipes without hand-tuning socket buffers.
///
/// tcptune sizes socket buffers automatically (seven techniques from the literature plus its
/// own `auto`), moves data with them (`serve`/`send`), emulates long fat pipes in user space
/// (`emu`), reproduces the classic comparison of tuning techniques (`lab`), and tells you
/// what limits your host and connections (`doctor`, `watch`), and keeps what it measured of
/// each path (`paths`).
#[derive(Parser, Debug)]
#[command(
    name = "tcptune",
    version,
    propagate_version = true,
    max_term_width = 100
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the paper's comparison of tuning techniques on emulated long fat pipes.
    Lab(cmd::lab::Opts),
    /// Send (or receive, with --reverse) data to a tcptune server, tuning every stream.
    Send(cmd::send::Opts),
    /// Serve transfers for `tcptune send` clients.
    Serve(cmd::serve::Opts),
    /// Copy files and directory trees to or from a server, every stream tuned.
    Cp(cmd::cp::Opts),
    /// Emulate a WAN path (delay, rate, queue, loss) between two network namespaces.
    Emu(cmd::emu::Opts),
    /// Audit this host's TCP settings (or a path to HOST) and say exactly what to change.
    Doctor(cmd::doctor::Opts),
    /// Live view of this host's TCP connections and what limits each one.
    Watch(cmd::watch::Opts),
    /// List, show, forget or export the measurements of the path database.
    Paths(cmd::paths::Opts),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            };
            // Help and version go to stdout; a closed pipe there is not an error.
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let result = match cli.command {
        Command::Lab(o) => cmd::lab::run(o),
        Command::Send(o) => cmd::send::run(o),
        Command::Serve(o) => cmd::serve::run(o),
        Command::Cp(o) => cmd::cp::run(o),
        Command::Emu(o) => cmd::emu::run(o),
        Command::Doctor(o) => cmd::doctor::run(o),
        Command::Watch(o) => cmd::watch::run(o),
        Command::Paths(o) => cmd::paths::run(o),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            let code = e
                .downcast_ref::<exit::Fail>()
                .map_or(exit::FAILURE, |f| f.code);
            eprintln!("tcptune: error: {e:#}");
            ExitCode::from(code)
        }
    }
}
