//! The single start-up sequence: arguments -> configuration -> shard plan ->
//! preflight (memory budget, data directory, I/O driver) -> listeners (the
//! Iggy port, the metrics port and its credentials, the admin socket; each
//! taken back from systemd's file descriptor store when it still fits,
//! `fdstore`) -> supervisor. Also the `plan`, `config`, `doctor` and
//! `cluster` subcommands (`cluster` talks to a running node's admin socket,
//! `control::cluster_cli`). This is where typed errors become one readable line on
//! stderr, a `STATUS=` text and an exit code; nothing below this module
//! prints or exits.

use crate::cgroup::CgroupLimits;
use crate::config::{Config, Sources};
use crate::control::metrics_server::{self, MetricsAuth};
use crate::control::server::AdminSocket;
use crate::error::BootError;
use crate::fdstore::{self, FdStore, Inherited};
use crate::logging::LogHandle;
use crate::net::listener;
use crate::supervisor::{self, Launch, Reload};
use crate::topology::{self, PlanEnv, ShardPlan};
use crate::{doctor, logging, preflight, systemd};
use clap::{Parser, Subcommand};
use iggyd_metadata::MetadataStore;
use iggyd_metadata::auth::HashCost;
use iggyd_metadata::bootstrap::{RootPassword, bootstrap_root};
use iggyd_metadata::io::StdIo;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

