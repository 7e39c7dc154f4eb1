//! `tcptune cp`: copy files and directory trees to or from another host over ssh
//! (`HOST:PATH`) or a `tcptune serve --root DIR` server (`tcptune://HOST/PATH`), every
//! stream tuned.

use crate::exit;
use crate::out;
use crate::signals;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tcptune_core::{Bytes, Rate, TuneMode};
use tcptune_transfer::client::copy::{copy, CopyConfig, CopyProgress, CopyReport, Direction};
use tcptune_transfer::client::{Cancel, ClientConfig, ClientError};
use tcptune_transfer::files::FailKind;

use super::ssh;

/// Options of `tcptune cp`.
///
/// Copies files and directory trees between this host and another, like scp and rsync, and
/// exactly one side is remote. `[USER@]HOST:PATH` goes over ssh, as scp's does: the far end
/// (`tcptune serve --stdio`) is started through your ssh, so nothing runs there but the
/// tcptune binary, PATH is relative to the remote home (`HOST:` alone is the home) or
/// absolute, with the remote user's permissions, and the data streams connect directly,
/// keyed by a one-time key agreed over ssh. `tcptune://HOST[:PORT]/PATH` reaches a running
/// `tcptune serve --root DIR` server instead (PATH beneath its DIR), as rsync separates
/// `host:path` from `rsync://`. Files are cut into 4 MiB blocks striped over parallel
/// streams, each tuned like `send`'s, checked with BLAKE3 and written at their offsets under
/// a temporary name that is renamed into place once every block is verified. Run the same
/// command again after an interruption and only what is missing is sent.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
Examples, over ssh (HOST:PATH, as scp):
  tcptune cp big.iso alice@dtn2:/data/          # into /data/ on dtn2, as alice
  tcptune cp -r dataset dtn2:                    # the tree dataset/ into the remote home
  tcptune cp -r dtn2:results ./results-copy      # pull ~/results to a new local name
  tcptune cp -e 'ssh -p 2222 -i ~/.ssh/dtn' big.iso dtn2:isos/   # ssh options, as rsync -e
  tcptune cp --remote-tcptune '~/bin/tcptune' --port-range 50000-50100 big.iso dtn2:

