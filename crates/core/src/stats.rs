//! One end of one stream, summarized: the statistics type that the socket driver keeps, the
//! transfer report carries (`end.tcptune.streams[].sender` / `.receiver`) and the lab records.
//!
//! * [`StreamStats`]: running summaries of a socket's snapshots (RTT, congestion window,
//!   peak buffers, time limited by each buffer), folded in one snapshot at a time.
//! * [`SampleRecord`]: the subset of a snapshot kept in a time series (`--samples`).
//! * [`Decimated`]: a time series with a fixed capacity. When it is full it keeps every
//!   other point and from then on records half as often, so a series of any length costs at
//!   most its capacity and still covers the whole run evenly.

use crate::snapshot::TcpSnapshot;
use crate::time::Time;
use serde::{Deserialize, Serialize};

/// Running summaries of one socket's snapshots.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamStats {
    /// Smallest smoothed RTT seen, microseconds.
    pub rtt_min_us: Option<u32>,
    /// Mean smoothed RTT over samples with an RTT, microseconds.
    pub rtt_avg_us: Option<u32>,
    /// Largest smoothed RTT seen, microseconds.
    pub rtt_max_us: Option<u32>,
    /// Largest congestion window, segments.
    pub cwnd_max_segs: u32,
    /// Largest congestion window, bytes (`snd_cwnd * snd_mss`).
    #[serde(default)]
    pub cwnd_max_bytes: u64,
    /// Largest receive window the peer advertised (`tcpi_snd_wnd`), bytes.
    #[serde(default)]
    pub snd_wnd_max_bytes: u64,
    /// Retransmitted segments (`tcpi_total_retrans` at the last sample).
    pub retransmits: u64,
    /// Peak `sk_sndbuf`.
    pub peak_sndbuf_bytes: u64,
    /// Peak `sk_rcvbuf`.
    pub peak_rcvbuf_bytes: u64,
    /// Peak `sk_wmem_queued`.
    pub peak_wmem_queued_bytes: u64,
    /// Peak `sk_rmem_alloc`.
    pub peak_rmem_alloc_bytes: u64,
    /// Time limited by the peer's receive window (`tcpi_rwnd_limited`), microseconds.
    pub rwnd_limited_us: u64,
    /// Time limited by the send buffer (`tcpi_sndbuf_limited`), microseconds.
    pub sndbuf_limited_us: u64,
    /// Time busy sending (`tcpi_busy_time`), microseconds.
    pub busy_time_us: u64,
    /// Snapshots taken.
    pub samples_taken: u64,
    /// Changes the tuner made (applied or failed).
    pub changes_made: u64,
    /// The congestion control the socket used, read back from it (`TCP_CONGESTION`) once
    /// connected: what the kernel really ran, whatever was asked for.
    #[serde(default)]
    pub congestion: Option<String>,
    /// The window scale this end sends with (`tcpi_snd_wscale`: the peer's shift, fixed at
    /// SYN time), from the first snapshot of the established connection.
    #[serde(default)]
    pub snd_wscale: Option<u8>,
    /// The window scale this end advertises (`tcpi_rcv_wscale`), likewise.
    #[serde(default)]
    pub rcv_wscale: Option<u8>,
    /// Under a memory budget: the most this stream held of the shared pool (`SO_SNDBUF`
    /// units); `None` when it drew from no budget.
    #[serde(default)]
    pub pool_held_peak_bytes: Option<u64>,
    /// Sum of the smoothed RTTs, for the mean (not reported).
    #[serde(skip)]
    rtt_sum_us: u64,
    /// Samples with an RTT (not reported).
    #[serde(skip)]
    rtt_count: u64,
}

