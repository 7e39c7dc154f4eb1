//! The receiver's side before any block: check the manifest (every name, the order, the
//! top-level names), decide where it lands (`cp`'s rules), create the directories, and find
//! what an earlier run left: a complete target of the same size and time, or a partial
//! temporary file, each hashed block by block so that the sender can skip what matches.
//!
//! The decisions are pure functions ([`check_manifest`], [`decide_layout`], [`target`],
//! [`temp_name`]); [`plan`] does the I/O, always beneath the destination's root directory.

use super::digest::{self, BlockHasher, Cv};
use super::{Entry, EntryKind, FailKind, FileFailure, BLOCK_SIZE};
use crate::files::FileFailureExt;
use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
pub(crate) use tcptune_proto::copy::check::check_manifest;
use tcptune_proto::copy::table::RecvTable;
use tcptune_proto::copy::wire::PlanFile;
use tcptune_sys::fs::{self, Dir, Kind, Meta, OpenMode};

use super::NO_SPACE_CHECK_ENV;

/// Where a copy lands at the receiver.
#[derive(Debug, Clone)]
pub(crate) struct DestSpec {
    /// Everything is resolved beneath this directory.
    pub(crate) root: Arc<Dir>,
    /// The destination beneath the root (empty: the root itself).
    pub(crate) base: PathBuf,
    /// The destination as the user wrote it, for messages.
    pub(crate) shown: String,
    /// The destination was written with a trailing `/`: it must be a directory.
    pub(crate) must_be_dir: bool,
    /// The top-level names the receiver asked for (a pull): the manifest must have exactly
    /// these.
    pub(crate) expect_tops: Option<Vec<String>>,
}

/// How sources map onto the destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    /// The destination is a directory: each source lands inside it under its own name.
    Into,
    /// One source becomes the destination itself (a new name, or a file overwritten).
    Rename,
}

/// `cp`'s rules: into an existing directory, else one source becomes the destination.
pub(crate) fn decide_layout(
    base: Option<&Meta>,
    base_is_root: bool,
    tops: &[(String, EntryKind)],
    must_be_dir: bool,
    shown: &str,
) -> Result<Layout, FileFailure> {
    if base_is_root || base.is_some_and(|m| m.kind == Kind::Dir) {
        return Ok(Layout::Into);
    }
    if tops.len() != 1 || must_be_dir {
        let why = if base.is_none() {
            FailKind::NotFound
        } else {
            FailKind::Usage
        };
        return Err(FileFailure::new(
            why,
            format!(
                "{shown} is not a directory{}",
                if tops.len() > 1 {
                    format!(" (copying {} sources needs one)", tops.len())
                } else {
                    String::new()
                }
            ),
        ));
    }
    match (base.map(|m| m.kind), tops[0].1) {
        (Some(Kind::File), EntryKind::Dir) => Err(FileFailure::new(
            FailKind::Usage,
            format!("cannot overwrite the file {shown} with a directory"),
        )),
        (Some(Kind::Symlink | Kind::Other), _) => Err(FileFailure::new(
            FailKind::Usage,
            format!("{shown} is not a regular file or a directory: not overwritten"),
        )),
        _ => Ok(Layout::Rename),
    }
}

/// Where entry `path` lands, beneath the root.
pub(crate) fn target(layout: Layout, base: &Path, path: &str) -> PathBuf {
    match layout {
        Layout::Into => base.join(path),
        Layout::Rename => match path.split_once('/') {
            Some((_, rest)) => base.join(rest),
            None => base.to_path_buf(),
        },
    }
}

/// The temporary name next to a target: `.NAME.tcptune-part`, or a hash of the name when
/// that would be too long.
pub(crate) fn temp_name(name: &OsStr) -> OsString {
    use std::os::unix::ffi::OsStrExt;
    let b = name.as_bytes();
    if b.len() + 15 <= 255 {
        let mut s = OsString::from(".");
        s.push(name);
        s.push(".tcptune-part");
        s
    } else {
        let h = blake3::hash(b);
        OsString::from(format!(".tcptune-{}.part", &h.to_hex()[..32]))
    }
}

/// A path's parent and last name (the root's entries have the empty parent).
pub(crate) fn split(p: &Path) -> (PathBuf, OsString) {
    (
        p.parent().map(Path::to_path_buf).unwrap_or_default(),
        p.file_name().map(OsStr::to_os_string).unwrap_or_default(),
    )
}

