//! Shared-secret authentication of the control connection: HMAC-SHA256 challenge-response.
//!
//! The server sends a fresh random 32-byte challenge in `Welcome`; the client answers with
//! `HMAC-SHA256(secret, "tcptune-auth-v1" || challenge)` in `Setup`; the server compares in
//! constant time. The secret never crosses the wire and an answer cannot be replayed against
//! another challenge. (This authenticates the client only; the data is not encrypted.)

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::path::Path;

const CONTEXT: &[u8] = b"tcptune-auth-v1";

/// A shared secret read from a file.
#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// Why a secret could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The file could not be read.
    #[error("reading secret file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// The file holds nothing usable.
    #[error("secret file {0} is empty (after trimming whitespace)")]
    Empty(String),
}

impl Secret {
    /// A secret from bytes (surrounding whitespace, such as a trailing newline, is removed).
    pub fn from_bytes(b: &[u8]) -> Option<Secret> {
        let s = b.trim_ascii();
        (!s.is_empty()).then(|| Secret(s.to_vec()))
    }

    /// Read a secret file.
    pub fn from_file(path: &Path) -> Result<Secret, SecretError> {
        let b = std::fs::read(path).map_err(|source| SecretError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Secret::from_bytes(&b).ok_or_else(|| SecretError::Empty(path.display().to_string()))
    }

    fn mac(&self, challenge: &[u8]) -> Hmac<Sha256> {
        // HMAC accepts keys of any length; new_from_slice cannot fail for it.
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
        m.update(CONTEXT);
        m.update(challenge);
        m
    }

    /// The answer to `challenge`.
    pub fn respond(&self, challenge: &[u8]) -> [u8; 32] {
        self.mac(challenge).finalize().into_bytes().into()
    }

    /// Whether `answer` is the right answer to `challenge` (constant time).
    pub fn verify(&self, challenge: &[u8], answer: &[u8]) -> bool {
        self.mac(challenge).verify_slice(answer).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn right_secret_verifies_and_wrong_one_does_not() {
        let s = Secret::from_bytes(b"hunter2\n").expect("secret");
        let c = [1u8; 32];
        let a = s.respond(&c);
        assert!(s.verify(&c, &a));
        assert!(
            !s.verify(&[2u8; 32], &a),
            "answer is bound to the challenge"
        );
        let other = Secret::from_bytes(b"hunter3").expect("secret");
        assert!(!other.verify(&c, &a));
        assert!(!s.verify(&c, &a[..31]));
        assert!(Secret::from_bytes(b" \n").is_none());
    }

    #[test]
    fn matches_rfc4231_hmac_sha256_test_case_2() {
        // Key "Jefe", data "what do ya want for nothing?" (split across context+challenge
        // would change it, so check the primitive directly).
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(b"Jefe").expect("key");
        m.update(b"what do ya want for nothing?");
        let out = m.finalize().into_bytes();
        assert_eq!(
            crate::proto::to_hex(&out),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
