//! tcptune over ssh, no daemon: the client starts the far end (`tcptune serve --stdio`)
//! through the user's own `ssh`, as scp, rsync and bbcp do, and the two agree on a port and
//! a one-time key over the ssh channel; the data streams then connect directly.
//!
//! The conversation over the ssh channel is one line from the far end on its stdout:
//!
//! ```text
//! tcptune-stdio 1 addr=10.0.0.2 port=40123 key=<64 hex digits>
//! ```
//!
//! `1` is the version of this line; `addr` is the address the far end listens on (the
//! local address of the ssh connection, from `$SSH_CONNECTION`, or `0.0.0.0`/`::` when it
//! listens on every address: the client then connects to the host it gave ssh); `key` is
//! 32 random bytes that the session uses as its shared secret. The key only ever crosses
//! the ssh channel, never a command line. Lines before it that do not start with
//! `tcptune-stdio ` are skipped (a login script that prints something), within a budget.
//! The far end serves one session, then exits; it also exits when its stdin reaches EOF
//! (the client or ssh died) and when no client connected within [`STDIO_ACCEPT_TIMEOUT`].
//!
//! This module decides (the line, the port range, the command, what an ssh failure means)
//! without I/O; [`launch`] is the thin driver that runs the process.

mod launch;

pub use launch::{launch, RemoteError, RemoteGuard};

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;
use std::time::Duration;

/// The first word of the far end's line.
pub const STDIO_MAGIC: &str = "tcptune-stdio";
/// The version of the far end's line this build writes and reads.
pub const STDIO_VERSION: u32 = 1;
/// Bytes of the key (the session's shared secret).
pub const KEY_BYTES: usize = 32;
/// The longest line the client reads from the far end.
pub const MAX_LINE: usize = 1024;
/// How much other output (a login script's) the client skips before the line.
pub const MAX_NOISE: usize = 64 * 1024;
/// How long the far end waits for its client before it exits.
pub const STDIO_ACCEPT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the client waits for the far end's line: time for ssh to connect and for a
/// password or passphrase typed at ssh's prompt (ssh's own failures end it sooner).
pub const LINE_TIMEOUT: Duration = Duration::from_secs(120);

/// What the far end tells the client.
#[derive(Clone, PartialEq, Eq)]
pub struct Offer {
    /// Where it listens (unspecified: every address).
    pub addr: IpAddr,
    /// Its port.
    pub port: u16,
    /// The one-time key, 64 lowercase hex digits.
    pub key: String,
}

impl fmt::Debug for Offer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The key stays out of logs and panics.
        f.debug_struct("Offer")
            .field("addr", &self.addr)
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl Offer {
    /// The line the far end prints (without the newline).
    pub fn line(&self) -> String {
        format!(
            "{STDIO_MAGIC} {STDIO_VERSION} addr={} port={} key={}",
            self.addr, self.port, self.key
        )
    }

    /// Whether the far end announced a private address (see [`Offer::connect_host`]): only
    /// then is the ssh host worth resolving.
    pub fn private_addr(&self) -> bool {
        is_private(self.addr)
    }

    /// The host the client's data streams connect to: the far end's address, or `ssh_host`
    /// when it listens on every address. `resolved` is what `ssh_host` resolves to on the
    /// client (empty when it does not resolve, e.g. an alias of the ssh config): when the far
    /// end's address is a private one (RFC 1918, shared 100.64/10, IPv6 ULA) that is not
    /// among them, the far end sits behind a NAT (a cloud VM sees its private address in
    /// `$SSH_CONNECTION`) and the streams go where ssh went: the first resolved address of the
    /// same family, else the first. IPv6 in brackets, as the client's configuration takes it.
    pub fn connect_host(&self, ssh_host: &str, resolved: &[IpAddr]) -> String {
        if self.addr.is_unspecified() {
            return ssh_host.to_string();
        }
        let mut addr = self.addr;
        if is_private(addr) && !resolved.is_empty() && !resolved.contains(&addr) {
            let same = resolved.iter().find(|a| a.is_ipv4() == addr.is_ipv4());
            if let Some(a) = same.or(resolved.first()) {
                addr = *a;
            }
        }
        match addr {
            IpAddr::V6(a) => format!("[{a}]"),
            IpAddr::V4(a) => a.to_string(),
        }
    }
}

