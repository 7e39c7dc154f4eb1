//! The file copy's messages (`tcptune cp`), as the control protocol carries them: the job
//! in `Setup` ([`FileJob`]), the manifest entries ([`Entry`]), a failure with its kind
//! ([`FileFailure`]) and each side's summary ([`FilesSide`], [`CopiedFile`]), with the limits
//! they are checked against. The copy itself (walking, hashing, writing) is the transfer
//! crate's `files` module.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Bytes per block: a power of two of BLAKE3 chunks (a subtree of the file's hash tree),
/// large enough that a block's header is negligible and small enough that a fast and a
/// slow stream finish a file at about the same time.
pub const BLOCK_SIZE: u64 = 4 << 20;
/// Most sources one copy may name.
pub const MAX_SOURCES: usize = 4096;
/// Longest path (bytes) of a source, a destination or a manifest entry.
pub const MAX_PATH: usize = 4096;
/// Deepest directory nesting of a tree.
pub const MAX_DEPTH: usize = 256;
/// Files a receiver keeps open at once (beyond that the least recently used is closed;
/// it is opened again when more of its blocks come): part of a copy's descriptor budget.
pub const MAX_OPEN: usize = 32;

/// What a `tcptune cp` session copies, sent in `Setup` (`TestParams::files`). The server
/// sends when the session is `reverse` (a pull), else it receives (a push).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileJob {
    /// Pull: the paths under the server's root to copy.
    #[serde(default)]
    pub sources: Vec<String>,
    /// Push: where under the server's root the files go.
    #[serde(default)]
    pub dest: Option<String>,
    /// Copy directories (`-r`).
    pub recursive: bool,
    /// Use what an earlier run left (partial and complete files).
    pub resume: bool,
    /// Flush every file to its device before renaming it into place.
    #[serde(default)]
    pub fsync: bool,
    /// Seal every block body (`cp --encrypt`: ChaCha20-Poly1305 under the session's `aead`
    /// subkey, see [`crate::keys`]). A server that takes it says so in `Accepted`
    /// (`encrypt`); an older one ignores the field, so the client fails the copy when that
    /// answer lacks it, rather than copying in clear.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub encrypt: bool,
}

impl FileJob {
    /// Check a job against the limits of a server that shares files (`read_only`): `Err`
    /// says why not.
    pub fn check(&self, pull: bool, read_only: bool) -> Result<(), FileFailure> {
        let bad = |p: &str| p.len() > MAX_PATH || p.contains('\0');
        let refuse = |m: String| Err(FileFailure::new(FailKind::Refused, m));
        if pull {
            if self.sources.is_empty() || self.dest.is_some() {
                return refuse(
                    "a copy from the server names its sources and no destination".into(),
                );
            }
            if self.sources.len() > MAX_SOURCES {
                return refuse(format!(
                    "{} sources; at most {MAX_SOURCES} in one copy",
                    self.sources.len()
                ));
            }
            if self.sources.iter().any(|s| bad(s)) {
                return refuse("a source path is too long or holds a NUL byte".into());
            }
        } else {
            if read_only {
                return Err(FileFailure::new(
                    FailKind::Permission,
                    "the server shares its directory read-only (serve --read-only): it takes no files",
                ));
            }
            match &self.dest {
                Some(d) if self.sources.is_empty() && !bad(d) => {}
                _ => {
                    return refuse(
                        "a copy to the server names one destination (at most 4096 bytes) and no sources"
                            .into(),
                    )
                }
            }
        }
        Ok(())
    }
}

/// What kind of entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
}

/// One entry of a manifest: what the sender has, in the order the receiver creates it
/// (a directory before what it holds).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The path from the copy's top: the source's name, then the path within it, joined
    /// by `/` (each component checked by the receiver).
    pub path: String,
    /// File or directory.
    pub kind: EntryKind,
    /// Size, bytes (files).
    #[serde(default)]
    pub size: u64,
    /// Permission bits.
    pub mode: u32,
    /// Modification time, seconds since the Unix epoch.
    pub mtime_s: i64,
    /// Modification time, nanoseconds within the second.
    #[serde(default)]
    pub mtime_ns: u32,
}

impl Entry {
    /// Blocks of this entry.
    pub fn blocks(&self) -> u64 {
        match self.kind {
            EntryKind::File => self.size.div_ceil(BLOCK_SIZE),
            EntryKind::Dir => 0,
        }
    }

