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
//!
//! `run` goes through named phases, one file each: `start.rs` spawns the
//! shards and waits until each reports ready, `control_plane.rs` starts the
//! threads that read what shards publish and says `READY=1`, `serve.rs`
//! takes signals and shard events while the daemon serves (with
//! `status.rs`'s `STATUS=` line and `watchdog.rs`'s heartbeat-gated pings,
//! and `reload.rs` for SIGHUP), and `stop.rs` stops it in two phases.

mod control_plane;
mod reload;
mod serve;
mod start;
mod status;
mod stop;
mod watchdog;

use crate::config::{Config, Sources};
use crate::control::ControlServer;
use crate::control::metrics_server::{MetricsAuth, MetricsServer};
use crate::control::snapshot_file::SnapshotWorker;
use crate::error::BootError;
use crate::logging::LogHandle;
use crate::preflight::Driver;
use crate::shard::ShardEvent;
use crate::shard::mesh::Mesh;
use crate::topology::ShardPlan;
use iggyd_metadata::io::StdIo;
use iggyd_metadata::{Durability, MetadataStore};
use nix::sys::signal::{SigSet, Signal};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::mpsc;
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
    /// A cluster node's peer identity (set by `run` once the node starts):
    /// SIGHUP loads the `[cluster.tls]` files again.
    pub cluster_tls: Option<iggyd_peer::PeerTls>,
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

/// The shards and threads the supervisor started, and what it watches
/// them through; `stop` ends them.
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

/// Why a phase ends the daemon early: a stop signal, or a failure that
/// becomes the exit code once the shards are stopped.
enum Ending {
    Signal,
    Failure(BootError),
}

impl Ending {
    fn failure(self) -> Option<BootError> {
        match self {
            Ending::Signal => None,
            Ending::Failure(failure) => Some(failure),
        }
    }
}

/// Start the shards and supervise them until a stop signal or a failure:
/// start them, wait until every one is ready, start the control plane and
/// say `READY=1`, serve, then stop. `store`, the recovered metadata store,
/// moves to shard 0, its only writer.
pub fn run(mut launch: Launch, store: MetadataStore<StdIo>) -> Result<(), BootError> {
    let (mut started, snapshot_jobs) = start::spawn_shards(&mut launch, store)?;
    let drain_timeout = launch.reload.config.shutdown.drain_timeout;
    let ready = match start::wait_ready(&mut started.running, launch.driver) {
        Ok(ready) => ready,
        Err(ending) => return stop::stop(&mut started.running, drain_timeout, ending.failure()),
    };
    let headline = match control_plane::start(&mut launch, &mut started, ready, snapshot_jobs) {
        Ok(headline) => headline,
        Err(failure) => return stop::stop(&mut started.running, drain_timeout, Some(failure)),
    };
    serve::serve(started, launch, headline, drain_timeout)
}
