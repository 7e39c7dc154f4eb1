//! `watch --metrics`: the latest refresh as Prometheus metrics, for an exporter such as
//! `tcptune-metrics` to serve.
//!
//! [`WatchSnapshot::of`] is the pure part: rows in, metric values out, with per-connection
//! series for at most `max_series` connections (those that moved the most bytes since the
//! last refresh, then over their life); the others are only in the aggregates and are
//! counted. [`WatchMetrics`] keeps the latest snapshot and encodes it on each scrape as a
//! `prometheus_client` [`Collector`], so a scrape never sees half a refresh and connections
//! that closed disappear from the next scrape.
//!
//! Call order: [`WatchMetrics::new`], [`WatchMetrics::register`] into the exporter's
//! registry once, then [`WatchMetrics::update`] after every refresh.
//!
//! # Metrics
//!
//! | name | type | labels | meaning |
//! | --- | --- | --- | --- |
//! | `tcptune_watch_connections` | gauge | `factor` | connections by [`LimitingFactor`] (every factor, 0 included) |
//! | `tcptune_watch_throughput_bits_per_second` | gauge | `factor` | their summed rate over the last refresh |
//! | `tcptune_watch_connection_throughput_bits_per_second` | gauge | `local`, `peer`, `factor` | one connection's rate (sent + received) |
//! | `tcptune_watch_connection_rtt_seconds` | gauge | `local`, `peer` | smoothed RTT |
//! | `tcptune_watch_connection_cwnd_bytes` | gauge | `local`, `peer` | congestion window |
//! | `tcptune_watch_connection_sndbuf_bytes` | gauge | `local`, `peer` | send buffer size |
//! | `tcptune_watch_connection_rcvbuf_bytes` | gauge | `local`, `peer` | receive buffer size |
//! | `tcptune_watch_connection_limited_ratio` | gauge | `local`, `peer`, `limit` | share of busy time limited by the `receive_window` or the `send_buffer` |
//! | `tcptune_watch_connection_retransmits` | counter | `local`, `peer` | retransmitted segments |
//! | `tcptune_watch_unlisted_connections` | gauge | | connections left out of the per-connection series at the last refresh |
//! | `tcptune_watch_unlisted_throughput_bits_per_second` | gauge | | their summed rate |
//! | `tcptune_watch_connection_series_dropped` | counter | | per-connection series left out, summed over refreshes |
//! | `tcptune_watch_connection_series_limit` | gauge | | the cap (`--metrics-max-connections`) |
//! | `tcptune_watch_refreshes` | counter | | refreshes since start |
//! | `tcptune_watch_dump_seconds` | gauge | | how long the last inet_diag dump took |

use super::{LimitingFactor, Row};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeGaugeValue, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Per-connection series exported by default (`--metrics-max-connections`).
pub const DEFAULT_MAX_CONNECTION_SERIES: usize = 50;

/// One connection's series.
#[derive(Clone, Debug, PartialEq)]
pub struct ConnectionSeries {
    /// Local address (`ip:port`).
    pub local: String,
    /// Peer address (`ip:port`).
    pub peer: String,
    /// What limits it.
    pub factor: LimitingFactor,
    /// Bytes sent and received per second over the last refresh, in bit/s (0 on first
    /// sight).
    pub throughput_bps: f64,
    /// Smoothed RTT, seconds.
    pub rtt_seconds: f64,
    /// Congestion window, bytes.
    pub cwnd_bytes: u64,
    /// Send buffer size, bytes.
    pub sndbuf_bytes: Option<u32>,
    /// Receive buffer size, bytes.
    pub rcvbuf_bytes: Option<u32>,
    /// Share of busy time limited by the peer's receive window.
    pub rwnd_limited: Option<f64>,
    /// Share of busy time limited by this host's send buffer.
    pub sndbuf_limited: Option<f64>,
    /// Retransmitted segments over its life.
    pub retransmits: u32,
}

/// One refresh in metric terms.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WatchSnapshot {
    /// For every factor: connections, and their summed rate in bit/s.
    pub by_factor: Vec<(LimitingFactor, usize, f64)>,
    /// The connections with series of their own, most bytes first.
    pub listed: Vec<ConnectionSeries>,
    /// Connections left out of `listed` by the cap.
    pub unlisted: usize,
    /// Their summed rate, bit/s.
    pub unlisted_throughput_bps: f64,
}

