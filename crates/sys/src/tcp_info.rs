//! Decoding Linux `struct tcp_info` from raw bytes.
//!
//! The same bytes come from `getsockopt(TCP_INFO)` and from the `INET_DIAG_INFO` netlink
//! attribute, so decoding is a pure function of a byte slice. The kernel returns as many bytes
//! as it knows (280 on Linux 6.18); an older kernel returns fewer, and every field that lies
//! past the end of what it returned becomes `None` in the [`TcpSnapshot`].

use tcptune_core::{TcpSnapshot, TcpState};

/// The size of `struct tcp_info` on Linux 6.18.
pub const TCP_INFO_LEN_6_18: usize = 280;

/// The smallest `tcp_info` this decoder accepts: everything up to `tcpi_total_retrans`
/// (present since Linux 2.6.x).
pub const TCP_INFO_MIN_LEN: usize = 104;

/// Byte offsets of the fields in `struct tcp_info` (x86_64 and every other Linux ABI: the
/// struct has no architecture-dependent padding).
mod off {
    pub(super) const STATE: usize = 0;
    pub(super) const CA_STATE: usize = 1;
    pub(super) const RETRANSMITS: usize = 2;
    pub(super) const WSCALE: usize = 6;
    pub(super) const APP_LIMITED: usize = 7;
    pub(super) const RTO: usize = 8;
    pub(super) const SND_MSS: usize = 16;
    pub(super) const RCV_MSS: usize = 20;
    pub(super) const UNACKED: usize = 24;
    pub(super) const SACKED: usize = 28;
    pub(super) const LOST: usize = 32;
    pub(super) const PMTU: usize = 60;
    pub(super) const RCV_SSTHRESH: usize = 64;
    pub(super) const RTT: usize = 68;
    pub(super) const RTTVAR: usize = 72;
    pub(super) const SND_SSTHRESH: usize = 76;
    pub(super) const SND_CWND: usize = 80;
    pub(super) const ADVMSS: usize = 84;
    pub(super) const RCV_RTT: usize = 92;
    pub(super) const RCV_SPACE: usize = 96;
    pub(super) const TOTAL_RETRANS: usize = 100;
    pub(super) const PACING_RATE: usize = 104;
    pub(super) const BYTES_ACKED: usize = 120;
    pub(super) const BYTES_RECEIVED: usize = 128;
    pub(super) const NOTSENT_BYTES: usize = 144;
    pub(super) const MIN_RTT: usize = 148;
    pub(super) const DELIVERY_RATE: usize = 160;
    pub(super) const BUSY_TIME: usize = 168;
    pub(super) const RWND_LIMITED: usize = 176;
    pub(super) const SNDBUF_LIMITED: usize = 184;
    pub(super) const BYTES_SENT: usize = 200;
    pub(super) const BYTES_RETRANS: usize = 208;
    pub(super) const RCV_OOOPACK: usize = 224;
    pub(super) const SND_WND: usize = 228;
    pub(super) const RCV_WND: usize = 232;
}

/// Why a `tcp_info` buffer could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TcpInfoError {
    /// Fewer bytes than the oldest supported layout.
    #[error("tcp_info is {got} bytes, at least {min} are needed")]
    TooShort {
        /// Bytes received.
        got: usize,
        /// Bytes required.
        min: usize,
    },
}

fn u8_at(b: &[u8], o: usize) -> u8 {
    b[o]
}

fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    let s = b.get(o..o + 4)?;
    Some(u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
}

fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    let s = b.get(o..o + 8)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    Some(u64::from_ne_bytes(a))
}

