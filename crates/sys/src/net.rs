//! TCP sockets that can be configured before `connect()` or `listen()`.
//!
//! `std::net` connects and listens in one call, but buffer sizes must be set before the SYN
//! (the window scale is fixed then): [`tcp_socket`] makes an unconnected socket, the caller
//! applies its options, and [`connect`] / [`listen`] finish the job.

use std::io;
use std::mem::size_of;
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::time::Duration;

/// A socket call that failed, with what was attempted.
#[derive(Debug, thiserror::Error)]
#[error("{op}: {source}")]
pub struct NetError {
    /// What was attempted (`connect 10.0.0.2:5310`).
    pub op: String,
    /// The OS error.
    pub source: io::Error,
}

impl NetError {
    fn last(op: impl Into<String>) -> NetError {
        NetError {
            op: op.into(),
            source: io::Error::last_os_error(),
        }
    }
}

fn sockaddr(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data; all-zero is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in and suitably aligned.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
            size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above, for sockaddr_in6.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
            size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

/// A new, unconnected TCP socket of `addr`'s family (close-on-exec).
pub fn tcp_socket(addr: &SocketAddr) -> Result<OwnedFd, NetError> {
    let family = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: plain syscall.
    let fd = unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(NetError::last("socket(SOCK_STREAM)"));
    }
    // SAFETY: fd is a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Bind a socket to a local address (for a client's `--bind`, or before [`listen`]).
pub fn bind(fd: &OwnedFd, addr: &SocketAddr) -> Result<(), NetError> {
    let (ss, len) = sockaddr(addr);
    // SAFETY: ss is valid for len bytes.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&ss as *const libc::sockaddr_storage).cast(),
            len,
        )
    };
    if r != 0 {
        return Err(NetError::last(format!("bind {addr}")));
    }
    Ok(())
}

/// `setsockopt(fd, level, name, value)` for an `int` option; `what` names it in the error.
fn set_int(
    fd: &OwnedFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
    what: impl FnOnce() -> String,
) -> Result<(), NetError> {
    // SAFETY: valid pointer to an int of the size given.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(NetError::last(what()));
    }
    Ok(())
}

/// Bind `fd` to `addr` and listen. Options set on `fd` before are inherited by accepted
/// sockets.
pub fn listen(fd: OwnedFd, addr: &SocketAddr, backlog: i32) -> Result<TcpListener, NetError> {
    // SO_REUSEADDR lets a restarted server rebind at once.
    set_int(&fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1, || {
        format!("setsockopt SO_REUSEADDR on a socket for {addr}")
    })?;
    bind(&fd, addr)?;
    // SAFETY: plain syscall on an owned fd.
    if unsafe { libc::listen(fd.as_raw_fd(), backlog) } != 0 {
        return Err(NetError::last(format!("listen on {addr}")));
    }
    // SAFETY: we own fd and hand it to the listener.
    Ok(unsafe { TcpListener::from_raw_fd(fd.into_raw_fd()) })
}

/// Listen on every address, `[::]:port`: IPv6 only when `v6only`, else IPv4 too (as
/// IPv4-mapped addresses). Where the host has no IPv6 the error is `EAFNOSUPPORT`.
pub fn listen_any_v6(port: u16, v6only: bool, backlog: i32) -> Result<TcpListener, NetError> {
    let addr = SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port);
    let fd = tcp_socket(&addr)?;
    set_int(
        &fd,
        libc::IPPROTO_IPV6,
        libc::IPV6_V6ONLY,
        libc::c_int::from(v6only),
        || {
            format!(
                "setsockopt IPV6_V6ONLY={} on a socket for {addr}",
                u8::from(v6only)
            )
        },
    )?;
    listen(fd, &addr, backlog)
}

/// Start connecting `fd` to `addr` without waiting: the returned stream is non-blocking and
/// becomes writable when the handshake completes or fails (then `take_error` says why).
/// For event loops that open many connections at once.
pub fn connect_start(fd: OwnedFd, addr: &SocketAddr) -> Result<TcpStream, NetError> {
    let op = || format!("connect {addr}");
    // SAFETY: we own fd; the TcpStream takes it over (and closes it on error paths).
    let stream = unsafe { TcpStream::from_raw_fd(fd.into_raw_fd()) };
    stream
        .set_nonblocking(true)
        .map_err(|source| NetError { op: op(), source })?;
    let (ss, len) = sockaddr(addr);
    // SAFETY: ss valid for len bytes.
    let r = unsafe {
        libc::connect(
            stream.as_raw_fd(),
            (&ss as *const libc::sockaddr_storage).cast(),
            len,
        )
    };
    if r != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(NetError {
                op: op(),
                source: e,
            });
        }
    }
    Ok(stream)
}

