//! `watch`'s diagnosis on an emulated 100 ms path, where the truth is known: a receiver whose
//! application fixed a small SO_RCVBUF limits the sender by its window, and a sender whose
//! application fixed a small SO_SNDBUF is limited by its send buffer. The dumps are taken
//! inside the sender's namespace, as `tcptune watch` would run there. In root and rootless
//! mode alike: the sockets are made inside the namespaces (`Topology::socket`).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{FromRawFd, IntoRawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tcptune_core::{Bytes, HostLimits};
use tcptune_doctor::diag::{dump_tcp, DiagSocket};
use tcptune_doctor::watch::{HintContext, LimitKind, Row, Tracker};
use tcptune_emu::{unique_name, PathConfig, Side, Topology, TopologyConfig};
use tcptune_testkit::Need;

/// The emulator runs here, root or rootless (every socket is made inside a namespace with
/// `Topology::socket`, so this process never needs to enter one).
fn can_run() -> bool {
    tcptune_testkit::require(module_path!(), &[Need::Emulator])
}

fn set_buf(fd: i32, opt: libc::c_int, bytes: i32) {
    // SAFETY: a valid fd and a pointer to an int of the given size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            (&bytes as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "setsockopt: {}", std::io::Error::last_os_error());
}

/// An IPv4 TCP socket inside `side`'s namespace with `opt` set to `bytes` (0: nothing set).
fn socket_with(topo: &Topology, side: Side, opt: libc::c_int, bytes: i32) -> i32 {
    let fd = topo
        .socket(side, libc::AF_INET, libc::SOCK_STREAM, 0)
        .unwrap_or_else(|e| panic!("socket in {side}: {e}"))
        .into_raw_fd();
    if bytes > 0 {
        set_buf(fd, opt, bytes);
    }
    fd
}

fn sockaddr(a: SocketAddr) -> libc::sockaddr_in {
    let SocketAddr::V4(v4) = a else {
        panic!("IPv4 only")
    };
    // SAFETY: sockaddr_in is plain data.
    let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    sa.sin_family = libc::AF_INET as libc::sa_family_t;
    sa.sin_port = v4.port().to_be();
    sa.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
    sa
}

