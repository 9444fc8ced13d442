//! The supervisor runs on the main thread: it starts one thread per planned
//! shard, waits until every shard reports ready, tells the service manager,
//! then waits for signals and shard events:
//!
//! - SIGTERM/SIGINT: a graceful stop in two phases — every shard stops
//!   accepting and lets its connections finish (pumps keep running, since a
//!   connection on one shard may wait on another shard's pump), then every
//!   pump drains and fsyncs. All within `shutdown.drain_timeout`; a second
//!   signal or the timeout abandons the drain at once: the supervisor
//!   returns the error (shards still running are left behind, not joined)
//!   and `boot` turns it into the failure exit code, which ends the process.
//! - SIGHUP: re-read the configuration, apply what can change at runtime
//!   (log level and rotation limits, the drain timeout), log what changed and
//!   what needs a restart; an invalid configuration is rejected and the
//!   running one kept.
//! - SIGUSR2: rotate the log file now.
//! - The systemd watchdog is petted at half its interval, and only while
//!   every shard's heartbeat (which moves only when the shard's loop runs)
//!   advanced since the last ping; a wedged shard is named in `STATUS=` and
//!   the log, and systemd restarts the service.
//! - A one-line `STATUS=` summary is refreshed every few seconds.
//!
//! A shard that exits on its own is a failure of the whole daemon: the others
//! are stopped and the process exits non-zero, so systemd restarts a whole
//! daemon rather than keeping a half-alive one. Signals are blocked in every
//! thread (the mask is set before any shard is spawned and inherited) and
//! taken synchronously here with `sigtimedwait`, so no handler ever runs on a
//! shard.

//!
//! Once every shard is ready, and before `READY=1`, the control plane
//! starts (`control`): the admin socket, the metrics endpoint when
//! `metrics.address` is set, and the `snapshot` thread that builds
//! GetSnapshotFile ZIPs, so a client that waits for readiness finds them;
//! they stop first on the way down.

use crate::config::{Config, Sources};
use crate::control::ControlServer;
use crate::control::daemon_source::{DaemonSource, DaemonSourceParts};
use crate::control::metrics_server::{MetricsAuth, MetricsServer};
use crate::control::snapshot_file::{self, SnapshotWorker};
use crate::error::BootError;
use crate::limits;
use crate::logging::{LimitsUpdate, LogHandle};
use crate::net::context::NetSettings;
use crate::net::snapshot_request;
use crate::preflight::Driver;
use crate::shard::heartbeat::{Heartbeats, ShardCounters};
use crate::shard::mesh::{Mesh, ShardMessage};
use crate::shard::{self, ShardEvent, ShardSpec};
use crate::systemd;
use crate::topology::ShardPlan;
use iggyd_metadata::io::StdIo;
use iggyd_metadata::{Durability, MetadataStore};
use nix::sys::signal::{SigSet, Signal};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

/// What a SIGHUP needs: where the configuration came from, what is running,
/// and the logging handle to apply changes to.
#[derive(Debug)]
pub struct Reload {
    pub sources: Sources,
    pub config: Config,
    pub log: LogHandle,
    /// The shards' TLS configuration, when `tcp.tls.enabled` (set by
    /// `run` once it exists): SIGHUP loads the certificate files again.
    pub tls: Option<crate::net::tls::TlsCell>,
}

