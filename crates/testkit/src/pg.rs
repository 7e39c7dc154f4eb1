//! [`PgCluster`]: a throw-away PostgreSQL server for the path database's tests, made with
//! Debian's `initdb` and `postgres` (package `postgresql`, in `/usr/lib/postgresql/*/bin`,
//! off `PATH`) in a temporary directory.
//!
//! # Use
//!
//! 1. [`require`] (skips outside CI naming the package, fails under `CI=true`).
//! 2. [`PgCluster::start`]: a server on a Unix socket only; [`PgCluster::start_with_tls`]
//!    also on `127.0.0.1`, TLS only (a certificate authority and a server certificate for
//!    `localhost` and `127.0.0.1`, made with `openssl`; `hostssl` lines in `pg_hba.conf`).
//! 3. [`PgCluster::create_database`], then [`PgCluster::url`] (Unix socket) or
//!    [`PgCluster::tcp_url`] for the code under test.
//! 4. Drop stops the server (immediate shutdown, then SIGKILL) and removes the directory,
//!    also when the test panics.
//!
//! As root the server runs as uid 65534 (PostgreSQL refuses to run as root), through
//! `setpriv`, with a parent-death signal so that it dies with the test even when the test
//! is killed; as anyone else it runs as that user.

use crate::{ci, is_root, wait_for};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// The Debian package that installs `initdb` and `postgres`.
pub const PACKAGE: &str = "postgresql";
/// The user the server runs as when the test is root.
pub const SERVER_UID: u32 = 65534;
/// The role the cluster is made with (trusted, superuser).
pub const USER: &str = "tcptune";

/// The newest `/usr/lib/postgresql/VERSION/bin` that holds `initdb` and `postgres`.
pub fn bin_dir() -> Option<PathBuf> {
    let mut dirs: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let v: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            (bin.join("initdb").is_file() && bin.join("postgres").is_file()).then_some((v, bin))
        })
        .collect();
    dirs.sort();
    dirs.pop().map(|(_, b)| b)
}

/// Whether `test` can start a cluster here (and, for TLS, make certificates): outside CI a
/// missing program prints `skipping: needs initdb/postgres (Debian package postgresql)` and
/// returns false; under `CI=true` it panics.
pub fn require(test: &str, tls: bool) -> bool {
    let why = if bin_dir().is_none() {
        Some(format!("needs initdb/postgres (Debian package {PACKAGE})"))
    } else if tls && crate::Need::Program("openssl").missing().is_some() {
        Some("needs openssl (Debian package openssl)".to_string())
    } else if is_root() && crate::Need::Program("setpriv").missing().is_some() {
        Some("needs setpriv to run the server as uid 65534 (Debian package util-linux)".into())
    } else {
        None
    };
    match why {
        None => true,
        Some(why) => {
            assert!(!ci(), "{test}: CI=true but {why}: this test must run in CI");
            eprintln!("skipping: {why} ({test})");
            false
        }
    }
}

