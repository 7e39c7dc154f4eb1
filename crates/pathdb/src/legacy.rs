//! The old JSON database (`paths.json`, tcptune before SQLite): telling files apart, and
//! reading one.

use std::io::Read;
use std::path::Path;
use tcptune_core::pathdb::PathDb;

/// The first bytes of every SQLite 3 database.
const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";

/// What a file at the database's path is.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum FileKind {
    /// No file.
    Missing,
    /// An empty file (SQLite treats it as a new database).
    Empty,
    /// Starts with SQLite's header.
    Sqlite,
    /// Starts with `{`: JSON, perhaps the old database.
    Json,
    /// Something else.
    Other,
}

/// Tell what the file at `path` is from its first bytes.
pub(crate) fn sniff(path: &Path) -> std::io::Result<FileKind> {
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(FileKind::Missing),
        Err(e) => return Err(e),
    };
    let mut head = Vec::with_capacity(512);
    f.by_ref().take(512).read_to_end(&mut head)?;
    Ok(kind_of(&head))
}

fn kind_of(head: &[u8]) -> FileKind {
    if head.is_empty() {
        return FileKind::Empty;
    }
    if head.starts_with(SQLITE_HEADER) {
        return FileKind::Sqlite;
    }
    match head.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => FileKind::Json,
        _ => FileKind::Other,
    }
}

/// Read and check the old JSON database. The error says what is wrong with it.
pub(crate) fn read(path: &Path) -> Result<PathDb, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("reading it: {e}"))?;
    let db: PathDb = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    db.validate().map_err(|e| e.to_string())?;
    Ok(db)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_told_apart_by_their_first_bytes() {
        assert_eq!(kind_of(b""), FileKind::Empty);
        assert_eq!(kind_of(b"SQLite format 3\0\x10\x00"), FileKind::Sqlite);
        assert_eq!(kind_of(b"  \n{\"schema_version\":1"), FileKind::Json);
        assert_eq!(kind_of(b"root:x:0:0:root:/root:/bin/bash"), FileKind::Other);
        assert_eq!(kind_of(b"SQLite format 2"), FileKind::Other);
    }
}