/// Decode `struct tcp_info` bytes (native endianness) into a snapshot. The memory fields
/// (`sndbuf_bytes`, ...) are left `None`; fill them from `SO_MEMINFO` with [`apply_meminfo`].
pub fn parse_tcp_info(b: &[u8]) -> Result<TcpSnapshot, TcpInfoError> {
    if b.len() < TCP_INFO_MIN_LEN {
        return Err(TcpInfoError::TooShort {
            got: b.len(),
            min: TCP_INFO_MIN_LEN,
        });
    }
    // Within TCP_INFO_MIN_LEN every u32 read succeeds.
    let r32 = |o| u32_at(b, o).unwrap_or(0);
    let wscale = u8_at(b, off::WSCALE);
    Ok(TcpSnapshot {
        state: TcpState::from_linux(u8_at(b, off::STATE)),
        ca_state: u8_at(b, off::CA_STATE),
        retransmits: u8_at(b, off::RETRANSMITS),
        snd_wscale: wscale & 0x0f,
        rcv_wscale: wscale >> 4,
        delivery_rate_app_limited: u8_at(b, off::APP_LIMITED) & 1 == 1,
        rto_us: r32(off::RTO),
        snd_mss_bytes: r32(off::SND_MSS),
        rcv_mss_bytes: r32(off::RCV_MSS),
        unacked_segs: r32(off::UNACKED),
        sacked_segs: r32(off::SACKED),
        lost_segs: r32(off::LOST),
        total_retrans_segs: r32(off::TOTAL_RETRANS),
        pmtu_bytes: r32(off::PMTU),
        rtt_us: r32(off::RTT),
        rttvar_us: r32(off::RTTVAR),
        min_rtt_us: u32_at(b, off::MIN_RTT),
        snd_ssthresh_segs: r32(off::SND_SSTHRESH),
        snd_cwnd_segs: r32(off::SND_CWND),
        advmss_bytes: r32(off::ADVMSS),
        rcv_rtt_us: r32(off::RCV_RTT),
        rcv_space_bytes: r32(off::RCV_SPACE),
        rcv_ssthresh_bytes: r32(off::RCV_SSTHRESH),
        pacing_rate_bytes_per_sec: u64_at(b, off::PACING_RATE),
        bytes_acked: u64_at(b, off::BYTES_ACKED),
        bytes_received: u64_at(b, off::BYTES_RECEIVED),
        bytes_sent: u64_at(b, off::BYTES_SENT),
        bytes_retrans: u64_at(b, off::BYTES_RETRANS),
        rcv_ooopack: u32_at(b, off::RCV_OOOPACK),
        notsent_bytes: u32_at(b, off::NOTSENT_BYTES),
        delivery_rate_bytes_per_sec: u64_at(b, off::DELIVERY_RATE),
        busy_time_us: u64_at(b, off::BUSY_TIME),
        rwnd_limited_us: u64_at(b, off::RWND_LIMITED),
        sndbuf_limited_us: u64_at(b, off::SNDBUF_LIMITED),
        snd_wnd_bytes: u32_at(b, off::SND_WND),
        rcv_wnd_bytes: u32_at(b, off::RCV_WND),
        ..TcpSnapshot::empty()
    })
}

/// Indexes into the `SO_MEMINFO` / `INET_DIAG_SKMEMINFO` array of `u32`
/// (`SK_MEMINFO_*` in `linux/sock_diag.h`).
pub mod meminfo {
    /// `sk_rmem_alloc`: memory holding received data.
    pub const RMEM_ALLOC: usize = 0;
    /// `sk_rcvbuf`.
    pub const RCVBUF: usize = 1;
    /// `sk_wmem_alloc`: memory of packets handed to the device.
    pub const WMEM_ALLOC: usize = 2;
    /// `sk_sndbuf`.
    pub const SNDBUF: usize = 3;
    /// `sk_forward_alloc`.
    pub const FWD_ALLOC: usize = 4;
    /// `sk_wmem_queued`: memory of the send queue.
    pub const WMEM_QUEUED: usize = 5;
    /// `sk_omem_alloc`.
    pub const OPTMEM: usize = 6;
    /// Backlog length.
    pub const BACKLOG: usize = 7;
    /// Drops.
    pub const DROPS: usize = 8;
    /// Number of entries on Linux >= 4.x.
    pub const VARS: usize = 9;
}

