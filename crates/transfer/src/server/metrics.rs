//! `serve --metrics`: what the server does, as Prometheus metrics for an exporter such as
//! `tcptune-metrics` to serve (`docs/METRICS.md` lists them).
//!
//! Call order: [`ServeMetrics::new`], [`ServeMetrics::register`] into the exporter's
//! registry once, then hand it to the server in [`super::ServerConfig::metrics`]; the event
//! loop updates it as things happen. Every update is an atomic add or a short lock of one
//! metric family (an exporter encodes the registry into memory before it writes a byte to
//! its peer, so no scrape, however slow its reader, holds a lock the event loop waits for).
//!
//! Cardinality is bounded by construction: every label value is one of a fixed set named
//! in the code (tuning modes, refusal kinds, directions, results), never a peer's address
//! nor anything a client sent.

use super::super::session::endpoint::MonitorEvent;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tcptune_core::pathdb::Direction;
use tcptune_core::TuneMode;

type One = [(&'static str, &'static str); 1];
type Two = [(&'static str, &'static str); 2];

/// Handshake times, seconds: 1 ms to 10 s.
const HANDSHAKE_BUCKETS: [f64; 13] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// Session throughputs, bit/s: 1 Mbit/s to 100 Gbit/s.
const THROUGHPUT_BUCKETS: [f64; 11] = [1e6, 3e6, 1e7, 3e7, 1e8, 3e8, 1e9, 3e9, 1e10, 3e10, 1e11];

fn throughput_histogram() -> Histogram {
    Histogram::new(THROUGHPUT_BUCKETS)
}

/// What happened to a measurement the server wanted to record in its path database.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordResult {
    /// Merged into the database.
    Recorded,
    /// Not handed to the database: too many from the client's group of addresses, or in
    /// all, lately.
    RateLimited,
    /// The database's bounds left no room (full of fresh entries).
    Full,
    /// The database's queue was full (it is slow).
    Busy,
    /// The database failed (the server's log says why).
    Failed,
}

impl RecordResult {
    fn label(self) -> &'static str {
        match self {
            RecordResult::Recorded => "recorded",
            RecordResult::RateLimited => "rate_limited",
            RecordResult::Full => "full",
            RecordResult::Busy => "busy",
            RecordResult::Failed => "failed",
        }
    }
}

/// The server's metrics. See the module documentation for the calling order.
#[derive(Debug)]
pub struct ServeMetrics {
    sessions_active: Gauge,
    pending: Gauge,
    sessions: Family<One, Counter>,
    ended: Family<Two, Counter>,
    bytes: Family<Two, Counter>,
    refused: Family<One, Counter>,
    handshake: Histogram,
    throughput: Family<One, Histogram, fn() -> Histogram>,
    advice: Family<One, Counter>,
    records: Family<One, Counter>,
}

impl Default for ServeMetrics {
    fn default() -> Self {
        ServeMetrics::new()
    }
}

/// Every mode label: the tuning modes and `advise`.
fn modes() -> impl Iterator<Item = &'static str> {
    TuneMode::all()
        .into_iter()
        .map(|m| m.name())
        .chain(["advise"])
}

impl ServeMetrics {
    /// Metrics at zero, with a series for every mode and direction already there (a
    /// dashboard shows 0, not "no data", before the first session).
    pub fn new() -> ServeMetrics {
        let m = ServeMetrics {
            sessions_active: Gauge::default(),
            pending: Gauge::default(),
            sessions: Family::default(),
            ended: Family::default(),
            bytes: Family::default(),
            refused: Family::default(),
            handshake: Histogram::new(HANDSHAKE_BUCKETS),
            throughput: Family::new_with_constructor(throughput_histogram),
            advice: Family::default(),
            records: Family::default(),
        };
        for mode in modes() {
            let _ = m.sessions.get_or_create(&[("mode", mode)]);
            for direction in ["send", "receive"] {
                let _ = m
                    .bytes
                    .get_or_create(&[("direction", direction), ("mode", mode)]);
            }
        }
        for source in ["path_db", "measured"] {
            let _ = m.advice.get_or_create(&[("source", source)]);
        }
        m
    }

