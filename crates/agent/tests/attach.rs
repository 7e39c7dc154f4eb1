//! The program loads (the verifier accepts it on this kernel), attaches to a private cgroup,
//! tunes a connection made from that cgroup across a veth pair between two network
//! namespaces of the test's own, and reports the connection's close; a listener opened in
//! that cgroup offers a known peer a large first window, a stranger 64 KiB, and the
//! connections it accepts read from the first byte.
//!
//! Needs root, cgroup v2, clang and libbpf-dev (at build time), python3 and ip: outside CI it
//! skips and says why; under `CI=true` it must run.

use std::io::{BufRead, Read};
use std::net::IpAddr;
use std::time::{Duration, Instant};
use tcptune_agent::cgroup::{cgroup2_mount, ChildCgroup};
use tcptune_agent::loader::{program_built, Loaded};
use tcptune_agent::maps::PolicyValue;
use tcptune_agent::policy::{stranger_segments, ListenOffer};
use tcptune_agent::record::{self, Kind, Opened};
use tcptune_agent::Mode;
use tcptune_testkit::{ci, require, Need, Netns};

/// The request: 1 MiB (the kernel stores twice that, capped at wmem_max).
const SNDBUF: u32 = 1 << 20;
const BYTES: usize = 3 << 20;

fn wmem_max() -> u64 {
    std::fs::read_to_string("/proc/sys/net/core/wmem_max")
        .expect("reading wmem_max")
        .trim()
        .parse()
        .expect("wmem_max is a number")
}

/// Whether `test` can load the program and run traffic in namespaces here (root, ip,
/// python3, and a build with clang and libbpf-dev); outside CI it skips and says why.
fn can_attach(test: &str) -> bool {
    if !require(
        test,
        &[
            Need::Root,
            Need::Program("ip"),
            Need::Program("python3"),
            Need::Program("clang"),
        ],
    ) {
        return false;
    }
    if !program_built() {
        assert!(
            !ci(),
            "{test}: CI=true but the BPF program was not built (install clang libbpf-dev)"
        );
        eprintln!("skipping {test}: the BPF program was not built (apt-get install clang libbpf-dev, then rebuild)");
        return false;
    }
    true
}

/// The program loaded in enforce mode (with `offer` for listeners) and one policy, for
/// `peer`, in its map, attached to `cgroup`.
fn enforcing(
    cgroup: &ChildCgroup,
    offer: ListenOffer,
    peer: IpAddr,
    policy: &PolicyValue,
) -> Loaded {
    let mut agent = Loaded::load().expect("the verifier accepts the program");
    agent
        .set_config(Mode::Enforce, None, offer)
        .expect("config");
    agent.set_policy(peer, policy).expect("policy");
    agent
        .attach(cgroup.path(), false)
        .expect("attach to the cgroup");
    agent
}

/// A test's private cgroup and veth pair (side b holds 10.231.0.2, the peer), or `None`
/// when it cannot attach here (it said why).
fn veth_test(test: &str, cgroup: &str, veth: &str) -> Option<(ChildCgroup, Netns, Netns, IpAddr)> {
    if !can_attach(test) {
        return None;
    }
    let mount = cgroup2_mount().expect("a cgroup2 mount");
    let cgroup = ChildCgroup::create(&mount, cgroup).expect("a private cgroup");
    let (a, b) = Netns::veth_pair(veth);
    Some((cgroup, a, b, "10.231.0.2".parse().expect("ip")))
}

