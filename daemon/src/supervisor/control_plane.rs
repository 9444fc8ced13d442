//! The supervisor's phase between start-up and serving: once every shard
//! is ready, the control plane starts (the admin socket, the metrics
//! endpoint when `metrics.address` is set, the `snapshot` thread that
//! builds GetSnapshotFile ZIPs), so a client that waits for readiness finds
//! them, and then `READY=1` goes to the service manager.
//!
//! The control plane only reads what shards publish (`DaemonSource`); this
//! file starts it and never stops it (`stop.rs` does, first).

use super::Launch;
use super::start::{Ready, Started};
use crate::control::ControlServer;
use crate::control::daemon_source::{DaemonSource, DaemonSourceParts};
use crate::control::metrics_server::MetricsServer;
use crate::control::snapshot_file::{self, SnapshotWorker};
use crate::error::BootError;
use crate::net::snapshot_request::SnapshotJobs;
use crate::preflight::Driver;
use crate::systemd;
use std::sync::Arc;

/// Starts the control plane's threads on what the shards publish, then
/// says `READY=1`; returns the headline `STATUS=` starts from. A thread
/// that cannot start is the failure that stops the daemon.
pub(super) fn start(
    launch: &mut Launch,
    started: &mut Started,
    ready: Ready,
    snapshot_jobs: SnapshotJobs,
) -> Result<String, BootError> {
    let source = Arc::new(DaemonSource::new(DaemonSourceParts {
        shards: launch.plan.shards.clone(),
        drivers: ready.drivers.clone(),
        numa_nodes: launch.plan.inputs.numa_nodes,
        heartbeats: started.heartbeats.clone(),
        mesh: started.running.mesh.clone(),
        started: launch.started,
        data_dir: launch.data_dir.clone(),
        log_dir: launch.log_dir.clone(),
        durability_default: launch.default_durability,
        log: Some(launch.reload.log.clone()),
        security: Some(started.net.admission.clone()),
        reply_budgets: started.net.reply_budgets.to_vec(),
        snapshot_files: Some(started.snapshot_files.clone()),
        cluster: started.net.cluster.clone(),
    }));
    let control = match launch.admin.take() {
        Some(socket) => ControlServer::start_on(socket, source.clone()),
        None => ControlServer::start(&launch.admin_socket, source.clone()),
    };
    let server = control.map_err(BootError::Control)?;
    tracing::info!(socket = %launch.admin_socket.display(), "admin socket ready");
    started.running.control = Some(server);
    if let Some((listener, auth)) = launch.metrics.take() {
        let server =
            MetricsServer::start(listener, auth, source.clone()).map_err(BootError::Metrics)?;
        tracing::info!(address = %server.address(), "metrics endpoint ready: GET /metrics");
        started.running.metrics = Some(server);
    }
    let sources = snapshot_file::SnapshotSources {
        admin: source.clone(),
        heartbeats: started.heartbeats.clone(),
        config: launch.reload.config.clone(),
        plan: launch.plan.clone(),
    };
    let worker = SnapshotWorker::start(&started.snapshot_files, snapshot_jobs, sources).map_err(
        |error| BootError::Runtime(format!("cannot start the snapshot thread: {error}")),
    )?;
    started.running.snapshot = Some(worker);
    Ok(announce_ready(launch, &ready.drivers))
}

/// Logs that the daemon is ready and sends `READY=1`; the headline names
/// the address, the shards, their cores and I/O drivers.
fn announce_ready(launch: &Launch, drivers: &[Driver]) -> String {
    let shards = launch.plan.shards.len();
    let cores: std::collections::BTreeSet<u32> = launch
        .plan
        .shards
        .iter()
        .map(|planned| planned.core)
        .collect();
    let headline = format!(
        "serving on {}: {shards} shards on {} cores ({})",
        launch.address,
        cores.len(),
        summarize_drivers(drivers)
    );
    tracing::info!(
        address = %launch.address,
        shards,
        driver = %summarize_drivers(drivers),
        startup_ms = launch.started.elapsed().as_secs_f64() * 1000.0,
        "iggyd ready"
    );
    systemd::ready(&headline);
    headline
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
