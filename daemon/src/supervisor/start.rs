//! The supervisor's first phases: spawning one thread per planned shard
//! (each with its `ShardSpec`, the connections' shared `Net` and, in a
//! cluster, its replication), then waiting until every shard reports ready
//! while telling systemd that recovery takes a while.
//!
//! Nothing here serves or stops: a signal or a failure during start-up is
//! handed back to `run`, which stops what was started.

use super::{Ending, Launch, Running, wait_signal};
use crate::error::BootError;
use crate::limits;
use crate::net::Net;
use crate::net::context::NetSettings;
use crate::net::snapshot_request::{self, SnapshotFiles, SnapshotJobs};
use crate::preflight::Driver;
use crate::shard::heartbeat::Heartbeats;
use crate::shard::mesh::{Mesh, ShardMessage};
use crate::shard::replica::ReplicationStart;
use crate::shard::{self, ShardEvent, ShardSpec};
use crate::systemd;
use crate::topology::PlannedShard;
use iggyd_metadata::io::StdIo;
use iggyd_metadata::{MetadataStore, MetadataView};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

/// What spawning the shards made, which the later phases share.
pub(super) struct Started {
    pub(super) running: Running,
    pub(super) heartbeats: Heartbeats,
    pub(super) net: Net,
    /// The shards' end of the GetSnapshotFile queue; the supervisor's copy
    /// is dropped once the worker runs.
    pub(super) snapshot_files: SnapshotFiles,
}

/// Every shard's start, apart from its own place in the plan.
struct Shared {
    mesh: Mesh,
    heartbeats: Heartbeats,
    events: mpsc::Sender<ShardEvent>,
    net: Net,
    snapshot_files: SnapshotFiles,
    view: Arc<MetadataView>,
    bind_numa: bool,
    started_at_us: u64,
}

/// Spawns one thread per planned shard. The metadata store moves to
/// shard 0; the worker's end of the snapshot queue comes back for the
/// control plane.
pub(super) fn spawn_shards(
    launch: &mut Launch,
    store: MetadataStore<StdIo>,
) -> Result<(Started, SnapshotJobs), BootError> {
    let shards = launch.plan.shards.len();
    assert!(shards > 0);
    assert_eq!(launch.listeners.len(), shards);
    let (mesh, inboxes) = Mesh::new(shards);
    let heartbeats = Heartbeats::new(shards);
    let (events_tx, events) = mpsc::channel();
    let bind_numa = launch.plan.inputs.numa_nodes > 1;
    if !bind_numa {
        tracing::info!("one NUMA node: shard memory binding skipped");
    }
    let mut running = Running {
        mesh: mesh.clone(),
        events,
        handles: Vec::with_capacity(shards),
        pus: launch
            .plan
            .shards
            .iter()
            .map(|planned| planned.pu)
            .collect(),
        exited: vec![false; shards],
        signals: super::handled_signals(),
        control: None,
        metrics: None,
        snapshot: None,
    };
    let (snapshot_files, snapshot_jobs) = snapshot_request::queue();
    let view = store.publish();
    heartbeats.publish_view(view.clone());
    let net = start_net(launch, shards, view.partitions_count() as u64)?;
    let mut store = Some(store);
    let shared = Shared {
        mesh,
        heartbeats: heartbeats.clone(),
        events: events_tx,
        net: net.clone(),
        snapshot_files: snapshot_files.clone(),
        view,
        bind_numa,
        started_at_us: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_micros() as u64)
            .saturating_sub(launch.started.elapsed().as_micros() as u64),
    };
    let listeners = std::mem::take(&mut launch.listeners);
    let mut replication = start_replication(launch);
    let plan = launch.plan.shards.clone();
    for ((planned, listener), inbox) in plan.iter().zip(listeners).zip(inboxes) {
        let own = OwnStart {
            listener,
            inbox,
            replication: replication.get_mut(planned.shard).and_then(Option::take),
            store: if planned.shard == 0 {
                store.take()
            } else {
                None
            },
        };
        let spec = shard_spec(launch, &shared, planned, own);
        let handle = shard::spawn(spec).map_err(|error| {
            BootError::Runtime(format!(
                "cannot spawn shard thread {}: {error}",
                planned.shard
            ))
        })?;
        running.handles.push(handle);
    }
    let started = Started {
        running,
        heartbeats,
        net,
        snapshot_files,
    };
    Ok((started, snapshot_jobs))
}

