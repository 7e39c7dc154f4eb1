//! A read-only view of a byte range of a file, mapped into memory instead of copied.
//!
//! `cp`'s sender hashes every block it sends (BLAKE3) and hands the same bytes to the
//! kernel with `sendfile`, which moves page-cache pages into the socket without a copy. Read
//! with `pread`, each block is first copied into user memory only to be hashed: a profile of
//! a 1 GiB push across a 100 ms path spent a third of the client's CPU in that copy. A
//! [`FileView`] maps the block (`mmap`, `MAP_POPULATE`) and the hasher reads the page cache
//! itself.
//!
//! **The hazard of a mapping, and the guard.** If another process truncates the file while
//! it is mapped, touching a page past the new end raises `SIGBUS`, which would kill the whole
//! process (a server with every other client's session). Each live view registers its
//! address range in a fixed table that a `SIGBUS` handler (installed once, the first time a
//! view is made) consults: a fault inside a view replaces the rest of that view with zero
//! pages of anonymous memory (`MAP_FIXED`), marks the view as no longer intact and returns,
//! so the read goes on over zeros. The caller checks [`FileView::intact`] after reading and
//! reports that the file shrank, as a short `pread` would. A fault anywhere else is passed
//! to the handler that was installed before (Rust's own stack-overflow handler, or the
//! default action), so nothing else changes behaviour.
//!
//! The table has [`VIEW_SLOTS`] entries; when every slot is taken, [`FileView::map`] fails
//! with `WouldBlock` and the caller reads with `pread` instead, as it does for a file that
//! cannot be mapped at all.
//!
//! The mapping is done with `libc` here rather than through `memmap2`: the guard replaces
//! pages inside the mapping from a signal handler and needs its exact page-aligned bounds in
//! a lock-free table, which a wrapper crate would hide.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Once;

/// How many views can be live at once in the process (one per stream that is sending a block
/// needs one; more wait for nothing: they fall back to `pread`).
pub const VIEW_SLOTS: usize = 256;

/// The most one view may map (the copy's blocks are 4 MiB).
pub const VIEW_MAX_BYTES: usize = 64 << 20;

struct Slot {
    /// 0: free; 1: being set up or torn down (the handler skips it); 2: live.
    state: AtomicUsize,
    start: AtomicUsize,
    end: AtomicUsize,
    hit: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Slot = Slot {
    state: AtomicUsize::new(0),
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    hit: AtomicBool::new(false),
};

static SLOTS: [Slot; VIEW_SLOTS] = [FREE; VIEW_SLOTS];
static INSTALL: Once = Once::new();
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// The `SIGBUS` disposition before ours, written once before ours is installed.
static mut PREVIOUS: Option<libc::sigaction> = None;

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// A mapped, read-only range of a file. See the module documentation for what happens when
/// the file shrinks underneath it.
pub struct FileView {
    base: *mut libc::c_void,
    map_len: usize,
    /// Where the requested range starts inside the mapping.
    skip: usize,
    len: usize,
    slot: usize,
}

// SAFETY: the view owns its mapping; reading shared file pages from another thread is as
// safe as from this one, and the slot is updated through atomics only.
unsafe impl Send for FileView {}

impl FileView {
    /// Map `len` bytes of `f` from `offset` (any offset: the mapping starts at the page
    /// boundary below it). Fails with `WouldBlock` when every guard slot is taken, with
    /// `InvalidInput` for an empty or oversized range, and with the `mmap` error for a file
    /// that cannot be mapped: the caller reads with `pread` instead.
    pub fn map(f: &File, offset: u64, len: usize) -> io::Result<FileView> {
        if len == 0 || len > VIEW_MAX_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a view maps 1 to {VIEW_MAX_BYTES} bytes, not {len}"),
            ));
        }
        install_guard()?;
        let slot = claim_slot().ok_or_else(|| {
            io::Error::new(io::ErrorKind::WouldBlock, "every file view slot is taken")
        })?;
        let page = page_size() as u64;
        let aligned = offset - offset % page;
        let skip = (offset - aligned) as usize;
        let map_len = skip + len;
        // SAFETY: a fresh read-only shared mapping of a descriptor we hold; the kernel checks
        // the descriptor, the offset and the length.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                f.as_raw_fd(),
                aligned as libc::off_t,
            )
        };
        if base == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            SLOTS[slot].state.store(0, Ordering::Release);
            return Err(e);
        }
        let s = &SLOTS[slot];
        s.start.store(base as usize, Ordering::Relaxed);
        s.end.store(base as usize + map_len, Ordering::Relaxed);
        s.hit.store(false, Ordering::Relaxed);
        s.state.store(2, Ordering::Release);
        Ok(FileView {
            base,
            map_len,
            skip,
            len,
            slot,
        })
    }

    /// The bytes of the range. Pages past the end of a file that shrank while mapped read as
    /// zeros: check [`intact`](Self::intact) after reading.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is `map_len` bytes long and lives as long as `self`; pages the
        // guard replaced stay mapped (as zeros), so every byte stays readable.
        unsafe { std::slice::from_raw_parts((self.base as *const u8).add(self.skip), self.len) }
    }

    /// False once a read touched a page the file no longer has (it was truncated while
    /// mapped): what was read from there is zeros, not the file.
    pub fn intact(&self) -> bool {
        !SLOTS[self.slot].hit.load(Ordering::Acquire)
    }
}