Examples, against a tcptune server (tcptune://HOST[:PORT]/PATH, PATH beneath its --root):
  tcptune cp big.iso tcptune://server/isos/      # into the directory isos/ of the share
  tcptune cp -r dataset tcptune://server/        # the tree dataset/ into the share's top
  tcptune cp 'tcptune://server/logs/a log.txt' tcptune://server:5999/x /tmp/   # (one server)

HOST:PATH means ssh, as in scp, rsync and bbcp (it used to mean a tcptune server: write
tcptune://HOST/PATH for that now). A local name with a colon before any slash: ./a:b.

What lands where follows cp: SRC copied into an existing directory DST lands at
DST/basename(SRC); otherwise a single SRC becomes DST. Modes (rwx bits) and modification
times are kept; symlinks, devices and FIFOs inside a tree are skipped with a warning; files
need not stay sparse. A target that already has the source's size and modification time is
hashed and left alone when identical. Partial files of an interrupted run are kept (as
.NAME.tcptune-part) and resumed.

Exit status: 0 success, 1 failure, 2 usage (a directory without -r, several sources to one
file), 3 connection (ssh failed: the line says why and what to do), 4 integrity (blocks kept failing their checksums), 6 not found (a
source, or the destination's directory), 7 permission denied (including a read-only server
and paths outside the server's shared directory), 8 no space left on the destination,
130 interrupted (the partial files stay for a resume).")]
pub(crate) struct Opts {
    /// Sources, then the destination: local paths, [USER@]HOST:PATH (ssh) or
    /// tcptune://HOST[:PORT]/PATH (a server).
    #[arg(value_name = "SRC... DST", num_args = 2.., required = true)]
    paths: Vec<String>,
    /// Copy directories and everything in them.
    #[arg(short = 'r', long)]
    recursive: bool,
    /// Port of a tcptune:// server whose URL names none.
    #[arg(short = 'p', long, default_value_t = tcptune_transfer::server::DEFAULT_PORT)]
    port: u16,
    #[command(flatten)]
    ssh: ssh::SshOpts,
    /// Parallel streams to start with (auto opens more when the path needs them; on a path
    /// never seen it measures with enough streams to hold a fast path's BDP, then a copy
    /// long enough to pay for it closes those its plan does not need).
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
    /// File holding the shared secret of a tcptune:// server started with --secret-file.
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
    /// Encrypt every block on the data streams (ChaCha20-Poly1305 under the session's
    /// one-time key). Off by default: every block is already authenticated (keyed BLAKE3),
    /// integrity without secrecy, as GridFTP's data channel and bbcp default to. File
    /// names, sizes and times (the request and the manifest) still cross unencrypted, over
    /// ssh too (only the key goes through ssh; the streams connect directly). A server
    /// whose tcptune predates --encrypt fails the copy rather than copy in clear.
    #[arg(long)]
    encrypt: bool,
    /// The database of per-path measurements (as for send): a SQLite file or a postgres://
    /// URL. Default: $TCPTUNE_PATH_DB, else ~/.cache/tcptune/paths.sqlite.
    #[arg(long, value_name = "FILE|URL", conflicts_with = "no_path_db")]
    path_db: Option<PathBuf>,
    /// Neither read nor write the path database. Over ssh (HOST:PATH) the far end is
    /// started with it too (serve --stdio --no-path-db): it neither reads nor records the
    /// path in the remote user's database.
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
    Remote { far: Far, path: String },
}

/// Where the remote side is: over ssh (`[USER@]HOST:PATH`, as scp) or a tcptune server
/// (`tcptune://HOST[:PORT]/PATH`, as rsync's `rsync://`).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Far {
    /// `[USER@]HOST` (an IPv6 address in brackets) to reach with ssh.
    Ssh(String),
    /// A server: its host (IPv6 in brackets) and port, if the URL has one.
    Server { host: String, port: Option<u16> },
}

/// The URL scheme of a tcptune server.
const SCHEME: &str = "tcptune://";

/// `tcptune://HOST[:PORT]/PATH`: PATH beneath the server's --root (`tcptune://HOST/` or
/// `tcptune://HOST`: the root itself).
fn url(rest: &str) -> Result<Operand, String> {
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let bad = || format!("'{SCHEME}{rest}': write {SCHEME}HOST[:PORT]/PATH");
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (h, tail) = v6.split_once(']').ok_or_else(bad)?;
            (format!("[{h}]"), tail)
        }
        None => match authority.split_once(':') {
            Some((h, _)) => (h.to_string(), &authority[h.len()..]),
            None => (authority.to_string(), ""),
        },
    };
    let port = match port.strip_prefix(':') {
        Some(p) => Some(p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(bad)?),
        None if port.is_empty() => None,
        None => return Err(bad()),
    };
    if host.is_empty() || host == "[]" {
        return Err(bad());
    }
    Ok(Operand::Remote {
        far: Far::Server { host, port },
        path: path.to_string(),
    })
}

/// `tcptune://...` is a server; else scp's rule: `[USER@]HOST:PATH` when a `:` comes before
/// any `/`, `[USER@][V6]:PATH`; else a local path (write `./a:b` for a local name with a
/// colon).
fn operand(s: &str) -> Result<Operand, String> {
    if let Some(rest) = s.strip_prefix(SCHEME) {
        return url(rest);
    }
    let (user, rest) = match s.split_once('@') {
        Some((u, r)) if !u.is_empty() && !u.contains(['/', ':']) => (Some(u), r),
        _ => (None, s),
    };
    let at = |host: &str| user.map_or(host.to_string(), |u| format!("{u}@{host}"));
    if let Some(v6) = rest.strip_prefix('[') {
        if let Some((host, path)) = v6.split_once("]:") {
            return Ok(Operand::Remote {
                far: Far::Ssh(at(&format!("[{host}]"))),
                path: path.to_string(),
            });
        }
    }
    Ok(match rest.split_once(':') {
        Some((host, path)) if !host.is_empty() && !host.contains('/') => Operand::Remote {
            far: Far::Ssh(at(host)),
            path: path.to_string(),
        },
        _ => Operand::Local(s.to_string()),
    })
}

