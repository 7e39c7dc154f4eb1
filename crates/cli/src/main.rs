//! The `tcptune` command: a thin layer over the library crates. Each subcommand is a module
//! in `cmd/` with an options struct and a `run` function.

mod args;
mod cmd;
mod exit;
mod out;
mod signals;

use clap::{CommandFactory, Parser, Subcommand};
use serde::Serialize;
use std::ffi::OsString;
use std::process::ExitCode;

/// `tcptune --version`: the crate version and the git commit it was built from.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("TCPTUNE_GIT_COMMIT"),
    ")"
);

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
    version = VERSION,
    propagate_version = true,
    max_term_width = 100,
    after_help = after_help()
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

fn after_help() -> String {
    format!(
        "{}\n\n{}\n\nEvery --json output is one JSON document on stdout with a schema_version \
         (docs/json.md), also on failure ({{\"error\": ...}}). Errors are one line on stderr: what \
         failed, the likely cause, what to do.",
        args::UNITS_HELP,
        exit::TABLE
    )
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the paper's comparison of tuning techniques on emulated long fat pipes.
    Lab(cmd::lab::Opts),
    /// Send (or receive, with --reverse) data to a tcptune server, tuning every stream.
    Send(cmd::send::Opts),
    /// Serve transfers for `tcptune send` clients.
    Serve(cmd::serve::Opts),
    /// Copy files and directory trees to or from another host over ssh, or a server, every stream tuned.
    Cp(cmd::cp::Opts),
    /// Emulate a WAN path (delay, rate, queue, loss) between two network namespaces.
    Emu(cmd::emu::Opts),
    /// Audit this host's TCP settings (or a path to HOST) and say exactly what to change.
    Doctor(cmd::doctor::Opts),
    /// Live view of this host's TCP connections and what limits each one.
    Watch(cmd::watch::Opts),
    /// List, show, forget, export, import or add (an operator's site) the measurements of the
    /// path database (a SQLite file or a fleet's PostgreSQL database).
    Paths(cmd::paths::Opts),
    /// Ask a tcptune server which buffer sizes and how many streams fill the path to it.
    Advise(cmd::advise::Opts),
    /// Tune the sockets of unmodified programs per destination, from the path database (eBPF).
    Agent(cmd::agent::Opts),
    /// Make a shared secret for `serve --secret-file` and its clients (`secret new`).
    Secret(cmd::secret::Opts),
    /// Raise this host's socket-buffer maxima while it runs (the far end of `lab --remote`'s
    /// raised host configurations; needs root).
    #[command(hide = true)]
    HoldLimits(cmd::hold_limits::Opts),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(hide = true)]
    Completions(cmd::docs::CompletionsOpts),
    /// Print the man page (tcptune.1), or write one page per subcommand with --dir.
    #[command(hide = true)]
    Man(cmd::docs::ManOpts),
}

/// What every `--json` command prints on stdout when it fails before printing its own
/// document (see docs/json.md, "Errors").
#[derive(Serialize)]
struct ErrorReport<'a> {
    schema_version: u32,
    /// The subcommand (`doctor`, `emu up`, ...).
    command: String,
    error: ErrorBody<'a>,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    /// The one-line message also printed on stderr.
    message: &'a str,
    /// The process's exit status.
    exit_code: u8,
}

/// Whether the command line asks for JSON (before a `--` that starts a CMD of `emu`).
fn wants_json(raw: &[OsString]) -> bool {
    raw.iter()
        .skip(1)
        .take_while(|a| a.as_os_str() != "--")
        .any(|a| a.as_os_str() == "--json")
}

