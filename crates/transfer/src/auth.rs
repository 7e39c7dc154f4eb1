//! Shared-secret authentication of the control connection: the proofs are
//! [`tcptune_proto::auth`]'s (re-exported here); reading the secret from its file, and
//! making a new one, is here.

use std::path::Path;
pub use tcptune_proto::auth::{check_strength, Secret, WeakSecret, CLOCK_SKEW, MIN_SECRET_BITS};

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
    /// The file holds fewer than [`MIN_SECRET_BITS`] bits (see [`check_strength`]).
    #[error("secret file {path} is too short: {weak}")]
    Weak {
        /// The file.
        path: String,
        /// What it holds and needs.
        weak: WeakSecret,
    },
}

/// Loading a [`Secret`] from its file (I/O, so not in the protocol crate). In scope, it is
/// called as `Secret::from_file(..)`.
pub trait SecretFile: Sized {
    /// Read a secret file; one that holds fewer than [`MIN_SECRET_BITS`] bits is refused.
    fn from_file(path: &Path) -> Result<Self, SecretError>;
}

impl SecretFile for Secret {
    fn from_file(path: &Path) -> Result<Secret, SecretError> {
        let b = std::fs::read(path).map_err(|source| SecretError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let secret =
            Secret::from_bytes(&b).ok_or_else(|| SecretError::Empty(path.display().to_string()))?;
        check_strength(&b).map_err(|weak| SecretError::Weak {
            path: path.display().to_string(),
            weak,
        })?;
        Ok(secret)
    }
}

/// The permission bits of `path` that let its group or others in (`mode & 0o077`), when
/// there are any: a secret file should be readable by its owner only, as ssh wants of a key.
/// `None` also when the file cannot be examined (reading it says why).
pub fn loose_permissions(path: &Path) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode();
    (mode & 0o077 != 0).then_some(mode & 0o777)
}

/// Bits of a new secret from [`new_secret_hex`].
pub const NEW_SECRET_BITS: usize = 256;

/// A new secret: [`NEW_SECRET_BITS`] random bits from the kernel as lowercase hex digits
/// (64), which [`SecretFile::from_file`] accepts as they are.
pub fn new_secret_hex() -> std::io::Result<String> {
    let mut b = [0u8; NEW_SECRET_BITS / 8];
    tcptune_sys::os::random_bytes(&mut b)?;
    Ok(tcptune_proto::wire::to_hex(&b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn tmp(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("tcptune-auth-{}-{name}", std::process::id()))
    }

    #[test]
    fn a_new_secret_is_64_hex_digits_accepted_as_a_file_and_never_the_same() {
        let a = new_secret_hex().expect("random");
        let b = new_secret_hex().expect("random");
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()), "{a}");
        assert_ne!(a, b);
        let p = tmp("new");
        std::fs::write(&p, format!("{a}\n")).expect("write");
        assert!(Secret::from_file(&p).is_ok());
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn a_short_secret_file_is_refused_and_an_open_one_is_flagged() {
        let p = tmp("short");
        std::fs::write(&p, "hunter2\n").expect("write");
        let e = Secret::from_file(&p).err().map(|e| e.to_string());
        assert!(
            e.as_deref()
                .is_some_and(|e| e.contains("too short") && e.contains("128 bits")),
            "{e:?}"
        );
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        assert_eq!(loose_permissions(&p), Some(0o644));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        assert_eq!(loose_permissions(&p), None);
        assert_eq!(loose_permissions(&tmp("missing")), None);
        let _ = std::fs::remove_file(&p);
    }
}
