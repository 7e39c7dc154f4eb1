//! [`Sshd`]: a real OpenSSH server in one side of an emulated topology, with a host key and a
//! user key made for the test, for the tests of `tcptune cp` over ssh.
//!
//! # Use
//!
//! 1. Check [`NEEDS`] with [`crate::require`] (sshd needs root: it changes to its privilege
//!    separation user, which a rootless namespace cannot map).
//! 2. [`Sshd::start`] in side B of a [`Topology`]; it returns once the server answers with
//!    its SSH banner from the other side.
//! 3. Give a client [`rsh`](Sshd::rsh) (`-e`/`--rsh`), [`ssh_args`](Sshd::ssh_args) or
//!    [`destination`](Sshd::destination); [`rsh_with`](Sshd::rsh_with) with
//!    [`stranger_key`](Sshd::stranger_key) or [`empty_known_hosts`](Sshd::empty_known_hosts)
//!    makes the failures (a key sshd refuses, a host key the client does not know).
//! 4. [`processes`](Sshd::processes) lists what still runs in the server's namespace (the
//!    far end must be gone after a copy).
//! 5. Drop stops sshd and everything it started (also when the test panics), which is
//!    everything else still running in its namespace too, and removes the temporary
//!    directory.

use crate::{wait_for, ChildGuard, Need};
use std::fs::File;
use std::io::Read;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tcptune_emu::{Side, Topology};
use tcptune_sys::process;

/// What a test that starts an [`Sshd`] needs: root (sshd's privilege separation), the
/// emulator's root mode, and OpenSSH's server, client and key generator.
pub const NEEDS: &[Need] = &[
    Need::Root,
    Need::Tun,
    Need::Program("sshd"),
    Need::Program("ssh"),
    Need::Program("ssh-keygen"),
];

/// The port sshd listens on inside its namespace.
pub const PORT: u16 = 2222;

/// An sshd running in one side of a topology, with keys of its own in a temporary
/// directory. See the [module](self) for the order of use.
#[derive(Debug)]
pub struct Sshd {
    dir: PathBuf,
    addr: IpAddr,
    user: String,
    /// The network namespace sshd runs in (`/proc/PID/ns/net`'s link), to find what it left.
    netns: String,
    child: Option<ChildGuard>,
}

