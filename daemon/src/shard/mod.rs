//! A shard: one OS thread named `shard-N`, pinned to one PU, its memory bound
//! to that PU's NUMA node, running one monoio runtime (io_uring, or epoll as a
//! logged fallback). The shard owns its listener socket, its inbox, its
//! partitions (through the pump) and its connections; its state is never
//! shared with other shards: they reach it only through the mesh. The loop in
//! `run` is the only code that acts on inbox messages; shard 0 also holds the
//! metadata store, the one writer of metadata.
//!
//! A shard reports to the supervisor over a plain channel: `Ready` once its
//! partitions are recovered, its runtime runs and its listener accepts,
//! `Exited` when it returns. A panic in a shard aborts the whole process (see
//! `boot::install_panic_hook`), so the daemon is never half alive.

pub mod context;
pub mod front;
pub mod heartbeat;
pub mod mesh;
pub mod op;
pub mod partition;
pub mod pump;
pub mod replica;
pub mod router;
#[cfg(test)]
mod pump_sim;

use crate::limits;
use crate::preflight::Driver;
use context::{ContextSettings, ShardContext};
use front::{Front, FrontStart};
use heartbeat::Heartbeats;
use iggyd_metadata::store::{ExecuteError, MetadataStore};
use iggyd_metadata::{MetadataView, io::StdIo};
use iggyd_storage::{BufferPool, MonoioIo, SystemClock};
use iggyd_wire::protocol::codes::Status;
use mesh::{Mesh, Request, Response, ShardId, ShardMessage};
use op::PartitionOp;
use partition::{PartitionKey, PartitionSettings};
use pump::{Pump, PumpStorage};
use std::rc::Rc;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

/// What the supervisor hears from a shard.
#[derive(Debug)]
pub enum ShardEvent {
    /// Start-up progress: partitions recovered so far out of this shard's.
    Recovering {
        shard: ShardId,
        done: usize,
        total: usize,
    },
    Ready {
        shard: ShardId,
        driver: Driver,
    },
    /// After `StopAccepting`: no connection is left on this shard.
    Quiesced {
        shard: ShardId,
    },
    Exited {
        shard: ShardId,
        result: Result<(), String>,
    },
}

/// Everything a shard thread needs; moved into the thread at spawn.
#[derive(Debug)]
pub struct ShardSpec {
    pub id: ShardId,
    pub pu: u32,
    /// Pin the thread to `pu` (false only when the plan does not describe this
    /// machine, e.g. under `HWLOC_SYNTHETIC`).
    pub pin: bool,
    /// Bind memory to this NUMA node (only when the machine has more than one).
    pub numa_node: Option<u32>,
    pub driver: Driver,
    /// Whether a failed io_uring runtime build may fall back to epoll.
    pub require_io_uring: bool,
    /// What runs above the shard on its thread (its connections, started
    /// with their listener once the partitions are recovered).
    pub front: FrontStart,
    /// Replication above the shard (a cluster node); `None` on one node.
    pub replication: Option<replica::ReplicationStart>,
    pub inbox: flume::Receiver<ShardMessage>,
    pub mesh: Mesh,
    pub heartbeats: Heartbeats,
    pub events: mpsc::Sender<ShardEvent>,
    /// Root of the partition directories.
    pub data_dir: std::path::PathBuf,
    /// The metadata view at start.
    pub view: Arc<MetadataView>,
    /// Shard 0 only: the metadata store.
    pub store: Option<MetadataStore<StdIo>>,
    /// `retention.check_interval`: how often `RetentionTick` is queued.
    pub retention_check_interval: Duration,
    /// `storage.flush_interval`; zero = no interval flush.
    pub flush_interval: Duration,
    /// How segments reach the disk.
    pub access: iggyd_storage::Access,
    /// `limits.max_consumer_offsets_per_partition`.
    pub consumer_offsets_max: usize,
    /// This shard's share of `memory.budget` (sizes its buffer pool).
    pub per_shard_memory_bytes: u64,
    /// Where this shard's trash starts (start-up reconciliation hands the
    /// entries it found to shard 0).
    pub trash: iggyd_storage::trash::TrashStart,
    pub started: Instant,
    pub started_at_us: u64,
}

