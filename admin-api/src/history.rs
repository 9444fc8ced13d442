//! History on the wire: the daemon's rings of per-second figures as the
//! admin socket serves them (op `history`, and inside a subscription that
//! asked for `"history":true`), the names of their series, and the one
//! merge rule both ends follow. It is plain data and pure functions: no I/O,
//! no clock, and nothing a peer sends can make it panic.
//!
//! A `History` is columnar: the time of each point (`at_ms`, oldest first)
//! and, per series, its values **aligned to the end**: a series' last value
//! belongs to the newest point, and a series shorter than `at_ms` started
//! later (its entity appeared within the window). A series absent from the
//! newest points is gone (its partition or shard no longer exists).
//!
//! ```text
//! {"v":1,"op":"history"} -> {"v":1,"ok":true,"type":"history","history":{"second":{...},"ten_second":{...}}}
//! {"v":1,"op":"subscribe","interval_ms":1000,"history":true}
//!   -> snapshot lines with "history": the whole window first, then only newer points
//! ```

use serde::{Deserialize, Serialize};

/// Points of the one-second ring: the last 15 minutes.
pub const SECOND_POINTS: usize = 15 * 60;
/// Points of the ten-second ring: the last 6 hours.
pub const TEN_SECOND_POINTS: usize = 6 * 60 * 6;
/// Spacing of the two rings.
pub const SECOND_STEP_MS: u64 = 1_000;
pub const TEN_SECOND_STEP_MS: u64 = 10_000;

/// Both rings (or the points of both that are newer than what a subscriber
/// already has).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HistoryWindow {
    pub second: History,
    pub ten_second: History,
}

/// One ring: point times and series aligned to the newest point.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct History {
    /// Milliseconds between points.
    pub step_ms: u64,
    /// Unix time in milliseconds of each point, oldest first.
    pub at_ms: Vec<u64>,
    pub series: Vec<Series>,
}

/// One named series; `values.len() <= at_ms.len()`, the last value is the
/// newest point's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Series {
    pub name: String,
    pub values: Vec<f32>,
}

impl HistoryWindow {
    /// Append a newer window (see `History::append`) to both rings.
    pub fn append(&mut self, newer: HistoryWindow) {
        self.second.append(newer.second, SECOND_POINTS);
        self.ten_second.append(newer.ten_second, TEN_SECOND_POINTS);
    }
}

impl History {
    /// The values of `name`, aligned to the end of `at_ms`.
    pub fn series(&self, name: &str) -> Option<&[f32]> {
        self.series
            .iter()
            .find(|series| series.name == name)
            .map(|series| series.values.as_slice())
    }

    /// The newest point's time.
    pub fn last_at_ms(&self) -> Option<u64> {
        self.at_ms.last().copied()
    }

    /// Merge `newer` into `self`, keeping at most `capacity` points. When
    /// `newer` starts after the newest point here (a subscription's next
    /// points), its points are appended: series present in both grow,
    /// series only in `newer` start there, series missing from `newer` are
    /// gone. Otherwise (a whole window, a restarted daemon, another step)
    /// `newer` replaces everything. A malformed window (a series longer than
    /// its times) is cut to fit rather than refused.
    pub fn append(&mut self, newer: History, capacity: usize) {
        let mut newer = newer;
        newer.sanitize();
        if newer.at_ms.is_empty() {
            if newer.step_ms != self.step_ms && newer.step_ms != 0 {
                *self = newer;
            }
            return;
        }
        let continues = self.step_ms == newer.step_ms
            && self
                .last_at_ms()
                .is_some_and(|last| newer.at_ms.first().is_some_and(|first| *first > last));
        if !continues {
            *self = newer;
            self.trim(capacity);
            return;
        }
        let added = newer.at_ms.len();
        self.at_ms.extend_from_slice(&newer.at_ms);
        let mut old: std::collections::HashMap<String, Vec<f32>> = std::mem::take(&mut self.series)
            .into_iter()
            .map(|series| (series.name, series.values))
            .collect();
        self.series = newer
            .series
            .into_iter()
            .map(|series| match old.remove(&series.name) {
                Some(mut values) if series.values.len() == added => {
                    values.extend_from_slice(&series.values);
                    Series {
                        name: series.name,
                        values,
                    }
                }
                _ => series,
            })
            .collect();
        self.trim(capacity);
    }

    /// Keep the newest `capacity` points.
    fn trim(&mut self, capacity: usize) {
        if self.at_ms.len() > capacity {
            let excess = self.at_ms.len() - capacity;
            self.at_ms.drain(..excess);
        }
        let points = self.at_ms.len();
        for series in &mut self.series {
            if series.values.len() > points {
                let excess = series.values.len() - points;
                series.values.drain(..excess);
            }
        }
    }

    /// Cut series longer than their times and replace non-finite values
    /// with zero, so readers can index without checks.
    fn sanitize(&mut self) {
        let points = self.at_ms.len();
        for series in &mut self.series {
            if series.values.len() > points {
                let excess = series.values.len() - points;
                series.values.drain(..excess);
            }
            for value in &mut series.values {
                if !value.is_finite() {
                    *value = 0.0;
                }
            }
        }
    }
}

