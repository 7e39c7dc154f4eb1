//! Files and directory trees over the transfer's tuned streams (`tcptune cp`).
//!
//! A copy is a session like `send`'s (the same admission, authentication, tuners, stream
//! count, in-band measurement and report); only the workload of its main phase differs:
//! instead of a verified pattern, the streams carry blocks of files. The control protocol
//! gains a [`FileJob`] in `Setup` (what to copy), `ServerMsg::FileFailed` (a failure with a
//! kind the client turns into an exit status) and the file summary in each side's result;
//! the rest is spoken on the data streams themselves (see [`wire`]):
//!
//! ```text
//! sender                                   receiver
//!   stream 0: manifest (every entry: path, kind, size, mode, mtime), in chunks   ->
//!                                            resolve every target beneath its root,
//!                                            create directories, look for partial and
//!                                            complete files of an earlier run and hash
//!                                            them (keep-alives while it takes long)
//!   <- stream 0: plan (blocks and files already there, with their checksums)
//!   every stream: blocks taken from one queue: header, data, checksum (or a header and
//!   checksum only: "yours is right") ->     verify, pwrite at the block's offset; a file
//!                                            whose blocks are all verified gets its mode
//!                                            and time and is renamed into place
//!   stream 0: end of round (records sent) ->
//!   <- stream 0: resend (blocks that failed) | done (files, digest of all digests)
//! ```
//!
//! * Blocks are [`BLOCK_SIZE`] bytes, striped over the streams by a shared queue (a fast
//!   stream takes more), written at their offset with `pwrite` (no reassembly buffer);
//!   a small file is one block, so a tree of small files flows with no round trip per file.
//! * Every block is checked with BLAKE3 ([`digest`]); a block that does not match is not
//!   trusted and is sent again in a next round, and the file's digest (what `b3sum`
//!   prints) is in the report of both ends, compared at the end.
//! * Data goes to a temporary name next to the target (`.NAME.tcptune-part`) and is renamed
//!   into place only when every block is verified. Running the same copy again after an
//!   interruption (either end killed, the network cut, the disk full) finds the temporary
//!   file, hashes what it holds and sends only what is missing; a target with the same size
//!   and modification time as the source is hashed and skipped when it is identical.
//! * The server resolves everything beneath its `--root` with `openat2(RESOLVE_BENEATH)`
//!   (see `tcptune_sys::fs`); the client resolves what a server sends beneath the
//!   destination the same way and checks that the top-level names are the ones it asked
//!   for, so neither end can make the other write outside where it was told.

pub(crate) mod plan;
pub(crate) mod walk;
pub(crate) mod work;
pub mod workload;

// The pure pieces of the protocol live in the sans-IO crate; their paths stay short here.
pub use tcptune_proto::copy::{budget, digest};
pub(crate) use tcptune_proto::copy::{queue, table, violation, wire};

pub use budget::{CopyLimits, DEFAULT_MAX_FILE_SIZE, DEFAULT_MAX_MANIFEST_BYTES};
use std::fmt;
use std::io;

pub use tcptune_proto::files::{
    CopiedFile, Entry, EntryKind, FailKind, FileFailure, FileJob, FilesSide, BLOCK_SIZE, MAX_DEPTH,
    MAX_PATH, MAX_SOURCES,
};

/// Set to `1` in the receiver's environment to skip the free-space check before a copy (a
/// testing aid: it lets a test fill a device in the middle of a copy).
pub const NO_SPACE_CHECK_ENV: &str = "TCPTUNE_CP_NO_SPACE_CHECK";

/// The constructors of a [`FileFailure`] from a failed system call (they read error
/// numbers, so they live here and not in the sans-IO protocol crate). In scope, they are
/// called as `FileFailure::io(..)` and `FileFailure::fs(..)`.
pub trait FileFailureExt {
    /// A failed I/O operation, classified by its error number; `what` says what was
    /// attempted on which path.
    fn io(what: impl fmt::Display, e: &io::Error) -> FileFailure;
    /// From a file-system error (`op path: error`), the path shown as `shown`.
    fn fs(e: &tcptune_sys::fs::FsError, shown: &str) -> FileFailure;
}

impl FileFailureExt for FileFailure {
    fn io(what: impl fmt::Display, e: &io::Error) -> FileFailure {
        let (kind, why) = match e.raw_os_error() {
            Some(libc::ENOENT) => (FailKind::NotFound, "no such file or directory".to_string()),
            Some(libc::EACCES) | Some(libc::EPERM) => {
                (FailKind::Permission, "permission denied".to_string())
            }
            Some(libc::EROFS) => (FailKind::Permission, "read-only file system".to_string()),
            Some(libc::ENOSPC) => (FailKind::NoSpace, "no space left on device".to_string()),
            Some(libc::EDQUOT) => (FailKind::NoSpace, "disk quota exceeded".to_string()),
            Some(libc::EXDEV) => (
                FailKind::Refused,
                "the path leads outside the shared directory".to_string(),
            ),
            Some(libc::ELOOP) => (
                FailKind::Refused,
                "a symbolic link where a file or directory was expected".to_string(),
            ),
            Some(libc::ENOTDIR) => (FailKind::Usage, "not a directory".to_string()),
            Some(libc::EISDIR) => (FailKind::Usage, "is a directory".to_string()),
            Some(libc::ENAMETOOLONG) => (FailKind::Refused, "file name too long".to_string()),
            _ => (FailKind::Io, e.to_string()),
        };
        FileFailure::new(kind, format!("{what}: {why}"))
    }

    fn fs(e: &tcptune_sys::fs::FsError, shown: &str) -> FileFailure {
        <FileFailure as FileFailureExt>::io(format_args!("{} {shown}", e.op), &e.source)
    }
}

/// The file name of `path`'s last component.
pub(crate) fn last_component(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_map_to_kinds_with_the_path() {
        let f = FileFailure::io("open /x", &io::Error::from_raw_os_error(libc::ENOSPC));
        assert_eq!(f.kind, FailKind::NoSpace);
        assert_eq!(f.message, "open /x: no space left on device");
        let f = FileFailure::io("open a", &io::Error::from_raw_os_error(libc::EXDEV));
        assert_eq!(f.kind, FailKind::Refused);
        assert_eq!(
            FileFailure::io("x", &io::Error::from_raw_os_error(libc::ENOENT)).kind,
            FailKind::NotFound
        );
    }

    #[test]
    fn the_last_component_is_the_file_name() {
        assert_eq!(last_component("a/b/c d"), "c d");
    }
}