/// Start the shard thread.
pub fn spawn(spec: ShardSpec) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("shard-{}", spec.id))
        .spawn(move || {
            let id = spec.id;
            let events = spec.events.clone();
            let result = thread_main(spec);
            if let Err(message) = &result {
                tracing::error!(shard = id, %message, "shard failed");
            }
            // The supervisor may already be gone when the process is exiting.
            let _ = events.send(ShardEvent::Exited { shard: id, result });
        })
}

fn thread_main(spec: ShardSpec) -> Result<(), String> {
    if spec.pin {
        crate::topology::pin_current_thread(spec.pu).map_err(|error| error.to_string())?;
    }
    if let Some(node) = spec.numa_node {
        crate::topology::bind_current_thread_memory(node).map_err(|error| error.to_string())?;
    }
    match spec.driver {
        Driver::IoUring => {
            let built = monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
                .with_entries(limits::IO_URING_ENTRIES)
                .enable_timer()
                .build();
            match built {
                Ok(mut runtime) => runtime.block_on(run(spec, Driver::IoUring)),
                Err(error) if !spec.require_io_uring => {
                    tracing::warn!(shard = spec.id, %error, "io_uring runtime failed to start, falling back to epoll");
                    legacy_runtime()?.block_on(run(spec, Driver::Epoll))
                }
                Err(error) => Err(format!("io_uring runtime failed to start: {error}")),
            }
        }
        Driver::Epoll => legacy_runtime()?.block_on(run(spec, Driver::Epoll)),
    }
}

fn legacy_runtime()
-> Result<monoio::Runtime<monoio::time::TimeDriver<monoio::LegacyDriver>>, String> {
    monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
        .enable_timer()
        .build()
        .map_err(|error| format!("epoll runtime failed to start: {error}"))
}

/// Everything the inbox loop acts on.
struct ShardLoop {
    context: Rc<ShardContext>,
    pump: Pump<MonoioIo>,
    heartbeats: Heartbeats,
    pu: u32,
    store: Option<MetadataStore<StdIo>>,
    /// Set when the metadata store failed to persist: stop.
    fatal: Option<String>,
    events: mpsc::Sender<ShardEvent>,
    /// The connections above this shard; set once the partitions are
    /// recovered and the listener started.
    front: Option<Rc<dyn Front>>,
    /// Every published window's latencies, added up (the metrics endpoint's
    /// histograms).
    latency_totals: heartbeat::LatencyHistograms,
    /// Replication above this shard, on a cluster node.
    replication: Option<Rc<dyn replica::Replication>>,
}

/// The partitions of `view` this shard owns, with their settings.
fn owned_partitions(
    view: &MetadataView,
    context: &ShardContext,
) -> Vec<(PartitionKey, PartitionSettings)> {
    let mut owned = Vec::new();
    for stream in view.streams() {
        for topic in stream.topics.values() {
            let settings = PartitionSettings::from_topic(topic);
            for route in router::topic_routes(stream, topic, context.shards) {
                if route.owner == context.shard {
                    owned.push((route.key, settings));
                }
            }
        }
    }
    owned
}

