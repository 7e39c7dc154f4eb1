//! The netlink driver: one `NETLINK_SOCK_DIAG` socket, a dump request per address family,
//! and `recv()` until `NLMSG_DONE`. Decoding is [`super::parse`].

use super::parse::{build_request, parse_messages, NlItem, CONNECTED_STATES, DEFAULT_EXT};
use super::DiagConn;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Why a dump failed.
#[derive(Debug, thiserror::Error)]
pub enum DiagError {
    /// A syscall failed; the text says which.
    #[error("{what}: {source}")]
    Io {
        /// What was being attempted.
        what: String,
        /// The error.
        source: io::Error,
    },
    /// The kernel answered with an error.
    #[error("inet_diag dump of {family}: the kernel answered {}", io::Error::from_raw_os_error(-errno))]
    Kernel {
        /// `AF_INET` or `AF_INET6`.
        family: &'static str,
        /// Negative errno.
        errno: i32,
    },
    /// The answer could not be decoded.
    #[error("inet_diag dump of {family}: {source}")]
    Parse {
        /// `AF_INET` or `AF_INET6`.
        family: &'static str,
        /// Why.
        source: super::parse::DiagParseError,
    },
}

/// A `NETLINK_SOCK_DIAG` socket in the network namespace of the thread that opened it.
#[derive(Debug)]
pub struct DiagSocket {
    fd: OwnedFd,
    seq: u32,
    buf: Vec<u8>,
}

/// Receive buffer: the kernel fills dump messages up to 32 KiB; a larger buffer never
/// truncates one.
const RECV_BUF: usize = 64 * 1024;

impl DiagSocket {
    /// Open the socket.
    pub fn open() -> Result<DiagSocket, DiagError> {
        // SAFETY: plain socket(2); the fd is owned immediately below.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                libc::NETLINK_SOCK_DIAG,
            )
        };
        if fd < 0 {
            return Err(DiagError::Io {
                what: "socket(AF_NETLINK, NETLINK_SOCK_DIAG)".into(),
                source: io::Error::last_os_error(),
            });
        }
        // SAFETY: fd is a fresh, valid descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(DiagSocket {
            fd,
            seq: 1,
            buf: vec![0u8; RECV_BUF],
        })
    }

    /// Use a `NETLINK_SOCK_DIAG` socket opened elsewhere, for example inside a network
    /// namespace this process cannot enter (it dumps that namespace's sockets).
    pub fn from_fd(fd: OwnedFd) -> DiagSocket {
        DiagSocket {
            fd,
            seq: 1,
            buf: vec![0u8; RECV_BUF],
        }
    }

    fn send_request(&mut self, family: u8, states: u32, fam_name: &str) -> Result<(), DiagError> {
        self.seq = self.seq.wrapping_add(1);
        let req = build_request(family, states, DEFAULT_EXT, self.seq);
        // SAFETY: sockaddr_nl is plain data; zeroed is a valid value (pid 0 = the kernel).
        let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: req and sa are valid for the lengths given.
        let n = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                req.as_ptr().cast(),
                req.len(),
                0,
                (&sa as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if n < 0 {
            return Err(DiagError::Io {
                what: format!("sendto inet_diag dump request ({fam_name})"),
                source: io::Error::last_os_error(),
            });
        }
        Ok(())
    }

    /// Dump the TCP sockets of one family in the states of the `states` mask (`1 << state`).
    /// `f` receives each socket as it is decoded, so thousands of sockets never sit in
    /// memory twice.
    pub fn dump(
        &mut self,
        family: u8,
        states: u32,
        f: &mut dyn FnMut(DiagConn),
    ) -> Result<(), DiagError> {
        let fam_name = if family == libc::AF_INET6 as u8 {
            "AF_INET6"
        } else {
            "AF_INET"
        };
        self.send_request(family, states, fam_name)?;
        loop {
            // SAFETY: buf is valid for writes of its length.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    0,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(DiagError::Io {
                    what: format!("recv inet_diag dump ({fam_name})"),
                    source: e,
                });
            }
            let n = usize::try_from(n).unwrap_or(0);
            if n == 0 {
                return Ok(());
            }
            let items = parse_messages(&self.buf[..n]).map_err(|source| DiagError::Parse {
                family: fam_name,
                source,
            })?;
            for item in items {
                match item {
                    NlItem::Conn(c) => f(*c),
                    NlItem::Done => return Ok(()),
                    NlItem::Error(0) | NlItem::Other(_) => {}
                    NlItem::Error(errno) => {
                        return Err(DiagError::Kernel {
                            family: fam_name,
                            errno,
                        })
                    }
                }
            }
        }
    }

    /// Dump raw: the bytes of every `recv()` of one dump, for capturing test fixtures.
    pub fn dump_raw(&mut self, family: u8, states: u32) -> Result<Vec<Vec<u8>>, DiagError> {
        let mut out = Vec::new();
        self.send_request(family, states, "raw")?;
        loop {
            // SAFETY: as in `dump`.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    0,
                )
            };
            if n <= 0 {
                return Err(DiagError::Io {
                    what: "recv inet_diag dump".into(),
                    source: io::Error::last_os_error(),
                });
            }
            let chunk = self.buf[..n as usize].to_vec();
            let done = parse_messages(&chunk)
                .map(|items| items.iter().any(|i| matches!(i, NlItem::Done)))
                .unwrap_or(true);
            out.push(chunk);
            if done {
                return Ok(out);
            }
        }
    }
}

/// Every connected TCP socket (IPv4 then IPv6) of the calling thread's network namespace.
pub fn dump_tcp(sock: &mut DiagSocket) -> Result<Vec<DiagConn>, DiagError> {
    let mut out = Vec::new();
    for fam in [libc::AF_INET as u8, libc::AF_INET6 as u8] {
        sock.dump(fam, CONNECTED_STATES, &mut |c| out.push(c))?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn dump_finds_a_loopback_connection_with_its_tcp_info() {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        let mut c = TcpStream::connect(addr).expect("connect");
        let (mut s, _) = l.accept().expect("accept");
        c.write_all(&[7u8; 100_000]).expect("write");
        let mut got = vec![0u8; 100_000];
        s.read_exact(&mut got).expect("read");
        let local = c.local_addr().expect("local");
        let mut sock = DiagSocket::open().expect("netlink");
        let all = dump_tcp(&mut sock).expect("dump");
        let mine = all
            .iter()
            .find(|x| x.local == local && x.remote == addr)
            .expect("client socket in dump");
        let t = mine.tcp.as_ref().expect("tcp_info");
        assert!(mine.tcp_info_len >= 232, "{}", mine.tcp_info_len);
        assert!(t.bytes_acked.unwrap_or(0) >= 100_000, "{t:?}");
        assert!(t.sndbuf_bytes.unwrap_or(0) > 0);
        assert!(mine.congestion.is_some());
        // The server side is there too, with its ports swapped.
        assert!(all.iter().any(|x| x.local == addr && x.remote == local));
    }
}
