//! `tcptune serve --stdio`: the far end of `tcptune cp HOST:PATH`, `send --ssh` and
//! `advise --ssh`, started by the client through ssh (see `tcptune_transfer::remote`).
//!
//! It makes a one-time key, listens on the local address of the ssh connection (port 0 or
//! the first free one of `--port-range`), prints one line on stdout for the client and
//! serves exactly one session with the key as its shared secret. Paths resolve as scp's
//! do: relative to the user's home, absolute as they are, with the user's permissions. It
//! exits when the session ends, when stdin reaches EOF (the client or ssh died), and when no
//! client came within 30 s. It says nothing on stderr unless something fails there.

use super::Opts;
use crate::exit;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tcptune_transfer::auth::Secret;
use tcptune_transfer::remote::{self, Offer, PortRange, STDIO_ACCEPT_TIMEOUT};
use tcptune_transfer::server::{self, FileShare, ServerConfig, ServerEvent, Shutdown};

/// The server's configuration for the one session: the limits of `opts`, the key as the
/// secret, the home directory shared unconfined.
fn config(opts: &Opts, key: &str, home: PathBuf) -> anyhow::Result<ServerConfig> {
    let mut cfg = super::bounds(opts)?;
    cfg.one_off = true;
    cfg.secret =
        Some(Secret::from_bytes(key.as_bytes()).ok_or_else(|| anyhow::anyhow!("an empty key"))?);
    let mut share = super::share_bounds(opts, FileShare::new(home));
    share.confined = false;
    cfg.files = Some(share);
    cfg.path_db = if opts.no_path_db {
        None
    } else {
        opts.path_db
            .clone()
            .or_else(tcptune_transfer::pathdb::default_location)
    };
    Ok(cfg)
}

/// The user's home (`$HOME`), where relative paths start; else the working directory
/// (where sshd starts a command: the home too).
fn home() -> anyhow::Result<PathBuf> {
    match std::env::var_os("HOME") {
        Some(h) if !h.is_empty() && PathBuf::from(&h).is_dir() => Ok(PathBuf::from(h)),
        _ => std::env::current_dir()
            .map_err(|e| anyhow::anyhow!("no $HOME and no working directory: {e}")),
    }
}

/// Listen on `addr` (`None`: every address, IPv6 and IPv4) at the first free port of
/// `range` (`None`: any free port).
fn bind(addr: Option<IpAddr>, range: Option<PortRange>) -> anyhow::Result<TcpListener> {
    let ports: Vec<u16> = range.map_or(vec![0], |r| r.ports().collect());
    let mut last = None;
    for port in ports {
        let r = match addr {
            Some(ip) => TcpListener::bind(SocketAddr::new(ip, port)),
            None => match tcptune_sys::net::listen_any_v6(port, false, 64).map_err(|e| e.source) {
                Err(e) if e.raw_os_error() == Some(libc::EAFNOSUPPORT) => {
                    TcpListener::bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port))
                }
                r => r,
            },
        };
        match r {
            Ok(l) => return Ok(l),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => last = Some(e),
            Err(e) => return Err(anyhow::anyhow!("listening on port {port}: {e}")),
        }
    }
    Err(anyhow::anyhow!(
        "every port of --port-range {} is in use ({}): give a wider range",
        range.map_or_else(|| "0".to_string(), |r| r.to_string()),
        last.map_or_else(String::new, |e| e.to_string())
    ))
}

/// Fires `shutdown` when stdin reaches EOF (the client or ssh is gone); sets `gone`.
fn watch_stdin(shutdown: Shutdown, gone: Arc<AtomicBool>) {
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = [0u8; 512];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        gone.store(true, Ordering::Release);
        shutdown.trigger();
    });
}

/// Fires `shutdown` when no session started within [`STDIO_ACCEPT_TIMEOUT`]; sets `late`.
fn watch_accept(shutdown: Shutdown, started: Arc<AtomicBool>, late: Arc<AtomicBool>) {
    std::thread::spawn(move || {
        let start = Instant::now();
        while start.elapsed() < STDIO_ACCEPT_TIMEOUT {
            if started.load(Ordering::Acquire) || shutdown.is_triggered() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if !started.load(Ordering::Acquire) {
            late.store(true, Ordering::Release);
            shutdown.trigger();
        }
    });
}

/// Run `tcptune serve --stdio`.
pub(crate) fn run(opts: &Opts) -> anyhow::Result<ExitCode> {
    let key = remote::new_key().map_err(|e| anyhow::anyhow!("getrandom for the key: {e}"))?;
    let home = home()?;
    let mut cfg = config(opts, &key, home)?;
    let ssh = std::env::var("SSH_CONNECTION").ok();
    let listener = bind(remote::ssh_local_addr(ssh.as_deref()), opts.port_range)
        .map_err(|e| exit::fail(exit::ENVIRONMENT, e))?;
    let local = listener.local_addr()?;
    let started = Arc::new(AtomicBool::new(false));
    let seen = started.clone();
    cfg.log = Some(Arc::new(move |ev: &ServerEvent| {
        if matches!(
            ev,
            ServerEvent::SessionStarted { .. }
                | ServerEvent::SessionEnded { .. }
                | ServerEvent::Advice { .. }
        ) {
            seen.store(true, Ordering::Release);
        }
    }));
    let offer = Offer {
        addr: local.ip().to_canonical(),
        port: local.port(),
        key,
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", offer.line())
        .and_then(|_| out.flush())
        .map_err(|e| anyhow::anyhow!("writing the line for the client: {e}"))?;
    drop(out);
    let shutdown = Shutdown::new();
    let (gone, late) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    watch_stdin(shutdown.clone(), gone.clone());
    watch_accept(shutdown.clone(), started, late.clone());
    let stats = server::run(listener, cfg, shutdown).map_err(|e| exit::fail(exit::FAILURE, e))?;
    if stats.sessions_ok > 0 {
        return Ok(ExitCode::SUCCESS);
    }
    if late.load(Ordering::Acquire) {
        eprintln!(
            "tcptune serve --stdio: no client connected to port {} within {} s: is a firewall blocking it? (--port-range picks a port it passes)",
            local.port(),
            STDIO_ACCEPT_TIMEOUT.as_secs()
        );
    }
    // The client went away (stdin closed) or the session failed: the client has said why.
    let _ = gone;
    Ok(ExitCode::from(exit::FAILURE))
}
