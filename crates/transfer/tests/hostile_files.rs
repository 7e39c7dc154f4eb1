//! A file server under attack by a client that speaks the copy protocol (what `tcptune cp`
//! sends, with one field changed): each attack ends only its own session with one line that
//! names the budget, the server keeps running, and honest copies from the attacker's address
//! and from another one complete meanwhile.
//!
//! These attacks once aborted the whole server (a manifest size of 2^64 - 1 allocated
//! 145 TB of checksums) or grew it without bound (4 MB manifest records; resend records full
//! of one block). The memory each may take is bounded by the budgets they hit
//! (`files::budget`, the resend list), measured in `bench/hostile_files.sh`; a test process's
//! RSS is not asserted here.

mod common;

use common::{RawKeys, TestServer};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tcptune_core::{PathHint, TuneMode};
use tcptune_proto::copy::digest::block_cv;
use tcptune_proto::copy::wire::{Header, Tag, ToSender, Trailer};
use tcptune_proto::files::BLOCK_SIZE;
use tcptune_proto::keys::{BlockKey, SessionKeys};
use tcptune_transfer::client::copy::{copy, CopyConfig, Direction};
use tcptune_transfer::files::{FileJob, DEFAULT_MAX_MANIFEST_BYTES};
use tcptune_transfer::proto::{
    self, ClientMsg, DataHello, FrameReader, Phase, ServerMsg, TestParams, Token,
};
use tcptune_transfer::server::{FileShare, ServerConfig};

/// A directory removed on drop (unless it is the external server's share).
struct Tmp(PathBuf, bool);

impl Tmp {
    fn new(name: &str) -> Tmp {
        let d = std::env::temp_dir().join(format!(
            "tcptune-hostile-files-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("mkdir");
        Tmp(d, true)
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        if self.1 {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn loopback(n: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, n])
}

fn connect_from(from: IpAddr, to: SocketAddr) -> TcpStream {
    let fd = tcptune_sys::net::tcp_socket(&to).expect("socket");
    tcptune_sys::net::bind(&fd, &SocketAddr::new(from, 0)).expect("bind");
    tcptune_sys::net::connect(fd, &to, Duration::from_secs(5)).expect("connect")
}

/// The server under attack: by default one in this process sharing `root` with the
/// defaults of `tcptune serve --root`; with `TCPTUNE_HOSTILE_TARGET=ADDR` and
/// `TCPTUNE_HOSTILE_ROOT=DIR` a running `tcptune serve --root DIR` (bench/hostile_files.sh
/// measures its memory that way).
struct Target {
    addr: SocketAddr,
    local: Option<TestServer>,
}

impl Target {
    fn client(&self) -> tcptune_transfer::client::ClientConfig {
        match &self.local {
            Some(s) => s.client(),
            None => tcptune_transfer::client::ClientConfig::new(self.addr.to_string()),
        }
    }

    /// Sessions that failed, for a server of this process.
    fn stop(self) -> Option<u64> {
        self.local.map(|s| s.stop().sessions_failed)
    }
}

fn external() -> Option<(SocketAddr, PathBuf)> {
    let addr = std::env::var("TCPTUNE_HOSTILE_TARGET").ok()?;
    let root = std::env::var("TCPTUNE_HOSTILE_ROOT").ok()?;
    Some((
        addr.parse().expect("TCPTUNE_HOSTILE_TARGET=IP:PORT"),
        root.into(),
    ))
}

fn server(root: &Path) -> Target {
    match external() {
        Some((addr, _)) => Target { addr, local: None },
        None => {
            let s = TestServer::start(ServerConfig {
                files: Some(FileShare::new(root)),
                ..ServerConfig::default()
            });
            Target {
                addr: s.addr,
                local: Some(s),
            }
        }
    }
}

fn job(pull: bool) -> FileJob {
    FileJob {
        sources: if pull { vec!["big".into()] } else { vec![] },
        dest: (!pull).then(|| "in/".to_string()),
        recursive: true,
        resume: true,
        fsync: false,
        encrypt: false,
    }
}

/// The attacker's session, opened by hand up to its main phase's one data stream.
struct Raw {
    ctrl: TcpStream,
    reader: FrameReader,
    data: TcpStream,
    /// The session's keys (its blocks are tagged with them).
    keys: SessionKeys,
}

impl Raw {
    fn open(addr: SocketAddr, from: IpAddr, token: u8, job: FileJob) -> Raw {
        let pull = job.dest.is_none();
        let mut ctrl = connect_from(from, addr);
        let params = TestParams {
            tune: TuneMode::Kernel,
            streams: 1,
            message_size: 1 << 20,
            messages: 0,
            duration_ms: None,
            max_time_ms: None,
            reverse: pull,
            samples: false,
            congestion: None,
            seed: 7,
            corrupt_message: None,
            files: Some(job),
            share: false,
        };
        let kx = RawKeys::new(token);
        let msgs = [
            kx.hello(token, "hostile"),
            ClientMsg::Setup { params },
            ClientMsg::StartPhase {
                seq: 0,
                phase: Phase::Main,
                hint: PathHint::default(),
                streams: 1,
            },
        ];
        for m in &msgs {
            proto::write_msg(&mut ctrl, m).expect("control message");
        }
        let mut reader = FrameReader::new(proto::MAX_SERVER_FRAME);
        let keys = match next(&mut ctrl, &mut reader, Duration::from_secs(10)) {
            Some(m @ ServerMsg::Accepted { .. }) => kx.keys(&m, token),
            other => panic!("expected the session to be accepted, got {other:?}"),
        };
        let mut data = connect_from(from, addr);
        let hello = DataHello::sealed(&keys, Token([token; 16]), 0, 0);
        data.write_all(&hello.encode()).expect("data hello");
        Raw {
            ctrl,
            reader,
            data,
            keys,
        }
    }

    /// A JSON record of the sender (the 24-byte header, then the body).
    fn record(&mut self, body: &[u8]) -> std::io::Result<()> {
        let mut h = [0u8; 24];
        h[0] = 4;
        h[16..20].copy_from_slice(&(body.len() as u32).to_be_bytes());
        self.data.write_all(&h)?;
        self.data.write_all(body)
    }

    /// A frame of the receiver (a 4-byte length, then JSON).
    fn frame(&mut self, body: &str) -> std::io::Result<()> {
        self.data.write_all(&(body.len() as u32).to_be_bytes())?;
        self.data.write_all(body.as_bytes())
    }

    /// The line the server ended the session with: its `FileFailed` or `Abort` reason.
    fn refusal(&mut self) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            match next(&mut self.ctrl, &mut self.reader, Duration::from_secs(1)) {
                Some(ServerMsg::FileFailed { failure }) => return failure.message,
                Some(ServerMsg::Abort { reason, .. }) => return reason,
                _ => {}
            }
        }
        panic!("the server never refused the attack");
    }
}

fn next(s: &mut TcpStream, r: &mut FrameReader, wait: Duration) -> Option<ServerMsg> {
    s.set_read_timeout(Some(Duration::from_millis(50)))
        .expect("timeout");
    let deadline = Instant::now() + wait;
    loop {
        match r.poll_msg(s) {
            Ok(Some(m)) => return Some(m),
            Ok(None) if Instant::now() < deadline => {}
            _ => return None,
        }
    }
}

/// A file entry of a manifest as `tcptune cp` sends it.
fn entry(path: &str, size: u64, mtime_s: i64) -> serde_json::Value {
    serde_json::json!({
        "path": path, "kind": "file", "size": size, "mode": 0o644, "mtime_s": mtime_s,
    })
}

/// A directory entry.
fn dir(path: &str) -> serde_json::Value {
    serde_json::json!({ "path": path, "kind": "dir", "mode": 0o755, "mtime_s": 0 })
}

fn manifest(entries: Vec<serde_json::Value>) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({ "type": "manifest", "entries": entries }))
        .expect("json")
}