/// Run a Python client `script` in side `a`, inside `cgroup`; its output, once it succeeded.
fn python_in(a: &Netns, cgroup: &ChildCgroup, script: &str) -> std::process::Output {
    let mut cmd = a.command("python3");
    cmd.arg("-c").arg(script);
    cgroup.add_to(&mut cmd).expect("join the cgroup");
    let out = cmd.output().expect("running the client");
    assert!(
        out.status.success(),
        "client: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A listener on the side-b address of a veth pair, and its port.
fn listen_in(b: &Netns) -> (std::net::TcpListener, u16) {
    let listener = b.run_in(|| std::net::TcpListener::bind("10.231.0.2:0").expect("bind in b"));
    let port = listener.local_addr().expect("port").port();
    (listener, port)
}

/// The close records `keep` selects, read from the ring buffer until `enough` says so or
/// 10 s have passed.
fn close_records(
    agent: &mut Loaded,
    keep: impl Fn(&record::ConnRecord) -> bool,
    enough: impl Fn(&[record::ConnRecord]) -> bool,
) -> Vec<record::ConnRecord> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut records = Vec::new();
    while !enough(&records) && Instant::now() < deadline {
        agent
            .wait_readable(Duration::from_millis(200))
            .expect("poll");
        for raw in agent.drain(64) {
            let r = record::parse(&raw).expect("a well-formed record");
            if r.kind == Kind::Close && keep(&r) {
                records.push(r);
            }
        }
    }
    records
}

#[test]
fn tunes_a_connection_in_its_cgroup_and_reports_its_close() {
    let Some((cgroup, a, b, peer)) = veth_test(
        "tunes_a_connection_in_its_cgroup_and_reports_its_close",
        "tt-agent-test",
        "ag",
    ) else {
        return;
    };

    let mut agent = enforcing(
        &cgroup,
        Default::default(),
        peer,
        &PolicyValue {
            sndbuf: SNDBUF,
            rtt_lo_us: 0,
            rtt_hi_us: 1_000_000,
            id: 42,
            ..PolicyValue::default()
        },
    );

    let (listener, port) = listen_in(&b);
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        let mut got = Vec::new();
        s.read_to_end(&mut got).expect("read");
        got.len()
    });
    let script = format!(
        "import socket\n\
         s = socket.create_connection(('10.231.0.2', {port}))\n\
         print(s.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF), flush=True)\n\
         s.sendall(b'x' * {BYTES})\n\
         s.shutdown(socket.SHUT_WR)\n\
         while s.recv(65536):\n    pass\n\
         s.close()\n"
    );
    let out = python_in(&a, &cgroup, &script);
    assert_eq!(server.join().expect("server"), BYTES);
    let sndbuf: u64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("the client prints its SO_SNDBUF");
    assert_eq!(
        sndbuf,
        2 * u64::from(SNDBUF).min(wmem_max()),
        "the program set SO_SNDBUF on the client's socket"
    );

    let r = close_records(
        &mut agent,
        |r| r.peer == peer && r.peer_port == port,
        |got| !got.is_empty(),
    )
    .pop()
    .expect("a close record for the client's connection");
    assert_eq!(r.opened, Opened::Active);
    assert_eq!(r.policy_id, 42);
    assert_eq!(r.applied, vec!["sndbuf"]);
    assert!(r.tuned());
    assert!(!r.app_locked_sndbuf);
    assert!(r.bytes_acked >= BYTES as u64, "{r:?}");
    assert!(r.handshake_rtt_us > 0 && r.min_rtt_us > 0, "{r:?}");
    assert!(
        agent.stat(tcptune_agent::maps::STAT_TUNED).expect("stat") >= 1,
        "the tuned counter counts it"
    );
    drop(agent);
    drop(cgroup);
}

/// The window offered to the listener's known peers in the test (a listener's default is
/// 64 KiB: `tcp_rmem[1]` of 128 KiB at a scaling ratio of one half).
const OFFER: u32 = 1 << 20;

/// The name of the veth device of `ns` (the pair has one device on each side).
fn veth_of(ns: &Netns) -> String {
    let out = ns
        .command("ip")
        .args(["-o", "link", "show", "type", "veth"])
        .output()
        .expect("ip link");
    let text = String::from_utf8_lossy(&out.stdout);
    let name = text
        .split(':')
        .nth(1)
        .map(|n| n.trim().split('@').next().unwrap_or("").to_string())
        .filter(|n| !n.is_empty());
    name.unwrap_or_else(|| panic!("no veth in {}: {text}", ns.name()))
}

/// A request/response server in the agent's cgroup (in namespace b): it prints its port and
/// listener's receive buffer, then for each of `n` connections reads a request with one
/// `recv` (a socket left with a large low-water mark would wait for more, and time out),
/// answers it, and prints the peer, the accepted socket's SO_RCVLOWAT and what it read.
const SERVER: &str = r#"
import socket, sys
l = socket.socket()
l.bind(('0.0.0.0', 0))
l.listen(8)
print(l.getsockname()[1], l.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF), flush=True)
l.settimeout(60)
for _ in range(int(sys.argv[1])):
    c, peer = l.accept()
    c.settimeout(30)
    lowat = c.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT)
    try:
        got = len(c.recv(4096))
    except socket.timeout:
        got = -1
    c.sendall(b'ok')
    print(peer[0], lowat, got, flush=True)
    c.close()
