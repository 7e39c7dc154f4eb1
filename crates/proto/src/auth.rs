//! Shared-secret authentication of the control connection, without a round trip in the
//! usual case.
//!
//! * **Proof in `Hello`** ([`Secret::prove`]): the client sends a fresh random 32-byte nonce,
//!   its clock (Unix seconds) and `HMAC-SHA256(secret, "tcptune-auth-v3" || nonce || time ||
//!   token || key share)`, the key share being its X25519 public key (see [`crate::keys`]). The server accepts it when the MAC verifies (constant time), the time is within
//!   [`CLOCK_SKEW`] of its own clock and the nonce was not seen within that window (a bounded
//!   replay cache). The token is covered, so a captured proof cannot open another session; the key share
//!   is covered, so a man in the middle cannot swap it under a proof.
//! * **Challenge** ([`Secret::answer`]): when the clocks disagree or the nonce cannot be
//!   checked, the server sends a random challenge and the client answers with
//!   `HMAC-SHA256(secret, "tcptune-challenge-v2" || challenge || token)`: one round trip more.
//!
//! The secret never crosses the wire. This authenticates the client only; the data is not
//! encrypted. A server that fails a client's proof makes that address wait before its next
//! try (see the server's backoff).

use hmac::{Hmac, Mac};
use sha2::Sha256;

const PROOF_CONTEXT: &[u8] = b"tcptune-auth-v3";
const CHALLENGE_CONTEXT: &[u8] = b"tcptune-challenge-v2";

/// How far the client's clock may be from the server's for a proof without a challenge.
pub const CLOCK_SKEW: std::time::Duration = std::time::Duration::from_secs(300);

/// The least strength a shared secret must have, bits (see [`check_strength`]).
pub const MIN_SECRET_BITS: u32 = 128;

/// Why a secret is too weak to use: what it holds, read as [`check_strength`] reads it, and
/// what it would need.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{have} {unit}, fewer than the {need} that carry {MIN_SECRET_BITS} bits")]
pub struct WeakSecret {
    /// Its length, in `unit`s.
    pub have: usize,
    /// The least length, in `unit`s.
    pub need: usize,
    /// `hex digits`, `characters` or `bytes`.
    pub unit: &'static str,
}

/// Whether `b` (a secret file's contents, before trimming) can carry [`MIN_SECRET_BITS`]
/// bits. Surrounding whitespace (a trailing newline) does not count. The rule, by what the
/// rest holds:
///
/// * only hex digits (`tcptune secret new` writes 64): at least 32 of them (4 bits each);
/// * other text (every byte printable ASCII or a space: base64, a passphrase): at least 22
///   characters, what base64 needs for 128 bits; text carries at most 6.6 bits a character
///   and much less when a person chose it, so a short password is refused;
/// * anything else (binary, e.g. `head -c 32 /dev/urandom`): at least 16 bytes.
///
/// This bounds the length, not the randomness: a long phrase a person chose passes and is
/// still guessable. `tcptune secret new` gives 256 random bits.
pub fn check_strength(b: &[u8]) -> Result<(), WeakSecret> {
    let s = b.trim_ascii();
    let (need, unit) = if !s.is_empty() && s.iter().all(u8::is_ascii_hexdigit) {
        (MIN_SECRET_BITS as usize / 4, "hex digits")
    } else if s.iter().all(|c| c.is_ascii_graphic() || *c == b' ') {
        (22, "characters")
    } else {
        (MIN_SECRET_BITS as usize / 8, "bytes")
    };
    if s.len() >= need {
        Ok(())
    } else {
        Err(WeakSecret {
            have: s.len(),
            need,
            unit,
        })
    }
}

