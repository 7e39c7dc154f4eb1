//! `serve`'s security posture: the refusal of an open writable share, and what every start
//! says about who may do what (one text line; with `--json` a `start` record). Pure: the
//! facts go in, a decision or a line comes out.

use serde::Serialize;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use tcptune_transfer::server::ServerConfig;

/// Whether a server on `ip` can be reached from this host only (127.0.0.0/8, ::1, and
/// ::ffff:127.x.y.z); an unspecified address (`[::]`, `0.0.0.0`) is every address.
pub(crate) fn loopback_only(ip: IpAddr) -> bool {
    ip.to_canonical().is_loopback()
}

/// Why `serve` must not start: a writable share, no secret, reachable from other hosts,
/// and not told `--allow-anonymous-writes`. One line naming the ways out.
pub(crate) fn refusal(
    listen: SocketAddr,
    root: Option<&Path>,
    read_only: bool,
    secret: bool,
    allow_anonymous_writes: bool,
) -> Option<String> {
    let root = root.filter(|_| !read_only)?;
    if secret || allow_anonymous_writes || loopback_only(listen.ip()) {
        return None;
    }
    Some(format!(
        "--root {} is writable and there is no --secret-file, so anyone who reaches {listen} could overwrite its files: give --secret-file FILE (made with `{}`; clients give the same file), or listen on loopback only (-B 127.0.0.1), or add --read-only; --allow-anonymous-writes serves it open to everyone",
        root.display(),
        super::super::secret::MAKE_ONE,
    ))
}

/// Who may reach the server, whether it checks them, and what it shares.
pub(crate) struct Posture<'a> {
    /// The listening socket's address.
    pub(crate) listen: SocketAddr,
    /// IP versions it accepts (`ipv6`, `ipv4`).
    pub(crate) ip_versions: &'static [&'static str],
    /// The server's configuration (secret, share, limits).
    pub(crate) cfg: &'a ServerConfig,
}

impl Posture<'_> {
    fn auth(&self) -> &'static str {
        if self.cfg.secret.is_some() {
            "shared_secret"
        } else {
            "none"
        }
    }

    fn share(&self) -> &'static str {
        match &self.cfg.files {
            None => "none",
            Some(f) if f.read_only => "read_only",
            Some(_) => "writable",
        }
    }

    fn loopback_only(&self) -> bool {
        loopback_only(self.listen.ip())
    }

    /// Anonymous and writable: whoever reaches the port may write in the share.
    fn open(&self) -> bool {
        self.cfg.secret.is_none() && self.share() == "writable"
    }

    /// The text line (without the time).
    pub(crate) fn line(&self) -> String {
        let reach = if self.loopback_only() {
            "this host only".to_string()
        } else if self.listen.ip().is_unspecified() {
            let versions: Vec<&str> = self
                .ip_versions
                .iter()
                .map(|v| if *v == "ipv6" { "IPv6" } else { "IPv4" })
                .collect();
            format!("every {} address of this host", versions.join(" and "))
        } else {
            "other hosts".to_string()
        };
        let auth = match self.cfg.secret {
            Some(_) => "shared secret (--secret-file)",
            None => "none (any client)",
        };
        let share = match &self.cfg.files {
            None => "none (no --root)".to_string(),
            Some(f) if f.read_only => format!("read-only {}", f.root.display()),
            Some(f) => format!("writable {}", f.root.display()),
        };
        let mut line = format!(
            "posture: listening on {} ({reach}), auth: {auth}, share: {share}",
            self.listen
        );
        if self.open() {
            let root = self.cfg.files.as_ref().map(|f| f.root.display());
            let root = root.map(|r| r.to_string()).unwrap_or_default();
            if self.loopback_only() {
                line += &format!(
                    "; OPEN to this host: any local user may write and overwrite files in {root}"
                );
            } else {
                line += &format!(
                    "; OPEN: anyone who reaches {} may write and overwrite files in {root} (--allow-anonymous-writes)",
                    self.listen
                );
            }
        }
        line
    }

    /// The JSON `start` record.
    pub(crate) fn record(&self, time: String, path_db: Option<&Path>) -> StartLine {
        let c = self.cfg;
        let f = c.files.as_ref();
        StartLine {
            schema_version: super::LOG_SCHEMA_VERSION,
            time,
            event: "start",
            listen: vec![self.listen.to_string()],
            ip_versions: self.ip_versions.to_vec(),
            loopback_only: self.loopback_only(),
            auth: self.auth(),
            share: self.share(),
            root: f.map(|f| f.root.display().to_string()),
            open: self.open(),
            path_db: path_db.map(tcptune_pathdb::describe_location),
            limits: StartLimits {
                max_sessions: c.max_sessions,
                max_sessions_per_addr: c.max_sessions_per_addr,
                max_pending: c.max_pending,
                max_pending_per_addr: c.max_pending_per_addr,
                max_streams: c.limits.max_streams,
                max_message_size_bytes: c.limits.max_message_size,
                max_messages: c.limits.max_messages,
                max_total_bytes: c.limits.max_total_bytes,
                max_duration_ms: c.limits.max_duration_ms,
                first_frame_timeout_ms: ms(c.first_frame_timeout),
                handshake_timeout_ms: ms(c.handshake_timeout),
                idle_timeout_ms: ms(c.idle_timeout),
                memory_budget_bytes: c.memory_budget,
                max_files: f.map(|f| f.max_files),
                max_file_size_bytes: f.map(|f| f.max_file_size),
                max_manifest_bytes: f.map(|f| f.max_manifest_bytes),
            },
        }
    }
}

