//! Session keys: every session has one, and every data connection and copy block proves it.
//!
//! The client's `Hello` carries an ephemeral X25519 public key, the server's answer that
//! admits the session (`Accepted`, or `Measure` for an advice session that measures) carries
//! the server's. Both ends then derive (RFC 5869, HKDF-SHA256):
//!
//! ```text
//! ikm  = x25519(own secret, peer public) || SHA-256(shared secret)   (the hash only with one)
//! salt = "tcptune-session-v3"
//! info = token || client public || server public
//! session key = HKDF(ikm, salt, info)         32 bytes
//! subkey(label) = HKDF-Expand(session key, label)
//! ```
//!
//! with the subkeys `data-hello` (the data connection's [`crate::wire::DataHello`] tag:
//! HMAC-SHA256 truncated to 16 bytes), `blocks` (each copy block's tag: BLAKE3's keyed mode,
//! see [`BlockKey`]) and `aead` (the key that seals block bodies in a copy that asks for it,
//! `cp --encrypt`: handed to the driver, which holds the cipher; see [`crate::copy::wire`]).
//!
//! What this protects, honestly:
//!
//! * **With a shared secret** (a `--secret-file`, or the one-time key agreed over ssh): a
//!   man in the middle who swaps the public keys still lacks the secret, so it cannot compute
//!   the keys: a data connection it opens is refused and a block it forges fails its tag.
//!   The client's proof in `Hello` also covers its public key (see [`crate::auth`]).
//! * **Anonymous sessions** (no secret): protected against a passive eavesdropper (one who
//!   reads the token off the wire and opens its own stream, or injects blocks), not against
//!   an active man in the middle, who can run an exchange with each end. Nothing can be, with
//!   no secret and no known server key.
//! * The data itself is not encrypted by default (integrity, not secrecy, as GridFTP's
//!   data channel and bbcp by default); `cp --encrypt` seals every block body. The control
//!   messages and the copy's manifest (paths, sizes, times) are never encrypted.
//!
//! An all-zero X25519 result (a low-order public key: the peer did not contribute) is
//! refused, with or without a secret: an honest peer never produces one.
//!
//! The X25519 exchange itself (and any randomness) is the driver's (the transfer crate uses
//! x25519-dalek): this crate only takes the public keys and the shared result as inputs.

use crate::auth::Secret;
use crate::wire::Token;
use hkdf::Hkdf;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Length of an X25519 public key (and of the exchange's result).
pub const KEY_SHARE_LEN: usize = 32;
/// Length of a data hello's tag and of a copy block's tag.
pub const TAG_LEN: usize = 16;
/// The HKDF salt: the protocol and its version.
const SALT: &[u8] = b"tcptune-session-v3";

/// An X25519 public key.
pub type KeyShare = [u8; KEY_SHARE_LEN];

/// The keys of one session (both ends derive the same). Its `Debug` shows nothing of them.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionKeys {
    data_hello: [u8; 32],
    blocks: BlockKey,
    aead: [u8; 32],
}

impl std::fmt::Debug for SessionKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionKeys(..)")
    }
}

/// Why no keys could be derived.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The X25519 result is all zeros: the peer's public key has a low order.
    #[error("the peer's key share is not contributory (a low-order X25519 public key)")]
    NonContributory,
}

impl SessionKeys {
    /// Derive a session's keys from the X25519 result `dh`, the shared secret if there is
    /// one, the token and both public keys (see the module documentation).
    pub fn derive(
        dh: &[u8; 32],
        secret: Option<&Secret>,
        token: &Token,
        client: &KeyShare,
        server: &KeyShare,
    ) -> Result<SessionKeys, KeyError> {
        if ct_eq(dh, &[0u8; 32]) {
            return Err(KeyError::NonContributory);
        }
        let mut ikm = Vec::with_capacity(64);
        ikm.extend_from_slice(dh);
        if let Some(s) = secret {
            ikm.extend_from_slice(&s.digest());
        }
        let mut info = Vec::with_capacity(16 + 64);
        info.extend_from_slice(&token.0);
        info.extend_from_slice(client);
        info.extend_from_slice(server);
        let mut session = [0u8; 32];
        Hkdf::<Sha256>::new(Some(SALT), &ikm)
            .expand(&info, &mut session)
            .unwrap_or_else(|_| unreachable!("32 bytes is within HKDF-SHA256's output"));
        let sub = |label: &[u8]| {
            let mut k = [0u8; 32];
            Hkdf::<Sha256>::from_prk(&session)
                .unwrap_or_else(|_| unreachable!("a 32-byte PRK is long enough"))
                .expand(label, &mut k)
                .unwrap_or_else(|_| unreachable!("32 bytes is within HKDF-SHA256's output"));
            k
        };
        Ok(SessionKeys {
            data_hello: sub(b"data-hello"),
            blocks: BlockKey(sub(b"blocks")),
            aead: sub(b"aead"),
        })
    }

