//! `cp --encrypt` over loopback: an encrypted push and pull of a tree arrive identical with
//! the digests of a copy in clear, a corrupted sealed block is asked for again, and what a
//! relay between client and server sees of a file of a known pattern: the pattern in clear
//! without `--encrypt`, nowhere with it.

mod common;

use common::{bytes, TestServer};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tcptune_transfer::client::copy::{copy, CopyConfig, Direction};
use tcptune_transfer::files::BLOCK_SIZE;
use tcptune_transfer::server::{FileShare, ServerConfig};

struct Tmp(PathBuf);

impl Tmp {
    fn new(name: &str) -> Tmp {
        let d = std::env::temp_dir().join(format!("tcptune-enc-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("mkdir");
        Tmp(d)
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn server(root: &Path) -> TestServer {
    TestServer::start(ServerConfig {
        files: Some(FileShare::new(root)),
        ..ServerConfig::default()
    })
}

fn cfg(addr: SocketAddr, direction: Direction, encrypt: bool) -> CopyConfig {
    let mut c = tcptune_transfer::client::ClientConfig::new(addr.to_string());
    c.streams = 3;
    c.max_streams = 3;
    c.tune = tcptune_core::TuneMode::Kernel;
    c.idle_timeout = Duration::from_secs(20);
    let mut cfg = CopyConfig::new(c, direction);
    cfg.files.recursive = true;
    cfg.files.encrypt = encrypt;
    cfg
}

fn make_tree(root: &Path) {
    let b = BLOCK_SIZE;
    std::fs::create_dir_all(root.join("sub/deeper")).expect("mkdir");
    for (i, (p, n)) in [
        ("empty", 0),
        ("one byte", 1),
        ("block", b),
        ("sub/several blocks", 2 * b + 17),
        ("sub/deeper/tiny", 3),
    ]
    .iter()
    .enumerate()
    {
        std::fs::write(root.join(p), bytes(i as u64 + 1, *n)).expect("write");
    }
}

/// Every file under `root` with its BLAKE3.
fn contents(root: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for e in std::fs::read_dir(dir).expect("list") {
            let p = e.expect("entry").path();
            let rel = p.strip_prefix(root).expect("prefix").display().to_string();
            if p.is_dir() {
                out.insert(rel, "dir".into());
                walk(root, &p, out);
            } else {
                let d = blake3::hash(&std::fs::read(&p).expect("read"));
                out.insert(rel, d.to_hex().to_string());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

#[test]
fn an_encrypted_tree_round_trips_both_ways_with_the_digests_of_a_clear_copy() {
    let t = Tmp::new("round");
    let src = t.0.join("local/tree");
    make_tree(&src);
    let share = t.0.join("share");
    std::fs::create_dir_all(share.join("clear")).expect("mkdir");
    std::fs::create_dir_all(share.join("sealed")).expect("mkdir");
    let s = server(&share);
    let push = |dest: &str, encrypt: bool| {
        let d = Direction::Push {
            sources: vec![src.clone()],
            dest: dest.into(),
        };
        copy(&cfg(s.addr, d, encrypt), None).unwrap_or_else(|e| panic!("push: {e}"))
    };
    let clear = push("clear", false);
    let sealed = push("sealed", true);
    assert_eq!(contents(&src), contents(&share.join("sealed/tree")));
    assert_eq!(sealed.files, 5);
    assert_eq!(sealed.transferred_bytes, sealed.bytes);
    assert!(sealed.tree_digest.is_some());
    assert_eq!(
        sealed.tree_digest, clear.tree_digest,
        "digests of the plaintext"
    );
    let big = sealed
        .entries
        .iter()
        .find(|e| e.path == "tree/sub/several blocks")
        .expect("entry");
    let want = blake3::hash(&std::fs::read(src.join("sub/several blocks")).expect("read"));
    assert_eq!(big.blake3.as_deref(), Some(want.to_hex().as_str()));
    let back = t.0.join("back");
    let pull = copy(
        &cfg(
            s.addr,
            Direction::Pull {
                sources: vec!["sealed/tree".into()],
                dest: back.clone(),
            },
            true,
        ),
        None,
    )
    .unwrap_or_else(|e| panic!("pull: {e}"));
    assert_eq!(contents(&src), contents(&back));
    assert_eq!(pull.tree_digest, clear.tree_digest);
    assert_eq!(pull.resent_blocks, 0);
}

#[test]
fn a_corrupted_sealed_block_fails_to_open_is_not_kept_and_is_sent_again() {
    let t = Tmp::new("corrupt");
    let share = t.0.join("share");
    std::fs::create_dir_all(&share).expect("mkdir");
    let a = t.0.join("big");
    std::fs::write(&a, bytes(9, 2 * BLOCK_SIZE + 100)).expect("write");
    let s = server(&share);
    for pull in [false, true] {
        let mut c = if pull {
            std::fs::copy(&a, share.join("big")).expect("stage");
            let d = Direction::Pull {
                sources: vec!["big".into()],
                dest: t.0.join("pulled"),
            };
            cfg(s.addr, d, true)
        } else {
            let d = Direction::Push {
                sources: vec![a.clone()],
                dest: "big".into(),
            };
            cfg(s.addr, d, true)
        };
        c.client.corrupt_message = Some(1);
        let r = copy(&c, None).unwrap_or_else(|e| panic!("pull {pull}: {e}"));
        assert_eq!(r.resent_blocks, 1, "pull {pull}");
        let got = if pull {
            t.0.join("pulled")
        } else {
            share.join("big")
        };
        assert_eq!(
            std::fs::read(&got).expect("read"),
            std::fs::read(&a).expect("read"),
            "pull {pull}"
        );
    }
}

/// What one direction of one relayed connection carried.
type Capture = Arc<Mutex<Vec<u8>>>;

/// A TCP relay in front of `to` that keeps every byte each connection carries, each way.
struct Relay {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Capture>>>,
}

impl Relay {
    fn start(to: SocketAddr) -> Relay {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        let seen: Arc<Mutex<Vec<Capture>>> = Arc::default();
        let all = seen.clone();
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(client) = c else { return };
                let Ok(server) = TcpStream::connect(to) else {
                    return;
                };
                for (mut from, mut into) in [
                    (
                        client.try_clone().expect("dup"),
                        server.try_clone().expect("dup"),
                    ),
                    (server, client),
                ] {
                    let log: Capture = Arc::default();
                    all.lock().expect("lock").push(log.clone());
                    std::thread::spawn(move || {
                        let mut b = vec![0u8; 1 << 16];
                        loop {
                            match from.read(&mut b) {
                                Ok(0) | Err(_) => break,
                                Ok(n) => {
                                    log.lock().expect("lock").extend_from_slice(&b[..n]);
                                    if into.write_all(&b[..n]).is_err() {
                                        break;
                                    }
                                }
                            }
                        }
                        let _ = into.shutdown(std::net::Shutdown::Write);
                    });
                }
            }
        });
        Relay { addr, seen }
    }

    /// Whether `needle` crossed the relay, either way, and how many bytes did.
    fn carried(&self, needle: &[u8]) -> (bool, usize) {
        let logs = self.seen.lock().expect("lock");
        let mut total = 0;
        let mut found = false;
        for l in logs.iter() {
            let l = l.lock().expect("lock");
            total += l.len();
            found |= l.windows(needle.len()).any(|w| w == needle);
        }
        (found, total)
    }
}

#[test]
fn with_encrypt_a_files_bytes_do_not_cross_the_wire_and_without_it_they_do() {
    let t = Tmp::new("wire");
    let share = t.0.join("share");
    std::fs::create_dir_all(&share).expect("mkdir");
    let canary = b"a canary of plaintext, repeated; ";
    let data: Vec<u8> = canary
        .iter()
        .copied()
        .cycle()
        .take((BLOCK_SIZE + 4321) as usize)
        .collect();
    let a = t.0.join("canary");
    std::fs::write(&a, &data).expect("write");
    std::fs::copy(&a, share.join("served")).expect("stage");
    let s = server(&share);
    for (pull, encrypt) in [(false, false), (false, true), (true, false), (true, true)] {
        let relay = Relay::start(s.addr);
        let (d, got) = if pull {
            let dest = t.0.join(format!("pulled-{encrypt}"));
            let d = Direction::Pull {
                sources: vec!["served".into()],
                dest: dest.clone(),
            };
            (d, dest)
        } else {
            let name = format!("pushed-{encrypt}");
            let d = Direction::Push {
                sources: vec![a.clone()],
                dest: name.clone(),
            };
            (d, share.join(name))
        };
        let mut c = cfg(relay.addr, d, encrypt);
        c.client.streams = 2;
        c.client.max_streams = 2;
        let r = copy(&c, None).unwrap_or_else(|e| panic!("pull {pull} encrypt {encrypt}: {e}"));
        assert_eq!(r.transferred_bytes, data.len() as u64);
        assert_eq!(std::fs::read(&got).expect("read"), data);
        let (found, total) = relay.carried(canary);
        assert!(
            total as u64 > data.len() as u64,
            "the relay carried the copy ({total} bytes)"
        );
        assert_eq!(
            found, !encrypt,
            "pull {pull} encrypt {encrypt}: the plaintext on the wire"
        );
    }
}
