//! The program loads (the verifier accepts it on this kernel), attaches to a private cgroup,
//! tunes a connection made from that cgroup across a veth pair between two network
//! namespaces of the test's own, and reports the connection's close.
//!
//! Needs root, cgroup v2, clang and libbpf-dev (at build time), python3 and ip: outside CI it
//! skips and says why; under `CI=true` it must run.

use std::io::Read;
use std::net::IpAddr;
use std::time::{Duration, Instant};
use tcptune_agent::cgroup::{cgroup2_mount, ChildCgroup};
use tcptune_agent::loader::{program_built, Loaded};
use tcptune_agent::maps::PolicyValue;
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

#[test]
fn tunes_a_connection_in_its_cgroup_and_reports_its_close() {
    let test = "tunes_a_connection_in_its_cgroup_and_reports_its_close";
    if !require(
        test,
        &[
            Need::Root,
            Need::Program("ip"),
            Need::Program("python3"),
            Need::Program("clang"),
        ],
    ) {
        return;
    }
    if !program_built() {
        assert!(
            !ci(),
            "{test}: CI=true but the BPF program was not built (install clang libbpf-dev)"
        );
        eprintln!("skipping {test}: the BPF program was not built (apt-get install clang libbpf-dev, then rebuild)");
        return;
    }
    let mount = cgroup2_mount().expect("a cgroup2 mount");
    let cgroup = ChildCgroup::create(&mount, "tt-agent-test").expect("a private cgroup");
    let (a, b) = Netns::veth_pair("ag");
    let peer: IpAddr = "10.231.0.2".parse().expect("ip");

    let mut agent = Loaded::load().expect("the verifier accepts the program");
    agent.set_config(Mode::Enforce, None).expect("mode");
    agent
        .set_policy(
            peer,
            &PolicyValue {
                sndbuf: SNDBUF,
                rtt_lo_us: 0,
                rtt_hi_us: 1_000_000,
                id: 42,
                ..PolicyValue::default()
            },
        )
        .expect("policy");
    agent
        .attach(cgroup.path(), false)
        .expect("attach to the cgroup");

    let listener = b.run_in(|| std::net::TcpListener::bind("10.231.0.2:0").expect("bind in b"));
    let port = listener.local_addr().expect("port").port();
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
    let mut cmd = a.command("python3");
    cmd.arg("-c").arg(script);
    cgroup.add_to(&mut cmd).expect("join the cgroup");
    let out = cmd.output().expect("running the client");
    assert!(
        out.status.success(),
        "client: {}",
        String::from_utf8_lossy(&out.stderr)
    );
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

    let deadline = Instant::now() + Duration::from_secs(10);
    let mut found = None;
    while found.is_none() && Instant::now() < deadline {
        agent
            .wait_readable(Duration::from_millis(200))
            .expect("poll");
        for raw in agent.drain(64) {
            let r = record::parse(&raw).expect("a well-formed record");
            if r.kind == Kind::Close && r.peer == peer && r.peer_port == port {
                found = Some(r);
            }
        }
    }
    let r = found.expect("a close record for the client's connection");
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