/// What the plan found and decided.
#[derive(Debug)]
pub(crate) struct Planned {
    pub(crate) table: RecvTable,
    /// Per entry: where it lands beneath the root.
    pub(crate) targets: Vec<PathBuf>,
    /// What to tell the sender.
    pub(crate) plan: Vec<PlanFile>,
    /// Bytes the sender still has to carry (at most).
    pub(crate) need_bytes: u64,
    /// The directories this copy created.
    pub(crate) created_dirs: HashSet<u32>,
}

/// Hash the blocks of an open file of `size` bytes; holes (never written) are `None`.
/// `checked` hears the bytes hashed; `Err` from it stops.
fn hash_blocks(
    f: &File,
    size: u64,
    skip_holes: bool,
    buf: &mut [u8],
    checked: &mut dyn FnMut(u64) -> Result<(), FileFailure>,
    shown: &str,
) -> Result<Vec<Option<Cv>>, FileFailure> {
    let n = size.div_ceil(BLOCK_SIZE);
    let mut out = Vec::with_capacity(n as usize);
    for b in 0..n {
        let off = b * BLOCK_SIZE;
        let len = (size - off).min(BLOCK_SIZE);
        if skip_holes {
            let data = fs::next_data(f.as_fd(), off)
                .map_err(|e| FileFailure::io(format_args!("read {shown}"), &e))?;
            if data.is_none_or(|d| d >= off + len) {
                out.push(None);
                continue;
            }
        }
        let mut h = BlockHasher::new(size, BLOCK_SIZE, off);
        let mut at = 0u64;
        while at < len {
            let want = ((len - at) as usize).min(buf.len());
            let got = f
                .read_at(&mut buf[..want], off + at)
                .map_err(|e| FileFailure::io(format_args!("read {shown}"), &e))?;
            if got == 0 {
                return Err(FileFailure::new(
                    FailKind::Io,
                    format!("{shown}: the file shrank while it was hashed"),
                ));
            }
            h.update(&buf[..got]);
            at += got as u64;
            checked(got as u64)?;
        }
        out.push(Some(h.finish()));
    }
    Ok(out)
}

fn same_time(m: &Meta, e: &Entry) -> bool {
    m.mtime_s == e.mtime_s && m.mtime_ns == e.mtime_ns
}

/// Resolve, create and look: see the module documentation. `checked` hears the bytes
/// hashed (a keep-alive for the sender and the idle timers) and may stop the plan.
pub(crate) fn plan(
    dest: &DestSpec,
    entries: &[Entry],
    resume: bool,
    checked: &mut dyn FnMut(u64) -> Result<(), FileFailure>,
) -> Result<Planned, FileFailure> {
    let tops = check_manifest(entries, dest.expect_tops.as_deref())?;
    let root = &dest.root;
    let base_is_root = dest.base.as_os_str().is_empty();
    let base_meta = if base_is_root {
        None
    } else {
        root.look_follow(&dest.base)
            .map_err(|e| FileFailure::fs(&e, &dest.shown))?
    };
    let layout = decide_layout(
        base_meta.as_ref(),
        base_is_root,
        &tops,
        dest.must_be_dir,
        &dest.shown,
    )?;
    let targets: Vec<PathBuf> = entries
        .iter()
        .map(|e| target(layout, &dest.base, &e.path))
        .collect();
    // Before anything is created, hashed or kept per block: does it fit?
    check_space(dest, layout, |avail| {
        estimate_need(root, entries, &targets, resume, avail)
    })?;
    let mut p = Planner {
        root,
        resume,
        checked,
        table: RecvTable::new(entries),
        plan: Vec::new(),
        created_dirs: HashSet::new(),
        need: 0,
        buf: vec![0u8; 1 << 20],
    };
    for (id, e) in entries.iter().enumerate() {
        let shown = shown_target(layout, &dest.shown, &e.path);
        p.entry(id as u32, e, &targets[id], &shown)?;
    }
    // What the rest needs now that earlier runs' files are hashed.
    check_space(dest, layout, |_| Ok(p.need))?;
    Ok(Planned {
        table: p.table,
        targets,
        plan: p.plan,
        need_bytes: p.need,
        created_dirs: p.created_dirs,
    })
}