/// A running throw-away cluster. See the [module](self) for the order of use.
#[derive(Debug)]
pub struct PgCluster {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    tcp: bool,
    server: Option<Child>,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

fn chown(path: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).expect("path");
    // SAFETY: a valid C string; chown touches no memory of ours.
    let r = unsafe { libc::chown(c.as_ptr(), SERVER_UID, SERVER_UID) };
    assert_eq!(
        r,
        0,
        "chown {} to {SERVER_UID}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

fn run(cmd: &mut Command, what: &str) {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl PgCluster {
    /// A cluster listening on a Unix socket only.
    pub fn start() -> PgCluster {
        PgCluster::start_inner(false)
    }

    /// A cluster listening on its Unix socket and on `127.0.0.1` with TLS.
    pub fn start_with_tls() -> PgCluster {
        PgCluster::start_inner(true)
    }

    /// A program of the server's, run as the server's user.
    fn as_server(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        let mut c = if is_root() {
            let mut c = Command::new("setpriv");
            c.args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--pdeathsig=KILL",
            ])
            .arg(path);
            c
        } else {
            Command::new(path)
        };
        c.current_dir(&self.dir).env_remove("PGDATA");
        c
    }

    fn start_inner(tcp: bool) -> PgCluster {
        let bin = bin_dir().expect("initdb/postgres (call testkit::pg::require first)");
        let dir = std::env::temp_dir().join(format!(
            "tcptune-pg-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sock")).expect("the cluster's directory");
        let mut cluster = PgCluster {
            dir,
            bin,
            port: free_port(),
            tcp,
            server: None,
        };
        // From here on Drop cleans up, whatever fails.
        if is_root() {
            chown(&cluster.dir);
            chown(&cluster.dir.join("sock"));
        }
        let data = cluster.data();
        run(
            cluster.as_server("initdb").args([
                "-D",
                data.to_str().expect("utf-8 path"),
                "-U",
                USER,
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
                "--no-instructions",
            ]),
            "initdb",
        );
        if tcp {
            cluster.make_certificates();
        }
        cluster.launch();
        cluster
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// A certificate authority (`ca.crt`, beside the data directory) and a server
    /// certificate it signed for `localhost` and `127.0.0.1` (in the data directory).
    fn make_certificates(&self) {
        let (d, data) = (&self.dir, self.data());
        let openssl = |args: &[&str], what: &str| {
            run(Command::new("openssl").current_dir(d).args(args), what);
        };
        let (ca_key, ca_crt) = (d.join("ca.key"), d.join("ca.crt"));
        let (key, csr, crt) = (
            data.join("server.key"),
            d.join("server.csr"),
            data.join("server.crt"),
        );
        let ext = d.join("san.ext");
        std::fs::write(&ext, "subjectAltName=DNS:localhost,IP:127.0.0.1\n").expect("ext");
        let s = |p: &Path| p.to_str().expect("utf-8 path").to_string();
        openssl(
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-days",
                "2",
                "-subj",
                "/CN=tcptune test CA",
                "-keyout",
                &s(&ca_key),
                "-out",
                &s(&ca_crt),
            ],
            "openssl req (CA)",
        );
        openssl(
            &[
                "req",
                "-new",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-subj",
                "/CN=localhost",
                "-keyout",
                &s(&key),
                "-out",
                &s(&csr),
            ],
            "openssl req (server)",
        );
        openssl(
            &[
                "x509",
                "-req",
                "-in",
                &s(&csr),
                "-CA",
                &s(&ca_crt),
                "-CAkey",
                &s(&ca_key),
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                &s(&ext),
                "-out",
                &s(&crt),
            ],
            "openssl x509 (sign)",
        );
        // TCP clients must use TLS: a plain connection is refused (so a test that connects
        // knows it was encrypted).
        let hba = data.join("pg_hba.conf");
        let conf = std::fs::read_to_string(&hba).expect("pg_hba.conf");
        let conf: String = conf
            .lines()
            .map(|l| match l.strip_prefix("host ") {
                Some(rest) => format!("hostssl {rest}\n"),
                None => format!("{l}\n"),
            })
            .collect();
        std::fs::write(&hba, conf).expect("pg_hba.conf");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        if is_root() {
            chown(&key);
            chown(&crt);
        }
    }

    fn launch(&mut self) {
        let port = self.port.to_string();
        let sock = self.dir.join("sock");
        let data = self.data();
        let mut cmd = self.as_server("postgres");
        cmd.args(["-D", data.to_str().expect("utf-8 path")])
            .args(["-k", sock.to_str().expect("utf-8 path")])
            .args(["-p", &port])
            .args(["-c", "fsync=off", "-c", "max_connections=100"])
            .args(["-c", "shared_buffers=16MB"]);
        if self.tcp {
            cmd.args(["-c", "listen_addresses=127.0.0.1", "-c", "ssl=on"])
                .args([
                    "-c",
                    "ssl_cert_file=server.crt",
                    "-c",
                    "ssl_key_file=server.key",
                ]);
        } else {
            cmd.args(["-c", "listen_addresses="]);
        }
        if !is_root() {
            // SAFETY: prctl in the child between fork and exec (async-signal-safe).
            unsafe {
                cmd.pre_exec(|| {
                    libc::prctl(
                        libc::PR_SET_PDEATHSIG,
                        libc::SIGKILL as libc::c_ulong,
                        0,
                        0,
                        0,
                    );
                    Ok(())
                });
            }
        }
        let log = std::fs::File::create(self.dir.join("server.log")).expect("log file");
        let err = log.try_clone().expect("log file");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .expect("start postgres");
        self.server = Some(child);
        let socket = sock.join(format!(".s.PGSQL.{}", self.port));
        let ready = wait_for(Duration::from_secs(30), || {
            socket.exists()
                && Command::new(self.bin.join("pg_isready"))
                    .args(["-q", "-h", sock.to_str().unwrap_or("/"), "-p", &port])
                    .stdin(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
        });
        assert!(
            ready,
            "postgres did not come up: {}",
            std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
        );
    }

    /// The directory of the server's Unix socket.
    pub fn socket_dir(&self) -> PathBuf {
        self.dir.join("sock")
    }

    /// The server's port (of its Unix socket's name, and of TCP with TLS).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The certificate authority that signed the server's certificate (TLS clusters).
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// The server's own certificate (not an authority: a client that takes it as its root
    /// must refuse the server).
    pub fn server_cert(&self) -> PathBuf {
        self.data().join("server.crt")
    }

    /// Create database `name` (via `psql` on the Unix socket).
    pub fn create_database(&self, name: &str) {
        self.psql("postgres", &format!("CREATE DATABASE \"{name}\""));
    }

    /// Run SQL in database `db` with `psql`; returns what it printed (unaligned, tuples
    /// only).
    pub fn psql(&self, db: &str, sql: &str) -> String {
        let out = Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
            .args(["-h", self.socket_dir().to_str().expect("utf-8 path")])
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                USER,
                "-d",
                db,
                "-c",
                sql,
            ])
            .stdin(Stdio::null())
            .output()
            .expect("psql");
        assert!(
            out.status.success(),
            "psql {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A libpq URL for database `db` over the Unix socket.
    pub fn url(&self, db: &str) -> String {
        format!(
            "postgres://{USER}@/{db}?host={}&port={}&sslmode=disable",
            self.socket_dir().display(),
            self.port
        )
    }

    /// A libpq URL for database `db` over TCP on `host` (`127.0.0.1` or `localhost`) with
    /// this `sslmode`, the cluster's authority as `sslrootcert`.
    pub fn tcp_url(&self, host: &str, db: &str, sslmode: &str) -> String {
        format!(
            "postgres://{USER}@{host}:{}/{db}?sslmode={sslmode}&sslrootcert={}",
            self.port,
            self.ca_cert().display()
        )
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        if let Some(mut child) = self.server.take() {
            let pid = child.id() as i32;
            // SAFETY: signalling our own child, which has not been reaped yet.
            unsafe { libc::kill(pid, libc::SIGQUIT) }; // immediate shutdown
            let gone = wait_for(Duration::from_secs(10), || {
                matches!(child.try_wait(), Ok(Some(_)))
            });
            if !gone {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