/// An address that a NAT typically hides: RFC 1918, the shared space 100.64/10, IPv6 ULA.
fn is_private(a: IpAddr) -> bool {
    match a {
        IpAddr::V4(v) => v.is_private() || (v.octets()[0] == 100 && (v.octets()[1] & 0xc0) == 64),
        IpAddr::V6(v) => (v.segments()[0] & 0xfe00) == 0xfc00,
    }
}

/// Why a line is not a usable offer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    /// It starts with the magic word but another version.
    #[error("the far end speaks version {0} of the stdio line, this tcptune version {STDIO_VERSION}: install the same tcptune version on both hosts")]
    Version(String),
    /// A field is missing or malformed.
    #[error("the far end's stdio line is malformed ({0})")]
    Malformed(&'static str),
}

/// A fresh key: [`KEY_BYTES`] random bytes from the kernel, as hex.
pub fn new_key() -> std::io::Result<String> {
    let mut b = [0u8; KEY_BYTES];
    tcptune_sys::os::random_bytes(&mut b)?;
    Ok(hex(&b))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Parse one line of the far end's stdout: `Ok(None)` when it is not ours (other output to
/// skip), an error when it is ours but unusable.
pub fn parse_line(line: &str) -> Result<Option<Offer>, LineError> {
    let line = line.trim_end_matches(['\r', '\n']);
    let Some(rest) = line.strip_prefix(STDIO_MAGIC) else {
        return Ok(None);
    };
    let Some(rest) = rest.strip_prefix(' ') else {
        return Ok(None);
    };
    if line.len() > MAX_LINE {
        return Err(LineError::Malformed("too long"));
    }
    let mut words = rest.split(' ');
    let version = words.next().unwrap_or("");
    if version != STDIO_VERSION.to_string() {
        return Err(LineError::Version(crate::server::escape(version, 20)));
    }
    let (mut addr, mut port, mut key) = (None, None, None);
    for w in words {
        let (k, v) = w
            .split_once('=')
            .ok_or(LineError::Malformed("a word without '='"))?;
        match k {
            "addr" => addr = Some(v.parse().map_err(|_| LineError::Malformed("bad addr"))?),
            "port" => {
                port = Some(
                    v.parse::<u16>()
                        .map_err(|_| LineError::Malformed("bad port"))?,
                )
            }
            "key" => key = Some(v),
            // Later versions of version 1 may add fields: ignore them.
            _ => {}
        }
    }
    let addr = addr.ok_or(LineError::Malformed("no addr"))?;
    let port = port.ok_or(LineError::Malformed("no port"))?;
    if port == 0 {
        return Err(LineError::Malformed("port 0"));
    }
    let key = key.ok_or(LineError::Malformed("no key"))?;
    if key.len() != 2 * KEY_BYTES || !key.bytes().all(|c| c.is_ascii_hexdigit()) {
        return Err(LineError::Malformed("the key is not 64 hex digits"));
    }
    Ok(Some(Offer {
        addr,
        port,
        key: key.to_ascii_lowercase(),
    }))
}

/// The ports the far end may listen on (`--port-range A-B`, both included).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortRange {
    /// The first port tried.
    pub first: u16,
    /// The last port tried.
    pub last: u16,
}