/// The shard's life inside its runtime: recover its partitions, start the
/// listener and the timers, report ready, then run the inbox loop until
/// `Stop`, then drain.
async fn run(spec: ShardSpec, driver: Driver) -> Result<(), String> {
    let ShardSpec {
        id,
        pu,
        front,
        replication,
        inbox,
        mesh,
        heartbeats,
        events,
        data_dir,
        ..
    } = spec;
    let context = Rc::new(ShardContext::new(ContextSettings {
        shard: id,
        shards: mesh.shards(),
        mesh: mesh.clone(),
        started: spec.started,
        started_at_us: spec.started_at_us,
        view: spec.view.clone(),
    }));
    let mut shard = ShardLoop {
        context: context.clone(),
        pump: Pump::new(
            MonoioIo,
            Rc::new(SystemClock),
            PumpStorage {
                data_dir,
                access: spec.access,
                pool: BufferPool::with_budget(
                    limits::pool_idle_bytes_max(spec.per_shard_memory_bytes),
                    limits::io_buffer_budget_bytes(spec.per_shard_memory_bytes),
                ),
                trash: spec.trash,
                consumer_offsets_max: spec.consumer_offsets_max,
                read_window_bytes: limits::storage::READ_WINDOW_BYTES,
            },
        ),
        heartbeats,
        pu,
        store: spec.store,
        fatal: None,
        events: events.clone(),
        front: None,
        replication: None,
        latency_totals: heartbeat::LatencyHistograms::default(),
    };

    if let Some(start) = replication {
        let replication = (start.0)(context.clone())?;
        shard.replication = Some(replication.clone());
        shard.pump.set_replication(replication);
        if id == 0 {
            // A cluster node's metadata log: the metadata group starts with
            // it, installs its kept snapshot into the (in-memory) store and
            // applies the entries after it.
            let key = replica::METADATA_KEY;
            let settings = PartitionSettings {
                segment_size_bytes: replica::METADATA_SEGMENT_BYTES,
                ..PartitionSettings::default()
            };
            if let Err(error) = shard.pump.open(key, settings).await {
                return Err(format!("opening the cluster's metadata log: {error}"));
            }
        }
    }

    // Recovery: open (and check) every partition this shard owns.
    let owned = owned_partitions(&spec.view, &context);
    let total = owned.len();
    let mut done = 0;
    for chunk in owned.chunks(limits::RECOVERY_PROGRESS_EVERY) {
        let failed = shard.pump.open_many(chunk.to_vec()).await;
        if let Some((key, error)) = failed.into_iter().next() {
            return Err(format!("recovering partition {key}: {error}"));
        }
        done += chunk.len();
        let _ = events.send(ShardEvent::Recovering {
            shard: id,
            done,
            total,
        });
    }

    let (front, accept_task) = (front.0)(context.clone())?;
    shard.front = Some(front);

    // Timers only enqueue; the pump does the work when it gets to the
    // message. The heartbeat counter therefore moves only while the loop
    // itself makes progress.
    let mut timers = vec![
        (limits::HEARTBEAT_INTERVAL, Tick::Heartbeat),
        (limits::REPORT_INTERVAL, Tick::Report),
        (spec.retention_check_interval, Tick::Retention),
        (limits::TRASH_CHECK_INTERVAL, Tick::Trash),
    ];
    if !spec.flush_interval.is_zero() {
        timers.push((spec.flush_interval, Tick::Flush));
    }
    let timers: Vec<_> = timers
        .into_iter()
        .map(|(interval, tick)| monoio::spawn(tick_every(mesh.clone(), id, interval, tick)))
        .collect();

    tracing::info!(shard = id, pu, %driver, partitions = total, "shard ready");
    events
        .send(ShardEvent::Ready { shard: id, driver })
        .map_err(|_| "supervisor is gone")?;

    let mut stopping = false;
    while !stopping {
        // Wait for the next message, or for a background fsync to finish
        // (its completion advances a durable offset; publish it).
        let next = {
            let mut receive = std::pin::pin!(inbox.recv_async());
            let pump = &mut shard.pump;
            std::future::poll_fn(|cx| {
                let synced = pump.poll_background(cx).is_ready();
                let read = pump.poll_parked(cx).is_ready();
                let raft = pump.raft_queue().poll_ready(cx).is_ready();
                if synced || read || raft {
                    return std::task::Poll::Ready(None);
                }
                receive.as_mut().poll(cx).map(Some)
            })
            .await
        };
        let first = match next {
            None => {
                // A parked poll's read is done: answer it (a `persisted`
                // offset store waits for the commit's sync). Raft log
                // operations share the round's commit phase.
                shard.apply_raft_ops().await;
                shard.pump.resume_parked(false).await;
                shard.pump.commit().await;
                shard.publish();
                if let Some(fatal) = shard.pump.fatal() {
                    return Err(format!("stopping after a fatal storage error: {fatal}"));
                }
                continue;
            }
            Some(Ok(message)) => message,
            Some(Err(_)) => break,
        };
        stopping = shard.handle(first).await;
        let mut applied = 1;
        while !stopping && applied < limits::PUMP_OPS_PER_COMMIT {
            let Ok(message) = inbox.try_recv() else { break };
            stopping = shard.handle(message).await;
            applied += 1;
        }
        shard.apply_raft_ops().await;
        shard.pump.commit().await;
        shard.publish();
        if let Some(fatal) = shard.pump.fatal() {
            return Err(format!("stopping after a fatal storage error: {fatal}"));
        }
        if let Some(fatal) = &shard.fatal {
            return Err(format!("stopping after a fatal metadata error: {fatal}"));
        }
    }
    shard.begin_stopping();
    accept_task.await;
    // Finish what is already queued, then make everything durable.
    while let Ok(message) = inbox.try_recv() {
        shard.handle(message).await;
    }
    shard.pump.drain().await;
    shard.publish();
    drop(timers);
    if let Some(fatal) = shard.pump.fatal() {
        return Err(format!("drain failed: {fatal}"));
    }
    tracing::info!(
        shard = id,
        partitions = shard.pump.partitions(),
        "shard stopped"
    );
    Ok(())
}

