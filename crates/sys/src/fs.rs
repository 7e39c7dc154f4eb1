//! Files beneath a directory handle, resolved by the kernel so that nothing can lead out of
//! it: `tcptune serve --root DIR` opens every path a client names with `openat2(2)` and
//! `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS` against the root's descriptor. `..` that would
//! climb above the root, absolute paths and symlinks (at any depth) whose target lies
//! outside are refused with `EXDEV` by the kernel, during the one walk that also opens the
//! file, so a directory swapped for a symlink between a check and a use cannot redirect a
//! write (no string checks, no check-then-use race). Operations on one name (`mkdirat`,
//! `renameat`, `unlinkat`, `fstatat`) take a directory handle obtained that way and a
//! single component that the caller has checked ([`check_name`]).
//!
//! The rest is the thin glue a file transfer needs: metadata, modes and times on open
//! descriptors, the directory listing, free space, `SEEK_DATA`, read-ahead advice. Every
//! error says what was being attempted and on which path.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// A file-system operation that failed, with what was attempted.
#[derive(Debug, thiserror::Error)]
#[error("{op} {}: {source}", path.display())]
pub struct FsError {
    /// What was attempted (`open`, `create`, `mkdir`, `rename`, ...).
    pub op: &'static str,
    /// The path, as the caller named it (relative to the directory handle).
    pub path: PathBuf,
    /// The error; `EXDEV` from `openat2` means the path leads out of the directory.
    pub source: io::Error,
}

impl FsError {
    fn new(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> FsError {
        FsError {
            op,
            path: path.into(),
            source,
        }
    }

    /// The path leads out of the directory it was resolved beneath (`..` above it, an
    /// absolute path, or a symlink whose target lies outside).
    pub fn is_escape(&self) -> bool {
        self.source.raw_os_error() == Some(libc::EXDEV)
    }

    /// The kernel's error number, if any.
    pub fn errno(&self) -> Option<i32> {
        self.source.raw_os_error()
    }
}

/// What a directory entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A device, FIFO or socket.
    Other,
}

/// The metadata a copy keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    /// What it is.
    pub kind: Kind,
    /// Size, bytes.
    pub size: u64,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Modification time: seconds since the Unix epoch.
    pub mtime_s: i64,
    /// Modification time: nanoseconds within the second.
    pub mtime_ns: u32,
    /// Blocks allocated, bytes (`st_blocks * 512`).
    pub allocated: u64,
    /// The file system's device.
    pub dev: u64,
    /// Hard links to it (a partial file to be reused must have exactly one: a second link
    /// would be a file someone else can read or that we would overwrite through it).
    pub nlink: u64,
}

fn meta_of(st: &libc::stat) -> Meta {
    let kind = match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => Kind::File,
        libc::S_IFDIR => Kind::Dir,
        libc::S_IFLNK => Kind::Symlink,
        _ => Kind::Other,
    };
    Meta {
        kind,
        size: u64::try_from(st.st_size).unwrap_or(0),
        mode: st.st_mode & 0o7777,
        mtime_s: st.st_mtime,
        mtime_ns: u32::try_from(st.st_mtime_nsec).unwrap_or(0),
        allocated: u64::try_from(st.st_blocks).unwrap_or(0).saturating_mul(512),
        dev: st.st_dev,
        nlink: st.st_nlink,
    }
}

fn cstr(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the path"))
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Whether `name` is one path component that may be created: not empty, not `.` or `..`,
/// no `/` or NUL, at most 255 bytes.
pub fn check_name(name: &OsStr) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 255
        && b != b"."
        && b != b".."
        && !b.contains(&b'/')
        && !b.contains(&0)
}

/// `struct open_how` of `openat2(2)` (libc's is non-exhaustive: it cannot be built).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// An open directory that paths are resolved beneath.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    /// Resolve with `RESOLVE_BENEATH` (the default); `false` only for
    /// [`Dir::open_unconfined`].
    beneath: bool,
}

