//! Whether this process may load and attach the program: `CAP_BPF` (or `CAP_SYS_ADMIN`, which
//! implies it) and `CAP_NET_ADMIN`. Root normally has both; a process without them gets one
//! line naming what is missing.

/// `CAP_NET_ADMIN`'s bit.
pub const CAP_NET_ADMIN: u32 = 12;
/// `CAP_SYS_ADMIN`'s bit.
pub const CAP_SYS_ADMIN: u32 = 21;
/// `CAP_BPF`'s bit.
pub const CAP_BPF: u32 = 39;

/// The capabilities missing from an effective set (`CapEff` of `/proc/self/status`).
pub fn missing(cap_eff: u64) -> Vec<&'static str> {
    let has = |bit: u32| cap_eff & (1u64 << bit) != 0;
    let mut out = Vec::new();
    if !has(CAP_BPF) && !has(CAP_SYS_ADMIN) {
        out.push("CAP_BPF");
    }
    if !has(CAP_NET_ADMIN) {
        out.push("CAP_NET_ADMIN");
    }
    out
}

/// `CapEff` from the text of `/proc/PID/status`.
pub fn parse_cap_eff(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
}

/// The one-line refusal for what is missing (`None`: nothing is).
pub fn refusal(missing: &[&str]) -> Option<String> {
    if missing.is_empty() {
        return None;
    }
    Some(format!(
        "the agent needs root or CAP_BPF and CAP_NET_ADMIN: this process lacks {} \
         (run it as root, or grant them: setcap cap_bpf,cap_net_admin+ep)",
        missing.join(" and ")
    ))
}

/// Check this process (reads `/proc/self/status`): `Err` holds the one-line refusal.
pub fn check() -> Result<(), String> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("reading /proc/self/status for the capabilities: {e}"))?;
    let eff =
        parse_cap_eff(&status).ok_or_else(|| "no CapEff line in /proc/self/status".to_string())?;
    match refusal(&missing(eff)) {
        Some(r) => Err(r),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_has_everything_and_nobody_lacks_both() {
        assert!(missing(0x000001ffffffffff).is_empty());
        assert_eq!(missing(0), vec!["CAP_BPF", "CAP_NET_ADMIN"]);
        assert!(refusal(&missing(0))
            .expect("refused")
            .contains("lacks CAP_BPF and CAP_NET_ADMIN"));
        assert_eq!(refusal(&[]), None);
    }

    #[test]
    fn sys_admin_stands_in_for_cap_bpf() {
        let eff = (1u64 << CAP_SYS_ADMIN) | (1u64 << CAP_NET_ADMIN);
        assert!(missing(eff).is_empty());
        assert_eq!(missing(1u64 << CAP_BPF), vec!["CAP_NET_ADMIN"]);
    }

    #[test]
    fn cap_eff_is_read_from_the_status_text() {
        let s = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        assert_eq!(parse_cap_eff(s), Some(0x000001ffffffffff));
        assert_eq!(parse_cap_eff("Name: x\n"), None);
    }
}