impl Drop for FileView {
    fn drop(&mut self) {
        let s = &SLOTS[self.slot];
        // Hide the range from the handler before it stops being ours.
        s.state.store(1, Ordering::Release);
        // SAFETY: unmapping exactly the mapping this view made (or the zero pages the guard
        // put in its place, which lie inside it).
        unsafe {
            libc::munmap(self.base, self.map_len);
        }
        s.state.store(0, Ordering::Release);
    }
}

fn claim_slot() -> Option<usize> {
    (0..VIEW_SLOTS).find(|&i| {
        SLOTS[i]
            .state
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    })
}

fn install_guard() -> io::Result<()> {
    INSTALL.call_once(|| {
        // SAFETY: reading the current disposition into zeroed memory, then storing it where
        // only the handler reads it, before the handler can run (it is installed after).
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut old) != 0 {
                return;
            }
            PREVIOUS = Some(old);
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_sigbus as *const () as usize;
            act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut act.sa_mask);
            if libc::sigaction(libc::SIGBUS, &act, std::ptr::null_mut()) == 0 {
                INSTALLED.store(true, Ordering::Release);
            }
        }
    });
    if INSTALLED.load(Ordering::Acquire) {
        Ok(())
    } else {
        Err(io::Error::other(
            "cannot install the SIGBUS guard that file views need",
        ))
    }
}

