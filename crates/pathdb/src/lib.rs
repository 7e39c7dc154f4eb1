//! tcptune's database of per-path measurements, stored in SQLite (Enable's idea: measure a
//! path once, remember it, and let every later transfer, the server and any application ask
//! instead of measuring again).
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
mod legacy;
mod location;
mod lock;
mod open;
mod schema;
mod store;
mod types;

pub use error::{OpenError, StoreError, Warning};
pub use location::{default_location, Location, ENV_VAR, FILE_NAME, LEGACY_FILE_NAME};
pub use lock::BUSY_TIMEOUT;
pub use schema::SCHEMA_VERSION;
pub use store::{PathStore, Recorded, HISTORY_PER_PATH};
pub use types::{Source, StoredEntry, StoredMeasurement};