fn throughput(r: &Row) -> f64 {
    (r.send_rate_bps.unwrap_or(0) as f64) + (r.recv_rate_bps.unwrap_or(0) as f64)
}

fn lifetime_bytes(r: &Row) -> u64 {
    r.bytes_acked
        .unwrap_or(0)
        .saturating_add(r.bytes_received.unwrap_or(0))
}

impl WatchSnapshot {
    /// The metrics of `rows`, with series of their own for at most `max_series`
    /// connections: those that moved the most bytes since the last refresh, then over their
    /// life (then by address, so that the choice is stable).
    pub fn of(rows: &[Row], max_series: usize) -> WatchSnapshot {
        let by_factor = LimitingFactor::ALL
            .iter()
            .map(|&f| {
                let of_f = rows.iter().filter(|r| r.factor == f);
                // (A fold from +0: an empty f64 sum is -0, shown as "-0.0".)
                (
                    f,
                    of_f.clone().count(),
                    of_f.map(throughput).fold(0.0, |a, b| a + b),
                )
            })
            .collect();
        let mut order: Vec<&Row> = rows.iter().collect();
        order.sort_by(|a, b| {
            throughput(b)
                .total_cmp(&throughput(a))
                .then_with(|| lifetime_bytes(b).cmp(&lifetime_bytes(a)))
                .then_with(|| a.peer.cmp(&b.peer))
                .then_with(|| a.local.cmp(&b.local))
        });
        let cut = order.len().min(max_series);
        let listed = order[..cut]
            .iter()
            .map(|r| ConnectionSeries {
                local: r.local.to_string(),
                peer: r.peer.to_string(),
                factor: r.factor,
                throughput_bps: throughput(r),
                rtt_seconds: f64::from(r.rtt_us) / 1e6,
                cwnd_bytes: r.cwnd_bytes,
                sndbuf_bytes: r.sndbuf_bytes,
                rcvbuf_bytes: r.rcvbuf_bytes,
                rwnd_limited: r.rwnd_limited,
                sndbuf_limited: r.sndbuf_limited,
                retransmits: r.retrans_segs,
            })
            .collect();
        WatchSnapshot {
            by_factor,
            listed,
            unlisted: order.len() - cut,
            unlisted_throughput_bps: order[cut..]
                .iter()
                .map(|r| throughput(r))
                .fold(0.0, |a, b| a + b),
        }
    }
}

#[derive(Debug, Default)]
struct State {
    snapshot: WatchSnapshot,
    refreshes: u64,
    series_dropped: u64,
    dump_seconds: f64,
}

/// `watch`'s metrics: the latest refresh, encoded on every scrape (a [`Collector`]).
#[derive(Clone, Debug)]
pub struct WatchMetrics {
    state: Arc<Mutex<State>>,
    max_series: usize,
}

impl WatchMetrics {
    /// Metrics with per-connection series for at most `max_series` connections.
    pub fn new(max_series: usize) -> WatchMetrics {
        WatchMetrics {
            state: Arc::new(Mutex::new(State {
                snapshot: WatchSnapshot::of(&[], max_series),
                ..State::default()
            })),
            max_series,
        }
    }

