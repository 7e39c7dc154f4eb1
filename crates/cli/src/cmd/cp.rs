//! `tcptune cp`: copy files and directory trees to or from a `tcptune serve --root DIR`
//! server, every stream tuned.

use crate::exit;
use crate::out;
use crate::signals;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tcptune_core::{Bytes, Rate, TuneMode};
use tcptune_transfer::auth::{Secret, SecretFile};
use tcptune_transfer::client::copy::{copy, CopyConfig, CopyProgress, CopyReport, Direction};
use tcptune_transfer::client::{Cancel, ClientConfig, ClientError};
use tcptune_transfer::files::FailKind;

/// Options of `tcptune cp`.
///
/// Copies files and directory trees between this host and a `tcptune serve --root DIR`
/// server, like cp and scp: a remote side is HOST:PATH (PATH under the server's shared
/// directory; [IPV6]:PATH for an IPv6 address), and exactly one side is remote. Files are
/// cut into 4 MiB blocks striped over parallel streams, each tuned like `send`'s, checked
/// with BLAKE3 and written at their offsets under a temporary name that is renamed into
/// place once every block is verified. Run the same command again after an interruption
/// and only what is missing is sent.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
Examples:
  tcptune cp big.iso server:isos/              # into the directory isos/ of the share
  tcptune cp -r dataset server:                 # the tree dataset/ into the share's top
  tcptune cp -r server:results ./results-copy   # pull a tree to a new local name
  tcptune cp 'server:logs/a log.txt' 'server:x' /tmp/   # several sources into a directory

What lands where follows cp: SRC copied into an existing directory DST lands at
DST/basename(SRC); otherwise a single SRC becomes DST. Modes (rwx bits) and modification
times are kept; symlinks, devices and FIFOs inside a tree are skipped with a warning; files
need not stay sparse. A target that already has the source's size and modification time is
hashed and left alone when identical. Partial files of an interrupted run are kept (as
.NAME.tcptune-part) and resumed.

Exit status: 0 success, 1 failure, 2 usage (a directory without -r, several sources to one
file), 3 connection, 4 integrity (blocks kept failing their checksums), 6 not found (a
source, or the destination's directory), 7 permission denied (including a read-only server
and paths outside the server's shared directory), 8 no space left on the destination,
130 interrupted (the partial files stay for a resume).")]
pub(crate) struct Opts {
    /// Sources, then the destination: local paths or HOST:PATH.
    #[arg(value_name = "SRC... DST", num_args = 2.., required = true)]
    paths: Vec<String>,
    /// Copy directories and everything in them.
    #[arg(short = 'r', long)]
    recursive: bool,
    /// Server port.
    #[arg(short = 'p', long, default_value_t = tcptune_transfer::server::DEFAULT_PORT)]
    port: u16,
    /// Parallel streams to start with (auto opens more when the path needs them).
    #[arg(
        short = 'P',
        long = "parallel",
        value_name = "STREAMS",
        default_value_t = 1
    )]
    streams: u32,
    /// Most streams to open.
    #[arg(long, value_name = "N", default_value_t = 64)]
    max_streams: u32,
    /// Tuning technique for both ends: none, fixed:SIZE, kernel, manual[:RATE], psc, drs,
    /// probe, auto.
    #[arg(long, value_name = "MODE", default_value = "auto")]
    tune: TuneMode,
    /// File holding the shared secret of a server started with --secret-file.
    #[arg(long, value_name = "FILE")]
    secret_file: Option<PathBuf>,
    /// Print the report as JSON (files, bytes, transferred_bytes, seconds,
    /// bits_per_second, every file's BLAKE3, per-stream tuning detail).
    #[arg(long)]
    json: bool,
    /// Send everything again: ignore partial files and identical targets.
    #[arg(long)]
    no_resume: bool,
    /// Flush every file to its device before renaming it into place (survives a power
    /// loss; slower on disks).
    #[arg(long)]
    fsync: bool,
    /// The database of per-path measurements (as for send). Default: $TCPTUNE_PATH_DB,
    /// else ~/.cache/tcptune/paths.sqlite.
    #[arg(long, value_name = "FILE", conflicts_with = "no_path_db")]
    path_db: Option<PathBuf>,
    /// Neither read nor write the path database.
    #[arg(long)]
    no_path_db: bool,
    /// Congestion control for the data connections of both ends.
    #[arg(short = 'C', long, value_name = "NAME")]
    congestion: Option<String>,
    /// Give up connecting after this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    connect_timeout: u64,
    /// When the server has no session slot free, wait this long in its queue (its place is
    /// printed on stderr as it changes), then fail (seconds; 0: do not wait).
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    wait: u64,
    /// No progress bar.
    #[arg(long)]
    no_progress: bool,
    /// Testing aid: flip one byte of this block (counted from 0) so that it is sent again.
    #[arg(long, value_name = "BLOCK", hide = true)]
    inject_corruption: Option<u64>,
}

