//! A PostgreSQL location in libpq's URL form:
//! `postgres[ql]://[USER[:PASSWORD]@][HOST][:PORT][/DB][?PARAM=VALUE&...]`, with the
//! parameters `sslmode` (`disable`, `prefer`, `require`, `verify-ca`, `verify-full`),
//! `sslrootcert`, `host` (a directory for a Unix socket, or a host name), `port`, `user`,
//! `dbname`, `connect_timeout` (seconds) and `application_name`. Anything else is refused,
//! as libpq refuses it.
//!
//! The password is never shown: [`PgUrl`]'s `Display` writes `***` in its place.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// Longest URL accepted.
pub const MAX_URL_BYTES: usize = 4096;
/// How long connecting may take unless the URL's `connect_timeout` says otherwise.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest `connect_timeout` accepted.
pub const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(300);
/// The Unix socket directory used when a URL names no host (Debian's libpq default).
pub const DEFAULT_SOCKET_DIR: &str = "/var/run/postgresql";

/// Whether a `--path-db` value or `$TCPTUNE_PATH_DB` names a PostgreSQL database.
pub fn is_postgres_url(s: &str) -> bool {
    let l = s.get(..13).unwrap_or(s).to_ascii_lowercase();
    l.starts_with("postgres://") || l.starts_with("postgresql://")
}

/// libpq's `sslmode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// TLS if the server offers it, without checking its certificate.
    Prefer,
    /// TLS, without checking the certificate.
    Require,
    /// TLS, the certificate signed by `sslrootcert`'s authority.
    VerifyCa,
    /// TLS, the certificate signed by `sslrootcert`'s authority and naming the host.
    VerifyFull,
}

impl SslMode {
    fn parse(s: &str) -> Option<SslMode> {
        Some(match s {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }

    /// libpq's name.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// Where the server listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PgHost {
    /// A host name or address, over TCP.
    Tcp(String),
    /// A directory holding the server's Unix socket (`.s.PGSQL.PORT`).
    Unix(PathBuf),
}

/// A parsed PostgreSQL URL.
#[derive(Clone, PartialEq, Eq)]
pub struct PgUrl {
    /// The role.
    pub user: String,
    /// Its password, if the URL holds one (never shown).
    pub password: Option<String>,
    /// The server.
    pub host: PgHost,
    /// Its port.
    pub port: u16,
    /// The database.
    pub dbname: String,
    /// TLS.
    pub sslmode: SslMode,
    /// The authority's certificate for `verify-ca`/`verify-full` (libpq's default is
    /// `~/.postgresql/root.crt`).
    pub sslrootcert: Option<PathBuf>,
    /// How long connecting may take.
    pub connect_timeout: Duration,
}

/// Why a URL was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad PostgreSQL URL: {0}")]
pub struct UrlError(pub String);

fn bad(s: impl Into<String>) -> UrlError {
    UrlError(s.into())
}

/// Percent-decode a URL component.
fn decode(s: &str) -> Result<String, UrlError> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| bad("a '%' not followed by two hex digits"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| bad("a component that is not UTF-8"))
}

fn default_user() -> String {
    std::env::var("PGUSER")
        .or_else(|_| std::env::var("USER"))
        .unwrap_or_else(|_| "postgres".to_string())
}

impl PgUrl {
    /// Parse `s` (see the [module](self)).
    pub fn parse(s: &str) -> Result<PgUrl, UrlError> {
        if s.len() > MAX_URL_BYTES {
            return Err(bad(format!("{} bytes (at most {MAX_URL_BYTES})", s.len())));
        }
        let rest = ["postgresql://", "postgres://"]
            .iter()
            .find_map(|p| {
                s.get(..p.len())
                    .filter(|h| h.eq_ignore_ascii_case(p))
                    .map(|_| &s[p.len()..])
            })
            .ok_or_else(|| bad("it does not start with postgres:// or postgresql://"))?;
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (mut user, mut password) = (None, None);
        if let Some(u) = userinfo {
            let (name, pw) = u.split_once(':').map_or((u, None), |(n, p)| (n, Some(p)));
            if !name.is_empty() {
                user = Some(decode(name)?);
            }
            password = pw.map(decode).transpose()?;
        }
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (h, after) = v6
                .split_once(']')
                .ok_or_else(|| bad("an IPv6 address without its ']'"))?;
            (h.to_string(), after.strip_prefix(':'))
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (decode(h)?, Some(p)),
                None => (decode(hostport)?, None),
            }
        };
        let parse_port = |p: &str| {
            p.parse::<u16>()
                .ok()
                .filter(|&p| p > 0)
                .ok_or_else(|| bad(format!("port '{p}'")))
        };
        let mut port = port.filter(|p| !p.is_empty()).map(parse_port).transpose()?;
        let mut host = (!host.is_empty()).then_some(host);
        let mut dbname = (!path.is_empty()).then(|| decode(path)).transpose()?;
        let (mut sslmode, mut sslrootcert, mut timeout) = (None, None, None);
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| bad(format!("parameter '{pair}' has no value")))?;
            let v = decode(v)?;
            match k {
                "sslmode" => {
                    sslmode = Some(SslMode::parse(&v).ok_or_else(|| {
                        bad(format!(
                            "sslmode '{v}' (disable, prefer, require, verify-ca or verify-full)"
                        ))
                    })?)
                }
                "sslrootcert" => sslrootcert = Some(PathBuf::from(v)),
                "host" => host = Some(v),
                "port" => port = Some(parse_port(&v)?),
                "user" => user = Some(v),
                "dbname" => dbname = Some(v),
                "application_name" => {}
                "connect_timeout" => {
                    let secs: u64 = v
                        .parse()
                        .map_err(|_| bad(format!("connect_timeout '{v}' (whole seconds)")))?;
                    // libpq: zero waits forever; here it means the default, and anything
                    // is bounded.
                    timeout = Some(if secs == 0 {
                        DEFAULT_CONNECT_TIMEOUT
                    } else {
                        Duration::from_secs(secs).min(MAX_CONNECT_TIMEOUT)
                    });
                }
                other => return Err(bad(format!("unknown parameter '{other}'"))),
            }
        }
        let user = user.unwrap_or_else(default_user);
        let host = match host {
            Some(h) if h.starts_with('/') => PgHost::Unix(PathBuf::from(h)),
            Some(h) => PgHost::Tcp(h),
            None => PgHost::Unix(PathBuf::from(DEFAULT_SOCKET_DIR)),
        };
        Ok(PgUrl {
            dbname: dbname.unwrap_or_else(|| user.clone()),
            user,
            password,
            host,
            port: port.unwrap_or(5432),
            sslmode: sslmode.unwrap_or(SslMode::Prefer),
            sslrootcert,
            connect_timeout: timeout.unwrap_or(DEFAULT_CONNECT_TIMEOUT),
        })
    }
}

