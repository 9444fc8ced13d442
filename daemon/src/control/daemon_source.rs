//! `DaemonSource`: the `ControlSource` of a running daemon. A snapshot is
//! built from what the shards already publish (`shard::heartbeat`): counters
//! and levels as relaxed atomics, the once-a-second `ShardReport`
//! (partition numbers and latency percentiles), the metadata view shard 0
//! published, the supervisor's watchdog state, inbox depths
//! (`Mesh::depth`), the recent warnings the logging layer kept, `/proc`
//! (RSS, shard thread CPU time) and `statvfs` of the data directory.
//!
//! Building a snapshot never sends a request to a shard and waits: it reads
//! published state only. Actions (flush, freeze) do message a shard, on the
//! admin thread, with a deadline. Its own bookkeeping (when each heartbeat
//! last moved, the previous CPU and counter samples) sits behind one mutex
//! that only admin threads take.

use crate::control::api::{
    self, Hello, Percentiles, ProcessStats, SecurityStats, ShardStats, Snapshot, Watchdog,
    WatchdogState,
};
use crate::control::metrics::{MetricsInput, ShardSeries};
use crate::control::snapshot_file::save;
use crate::control::{Action, ControlSource, sysinfo};
use crate::preflight::Driver;
use crate::shard::heartbeat::{Heartbeats, Latency, ShardCounters};
use crate::shard::mesh::{Mesh, ShardMessage};
use crate::shard::op::PartitionOp;
use crate::topology::PlannedShard;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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
    /// Durability of topics that do not ask for one.
    pub durability_default: iggyd_metadata::Durability,
    /// For the log actions; `None` in tests without a logger.
    pub log: Option<crate::logging::LogHandle>,
    /// Admission and its security counters; `None` in tests without shards.
    pub security: Option<std::sync::Arc<crate::net::admission::Admission>>,
    /// Each shard's poll-reply budget, by shard id (empty in tests without
    /// shards).
    pub reply_budgets: Vec<std::sync::Arc<crate::net::reply_budget::ReplyBudget>>,
    /// The snapshot worker's queue, for `snapshot_file`; `None` in tests
    /// without a worker.
    pub snapshot_files: Option<crate::net::snapshot_request::SnapshotFiles>,
    /// A cluster node's roster (`iggyd cluster …`); `None` on a single
    /// node.
    pub cluster: Option<std::sync::Arc<crate::cluster::node::ClusterRoster>>,
}

#[derive(Debug)]
pub struct DaemonSource {
    parts: DaemonSourceParts,
    samples: Mutex<Samples>,
    /// The history rings (`control/history.rs`), fed by the admin server's
    /// `history` thread.
    history: crate::control::history::Recorder,
}

#[derive(Debug)]
struct Samples {
    /// Per shard: the last heartbeat value seen and when it was first seen.
    heartbeats: Vec<(u64, Instant)>,
    /// Per shard: the thread id, once found by its name `shard-N`.
    tids: Vec<Option<i32>>,
    /// Per shard: the CPU sample the current percentage was computed from.
    cpu: Vec<Option<CpuSample>>,
    /// Per shard: the counters at the previous snapshot, for rates.
    counters: Vec<(Instant, ShardCounters, Rates)>,
}

/// Per-second rates of one shard, kept between close snapshots.
#[derive(Debug, Clone, Copy, Default)]
struct Rates {
    messages_in: f64,
    messages_out: f64,
    bytes_in: f64,
    bytes_out: f64,
}

/// Rates are computed over windows of at least this length.
const RATE_WINDOW_MIN: Duration = Duration::from_millis(500);

