//! Sockets, sysctls and files inside a topology's namespaces, in root and rootless mode
//! alike (rootless: made or opened by a forked helper, see [`crate::nsexec`]).

use super::Topology;
use crate::config::Side;
use crate::error::EmuError;
use crate::mode::Mode;
use crate::sys;
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{FromRawFd, OwnedFd};
use std::time::Duration;
use tcptune_sys::net;

impl Topology {
    /// A socket created inside `side`'s namespace (`ty` may include `SOCK_NONBLOCK`;
    /// `SOCK_CLOEXEC` is added). It stays in that namespace wherever it is used.
    pub fn socket(
        &self,
        side: Side,
        domain: libc::c_int,
        ty: libc::c_int,
        protocol: libc::c_int,
    ) -> Result<OwnedFd, EmuError> {
        if self.mode == Mode::Rootless {
            return self.ns[side.index()].socket(domain, ty, protocol);
        }
        let what = format!("socket({domain}, {ty}, {protocol}) in {}", self.netns(side));
        self.try_run_in(side, || {
            // SAFETY: plain socket(2); the descriptor is owned at once.
            let fd = unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, protocol) };
            if fd < 0 {
                return Err(EmuError::last_os(what));
            }
            // SAFETY: a fresh descriptor nothing else owns.
            Ok(unsafe { OwnedFd::from_raw_fd(fd) })
        })?
    }

    /// A TCP listener on `side`'s address and `port` (0: any), inside its namespace.
    pub fn tcp_listener(&self, side: Side, port: u16) -> Result<TcpListener, EmuError> {
        self.tcp_listener_at(side, SocketAddr::new(self.addr(side), port))
    }

    /// A TCP listener on `addr` inside `side`'s namespace: another of its addresses (side
    /// B's [`path_addr`](crate::path_addr)`(i)`), or `0.0.0.0` for all of them.
    pub fn tcp_listener_at(&self, side: Side, addr: SocketAddr) -> Result<TcpListener, EmuError> {
        let fd = self.socket(side, libc::AF_INET, libc::SOCK_STREAM, 0)?;
        Ok(net::listen(fd, &addr, 1024)?)
    }

    /// A UDP socket bound to `side`'s address and `port` (0: any), inside its namespace.
    pub fn udp_socket(&self, side: Side, port: u16) -> Result<UdpSocket, EmuError> {
        let addr = SocketAddr::new(self.addr(side), port);
        let fd = self.socket(side, libc::AF_INET, libc::SOCK_DGRAM, 0)?;
        net::bind(&fd, &addr)?;
        Ok(UdpSocket::from(fd))
    }

    /// A TCP connection from `side`'s namespace to `target`, made within `timeout` (the
    /// socket is created before the clock starts: only the handshake is timed).
    pub fn tcp_connect(
        &self,
        side: Side,
        target: SocketAddr,
        timeout: Duration,
    ) -> Result<TcpStream, EmuError> {
        let fd = self.socket(side, libc::AF_INET, libc::SOCK_STREAM, 0)?;
        Ok(net::connect(fd, &target, timeout)?)
    }

    /// Set a sysctl in `side`'s namespace (global sysctls such as net.core.rmem_max are
    /// refused).
    pub fn set_sysctl(&self, side: Side, key: &str, value: &str) -> Result<(), EmuError> {
        crate::config::check_namespaced_sysctl(key)?;
        if self.mode == Mode::Rootless {
            return self.ns[side.index()].write_sysctls(&[(key.to_string(), value.to_string())]);
        }
        self.try_run_in(side, || sys::write_sysctl(key, value))?
    }

    /// Read a sysctl as `side`'s namespace sees it (trimmed; tabs as the kernel writes them).
    pub fn read_sysctl(&self, side: Side, key: &str) -> Result<String, EmuError> {
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        let text = self.read_file_in(side, &path)?;
        Ok(text.trim().to_string())
    }

    /// Read a file as a process in `side`'s namespace would (`/proc/thread-self/net/...`,
    /// `/proc/sys/net/...`).
    fn read_file_in(&self, side: Side, path: &str) -> Result<String, EmuError> {
        use std::io::Read as _;
        let mut text = String::new();
        if self.mode == Mode::Rootless {
            let mut f = self.ns[side.index()].open(path)?;
            f.read_to_string(&mut text)
                .map_err(|e| EmuError::sys(format!("reading {path} of {}", self.netns(side)), e))?;
            return Ok(text);
        }
        let owned = path.to_string();
        self.try_run_in(side, move || std::fs::read_to_string(&owned))?
            .map_err(|e| EmuError::sys(format!("reading {path} in {}", self.netns(side)), e))
    }

    /// Number of listening TCP sockets (IPv4 and IPv6) in `side`'s namespace.
    pub fn tcp_listeners(&self, side: Side) -> Result<usize, EmuError> {
        let mut n = 0;
        for f in ["/proc/thread-self/net/tcp", "/proc/thread-self/net/tcp6"] {
            let text = match self.read_file_in(side, f) {
                Ok(t) => t,
                Err(EmuError::Sys { error, .. })
                    if error.kind() == std::io::ErrorKind::NotFound =>
                {
                    continue
                }
                Err(e) => return Err(e),
            };
            // Field 4 is the state; 0A is LISTEN.
            n += text
                .lines()
                .skip(1)
                .filter(|l| l.split_whitespace().nth(3) == Some("0A"))
                .count();
        }
        Ok(n)
    }
}
