//! Fixture-driven tests of every check: `tests/fixtures/checks/*.fix` (format in the README
//! there) start from a healthy host, change some facts, and state the findings.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use tcptune_core::{parse_duration, Rate};
use tcptune_doctor::facts::{keys, Duplex, Fact, HostFacts, Interface, QdiscFacts};
use tcptune_doctor::{checks, Finding, Severity, Target, TargetSource};

/// A tuned host: every check passes for 10 Gbit/s at 100 ms.
fn baseline() -> HostFacts {
    let sysctls: &[(&str, &str)] = &[
        (keys::RMEM_MAX, "268435456"),
        (keys::WMEM_MAX, "268435456"),
        (keys::RMEM_DEFAULT, "212992"),
        (keys::WMEM_DEFAULT, "212992"),
        (keys::TCP_RMEM, "4096\t131072\t268435456"),
        (keys::TCP_WMEM, "4096\t16384\t268435456"),
        (keys::TCP_MEM, "1000000\t2000000\t3000000"),
        (keys::WINDOW_SCALING, "1"),
        (keys::TIMESTAMPS, "1"),
        (keys::SACK, "1"),
        (keys::MODERATE_RCVBUF, "1"),
        (keys::CONGESTION_CONTROL, "bbr"),
        (keys::AVAILABLE_CC, "reno cubic bbr"),
        (keys::ALLOWED_CC, "reno cubic bbr"),
        (keys::DEFAULT_QDISC, "fq"),
        (keys::MTU_PROBING, "0"),
        (keys::NO_METRICS_SAVE, "1"),
        (keys::NOTSENT_LOWAT, "4294967295"),
        (keys::SLOW_START_AFTER_IDLE, "0"),
        (keys::ADV_WIN_SCALE, "1"),
    ];
    let mut counters = BTreeMap::new();
    counters.insert(
        "Tcp".to_string(),
        [
            ("OutSegs", 0i64),
            ("RetransSegs", 0),
            ("InSegs", 0),
            ("InErrs", 0),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), *v))
        .collect::<BTreeMap<_, _>>(),
    );
    counters.insert(
        "TcpExt".to_string(),
        [("TCPMemoryPressures", 0i64), ("PruneCalled", 0)]
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect::<BTreeMap<_, _>>(),
    );
    HostFacts {
        kernel_release: Fact::Ok("6.18.0".into()),
        page_size: 4096,
        sysctls: sysctls
            .iter()
            .map(|(k, v)| (k.to_string(), Fact::Ok(v.to_string())))
            .collect(),
        interfaces: vec![iface(
            "eth0 mtu=1500 speed=10000 duplex=full state=up physical",
        )],
        counters: Fact::Ok(counters),
        qdiscs: QdiscFacts {
            available: Some(vec!["fq".into(), "htb".into(), "pfifo_fast".into()]),
            source: "fixture".into(),
        },
    }
}

fn iface(spec: &str) -> Interface {
    let mut words = spec.split_whitespace();
    let name = words.next().expect("iface name").to_string();
    let mut i = Interface {
        loopback: name == "lo",
        name,
        mtu: None,
        speed_mbps: None,
        duplex: None,
        operstate: "up".into(),
        physical: false,
    };
    for w in words {
        match w.split_once('=') {
            Some(("mtu", v)) => i.mtu = v.parse().ok(),
            Some(("speed", v)) => i.speed_mbps = v.parse().ok(),
            Some(("duplex", "full")) => i.duplex = Some(Duplex::Full),
            Some(("duplex", "half")) => i.duplex = Some(Duplex::Half),
            Some(("state", v)) => i.operstate = v.into(),
            None if w == "physical" => i.physical = true,
            _ => panic!("bad iface word '{w}'"),
        }
    }
    i
}

struct Expect {
    severity: Severity,
    id: String,
    text: Option<String>,
}

struct Case {
    facts: HostFacts,
    target: Target,
    expects: Vec<Expect>,
    absent: Vec<String>,
    exit: Option<u8>,
}