impl AsFd for Dir {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// How [`Dir::open_beneath`] opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// Read a regular file (opened without blocking, then checked: a FIFO or a device
    /// someone placed there is refused instead of blocking the reader).
    Read,
    /// Write an existing regular file or create it (mode 0600 until the copy sets the real
    /// mode); never follows a symlink in the last component; checked like `Read`.
    WriteCreate,
    /// A directory whose entries are listed or whose mode and times are set.
    Directory,
    /// A directory used only as the base of other operations (`O_PATH`).
    DirectoryPath,
    /// Anything, only to look at it (`O_PATH`): a symlink in the last component is not
    /// followed, so its own metadata is seen.
    Look,
    /// The same, following a symlink in the last component (within the directory).
    LookFollow,
}

impl Dir {
    /// Open a directory by a path the user gave on this host (symlinks followed as usual):
    /// the base that other paths are then resolved beneath.
    pub fn open(path: &Path) -> Result<Dir, FsError> {
        let c = cstr(path).map_err(|e| FsError::new("open directory", path, e))?;
        // SAFETY: valid C string; the returned descriptor is owned below.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        let fd = cvt(fd).map_err(|e| FsError::new("open directory", path, e))?;
        // SAFETY: a fresh descriptor that nothing else owns.
        Ok(Dir {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            beneath: true,
        })
    }

    /// Open a directory as [`Dir::open`] does, but resolve paths from it as a process does
    /// from its working directory: a relative path starts here, an absolute path at `/`, and
    /// `..` and symlinks go wherever they lead (only magic links of `/proc` are refused).
    /// This is `tcptune serve --stdio`'s home directory, where paths resolve as scp's do
    /// with the remote user's own permissions; a server's `--root` always uses
    /// [`Dir::open`]. Directories opened from it ([`Dir::dir_beneath`]) are unconfined too.
    pub fn open_unconfined(path: &Path) -> Result<Dir, FsError> {
        let mut d = Dir::open(path)?;
        d.beneath = false;
        Ok(d)
    }

    /// Whether paths are resolved beneath this directory only (see [`Dir::open_unconfined`]).
    pub fn is_confined(&self) -> bool {
        self.beneath
    }

