//! Sealing copy block bodies (`cp --encrypt`): ChaCha20-Poly1305 under the session's `aead`
//! subkey ([`tcptune_proto::keys::SessionKeys::aead_key`]).
//!
//! Why RustCrypto's `chacha20poly1305` (0.10), and why here, not in `tcptune-proto`: it is
//! pure Rust (no C toolchain, builds wherever the rest does), constant time (no table
//! lookups or branches on the key or data), uses SIMD (AVX2/SSE2/NEON) where the CPU has it,
//! and is of the RustCrypto family the project already uses (`sha2`, `hmac`, `hkdf`). The
//! protocol crate takes keys and random bytes as inputs and holds no cipher.
//!
//! A sealed block on the wire is the 24-byte record header, then the ciphertext of the body
//! (as long as the body), then the 16-byte Poly1305 tag, then the record's trailer (the
//! chaining value and its keyed-BLAKE3 tag, both over the plaintext, as before). The
//! associated data is the record's header, so a body moved under another header (another
//! file, offset, length or round) fails to open.
//!
//! # The nonce (96 bits, never reused under one key)
//!
//! ```text
//! byte 0               4              8             12
//! | d | block index    | file         | round       |
//!   ^ 1 bit  31 bits     32 bits        32 bits        (all big-endian)
//! ```
//!
//! * `d`: the direction: 0 for blocks the client sends (a push), 1 for blocks the server
//!   sends (a pull). Both ends hold the same key, so the two directions must never share a
//!   nonce.
//! * the block index: the block's offset divided by the copy's block size (below 2^31:
//!   [`Nonce::new`] refuses more, 2 PiB at the smallest 1 MiB block).
//! * the file: the manifest entry.
//! * the round: a block sent again is sent in a later round, so its nonce differs from the
//!   first sending's even though its plaintext may differ (a file changed in between).
//!
//! Within one session, one direction carries one manifest, and a (file, block, round) is
//! sent at most once, so every nonce is used at most once under the session's key; a new
//! session has a new key.

use chacha20poly1305::aead::{AeadInPlace, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Key, Tag};
use tcptune_proto::copy::wire::Header;
use tcptune_proto::files::BLOCK_SIZE;

/// Length of the Poly1305 tag that follows a sealed body.
pub(crate) const AEAD_TAG_LEN: usize = 16;

/// Which end sealed a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    /// The client sends (a push).
    ClientToServer = 0,
    /// The server sends (a pull).
    ServerToClient = 1,
}

/// A block's nonce (see the module documentation for its layout).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Nonce([u8; 12]);

/// Why a block could not be sealed or opened.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SealError {
    /// The block index does not fit in the nonce's 31 bits.
    #[error("block {index} of file {file} is past the 2^31 blocks a sealed copy can number")]
    TooManyBlocks {
        /// The manifest entry.
        file: u32,
        /// The block index.
        index: u64,
    },
    /// The block size is zero.
    #[error("a sealed copy needs a block size above zero")]
    ZeroBlockSize,
    /// The body is shorter than its tag, or its tag is wrong: it is not what the peer
    /// sealed (corrupted, forged or moved): the block counts as corrupt.
    #[error("a sealed block failed to open (corrupted, forged or moved)")]
    Open,
}

impl Nonce {
    /// The nonce of the block at `offset` (a multiple of `block_size`) of `file` in `round`,
    /// sent in `dir`.
    pub(crate) fn new(
        dir: Direction,
        file: u32,
        offset: u64,
        block_size: u64,
        round: u32,
    ) -> Result<Nonce, SealError> {
        if block_size == 0 {
            return Err(SealError::ZeroBlockSize);
        }
        let index = offset / block_size;
        if index >= 1 << 31 {
            return Err(SealError::TooManyBlocks { file, index });
        }
        let first = ((dir as u32) << 31) | index as u32;
        let mut n = [0u8; 12];
        n[0..4].copy_from_slice(&first.to_be_bytes());
        n[4..8].copy_from_slice(&file.to_be_bytes());
        n[8..12].copy_from_slice(&round.to_be_bytes());
        Ok(Nonce(n))
    }

