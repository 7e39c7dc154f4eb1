//! Socket options of a TCP socket: `TCP_INFO` + `SO_MEMINFO` snapshots, buffer sizes (with
//! the effective value read back), `TCP_WINDOW_CLAMP`, `TCP_NOTSENT_LOWAT`, `TCP_CONGESTION`.
//!
//! Every function takes a borrowed file descriptor and returns a [`SockoptError`] that names
//! the exact call that failed (`setsockopt SO_RCVBUF=8388608`).

use crate::tcp_info::{apply_meminfo, meminfo, parse_tcp_info, TcpInfoError};
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd};
use tcptune_core::{Action, Bytes, Rate, TcpSnapshot};

/// A socket-option call that failed.
#[derive(Debug, thiserror::Error)]
pub enum SockoptError {
    /// The syscall returned an error.
    #[error("{op}: {source}")]
    Os {
        /// What was attempted (`setsockopt SO_SNDBUF=4194304`).
        op: String,
        /// The OS error.
        source: io::Error,
    },
    /// `TCP_INFO` returned something that cannot be decoded.
    #[error("getsockopt TCP_INFO: {0}")]
    TcpInfo(#[from] TcpInfoError),
    /// A value that cannot be passed to the kernel.
    #[error("{op}: value {value} does not fit in a C int")]
    TooLarge {
        /// What was attempted.
        op: String,
        /// The value.
        value: u64,
    },
    /// An action that is not a socket option (`OpenStreams` is for the transfer engine).
    #[error("action {0:?} is not a socket option")]
    NotASocketOption(Action),
}

fn os_err(op: impl Into<String>) -> SockoptError {
    SockoptError::Os {
        op: op.into(),
        source: io::Error::last_os_error(),
    }
}

fn getsockopt_raw(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    buf: &mut [u8],
    op: &str,
) -> Result<usize, SockoptError> {
    let mut len = libc::socklen_t::try_from(buf.len()).unwrap_or(libc::socklen_t::MAX);
    // SAFETY: buf is valid for `len` bytes and the kernel writes at most `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(os_err(op));
    }
    Ok(len as usize)
}

fn get_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    op: &str,
) -> Result<i32, SockoptError> {
    let mut b = [0u8; size_of::<libc::c_int>()];
    let n = getsockopt_raw(fd, level, name, &mut b, op)?;
    if n < b.len() {
        return Err(SockoptError::Os {
            op: op.to_string(),
            source: io::Error::new(
                io::ErrorKind::InvalidData,
                format!("short value ({n} bytes)"),
            ),
        });
    }
    Ok(i32::from_ne_bytes(b))
}

fn set_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: u64,
    op: String,
) -> Result<(), SockoptError> {
    let v = libc::c_int::try_from(value).map_err(|_| SockoptError::TooLarge {
        op: op.clone(),
        value,
    })?;
    // SAFETY: passing a pointer to a live c_int and its size.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&v as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(os_err(op));
    }
    Ok(())
}

/// Read `TCP_INFO` (up to 280 bytes on Linux 6.18, fewer on older kernels) and decode it.
/// The memory fields are left `None`; see [`snapshot`].
pub fn tcp_info(fd: BorrowedFd<'_>) -> Result<TcpSnapshot, SockoptError> {
    let mut b = [0u8; 512];
    let n = getsockopt_raw(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_INFO,
        &mut b,
        "getsockopt TCP_INFO",
    )?;
    Ok(parse_tcp_info(&b[..n.min(b.len())])?)
}