/// What the supervisor needs to start the shards.
#[derive(Debug)]
pub struct Launch {
    pub plan: ShardPlan,
    pub driver: Driver,
    pub require_io_uring: bool,
    pub address: SocketAddr,
    pub listeners: Vec<std::net::TcpListener>,
    pub data_dir: PathBuf,
    /// When the process started, for the time-to-ready log line.
    pub started: Instant,
    /// The recovered metadata store; it moves to shard 0, its only writer.
    pub store: MetadataStore<StdIo>,
    pub default_durability: Durability,
    pub reload: Reload,
    /// `admin.socket`, and the directories the admin snapshot reports on.
    pub admin_socket: PathBuf,
    /// The admin socket's listener, bound (or taken back) by `boot`.
    pub admin: Option<crate::control::server::AdminSocket>,
    /// The service manager keeps the listeners across a restart (`fdstore`):
    /// stopping hands them over instead of closing them (`Net::hand_over`).
    pub hand_over: bool,
    pub log_dir: PathBuf,
    /// How often each shard runs its retention check.
    pub retention_check_interval: Duration,
    /// `storage.flush_interval` (zero = off).
    pub flush_interval: Duration,
    /// `consumer_groups.rebalance_timeout`.
    pub rebalance_timeout: Duration,
    /// `limits.max_consumer_offsets_per_partition`.
    pub consumer_offsets_max: usize,
    /// How segments reach the disk (direct I/O where the file system takes
    /// it).
    pub access: iggyd_storage::Access,
    /// Each shard's share of `memory.budget`.
    pub per_shard_memory_bytes: u64,
    /// The bound metrics listener and the credentials scrapes must present
    /// (`metrics.address` set).
    pub metrics: Option<(std::net::TcpListener, MetricsAuth)>,
    /// What start-up reconciliation left in the trash (shard 0 empties it)
    /// and the first free trash sequence number (every shard's start).
    pub trash: iggyd_storage::trash::TrashStart,
    /// The TLS configuration loaded at start (`tcp.tls.enabled`).
    pub tls: Option<crate::net::tls::LoadedTls>,
    /// The soft RLIMIT_NOFILE the daemon runs with, when known.
    pub descriptors: Option<u64>,
    /// `[cluster]` on: the node's setup and each shard's bound replication
    /// listener.
    pub cluster: Option<ClusterLaunch>,
}

/// A cluster node's start: what every shard shares and one replication
/// listener per shard.
#[derive(Debug)]
pub struct ClusterLaunch {
    pub node: crate::cluster::node::NodeSetup,
    pub listeners: Vec<std::net::TcpListener>,
}

/// The signals the daemon handles. Blocked in every thread.
pub fn handled_signals() -> SigSet {
    let mut set = SigSet::empty();
    for signal in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGUSR2,
    ] {
        set.add(signal);
    }
    set
}

/// Block the handled signals in the calling thread; threads spawned after
/// this inherit the mask.
pub fn block_signals() -> Result<(), BootError> {
    handled_signals()
        .thread_block()
        .map_err(|errno| BootError::Runtime(format!("cannot block signals: {errno}")))
}

/// Wait up to `timeout` for one of the handled signals.
fn wait_signal(set: &SigSet, timeout: Duration) -> Option<Signal> {
    let timespec = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: `set` is a valid, initialised sigset; a null siginfo pointer is
    // allowed; `timespec` lives across the call.
    let number = unsafe { libc::sigtimedwait(set.as_ref(), std::ptr::null_mut(), &timespec) };
    if number < 0 {
        return None; // EAGAIN (timeout) or EINTR
    }
    Signal::try_from(number).ok()
}

struct Running {
    mesh: Mesh,
    events: mpsc::Receiver<ShardEvent>,
    handles: Vec<std::thread::JoinHandle<()>>,
    pus: Vec<u32>,
    exited: Vec<bool>,
    signals: SigSet,
    control: Option<ControlServer>,
    metrics: Option<MetricsServer>,
    snapshot: Option<SnapshotWorker>,
}

