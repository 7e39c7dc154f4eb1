//! [`PgStore`]: the fleet's database on PostgreSQL. Every host's paths in one table, keyed by
//! the measuring host too; a lookup uses any host's entry; a change takes the measuring
//! host's advisory lock in its transaction, so the read-merge-write cycles of one host never
//! interleave (writers on different hosts never wait for each other) and nothing is lost.
//! The rules are [`crate::merge`]'s, as for SQLite: this module stores and fetches.

pub mod schema;
pub mod tls;
pub mod url;

use crate::error::{StoreError, Warning};
use crate::host::Host;
use crate::merge::{self, BadRow, Change, RawRow, Recorded, HISTORY_PER_PATH, MAX_ROWS_READ};
use crate::types::{direction_from, direction_name, Source, StoredEntry, StoredMeasurement};
use postgres::types::{ToSql, Type};
use postgres::{Client, NoTls, Row};
use schema::MigrateError;
use std::time::Duration;
use tcptune_core::pathdb::{rtt_bucket, Direction, Known, Measurement, PathDbPolicy, RecordBounds};
use url::{PgHost, PgUrl, SslMode};

/// Longest a statement may run on the server (`statement_timeout`).
pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the PostgreSQL database could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum PgOpenError {
    /// The URL is malformed.
    #[error(transparent)]
    Url(#[from] url::UrlError),
    /// TLS could not be set up (a missing `sslrootcert`, ...).
    #[error("path database {url}: {reason}")]
    Tls {
        /// The URL, without its password.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// Connecting or a step of opening failed.
    #[error("path database {url}: {what}: {source}")]
    Postgres {
        /// The URL, without its password.
        url: String,
        /// What was attempted.
        what: &'static str,
        /// The error.
        source: postgres::Error,
    },
    /// The server took the connection but did not finish the startup in time.
    #[error("path database {url}: no answer within {}s of connecting", .after.as_secs())]
    Timeout {
        /// The URL, without its password.
        url: String,
        /// How long it was given.
        after: Duration,
    },
    /// Written by a newer tcptune: left alone.
    #[error(
        "path database {url} has schema version {found}, newer than this tcptune's \
         {supported}: leaving it alone"
    )]
    NewerSchema {
        /// The URL, without its password.
        url: String,
        /// Its schema version.
        found: u32,
        /// The newest this build knows.
        supported: u32,
    },
}

/// The PostgreSQL database, open (one connection). Not shared between threads.
///
/// Call order: [`PgStore::connect`], [`PgStore::set_host`] once the measuring connection's
/// local address is known, then any queries and changes; [`PgStore::take_warnings`] after
/// each tells of rows with impossible values that were ignored.
pub struct PgStore {
    client: Client,
    url: PgUrl,
    host: Host,
    warnings: Vec<Warning>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("url", &self.url)
            .field("host", &self.host)
            .finish()
    }
}

const ENTRY_COLUMNS: &str = "peer, direction, rtt_bucket::BIGINT, rate_bps, full_pipe, \
     min_rtt_us, first_seen_unix_s, updated_unix_s, samples::BIGINT, source, last_source, \
     last_measured_unix_s, host_name, host_addr";

fn raw_of(r: &Row) -> Result<RawRow, postgres::Error> {
    Ok(RawRow {
        peer: r.try_get(0)?,
        direction: r.try_get(1)?,
        rtt_bucket: r.try_get(2)?,
        rate_bps: r.try_get(3)?,
        full_pipe: r.try_get(4)?,
        min_rtt_us: r.try_get(5)?,
        first_seen_unix_s: r.try_get(6)?,
        updated_unix_s: r.try_get(7)?,
        samples: r.try_get(8)?,
        source: r.try_get(9)?,
        last_source: r.try_get(10)?,
        last_measured_unix_s: r.try_get(11)?,
        host_name: r.try_get(12)?,
        host_addr: r.try_get(13)?,
    })
}

/// Rows read and checked, or how many there were when over [`MAX_ROWS_READ`].
type Selected = Result<(Vec<StoredEntry>, Vec<BadRow>), usize>;

