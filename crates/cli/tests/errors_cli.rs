//! Every error case of issue 16, run as a user runs it: each fails with exactly one line on
//! stderr (`tcptune: error: ...`: what failed, the likely cause, what to do) and the exit
//! status of the table in `tcptune --help`; the values the tool prints are accepted back;
//! and Ctrl-C during `send` still reports what moved.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tcptune");

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env(
            "TCPTUNE_PATH_DB",
            std::env::temp_dir().join("tcptune-errors-unused.sqlite"),
        )
        .stdin(Stdio::null())
        .output()
        .expect("run tcptune")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Exit status `code` and exactly one line on stderr, which contains every one of `words`.
fn fails(args: &[&str], code: i32, words: &[&str]) {
    let o = run(args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{args:?}: not one line:\n{err}");
    assert!(lines[0].starts_with("tcptune: error: "), "{args:?}: {err}");
    for w in words {
        assert!(lines[0].contains(w), "{args:?}: '{w}' missing in: {err}");
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A `tcptune serve` on 127.0.0.1, killed on drop.
struct Server {
    child: Child,
    port: u16,
    log: std::sync::mpsc::Receiver<String>,
}

impl Server {
    fn start(extra: &[&str]) -> Server {
        let mut child = Command::new(BIN)
            .args(["serve", "-B", "127.0.0.1", "-p", "0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start tcptune serve");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let first = lines.next().expect("a line").expect("readable");
        let port = first
            .split_whitespace()
            .find_map(|w| {
                w.rsplit(':')
                    .next()
                    .and_then(|p| p.parse().ok())
                    .filter(|_| w.contains(':') && !w.ends_with('Z'))
            })
            .unwrap_or_else(|| panic!("no port in '{first}'"));
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in lines.map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        Server {
            child,
            port,
            log: rx,
        }
    }

    fn port(&self) -> String {
        self.port.to_string()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_duration_needs_a_unit_except_for_sends_iperf3_options() {
    for args in [
        &["watch", "--interval", "1", "--once"][..],
        &["doctor", "--timeout", "3"],
        &["doctor", "--probe-time", "2"],
        &["lab", "--max-time", "20", "--dry-run"],
        &["emu", "run", "--rtt", "50", "--", "true"],
        &["serve", "--max-duration", "60"],
    ] {
        fails(args, 2, &["has no unit", "s or ", "ms"]);
    }
    // What the tool prints is accepted back: the durations, with or without a space.
    let o = run(&["lab", "--quick", "--max-time", "20 s", "--dry-run"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // iperf3's bare seconds on send: -t 1 parses (the refused connection proves it).
    let closed = free_port().to_string();
    fails(
        &["send", "127.0.0.1", "-p", &closed, "-t", "1"],
        3,
        &["refused"],
    );
}

#[test]
fn rates_and_sizes_take_every_printed_spelling_and_refuse_bare_or_zero_values() {
    // Accepted: what the tool prints. A later, unrelated error proves the value parsed.
    let o = run(&["doctor", "--target", "1Gbit/s", "--rtt", "100 ms"]);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", stderr(&o));
    fails(
        &[
            "emu", "run", "--rate", "1Gbit/s", "--mtu", "1", "--", "true",
        ],
        2,
        &["--mtu"],
    );
    let closed = free_port().to_string();
    fails(
        &[
            "send",
            "127.0.0.1",
            "-p",
            &closed,
            "-l",
            "4 MiB",
            "--tune",
            "manual:18.1 Gbit/s",
        ],
        3,
        &["refused"],
    );
    // Refused up front, naming the option.
    fails(
        &["emu", "run", "--rate", "5", "--", "true"],
        2,
        &["--rate", "no unit", "5mbit"],
    );
    fails(
        &["doctor", "--target", "1", "--rtt", "50ms"],
        2,
        &["--target", "no unit"],
    );
    fails(
        &["doctor", "--rtt", "0ms"],
        2,
        &["--rtt", "greater than zero"],
    );
    fails(
        &["doctor", "--target", "100MB/s"],
        2,
        &["--target", "800mbit"],
    );
    fails(
        &["send", "h", "-l", "0"],
        2,
        &["--length", "greater than zero"],
    );
    fails(&["send", "h", "--tune", "fixed:0"], 2, &["--tune"]);
    fails(
        &["watch", "--interval", "1ms"],
        2,
        &["--interval", "at least 50ms"],
    );
}

#[test]
fn send_options_are_validated_before_anything_is_printed_or_connected() {
    let closed = free_port().to_string();
    let spec = format!("127.0.0.1:{closed}");
    for (args, words) in [
        (
            vec!["send", &spec, "-p", "5999"],
            vec!["port is given twice"],
        ),
        (
            vec!["send", &spec, "-n", "16", "-t", "1"],
            vec!["--messages", "--time"],
        ),
        (vec!["send", &spec, "-P", "0"], vec!["--parallel"]),
        (vec!["send", &spec, "-P", "100000"], vec!["--parallel"]),
        (vec!["send", &spec, "-P", "100"], vec!["--max-streams 64"]),
        (
            vec!["send", &spec, "--max-streams", "0"],
            vec!["--max-streams"],
        ),
        (
            vec![
                "send",
                &spec,
                "--secret-file",
                "/nonexistent/tcptune.secret",
            ],
            vec!["--secret-file", "/nonexistent/tcptune.secret"],
        ),
        (
            vec!["watch", "--once", "--count", "3"],
            vec!["--once", "--count"],
        ),
    ] {
        let o = run(&args);
        assert!(
            o.stdout.is_empty(),
            "{args:?} printed: {}",
            String::from_utf8_lossy(&o.stdout)
        );
        fails(&args, 2, &words);
    }
    // The missing file is said once, not twice.
    let o = run(&["send", &spec, "--secret-file", "/nonexistent/x"]);
    assert_eq!(
        stderr(&o).matches("No such file").count(),
        1,
        "{}",
        stderr(&o)
    );
    // An unknown congestion control fails here, not at the server.
    if std::path::Path::new("/proc/sys/net/ipv4/tcp_available_congestion_control").exists() {
        fails(
            &["send", &spec, "-C", "bogus"],
            2,
            &["-C bogus", "available"],
        );
    }
}

#[test]
fn connection_errors_say_what_to_do_and_the_banner_names_the_real_port() {
    let closed = free_port().to_string();
    let o = run(&["send", "127.0.0.1", "-p", &closed, "-n", "1"]);
    assert_eq!(o.status.code(), Some(3));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(&format!("Connecting to 127.0.0.1 port {closed}")),
        "{out}"
    );
    fails(
        &["send", "127.0.0.1", "-p", &closed, "-n", "1"],
        3,
        &["refused", "nothing listens", "tcptune serve"],
    );
    // Secrets of at least 128 bits, readable by their owner only (else a warning line).
    let right = std::env::temp_dir().join(format!("tcptune-right-{}", std::process::id()));
    private_file(&right, &"5e".repeat(32));
    let s = Server::start(&["--secret-file", right.to_str().unwrap_or_default()]);
    let wrong = std::env::temp_dir().join(format!("tcptune-wrong-{}", std::process::id()));
    private_file(&wrong, "not the server's secret, but long enough");
    fails(
        &[
            "send",
            "127.0.0.1",
            "-p",
            &s.port(),
            "-n",
            "1",
            "--no-path-db",
            "--secret-file",
            wrong.to_str().unwrap_or_default(),
        ],
        3,
        &["secret does not match"],
    );
    // A secret given to a server that checks none: the client refuses it (it could be an
    // impersonator; the keys would not depend on the secret). This was a warning before
    // issue 21's no-downgrade rule.
    let open = Server::start(&[]);
    let o = run(&[
        "send",
        "127.0.0.1",
        "-p",
        &open.port(),
        "-n",
        "1",
        "--no-path-db",
        "--secret-file",
        wrong.to_str().unwrap_or_default(),
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("without checking its shared secret")
            && stderr(&o).contains("nothing was sent"),
        "{}",
        stderr(&o)
    );
    assert!(
        !stderr(&o).contains("does not answer like a tcptune server"),
        "{}",
        stderr(&o)
    );
    let _ = std::fs::remove_file(&wrong);
    let _ = std::fs::remove_file(&right);
}

/// Write `text` into a file only its owner may read (a secret file).
fn private_file(path: &std::path::Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).expect("write");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
}

#[test]
fn serve_exit_statuses_follow_the_table() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = busy.local_addr().expect("addr").port().to_string();
    fails(
        &[
            "serve",
            "-B",
            "127.0.0.1",
            "-p",
            &port,
            "--max-duration",
            "60s",
        ],
        5,
        &["in use", "-p"],
    );
    fails(
        &["serve", "-B", "192.0.2.55", "-p", "0"],
        5,
        &["not one of this host's"],
    );
    fails(&["serve", "-4", "-6"], 2, &["--ipv4", "--ipv6"]);
    fails(
        &[
            "serve",
            "--logfile",
            "/nonexistent/dir/tcptune.log",
            "-p",
            "0",
        ],
        2,
        &["--logfile"],
    );
}

#[test]
fn privileged_commands_exit_5_for_an_unprivileged_user() {
    // Root, to become nobody with util-linux's setpriv.
    if !tcptune_testkit::require(
        "privileged_commands_exit_5_for_an_unprivileged_user",
        &[
            tcptune_testkit::Need::Root,
            tcptune_testkit::Need::Program("setpriv"),
        ],
    ) {
        return;
    }
    let as_nobody = |args: &[&str]| {
        let o = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("setpriv");
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, err) = as_nobody(&["doctor", "--apply", "--target", "1gbit", "--rtt", "10ms"]);
    assert_eq!(code, Some(5), "{err}");
    assert!(
        err.contains("needs root") && err.lines().count() == 1,
        "{err}"
    );
}

#[test]
fn ctrl_c_ends_send_with_a_report_of_what_moved_and_exit_130() {
    let s = Server::start(&[]);
    for json in [true, false] {
        let mut args = vec![
            "send",
            "127.0.0.1",
            "-p",
            "",
            "-t",
            "30",
            "--no-path-db",
            "--tune",
            "kernel",
        ];
        let port = s.port();
        args[3] = &port;
        if json {
            args.push("--json");
        }
        let child = Command::new(BIN)
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start send");
        std::thread::sleep(Duration::from_millis(1500));
        // SAFETY: a signal to our own child.
        unsafe {
            libc::kill(child.id() as libc::pid_t, libc::SIGINT);
        }
        let t0 = Instant::now();
        let o = child.wait_with_output().expect("wait");
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "send took long to stop"
        );
        assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        if json {
            let v: serde_json::Value = serde_json::from_str(&out).expect("a complete JSON report");
            assert_eq!(v["end"]["tcptune"]["interrupted"], true);
            assert!(v["end"]["sum_received"]["bytes"].as_u64() > Some(0), "{v}");
            assert!(v.get("error").is_none());
        } else {
            assert!(
                out.contains("INTERRUPTED:") && out.contains("[SUM]"),
                "{out}"
            );
        }
        // The server records what moved, and not as a failure.
        let deadline = Instant::now() + Duration::from_secs(5);
        let ended = loop {
            match s.log.recv_timeout(Duration::from_millis(200)) {
                Ok(l) if l.contains("ended:") => break l,
                Ok(_) => {}
                Err(_) => assert!(Instant::now() < deadline, "no session end logged"),
            }
        };
        assert!(
            !ended.contains("FAILED") && !ended.contains(" 0 B moved"),
            "{ended}"
        );
    }
}
