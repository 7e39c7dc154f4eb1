//! tcptune's database of per-path measurements (Enable's idea: measure a path once, remember
//! it, and let every later transfer, the server and any application ask instead of measuring
//! again), in a SQLite file of one host or in a PostgreSQL database a fleet of hosts shares.
//!
//! [`PathStore`] is either backend behind one interface: `--path-db FILE` (or
//! `$TCPTUNE_PATH_DB`) is a SQLite file, `--path-db postgres://USER@HOST[:PORT]/DB[?...]`
//! a PostgreSQL database ([`pg::url`] has the URL's form, libpq's). Both apply the same rules,
//! kept in one place ([`merge`]): the backend stores and fetches.
//!
//! The rules (which entry a lookup finds, how a measurement merges into an entry, when
//! entries age out) are pure and live in [`tcptune_core::pathdb`]; this crate stores what
//! they decide. Every change runs in one SQLite transaction: load the rows into the core's
//! [`PathDb`](tcptune_core::pathdb::PathDb), apply the core's merge, write the difference
//! back.
//!
//! # Why SQLite (rusqlite, with the bundled library)
//!
//! `send`, `serve`, `paths` and `advise` may all use the database at once, from several
//! processes. The JSON file this replaces was rewritten whole under a lock file; SQLite gives
//! the same guarantee without a side lock, with a real schema instead:
//!
//! * Concurrent writers from several processes with no lost update: every change is a
//!   `BEGIN IMMEDIATE` transaction (the write lock is taken before the rows are read, so two
//!   read-merge-write cycles never interleave), waiting up to [`BUSY_TIMEOUT`] for another
//!   writer. In WAL mode readers never wait for writers.
//! * A schema with constraints (`STRICT` tables, `CHECK`s, a foreign key from the history
//!   of measurements to their path), versioned with `PRAGMA user_version` and migrated
//!   forward in one transaction ([`SCHEMA_VERSION`]). A database written by a newer tcptune
//!   is left alone ([`OpenError::NewerSchema`]).
//! * The bundled SQLite means the same, known library version everywhere, with no system
//!   package to install.
//!
//! # Why PostgreSQL (the `postgres` crate, with rustls)
//!
//! A site runs several data transfer nodes, and a path one measured is the same path for
//! its neighbours; the shared state a site already operates next to perfSONAR and Globus is
//! a PostgreSQL server. The client is [`postgres`] (the blocking face of `tokio-postgres`,
//! the most used PostgreSQL client in Rust, maintained with the `rust-postgres` project):
//! tcptune's store is synchronous, one connection per process, so the blocking client fits
//! without an async runtime of our own. TLS is rustls through `tokio-postgres-rustls`
//! (rustls with ring: no OpenSSL to link, the same TLS library everywhere), with libpq's
//! `sslmode`s ([`pg::tls`]).
//!
//! * Every host's entries sit in one table keyed by the measuring host too
//!   ([`Host`]: hostname and the measuring connection's local address); a lookup uses any
//!   host's entry for the peer whose RTT bucket matches.
//! * The schema is created on first use of an empty database, in one transaction under an
//!   advisory lock, with a schema version row ([`pg::schema`]).
//! * A change runs in one transaction that holds the measuring host's advisory lock: the
//!   read-merge-write cycles of one host never interleave, writers on different hosts never
//!   wait for each other, and nothing is lost.
//! * Connecting is bounded by the URL's `connect_timeout` (default
//!   [`pg::url::DEFAULT_CONNECT_TIMEOUT`]), statements by [`pg::STATEMENT_TIMEOUT`]; every
//!   value read back is checked against named budgets ([`merge::MAX_PEER_BYTES`], ...)
//!   before use, and a URL is never shown with its password.
//!
//! # Files
//!
//! * Location ([`default_location`]): `$TCPTUNE_PATH_DB`, else
//!   `$XDG_CACHE_HOME/tcptune/paths.sqlite`, else `~/.cache/tcptune/paths.sqlite`; the
//!   commands' `--path-db FILE` overrides it. A `FILE` ending in `.json` (an old setting)
//!   means the database `FILE` with the extension `.sqlite` next to it ([`Location`]).
//! * The old JSON database (`paths.json` next to the database, the `.json` file named, or
//!   the named file itself when it holds JSON) is imported once when found, and renamed to
//!   `….imported`; a [`Warning`] says so.
//! * A corrupt database (a SQLite file that SQLite cannot read, or that fails
//!   `PRAGMA quick_check`) is moved aside to `….corrupt` and a new one started, with a
//!   [`Warning`]: never fatal to a transfer. A file that is not a SQLite database at all is
//!   never touched ([`OpenError::NotADatabase`]).
//!
//! # Use
//!
//! ```no_run
//! use std::time::Duration;
//! use tcptune_core::pathdb::{Direction, Measurement, PathDbPolicy};
//! use tcptune_core::Rate;
//! use tcptune_pathdb::{PathStore, Source};
//!
//! let mut db = PathStore::open(std::path::Path::new("/tmp/paths.sqlite"))?;
//! for w in db.take_warnings() {
//!     eprintln!("warning: {w}");
//! }
//! let policy = PathDbPolicy::default();
//! let m = Measurement {
//!     rate: Rate::mbit(950),
//!     min_rtt: Duration::from_millis(100),
//!     full_pipe: true,
//!     at_unix_s: 1.7e9,
//! };
//! db.record("10.0.0.2", Direction::Send, &m, &Source::Probe, &policy)?;
//! let known = db.lookup("10.0.0.2", Direction::Send, Duration::from_millis(100), 1.7e9, &policy)?;
//! assert!(known.is_some());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod error;
mod host;
mod legacy;
mod location;
mod lock;
pub mod merge;
mod open;
pub mod pg;
mod schema;
mod sqlite;
mod types;