    /// Register into `registry` (once).
    pub fn register(&self, registry: &mut Registry) {
        registry.register_collector(Box::new(self.clone()));
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere while holding the lock leaves a consistent State (every field is
        // written whole): keep serving it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Take in a refresh: the rows after filtering, and how long the dump took.
    pub fn update(&self, rows: &[Row], dump: Duration) {
        let snapshot = WatchSnapshot::of(rows, self.max_series);
        let mut s = self.state();
        s.refreshes += 1;
        s.series_dropped += snapshot.unlisted as u64;
        s.dump_seconds = dump.as_secs_f64();
        s.snapshot = snapshot;
    }
}

type Labels<'a> = Vec<(&'static str, &'a str)>;

/// The labels of one connection's series.
fn conn(c: &ConnectionSeries) -> Labels<'_> {
    vec![("local", c.local.as_str()), ("peer", c.peer.as_str())]
}

fn gauges<'a, V: EncodeGaugeValue + 'a>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (Labels<'a>, V)>,
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in samples {
        ConstGauge::new(v).encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

fn gauge<V: EncodeGaugeValue>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    v: V,
) -> Result<(), std::fmt::Error> {
    let m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(v).encode(m)
}

fn counter(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    v: u64,
) -> Result<(), std::fmt::Error> {
    let m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    ConstCounter::new(v).encode(m)
}

impl Collector for WatchMetrics {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let s = self.state();
        let snap = &s.snapshot;
        let factor = |f: LimitingFactor| vec![("factor", f.as_str())];
        gauges(
            &mut enc,
            "tcptune_watch_connections",
            "TCP connections by what limits their rate",
            snap.by_factor
                .iter()
                .map(|(f, n, _)| (factor(*f), *n as u64)),
        )?;
        gauges(
            &mut enc,
            "tcptune_watch_throughput_bits_per_second",
            "Bytes sent and received per second over the last refresh, in bit/s, by limiting factor",
            snap.by_factor.iter().map(|(f, _, bps)| (factor(*f), *bps)),
        )?;
        gauges(
            &mut enc,
            "tcptune_watch_connection_throughput_bits_per_second",
            "One connection's bytes sent and received per second over the last refresh, in bit/s",
            snap.listed.iter().map(|c| {
                let mut l = conn(c);
                l.push(("factor", c.factor.as_str()));
                (l, c.throughput_bps)
            }),
        )?;
        gauges(
            &mut enc,
            "tcptune_watch_connection_rtt_seconds",
            "One connection's smoothed RTT",
            snap.listed.iter().map(|c| (conn(c), c.rtt_seconds)),
        )?;
        gauges(
            &mut enc,
            "tcptune_watch_connection_cwnd_bytes",
            "One connection's congestion window",
            snap.listed.iter().map(|c| (conn(c), c.cwnd_bytes)),
        )?;
        gauges(
            &mut enc,
            "tcptune_watch_connection_sndbuf_bytes",
            "One connection's send buffer size",
            snap.listed
                .iter()
                .filter_map(|c| Some((conn(c), u64::from(c.sndbuf_bytes?)))),
        )?;
        gauges(
            &mut enc,
            "tcptune_watch_connection_rcvbuf_bytes",
            "One connection's receive buffer size",
            snap.listed
                .iter()
                .filter_map(|c| Some((conn(c), u64::from(c.rcvbuf_bytes?)))),
        )?;
        gauges(
            &mut enc,
            "tcptune_watch_connection_limited_ratio",
            "Share of one connection's busy time limited by the peer's receive window or this host's send buffer",
            snap.listed.iter().flat_map(|c| {
                [
                    ("receive_window", c.rwnd_limited),
                    ("send_buffer", c.sndbuf_limited),
                ]
                .into_iter()
                .filter_map(move |(limit, v)| {
                    let mut l = conn(c);
                    l.push(("limit", limit));
                    Some((l, v?))
                })
            }),
        )?;
        {
            let mut m = enc.encode_descriptor(
                "tcptune_watch_connection_retransmits",
                "One connection's retransmitted segments",
                None,
                MetricType::Counter,
            )?;
            for c in &snap.listed {
                ConstCounter::new(u64::from(c.retransmits)).encode(m.encode_family(&conn(c))?)?;
            }
        }
        gauge(
            &mut enc,
            "tcptune_watch_unlisted_connections",
            "Connections without series of their own at the last refresh (over the cap)",
            snap.unlisted as u64,
        )?;
        gauge(
            &mut enc,
            "tcptune_watch_unlisted_throughput_bits_per_second",
            "Summed rate of the connections without series of their own, in bit/s",
            snap.unlisted_throughput_bps,
        )?;
        counter(
            &mut enc,
            "tcptune_watch_connection_series_dropped",
            "Per-connection series left out by the cap, summed over refreshes",
            s.series_dropped,
        )?;
        gauge(
            &mut enc,
            "tcptune_watch_connection_series_limit",
            "Most connections with series of their own",
            self.max_series as u64,
        )?;
        counter(
            &mut enc,
            "tcptune_watch_refreshes",
            "Refreshes since watch started",
            s.refreshes,
        )?;
        gauge(
            &mut enc,
            "tcptune_watch_dump_seconds",
            "Time the last inet_diag dump of the connections took",
            s.dump_seconds,
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::ShareBasis;

    fn row(port: u16, send_bps: u64, factor: LimitingFactor) -> Row {
        Row {
            local: format!("10.0.0.1:{port}").parse().expect("addr"),
            peer: "10.0.0.2:5201".parse().expect("addr"),
            state: "ESTAB",
            congestion: None,
            cookie: u64::from(port),
            inode: 1,
            owner: None,
            rtt_us: 20_000,
            min_rtt_us: None,
            cwnd_segs: 10,
            cwnd_bytes: 14_480,
            delivery_rate_bps: None,
            app_limited: false,
            send_rate_bps: Some(send_bps),
            recv_rate_bps: Some(0),
            sndbuf_bytes: Some(1 << 20),
            sndbuf_used_bytes: None,
            rcvbuf_bytes: None,
            rcvbuf_used_bytes: None,
            snd_wnd_bytes: None,
            rcv_wnd_bytes: None,
            retrans_segs: 2,
            rwnd_limited: Some(0.5),
            sndbuf_limited: None,
            share_basis: ShareBasis::Interval,
            limit: None,
            busy_share: Some(1.0),
            bytes_acked: Some(u64::from(port)),
            bytes_received: None,
            factor,
        }
    }

    #[test]
    fn the_busiest_connections_get_series_and_the_rest_are_aggregated_and_counted() {
        let rows: Vec<Row> = (0..5u16)
            .map(|i| {
                row(
                    40_000 + i,
                    u64::from(i) * 1_000_000,
                    LimitingFactor::CongestionWindow,
                )
            })
            .chain([row(41_000, 0, LimitingFactor::Application)])
            .collect();
        let s = WatchSnapshot::of(&rows, 2);
        let ports: Vec<&str> = s.listed.iter().map(|c| c.local.as_str()).collect();
        assert_eq!(ports, ["10.0.0.1:40004", "10.0.0.1:40003"]);
        assert_eq!(s.unlisted, 4);
        assert_eq!(s.unlisted_throughput_bps, 3e6);
        let count = |f| s.by_factor.iter().find(|x| x.0 == f).map(|x| x.1);
        assert_eq!(count(LimitingFactor::CongestionWindow), Some(5));
        assert_eq!(count(LimitingFactor::Application), Some(1));
        assert_eq!(count(LimitingFactor::ReceiveWindow), Some(0));
        assert_eq!(s.by_factor.len(), LimitingFactor::ALL.len());
        // Idle connections: lifetime bytes decide.
        let idle: Vec<Row> = (0..3u16)
            .map(|i| row(50_000 + i, 0, LimitingFactor::Application))
            .collect();
        let s = WatchSnapshot::of(&idle, 1);
        assert_eq!(s.listed[0].local, "10.0.0.1:50002");
    }

    #[test]
    fn a_scrape_encodes_every_family_and_counts_dropped_series() {
        let m = WatchMetrics::new(1);
        let mut reg = Registry::default();
        m.register(&mut reg);
        m.update(
            &[
                row(40_000, 5_000_000, LimitingFactor::CongestionWindow),
                row(40_001, 1_000, LimitingFactor::SendBuffer),
            ],
            Duration::from_millis(3),
        );
        m.update(
            &[
                row(40_000, 5_000_000, LimitingFactor::CongestionWindow),
                row(40_001, 1_000, LimitingFactor::SendBuffer),
            ],
            Duration::from_millis(2),
        );
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &reg).expect("encode");
        for want in [
            "tcptune_watch_connections{factor=\"congestion_window\"} 1\n",
            "tcptune_watch_connections{factor=\"receive_window\"} 0\n",
            "tcptune_watch_connection_throughput_bits_per_second{local=\"10.0.0.1:40000\",peer=\"10.0.0.2:5201\",factor=\"congestion_window\"} 5000000.0\n",
            "tcptune_watch_connection_limited_ratio{local=\"10.0.0.1:40000\",peer=\"10.0.0.2:5201\",limit=\"receive_window\"} 0.5\n",
            "tcptune_watch_connection_retransmits_total{local=\"10.0.0.1:40000\",peer=\"10.0.0.2:5201\"} 2\n",
            "tcptune_watch_unlisted_connections 1\n",
            "tcptune_watch_connection_series_dropped_total 2\n",
            "tcptune_watch_connection_series_limit 1\n",
            "tcptune_watch_refreshes_total 2\n",
            "tcptune_watch_dump_seconds 0.002\n",
        ] {
            assert!(text.contains(want), "no {want:?} in\n{text}");
        }
        assert!(!text.contains("40001\",peer"), "over the cap: {text}");
        assert!(!text.contains("-0.0"), "{text}");
    }
}
