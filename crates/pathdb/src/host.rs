//! The measuring host: which machine recorded an entry. Its hostname alone is not enough
//! (the two sides of an emulated path, or the nodes of a container fleet, share one), so it
//! is the hostname and the local address of the connection that measured the path.

use serde::Serialize;
use std::fmt;
use std::net::IpAddr;

/// Longest hostname kept or accepted from a database (DNS's limit).
pub const MAX_HOST_NAME_BYTES: usize = 255;
/// Longest local address kept or accepted from a database (an IPv6 address with a zone).
pub const MAX_HOST_ADDR_BYTES: usize = 64;

/// The host that measured a path.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Host {
    /// Its hostname (empty when unknown: an entry written before hosts were recorded).
    pub name: String,
    /// The local address of the connection that measured the path (empty when unknown).
    pub addr: String,
}

impl Host {
    /// This machine, with no connection yet (the address is set by [`Host::with_addr`]).
    pub fn this() -> Host {
        Host {
            name: hostname(),
            addr: String::new(),
        }
    }

    /// The same host, measuring over a connection whose local address is `addr`.
    pub fn with_addr(self, addr: IpAddr) -> Host {
        Host {
            addr: addr.to_canonical().to_string(),
            ..self
        }
    }

    /// A host read from a database, or `None` when a value is beyond its budget.
    pub fn checked(name: String, addr: String) -> Result<Host, String> {
        if name.len() > MAX_HOST_NAME_BYTES {
            return Err(format!("a host name of {} bytes", name.len()));
        }
        if addr.len() > MAX_HOST_ADDR_BYTES {
            return Err(format!("a host address of {} bytes", addr.len()));
        }
        Ok(Host { name, addr })
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.name.is_empty(), self.addr.is_empty()) {
            (true, true) => f.write_str("-"),
            (false, true) => f.write_str(&self.name),
            (true, false) => f.write_str(&self.addr),
            (false, false) => write!(f, "{} ({})", self.name, self.addr),
        }
    }
}

/// This machine's hostname (`gethostname`), cut to [`MAX_HOST_NAME_BYTES`]; empty if it
/// cannot be read.
pub fn hostname() -> String {
    let mut buf = [0u8; MAX_HOST_NAME_BYTES + 1];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that many bytes.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if r != 0 {
        return String::new();
    }
    let end = buf
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(MAX_HOST_NAME_BYTES);
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_shows_its_name_and_address_and_refuses_oversized_values() {
        let h = Host {
            name: "dtn1".into(),
            addr: String::new(),
        }
        .with_addr("::ffff:10.0.0.1".parse().expect("ip"));
        assert_eq!(h.to_string(), "dtn1 (10.0.0.1)");
        assert_eq!(Host::default().to_string(), "-");
        assert!(Host::checked("x".repeat(MAX_HOST_NAME_BYTES + 1), String::new()).is_err());
        assert!(Host::checked(String::new(), "1".repeat(MAX_HOST_ADDR_BYTES + 1)).is_err());
        assert!(!Host::this().name.is_empty());
    }
}