    /// The length of block `b`.
    pub fn block_len(&self, b: u64) -> u64 {
        self.size.saturating_sub(b * BLOCK_SIZE).min(BLOCK_SIZE)
    }
}

/// Why a copy failed, in kinds that decide the command's exit status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailKind {
    /// A source does not exist (or the destination's parent directory).
    NotFound,
    /// Not allowed: permission denied, a read-only file system or server.
    Permission,
    /// A path leads outside the shared directory (`..`, absolute, a symlink), or names
    /// what may not be created; or the server shares no files.
    Refused,
    /// No space left on the receiving device (or the quota is exhausted).
    NoSpace,
    /// The request makes no sense here: a directory without `-r`, several sources to one
    /// file, a file over a directory.
    Usage,
    /// Blocks kept failing their checksums.
    Integrity,
    /// The peer broke the file protocol.
    Protocol,
    /// Any other I/O error.
    Io,
}

/// A failure of a copy, with a one-line message that names the path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileFailure {
    /// The kind.
    pub kind: FailKind,
    /// What happened, on one line.
    pub message: String,
}

impl fmt::Display for FileFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for FileFailure {}

impl FileFailure {
    /// A failure of a kind.
    pub fn new(kind: FailKind, message: impl Into<String>) -> FileFailure {
        FileFailure {
            kind,
            message: message.into(),
        }
    }

    /// A protocol violation by the peer.
    pub fn protocol(message: impl Into<String>) -> FileFailure {
        FileFailure::new(FailKind::Protocol, message)
    }
}

/// What one end did in the file workload of a phase (both ends fill it; the server's is
/// sent to the client in its phase result).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilesSide {
    /// Files in the manifest.
    pub files: u64,
    /// Directories in the manifest.
    pub dirs: u64,
    /// Bytes of all files in the manifest.
    pub bytes: u64,
    /// Files complete and in place at the end (at the receiver: renamed or found
    /// identical; at the sender: confirmed).
    pub files_done: u64,
    /// Block payload carried by this run (sent or received, including blocks sent again).
    pub carried_bytes: u64,
    /// Bytes not carried because the receiver had them already (verified by checksum).
    pub present_bytes: u64,
    /// Blocks that failed their checksum and were sent again.
    pub resent_blocks: u64,
    /// Rounds of sending (1 unless blocks were sent again).
    pub rounds: u32,
    /// The digest over every file's digest (see the transfer crate's `files::digest::TreeDigest`), once complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree_digest: Option<String>,
    /// Entries skipped at the sender (symlinks, devices, names that are not UTF-8), at most
    /// 100 of them, then a count.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// One file of a finished copy, for the report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopiedFile {
    /// Its path from the copy's top (the source's name first).
    pub path: String,
    /// Size, bytes.
    pub size_bytes: u64,
    /// BLAKE3 of its content (what `b3sum` prints), when it was complete.
    pub blake3: Option<String>,
    /// `copied` (carried in full), `resumed` (part was there from an earlier run),
    /// `unchanged` (the target was already identical), or `incomplete`.
    pub status: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_are_checked_against_the_direction_and_read_only() {
        let push = FileJob {
            sources: vec![],
            dest: Some("in".into()),
            recursive: false,
            resume: true,
            fsync: false,
            encrypt: false,
        };
        assert!(push.check(false, false).is_ok());
        let ro = push.check(false, true).unwrap_err();
        assert_eq!(ro.kind, FailKind::Permission);
        assert!(ro.message.contains("read-only"));
        assert!(push.check(true, false).is_err());
        let pull = FileJob {
            sources: vec!["a".into()],
            dest: None,
            ..push.clone()
        };
        assert!(pull.check(true, true).is_ok(), "reading is allowed");
        let long = FileJob {
            sources: vec!["x".repeat(5000)],
            ..pull
        };
        assert!(long.check(true, false).is_err());
    }

    #[test]
    fn blocks_cover_the_file() {
        let e = Entry {
            path: "a".into(),
            kind: EntryKind::File,
            size: 2 * BLOCK_SIZE + 1,
            mode: 0o644,
            mtime_s: 0,
            mtime_ns: 0,
        };
        assert_eq!(e.blocks(), 3);
        assert_eq!(e.block_len(2), 1);
        assert_eq!(e.block_len(0), BLOCK_SIZE);
        assert_eq!(
            Entry {
                size: 0,
                ..e.clone()
            }
            .blocks(),
            0
        );
    }
}