/// How the target of entry `path` is named in messages: the destination as the user wrote
/// it, then the path.
fn shown_target(layout: Layout, shown: &str, path: &str) -> String {
    let base = shown.trim_end_matches('/');
    match (layout, path.split_once('/')) {
        (Layout::Into, _) => format!("{base}/{path}"),
        (Layout::Rename, Some((_, rest))) => format!("{base}/{rest}"),
        (Layout::Rename, None) => shown.to_string(),
    }
}

/// The plan as it is made, entry by entry (see [`plan`]).
struct Planner<'a> {
    root: &'a Dir,
    resume: bool,
    checked: &'a mut dyn FnMut(u64) -> Result<(), FileFailure>,
    table: RecvTable,
    plan: Vec<PlanFile>,
    created_dirs: HashSet<u32>,
    need: u64,
    buf: Vec<u8>,
}

impl Planner<'_> {
    fn entry(&mut self, id: u32, e: &Entry, t: &Path, shown: &str) -> Result<(), FileFailure> {
        let fs_err = |err: fs::FsError| FileFailure::fs(&err, shown);
        let existing = self.root.look(t).map_err(fs_err)?;
        let (parent, name) = split(t);
        match (e.kind, existing.map(|m| m.kind)) {
            (EntryKind::Dir, Some(Kind::Dir)) => Ok(()),
            (EntryKind::Dir, Some(_)) => Err(FileFailure::new(
                FailKind::Usage,
                format!("cannot overwrite {shown} with a directory"),
            )),
            (EntryKind::Dir, None) => {
                let p = self.root.dir_beneath(&parent).map_err(fs_err)?;
                p.mkdir_at(&name, 0o700).map_err(fs_err)?;
                self.created_dirs.insert(id);
                Ok(())
            }
            (EntryKind::File, Some(Kind::Dir)) => Err(FileFailure::new(
                FailKind::Usage,
                format!("cannot overwrite the directory {shown} with a file"),
            )),
            (EntryKind::File, _) => {
                let temp = parent.join(temp_name(&name));
                let found = if self.resume && e.size > 0 {
                    self.earlier_run(id, e, t, existing.as_ref(), &temp, shown)?
                } else {
                    self.table.set_fresh(id);
                    false
                };
                if !found {
                    self.need += e.size;
                }
                if e.size == 0 {
                    write_empty(self.root, &parent, &temp, &name, e, shown)?;
                    self.table.mark_done(id);
                }
                Ok(())
            }
        }
    }

    /// What an earlier run left of file `id`: a complete target of the same size and time
    /// (hashed whole), or a partial file of the same size with a single link (hashed
    /// block by block, holes skipped). Returns whether one was found.
    fn earlier_run(
        &mut self,
        id: u32,
        e: &Entry,
        t: &Path,
        existing: Option<&Meta>,
        temp: &Path,
        shown: &str,
    ) -> Result<bool, FileFailure> {
        let fs_err = |err: fs::FsError| FileFailure::fs(&err, shown);
        if existing.is_some_and(|m| m.kind == Kind::File && m.size == e.size && same_time(m, e)) {
            let f = File::from(self.root.open_beneath(t, OpenMode::Read).map_err(fs_err)?);
            let cvs = hash_blocks(&f, e.size, false, &mut self.buf, self.checked, shown)?;
            let cvs: Vec<Cv> = cvs.into_iter().flatten().collect();
            let d = digest::file_digest(&cvs);
            self.table.set_present(id, d);
            self.plan.push(PlanFile {
                id,
                present: Some(digest::hex(&d)),
                have: Vec::new(),
            });
            return Ok(true);
        }
        let part = self.root.look(temp).map_err(fs_err)?;
        let Some(m) = part.filter(|m| m.kind == Kind::File && m.nlink == 1) else {
            return Ok(false);
        };
        if m.size != e.size {
            self.table.set_fresh(id);
            return Ok(false);
        }
        let f = File::from(
            self.root
                .open_beneath(temp, OpenMode::Read)
                .map_err(fs_err)?,
        );
        let cvs = hash_blocks(&f, e.size, true, &mut self.buf, self.checked, shown)?;
        let mut have = Vec::new();
        for (b, cv) in cvs.iter().enumerate() {
            if let Some(cv) = cv {
                self.table.set_have(id, b as u64, *cv);
                have.push((b as u64, digest::hex(cv)));
            }
        }
        let have_bytes: u64 = have.iter().map(|(b, _)| e.block_len(*b)).sum();
        self.need += e.size - have_bytes;
        if !have.is_empty() {
            self.plan.push(PlanFile {
                id,
                present: None,
                have,
            });
        }
        Ok(true)
    }
}

