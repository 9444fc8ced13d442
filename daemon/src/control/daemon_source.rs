//! `DaemonSource`: the `ControlSource` of a running daemon, built from what
//! exists today: the shard plan, each shard's I/O driver, the heartbeat
//! counters, inbox depths (`Mesh::depth`), `/proc` (RSS, shard thread CPU
//! time) and `statvfs` of the data directory. Counters the daemon does not
//! collect yet (connections, messages, bytes, latencies, partitions, topics,
//! consumer groups, events) are reported as zero or empty, never estimated.
//!
//! This is the seam where real metrics land: shards publish counters
//! (relaxed atomics or per-shard cells the admin thread reads), and this
//! type reads them. It must never send a request to a shard and wait for
//! the answer: a snapshot is built on the admin threads from published
//! state only. Its own bookkeeping (when each heartbeat last moved, the
//! previous CPU sample) sits behind one mutex that only admin threads take.

use crate::control::api::{
    self, Durability, Hello, Percentiles, ProcessStats, ShardStats, Snapshot, Watchdog,
    WatchdogState,
};
use crate::control::{Action, ControlSource, sysinfo};
use crate::preflight::Driver;
use crate::shard::heartbeat::Heartbeats;
use crate::shard::mesh::Mesh;
use crate::topology::PlannedShard;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The durability used for topics that do not ask for one. Storage is not
/// in this build yet; this is the default the design fixes (ack after
/// fsync), and it becomes a configuration key with the storage layer.
pub const DURABILITY_DEFAULT: Durability = Durability::Persisted;

/// CPU percentages are computed over windows of at least this length, so
/// two snapshots taken close together do not divide clock-tick noise by a
/// tiny interval.
const CPU_WINDOW_MIN: Duration = Duration::from_millis(500);

/// Everything `DaemonSource` reads from.
#[derive(Debug)]
pub struct DaemonSourceParts {
    pub shards: Vec<PlannedShard>,
    /// The driver each shard reported when it became ready, by shard id.
    pub drivers: Vec<Driver>,
    pub numa_nodes: usize,
    pub heartbeats: Heartbeats,
    pub mesh: Mesh,
    /// When the process started (uptime is measured from here).
    pub started: Instant,
    pub data_dir: PathBuf,
    pub log_dir: PathBuf,
}

#[derive(Debug)]
pub struct DaemonSource {
    parts: DaemonSourceParts,
    samples: Mutex<Samples>,
}

#[derive(Debug)]
struct Samples {
    /// Per shard: the last heartbeat value seen and when it was first seen.
    heartbeats: Vec<(u64, Instant)>,
    /// Per shard: the thread id, once found by its name `shard-N`.
    tids: Vec<Option<i32>>,
    /// Per shard: the CPU sample the current percentage was computed from.
    cpu: Vec<Option<CpuSample>>,
}

#[derive(Debug, Clone, Copy)]
struct CpuSample {
    at: Instant,
    cpu_ms: u64,
    percent: f64,
}

impl DaemonSource {
    pub fn new(parts: DaemonSourceParts) -> DaemonSource {
        let shards = parts.shards.len();
        assert!(shards > 0);
        assert_eq!(parts.drivers.len(), shards);
        assert_eq!(parts.heartbeats.len(), shards);
        assert_eq!(parts.mesh.shards(), shards);
        let now = Instant::now();
        let heartbeats = (0..shards)
            .map(|shard| (parts.heartbeats.read(shard), now))
            .collect();
        DaemonSource {
            samples: Mutex::new(Samples {
                heartbeats,
                tids: vec![None; shards],
                cpu: vec![None; shards],
            }),
            parts,
        }
    }

    fn uptime_ms(&self) -> u64 {
        millis(self.parts.started.elapsed())
    }

    fn process(&self) -> ProcessStats {
        let disk = sysinfo::disk_usage(&self.parts.data_dir).ok();
        let cores: std::collections::BTreeSet<u32> =
            self.parts.shards.iter().map(|shard| shard.core).collect();
        ProcessStats {
            version: env!("CARGO_PKG_VERSION").to_string(),
            pid: std::process::id(),
            uptime_ms: self.uptime_ms(),
            rss_bytes: sysinfo::rss_bytes().unwrap_or(0),
            disk_used_bytes: disk.map_or(0, |disk| disk.used_bytes),
            disk_free_bytes: disk.map_or(0, |disk| disk.free_bytes),
            disk_total_bytes: disk.map_or(0, |disk| disk.total_bytes),
            durability_default: DURABILITY_DEFAULT,
            log_dir_bytes: sysinfo::dir_size_bytes(&self.parts.log_dir).unwrap_or(0),
            connections: 0,
            numa_nodes: u32::try_from(self.parts.numa_nodes).unwrap_or(u32::MAX),
            cores: u32::try_from(cores.len()).unwrap_or(u32::MAX),
            // The supervisor does not pet a systemd watchdog yet.
            watchdog: Watchdog {
                enabled: false,
                interval_ms: 0,
                state: WatchdogState::Disabled,
                stalled_shard: None,
            },
        }
    }

