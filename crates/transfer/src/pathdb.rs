//! The path database's file (the cache logic is [`tcptune_core::pathdb`]): where it lives,
//! reading it, and updating it from several processes at once.
//!
//! * Location: `$TCPTUNE_PATH_DB` if set, else `$XDG_CACHE_HOME/tcptune/paths.json`, else
//!   `$HOME/.cache/tcptune/paths.json` ([`default_location`]); `tcptune send --path-db FILE`
//!   and `--no-path-db` override it.
//! * Reading: a missing file is an empty database. A file that does not parse or holds
//!   impossible values is reported ([`PathDbFileError::Corrupt`]) and the caller goes on
//!   without it: never fatal.
//! * Writing ([`PathDbFile::update`]): an exclusive `flock` on `FILE.lock` (waiting at most
//!   [`LOCK_WAIT`]), read, change, write the whole database to a temporary file in the same
//!   folder and `rename` it over the old one. Concurrent writers thus never corrupt the file
//!   nor lose each other's entries, and a reader sees the old or the new file, never a part.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tcptune_core::pathdb::PathDb;

/// The environment variable naming the database file.
pub const ENV_VAR: &str = "TCPTUNE_PATH_DB";
/// Longest wait for another process's lock.
pub const LOCK_WAIT: Duration = Duration::from_secs(3);

/// Why the database file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum PathDbFileError {
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
    /// The file is not a valid database.
    #[error("path database {path} is not usable ({reason}); ignoring it")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Another process held the lock too long.
    #[error("path database {path}: another process held its lock for over {}s", LOCK_WAIT.as_secs())]
    Locked {
        /// The file.
        path: PathBuf,
    },
}

/// Where the database lives by default, from the environment: `$TCPTUNE_PATH_DB`, else the
/// user's cache folder. `None` when neither is known (no `HOME`).
pub fn default_location() -> Option<PathBuf> {
    location_from(|k| std::env::var_os(k))
}