/// The far side and the direction from the operands.
fn plan(paths: &[String]) -> Result<(Far, Direction), String> {
    let (dst, srcs) = paths
        .split_last()
        .ok_or("name a source and a destination")?;
    let ops = srcs
        .iter()
        .map(|s| operand(s))
        .collect::<Result<Vec<_>, _>>()?;
    match operand(dst)? {
        Operand::Remote { far, path } => {
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
                far,
                Direction::Push {
                    sources,
                    dest: path,
                },
            ))
        }
        Operand::Local(dest) => {
            let mut far_seen: Option<Far> = None;
            let mut sources = Vec::new();
            for o in ops {
                match o {
                    Operand::Remote { far, path } => {
                        if far_seen.as_ref().is_some_and(|f| *f != far) {
                            return Err("all remote sources must be on the same host".into());
                        }
                        far_seen = Some(far);
                        sources.push(path);
                    }
                    Operand::Local(_) => {
                        return Err(
                            "no side is remote ([USER@]HOST:PATH or tcptune://HOST/PATH): for a local copy use cp; mixing local and remote sources is not supported"
                                .into(),
                        )
                    }
                }
            }
            let far =
                far_seen.ok_or("no side is remote ([USER@]HOST:PATH or tcptune://HOST/PATH)")?;
            Ok((
                far,
                Direction::Pull {
                    sources,
                    dest: PathBuf::from(dest),
                },
            ))
        }
    }
}

/// What a user of the old form (`HOST:PATH` for a server) would write now, for the error
/// when ssh fails and a server answers: `tcptune://HOST/PATH`.
fn url_form(user_host: &str, direction: &Direction) -> String {
    let host = user_host.rsplit_once('@').map_or(user_host, |(_, h)| h);
    let path = match direction {
        Direction::Push { dest, .. } => dest.as_str(),
        Direction::Pull { sources, .. } => sources.first().map_or("", String::as_str),
    };
    format!("{SCHEME}{host}/{}", path.trim_start_matches('/'))
}