/// Each shard's replication start (a cluster node), by shard; empty on
/// one node.
fn start_replication(launch: &mut Launch) -> Vec<Option<ReplicationStart>> {
    // SIGHUP rotates the node's certificate in every shard's peer server
    // and client (they share it).
    launch.reload.cluster_tls = launch
        .cluster
        .as_ref()
        .map(|cluster| cluster.node.tls.clone());
    match launch.cluster.take() {
        Some(cluster) => cluster
            .listeners
            .into_iter()
            .enumerate()
            .map(|(shard, listener)| Some(cluster.node.start(shard, listener)))
            .collect(),
        None => Vec::new(),
    }
}

/// What a shard's connections are started with.
fn net_settings(launch: &Launch, shared: &Shared) -> NetSettings {
    NetSettings {
        address: launch.address,
        stale_after: limits::STALE_CLIENT_AFTER,
        rebalance_timeout: launch.rebalance_timeout,
        default_durability: launch.default_durability,
        snapshot_files: shared.snapshot_files.clone(),
        net: shared.net.clone(),
    }
}

/// What one shard takes for itself: its listener, its inbox, its
/// replication (a cluster node) and, shard 0 only, the metadata store.
struct OwnStart {
    listener: std::net::TcpListener,
    inbox: flume::Receiver<ShardMessage>,
    replication: Option<ReplicationStart>,
    store: Option<MetadataStore<StdIo>>,
}

/// The spec of the shard `planned`. Shard 0 takes the trash entries
/// start-up reconciliation found.
fn shard_spec(
    launch: &mut Launch,
    shared: &Shared,
    planned: &PlannedShard,
    own: OwnStart,
) -> ShardSpec {
    ShardSpec {
        front: crate::net::front(net_settings(launch, shared), own.listener),
        replication: own.replication,
        inbox: own.inbox,
        store: own.store,
        retention_check_interval: launch.retention_check_interval,
        flush_interval: launch.flush_interval,
        access: launch.access,
        per_shard_memory_bytes: launch.per_shard_memory_bytes,
        trash: iggyd_storage::trash::TrashStart {
            next_seq: launch.trash.next_seq,
            pending: if planned.shard == 0 {
                std::mem::take(&mut launch.trash.pending)
            } else {
                Vec::new()
            },
        },
        id: planned.shard,
        pu: planned.pu,
        pin: launch.plan.is_this_system(),
        numa_node: if shared.bind_numa {
            planned.numa_node
        } else {
            None
        },
        driver: launch.driver,
        require_io_uring: launch.require_io_uring,
        mesh: shared.mesh.clone(),
        heartbeats: shared.heartbeats.clone(),
        events: shared.events.clone(),
        data_dir: launch.data_dir.clone(),
        view: shared.view.clone(),
        consumer_offsets_max: launch.consumer_offsets_max,
        started: launch.started,
        started_at_us: shared.started_at_us,
    }
}