/// Honest pushes from the attacker's address and from another one, while `attack` runs;
/// both must complete. Returns the attack's result.
fn meanwhile<T: Send>(server: &Target, attacker: IpAddr, attack: impl FnOnce() -> T + Send) -> T {
    static RUN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let run = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let src = Tmp::new(&format!("src-{}-{run}", server.addr.port()));
    std::fs::create_dir_all(src.0.join("tree/sub")).expect("mkdir");
    std::fs::write(src.0.join("tree/a"), vec![7u8; 300_000]).expect("write");
    std::fs::write(src.0.join("tree/sub/b"), b"honest").expect("write");
    thread::scope(|s| {
        let a = s.spawn(attack);
        let honest: Vec<_> = [attacker, loopback(2)]
            .into_iter()
            .enumerate()
            .map(|(i, from)| {
                let src = src.0.clone();
                s.spawn(move || {
                    let mut c = server.client();
                    c.bind = Some(from);
                    c.tune = TuneMode::Kernel;
                    c.streams = 2;
                    c.max_streams = 2;
                    let mut cfg = CopyConfig::new(
                        c,
                        Direction::Push {
                            sources: vec![src.join("tree")],
                            dest: format!("honest-{i}/{run}"),
                        },
                    );
                    cfg.files.recursive = true;
                    copy(&cfg, None)
                })
            })
            .collect();
        for (i, h) in honest.into_iter().enumerate() {
            let r = h.join().expect("honest thread");
            let r = r.unwrap_or_else(|e| panic!("honest copy {i} failed during the attack: {e}"));
            assert_eq!(r.files, 2, "honest copy {i}");
            assert!(r.tree_digest.is_some(), "honest copy {i}");
        }
        a.join().expect("attack thread")
    })
}

