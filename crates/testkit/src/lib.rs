//! Test support shared by tcptune's integration tests (a dev-dependency only).
//!
//! * [`require`]: the one rule for tests that need root, TUN devices, user namespaces or a
//!   program: outside CI they skip and say why; under `CI=true` a missing requirement fails
//!   the test. A test that runs an outside program, itself or through the command under
//!   test (`emu run -- ping`), names it with [`Need::Program`] (or [`require_program`]);
//!   one that feeds python3 a module with [`Need::PythonModule`]. The skip line names the
//!   package that installs it, from [`PROGRAMS`] and [`PYTHON_MODULES`], the lists that
//!   `.ci/run` installs (a unit test below checks that it installs every one). [`Need::Emulator`] passes as root and, in the emulator's rootless mode, as
//!   anyone where user namespaces are allowed. CI runs the emulator's and the lab's tests a
//!   second time as an unprivileged user with `TCPTUNE_CI_ROOTLESS=true` ([`ci_rootless`]):
//!   there tests that need root skip (they ran as root), and every other one must run.
//! * [`Netns`]: a network namespace of the test's own (name starting with `tt`, unique per
//!   process and call), removed on drop together with every process left inside it, also
//!   when the test panics. [`Netns::veth_pair`] joins two of them. As root it is a named
//!   namespace (`ip netns`); otherwise a rootless [`tcptune_emu::Namespace`].
//! * [`ChildGuard`]: a supervised child (it dies with the test process, even on SIGKILL),
//!   stopped and reaped on drop.
//!
//! Stopping processes is `tcptune_sys::process`'s job, the one implementation shared with
//! the `tcptune` command and the lab. This crate depends on `tcptune-emu` for it; the emu
//! crate takes this one as a dev-dependency only, a cycle Cargo allows (the emu crate's own
//! unit tests do not use the test kit, so only one build of it meets the kit's).
//! * [`Sshd`]: a real sshd in one side of an emulated topology, with keys made for the test
//!   (the tests of `tcptune cp` over ssh); [`sshd::NEEDS`] says what it needs.
//! * [`median`], [`wait_for`]: small helpers that several test files need.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use tcptune_sys::process::{self, Supervised};

pub mod pg;
pub mod sshd;
pub use sshd::Sshd;