fn location_from(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> Option<PathBuf> {
    let non_empty = |k: &str| var(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(p) = non_empty(ENV_VAR) {
        return Some(p);
    }
    let cache =
        non_empty("XDG_CACHE_HOME").or_else(|| non_empty("HOME").map(|h| h.join(".cache")))?;
    Some(cache.join("tcptune").join("paths.json"))
}

/// The database file at a path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathDbFile {
    path: PathBuf,
}

impl PathDbFile {
    /// The database stored at `path` (the file need not exist).
    pub fn new(path: impl Into<PathBuf>) -> PathDbFile {
        PathDbFile { path: path.into() }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io(&self, what: &'static str) -> impl FnOnce(std::io::Error) -> PathDbFileError + '_ {
        move |source| PathDbFileError::Io {
            path: self.path.clone(),
            what,
            source,
        }
    }

    /// Read the database: empty when the file does not exist.
    pub fn load(&self) -> Result<PathDb, PathDbFileError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(PathDb::new()),
            Err(e) => return Err(self.io("reading")(e)),
        };
        let corrupt = |reason: String| PathDbFileError::Corrupt {
            path: self.path.clone(),
            reason,
        };
        let db: PathDb = serde_json::from_str(&text).map_err(|e| corrupt(e.to_string()))?;
        db.validate().map_err(|e| corrupt(e.to_string()))?;
        Ok(db)
    }

    /// Change the database under its lock: read it (a corrupt file counts as empty and is
    /// replaced; its error is returned beside the result as a warning), apply `f`, write it
    /// back atomically.
    pub fn update(
        &self,
        f: impl FnOnce(&mut PathDb),
    ) -> Result<Option<PathDbFileError>, PathDbFileError> {
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(self.io("creating its folder"))?;
        }
        let _lock = self.lock()?;
        let (mut db, warning) = match self.load() {
            Ok(db) => (db, None),
            Err(e @ PathDbFileError::Corrupt { .. }) => (PathDb::new(), Some(e)),
            Err(e) => return Err(e),
        };
        f(&mut db);
        let text = serde_json::to_string_pretty(&db).map_err(|e| PathDbFileError::Corrupt {
            path: self.path.clone(),
            reason: format!("cannot serialize: {e}"),
        })?;
        let tmp = self.temp_path();
        let written = (|| -> std::io::Result<()> {
            let mut t = File::create(&tmp)?;
            t.write_all(text.as_bytes())?;
            t.write_all(b"\n")?;
            t.sync_all()?;
            std::fs::rename(&tmp, &self.path)
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(self.io("writing")(e));
        }
        Ok(warning)
    }

    fn temp_path(&self) -> PathBuf {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let mut name = self
            .path
            .file_name()
            .map(|f| f.to_os_string())
            .unwrap_or_default();
        name.push(format!(".tmp.{}.{n}", std::process::id()));
        self.path.with_file_name(name)
    }

    /// Take the exclusive lock (released when the returned file is dropped).
    fn lock(&self) -> Result<File, PathDbFileError> {
        let mut name = self
            .path
            .file_name()
            .map(|f| f.to_os_string())
            .unwrap_or_default();
        name.push(".lock");
        let lock_path = self.path.with_file_name(name);
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(self.io("opening its lock file"))?;
        let deadline = Instant::now() + LOCK_WAIT;
        loop {
            // SAFETY: flock on a file descriptor we own; no memory is passed.
            let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if r == 0 {
                return Ok(f);
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::WouldBlock {
                return Err(self.io("locking")(e));
            }
            if Instant::now() > deadline {
                return Err(PathDbFileError::Locked {
                    path: self.path.clone(),
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcptune_core::pathdb::{Direction, Measurement, PathDbPolicy};
    use tcptune_core::Rate;

    struct TempDir(PathBuf);
    impl TempDir {
        fn new(tag: &str) -> TempDir {
            use std::sync::atomic::{AtomicU32, Ordering};
            static N: AtomicU32 = AtomicU32::new(0);
            let d = std::env::temp_dir().join(format!(
                "tcptune-pathdb-{tag}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&d).expect("temp dir");
            TempDir(d)
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn measurement(mbit: u64, at: f64) -> Measurement {
        Measurement {
            rate: Rate::mbit(mbit),
            min_rtt: Duration::from_millis(100),
            full_pipe: true,
            at_unix_s: at,
        }
    }

    #[test]
    fn location_prefers_the_variable_then_the_cache_folders() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| std::ffi::OsString::from(v))
            }
        };
        assert_eq!(
            location_from(env(&[(ENV_VAR, "/x/db.json"), ("HOME", "/h")])),
            Some(PathBuf::from("/x/db.json"))
        );
        assert_eq!(
            location_from(env(&[("XDG_CACHE_HOME", "/c"), ("HOME", "/h")])),
            Some(PathBuf::from("/c/tcptune/paths.json"))
        );
        assert_eq!(
            location_from(env(&[(ENV_VAR, ""), ("HOME", "/h")])),
            Some(PathBuf::from("/h/.cache/tcptune/paths.json"))
        );
        assert_eq!(location_from(env(&[])), None);
    }

    /// Record one 950 Mbit/s measurement of 10.0.0.2.
    fn record_one(db: &mut PathDb) {
        db.record(
            "10.0.0.2",
            Direction::Send,
            &measurement(950, 1.0),
            &PathDbPolicy::default(),
        )
    }

    #[test]
    fn a_missing_file_is_empty_and_an_update_creates_it() {
        let d = TempDir::new("create");
        let f = PathDbFile::new(d.0.join("sub").join("paths.json"));
        assert_eq!(f.load().expect("missing is empty"), PathDb::new());
        let warning = f.update(record_one).expect("written");
        assert!(warning.is_none());
        assert_eq!(f.load().expect("reads back").entries.len(), 1);
    }

    #[test]
    fn a_corrupt_file_is_reported_and_replaced_on_update() {
        let d = TempDir::new("corrupt");
        let path = d.0.join("paths.json");
        std::fs::write(&path, "{ not json").expect("write");
        let f = PathDbFile::new(&path);
        let e = f.load().expect_err("corrupt");
        assert!(matches!(e, PathDbFileError::Corrupt { .. }));
        assert!(e.to_string().contains("ignoring it"), "{e}");
        let warning = f.update(record_one).expect("replaced");
        assert!(warning.is_some());
        assert_eq!(f.load().expect("valid now").entries.len(), 1);
        // Impossible values count as corrupt too.
        std::fs::write(
            &path,
            r#"{"schema_version":1,"entries":[{"peer":"","direction":"send","rtt_bucket":1,"rate_bps":1,"full_pipe":true,"min_rtt_us":1,"first_seen_unix_s":0,"updated_unix_s":0,"samples":1}]}"#,
        )
        .expect("write");
        assert!(matches!(f.load(), Err(PathDbFileError::Corrupt { .. })));
    }

    #[test]
    fn concurrent_writers_keep_every_entry_and_a_valid_file() {
        let d = TempDir::new("concurrent");
        let path = d.0.join("paths.json");
        let threads: Vec<_> = (0..8u32)
            .map(|i| {
                let f = PathDbFile::new(&path);
                std::thread::spawn(move || {
                    for k in 0..10u32 {
                        f.update(|db| {
                            db.record(
                                &format!("10.0.{i}.{k}"),
                                Direction::Send,
                                &measurement(100 + u64::from(k), f64::from(k)),
                                &PathDbPolicy::default(),
                            )
                        })
                        .expect("update");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("writer");
        }
        let db = PathDbFile::new(&path).load().expect("valid");
        assert_eq!(db.entries.len(), 80);
        // No temporary files left behind.
        let leftovers = std::fs::read_dir(&d.0)
            .expect("dir")
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().contains(".tmp."))
            .count();
        assert_eq!(leftovers, 0);
    }
}