impl StreamStats {
    /// Fold one snapshot in.
    pub fn add(&mut self, s: &TcpSnapshot) {
        self.samples_taken += 1;
        if self.snd_wscale.is_none() && s.state == crate::snapshot::TcpState::Established {
            self.snd_wscale = Some(s.snd_wscale);
            self.rcv_wscale = Some(s.rcv_wscale);
        }
        if s.rtt_us > 0 {
            self.rtt_min_us = Some(self.rtt_min_us.map_or(s.rtt_us, |m| m.min(s.rtt_us)));
            self.rtt_max_us = Some(self.rtt_max_us.map_or(s.rtt_us, |m| m.max(s.rtt_us)));
            self.rtt_sum_us += u64::from(s.rtt_us);
            self.rtt_count += 1;
            self.rtt_avg_us =
                Some(u32::try_from(self.rtt_sum_us / self.rtt_count).unwrap_or(u32::MAX));
        }
        self.cwnd_max_segs = self.cwnd_max_segs.max(s.snd_cwnd_segs);
        self.cwnd_max_bytes = self.cwnd_max_bytes.max(s.cwnd_bytes());
        self.snd_wnd_max_bytes = self
            .snd_wnd_max_bytes
            .max(u64::from(s.snd_wnd_bytes.unwrap_or(0)));
        self.retransmits = self.retransmits.max(u64::from(s.total_retrans_segs));
        let peak = |p: &mut u64, v: Option<u32>| *p = (*p).max(u64::from(v.unwrap_or(0)));
        peak(&mut self.peak_sndbuf_bytes, s.sndbuf_bytes);
        peak(&mut self.peak_rcvbuf_bytes, s.rcvbuf_bytes);
        peak(&mut self.peak_wmem_queued_bytes, s.wmem_queued_bytes);
        peak(&mut self.peak_rmem_alloc_bytes, s.rmem_alloc_bytes);
        self.rwnd_limited_us = self.rwnd_limited_us.max(s.rwnd_limited_us.unwrap_or(0));
        self.sndbuf_limited_us = self.sndbuf_limited_us.max(s.sndbuf_limited_us.unwrap_or(0));
        self.busy_time_us = self.busy_time_us.max(s.busy_time_us.unwrap_or(0));
    }

    /// Count one change the tuner made.
    pub fn add_change(&mut self) {
        self.changes_made += 1;
    }
}

/// One snapshot in a time series: the subset of [`TcpSnapshot`] the reports show.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SampleRecord {
    /// Seconds since the transfer started (set when the series is reported).
    pub t_s: f64,
    /// Smoothed RTT.
    pub rtt_us: u32,
    /// Congestion window.
    pub snd_cwnd_segs: u32,
    /// Delivery rate, bytes/s.
    pub delivery_rate_bytes_per_sec: Option<u64>,
    /// Bytes acked (sender) so far.
    pub bytes_acked: Option<u64>,
    /// Bytes received (receiver) so far.
    pub bytes_received: Option<u64>,
    /// `sk_sndbuf`.
    pub sndbuf_bytes: Option<u32>,
    /// `sk_rcvbuf`.
    pub rcvbuf_bytes: Option<u32>,
    /// `sk_wmem_queued`.
    pub wmem_queued_bytes: Option<u32>,
    /// `sk_rmem_alloc`.
    pub rmem_alloc_bytes: Option<u32>,
    /// Receiver RTT estimate.
    pub rcv_rtt_us: u32,
    /// Receiver space estimate.
    pub rcv_space_bytes: u32,
    /// Not-yet-sent bytes.
    pub notsent_bytes: Option<u32>,
    /// Cumulative rwnd-limited time.
    pub rwnd_limited_us: Option<u64>,
    /// Cumulative sndbuf-limited time.
    pub sndbuf_limited_us: Option<u64>,
    /// Under a memory budget: the pool's fair share (`hiwat_fair_share`) at this sample,
    /// `SO_SNDBUF` units.
    #[serde(default)]
    pub pool_fair_share_bytes: Option<u64>,
    /// Under a memory budget: what this stream held of the pool (its `SO_SNDBUF` value).
    #[serde(default)]
    pub pool_held_bytes: Option<u64>,
}

impl SampleRecord {
    /// The record of a snapshot (`t_s` 0 until reported).
    pub fn of(s: &TcpSnapshot) -> SampleRecord {
        SampleRecord {
            t_s: 0.0,
            rtt_us: s.rtt_us,
            snd_cwnd_segs: s.snd_cwnd_segs,
            delivery_rate_bytes_per_sec: s.delivery_rate_bytes_per_sec,
            bytes_acked: s.bytes_acked,
            bytes_received: s.bytes_received,
            sndbuf_bytes: s.sndbuf_bytes,
            rcvbuf_bytes: s.rcvbuf_bytes,
            wmem_queued_bytes: s.wmem_queued_bytes,
            rmem_alloc_bytes: s.rmem_alloc_bytes,
            rcv_rtt_us: s.rcv_rtt_us,
            rcv_space_bytes: s.rcv_space_bytes,
            notsent_bytes: s.notsent_bytes,
            rwnd_limited_us: s.rwnd_limited_us,
            sndbuf_limited_us: s.sndbuf_limited_us,
            pool_fair_share_bytes: None,
            pool_held_bytes: None,
        }
    }

    /// The same with the stream's standing in a shared memory pool.
    pub fn with_pool(mut self, share: Option<crate::tuners::pool::PoolShare>) -> SampleRecord {
        if let Some(p) = share {
            self.pool_fair_share_bytes = Some(p.fair_share.0);
            self.pool_held_bytes = Some(p.held.0);
        }
        self
    }
}

