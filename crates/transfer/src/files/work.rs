//! The state one end of a copy shares between its stream threads: what it copies (the
//! spec), the running queue or table behind one lock, the receiver's open files, the
//! counters a progress display and the idle timers read, and the first failure.
//!
//! The data threads (`engine::files`) drive it: stream 0's thread exchanges the manifest
//! and the plan and publishes the run ([`FileWork::start_sending`],
//! [`FileWork::start_receiving`]); every stream's thread then takes work from it.

use super::budget::CopyLimits;
use super::digest::{self, Cv};
use super::plan::{split, temp_name, DestSpec};
use super::walk::{Manifest, WalkLimits};
use super::{CopiedFile, Entry, EntryKind, FailKind, FileFailure, FilesSide};
use crate::files::FileFailureExt;
use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::File;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;
use tcptune_proto::copy::receiver::Receiver;
use tcptune_proto::copy::sender::Sender;
use tcptune_sys::fs::{self, Dir, OpenMode};

pub(crate) use tcptune_proto::files::MAX_OPEN;

/// Where the sender's files come from.
#[derive(Debug)]
pub(crate) enum Source {
    /// Walked already (the client, before it connected: a missing source fails at once).
    Ready(Manifest),
    /// The server's sources beneath its root, walked by stream 0's thread.
    Share {
        root: Arc<Dir>,
        sources: Vec<String>,
        recursive: bool,
        limits: WalkLimits,
    },
}

/// What one end does.
#[derive(Debug)]
pub(crate) enum Spec {
    /// Send.
    Send { source: Source },
    /// Receive.
    Recv {
        dest: DestSpec,
        resume: bool,
        fsync: bool,
        /// What the sender's manifest may claim.
        limits: CopyLimits,
    },
}

pub(crate) struct SendRun {
    pub(crate) manifest: Arc<Manifest>,
    /// Stream 0's conversation and the queue every stream takes blocks from.
    pub(crate) sender: Sender,
}

pub(crate) struct RecvRun {
    /// Stream 0's conversation and the table every stream checks records against.
    pub(crate) receiver: Receiver,
    pub(crate) targets: Arc<Vec<PathBuf>>,
    /// The directories this copy created (only those get the sender's modes and times).
    pub(crate) created_dirs: Arc<HashSet<u32>>,
    open: HashMap<u32, Arc<File>>,
    order: VecDeque<u32>,
}

pub(crate) enum Run {
    Waiting,
    Send(Box<SendRun>),
    Recv(Box<RecvRun>),
}

/// One end of a copy. See the module documentation.
pub(crate) struct FileWork {
    pub(crate) sender: bool,
    spec: Mutex<Option<Spec>>,
    run: Mutex<Run>,
    cond: Condvar,
    dest: Option<DestSpec>,
    fsync: bool,
    /// Grows with local work that moves no network bytes (walking, hashing, planning):
    /// the idle timers count it as progress.
    activity: AtomicU64,
    started: AtomicBool,
    failed: AtomicBool,
    failure: Mutex<Option<FileFailure>>,
    /// Bytes this run carries at most (known once the plan is in).
    pub(crate) to_carry: AtomicU64,
    pub(crate) files_total: AtomicU64,
    pub(crate) files_done: AtomicU64,
    pub(crate) bytes_total: AtomicU64,
    pub(crate) block_seq: AtomicU64,
    warnings: Mutex<Vec<String>>,
    /// The engine's delivered-bytes count when blocks began (the in-band measurement starts
    /// there, not with the manifest's bytes).
    pub(crate) delivered_base: AtomicU64,
    /// The session's block key (set once the session's keys are known, before any stream
    /// joins): every block's and confirmation's tag is made and checked with it.
    block_key: std::sync::OnceLock<tcptune_proto::keys::BlockKey>,
    /// The sealing of the block bodies (`cp --encrypt`), set with the block key when the
    /// job asks for it; unset, bodies go in clear.
    sealing: std::sync::OnceLock<crate::seal::Sealing>,
}