impl PortRange {
    /// The ports in the order the far end tries them.
    pub fn ports(&self) -> impl Iterator<Item = u16> {
        self.first..=self.last
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

impl FromStr for PortRange {
    type Err = String;

    fn from_str(s: &str) -> Result<PortRange, String> {
        let bad = || format!("'{s}': give two ports as FIRST-LAST, e.g. 50000-50100");
        let (a, b) = s.split_once('-').ok_or_else(bad)?;
        let first: u16 = a.trim().parse().map_err(|_| bad())?;
        let last: u16 = b.trim().parse().map_err(|_| bad())?;
        if first == 0 || last < first {
            return Err(bad());
        }
        Ok(PortRange { first, last })
    }
}

/// The address the far end listens on: the local (3rd) field of `$SSH_CONNECTION`
/// (`CLIENT_IP CLIENT_PORT SERVER_IP SERVER_PORT`), the one ssh itself reached; `None`
/// (every address) when the variable is missing or malformed.
pub fn ssh_local_addr(ssh_connection: Option<&str>) -> Option<IpAddr> {
    let field = ssh_connection?.split_whitespace().nth(2)?;
    // A link-local IPv6 address may carry a zone (`fe80::1%eth0`): listen everywhere then.
    field.parse::<IpAddr>().ok().map(|a| a.to_canonical())
}

/// How the far end is started: `RSH... [USER@]HOST REMOTE_TCPTUNE serve --stdio ...`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteSpec {
    /// The remote shell command, split into words (`-e/--rsh`; default `ssh`).
    pub rsh: Vec<String>,
    /// `[USER@]HOST` as ssh takes it (IPv6 without brackets).
    pub target: String,
    /// The host alone (for connecting and messages).
    pub host: String,
    /// The tcptune program on the far host (`--remote-tcptune`; run by the remote shell, so
    /// `~/bin/tcptune` works).
    pub remote_tcptune: String,
    /// `--port-range`, handed to the far end.
    pub port_range: Option<PortRange>,
    /// The client's `--no-path-db`, handed to the far end: it neither reads nor records
    /// the path in the remote user's database.
    pub no_path_db: bool,
}

impl RemoteSpec {
    /// A spec for `[USER@]HOST` (brackets around an IPv6 address are taken off) with
    /// `rsh` (`-e` as the user wrote it; `None`: `ssh`). rsync splits `-e` into words as a
    /// shell would (quotes and backslashes, no variables or globs), and so does this, with
    /// the `shell-words` crate: `-e 'ssh -p 2222 -i "my key"'` gives four words.
    pub fn new(
        user_host: &str,
        rsh: Option<&str>,
        remote_tcptune: Option<&str>,
        port_range: Option<PortRange>,
    ) -> Result<RemoteSpec, String> {
        let rsh = split_rsh(rsh.unwrap_or("ssh"))?;
        let (user, host) = match user_host.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, user_host),
        };
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if host.is_empty() || user == Some("") {
            return Err(format!("'{user_host}': name the host as [USER@]HOST"));
        }
        // A host (or user) that starts with '-' would be read by ssh as an option
        // (`-oProxyCommand=...`): refuse it, as scp does.
        if host.starts_with('-') || user.is_some_and(|u| u.starts_with('-')) {
            return Err(format!(
                "'{user_host}': a host or user may not start with '-'"
            ));
        }
        if host.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!("'{user_host}': a host name has no spaces"));
        }
        let target = match user {
            Some(u) => format!("{u}@{host}"),
            None => host.to_string(),
        };
        Ok(RemoteSpec {
            rsh,
            target,
            host: host.to_string(),
            remote_tcptune: remote_tcptune.unwrap_or("tcptune").to_string(),
            port_range,
            no_path_db: false,
        })
    }

    /// The command line, program first.
    pub fn argv(&self) -> Vec<String> {
        let mut v = self.argv_running(&["serve".to_string(), "--stdio".to_string()]);
        if let Some(r) = self.port_range {
            v.push("--port-range".into());
            v.push(r.to_string());
        }
        if self.no_path_db {
            v.push("--no-path-db".into());
        }
        v
    }

    /// The command line that runs the far host's tcptune with `args` (`doctor --json`),
    /// program first. The words reach the remote shell joined with spaces (as ssh joins
    /// them): give only words without shell syntax.
    pub fn argv_running(&self, args: &[String]) -> Vec<String> {
        let mut v = self.rsh.clone();
        v.push(self.target.clone());
        v.push(self.remote_tcptune.clone());
        v.extend(args.iter().cloned());
        v
    }
}

/// `-e/--rsh` split into words as rsync does (a shell's quoting, nothing else).
pub fn split_rsh(rsh: &str) -> Result<Vec<String>, String> {
    let words = shell_words::split(rsh).map_err(|e| format!("-e '{rsh}': {e}"))?;
    if words.is_empty() {
        return Err("-e: name the remote shell, e.g. -e 'ssh -p 2222'".into());
    }
    Ok(words)
}

/// What went wrong before the far end's line arrived, from ssh's exit status and the last
/// of its stderr (ssh's and the far end's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SshFailure {
    /// `Host key verification failed.`: unknown or changed host key.
    HostKey,
    /// `Permission denied (publickey,...)`.
    Auth,
    /// The far side has no tcptune there (exit 127, `command not found`).
    NoRemoteBinary,
    /// The far side's tcptune does not know `serve --stdio` (an older version).
    RemoteTooOld,
    /// `Connection refused`.
    Refused,
    /// The name did not resolve.
    NoName,
    /// `No route to host`, `Connection timed out`.
    Unreachable,
    /// The remote shell program itself could not be started (not installed here).
    NoRsh,
    /// Something else: ssh's (or the far end's) last line of stderr, and the exit status.
    Other {
        /// The last non-empty line of stderr, escaped.
        last_line: String,
        /// The exit status, if the process exited.
        status: Option<i32>,
    },
}

