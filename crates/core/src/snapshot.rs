//! What a tuner sees of a connection: the fields of Linux `struct tcp_info` it needs plus the
//! socket's memory counters (`SO_MEMINFO`).
//!
//! Units are in the field names. Fields that an older kernel does not report (its `tcp_info`
//! is shorter) or that were not gathered are `None`; a tuner must cope with their absence.
//! Byte counters are cumulative since the connection started; times named `*_us` that are
//! cumulative (`busy_time_us`, `rwnd_limited_us`, `sndbuf_limited_us`) only grow.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// TCP connection state (`tcpi_state`), as numbered by Linux.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TcpState {
    /// 1
    Established,
    /// 2
    SynSent,
    /// 3
    SynRecv,
    /// 4
    FinWait1,
    /// 5
    FinWait2,
    /// 6
    TimeWait,
    /// 7
    Close,
    /// 8
    CloseWait,
    /// 9
    LastAck,
    /// 10
    Listen,
    /// 11
    Closing,
    /// Any other value.
    Other(u8),
}

impl TcpState {
    /// Decode Linux's numbering.
    pub fn from_linux(v: u8) -> TcpState {
        match v {
            1 => TcpState::Established,
            2 => TcpState::SynSent,
            3 => TcpState::SynRecv,
            4 => TcpState::FinWait1,
            5 => TcpState::FinWait2,
            6 => TcpState::TimeWait,
            7 => TcpState::Close,
            8 => TcpState::CloseWait,
            9 => TcpState::LastAck,
            10 => TcpState::Listen,
            11 => TcpState::Closing,
            other => TcpState::Other(other),
        }
    }

    /// The short name `ss` prints (`ESTAB`, `SYN-SENT`, ...).
    pub fn ss_name(self) -> &'static str {
        match self {
            TcpState::Established => "ESTAB",
            TcpState::SynSent => "SYN-SENT",
            TcpState::SynRecv => "SYN-RECV",
            TcpState::FinWait1 => "FIN-WAIT-1",
            TcpState::FinWait2 => "FIN-WAIT-2",
            TcpState::TimeWait => "TIME-WAIT",
            TcpState::Close => "UNCONN",
            TcpState::CloseWait => "CLOSE-WAIT",
            TcpState::LastAck => "LAST-ACK",
            TcpState::Listen => "LISTEN",
            TcpState::Closing => "CLOSING",
            TcpState::Other(_) => "UNKNOWN",
        }
    }
}

/// One sample of a TCP connection's state.
///
/// Built by the Linux glue from `getsockopt(TCP_INFO)` and `getsockopt(SO_MEMINFO)`, by the
/// netlink reader from `INET_DIAG_INFO`/`INET_DIAG_SKMEMINFO`, or by a simulation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TcpSnapshot {
    /// Connection state.
    pub state: TcpState,
    /// Congestion-avoidance state (`tcpi_ca_state`: 0 open, 1 disorder, 2 CWR, 3 recovery, 4 loss).
    pub ca_state: u8,
    /// Consecutive retransmissions of the current segment (`tcpi_retransmits`).
    pub retransmits: u8,
    /// Send window scale shift negotiated at SYN time.
    pub snd_wscale: u8,
    /// Receive window scale shift negotiated at SYN time.
    pub rcv_wscale: u8,
    /// Whether the last delivery-rate sample was application-limited.
    pub delivery_rate_app_limited: bool,
    /// Retransmission timeout.
    pub rto_us: u32,
    /// Sender MSS.
    pub snd_mss_bytes: u32,
    /// Receiver MSS estimate.
    pub rcv_mss_bytes: u32,
    /// Segments sent and not yet acknowledged (`tcpi_unacked`).
    pub unacked_segs: u32,
    /// Segments selectively acknowledged and not yet cumulatively (`tcpi_sacked`): data that
    /// has arrived although `bytes_acked` does not count it yet.
    #[serde(default)]
    pub sacked_segs: u32,
    /// Segments considered lost (`tcpi_lost`).
    pub lost_segs: u32,
    /// Total retransmitted segments over the connection's life (`tcpi_total_retrans`).
    pub total_retrans_segs: u32,
    /// Path MTU.
    pub pmtu_bytes: u32,
    /// Smoothed RTT (`tcpi_rtt`).
    pub rtt_us: u32,
    /// RTT variation (`tcpi_rttvar`).
    pub rttvar_us: u32,
    /// Minimum RTT seen (`tcpi_min_rtt`; kernels >= 4.10).
    pub min_rtt_us: Option<u32>,
    /// Slow-start threshold in segments (`tcpi_snd_ssthresh`; very large = infinite).
    pub snd_ssthresh_segs: u32,
    /// Congestion window in segments.
    pub snd_cwnd_segs: u32,
    /// Advertised MSS.
    pub advmss_bytes: u32,
    /// Receiver-side RTT estimate (`tcpi_rcv_rtt`, the DRS estimate; 0 until measured).
    pub rcv_rtt_us: u32,
    /// Receiver's estimate of the sender's window per RTT (`tcpi_rcv_space`, DRS autotuning).
    pub rcv_space_bytes: u32,
    /// Receive slow-start threshold (`tcpi_rcv_ssthresh`): the current window growth limit.
    pub rcv_ssthresh_bytes: u32,
    /// Pacing rate (`tcpi_pacing_rate`, bytes/s).
    pub pacing_rate_bytes_per_sec: Option<u64>,
    /// Bytes acknowledged by the peer (`tcpi_bytes_acked`; kernels >= 4.1).
    pub bytes_acked: Option<u64>,
    /// Bytes received from the peer (`tcpi_bytes_received`; kernels >= 4.1).
    pub bytes_received: Option<u64>,
    /// Bytes sent, including retransmissions (`tcpi_bytes_sent`; kernels >= 4.19).
    pub bytes_sent: Option<u64>,
    /// Bytes retransmitted (`tcpi_bytes_retrans`; kernels >= 4.19).
    pub bytes_retrans: Option<u64>,
    /// Packets that arrived out of order, behind a hole (`tcpi_rcv_ooopack`; kernels >=
    /// 5.4): while it grows, `bytes_received` holds back what arrived beyond the hole.
    #[serde(default)]
    pub rcv_ooopack: Option<u32>,
    /// Bytes written by the application but not yet sent (`tcpi_notsent_bytes`; >= 4.6).
    pub notsent_bytes: Option<u32>,
    /// Most recent delivery-rate estimate (`tcpi_delivery_rate`, bytes/s; >= 4.9).
    pub delivery_rate_bytes_per_sec: Option<u64>,
    /// Time spent with data to send (`tcpi_busy_time`; >= 4.10).
    pub busy_time_us: Option<u64>,
    /// Time spent limited by the peer's receive window (`tcpi_rwnd_limited`; >= 4.10).
    pub rwnd_limited_us: Option<u64>,
    /// Time spent limited by the local send buffer (`tcpi_sndbuf_limited`; >= 4.10).
    pub sndbuf_limited_us: Option<u64>,
    /// Peer's advertised receive window after scaling (`tcpi_snd_wnd`; >= 5.4).
    pub snd_wnd_bytes: Option<u32>,
    /// Local advertised receive window after scaling (`tcpi_rcv_wnd`; >= 6.2).
    pub rcv_wnd_bytes: Option<u32>,
    /// Send buffer size the kernel holds (`sk_sndbuf`, from `SO_MEMINFO`; twice the value
    /// passed to `SO_SNDBUF`).
    pub sndbuf_bytes: Option<u32>,
    /// Receive buffer size the kernel holds (`sk_rcvbuf`, from `SO_MEMINFO`).
    pub rcvbuf_bytes: Option<u32>,
    /// Memory queued for sending, including overhead (`sk_wmem_queued`).
    pub wmem_queued_bytes: Option<u32>,
    /// Memory holding received data not yet read, including overhead (`sk_rmem_alloc`).
    pub rmem_alloc_bytes: Option<u32>,
}