/// One side of the copy.
#[derive(Debug, PartialEq, Eq)]
enum Operand {
    Local(String),
    Remote { host: String, path: String },
}

/// scp's rule: `HOST:PATH` when a `:` comes before any `/`; `[V6]:PATH`; else a local path
/// (write `./a:b` for a local name with a colon).
fn operand(s: &str) -> Operand {
    if let Some(rest) = s.strip_prefix('[') {
        if let Some((host, path)) = rest.split_once("]:") {
            return Operand::Remote {
                host: format!("[{host}]"),
                path: path.to_string(),
            };
        }
    }
    match s.split_once(':') {
        Some((host, path)) if !host.is_empty() && !host.contains('/') => Operand::Remote {
            host: host.to_string(),
            path: path.to_string(),
        },
        _ => Operand::Local(s.to_string()),
    }
}

/// The server and the direction from the operands.
fn plan(paths: &[String]) -> Result<(String, Direction), String> {
    let (dst, srcs) = paths
        .split_last()
        .ok_or("name a source and a destination")?;
    let ops: Vec<Operand> = srcs.iter().map(|s| operand(s)).collect();
    match operand(dst) {
        Operand::Remote { host, path } => {
            let mut sources = Vec::new();
            for o in ops {
                match o {
                    Operand::Local(p) => sources.push(PathBuf::from(p)),
                    Operand::Remote { .. } => {
                        return Err(
                            "both sides are remote: one side of a copy must be this host".into(),
                        )
                    }
                }
            }
            Ok((
                host,
                Direction::Push {
                    sources,
                    dest: path,
                },
            ))
        }
        Operand::Local(dest) => {
            let mut host_seen: Option<String> = None;
            let mut sources = Vec::new();
            for o in ops {
                match o {
                    Operand::Remote { host, path } => {
                        if host_seen.as_ref().is_some_and(|h| *h != host) {
                            return Err("all remote sources must be on the same server".into());
                        }
                        host_seen = Some(host);
                        sources.push(path);
                    }
                    Operand::Local(_) => {
                        return Err(
                            "no side is remote (HOST:PATH): for a local copy use cp; mixing local and remote sources is not supported"
                                .into(),
                        )
                    }
                }
            }
            let host = host_seen.ok_or("no side is remote (HOST:PATH)")?;
            Ok((
                host,
                Direction::Pull {
                    sources,
                    dest: PathBuf::from(dest),
                },
            ))
        }
    }
}

impl Opts {
    fn config(&self) -> anyhow::Result<CopyConfig> {
        let (host, direction) =
            plan(&self.paths).map_err(|m| exit::fail(exit::USAGE, anyhow::anyhow!(m)))?;
        if self.streams == 0 || self.max_streams < self.streams {
            return Err(exit::fail(
                exit::USAGE,
                anyhow::anyhow!(
                    "-P must be between 1 and --max-streams ({})",
                    self.max_streams
                ),
            ));
        }
        let mut c = ClientConfig::new(host);
        c.port = self.port;
        c.tune = self.tune.clone();
        c.streams = self.streams;
        c.max_streams = self.max_streams;
        c.congestion = self.congestion.clone();
        c.connect_timeout = Duration::from_secs(self.connect_timeout.max(1));
        c.wait = Duration::from_secs(self.wait);
        c.on_queued = Some(crate::out::queued_notice());
        c.corrupt_message = self.inject_corruption;
        c.path_db = if self.no_path_db {
            None
        } else {
            self.path_db
                .clone()
                .or_else(tcptune_transfer::pathdb::default_location)
        };
        if let Some(path) = &self.secret_file {
            let secret = Secret::from_file(path).map_err(|e| {
                exit::msg(
                    exit::USAGE,
                    format!("--secret-file: {e}: give the file the server was started with"),
                )
            })?;
            c.secret = Some(secret);
        }
        let mut cfg = CopyConfig::new(c, direction);
        cfg.files.recursive = self.recursive;
        cfg.files.resume = !self.no_resume;
        cfg.files.fsync = self.fsync;
        Ok(cfg)
    }
}

/// The exit status of a failed copy.
fn code(e: &ClientError) -> u8 {
    match e {
        ClientError::File(f) => match f.kind {
            FailKind::NotFound => exit::NOT_FOUND,
            FailKind::Permission | FailKind::Refused => exit::PERMISSION,
            FailKind::NoSpace => exit::NO_SPACE,
            FailKind::Usage => exit::USAGE,
            FailKind::Integrity => exit::INTEGRITY,
            FailKind::Protocol | FailKind::Io => exit::FAILURE,
        },
        ClientError::Config(_) => exit::USAGE,
        ClientError::Integrity { .. } => exit::INTEGRITY,
        ClientError::Interrupted => exit::INTERRUPTED,
        e if e.is_connection() => exit::CONNECT,
        _ => exit::FAILURE,
    }
}

/// The progress bar on stderr (indicatif: the Rust ecosystem's progress bars, drawn only on
/// a terminal, at a bounded rate).
struct Bar {
    bar: ProgressBar,
    sized: bool,
}

