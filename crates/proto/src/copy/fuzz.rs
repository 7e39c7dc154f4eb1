//! A fuzzer of the receiving end of the copy protocol's bookkeeping, with a counting
//! allocator: a hostile sender's manifest records (valid, mutated, garbage, nested,
//! oversized; sizes up to 2^64 - 1; paths repeated, escaping, long), then its record headers
//! and confirmations against the receiver's table, and a hostile receiver's resend records
//! against the sender's list. Nothing may panic, and what this thread holds at its peak may
//! not pass what the budgets allow ([`bound`]): before the budgets, one entry of size
//! 2^64 - 1 allocated 145 TB.
//!
//! Fixed seeds run always; then random seeds for `TCPTUNE_FUZZ_SECONDS` (default 1 s; CI
//! sets more), each printed so that a failure can be replayed with `TCPTUNE_FUZZ_SEED`.

use super::budget::CopyLimits;
use super::check::check_manifest;
use super::manifest_in::{ManifestIn, ManifestStep};
use super::queue::{Have, ResendList, SendQueue};
use super::table::RecvTable;
use super::wire::{Header, Tag, ITEMS_PER_RECORD, MAX_JSON};
use crate::files::{Entry, EntryKind, BLOCK_SIZE};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::{Duration, Instant};

/// Counts what each thread allocates (live bytes and their peak).
struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn count(delta: isize) {
    let _ = LIVE.try_with(|l| {
        let v = l.get() + delta;
        l.set(v);
        let _ = PEAK.try_with(|p| p.set(p.get().max(v)));
    });
}

// SAFETY: every call is passed to the system allocator unchanged; the counters are
// thread-local cells that never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: the caller's layout, as for System.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            count(l.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            count(l.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: a pointer this allocator gave with this layout.
        unsafe { System.dealloc(p, l) };
        count(-(l.size() as isize));
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        // SAFETY: as above.
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            count(new as isize - l.size() as isize);
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// splitmix64.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    pub(super) fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }
}

fn limits(r: &mut Rng) -> CopyLimits {
    CopyLimits {
        max_entries: 1 + r.below(3000),
        max_file_size: [1 << 20, 1 << 34, u64::MAX][r.below(3) as usize],
        max_total_bytes: [1 << 30, 1 << 36, u64::MAX >> 20][r.below(3) as usize],
        max_manifest_bytes: 4096 + r.below(256 << 10),
    }
}

/// The most this thread may hold at once for a manifest within `l`: the record being
/// parsed and the entries kept (each about as large as its share of the records, plus its
/// struct), the manifest check's sets, the table per entry, and per block of all files the
/// checksums and the resend list.
pub(super) fn bound(l: &CopyLimits) -> isize {
    let entries = l.max_entries.min(l.max_manifest_bytes / 40 + 1);
    let blocks = l.max_total_bytes / BLOCK_SIZE + entries;
    (4 * l.max_manifest_bytes + 512 * entries + 96 * blocks + (1 << 20)) as isize
}

fn path(r: &mut Rng, i: u64) -> String {
    match r.below(12) {
        0 => "../escape".into(),
        1 => "/etc/passwd".into(),
        2 => "p".repeat(r.below(9000) as usize),
        3 => "d".into(),
        4 => "d/x".into(),
        5 => "a\nforged log line".into(),
        6 => format!("d/{}", "q/".repeat(r.below(300) as usize)),
        _ => format!("d/f{i}"),
    }
}

fn size(r: &mut Rng) -> u64 {
    match r.below(6) {
        0 => u64::MAX,
        1 => 1 << r.below(64),
        2 => 0,
        _ => r.below(3 * BLOCK_SIZE),
    }
}

fn entry_json(r: &mut Rng, i: u64) -> serde_json::Value {
    let dir = r.one_in(5);
    serde_json::json!({
        "path": path(r, i),
        "kind": if dir { "dir" } else { "file" },
        "size": if dir && !r.one_in(10) { 0 } else { size(r) },
        "mode": r.below(0o10000),
        "mtime_s": r.next() as i64,
    })
}

/// One record of a hostile sender: its header and body.
fn record(r: &mut Rng, next_id: &mut u64) -> (Header, Vec<u8>) {
    let body = match r.below(10) {
        0 => (0..r.below(200)).map(|_| r.next() as u8).collect(),
        1 => {
            let n = r.below(200) as usize;
            format!("{}{}", "[".repeat(n), "]".repeat(n)).into_bytes()
        }
        2 => br#"{"type":"manifest_end","warnings":["w"]}"#.to_vec(),
        3 => br#"{"type":"alive"}"#.to_vec(),
        _ => {
            let most = if r.one_in(4) { 2000 } else { 20 };
            let n = r.below(most);
            let entries: Vec<_> = (0..n)
                .map(|_| {
                    *next_id += 1;
                    entry_json(r, *next_id)
                })
                .collect();
            serde_json::to_vec(&serde_json::json!({"type": "manifest", "entries": entries}))
                .unwrap_or_default()
        }
    };
    let mut len = body.len() as u32;
    if r.one_in(20) {
        len = [u32::MAX, MAX_JSON as u32 + 1, len / 2][r.below(3) as usize];
    }
    let tag = if r.one_in(30) { Tag::Block } else { Tag::Json };
    let h = Header {
        tag,
        file: 0,
        offset: 0,
        len,
        round: 0,
    };
    (h, body)
}

/// The peak of what the receiver holds: this thread's peak during the receiver's calls,
/// less what the fuzzer itself holds meanwhile (the hostile record it made).
pub(super) struct Meter {
    base: isize,
    peak: isize,
}

impl Meter {
    pub(super) fn start() -> Meter {
        Meter {
            base: LIVE.with(Cell::get),
            peak: 0,
        }
    }