    /// The tag of a data hello whose first 32 bytes are `first`.
    pub fn data_hello_tag(&self, first: &[u8]) -> [u8; TAG_LEN] {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.data_hello)
            .unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
        m.update(first);
        let full = m.finalize().into_bytes();
        let mut t = [0u8; TAG_LEN];
        t.copy_from_slice(&full[..TAG_LEN]);
        t
    }

    /// The key of the copy's block tags.
    pub fn block_key(&self) -> BlockKey {
        self.blocks.clone()
    }

    /// The key that seals a copy's block bodies (AEAD, `FileJob::encrypt`).
    pub fn aead_key(&self) -> [u8; 32] {
        self.aead
    }
}

/// What a copy's engine needs of the session's keys: the block key, and the key that seals
/// block bodies when the job asks for it (`FileJob::encrypt`). Its `Debug` shows nothing
/// of them.
#[derive(Clone, PartialEq, Eq)]
pub struct CopyKeys {
    /// The key of the block tags.
    pub block: BlockKey,
    /// The session's `aead` subkey, when the blocks are sealed.
    pub aead: Option<[u8; 32]>,
}

impl std::fmt::Debug for CopyKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CopyKeys(.., sealed: {})", self.aead.is_some())
    }
}

/// The key of a copy's block tags: `tag = BLAKE3-keyed(key, header || checksum)`, the
/// first [`TAG_LEN`] bytes. The header names the record's kind, file, offset, length and
/// round, the checksum is the block's BLAKE3 chaining value (or the file's digest): a
/// forger who hashes what it sends still cannot tag it.
#[derive(Clone, PartialEq, Eq)]
pub struct BlockKey([u8; 32]);

impl std::fmt::Debug for BlockKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BlockKey(..)")
    }
}

impl BlockKey {
    /// A key from its bytes (tests, and a driver that derived it elsewhere).
    pub fn from_bytes(k: [u8; 32]) -> BlockKey {
        BlockKey(k)
    }

    /// The tag of the record with this header and checksum.
    pub fn tag(&self, header: &[u8], checksum: &[u8; 32]) -> [u8; TAG_LEN] {
        let mut h = blake3::Hasher::new_keyed(&self.0);
        h.update(header);
        h.update(checksum);
        let mut t = [0u8; TAG_LEN];
        t.copy_from_slice(&h.finalize().as_bytes()[..TAG_LEN]);
        t
    }

    /// Whether `tag` is right for this header and checksum (constant time).
    pub fn verify(&self, header: &[u8], checksum: &[u8; 32], tag: &[u8; TAG_LEN]) -> bool {
        ct_eq(&self.tag(header, checksum), tag)
    }
}

/// The server's half of each session's X25519 exchange: the driver's, which holds the
/// X25519 implementation and the randomness (this crate has neither).
pub trait KeyExchange: Send {
    /// Answer the client's public key `client` with a fresh ephemeral key pair: this end's
    /// public key and the X25519 result (all zeros when `client` has a low order).
    fn respond(&mut self, client: &KeyShare) -> (KeyShare, [u8; 32]);
}

/// Constant-time equality of two byte strings of the same length.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    std::hint::black_box(diff) == 0
}

/// A real X25519 exchange for this crate's tests (x25519-dalek is a dev-dependency only).
#[cfg(test)]
pub(crate) mod test_kx {
    use super::{KeyExchange, KeyShare};
    use x25519_dalek::{PublicKey, StaticSecret};

    /// An ephemeral key pair from a seed byte (tests are deterministic).
    pub(crate) fn pair(seed: u8) -> (StaticSecret, KeyShare) {
        let s = StaticSecret::from([seed.max(1); 32]);
        let p = PublicKey::from(&s).to_bytes();
        (s, p)
    }

    /// X25519 of `secret` with `peer`.
    pub(crate) fn dh(secret: &StaticSecret, peer: &KeyShare) -> [u8; 32] {
        secret.diffie_hellman(&PublicKey::from(*peer)).to_bytes()
    }

    /// The server's side: a key pair per session, from the client's key share and a salt
    /// (so that a test can compute the server's half too: see [`client_keys`]).
    pub(crate) struct Server(pub(crate) u8);