/// Refuse a copy whose data does not fit on the destination's device. `need` is asked only
/// with the space available.
fn check_space(
    dest: &DestSpec,
    layout: Layout,
    need: impl FnOnce(u64) -> Result<u64, FileFailure>,
) -> Result<(), FileFailure> {
    if std::env::var(NO_SPACE_CHECK_ENV).is_ok_and(|v| v == "1") {
        return Ok(());
    }
    let space_dir = match layout {
        Layout::Into => dest.base.clone(),
        Layout::Rename => split(&dest.base).0,
    };
    let Some(avail) = dest
        .root
        .dir_beneath(&space_dir)
        .ok()
        .and_then(|d| d.available_bytes().ok())
    else {
        return Ok(());
    };
    let need = need(avail)?;
    if need > avail {
        return Err(FileFailure::new(
            FailKind::NoSpace,
            format!(
                "not enough space at {}: {} to write, {} available",
                dest.shown,
                tcptune_core::Bytes(need),
                tcptune_core::Bytes(avail)
            ),
        ));
    }
    Ok(())
}

/// At most what a copy will write, before anything is hashed: every file's size, less
/// a complete target of the same size and time (resume skips it when it matches) and
/// what a partial file of the same size holds already. Stats only, and only when the total
/// does not fit in `avail` outright; no file is read.
fn estimate_need(
    root: &Dir,
    entries: &[Entry],
    targets: &[PathBuf],
    resume: bool,
    avail: u64,
) -> Result<u64, FileFailure> {
    let total: u64 = entries.iter().map(|e| e.size).fold(0, u64::saturating_add);
    if !resume || total <= avail {
        return Ok(total);
    }
    let mut need = 0u64;
    for (e, t) in entries.iter().zip(targets) {
        if e.kind != EntryKind::File || e.size == 0 {
            continue;
        }
        let look = |p: &Path| root.look(p).ok().flatten().filter(|m| m.kind == Kind::File);
        let there = look(t).filter(|m| m.size == e.size && same_time(m, e));
        let part = || {
            let (parent, name) = split(t);
            look(&parent.join(temp_name(&name))).filter(|m| m.size == e.size)
        };
        need = need.saturating_add(match (there, part()) {
            (Some(_), _) => 0,
            (None, Some(p)) => e.size.saturating_sub(p.allocated),
            (None, None) => e.size,
        });
    }
    Ok(need)
}