/// A time series of at most `capacity` points covering the whole run (see the module
/// documentation).
#[derive(Clone, Debug, PartialEq)]
pub struct Decimated<T> {
    points: Vec<(Time, T)>,
    capacity: usize,
    /// Record one offered point in `stride`.
    stride: u64,
    offered: u64,
    /// Points offered and not kept (decimation), for the report.
    dropped: u64,
}

impl<T> Decimated<T> {
    /// An empty series keeping at most `capacity` points (at least 2).
    pub fn new(capacity: usize) -> Decimated<T> {
        Decimated {
            points: Vec::new(),
            capacity: capacity.max(2),
            stride: 1,
            offered: 0,
            dropped: 0,
        }
    }

    /// Offer a point; it is kept when it falls on the current stride.
    pub fn push(&mut self, at: Time, value: T) {
        let keep = self.offered.is_multiple_of(self.stride);
        self.offered += 1;
        if !keep {
            self.dropped += 1;
            return;
        }
        if self.points.len() == self.capacity {
            let before = self.points.len();
            let mut i = 0usize;
            self.points.retain(|_| {
                let k = i.is_multiple_of(2);
                i += 1;
                k
            });
            self.dropped += (before - self.points.len()) as u64;
            self.stride = self.stride.saturating_mul(2);
        }
        self.points.push((at, value));
    }

    /// The points kept, oldest first.
    pub fn points(&self) -> &[(Time, T)] {
        &self.points
    }

    /// Points offered but not kept.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The most points this series keeps.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The last point kept.
    pub fn last(&self) -> Option<&(Time, T)> {
        self.points.last()
    }

    /// The first point kept at or after `t`.
    pub fn first_at_or_after(&self, t: Time) -> Option<&(Time, T)> {
        self.points.iter().find(|(at, _)| *at >= t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(rtt: u32, cwnd: u32, sndbuf: u32) -> TcpSnapshot {
        let mut s = TcpSnapshot::empty();
        s.rtt_us = rtt;
        s.snd_cwnd_segs = cwnd;
        s.snd_mss_bytes = 1000;
        s.sndbuf_bytes = Some(sndbuf);
        s
    }

    #[test]
    fn stats_fold_minimum_mean_maximum_and_peaks() {
        let mut st = StreamStats::default();
        st.add(&snap(100, 10, 5000));
        st.add(&snap(300, 30, 2000));
        st.add(&snap(0, 5, 1000)); // no RTT yet: not part of the RTT figures
        assert_eq!(st.samples_taken, 3);
        assert_eq!(st.rtt_min_us, Some(100));
        assert_eq!(st.rtt_max_us, Some(300));
        assert_eq!(st.rtt_avg_us, Some(200));
        assert_eq!(st.cwnd_max_segs, 30);
        assert_eq!(st.cwnd_max_bytes, 30_000);
        assert_eq!(st.peak_sndbuf_bytes, 5000);
    }

    #[test]
    fn stats_round_trip_through_json_without_the_running_sums() {
        let mut st = StreamStats::default();
        st.add(&snap(100, 10, 5000));
        let json = serde_json::to_string(&st).expect("serialize");
        assert!(!json.contains("rtt_sum"));
        let back: StreamStats = serde_json::from_str(&json).expect("deserialize");
        assert_eq!(back.rtt_avg_us, Some(100));
        assert_eq!(back.peak_sndbuf_bytes, 5000);
    }

    #[test]
    fn a_full_series_keeps_every_other_point_and_halves_its_rate() {
        let mut d = Decimated::new(4);
        for i in 0..4u64 {
            d.push(Time::from_millis(i), i);
        }
        assert_eq!(d.points().len(), 4);
        d.push(Time::from_millis(4), 4);
        let kept: Vec<u64> = d.points().iter().map(|(_, v)| *v).collect();
        assert_eq!(kept, vec![0, 2, 4]);
        d.push(Time::from_millis(5), 5); // off-stride: dropped
        d.push(Time::from_millis(6), 6);
        let kept: Vec<u64> = d.points().iter().map(|(_, v)| *v).collect();
        assert_eq!(kept, vec![0, 2, 4, 6]);
        assert_eq!(d.dropped(), 3);
    }

    proptest::proptest! {
        #[test]
        fn a_series_never_exceeds_its_capacity_and_stays_ordered(
            cap in 2usize..64, n in 0u64..5000,
        ) {
            let mut d = Decimated::new(cap);
            for i in 0..n {
                d.push(Time::from_micros(i), i);
            }
            proptest::prop_assert!(d.points().len() <= cap);
            proptest::prop_assert!(d.points().windows(2).all(|w| w[0].0 < w[1].0));
            proptest::prop_assert_eq!(d.points().len() as u64 + d.dropped(), n);
            if n > 0 {
                // The first point is always kept: the series covers the whole run.
                proptest::prop_assert_eq!(d.points()[0].1, 0);
            }
        }
    }
}