l.close()
"#;

/// A plain client (namespace a, outside the cgroup): from each source address, connect,
/// send a 5-byte request, read the answer, and print the window the server advertised with
/// it (`tcpi_snd_wnd`, offset 228 of `struct tcp_info`), which is its window right after the
/// handshake (its SYN-ACK's is unscaled, 64 KiB at most; the first scaled one comes with
/// the ACK of the request).
const CLIENT: &str = r#"
import socket, struct, sys
port = int(sys.argv[1])
for src in sys.argv[2:]:
    s = socket.socket()
    s.bind((src, 0))
    s.settimeout(30)
    s.connect(('10.231.0.2', port))
    s.sendall(b'hello')
    assert s.recv(16) == b'ok'
    info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    print(src, struct.unpack_from('I', info, 228)[0], flush=True)
    s.close()
"#;

#[test]
fn a_listener_offers_known_peers_a_large_first_window_strangers_64k_and_reads_at_once() {
    let test = "a_listener_offers_known_peers_a_large_first_window_strangers_64k_and_reads_at_once";
    if !can_attach(test) {
        return;
    }
    let mount = cgroup2_mount().expect("a cgroup2 mount");
    let cgroup = ChildCgroup::create(&mount, "tt-agent-listen").expect("a private cgroup");
    let (a, b) = Netns::veth_pair("al");
    // A second address in a, for the stranger, reachable from b.
    let (va, vb) = (veth_of(&a), veth_of(&b));
    tcptune_testkit::ip(&["-n", a.name(), "addr", "add", "10.232.0.1/32", "dev", &va]);
    tcptune_testkit::ip(&["-n", b.name(), "route", "add", "10.232.0.1/32", "dev", &vb]);
    let known: IpAddr = "10.231.0.1".parse().expect("ip");
    let stranger: IpAddr = "10.232.0.1".parse().expect("ip");

    let offer = ListenOffer {
        window_bytes: OFFER,
        stranger_segments: stranger_segments(),
    };
    // A policy that sets nothing but makes the peer known.
    let mut agent = enforcing(
        &cgroup,
        offer,
        known,
        &PolicyValue {
            rtt_lo_us: 0,
            rtt_hi_us: 10_000_000,
            id: 43,
            ..PolicyValue::default()
        },
    );

    let mut cmd = b.command("python3");
    cmd.arg("-c").arg(SERVER).arg("2");
    cmd.stdout(std::process::Stdio::piped());
    cgroup.add_to(&mut cmd).expect("join the cgroup");
    let mut server = cmd.spawn().expect("the server");
    let mut lines = std::io::BufReader::new(server.stdout.take().expect("stdout")).lines();
    let first = lines.next().expect("the server's port").expect("read");
    let mut words = first.split_whitespace();
    let port: u16 = words.next().and_then(|w| w.parse().ok()).expect("a port");
    let listener_rcvbuf: u64 = words.next().and_then(|w| w.parse().ok()).expect("rcvbuf");
    // SO_RCVLOWAT raised the listener's buffer to hold the offer (without locking it).
    assert!(
        listener_rcvbuf >= u64::from(OFFER),
        "the listener's receive buffer is {listener_rcvbuf}"
    );

    let out = a
        .command("python3")
        .arg("-c")
        .arg(CLIENT)
        .arg(port.to_string())
        .arg(known.to_string())
        .arg(stranger.to_string())
        .output()
        .expect("the client");
    assert!(
        out.status.success(),
        "client: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = server.wait().expect("the server");
    let served: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(status.success(), "server: {served:?}");
    let windows: Vec<(String, u64)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((w.next()?.to_string(), w.next()?.parse().ok()?))
        })
        .collect();
    eprintln!("{test}: client windows {windows:?}; server {served:?}");
    let window_of = |ip: IpAddr| {
        windows
            .iter()
            .find(|(a, _)| *a == ip.to_string())
            .map(|(_, w)| *w)
            .unwrap_or_else(|| panic!("no window for {ip}: {windows:?}"))
    };
    // (a) A known peer sees more than 64 KiB right after the handshake. (The window on the
    // wire is scaled: 45 segments, 65160 bytes, read back as 65536.)
    assert!(
        window_of(known) > 65_536,
        "the known peer's window {}",
        window_of(known)
    );
    // (b) A stranger does not, although the listener holds as much for it.
    assert!(
        window_of(stranger) <= 65_536,
        "the stranger's window {}",
        window_of(stranger)
    );
    // (c) Every accepted socket wakes its reader at the first byte: SO_RCVLOWAT 1, and the
    // 5-byte request was read by one recv.
    for ip in [known, stranger] {
        let line = served
            .iter()
            .find(|l| l.starts_with(&format!("{ip} ")))
            .unwrap_or_else(|| panic!("the server did not serve {ip}: {served:?}"));
        assert_eq!(line, &format!("{ip} 1 5"), "accepted from {ip}");
    }

    // The close records say which peer got the window and which was held.
    let both = |got: &[record::ConnRecord]| {
        [known, stranger]
            .iter()
            .all(|ip| got.iter().any(|r| r.peer == *ip))
    };
    let records = close_records(
        &mut agent,
        |r| r.local_port == port && (r.peer == known || r.peer == stranger),
        both,
    );
    let last_of = |ip: IpAddr| records.iter().rev().find(|r| r.peer == ip).cloned();
    let k = last_of(known).expect("a close record for the known peer");
    assert_eq!(k.opened, Opened::Passive);
    assert!(k.applied.contains(&"receive_window"), "{k:?}");
    let st = last_of(stranger).expect("a close record for the stranger");
    assert!(st.applied.is_empty(), "{st:?}");
    assert_ne!(
        st.applied_bits & record::applied::RWND_HELD,
        0,
        "the stranger was held: {st:?}"
    );
    assert_eq!(
        agent
            .stat(tcptune_agent::maps::STAT_LISTENERS)
            .expect("stat"),
        1,
        "one listener raised"
    );
    drop(agent);
    drop(cgroup);
}