    /// Open `rel` beneath this directory (see the module documentation). An empty path or
    /// `.` is the directory itself.
    pub fn open_beneath(&self, rel: &Path, mode: OpenMode) -> Result<OwnedFd, FsError> {
        let op = match mode {
            OpenMode::Read => "open",
            OpenMode::WriteCreate => "create",
            OpenMode::Directory | OpenMode::DirectoryPath => "open directory",
            OpenMode::Look | OpenMode::LookFollow => "look up",
        };
        let path: &Path = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        let c = cstr(path).map_err(|e| FsError::new(op, rel, e))?;
        let flags = libc::O_CLOEXEC
            | match mode {
                OpenMode::Read => libc::O_RDONLY | libc::O_NONBLOCK,
                OpenMode::WriteCreate => {
                    libc::O_WRONLY | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_NONBLOCK
                }
                OpenMode::Directory => libc::O_RDONLY | libc::O_DIRECTORY,
                OpenMode::DirectoryPath => libc::O_PATH | libc::O_DIRECTORY,
                OpenMode::Look => libc::O_PATH | libc::O_NOFOLLOW,
                OpenMode::LookFollow => libc::O_PATH,
            };
        let how = OpenHow {
            flags: flags as u64,
            mode: if mode == OpenMode::WriteCreate {
                0o600
            } else {
                0
            },
            resolve: if self.beneath {
                libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS
            } else {
                libc::RESOLVE_NO_MAGICLINKS
            },
        };
        // openat2 may answer EAGAIN when a rename elsewhere raced with the walk: try again.
        for _ in 0..16 {
            // SAFETY: valid directory descriptor, C string and open_how of the size passed.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_openat2,
                    self.fd.as_raw_fd(),
                    c.as_ptr(),
                    &how as *const OpenHow,
                    std::mem::size_of::<OpenHow>(),
                )
            };
            if r >= 0 {
                // SAFETY: a fresh descriptor that nothing else owns.
                let fd = unsafe { OwnedFd::from_raw_fd(r as RawFd) };
                if matches!(mode, OpenMode::Read | OpenMode::WriteCreate) {
                    let m = stat_fd(fd.as_fd()).map_err(|e| FsError::new("stat", rel, e))?;
                    if m.kind != Kind::File {
                        return Err(FsError::new(
                            op,
                            rel,
                            io::Error::other("not a regular file"),
                        ));
                    }
                }
                return Ok(fd);
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EINTR) => continue,
                Some(libc::ENOSYS) => {
                    return Err(FsError::new(
                        op,
                        rel,
                        io::Error::other("openat2 is not available (Linux 5.6 or later is needed)"),
                    ))
                }
                _ => return Err(FsError::new(op, rel, e)),
            }
        }
        Err(FsError::new(
            op,
            rel,
            io::Error::other("the directory kept changing while it was resolved"),
        ))
    }

    /// The directory `rel` beneath this one, as a new base.
    pub fn dir_beneath(&self, rel: &Path) -> Result<Dir, FsError> {
        Ok(Dir {
            fd: self.open_beneath(rel, OpenMode::DirectoryPath)?,
            beneath: self.beneath,
        })
    }

    /// The directory `rel` beneath this one, opened for listing and for its mode and times.
    pub fn listable_beneath(&self, rel: &Path) -> Result<Dir, FsError> {
        Ok(Dir {
            fd: self.open_beneath(rel, OpenMode::Directory)?,
            beneath: self.beneath,
        })
    }

    /// The metadata of `rel` beneath this directory without following a symlink in its last
    /// component; `None` when it does not exist.
    pub fn look(&self, rel: &Path) -> Result<Option<Meta>, FsError> {
        self.look_with(rel, OpenMode::Look)
    }

    /// The metadata of `rel` beneath this directory, following a symlink in its last
    /// component as long as its target stays beneath; `None` when it does not exist.
    pub fn look_follow(&self, rel: &Path) -> Result<Option<Meta>, FsError> {
        self.look_with(rel, OpenMode::LookFollow)
    }

    fn look_with(&self, rel: &Path, mode: OpenMode) -> Result<Option<Meta>, FsError> {
        match self.open_beneath(rel, mode) {
            Ok(fd) => stat_fd(fd.as_fd())
                .map(Some)
                .map_err(|e| FsError::new("stat", rel, e)),
            Err(e) if e.errno() == Some(libc::ENOENT) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The metadata of the entry `name` of this directory (not following a symlink).
    pub fn stat_at(&self, name: &OsStr) -> Result<Option<Meta>, FsError> {
        let c = cstr(Path::new(name)).map_err(|e| FsError::new("stat", name, e))?;
        // SAFETY: stat is plain old data.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid descriptor, C string and stat buffer.
        let r = unsafe {
            libc::fstatat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        match cvt(r) {
            Ok(_) => Ok(Some(meta_of(&st))),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) => Err(FsError::new("stat", name, e)),
        }
    }

    /// Create the directory `name` in this directory.
    pub fn mkdir_at(&self, name: &OsStr, mode: u32) -> Result<(), FsError> {
        let c = cstr(Path::new(name)).map_err(|e| FsError::new("mkdir", name, e))?;
        // SAFETY: valid descriptor and C string.
        cvt(unsafe { libc::mkdirat(self.fd.as_raw_fd(), c.as_ptr(), mode) })
            .map(|_| ())
            .map_err(|e| FsError::new("mkdir", name, e))
    }

    /// Rename `from` to `to`, both entries of this directory (replacing `to`).
    pub fn rename_at(&self, from: &OsStr, to: &OsStr) -> Result<(), FsError> {
        let a = cstr(Path::new(from)).map_err(|e| FsError::new("rename", from, e))?;
        let b = cstr(Path::new(to)).map_err(|e| FsError::new("rename", to, e))?;
        // SAFETY: valid descriptor and C strings.
        cvt(unsafe {
            libc::renameat(
                self.fd.as_raw_fd(),
                a.as_ptr(),
                self.fd.as_raw_fd(),
                b.as_ptr(),
            )
        })
        .map(|_| ())
        .map_err(|e| FsError::new("rename", to, e))
    }

    /// Remove the file `name` of this directory.
    pub fn unlink_at(&self, name: &OsStr) -> Result<(), FsError> {
        let c = cstr(Path::new(name)).map_err(|e| FsError::new("remove", name, e))?;
        // SAFETY: valid descriptor and C string.
        cvt(unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) })
            .map(|_| ())
            .map_err(|e| FsError::new("remove", name, e))
    }

    /// The names in this directory (without `.` and `..`), sorted bytewise. The directory
    /// must have been opened listable ([`Dir::listable_beneath`]).
    pub fn list(&self) -> io::Result<Vec<OsString>> {
        // fdopendir takes the descriptor over: give it a duplicate.
        let dup = self.fd.try_clone()?;
        // SAFETY: a descriptor we own, handed to fdopendir (closedir closes it).
        let d = unsafe { libc::fdopendir(dup.as_raw_fd()) };
        if d.is_null() {
            return Err(io::Error::last_os_error());
        }
        std::mem::forget(dup);
        // Start from the beginning even if the descriptor was read before.
        // SAFETY: a valid DIR*.
        unsafe { libc::rewinddir(d) };
        let mut names = Vec::new();
        let result = loop {
            // readdir reports errors through errno only.
            // SAFETY: resetting errno of this thread.
            unsafe { *libc::__errno_location() = 0 };
            // SAFETY: a valid DIR*.
            let ent = unsafe { libc::readdir(d) };
            if ent.is_null() {
                let e = io::Error::last_os_error();
                break if e.raw_os_error().unwrap_or(0) == 0 {
                    Ok(())
                } else {
                    Err(e)
                };
            }
            // SAFETY: readdir returned a valid dirent with a NUL-terminated name.
            let name = unsafe { std::ffi::CStr::from_ptr((*ent).d_name.as_ptr()) };
            let b = name.to_bytes();
            if b != b"." && b != b".." {
                names.push(OsString::from_vec(b.to_vec()));
            }
        };
        // SAFETY: the DIR* from fdopendir, closed once.
        unsafe { libc::closedir(d) };
        result?;
        names.sort();
        Ok(names)
    }

    /// Bytes available to an unprivileged writer on this directory's file system.
    pub fn available_bytes(&self) -> io::Result<u64> {
        // SAFETY: statvfs is plain old data.
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: valid descriptor and buffer.
        cvt(unsafe { libc::fstatvfs(self.fd.as_raw_fd(), &mut s) })?;
        Ok((s.f_bavail as u64).saturating_mul(s.f_frsize as u64))
    }

    /// The metadata of this directory.
    pub fn meta(&self) -> io::Result<Meta> {
        stat_fd(self.fd.as_fd())
    }
}