pub use error::{OpenError, StoreError, Warning};
pub use host::{hostname, Host, MAX_HOST_ADDR_BYTES, MAX_HOST_NAME_BYTES};
pub use location::{default_location, Location, ENV_VAR, FILE_NAME, LEGACY_FILE_NAME};
pub use lock::BUSY_TIMEOUT;
pub use merge::{
    check_entry, Recorded, HISTORY_PER_PATH, MAX_PEER_BYTES, MAX_ROWS_READ, MAX_SOURCE_BYTES,
};
pub use pg::url::{is_postgres_url, PgUrl};
pub use pg::PgStore;
pub use schema::SCHEMA_VERSION;
pub use sqlite::SqliteStore;
pub use types::{Source, StoredEntry, StoredMeasurement};

use std::path::Path;
use std::time::Duration;
use tcptune_core::pathdb::{Direction, Known, Measurement, PathDbPolicy, RecordBounds};

/// The path database, open: a SQLite file or a PostgreSQL database, with one interface.
///
/// Call order: [`PathStore::open`] (or [`PathStore::open_existing`]), then
/// [`PathStore::take_warnings`] to show what opening found, [`PathStore::set_host`] when the
/// measuring connection's local address is known, then any queries and changes; changes may
/// add warnings for the next [`PathStore::take_warnings`].
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // one per process: boxing either saves nothing
pub enum PathStore {
    /// One host's SQLite file.
    Sqlite(SqliteStore),
    /// A fleet's PostgreSQL database.
    Postgres(PgStore),
}

macro_rules! both {
    ($self:expr, $s:ident => $e:expr) => {
        match $self {
            PathStore::Sqlite($s) => $e,
            PathStore::Postgres($s) => $e,
        }
    };
}

impl PathStore {
    /// Open the database `location` names: a `postgres://` URL (see [`PgUrl`]), else a
    /// SQLite file created if missing (see [`SqliteStore::open`]).
    pub fn open(location: &Path) -> Result<PathStore, OpenError> {
        match postgres_url(location)? {
            Some(url) => Ok(PathStore::Postgres(PgStore::connect(&url)?)),
            None => Ok(PathStore::Sqlite(SqliteStore::open(location)?)),
        }
    }

    /// Like [`PathStore::open`], but `None` when there is no SQLite file (nor an old JSON
    /// one) at `location`, instead of creating one: for commands that only read. A
    /// PostgreSQL database is always opened.
    pub fn open_existing(location: &Path) -> Result<Option<PathStore>, OpenError> {
        match postgres_url(location)? {
            Some(url) => Ok(Some(PathStore::Postgres(PgStore::connect(&url)?))),
            None => Ok(SqliteStore::open_existing(location)?.map(PathStore::Sqlite)),
        }
    }

    /// The database, for messages: the SQLite file, or the URL without its password.
    pub fn describe(&self) -> String {
        match self {
            PathStore::Sqlite(s) => s.path().display().to_string(),
            PathStore::Postgres(p) => p.url().to_string(),
        }
    }

    /// Whether the database is on another machine (a lookup may take a network round
    /// trip, and must not hold up a transfer).
    pub fn is_remote(&self) -> bool {
        matches!(self, PathStore::Postgres(_))
    }

    /// The host its changes are recorded as measured by (default: this hostname, no
    /// address).
    pub fn set_host(&mut self, host: Host) {
        both!(self, s => s.set_host(host))
    }

    /// What happened since the last call that the user should hear about.
    pub fn take_warnings(&mut self) -> Vec<Warning> {
        both!(self, s => s.take_warnings())
    }