/// Whether this is a CI run (`CI=true`), where tests must not skip.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Whether this is the CI step that runs tests as an unprivileged user
/// (`TCPTUNE_CI_ROOTLESS=true`): tests that need root skip there, having run as root.
pub fn ci_rootless() -> bool {
    std::env::var("TCPTUNE_CI_ROOTLESS").is_ok_and(|v| v == "true")
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Something a test needs from the machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Root (named network namespaces, host sysctls, TUN devices).
    Root,
    /// `/dev/net/tun` (the emulator's root mode).
    Tun,
    /// Unprivileged user namespaces with network namespaces in them (the emulator's rootless
    /// mode): `user.max_user_namespaces` above 0, no sysctl forbidding them, and a child can
    /// make one.
    UserNs,
    /// The emulator in the mode this process gets (`tcptune_emu::mode`): root mode as root
    /// with `/dev/net/tun`, rootless mode otherwise (user namespaces).
    Emulator,
    /// A [`Netns`] of the test's own: as root a named one, otherwise one in a user namespace
    /// (what [`Need::UserNs`] checks).
    Netns,
    /// A program on `PATH` (`ping`, `iperf3`, `ss`, ...). It must be listed in [`PROGRAMS`]
    /// with the Debian package that installs it (the skip line names the package; `.ci/run`
    /// installs it): an unlisted program fails the test wherever it runs.
    Program(&'static str),
    /// A module `python3` can import (`iperf3`, `prometheus_client`), listed in
    /// [`PYTHON_MODULES`] with the pip package that installs it; needs `python3` itself
    /// first.
    PythonModule(&'static str),
}

/// Every outside program a test runs, itself or through the command under test, with the
/// Debian package that installs it. `.ci/run` installs each (its `TEST_PROGRAMS` holds the
/// same `program:package` pairs, checked by a unit test here).
pub const PROGRAMS: &[(&str, &str)] = &[
    ("ping", "iputils-ping"),
    ("iperf3", "iperf3"),
    ("ip", "iproute2"),
    ("ss", "iproute2"),
    ("setpriv", "util-linux"),
    ("unshare", "util-linux"),
    ("nsenter", "util-linux"),
    ("diff", "diffutils"),
    ("sysctl", "procps"),
    ("python3", "python3"),
    ("sshd", "openssh-server"),
    ("ssh", "openssh-client"),
    ("ssh-keygen", "openssh-client"),
    ("clang", "clang"),
    ("openssl", "openssl"),
];

/// Every python3 module a test imports (real consumers of tcptune's output), with the pip
/// package that installs it (`.ci/run` installs each).
pub const PYTHON_MODULES: &[(&str, &str)] = &[
    ("iperf3", "iperf3"),
    ("prometheus_client", "prometheus-client"),
];

/// The package that installs `name` according to `list`; a name missing from the list is a
/// mistake in the test (CI would not install it), so it panics wherever the test runs.
fn package_of(list: &[(&str, &'static str)], name: &str, list_name: &str) -> &'static str {
    list.iter()
        .find(|(n, _)| *n == name)
        .map(|(_, package)| *package)
        .unwrap_or_else(|| {
            panic!(
                "testkit: {name} is not in {list_name}: add it with its package (and to .ci/run)"
            )
        })
}

impl Need {
    fn missing(self) -> Option<String> {
        match self {
            Need::Root if !is_root() => Some("needs root (network namespaces)".into()),
            // The emulator and the namespaces are built with iproute2's `ip`, in both modes.
            Need::Tun if !Path::new("/dev/net/tun").exists() => {
                Some("/dev/net/tun is missing".into())
            }
            Need::Tun => Need::Program("ip").missing(),
            Need::UserNs => tcptune_emu::mode::userns_available()
                .err()
                .map(|e| format!("user namespaces are not available: {e}"))
                .or_else(|| Need::Program("ip").missing()),
            Need::Netns if !is_root() => Need::UserNs.missing(),
            Need::Netns => Need::Program("ip").missing(),
            Need::Emulator => {
                let (mode, _) = tcptune_emu::mode::detect(tcptune_emu::ModeChoice::from_env());
                mode.err()
                    .map(|e| format!("the emulator cannot run here: {e}"))
                    .or_else(|| Need::Program("ip").missing())
            }
            Need::Program(p) => {
                let package = package_of(PROGRAMS, p, "testkit::PROGRAMS");
                (!on_path(p)).then(|| format!("{p} not found (apt-get install {package})"))
            }
            Need::PythonModule(m) => {
                let pip = package_of(PYTHON_MODULES, m, "testkit::PYTHON_MODULES");
                Need::Program("python3").missing().or_else(|| {
                    (!python_imports(m)).then(|| {
                        format!("python3 cannot import {m} (python3 -m pip install {pip})")
                    })
                })
            }
            _ => None,
        }
    }
}

/// Whether `python3 -c 'import MODULE'` succeeds.
fn python_imports(module: &str) -> bool {
    Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The mode the emulator's topologies get in this process (root or rootless).
pub fn emulator_mode() -> Option<tcptune_emu::Mode> {
    tcptune_emu::mode::detect(tcptune_emu::ModeChoice::from_env())
        .0
        .ok()
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

/// Whether `test` can run here. When something in `needs` is missing it prints why and
/// returns false, except under `CI=true`, where it panics: CI must run every test (in the
/// unprivileged CI step, [`ci_rootless`], a missing [`Need::Root`] skips: those tests ran as
/// root).
///
/// ```no_run
/// if !tcptune_testkit::require("rtt_is_twice_the_delay", &[tcptune_testkit::Need::Emulator]) {
///     return;
/// }
/// ```
pub fn require(test: &str, needs: &[Need]) -> bool {
    for need in needs {
        if let Some(why) = need.missing() {
            let root_step_ran_it = *need == Need::Root && ci_rootless();
            assert!(
                !ci() || root_step_ran_it,
                "{test}: CI=true but {why}: this test must run in CI"
            );
            eprintln!("skipping {test}: {why}");
            return false;
        }
    }
    true
}

/// [`require`] for one program: `require_program("pings", "ping")` skips outside CI with
/// `skipping pings: ping not found (apt-get install iputils-ping)`.
pub fn require_program(test: &str, program: &'static str) -> bool {
    require(test, &[Need::Program(program)])
}

/// [`require`] for one python3 module: `python3 cannot import iperf3 (python3 -m pip
/// install iperf3)`, or `python3 not found (apt-get install python3)`.
pub fn require_python_module(test: &str, module: &'static str) -> bool {
    require(test, &[Need::PythonModule(module)])
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A name for something this test creates: `tt<tag><pid>-<n>`, unique per process and call.
/// Keep `tag` short: interface names are limited to 15 bytes.
pub fn unique_name(tag: &str) -> String {
    format!(
        "tt{tag}{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Run `ip ARGS`, panicking with its stderr if it fails.
pub fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running ip {}: {e}", args.join(" ")));
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// A network namespace owned by the test, with `lo` up. Dropping it kills every process
/// still inside and deletes it. As root it is named (`ip netns`); otherwise it is a rootless
/// [`tcptune_emu::Namespace`] (no name: [`name`](Self::name) is a label, and
/// [`run_in`](Self::run_in) is for root only).
#[derive(Debug)]
pub struct Netns {
    name: String,
    rootless: Option<tcptune_emu::Namespace>,
}

impl Netns {
    /// Create `tt<tag><pid>-<n>` and bring its loopback up.
    pub fn new(tag: &str) -> Netns {
        let name = unique_name(tag);
        if !is_root() {
            let ns = tcptune_emu::Namespace::new(&name)
                .unwrap_or_else(|e| panic!("rootless namespace {name}: {e}"));
            return Netns {
                name,
                rootless: Some(ns),
            };
        }
        let ns = Netns {
            name,
            rootless: None,
        };
        ip(&["netns", "add", &ns.name]);
        ip(&["-n", &ns.name, "link", "set", "lo", "up"]);
        ns
    }

    /// Two namespaces joined by a veth pair, `a` at `10.231.0.1/30` and `b` at
    /// `10.231.0.2/30` (addresses that exist only inside them).
    pub fn veth_pair(tag: &str) -> (Netns, Netns) {
        if !is_root() {
            let name = unique_name(tag);
            let (a, b) = tcptune_emu::Namespace::pair(
                &name,
                [10, 231, 0, 1].into(),
                [10, 231, 0, 2].into(),
                30,
            )
            .unwrap_or_else(|e| panic!("rootless namespaces {name}: {e}"));
            let wrap = |ns: tcptune_emu::Namespace| Netns {
                name: ns.label().to_string(),
                rootless: Some(ns),
            };
            return (wrap(a), wrap(b));
        }
        let a = Netns::new(&format!("{tag}a"));
        let b = Netns::new(&format!("{tag}b"));
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let (va, vb) = (format!("ttva{n}"), format!("ttvb{n}"));
        ip(&[
            "-n", &a.name, "link", "add", &va, "type", "veth", "peer", "name", &vb, "netns",
            &b.name,
        ]);
        ip(&["-n", &a.name, "addr", "add", "10.231.0.1/30", "dev", &va]);
        ip(&["-n", &b.name, "addr", "add", "10.231.0.2/30", "dev", &vb]);
        ip(&["-n", &a.name, "link", "set", &va, "up"]);
        ip(&["-n", &b.name, "link", "set", &vb, "up"]);
        (a, b)
    }

    /// The namespace's name (a label in rootless mode).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether it is a rootless namespace (the test runs without root).
    pub fn is_rootless(&self) -> bool {
        self.rootless.is_some()
    }

    /// A command that runs `program` inside the namespace (`ip netns exec` as root; rootless,
    /// joining its user namespace, where the program is root).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        if let Some(ns) = &self.rootless {
            return ns.command(program);
        }
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }

    /// Read a sysctl of the namespace.
    pub fn sysctl(&self, key: &str) -> String {
        let out = self
            .command("cat")
            .arg(format!("/proc/sys/{}", key.replace('.', "/")))
            .output()
            .unwrap_or_else(|e| panic!("reading {key} in {}: {e}", self.name));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Set a sysctl of the namespace (panics on failure).
    pub fn set_sysctl(&self, key: &str, value: &str) {
        let st = self
            .command("sysctl")
            .arg("-qw")
            .arg(format!("{key}={value}"))
            .status()
            .unwrap_or_else(|e| panic!("sysctl {key} in {}: {e}", self.name));
        assert!(st.success(), "sysctl -w {key}={value} in {}", self.name);
    }

    /// A socket created inside the namespace (both modes; `SOCK_CLOEXEC` is added).
    pub fn socket(
        &self,
        domain: libc::c_int,
        ty: libc::c_int,
        protocol: libc::c_int,
    ) -> std::os::fd::OwnedFd {
        if let Some(ns) = &self.rootless {
            return ns
                .socket(domain, ty, protocol)
                .unwrap_or_else(|e| panic!("{e}"));
        }
        self.run_in(move || {
            use std::os::fd::FromRawFd;
            // SAFETY: plain socket(2), owned at once.
            let fd = unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, protocol) };
            assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
            // SAFETY: a fresh descriptor.
            unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }
        })
    }

    /// Run `f` on a thread that has entered the namespace (its sockets live there). Root
    /// only: a process without root cannot enter a namespace of a user namespace it made
    /// (use [`socket`](Self::socket) or [`command`](Self::command)).
    pub fn run_in<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        assert!(
            self.rootless.is_none(),
            "Netns::run_in needs root; {} is rootless",
            self.name
        );
        let path = format!("/run/netns/{}", self.name);
        std::thread::spawn(move || {
            let file = std::fs::File::open(&path)
                .unwrap_or_else(|e| panic!("opening network namespace {path}: {e}"));
            use std::os::fd::AsRawFd;
            // SAFETY: setns on a namespace descriptor; it affects only this thread.
            let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(r, 0, "setns {path}: {}", std::io::Error::last_os_error());
            f()
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    }

    /// The processes inside the namespace now.
    pub fn pids(&self) -> Vec<i32> {
        if let Some(ns) = &self.rootless {
            return ns.processes();
        }
        Command::new("ip")
            .args(["netns", "pids", &self.name])
            .stderr(Stdio::null())
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let what = format!("processes in network namespace {}", self.name);
        if let Err(e) = process::terminate(&what, Duration::from_secs(2), || self.pids()) {
            eprintln!("testkit: {e}");
        }
        if self.rootless.is_none() {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.name])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// A child process that dies with the test process (even on SIGKILL) and is stopped
/// (SIGTERM, then SIGKILL after half a second) and reaped when the guard drops.
#[derive(Debug)]
pub struct ChildGuard(pub Supervised);

impl ChildGuard {
    /// Spawn `cmd` under a guard (panics if it cannot start).
    pub fn spawn(cmd: &mut Command) -> ChildGuard {
        let what = format!("{cmd:?}");
        match process::spawn(cmd, what) {
            Ok(c) => ChildGuard(c.grace(Duration::from_millis(500))),
            Err(e) => panic!("{e}"),
        }
    }

    /// Its process id.
    pub fn id(&self) -> u32 {
        self.0.id()
    }
}

/// The median of `values` (the upper one of the two middle values for an even count).
///
/// # Panics
///
/// On an empty list.
pub fn median(mut values: Vec<f64>) -> f64 {
    assert!(!values.is_empty(), "median of nothing");
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

/// Poll `f` every 20 ms until it is true or `timeout` passes; returns its last answer.
pub fn wait_for(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_picks_the_middle() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 3.0);
    }

    #[test]
    fn names_are_unique_and_marked_as_ours() {
        let (a, b) = (unique_name("x"), unique_name("x"));
        assert_ne!(a, b);
        assert!(a.starts_with("ttx"));
    }

    /// `.ci/run`, which installs what the tests need.
    fn ci_script() -> String {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../.ci/run");
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"))
    }

    /// The words of the shell variable `name="..."` in `.ci/run`.
    fn ci_list(script: &str, name: &str) -> Vec<String> {
        script
            .split(&format!("{name}=\""))
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .map(|l| l.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default()
    }

    #[test]
    fn ci_installs_every_program_and_python_module_the_tests_need() {
        let script = ci_script();
        let programs = ci_list(&script, "TEST_PROGRAMS");
        for (program, package) in PROGRAMS {
            let pair = format!("{program}:{package}");
            assert!(
                programs.contains(&pair),
                ".ci/run's TEST_PROGRAMS lacks {pair}: {programs:?}"
            );
        }
        let modules = ci_list(&script, "TEST_PYTHON_MODULES");
        for (module, pip) in PYTHON_MODULES {
            let pair = format!("{module}:{pip}");
            assert!(
                modules
                    .iter()
                    .any(|m| m.strip_prefix(&pair).is_some_and(|version| {
                        version.is_empty() || version.starts_with(['=', '<', '>', '~'])
                    })),
                ".ci/run's TEST_PYTHON_MODULES lacks {pair}: {modules:?}"
            );
        }
    }

    #[test]
    fn a_missing_program_is_named_with_its_package() {
        for (program, package) in PROGRAMS {
            let why = Need::Program(program).missing();
            assert_eq!(on_path(program), why.is_none(), "{program}: {why:?}");
            if let Some(why) = why {
                assert_eq!(
                    why,
                    format!("{program} not found (apt-get install {package})")
                );
            }
        }
    }

    #[test]
    #[should_panic(expected = "not in testkit::PROGRAMS")]
    fn a_program_without_a_package_is_a_mistake_in_the_test() {
        let _ = Need::Program("tcptune-no-such-program").missing();
    }

    #[test]
    fn a_namespace_and_what_runs_in_it_are_gone_after_drop() {
        if !require("namespace_cleanup", &[Need::Netns]) {
            return;
        }
        let ns = Netns::new("kit");
        let name = ns.name().to_string();
        let sleeper = ChildGuard::spawn(ns.command("sleep").arg("30"));
        let pid = sleeper.id();
        assert!(wait_for(Duration::from_secs(5), || !ns.pids().is_empty()));
        assert!(ns.pids().contains(&(pid as i32)), "{:?}", ns.pids());
        drop(ns);
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists() || {
                // A zombie until its guard reaps it.
                std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| s.contains(") Z"))
            }
        );
        let list = Command::new("ip")
            .args(["netns", "list"])
            .output()
            .expect("ip");
        assert!(!String::from_utf8_lossy(&list.stdout).contains(&name));
    }

    #[test]
    fn a_rootless_pair_reaches_each_other_and_keeps_its_sysctls() {
        if !require(
            "a_rootless_pair_reaches_each_other",
            &[Need::UserNs, Need::Program("ping")],
        ) {
            return;
        }
        let (a, b) = tcptune_emu::Namespace::pair(
            &unique_name("kitp"),
            [10, 231, 0, 1].into(),
            [10, 231, 0, 2].into(),
            30,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let st = a
            .command("ping")
            .args(["-c", "1", "-W", "2", "10.231.0.2"])
            .stdout(Stdio::null())
            .status()
            .expect("ping");
        assert!(st.success());
        assert!(b.write_sysctl("net.ipv4.tcp_sack", "0").is_ok());
        assert_eq!(
            b.read_sysctl("net.ipv4.tcp_sack").ok().as_deref(),
            Some("0")
        );
        assert_eq!(
            a.read_sysctl("net.ipv4.tcp_sack").ok().as_deref(),
            Some("1")
        );
        let id = whoami_inside(&a);
        assert_eq!(id, "0", "the test's user is root inside");
    }

    fn whoami_inside(ns: &tcptune_emu::Namespace) -> String {
        let out = ns.command("id").arg("-u").output().expect("id");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}