/// The client's configuration for a URL.
fn config(url: &PgUrl) -> postgres::Config {
    let mut c = postgres::Config::new();
    c.user(&url.user)
        .dbname(&url.dbname)
        .port(url.port)
        .connect_timeout(url.connect_timeout)
        .tcp_user_timeout(url.connect_timeout)
        .application_name("tcptune")
        .options(&format!(
            "-c statement_timeout={}",
            STATEMENT_TIMEOUT.as_millis()
        ));
    if let Some(p) = &url.password {
        c.password(p);
    }
    match &url.host {
        PgHost::Tcp(h) => {
            c.host(h);
            c.ssl_mode(match url.sslmode {
                SslMode::Disable => postgres::config::SslMode::Disable,
                SslMode::Prefer => postgres::config::SslMode::Prefer,
                _ => postgres::config::SslMode::Require,
            });
        }
        PgHost::Unix(d) => {
            // As libpq: a Unix socket carries no TLS, whatever sslmode says.
            c.host_path(d);
            c.ssl_mode(postgres::config::SslMode::Disable);
        }
    }
    c
}

/// How much longer than the URL's `connect_timeout` the startup (TLS, authentication, the
/// schema check) may take before [`PgStore::connect`] gives up.
pub const STARTUP_GRACE: Duration = Duration::from_secs(2);

impl PgStore {
    /// Connect, with TLS as the URL's `sslmode` says, and create the schema if the database
    /// is empty; all within the URL's `connect_timeout` plus [`STARTUP_GRACE`].
    ///
    /// The client library bounds only the socket's connect; a server that takes the
    /// connection and never answers would hold the caller forever. So the connection is
    /// made on a thread of its own, and the caller waits for it only so long: such a thread
    /// is left to end when the server closes the connection (or with the process).
    pub fn connect(url: &PgUrl) -> Result<PgStore, PgOpenError> {
        let (tx, rx) = std::sync::mpsc::channel();
        let u = url.clone();
        let after = url.connect_timeout + STARTUP_GRACE;
        let timeout = || PgOpenError::Timeout {
            url: url.to_string(),
            after,
        };
        std::thread::Builder::new()
            .name("tcptune-pg-connect".into())
            .spawn(move || {
                let _ = tx.send(PgStore::connect_here(&u));
            })
            .map_err(|_| timeout())?;
        rx.recv_timeout(after).map_err(|_| timeout())?
    }

    fn connect_here(url: &PgUrl) -> Result<PgStore, PgOpenError> {
        let shown = url.to_string();
        let cfg = config(url);
        let tls = matches!(url.host, PgHost::Tcp(_)) && url.sslmode != SslMode::Disable;
        let connected = if tls {
            let rustls = tls::client_config(url).map_err(|reason| PgOpenError::Tls {
                url: shown.clone(),
                reason,
            })?;
            cfg.connect(tokio_postgres_rustls::MakeRustlsConnect::new(rustls))
        } else {
            cfg.connect(NoTls)
        };
        let mut client = connected.map_err(|source| PgOpenError::Postgres {
            url: shown.clone(),
            what: "connecting",
            source,
        })?;
        match schema::migrate(&mut client) {
            Ok(_) => {}
            Err(MigrateError::Newer(found)) => {
                return Err(PgOpenError::NewerSchema {
                    url: shown,
                    found,
                    supported: schema::PG_SCHEMA_VERSION,
                })
            }
            Err(MigrateError::Sql(what, source)) => {
                return Err(PgOpenError::Postgres {
                    url: shown,
                    what,
                    source,
                })
            }
        }
        Ok(PgStore {
            client,
            url: url.clone(),
            host: Host::this(),
            warnings: Vec::new(),
        })
    }

    /// The URL, for messages (without its password).
    pub fn url(&self) -> &PgUrl {
        &self.url
    }

    /// The host its changes are recorded as measured by.
    pub fn set_host(&mut self, host: Host) {
        self.host = host;
    }

    /// What happened since the last call that the user should hear about.
    pub fn take_warnings(&mut self) -> Vec<Warning> {
        std::mem::take(&mut self.warnings)
    }

    fn err(&self, what: &'static str) -> impl Fn(postgres::Error) -> StoreError {
        let url = self.url.to_string();
        move |source| StoreError::Postgres {
            url: url.clone(),
            what,
            source,
        }
    }

    fn note_invalid(&mut self, bad: &[BadRow]) {
        if let Some((_, host, first)) = bad.first().map(|b| &**b) {
            self.warnings.push(Warning::InvalidRows {
                path: self.url.to_string(),
                count: bad.len(),
                first: format!("{first}, measured by {host}"),
            });
        }
    }