/// The metadata of an open file.
pub fn stat_fd(fd: BorrowedFd<'_>) -> io::Result<Meta> {
    // SAFETY: stat is plain old data.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid descriptor and buffer.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok(meta_of(&st))
}

/// Set the permission bits of an open file or directory.
pub fn set_mode(fd: BorrowedFd<'_>, mode: u32) -> io::Result<()> {
    // SAFETY: valid descriptor.
    cvt(unsafe { libc::fchmod(fd.as_raw_fd(), mode) }).map(|_| ())
}

/// Set the modification time (and the access time to the same) of an open file or
/// directory.
pub fn set_mtime(fd: BorrowedFd<'_>, secs: i64, nanos: u32) -> io::Result<()> {
    let t = libc::timespec {
        tv_sec: secs,
        tv_nsec: i64::from(nanos.min(999_999_999)),
    };
    let times = [t, t];
    // SAFETY: valid descriptor and two timespecs.
    cvt(unsafe { libc::futimens(fd.as_raw_fd(), times.as_ptr()) }).map(|_| ())
}

/// Set the size of an open file.
pub fn set_len(fd: BorrowedFd<'_>, len: u64) -> io::Result<()> {
    let len = libc::off_t::try_from(len).map_err(|_| io::Error::other("file too large"))?;
    // SAFETY: valid descriptor.
    cvt(unsafe { libc::ftruncate(fd.as_raw_fd(), len) }).map(|_| ())
}