/// A shared secret (the transfer crate reads it from a file).
#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    /// A secret from bytes (surrounding whitespace, such as a trailing newline, is removed).
    pub fn from_bytes(b: &[u8]) -> Option<Secret> {
        let s = b.trim_ascii();
        (!s.is_empty()).then(|| Secret(s.to_vec()))
    }

    fn mac(&self, parts: &[&[u8]]) -> Hmac<Sha256> {
        // HMAC accepts keys of any length; new_from_slice cannot fail for it.
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
        for p in parts {
            m.update(p);
        }
        m
    }

    /// SHA-256 of the secret: what the session keys take of it (see [`crate::keys`]).
    pub fn digest(&self) -> [u8; 32] {
        use sha2::Digest;
        Sha256::digest(&self.0).into()
    }

    /// The proof a client sends in `Hello` for `token` and its `key_share`, with its `nonce`
    /// and clock.
    pub fn prove(
        &self,
        nonce: &[u8; 32],
        time_unix_s: u64,
        token: &[u8; 16],
        key_share: &[u8; 32],
    ) -> [u8; 32] {
        self.mac(&[
            PROOF_CONTEXT,
            nonce,
            &time_unix_s.to_be_bytes(),
            token,
            key_share,
        ])
        .finalize()
        .into_bytes()
        .into()
    }

    /// Whether `mac` is the right proof (constant time). Freshness (clock, replay) is the
    /// caller's to check.
    pub fn verify_proof(
        &self,
        nonce: &[u8; 32],
        time_unix_s: u64,
        token: &[u8; 16],
        key_share: &[u8; 32],
        mac: &[u8],
    ) -> bool {
        self.mac(&[
            PROOF_CONTEXT,
            nonce,
            &time_unix_s.to_be_bytes(),
            token,
            key_share,
        ])
        .verify_slice(mac)
        .is_ok()
    }

    /// The answer to a server's `challenge` for `token`.
    pub fn answer(&self, challenge: &[u8; 32], token: &[u8; 16]) -> [u8; 32] {
        self.mac(&[CHALLENGE_CONTEXT, challenge, token])
            .finalize()
            .into_bytes()
            .into()
    }

    /// Whether `mac` is the right answer to `challenge` (constant time).
    pub fn verify_answer(&self, challenge: &[u8; 32], token: &[u8; 16], mac: &[u8]) -> bool {
        self.mac(&[CHALLENGE_CONTEXT, challenge, token])
            .verify_slice(mac)
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn right_secret_verifies_and_wrong_one_does_not() {
        let s = Secret::from_bytes(b"hunter2\n").expect("secret");
        let (n, t) = ([1u8; 32], [5u8; 16]);
        let k = [3u8; 32];
        let p = s.prove(&n, 1000, &t, &k);
        assert!(s.verify_proof(&n, 1000, &t, &k, &p));
        assert!(!s.verify_proof(&n, 1001, &t, &k, &p), "bound to the time");
        assert!(
            !s.verify_proof(&n, 1000, &[6u8; 16], &k, &p),
            "bound to the token"
        );
        assert!(
            !s.verify_proof(&[2u8; 32], 1000, &t, &k, &p),
            "bound to the nonce"
        );
        assert!(
            !s.verify_proof(&n, 1000, &t, &[4u8; 32], &p),
            "bound to the key share"
        );
        let other = Secret::from_bytes(b"hunter3").expect("secret");
        assert!(!other.verify_proof(&n, 1000, &t, &k, &p));
        assert!(!s.verify_proof(&n, 1000, &t, &k, &p[..31]));
        let a = s.answer(&n, &t);
        assert!(s.verify_answer(&n, &t, &a));
        assert!(!s.verify_answer(&[2u8; 32], &t, &a));
        assert_ne!(a, p, "a proof is not an answer");
        assert!(Secret::from_bytes(b" \n").is_none());
    }

    #[test]
    fn a_secret_shorter_than_128_bits_is_weak_by_what_it_holds() {
        let weak = |b: &[u8]| check_strength(b).err();
        // Hex: 32 digits are 128 bits; `secret new`'s 64 and a newline pass.
        assert_eq!(weak(&[b'a'; 32]), None);
        assert_eq!(weak(format!("{}\n", "0f".repeat(32)).as_bytes()), None);
        assert_eq!(
            weak(&[b'a'; 31]),
            Some(WeakSecret {
                have: 31,
                need: 32,
                unit: "hex digits"
            })
        );
        // Text: 22 characters (base64 of 128 bits); a short password is refused.
        assert_eq!(weak(b"hunter2\n").map(|w| w.need), Some(22));
        assert_eq!(weak(b"correct horse battery").map(|w| w.have), Some(21));
        assert_eq!(weak(b"correct horse battery staple"), None);
        assert_eq!(weak(b"AAECAwQFBgcICQoLDA0ODw=="), None);
        assert_eq!(weak(b"AAECAwQFBgcICQoLDA0O").map(|w| w.have), Some(20));
        // Binary: 16 bytes.
        assert_eq!(weak(&[0xff; 16]), None);
        assert_eq!(
            weak(&[0xff; 15]),
            Some(WeakSecret {
                have: 15,
                need: 16,
                unit: "bytes"
            })
        );
        // Whitespace around it does not count; nothing at all is weak.
        assert_eq!(weak(b"  \n").map(|w| w.have), Some(0));
        assert_eq!(
            weak(format!("\n {} \n", "ab".repeat(15)).as_bytes()).map(|w| w.have),
            Some(30)
        );
        let msg = weak(b"x").map(|w| w.to_string()).unwrap_or_default();
        assert_eq!(msg, "1 characters, fewer than the 22 that carry 128 bits");
    }

    #[test]
    fn matches_rfc4231_hmac_sha256_test_case_2() {
        // Key "Jefe", data "what do ya want for nothing?" (split across context+challenge
        // would change it, so check the primitive directly).
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(b"Jefe").expect("key");
        m.update(b"what do ya want for nothing?");
        let out = m.finalize().into_bytes();
        assert_eq!(
            crate::wire::to_hex(&out),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