/// Classify a failure from the exit status and stderr.
pub fn classify(status: Option<i32>, stderr: &str) -> SshFailure {
    let has = |s: &str| stderr.contains(s);
    if has("Host key verification failed") || has("REMOTE HOST IDENTIFICATION HAS CHANGED") {
        SshFailure::HostKey
    } else if has("Permission denied (") || has("Too many authentication failures") {
        SshFailure::Auth
    } else if has("unexpected argument '--stdio'") || has("unrecognized subcommand 'serve'") {
        SshFailure::RemoteTooOld
    } else if status == Some(127)
        || has("command not found")
        || (status == Some(126) && has("tcptune"))
    {
        SshFailure::NoRemoteBinary
    } else if has("Connection refused") {
        SshFailure::Refused
    } else if has("Could not resolve hostname")
        || has("Name or service not known")
        || has("nodename nor servname")
    {
        SshFailure::NoName
    } else if has("No route to host")
        || has("Connection timed out")
        || has("Network is unreachable")
    {
        SshFailure::Unreachable
    } else {
        let last = stderr
            .lines()
            .map(str::trim)
            .rfind(|l| !l.is_empty())
            .unwrap_or("");
        SshFailure::Other {
            last_line: crate::server::escape(last, 300),
            status,
        }
    }
}

impl SshFailure {
    /// One line: what failed and the fix, for `spec`.
    pub fn message(&self, spec: &RemoteSpec) -> String {
        let (rsh, t, h) = (&spec.rsh[0], &spec.target, &spec.host);
        match self {
            SshFailure::HostKey => format!(
                "{rsh} {t}: host key verification failed: the host key of {h} is unknown or has changed; check it, then accept it by running `ssh {t}` once (or fix ~/.ssh/known_hosts)"
            ),
            SshFailure::Auth => format!(
                "{rsh} {t}: authentication failed (permission denied): check the user and your key (`ssh {t} true` must work; -e 'ssh -i KEY' names a key)"
            ),
            SshFailure::NoRemoteBinary => format!(
                "{t}: '{}' was not found on the far host: install the tcptune binary there (e.g. copy it to ~/bin/tcptune), or point --remote-tcptune at it",
                spec.remote_tcptune
            ),
            SshFailure::RemoteTooOld => format!(
                "{t}: the tcptune there has no `serve --stdio`: install this tcptune version there, or point --remote-tcptune at a newer one"
            ),
            SshFailure::Refused => format!(
                "{rsh} {t}: connection refused: no ssh server listens on {h} (a port other than 22: -e 'ssh -p PORT')"
            ),
            SshFailure::NoName => format!("{rsh} {t}: the name {h} does not resolve: check the host name"),
            SshFailure::Unreachable => format!(
                "{rsh} {t}: {h} is unreachable (no route, or timed out): check the host and the network"
            ),
            SshFailure::NoRsh => format!(
                "cannot run the remote shell '{rsh}': install openssh-client, or name another with -e"
            ),
            SshFailure::Other { last_line, status } => {
                let st = status.map_or("was killed".to_string(), |s| format!("exited with status {s}"));
                if last_line.is_empty() {
                    format!("{rsh} {t} {st} before the far end was ready (run `{rsh} {t} {} serve --stdio` to see why)", spec.remote_tcptune)
                } else {
                    format!("{rsh} {t} {st} before the far end was ready: {last_line}")
                }
            }
        }
    }

    /// Whether ssh itself failed to reach or log in to the host (so a tcptune server there
    /// may be what the user meant).
    pub fn ssh_failed(&self) -> bool {
        matches!(
            self,
            SshFailure::HostKey
                | SshFailure::Auth
                | SshFailure::Refused
                | SshFailure::Unreachable
                | SshFailure::Other {
                    status: Some(255),
                    ..
                }
        )
    }
}

/// The line for a data port the client could not reach.
pub fn data_port_unreachable(host: &str, port: u16, why: &str) -> String {
    format!(
        "the far end's data port {host}:{port} is unreachable ({why}): a firewall between the hosts probably blocks it; --port-range FIRST-LAST makes the far end pick a port the firewall passes"
    )
}

#[cfg(test)]
mod tests;
