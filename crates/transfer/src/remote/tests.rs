use super::*;
use std::net::{Ipv4Addr, Ipv6Addr};

const KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

fn spec(rsh: Option<&str>) -> RemoteSpec {
    RemoteSpec::new("alice@dtn2", rsh, None, None).expect("spec")
}

#[test]
fn the_offer_line_round_trips() {
    let o = Offer {
        addr: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        port: 40123,
        key: KEY.into(),
    };
    assert_eq!(
        o.line(),
        format!("tcptune-stdio 1 addr=10.0.0.2 port=40123 key={KEY}")
    );
    assert_eq!(parse_line(&(o.line() + "\r\n")), Ok(Some(o.clone())));
    assert_eq!(o.connect_host("dtn2", &[]), "10.0.0.2");
    let any = Offer {
        addr: IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        ..o.clone()
    };
    assert_eq!(parse_line(&any.line()), Ok(Some(any.clone())));
    assert_eq!(any.connect_host("dtn2", &[]), "dtn2");
    let v6 = Offer {
        addr: "2001:db8::2".parse().expect("v6"),
        ..o
    };
    assert_eq!(v6.connect_host("dtn2", &[]), "[2001:db8::2]");
    assert!(
        !format!("{v6:?}").contains(KEY),
        "the key stays out of Debug"
    );
}

#[test]
fn other_output_before_the_line_is_skipped() {
    assert_eq!(parse_line("Welcome to dtn2!"), Ok(None));
    assert_eq!(parse_line(""), Ok(None));
    assert_eq!(parse_line("tcptune-stdiox 1"), Ok(None));
}

#[test]
fn hostile_lines_are_refused_with_what_is_wrong() {
    let ok = format!("tcptune-stdio 1 addr=10.0.0.2 port=1 key={KEY}");
    assert!(parse_line(&ok).is_ok_and(|o| o.is_some()));
    let bad = [
        (
            format!("tcptune-stdio 2 addr=10.0.0.2 port=1 key={KEY}"),
            "version",
        ),
        (format!("tcptune-stdio 1 port=1 key={KEY}"), "no addr"),
        (
            format!("tcptune-stdio 1 addr=10.0.0.2 key={KEY}"),
            "no port",
        ),
        ("tcptune-stdio 1 addr=10.0.0.2 port=1".to_string(), "no key"),
        (
            format!("tcptune-stdio 1 addr=10.0.0.2 port=0 key={KEY}"),
            "port 0",
        ),
        (
            format!("tcptune-stdio 1 addr=10.0.0.2 port=65536 key={KEY}"),
            "port range",
        ),
        (
            format!("tcptune-stdio 1 addr=nope port=1 key={KEY}"),
            "bad addr",
        ),
        (
            "tcptune-stdio 1 addr=10.0.0.2 port=1 key=abc".to_string(),
            "short key",
        ),
        (
            format!(
                "tcptune-stdio 1 addr=10.0.0.2 port=1 key={}",
                "g".repeat(64)
            ),
            "bad hex",
        ),
        (
            format!("tcptune-stdio 1 addr=10.0.0.2 port=1 key={KEY}{KEY}"),
            "long key",
        ),
        (
            format!(
                "tcptune-stdio 1 addr=10.0.0.2 port=1 key={KEY} {}",
                "x".repeat(MAX_LINE)
            ),
            "long line",
        ),
        (
            format!("tcptune-stdio 1 addr=10.0.0.2 junk port=1 key={KEY}"),
            "word without =",
        ),
    ];
    for (line, why) in bad {
        assert!(parse_line(&line).is_err(), "{why}: {line}");
    }
    assert!(matches!(
        parse_line(&format!("tcptune-stdio 7 addr=1.2.3.4 port=1 key={KEY}")),
        Err(LineError::Version(v)) if v == "7"
    ));
}