    fn shards(&self) -> Vec<ShardStats> {
        let now = Instant::now();
        let mut samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
        if samples.tids.iter().any(Option::is_none) {
            find_shard_threads(&mut samples.tids);
        }
        let mut shards = Vec::with_capacity(self.parts.shards.len());
        for (index, planned) in self.parts.shards.iter().enumerate() {
            let counter = self.parts.heartbeats.read(index);
            let (seen, seen_at) = &mut samples.heartbeats[index];
            if counter != *seen {
                *seen = counter;
                *seen_at = now;
            }
            let heartbeat_age_ms = millis(now.saturating_duration_since(*seen_at));
            let cpu_time_ms = samples.tids[index]
                .and_then(|tid| sysinfo::thread_cpu_time_ms(tid).ok())
                .unwrap_or(0);
            let cpu_percent =
                cpu_percent(&mut samples.cpu[index], now, cpu_time_ms, self.uptime_ms());
            shards.push(ShardStats {
                shard: u32::try_from(planned.shard).unwrap_or(u32::MAX),
                pu: planned.pu,
                core: planned.core,
                numa_node: planned.numa_node,
                driver: match self.parts.drivers[index] {
                    Driver::IoUring => api::Driver::IoUring,
                    Driver::Epoll => api::Driver::Epoll,
                },
                partitions: 0,
                connections: 0,
                messages_in_per_sec: 0.0,
                messages_out_per_sec: 0.0,
                bytes_in_per_sec: 0.0,
                bytes_out_per_sec: 0.0,
                messages_in_total: 0,
                messages_out_total: 0,
                bytes_in_total: 0,
                bytes_out_total: 0,
                queue_depth: self.parts.mesh.depth(index) as u64,
                request_latency_us: Percentiles::default(),
                queue_wait_us: Percentiles::default(),
                fsync_latency_us: Percentiles::default(),
                heartbeat_age_ms,
                cpu_time_ms,
                cpu_percent,
            });
        }
        shards
    }
}

/// Update `previous` with a new CPU reading and return the percentage of
/// one core used over the last window of at least `CPU_WINDOW_MIN`. The
/// first reading reports the average since the process started.
fn cpu_percent(previous: &mut Option<CpuSample>, now: Instant, cpu_ms: u64, uptime_ms: u64) -> f64 {
    match previous {
        None => {
            let percent = if uptime_ms == 0 {
                0.0
            } else {
                cpu_ms as f64 * 100.0 / uptime_ms as f64
            };
            *previous = Some(CpuSample {
                at: now,
                cpu_ms,
                percent,
            });
            percent
        }
        Some(sample) => {
            let window = now.saturating_duration_since(sample.at);
            if window >= CPU_WINDOW_MIN {
                let used_ms = cpu_ms.saturating_sub(sample.cpu_ms) as f64;
                let percent = used_ms * 100.0 / (window.as_secs_f64() * 1000.0);
                *sample = CpuSample {
                    at: now,
                    cpu_ms,
                    percent,
                };
            }
            sample.percent
        }
    }
}

/// Fill in the thread ids of threads named `shard-N`.
fn find_shard_threads(tids: &mut [Option<i32>]) {
    let Ok(threads) = sysinfo::threads_named("shard-") else {
        return;
    };
    for (tid, name) in threads {
        let shard = name
            .strip_prefix("shard-")
            .and_then(|id| id.parse::<usize>().ok());
        if let Some(slot) = shard.and_then(|shard| tids.get_mut(shard)) {
            *slot = Some(tid);
        }
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, millis)
}

impl ControlSource for DaemonSource {
    fn hello(&self) -> Hello {
        Hello {
            version: env!("CARGO_PKG_VERSION").to_string(),
            pid: std::process::id(),
            uptime_ms: self.uptime_ms(),
        }
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot {
            taken_at_ms: unix_ms(),
            process: self.process(),
            shards: self.shards(),
            topics: Vec::new(),
            events: Vec::new(),
        }
    }