impl std::fmt::Debug for FileWork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileWork")
            .field("sender", &self.sender)
            .finish_non_exhaustive()
    }
}

impl FileWork {
    pub(crate) fn new(spec: Spec) -> FileWork {
        let (sender, dest, fsync) = match &spec {
            Spec::Send { .. } => (true, None, false),
            Spec::Recv { dest, fsync, .. } => (false, Some(dest.clone()), *fsync),
        };
        let (files, bytes) = match &spec {
            Spec::Send {
                source: Source::Ready(m),
                ..
            } => (m.files(), m.bytes()),
            _ => (0, 0),
        };
        FileWork {
            sender,
            spec: Mutex::new(Some(spec)),
            run: Mutex::new(Run::Waiting),
            cond: Condvar::new(),
            dest,
            fsync,
            activity: AtomicU64::new(0),
            started: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            failure: Mutex::new(None),
            to_carry: AtomicU64::new(bytes),
            files_total: AtomicU64::new(files),
            files_done: AtomicU64::new(0),
            bytes_total: AtomicU64::new(bytes),
            block_seq: AtomicU64::new(0),
            warnings: Mutex::new(Vec::new()),
            delivered_base: AtomicU64::new(u64::MAX),
            block_key: std::sync::OnceLock::new(),
            sealing: std::sync::OnceLock::new(),
        }
    }

    /// The session's block key (once; a second call keeps the first).
    pub(crate) fn set_block_key(&self, key: tcptune_proto::keys::BlockKey) {
        let _ = self.block_key.set(key);
    }

    /// The session's block key, once set.
    pub(crate) fn block_key(&self) -> Option<&tcptune_proto::keys::BlockKey> {
        self.block_key.get()
    }

    /// Seal every block body under `key` (the session's `aead` subkey); `pull` when the
    /// server sends the blocks (once; a second call keeps the first).
    pub(crate) fn set_aead_key(&self, key: &[u8; 32], pull: bool) {
        let _ = self.sealing.set(crate::seal::Sealing::new(key, pull));
    }

    /// The sealing of block bodies, when the copy is encrypted.
    pub(crate) fn sealing(&self) -> Option<&crate::seal::Sealing> {
        self.sealing.get()
    }

    /// The spec, once (stream 0's thread takes it).
    pub(crate) fn take_spec(&self) -> Option<Spec> {
        self.spec.lock().ok().and_then(|mut s| s.take())
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Run> {
        self.run.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wait (at most `d`) for a change of the run.
    pub(crate) fn wait<'a>(&self, g: MutexGuard<'a, Run>, d: Duration) -> MutexGuard<'a, Run> {
        match self.cond.wait_timeout(g, d) {
            Ok((g, _)) => g,
            Err(p) => p.into_inner().0,
        }
    }

    pub(crate) fn notify(&self) {
        self.cond.notify_all();
    }

    /// Local work happened (`n` units: bytes hashed, entries walked).
    pub(crate) fn touch(&self, n: u64) {
        self.activity.fetch_add(n.max(1), Ordering::Relaxed);
    }

    pub(crate) fn activity(&self) -> u64 {
        self.activity.load(Ordering::Relaxed)
    }

    /// Blocks flow (the manifest and plan are exchanged).
    pub(crate) fn started(&self) -> bool {
        self.started.load(Ordering::Acquire)
    }

    /// Record the first failure; `true` if this was it (the caller tells the session).
    pub(crate) fn fail(&self, f: FileFailure) -> bool {
        if self.failed.swap(true, Ordering::AcqRel) {
            return false;
        }
        if let Ok(mut g) = self.failure.lock() {
            *g = Some(f);
        }
        self.notify();
        true
    }

    pub(crate) fn has_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// The failure, if one happened.
    pub(crate) fn failure(&self) -> Option<FileFailure> {
        self.failure.lock().ok().and_then(|g| g.clone())
    }

    pub(crate) fn add_warnings(&self, w: &[String]) {
        if let Ok(mut g) = self.warnings.lock() {
            g.extend(w.iter().take(101).cloned());
        }
    }