/// A listener in B whose accepted sockets inherit `SO_RCVBUF = rcvbuf` (set before
/// listen()).
fn listener(topo: &Topology, addr: SocketAddr, rcvbuf: i32) -> TcpListener {
    let fd = socket_with(topo, Side::B, libc::SO_RCVBUF, rcvbuf);
    let sa = sockaddr(addr);
    // SAFETY: valid fd and sockaddr.
    let r = unsafe {
        libc::bind(
            fd,
            (&sa as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "bind: {}", std::io::Error::last_os_error());
    // SAFETY: valid fd.
    assert_eq!(unsafe { libc::listen(fd, 16) }, 0);
    // SAFETY: fd is a listening socket we own.
    unsafe { TcpListener::from_raw_fd(fd) }
}

/// A connection from A whose `SO_SNDBUF` is `sndbuf` (set before connect()).
fn connect(topo: &Topology, addr: SocketAddr, sndbuf: i32) -> TcpStream {
    let fd = socket_with(topo, Side::A, libc::SO_SNDBUF, sndbuf);
    let sa = sockaddr(addr);
    // SAFETY: valid fd and sockaddr.
    let r = unsafe {
        libc::connect(
            fd,
            (&sa as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "connect: {}", std::io::Error::last_os_error());
    // SAFETY: fd is a connected socket we own.
    unsafe { TcpStream::from_raw_fd(fd) }
}

/// The buffer limits as `side`'s namespace sees them.
fn limits_in(topo: &Topology, side: Side) -> Option<HostLimits> {
    let num = |k: &str| topo.read_sysctl(side, k).ok()?.parse::<u64>().ok();
    let triple = |k: &str| -> Option<[Bytes; 3]> {
        let v: Vec<u64> = topo
            .read_sysctl(side, k)
            .ok()?
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        Some([Bytes(*v.first()?), Bytes(*v.get(1)?), Bytes(*v.get(2)?)])
    };
    Some(HostLimits {
        rmem_max: Bytes(num("net.core.rmem_max")?),
        wmem_max: Bytes(num("net.core.wmem_max")?),
        tcp_rmem: triple("net.ipv4.tcp_rmem")?,
        tcp_wmem: triple("net.ipv4.tcp_wmem")?,
        moderate_rcvbuf: num("net.ipv4.tcp_moderate_rcvbuf")? != 0,
        can_force: false,
    })
}

/// Run a 3 s bulk transfer A -> B with the given buffers; return the sender's row from the
/// second of two dumps 1 s apart (so shares cover the last second).
fn diagnose(topo: &Topology, port: u16, sndbuf: i32, rcvbuf: i32, ctx: &HintContext) -> Row {
    let b = SocketAddr::new(topo.addr(Side::B), port);
    let l = listener(topo, b, rcvbuf);
    let stop = Arc::new(AtomicBool::new(false));
    let reader = std::thread::spawn(move || {
        let (mut s, _) = l.accept().expect("accept");
        let mut buf = vec![0u8; 1 << 16];
        while s.read(&mut buf).map(|n| n > 0).unwrap_or(false) {}
    });
    let c = connect(topo, b, sndbuf);
    let local = c.local_addr().expect("local");
    let stop2 = Arc::clone(&stop);
    let writer = std::thread::spawn(move || {
        let mut c = c;
        let chunk = vec![7u8; 1 << 16];
        while !stop2.load(Ordering::Relaxed) {
            if c.write_all(&chunk).is_err() {
                break;
            }
        }
    });
    let netlink = topo
        .socket(
            Side::A,
            libc::AF_NETLINK,
            libc::SOCK_DGRAM,
            libc::NETLINK_SOCK_DIAG,
        )
        .unwrap_or_else(|e| panic!("netlink socket in A: {e}"));
    let mut sock = DiagSocket::from_fd(netlink);
    let mut tracker = Tracker::new();
    let start = std::time::Instant::now();
    std::thread::sleep(Duration::from_millis(1500));
    tracker.rows(start.elapsed(), dump_tcp(&mut sock).expect("dump"), ctx);
    std::thread::sleep(Duration::from_millis(1000));
    let rows = tracker.rows(start.elapsed(), dump_tcp(&mut sock).expect("dump"), ctx);
    stop.store(true, Ordering::Relaxed);
    let _ = writer.join();
    let _ = reader.join();
    rows.into_iter()
        .find(|r| r.local == local)
        .expect("sender row in A's dump")
}

#[test]
fn watch_names_the_limit_of_connections_on_an_emulated_100ms_path() {
    if !can_run() {
        return;
    }
    let cfg = TopologyConfig::new(
        unique_name("docwatch"),
        PathConfig {
            delay: Duration::from_millis(50),
            ..PathConfig::default()
        },
    );
    let topo = Topology::up(&cfg).unwrap_or_else(|e| panic!("up: {e}"));
    let limits = limits_in(&topo, Side::A);
    let ctx = HintContext {
        limits: limits.clone(),
        target: None,
    };

    // Receiver locked at SO_RCVBUF 64 KiB (128 KiB of buffer): the window caps the sender.
    let row = diagnose(&topo, 5400, 0, 64 << 10, &ctx);
    eprintln!("rwnd case: {row:?}");
    let l = row.limit.as_ref().expect("rwnd-limited row is highlighted");
    assert_eq!(l.kind, LimitKind::ReceiveWindow, "{}", l.hint);
    // The kernel books only the time between a full window and the ACK that opens it, so
    // even a fully window-bound stream shows about half its busy time as limited.
    assert!(l.share >= 0.2, "{l:?}");
    assert!(
        l.hint.contains("the receiver's net.ipv4.tcp_rmem"),
        "{}",
        l.hint
    );
    // The window is at most the receive buffer; the rate at most window / RTT.
    let w = u64::from(row.snd_wnd_bytes.unwrap_or(0));
    assert!(w > 0 && w <= 128 << 10, "{w}");
    let rate = row.send_rate_bps.expect("interval rate");
    assert!(
        rate <= w * 8 * 10 * 11 / 10,
        "{rate} bit/s with a {w} B window at 100 ms"
    );

    // Sender locked at SO_SNDBUF 64 KiB (128 KiB of buffer, autotuning off): the send buffer.
    let row = diagnose(&topo, 5401, 64 << 10, 0, &ctx);
    eprintln!("sndbuf case: {row:?}");
    let l = row
        .limit
        .as_ref()
        .expect("sndbuf-limited row is highlighted");
    assert_eq!(l.kind, LimitKind::SendBuffer, "{}", l.hint);
    assert_eq!(row.sndbuf_bytes, Some(128 << 10));
    assert!(
        l.hint.contains("send buffer fixed at 128 KiB"),
        "{}",
        l.hint
    );
    assert!(l.hint.contains("SO_SNDBUF"), "{}", l.hint);
    let _: Option<HostLimits> = limits;
}