fn percentiles(latency: &Latency) -> Percentiles {
    Percentiles {
        p50: latency.p50,
        p90: latency.p90,
        p99: latency.p99,
        p999: latency.p999,
        max: latency.max,
    }
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
                counters: (0..shards)
                    .map(|shard| (now, parts.heartbeats.counters(shard), Rates::default()))
                    .collect(),
            }),
            parts,
            history: crate::control::history::Recorder::default(),
        }
    }

    /// What this source reads from (for `control/history.rs`).
    pub(super) fn parts(&self) -> &DaemonSourceParts {
        &self.parts
    }

    /// Bytes the history rings hold.
    pub fn history_memory_bytes(&self) -> usize {
        self.history.memory_bytes()
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
            durability_default: self.parts.durability_default,
            log_dir_bytes: sysinfo::dir_size_bytes(&self.parts.log_dir).unwrap_or(0),
            connections: self.parts.heartbeats.total().connections,
            numa_nodes: u32::try_from(self.parts.numa_nodes).unwrap_or(u32::MAX),
            cores: u32::try_from(cores.len()).unwrap_or(u32::MAX),
            watchdog: {
                let (interval_ms, stalled) = self.parts.heartbeats.watchdog();
                Watchdog {
                    enabled: interval_ms > 0,
                    interval_ms,
                    state: match (interval_ms, stalled) {
                        (0, _) => WatchdogState::Disabled,
                        (_, Some(_)) => WatchdogState::Stalled,
                        (_, None) => WatchdogState::Ok,
                    },
                    stalled_shard: stalled.and_then(|shard| u32::try_from(shard).ok()),
                }
            },
            pending_removal: {
                let mut trash = iggyd_storage::trash::TrashStats::default();
                for shard in 0..self.parts.shards.len() {
                    trash.add(&self.parts.heartbeats.report(shard).trash);
                }
                api::PendingRemoval {
                    entries: trash.entries,
                    bytes: trash.bytes,
                    failing: trash.failing,
                    last_error: trash.last_error.filter(|_| trash.failing > 0),
                }
            },
            security: self.security(),
        }
    }

    fn security(&self) -> SecurityStats {
        let Some(admission) = &self.parts.security else {
            return SecurityStats::default();
        };
        let snapshot = admission.snapshot();
        SecurityStats {
            connections_refused_total: snapshot.connections_refused,
            logins_failed_total: snapshot.logins_failed,
            logins_refused_total: snapshot.logins_refused,
            frames_refused_total: snapshot.frames_refused,
            timeouts_total: snapshot.timeouts,
            tls_failures_total: snapshot.tls_failures,
            evictions_total: snapshot.evictions,
            max_connections: snapshot.max_connections,
            max_connections_per_address: snapshot.max_connections_per_address,
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
            let counters = self.parts.heartbeats.counters(index);
            let (then, before, rates) = &mut samples.counters[index];
            let elapsed = now.saturating_duration_since(*then);
            if elapsed >= RATE_WINDOW_MIN {
                let seconds = elapsed.as_secs_f64();
                let rate = |now: u64, before: u64| now.saturating_sub(before) as f64 / seconds;
                *rates = Rates {
                    messages_in: rate(counters.messages_in, before.messages_in),
                    messages_out: rate(counters.messages_out, before.messages_out),
                    bytes_in: rate(counters.bytes_in, before.bytes_in),
                    bytes_out: rate(counters.bytes_out, before.bytes_out),
                };
                *then = now;
                *before = counters;
            }
            let rates = *rates;
            let report = self.parts.heartbeats.report(index);
            shards.push(ShardStats {
                shard: u32::try_from(planned.shard).unwrap_or(u32::MAX),
                pu: planned.pu,
                core: planned.core,
                numa_node: planned.numa_node,
                driver: match self.parts.drivers[index] {
                    Driver::IoUring => api::Driver::IoUring,
                    Driver::Epoll => api::Driver::Epoll,
                },
                partitions: counters.partitions,
                connections: counters.connections,
                messages_in_per_sec: rates.messages_in,
                messages_out_per_sec: rates.messages_out,
                bytes_in_per_sec: rates.bytes_in,
                bytes_out_per_sec: rates.bytes_out,
                messages_in_total: counters.messages_in,
                messages_out_total: counters.messages_out,
                bytes_in_total: counters.bytes_in,
                bytes_out_total: counters.bytes_out,
                queue_depth: self.parts.mesh.depth(index) as u64,
                request_latency_us: percentiles(&report.request),
                queue_wait_us: percentiles(&report.queue_wait),
                fsync_latency_us: percentiles(&report.fsync),
                heartbeat_age_ms,
                cpu_time_ms,
                cpu_percent,
                sends_local_total: counters.sends_local,
                consumer_offsets_refused_total: report.consumer_offsets_refused,
                poll_reply_bytes: self
                    .parts
                    .reply_budgets
                    .get(index)
                    .map_or(0, |budget| budget.used_bytes()),
                sends_forwarded_total: counters.sends_forwarded,
                io_buffer_bytes: report.io_buffers.outstanding_bytes,
                io_buffer_idle_bytes: report.io_buffers.idle_bytes,
                io_buffer_allocations_total: report.io_buffers.allocations,
                io_buffer_reuses_total: report.io_buffers.reuses,
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
pub(super) fn find_shard_threads(tids: &mut [Option<i32>]) {
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

pub(super) fn unix_ms() -> u64 {
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
            topics: self.topics(),
            clients: self.clients(),
            events: crate::logging::recent_events()
                .into_iter()
                .map(|event| api::EventRecord {
                    at_ms: event.at_ms,
                    level: if event.level == tracing::Level::ERROR {
                        api::EventLevel::Error
                    } else {
                        api::EventLevel::Warn
                    },
                    message: event.text,
                })
                .collect(),
        }
    }

    fn record_history(&self) {
        self.history.record(self);
    }

    fn history(
        &self,
        cursor: crate::control::history::Cursor,
    ) -> Option<(api::HistoryWindow, crate::control::history::Cursor)> {
        Some(self.history.since(cursor))
    }

    fn cluster(&self, op: api::ClusterOp) -> Result<api::Payload, String> {
        self.cluster_op(op)
    }

    fn action(&self, action: Action) -> Result<String, String> {
        match action {
            Action::SetLogLevel(level) => {
                let log = self
                    .parts
                    .log
                    .as_ref()
                    .ok_or("this daemon has no log handle")?;
                log.set_level(&level).map_err(|error| error.to_string())?;
                tracing::info!(%level, "log level changed from the admin socket");
                Ok(format!("log level is now {level}"))
            }
            Action::RotateLogs => {
                let log = self
                    .parts
                    .log
                    .as_ref()
                    .ok_or("this daemon has no log handle")?;
                match log.rotate_now().map_err(|error| error.to_string())? {
                    Some(rotated) => Ok(format!("rotated to {}", rotated.display())),
                    None => Ok("nothing to rotate: the log file is empty".into()),
                }
            }
            Action::Flush => {
                let mut fsyncs = 0;
                for shard in 0..self.parts.shards.len() {
                    let (reply, answer) = flume::bounded(1);
                    let deadline = Instant::now() + crate::limits::ADMIN_ACTION_TIMEOUT;
                    let op = PartitionOp::SyncAll { reply };
                    self.parts
                        .mesh
                        .send_deadline(shard, ShardMessage::Partition(op, Instant::now()), deadline)
                        .map_err(|error| format!("flush: {error}"))?;
                    match answer.recv_deadline(deadline) {
                        Ok(Ok(count)) => fsyncs += count,
                        Ok(Err(error)) => return Err(format!("flush on shard {shard}: {error}")),
                        Err(_) => {
                            return Err(format!("flush: shard {shard} did not answer in time"));
                        }
                    }
                }
                Ok(format!("flushed: {fsyncs} files fsynced"))
            }
            Action::DisconnectClient(client_id) => self.disconnect_client(client_id),
            Action::SnapshotFile { path, request } => save::save(
                self.parts.snapshot_files.as_ref(),
                request,
                &path,
                &self.parts.data_dir,
                save::WAIT_MAX,
            )
            .map(|saved| saved.message())
            .map_err(|error| error.to_string()),
            #[cfg(any(debug_assertions, feature = "fault-injection"))]
            Action::FreezeShard(shard) if shard >= self.parts.shards.len() => Err(format!(
                "freeze_shard: no shard {shard}; this daemon has {} shards",
                self.parts.shards.len()
            )),
            #[cfg(any(debug_assertions, feature = "fault-injection"))]
            Action::FreezeShard(shard) => {
                let deadline = Instant::now() + crate::limits::ADMIN_ACTION_TIMEOUT;
                self.parts
                    .mesh
                    .send_deadline(shard, ShardMessage::Freeze, deadline)
                    .map_err(|error| format!("freeze_shard: {error}"))?;
                tracing::warn!(shard, "fault injection: shard {shard} asked to freeze");
                Ok(format!("shard {shard} will freeze when it reads its inbox"))
            }
        }
    }
}

impl DaemonSource {
    /// Every client connection from the shards' last reports, at most
    /// `api::CLIENTS_MAX`, with user names from the published view.
    fn clients(&self) -> Vec<api::ClientStats> {
        let view = self.parts.heartbeats.view();
        let mut clients = Vec::new();
        for shard in 0..self.parts.shards.len() {
            let report = self.parts.heartbeats.report(shard);
            for client in &report.clients {
                if clients.len() >= api::CLIENTS_MAX {
                    return clients;
                }
                clients.push(api::ClientStats {
                    client_id: u64::from(client.client_id),
                    address: client.peer.to_string(),
                    user: client.user_id.and_then(|id| {
                        view.as_ref()
                            .and_then(|view| view.user_by_id(id))
                            .map(|user| user.username.clone())
                    }),
                    tls: client.tls,
                    shard: u32::try_from(shard).unwrap_or(u32::MAX),
                    requests_total: client.requests,
                    bytes_in_total: client.bytes_in,
                    bytes_out_total: client.bytes_out,
                    last_command: client.last_command,
                    idle_ms: millis(client.idle),
                    connected_ms: millis(client.connected),
                });
            }
        }
        clients
    }

    /// Ask the shard that serves `client_id` (per its last report) to close
    /// it, waiting at most `ADMIN_ACTION_TIMEOUT` for its answer.
    fn disconnect_client(&self, client_id: u64) -> Result<String, String> {
        let shard = (0..self.parts.shards.len()).find(|shard| {
            self.parts
                .heartbeats
                .report(*shard)
                .clients
                .iter()
                .any(|client| u64::from(client.client_id) == client_id)
        });
        let (Some(shard), Ok(id)) = (shard, u32::try_from(client_id)) else {
            return Err(format!("no client {client_id} is connected"));
        };
        let (reply, answer) = flume::bounded(1);
        let deadline = Instant::now() + crate::limits::ADMIN_ACTION_TIMEOUT;
        self.parts
            .mesh
            .send_deadline(
                shard,
                ShardMessage::CloseClient {
                    client_id: id,
                    reply,
                },
                deadline,
            )
            .map_err(|error| format!("disconnect_client: {error}"))?;
        match answer.recv_deadline(deadline) {
            Ok(true) => {
                tracing::info!(client_id, shard, "client closed from the admin socket");
                Ok(format!(
                    "client {client_id} on shard {shard} is being closed"
                ))
            }
            Ok(false) => Err(format!("client {client_id} is gone or already closing")),
            Err(_) => Err(format!(
                "disconnect_client: shard {shard} did not answer in time"
            )),
        }
    }

    /// What one Prometheus scrape reports: the admin snapshot of this moment
    /// (without the recent events) plus what it does not carry (histograms,
    /// durable offsets, lag per partition, open files), all from published
    /// state; on a cluster node also every Raft group's state, gathered
    /// from the shards as `cluster_status` gathers it (each shard answers
    /// at once from openraft's metrics; at most
    /// `ADMIN_CLUSTER_STATUS_TIMEOUT` for a shard that does not).
    pub fn metrics_input(&self) -> MetricsInput {
        let (topics, group_lags, durable_next_offsets) = self.topics_and_lags();
        let snapshot = Snapshot {
            taken_at_ms: unix_ms(),
            process: self.process(),
            shards: self.shards(),
            topics,
            events: Vec::new(),
            clients: Vec::new(),
        };
        let shards = (0..self.parts.shards.len())
            .map(|shard| {
                let report = self.parts.heartbeats.report(shard);
                ShardSeries {
                    counters: self.parts.heartbeats.counters(shard),
                    histograms: report.histograms,
                    cluster: report.cluster,
                }
            })
            .collect();
        MetricsInput {
            snapshot,
            shards,
            durable_next_offsets,
            group_lags,
            open_fds: sysinfo::open_fds().ok(),
            cluster: self.cluster_series(),
        }
    }
}

mod cluster;
mod topics;
pub use topics::{GroupFigure, PartitionFigure, TopicFigures};

#[cfg(test)]
mod tests {
    use super::*;
    use iggyd_storage::consumer_offsets::ConsumerKind;

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
            durability_default: iggyd_metadata::Durability::Persisted,
            log: None,
            security: None,
            reply_budgets: Vec::new(),
            snapshot_files: None,
            cluster: None,
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

    /// Proves what shards publish reaches the snapshot: counters, the
    /// once-a-second report (partitions, latency), the metadata view (topics
    /// with consumer-group lag) and the watchdog state.
    #[test]
    fn published_state_reaches_the_snapshot() {
        use crate::shard::heartbeat::ShardReport;
        use crate::shard::op::PartitionReport;
        use crate::shard::partition::PartitionKey;
        use iggyd_metadata::{Ident, Metadata, MetadataCommand, TopicOptions};
        use iggyd_storage::PartitionStats;
        use iggyd_storage::consumer_offsets::ConsumerKey;
        let (source, heartbeats, _dir) = source(1);
        let mut metadata = Metadata::new();
        metadata
            .apply(MetadataCommand::CreateStream {
                name: "s".into(),
                created_at_us: 1,
            })
            .unwrap();
        metadata
            .apply(MetadataCommand::CreateTopic {
                stream: Ident::Id(0),
                name: "t".into(),
                partitions_count: 1,
                options: TopicOptions::defaults(iggyd_metadata::Durability::Persisted),
                created_at_us: 1,
                shard_count: 1,
            })
            .unwrap();
        metadata
            .apply(MetadataCommand::CreateConsumerGroup {
                stream: Ident::Id(0),
                topic: Ident::Id(0),
                name: "g".into(),
            })
            .unwrap();
        heartbeats.publish_view(metadata.publish());
        heartbeats.publish(
            0,
            &ShardCounters {
                messages_in: 10,
                connections: 3,
                partitions: 1,
                ..ShardCounters::default()
            },
        );
        let key = PartitionKey {
            stream: 0,
            topic: 0,
            partition: 0,
            storage_id: 0,
        };
        heartbeats.publish_report(
            0,
            ShardReport {
                partitions: vec![PartitionReport {
                    key,
                    stats: PartitionStats {
                        messages: 10,
                        bytes: 1000,
                        segments: 1,
                        first_offset: 0,
                        next_offset: 10,
                        memory_bytes: 0,
                    },
                    current_offset: 9,
                    durable_next_offset: 10,
                    sealed_segments: Vec::new(),
                    segments: Vec::new(),
                    consumer_offsets: vec![(
                        ConsumerKey {
                            kind: ConsumerKind::Group,
                            id: 0,
                        },
                        3,
                    )],
                }],
                request: Latency {
                    p50: 5,
                    p90: 6,
                    p99: 7,
                    p999: 8,
                    max: 9,
                    ..Latency::default()
                },
                trash: iggyd_storage::trash::TrashStats {
                    entries: 2,
                    bytes: 4096,
                    failing: 1,
                    removed_entries: 5,
                    removed_bytes: 1 << 20,
                    last_error: Some("x: Operation not permitted".into()),
                },
                ..ShardReport::default()
            },
        );
        heartbeats.publish_watchdog(10_000, Some(0));
        let snapshot = source.snapshot();
        assert_eq!(snapshot.process.connections, 3);
        assert_eq!(snapshot.process.watchdog.state, WatchdogState::Stalled);
        assert_eq!(snapshot.process.watchdog.stalled_shard, Some(0));
        assert_eq!(snapshot.shards[0].messages_in_total, 10);
        assert_eq!(snapshot.shards[0].partitions, 1);
        assert_eq!(snapshot.shards[0].request_latency_us.p99, 7);
        assert_eq!(snapshot.topics.len(), 1);
        let topic = &snapshot.topics[0];
        assert_eq!(
            (topic.stream.as_str(), topic.topic.as_str(), topic.messages),
            ("s", "t", 10)
        );
        assert_eq!(topic.partitions[0].current_offset, 9);
        assert_eq!(topic.consumer_groups[0].lag, 6);
        let pending = &snapshot.process.pending_removal;
        assert_eq!(
            (pending.entries, pending.bytes, pending.failing),
            (2, 4096, 1)
        );
        assert_eq!(
            pending.last_error.as_deref(),
            Some("x: Operation not permitted")
        );
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
    fn a_single_node_refuses_cluster_ops_clearly() {
        let (source, _heartbeats, _dir) = source(1);
        let error = source.cluster(api::ClusterOp::Status).unwrap_err();
        assert!(error.contains("[cluster] enabled = false"), "{error}");
    }

    #[test]
    fn actions_say_what_is_available() {
        let (source, _heartbeats, _dir) = source(1);
        // No shard thread holds the inbox here: flush reports it, not hangs.
        assert!(source.action(Action::Flush).unwrap_err().contains("flush"));
        let error = source
            .action(Action::SetLogLevel("debug".into()))
            .unwrap_err();
        assert!(error.contains("no log handle"), "{error}");
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