    /// The sender has the plan: blocks may go.
    pub(crate) fn start_sending(&self, manifest: Manifest, sender: Sender) {
        let have = sender.have();
        let present: u64 = have
            .present
            .keys()
            .filter_map(|id| manifest.entries.get(*id as usize))
            .map(|e| e.size)
            .sum();
        let blocks: u64 = have
            .blocks
            .keys()
            .filter_map(|(id, b)| manifest.entries.get(*id as usize).map(|e| e.block_len(*b)))
            .sum();
        self.files_total.store(manifest.files(), Ordering::Relaxed);
        self.bytes_total.store(manifest.bytes(), Ordering::Relaxed);
        self.to_carry.store(
            manifest.bytes().saturating_sub(present + blocks),
            Ordering::Relaxed,
        );
        let empty = manifest
            .entries
            .iter()
            .filter(|e| e.kind == EntryKind::File && e.size == 0)
            .count() as u64;
        self.files_done.store(empty, Ordering::Relaxed);
        *self.lock() = Run::Send(Box::new(SendRun {
            manifest: Arc::new(manifest),
            sender,
        }));
        self.started.store(true, Ordering::Release);
        self.notify();
    }

    /// The receiver made its plan: blocks may come.
    pub(crate) fn start_receiving(
        &self,
        receiver: Receiver,
        targets: Vec<PathBuf>,
        created_dirs: HashSet<u32>,
        need_bytes: u64,
    ) {
        let entries = receiver.entries();
        let files = entries.iter().filter(|e| e.kind == EntryKind::File).count() as u64;
        self.files_total.store(files, Ordering::Relaxed);
        let bytes = entries.iter().map(|e| e.size).fold(0, u64::saturating_add);
        self.bytes_total.store(bytes, Ordering::Relaxed);
        self.to_carry.store(need_bytes, Ordering::Relaxed);
        self.files_done
            .store(receiver.table().files_done, Ordering::Relaxed);
        *self.lock() = Run::Recv(Box::new(RecvRun {
            receiver,
            targets: Arc::new(targets),
            created_dirs: Arc::new(created_dirs),
            open: HashMap::new(),
            order: VecDeque::new(),
        }));
        self.started.store(true, Ordering::Release);
        self.notify();
    }

    fn dest(&self) -> Result<&DestSpec, FileFailure> {
        self.dest
            .as_ref()
            .ok_or_else(|| FileFailure::protocol("blocks at a sender"))
    }

    fn shown(&self, entries: &[Entry], id: u32) -> String {
        let d = self.dest.as_ref().map_or("", |d| d.shown.as_str());
        let p = entries.get(id as usize).map_or("", |e| e.path.as_str());
        format!("{}/{p}", d.trim_end_matches('/'))
    }

    /// The open temporary file of entry `id` (created, emptied or sized as needed), with
    /// the run locked.
    pub(crate) fn open_for_write(
        &self,
        run: &mut RecvRun,
        id: u32,
    ) -> Result<Arc<File>, FileFailure> {
        if let Some(f) = run.open.get(&id) {
            return Ok(f.clone());
        }
        let dest = self.dest()?;
        let entries = run.receiver.entries().clone();
        let e = &entries[id as usize];
        let t = &run.targets[id as usize];
        let (parent, name) = split(t);
        let temp = parent.join(temp_name(&name));
        let shown = self.shown(&entries, id);
        let fd = dest
            .root
            .open_beneath(&temp, OpenMode::WriteCreate)
            .map_err(|err| FileFailure::fs(&err, &shown))?;
        let io = |what: &str, r: std::io::Result<()>| {
            r.map_err(|err| FileFailure::io(format_args!("{what} {shown}"), &err))
        };
        if run.receiver.table_mut().take_fresh(id) {
            io("truncate", fs::set_len(fd.as_fd(), 0))?;
        }
        let meta = fs::stat_fd(fd.as_fd())
            .map_err(|err| FileFailure::io(format_args!("stat {shown}"), &err))?;
        if meta.nlink != 1 {
            return Err(FileFailure::new(
                FailKind::Refused,
                format!(
                    "the partial file of {shown} has {} links: not written through (remove it)",
                    meta.nlink
                ),
            ));
        }
        if meta.size != e.size {
            io("set the size of", fs::set_len(fd.as_fd(), e.size))?;
        }
        let f = Arc::new(File::from(fd));
        run.open.insert(id, f.clone());
        run.order.push_back(id);
        while run.open.len() > MAX_OPEN {
            let Some(old) = run.order.pop_front() else {
                break;
            };
            run.open.remove(&old);
        }
        if run.order.len() > 4 * MAX_OPEN {
            let open = &run.open;
            run.order.retain(|i| open.contains_key(i));
        }
        Ok(f)
    }