/// Connect `fd` to `addr`, giving up after `timeout`.
pub fn connect(fd: OwnedFd, addr: &SocketAddr, timeout: Duration) -> Result<TcpStream, NetError> {
    let op = || format!("connect {addr}");
    let stream = connect_start(fd, addr)?;
    let mut p = libc::pollfd {
        fd: stream.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let ms = libc::c_int::try_from(left.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(NetError {
                op: op(),
                source: e,
            });
        }
        if n == 0 {
            return Err(NetError {
                op: op(),
                source: io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no answer within {:.1}s", timeout.as_secs_f64()),
                ),
            });
        }
        break;
    }
    if let Some(e) = stream
        .take_error()
        .map_err(|source| NetError { op: op(), source })?
    {
        return Err(NetError {
            op: op(),
            source: e,
        });
    }
    stream
        .set_nonblocking(false)
        .map_err(|source| NetError { op: op(), source })?;
    Ok(stream)
}

/// `sendfile(2)`: up to `len` bytes of `file` from `offset` onto the socket, without
/// copying them through user space (the kernel hands the page cache's pages to TCP). The
/// bytes sent, 0 at the file's end. A socket with a send timeout fails with `WouldBlock`
/// when nothing could be sent in time, as `write` does.
pub fn sendfile(
    sock: &TcpStream,
    file: &std::fs::File,
    offset: u64,
    len: usize,
) -> io::Result<usize> {
    let mut off = libc::off_t::try_from(offset)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset past off_t"))?;
    // SAFETY: both descriptors are open for the call's duration (borrowed), `off` is a
    // valid off_t that the kernel updates, and no user memory is written.
    let n = unsafe { libc::sendfile(sock.as_raw_fd(), file.as_raw_fd(), &mut off, len) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsFd;

    #[test]
    fn options_set_before_listen_are_inherited_by_accepted_sockets() {
        let addr: SocketAddr = "127.0.0.1:0".parse().expect("addr");
        let fd = tcp_socket(&addr).expect("socket");
        crate::sockopt::set_rcvbuf(fd.as_fd(), tcptune_core::Bytes::kib(96), false)
            .expect("rcvbuf");
        let l = listen(fd, &addr, 4).expect("listen");
        let target = l.local_addr().expect("addr");
        let c = tcp_socket(&target).expect("socket");
        let mut c = connect(c, &target, Duration::from_secs(5)).expect("connect");
        let (mut s, _) = l.accept().expect("accept");
        assert_eq!(
            crate::sockopt::rcvbuf(s.as_fd()).expect("get"),
            2 * 96 * 1024
        );
        c.write_all(b"hi").expect("write");
        let mut b = [0u8; 2];
        s.read_exact(&mut b).expect("read");
        assert_eq!(&b, b"hi");
    }

    #[test]
    fn a_dual_stack_listener_takes_ipv4_and_a_v6only_one_does_not() {
        let l = match listen_any_v6(0, false, 4) {
            Ok(l) => l,
            // A host without IPv6 says so, and that is the one acceptable failure.
            Err(e) if e.source.raw_os_error() == Some(libc::EAFNOSUPPORT) => {
                eprintln!("skipping: this host has no IPv6 ({e})");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        // A connection to 127.0.0.1 on the port `l` listens on.
        let connect_v4 = |l: &TcpListener| {
            let port = l.local_addr().expect("addr").port();
            let v4: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
            connect(
                tcp_socket(&v4).expect("socket"),
                &v4,
                Duration::from_secs(5),
            )
        };
        let c = connect_v4(&l);
        assert!(c.is_ok(), "{c:?}");
        let only = listen_any_v6(0, true, 4).expect("v6only listener");
        let c = connect_v4(&only);
        assert!(c.is_err(), "an IPv6-only listener took an IPv4 connection");
    }

    #[test]
    fn refused_connection_names_the_address() {
        // Bind then drop a listener to get a port nobody listens on.
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("port")
            .port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
        let e = connect(
            tcp_socket(&addr).expect("socket"),
            &addr,
            Duration::from_secs(5),
        )
        .expect_err("refused");
        assert!(
            e.to_string().contains(&format!("connect 127.0.0.1:{port}")),
            "{e}"
        );
    }
}
