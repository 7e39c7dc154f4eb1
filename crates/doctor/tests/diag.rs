//! The inet_diag parser on captured messages (tests/fixtures/diag, made by
//! `examples/capture_diag.rs` on Linux 6.18 in a fresh namespace) and on live sockets this test
//! creates, on loopback and inside a network namespace of its own.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use tcptune_core::TcpState;
use tcptune_doctor::diag::{dump_tcp, parse_messages, DiagConn, DiagSocket, NlItem};
use tcptune_testkit::{Need, Netns};

fn fixture_chunks(name: &str) -> Vec<Vec<u8>> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/diag")
        .join(name);
    let raw = std::fs::read(&p).expect("fixture");
    let mut out = Vec::new();
    let mut off = 0;
    while off + 4 <= raw.len() {
        let len = u32::from_ne_bytes(raw[off..off + 4].try_into().expect("4 bytes")) as usize;
        out.push(raw[off + 4..off + 4 + len].to_vec());
        off += 4 + len;
    }
    out
}

fn fixture_conns(name: &str) -> (Vec<DiagConn>, bool) {
    let mut conns = Vec::new();
    let mut done = false;
    for chunk in fixture_chunks(name) {
        for item in parse_messages(&chunk).expect("captured messages parse") {
            match item {
                NlItem::Conn(c) => conns.push(*c),
                NlItem::Done => done = true,
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    (conns, done)
}

fn check_capture(name: &str, port: u16, family: u8) {
    let (conns, done) = fixture_conns(name);
    assert!(done, "dump ends with NLMSG_DONE");
    assert_eq!(conns.len(), 3, "{conns:#?}");
    assert!(conns.iter().all(|c| c.family == family));
    let listener = conns
        .iter()
        .find(|c| c.state == TcpState::Listen)
        .expect("listener");
    assert_eq!(listener.local.port(), port);
    assert!(listener.local.ip().is_loopback());
    let client = conns
        .iter()
        .find(|c| c.state == TcpState::Established && c.remote.port() == port)
        .expect("client");
    let server = conns
        .iter()
        .find(|c| c.state == TcpState::Established && c.local.port() == port)
        .expect("server side");
    assert_eq!(client.local, server.remote);
    assert_eq!(client.remote, server.local);
    let ct = client.tcp.as_ref().expect("client tcp_info");
    let st = server.tcp.as_ref().expect("server tcp_info");
    assert_eq!(client.tcp_info_len, 280, "Linux 6.18 tcp_info");
    // 1 MiB went from client to server.
    assert!(ct.bytes_acked.unwrap_or(0) >= 1 << 20, "{ct:?}");
    assert!(st.bytes_received.unwrap_or(0) >= 1 << 20, "{st:?}");
    assert!(ct.rtt_us > 0 && ct.snd_mss_bytes > 0 && ct.snd_cwnd_segs > 0);
    assert!(ct.sndbuf_bytes.unwrap_or(0) > 0 && st.rcvbuf_bytes.unwrap_or(0) > 0);
    assert!(client.congestion.as_deref().is_some_and(|c| !c.is_empty()));
    assert_eq!(client.skmeminfo.as_ref().map(Vec::len), Some(9));
    assert_ne!(client.cookie, server.cookie);
    assert!(client.inode != 0 && server.inode != 0);
}

#[test]
fn captured_ipv4_dump_decodes_listener_and_both_ends() {
    check_capture("inet.bin", 40001, libc::AF_INET as u8);
}

#[test]
fn captured_ipv6_dump_decodes_listener_and_both_ends() {
    check_capture("inet6.bin", 40002, libc::AF_INET6 as u8);
}

#[test]
fn captured_dump_cut_anywhere_never_panics() {
    for chunk in fixture_chunks("inet6.bin") {
        for cut in 0..chunk.len() {
            let _ = parse_messages(&chunk[..cut]);
        }
    }
}

fn transfer_pair(bind: &str) -> Option<(TcpStream, TcpStream)> {
    let l = TcpListener::bind(bind).ok()?;
    let mut c = TcpStream::connect(l.local_addr().ok()?).ok()?;
    let (mut s, _) = l.accept().ok()?;
    c.write_all(&[1u8; 200_000]).ok()?;
    let mut got = vec![0u8; 200_000];
    s.read_exact(&mut got).ok()?;
    Some((c, s))
}

fn find(conns: &[DiagConn], local: SocketAddr, remote: SocketAddr) -> Option<&DiagConn> {
    conns
        .iter()
        .find(|c| c.local == local && c.remote == remote)
}

#[test]
fn live_ipv4_and_ipv6_loopback_connections_appear_with_tcp_info() {
    let mut sock = DiagSocket::open().expect("netlink");
    let (c4, _s4) = transfer_pair("127.0.0.1:0").expect("IPv4 loopback");
    let v6 = transfer_pair("[::1]:0");
    let all = dump_tcp(&mut sock).expect("dump");
    let me = find(&all, c4.local_addr().unwrap(), c4.peer_addr().unwrap()).expect("v4 client");
    assert!(me.tcp.as_ref().unwrap().bytes_acked.unwrap_or(0) >= 200_000);
    match v6 {
        Some((c6, _s6)) => {
            let all = dump_tcp(&mut sock).expect("dump");
            let me =
                find(&all, c6.local_addr().unwrap(), c6.peer_addr().unwrap()).expect("v6 client");
            assert_eq!(me.family, libc::AF_INET6 as u8);
            assert!(me.tcp.as_ref().unwrap().bytes_acked.unwrap_or(0) >= 200_000);
        }
        None => {
            assert!(!tcptune_testkit::ci(), "IPv6 loopback unavailable under CI");
            eprintln!("skipping the IPv6 part: no ::1 on this host");
        }
    }
}

/// A namespace of the test's own (named as root, in a user namespace otherwise): the
/// dump runs in a process inside it, this test binary again as a helper.
fn can_use_namespaces() -> bool {
    tcptune_testkit::require("dump_inside_a_fresh_namespace", &[Need::Netns])
}

#[test]
fn dump_inside_a_fresh_namespace_sees_exactly_its_own_sockets() {
    if !can_use_namespaces() {
        return;
    }
    let ns = Netns::new("doc");
    let exe = std::env::current_exe().expect("current_exe");
    let out = ns
        .command(exe)
        .args([
            "--exact",
            "helper_dump_in_this_namespace",
            "--include-ignored",
            "--nocapture",
        ])
        .env("TT_DIAG_HELPER", "1")
        .output()
        .expect("the helper in the namespace");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("tt-diag "))
        .unwrap_or_else(|| {
            panic!(
                "no result from the helper:\n{stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let f: Vec<&str> = line.split_whitespace().collect();
    let [n, acked, cookie, local] = f[..] else {
        panic!("unexpected helper line {line}")
    };
    let (n, acked, cookie): (usize, u64, u64) = (
        n.parse().expect("count"),
        acked.parse().expect("acked"),
        cookie.parse().expect("cookie"),
    );
    let local: SocketAddr = local.parse().expect("address");
    // Two ends of the IPv4 connection, two of the IPv6 one (if ::1 exists), nothing else:
    // the other helpers' and the host's sockets live in other namespaces.
    assert!(n == 2 || n == 4, "{line}");
    assert!(acked >= 200_000, "{line}");
    // And the host namespace's dump does not contain them.
    let mut sock = DiagSocket::open().expect("netlink");
    let host = dump_tcp(&mut sock).expect("dump");
    assert!(host.iter().all(|c| c.cookie != cookie || c.local != local));
}

/// Not a test on its own: run inside the namespace by the test above; prints how many
/// connections the namespace's dump holds, and the IPv4 client's bytes acked, cookie and
/// address.
#[test]
#[ignore = "helper process for dump_inside_a_fresh_namespace_sees_exactly_its_own_sockets"]
fn helper_dump_in_this_namespace() {
    if std::env::var_os("TT_DIAG_HELPER").is_none() {
        return;
    }
    let (c4, s4) = transfer_pair("127.0.0.1:0").expect("v4 in netns");
    let v6 = transfer_pair("[::1]:0");
    let mut sock = DiagSocket::open().expect("netlink in netns");
    let conns = dump_tcp(&mut sock).expect("dump in netns");
    let client = (c4.local_addr().unwrap(), c4.peer_addr().unwrap());
    let me = find(&conns, client.0, client.1).expect("v4 client in dump");
    println!(
        "tt-diag {} {} {} {}",
        conns.len(),
        me.tcp.as_ref().and_then(|t| t.bytes_acked).unwrap_or(0),
        me.cookie,
        me.local
    );
    drop((c4, s4, v6));
}
