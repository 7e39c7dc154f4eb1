//! The sender's manifest: the sources and, with `-r`, everything beneath them, in the
//! order the receiver creates it.
//!
//! Sources named on the command line are followed if they are symlinks (as `cp` and `scp`
//! do); inside a tree, symlinks, devices, FIFOs, sockets and names that are not UTF-8 are
//! skipped with a warning. The server's sources are resolved beneath its root
//! (`tcptune_sys::fs`), so a source that leads outside is refused; the walk below a source
//! goes through the same handle, one directory at a time, never following a symlink.

use super::{Entry, EntryKind, FailKind, FileFailure, MAX_DEPTH, MAX_PATH};
use crate::files::FileFailureExt;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tcptune_sys::fs::{Dir, Kind, Meta};

/// Warnings kept word for word; the rest are counted.
const MAX_WARNINGS: usize = 100;

/// One source: its name in the manifest, and where it is.
#[derive(Debug)]
pub(crate) struct SourceTop {
    /// The name it gets at the destination.
    pub(crate) name: String,
    /// The directory it is resolved beneath.
    pub(crate) base: Arc<Dir>,
    /// Its path beneath `base`.
    pub(crate) rel: PathBuf,
    /// How to name it in a message.
    pub(crate) shown: String,
}

/// What the sender has, and how to open each file.
#[derive(Debug, Default)]
pub(crate) struct Manifest {
    pub(crate) entries: Vec<Entry>,
    /// Per entry: its source (index into `tops`) and its path beneath that source's base.
    pub(crate) srcs: Vec<(u32, PathBuf)>,
    pub(crate) tops: Vec<SourceTop>,
    pub(crate) warnings: Vec<String>,
}

impl Manifest {
    /// Files in the manifest.
    pub(crate) fn files(&self) -> u64 {
        self.entries
            .iter()
            .filter(|e| e.kind == EntryKind::File)
            .count() as u64
    }

    /// Bytes of all files.
    pub(crate) fn bytes(&self) -> u64 {
        self.entries.iter().map(|e| e.size).sum()
    }
}

/// Bounds of a walk.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WalkLimits {
    pub(crate) max_entries: u64,
    pub(crate) max_bytes: u64,
}

fn utf8_name(name: &OsStr, shown: &str) -> Result<String, FileFailure> {
    name.to_str().map(str::to_string).ok_or_else(|| {
        FileFailure::new(
            FailKind::Usage,
            format!("{shown}: the name is not UTF-8 (tcptune cp copies UTF-8 names)"),
        )
    })
}

/// This host's sources (`tcptune cp` pushing): each is opened through its real path, so a
/// symlink named on the command line is followed, and keeps the name it was given.
pub(crate) fn local_tops(paths: &[PathBuf]) -> Result<Vec<SourceTop>, FileFailure> {
    let mut out = Vec::new();
    for p in paths {
        let shown = p.display().to_string();
        let real = std::fs::canonicalize(p).map_err(|e| FileFailure::io(&shown, &e))?;
        let name = match p.file_name() {
            Some(n) => n,
            // `.`, `..`, `dir/..`: the directory's own name.
            None => real.file_name().ok_or_else(|| {
                FileFailure::new(
                    FailKind::Usage,
                    format!("{shown}: cannot copy the root directory"),
                )
            })?,
        };
        let name = utf8_name(name, &shown)?;
        let parent = real.parent().unwrap_or(Path::new("/"));
        let base = Dir::open(parent).map_err(|e| FileFailure::fs(&e, &shown))?;
        let rel = PathBuf::from(real.file_name().unwrap_or(OsStr::new(".")));
        out.push(SourceTop {
            name,
            base: Arc::new(base),
            rel,
            shown,
        });
    }
    Ok(out)
}

/// The server's sources (a pull): paths beneath its root, as the client named them.
pub(crate) fn share_tops(
    root: &Arc<Dir>,
    sources: &[String],
) -> Result<Vec<SourceTop>, FileFailure> {
    let mut out = Vec::new();
    for s in sources {
        let trimmed = s.trim_end_matches('/');
        let name = super::last_component(trimmed);
        if trimmed.is_empty() || name.is_empty() || name == "." || name == ".." {
            return Err(FileFailure::new(
                FailKind::Usage,
                format!(
                    "'{}': name a file or directory under the shared directory",
                    crate::server::escape(s, 200)
                ),
            ));
        }
        out.push(SourceTop {
            name: name.to_string(),
            base: root.clone(),
            rel: PathBuf::from(trimmed),
            shown: crate::server::escape(s, 200),
        });
    }
    Ok(out)
}