fn ms(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `serve --json`'s first line: the posture and the limits.
#[derive(Serialize)]
pub(crate) struct StartLine {
    schema_version: u32,
    time: String,
    event: &'static str,
    /// The listening sockets' addresses.
    listen: Vec<String>,
    /// `ipv6`, `ipv4`: what the sockets accept.
    ip_versions: Vec<&'static str>,
    /// Reachable from this host only.
    loopback_only: bool,
    /// `shared_secret` or `none`.
    auth: &'static str,
    /// `writable`, `read_only` or `none`.
    share: &'static str,
    /// The shared directory.
    root: Option<String>,
    /// Anonymous and writable: whoever reaches it may write in the share.
    open: bool,
    path_db: Option<String>,
    limits: StartLimits,
}

#[derive(Serialize)]
struct StartLimits {
    max_sessions: u32,
    max_sessions_per_addr: u32,
    max_pending: u32,
    max_pending_per_addr: u32,
    max_streams: u32,
    max_message_size_bytes: u64,
    max_messages: u64,
    max_total_bytes: u64,
    max_duration_ms: u64,
    first_frame_timeout_ms: u64,
    handshake_timeout_ms: u64,
    idle_timeout_ms: u64,
    memory_budget_bytes: Option<u64>,
    max_files: Option<u64>,
    max_file_size_bytes: Option<u64>,
    max_manifest_bytes: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcptune_transfer::auth::Secret;
    use tcptune_transfer::server::FileShare;

    fn addr(s: &str) -> SocketAddr {
        s.parse().expect("addr")
    }

    #[test]
    fn a_writable_share_without_a_secret_is_refused_unless_loopback_or_allowed() {
        let root = Some(Path::new("/srv/data"));
        for any in [
            "[::]:5310",
            "0.0.0.0:5310",
            "10.0.0.2:5310",
            "[2001:db8::1]:5310",
        ] {
            let why = refusal(addr(any), root, false, false, false).expect("refused");
            assert!(!why.contains('\n'), "{why}");
            for way in [
                "--secret-file FILE",
                "tcptune secret new",
                "-B 127.0.0.1",
                "--allow-anonymous-writes",
            ] {
                assert!(why.contains(way), "{any}: {why} lacks {way}");
            }
            assert!(
                refusal(addr(any), root, false, true, false).is_none(),
                "a secret"
            );
            assert!(
                refusal(addr(any), root, true, false, false).is_none(),
                "read-only"
            );
            assert!(
                refusal(addr(any), root, false, false, true).is_none(),
                "allowed"
            );
            assert!(
                refusal(addr(any), None, false, false, false).is_none(),
                "no share"
            );
        }
        for lo in [
            "127.0.0.1:5310",
            "127.3.4.5:1",
            "[::1]:5310",
            "[::ffff:127.0.0.1]:5310",
        ] {
            assert!(
                refusal(addr(lo), root, false, false, false).is_none(),
                "{lo}"
            );
        }
    }

    #[test]
    fn the_posture_says_who_may_write_and_an_open_server_says_so() {
        let mut cfg = ServerConfig {
            files: Some(FileShare::new("/srv/data")),
            ..ServerConfig::default()
        };
        let p = |cfg: &ServerConfig, a: &str| {
            Posture {
                listen: addr(a),
                ip_versions: &["ipv6", "ipv4"],
                cfg,
            }
            .line()
        };
        let open = p(&cfg, "[::]:5310");
        assert_eq!(
            open,
            "posture: listening on [::]:5310 (every IPv6 and IPv4 address of this host), auth: none (any client), share: writable /srv/data; OPEN: anyone who reaches [::]:5310 may write and overwrite files in /srv/data (--allow-anonymous-writes)"
        );
        assert!(p(&cfg, "127.0.0.1:5310").contains("OPEN to this host"));
        cfg.secret = Secret::from_bytes(&[b'a'; 32]);
        let closed = p(&cfg, "[::]:5310");
        assert!(
            closed.contains("auth: shared secret") && !closed.contains("OPEN"),
            "{closed}"
        );
        cfg.secret = None;
        if let Some(f) = cfg.files.as_mut() {
            f.read_only = true;
        }
        let ro = p(&cfg, "[::]:5310");
        assert!(
            ro.contains("share: read-only /srv/data") && !ro.contains("OPEN"),
            "{ro}"
        );
        cfg.files = None;
        assert!(p(&cfg, "[::]:5310").contains("share: none"));
    }
}
