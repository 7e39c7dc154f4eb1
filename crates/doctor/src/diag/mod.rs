//! Every TCP socket of a network namespace through `inet_diag` netlink (what `ss -tim` uses).
//!
//! [`parse`] is pure code over byte buffers: it builds the `SOCK_DIAG_BY_FAMILY` request and
//! decodes the kernel's multipart answer (`inet_diag_msg` plus `INET_DIAG_INFO`, which carries
//! the same `struct tcp_info` bytes as `getsockopt(TCP_INFO)`, `INET_DIAG_SKMEMINFO` and
//! `INET_DIAG_CONG`). [`socket`] is the driver: one netlink socket, one dump per family.

pub mod parse;
pub mod socket;

use serde::Serialize;
use std::net::SocketAddr;
use tcptune_core::{TcpSnapshot, TcpState};

pub use parse::{build_request, parse_messages, DiagParseError, NlItem};
pub use socket::{dump_tcp, DiagError, DiagSocket};

/// One TCP socket as the kernel describes it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DiagConn {
    /// `AF_INET` or `AF_INET6`.
    pub family: u8,
    /// TCP state.
    pub state: TcpState,
    /// Local address and port.
    pub local: SocketAddr,
    /// Remote address and port.
    pub remote: SocketAddr,
    /// Bound interface index (0: any).
    pub ifindex: u32,
    /// The kernel's unique socket cookie: stable for the socket's life.
    pub cookie: u64,
    /// Receive queue: unread bytes (for listeners: the accept backlog).
    pub rqueue: u32,
    /// Send queue: unacknowledged bytes.
    pub wqueue: u32,
    /// Owner uid.
    pub uid: u32,
    /// Socket inode (maps to a process through `/proc/PID/fd`).
    pub inode: u32,
    /// Pending timer (0 none, 1 retransmit, 2 keepalive, 3 TIME_WAIT, 4 zero-window probe).
    pub timer: u8,
    /// Retransmissions of the pending timer.
    pub retrans: u8,
    /// `struct tcp_info` decoded, with the memory counters from `INET_DIAG_SKMEMINFO`
    /// (absent when the kernel sent no `INET_DIAG_INFO`, e.g. for TIME_WAIT sockets).
    pub tcp: Option<TcpSnapshot>,
    /// Bytes of `tcp_info` the kernel sent (280 on Linux 6.18).
    pub tcp_info_len: usize,
    /// Congestion control (`INET_DIAG_CONG`).
    pub congestion: Option<String>,
    /// The raw `SK_MEMINFO_*` array.
    pub skmeminfo: Option<Vec<u32>>,
}