    /// The nonce's 12 bytes.
    pub(crate) fn bytes(&self) -> [u8; 12] {
        self.0
    }
}

/// The cipher of one session's blocks. Its `Debug` shows nothing of the key.
#[derive(Clone)]
pub(crate) struct BlockCipher(ChaCha20Poly1305);

impl std::fmt::Debug for BlockCipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BlockCipher(..)")
    }
}

impl BlockCipher {
    /// The cipher under the session's `aead` subkey.
    pub(crate) fn new(key: &[u8; 32]) -> BlockCipher {
        BlockCipher(ChaCha20Poly1305::new(Key::from_slice(key)))
    }

    /// Encrypt `body` in place with `nonce`, the record header `header` as associated data;
    /// answers the tag that follows the body on the wire.
    pub(crate) fn seal(
        &self,
        nonce: &Nonce,
        header: &[u8],
        body: &mut [u8],
    ) -> Result<[u8; AEAD_TAG_LEN], SealError> {
        let tag = self
            .0
            .encrypt_in_place_detached(nonce.0.as_ref().into(), header, body)
            .map_err(|_| SealError::Open)?;
        let mut t = [0u8; AEAD_TAG_LEN];
        t.copy_from_slice(&tag);
        Ok(t)
    }

    /// Decrypt `body` in place if `tag` is right for it, `nonce` and `header`; otherwise
    /// [`SealError::Open`] and `body` is left as received (never to be written).
    pub(crate) fn open(
        &self,
        nonce: &Nonce,
        header: &[u8],
        body: &mut [u8],
        tag: &[u8; AEAD_TAG_LEN],
    ) -> Result<(), SealError> {
        self.0
            .decrypt_in_place_detached(nonce.0.as_ref().into(), header, body, Tag::from_slice(tag))
            .map_err(|_| SealError::Open)
    }
}

/// One end's sealing of a copy's blocks: the cipher and the direction the blocks go (both
/// ends use the same: a push's blocks are the client's, a pull's the server's). The nonce
/// is derived from the record's header, which is also the associated data.
#[derive(Clone, Debug)]
pub(crate) struct Sealing {
    cipher: BlockCipher,
    dir: Direction,
}

impl Sealing {
    /// The sealing of a session's blocks under its `aead` subkey; `pull` when the server
    /// sends them.
    pub(crate) fn new(key: &[u8; 32], pull: bool) -> Sealing {
        Sealing {
            cipher: BlockCipher::new(key),
            dir: if pull {
                Direction::ServerToClient
            } else {
                Direction::ClientToServer
            },
        }
    }

    fn nonce(&self, h: &Header) -> Result<Nonce, SealError> {
        Nonce::new(self.dir, h.file, h.offset, BLOCK_SIZE, h.round)
    }

    /// Seal the body of the block record `h` in place; answers the tag that follows it.
    pub(crate) fn seal(
        &self,
        h: &Header,
        body: &mut [u8],
    ) -> Result<[u8; AEAD_TAG_LEN], SealError> {
        self.cipher.seal(&self.nonce(h)?, &h.encode(), body)
    }