    /// Register every family into `registry` (the names are `tcptune_serve_*`).
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("tcptune_serve");
        r.register(
            "sessions_active",
            "Sessions in progress (transfers and advice)",
            self.sessions_active.clone(),
        );
        r.register(
            "pending_connections",
            "Connections not yet part of a session (handshakes, early data connections)",
            self.pending.clone(),
        );
        r.register(
            "sessions",
            "Sessions admitted, by tuning mode (advise: advice sessions)",
            self.sessions.clone(),
        );
        r.register(
            "sessions_ended",
            "Sessions ended, by tuning mode and result (completed, failed)",
            self.ended.clone(),
        );
        r.register(
            "bytes",
            "Data bytes the server sent (direction=send) or received (receive), by tuning mode",
            self.bytes.clone(),
        );
        r.register(
            "refused",
            "Connections refused or dropped before they joined a session, by reason",
            self.refused.clone(),
        );
        r.register(
            "handshake_seconds",
            "Time from accepting a client's control connection to the start of its transfer",
            self.handshake.clone(),
        );
        r.register(
            "throughput_bits_per_second",
            "Throughput of each session's transfer at the server, by tuning mode",
            self.throughput.clone(),
        );
        r.register(
            "advice",
            "Advice given, by where the path's numbers came from (path_db, measured)",
            self.advice.clone(),
        );
        r.register(
            "path_records",
            "Measurements of clients' paths for the path database, by result (recorded, rate_limited, full, busy, failed)",
            self.records.clone(),
        );
    }

    /// Sessions and pending connections now.
    pub(crate) fn set_load(&self, sessions: u64, pending: u64) {
        self.sessions_active
            .set(i64::try_from(sessions).unwrap_or(i64::MAX));
        self.pending.set(i64::try_from(pending).unwrap_or(i64::MAX));
    }

    /// Data bytes moved (since the last call for this phase).
    pub(crate) fn add_bytes(&self, direction: Direction, mode: &'static str, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let d = match direction {
            Direction::Send => "send",
            Direction::Receive => "receive",
        };
        self.bytes
            .get_or_create(&[("direction", d), ("mode", mode)])
            .inc_by(bytes);
    }

    /// What became of a measurement for the path database.
    pub(crate) fn record(&self, r: RecordResult) {
        self.records.get_or_create(&[("result", r.label())]).inc();
    }

    /// Something the control plane did.
    pub(crate) fn monitor(&self, ev: &MonitorEvent) {
        match ev {
            MonitorEvent::Admitted { mode } => {
                self.sessions.get_or_create(&[("mode", mode)]).inc();
            }
            MonitorEvent::Handshake { seconds } => self.handshake.observe(*seconds),
            MonitorEvent::Refused { kind } => {
                self.refused.get_or_create(&[("reason", kind)]).inc();
            }
            MonitorEvent::Ended {
                mode,
                completed,
                rate_bps,
            } => {
                let result = if *completed { "completed" } else { "failed" };
                self.ended
                    .get_or_create(&[("mode", mode), ("result", result)])
                    .inc();
                if let Some(r) = rate_bps.filter(|r| r.is_finite() && *r > 0.0) {
                    self.throughput.get_or_create(&[("mode", mode)]).observe(r);
                }
            }
            MonitorEvent::Advice { source } => {
                self.advice.get_or_create(&[("source", source)]).inc();
            }
            MonitorEvent::RecordLimited => self.record(RecordResult::RateLimited),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(m: &ServeMetrics) -> String {
        let mut r = Registry::default();
        m.register(&mut r);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &r).expect("encode");
        out
    }

    #[test]
    fn every_family_is_exported_with_bounded_labels_and_zeros_before_any_session() {
        let m = ServeMetrics::new();
        let text = encoded(&m);
        for name in [
            "tcptune_serve_sessions_active",
            "tcptune_serve_pending_connections",
            "tcptune_serve_sessions_total{mode=\"auto\"} 0",
            "tcptune_serve_bytes_total{direction=\"receive\",mode=\"advise\"} 0",
            "tcptune_serve_advice_total{source=\"path_db\"} 0",
            "tcptune_serve_handshake_seconds_bucket{le=\"0.001\"} 0",
        ] {
            assert!(text.contains(name), "{name} missing from\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn events_land_in_their_series() {
        let m = ServeMetrics::new();
        m.set_load(3, 7);
        m.add_bytes(Direction::Send, "auto", 1000);
        m.add_bytes(Direction::Send, "auto", 24);
        m.monitor(&MonitorEvent::Admitted { mode: "kernel" });
        m.monitor(&MonitorEvent::Handshake { seconds: 0.003 });
        m.monitor(&MonitorEvent::Refused { kind: "busy" });
        m.monitor(&MonitorEvent::Ended {
            mode: "kernel",
            completed: false,
            rate_bps: Some(2e8),
        });
        m.monitor(&MonitorEvent::Ended {
            mode: "kernel",
            completed: true,
            rate_bps: Some(f64::NAN),
        });
        m.monitor(&MonitorEvent::Advice { source: "measured" });
        m.monitor(&MonitorEvent::RecordLimited);
        m.record(RecordResult::Recorded);
        let text = encoded(&m);
        for line in [
            "tcptune_serve_sessions_active 3",
            "tcptune_serve_pending_connections 7",
            "tcptune_serve_bytes_total{direction=\"send\",mode=\"auto\"} 1024",
            "tcptune_serve_sessions_total{mode=\"kernel\"} 1",
            "tcptune_serve_handshake_seconds_count 1",
            "tcptune_serve_refused_total{reason=\"busy\"} 1",
            "tcptune_serve_sessions_ended_total{mode=\"kernel\",result=\"failed\"} 1",
            "tcptune_serve_sessions_ended_total{mode=\"kernel\",result=\"completed\"} 1",
            "tcptune_serve_throughput_bits_per_second_count{mode=\"kernel\"} 1",
            "tcptune_serve_throughput_bits_per_second_bucket{le=\"300000000.0\",mode=\"kernel\"} 1",
            "tcptune_serve_advice_total{source=\"measured\"} 1",
            "tcptune_serve_path_records_total{result=\"rate_limited\"} 1",
            "tcptune_serve_path_records_total{result=\"recorded\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }
}
