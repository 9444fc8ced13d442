//! Library chatter kept to a trickle: the consensus library logs a warning
//! for every heartbeat or vote a peer did not answer, per Raft group, so one
//! node down for maintenance in a cluster of a hundred partitions made five
//! hundred lines a second on each survivor (160,000 in a minute and a half
//! in one run: a full journal, and journald's own rate limit dropping the
//! daemon's other lines). Each of its call sites gets one line per
//! `limits::LIBRARY_LOG_INTERVAL` per thread; the line that passes says how
//! many like it were held back. The daemon's own lines are never held back
//! here (its floods are counted where they happen, `notice`).
//!
//! Must not: hold back a line of the daemon's own targets, or grow with
//! anything but the library's call sites.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Targets whose lines are throttled.
const LIBRARY_TARGETS: &[&str] = &["openraft"];

/// Whether lines of `target` are throttled.
pub fn throttled(target: &str) -> bool {
    LIBRARY_TARGETS.iter().any(|library| {
        target
            .strip_prefix(library)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
    })
}

/// Per call site: when its window began and how many were held back in it.
#[derive(Debug, Default)]
pub struct Throttle {
    sites: HashMap<usize, (Instant, u64)>,
}

impl Throttle {
    /// Whether the line of call site `site` at `now` passes; if so, how many
    /// of that site's lines were held back since the last that passed.
    pub fn admit(&mut self, site: usize, now: Instant, interval: Duration) -> Option<u64> {
        match self.sites.get_mut(&site) {
            Some((since, held)) if now.saturating_duration_since(*since) < interval => {
                *held += 1;
                None
            }
            Some((since, held)) => {
                let passed = *held;
                *since = now;
                *held = 0;
                Some(passed)
            }
            None => {
                self.sites.insert(site, (now, 0));
                Some(0)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves a site's lines pass once per interval with the count held back,
    // and sites do not share a window.
    #[test]
    fn one_line_per_site_per_interval_with_the_count_held_back() {
        let interval = Duration::from_secs(10);
        let start = Instant::now();
        let mut throttle = Throttle::default();
        assert_eq!(throttle.admit(1, start, interval), Some(0));
        for second in 1..10 {
            let at = start + Duration::from_secs(second);
            assert_eq!(throttle.admit(1, at, interval), None);
        }
        assert_eq!(
            throttle.admit(2, start + Duration::from_secs(5), interval),
            Some(0)
        );
        assert_eq!(
            throttle.admit(1, start + Duration::from_secs(10), interval),
            Some(9)
        );
        assert_eq!(
            throttle.admit(1, start + Duration::from_secs(11), interval),
            None
        );
    }

    // Proves only the library's targets are throttled, by whole path
    // segments.
    #[test]
    fn only_library_targets_are_throttled() {
        assert!(throttled("openraft"));
        assert!(throttled("openraft::core::raft_core"));
        assert!(!throttled("openraft_rt_monoio"));
        assert!(!throttled("iggyd::cluster"));
        assert!(!throttled("iggyd_raft"));
    }
}
