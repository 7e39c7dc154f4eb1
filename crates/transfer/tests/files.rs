//! Copies of files and trees over loopback (`tcptune cp`'s library): round trips both ways
//! compared byte for byte with their modes and times, every path escape refused with
//! nothing created, read-only and unshared servers, a corrupted block sent again, and a
//! partial file from an earlier run resumed.

mod common;

use common::{bytes, TestServer};
use std::collections::BTreeMap;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tcptune_transfer::client::copy::{copy, CopyConfig, CopyReport, Direction};
use tcptune_transfer::client::ClientError;
use tcptune_transfer::files::{FailKind, BLOCK_SIZE};
use tcptune_transfer::server::{FileShare, ServerConfig};

struct Tmp(PathBuf);

impl Tmp {
    fn new(name: &str) -> Tmp {
        let d = std::env::temp_dir().join(format!("tcptune-files-{name}-{}", std::process::id()));
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

fn server(root: &Path, read_only: bool) -> TestServer {
    let mut share = FileShare::new(root);
    share.read_only = read_only;
    TestServer::start(ServerConfig {
        files: Some(share),
        ..ServerConfig::default()
    })
}

fn cfg(s: &TestServer, direction: Direction) -> CopyConfig {
    let mut c = s.client();
    c.streams = 3;
    c.max_streams = 3;
    c.tune = tcptune_core::TuneMode::Kernel;
    c.idle_timeout = Duration::from_secs(20);
    let mut cfg = CopyConfig::new(c, direction);
    cfg.files.recursive = true;
    cfg
}

/// A tree with every awkward size, names with spaces and non-ASCII letters, an empty
/// directory, various modes and old modification times.
fn make_tree(root: &Path) {
    let b = BLOCK_SIZE;
    let files: &[(&str, u64, u32)] = &[
        ("empty", 0, 0o644),
        ("one byte", 1, 0o600),
        ("block-1", b - 1, 0o640),
        ("block", b, 0o755),
        ("sub/block+1", b + 1, 0o644),
        ("sub/several blocks", 3 * b + 17, 0o644),
        ("sub/deeper/ünïcødé ✓.txt", 1000, 0o444),
        ("sub/deeper/tiny", 3, 0o644),
    ];
    std::fs::create_dir_all(root.join("sub/deeper")).expect("mkdir");
    std::fs::create_dir_all(root.join("empty dir")).expect("mkdir");
    for (i, (p, n, mode)) in files.iter().enumerate() {
        let path = root.join(p);
        std::fs::write(&path, bytes(i as u64 + 1, *n)).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(*mode)).expect("chmod");
        let t = std::time::UNIX_EPOCH + Duration::new(1_600_000_000 + i as u64 * 1000, 123_456_789);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .or_else(|_| std::fs::File::open(&path))
            .expect("open")
            .set_modified(t)
            .expect("mtime");
    }
    std::fs::set_permissions(
        root.join("empty dir"),
        std::fs::Permissions::from_mode(0o750),
    )
    .expect("chmod");
}

/// Every entry under `root`: (kind, size, mode, mtime, content digest).
fn snapshot(root: &Path) -> BTreeMap<String, (bool, u64, u32, i64, i64, String)> {
    let mut out = BTreeMap::new();
    fn walk(
        root: &Path,
        dir: &Path,
        out: &mut BTreeMap<String, (bool, u64, u32, i64, i64, String)>,
    ) {
        for e in std::fs::read_dir(dir).expect("list") {
            let e = e.expect("entry");
            let p = e.path();
            let m = std::fs::symlink_metadata(&p).expect("stat");
            let rel = p.strip_prefix(root).expect("prefix").display().to_string();
            let digest = if m.is_file() {
                blake3::hash(&std::fs::read(&p).expect("read"))
                    .to_hex()
                    .to_string()
            } else {
                String::new()
            };
            out.insert(
                rel,
                (
                    m.is_dir(),
                    if m.is_dir() { 0 } else { m.len() },
                    m.mode() & 0o7777,
                    m.mtime(),
                    m.mtime_nsec(),
                    digest,
                ),
            );
            if m.is_dir() {
                walk(root, &p, out);
            }
        }
    }
    walk(root, root, &mut out);
    out
}

fn file_kind(r: Result<CopyReport, ClientError>) -> FailKind {
    match r {
        Err(ClientError::File(f)) => f.kind,
        Err(e) => panic!("expected a file failure, got {e}"),
        Ok(r) => panic!("expected a file failure, got success: {} files", r.files),
    }
}

#[test]
fn a_tree_round_trips_both_ways_with_modes_times_and_digests() {
    let t = Tmp::new("round");
    let src = t.0.join("local/tree");
    make_tree(&src);
    let share = t.0.join("share");
    std::fs::create_dir_all(share.join("in")).expect("mkdir");
    let s = server(&share, false);
    // Push into an existing directory: it lands at in/tree.
    let push = copy(
        &cfg(
            &s,
            Direction::Push {
                sources: vec![src.clone()],
                dest: "in".into(),
            },
        ),
        None,
    )
    .unwrap_or_else(|e| panic!("push: {e}"));
    assert_eq!(snapshot(&src), snapshot(&share.join("in/tree")));
    assert_eq!(push.files, 8);
    assert_eq!(push.dirs, 4);
    assert_eq!(push.transferred_bytes, push.bytes);
    assert!(push.tree_digest.is_some());
    let big = push
        .entries
        .iter()
        .find(|e| e.path == "tree/sub/several blocks")
        .expect("entry");
    let want = blake3::hash(&std::fs::read(src.join("sub/several blocks")).expect("read"));
    assert_eq!(
        big.blake3.as_deref(),
        Some(want.to_hex().as_str()),
        "b3sum's digest"
    );
    assert!(!push.streams.is_empty(), "per-stream tuning detail");
    // No temporary file is left behind.
    assert!(snapshot(&share).keys().all(|k| !k.contains("tcptune-part")));
    // Pull it back to a new name.
    let back = t.0.join("back");
    let pull = copy(
        &cfg(
            &s,
            Direction::Pull {
                sources: vec!["in/tree".into()],
                dest: back.clone(),
            },
        ),
        None,
    )
    .expect("pull");
    assert_eq!(snapshot(&src), snapshot(&back));
    assert_eq!(pull.tree_digest, push.tree_digest);
    // Again: everything is there, nothing is carried.
    let again = copy(
        &cfg(
            &s,
            Direction::Pull {
                sources: vec!["in/tree".into()],
                dest: t.0.join("back2"),
            },
        ),
        None,
    )
    .expect("pull to a new place");
    assert_eq!(again.transferred_bytes, again.bytes);
    let same = copy(
        &cfg(
            &s,
            Direction::Push {
                sources: vec![src.clone()],
                dest: "in".into(),
            },
        ),
        None,
    )
    .expect("push again");
    assert_eq!(
        same.transferred_bytes, 0,
        "identical targets are not sent again"
    );
    assert_eq!(same.present_bytes, same.bytes);
    assert!(
        same.entries
            .iter()
            .all(|e| e.status == "unchanged" || e.size_bytes == 0),
        "{:?}",
        same.entries
    );
    assert_eq!(snapshot(&src), snapshot(&share.join("in/tree")));
}

#[test]
fn single_files_follow_cp_rules() {
    let t = Tmp::new("single");
    let share = t.0.join("share");
    std::fs::create_dir_all(&share).expect("mkdir");
    let a = t.0.join("a b.txt");
    std::fs::write(&a, b"hello").expect("write");
    let s = server(&share, false);
    // To a new name, then over it, then into the root.
    copy(
        &cfg(
            &s,
            Direction::Push {
                sources: vec![a.clone()],
                dest: "new.txt".into(),
            },
        ),
        None,
    )
    .expect("new name");
    assert_eq!(
        std::fs::read(share.join("new.txt")).expect("read"),
        b"hello"
    );
    std::fs::write(&a, b"bye").expect("write");
    copy(
        &cfg(
            &s,
            Direction::Push {
                sources: vec![a.clone()],
                dest: "new.txt".into(),
            },
        ),
        None,
    )
    .expect("overwrite");
    assert_eq!(std::fs::read(share.join("new.txt")).expect("read"), b"bye");
    copy(
        &cfg(
            &s,
            Direction::Push {
                sources: vec![a.clone()],
                dest: "".into(),
            },
        ),
        None,
    )
    .expect("into root");
    assert!(share.join("a b.txt").is_file());
    // Several sources need a directory; a directory needs -r; a missing source fails first.
    let two = copy(
        &cfg(
            &s,
            Direction::Push {
                sources: vec![a.clone(), t.0.join("share")],
                dest: "nope".into(),
            },
        ),
        None,
    );
    assert_eq!(file_kind(two), FailKind::NotFound);
    let mut no_r = cfg(
        &s,
        Direction::Push {
            sources: vec![share.clone()],
            dest: "x".into(),
        },
    );
    no_r.files.recursive = false;
    assert_eq!(file_kind(copy(&no_r, None)), FailKind::Usage);
    let missing = copy(
        &cfg(
            &s,
            Direction::Push {
                sources: vec![t.0.join("missing")],
                dest: "".into(),
            },
        ),
        None,
    );
    assert_eq!(file_kind(missing), FailKind::NotFound);
    let missing = copy(
        &cfg(
            &s,
            Direction::Pull {
                sources: vec!["missing".into()],
                dest: t.0.join("m"),
            },
        ),
        None,
    );
    assert_eq!(file_kind(missing), FailKind::NotFound);
    // Pull a file into an existing directory.
    let out = t.0.join("out");
    std::fs::create_dir_all(&out).expect("mkdir");
    copy(
        &cfg(
            &s,
            Direction::Pull {
                sources: vec!["new.txt".into()],
                dest: out.clone(),
            },
        ),
        None,
    )
    .expect("pull");
    assert_eq!(std::fs::read(out.join("new.txt")).expect("read"), b"bye");
}

#[test]
fn paths_that_leave_the_root_are_refused_and_nothing_is_created() {
    let t = Tmp::new("escape");
    let share = t.0.join("share");
    std::fs::create_dir_all(share.join("d")).expect("mkdir");
    std::fs::write(t.0.join("secret"), b"s").expect("write");
    symlink("..", share.join("up")).expect("symlink");
    symlink("../../secret", share.join("d/leak")).expect("symlink");
    symlink("/tmp", share.join("abs")).expect("symlink");
    let a = t.0.join("a");
    std::fs::write(&a, b"x").expect("write");
    let s = server(&share, false);
    let before_outside = snapshot(&t.0);
    for dest in [
        "../evil",
        "/tmp/evil",
        "up/evil",
        "abs/evil",
        "d/../../evil",
        "up/",
    ] {
        let r = copy(
            &cfg(
                &s,
                Direction::Push {
                    sources: vec![a.clone()],
                    dest: dest.into(),
                },
            ),
            None,
        );
        assert_eq!(file_kind(r), FailKind::Refused, "push to {dest}");
    }
    for src in [
        "../secret",
        "/etc/passwd",
        "d/leak",
        "up/secret",
        "abs",
        "d/../../secret",
    ] {
        let r = copy(
            &cfg(
                &s,
                Direction::Pull {
                    sources: vec![src.into()],
                    dest: t.0.join("got"),
                },
            ),
            None,
        );
        assert_eq!(file_kind(r), FailKind::Refused, "pull of {src}");
    }
    assert_eq!(
        before_outside,
        snapshot(&t.0),
        "nothing created or changed anywhere"
    );
    assert!(!Path::new("/tmp/evil").exists());
}

#[test]
fn read_only_and_unshared_servers_refuse_with_a_kind() {
    let t = Tmp::new("ro");
    let share = t.0.join("share");
    std::fs::create_dir_all(&share).expect("mkdir");
    std::fs::write(share.join("f"), b"data").expect("write");
    let a = t.0.join("a");
    std::fs::write(&a, b"x").expect("write");
    let ro = server(&share, true);
    let r = copy(
        &cfg(
            &ro,
            Direction::Push {
                sources: vec![a.clone()],
                dest: "".into(),
            },
        ),
        None,
    );
    assert_eq!(file_kind(r), FailKind::Permission);
    assert!(!share.join("a").exists());
    copy(
        &cfg(
            &ro,
            Direction::Pull {
                sources: vec!["f".into()],
                dest: t.0.join("f"),
            },
        ),
        None,
    )
    .expect("reading a read-only share");
    let none = TestServer::start(ServerConfig::default());
    let r = copy(
        &cfg(
            &none,
            Direction::Push {
                sources: vec![a],
                dest: "".into(),
            },
        ),
        None,
    );
    match r {
        Err(ClientError::File(f)) => {
            assert_eq!(f.kind, FailKind::Refused);
            assert!(f.message.contains("--root"), "{f}");
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("copied to a server without --root"),
    }
}

#[test]
fn a_corrupted_block_is_sent_again_and_the_file_is_intact() {
    let t = Tmp::new("corrupt");
    let share = t.0.join("share");
    std::fs::create_dir_all(&share).expect("mkdir");
    let a = t.0.join("big");
    std::fs::write(&a, bytes(9, 2 * BLOCK_SIZE + 100)).expect("write");
    let s = server(&share, false);
    for pull in [false, true] {
        let mut c = if pull {
            std::fs::copy(&a, share.join("big")).expect("stage");
            cfg(
                &s,
                Direction::Pull {
                    sources: vec!["big".into()],
                    dest: t.0.join("pulled"),
                },
            )
        } else {
            cfg(
                &s,
                Direction::Push {
                    sources: vec![a.clone()],
                    dest: "big".into(),
                },
            )
        };
        c.client.corrupt_message = Some(1);
        let r = copy(&c, None).expect("copy with a corrupted block");
        assert_eq!(r.resent_blocks, 1, "pull {pull}");
        let got = if pull {
            t.0.join("pulled")
        } else {
            share.join("big")
        };
        assert_eq!(
            std::fs::read(&got).expect("read"),
            std::fs::read(&a).expect("read")
        );
    }
}

#[test]
fn a_partial_file_from_an_earlier_run_is_resumed_and_no_resume_copies_all() {
    let t = Tmp::new("resume");
    let share = t.0.join("share");
    std::fs::create_dir_all(&share).expect("mkdir");
    let a = t.0.join("data.bin");
    let content = bytes(3, 4 * BLOCK_SIZE + 5);
    std::fs::write(&a, &content).expect("write");
    // What an interrupted run leaves: the temporary file, full size, two blocks written
    // (one of them wrong), the rest a hole.
    let part = share.join(".data.bin.tcptune-part");
    let f = std::fs::File::create(&part).expect("create");
    f.set_len(content.len() as u64).expect("len");
    use std::os::unix::fs::FileExt;
    f.write_all_at(&content[..BLOCK_SIZE as usize], 0)
        .expect("block 0");
    let mut bad = content[2 * BLOCK_SIZE as usize..3 * BLOCK_SIZE as usize].to_vec();
    bad[7] ^= 0xff;
    f.write_all_at(&bad, 2 * BLOCK_SIZE).expect("block 2");
    drop(f);
    let s = server(&share, false);
    let r = copy(
        &cfg(
            &s,
            Direction::Push {
                sources: vec![a.clone()],
                dest: "".into(),
            },
        ),
        None,
    )
    .expect("resume");
    assert_eq!(r.present_bytes, BLOCK_SIZE, "block 0 was there");
    assert_eq!(r.transferred_bytes, content.len() as u64 - BLOCK_SIZE);
    assert_eq!(r.entries[0].status, "resumed");
    assert_eq!(
        std::fs::read(share.join("data.bin")).expect("read"),
        content
    );
    assert!(!part.exists());
    // --no-resume: everything again.
    let mut c = cfg(
        &s,
        Direction::Push {
            sources: vec![a],
            dest: "".into(),
        },
    );
    c.files.resume = false;
    let r = copy(&c, None).expect("full copy");
    assert_eq!(r.transferred_bytes, content.len() as u64);
}