    fn action(&self, action: Action) -> Result<String, String> {
        match action {
            Action::SetLogLevel(level) => Err(format!(
                "set_log_level {level:?}: not available in this build yet (the log filter is \
                 fixed at start); set logging.level and restart"
            )),
            Action::RotateLogs => Err(
                "rotate_logs: this build logs to stderr only; there are no log files to rotate"
                    .into(),
            ),
            Action::Flush => Ok("nothing to flush: this build has no partitions yet".into()),
            #[cfg(any(debug_assertions, feature = "fault-injection"))]
            Action::FreezeShard(shard) if shard >= self.parts.shards.len() => Err(format!(
                "freeze_shard: no shard {shard}; this daemon has {} shards",
                self.parts.shards.len()
            )),
            #[cfg(any(debug_assertions, feature = "fault-injection"))]
            Action::FreezeShard(shard) => Err(format!(
                "freeze_shard {shard}: not wired to the shard pumps yet"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(shards: usize) -> (DaemonSource, Heartbeats, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let heartbeats = Heartbeats::new(shards);
        let (mesh, _inboxes) = Mesh::new(shards);
        let planned = (0..shards)
            .map(|shard| PlannedShard {
                shard,
                pu: shard as u32 * 2,
                core: shard as u32,
                package: Some(0),
                numa_node: Some(0),
                skipped_siblings: vec![shard as u32 * 2 + 1],
            })
            .collect();
        let source = DaemonSource::new(DaemonSourceParts {
            shards: planned,
            drivers: vec![Driver::Epoll; shards],
            numa_nodes: 1,
            heartbeats: heartbeats.clone(),
            mesh,
            started: Instant::now(),
            data_dir: dir.path().to_path_buf(),
            log_dir: dir.path().join("logs"),
        });
        (source, heartbeats, dir)
    }

    /// Proves the snapshot reports the plan and process facts and zeroes
    /// (not estimates) for what is not measured yet.
    #[test]
    fn snapshot_reports_the_plan_and_zero_for_unmeasured_counters() {
        let (source, _heartbeats, dir) = source(2);
        std::fs::create_dir(dir.path().join("logs")).unwrap();
        std::fs::write(dir.path().join("logs/iggyd.log"), vec![b'x'; 300]).unwrap();
        let snapshot = source.snapshot();
        assert_eq!(snapshot.process.pid, std::process::id());
        assert!(snapshot.process.rss_bytes > 0);
        assert!(snapshot.process.disk_total_bytes > 0);
        assert_eq!(snapshot.process.log_dir_bytes, 300);
        assert_eq!(snapshot.process.cores, 2);
        assert_eq!(snapshot.process.watchdog.state, WatchdogState::Disabled);
        assert_eq!(snapshot.shards.len(), 2);
        assert_eq!(snapshot.shards[1].pu, 2);
        assert_eq!(snapshot.shards[1].driver, api::Driver::Epoll);
        assert_eq!(snapshot.shards[1].messages_in_total, 0);
        assert_eq!(
            snapshot.shards[1].request_latency_us,
            Percentiles::default()
        );
        assert!(snapshot.topics.is_empty());
        assert!(snapshot.taken_at_ms > 1_700_000_000_000);
    }

    /// Proves heartbeat age grows while a counter stands still and resets
    /// when it moves.
    #[test]
    fn heartbeat_age_follows_the_counter() {
        let (source, heartbeats, _dir) = source(2);
        std::thread::sleep(Duration::from_millis(60));
        heartbeats.bump(0);
        let snapshot = source.snapshot();
        assert!(snapshot.shards[0].heartbeat_age_ms < 50);
        assert!(snapshot.shards[1].heartbeat_age_ms >= 60);
    }

    /// Proves CPU percentages use windows of at least CPU_WINDOW_MIN.
    #[test]
    fn cpu_percent_windows() {
        let start = Instant::now();
        let mut sample = None;
        assert_eq!(cpu_percent(&mut sample, start, 500, 1000), 50.0);
        // Too soon: the previous value stands.
        let soon = start + Duration::from_millis(100);
        assert_eq!(cpu_percent(&mut sample, soon, 600, 1100), 50.0);
        let later = start + Duration::from_secs(1);
        assert_eq!(cpu_percent(&mut sample, later, 750, 2000), 25.0);
    }

    /// Proves actions answer honestly about what this build can do.
    #[test]
    fn actions_say_what_is_available() {
        let (source, _heartbeats, _dir) = source(1);
        assert!(source.action(Action::Flush).is_ok());
        let error = source
            .action(Action::SetLogLevel("debug".into()))
            .unwrap_err();
        assert!(error.contains("not available"), "{error}");
        assert!(source.action(Action::RotateLogs).is_err());
        #[cfg(any(debug_assertions, feature = "fault-injection"))]
        assert!(
            source
                .action(Action::FreezeShard(5))
                .unwrap_err()
                .contains("no shard 5")
        );
    }
}