    /// The most one call held above what was live before it, less what came in.
    pub(super) fn delta<T>(&mut self, incoming: usize, f: impl FnOnce() -> T) -> T {
        let before = LIVE.with(Cell::get);
        PEAK.with(|p| p.set(before));
        let t = f();
        let held = PEAK.with(Cell::get) - before - incoming as isize;
        self.peak = self.peak.max(held);
        t
    }

    /// The peak so far.
    pub(super) fn peak(&self) -> isize {
        self.peak
    }

    fn call<T>(&mut self, fuzzer_holds: usize, f: impl FnOnce() -> T) -> T {
        PEAK.with(|p| p.set(LIVE.with(Cell::get)));
        let t = f();
        let held = PEAK.with(Cell::get) - self.base - fuzzer_holds as isize;
        self.peak = self.peak.max(held);
        t
    }
}

/// The manifest a hostile sender gets accepted, if any.
fn manifest(r: &mut Rng, l: CopyLimits, meter: &mut Meter) -> Option<Vec<Entry>> {
    let mut m = ManifestIn::new(l);
    let mut id = 0;
    for _ in 0..200 {
        let (h, body) = record(r, &mut id);
        let n = meter.call(body.capacity(), || m.admit(&h)).ok()?;
        let body = &body[..n.min(body.len())];
        match meter.call(body.len(), || m.on_body(body)).ok()? {
            ManifestStep::More => {}
            ManifestStep::Done { entries, .. } => {
                meter.call(0, || check_manifest(&entries, None)).ok()?;
                return Some(entries);
            }
        }
    }
    None
}

/// A hostile sender's records against the receiver's table.
fn blocks(r: &mut Rng, entries: &[Entry]) {
    let mut t = RecvTable::new(entries);
    let n = entries.len() as u64;
    for id in 0..n {
        if r.one_in(4) {
            t.set_have(id as u32, r.below(4), [r.next() as u8; 32]);
        }
        if r.one_in(8) {
            t.set_present(id as u32, [1; 32]);
        }
    }
    for _ in 0..r.below(2000) {
        let file = r.below(n + 2) as u32;
        let e = entries.get(file as usize);
        let block = r.below(e.map_or(4, |e| e.blocks() + 2));
        let offset = if r.one_in(10) {
            r.next()
        } else {
            block.saturating_mul(BLOCK_SIZE)
        };
        let len = e.map_or(0, |e| e.block_len(block)) as u32;
        let h = Header {
            tag: [Tag::Block, Tag::Confirm, Tag::ConfirmFile][r.below(3) as usize],
            file,
            offset,
            len: if r.one_in(10) { r.next() as u32 } else { len },
            round: 0,
        };
        let Ok((f, b)) = t.check(&h) else { continue };
        let cv = [r.below(3) as u8; 32];
        match h.tag {
            Tag::Block => {
                let computed = if r.one_in(5) { [9; 32] } else { cv };
                t.on_block(f, b, cv, computed, u64::from(h.len));
            }
            Tag::Confirm => {
                t.on_confirm(f, b, cv);
            }
            _ => {
                t.on_confirm_file(f, cv);
            }
        }
    }
    let list = t.resend_list();
    assert!(list.len() as u64 <= entries.iter().map(Entry::blocks).sum::<u64>());
    let _ = t.tree_digest();
}

/// A hostile receiver's resend records against an honest sender's list.
fn resends(r: &mut Rng) {
    let honest: Vec<Entry> = (0..1 + r.below(50))
        .map(|i| Entry {
            path: format!("f{i}"),
            kind: EntryKind::File,
            size: r.below(16 * BLOCK_SIZE),
            mode: 0o644,
            mtime_s: 0,
            mtime_ns: 0,
        })
        .collect();
    let total: u64 = honest.iter().map(Entry::blocks).sum();
    let q = SendQueue::new(&honest, &Have::default());
    let mut list = ResendList::default();
    for _ in 0..r.below(500) {
        let more: Vec<(u32, u64)> = (0..r.below(ITEMS_PER_RECORD as u64 + 2))
            .map(|_| (r.below(60) as u32, r.below(20)))
            .collect();
        if list.add(&q, &more, r.one_in(50), ITEMS_PER_RECORD).is_err() {
            break;
        }
    }
    assert!(list.blocks().len() as u64 <= total);
}

fn one(seed: u64) {
    let mut r = Rng(seed);
    let l = limits(&mut r);
    let mut meter = Meter::start();
    if let Some(entries) = manifest(&mut r, l, &mut meter) {
        meter.call(0, || blocks(&mut r, &entries));
    }
    meter.call(0, || resends(&mut r));
    let peak = meter.peak;
    assert!(
        peak <= bound(&l),
        "seed {seed}: {peak} bytes at the peak, more than the budgets allow ({} for {l:?})",
        bound(&l)
    );
}

pub(super) fn seconds() -> Duration {
    let secs = std::env::var("TCPTUNE_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(1.0);
    Duration::from_secs_f64(secs)
}

#[test]
fn hostile_copy_records_never_panic_nor_pass_the_budgets() {
    if let Some(seed) = std::env::var("TCPTUNE_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        println!("copy fuzzer: replaying seed {seed}");
        one(seed);
        return;
    }
    for seed in 0..300 {
        one(seed);
    }
    let start = Instant::now();
    let first = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id()) << 32;
    println!("copy fuzzer: random seeds from {first} for {:?}", seconds());
    let mut n = 0u64;
    while start.elapsed() < seconds() {
        one(first.wrapping_add(n));
        n += 1;
    }
    println!("copy fuzzer: {} seeds", 300 + n);
}