struct Walker<'a> {
    m: Manifest,
    recursive: bool,
    limits: WalkLimits,
    bytes: u64,
    more_warnings: u64,
    progress: &'a mut dyn FnMut(u64),
}

impl Walker<'_> {
    fn warn(&mut self, w: String) {
        if self.m.warnings.len() < MAX_WARNINGS {
            self.m.warnings.push(w);
        } else {
            self.more_warnings += 1;
        }
    }

    fn push(
        &mut self,
        top: u32,
        rel: PathBuf,
        path: String,
        kind: EntryKind,
        meta: &Meta,
    ) -> Result<(), FileFailure> {
        if self.m.entries.len() as u64 >= self.limits.max_entries {
            return Err(FileFailure::new(
                FailKind::Refused,
                format!(
                    "more than {} files and directories in one copy (the limit here; split the copy)",
                    self.limits.max_entries
                ),
            ));
        }
        let size = if kind == EntryKind::File {
            meta.size
        } else {
            0
        };
        self.bytes = self.bytes.saturating_add(size);
        if self.bytes > self.limits.max_bytes {
            return Err(FileFailure::new(
                FailKind::Refused,
                format!(
                    "more than {} in one copy (the limit here)",
                    tcptune_core::Bytes(self.limits.max_bytes)
                ),
            ));
        }
        if path.len() > MAX_PATH {
            return Err(FileFailure::new(
                FailKind::Refused,
                format!("{path}: path too long"),
            ));
        }
        self.m.entries.push(Entry {
            path,
            kind,
            size,
            mode: meta.mode & 0o7777,
            mtime_s: meta.mtime_s,
            mtime_ns: meta.mtime_ns,
        });
        self.m.srcs.push((top, rel));
        if self.m.entries.len().is_multiple_of(1000) {
            (self.progress)(self.m.entries.len() as u64);
        }
        Ok(())
    }

    fn top(&mut self, k: u32) -> Result<(), FileFailure> {
        let (base, rel, name, shown) = {
            let t = &self.m.tops[k as usize];
            (
                t.base.clone(),
                t.rel.clone(),
                t.name.clone(),
                t.shown.clone(),
            )
        };
        let meta = base
            .look_follow(&rel)
            .map_err(|e| FileFailure::fs(&e, &shown))?
            .ok_or_else(|| {
                FileFailure::new(
                    FailKind::NotFound,
                    format!("{shown}: no such file or directory"),
                )
            })?;
        match meta.kind {
            Kind::File => self.push(k, rel, name, EntryKind::File, &meta),
            Kind::Dir if !self.recursive => Err(FileFailure::new(
                FailKind::Usage,
                format!("{shown} is a directory (use -r to copy directories)"),
            )),
            Kind::Dir => {
                self.push(k, rel.clone(), name.clone(), EntryKind::Dir, &meta)?;
                self.dir(&base, k, &rel, &name, 1)
            }
            Kind::Symlink | Kind::Other => Err(FileFailure::new(
                FailKind::Usage,
                format!("{shown} is not a regular file or a directory"),
            )),
        }
    }

    fn dir(
        &mut self,
        base: &Dir,
        k: u32,
        rel: &Path,
        path: &str,
        depth: usize,
    ) -> Result<(), FileFailure> {
        if depth > MAX_DEPTH {
            return Err(FileFailure::new(
                FailKind::Refused,
                format!("{path}: nested deeper than {MAX_DEPTH} directories"),
            ));
        }
        let d = base
            .listable_beneath(rel)
            .map_err(|e| FileFailure::fs(&e, path))?;
        let names = d
            .list()
            .map_err(|e| FileFailure::io(format_args!("list {path}"), &e))?;
        for n in names {
            let Some(name) = n.to_str() else {
                self.warn(format!(
                    "skipped {path}/{}: the name is not UTF-8",
                    n.to_string_lossy()
                ));
                continue;
            };
            let child_path = format!("{path}/{name}");
            let Some(meta) = d
                .stat_at(&n)
                .map_err(|e| FileFailure::fs(&e, &child_path))?
            else {
                continue; // removed while listed
            };
            let child_rel = rel.join(&n);
            match meta.kind {
                Kind::File => self.push(k, child_rel, child_path, EntryKind::File, &meta)?,
                Kind::Dir => {
                    self.push(
                        k,
                        child_rel.clone(),
                        child_path.clone(),
                        EntryKind::Dir,
                        &meta,
                    )?;
                    self.dir(base, k, &child_rel, &child_path, depth + 1)?;
                }
                Kind::Symlink => self.warn(format!("skipped the symbolic link {child_path}")),
                Kind::Other => self.warn(format!(
                    "skipped {child_path}: not a regular file or a directory"
                )),
            }
        }
        Ok(())
    }
}

