//! What can go wrong opening and using the database, and what is only worth a warning.

use crate::lock::BUSY_TIMEOUT;
use std::fmt;
use std::path::PathBuf;

/// Why the database could not be opened. A caller in the middle of a transfer reports it and
/// goes on without the database.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// A file operation failed.
    #[error("path database {path}: {what}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What was attempted.
        what: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// SQLite refused something.
    #[error("path database {path}: {what}: {source}")]
    Sqlite {
        /// The file.
        path: PathBuf,
        /// What was attempted.
        what: &'static str,
        /// The error.
        source: rusqlite::Error,
    },
    /// Other processes held the database (or its lock file) too long.
    #[error(
        "path database {path}: other processes held it for over {}s ({what})",
        BUSY_TIMEOUT.as_secs()
    )]
    Busy {
        /// The file.
        path: PathBuf,
        /// What was attempted.
        what: &'static str,
    },
    /// Written by a newer tcptune: left alone.
    #[error(
        "path database {path} has schema version {found}, newer than this tcptune's \
         {supported}: leaving it alone (use a newer tcptune, or another --path-db)"
    )]
    NewerSchema {
        /// The file.
        path: PathBuf,
        /// Its schema version.
        found: u32,
        /// The newest this build knows.
        supported: u32,
    },
    /// The PostgreSQL database could not be used.
    #[error(transparent)]
    Postgres(#[from] crate::pg::PgOpenError),
    /// The file is something else (neither SQLite nor the old JSON database): not touched.
    #[error(
        "{path} is neither a SQLite database nor a tcptune path database in JSON \
         ({reason}); not touching it"
    )]
    NotADatabase {
        /// The file.
        path: PathBuf,
        /// What it looks like.
        reason: String,
    },
}

/// Why a query or a change of an open database failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// PostgreSQL refused something, or the connection failed.
    #[error("path database {url}: {what}: {source}")]
    Postgres {
        /// The URL, without its password.
        url: String,
        /// What was attempted.
        what: &'static str,
        /// The error.
        source: postgres::Error,
    },
    /// The database answered with more rows than a query may read.
    #[error("path database {url}: {what}: over {max} rows; refusing to read them")]
    TooManyRows {
        /// The database.
        url: String,
        /// What was attempted.
        what: &'static str,
        /// [`crate::MAX_ROWS_READ`].
        max: usize,
    },
    /// SQLite refused something.
    #[error("path database {path}: {what}: {source}")]
    Sqlite {
        /// The file.
        path: PathBuf,
        /// What was attempted.
        what: &'static str,
        /// The error.
        source: rusqlite::Error,
    },
    /// Other processes held the write lock too long.
    #[error(
        "path database {path}: other processes held it for over {}s ({what})",
        BUSY_TIMEOUT.as_secs()
    )]
    Busy {
        /// The file.
        path: PathBuf,
        /// What was attempted.
        what: &'static str,
    },
    /// SQLite found the file damaged while reading it (it is moved aside at the next open
    /// that runs `PRAGMA quick_check`).
    #[error("path database {path} is damaged ({what}): {source}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What was attempted.
        what: &'static str,
        /// The error.
        source: rusqlite::Error,
    },
}

/// Something worth telling the user that did not stop the database from working.
#[derive(Clone, Debug, PartialEq)]
pub enum Warning {
    /// The old JSON database was imported and renamed.
    Imported {
        /// The JSON file.
        from: PathBuf,
        /// Its new name.
        renamed_to: PathBuf,
        /// Entries imported.
        entries: usize,
    },
    /// The old JSON database was imported, but renaming it failed (it will be imported
    /// again next time, which changes nothing: the newer entry wins).
    ImportedNotRenamed {
        /// The JSON file.
        from: PathBuf,
        /// Entries imported.
        entries: usize,
        /// Why the rename failed.
        error: String,
    },
    /// The old JSON database could not be read: left as it is, not imported.
    NotImported {
        /// The JSON file.
        from: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A damaged database was moved aside and a new one started.
    Quarantined {
        /// The database.
        path: PathBuf,
        /// Where the damaged file went.
        moved_to: PathBuf,
        /// What SQLite said.
        reason: String,
    },
    /// Rows with impossible values (written by something else) were ignored, and dropped at
    /// the next change.
    InvalidRows {
        /// The database (a file, or a URL without its password).
        path: String,
        /// How many.
        count: usize,
        /// What was wrong with the first.
        first: String,
    },
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::Imported {
                from,
                renamed_to,
                entries,
            } => write!(
                f,
                "imported {entries} path(s) from the old JSON path database {}; renamed it to {}",
                from.display(),
                renamed_to.display()
            ),
            Warning::ImportedNotRenamed {
                from,
                entries,
                error,
            } => write!(
                f,
                "imported {entries} path(s) from the old JSON path database {}, but could not \
                 rename it ({error}); remove it by hand",
                from.display()
            ),
            Warning::NotImported { from, reason } => write!(
                f,
                "not importing the old JSON path database {} ({reason}); remove or fix it to \
                 silence this warning",
                from.display()
            ),
            Warning::Quarantined {
                path,
                moved_to,
                reason,
            } => write!(
                f,
                "path database {} was damaged ({reason}); moved it to {} and started a new one",
                path.display(),
                moved_to.display()
            ),
            Warning::InvalidRows { path, count, first } => write!(
                f,
                "path database {path}: ignored {count} row(s) with impossible values ({first})"
            ),
        }
    }
}

/// The SQLite error codes that mean the file itself is damaged or not a database.
pub(crate) fn is_corruption(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
    )
}

/// The SQLite error codes that mean another connection holds a lock.
pub(crate) fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}
