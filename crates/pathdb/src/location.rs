//! Where the database lives: the default location from the environment, and the files
//! behind a location a user gives.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The environment variable naming the database file.
pub const ENV_VAR: &str = "TCPTUNE_PATH_DB";
/// The database's file name in the cache folder.
pub const FILE_NAME: &str = "paths.sqlite";
/// The old JSON database's file name in the cache folder.
pub const LEGACY_FILE_NAME: &str = "paths.json";

/// Where the database lives by default, from the environment: `$TCPTUNE_PATH_DB`, else
/// `$XDG_CACHE_HOME/tcptune/paths.sqlite`, else `$HOME/.cache/tcptune/paths.sqlite`.
/// `None` when none of them is set. Pass the result through [`Location::resolve`] (the
/// stores' `open` functions do).
pub fn default_location() -> Option<PathBuf> {
    location_from(|k| std::env::var_os(k))
}

fn location_from(var: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let non_empty = |k: &str| var(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(p) = non_empty(ENV_VAR) {
        return Some(p);
    }
    let cache =
        non_empty("XDG_CACHE_HOME").or_else(|| non_empty("HOME").map(|h| h.join(".cache")))?;
    Some(cache.join("tcptune").join(FILE_NAME))
}

/// The files behind a database location.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// The SQLite database.
    pub database: PathBuf,
    /// The old JSON database to import once, if it exists.
    pub legacy_json: PathBuf,
}

impl Location {
    /// The files for a location as given by a user or the environment:
    ///
    /// * `X.json` (a setting from before SQLite): the database is `X.sqlite`, and `X.json`
    ///   is imported from;
    /// * anything else, `X` or `X.EXT`: the database is that file, and `X.json` next to it
    ///   is imported from (`paths.json` for the default `paths.sqlite`).
    pub fn resolve(given: &Path) -> Location {
        let is_json = given
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"));
        if is_json {
            Location {
                database: given.with_extension("sqlite"),
                legacy_json: given.to_path_buf(),
            }
        } else {
            Location {
                database: given.to_path_buf(),
                legacy_json: given.with_extension("json"),
            }
        }
    }

    /// A file next to the database: its name with `suffix` appended (`paths.sqlite.lock`).
    pub(crate) fn sibling(path: &Path, suffix: &str) -> PathBuf {
        let mut name = path
            .file_name()
            .map(|f| f.to_os_string())
            .unwrap_or_default();
        name.push(suffix);
        path.with_file_name(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<OsString> {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn default_location_prefers_the_variable_then_the_cache_folders() {
        assert_eq!(
            location_from(env(&[(ENV_VAR, "/x/db.sqlite"), ("HOME", "/h")])),
            Some(PathBuf::from("/x/db.sqlite"))
        );
        assert_eq!(
            location_from(env(&[("XDG_CACHE_HOME", "/c"), ("HOME", "/h")])),
            Some(PathBuf::from("/c/tcptune/paths.sqlite"))
        );
        assert_eq!(
            location_from(env(&[(ENV_VAR, ""), ("HOME", "/h")])),
            Some(PathBuf::from("/h/.cache/tcptune/paths.sqlite"))
        );
        assert_eq!(location_from(env(&[])), None);
    }

    #[test]
    fn a_json_name_means_the_sqlite_file_beside_it_and_imports_the_json() {
        let l = Location::resolve(Path::new("/h/.cache/tcptune/paths.json"));
        assert_eq!(l.database, PathBuf::from("/h/.cache/tcptune/paths.sqlite"));
        assert_eq!(l.legacy_json, PathBuf::from("/h/.cache/tcptune/paths.json"));
        let l = Location::resolve(Path::new("/h/.cache/tcptune/paths.sqlite"));
        assert_eq!(l.database, PathBuf::from("/h/.cache/tcptune/paths.sqlite"));
        assert_eq!(l.legacy_json, PathBuf::from("/h/.cache/tcptune/paths.json"));
        let l = Location::resolve(Path::new("/tmp/mydb"));
        assert_eq!(l.database, PathBuf::from("/tmp/mydb"));
        assert_eq!(l.legacy_json, PathBuf::from("/tmp/mydb.json"));
        assert_eq!(
            Location::sibling(Path::new("/tmp/p.sqlite"), ".lock"),
            PathBuf::from("/tmp/p.sqlite.lock")
        );
    }
}
