//! Checksums of blocks and whole files: BLAKE3, as a tree.
//!
//! BLAKE3 (the `blake3` crate, by the algorithm's authors: SIMD on every x86 and ARM CPU,
//! several GB/s on one core, a cryptographic hash so that no accident and no crafted block
//! passes) is itself a binary tree over 1 KiB chunks. A block of a file that is a power of
//! two of chunks long and starts at a multiple of its length is a subtree of that tree:
//! its *chaining value* (`finalize_non_root` with the block's input offset) is the block's
//! checksum, and the file's digest is the tree's root, merged from the blocks' chaining
//! values without reading the file again ([`file_digest`]). The digest is therefore
//! exactly what `b3sum FILE` prints, at both ends, whichever streams carried which blocks
//! and whether a block came over the network or was already there from an interrupted run.
//!
//! A file of one block (at most the block size) has one checksum, its ordinary BLAKE3 hash,
//! which is also its digest.
//!
//! XXH3 would be faster still, but it is not made to resist a crafted collision, and a
//! receiver that resumes trusts a block because its checksum matches.

use blake3::hazmat::{merge_subtrees_non_root, merge_subtrees_root, HasherExt, Mode};

/// A checksum or digest.
pub type Cv = [u8; 32];

/// Hashes one block of a file as its bytes come (in pieces, in order).
#[derive(Clone, Debug)]
pub struct BlockHasher {
    hasher: blake3::Hasher,
    root: bool,
    empty: bool,
}

impl BlockHasher {
    /// The block at `offset` of a file of `file_size` bytes cut into blocks of
    /// `block_size` (a power of two of at least 1 KiB).
    pub fn new(file_size: u64, block_size: u64, offset: u64) -> BlockHasher {
        debug_assert!(block_size.is_power_of_two() && block_size >= 1024);
        let root = file_size <= block_size;
        let mut hasher = blake3::Hasher::new();
        if !root {
            hasher.set_input_offset(offset);
        }
        BlockHasher {
            hasher,
            root,
            empty: true,
        }
    }

    /// More of the block's bytes.
    pub fn update(&mut self, data: &[u8]) {
        self.empty &= data.is_empty();
        self.hasher.update(data);
    }

    /// The block's checksum. A block below the root that got no bytes (a file that shrank
    /// while it was read: no real block is empty) has no checksum in BLAKE3's tree (its
    /// hasher would panic): it gets all zeros, which no block's data hashes to.
    pub fn finish(&self) -> Cv {
        if !self.root && self.empty {
            return [0; 32];
        }
        if self.root {
            *self.hasher.finalize().as_bytes()
        } else {
            self.hasher.finalize_non_root()
        }
    }
}

/// The checksum of a whole block.
pub fn block_cv(file_size: u64, block_size: u64, offset: u64, data: &[u8]) -> Cv {
    let mut h = BlockHasher::new(file_size, block_size, offset);
    h.update(data);
    h.finish()
}

/// The digest of a file from its blocks' checksums, in order (`b3sum`'s output). An empty
/// file has no blocks.
pub fn file_digest(cvs: &[Cv]) -> Cv {
    match cvs {
        [] => *blake3::hash(b"").as_bytes(),
        [one] => *one,
        _ => merge(cvs, true),
    }
}

/// BLAKE3's tree: the left subtree holds the largest power of two of chunks that leaves at
/// least one for the right; with blocks of a power of two of chunks that is the largest
/// power of two of blocks below their count.
fn merge(cvs: &[Cv], root: bool) -> Cv {
    if cvs.len() == 1 {
        return cvs[0];
    }
    let split = 1usize << (usize::BITS - 1 - (cvs.len() - 1).leading_zeros());
    let left = merge(&cvs[..split], false);
    let right = merge(&cvs[split..], false);
    if root {
        *merge_subtrees_root(&left, &right, Mode::Hash).as_bytes()
    } else {
        merge_subtrees_non_root(&left, &right, Mode::Hash)
    }
}

/// One digest over the digests of all files of a copy, in manifest order: what both ends
/// compare at the end.
#[derive(Debug, Default)]
pub struct TreeDigest(blake3::Hasher);

impl TreeDigest {
    /// Add file `id`'s digest.
    pub fn add(&mut self, id: u32, digest: &Cv) {
        self.0.update(&id.to_le_bytes());
        self.0.update(digest);
    }

    /// The digest, hex.
    pub fn hex(&self) -> String {
        self.0.finalize().to_hex().to_string()
    }
}

/// Lower-case hex of a checksum.
pub fn hex(cv: &Cv) -> String {
    crate::wire::to_hex(cv)
}

/// A checksum from hex.
pub fn from_hex(s: &str) -> Option<Cv> {
    crate::wire::from_hex::<32>(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u32).wrapping_mul(2_654_435_761) as u8)
            .collect()
    }

    fn digest_by_blocks(d: &[u8], block: u64) -> Cv {
        let size = d.len() as u64;
        let cvs: Vec<Cv> = d
            .chunks(block as usize)
            .enumerate()
            .map(|(i, c)| block_cv(size, block, i as u64 * block, c))
            .collect();
        file_digest(&cvs)
    }

    #[test]
    fn the_digest_merged_from_blocks_is_b3sum_of_the_file() {
        for block in [1024u64, 4096] {
            let b = block as usize;
            for n in [
                0,
                1,
                1023,
                b - 1,
                b,
                b + 1,
                2 * b,
                3 * b - 7,
                3 * b,
                4 * b,
                4 * b + 1,
                5 * b + 3,
                7 * b,
                8 * b,
                9 * b + 1000,
                17 * b + 1,
            ] {
                let d = data(n);
                assert_eq!(
                    digest_by_blocks(&d, block),
                    *blake3::hash(&d).as_bytes(),
                    "{n} bytes in blocks of {block}"
                );
            }
        }
    }

    #[test]
    fn a_block_hashed_in_pieces_equals_one_hashed_whole_and_position_matters() {
        let d = data(3 * 1024);
        let mut h = BlockHasher::new(10 * 1024, 1024, 2048);
        for piece in d[..1024].chunks(100) {
            h.update(piece);
        }
        assert_eq!(h.finish(), block_cv(10 * 1024, 1024, 2048, &d[..1024]));
        assert_ne!(
            block_cv(10 * 1024, 1024, 2048, &d[..1024]),
            block_cv(10 * 1024, 1024, 3072, &d[..1024]),
            "the same bytes at another offset have another checksum"
        );
        let cv = block_cv(5, 1024, 0, b"hello");
        assert_eq!(from_hex(&hex(&cv)), Some(cv));
    }

    #[test]
    fn a_block_that_got_no_bytes_has_a_checksum_that_matches_nothing_instead_of_a_panic() {
        let h = BlockHasher::new(10 * 1024, 1024, 2048);
        assert_eq!(h.finish(), [0; 32]);
        assert_ne!(block_cv(10 * 1024, 1024, 2048, &[0; 1024]), [0; 32]);
    }

    #[test]
    fn tree_digests_depend_on_every_file_and_its_place() {
        let (a, b) = ([1u8; 32], [2u8; 32]);
        let mut t1 = TreeDigest::default();
        t1.add(0, &a);
        t1.add(1, &b);
        let mut t2 = TreeDigest::default();
        t2.add(0, &b);
        t2.add(1, &a);
        assert_ne!(t1.hex(), t2.hex());
    }
}
