//! tcptune's Prometheus exporter: serves a [`prometheus_client::registry::Registry`] on
//! `GET /metrics` in the OpenMetrics text format, for `tcptune watch --metrics` (and later
//! `tcptune serve --metrics`).
//!
//! The exporter knows nothing of what it serves. Each caller registers its own metric
//! families (or a [`prometheus_client::collector::Collector`]) into a registry, wraps it in
//! an [`Arc`](std::sync::Arc) and hands it over; the metric handles stay with the caller,
//! who updates them while the exporter encodes the registry on every scrape:
//!
//! ```no_run
//! use prometheus_client::metrics::counter::Counter;
//! use prometheus_client::registry::Registry;
//! use std::sync::Arc;
//! use tcptune_metrics::{Exporter, ExporterConfig};
//!
//! let sessions = Counter::<u64>::default();
//! let mut registry = Registry::default();
//! registry.register("tcptune_serve_sessions", "Sessions served", sessions.clone());
//! let exporter = Exporter::start("127.0.0.1:9310", Arc::new(registry), ExporterConfig::default())?;
//! sessions.inc(); // the next scrape shows it
//! # drop(exporter);
//! # Ok::<(), tcptune_metrics::ExporterError>(())
//! ```
//!
//! # Against a hostile peer
//!
//! Only `GET /metrics` and `HEAD /metrics` are answered (4xx for anything else, and the
//! connection closes after every answer). Every bound is in [`ExporterConfig`]: at most
//! `max_connections` at once (more are answered `503` without being read), a whole
//! connection within `timeout` (a slow sender or a slow reader is cut off), request heads of
//! at most `max_request_bytes` (`431`). The request parser ([`http`]) is pure and
//! unit-tested with garbage.

pub mod http;

mod exporter;

pub use exporter::{run, Exporter, ExporterConfig, ExporterCounts, ExporterError, Shutdown};
/// The registry type callers fill (re-exported so that they need not depend on
/// `prometheus-client` only to name it).
pub use prometheus_client::registry::Registry;
