//! Pure parsers for the text files `doctor` reads: `/proc/net/snmp` and `/proc/net/netstat`
//! counters, kernel configs, `/proc/kallsyms` and the kernel release.

use std::collections::{BTreeMap, BTreeSet};

/// Counters by group (`Tcp`, `TcpExt`, ...) and name.
pub type Counters = BTreeMap<String, BTreeMap<String, i64>>;

/// Parse `/proc/net/snmp` or `/proc/net/netstat` into `out`: pairs of lines
/// `Group: Name1 Name2 ...` / `Group: v1 v2 ...`. Values that are not integers are skipped
/// (never an error: a new kernel may print something unexpected, the rest stays usable);
/// unsigned values past `i64::MAX` saturate.
pub fn parse_snmp(text: &str, out: &mut Counters) {
    let mut lines = text.lines();
    while let Some(names) = lines.next() {
        let Some(values) = lines.next() else { break };
        let (Some((g1, n)), Some((g2, v))) = (names.split_once(':'), values.split_once(':')) else {
            continue;
        };
        if g1.trim() != g2.trim() {
            // Out of step (a truncated file): resynchronise on the value line.
            continue;
        }
        let group = out.entry(g1.trim().to_string()).or_default();
        for (name, value) in n.split_whitespace().zip(v.split_whitespace()) {
            let parsed = value
                .parse::<i64>()
                .ok()
                .or_else(|| value.parse::<u64>().ok().map(|_| i64::MAX));
            if let Some(x) = parsed {
                group.insert(name.to_string(), x);
            }
        }
    }
}

/// Qdiscs `doctor` asks about, with their kernel config symbol and a function every kernel
/// that has them exports in `/proc/kallsyms`.
pub const KNOWN_QDISCS: &[(&str, &str, &str)] = &[
    ("pfifo_fast", "", "pfifo_fast_enqueue"),
    ("fq", "CONFIG_NET_SCH_FQ", "fq_enqueue"),
    ("fq_codel", "CONFIG_NET_SCH_FQ_CODEL", "fq_codel_enqueue"),
    ("cake", "CONFIG_NET_SCH_CAKE", "cake_enqueue"),
    ("sfq", "CONFIG_NET_SCH_SFQ", "sfq_enqueue"),
    ("codel", "CONFIG_NET_SCH_CODEL", "codel_qdisc_enqueue"),
    ("pie", "CONFIG_NET_SCH_PIE", "pie_qdisc_enqueue"),
    ("netem", "CONFIG_NET_SCH_NETEM", "netem_enqueue"),
    ("tbf", "CONFIG_NET_SCH_TBF", "tbf_enqueue"),
    ("htb", "CONFIG_NET_SCH_HTB", "htb_enqueue"),
    ("prio", "CONFIG_NET_SCH_PRIO", "prio_enqueue"),
];

/// Qdiscs a kernel config (`.config` text) builds in (`=y`) or as modules (`=m`).
/// `pfifo_fast` is part of the core scheduler and always present.
pub fn qdiscs_from_config(config: &str) -> BTreeSet<String> {
    let mut set = BTreeSet::new();
    for line in config.lines() {
        let Some((sym, val)) = line.trim().split_once('=') else {
            continue;
        };
        if val != "y" && val != "m" {
            continue;
        }
        for (name, cfg, _) in KNOWN_QDISCS {
            if !cfg.is_empty() && *cfg == sym {
                set.insert((*name).to_string());
            }
        }
    }
    set.insert("pfifo_fast".to_string());
    set
}

/// Qdiscs whose code is in the running kernel (built in or loaded), from `/proc/kallsyms`.
pub fn qdiscs_from_kallsyms(kallsyms: &str) -> BTreeSet<String> {
    let mut set = BTreeSet::new();
    for line in kallsyms.lines() {
        let Some(sym) = line.split_whitespace().nth(2) else {
            continue;
        };
        for (name, _, func) in KNOWN_QDISCS {
            if *func == sym {
                set.insert((*name).to_string());
            }
        }
    }
    set
}

