//! The far end over ssh, for `cp HOST:PATH`, `send --ssh` and `advise --ssh`: the options
//! the three share and the start of `tcptune serve --stdio` through the user's ssh
//! (`tcptune_transfer::remote` decides; this maps its errors to exit statuses and lines).

use crate::exit;
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;
use tcptune_transfer::auth::Secret;
use tcptune_transfer::client::ClientError;
use tcptune_transfer::remote::{self, PortRange, RemoteError, RemoteGuard, RemoteSpec};

/// How the far end is started over ssh.
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct SshOpts {
    /// The remote shell for HOST:PATH and --ssh (default: ssh), split into words as rsync
    /// splits its -e (a shell's quoting): -e 'ssh -p 2222 -i ~/.ssh/dtn_key'.
    #[arg(short = 'e', long = "rsh", value_name = "CMD")]
    pub(crate) rsh: Option<String>,
    /// The tcptune program on the far host, run by its shell (default: tcptune, found on
    /// its PATH): --remote-tcptune '~/bin/tcptune'.
    #[arg(long, value_name = "PATH")]
    pub(crate) remote_tcptune: Option<String>,
    /// Make the far end listen on the first free port of FIRST-LAST (default: any free
    /// port), for a firewall that passes only those: --port-range 50000-50100.
    #[arg(long, value_name = "FIRST-LAST")]
    pub(crate) port_range: Option<PortRange>,
}

impl SshOpts {
    /// Refuse these options where nothing is started over ssh (`what` says what the user
    /// named instead).
    pub(crate) fn only_over_ssh(&self, what: &str) -> anyhow::Result<()> {
        if self.rsh.is_some() || self.remote_tcptune.is_some() || self.port_range.is_some() {
            return Err(exit::msg(
                exit::USAGE,
                format!("-e/--rsh, --remote-tcptune and --port-range start a far end over ssh: {what} reaches a running server, where they do nothing"),
            ));
        }
        Ok(())
    }
}

/// The far end, started: where its data port is, the session's key, and the process.
pub(crate) struct Far {
    /// The host to connect to (the far end's address, or the ssh host).
    pub(crate) host: String,
    /// Its port.
    pub(crate) port: u16,
    /// The one-time key as the session's shared secret.
    pub(crate) secret: Secret,
    /// The process; dropping it ends the far end.
    pub(crate) guard: RemoteGuard,
}

impl Far {
    /// After the session: wait for the far end to exit (it does when the session ends), or
    /// end it; what is left is where its data port was, to explain an error.
    pub(crate) fn finish(self) -> DataPort {
        let _ = self.guard.finish();
        DataPort {
            host: self.host,
            port: self.port,
        }
    }
}

/// Where the far end listened.
pub(crate) struct DataPort {
    host: String,
    port: u16,
}

impl DataPort {
    /// The error of a session with the far end: a connect that failed names the data port
    /// and `--port-range`; the rest as they are.
    pub(crate) fn explain(&self, e: ClientError) -> anyhow::Error {
        match &e {
            ClientError::Connect { source } => anyhow::anyhow!(remote::data_port_unreachable(
                &self.host,
                self.port,
                &source.source.to_string()
            )),
            _ => anyhow::Error::new(e),
        }
    }
}

/// Whether a tcptune server answers on `host`'s default port (a short TCP connect).
fn server_answers(host: &str) -> bool {
    let Ok(addrs) = (host, tcptune_transfer::server::DEFAULT_PORT).to_socket_addrs() else {
        return false;
    };
    addrs
        .take(2)
        .any(|a| TcpStream::connect_timeout(&a, Duration::from_millis(700)).is_ok())
}

/// `send --ssh` and `advise --ssh`: start the far end when `--ssh` names a host and point
/// `(server, port, secret)` at it; without `--ssh`, refuse the options that only make sense
/// over ssh. `no_path_db`: the client's `--no-path-db`, which the far end gets too.
pub(crate) fn start_for(
    opts: &SshOpts,
    user_host: Option<&str>,
    no_path_db: bool,
    (server, port, secret): (&mut String, &mut u16, &mut Option<Secret>),
) -> anyhow::Result<Option<Far>> {
    let Some(user_host) = user_host else {
        opts.only_over_ssh("HOST (without --ssh)")?;
        return Ok(None);
    };
    let f = start(opts, user_host, None, no_path_db)?;
    *server = f.host.clone();
    *port = f.port;
    *secret = Some(f.secret.clone());
    Ok(Some(f))
}

/// Start the far end on `user_host`. `url_hint` is what the user would write to reach a
/// tcptune server on that host instead (`tcptune://HOST/PATH`), said when ssh failed and
/// a server answers on port 5310. `no_path_db`: start it with `--no-path-db` (the
/// client's option crosses ssh: the far end neither reads nor records the path).
pub(crate) fn start(
    opts: &SshOpts,
    user_host: &str,
    url_hint: Option<&str>,
    no_path_db: bool,
) -> anyhow::Result<Far> {
    let mut spec = RemoteSpec::new(
        user_host,
        opts.rsh.as_deref(),
        opts.remote_tcptune.as_deref(),
        opts.port_range,
    )
    .map_err(|m| exit::msg(exit::USAGE, m))?;
    spec.no_path_db = no_path_db;
    match remote::launch(&spec) {
        Ok((offer, guard)) => {
            let secret = Secret::from_bytes(offer.key.as_bytes())
                .ok_or_else(|| exit::msg(exit::FAILURE, "the far end sent an empty key"))?;
            // Behind a NAT the far end sees its private address: look up where ssh went.
            let resolved: Vec<std::net::IpAddr> = if offer.private_addr() {
                (spec.host.as_str(), 0)
                    .to_socket_addrs()
                    .map(|a| a.map(|a| a.ip()).collect())
                    .unwrap_or_default()
            } else {
                Vec::new()
            };
            Ok(Far {
                host: offer.connect_host(&spec.host, &resolved),
                port: offer.port,
                secret,
                guard,
            })
        }
        Err(RemoteError::Ssh { failure, message }) => {
            let hint = match url_hint {
                Some(url) if failure.ssh_failed() && server_answers(&spec.host) => format!(
                    " (HOST:PATH means ssh, as in scp; a tcptune server answers on {}:{}: to copy through it, write {url})",
                    spec.host,
                    tcptune_transfer::server::DEFAULT_PORT
                ),
                _ => String::new(),
            };
            Err(exit::msg(exit::CONNECT, format!("{message}{hint}")))
        }
        Err(e) => Err(exit::msg(exit::CONNECT, e.to_string())),
    }
}
