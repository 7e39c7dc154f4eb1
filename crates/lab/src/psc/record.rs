//! What one PSC run leaves: every connection's result and the sender's send-buffer memory
//! over time, sampled from `ss -tmi` in the sender's namespace (parsed here, purely).

use super::plan::PscCell;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;

/// Version of [`PscRecord`].
pub const PSC_RECORD_SCHEMA_VERSION: u32 = 1;

/// One connection (one `tcptune send --reverse -P 1` client) of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConnResult {
    /// Index in the run (remote connections first).
    pub index: u32,
    /// Path index (0 remote, 1 local).
    pub path: usize,
    /// The client's local address and port (how its socket is found in the samples).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<SocketAddr>,
    /// The transfer succeeded.
    pub ok: bool,
    /// Why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Bytes received.
    pub bytes: u64,
    /// First to last byte at the receiver, seconds.
    pub seconds: f64,
    /// Throughput, bit/s (bytes over seconds).
    pub throughput_bps: f64,
}

/// One data socket of the sender at one sample.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SockMem {
    /// The peer (the client's address and port).
    pub peer: SocketAddr,
    /// `SO_SNDBUF` as the kernel holds it (`tb`, twice the value set), bytes.
    pub sndbuf: u64,
    /// Memory its send queue uses (`w`, `sk_wmem_queued`), bytes.
    pub queued: u64,
    /// Bytes acknowledged so far.
    pub acked: u64,
}

/// The sender's sockets at one moment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemSample {
    /// Seconds since the clients were started.
    pub t_s: f64,
    /// Every socket of the server's port.
    pub sockets: Vec<SockMem>,
}

/// The emulator's counters of one path during a run, sender to receiver (A to B).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PathRunStats {
    /// Packets delivered.
    pub packets: u64,
    /// Packets dropped (queue overflow and loss).
    pub drops: u64,
    /// Peak queue, bytes.
    pub queue_peak_bytes: u64,
}

/// One run of one cell.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PscRecord {
    /// [`PSC_RECORD_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The cell.
    pub cell: PscCell,
    /// Repetition (1-based).
    pub repetition: u32,
    /// Start, Unix seconds.
    pub started_unix_s: f64,
    /// Wall time of the run, seconds.
    pub wall_s: f64,
    /// Every connection ran and succeeded.
    pub ok: bool,
    /// What went wrong (a failed connection, the run itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Every connection.
    pub connections: Vec<ConnResult>,
    /// The sender's sockets over time.
    pub memory: Vec<MemSample>,
    /// The emulator's counters of the remote and the local path (empty when unread).
    #[serde(default)]
    pub paths: Vec<PathRunStats>,
}

impl PscRecord {
    /// A run that produced nothing but an error.
    pub fn failed(cell: PscCell, repetition: u32, started: f64, wall_s: f64, e: String) -> Self {
        PscRecord {
            schema_version: PSC_RECORD_SCHEMA_VERSION,
            cell,
            repetition,
            started_unix_s: started,
            wall_s,
            ok: false,
            error: Some(e),
            connections: Vec::new(),
            memory: Vec::new(),
            paths: Vec::new(),
        }
    }
}

/// Data sockets acknowledge at least this much; the control connections far less.
pub const DATA_SOCKET_MIN_ACKED: u64 = 256 * 1024;