fn parse_case(text: &str) -> Case {
    let mut facts = baseline();
    let mut target = None;
    let mut expects = Vec::new();
    let mut absent = Vec::new();
    let mut exit = None;
    let mut ifaces_replaced = false;
    for line in text.lines() {
        let line = line.trim_end();
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let (kw, rest) = line.split_once(':').expect("keyword: value");
        let rest = rest.trim();
        match kw {
            "target" => {
                let w: Vec<&str> = rest.split_whitespace().collect();
                target = Some(Target {
                    rate: w[0].parse::<Rate>().expect("rate"),
                    rtt: parse_duration(w[1]).expect("rtt"),
                    source: match w.get(2).copied().unwrap_or("user") {
                        "user" => TargetSource::User,
                        "assumed" => TargetSource::Assumed,
                        "measured" => TargetSource::Measured,
                        other => panic!("bad source {other}"),
                    },
                });
            }
            "set" => {
                let (k, v) = rest.split_once('=').expect("KEY = VALUE");
                let v = v.trim_start().replace("\\t", "\t");
                facts.sysctls.insert(k.trim().to_string(), Fact::Ok(v));
            }
            "missing" => {
                facts.sysctls.insert(rest.to_string(), Fact::Missing);
            }
            "unreadable" => {
                facts.sysctls.insert(
                    rest.to_string(),
                    Fact::Unreadable("Permission denied (os error 13)".into()),
                );
            }
            "iface" => {
                if !ifaces_replaced {
                    facts.interfaces.clear();
                    ifaces_replaced = true;
                }
                facts.interfaces.push(iface(rest));
            }
            "counter" => {
                let w: Vec<&str> = rest.split_whitespace().collect();
                if let Fact::Ok(c) = &mut facts.counters {
                    c.entry(w[0].to_string())
                        .or_default()
                        .insert(w[1].to_string(), w[2].parse().expect("counter value"));
                }
            }
            "counters" => {
                assert_eq!(rest, "unreadable");
                facts.counters =
                    Fact::Unreadable("reading /proc/net/snmp: Permission denied".into());
            }
            "qdiscs" => {
                facts.qdiscs.available = if rest == "unknown" {
                    None
                } else {
                    Some(rest.split_whitespace().map(str::to_string).collect())
                };
            }
            "kernel" => facts.kernel_release = Fact::Ok(rest.to_string()),
            "page_size" => facts.page_size = rest.parse().expect("page size"),
            "expect" => {
                let (head, text) = match rest.split_once(" ~ ") {
                    Some((h, t)) => (h, Some(t.to_string())),
                    None => (rest, None),
                };
                let (sev, id) = head.split_once(' ').expect("SEVERITY ID");
                expects.push(Expect {
                    severity: match sev {
                        "info" => Severity::Info,
                        "warning" => Severity::Warning,
                        "error" => Severity::Error,
                        other => panic!("bad severity {other}"),
                    },
                    id: id.trim().to_string(),
                    text,
                });
            }
            "expect-none" => absent.push(rest.to_string()),
            "exit" => exit = Some(rest.parse().expect("exit code")),
            other => panic!("unknown keyword '{other}'"),
        }
    }
    Case {
        facts,
        target: target.expect("a target: line"),
        expects,
        absent,
        exit,
    }
}

fn describe(findings: &[Finding]) -> String {
    findings
        .iter()
        .map(|f| {
            format!(
                "  [{}] {}: {}\n    fix: {}",
                f.severity.label(),
                f.id,
                f.message,
                f.fix.as_deref().unwrap_or("-")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn check_fixture(path: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let case = parse_case(&text);
    let findings = checks::run(&case.facts, &case.target);
    let mut errors = Vec::new();
    for e in &case.expects {
        let hit = findings.iter().any(|f| {
            f.id == e.id
                && f.severity == e.severity
                && e.text.as_ref().is_none_or(|t| {
                    f.message.contains(t.as_str())
                        || f.fix.as_deref().is_some_and(|x| x.contains(t.as_str()))
                })
        });
        if !hit {
            errors.push(format!(
                "expected {} {}{}",
                e.severity.label(),
                e.id,
                e.text
                    .as_ref()
                    .map(|t| format!(" containing '{t}'"))
                    .unwrap_or_default()
            ));
        }
    }
    for id in &case.absent {
        if findings.iter().any(|f| &f.id == id) {
            errors.push(format!("expected no {id}"));
        }
    }
    if let Some(code) = case.exit {
        let got = u8::from(checks::any_problem(&findings));
        if got != code {
            errors.push(format!("expected exit {code}, the findings give {got}"));
        }
    }
    // Every finding explains itself; every sysctl fix is a runnable command.
    for f in &findings {
        if f.message.len() < 40 {
            errors.push(format!("{}: message too terse", f.id));
        }
        for s in &f.sysctl {
            if !f.fix.as_deref().unwrap_or("").contains(&s.command()) {
                errors.push(format!("{}: fix text lacks '{}'", f.id, s.command()));
            }
            if let Ok(v) = s.value.parse::<u64>() {
                if v > i32::MAX as u64 {
                    errors.push(format!("{}: {} = {v} exceeds INT_MAX", f.id, s.key));
                }
            }
            for part in s.value.split(' ') {
                if let Ok(v) = part.parse::<u64>() {
                    if s.key != keys::TCP_MEM && v > i32::MAX as u64 {
                        errors.push(format!("{}: {} part {v} exceeds INT_MAX", f.id, s.key));
                    }
                }
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{}:\n  {}\nfindings:\n{}",
            path.display(),
            errors.join("\n  "),
            describe(&findings)
        ))
    }
}

#[test]
fn every_fixture_yields_the_expected_findings() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/checks");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("fixture dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "fix"))
        .collect();
    files.sort();
    assert!(files.len() >= 30, "only {} fixtures", files.len());
    let failures: Vec<String> = files
        .iter()
        .filter_map(|f| check_fixture(f).err())
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} fixtures failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n\n")
    );
}

#[test]
fn every_registered_check_has_a_fixture_that_fires_it() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/checks");
    let all: String = std::fs::read_dir(&dir)
        .expect("fixture dir")
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .collect();
    for c in checks::CHECKS {
        assert!(
            all.contains(&format!(" {}", c.id)),
            "no fixture mentions check {}",
            c.id
        );
    }
}

#[test]
fn healthy_host_with_short_rtt_has_no_findings_at_all() {
    let t = Target {
        rate: Rate::gbit(1),
        rtt: Duration::from_millis(1),
        source: TargetSource::User,
    };
    let f = checks::run(&baseline(), &t);
    assert!(f.is_empty(), "{}", describe(&f));
}