fn share(test: &str) -> Tmp {
    let root = match external() {
        // The external server shares this directory itself (run one test at a time).
        Some((_, root)) => Tmp(root, false),
        None => Tmp::new(test),
    };
    for i in 0..2 {
        std::fs::create_dir_all(root.0.join(format!("honest-{i}"))).expect("mkdir");
    }
    std::fs::create_dir_all(root.0.join("in")).expect("mkdir");
    root
}

#[test]
fn a_manifest_entry_of_size_u64_max_is_refused_naming_max_file_size_and_the_server_lives() {
    let root = share("u64max");
    let server = server(&root.0);
    let attacker = loopback(101);
    let line = meanwhile(&server, attacker, || {
        let mut raw = Raw::open(server.addr, attacker, 1, job(false));
        let body = manifest(vec![entry("c1big", u64::MAX, 0)]);
        let _ = raw.record(&body);
        raw.refusal()
    });
    assert!(
        line.contains(&format!(
            "c1big: size 18446744073709551615 exceeds --max-file-size {}",
            tcptune_core::Bytes(1 << 40)
        )),
        "{line}"
    );
    assert!(!line.contains('\n'));
    // 2^48 is over the limit too; a size at the limit is refused by the free space before
    // anything is allocated or created for it.
    for (token, size, want) in [(2, 1u64 << 48, "--max-file-size"), (3, 1 << 40, "space")] {
        let mut raw = Raw::open(server.addr, attacker, token, job(false));
        let _ = raw.record(&manifest(vec![entry("huge", size, 0)]));
        let _ = raw.record(br#"{"type":"manifest_end","warnings":[]}"#);
        let line = raw.refusal();
        assert!(line.contains(want), "{size}: {line}");
    }
    assert!(!root.0.join("in/huge").exists() && !root.0.join("in/.huge.tcptune-part").exists());
    if let Some(failed) = server.stop() {
        assert!(failed >= 3, "{failed} sessions failed");
    }
}

#[test]
fn manifest_records_past_the_manifest_budget_end_that_session_only() {
    let root = share("manifest");
    let server = server(&root.0);
    let attacker = loopback(102);
    // 1 MiB paths: the first record is refused for its path.
    let line = meanwhile(&server, attacker, || {
        let mut raw = Raw::open(server.addr, attacker, 4, job(false));
        let long = "p".repeat(1 << 20);
        for _ in 0..3 {
            if raw.record(&manifest(vec![entry(&long, 1, 0)])).is_err() {
                break;
            }
        }
        raw.refusal()
    });
    assert!(line.contains("a manifest path of 1048576 bytes"), "{line}");
    // 4 MB records of legal paths, 500 of them (2 GB): refused once the budget is spent.
    let line = meanwhile(&server, attacker, || {
        let mut raw = Raw::open(server.addr, attacker, 5, job(false));
        thread::scope(|s| {
            let w = s.spawn(move || {
                for r in 0..500 {
                    let entries = (0..1000)
                        .map(|i| entry(&format!("r{r}/{i:04}{}", "q".repeat(4000)), 1, 0))
                        .collect();
                    if raw.record(&manifest(entries)).is_err() {
                        break;
                    }
                }
                raw.refusal()
            });
            w.join().expect("writer")
        })
    });
    assert!(line.contains("--max-manifest"), "{line}");
    assert!(
        line.contains(&format!(
            "{}",
            tcptune_core::Bytes(DEFAULT_MAX_MANIFEST_BYTES)
        )),
        "{line}"
    );
    server.stop();
}

#[test]
fn a_pull_whose_receiver_repeats_one_block_in_endless_resend_records_is_refused() {
    let root = share("resend");
    std::fs::write(root.0.join("big"), vec![3u8; 1 << 20]).expect("write");
    let server = server(&root.0);
    let attacker = loopback(103);
    let line = meanwhile(&server, attacker, || {
        let mut raw = Raw::open(server.addr, attacker, 6, job(true));
        // Drain whatever the server sends on the data stream (manifest, blocks, end).
        let mut drain = raw.data.try_clone().expect("clone");
        let drainer = thread::spawn(move || {
            let mut b = vec![0u8; 1 << 16];
            drain
                .set_read_timeout(Some(Duration::from_secs(20)))
                .expect("timeout");
            while matches!(drain.read(&mut b), Ok(n) if n > 0) {}
        });
        let _ = raw.frame(r#"{"type":"plan","files":[]}"#);
        let _ = raw.frame(r#"{"type":"plan_end"}"#);
        let blocks = vec!["[0,0]"; 8000].join(",");
        let flood = format!(r#"{{"type":"resend","blocks":[{blocks}],"last":false}}"#);
        let deadline = Instant::now() + Duration::from_secs(20);
        for _ in 0..2000 {
            if raw.frame(&flood).is_err() || Instant::now() > deadline {
                break;
            }
        }
        let line = raw.refusal();
        drop(raw);
        let _ = drainer.join();
        line
    });
    assert!(
        line.contains("block 0 of entry 0 twice in one resend list"),
        "{line}"
    );
    server.stop();
}

#[test]
fn a_file_listed_many_times_is_refused_before_it_is_hashed_even_once() {
    let root = share("dup");
    std::fs::create_dir_all(root.0.join("in/d")).expect("mkdir");
    let big = root.0.join("in/d/big");
    std::fs::write(&big, vec![5u8; 8 << 20]).expect("write");
    let mtime = std::fs::metadata(&big)
        .and_then(|m| m.modified())
        .map(|t| t.duration_since(UNIX_EPOCH).unwrap_or_default())
        .unwrap_or_else(|_| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
        });
    let server = server(&root.0);
    let attacker = loopback(104);
    let line = meanwhile(&server, attacker, || {
        let mut raw = Raw::open(server.addr, attacker, 7, job(false));
        // What a pull's manifest shows of d/big (size, time), listed 2,000 times.
        let mut entries = vec![dir("d")];
        let mut e = entry("d/big", 8 << 20, mtime.as_secs() as i64);
        e["mtime_ns"] = serde_json::json!(mtime.subsec_nanos());
        entries.extend(std::iter::repeat_n(e, 2000));
        let _ = raw.record(&manifest(entries));
        let _ = raw.record(br#"{"type":"manifest_end","warnings":[]}"#);
        raw.refusal()
    });
    assert!(line.contains("'d/big' twice"), "{line}");
    // The share's file is untouched (not rewritten, its mode not changed).
    assert_eq!(std::fs::read(&big).expect("read").len(), 8 << 20);
    server.stop();
}

impl Raw {
    /// The receiver's next frame on the data stream (keep-alives skipped).
    fn answer(&mut self) -> ToSender {
        self.data
            .set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        loop {
            let mut len = [0u8; 4];
            self.data.read_exact(&mut len).expect("a frame's length");
            let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
            self.data.read_exact(&mut body).expect("a frame");
            match serde_json::from_slice(&body).expect("a frame of the receiver") {
                ToSender::Planning { .. } => {}
                m => return m,
            }
        }
    }

    /// A block record: header, data, then the checksum and its tag.
    fn block(&mut self, h: &Header, data: &[u8], trailer: &Trailer) -> std::io::Result<()> {
        self.data.write_all(&h.encode())?;
        self.data.write_all(data)?;
        self.data.write_all(&trailer.encode())
    }
}

#[test]
fn a_forged_block_with_a_right_checksum_but_no_key_is_refused_and_sent_again() {
    let root = share("forged");
    let server = server(&root.0);
    let attacker = loopback(105);
    let (first, second) = meanwhile(&server, attacker, || {
        let mut raw = Raw::open(server.addr, attacker, 7, job(false));
        let body = manifest(vec![entry("forged", 5, 0)]);
        raw.record(&body).expect("manifest");
        raw.record(br#"{"type":"manifest_end","warnings":[]}"#)
            .expect("manifest end");
        while raw.answer() != ToSender::PlanEnd {}
        let h = |round| Header {
            tag: Tag::Block,
            file: 0,
            offset: 0,
            len: 5,
            round,
        };
        // A forger on the path: its own bytes, hashed as BLAKE3 does (the checksum is
        // right), but without the session's key its tag is a guess.
        let evil = b"EVIL!";
        let cv = block_cv(5, BLOCK_SIZE, 0, evil);
        let forged = Trailer::sealed(&BlockKey::from_bytes([0; 32]), &h(0), cv);
        raw.block(&h(0), evil, &forged).expect("forged block");
        raw.record(br#"{"type":"end","round":0,"records":1}"#)
            .expect("end");
        let first = raw.answer();
        // The real sender sends it again, tagged.
        let good = b"hello";
        let cv = block_cv(5, BLOCK_SIZE, 0, good);
        let trailer = Trailer::sealed(&raw.keys.block_key(), &h(1), cv);
        raw.block(&h(1), good, &trailer).expect("block");
        raw.record(br#"{"type":"end","round":1,"records":2}"#)
            .expect("end");
        (first, raw.answer())
    });
    assert_eq!(
        first,
        ToSender::Resend {
            blocks: vec![(0, 0)],
            last: true
        }
    );
    assert!(
        matches!(second, ToSender::Done { files: 1, .. }),
        "{second:?}"
    );
    if external().is_none() {
        let got = std::fs::read(root.0.join("in/forged")).expect("the copy is in place");
        assert_eq!(got, b"hello", "not one forged byte is in place");
    }
    server.stop();
}