#[derive(Debug, Clone, Copy)]
enum Tick {
    Heartbeat,
    Report,
    Flush,
    Retention,
    Trash,
}

async fn tick_every(mesh: Mesh, shard: ShardId, interval: Duration, tick: Tick) {
    loop {
        monoio::time::sleep(interval).await;
        let message = match tick {
            Tick::Heartbeat => ShardMessage::Heartbeat,
            Tick::Report => ShardMessage::PublishReport,
            Tick::Flush => ShardMessage::Partition(PartitionOp::FlushTick, Instant::now()),
            Tick::Retention => ShardMessage::Partition(PartitionOp::RetentionTick, Instant::now()),
            Tick::Trash => ShardMessage::Partition(PartitionOp::TrashTick, Instant::now()),
        };
        if mesh.send(shard, message).await.is_err() {
            return;
        }
    }
}

impl ShardLoop {
    /// Applies the Raft log operations this shard's groups queued (at most
    /// a round's worth; the rest wait for the next round).
    async fn apply_raft_ops(&mut self) {
        for _ in 0..limits::PUMP_OPS_PER_COMMIT {
            let Some((key, op)) = self.pump.raft_queue().pop() else {
                break;
            };
            self.pump.apply_raft(key, op).await;
        }
    }

    /// Apply one inbox message; true when it asks the shard to stop.
    async fn handle(&mut self, message: ShardMessage) -> bool {
        let id = self.context.shard;
        match message {
            ShardMessage::Heartbeat => self.heartbeats.bump(id),
            ShardMessage::View(view) => {
                if self.context.install_view(&view) {
                    if let Some(front) = &self.front {
                        front.view_installed(&view);
                    }
                    self.reconcile_partitions(&view).await;
                }
            }
            ShardMessage::Peer {
                channel,
                body,
                reply,
            } => match &self.replication {
                Some(replication) => replication.deliver(channel, body, reply),
                None => drop(reply),
            },
            ShardMessage::Request(envelope) => {
                let response = match envelope.request {
                    Request::Ping => Response::Pong {
                        shard: id,
                        pu: self.pu,
                        heartbeat: self.heartbeats.read(id),
                    },
                    Request::Clients => Response::Clients(
                        self.front
                            .as_ref()
                            .map(|front| front.clients())
                            .unwrap_or_default(),
                    ),
                    Request::Metadata(command) => {
                        let proposal = self
                            .replication
                            .as_ref()
                            .and_then(|replication| replication.propose_metadata(*command.clone()));
                        match proposal {
                            // A cluster node: the change goes through the
                            // metadata group; this loop must not wait for it
                            // (the group's apply comes back here).
                            Some(proposal) => {
                                let reply = envelope.reply;
                                monoio::spawn(async move {
                                    let _ = reply.send(Response::Metadata(proposal.await));
                                });
                                return false;
                            }
                            None => Response::Metadata(self.apply_metadata(*command).await),
                        }
                    }
                    Request::ApplyCommitted(command) => {
                        Response::Metadata(self.apply_metadata(*command).await)
                    }
                    Request::ExportMetadata => Response::Exported(match self.store.as_ref() {
                        Some(store) => store.export().map_err(|error| error.to_string()),
                        None => Err("this shard has no metadata store".to_string()),
                    }),
                    Request::ReplaceMetadata(bytes) => {
                        Response::Replaced(self.replace_metadata(&bytes).await)
                    }
                };
                // The requester may have given up; that is its business.
                let _ = envelope.reply.send(response);
            }
            ShardMessage::Partition(op, enqueued_at) => {
                self.pump.record_queue_wait(enqueued_at.elapsed());
                self.pump.apply(op).await;
            }
            ShardMessage::PublishReport => self.publish_report(),
            ShardMessage::StopAccepting => {
                self.begin_stopping();
                let front = self.front.clone();
                let events = self.events.clone();
                monoio::spawn(async move {
                    while front.as_ref().is_some_and(|front| !front.is_quiet()) {
                        monoio::time::sleep(Duration::from_millis(5)).await;
                    }
                    let _ = events.send(ShardEvent::Quiesced { shard: id });
                });
            }
            ShardMessage::Stop => return true,
            ShardMessage::ClusterStatus { reply } => {
                let shard = u32::try_from(id).unwrap_or(u32::MAX);
                let groups = self
                    .replication
                    .as_ref()
                    .map(|replication| replication.group_status(shard))
                    .unwrap_or_default();
                let _ = reply.send(groups);
            }
            ShardMessage::TransferLeader { channel, to, reply } => match &self.replication {
                Some(replication) => replication.transfer_leader(channel, to, reply),
                None => {
                    let _ = reply.send(Err("this node runs no cluster".to_string()));
                }
            },
            ShardMessage::ChangeMembers {
                channel,
                change,
                reply,
            } => match &self.replication {
                Some(replication) => replication.change_members(channel, change, reply),
                None => {
                    let _ = reply.send(Err(iggyd_raft::membership::MemberError::Failed(
                        "this node runs no cluster".to_string(),
                    )));
                }
            },
            ShardMessage::CloseClient { client_id, reply } => {
                let closed = self
                    .front
                    .as_ref()
                    .is_some_and(|front| front.close_client(client_id));
                let _ = reply.send(closed);
            }
            #[cfg(any(debug_assertions, feature = "fault-injection"))]
            ShardMessage::Freeze => {
                tracing::warn!(
                    shard = id,
                    pu = self.pu,
                    "fault injection: freezing this shard's loop"
                );
                loop {
                    std::thread::park();
                }
            }
        }
        false
    }