/// The `SIGBUS` handler: only atomics, `mmap` and the previous handler (async-signal-safe).
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for a handler installed with SA_SIGINFO.
    let addr = unsafe { (*info).si_addr() } as usize;
    let page = page_size();
    for s in SLOTS.iter() {
        if s.state.load(Ordering::Acquire) != 2 {
            continue;
        }
        let (start, end) = (
            s.start.load(Ordering::Relaxed),
            s.end.load(Ordering::Relaxed),
        );
        if addr < start || addr >= end {
            continue;
        }
        let from = addr - addr % page;
        // SAFETY: replacing pages inside a mapping this process made and still owns (the
        // slot is live) with anonymous zero pages; mmap is async-signal-safe on Linux.
        let r = unsafe {
            libc::mmap(
                from as *mut libc::c_void,
                end - from,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if r != libc::MAP_FAILED {
            s.hit.store(true, Ordering::Release);
            return;
        }
        break;
    }
    // Not ours: whatever handled SIGBUS before.
    // SAFETY: PREVIOUS was written before this handler was installed and never after.
    let previous = unsafe { *std::ptr::addr_of!(PREVIOUS) };
    match previous {
        Some(old) if old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN => {
            // SAFETY: calling the handler that was installed, with the signature its flags
            // declare.
            unsafe {
                if old.sa_flags & libc::SA_SIGINFO != 0 {
                    let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                        std::mem::transmute(old.sa_sigaction);
                    f(sig, info, ctx);
                } else {
                    let f: extern "C" fn(libc::c_int) = std::mem::transmute(old.sa_sigaction);
                    f(sig);
                }
            }
        }
        _ => {
            // The default action: restore it and return; the faulting access runs again and
            // the process dies of SIGBUS as it would have without us.
            // SAFETY: resetting a disposition to SIG_DFL.
            unsafe {
                let mut act: libc::sigaction = std::mem::zeroed();
                act.sa_sigaction = libc::SIG_DFL;
                libc::sigemptyset(&mut act.sa_mask);
                libc::sigaction(libc::SIGBUS, &act, std::ptr::null_mut());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::FileExt;

    fn file_of(bytes: &[u8]) -> File {
        let dir = std::env::temp_dir();
        let path = dir.join(format!(
            "tcptune-view-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .expect("create a test file");
        let _ = std::fs::remove_file(&path);
        f.write_all(bytes).expect("write the test file");
        f
    }

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 4096) as u8).collect()
    }

    #[test]
    fn a_view_reads_the_range_it_maps_from_any_offset() {
        let data = pattern(5 * 4096 + 123);
        let f = file_of(&data);
        for (off, len) in [(0, data.len()), (4096, 8192), (100, 5000), (20_000, 600)] {
            let v = FileView::map(&f, off as u64, len).expect("map");
            assert_eq!(v.bytes(), &data[off..off + len], "offset {off} len {len}");
            assert!(v.intact());
        }
    }

    #[test]
    fn a_file_truncated_under_its_view_reads_as_zeros_and_the_view_says_so() {
        let page = page_size();
        let data = pattern(4 * page);
        let f = file_of(&data);
        let v = FileView::map(&f, 0, data.len()).expect("map");
        f.set_len(page as u64).expect("truncate");
        // Without the guard this read would kill the test process with SIGBUS.
        let got = v.bytes().to_vec();
        assert!(!v.intact(), "the view noticed the truncation");
        assert_eq!(&got[..page], &data[..page], "what remains is the file's");
        assert!(
            got[page..].iter().all(|&b| b == 0),
            "the rest reads as zeros"
        );
        drop(v);
        // A later view of what is left is intact again.
        let v = FileView::map(&f, 0, page).expect("map again");
        assert_eq!(v.bytes(), &data[..page]);
        assert!(v.intact());
    }

    #[test]
    fn views_release_their_slots() {
        let f = file_of(&pattern(4096));
        for _ in 0..(VIEW_SLOTS * 2) {
            let v = FileView::map(&f, 0, 4096).expect("map");
            assert_eq!(v.bytes().len(), 4096);
        }
        let many: Vec<FileView> = (0..8)
            .map(|_| FileView::map(&f, 0, 4096).expect("map"))
            .collect();
        assert_eq!(many.len(), 8);
    }

    #[test]
    fn an_empty_or_oversized_range_is_refused_before_mapping() {
        let f = file_of(&pattern(4096));
        assert_eq!(
            FileView::map(&f, 0, 0).err().map(|e| e.kind()),
            Some(io::ErrorKind::InvalidInput)
        );
        assert_eq!(
            FileView::map(&f, 0, VIEW_MAX_BYTES + 1)
                .err()
                .map(|e| e.kind()),
            Some(io::ErrorKind::InvalidInput)
        );
        // A range past the end maps (the pages do not exist yet) and reads as the guard
        // makes it: not intact.
        let v = FileView::map(&f, 8192, 4096).expect("map past the end");
        // Read through black_box: an unused sum is optimised away in a release build (CI's
        // tests run with --release), and then no page is touched.
        let sum = std::hint::black_box(v.bytes())
            .iter()
            .map(|&b| b as u64)
            .sum::<u64>();
        std::hint::black_box(sum);
        assert!(!v.intact());
        let _ = f.write_at(b"x", 0);
    }
}
