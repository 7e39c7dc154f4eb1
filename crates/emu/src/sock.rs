//! Binding, listening and connecting sockets that were created inside a namespace (the
//! standard library only does that for sockets it creates itself).

use crate::error::EmuError;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// A `sockaddr_in`/`sockaddr_in6` for `addr`, and its length.
fn sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data; zeroed is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is large and aligned enough for a sockaddr_in.
            let sin = unsafe {
                &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>()
            };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr.s_addr = u32::from(*a.ip()).to_be();
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            // SAFETY: as above, for a sockaddr_in6.
            let sin6 = unsafe {
                &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            sin6.sin6_scope_id = a.scope_id();
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

/// `SO_REUSEADDR` (what the standard library sets on listeners).
pub(crate) fn reuse_addr(fd: &OwnedFd, addr: SocketAddr) -> Result<(), EmuError> {
    let one: libc::c_int = 1;
    // SAFETY: setsockopt with a pointer to an int and its size.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(EmuError::last_os(format!(
            "setsockopt SO_REUSEADDR on a socket for {addr}"
        )));
    }
    Ok(())
}

/// `bind(fd, addr)`.
pub(crate) fn bind(fd: &OwnedFd, addr: SocketAddr) -> Result<(), EmuError> {
    let (ss, len) = sockaddr(addr);
    // SAFETY: bind with a sockaddr of `len` bytes.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&ss as *const libc::sockaddr_storage).cast(),
            len,
        )
    };
    if r != 0 {
        return Err(EmuError::last_os(format!("bind {addr}")));
    }
    Ok(())
}

/// `listen(fd, 1024)`.
pub(crate) fn listen(fd: &OwnedFd, addr: SocketAddr) -> Result<(), EmuError> {
    // SAFETY: listen on a bound socket.
    if unsafe { libc::listen(fd.as_raw_fd(), 1024) } != 0 {
        return Err(EmuError::last_os(format!("listen on {addr}")));
    }
    Ok(())
}

/// Connect `fd` (a fresh TCP socket) to `target` within `timeout`; a blocking stream.
pub(crate) fn connect_timeout(
    fd: OwnedFd,
    target: SocketAddr,
    timeout: Duration,
) -> Result<TcpStream, EmuError> {
    let what = format!("connect to {target}");
    crate::sys::set_nonblocking(fd.as_raw_fd(), &what)?;
    let (ss, len) = sockaddr(target);
    // SAFETY: connect with a sockaddr of `len` bytes.
    let r = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&ss as *const libc::sockaddr_storage).cast(),
            len,
        )
    };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(EmuError::sys(what, e));
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(EmuError::sys(
                    what,
                    std::io::Error::from(std::io::ErrorKind::TimedOut),
                ));
            }
            let mut pfd = libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLOUT,
                revents: 0,
            };
            let ms = libc::c_int::try_from(left.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
            // SAFETY: poll on one pollfd.
            let n = unsafe { libc::poll(&mut pfd, 1, ms) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return Err(EmuError::sys(format!("poll while {what}"), e));
            }
            if n > 0 {
                break;
            }
        }
        let mut err: libc::c_int = 0;
        let mut elen = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt SO_ERROR into an int.
        let r = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ERROR,
                (&mut err as *mut libc::c_int).cast(),
                &mut elen,
            )
        };
        if r != 0 {
            return Err(EmuError::last_os(format!(
                "getsockopt SO_ERROR after {what}"
            )));
        }
        if err != 0 {
            return Err(EmuError::sys(what, std::io::Error::from_raw_os_error(err)));
        }
    }
    let stream = TcpStream::from(fd);
    stream
        .set_nonblocking(false)
        .map_err(|e| EmuError::sys(format!("making the connection to {target} blocking"), e))?;
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::os::fd::FromRawFd;

    fn tcp_socket() -> OwnedFd {
        // SAFETY: plain socket(2), owned at once.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
        assert!(fd >= 0);
        // SAFETY: a fresh descriptor.
        unsafe { OwnedFd::from_raw_fd(fd) }
    }

    #[test]
    fn a_socket_made_elsewhere_listens_and_connects_on_loopback() {
        let fd = tcp_socket();
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}"));
        assert!(reuse_addr(&fd, any).is_ok());
        assert!(bind(&fd, any).is_ok());
        assert!(listen(&fd, any).is_ok());
        let l = TcpListener::from(fd);
        let addr = l.local_addr().unwrap_or(any);
        let c = connect_timeout(tcp_socket(), addr, Duration::from_secs(2));
        assert!(c.is_ok(), "{c:?}");
        assert!(l.accept().is_ok());
    }

    #[test]
    fn a_refused_connection_names_the_target() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        let addr = l.local_addr().unwrap_or_else(|e| panic!("{e}"));
        drop(l);
        let e = connect_timeout(tcp_socket(), addr, Duration::from_secs(2))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains(&format!("connect to {addr}")), "{e}");
    }
}