    /// Stop accepting and tell connections to finish.
    fn begin_stopping(&mut self) {
        if let Some(front) = &self.front {
            front.begin_stopping();
        }
    }

    /// Publish the once-a-second report: partition numbers and latency
    /// percentiles over the last window (the histograms restart).
    fn publish_report(&mut self) {
        self.pump.release_idle_memory();
        let (queue_wait, fsync) = self.pump.take_latencies();
        let request = self
            .front
            .as_ref()
            .map(|front| front.take_request_latency())
            .unwrap_or_default();
        let totals = &mut self.latency_totals;
        totals.request.add(&request.window);
        totals.queue_wait.add(&queue_wait.window);
        totals.fsync.add(&fsync.window);
        let report = heartbeat::ShardReport {
            partitions: self.pump.published_report(),
            consumer_offsets_refused: self.pump.counters.offsets_refused,
            trash: self.pump.trash_stats(),
            io_buffers: self.pump.pool().stats(),
            request,
            queue_wait,
            fsync,
            histograms: *totals,
            published_at: Some(Instant::now()),
            clients: self
                .front
                .as_ref()
                .map(|front| front.client_reports())
                .unwrap_or_default(),
            cluster: self.cluster_counters(),
        };
        self.heartbeats.publish_report(self.context.shard, report);
    }

    /// A cluster node's counters for the report (zero on a single node,
    /// which has no replication).
    fn cluster_counters(&self) -> heartbeat::ClusterCounters {
        let Some(replication) = &self.replication else {
            return heartbeat::ClusterCounters::default();
        };
        let front = self
            .front
            .as_ref()
            .map(|front| front.counters())
            .unwrap_or_default();
        heartbeat::ClusterCounters {
            replication: replication.counters(),
            not_accepted: front.not_accepted,
            not_committed: front.not_committed,
        }
    }