impl Bar {
    fn new() -> Bar {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(5));
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg} {elapsed}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.set_message("preparing");
        bar.enable_steady_tick(Duration::from_millis(200));
        Bar { bar, sized: false }
    }

    fn update(&mut self, p: &CopyProgress) {
        if p.preparing {
            return;
        }
        if !self.sized {
            self.sized = true;
            self.bar.set_length(p.total_bytes.max(1));
            self.bar.set_style(
                ProgressStyle::with_template(
                    "{msg} [{bar:28}] {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
        }
        self.bar.set_position(p.bytes.min(p.total_bytes.max(1)));
        self.bar.set_message(format!(
            "{}/{} files, {} stream(s)",
            p.files_done, p.files_total, p.streams
        ));
    }

    fn done(&self) {
        self.bar.finish_and_clear();
    }
}

/// The report for people.
fn summary(r: &CopyReport) -> String {
    let mut s = format!(
        "copied {} file(s) and {} director{} ({}) in {:.2} s: {} carried at {}",
        r.files,
        r.dirs,
        if r.dirs == 1 { "y" } else { "ies" },
        Bytes(r.bytes),
        r.seconds,
        Bytes(r.transferred_bytes),
        Rate(r.bits_per_second as u64)
    );
    if r.present_bytes > 0 {
        s += &format!(", {} already there (verified)", Bytes(r.present_bytes));
    }
    s += &format!(
        "\n{} stream(s), tune {}{}",
        r.streams_used,
        r.tune,
        r.streams_reason
            .as_ref()
            .map_or(String::new(), |why| format!(": {why}"))
    );
    if let Some(m) = &r.measurement {
        s += &format!("; path rate from {}", m.source);
    }
    if r.resent_blocks > 0 {
        s += &format!(
            "\n{} block(s) failed their checksum and were sent again",
            r.resent_blocks
        );
    }
    if r.entries.len() <= 10 {
        for e in &r.entries {
            s += &format!(
                "\nblake3 {}  {}",
                e.blake3.as_deref().unwrap_or("-"),
                e.path
            );
        }
    } else if let Some(d) = &r.tree_digest {
        s += &format!(
            "\ndigest of all {} files' BLAKE3 digests: {d}",
            r.entries.len()
        );
    }
    s
}

/// Run `tcptune cp`.
pub(crate) fn run(opts: Opts) -> anyhow::Result<ExitCode> {
    let mut cfg = opts.config()?;
    let cancel = Cancel::new();
    cfg.client.cancel = Some(cancel.clone());
    // Ctrl-C (or SIGTERM) ends the copy at both ends and keeps the partial files; a second
    // one ends the process at once.
    signals::on_stop(move || cancel.trigger())?;
    let show = !opts.no_progress && std::io::stderr().is_terminal();
    let mut bar = show.then(Bar::new);
    let mut cb = |p: &CopyProgress| {
        if let Some(b) = bar.as_mut() {
            b.update(p);
        }
    };
    let result = copy(&cfg, Some(&mut cb));
    if let Some(b) = &bar {
        b.done();
    }
    match result {
        Ok(r) => {
            for w in &r.warnings {
                eprintln!("tcptune: warning: {w}");
            }
            if opts.json {
                out::json(&r)?;
            } else {
                out::line(&summary(&r));
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            // One line on stderr, and for --json the error document (see main).
            let code = code(&e);
            let e = match e {
                ClientError::Interrupted => anyhow::anyhow!(
                    "interrupted by {}: the partial files stay for a resume (run the same command again)",
                    signals::fired().unwrap_or_else(|| "a stop signal".into())
                ),
                e => anyhow::Error::new(e),
            };
            Err(exit::fail(code, e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operands_follow_scp() {
        assert_eq!(
            operand("host:a/b c"),
            Operand::Remote {
                host: "host".into(),
                path: "a/b c".into()
            }
        );
        assert_eq!(
            operand("[::1]:x"),
            Operand::Remote {
                host: "[::1]".into(),
                path: "x".into()
            }
        );
        assert_eq!(operand("./a:b"), Operand::Local("./a:b".into()));
        assert_eq!(operand("/abs/x"), Operand::Local("/abs/x".into()));
        assert_eq!(
            operand("h:"),
            Operand::Remote {
                host: "h".into(),
                path: String::new()
            }
        );
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert!(matches!(
            plan(&s(&["a", "b", "h:d"])),
            Ok((h, Direction::Push { .. })) if h == "h"
        ));
        assert!(matches!(
            plan(&s(&["h:a", "h:b", "."])),
            Ok((_, Direction::Pull { .. }))
        ));
        assert!(plan(&s(&["a", "b"])).is_err(), "no side remote");
        assert!(plan(&s(&["h:a", "g:b"])).is_err(), "both remote");
        assert!(plan(&s(&["h:a", "g:b", "."])).is_err(), "two servers");
        assert!(plan(&s(&["h:a", "b", "."])).is_err(), "mixed sources");
    }
}