/// `BPF_PROG_ATTACH` of the leading fields of `union bpf_attr`.
#[repr(C)]
#[derive(Default)]
struct AttachAttr {
    target_fd: u32,
    attach_bpf_fd: u32,
    attach_type: u32,
    attach_flags: u32,
    pad: [u32; 12],
}

#[test]
fn a_program_a_dead_agent_left_attached_the_legacy_way_is_detached_at_start() {
    use std::os::fd::{AsFd, AsRawFd};
    let test = "a_program_a_dead_agent_left_attached_the_legacy_way_is_detached_at_start";
    if !require(test, &[Need::Root, Need::Program("clang")]) {
        return;
    }
    if !program_built() {
        assert!(!ci(), "{test}: CI=true but the BPF program was not built");
        eprintln!("skipping {test}: the BPF program was not built (apt-get install clang libbpf-dev, then rebuild)");
        return;
    }
    let mount = cgroup2_mount().expect("a cgroup2 mount");
    let cgroup = ChildCgroup::create(&mount, "tt-agent-stale").expect("a private cgroup");
    let loaded = Loaded::load().expect("load");
    let id = loaded.program_id().expect("id");
    // Attach it as bpftool (or an old agent) would: no link, it outlives its loader.
    let info = aya::programs::loaded_programs()
        .flatten()
        .find(|p| p.id() == id)
        .expect("our program is loaded");
    let prog_fd = info.fd().expect("program fd");
    let target = std::fs::File::open(cgroup.path()).expect("open cgroup");
    let attr = AttachAttr {
        target_fd: target.as_raw_fd() as u32,
        attach_bpf_fd: prog_fd.as_fd().as_raw_fd() as u32,
        attach_type: tcptune_agent::stale::BPF_CGROUP_SOCK_OPS,
        ..AttachAttr::default()
    };
    // SAFETY: bpf(2) BPF_PROG_ATTACH (8) with a zero-padded attr of the size passed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            8 as libc::c_long,
            &attr as *const AttachAttr,
            std::mem::size_of::<AttachAttr>(),
        )
    };
    assert_eq!(r, 0, "BPF_PROG_ATTACH: {}", std::io::Error::last_os_error());
    drop(prog_fd);
    drop(loaded); // the "agent" dies; the legacy attachment stays
    let detached = tcptune_agent::stale::detach_stale(cgroup.path()).expect("sweep");
    assert_eq!(detached, vec![id]);
    // Nothing of ours is left to detach.
    assert!(tcptune_agent::stale::detach_stale(cgroup.path())
        .expect("sweep")
        .is_empty());
    drop(cgroup);
}