    /// Publish this shard's gauges for the supervisor and the console.
    fn publish(&self) {
        let counters = self.pump.counters;
        let front = self
            .front
            .as_ref()
            .map(|front| front.counters())
            .unwrap_or_default();
        self.heartbeats.publish(
            self.context.shard,
            &heartbeat::ShardCounters {
                messages_in: counters.messages_in,
                messages_out: counters.messages_out,
                bytes_in: counters.bytes_in,
                bytes_out: counters.bytes_out,
                fsyncs: counters.fsyncs,
                connections: front.connections,
                partitions: self.pump.partitions() as u64,
                sends_local: front.sends_local,
                sends_forwarded: front.sends_forwarded,
            },
        );
    }

    /// A cluster node: opens the partitions `view` gives this shard that its
    /// pump does not hold, refreshes the settings of those it holds, and
    /// removes those the view no longer lists, so that every node's shards
    /// follow the replicated metadata (on one node the handlers do this for
    /// the changes they make).
    async fn reconcile_partitions(&mut self, view: &Arc<MetadataView>) {
        if self.replication.is_none() {
            return;
        }
        let owned = owned_partitions(view, &self.context);
        let listed: std::collections::BTreeSet<PartitionKey> =
            owned.iter().map(|(key, _)| *key).collect();
        let held = self.pump.partitions();
        let started = Instant::now();
        for (key, error) in self.pump.open_many(owned).await {
            tracing::error!(partition = %key, %error, "a replicated partition did not open");
        }
        let opened = self.pump.partitions().saturating_sub(held);
        if opened > 0 {
            tracing::info!(
                shard = self.context.shard,
                opened,
                ms = started.elapsed().as_millis() as u64,
                "replicated partitions opened"
            );
        }
        for key in self.pump.keys() {
            if key == replica::METADATA_KEY || listed.contains(&key) {
                continue;
            }
            let (reply, _answer) = flume::bounded(1);
            self.pump.apply(PartitionOp::Remove { key, reply }).await;
        }
    }

    /// Shard 0 of a cluster node: replaces the store with a metadata
    /// snapshot's (checked whole first; bytes that do not check change
    /// nothing) and publishes its view as a change's.
    async fn replace_metadata(&mut self, bytes: &[u8]) -> Result<(), String> {
        let Some(store) = self.store.as_mut() else {
            return Err("this shard has no metadata store".to_string());
        };
        store.replace(bytes).map_err(|error| error.to_string())?;
        let view = store.publish();
        self.publish_view(&view).await;
        Ok(())
    }

    /// Shard 0: installs `view` here (opening and removing partitions as
    /// it lists them on a cluster node) and enqueues it to every other
    /// shard.
    async fn publish_view(&mut self, view: &Arc<MetadataView>) {
        if self.context.install_view(view) {
            if let Some(front) = &self.front {
                front.view_installed(view);
            }
            self.reconcile_partitions(view).await;
        }
        self.heartbeats.publish_view(view.clone());
        for shard in 0..self.context.shards {
            if shard == self.context.shard {
                continue;
            }
            // No deadlock: another shard's loop never waits on this
            // one, so a full inbox drains while we wait.
            let _ = self
                .context
                .mesh
                .send(shard, ShardMessage::View(view.clone()))
                .await;
        }
    }