impl fmt::Display for PgUrl {
    /// The URL without its password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "postgres://{}", self.user)?;
        if self.password.is_some() {
            f.write_str(":***")?;
        }
        f.write_str("@")?;
        match &self.host {
            PgHost::Tcp(h) if h.contains(':') => write!(f, "[{h}]:{}", self.port)?,
            PgHost::Tcp(h) => write!(f, "{h}:{}", self.port)?,
            PgHost::Unix(_) => write!(f, ":{}", self.port)?,
        }
        write!(f, "/{}", self.dbname)?;
        let mut sep = '?';
        if let PgHost::Unix(d) = &self.host {
            write!(f, "{sep}host={}", d.display())?;
            sep = '&';
        }
        write!(f, "{sep}sslmode={}", self.sslmode.as_str())
    }
}

impl fmt::Debug for PgUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PgUrl({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libpq_urls_parse_with_their_defaults() {
        let u = PgUrl::parse("postgres://tt@db.example.org:6543/paths?sslmode=verify-full&sslrootcert=/etc/ca.pem&connect_timeout=3")
            .expect("url");
        assert_eq!(u.user, "tt");
        assert_eq!(u.host, PgHost::Tcp("db.example.org".into()));
        assert_eq!(u.port, 6543);
        assert_eq!(u.dbname, "paths");
        assert_eq!(u.sslmode, SslMode::VerifyFull);
        assert_eq!(u.sslrootcert, Some(PathBuf::from("/etc/ca.pem")));
        assert_eq!(u.connect_timeout, Duration::from_secs(3));
        let u = PgUrl::parse("postgresql://me@/db?host=%2Ftmp%2Fpg&port=5433").expect("url");
        assert_eq!(u.host, PgHost::Unix(PathBuf::from("/tmp/pg")));
        assert_eq!(u.port, 5433);
        assert_eq!(u.sslmode, SslMode::Prefer);
        assert_eq!(u.connect_timeout, DEFAULT_CONNECT_TIMEOUT);
        let u = PgUrl::parse("postgres://me@[::1]:5999/x").expect("url");
        assert_eq!(u.host, PgHost::Tcp("::1".into()));
        assert_eq!(u.port, 5999);
        assert!(is_postgres_url("POSTGRES://x"));
        assert!(!is_postgres_url("/tmp/postgres://x"));
    }

    #[test]
    fn bad_urls_are_refused_and_passwords_never_shown() {
        for bad in [
            "mysql://x@y/z",
            "postgres://x@y:0/z",
            "postgres://x@y:99999/z",
            "postgres://x@y/z?sslmode=maybe",
            "postgres://x@y/z?frobnicate=1",
            "postgres://x@y/z?connect_timeout=soon",
            "postgres://x@y/%zz",
        ] {
            assert!(PgUrl::parse(bad).is_err(), "{bad}");
        }
        assert!(PgUrl::parse(&format!("postgres://x@y/{}", "d".repeat(MAX_URL_BYTES))).is_err());
        let u = PgUrl::parse("postgres://tt:s3cr%40t@h/db?sslmode=require").expect("url");
        assert_eq!(u.password.as_deref(), Some("s3cr@t"));
        let shown = format!("{u} {u:?}");
        assert!(!shown.contains("s3cr"), "{shown}");
        assert_eq!(u.to_string(), "postgres://tt:***@h:5432/db?sslmode=require");
    }
}