#[test]
fn port_ranges_parse_as_first_dash_last() {
    assert_eq!(
        "50000-50100".parse::<PortRange>(),
        Ok(PortRange {
            first: 50000,
            last: 50100
        })
    );
    let r: PortRange = "7-7".parse().expect("one port");
    assert_eq!(r.ports().collect::<Vec<_>>(), vec![7]);
    for bad in ["", "5", "0-10", "10-5", "a-b", "1-70000"] {
        assert!(bad.parse::<PortRange>().is_err(), "{bad}");
    }
}

#[test]
fn the_far_end_listens_on_the_local_address_of_the_ssh_connection() {
    assert_eq!(
        ssh_local_addr(Some("10.0.0.1 51234 10.0.0.2 22")),
        Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)))
    );
    assert_eq!(
        ssh_local_addr(Some("2001:db8::1 51234 2001:db8::2 22")),
        "2001:db8::2".parse().ok()
    );
    assert_eq!(
        ssh_local_addr(Some("::ffff:10.0.0.1 1 ::ffff:10.0.0.2 22")),
        Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)))
    );
    assert_eq!(ssh_local_addr(Some("fe80::1 1 fe80::2%eth0 22")), None);
    assert_eq!(ssh_local_addr(Some("garbage")), None);
    assert_eq!(ssh_local_addr(None), None);
}