/// Read `SO_MEMINFO`: the socket's memory counters (indexes in [`meminfo`]).
pub fn meminfo(fd: BorrowedFd<'_>) -> Result<Vec<u32>, SockoptError> {
    let mut b = [0u8; 4 * (meminfo::VARS + 7)];
    let n = getsockopt_raw(
        fd,
        libc::SOL_SOCKET,
        libc::SO_MEMINFO,
        &mut b,
        "getsockopt SO_MEMINFO",
    )?;
    Ok(b[..n.min(b.len())]
        .chunks_exact(4)
        .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// A full snapshot: `TCP_INFO` plus `SO_MEMINFO`.
pub fn snapshot(fd: BorrowedFd<'_>) -> Result<TcpSnapshot, SockoptError> {
    let mut s = tcp_info(fd)?;
    apply_meminfo(&mut s, &meminfo(fd)?);
    Ok(s)
}

/// The send buffer the kernel holds (`sk_sndbuf`, twice what `SO_SNDBUF` was given).
pub fn sndbuf(fd: BorrowedFd<'_>) -> Result<u64, SockoptError> {
    let v = get_int(
        fd,
        libc::SOL_SOCKET,
        libc::SO_SNDBUF,
        "getsockopt SO_SNDBUF",
    )?;
    Ok(u64::try_from(v).unwrap_or(0))
}

/// The receive buffer the kernel holds (`sk_rcvbuf`).
pub fn rcvbuf(fd: BorrowedFd<'_>) -> Result<u64, SockoptError> {
    let v = get_int(
        fd,
        libc::SOL_SOCKET,
        libc::SO_RCVBUF,
        "getsockopt SO_RCVBUF",
    )?;
    Ok(u64::try_from(v).unwrap_or(0))
}

/// `setsockopt(SO_SNDBUF, bytes)` (or `SO_SNDBUFFORCE` when `force`), returning the value
/// the kernel stored (doubled, capped at `net.core.wmem_max` unless forced). This locks the
/// send buffer: kernel autotuning stops for this socket.
pub fn set_sndbuf(fd: BorrowedFd<'_>, bytes: Bytes, force: bool) -> Result<u64, SockoptError> {
    let (name, opt) = if force {
        ("SO_SNDBUFFORCE", libc::SO_SNDBUFFORCE)
    } else {
        ("SO_SNDBUF", libc::SO_SNDBUF)
    };
    set_int(
        fd,
        libc::SOL_SOCKET,
        opt,
        bytes.0,
        format!("setsockopt {name}={}", bytes.0),
    )?;
    sndbuf(fd)
}

/// `setsockopt(SO_RCVBUF, bytes)` (or `SO_RCVBUFFORCE`), returning the value the kernel stored.
pub fn set_rcvbuf(fd: BorrowedFd<'_>, bytes: Bytes, force: bool) -> Result<u64, SockoptError> {
    let (name, opt) = if force {
        ("SO_RCVBUFFORCE", libc::SO_RCVBUFFORCE)
    } else {
        ("SO_RCVBUF", libc::SO_RCVBUF)
    };
    set_int(
        fd,
        libc::SOL_SOCKET,
        opt,
        bytes.0,
        format!("setsockopt {name}={}", bytes.0),
    )?;
    rcvbuf(fd)
}

/// Offer a receive window of `bytes` from the SYN-ACK on, to every connection a listening
/// socket accepts, without locking any buffer: `SO_RCVLOWAT` on an unlocked TCP socket
/// raises `sk_rcvbuf` to hold that window (capped at half `tcp_rmem[2]`), which a listener
/// uses as the space of its SYN-ACKs and its connections inherit, still autotuned; the
/// low-water mark goes back to 1 at once (connections inherit it too). Returns the receive
/// buffer read back. (Without it a connection starts at `tcp_rmem[1]`'s window, 64 KiB by
/// default, and grows it about threefold per round trip as data arrives.)
pub fn offer_receive_window(fd: BorrowedFd<'_>, bytes: Bytes) -> Result<u64, SockoptError> {
    set_int(
        fd,
        libc::SOL_SOCKET,
        libc::SO_RCVLOWAT,
        bytes.0,
        format!("setsockopt SO_RCVLOWAT={}", bytes.0),
    )?;
    set_int(
        fd,
        libc::SOL_SOCKET,
        libc::SO_RCVLOWAT,
        1,
        "setsockopt SO_RCVLOWAT=1".to_string(),
    )?;
    rcvbuf(fd)
}

/// `SO_RCVLOWAT` on a connected socket: a blocking read (or a poll for input) waits until
/// `bytes` are queued, the peer's FIN, the read timeout, or the kernel's own wake-ups (the
/// receive window down to one segment, the buffer seven eighths full). Keep it well below
/// `sk_rcvbuf`: on an unlocked socket a low-water mark whose buffer space exceeds
/// `sk_rcvbuf` raises the buffer and clamps the window to the mark.
pub fn set_rcvlowat(fd: BorrowedFd<'_>, bytes: Bytes) -> Result<(), SockoptError> {
    set_int(
        fd,
        libc::SOL_SOCKET,
        libc::SO_RCVLOWAT,
        bytes.0.max(1),
        format!("setsockopt SO_RCVLOWAT={}", bytes.0.max(1)),
    )
}

/// `TCP_WINDOW_CLAMP`: bound the advertised window. Returns the clamp read back.
pub fn set_window_clamp(fd: BorrowedFd<'_>, bytes: Bytes) -> Result<u64, SockoptError> {
    set_int(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_WINDOW_CLAMP,
        bytes.0,
        format!("setsockopt TCP_WINDOW_CLAMP={}", bytes.0),
    )?;
    window_clamp(fd)
}

/// `TCP_WINDOW_CLAMP` read back: the largest window this end may advertise.
pub fn window_clamp(fd: BorrowedFd<'_>) -> Result<u64, SockoptError> {
    let v = get_int(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_WINDOW_CLAMP,
        "getsockopt TCP_WINDOW_CLAMP",
    )?;
    Ok(u64::try_from(v).unwrap_or(0))
}

/// `TCP_NOTSENT_LOWAT`: limit unsent bytes queued in the kernel. Returns the value read back.
pub fn set_notsent_lowat(fd: BorrowedFd<'_>, bytes: Bytes) -> Result<u64, SockoptError> {
    set_int(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_NOTSENT_LOWAT,
        bytes.0,
        format!("setsockopt TCP_NOTSENT_LOWAT={}", bytes.0),
    )?;
    let v = get_int(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_NOTSENT_LOWAT,
        "getsockopt TCP_NOTSENT_LOWAT",
    )?;
    Ok(u64::from(v as u32))
}

/// `SO_MAX_PACING_RATE`: pace the socket at most at `rate` (`None`: no cap). Setting it
/// makes Linux pace in TCP itself when the qdisc does not (no fq needed). Returns the cap read
/// back, in bytes per second (`u64::MAX` when uncapped).
pub fn set_max_pacing_rate(fd: BorrowedFd<'_>, rate: Option<Rate>) -> Result<u64, SockoptError> {
    let v: u64 = rate.map_or(u64::MAX, |r| r.bytes_per_sec().max(1));
    let op = match rate {
        Some(r) => format!("setsockopt SO_MAX_PACING_RATE={} (bytes/s, {r})", v),
        None => "setsockopt SO_MAX_PACING_RATE=unlimited".to_string(),
    };
    // SAFETY: passing a pointer to a live u64 and its size (the kernel reads an unsigned
    // long when given that many bytes).
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MAX_PACING_RATE,
            (&v as *const u64).cast(),
            size_of::<u64>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(os_err(op));
    }
    let mut b = [0u8; 8];
    let n = getsockopt_raw(
        fd,
        libc::SOL_SOCKET,
        libc::SO_MAX_PACING_RATE,
        &mut b,
        "getsockopt SO_MAX_PACING_RATE",
    )?;
    Ok(match n {
        8 => u64::from_ne_bytes(b),
        4 => match u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) {
            u32::MAX => u64::MAX,
            x => u64::from(x),
        },
        _ => v,
    })
}