/// Fill the memory fields of `snap` from a `SO_MEMINFO` array (shorter arrays leave the
/// missing fields `None`).
pub fn apply_meminfo(snap: &mut TcpSnapshot, mem: &[u32]) {
    snap.rmem_alloc_bytes = mem.get(meminfo::RMEM_ALLOC).copied();
    snap.rcvbuf_bytes = mem.get(meminfo::RCVBUF).copied();
    snap.sndbuf_bytes = mem.get(meminfo::SNDBUF).copied();
    snap.wmem_queued_bytes = mem.get(meminfo::WMEM_QUEUED).copied();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put32(b: &mut [u8], o: usize, v: u32) {
        b[o..o + 4].copy_from_slice(&v.to_ne_bytes());
    }
    fn put64(b: &mut [u8], o: usize, v: u64) {
        b[o..o + 8].copy_from_slice(&v.to_ne_bytes());
    }

    #[test]
    fn decodes_a_full_6_18_struct() {
        let mut b = vec![0u8; TCP_INFO_LEN_6_18];
        b[0] = 1;
        b[6] = 0x97; // rcv_wscale 9, snd_wscale 7
        put32(&mut b, off::RTT, 50_123);
        put32(&mut b, off::SND_CWND, 1000);
        put32(&mut b, off::SND_MSS, 1448);
        put64(&mut b, off::BYTES_ACKED, 1 << 40);
        put64(&mut b, off::RWND_LIMITED, 1234);
        put64(&mut b, off::SNDBUF_LIMITED, 5678);
        put32(&mut b, off::RCV_WND, 65535);
        put32(&mut b, off::RCV_OOOPACK, 4321);
        let s = parse_tcp_info(&b).expect("valid");
        assert_eq!(s.state, TcpState::Established);
        assert_eq!((s.snd_wscale, s.rcv_wscale), (7, 9));
        assert_eq!(s.rtt_us, 50_123);
        assert_eq!(s.cwnd_bytes(), 1_448_000);
        assert_eq!(s.bytes_acked, Some(1 << 40));
        assert_eq!(s.rwnd_limited_us, Some(1234));
        assert_eq!(s.sndbuf_limited_us, Some(5678));
        assert_eq!(s.rcv_wnd_bytes, Some(65535));
        assert_eq!(s.rcv_ooopack, Some(4321));
    }

    #[test]
    fn older_kernels_leave_newer_fields_absent() {
        let b = vec![0u8; 120]; // ends before tcpi_bytes_acked (Linux 4.0)
        let s = parse_tcp_info(&b).expect("valid");
        assert_eq!(s.pacing_rate_bytes_per_sec, Some(0));
        assert_eq!(s.bytes_acked, None);
        assert_eq!(s.min_rtt_us, None);
        assert_eq!(s.rwnd_limited_us, None);
        let s = parse_tcp_info(&vec![0u8; 224]).expect("valid"); // Linux 4.19 .. 5.3
        assert_eq!(s.rcv_ooopack, None);
        let s = parse_tcp_info(&vec![0u8; 232]).expect("valid"); // Linux 5.4 .. 6.1
        assert_eq!(s.rcv_ooopack, Some(0));
        assert_eq!(s.snd_wnd_bytes, Some(0));
        assert_eq!(s.rcv_wnd_bytes, None);
    }

    #[test]
    fn rejects_truncated_buffers() {
        assert_eq!(
            parse_tcp_info(&[0u8; 50]),
            Err(TcpInfoError::TooShort {
                got: 50,
                min: TCP_INFO_MIN_LEN
            })
        );
    }

    #[test]
    fn meminfo_fills_memory_fields() {
        let mut s = TcpSnapshot::empty();
        apply_meminfo(&mut s, &[10, 20, 30, 40, 50, 60, 0, 0, 0]);
        assert_eq!(s.rmem_alloc_bytes, Some(10));
        assert_eq!(s.rcvbuf_bytes, Some(20));
        assert_eq!(s.sndbuf_bytes, Some(40));
        assert_eq!(s.wmem_queued_bytes, Some(60));
        let mut s = TcpSnapshot::empty();
        apply_meminfo(&mut s, &[1, 2]);
        assert_eq!(s.sndbuf_bytes, None);
    }
}
