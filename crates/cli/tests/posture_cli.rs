//! `serve`'s safe start and the secrets (issue 21, item 3), run as a user runs them: a
//! writable share open to other hosts is refused in one line, every start says its posture,
//! secrets under 128 bits are refused at both ends, `tcptune secret new` makes one that
//! both ends take, and a secret file others may read is warned about.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_tcptune");

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("TCPTUNE_PATH_DB", tmp("unused.sqlite"))
        .stdin(Stdio::null())
        .output()
        .expect("run tcptune")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("tcptune-posture-{}-{name}", std::process::id()))
}

/// A directory for one test with a folder to share in it, removed at the end.
struct Dir(PathBuf, String);

impl Dir {
    fn new(name: &str) -> Dir {
        let d = tmp(name);
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("share")).expect("mkdir");
        let share = d.join("share").to_str().expect("utf-8").to_string();
        Dir(d, share)
    }

    fn share(&self) -> &str {
        &self.1
    }

    /// A secret file holding `text`, with `mode`.
    fn secret(&self, name: &str, text: &str, mode: u32) -> String {
        let p = self.0.join(name);
        std::fs::write(&p, text).expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
        p.display().to_string()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Exit status 2 and exactly one line on stderr, which contains every one of `words`.
fn refused(args: &[&str], words: &[&str]) -> String {
    let o = run(args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{args:?}: not one line:\n{err}");
    assert!(lines[0].starts_with("tcptune: error: "), "{args:?}: {err}");
    for w in words {
        assert!(lines[0].contains(w), "{args:?}: '{w}' missing in: {err}");
    }
    assert!(o.stdout.is_empty(), "{args:?}: printed on stdout");
    lines[0].to_string()
}

/// A running `tcptune serve`, killed on drop; its first lines of stdout and stderr.
struct Server {
    child: Child,
    out: Receiver<String>,
    err: Receiver<String>,
}

impl Server {
    fn start(args: &[&str]) -> Server {
        let mut child = Command::new(BIN)
            .args(["serve", "-p", "0", "--no-path-db"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start tcptune serve");
        let lines = |r: Box<dyn std::io::Read + Send>| {
            let (tx, rx) = channel();
            std::thread::spawn(move || {
                for l in BufReader::new(r).lines().map_while(Result::ok) {
                    let _ = tx.send(l);
                }
            });
            rx
        };
        let out = lines(Box::new(child.stdout.take().expect("stdout")));
        let err = lines(Box::new(child.stderr.take().expect("stderr")));
        Server { child, out, err }
    }

    /// Lines on stdout until one contains `word` (that one included).
    fn until(&self, word: &str) -> Vec<String> {
        let mut seen = Vec::new();
        while let Ok(l) = self.out.recv_timeout(Duration::from_secs(10)) {
            let done = l.contains(word);
            seen.push(l);
            if done {
                return seen;
            }
        }
        panic!("serve said no '{word}': {seen:?}");
    }

    /// The port it listens on, from its posture line.
    fn port(&self) -> String {
        let lines = self.until("posture: ");
        let line = lines.last().map(String::as_str).unwrap_or_default();
        line.split("listening on ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|a| a.rsplit(':').next())
            .unwrap_or_else(|| panic!("no port in {line}"))
            .to_string()
    }

    /// What it said on stderr: the first line (waited for), and any after it by now.
    fn stderr_lines(&self) -> Vec<String> {
        let first = self.err.recv_timeout(Duration::from_secs(10));
        first.into_iter().chain(self.err.try_iter()).collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_writable_root_without_a_secret_on_every_address_is_refused_in_one_line() {
    let d = Dir::new("refuse");
    for extra in [&[][..], &["-4"], &["-B", "0.0.0.0"], &["-B", "::"]] {
        let mut args = vec!["serve", "-p", "0", "--no-path-db", "--root", d.share()];
        args.extend_from_slice(extra);
        refused(
            &args,
            &[
                "writable",
                "--secret-file FILE",
                "umask 077; tcptune secret new > FILE",
                "-B 127.0.0.1",
                "--allow-anonymous-writes",
            ],
        );
    }
}

#[test]
fn a_writable_root_on_loopback_starts_and_says_its_posture() {
    let d = Dir::new("loopback");
    let s = Server::start(&["-B", "127.0.0.1", "--root", d.share()]);
    let lines = s.until("posture: ");
    let posture = lines.last().expect("a line");
    assert!(
        posture.contains("(this host only), auth: none (any client), share: writable"),
        "{posture}"
    );
    assert!(posture.contains(d.share()), "{posture}");
    // Read-only on every address needs no secret.
    let ro = Server::start(&["--root", d.share(), "--read-only"]);
    let lines = ro.until("posture: ");
    let posture = lines.last().expect("a line");
    assert!(posture.contains("share: read-only"), "{posture}");
    assert!(!posture.contains("OPEN"), "{posture}");
}

#[test]
fn allow_anonymous_writes_starts_on_every_address_and_says_it_is_open() {
    let d = Dir::new("open");
    let s = Server::start(&["-4", "--root", d.share(), "--allow-anonymous-writes"]);
    let lines = s.until("posture: ");
    let posture = lines.last().expect("a line");
    assert!(posture.contains("listening on 0.0.0.0:"), "{posture}");
    assert!(
        posture.contains("; OPEN: anyone who reaches 0.0.0.0:"),
        "{posture}"
    );
    // And as the JSON start record, the first line.
    let j = Server::start(&[
        "-4",
        "--root",
        d.share(),
        "--allow-anonymous-writes",
        "--json",
    ]);
    let first = j.out.recv_timeout(Duration::from_secs(10)).expect("a line");
    let v: serde_json::Value = serde_json::from_str(&first).expect("JSON");
    assert_eq!(v["event"], "start", "{v}");
    assert_eq!(v["schema_version"], 2, "{v}");
    assert!(v["time"].is_string(), "{v}");
    assert_eq!(v["open"], true, "{v}");
    assert_eq!(v["loopback_only"], false, "{v}");
    assert_eq!(v["auth"], "none", "{v}");
    assert_eq!(v["share"], "writable", "{v}");
    assert_eq!(v["ip_versions"], serde_json::json!(["ipv4"]), "{v}");
    assert_eq!(v["limits"]["max_sessions_per_addr"], 4, "{v}");
}

#[test]
fn a_secret_under_128_bits_is_refused_by_the_server_and_every_client() {
    let d = Dir::new("short");
    let hex31 = "a".repeat(31);
    for (name, text) in [
        ("password", "hunter2\n"),
        ("hex", hex31.as_str()),
        ("words", "correct horse battery\n"),
    ] {
        let f = d.secret(name, text, 0o600);
        refused(
            &["serve", "-B", "127.0.0.1", "-p", "0", "--secret-file", &f],
            &[
                "too short",
                "128 bits",
                "umask 077; tcptune secret new > FILE",
            ],
        );
        for client in [
            &["send", "127.0.0.1", "-n", "1", "--secret-file", &f][..],
            &["advise", "127.0.0.1", "--secret-file", &f],
            &["cp", "--secret-file", &f, d.share(), "127.0.0.1:x"],
        ] {
            refused(client, &["too short", "tcptune secret new"]);
        }
    }
    // Exactly 128 bits is enough (the server starts).
    let f = d.secret("ok", &"a".repeat(32), 0o600);
    let s = Server::start(&["-B", "127.0.0.1", "--secret-file", &f]);
    assert!(s.port().parse::<u16>().is_ok());
}

#[test]
fn a_new_secret_is_64_hex_digits_that_both_ends_take_and_never_the_same() {
    let d = Dir::new("new");
    let a = run(&["secret", "new"]);
    let b = run(&["secret", "new"]);
    assert_eq!(a.status.code(), Some(0), "{}", stderr(&a));
    let text = String::from_utf8_lossy(&a.stdout).into_owned();
    assert_eq!(text.len(), 65, "{text:?}");
    assert!(text.ends_with('\n'));
    assert!(text
        .trim_end()
        .bytes()
        .all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')));
    assert_ne!(a.stdout, b.stdout, "two runs gave the same secret");
    assert!(a.stderr.is_empty(), "{}", stderr(&a));
    let help = run(&["secret", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("128 bits") && help.contains("umask 077"),
        "{help}"
    );
    // As printed, into a file: the server and a client take it and a transfer runs.
    let f = d.secret("new", &text, 0o600);
    let s = Server::start(&["-B", "127.0.0.1", "--root", d.share(), "--secret-file", &f]);
    let port = s.port();
    let o = run(&[
        "send",
        "127.0.0.1",
        "-p",
        &port,
        "-n",
        "1",
        "--no-path-db",
        "--secret-file",
        &f,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(o.stderr.is_empty(), "{}", stderr(&o));
    let o = run(&["send", "127.0.0.1", "-p", &port, "-n", "1", "--no-path-db"]);
    assert_eq!(
        o.status.code(),
        Some(3),
        "without the secret: {}",
        stderr(&o)
    );
}

#[test]
fn a_secret_file_others_may_read_is_warned_about_at_both_ends() {
    let d = Dir::new("mode");
    let f = d.secret("open", &"7d".repeat(32), 0o644);
    let s = Server::start(&["-B", "127.0.0.1", "--secret-file", &f]);
    let port = s.port();
    let warned = |lines: &[String]| {
        lines.iter().any(|l| {
            l.starts_with("tcptune: warning: ")
                && l.contains("mode 0644")
                && l.contains("chmod 600")
        })
    };
    assert!(warned(&s.stderr_lines()), "serve gave no warning");
    let o = run(&[
        "send",
        "127.0.0.1",
        "-p",
        &port,
        "-n",
        "1",
        "--no-path-db",
        "--secret-file",
        &f,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let lines: Vec<String> = stderr(&o).lines().map(String::from).collect();
    assert!(warned(&lines), "send gave no warning: {lines:?}");
    assert_eq!(lines.len(), 1, "one line: {lines:?}");
}