/// `TCP_NODELAY`: send small control messages at once.
pub fn set_nodelay(fd: BorrowedFd<'_>, on: bool) -> Result<(), SockoptError> {
    set_int(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_NODELAY,
        u64::from(on),
        format!("setsockopt TCP_NODELAY={}", u8::from(on)),
    )
}

/// `SO_LINGER` on with a zero timeout: `close()` then resets the connection and discards
/// data still queued instead of sending it.
pub fn set_linger_zero(fd: BorrowedFd<'_>) -> Result<(), SockoptError> {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: pointer to a live linger and its size.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(os_err("setsockopt SO_LINGER={on,0}"));
    }
    Ok(())
}

/// `TCP_CONGESTION`: select the congestion control (`cubic`, `bbr`, `reno`).
pub fn set_congestion(fd: BorrowedFd<'_>, name: &str) -> Result<(), SockoptError> {
    let op = format!("setsockopt TCP_CONGESTION={name}");
    if name.is_empty() || name.len() >= 16 || name.contains('\0') {
        return Err(SockoptError::Os {
            op,
            source: io::Error::new(io::ErrorKind::InvalidInput, "not a congestion control name"),
        });
    }
    // SAFETY: pointer and length describe `name`'s bytes.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(os_err(op));
    }
    Ok(())
}