/// Walk the sources. `progress` hears the entry count now and then (a long walk keeps
/// the session alive).
pub(crate) fn walk(
    tops: Vec<SourceTop>,
    recursive: bool,
    limits: WalkLimits,
    progress: &mut dyn FnMut(u64),
) -> Result<Manifest, FileFailure> {
    let mut seen = std::collections::HashSet::new();
    for t in &tops {
        if !seen.insert(t.name.clone()) {
            return Err(FileFailure::new(
                FailKind::Usage,
                format!(
                    "two sources are named '{}': they would land on the same target",
                    t.name
                ),
            ));
        }
    }
    let n = tops.len() as u32;
    let mut w = Walker {
        m: Manifest {
            tops,
            ..Manifest::default()
        },
        recursive,
        limits,
        bytes: 0,
        more_warnings: 0,
        progress,
    };
    for k in 0..n {
        w.top(k)?;
    }
    if w.more_warnings > 0 {
        let more = w.more_warnings;
        w.m.warnings
            .push(format!("and {more} more entries skipped"));
    }
    Ok(w.m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tcptune-walk-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("mkdir");
        d
    }

    const LIMITS: WalkLimits = WalkLimits {
        max_entries: 1000,
        max_bytes: u64::MAX,
    };

    #[test]
    fn a_tree_is_listed_parents_first_with_symlinks_skipped() {
        let d = tmp("tree");
        std::fs::create_dir_all(d.join("src/b/empty")).expect("mkdir");
        std::fs::write(d.join("src/a file"), b"12345").expect("write");
        std::fs::write(d.join("src/b/é"), b"x").expect("write");
        std::os::unix::fs::symlink("a file", d.join("src/link")).expect("symlink");
        let tops = local_tops(&[d.join("src/")]).expect("tops");
        let m = walk(tops, true, LIMITS, &mut |_| {}).expect("walk");
        let paths: Vec<(&str, EntryKind, u64)> = m
            .entries
            .iter()
            .map(|e| (e.path.as_str(), e.kind, e.size))
            .collect();
        assert_eq!(
            paths,
            vec![
                ("src", EntryKind::Dir, 0),
                ("src/a file", EntryKind::File, 5),
                ("src/b", EntryKind::Dir, 0),
                ("src/b/empty", EntryKind::Dir, 0),
                ("src/b/é", EntryKind::File, 1),
            ]
        );
        assert_eq!(
            m.warnings,
            vec!["skipped the symbolic link src/link".to_string()]
        );
        assert_eq!((m.files(), m.bytes()), (2, 6));
        let e = walk(
            local_tops(&[d.join("src")]).expect("tops"),
            false,
            LIMITS,
            &mut |_| {},
        )
        .expect_err("no -r");
        assert_eq!(e.kind, FailKind::Usage);
        let e = local_tops(&[d.join("missing")]).expect_err("missing");
        assert_eq!(e.kind, FailKind::NotFound);
        let small = WalkLimits {
            max_entries: 2,
            max_bytes: u64::MAX,
        };
        let e = walk(
            local_tops(&[d.join("src")]).expect("tops"),
            true,
            small,
            &mut |_| {},
        )
        .expect_err("limit");
        assert_eq!(e.kind, FailKind::Refused);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn server_sources_cannot_leave_the_root() {
        let d = tmp("share");
        std::fs::create_dir_all(d.join("root/x")).expect("mkdir");
        std::fs::write(d.join("secret"), b"s").expect("write");
        std::os::unix::fs::symlink("../secret", d.join("root/out")).expect("symlink");
        let root = Arc::new(Dir::open(&d.join("root")).expect("root"));
        for bad in ["../secret", "/etc/passwd", "out", "x/../../secret"] {
            let tops = share_tops(&root, &[bad.to_string()]).expect("parsed");
            let e = walk(tops, true, LIMITS, &mut |_| {}).expect_err(bad);
            assert_eq!(e.kind, FailKind::Refused, "{bad}: {e}");
        }
        for bad in ["", "/", ".", "x/.."] {
            assert!(share_tops(&root, &[bad.to_string()]).is_err(), "{bad}");
        }
        let m = walk(
            share_tops(&root, &["x/".into()]).expect("x"),
            true,
            LIMITS,
            &mut |_| {},
        )
        .expect("x");
        assert_eq!(m.entries[0].path, "x");
        let _ = std::fs::remove_dir_all(&d);
    }
}