#[derive(Debug, Parser)]
// The command's name is the package's, `iggyd`.
#[command(version, about = "Apache Iggy-compatible message-streaming daemon")]
struct Cli {
    /// Configuration file (default: /etc/iggyd/iggyd.toml when it exists).
    #[arg(long, global = true, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Override `tcp.address` (use port 0 for any free port).
    #[arg(long, global = true, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// Override `data_dir`.
    #[arg(long, global = true, value_name = "PATH")]
    data_dir: Option<PathBuf>,
    /// Read cgroup v2 limits (`cpu.max`, `memory.max`) from this directory
    /// instead of this process's own cgroup (tests and diagnostics).
    #[arg(long, global = true, value_name = "PATH", hide = true)]
    cgroup_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the shard plan (shard -> PU -> core -> package -> NUMA node) and its inputs.
    Plan {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Validate and print the effective configuration (exit 78 when invalid).
    Config,
    /// Check that this host can keep iggyd's promises, one line a check
    /// (read-only; exit 0 all pass, 1 a warning, 2 a failure).
    Doctor {
        /// Print JSON instead of one line a check.
        #[arg(long)]
        json: bool,
        /// How long the write-latency probe writes (50ms to 10s; default 2s).
        #[arg(long, value_name = "DURATION", value_parser = parse_probe_time)]
        probe_time: Option<std::time::Duration>,
    },
    /// Operate a cluster node through its admin socket (exit 0 done, 1 not
    /// done: a group without a leader, or a transfer not seen in time;
    /// 69 the daemon did not answer; 78 no cluster configured, or the
    /// request refused).
    Cluster {
        /// The node's admin socket (default: `admin.socket` of the
        /// configuration, which must then run a cluster).
        #[arg(long, global = true, value_name = "PATH")]
        socket: Option<PathBuf>,
        #[command(subcommand)]
        command: ClusterSubcommand,
    },
}

#[derive(Debug, Subcommand)]
enum ClusterSubcommand {
    /// This node, every configured node (reachable from here, role) and
    /// every Raft group (metadata and each partition): leader, term, this
    /// node's role, commit and applied index, voters and learners, and on
    /// the leader each follower's matched index and lag. Exit 0 when every
    /// group has a leader, 1 otherwise.
    Status {
        /// Print JSON instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// Hand the leadership of one group, or of every group this node
    /// leads, to node N (a voter), and wait up to 10 s until this node sees
    /// it lead. Run it on the node that leads, e.g. before maintenance.
    /// Exit 0 when every group moved, 1 when one was not seen to move.
    TransferLeader {
        /// The node to lead next.
        #[arg(long, value_name = "N")]
        to: u64,
        /// `metadata` or `<stream>/<topic>/<partition>` (numeric ids, as
        /// `iggyd cluster status` shows them); default: every group this
        /// node leads.
        #[arg(long, value_name = "GROUP", value_parser = parse_group)]
        group: Option<crate::control::api::cluster::GroupName>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Make node N a voter of every group (the metadata group first, then
    /// every partition's): each group's leader adds it as a learner, waits
    /// until it holds the log, then makes it a voter (joint consensus).
    /// Start node N first with `cluster.join = true`. Runs on any node
    /// (groups led elsewhere are forwarded to their leader). Exit 0 when
    /// every group changed, 1 when one did not (named, with why).
    AddNode {
        /// The new node's id.
        #[arg(long, value_name = "N")]
        id: u64,
        /// Its Iggy address clients dial (`host:port`, an IP address).
        #[arg(long, value_name = "HOST:PORT")]
        address: String,
        /// Its node-to-node address.
        #[arg(long, value_name = "HOST:PORT")]
        replication_address: String,
        /// Its name, as clients are shown it (default `node-<id>`).
        #[arg(long)]
        name: Option<String>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Take node N out of every group (a leader hands its leadership off
    /// first). Refused when it would leave a group without a live quorum,
    /// or an even number of voters (replace a node by adding the new one,
    /// then removing the old). Exit 0 when every group changed, 1 when one
    /// did not.
    RemoveNode {
        /// The node to remove.
        #[arg(long, value_name = "N")]
        id: u64,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

fn parse_group(text: &str) -> Result<crate::control::api::cluster::GroupName, String> {
    crate::control::api::cluster::GroupName::parse(text)
}

fn parse_probe_time(text: &str) -> Result<std::time::Duration, String> {
    let duration = humantime::parse_duration(text).map_err(|error| error.to_string())?;
    if !(doctor::PROBE_TIME_MIN..=doctor::PROBE_TIME_MAX).contains(&duration) {
        return Err(format!(
            "expected a duration from {:?} to {:?}",
            doctor::PROBE_TIME_MIN,
            doctor::PROBE_TIME_MAX
        ));
    }
    Ok(duration)
}

/// Entry point of the `iggyd` binary.
pub fn main() -> ExitCode {
    let started = Instant::now();
    let cli = Cli::parse();
    // Before anything opens a descriptor: what the service manager passed
    // (LISTEN_FDS) sits at 3 and up.
    let inherited = cli.command.is_none().then(Inherited::capture);
    let sources = Sources {
        file: cli.config,
        listen: cli.listen,
        data_dir: cli.data_dir,
        ..Sources::from_process_env()
    };
    if let Some(Command::Doctor { json, probe_time }) = cli.command {
        // The doctor loads (and checks) the configuration itself, and logs
        // nothing: its report says what it found.
        let options = doctor::Options {
            probe_time: probe_time.unwrap_or(doctor::PROBE_TIME_DEFAULT),
            cgroup_dir: cli.cgroup_dir,
        };
        return run_doctor(&sources, &options, json);
    }
    let config = match Config::load(&sources) {
        Ok(config) => config,
        Err(error) => return fail(&BootError::Config(error)),
    };
    if cli.command.is_some() {
        // Short subcommands log to stderr only: they must not create or
        // rotate log files (and may run while the daemon holds them). The
        // level was validated with the configuration, so this cannot fail
        // in a way worth stopping for.
        let _ = logging::init_stderr_only(&config.logging.level);
    }
    match cli.command {
        Some(Command::Config) => {
            print!("{}", config.to_toml());
            ExitCode::SUCCESS
        }
        // Handled above, before the configuration is loaded.
        Some(Command::Doctor { .. }) => ExitCode::SUCCESS,
        Some(Command::Cluster { socket, command }) => run_cluster(&config, socket, command),
        Some(Command::Plan { json }) => match plan(&config, cli.cgroup_dir.as_deref()) {
            Ok(plan) => {
                if json {
                    match serde_json::to_string_pretty(&plan) {
                        Ok(text) => println!("{text}"),
                        Err(error) => return fail(&BootError::Runtime(error.to_string())),
                    }
                } else {
                    print!("{}", plan.render_table());
                }
                ExitCode::SUCCESS
            }
            Err(error) => fail(&error),
        },
        None => {
            // Kept for the whole run: dropping it flushes and fsyncs the
            // file log. The supervisor will take a clone for SIGHUP/SIGUSR2.
            let log = match logging::init(&config.logging) {
                Ok(log) => log,
                Err(error) => return fail(&BootError::Logging(error)),
            };
            install_panic_hook();
            tune_allocator();
            let outcome = run(
                config,
                &sources,
                log.clone(),
                cli.cgroup_dir.as_deref(),
                started,
                inherited.unwrap_or_default(),
            );
            let code = match &outcome {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => fail_logged(error),
            };
            drop(log);
            code
        }
    }
}

/// Keeps freed frame and reply buffers in the allocator for the next
/// request rather than handing their pages back to the kernel after each
/// one (`limits::ALLOCATOR_TRIM_THRESHOLD`). Left alone when the operator
/// tunes glibc's allocator through `GLIBC_TUNABLES`.
fn tune_allocator() {
    if std::env::var_os("GLIBC_TUNABLES").is_some() {
        tracing::info!("GLIBC_TUNABLES is set: the allocator keeps the operator's tuning");
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let settings = [
            (
                libc::M_TRIM_THRESHOLD,
                crate::limits::ALLOCATOR_TRIM_THRESHOLD,
            ),
            (
                libc::M_MMAP_THRESHOLD,
                crate::limits::ALLOCATOR_MMAP_THRESHOLD,
            ),
        ];
        for (parameter, value) in settings {
            let value = libc::c_int::try_from(value).unwrap_or(libc::c_int::MAX);
            // SAFETY: mallopt only sets glibc's allocator parameters.
            if unsafe { libc::mallopt(parameter, value) } != 1 {
                tracing::warn!(parameter, value, "glibc refused an allocator setting");
            }
        }
    }
}

/// `iggyd doctor`: every check's line (or the JSON form) on stdout; the
/// exit code is the worst status (0 pass, 1 warn, 2 fail).
fn run_doctor(sources: &Sources, options: &doctor::Options, json: bool) -> ExitCode {
    let report = doctor::run(sources, options);
    if json {
        match serde_json::to_string_pretty(&report.to_json()) {
            Ok(text) => println!("{text}"),
            Err(error) => return fail(&BootError::Runtime(error.to_string())),
        }
    } else {
        print!("{}", report.render_text());
    }
    ExitCode::from(report.exit_code())
}

/// `iggyd cluster …`: the answer on stdout, a failure on stderr.
fn run_cluster(config: &Config, socket: Option<PathBuf>, command: ClusterSubcommand) -> ExitCode {
    use crate::control::cluster_cli::{self, ClusterCommand};
    let (command, json) = match command {
        ClusterSubcommand::Status { json } => (ClusterCommand::Status, json),
        ClusterSubcommand::TransferLeader { to, group, json } => {
            (ClusterCommand::TransferLeader { to, group }, json)
        }
        ClusterSubcommand::AddNode {
            id,
            address,
            replication_address,
            name,
            json,
        } => (
            ClusterCommand::AddNode {
                id,
                address,
                replication_address,
                name,
            },
            json,
        ),
        ClusterSubcommand::RemoveNode { id, json } => (ClusterCommand::RemoveNode { id }, json),
    };
    let outcome = match socket {
        Some(socket) => cluster_cli::run(&socket, &command, json),
        None if !config.cluster.enabled => cluster_cli::no_cluster(&config.admin.socket),
        None => cluster_cli::run(&config.admin.socket, &command, json),
    };
    print!("{}", outcome.stdout);
    if let Some(error) = &outcome.error {
        eprintln!("iggyd: {error}");
    }
    ExitCode::from(outcome.code)
}

fn fail(error: &BootError) -> ExitCode {
    eprintln!("iggyd: {error}");
    systemd::status(&format!("failed: {error}"));
    error.exit_code()
}

/// Like `fail`, once logging is up: the error goes through `tracing`, so it
/// reaches the file log too and carries the error priority in the journal.
fn fail_logged(error: &BootError) -> ExitCode {
    tracing::error!("iggyd: {error}");
    systemd::status(&format!("failed: {error}"));
    error.exit_code()
}

/// A panic anywhere (a shard included) is a programmer error: report it and
/// abort the whole process, never leaving a half-alive daemon. Release builds
/// abort anyway (`panic = "abort"`); this makes debug builds behave the same.
fn install_panic_hook() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        let thread = std::thread::current();
        let name = thread.name().unwrap_or("unnamed");
        tracing::error!(thread = name, "panic: aborting the process");
        logging::flush_installed();
        std::process::abort();
    }));
}

fn plan(config: &Config, cgroup_dir: Option<&Path>) -> Result<ShardPlan, BootError> {
    let env = PlanEnv {
        cgroup_dir: cgroup_dir.map(Path::to_path_buf),
    };
    Ok(topology::plan(&config.sharding.cpu_allocation, &env)?)
}

fn run(
    config: Config,
    sources: &Sources,
    log: LogHandle,
    cgroup_dir: Option<&Path>,
    started: Instant,
    inherited: Inherited,
) -> Result<(), BootError> {
    let plan = plan(&config, cgroup_dir)?;
    if !plan.is_this_system() {
        return Err(BootError::Runtime(format!(
            "the hwloc topology comes from {:?}, not from this machine; `iggyd plan` can show \
             such a plan, but the daemon only runs on this machine's own topology. Unset \
             HWLOC_SYNTHETIC / HWLOC_XMLFILE.",
            plan.inputs.topology_source
        )));
    }
    let shards = plan.shards.len();
    tracing::info!(
        allocation = %plan.allocation,
        shards,
        cpu_quota = ?plan.inputs.cpu_quota,
        allowed = ?plan.inputs.allowed_pus,
        "shard plan"
    );
    for planned in &plan.shards {
        tracing::info!(
            shard = planned.shard,
            pu = planned.pu,
            core = planned.core,
            package = ?planned.package,
            numa_node = ?planned.numa_node,
            skipped_siblings = ?planned.skipped_siblings,
            "placement"
        );
    }
    systemd::status(&format!(
        "starting: {shards} shards planned ({})",
        plan.allocation
    ));

    let cgroup = CgroupLimits::read(cgroup_dir);
    let memory = preflight::check_memory(config.memory.budget_bytes, shards, &cgroup)?;
    tracing::info!(
        budget_bytes = memory.budget_bytes,
        per_shard_bytes = memory.per_shard_bytes,
        derived = memory.derived,
        "memory budget"
    );
    let _data_dir_lock = preflight::prepare_data_dir(&config.data_dir)?;
    let access = preflight::choose_access(&config.data_dir, config.storage.io_mode.access());
    let driver = preflight::choose_driver(config.sharding.require_io_uring)?;
    preflight::fix_mmap_threshold();
    let nofile = preflight::raise_nofile_limit();
    // A certificate that does not load is a configuration error: found now,
    // before any shard starts, with the key and the file named.
    let tls = if config.tcp.tls.enabled {
        let credentials = std::env::var_os("CREDENTIALS_DIRECTORY").map(PathBuf::from);
        let loaded = crate::net::tls::load(&config.tcp.tls, credentials.as_deref())?;
        tracing::info!(certificate = %loaded.description, "TLS enabled on the Iggy listener");
        Some(loaded)
    } else {
        None
    };
    let metrics_auth = match config.metrics.address {
        Some(_) => Some(MetricsAuth::load(&config.metrics)?),
        None => None,
    };
    let bound = bind_listeners(&config, shards, inherited)?;
    let metrics = bound.metrics.zip(metrics_auth);

    // A cluster node: its metadata is the metadata group's log, applied
    // again at every start into a store kept in memory, and its partitions
    // open as that log lists them (reconciling the data directory with an
    // empty store would discard them all).
    let cluster = if config.cluster.enabled {
        let credentials = std::env::var_os("CREDENTIALS_DIRECTORY").map(PathBuf::from);
        let node = crate::cluster::node::NodeSetup::prepare(
            &config.cluster,
            shards,
            credentials.as_deref(),
        )
        .map_err(BootError::Cluster)?;
        let (_, listeners) =
            listener::bind_all(node.replication_address, shards).map_err(|source| {
                BootError::Listen {
                    address: node.replication_address.to_string(),
                    source,
                }
            })?;
        tracing::info!(
            node = config.cluster.node_id,
            cluster = %config.cluster.name,
            nodes = config.cluster.nodes.len(),
            replication = %node.replication_address,
            "cluster node"
        );
        Some(supervisor::ClusterLaunch { node, listeners })
    } else {
        None
    };
    let store = open_metadata(&config, cluster.is_some())?;
    let trash = if cluster.is_some() {
        cluster_trash(&config.data_dir)?
    } else {
        reconcile_data_dir(&config.data_dir, store.metadata())?
    };

    supervisor::block_signals()?;
    supervisor::run(
        Launch {
            plan,
            driver,
            require_io_uring: config.sharding.require_io_uring,
            address: bound.address,
            listeners: bound.listeners,
            admin: Some(bound.admin),
            hand_over: bound.hand_over,
            data_dir: config.data_dir.clone(),
            started,
            default_durability: config.storage.default_durability,
            reload: Reload {
                sources: sources.clone(),
                config: config.clone(),
                log,
                tls: None,
                cluster_tls: None,
            },
            tls,
            descriptors: nofile.map(|limit| limit.soft),
            admin_socket: config.admin.socket.clone(),
            log_dir: config.logging.dir.clone(),
            retention_check_interval: config.retention.check_interval,
            flush_interval: config.storage.flush_interval,
            rebalance_timeout: config.consumer_groups.rebalance_timeout,
            consumer_offsets_max: usize::try_from(config.limits.max_consumer_offsets_per_partition)
                .unwrap_or(usize::MAX),
            access,
            per_shard_memory_bytes: memory.per_shard_bytes,
            metrics,
            trash,
            cluster,
        },
        store,
    )
}

/// A cluster node's trash at start: whatever an earlier run left there is
/// emptied, and new entries number after it.
fn cluster_trash(data_dir: &Path) -> Result<iggyd_storage::trash::TrashStart, BootError> {
    let dir = iggyd_storage::trash::trash_dir(data_dir);
    let mut start = iggyd_storage::trash::TrashStart::default();
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(start),
        Err(error) => {
            return Err(BootError::Runtime(format!(
                "the trash {}: {error}",
                dir.display()
            )));
        }
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if let Some(seq) = name.to_str().and_then(iggyd_storage::trash::entry_seq) {
            start.next_seq = start.next_seq.max(seq + 1);
            start
                .pending
                .push(iggyd_storage::trash::PendingRemoval::new(entry.path(), 0));
        }
    }
    Ok(start)
}

/// Every listener of the daemon, bound before any shard starts.
struct Bound {
    address: SocketAddr,
    listeners: Vec<std::net::TcpListener>,
    metrics: Option<std::net::TcpListener>,
    admin: AdminSocket,
    /// The service manager keeps them across a restart.
    hand_over: bool,
}

/// The shards' Iggy listeners, the metrics listener and the admin socket:
/// each taken back from the service manager's file descriptor store when
/// it still fits the configuration (`fdstore`), else bound anew (with a
/// log line saying why) and handed to the store. Outside systemd this is
/// plain binding.
fn bind_listeners(
    config: &Config,
    shards: usize,
    mut inherited: Inherited,
) -> Result<Bound, BootError> {
    let store = FdStore::from_env();
    inherited.report();
    tracing::info!(
        enabled = store.is_enabled(),
        passed_back = inherited.len(),
        "file descriptor store: {}",
        store.reason()
    );
    if let Some(max) = store.max()
        && max < shards + 2
    {
        tracing::warn!(
            max,
            listeners = shards + 2,
            "FileDescriptorStoreMax= is lower than the listeners to keep; the rest are bound \
             anew at each start (clients connecting during a restart may be refused)"
        );
    }
    let group = fdstore::iggy_listeners(
        &mut inherited,
        &store,
        config.tcp.address,
        shards,
        listener::bind_one,
    )
    .map_err(|source| BootError::Listen {
        address: config.tcp.address.to_string(),
        source,
    })?;
    let mut taken = group.taken;
    let metrics = match config.metrics.address {
        Some(address) => {
            let stored = inherited.take(fdstore::METRICS);
            Some(
                match stored.map(|fd| fdstore::adopt_tcp(fd, address, false, false)) {
                    Some(Ok(listener)) => {
                        tracing::info!(%address, "metrics listener taken from the file descriptor store");
                        taken += 1;
                        listener
                    }
                    other => {
                        if let Some(Err(why)) = other {
                            tracing::info!(%address, "binding the metrics listener anew: the stored one does not fit: {why}");
                            store.forget(fdstore::METRICS);
                        }
                        let listener = metrics_server::bind(address)?;
                        store.keep(fdstore::METRICS, listener.as_fd());
                        listener
                    }
                },
            )
        }
        None => None,
    };
    let path = &config.admin.socket;
    let stored = inherited.take(fdstore::ADMIN);
    let mut admin = match stored.map(|fd| fdstore::adopt_unix(fd, path)) {
        Some(Ok(listener)) => {
            tracing::info!(socket = %path.display(), "admin socket taken from the file descriptor store");
            taken += 1;
            AdminSocket::adopt(path, listener)?
        }
        other => {
            if let Some(Err(why)) = other {
                tracing::info!(socket = %path.display(), "binding the admin socket anew: the stored one does not fit: {why}");
                store.forget(fdstore::ADMIN);
            }
            let admin = AdminSocket::bind(path)?;
            store.keep(fdstore::ADMIN, admin.as_fd());
            admin
        }
    };
    inherited.discard_rest(&store);
    // Sockets the manager passed back are kept by it, store or not.
    let hand_over = store.is_enabled() || taken > 0;
    if hand_over {
        admin.hand_over_on_stop();
    }
    tracing::info!(
        address = %group.address,
        shards,
        taken_from_store = taken,
        hand_over,
        "listeners ready"
    );
    Ok(Bound {
        address: group.address,
        listeners: group.listeners,
        metrics,
        admin,
        hand_over,
    })
}

/// Bring the data directory in line with metadata before any shard opens a
/// partition (`storage::layout::reconcile`: the old layout adopted,
/// directories metadata does not list moved to the trash). Runs on a
/// short-lived runtime on this thread.
fn reconcile_data_dir(
    data_dir: &std::path::Path,
    metadata: &iggyd_metadata::Metadata,
) -> Result<iggyd_storage::trash::TrashStart, BootError> {
    let listed = metadata.storage_ids();
    let mut runtime = monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
        .build()
        .map_err(|error| BootError::Runtime(format!("start-up runtime: {error}")))?;
    let reconciled = runtime
        .block_on(iggyd_storage::layout::reconcile(
            &iggyd_storage::MonoioIo,
            data_dir,
            &listed,
        ))
        .map_err(|error| {
            BootError::Runtime(format!("reconciling the data directory failed: {error}"))
        })?;
    tracing::info!(
        partitions = listed.len(),
        migrated = reconciled.migrated.len(),
        orphans = reconciled.orphans.len(),
        legacy_discarded = reconciled.legacy_discarded,
        stuck = reconciled.stuck.len(),
        pending_removal = reconciled.trash.pending.len(),
        pending_removal_bytes = reconciled
            .trash
            .pending
            .iter()
            .map(|entry| entry.bytes)
            .sum::<u64>(),
        "data directory reconciled with metadata"
    );
    Ok(reconciled.trash)
}

/// Recover the metadata store (`<data_dir>/metadata`) and create the root
/// user on first start. A cluster node's store starts empty in memory (the
/// metadata group's log fills it); every node creates the same root user
/// first, so the users the log creates get the same ids everywhere.
fn open_metadata(config: &Config, cluster: bool) -> Result<MetadataStore<StdIo>, BootError> {
    let dir = config.data_dir.join("metadata");
    let io = if cluster {
        StdIo::in_memory(&dir)
    } else {
        StdIo::open(&dir).map_err(|error| {
            BootError::Runtime(format!("metadata directory {}: {error}", dir.display()))
        })?
    };
    let (mut store, report) = MetadataStore::open(io)
        .map_err(|error| BootError::Runtime(format!("metadata recovery failed: {error}")))?;
    tracing::info!(
        snapshot = ?report.snapshot_seq,
        replayed = report.replayed,
        torn_tail = report.torn_tail.is_some(),
        members_reset = report.members_reset,
        "metadata recovered"
    );
    let password = RootPassword::from_config(&config.root.password, &config.data_dir);
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_micros() as u64);
    bootstrap_root(
        &mut store,
        &config.root.username,
        &password,
        HashCost::PRODUCTION,
        now_us,
    )
    .map_err(|error| BootError::Runtime(format!("creating the root user: {error}")))?;
    let limits = &config.limits;
    store.set_admission(iggyd_metadata::admission::Admission {
        groups_per_topic: usize::try_from(limits.max_consumer_groups_per_topic)
            .unwrap_or(usize::MAX),
        members_per_group: usize::try_from(limits.max_members_per_group).unwrap_or(usize::MAX),
        record_bytes: usize::try_from(limits.max_metadata_record_size_bytes).unwrap_or(usize::MAX),
        ..iggyd_metadata::admission::Admission::default()
    });
    Ok(store)
}