impl Opts {
    /// The copy's configuration; over ssh, the far end is started here and returned with
    /// it (its guard must live until the copy ends).
    fn config(&self) -> anyhow::Result<(CopyConfig, Option<ssh::Far>)> {
        let (far, direction) =
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
        let secret = match &self.secret_file {
            Some(path) => Some(super::secret::load(
                path,
                "give the file the server was started with",
            )?),
            None => None,
        };
        let (mut c, started) = match &far {
            Far::Server { host, port } => {
                self.ssh.only_over_ssh("a tcptune:// URL")?;
                let mut c = ClientConfig::new(host.clone());
                c.port = port.unwrap_or(self.port);
                c.secret = secret;
                (c, None)
            }
            Far::Ssh(user_host) => {
                if secret.is_some() {
                    return Err(exit::msg(
                        exit::USAGE,
                        "--secret-file is for a tcptune:// server: over ssh ([USER@]HOST:PATH) the session's key is agreed over the ssh channel",
                    ));
                }
                let hint = url_form(user_host, &direction);
                let f = ssh::start(&self.ssh, user_host, Some(&hint), self.no_path_db)?;
                let mut c = ClientConfig::new(f.host.clone());
                c.port = f.port;
                c.secret = Some(f.secret.clone());
                (c, Some(f))
            }
        };
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
        let mut cfg = CopyConfig::new(c, direction);
        cfg.files.recursive = self.recursive;
        cfg.files.resume = !self.no_resume;
        cfg.files.fsync = self.fsync;
        cfg.files.encrypt = self.encrypt;
        Ok((cfg, started))
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
    let (mut cfg, far) = opts.config()?;
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
    // Over ssh, the far end exits with the session: wait for it (or end it) now.
    let far = far.map(ssh::Far::finish);
    match result {
        Ok(r) => {
            let db = r.measurement.as_ref().and_then(|m| m.path_db.as_ref());
            for w in r.warnings.iter().chain(db.map_or(&[][..], |d| &d.warnings)) {
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
                e => match &far {
                    Some(f) => f.explain(e),
                    None => anyhow::Error::new(e),
                },
            };
            Err(exit::fail(code, e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ssh(user_host: &str, path: &str) -> Operand {
        Operand::Remote {
            far: Far::Ssh(user_host.into()),
            path: path.into(),
        }
    }

    fn server(host: &str, port: Option<u16>, path: &str) -> Operand {
        Operand::Remote {
            far: Far::Server {
                host: host.into(),
                port,
            },
            path: path.into(),
        }
    }

    #[test]
    fn host_colon_path_is_ssh_as_in_scp() {
        let op = |s: &str| operand(s).expect(s);
        assert_eq!(op("host:a/b c"), ssh("host", "a/b c"));
        assert_eq!(op("alice@dtn2:/data/"), ssh("alice@dtn2", "/data/"));
        assert_eq!(op("[::1]:x"), ssh("[::1]", "x"));
        assert_eq!(op("bob@[2001:db8::2]:x"), ssh("bob@[2001:db8::2]", "x"));
        assert_eq!(op("h:"), ssh("h", ""));
        assert_eq!(op("./a:b"), Operand::Local("./a:b".into()));
        assert_eq!(op("dir/a:b"), Operand::Local("dir/a:b".into()));
        assert_eq!(op("/abs/x"), Operand::Local("/abs/x".into()));
        assert_eq!(op("a@b"), Operand::Local("a@b".into()));
        assert_eq!(op("./x@y:z"), Operand::Local("./x@y:z".into()));
    }

    #[test]
    fn tcptune_urls_name_a_server_and_a_path_beneath_its_root() {
        let op = |s: &str| operand(s).expect(s);
        assert_eq!(op("tcptune://srv/isos/"), server("srv", None, "isos/"));
        assert_eq!(
            op("tcptune://srv:5999/a b"),
            server("srv", Some(5999), "a b")
        );
        assert_eq!(op("tcptune://srv"), server("srv", None, ""));
        assert_eq!(op("tcptune://srv/"), server("srv", None, ""));
        assert_eq!(op("tcptune://[::1]:7/x"), server("[::1]", Some(7), "x"));
        assert_eq!(op("tcptune://[::1]/x"), server("[::1]", None, "x"));
        for bad in [
            "tcptune://",
            "tcptune:///x",
            "tcptune://h:/x",
            "tcptune://h:0/x",
            "tcptune://h:99999/x",
            "tcptune://h:p/x",
            "tcptune://[::1/x",
            "tcptune://[::1]x/y",
        ] {
            assert!(operand(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_copy_has_exactly_one_remote_side() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert!(matches!(
            plan(&s(&["a", "b", "h:d"])),
            Ok((Far::Ssh(h), Direction::Push { .. })) if h == "h"
        ));
        assert!(matches!(
            plan(&s(&["h:a", "h:b", "."])),
            Ok((_, Direction::Pull { .. }))
        ));
        assert!(matches!(
            plan(&s(&["tcptune://h/a", "."])),
            Ok((Far::Server { .. }, Direction::Pull { .. }))
        ));
        assert!(plan(&s(&["a", "b"])).is_err(), "no side remote");
        assert!(plan(&s(&["h:a", "g:b"])).is_err(), "both remote");
        assert!(plan(&s(&["h:a", "g:b", "."])).is_err(), "two hosts");
        assert!(
            plan(&s(&["h:a", "tcptune://h/b", "."])).is_err(),
            "ssh and a server"
        );
        assert!(plan(&s(&["h:a", "b", "."])).is_err(), "mixed sources");
        assert!(plan(&s(&["a", "tcptune://"])).is_err(), "a bad URL");
    }

    #[test]
    fn the_url_form_replaces_an_old_host_colon_path() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let (_, d) = plan(&s(&["a", "alice@srv:isos/"])).expect("push");
        assert_eq!(url_form("alice@srv", &d), "tcptune://srv/isos/");
        let (_, d) = plan(&s(&["srv:/x", "."])).expect("pull");
        assert_eq!(url_form("srv", &d), "tcptune://srv/x");
    }
}