    /// The key pair [`Server`] with `salt` answers `client` with.
    pub(crate) fn server_pair(client: &KeyShare, salt: u8) -> (StaticSecret, KeyShare) {
        pair(client[0].wrapping_add(salt))
    }

    impl KeyExchange for Server {
        fn respond(&mut self, client: &KeyShare) -> (KeyShare, [u8; 32]) {
            let (s, p) = server_pair(client, self.0);
            (p, dh(&s, client))
        }
    }

    /// The keys of the client with key pair `pair(seed)` and session `token`, answered by
    /// [`Server`] with `salt`.
    pub(crate) fn client_keys(
        seed: u8,
        salt: u8,
        secret: Option<&crate::auth::Secret>,
        token: &crate::wire::Token,
    ) -> super::SessionKeys {
        let (cs, cp) = pair(seed);
        let (_, sp) = server_pair(&cp, salt);
        super::SessionKeys::derive(&dh(&cs, &sp), secret, token, &cp, &sp)
            .unwrap_or_else(|e| panic!("test keys: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(dh: u8, secret: Option<&[u8]>, client: u8, server: u8) -> SessionKeys {
        let s = secret.and_then(Secret::from_bytes);
        SessionKeys::derive(
            &[dh; 32],
            s.as_ref(),
            &Token([7; 16]),
            &[client; 32],
            &[server; 32],
        )
        .expect("keys")
    }

    #[test]
    fn both_ends_derive_the_same_keys_and_any_input_changes_them() {
        let a = keys(1, Some(b"0123456789abcdef0123"), 2, 3);
        assert_eq!(a, keys(1, Some(b"0123456789abcdef0123"), 2, 3));
        let others = [
            keys(1, Some(b"0123456789abcdef0124"), 2, 3),
            keys(1, None, 2, 3),
            keys(9, Some(b"0123456789abcdef0123"), 2, 3),
            keys(1, Some(b"0123456789abcdef0123"), 3, 2),
            keys(1, Some(b"0123456789abcdef0123"), 2, 4),
        ];
        for o in &others {
            assert_ne!(&a, o);
            assert_ne!(a.data_hello_tag(b"x"), o.data_hello_tag(b"x"));
            assert_ne!(a.aead_key(), o.aead_key());
        }
        let token = SessionKeys::derive(&[1; 32], None, &Token([8; 16]), &[2; 32], &[3; 32]);
        assert_ne!(
            token.expect("keys"),
            keys(1, None, 2, 3),
            "bound to the token"
        );
        assert_eq!(format!("{a:?}"), "SessionKeys(..)");
        assert_eq!(format!("{:?}", a.block_key()), "BlockKey(..)");
    }

    #[test]
    fn subkeys_differ_from_each_other() {
        let k = keys(1, None, 2, 3);
        assert_ne!(k.data_hello, k.blocks.0);
        assert_ne!(k.blocks.0, k.aead);
        assert_ne!(k.data_hello, k.aead);
    }

    #[test]
    fn a_non_contributory_exchange_is_refused() {
        let r = SessionKeys::derive(&[0; 32], None, &Token([7; 16]), &[0; 32], &[3; 32]);
        assert_eq!(r, Err(KeyError::NonContributory));
    }

    #[test]
    fn block_tags_bind_the_header_and_checksum_and_the_key() {
        let k = keys(1, None, 2, 3).block_key();
        let t = k.tag(&[1; 24], &[5; 32]);
        assert!(k.verify(&[1; 24], &[5; 32], &t));
        assert!(!k.verify(&[2; 24], &[5; 32], &t));
        assert!(!k.verify(&[1; 24], &[6; 32], &t));
        assert!(!keys(4, None, 2, 3)
            .block_key()
            .verify(&[1; 24], &[5; 32], &t));
        // BLAKE3's keyed mode, as the reference implementation computes it.
        let mut msg = vec![1u8; 24];
        msg.extend_from_slice(&[5; 32]);
        assert_eq!(&blake3::keyed_hash(&k.0, &msg).as_bytes()[..TAG_LEN], &t);
    }

    #[test]
    fn hkdf_matches_rfc5869_test_case_1() {
        let ikm = [0x0b; 22];
        let salt: Vec<u8> = (0u8..=0x0c).collect();
        let info: Vec<u8> = (0xf0u8..=0xf9).collect();
        let mut okm = [0u8; 42];
        Hkdf::<Sha256>::new(Some(&salt), &ikm)
            .expand(&info, &mut okm)
            .expect("expand");
        assert_eq!(
            crate::wire::to_hex(&okm),
            "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865"
        );
    }
}