    /// Open the body of the block record `h` in place, or [`SealError::Open`] (the body is
    /// then not the block: never to be written).
    pub(crate) fn open(
        &self,
        h: &Header,
        body: &mut [u8],
        tag: &[u8; AEAD_TAG_LEN],
    ) -> Result<(), SealError> {
        self.cipher.open(&self.nonce(h)?, &h.encode(), body, tag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use tcptune_proto::copy::wire::{Header, Tag as RecordTag};

    const BS: u64 = 1 << 20;

    fn header(file: u32, offset: u64, len: u32, round: u32) -> [u8; 24] {
        Header {
            tag: RecordTag::Block,
            file,
            offset,
            len,
            round,
        }
        .encode()
    }

    #[test]
    fn nonces_differ_for_every_direction_file_block_and_round() {
        let dirs = [Direction::ClientToServer, Direction::ServerToClient];
        let files = [0u32, 1, 2, 0x7fff_ffff, 0x8000_0000, u32::MAX];
        let blocks = [0u64, 1, 2, 255, 256, (1 << 31) - 1];
        let rounds = [0u32, 1, 2, 0x8000_0000, u32::MAX];
        let mut seen = HashSet::new();
        for &d in &dirs {
            for &f in &files {
                for &b in &blocks {
                    for &r in &rounds {
                        let n = Nonce::new(d, f, b * BS, BS, r).expect("nonce");
                        assert!(seen.insert(n.bytes()), "reused: {d:?} {f} {b} {r}");
                    }
                }
            }
        }
        assert_eq!(
            seen.len(),
            dirs.len() * files.len() * blocks.len() * rounds.len()
        );
    }

    #[test]
    fn nonce_layout_is_direction_bit_block_file_round_big_endian() {
        let n = Nonce::new(
            Direction::ServerToClient,
            0x0102_0304,
            5 * BS,
            BS,
            0x0a0b_0c0d,
        );
        assert_eq!(
            n.expect("nonce").bytes(),
            [0x80, 0, 0, 5, 1, 2, 3, 4, 0x0a, 0x0b, 0x0c, 0x0d]
        );
        let n = Nonce::new(Direction::ClientToServer, 0, ((1 << 31) - 1) * BS, BS, 0);
        assert_eq!(
            n.expect("nonce").bytes(),
            [0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0]
        );
    }

    #[test]
    fn nonce_refuses_a_block_index_that_would_reach_the_direction_bit() {
        let r = Nonce::new(Direction::ClientToServer, 3, (1 << 31) * BS, BS, 0);
        assert_eq!(
            r,
            Err(SealError::TooManyBlocks {
                file: 3,
                index: 1 << 31
            })
        );
        assert_eq!(
            Nonce::new(Direction::ClientToServer, 3, 0, 0, 0),
            Err(SealError::ZeroBlockSize)
        );
    }

    fn sealed(c: &BlockCipher, file: u32, block: u64, plain: &[u8]) -> (Vec<u8>, [u8; 16]) {
        let n = Nonce::new(Direction::ClientToServer, file, block * BS, BS, 0).expect("nonce");
        let mut body = plain.to_vec();
        let h = header(file, block * BS, plain.len() as u32, 0);
        let tag = c.seal(&n, &h, &mut body).expect("seal");
        (body, tag)
    }

    #[test]
    fn a_sealed_block_opens_to_its_plaintext_and_hides_it() {
        let c = BlockCipher::new(&[7; 32]);
        let plain = b"tcptune ".repeat(512);
        let (mut body, tag) = sealed(&c, 1, 2, &plain);
        assert_eq!(body.len(), plain.len());
        assert_ne!(body, plain);
        assert!(
            !body.windows(8).any(|w| w == b"tcptune "),
            "the pattern shows through"
        );
        let n = Nonce::new(Direction::ClientToServer, 1, 2 * BS, BS, 0).expect("nonce");
        c.open(
            &n,
            &header(1, 2 * BS, plain.len() as u32, 0),
            &mut body,
            &tag,
        )
        .expect("open");
        assert_eq!(body, plain);
    }

    #[test]
    fn a_flipped_byte_a_wrong_key_or_a_swapped_header_fails_to_open() {
        let c = BlockCipher::new(&[7; 32]);
        let plain = vec![0x5au8; 4096];
        let len = plain.len() as u32;
        let (body, tag) = sealed(&c, 1, 2, &plain);
        let n = Nonce::new(Direction::ClientToServer, 1, 2 * BS, BS, 0).expect("nonce");
        let h = header(1, 2 * BS, len, 0);

        for i in [0, 100, body.len() - 1] {
            let mut b = body.clone();
            b[i] ^= 1;
            assert_eq!(
                c.open(&n, &h, &mut b, &tag),
                Err(SealError::Open),
                "byte {i}"
            );
        }
        let mut t = tag;
        t[15] ^= 0x80;
        assert_eq!(c.open(&n, &h, &mut body.clone(), &t), Err(SealError::Open));
        let wrong = BlockCipher::new(&[8; 32]);
        assert_eq!(
            wrong.open(&n, &h, &mut body.clone(), &tag),
            Err(SealError::Open)
        );
        // The header of another block (its nonce too, as an honest receiver derives it
        // from the header it read), of another file, and of another round.
        for (f, b, r) in [(1u32, 3u64, 0u32), (2, 2, 0), (1, 2, 1)] {
            let n2 = Nonce::new(Direction::ClientToServer, f, b * BS, BS, r).expect("nonce");
            let h2 = header(f, b * BS, len, r);
            assert_eq!(
                c.open(&n2, &h2, &mut body.clone(), &tag),
                Err(SealError::Open),
                "moved to {f} {b} {r}"
            );
            // Same nonce, other header: the associated data alone refuses it.
            assert_eq!(
                c.open(&n, &h2, &mut body.clone(), &tag),
                Err(SealError::Open)
            );
        }
        // The other direction's nonce.
        let back = Nonce::new(Direction::ServerToClient, 1, 2 * BS, BS, 0).expect("nonce");
        assert_eq!(
            c.open(&back, &h, &mut body.clone(), &tag),
            Err(SealError::Open)
        );
        // And the untouched block still opens.
        let mut ok = body.clone();
        assert_eq!(c.open(&n, &h, &mut ok, &tag), Ok(()));
        assert_eq!(ok, plain);
        assert_eq!(format!("{c:?}"), "BlockCipher(..)");
    }

    #[test]
    fn the_cipher_is_rfc8439_chacha20_poly1305() {
        // RFC 8439 section 2.8.2's AEAD test vector.
        let key: Vec<u8> = (0x80u8..=0x9f).collect();
        let mut k = [0u8; 32];
        k.copy_from_slice(&key);
        let nonce = Nonce([
            0x07, 0, 0, 0, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47,
        ]);
        let aad = [
            0x50, 0x51, 0x52, 0x53, 0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7,
        ];
        let mut body = b"Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.".to_vec();
        let tag = BlockCipher::new(&k)
            .seal(&nonce, &aad, &mut body)
            .expect("seal");
        assert_eq!(&body[..4], &[0xd3, 0x1a, 0x8d, 0x34]);
        assert_eq!(
            tag,
            [
                0x1a, 0xe1, 0x0b, 0x59, 0x4f, 0x09, 0xe2, 0x6a, 0x7e, 0x90, 0x2e, 0xcb, 0xd0, 0x60,
                0x06, 0x91
            ]
        );
    }

    #[test]
    fn sealing_derives_the_nonce_from_the_header_and_the_two_directions_differ() {
        let push = Sealing::new(&[9; 32], false);
        let pull = Sealing::new(&[9; 32], true);
        let h = Header {
            tag: RecordTag::Block,
            file: 4,
            offset: 3 * BLOCK_SIZE,
            len: 64,
            round: 1,
        };
        let plain = vec![0xabu8; 64];
        let mut a = plain.clone();
        let ta = push.seal(&h, &mut a).expect("seal");
        let mut b = plain.clone();
        let tb = pull.seal(&h, &mut b).expect("seal");
        assert_ne!(a, b, "one key, two directions: two keystreams");
        // The receiving end of a push opens it; the other direction's does not.
        assert_eq!(pull.open(&h, &mut a.clone(), &ta), Err(SealError::Open));
        let mut opened = a.clone();
        push.open(&h, &mut opened, &ta).expect("open");
        assert_eq!(opened, plain);
        // Another round of the same block (a resend) has another keystream.
        let h2 = Header { round: 2, ..h };
        let mut c = plain.clone();
        push.seal(&h2, &mut c).expect("seal");
        assert_ne!(a, c);
        assert_eq!(push.open(&h2, &mut a.clone(), &ta), Err(SealError::Open));
        let _ = tb;
    }
}