#[test]
fn rsh_is_split_into_words_as_a_shell_would() {
    assert_eq!(
        split_rsh("ssh -p 2222 -i 'my key'"),
        Ok(vec![
            "ssh".to_string(),
            "-p".into(),
            "2222".into(),
            "-i".into(),
            "my key".into()
        ])
    );
    assert_eq!(
        split_rsh(r#"ssh -o "ProxyJump a b" x\ y"#),
        Ok(vec![
            "ssh".to_string(),
            "-o".into(),
            "ProxyJump a b".into(),
            "x y".into()
        ])
    );
    assert!(split_rsh("ssh 'unclosed").is_err());
    assert!(split_rsh("   ").is_err());
}

#[test]
fn the_command_runs_serve_stdio_through_the_remote_shell() {
    let mut s = RemoteSpec::new(
        "bob@[2001:db8::2]",
        Some("ssh -p 2222"),
        Some("~/bin/tcptune"),
        "50000-50010".parse().ok(),
    )
    .expect("spec");
    assert_eq!(s.host, "2001:db8::2");
    assert_eq!(
        s.argv(),
        [
            "ssh",
            "-p",
            "2222",
            "bob@2001:db8::2",
            "~/bin/tcptune",
            "serve",
            "--stdio",
            "--port-range",
            "50000-50010"
        ]
    );
    s.port_range = None;
    assert_eq!(s.argv().last().map(String::as_str), Some("--stdio"));
    // The client's --no-path-db crosses to the far end.
    s.no_path_db = true;
    assert_eq!(
        s.argv()[s.argv().len() - 3..],
        ["serve", "--stdio", "--no-path-db"]
    );
    assert_eq!(spec(None).argv()[..2], ["ssh", "alice@dtn2"]);
    for bad in ["", "alice@", "@dtn2", "-oProxyCommand=x", "-x@h", "a b"] {
        assert!(RemoteSpec::new(bad, None, None, None).is_err(), "{bad:?}");
    }
}

#[test]
fn ssh_failures_are_classified_from_status_and_stderr() {
    let c = classify;
    assert_eq!(
        c(Some(255), "Host key verification failed.\r\n"),
        SshFailure::HostKey
    );
    assert_eq!(
        c(
            Some(255),
            "@@@\n@ WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED! @\n"
        ),
        SshFailure::HostKey
    );
    assert_eq!(
        c(
            Some(255),
            "alice@dtn2: Permission denied (publickey,password).\n"
        ),
        SshFailure::Auth
    );
    assert_eq!(c(Some(127), ""), SshFailure::NoRemoteBinary);
    assert_eq!(
        c(Some(127), "bash: line 1: tcptune: command not found\n"),
        SshFailure::NoRemoteBinary
    );
    assert_eq!(
        c(Some(2), "error: unexpected argument '--stdio' found\n"),
        SshFailure::RemoteTooOld
    );
    assert_eq!(
        c(
            Some(255),
            "ssh: connect to host dtn2 port 22: Connection refused\n"
        ),
        SshFailure::Refused
    );
    assert_eq!(
        c(
            Some(255),
            "ssh: Could not resolve hostname nope: Name or service not known\n"
        ),
        SshFailure::NoName
    );
    assert_eq!(
        c(
            Some(255),
            "ssh: connect to host 10.9.9.9 port 22: No route to host\n"
        ),
        SshFailure::Unreachable
    );
    assert_eq!(
        c(Some(1), "first\nsomething odd\n\n"),
        SshFailure::Other {
            last_line: "something odd".into(),
            status: Some(1)
        }
    );
    assert_eq!(
        c(None, "\u{1b}[31mred"),
        SshFailure::Other {
            last_line: crate::server::escape("\u{1b}[31mred", 300),
            status: None
        }
    );
}

#[test]
fn every_failure_is_one_line_with_a_fix() {
    let s = spec(None);
    let all = [
        SshFailure::HostKey,
        SshFailure::Auth,
        SshFailure::NoRemoteBinary,
        SshFailure::RemoteTooOld,
        SshFailure::Refused,
        SshFailure::NoName,
        SshFailure::Unreachable,
        SshFailure::NoRsh,
        SshFailure::Other {
            last_line: "x".into(),
            status: Some(1),
        },
        SshFailure::Other {
            last_line: String::new(),
            status: None,
        },
    ];
    for f in all {
        let m = f.message(&s);
        assert!(!m.contains('\n'), "{m}");
        assert!(m.contains("dtn2") || m.contains("ssh"), "{m}");
    }
    assert!(SshFailure::NoRemoteBinary
        .message(&s)
        .contains("--remote-tcptune"));
    assert!(SshFailure::HostKey.message(&s).contains("host key"));
    assert!(SshFailure::HostKey.ssh_failed());
    assert!(!SshFailure::NoRemoteBinary.ssh_failed());
    let m = data_port_unreachable("10.0.0.2", 40123, "connection refused");
    assert!(
        m.contains("10.0.0.2:40123") && m.contains("--port-range"),
        "{m}"
    );
}

/// Behind a NAT the far end announces its private address: the streams go where ssh went.
#[test]
fn a_private_address_behind_a_nat_is_replaced_by_the_one_ssh_reached() {
    let o = Offer {
        addr: "10.0.0.2".parse().expect("v4"),
        port: 40123,
        key: KEY.to_string(),
    };
    let public: IpAddr = "203.0.113.7".parse().expect("v4");
    let v6: IpAddr = "2001:db8::7".parse().expect("v6");
    // The name resolves elsewhere: the address ssh used, of the same family first.
    assert_eq!(o.connect_host("dtn2", &[v6, public]), "203.0.113.7");
    assert_eq!(o.connect_host("dtn2", &[v6]), "[2001:db8::7]");
    // The name resolves to the far end's own address, or not at all (an ssh alias): as told.
    assert_eq!(o.connect_host("dtn2", &[o.addr, public]), "10.0.0.2");
    assert_eq!(o.connect_host("dtn2", &[]), "10.0.0.2");
    // A public address is taken as it is (a multi-homed host answered on another one).
    let global = Offer {
        addr: "198.51.100.2".parse().expect("v4"),
        ..o.clone()
    };
    assert_eq!(global.connect_host("dtn2", &[public]), "198.51.100.2");
    // The shared space of carrier NAT and IPv6 ULA count as private.
    for private in ["100.64.1.2", "172.16.0.9", "192.168.1.1", "fd00::5"] {
        let p = Offer {
            addr: private.parse().expect("addr"),
            ..o.clone()
        };
        assert_eq!(
            p.connect_host("dtn2", &[public]),
            "203.0.113.7",
            "{private}"
        );
    }
    let cgnat_edge = Offer {
        addr: "100.128.0.1".parse().expect("v4"),
        ..o
    };
    assert_eq!(cgnat_edge.connect_host("dtn2", &[public]), "100.128.0.1");
}