/// Parse `ss -tmniH` output: one socket line (`Recv-Q Send-Q Local Peer`, with or without
/// a state column) followed by indented lines holding `skmem:(...)` and `bytes_acked:N`.
/// Only sockets whose local port is `port` are kept.
pub fn parse_ss(text: &str, port: u16) -> Vec<SockMem> {
    let mut out = Vec::new();
    let mut current: Option<SocketAddr> = None;
    let push = |peer: Option<SocketAddr>, info: &str, out: &mut Vec<SockMem>| {
        if let Some(peer) = peer {
            let (sndbuf, queued) = skmem(info);
            out.push(SockMem {
                peer,
                sndbuf,
                queued,
                acked: field(info, "bytes_acked:").unwrap_or(0),
            });
        }
    };
    let mut info = String::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            continue;
        }
        if line.starts_with(char::is_whitespace) {
            info.push(' ');
            info.push_str(line.trim());
            continue;
        }
        push(current.take(), &info, &mut out);
        info.clear();
        let addrs: Vec<SocketAddr> = line
            .split_whitespace()
            .filter_map(|t| t.parse().ok())
            .map(canonical)
            .collect();
        if let [.., local, peer] = addrs[..] {
            if local.port() == port {
                current = Some(peer);
            }
        }
    }
    push(current.take(), &info, &mut out);
    out
}

/// An IPv4-mapped IPv6 address (`[::ffff:198.19.0.2]:5310`, what a dual-stack listener's
/// sockets show) as the IPv4 address it is.
pub(crate) fn canonical(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(v4.into(), v6.port()),
            None => a,
        },
        SocketAddr::V4(_) => a,
    }
}

/// `tb` and `w` of `skmem:(r0,rb131072,t0,tb46080,f0,w0,o0,bl0,d0)`.
fn skmem(info: &str) -> (u64, u64) {
    let Some(start) = info.find("skmem:(") else {
        return (0, 0);
    };
    let rest = &info[start + 7..];
    let body = rest.split(')').next().unwrap_or("");
    let mut tb = 0;
    let mut w = 0;
    for f in body.split(',') {
        if let Some(v) = f.strip_prefix("tb") {
            tb = v.parse().unwrap_or(0);
        } else if let Some(v) = f.strip_prefix('w') {
            w = v.parse().unwrap_or(0);
        }
    }
    (tb, w)
}

fn field(info: &str, name: &str) -> Option<u64> {
    let i = info.find(name)?;
    info[i + name.len()..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SS: &str = "0      67259  198.18.0.1:5310 198.19.0.2:44748\n\t skmem:(r0,rb131072,t0,tb819200,f709,w68923,o0,bl0,d0) cubic wscale:10,10 bytes_sent:134518 bytes_acked:3274200 segs_out:6\n0 0 198.18.0.1:5310 198.19.0.1:40000\n\t skmem:(r0,rb131072,t0,tb32768,f0,w0,o0,bl0,d0) cubic bytes_acked:812\n0 0 198.18.0.1:22 198.19.0.1:40001\n\t skmem:(r0,rb1,t0,tb9,f0,w9,o0,bl0,d0)\n";

    #[test]
    fn ss_lines_give_each_server_socket_s_buffer_queue_and_progress() {
        let v = parse_ss(SS, 5310);
        assert_eq!(v.len(), 2, "the port-22 socket is not the server's");
        assert_eq!(v[0].peer, "198.19.0.2:44748".parse().unwrap());
        assert_eq!(v[0].sndbuf, 819_200);
        assert_eq!(v[0].queued, 68_923);
        assert_eq!(v[0].acked, 3_274_200);
        assert_eq!(v[1].acked, 812);
        assert!(v[1].acked < DATA_SOCKET_MIN_ACKED);
    }

    #[test]
    fn ss_with_a_state_column_and_garbage_is_parsed_or_skipped() {
        let t = "ESTAB 0 0 198.18.0.1:5310 198.19.0.1:1\n\t skmem:(tb100,w5)\nnot a socket line\n";
        let v = parse_ss(t, 5310);
        assert_eq!(v.len(), 1);
        assert_eq!((v[0].sndbuf, v[0].queued, v[0].acked), (100, 5, 0));
        assert!(parse_ss("", 5310).is_empty());
        // A dual-stack listener's sockets show IPv4-mapped addresses.
        let t = "0 0 [::ffff:198.18.0.1]:5310 [::ffff:198.19.0.2]:40000\n\t skmem:(tb1,w0)\n";
        assert_eq!(
            parse_ss(t, 5310)[0].peer,
            "198.19.0.2:40000".parse().unwrap()
        );
    }
}