/// An empty file: created, given its mode and time, and renamed into place at once.
fn write_empty(
    root: &Dir,
    parent: &Path,
    temp: &Path,
    name: &OsStr,
    e: &Entry,
    shown: &str,
) -> Result<(), FileFailure> {
    let fd = root
        .open_beneath(temp, OpenMode::WriteCreate)
        .map_err(|err| FileFailure::fs(&err, shown))?;
    let io = |what: &str, r: std::io::Result<()>| {
        r.map_err(|err| FileFailure::io(format_args!("{what} {shown}"), &err))
    };
    io("truncate", fs::set_len(fd.as_fd(), 0))?;
    io("chmod", fs::set_mode(fd.as_fd(), e.mode & 0o777))?;
    io(
        "set the time of",
        fs::set_mtime(fd.as_fd(), e.mtime_s, e.mtime_ns),
    )?;
    let p = root
        .dir_beneath(parent)
        .map_err(|err| FileFailure::fs(&err, shown))?;
    let temp_name = temp.file_name().unwrap_or_default();
    p.rename_at(temp_name, name)
        .map_err(|err| FileFailure::fs(&err, shown))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(path: &str, kind: EntryKind, size: u64) -> Entry {
        Entry {
            path: path.into(),
            kind,
            size,
            mode: 0o640,
            mtime_s: 1_500_000_000,
            mtime_ns: 7,
        }
    }

    #[test]
    fn manifests_with_escapes_or_disorder_are_refused() {
        let ok = vec![
            e("t", EntryKind::Dir, 0),
            e("t/a b", EntryKind::File, 3),
            e("t/sub", EntryKind::Dir, 0),
            e("t/sub/é", EntryKind::File, 0),
        ];
        assert_eq!(
            check_manifest(&ok, Some(&["t".into()])).expect("ok"),
            vec![("t".to_string(), EntryKind::Dir)]
        );
        for bad in [
            vec![e("../x", EntryKind::File, 1)],
            vec![e("/etc/passwd", EntryKind::File, 1)],
            vec![e("t", EntryKind::Dir, 0), e("t/../x", EntryKind::File, 1)],
            vec![e("t", EntryKind::Dir, 0), e("t/./x", EntryKind::File, 1)],
            vec![e("t", EntryKind::Dir, 0), e("t//x", EntryKind::File, 1)],
            vec![e("t/x", EntryKind::File, 1)],
            vec![e("a", EntryKind::File, 1), e("a", EntryKind::File, 1)],
            vec![
                e("d", EntryKind::Dir, 0),
                e("d/big", EntryKind::File, 1),
                e("d/big", EntryKind::File, 1),
            ],
            vec![
                e("d", EntryKind::Dir, 0),
                e("d/x", EntryKind::Dir, 0),
                e("d/x", EntryKind::File, 1),
            ],
            vec![e("d", EntryKind::Dir, 0), e("d", EntryKind::Dir, 0)],
            vec![e("a\0b", EntryKind::File, 1)],
            vec![e("d", EntryKind::Dir, 5)],
        ] {
            assert!(check_manifest(&bad, None).is_err(), "{bad:?}");
        }
        let e2 = check_manifest(&ok, Some(&["other".into()])).expect_err("names");
        assert_eq!(e2.kind, FailKind::Refused);
    }

    #[test]
    fn a_file_listed_many_times_is_refused_in_linear_time() {
        // 'd/big' 250,000 times would be hashed 250,000 times; it is refused at the second.
        let mut m = vec![e("d", EntryKind::Dir, 0)];
        m.extend((0..250_000).map(|_| e("d/big", EntryKind::File, 1 << 30)));
        let f = check_manifest(&m, None).expect_err("duplicate");
        assert!(f.message.contains("'d/big' twice"), "{}", f.message);
        // 250,000 distinct top-level names pass (no search per entry).
        let m: Vec<Entry> = (0..250_000)
            .map(|i| e(&format!("f{i}"), EntryKind::File, 1))
            .collect();
        assert_eq!(check_manifest(&m, None).expect("distinct").len(), 250_000);
    }

    #[test]
    fn layouts_follow_cp() {
        let dir = Meta {
            kind: Kind::Dir,
            size: 0,
            mode: 0o755,
            mtime_s: 0,
            mtime_ns: 0,
            allocated: 0,
            dev: 0,
            nlink: 1,
        };
        let file = Meta {
            kind: Kind::File,
            ..dir
        };
        let f = vec![("a".to_string(), EntryKind::File)];
        let d = vec![("a".to_string(), EntryKind::Dir)];
        let two = vec![
            ("a".to_string(), EntryKind::File),
            ("b".into(), EntryKind::File),
        ];
        assert_eq!(
            decide_layout(Some(&dir), false, &two, false, "x"),
            Ok(Layout::Into)
        );
        assert_eq!(
            decide_layout(None, true, &two, false, "x"),
            Ok(Layout::Into)
        );
        assert_eq!(
            decide_layout(None, false, &f, false, "x"),
            Ok(Layout::Rename)
        );
        assert_eq!(
            decide_layout(Some(&file), false, &f, false, "x"),
            Ok(Layout::Rename)
        );
        assert_eq!(
            decide_layout(None, false, &d, false, "x"),
            Ok(Layout::Rename)
        );
        assert_eq!(
            decide_layout(None, false, &two, false, "x").map_err(|e| e.kind),
            Err(FailKind::NotFound)
        );
        assert_eq!(
            decide_layout(Some(&file), false, &d, false, "x").map_err(|e| e.kind),
            Err(FailKind::Usage)
        );
        assert!(decide_layout(None, false, &f, true, "x/").is_err());
        assert_eq!(
            target(Layout::Into, Path::new("in"), "a/b"),
            PathBuf::from("in/a/b")
        );
        assert_eq!(
            target(Layout::Rename, Path::new("new"), "a/b"),
            PathBuf::from("new/b")
        );
        assert_eq!(
            target(Layout::Rename, Path::new("new"), "a"),
            PathBuf::from("new")
        );
        assert_eq!(
            temp_name(OsStr::new("x y")),
            OsString::from(".x y.tcptune-part")
        );
        assert!(temp_name(OsStr::new(&"n".repeat(250))).len() <= 255);
    }
}