/// The qdisc a module file name provides (`sch_fq.ko.zst` -> `fq`), if it is one we know.
pub fn qdisc_from_module_file(file: &str) -> Option<String> {
    let stem = file.strip_prefix("sch_")?;
    let stem = stem.split(".ko").next()?;
    KNOWN_QDISCS
        .iter()
        .find(|(n, _, _)| *n == stem)
        .map(|(n, _, _)| (*n).to_string())
}

/// `(major, minor)` of a release string such as `6.18.44-fc-v669` or `4.9.0-8-amd64`.
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// A sysfs integer (`speed`, `mtu`): `None` for unreported values (`-1`, `4294967295`,
/// empty, garbage).
pub fn sysfs_number(text: &str) -> Option<u64> {
    let t = text.trim();
    let v: i64 = t.parse().ok()?;
    if v <= 0 || v == i64::from(u32::MAX) {
        return None;
    }
    u64::try_from(v).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SNMP: &str = "Ip: Forwarding DefaultTTL InReceives\nIp: 2 64 1767\n\
Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens OutSegs RetransSegs\n\
Tcp: 1 200 120000 -1 19 1000 12\n";

    #[test]
    fn snmp_pairs_become_counters_with_negative_values() {
        let mut c = Counters::new();
        parse_snmp(SNMP, &mut c);
        assert_eq!(c["Tcp"]["MaxConn"], -1);
        assert_eq!(c["Tcp"]["RetransSegs"], 12);
        assert_eq!(c["Ip"]["InReceives"], 1767);
    }

    #[test]
    fn snmp_garbage_and_huge_values_do_not_fail() {
        let mut c = Counters::new();
        parse_snmp(
            "Tcp: A B C\nTcp: 1 x 18446744073709551615\nTcpExt: Only names\n",
            &mut c,
        );
        assert_eq!(c["Tcp"].get("A"), Some(&1));
        assert_eq!(c["Tcp"].get("B"), None);
        assert_eq!(c["Tcp"].get("C"), Some(&i64::MAX));
        assert!(!c.contains_key("TcpExt"));
        // Mismatched groups are skipped, not mixed.
        let mut c = Counters::new();
        parse_snmp("Tcp: A\nUdp: 1\n", &mut c);
        assert!(c.is_empty());
    }

    #[test]
    fn config_lists_built_in_and_module_qdiscs_only() {
        let cfg = "CONFIG_NET_SCH_HTB=y\n# CONFIG_NET_SCH_FQ is not set\nCONFIG_NET_SCH_FQ_CODEL=m\nCONFIG_NET_SCH_TBF=y\n";
        let s = qdiscs_from_config(cfg);
        let v: Vec<&str> = s.iter().map(String::as_str).collect();
        assert_eq!(v, ["fq_codel", "htb", "pfifo_fast", "tbf"]);
    }

    #[test]
    fn kallsyms_functions_reveal_qdiscs_and_prefixed_names_do_not() {
        let ks = "ffffffff81000000 t tbf_enqueue\nffffffff81000000 t __pfx_fq_enqueue\n0000000000000000 T pfifo_fast_enqueue\n";
        let v: Vec<String> = qdiscs_from_kallsyms(ks).into_iter().collect();
        assert_eq!(v, ["pfifo_fast", "tbf"]);
    }

    #[test]
    fn module_files_and_versions_parse() {
        assert_eq!(
            qdisc_from_module_file("sch_fq.ko.zst").as_deref(),
            Some("fq")
        );
        assert_eq!(
            qdisc_from_module_file("sch_fq_codel.ko").as_deref(),
            Some("fq_codel")
        );
        assert_eq!(qdisc_from_module_file("sch_blue.ko"), None);
        assert_eq!(kernel_version("6.18.44-fc-v669"), Some((6, 18)));
        assert_eq!(kernel_version("4.9.0-8-amd64\n"), Some((4, 9)));
        assert_eq!(kernel_version("garbage"), None);
        assert_eq!(sysfs_number("-1\n"), None);
        assert_eq!(sysfs_number("10000\n"), Some(10000));
        assert_eq!(sysfs_number("4294967295"), None);
    }
}