/// The subcommand words of the command line (`emu up`), for the error document.
fn command_words(raw: &[OsString]) -> String {
    // cp's operands are paths: only the subcommand counts.
    if raw.get(1).is_some_and(|a| a == "cp") {
        return "cp".into();
    }
    raw.iter()
        .skip(1)
        .take_while(|a| a.as_os_str() != "--")
        .filter_map(|a| a.to_str())
        .take_while(|a| !a.starts_with('-'))
        .take(2)
        .filter(|a| {
            matches!(
                *a,
                "lab"
                    | "send"
                    | "serve"
                    | "emu"
                    | "doctor"
                    | "watch"
                    | "paths"
                    | "advise"
                    | "agent"
                    | "run"
                    | "up"
                    | "down"
                    | "exec"
                    | "status"
                    | "report"
                    | "show"
                    | "forget"
                    | "export"
                    | "secret"
                    | "new"
                    | "hold-limits"
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Print the one-line error on stderr and, for `--json`, the error document on stdout
/// (unless the command printed its own).
fn report_error(raw: &[OsString], message: &str, code: u8) -> ExitCode {
    eprintln!("tcptune: error: {message}");
    if wants_json(raw) && !out::json_printed() {
        if command_words(raw) == "send" {
            // iperf3's shape, which iperf3's consumers read: the error at the top level.
            let report = tcptune_transfer::report::FailureReport::new(message.to_string())
                .with_exit(code, false);
            let _ = out::json(&report);
            return ExitCode::from(code);
        }
        let _ = out::json(&ErrorReport {
            schema_version: 1,
            command: command_words(raw),
            error: ErrorBody {
                message,
                exit_code: code,
            },
        });
    }
    ExitCode::from(code)
}

/// clap's error message on one line: its first line without `error: `, and the tip it
/// gives, without the usage and "For more information" lines.
fn clap_one_line(e: &clap::Error, raw: &[OsString]) -> String {
    let rendered = e.render().to_string();
    let mut parts: Vec<String> = Vec::new();
    for line in rendered.lines() {
        let l = line.trim();
        if l.is_empty() || l.starts_with("Usage:") || l.starts_with("For more information") {
            continue;
        }
        parts.push(l.strip_prefix("error: ").unwrap_or(l).to_string());
    }
    let words = command_words(raw);
    let help = if words.is_empty() {
        "tcptune --help".to_string()
    } else {
        format!("tcptune {words} --help")
    };
    format!("{} (see '{help}')", parts.join(" "))
}

fn main() -> ExitCode {
    let raw: Vec<OsString> = std::env::args_os().collect();
    let cli = match Cli::try_parse_from(&raw) {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // Help and version go to stdout; a closed pipe there is not an error.
            let _ = e.print();
            return ExitCode::from(exit::OK);
        }
        Err(e) => return report_error(&raw, &clap_one_line(&e, &raw), exit::USAGE),
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
        Command::Advise(o) => cmd::advise::run(o),
        Command::Agent(o) => cmd::agent::run(o),
        Command::Secret(o) => cmd::secret::run(o),
        Command::HoldLimits(o) => cmd::hold_limits::run(o),
        Command::Completions(o) => cmd::docs::completions(o, Cli::command()),
        Command::Man(o) => cmd::docs::man(o, Cli::command()),
    };
    match result {
        Ok(code) => code,
        Err(e) => report_error(&raw, &exit::one_line(&e), exit::code_of(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    /// The README's command table says what `--help` says, and its unit rules and exit-code
    /// table are the ones `--help` prints.
    #[test]
    fn the_readme_matches_the_help() {
        let readme = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"));
        let cli = Cli::command();
        let mut shown = 0;
        for sub in cli.get_subcommands().filter(|s| !s.is_hide_set()) {
            let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
            let row = readme
                .lines()
                .find(|l| l.starts_with(&format!("| `tcptune {} ", sub.get_name())))
                .unwrap_or_else(|| panic!("README has no row for `tcptune {}`", sub.get_name()));
            assert!(
                row.contains(&about),
                "README row of {}: not '{about}'",
                sub.get_name()
            );
            shown += 1;
        }
        let rows = readme
            .lines()
            .filter(|l| l.starts_with("| `tcptune "))
            .count();
        assert_eq!(rows, shown, "README lists a command --help does not");
        for line in args::UNITS_HELP.lines().chain(exit::TABLE.lines()) {
            assert!(readme.contains(line), "README lacks: {line}");
        }
        assert!(readme.contains("cargo install --locked --path crates/cli"));
    }

    #[test]
    fn json_is_wanted_only_before_a_cmd() {
        let v = |s: &str| s.split(' ').map(OsString::from).collect::<Vec<_>>();
        assert!(wants_json(&v("tcptune doctor --json")));
        assert!(!wants_json(&v("tcptune emu run -- iperf3 --json")));
        assert_eq!(command_words(&v("tcptune emu up wan --json")), "emu up");
        assert_eq!(command_words(&v("tcptune send 10.0.0.1 --json")), "send");
    }
}