/// Start the shards and supervise them until a stop signal or a failure.
pub fn run(mut launch: Launch) -> Result<(), BootError> {
    let signals = handled_signals();
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
        signals,
        control: None,
        metrics: None,
        snapshot: None,
    };
    let (snapshot_files, snapshot_jobs) = snapshot_request::queue();
    let view = launch.store.publish();
    heartbeats.publish_view(view.clone());
    let net = start_net(&mut launch, shards, view.partitions_count() as u64)?;
    let mut store = Some(launch.store);
    let started_at_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_micros() as u64)
        .saturating_sub(launch.started.elapsed().as_micros() as u64);
    let listeners = std::mem::take(&mut launch.listeners);
    let mut replication: Vec<Option<crate::shard::replica::ReplicationStart>> =
        match launch.cluster.take() {
            Some(cluster) => cluster
                .listeners
                .into_iter()
                .enumerate()
                .map(|(shard, listener)| Some(cluster.node.start(shard, listener)))
                .collect(),
            None => Vec::new(),
        };
    for ((planned, listener), inbox) in launch.plan.shards.iter().zip(listeners).zip(inboxes) {
        let spec = ShardSpec {
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
            numa_node: if bind_numa { planned.numa_node } else { None },
            driver: launch.driver,
            require_io_uring: launch.require_io_uring,
            front: crate::net::front(
                NetSettings {
                    address: launch.address,
                    stale_after: limits::STALE_CLIENT_AFTER,
                    rebalance_timeout: launch.rebalance_timeout,
                    default_durability: launch.default_durability,
                    snapshot_files: snapshot_files.clone(),
                    net: net.clone(),
                },
                listener,
            ),
            replication: replication.get_mut(planned.shard).and_then(Option::take),
            inbox,
            mesh: mesh.clone(),
            heartbeats: heartbeats.clone(),
            events: events_tx.clone(),
            data_dir: launch.data_dir.clone(),
            view: view.clone(),
            store: if planned.shard == 0 {
                store.take()
            } else {
                None
            },
            consumer_offsets_max: launch.consumer_offsets_max,
            started: launch.started,
            started_at_us,
        };
        let handle = shard::spawn(spec).map_err(|error| {
            BootError::Runtime(format!(
                "cannot spawn shard thread {}: {error}",
                planned.shard
            ))
        })?;
        running.handles.push(handle);
    }
    drop(events_tx);
    let mut drain_timeout = launch.reload.config.shutdown.drain_timeout;

    // Start-up: every shard must report ready before READY=1.
    let deadline = Instant::now() + limits::SHARD_START_TIMEOUT;
    let mut extended_at = Instant::now();
    let mut drivers = Vec::with_capacity(shards);
    let mut shard_drivers = vec![launch.driver; shards];
    while drivers.len() < shards {
        if let Some(signal) = wait_signal(&signals, Duration::ZERO) {
            tracing::info!(%signal, "signal during start-up, stopping");
            return stop(&mut running, drain_timeout, None);
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
                shard_drivers[shard] = driver;
                drivers.push(driver);
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
                let failure = BootError::Shard {
                    shard,
                    pu: running.pus[shard],
                    message,
                };
                return stop(&mut running, drain_timeout, Some(failure));
            }
            Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline => {}
            Err(_) => {
                let failure = BootError::Runtime(format!(
                    "only {} of {shards} shards became ready within {:?}",
                    drivers.len(),
                    limits::SHARD_START_TIMEOUT
                ));
                return stop(&mut running, drain_timeout, Some(failure));
            }
        }
    }
    let cores: std::collections::BTreeSet<u32> = launch
        .plan
        .shards
        .iter()
        .map(|planned| planned.core)
        .collect();
    let source = Arc::new(DaemonSource::new(DaemonSourceParts {
        shards: launch.plan.shards.clone(),
        drivers: shard_drivers,
        numa_nodes: launch.plan.inputs.numa_nodes,
        heartbeats: heartbeats.clone(),
        mesh: mesh.clone(),
        started: launch.started,
        data_dir: launch.data_dir.clone(),
        log_dir: launch.log_dir.clone(),
        durability_default: launch.default_durability,
        log: Some(launch.reload.log.clone()),
        security: Some(net.admission.clone()),
        reply_budgets: net.reply_budgets.to_vec(),
        snapshot_files: Some(snapshot_files.clone()),
        cluster: net.cluster.clone(),
    }));
    let control = match launch.admin.take() {
        Some(socket) => ControlServer::start_on(socket, source.clone()),
        None => ControlServer::start(&launch.admin_socket, source.clone()),
    };
    match control {
        Ok(server) => {
            tracing::info!(socket = %launch.admin_socket.display(), "admin socket ready");
            running.control = Some(server);
        }
        Err(error) => {
            let failure = BootError::Control(error);
            return stop(&mut running, drain_timeout, Some(failure));
        }
    }
    if let Some((listener, auth)) = launch.metrics.take() {
        match MetricsServer::start(listener, auth, source.clone()) {
            Ok(server) => {
                tracing::info!(address = %server.address(), "metrics endpoint ready: GET /metrics");
                running.metrics = Some(server);
            }
            Err(error) => {
                let failure = BootError::Metrics(error);
                return stop(&mut running, drain_timeout, Some(failure));
            }
        }
    }
    let sources = snapshot_file::SnapshotSources {
        admin: source.clone(),
        heartbeats: heartbeats.clone(),
        config: launch.reload.config.clone(),
        plan: launch.plan.clone(),
    };
    match SnapshotWorker::start(&snapshot_files, snapshot_jobs, sources) {
        Ok(worker) => running.snapshot = Some(worker),
        Err(error) => {
            let failure = BootError::Runtime(format!("cannot start the snapshot thread: {error}"));
            return stop(&mut running, drain_timeout, Some(failure));
        }
    }
    drop(snapshot_files);
    let headline = format!(
        "serving on {}: {shards} shards on {} cores ({})",
        launch.address,
        cores.len(),
        summarize_drivers(&drivers)
    );
    tracing::info!(
        address = %launch.address,
        shards,
        driver = %summarize_drivers(&drivers),
        startup_ms = launch.started.elapsed().as_secs_f64() * 1000.0,
        "iggyd ready"
    );
    systemd::ready(&headline);

    let mut status = StatusLine::new(headline, launch.data_dir.clone(), launch.default_durability);
    status.cluster = net.cluster.clone();
    let mut watchdog = Watchdog::from_env(&heartbeats);
    if let Some(watchdog) = &watchdog {
        heartbeats.publish_watchdog(watchdog.interval.as_millis() as u64, None);
    }
    let mut reload = launch.reload;
    loop {
        // Wake exactly when the next watchdog ping is due, so the cadence is
        // half the interval, not half the interval rounded up to a tick.
        let wait = watchdog
            .as_ref()
            .map_or(limits::SUPERVISOR_TICK, |watchdog| {
                watchdog.until_due().min(limits::SUPERVISOR_TICK)
            });
        if let Some(signal) = wait_signal(&signals, wait) {
            match signal {
                Signal::SIGTERM | Signal::SIGINT => {
                    tracing::info!(%signal, "stopping");
                    return stop(&mut running, drain_timeout, None);
                }
                Signal::SIGHUP => {
                    if let Some(timeout) = reload_config(&mut reload, &status.headline) {
                        drain_timeout = timeout;
                    }
                }
                Signal::SIGUSR2 => match reload.log.rotate_now() {
                    Ok(rotated) => tracing::info!(?rotated, "log rotated on SIGUSR2"),
                    Err(error) => tracing::warn!(%error, "log rotation on SIGUSR2 failed"),
                },
                other => tracing::debug!(signal = %other, "signal ignored"),
            }
        }
        while let Ok(event) = running.events.try_recv() {
            if let ShardEvent::Exited { shard, result } = event {
                running.exited[shard] = true;
                let message = match result {
                    Ok(()) => "stopped without being asked".to_string(),
                    Err(message) => message,
                };
                let failure = BootError::Shard {
                    shard,
                    pu: running.pus[shard],
                    message,
                };
                tracing::error!(%failure, "a shard stopped; stopping the daemon");
                return stop(&mut running, drain_timeout, Some(failure));
            }
        }
        if let Some(watchdog) = watchdog.as_mut() {
            watchdog.tick(&heartbeats, &running.pus, &mut status);
            heartbeats.publish_watchdog(
                watchdog.interval.as_millis() as u64,
                watchdog.reported.first().copied(),
            );
        }
        status.tick(&heartbeats, &mesh);
    }
}