/// The congestion control in use (`TCP_CONGESTION`).
pub fn congestion(fd: BorrowedFd<'_>) -> Result<String, SockoptError> {
    let mut b = [0u8; 16];
    let n = getsockopt_raw(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_CONGESTION,
        &mut b,
        "getsockopt TCP_CONGESTION",
    )?;
    let s = &b[..n.min(b.len())];
    let end = s.iter().position(|&c| c == 0).unwrap_or(s.len());
    Ok(String::from_utf8_lossy(&s[..end]).into_owned())
}

/// Apply a tuner's socket-option [`Action`], returning the effective value read back.
/// `force` selects `SO_*BUFFORCE` for buffer sizes.
pub fn apply_action(fd: BorrowedFd<'_>, action: &Action, force: bool) -> Result<u64, SockoptError> {
    match action {
        Action::SetSndBuf(b) => set_sndbuf(fd, *b, force),
        Action::SetRcvBuf(b) => set_rcvbuf(fd, *b, force),
        Action::SetWindowClamp(b) => set_window_clamp(fd, *b),
        Action::SetNotsentLowat(b) => set_notsent_lowat(fd, *b),
        Action::SetMaxPacingRate(r) => set_max_pacing_rate(fd, *r),
        other @ Action::OpenStreams { .. } => Err(SockoptError::NotASocketOption(other.clone())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let c = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (s, _) = l.accept().expect("accept");
        (c, s)
    }

    #[test]
    fn snapshot_of_a_loopback_connection_has_memory_fields() {
        let (c, _s) = pair();
        let snap = snapshot(c.as_fd()).expect("snapshot");
        assert_eq!(snap.state, tcptune_core::TcpState::Established);
        assert!(snap.sndbuf_bytes.unwrap_or(0) > 0);
        assert!(snap.rcvbuf_bytes.unwrap_or(0) > 0);
        assert!(snap.snd_mss_bytes > 0);
    }

    #[test]
    fn a_listener_offers_its_connections_a_larger_window_without_locking_their_buffers() {
        let plain = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let l = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let before = rcvbuf(l.as_fd()).expect("rcvbuf");
        let after = offer_receive_window(l.as_fd(), Bytes::kib(1024)).expect("offer");
        // Half of tcp_rmem[2] caps it; every Linux default allows more than 64 KiB.
        assert!(after > before, "{before} -> {after}");
        let accepted = |l: &TcpListener| {
            let _c = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
            l.accept().expect("accept").0
        };
        let (a, b) = (accepted(&plain), accepted(&l));
        let (ra, rb) = (
            rcvbuf(a.as_fd()).expect("rcvbuf"),
            rcvbuf(b.as_fd()).expect("rcvbuf"),
        );
        assert!(rb > ra, "inherited: {ra} plain, {rb} offered");
        let lowat =
            get_int(b.as_fd(), libc::SOL_SOCKET, libc::SO_RCVLOWAT, "lowat").expect("lowat");
        assert_eq!(lowat, 1, "a connection wakes its reader at the first byte");
    }

    #[test]
    fn set_sndbuf_reports_the_doubled_value_the_kernel_stores() {
        let (c, _s) = pair();
        let eff = set_sndbuf(c.as_fd(), Bytes::kib(64), false).expect("set");
        assert_eq!(eff, 2 * 65536);
        let eff = set_rcvbuf(c.as_fd(), Bytes::kib(100), false).expect("set");
        assert_eq!(eff, 2 * 102_400);
    }

    #[test]
    fn too_large_values_and_bad_names_say_what_was_attempted() {
        let (c, _s) = pair();
        let e = set_sndbuf(c.as_fd(), Bytes(u64::MAX), false).expect_err("too large");
        assert!(e.to_string().contains("SO_SNDBUF"), "{e}");
        let e = set_congestion(c.as_fd(), "no-such-cc").expect_err("unknown cc");
        assert!(e.to_string().contains("TCP_CONGESTION=no-such-cc"), "{e}");
        assert!(!congestion(c.as_fd()).expect("cc").is_empty());
    }

    #[test]
    fn window_clamp_and_lowat_read_back() {
        let (c, _s) = pair();
        assert!(set_window_clamp(c.as_fd(), Bytes::kib(256)).expect("clamp") > 0);
        assert_eq!(
            set_notsent_lowat(c.as_fd(), Bytes::kib(128)).expect("lowat"),
            131072
        );
        let open = Action::OpenStreams {
            count: 1,
            reason: String::new(),
        };
        assert!(apply_action(c.as_fd(), &open, false).is_err());
    }
}