/// What every shard's connections share: admission with the caps of
/// `[limits]` (logged), the login pool, the TLS cell, the append budgets.
fn start_net(launch: &mut Launch, shards: usize, partitions: u64) -> Result<Net, BootError> {
    use crate::net::admission::{Admission, AdmissionLimits};
    use crate::net::append_budget::AppendBudget;
    use crate::net::reply_budget::ReplyBudget;
    use crate::net::{ConnectionLimits, login::LoginPool, tls::TlsCell};
    let limits = launch.reload.config.limits.clone();
    let admission = Admission::new(AdmissionLimits {
        max_connections: limits.max_connections,
        max_connections_per_address: limits.max_connections_per_address,
        descriptors: launch.descriptors,
        shards: shards as u64,
        login_backoff: limits.login_backoff,
        max_login_backoff: limits.max_login_backoff,
    });
    let (total, per_address) = admission.caps(partitions);
    tracing::info!(
        max_connections = total,
        max_connections_per_address = per_address,
        open_files_limit = ?launch.descriptors,
        descriptors_reserved = admission.descriptors_reserved(partitions),
        "connection limits"
    );
    if let Some(configured) = limits.max_connections
        && configured > total
    {
        tracing::warn!(
            configured,
            max_connections = total,
            "limits.max_connections is more than the open-files limit leaves after the \
             descriptors kept for storage; raise LimitNOFILE= to allow it"
        );
    }
    if total < limits::CONNECTIONS_FEW {
        tracing::warn!(
            max_connections = total,
            open_files_limit = ?launch.descriptors,
            "the open-files limit leaves room for very few client connections; raise \
             LimitNOFILE= (ulimit -n)"
        );
    }
    let logins = LoginPool::start(
        usize::try_from(limits.login_threads).unwrap_or(1),
        usize::try_from(limits.max_queued_logins).unwrap_or(1),
        iggyd_metadata::auth::HashCost::PRODUCTION,
    )
    .map_err(|error| BootError::Runtime(format!("cannot start the login threads: {error}")))?;
    let tls = launch.tls.take().map(TlsCell::new);
    launch.reload.tls = tls.clone();
    Ok(Net {
        admission,
        logins,
        tls,
        append_budgets: (0..shards)
            .map(|_| AppendBudget::new(limits.max_append_bytes_in_flight_bytes))
            .collect(),
        reply_budgets: (0..shards)
            .map(|_| ReplyBudget::new(limits.max_poll_reply_bytes_in_flight))
            .collect(),
        limits: ConnectionLimits::of(&limits),
        cluster: launch
            .cluster
            .as_ref()
            .map(|cluster| cluster.node.roster.clone()),
        live_sessions: Default::default(),
        hand_over: launch.hand_over,
        accepting: crate::net::handover::Accepting::new(shards),
    })
}

/// What the shards reported at start: each one's I/O driver, in shard
/// order.
pub(super) struct Ready {
    pub(super) drivers: Vec<Driver>,
}

/// Waits until every shard reports ready, relaying recovery progress to
/// `STATUS=` and extending systemd's start timeout while it takes long. A
/// signal, a shard that exits, or `limits::SHARD_START_TIMEOUT` passing
/// ends start-up.
pub(super) fn wait_ready(running: &mut Running, driver: Driver) -> Result<Ready, Ending> {
    let shards = running.exited.len();
    let deadline = Instant::now() + limits::SHARD_START_TIMEOUT;
    let mut extended_at = Instant::now();
    let mut ready = 0;
    let mut drivers = vec![driver; shards];
    while ready < shards {
        if let Some(signal) = wait_signal(&running.signals, Duration::ZERO) {
            tracing::info!(%signal, "signal during start-up, stopping");
            return Err(Ending::Signal);
        }
        if extended_at.elapsed() >= limits::EXTEND_TIMEOUT_EVERY {
            extended_at = Instant::now();
            systemd::extend_timeout(
                limits::EXTEND_TIMEOUT_BY,
                "starting: recovery is taking a while",
            );
        }
        match running.events.recv_timeout(Duration::from_millis(5)) {
            Ok(ShardEvent::Ready { shard, driver }) => {
                drivers[shard] = driver;
                ready += 1;
            }
            Ok(ShardEvent::Recovering { shard, done, total }) => {
                systemd::status(&format!(
                    "recovering partitions: shard {shard} {done}/{total}"
                ));
            }
            Ok(ShardEvent::Quiesced { .. }) => {}
            Ok(ShardEvent::Exited { shard, result }) => {
                running.exited[shard] = true;
                let message = result
                    .err()
                    .unwrap_or_else(|| "exited during start-up".into());
                return Err(Ending::Failure(BootError::Shard {
                    shard,
                    pu: running.pus[shard],
                    message,
                }));
            }
            Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline => {}
            Err(_) => {
                return Err(Ending::Failure(BootError::Runtime(format!(
                    "only {ready} of {shards} shards became ready within {:?}",
                    limits::SHARD_START_TIMEOUT
                ))));
            }
        }
    }
    Ok(Ready { drivers })
}
