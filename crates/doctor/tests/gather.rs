//! The I/O layer read from a fake root: odd files must become facts that say what went
//! wrong, never a failure of the whole gathering.

use std::path::{Path, PathBuf};
use tcptune_core::Rate;
use tcptune_doctor::facts::{keys, Duplex, Fact};
use tcptune_doctor::sysctl_file;
use tcptune_doctor::{checks, FactSource, Target, TargetSource};

/// A temporary directory removed on drop (even when the test panics).
struct TempRoot(PathBuf);

impl TempRoot {
    fn new(tag: &str) -> TempRoot {
        let p = std::env::temp_dir().join(format!("tcptune-doctor-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("temp dir");
        TempRoot(p)
    }

    fn write(&self, rel: &str, text: &str) {
        let p = self.0.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }

    fn mkdir(&self, rel: &str) {
        std::fs::create_dir_all(self.0.join(rel)).expect("mkdir");
    }
}

impl Drop for TempRoot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn sysctl_rel(key: &str) -> String {
    format!("proc/sys/{}", key.replace('.', "/"))
}

fn fake_host(root: &TempRoot) {
    root.write("proc/sys/kernel/osrelease", "6.1.0-13-amd64\n");
    root.write(&sysctl_rel(keys::RMEM_MAX), "212992\n");
    root.write(&sysctl_rel(keys::WMEM_MAX), "212992\n");
    root.write(&sysctl_rel(keys::TCP_RMEM), "4096\t131072\t6291456\n");
    root.write(&sysctl_rel(keys::TCP_WMEM), "4096\t16384\t4194304\n");
    root.write(&sysctl_rel(keys::TCP_MEM), "92451\t123270\t184902\n");
    root.write(&sysctl_rel(keys::WINDOW_SCALING), "1\n");
    root.write(&sysctl_rel(keys::SACK), "1\n");
    root.write(&sysctl_rel(keys::MODERATE_RCVBUF), "1\n");
    root.write(&sysctl_rel(keys::CONGESTION_CONTROL), "cubic\n");
    root.write(&sysctl_rel(keys::AVAILABLE_CC), "reno cubic\n");
    root.write(&sysctl_rel(keys::DEFAULT_QDISC), "fq_codel\n");
    root.write(&sysctl_rel(keys::MTU_PROBING), "0\n");
    // Unreadable: a directory where a file should be (EISDIR, even for root).
    root.mkdir(&sysctl_rel(keys::TIMESTAMPS));
    // tcp_notsent_lowat and others are simply missing.
    root.write("sys/class/net/lo/mtu", "65536\n");
    root.write("sys/class/net/lo/type", "772\n");
    root.write("sys/class/net/lo/operstate", "unknown\n");
    root.write("sys/class/net/lo/speed", "");
    root.write("sys/class/net/eth0/mtu", "9000\n");
    root.write("sys/class/net/eth0/type", "1\n");
    root.write("sys/class/net/eth0/operstate", "up\n");
    root.write("sys/class/net/eth0/speed", "1000\n");
    root.write("sys/class/net/eth0/duplex", "half\n");
    root.mkdir("sys/class/net/eth0/device");
    root.write("sys/class/net/veth0/mtu", "1500\n");
    root.write("sys/class/net/veth0/operstate", "up\n");
    root.write("sys/class/net/veth0/speed", "-1\n");
    root.write("sys/class/net/veth0/duplex", "unknown\n");
    root.write(
        "proc/net/snmp",
        "Tcp: RtoAlgorithm MaxConn InSegs OutSegs RetransSegs InErrs\nTcp: 1 -1 200000 100000 5000 0\n",
    );
    root.write(
        "proc/net/netstat",
        "TcpExt: PruneCalled TCPMemoryPressures\nTcpExt: 0 0\n",
    );
    root.write(
        "proc/kallsyms",
        "0000000000000000 t pfifo_fast_enqueue\n0000000000000000 t fq_codel_enqueue\n",
    );
    root.write(
        "lib/modules/6.1.0-13-amd64/kernel/net/sched/sch_fq.ko.xz",
        "",
    );
    root.write(
        "lib/modules/6.1.0-13-amd64/kernel/net/sched/sch_netem.ko.xz",
        "",
    );
}

#[test]
fn odd_files_become_facts_that_say_what_is_wrong() {
    let root = TempRoot::new("gather");
    fake_host(&root);
    let f = FactSource::at(&root.0).gather();
    assert_eq!(f.kernel_release, Fact::Ok("6.1.0-13-amd64".into()));
    assert_eq!(f.triple(keys::TCP_RMEM), Ok([4096, 131072, 6291456]));
    assert!(matches!(
        f.sysctls.get(keys::TIMESTAMPS),
        Some(Fact::Unreadable(e)) if e.contains("tcp_timestamps")
    ));
    assert_eq!(f.sysctls.get(keys::NOTSENT_LOWAT), Some(&Fact::Missing));
    let eth0 = f
        .interfaces
        .iter()
        .find(|i| i.name == "eth0")
        .expect("eth0");
    assert_eq!(
        (eth0.mtu, eth0.speed_mbps, eth0.duplex, eth0.physical),
        (Some(9000), Some(1000), Some(Duplex::Half), true)
    );
    let veth = f
        .interfaces
        .iter()
        .find(|i| i.name == "veth0")
        .expect("veth0");
    assert_eq!(
        (veth.speed_mbps, veth.duplex, veth.physical),
        (None, None, false)
    );
    assert!(f.interfaces.iter().any(|i| i.name == "lo" && i.loopback));
    assert_eq!(f.counter("Tcp", "MaxConn"), Some(-1));
    assert_eq!(f.counter("Tcp", "RetransSegs"), Some(5000));
    // No kernel config: kallsyms (loaded) plus the module directory (loadable).
    assert_eq!(
        f.qdiscs.available.as_deref(),
        Some(
            &[
                "fq".to_string(),
                "fq_codel".into(),
                "netem".into(),
                "pfifo_fast".into()
            ][..]
        )
    );
    assert!(f.qdiscs.source.contains("kallsyms"), "{}", f.qdiscs.source);
}

#[test]
fn checks_on_the_fake_host_find_its_problems() {
    let root = TempRoot::new("checks");
    fake_host(&root);
    let f = FactSource::at(&root.0).gather();
    let t = Target {
        rate: Rate::gbit(1),
        rtt: std::time::Duration::from_millis(50),
        source: TargetSource::User,
    };
    let findings = checks::run(&f, &t);
    let ids: Vec<&str> = findings.iter().map(|x| x.id.as_str()).collect();
    for want in [
        "half-duplex",
        "retransmissions-high",
        "tcp-wmem-max-small",
        "rmem-max-small",
        "unchecked-timestamps-off",
        "mtu-probing-off",
    ] {
        assert!(ids.contains(&want), "{want} missing from {ids:?}");
    }
    // 5% retransmissions, as the counters say.
    let r = findings
        .iter()
        .find(|x| x.id == "retransmissions-high")
        .unwrap();
    assert!(r.message.contains("5.00%"), "{}", r.message);
}

#[test]
fn missing_root_gathers_nothing_without_failing() {
    let f = FactSource::at(Path::new("/nonexistent/tcptune-root")).gather();
    assert!(f.sysctls.values().all(|v| *v == Fact::Missing));
    assert!(f.interfaces.is_empty());
    assert!(matches!(f.counters, Fact::Unreadable(_)));
    assert_eq!(f.qdiscs.available, None);
}

#[test]
fn sysctl_file_has_active_required_lines_and_commented_optional_ones() {
    let root = TempRoot::new("file");
    fake_host(&root);
    let f = FactSource::at(&root.0).gather();
    let t = Target {
        rate: Rate::gbit(1),
        rtt: std::time::Duration::from_millis(50),
        source: TargetSource::User,
    };
    let findings = checks::run(&f, &t);
    let text = sysctl_file::render(&findings, &f, &t, "0.0.0-test");
    // Required: the send autotuning maximum for 1 Gbit/s x 50 ms (12 MiB).
    assert!(
        text.lines()
            .any(|l| l == "net.ipv4.tcp_wmem = 4096 16384 12582912"),
        "{text}"
    );
    assert!(text.contains("# was: 4096 16384 4194304"), "{text}");
    // Optional (info): MTU probing on the jumbo interface, commented out.
    assert!(
        text.contains("# optional: net.ipv4.tcp_mtu_probing = 1"),
        "{text}"
    );
    // Every active line is KEY = VALUE and every other line a comment.
    for l in text.lines().filter(|l| !l.is_empty()) {
        assert!(l.starts_with('#') || l.contains(" = "), "odd line '{l}'");
    }
    let changes = sysctl_file::changes(&findings, &f);
    let keys_once: std::collections::BTreeSet<_> =
        changes.iter().map(|c| c.setting.key.clone()).collect();
    assert_eq!(keys_once.len(), changes.len(), "a key set twice");
}
