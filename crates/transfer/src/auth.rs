//! Shared-secret authentication of the control connection: the proofs are
//! [`tcptune_proto::auth`]'s (re-exported here); reading the secret from its file is here.

use std::path::Path;
pub use tcptune_proto::auth::{Secret, CLOCK_SKEW};

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

/// Loading a [`Secret`] from its file (I/O, so not in the protocol crate). In scope, it is
/// called as `Secret::from_file(..)`.
pub trait SecretFile: Sized {
    /// Read a secret file.
    fn from_file(path: &Path) -> Result<Self, SecretError>;
}

impl SecretFile for Secret {
    fn from_file(path: &Path) -> Result<Secret, SecretError> {
        let b = std::fs::read(path).map_err(|source| SecretError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Secret::from_bytes(&b).ok_or_else(|| SecretError::Empty(path.display().to_string()))
    }
}