/// What one connection of [`an_applications_own_pacing_and_congestion_control_win`]'s client
/// saw: its local port, its pacing cap and congestion control once connected, its cap at the
/// end.
struct Seen {
    port: u16,
    pacing_at_connect: i64,
    cc_at_connect: String,
    pacing_at_end: i64,
}

#[test]
fn an_applications_own_pacing_and_congestion_control_win() {
    let Some((cgroup, a, b, peer)) = veth_test(
        "an_applications_own_pacing_and_congestion_control_win",
        "tt-agent-own",
        "ao",
    ) else {
        return;
    };
    let mut cc = [0u8; 16];
    cc[..4].copy_from_slice(b"reno");
    const AGENT_RATE: u64 = 50_000_000;
    let mut agent = enforcing(
        &cgroup,
        Default::default(),
        peer,
        &PolicyValue {
            pacing_bytes_per_s: AGENT_RATE,
            iw: 20,
            flags: tcptune_agent::maps::POLICY_FULL_PIPE,
            rtt_lo_us: 0,
            rtt_hi_us: 1_000_000,
            id: 7,
            cc,
            ..PolicyValue::default()
        },
    );

    let (listener, port) = listen_in(&b);
    let server = std::thread::spawn(move || {
        for _ in 0..3 {
            let (mut s, _) = listener.accept().expect("accept");
            let mut got = Vec::new();
            s.read_to_end(&mut got).expect("read");
        }
    });
    // Three connections in turn: one that sets nothing; one that paces itself and chooses
    // its congestion control before connect() (as tcptune's engine does on a known path);
    // one that sets its own cap once connected, over the agent's (as a process that paces
    // by what it measures does). 2 MB each: 40 ms at the agent's rate, well past the two
    // round trips after which the agent lifts its own cap.
    let script = format!(
        "import socket\n\
         def pace(s): return s.getsockopt(socket.SOL_SOCKET, 47)\n\
         def cc(s): return s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).split(b'\\0')[0].decode()\n\
         def run(before, after):\n    \
             s = socket.socket()\n    \
             before(s)\n    \
             s.connect(('10.231.0.2', {port}))\n    \
             after(s)\n    \
             p, c = pace(s), cc(s)\n    \
             s.sendall(b'x' * 2000000)\n    \
             s.shutdown(socket.SHUT_WR)\n    \
             while s.recv(65536):\n        pass\n    \
             print(s.getsockname()[1], p, c, pace(s), flush=True)\n    \
             s.close()\n\
         def nothing(s): pass\n\
         def own(s):\n    \
             s.setsockopt(socket.SOL_SOCKET, 47, 12345678)\n    \
             s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b'cubic')\n\
         def over(s): s.setsockopt(socket.SOL_SOCKET, 47, 7654321)\n\
         run(nothing, nothing)\nrun(own, nothing)\nrun(nothing, over)\n"
    );
    let out = python_in(&a, &cgroup, &script);
    server.join().expect("server");
    let seen: Vec<Seen> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 4, "{l}");
            Seen {
                port: f[0].parse().expect("port"),
                pacing_at_connect: f[1].parse().expect("pacing"),
                cc_at_connect: f[2].to_string(),
                pacing_at_end: f[3].parse().expect("pacing"),
            }
        })
        .collect();
    assert_eq!(seen.len(), 3, "{}", String::from_utf8_lossy(&out.stdout));

    let records = close_records(&mut agent, |r| r.peer == peer, |got| got.len() >= 3);
    let record_of = |s: &Seen| {
        records
            .iter()
            .find(|r| r.local_port == s.port)
            .unwrap_or_else(|| panic!("no close record for port {}: {records:?}", s.port))
            .clone()
    };
    // Nothing set by the application: the agent's cap (the rate over the destination's open
    // connections, 1 or 2 while the previous one closes), its congestion control and window;
    // its cap lifted after two round trips.
    let plain = &seen[0];
    assert!(
        [AGENT_RATE as i64, AGENT_RATE as i64 / 2].contains(&plain.pacing_at_connect),
        "the agent paced it: {}",
        plain.pacing_at_connect
    );
    assert_eq!(plain.cc_at_connect, "reno");
    assert_eq!(plain.pacing_at_end, -1, "the agent lifted its cap");
    let r = record_of(plain);
    assert_eq!(
        r.applied,
        vec!["congestion", "pacing", "initial_window"],
        "{r:?}"
    );
    assert!(r.applied_bits & record::applied::LIFTED != 0, "{r:?}");
    assert!(!r.app_paced && !r.app_congestion, "{r:?}");
    // The application's own, set before connect(): left as it was, and no larger window
    // (careful resume's window goes only with the agent's own pacing).
    let own = &seen[1];
    assert_eq!(
        (own.pacing_at_connect, own.cc_at_connect.as_str()),
        (12_345_678, "cubic")
    );
    assert_eq!(
        own.pacing_at_end, 12_345_678,
        "the agent left the application's cap"
    );
    let r = record_of(own);
    assert!(r.applied.is_empty(), "nothing applied: {r:?}");
    assert!(r.app_paced && r.app_congestion, "{r:?}");
    // The application's own, set over the agent's once connected: the agent's two round
    // trips end with the application's cap still in place.
    let over = &seen[2];
    assert_eq!(over.pacing_at_connect, 7_654_321);
    assert_eq!(
        over.pacing_at_end, 7_654_321,
        "the agent did not lift the application's cap"
    );
    let r = record_of(over);
    assert!(r.applied.contains(&"pacing"), "{r:?}");
    assert!(r.applied_bits & record::applied::LIFTED == 0, "{r:?}");
    assert!(r.app_paced, "{r:?}");
    drop(agent);
    drop(cgroup);
}