/// Series names: `shard.<id>.<metric>`, `partition.<stream>.<topic>.<partition>.<metric>`,
/// `group.<stream>.<topic>.<group>.lag`, and process-wide names.
pub mod name {
    /// Per shard, per second: messages and bytes in and out.
    pub const MESSAGES_IN: &str = "messages_in";
    pub const MESSAGES_OUT: &str = "messages_out";
    pub const BYTES_IN: &str = "bytes_in";
    pub const BYTES_OUT: &str = "bytes_out";
    /// Per shard: request latency p50 and p99 (µs) of the last report.
    pub const REQUEST_P50: &str = "request_p50_us";
    pub const REQUEST_P99: &str = "request_p99_us";
    /// Per shard: fsync p99 (µs).
    pub const FSYNC_P99: &str = "fsync_p99_us";
    /// Per shard: inbox wait p99 (µs) of partition ops.
    pub const QUEUE_WAIT_P99: &str = "queue_wait_p99_us";
    /// Per shard: messages waiting in the inbox.
    pub const QUEUE_DEPTH: &str = "queue_depth";
    pub const CONNECTIONS: &str = "connections";
    /// Per shard: share of one core its loop thread used (100 = busy).
    pub const BUSY_PERCENT: &str = "busy_percent";
    /// Per partition: bytes stored (and `MESSAGES_IN`: messages appended
    /// per second). Values are `f32`: exact to 2^24, within 1e-7 of the
    /// truth beyond, which graphs and rates do not notice.
    pub const BYTES: &str = "bytes";
    /// Per consumer group: messages behind, summed over its partitions.
    pub const LAG: &str = "lag";
    /// Process: bytes used on the data directory's filesystem.
    pub const DISK_USED: &str = "disk_used_bytes";
    /// Process: connections refused at accept since start.
    pub const CONNECTIONS_REFUSED: &str = "connections_refused";
    /// Process: connections open now.
    pub const PROCESS_CONNECTIONS: &str = "process.connections";

    pub fn shard(shard: u32, metric: &str) -> String {
        format!("shard.{shard}.{metric}")
    }

    pub fn partition(stream: u32, topic: u32, partition: u32, metric: &str) -> String {
        format!("partition.{stream}.{topic}.{partition}.{metric}")
    }

    pub fn group(stream: u32, topic: u32, group: u32) -> String {
        format!("group.{stream}.{topic}.{group}.{LAG}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history(at_ms: &[u64], series: &[(&str, &[f32])]) -> History {
        History {
            step_ms: 1000,
            at_ms: at_ms.to_vec(),
            series: series
                .iter()
                .map(|(name, values)| Series {
                    name: (*name).into(),
                    values: values.to_vec(),
                })
                .collect(),
        }
    }

    /// Proves the merge rule: newer points append, series that continue
    /// grow, a series that starts late is kept short (aligned to the end),
    /// a series missing from the newer points is dropped, and capacity
    /// trims the oldest points of times and series alike.
    #[test]
    fn newer_points_append_and_trim() {
        let mut ring = history(&[1000, 2000], &[("a", &[1.0, 2.0]), ("gone", &[5.0, 5.0])]);
        ring.append(
            history(&[3000, 4000], &[("a", &[3.0, 4.0]), ("late", &[9.0])]),
            3,
        );
        assert_eq!(ring.at_ms, vec![2000, 3000, 4000]);
        assert_eq!(ring.series("a"), Some(&[2.0, 3.0, 4.0][..]));
        assert_eq!(ring.series("late"), Some(&[9.0][..]));
        assert_eq!(ring.series("gone"), None);
    }

    /// Proves a window that does not continue this one (older or equal
    /// times, another step) replaces it, and that malformed input is cut to
    /// fit and made finite instead of trusted.
    #[test]
    fn other_windows_replace_and_malformed_ones_are_cut() {
        let mut ring = history(&[5000], &[("a", &[1.0])]);
        ring.append(history(&[1000, 2000], &[("b", &[1.0, 2.0])]), 10);
        assert_eq!(ring.at_ms, vec![1000, 2000]);
        assert_eq!(ring.series("a"), None);
        let mut bad = history(&[3000], &[("b", &[7.0, f32::NAN])]);
        bad.step_ms = 1000;
        ring.append(bad, 10);
        assert_eq!(ring.series("b"), Some(&[1.0, 2.0, 0.0][..]));
        let mut other_step = history(&[9000], &[("c", &[1.0])]);
        other_step.step_ms = 10_000;
        ring.append(other_step, 10);
        assert_eq!((ring.step_ms, ring.at_ms.len()), (10_000, 1));
        // An empty update changes nothing.
        let before = ring.clone();
        ring.append(History::default(), 10);
        assert_eq!(ring, before);
    }

    /// Proves the series names both ends build.
    #[test]
    fn names() {
        assert_eq!(name::shard(3, name::BYTES_IN), "shard.3.bytes_in");
        assert_eq!(
            name::partition(1, 2, 3, name::BYTES),
            "partition.1.2.3.bytes"
        );
        assert_eq!(name::group(1, 2, 7), "group.1.2.7.lag");
    }
}