impl TcpSnapshot {
    /// Bytes that have reached the receiver as far as the sender knows: cumulatively
    /// acknowledged bytes plus selectively acknowledged segments. Unlike `bytes_acked` alone
    /// it does not jump when a retransmission fills a hole (a whole window acknowledged at
    /// once), so rates computed from it over short intervals stay within the path's rate.
    pub fn delivered_bytes(&self) -> Option<u64> {
        self.bytes_acked
            .map(|a| a.saturating_add(u64::from(self.sacked_segs) * u64::from(self.snd_mss_bytes)))
    }

    /// An established connection with every optional field absent and every counter zero:
    /// a starting point for simulations and tests (`..TcpSnapshot::empty()`).
    pub fn empty() -> TcpSnapshot {
        TcpSnapshot {
            state: TcpState::Established,
            ca_state: 0,
            retransmits: 0,
            snd_wscale: 0,
            rcv_wscale: 0,
            delivery_rate_app_limited: false,
            rto_us: 0,
            snd_mss_bytes: 0,
            rcv_mss_bytes: 0,
            unacked_segs: 0,
            sacked_segs: 0,
            lost_segs: 0,
            total_retrans_segs: 0,
            pmtu_bytes: 0,
            rtt_us: 0,
            rttvar_us: 0,
            min_rtt_us: None,
            snd_ssthresh_segs: 0,
            snd_cwnd_segs: 0,
            advmss_bytes: 0,
            rcv_rtt_us: 0,
            rcv_space_bytes: 0,
            rcv_ssthresh_bytes: 0,
            pacing_rate_bytes_per_sec: None,
            bytes_acked: None,
            bytes_received: None,
            bytes_sent: None,
            bytes_retrans: None,
            rcv_ooopack: None,
            notsent_bytes: None,
            delivery_rate_bytes_per_sec: None,
            busy_time_us: None,
            rwnd_limited_us: None,
            sndbuf_limited_us: None,
            snd_wnd_bytes: None,
            rcv_wnd_bytes: None,
            sndbuf_bytes: None,
            rcvbuf_bytes: None,
            wmem_queued_bytes: None,
            rmem_alloc_bytes: None,
        }
    }

    /// Smoothed RTT as a `Duration` (`None` before the first measurement).
    pub fn rtt(&self) -> Option<Duration> {
        (self.rtt_us > 0).then(|| Duration::from_micros(u64::from(self.rtt_us)))
    }

    /// Minimum RTT, falling back to the smoothed RTT on kernels without `tcpi_min_rtt`.
    pub fn min_rtt(&self) -> Option<Duration> {
        match self.min_rtt_us {
            Some(v) if v > 0 && v != u32::MAX => Some(Duration::from_micros(u64::from(v))),
            _ => self.rtt(),
        }
    }

    /// Congestion window in bytes (`snd_cwnd * snd_mss`).
    pub fn cwnd_bytes(&self) -> u64 {
        u64::from(self.snd_cwnd_segs) * u64::from(self.snd_mss_bytes)
    }

    /// Bytes in flight, approximately (`unacked * snd_mss`).
    pub fn inflight_bytes(&self) -> u64 {
        u64::from(self.unacked_segs) * u64::from(self.snd_mss_bytes)
    }
}