    /// Rows of `tcptune_paths` matching `filter`, checked; more than [`MAX_ROWS_READ`] is
    /// an error.
    fn select(
        client: &mut impl postgres::GenericClient,
        filter: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
        lock: bool,
    ) -> Result<Selected, postgres::Error> {
        let sql = format!(
            "SELECT {ENTRY_COLUMNS} FROM tcptune_paths WHERE {filter} \
             ORDER BY updated_unix_s, peer, direction, rtt_bucket LIMIT {}{}",
            MAX_ROWS_READ + 1,
            if lock { " FOR UPDATE" } else { "" }
        );
        let rows = client.query_typed(&sql, params)?;
        if rows.len() > MAX_ROWS_READ {
            return Ok(Err(rows.len()));
        }
        let mut raw = Vec::with_capacity(rows.len());
        for r in &rows {
            raw.push(raw_of(r)?);
        }
        Ok(Ok(merge::check_rows(raw)))
    }

    fn fetch(
        &mut self,
        what: &'static str,
        filter: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<StoredEntry>, StoreError> {
        let err = self.err(what);
        let (rows, bad) = Self::select(&mut self.client, filter, params, false)
            .map_err(err)?
            .map_err(|n| self.too_many(what, n))?;
        self.note_invalid(&bad);
        Ok(rows)
    }

    fn too_many(&self, what: &'static str, _n: usize) -> StoreError {
        StoreError::TooManyRows {
            url: self.url.to_string(),
            what,
            max: MAX_ROWS_READ,
        }
    }

    /// Every host's entries of this peer and direction, in any RTT bucket (what a client
    /// fetches before it knows the RTT).
    pub fn candidates(
        &mut self,
        peer: &str,
        direction: Direction,
    ) -> Result<Vec<StoredEntry>, StoreError> {
        self.fetch(
            "looking up a path",
            "peer = $1 AND direction = $2",
            &[
                (&peer, Type::TEXT),
                (&direction_name(direction), Type::TEXT),
            ],
        )
    }

    /// The fresh estimate for this peer and direction at a path RTT of `rtt`, from any
    /// host's entries of this and the neighbouring RTT buckets.
    pub fn lookup(
        &mut self,
        peer: &str,
        direction: Direction,
        rtt: Duration,
        now_unix_s: f64,
        policy: &PathDbPolicy,
    ) -> Result<Option<Known>, StoreError> {
        let bucket = rtt_bucket(rtt);
        let rows = self.fetch(
            "looking up a path",
            "peer = $1 AND direction = $2 AND rtt_bucket BETWEEN $3 - 1 AND $3 + 1",
            &[
                (&peer, Type::TEXT),
                (&direction_name(direction), Type::TEXT),
                (&bucket, Type::INT4),
            ],
        )?;
        Ok(merge::lookup_in(
            &rows, peer, direction, rtt, now_unix_s, policy,
        ))
    }

    /// Merge a measurement by this store's host, in one transaction holding the host's
    /// advisory lock: fetch the host's rows, plan with [`crate::merge`], write the plan.
    pub fn record(
        &mut self,
        peer: &str,
        direction: Direction,
        m: &Measurement,
        source: &Source,
        policy: &PathDbPolicy,
        bounds: Option<&RecordBounds>,
    ) -> Result<Recorded, StoreError> {
        if m.rate.0 == 0 || !m.at_unix_s.is_finite() {
            return Ok(Recorded::Ignored);
        }
        let err = self.err("recording a measurement");
        let host = self.host.clone();
        let mut tx = self.client.transaction().map_err(&err)?;
        tx.execute_typed(
            "SELECT pg_advisory_xact_lock(hashtextextended($1 || '|' || $2, 0))",
            &[(&host.name, Type::TEXT), (&host.addr, Type::TEXT)],
        )
        .map_err(&err)?;
        let (before, bad) = match Self::select(
            &mut tx,
            "host_name = $1 AND host_addr = $2",
            &[(&host.name, Type::TEXT), (&host.addr, Type::TEXT)],
            true,
        )
        .map_err(&err)?
        {
            Ok(x) => x,
            Err(n) => {
                drop(tx);
                return Err(self.too_many("recording a measurement", n));
            }
        };
        let plan = merge::plan(
            &before,
            &Change {
                peer,
                direction,
                m,
                source,
                host: &host,
                policy,
                bounds,
            },
        );
        if plan.outcome == Recorded::Refused {
            drop(tx);
            self.note_invalid(&bad);
            return Ok(Recorded::Refused);
        }
        let delete = "DELETE FROM tcptune_paths WHERE host_name = $1 AND host_addr = $2 \
                      AND peer = $3 AND direction = $4 AND rtt_bucket = $5";
        for (p, d, b) in &plan.delete {
            tx.execute_typed(
                delete,
                &[
                    (&host.name, Type::TEXT),
                    (&host.addr, Type::TEXT),
                    (p, Type::TEXT),
                    (&direction_name(*d), Type::TEXT),
                    (b, Type::INT4),
                ],
            )
            .map_err(&err)?;
        }
        for ((p, d, b), _, _) in bad.iter().map(|b| &**b) {
            let b = i32::try_from(*b).unwrap_or(i32::MAX);
            tx.execute_typed(
                delete,
                &[
                    (&host.name, Type::TEXT),
                    (&host.addr, Type::TEXT),
                    (p, Type::TEXT),
                    (d, Type::TEXT),
                    (&b, Type::INT4),
                ],
            )
            .map_err(&err)?;
        }
        if let Some(s) = &plan.upsert {
            let e = &s.entry;
            let big = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
            let samples = i32::try_from(e.samples).unwrap_or(i32::MAX);
            tx.execute_typed(
                "INSERT INTO tcptune_paths (host_name, host_addr, peer, direction, rtt_bucket,
                     rate_bps, full_pipe, min_rtt_us, first_seen_unix_s, updated_unix_s,
                     samples, source, last_source, last_measured_unix_s)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
                 ON CONFLICT (peer, direction, rtt_bucket, host_name, host_addr) DO UPDATE SET
                     rate_bps = excluded.rate_bps, full_pipe = excluded.full_pipe,
                     min_rtt_us = excluded.min_rtt_us,
                     first_seen_unix_s = excluded.first_seen_unix_s,
                     updated_unix_s = excluded.updated_unix_s, samples = excluded.samples,
                     source = excluded.source, last_source = excluded.last_source,
                     last_measured_unix_s = excluded.last_measured_unix_s",
                &[
                    (&host.name, Type::TEXT),
                    (&host.addr, Type::TEXT),
                    (&e.peer, Type::TEXT),
                    (&direction_name(e.direction), Type::TEXT),
                    (&e.rtt_bucket, Type::INT4),
                    (&big(e.rate_bps), Type::INT8),
                    (&e.full_pipe, Type::BOOL),
                    (&big(e.min_rtt_us), Type::INT8),
                    (&e.first_seen_unix_s, Type::FLOAT8),
                    (&e.updated_unix_s, Type::FLOAT8),
                    (&samples, Type::INT4),
                    (&s.source.as_str(), Type::TEXT),
                    (&s.last_source.as_str(), Type::TEXT),
                    (&s.last_measured_unix_s, Type::FLOAT8),
                ],
            )
            .map_err(&err)?;
            tx.execute_typed(
                "INSERT INTO tcptune_measurements (host_name, host_addr, peer, direction,
                     rtt_bucket, at_unix_s, source, rate_bps, full_pipe, min_rtt_us)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                &[
                    (&host.name, Type::TEXT),
                    (&host.addr, Type::TEXT),
                    (&peer, Type::TEXT),
                    (&direction_name(direction), Type::TEXT),
                    (&e.rtt_bucket, Type::INT4),
                    (&m.at_unix_s, Type::FLOAT8),
                    (&source.as_str(), Type::TEXT),
                    (&big(m.rate.0), Type::INT8),
                    (&m.full_pipe, Type::BOOL),
                    (
                        &big(u64::try_from(m.min_rtt.as_micros()).unwrap_or(u64::MAX)),
                        Type::INT8,
                    ),
                ],
            )
            .map_err(&err)?;
            tx.execute_typed(
                "DELETE FROM tcptune_measurements WHERE host_name = $1 AND host_addr = $2
                 AND peer = $3 AND direction = $4 AND rtt_bucket = $5
                 AND id NOT IN (SELECT id FROM tcptune_measurements
                     WHERE host_name = $1 AND host_addr = $2 AND peer = $3 AND direction = $4
                     AND rtt_bucket = $5 ORDER BY id DESC LIMIT $6)",
                &[
                    (&host.name, Type::TEXT),
                    (&host.addr, Type::TEXT),
                    (&peer, Type::TEXT),
                    (&direction_name(direction), Type::TEXT),
                    (&e.rtt_bucket, Type::INT4),
                    (&(HISTORY_PER_PATH as i64), Type::INT8),
                ],
            )
            .map_err(&err)?;
        }
        tx.commit().map_err(&err)?;
        self.note_invalid(&bad);
        Ok(plan.outcome)
    }

    /// Every host's paths, ordered by peer, direction, RTT bucket and host.
    pub fn entries(&mut self) -> Result<Vec<StoredEntry>, StoreError> {
        let mut rows = self.fetch("listing the paths", "TRUE", &[])?;
        crate::types::sort_entries(&mut rows);
        Ok(rows)
    }

    /// The recorded measurements of any of these peers by any host, oldest first.
    pub fn history(&mut self, peers: &[String]) -> Result<Vec<StoredMeasurement>, StoreError> {
        if peers.is_empty() {
            return Ok(Vec::new());
        }
        let err = self.err("reading the history of measurements");
        let rows = self
            .client
            .query(
                &format!(
                    "SELECT peer, direction, rtt_bucket::BIGINT, at_unix_s, source, rate_bps,
                         full_pipe, min_rtt_us
                     FROM tcptune_measurements WHERE peer = ANY($1) ORDER BY id LIMIT {}",
                    MAX_ROWS_READ
                ),
                &[&peers],
            )
            .map_err(&err)?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let peer: String = r.try_get(0).map_err(&err)?;
            let direction: String = r.try_get(1).map_err(&err)?;
            let bucket: i64 = r.try_get(2).map_err(&err)?;
            let source: String = r.try_get(4).map_err(&err)?;
            let rate: i64 = r.try_get(5).map_err(&err)?;
            let min_rtt: i64 = r.try_get(7).map_err(&err)?;
            let (Some(direction), Ok(rtt_bucket), Ok(rate_bps), Ok(min_rtt_us)) = (
                direction_from(&direction),
                i32::try_from(bucket),
                u64::try_from(rate),
                u64::try_from(min_rtt),
            ) else {
                continue;
            };
            if peer.len() > merge::MAX_PEER_BYTES || source.len() > merge::MAX_SOURCE_BYTES {
                continue;
            }
            out.push(StoredMeasurement {
                peer,
                direction,
                rtt_bucket,
                at_unix_s: r.try_get(3).map_err(&err)?,
                source: Source::from_name(&source),
                rate_bps,
                full_pipe: r.try_get(6).map_err(&err)?,
                min_rtt_us,
            });
        }
        Ok(out)
    }

    /// Forget every host's paths to these peers (and their history); returns how many.
    pub fn forget(&mut self, peers: &[String]) -> Result<usize, StoreError> {
        let err = self.err("forgetting paths");
        let n = self
            .client
            .execute("DELETE FROM tcptune_paths WHERE peer = ANY($1)", &[&peers])
            .map_err(err)?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    /// Forget every path of every host; returns how many.
    pub fn forget_all(&mut self) -> Result<usize, StoreError> {
        let err = self.err("forgetting every path");
        let n = self
            .client
            .execute("DELETE FROM tcptune_paths", &[])
            .map_err(err)?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    /// Insert entries as they are (an import): where the same host's path is already
    /// stored, the newer wins. Returns how many were new or newer.
    pub fn import(&mut self, entries: &[StoredEntry]) -> Result<usize, StoreError> {
        let err = self.err("importing paths");
        let mut tx = self.client.transaction().map_err(&err)?;
        let mut n = 0;
        for s in entries {
            let e = &s.entry;
            let big = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
            n += tx
                .execute(
                    "INSERT INTO tcptune_paths (host_name, host_addr, peer, direction,
                         rtt_bucket, rate_bps, full_pipe, min_rtt_us, first_seen_unix_s,
                         updated_unix_s, samples, source, last_source, last_measured_unix_s)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
                     ON CONFLICT (peer, direction, rtt_bucket, host_name, host_addr) DO UPDATE
                     SET rate_bps = excluded.rate_bps, full_pipe = excluded.full_pipe,
                         min_rtt_us = excluded.min_rtt_us,
                         first_seen_unix_s = excluded.first_seen_unix_s,
                         updated_unix_s = excluded.updated_unix_s, samples = excluded.samples,
                         source = excluded.source, last_source = excluded.last_source,
                         last_measured_unix_s = excluded.last_measured_unix_s
                     WHERE excluded.updated_unix_s > tcptune_paths.updated_unix_s",
                    &[
                        &s.measured_by.name,
                        &s.measured_by.addr,
                        &e.peer,
                        &direction_name(e.direction),
                        &e.rtt_bucket,
                        &big(e.rate_bps),
                        &e.full_pipe,
                        &big(e.min_rtt_us),
                        &e.first_seen_unix_s,
                        &e.updated_unix_s,
                        &i32::try_from(e.samples.max(1)).unwrap_or(i32::MAX),
                        &s.source.as_str(),
                        &s.last_source.as_str(),
                        &s.last_measured_unix_s,
                    ],
                )
                .map_err(&err)?;
        }
        tx.commit().map_err(&err)?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }
}
