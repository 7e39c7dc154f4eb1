//! The receiver's check of a peer's manifest, before anything is created for it: every
//! path made of names that may be created, a directory before what it holds, every path
//! once, the top-level names those asked for.

use crate::files::{Entry, EntryKind, FailKind, FileFailure, MAX_DEPTH, MAX_PATH};
use std::collections::HashSet;

/// A name that may be created in a directory: not empty, at most 255 bytes, not `.` or
/// `..`, no `/` and no NUL (what `tcptune_sys::fs::check_name` checks on the file system's
/// side).
pub fn name_ok(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 255
        && b != b"."
        && b != b".."
        && !b.contains(&b'/')
        && !b.contains(&0)
}

fn refuse(msg: String) -> FileFailure {
    FileFailure::protocol(msg)
}

/// Check a manifest from the peer: every path made of names that may be created, a
/// directory before what it holds, every path once (a file listed twice would be hashed
/// and written twice), top-level names as expected. Returns the top-level entries (name and
/// kind). Linear in the manifest: a set of the paths seen, not a search per entry.
pub fn check_manifest(
    entries: &[Entry],
    expect: Option<&[String]>,
) -> Result<Vec<(String, EntryKind)>, FileFailure> {
    let mut dirs: HashSet<&str> = HashSet::new();
    let mut seen: HashSet<&str> = HashSet::with_capacity(entries.len());
    let mut tops: Vec<(String, EntryKind)> = Vec::new();
    for e in entries {
        if e.path.len() > MAX_PATH {
            return Err(refuse(format!("a manifest path of {} bytes", e.path.len())));
        }
        let parts: Vec<&str> = e.path.split('/').collect();
        if parts.len() > MAX_DEPTH + 1 || parts.iter().any(|p| !name_ok(p)) {
            return Err(FileFailure::new(
                FailKind::Refused,
                format!(
                    "refused the path '{}' from the peer: only plain names, no '..', '.' or absolute paths",
                    crate::escape(&e.path, 200)
                ),
            ));
        }
        if e.kind == EntryKind::Dir && e.size != 0 {
            return Err(refuse("a directory with a size".into()));
        }
        if !seen.insert(&e.path) {
            return Err(refuse(format!(
                "the path '{}' twice in the manifest",
                crate::escape(&e.path, 200)
            )));
        }
        if parts.len() == 1 {
            tops.push((parts[0].to_string(), e.kind));
        } else {
            let parent = &e.path[..e.path.len() - parts[parts.len() - 1].len() - 1];
            if !dirs.contains(parent) {
                return Err(refuse(format!(
                    "'{}' before its directory",
                    crate::escape(&e.path, 200)
                )));
            }
        }
        if e.kind == EntryKind::Dir {
            dirs.insert(&e.path);
        }
    }
    if let Some(expect) = expect {
        let got: Vec<&str> = tops.iter().map(|(n, _)| n.as_str()).collect();
        let want: Vec<&str> = expect.iter().map(String::as_str).collect();
        if got != want {
            return Err(FileFailure::new(
                FailKind::Refused,
                format!(
                    "the server sent other names than asked for ({} instead of {}): refused",
                    crate::escape(&got.join(", "), 200),
                    want.join(", ")
                ),
            ));
        }
    }
    Ok(tops)
}