impl Sshd {
    /// Make the keys and the configuration, start `sshd -D -e` in `side` of `topo`, and wait
    /// (up to 10 s) until the other side reads its banner. Panics with sshd's log when it
    /// does not come up.
    pub fn start(topo: &Topology, side: Side) -> Sshd {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tcptune-sshd-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        // sshd refuses to start without its privilege separation directory.
        std::fs::create_dir_all("/run/sshd").unwrap_or_else(|e| panic!("mkdir /run/sshd: {e}"));
        let addr = topo.addr(side);
        let mut sshd = Sshd {
            dir,
            addr,
            user: current_user(),
            netns: String::new(),
            child: None,
        };
        for key in ["host", "user", "stranger"] {
            keygen(&sshd.dir.join(key));
        }
        let host_pub = read(&sshd.dir.join("host.pub"));
        let host_key = host_pub.split_whitespace().take(2).collect::<Vec<_>>();
        std::fs::write(
            sshd.known_hosts(),
            format!("[{addr}]:{PORT} {}\n", host_key.join(" ")),
        )
        .unwrap_or_else(|e| panic!("writing known_hosts: {e}"));
        std::fs::write(sshd.empty_known_hosts(), "")
            .unwrap_or_else(|e| panic!("writing known_hosts: {e}"));
        std::fs::write(sshd.config(), sshd.config_text())
            .unwrap_or_else(|e| panic!("writing sshd_config: {e}"));

        let program = which("sshd").unwrap_or_else(|| panic!("sshd is not on PATH"));
        let log = File::create(sshd.log()).unwrap_or_else(|e| panic!("creating sshd log: {e}"));
        sshd.child = Some(ChildGuard::spawn(
            topo.command(side, program)
                .arg("-D")
                .arg("-e")
                .arg("-f")
                .arg(sshd.config())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log),
        ));
        let pid = sshd.child.as_ref().map_or(0, |c| c.id());
        sshd.netns = std::fs::read_link(format!("/proc/{pid}/ns/net"))
            .map(|l| l.display().to_string())
            .unwrap_or_else(|e| panic!("reading sshd's network namespace: {e}"));
        let target = SocketAddr::new(addr, PORT);
        let peer = side.peer();
        let up = wait_for(Duration::from_secs(10), || {
            banner(topo, peer, target).is_some_and(|b| b.starts_with("SSH-2.0-"))
        });
        assert!(
            up,
            "sshd did not answer on {target} within 10 s; its log:\n{}",
            read(&sshd.log())
        );
        sshd
    }

    /// The user the client logs in as: the test's own user (root).
    pub fn user(&self) -> &str {
        &self.user
    }

    /// `USER@ADDRESS`, what goes before `:PATH`.
    pub fn destination(&self) -> String {
        format!("{}@{}", self.user, self.addr)
    }

    /// The address sshd listens on.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The private key sshd accepts.
    pub fn key(&self) -> PathBuf {
        self.dir.join("user")
    }

    /// A private key sshd does not accept (made for the test, never authorized).
    pub fn stranger_key(&self) -> PathBuf {
        self.dir.join("stranger")
    }

    /// A known_hosts file that holds sshd's host key (for `[ADDRESS]:PORT`).
    pub fn known_hosts(&self) -> PathBuf {
        self.dir.join("known_hosts")
    }

    /// An empty known_hosts file: with `StrictHostKeyChecking=yes` the host is unknown.
    pub fn empty_known_hosts(&self) -> PathBuf {
        self.dir.join("known_hosts.empty")
    }

    /// sshd's log (its stderr, `-e`).
    pub fn log(&self) -> PathBuf {
        self.dir.join("sshd.log")
    }

    /// The options an `ssh` client needs, with `key` and `known_hosts`: only this file's
    /// key is offered (`IdentitiesOnly`, `-F /dev/null`: nothing of the user's own
    /// configuration, agent or keys), the host key must be known, nothing asks.
    pub fn ssh_args_with(&self, key: &Path, known_hosts: &Path) -> Vec<String> {
        let mut args: Vec<String> = vec!["-F".into(), "/dev/null".into()];
        args.extend(["-i".into(), key.display().to_string()]);
        args.extend(["-p".into(), PORT.to_string()]);
        for o in [
            format!("UserKnownHostsFile={}", known_hosts.display()),
            "GlobalKnownHostsFile=/dev/null".to_string(),
            "StrictHostKeyChecking=yes".to_string(),
            "BatchMode=yes".to_string(),
            "IdentitiesOnly=yes".to_string(),
            "IdentityAgent=none".to_string(),
            "ConnectTimeout=5".to_string(),
        ] {
            args.extend(["-o".into(), o]);
        }
        args
    }

    /// [`ssh_args_with`](Self::ssh_args_with) the accepted key and the right known_hosts.
    pub fn ssh_args(&self) -> Vec<String> {
        self.ssh_args_with(&self.key(), &self.known_hosts())
    }

    /// `ssh OPTIONS...` as one string, for `-e`/`--rsh` (split into words as rsync does;
    /// the temporary directory's paths hold no spaces).
    pub fn rsh_with(&self, key: &Path, known_hosts: &Path) -> String {
        let mut words = vec!["ssh".to_string()];
        words.extend(self.ssh_args_with(key, known_hosts));
        words.join(" ")
    }

    /// [`rsh_with`](Self::rsh_with) the accepted key and the right known_hosts.
    pub fn rsh(&self) -> String {
        self.rsh_with(&self.key(), &self.known_hosts())
    }

    /// Process id of the listening sshd.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, |c| c.id())
    }

    /// Every live process in sshd's network namespace except the listening sshd itself,
    /// with its command line (arguments joined by spaces): what a session left behind.
    pub fn processes(&self) -> Vec<(i32, String)> {
        let me = self.pid() as i32;
        all_pids()
            .into_iter()
            .filter(|&p| p != me && !not_running(p))
            .filter(|p| {
                std::fs::read_link(format!("/proc/{p}/ns/net"))
                    .is_ok_and(|l| l.display().to_string() == self.netns)
            })
            .map(|p| (p, cmdline(p)))
            .collect()
    }

    fn config(&self) -> PathBuf {
        self.dir.join("sshd_config")
    }

    fn config_text(&self) -> String {
        let d = self.dir.display();
        let login = if self.user == "root" {
            "PermitRootLogin prohibit-password".to_string()
        } else {
            format!("AllowUsers {}", self.user)
        };
        format!(
            "Port {PORT}\nListenAddress {addr}\nHostKey {d}/host\nAuthorizedKeysFile {d}/user.pub\n\
             {login}\nPubkeyAuthentication yes\nPasswordAuthentication no\n\
             KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPidFile {d}/sshd.pid\n\
             PrintMotd no\nLogLevel VERBOSE\nSubsystem sftp /usr/lib/openssh/sftp-server\n",
            addr = self.addr
        )
    }

    /// sshd and every process it started (sessions, the far ends they run), found again
    /// before every signal: those whose parent has already gone are still in the namespace.
    fn tree(&self) -> Vec<i32> {
        let mut pids = vec![self.pid() as i32];
        let mut i = 0;
        while i < pids.len() {
            let children = process::children_of(pids[i] as u32);
            pids.extend(children);
            i += 1;
        }
        let mut left: Vec<i32> = pids.into_iter().filter(|&p| !not_running(p)).collect();
        left.extend(self.processes().into_iter().map(|(p, _)| p));
        left.sort_unstable();
        left.dedup();
        left
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        if self.child.is_some() {
            let me = self.pid() as i32;
            // The sessions first (sshd would leave them running), then sshd, reaped by its guard.
            let what = format!("the processes of sshd {me}");
            if let Err(e) = process::terminate(&what, Duration::from_secs(1), || {
                self.tree().into_iter().filter(|&p| p != me).collect()
            }) {
                eprintln!("testkit: {e}");
            }
        }
        if let Some(mut child) = self.child.take() {
            if let Err(e) = child.0.terminate() {
                eprintln!("testkit: {e}");
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Read the first line the server at `target` sends, connecting from `side`.
fn banner(topo: &Topology, side: Side, target: SocketAddr) -> Option<String> {
    let mut s = topo
        .tcp_connect(side, target, Duration::from_secs(1))
        .ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// `ssh-keygen -q -t ed25519 -N '' -f PATH`.
fn keygen(path: &Path) {
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "tcptune-test", "-f"])
        .arg(path)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running ssh-keygen: {e}"));
    assert!(
        out.status.success(),
        "ssh-keygen -f {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| format!("(cannot read {}: {e})", path.display()))
}

/// The name of this process's user (root when the uid is 0).
fn current_user() -> String {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    if uid == 0 {
        return "root".to_string();
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    passwd
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() > 2 && f[2] == uid.to_string()).then(|| f[0].to_string())
        })
        .unwrap_or_else(|| panic!("uid {uid} has no name in /etc/passwd"))
}

/// The absolute path of `program` on `PATH` (sshd must be started by its absolute path).
fn which(program: &str) -> Option<PathBuf> {
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

fn all_pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `pid` is a zombie or gone.
fn not_running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rfind(')')
                .and_then(|i| s[i + 1..].split_whitespace().next().map(|st| st == "Z"))
                .unwrap_or(false)
        })
        .unwrap_or(true)
}

fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zombie_or_a_missing_process_is_not_alive() {
        assert!(!not_running(std::process::id() as i32));
        assert!(not_running(i32::MAX));
    }

    #[test]
    fn the_command_line_of_this_process_names_its_binary() {
        let me = cmdline(std::process::id() as i32);
        assert!(me.contains("tcptune_testkit"), "{me}");
    }
}
