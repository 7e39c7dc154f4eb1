//! Helpers shared by the emulator's integration tests.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Instant;
use tcptune_emu::{Side, Topology};
use tcptune_testkit::Need;

#[allow(unused_imports)] // each test binary uses a different subset
pub(crate) use tcptune_testkit::{median, wait_for};

/// Whether tests needing root and TUN devices can run (see `tcptune_testkit::require`).
pub(crate) fn can_run_as_root(test: &str) -> bool {
    tcptune_testkit::require(test, &[Need::Root, Need::Tun])
}

/// Whether the emulator can run here, in root mode (root) or rootless mode (anyone, with
/// user namespaces): tests of what both modes do.
pub(crate) fn can_run(test: &str) -> bool {
    tcptune_testkit::require(test, &[Need::Emulator])
}

/// Whether this process's topologies are rootless.
pub(crate) fn rootless() -> bool {
    tcptune_testkit::emulator_mode() == Some(tcptune_emu::Mode::Rootless)
}

/// Median TCP handshake time from A to `target` over `n` connects, in ms. The socket is made
/// in A first (in rootless mode by a forked helper): only the handshake is timed.
pub(crate) fn handshake_ms(topo: &Topology, target: SocketAddr, n: usize) -> f64 {
    let samples: Vec<f64> = (0..n)
        .map(|_| {
            let fd = topo
                .socket(Side::A, libc::AF_INET, libc::SOCK_STREAM, 0)
                .unwrap_or_else(|e| panic!("socket in A: {e}"));
            let t0 = Instant::now();
            let s = connect(fd, target);
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            assert!(s.is_ok(), "connect to {target}: {s:?}");
            ms
        })
        .collect();
    median(samples)
}

/// A blocking connect(2) of a socket made elsewhere.
pub(crate) fn connect(fd: std::os::fd::OwnedFd, target: SocketAddr) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let SocketAddr::V4(v4) = target else {
        return Err(std::io::Error::other("IPv4 only"));
    };
    // SAFETY: sockaddr_in is plain data; zeroed is valid, filled in below.
    let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    sa.sin_family = libc::AF_INET as libc::sa_family_t;
    sa.sin_port = v4.port().to_be();
    sa.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
    // SAFETY: connect with a sockaddr_in and its size.
    let r = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