    /// Shard 0: apply, journal, publish, and enqueue the new view to every
    /// other shard before answering (so a requester that then pings a shard
    /// knows that shard has installed it: inboxes are FIFO). Rejections come
    /// back as their wire status.
    async fn apply_metadata(
        &mut self,
        command: iggyd_metadata::MetadataCommand,
    ) -> Result<(iggyd_metadata::Applied, Arc<MetadataView>), Status> {
        let Some(store) = self.store.as_mut() else {
            tracing::error!(
                shard = self.context.shard,
                "metadata change sent to a shard without the store"
            );
            return Err(Status::Error);
        };
        match store.execute(command) {
            // Nothing changed (a repeated join): no new view to publish.
            Ok(applied @ iggyd_metadata::Applied::GroupJoined { changed: false, .. }) => {
                Ok((applied, self.context.view()))
            }
            Ok(applied @ iggyd_metadata::Applied::MovesCompleted { .. })
                if store.metadata().applied_commands() == self.context.view().version =>
            {
                Ok((applied, self.context.view()))
            }
            Ok(applied) => {
                let view = store.publish();
                self.publish_view(&view).await;
                Ok((applied, view))
            }
            Err(error) => {
                if let ExecuteError::Fatal(fatal) = &error {
                    tracing::error!(error = %fatal, "metadata store failed: stopping");
                    self.fatal = Some(fatal.to_string());
                }
                Err(error.status())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use front::{ClientInfo, FrontCounters};
    use heartbeat::Latency;

    /// A shard with nothing above it: the shard layer runs and stops
    /// without connections (and without the layer that provides them).
    struct NoFront;

    impl Front for NoFront {
        fn view_installed(&self, _: &Arc<MetadataView>) {}
        fn clients(&self) -> Vec<ClientInfo> {
            Vec::new()
        }
        fn begin_stopping(&self) {}
        fn is_quiet(&self) -> bool {
            true
        }
        fn take_request_latency(&self) -> Latency {
            Latency::default()
        }
        fn counters(&self) -> FrontCounters {
            FrontCounters::default()
        }
        fn client_reports(&self) -> Vec<front::ClientReport> {
            Vec::new()
        }
        fn close_client(&self, _: u32) -> bool {
            false
        }
    }

    fn no_front() -> FrontStart {
        FrontStart(Box::new(|_| {
            let front: Rc<dyn Front> = Rc::new(NoFront);
            Ok((front, monoio::spawn(async {})))
        }))
    }

    fn start(
        shards: usize,
    ) -> (
        Mesh,
        mpsc::Receiver<ShardEvent>,
        Vec<std::thread::JoinHandle<()>>,
    ) {
        // One more inbox than shards: the test thread acts as a shard too.
        let (mesh, receivers) = Mesh::new(shards + 1);
        let heartbeats = Heartbeats::new(shards + 1);
        let (events_tx, events) = mpsc::channel();
        let mut handles = Vec::new();
        for (id, inbox) in receivers.into_iter().enumerate().take(shards) {
            let spec = ShardSpec {
                id,
                pu: 0,
                pin: false,
                numa_node: None,
                driver: Driver::Epoll,
                require_io_uring: false,
                front: no_front(),
                replication: None,
                inbox,
                mesh: mesh.clone(),
                heartbeats: heartbeats.clone(),
                events: events_tx.clone(),
                data_dir: std::env::temp_dir(),
                view: iggyd_metadata::Metadata::new().publish(),
                store: None,
                retention_check_interval: limits::RETENTION_CHECK_INTERVAL,
                flush_interval: limits::FLUSH_INTERVAL,
                access: iggyd_storage::Access::Buffered,
                consumer_offsets_max: limits::CONSUMER_OFFSETS_PER_PARTITION as usize,
                per_shard_memory_bytes: limits::SHARD_MEMORY_MIN_BYTES,
                trash: Default::default(),
                started: Instant::now(),
                started_at_us: 0,
            };
            handles.push(spawn(spec).unwrap());
        }
        for _ in 0..shards {
            match events.recv_timeout(limits::SHARD_START_TIMEOUT).unwrap() {
                ShardEvent::Ready { .. } => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        (mesh, events, handles)
    }

    /// Proves a cross-shard request/reply round trip: a caller on another
    /// thread (with its own runtime) pings each shard through the mesh and
    /// gets each shard's own answer back; then Stop ends every shard cleanly.
    #[test]
    fn cross_shard_round_trip_and_clean_stop() {
        let shards = 2;
        let (mesh, events, handles) = start(shards);
        let caller = shards;
        let mut runtime = monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .build()
            .unwrap();
        let answers = runtime.block_on(async {
            let mut answers = Vec::new();
            for target in 0..shards {
                answers.push(mesh.request(caller, target, Request::Ping).await.unwrap());
            }
            answers
        });
        for (target, answer) in answers.into_iter().enumerate() {
            assert!(matches!(answer, Response::Pong { shard, .. } if shard == target));
        }
        for target in 0..shards {
            mesh.send_blocking(target, ShardMessage::Stop).unwrap();
        }
        for _ in 0..shards {
            match events.recv_timeout(limits::SHARD_START_TIMEOUT).unwrap() {
                ShardEvent::Exited { result, .. } => assert_eq!(result, Ok(())),
                other => panic!("unexpected {other:?}"),
            }
        }
        for handle in handles {
            handle.join().unwrap();
        }
    }
}