/// The first offset at or after `from` that holds data (`SEEK_DATA`): `None` when only a
/// hole follows. File systems without hole support report all of the file as data.
pub fn next_data(fd: BorrowedFd<'_>, from: u64) -> io::Result<Option<u64>> {
    let off = libc::off_t::try_from(from).map_err(|_| io::Error::other("offset too large"))?;
    // SAFETY: valid descriptor.
    let r = unsafe { libc::lseek(fd.as_raw_fd(), off, libc::SEEK_DATA) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENXIO) => Ok(None),
            Some(libc::EINVAL) => Ok(Some(from)),
            _ => Err(e),
        };
    }
    Ok(Some(r as u64))
}

/// Tell the kernel a file will be read sequentially (a larger read-ahead).
pub fn advise_sequential(fd: BorrowedFd<'_>) {
    // SAFETY: valid descriptor; advice only.
    unsafe {
        libc::posix_fadvise(fd.as_raw_fd(), 0, 0, libc::POSIX_FADV_SEQUENTIAL);
    }
}

/// Write what is cached of a file to its device (`fdatasync`).
pub fn sync_data(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: valid descriptor.
    cvt(unsafe { libc::fdatasync(fd.as_raw_fd()) }).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tcptune-fs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("mkdir");
        d
    }

    #[test]
    fn paths_that_leave_the_directory_are_refused_by_the_kernel() {
        let base = tmp("escape");
        let root = base.join("root");
        std::fs::create_dir_all(root.join("sub")).expect("mkdir");
        std::fs::write(base.join("secret"), b"x").expect("write");
        std::fs::write(root.join("sub/ok"), b"y").expect("write");
        symlink("../../secret", root.join("sub/out")).expect("symlink");
        symlink("/etc", root.join("abs")).expect("symlink");
        symlink("ok", root.join("sub/in")).expect("symlink");
        let d = Dir::open(&root).expect("open");
        for bad in [
            "../secret",
            "sub/../../secret",
            "/etc/passwd",
            "sub/out",
            "abs/passwd",
        ] {
            let e = d
                .open_beneath(Path::new(bad), OpenMode::Read)
                .expect_err(bad);
            assert!(e.is_escape(), "{bad}: {e}");
        }
        assert!(d.open_beneath(Path::new("sub/in"), OpenMode::Read).is_ok());
        assert!(d
            .open_beneath(Path::new("sub/../sub/ok"), OpenMode::Read)
            .is_ok());
        // Creating through a symlink that leads out fails too, and creates nothing.
        let e = d
            .open_beneath(Path::new("abs/new"), OpenMode::WriteCreate)
            .expect_err("create");
        assert!(e.is_escape());
        // A symlink as the last component is not followed when writing.
        let e = d
            .open_beneath(Path::new("sub/in"), OpenMode::WriteCreate)
            .expect_err("nofollow");
        assert_eq!(e.errno(), Some(libc::ELOOP));
        assert_eq!(
            d.look(Path::new("sub/in")).expect("look").map(|m| m.kind),
            Some(Kind::Symlink)
        );
        assert_eq!(d.look(Path::new("nope")).expect("look"), None);
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn an_unconfined_directory_resolves_like_a_working_directory() {
        let base = tmp("unconfined");
        let home = base.join("home");
        std::fs::create_dir_all(home.join("sub")).expect("mkdir");
        std::fs::write(base.join("outside"), b"x").expect("write");
        std::fs::write(home.join("sub/ok"), b"y").expect("write");
        symlink("../../outside", home.join("sub/out")).expect("symlink");
        let d = Dir::open_unconfined(&home).expect("open");
        assert!(!d.is_confined());
        let abs = base.join("outside");
        for good in [
            "sub/ok",
            "../outside",
            "sub/out",
            abs.to_str().expect("utf-8"),
        ] {
            assert!(
                d.open_beneath(Path::new(good), OpenMode::Read).is_ok(),
                "{good}"
            );
        }
        // Directories opened from it are unconfined too; the plain open stays confined.
        let sub = d.dir_beneath(Path::new("sub")).expect("sub");
        assert!(!sub.is_confined());
        assert!(sub
            .open_beneath(Path::new("../../outside"), OpenMode::Read)
            .is_ok());
        let confined = Dir::open(&home).expect("open");
        assert!(confined.is_confined());
        assert!(confined
            .open_beneath(Path::new("../outside"), OpenMode::Read)
            .expect_err("confined")
            .is_escape());
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn a_fifo_or_a_directory_is_refused_at_once_instead_of_blocking_the_reader() {
        let base = tmp("fifo");
        let fifo = CString::new(base.join("pipe").as_os_str().as_bytes()).expect("path");
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        std::fs::create_dir(base.join("dir")).expect("dir");
        let d = Dir::open(&base).expect("open");
        for (name, mode) in [
            ("pipe", OpenMode::Read),
            ("pipe", OpenMode::WriteCreate),
            ("dir", OpenMode::Read),
        ] {
            let e = d.open_beneath(Path::new(name), mode).expect_err(name);
            assert!(
                e.to_string().contains("not a regular file") || e.errno() == Some(libc::ENXIO),
                "{name}: {e}"
            );
        }
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn directories_list_create_rename_and_keep_times() {
        let base = tmp("ops");
        let d = Dir::open(&base).expect("open");
        d.mkdir_at(OsStr::new("a b"), 0o755).expect("mkdir");
        let sub = d.dir_beneath(Path::new("a b")).expect("sub");
        let f = d
            .open_beneath(Path::new("a b/f.part"), OpenMode::WriteCreate)
            .expect("create");
        set_len(f.as_fd(), 10).expect("len");
        set_mode(f.as_fd(), 0o640).expect("mode");
        set_mtime(f.as_fd(), 1_000_000_000, 5).expect("mtime");
        sub.rename_at(OsStr::new("f.part"), OsStr::new("f"))
            .expect("rename");
        let m = sub.stat_at(OsStr::new("f")).expect("stat").expect("exists");
        assert_eq!((m.kind, m.size, m.mode), (Kind::File, 10, 0o640));
        assert_eq!((m.mtime_s, m.mtime_ns), (1_000_000_000, 5));
        assert_eq!(next_data(f.as_fd(), 0).expect("seek"), None, "all hole");
        let listed = d.listable_beneath(Path::new("a b")).expect("dir");
        assert_eq!(listed.list().expect("list"), vec![OsString::from("f")]);
        assert!(listed.available_bytes().expect("statvfs") > 0);
        assert!(check_name(OsStr::new("é x")));
        for bad in ["", ".", "..", "a/b"] {
            assert!(!check_name(OsStr::new(bad)), "{bad}");
        }
        let _ = std::fs::remove_dir_all(&base);
    }
}