    /// Entry `id` is complete: take its open file out (the caller then calls
    /// [`FileWork::finalize`] without the lock, and tells the receiver how it went).
    pub(crate) fn begin_finalize(&self, run: &mut RecvRun, id: u32) -> Finalize {
        Finalize {
            id,
            entries: run.receiver.entries().clone(),
            targets: run.targets.clone(),
            file: run.open.remove(&id),
            present: run.receiver.table().is_present(id),
        }
    }

    /// Give a complete file its mode and time and rename it into place (or, for a complete
    /// target found identical, its mode).
    pub(crate) fn finalize(&self, f: Finalize) -> Result<(), FileFailure> {
        let r = self.finalize_inner(&f);
        if r.is_ok() {
            self.files_done.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    fn finalize_inner(&self, f: &Finalize) -> Result<(), FileFailure> {
        let dest = self.dest()?;
        let e = &f.entries[f.id as usize];
        let t = &f.targets[f.id as usize];
        let shown = self.shown(&f.entries, f.id);
        let io = |what: &str, r: std::io::Result<()>| {
            r.map_err(|err| FileFailure::io(format_args!("{what} {shown}"), &err))
        };
        let (parent, name) = split(t);
        if f.present && f.file.is_none() {
            // Found identical (same size, time and digest): it was there before this copy,
            // so it keeps its own mode; its time is the sender's already.
            return Ok(());
        }
        let temp = temp_name(&name);
        let owned;
        let file = match &f.file {
            Some(file) => file.as_fd(),
            None => {
                owned = dest
                    .root
                    .open_beneath(&parent.join(&temp), OpenMode::WriteCreate)
                    .map_err(|err| FileFailure::fs(&err, &shown))?;
                owned.as_fd()
            }
        };
        io("chmod", fs::set_mode(file, e.mode & 0o777))?;
        io(
            "set the time of",
            fs::set_mtime(file, e.mtime_s, e.mtime_ns),
        )?;
        if self.fsync {
            io("sync", fs::sync_data(file))?;
        }
        let p = dest
            .root
            .dir_beneath(&parent)
            .map_err(|err| FileFailure::fs(&err, &shown))?;
        p.rename_at(&temp, &name)
            .map_err(|err| FileFailure::fs(&err, &shown))
    }

    /// Every file is in place: the directories this copy created get their modes and
    /// times, deepest first (a directory that was there keeps its own: a peer's mode is
    /// applied only to what this copy made).
    pub(crate) fn finish_dirs(
        &self,
        entries: &[Entry],
        targets: &[PathBuf],
        created: &HashSet<u32>,
    ) -> Result<(), FileFailure> {
        let dest = self.dest()?;
        for (id, e) in entries.iter().enumerate().rev() {
            if e.kind != EntryKind::Dir || !created.contains(&(id as u32)) {
                continue;
            }
            let shown = self.shown(entries, id as u32);
            let d = dest
                .root
                .listable_beneath(&targets[id])
                .map_err(|err| FileFailure::fs(&err, &shown))?;
            let io = |what: &str, r: std::io::Result<()>| {
                r.map_err(|err| FileFailure::io(format_args!("{what} {shown}"), &err))
            };
            io("chmod", fs::set_mode(d.as_fd(), e.mode & 0o777))?;
            io(
                "set the time of",
                fs::set_mtime(d.as_fd(), e.mtime_s, e.mtime_ns),
            )?;
        }
        Ok(())
    }

    /// This end's summary for the phase result.
    pub(crate) fn summary(&self) -> FilesSide {
        let warnings = self.warnings.lock().map(|w| w.clone()).unwrap_or_default();
        let g = self.lock();
        match &*g {
            Run::Waiting => FilesSide {
                warnings,
                ..FilesSide::default()
            },
            Run::Send(s) => {
                let entries = &s.manifest.entries;
                FilesSide {
                    files: s.manifest.files(),
                    dirs: entries.len() as u64 - s.manifest.files(),
                    bytes: s.manifest.bytes(),
                    files_done: self.files_done.load(Ordering::Relaxed),
                    carried_bytes: s.sender.queue().carried_bytes,
                    present_bytes: s.sender.queue().present_bytes,
                    resent_blocks: s.sender.queue().resent_blocks,
                    rounds: s.sender.round() + 1,
                    tree_digest: s.sender.tree_digest(),
                    warnings,
                }
            }
            Run::Recv(r) => {
                let table = r.receiver.table();
                let entries = r.receiver.entries();
                let files = entries.iter().filter(|e| e.kind == EntryKind::File).count() as u64;
                FilesSide {
                    files,
                    dirs: entries.len() as u64 - files,
                    bytes: entries.iter().map(|e| e.size).sum(),
                    files_done: table.files_done,
                    carried_bytes: table.carried_bytes,
                    present_bytes: table.present_bytes,
                    resent_blocks: table.mismatches,
                    rounds: r.receiver.round() + 1,
                    tree_digest: r.receiver.tree_digest().map(str::to_string),
                    warnings,
                }
            }
        }
    }

    /// Every file with its digest and what happened to it (the client's report).
    pub(crate) fn copied(&self) -> Vec<CopiedFile> {
        let g = self.lock();
        let one = |e: &Entry, d: Option<Cv>, status: &str| CopiedFile {
            path: e.path.clone(),
            size_bytes: e.size,
            blake3: d.map(|d| digest::hex(&d)),
            status: if d.is_some() || e.size == 0 {
                status.to_string()
            } else {
                "incomplete".to_string()
            },
        };
        match &*g {
            Run::Waiting => Vec::new(),
            Run::Send(s) => s
                .manifest
                .entries
                .iter()
                .enumerate()
                .filter(|(_, e)| e.kind == EntryKind::File)
                .map(|(id, e)| {
                    let id = id as u32;
                    let d = s
                        .sender
                        .queue()
                        .digest(id)
                        .or_else(|| (e.size == 0).then(|| digest::file_digest(&[])));
                    let status = if s.sender.queue().confirmed(id) {
                        "unchanged"
                    } else if s.sender.have().blocks.keys().any(|(f, _)| *f == id) {
                        "resumed"
                    } else {
                        "copied"
                    };
                    one(e, d, status)
                })
                .collect(),
            Run::Recv(r) => r
                .receiver
                .entries()
                .iter()
                .enumerate()
                .filter(|(_, e)| e.kind == EntryKind::File)
                .map(|(id, e)| {
                    let id = id as u32;
                    let d = r
                        .receiver
                        .table()
                        .digest(id)
                        .or_else(|| (e.size == 0).then(|| digest::file_digest(&[])));
                    let status = if r.receiver.table().is_present(id) {
                        "unchanged"
                    } else if r.receiver.table().resumed(id) {
                        "resumed"
                    } else {
                        "copied"
                    };
                    one(e, d, status)
                })
                .collect(),
        }
    }
}

/// A complete file on its way into place.
pub(crate) struct Finalize {
    id: u32,
    entries: Arc<Vec<Entry>>,
    targets: Arc<Vec<PathBuf>>,
    file: Option<Arc<File>>,
    present: bool,
}