/// Pacing divides a destination's rate among the connections that share it: one that carries
/// data, and one just opened, but not an idle one opened earlier (iperf3's control
/// connection), which took half the path from the one that carried the data.
#[test]
fn an_idle_connection_takes_no_share_of_the_pacing() {
    let Some((cgroup, a, b, peer)) = veth_test(
        "an_idle_connection_takes_no_share_of_the_pacing",
        "tt-agent-share",
        "as",
    ) else {
        return;
    };
    const AGENT_RATE: u64 = 50_000_000;
    let agent = enforcing(
        &cgroup,
        Default::default(),
        peer,
        &PolicyValue {
            pacing_bytes_per_s: AGENT_RATE,
            flags: tcptune_agent::maps::POLICY_FULL_PIPE,
            rtt_lo_us: 0,
            rtt_hi_us: 1_000_000,
            id: 8,
            ..PolicyValue::default()
        },
    );
    let (listener, port) = listen_in(&b);
    let server = std::thread::spawn(move || {
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let (mut s, _) = listener.accept().expect("accept");
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    s.read_to_end(&mut got).expect("read");
                })
            })
            .collect();
        for r in readers {
            r.join().expect("reader");
        }
    });
    // An idle connection (a few bytes, as a control connection sends); 50 ms later one that
    // sends 2 MB and stays open; then a third beside both.
    let script = format!(
        "import socket, time\n\
         def pace(s): return s.getsockopt(socket.SOL_SOCKET, 47)\n\
         def conn():\n    \
             s = socket.socket()\n    \
             s.connect(('10.231.0.2', {port}))\n    \
             return s\n\
         idle = conn()\n\
         idle.sendall(b'hello')\n\
         time.sleep(0.05)\n\
         bulk = conn()\n\
         alone = pace(bulk)\n\
         bulk.sendall(b'x' * 2000000)\n\
         time.sleep(0.3)\n\
         third = conn()\n\
         beside = pace(third)\n\
         for s in (idle, bulk, third):\n    \
             s.shutdown(socket.SHUT_WR)\n\
         for s in (idle, bulk, third):\n    \
             while s.recv(65536):\n        pass\n    \
             s.close()\n\
         print(alone, beside, flush=True)\n"
    );
    let out = python_in(&a, &cgroup, &script);
    server.join().expect("server");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let f: Vec<i64> = stdout
        .split_whitespace()
        .map(|v| v.parse().expect("a pacing rate"))
        .collect();
    assert_eq!(f.len(), 2, "{stdout}");
    assert_eq!(
        f[0], AGENT_RATE as i64,
        "the idle connection opened earlier took no share"
    );
    assert_eq!(
        f[1],
        AGENT_RATE as i64 / 2,
        "the connection that carries data and the new one share the path"
    );
    drop(agent);
    drop(cgroup);
}
