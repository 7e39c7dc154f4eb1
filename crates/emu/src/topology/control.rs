//! [`PathControl`]: changes the paths of a running topology from any thread.

use crate::config::{ConfigError, PathConfig};
use crate::error::{EmuError, HelperError};
use crate::path::check_changeable;
use crate::worker::Shared;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// Changes the paths of a running [`Topology`](super::Topology): delay, jitter, rate, queue
/// and loss, in both directions (from [`Topology::path_control`](super::Topology::path_control)).
///
/// Each emulator thread applies a change before it reads its next packet (within about a
/// millisecond on a busy path; an idle one applies it before the next packet arrives), to
/// the packets that arrive from then on; packets already inside keep their times and order
/// (see [`Path::set`](crate::Path::set)). Cheap to clone; a change after the topology went
/// down changes nothing.
#[derive(Clone, Debug)]
pub struct PathControl {
    shared: Arc<Shared>,
    /// What each path runs with (as last set), path 0 first.
    current: Arc<Mutex<Vec<PathConfig>>>,
}

impl PathControl {
    pub(super) fn new(shared: Arc<Shared>, paths: Vec<PathConfig>) -> PathControl {
        PathControl {
            shared,
            current: Arc::new(Mutex::new(paths)),
        }
    }

    /// Run path `index` (0: the topology's `path`; `i + 1`: its extra path `i`, as in
    /// [`path_addr`](crate::path_addr)) with `path` from now on, both directions.
    ///
    /// `path` must be valid, and keep the path's MTU, seed and `reorder` (they cannot
    /// change while it runs); otherwise nothing changes and the error says why.
    pub fn set(&self, index: usize, path: PathConfig) -> Result<(), EmuError> {
        path.validate()?;
        let mut current = self.current.lock().map_err(|_| HelperError::LockPoisoned)?;
        let count = current.len();
        let slot = current
            .get_mut(index)
            .ok_or(ConfigError::NoSuchPath { index, count })?;
        check_changeable(slot, &path)?;
        *slot = path.clone();
        for dir in 0..2 {
            if let Ok(mut c) = self.shared.changes[dir].lock() {
                c.push((index, path.clone()));
            }
            self.shared.changed[dir].store(true, Ordering::SeqCst);
        }
        Ok(())
    }

    /// What path `index` runs with (as last set).
    pub fn get(&self, index: usize) -> Option<PathConfig> {
        self.current.lock().ok()?.get(index).cloned()
    }

    /// Number of paths.
    pub fn len(&self) -> usize {
        self.current.lock().map_or(0, |c| c.len())
    }

    /// Never true: a topology has at least one path.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn control(n: usize) -> (Arc<Shared>, PathControl) {
        let shared = Arc::new(Shared::default());
        let c = PathControl::new(shared.clone(), vec![PathConfig::default(); n]);
        (shared, c)
    }

    #[test]
    fn set_queues_the_change_for_both_directions() {
        let (shared, c) = control(2);
        let p = PathConfig {
            delay: Duration::from_millis(7),
            ..PathConfig::default()
        };
        assert!(c.set(1, p.clone()).is_ok());
        for dir in 0..2 {
            assert!(shared.changed[dir].load(Ordering::SeqCst));
            let queued = shared.changes[dir].lock().map(|c| c.clone()).ok();
            assert_eq!(queued, Some(vec![(1, p.clone())]));
        }
        assert_eq!(c.get(1), Some(p));
    }

    #[test]
    fn set_refuses_invalid_missing_or_unchangeable_paths() {
        let (shared, c) = control(1);
        let bad = PathConfig {
            loss: 3.0,
            ..PathConfig::default()
        };
        assert!(c.set(0, bad).is_err());
        assert!(c.set(1, PathConfig::default()).is_err());
        let jumbo = PathConfig {
            mtu: 9000,
            ..PathConfig::default()
        };
        assert!(c.set(0, jumbo).is_err());
        assert!(!shared.changed[0].load(Ordering::SeqCst));
        assert_eq!(c.get(0), Some(PathConfig::default()));
    }
}