    /// Every host's entries of this peer and direction, in any RTT bucket: what a client
    /// fetches before it knows the path's RTT, for [`lookup_in`].
    pub fn candidates(
        &mut self,
        peer: &str,
        direction: Direction,
    ) -> Result<Vec<StoredEntry>, StoreError> {
        both!(self, s => s.candidates(peer, direction))
    }

    /// The fresh estimate for this peer and direction at a path RTT of `rtt` (the core's
    /// lookup over any host's rows of this and the neighbouring RTT buckets).
    pub fn lookup(
        &mut self,
        peer: &str,
        direction: Direction,
        rtt: Duration,
        now_unix_s: f64,
        policy: &PathDbPolicy,
    ) -> Result<Option<Known>, StoreError> {
        both!(self, s => s.lookup(peer, direction, rtt, now_unix_s, policy))
    }

    /// Merge a measurement of this peer and direction, from `source`, by this store's host
    /// (the rules: [`merge`]), in one transaction.
    pub fn record(
        &mut self,
        peer: &str,
        direction: Direction,
        m: &Measurement,
        source: &Source,
        policy: &PathDbPolicy,
    ) -> Result<Recorded, StoreError> {
        both!(self, s => s.record(peer, direction, m, source, policy, None))
    }

    /// [`PathStore::record`] for a server recording its clients: a path the host does not
    /// hold yet is added only if the core's `make_room` finds room under `bounds`;
    /// otherwise nothing is written and the answer is [`Recorded::Refused`].
    pub fn record_bounded(
        &mut self,
        peer: &str,
        direction: Direction,
        m: &Measurement,
        source: &Source,
        policy: &PathDbPolicy,
        bounds: &RecordBounds,
    ) -> Result<Recorded, StoreError> {
        both!(self, s => s.record(peer, direction, m, source, policy, Some(bounds)))
    }

    /// Every path (of every host), ordered by peer, direction, RTT bucket and host.
    pub fn entries(&mut self) -> Result<Vec<StoredEntry>, StoreError> {
        both!(self, s => s.entries())
    }

    /// The paths to any of these peers.
    pub fn entries_of(&mut self, peers: &[String]) -> Result<Vec<StoredEntry>, StoreError> {
        let mut all = self.entries()?;
        all.retain(|s| peers.contains(&s.entry.peer));
        Ok(all)
    }

    /// The recorded measurements of any of these peers, oldest first.
    pub fn history(&mut self, peers: &[String]) -> Result<Vec<StoredMeasurement>, StoreError> {
        both!(self, s => s.history(peers))
    }

    /// Forget every host's paths to these peers (and their history); returns how many.
    pub fn forget(&mut self, peers: &[String]) -> Result<usize, StoreError> {
        both!(self, s => s.forget(peers))
    }

    /// Forget every path; returns how many.
    pub fn forget_all(&mut self) -> Result<usize, StoreError> {
        both!(self, s => s.forget_all())
    }

    /// Insert entries as they are, each under its own measuring host (an import from
    /// another store); where the path is already stored, the newer wins. Returns how many
    /// were new or newer.
    pub fn import(&mut self, entries: &[StoredEntry]) -> Result<usize, StoreError> {
        both!(self, s => s.import(entries))
    }
}

/// The core's lookup over rows fetched earlier ([`PathStore::candidates`]).
pub fn lookup_in(
    rows: &[StoredEntry],
    peer: &str,
    direction: Direction,
    rtt: Duration,
    now_unix_s: f64,
    policy: &PathDbPolicy,
) -> Option<Known> {
    merge::lookup_in(rows, peer, direction, rtt, now_unix_s, policy)
}

/// The smallest RTT of the fresh entries of `peer` and `direction` in `rows`, whatever their
/// bucket ([`tcptune_core::pathdb::PathDb::base_rtt`]).
pub fn base_rtt_in(
    rows: &[StoredEntry],
    peer: &str,
    direction: Direction,
    now_unix_s: f64,
    policy: &PathDbPolicy,
) -> Option<Duration> {
    merge::base_rtt_in(rows, peer, direction, now_unix_s, policy)
}

/// A database location for messages and logs: the SQLite file (see [`Location::resolve`]),
/// or the URL without its password (a malformed URL: what is wrong with it).
pub fn describe_location(location: &Path) -> String {
    match location.to_str().filter(|s| is_postgres_url(s)) {
        Some(url) => PgUrl::parse(url).map_or_else(|e| e.to_string(), |u| u.to_string()),
        None => Location::resolve(location).database.display().to_string(),
    }
}

/// The URL `location` holds, if it names a PostgreSQL database.
fn postgres_url(location: &Path) -> Result<Option<PgUrl>, OpenError> {
    match location.to_str() {
        Some(s) if is_postgres_url(s) => Ok(Some(
            PgUrl::parse(s).map_err(|e| OpenError::Postgres(e.into()))?,
        )),
        _ => Ok(None),
    }
}