/// What every shard's connections share: admission with the caps of
/// `[limits]` (logged), the login pool, the TLS cell, the append budgets.
fn start_net(
    launch: &mut Launch,
    shards: usize,
    partitions: u64,
) -> Result<crate::net::Net, BootError> {
    use crate::net::admission::{Admission, AdmissionLimits};
    use crate::net::append_budget::AppendBudget;
    use crate::net::reply_budget::ReplyBudget;
    use crate::net::{ConnectionLimits, Net, login::LoginPool, tls::TlsCell};
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

fn summarize_drivers(drivers: &[Driver]) -> String {
    let uring = drivers
        .iter()
        .filter(|driver| **driver == Driver::IoUring)
        .count();
    match (uring, drivers.len() - uring) {
        (_, 0) => "io_uring".to_string(),
        (0, _) => "epoll".to_string(),
        (uring, epoll) => format!("io_uring on {uring} shards, epoll on {epoll}"),
    }
}

/// The live `STATUS=` summary: refreshed every `limits::STATUS_EVERY` from
/// the shards' published gauges (no shard is asked anything).
struct StatusLine {
    headline: String,
    data_dir: PathBuf,
    durability: Durability,
    last_at: Instant,
    last: ShardCounters,
    /// A watchdog problem overrides the summary until it clears.
    alarm: Option<String>,
    /// A cluster node: its role is part of the summary.
    cluster: Option<Arc<crate::cluster::node::ClusterRoster>>,
}

impl StatusLine {
    fn new(headline: String, data_dir: PathBuf, durability: Durability) -> StatusLine {
        StatusLine {
            headline,
            data_dir,
            durability,
            last_at: Instant::now(),
            last: ShardCounters::default(),
            alarm: None,
            cluster: None,
        }
    }

    fn tick(&mut self, heartbeats: &Heartbeats, mesh: &Mesh) {
        let elapsed = self.last_at.elapsed();
        if elapsed < limits::STATUS_EVERY {
            return;
        }
        let total = heartbeats.total();
        let seconds = elapsed.as_secs_f64();
        let rate = |now: u64, before: u64| now.saturating_sub(before) as f64 / seconds;
        let messages_in = rate(total.messages_in, self.last.messages_in);
        let messages_out = rate(total.messages_out, self.last.messages_out);
        let queued: usize = (0..mesh.shards()).map(|shard| mesh.depth(shard)).sum();
        let disk = match nix::sys::statvfs::statvfs(&self.data_dir) {
            Ok(stat) => {
                let free = stat.blocks_available() * stat.fragment_size();
                let total = stat.blocks() * stat.fragment_size();
                let percent = if total > 0 {
                    free as f64 * 100.0 / total as f64
                } else {
                    0.0
                };
                format!(
                    "disk {:.1} GiB free ({percent:.0}%)",
                    free as f64 / (1u64 << 30) as f64
                )
            }
            Err(_) => "disk unknown".to_string(),
        };
        let role = match &self.cluster {
            None => String::new(),
            Some(cluster) => match cluster.live_leader() {
                Some(leader) if leader == cluster.node_id => {
                    format!(
                        " · cluster {} node {}: leader",
                        cluster.name, cluster.node_id
                    )
                }
                Some(leader) => format!(
                    " · cluster {} node {}: follower of node {leader}",
                    cluster.name, cluster.node_id
                ),
                None => format!(
                    " · cluster {} node {}: no leader (electing)",
                    cluster.name, cluster.node_id
                ),
            },
        };
        let line = match &self.alarm {
            Some(alarm) => alarm.clone(),
            None => format!(
                "{}{role} · {} connections · in {messages_in:.0} msg/s · out {messages_out:.0} msg/s · {queued} queued · durability {} · {disk}",
                self.headline,
                total.connections,
                self.durability.as_str()
            ),
        };
        systemd::status(&line);
        self.last = total;
        self.last_at = Instant::now();
    }
}

/// Pets the systemd watchdog only while every shard proves it is alive.
struct Watchdog {
    interval: Duration,
    ping_every: Duration,
    last_ping: Instant,
    /// Heartbeats at the last ping.
    seen: Vec<u64>,
    /// Shards reported wedged (reported once until they recover).
    reported: Vec<usize>,
    /// When every shard last proved progress.
    progress_at: Instant,
}

impl Watchdog {
    fn from_env(heartbeats: &Heartbeats) -> Option<Watchdog> {
        let interval = systemd::watchdog_interval()?;
        let ping_every = interval / 2;
        if ping_every < limits::HEARTBEAT_INTERVAL * 2 {
            tracing::warn!(
                ?interval,
                "WatchdogSec is shorter than four heartbeats; a busy but healthy shard may be reported as wedged"
            );
        }
        tracing::info!(
            ?interval,
            ?ping_every,
            "systemd watchdog enabled: gated on every shard's heartbeat"
        );
        Some(Watchdog {
            interval,
            ping_every,
            last_ping: Instant::now(),
            seen: heartbeats.snapshot(),
            reported: Vec::new(),
            progress_at: Instant::now(),
        })
    }

    fn until_due(&self) -> Duration {
        self.ping_every.saturating_sub(self.last_ping.elapsed())
    }

    fn tick(&mut self, heartbeats: &Heartbeats, pus: &[u32], status: &mut StatusLine) {
        if self.last_ping.elapsed() < self.ping_every {
            return;
        }
        // Keep the cadence: the next check is due one period after this one
        // was due, not after it ran.
        self.last_ping += self.ping_every;
        if self.last_ping.elapsed() > self.ping_every {
            self.last_ping = Instant::now();
        }
        let now = heartbeats.snapshot();
        let wedged: Vec<usize> = (0..now.len())
            .filter(|shard| now[*shard] == self.seen[*shard])
            .collect();
        if wedged.is_empty() {
            systemd::watchdog();
            self.seen = now;
            self.progress_at = Instant::now();
            if !self.reported.is_empty() {
                tracing::info!("every shard makes progress again; watchdog pings resumed");
                self.reported.clear();
                status.alarm = None;
            }
            return;
        }
        if self.reported != wedged {
            let names: Vec<String> = wedged
                .iter()
                .map(|shard| format!("shard {shard} (PU {})", pus[*shard]))
                .collect();
            let alarm = format!(
                "watchdog: {} made no progress for {:.1} s; not petting the watchdog (limit {:?})",
                names.join(", "),
                self.progress_at.elapsed().as_secs_f64(),
                self.interval
            );
            tracing::error!("{alarm}");
            systemd::status(&alarm);
            status.alarm = Some(alarm);
            self.reported = wedged;
        }
    }
}

/// Flatten a configuration to `dotted.key = value` pairs, for diffs.
fn flatten(config: &Config) -> BTreeMap<String, String> {
    config
        .entries()
        .into_iter()
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect()
}

/// SIGHUP: returns the new drain timeout when the reload was applied.
fn reload_config(reload: &mut Reload, headline: &str) -> Option<Duration> {
    systemd::reloading("reloading configuration");
    let outcome = match Config::load(&reload.sources) {
        Err(error) => {
            tracing::error!(%error, "reload rejected: keeping the running configuration");
            None
        }
        Ok(next) => {
            let before = flatten(&reload.config);
            let after = flatten(&next);
            let mut restart = Vec::new();
            let mut applied = Vec::new();
            for key in before
                .keys()
                .chain(after.keys())
                .collect::<std::collections::BTreeSet<_>>()
            {
                let (old, new) = (before.get(key), after.get(key));
                if old == new {
                    continue;
                }
                let old = old.map_or("(unset)", String::as_str);
                let new = new.map_or("(unset)", String::as_str);
                if !crate::config::applies_live(key) {
                    restart.push(format!("{key}: {old} -> {new}"));
                } else {
                    applied.push(format!("{key}: {old} -> {new}"));
                }
            }
            // The certificate files are read again on every reload (a
            // rotation keeps the paths); a pair that does not load leaves
            // the running one in place, and its key changes are refused.
            let tls_refused = reload_tls(reload, &next);
            if tls_refused {
                applied.retain(|change| !change.starts_with("tcp.tls."));
            }
            if let Err(error) = reload.log.set_level(&next.logging.level) {
                tracing::error!(%error, "reload: the new log level was refused");
            }
            match reload.log.update_limits(&next.logging) {
                Ok(LimitsUpdate::Applied) => {}
                Ok(needs_restart) => tracing::warn!(%needs_restart, "reload"),
                Err(error) => tracing::error!(%error, "reload: new log limits were refused"),
            }
            for change in &applied {
                tracing::info!(change = %change, "reload: applied");
            }
            for change in &restart {
                tracing::warn!(change = %change, "reload: needs a restart to take effect");
            }
            if applied.is_empty() && restart.is_empty() {
                tracing::info!("reload: configuration unchanged");
            }
            // Keep the running values of restart-only keys: a later reload
            // diffs against what actually runs.
            let mut running = reload.config.clone();
            running.logging.level = next.logging.level.clone();
            running.logging.max_file_size_bytes = next.logging.max_file_size_bytes;
            running.logging.max_total_size_bytes = next.logging.max_total_size_bytes;
            running.logging.retention = next.logging.retention;
            running.logging.rotation_check_interval = next.logging.rotation_check_interval;
            running.shutdown.drain_timeout = next.shutdown.drain_timeout;
            if !tls_refused {
                running.tcp.tls.cert_file = next.tcp.tls.cert_file.clone();
                running.tcp.tls.key_file = next.tcp.tls.key_file.clone();
                running.tcp.tls.client_ca_file = next.tcp.tls.client_ca_file.clone();
            }
            reload.config = running;
            Some(next.shutdown.drain_timeout)
        }
    };
    systemd::ready(headline);
    outcome
}

/// SIGHUP with TLS on: load `next`'s certificate files and swap them in
/// for new connections. Returns true when they were refused (logged with
/// the reason; the running pair stays).
fn reload_tls(reload: &Reload, next: &Config) -> bool {
    let Some(cell) = &reload.tls else {
        return false;
    };
    let credentials = std::env::var_os("CREDENTIALS_DIRECTORY").map(PathBuf::from);
    // `enabled` needs a restart: load the files the next config names, as
    // if TLS stays on.
    let wanted = crate::config::TlsConfig {
        enabled: true,
        ..next.tcp.tls.clone()
    };
    let running = cell.description();
    match crate::net::tls::load(&wanted, credentials.as_deref()) {
        Ok(loaded) if loaded.description == running => {
            cell.replace(loaded);
            tracing::info!(certificate = %running, "reload: TLS certificate unchanged");
            false
        }
        Ok(loaded) => {
            tracing::info!(
                certificate = %loaded.description,
                was = %running,
                "reload: TLS certificate applied; new connections use it, open ones keep theirs"
            );
            cell.replace(loaded);
            false
        }
        Err(error) => {
            tracing::error!(
                %error,
                kept = %running,
                "reload: TLS certificate refused, keeping the running one"
            );
            true
        }
    }
}

/// Stop every live shard in two phases within `timeout`: stop accepting and
/// let connections finish (bounded by `limits::QUIESCE_MAX`), then drain the
/// pumps. Returns `failure` (the reason for stopping) if there was one.
fn stop(
    running: &mut Running,
    timeout: Duration,
    failure: Option<BootError>,
) -> Result<(), BootError> {
    systemd::stopping("stopping: finishing requests");
    if let Some(control) = running.control.take() {
        control.stop();
    }
    if let Some(metrics) = running.metrics.take() {
        metrics.stop();
    }
    if let Some(snapshot) = running.snapshot.take() {
        snapshot.stop();
    }
    let started = Instant::now();
    let deadline = started + timeout;
    let mut extended_at = started;
    let live: Vec<usize> = (0..running.exited.len())
        .filter(|shard| !running.exited[*shard])
        .collect();
    for shard in &live {
        // An inbox that stays full until the deadline belongs to a wedged
        // shard; the deadline below handles it.
        let _ = running
            .mesh
            .send_deadline(*shard, ShardMessage::StopAccepting, deadline);
    }
    let quiesce_deadline = deadline.min(started + limits::QUIESCE_MAX);
    let mut quiesced = vec![false; running.exited.len()];
    while live
        .iter()
        .any(|shard| !quiesced[*shard] && !running.exited[*shard])
    {
        match wait_event(running, quiesce_deadline, &mut extended_at)? {
            Some(ShardEvent::Quiesced { shard }) => quiesced[shard] = true,
            Some(_) => {}
            None => break,
        }
    }
    systemd::status("stopping: draining and syncing partitions");
    for shard in &live {
        if !running.exited[*shard] {
            let _ = running
                .mesh
                .send_deadline(*shard, ShardMessage::Stop, deadline);
        }
    }
    while running.exited.iter().any(|exited| !exited) {
        if Instant::now() >= deadline {
            let stuck: Vec<String> = running
                .exited
                .iter()
                .enumerate()
                .filter(|(_, exited)| !**exited)
                .map(|(shard, _)| format!("shard {shard} (PU {})", running.pus[shard]))
                .collect();
            // The stuck shards' threads are detached, not joined: `boot`
            // returns the exit code and the process ends with them. The
            // reason for stopping, if any, is logged here: the error that
            // travels up is the timeout.
            running.handles.clear();
            if let Some(failure) = &failure {
                tracing::error!("iggyd: {failure}");
            }
            return Err(BootError::DrainTimeout {
                timeout,
                stuck: stuck.join(", "),
            });
        }
        if wait_event(running, deadline, &mut extended_at)?.is_none() && running.handles.is_empty()
        {
            break;
        }
    }
    for handle in running.handles.drain(..) {
        let _ = handle.join();
    }
    tracing::info!(
        drain_ms = started.elapsed().as_secs_f64() * 1000.0,
        "shards stopped"
    );
    match failure {
        Some(failure) => Err(failure),
        None => {
            tracing::info!("iggyd stopped cleanly");
            Ok(())
        }
    }
}

/// Wait for one shard event until `deadline`, watching for a second signal
/// (which abandons the drain: `Err`, and the stuck threads are detached) and
/// extending systemd's stop timeout while draining takes long. Marks exited
/// shards.
fn wait_event(
    running: &mut Running,
    deadline: Instant,
    extended_at: &mut Instant,
) -> Result<Option<ShardEvent>, BootError> {
    loop {
        if let Some(signal) = wait_signal(&running.signals, Duration::ZERO) {
            running.handles.clear();
            return Err(BootError::SecondSignal {
                signal: signal.to_string(),
            });
        }
        if extended_at.elapsed() >= limits::EXTEND_TIMEOUT_EVERY {
            *extended_at = Instant::now();
            systemd::extend_timeout(
                limits::EXTEND_TIMEOUT_BY,
                "stopping: draining partitions is taking a while",
            );
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(None);
        }
        let wait = (deadline - now).min(Duration::from_millis(20));
        match running.events.recv_timeout(wait) {
            Ok(event) => {
                if let ShardEvent::Exited { shard, result } = &event {
                    running.exited[*shard] = true;
                    if let Err(message) = result {
                        tracing::error!(shard, %message, "shard failed while stopping");
                    }
                }
                return Ok(Some(event));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return Ok(None),
        }
    }
}
