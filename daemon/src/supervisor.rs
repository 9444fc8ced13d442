//! The supervisor runs on the main thread: it starts one thread per planned
//! shard, waits until every shard reports ready, tells the service manager,
//! then waits for signals and shard events. SIGTERM/SIGINT stop the shards
//! and join them within `shutdown.drain_timeout`; a second signal or the
//! timeout ends the process at once with a failure code. A shard that exits
//! on its own is a failure of the whole daemon: the others are stopped and
//! the process exits non-zero, so systemd restarts a whole daemon rather
//! than keeping a half-alive one.
//!
//! Signals are blocked in every thread (the mask is set before any shard is
//! spawned and inherited) and taken synchronously here with `sigtimedwait`,
//! so no handler ever runs on a shard.

use crate::error::BootError;
use crate::limits;
use crate::metadata::io::StdIo;
use crate::metadata::{Durability, MetadataStore};
use crate::preflight::Driver;
use crate::shard::heartbeat::Heartbeats;
use crate::shard::mesh::{Mesh, ShardMessage};
use crate::shard::{self, ShardEvent, ShardSpec};
use crate::systemd;
use crate::topology::ShardPlan;
use nix::sys::signal::{SigSet, Signal};
use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// What the supervisor needs to start the shards.
#[derive(Debug)]
pub struct Launch {
    pub plan: ShardPlan,
    pub driver: Driver,
    pub require_io_uring: bool,
    pub address: SocketAddr,
    pub listeners: Vec<std::net::TcpListener>,
    pub drain_timeout: Duration,
    pub data_dir: std::path::PathBuf,
    /// When the process started, for the time-to-ready log line.
    pub started: Instant,
    /// The recovered metadata store; it moves to shard 0, its only writer.
    pub store: MetadataStore<StdIo>,
    pub default_durability: Durability,
    /// How often each shard runs its retention check.
    pub retention_check_interval: Duration,
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
}

/// Start the shards and supervise them until a stop signal or a failure.
pub fn run(launch: Launch) -> Result<(), BootError> {
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
    };
    let view = launch.store.publish();
    let mut store = Some(launch.store);
    let started_at_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_micros() as u64)
        .saturating_sub(launch.started.elapsed().as_micros() as u64);
    let planned_shards = launch.plan.shards.iter();
    for ((planned, listener), inbox) in planned_shards.zip(launch.listeners).zip(inboxes) {
        let spec = ShardSpec {
            address: launch.address,
            view: view.clone(),
            store: if planned.shard == 0 {
                store.take()
            } else {
                None
            },
            default_durability: launch.default_durability,
            stale_after: limits::STALE_CLIENT_AFTER,
            retention_check_interval: launch.retention_check_interval,
            started: launch.started,
            started_at_us,
            id: planned.shard,
            pu: planned.pu,
            pin: launch.plan.is_this_system(),
            numa_node: if bind_numa { planned.numa_node } else { None },
            driver: launch.driver,
            require_io_uring: launch.require_io_uring,
            listener,
            inbox,
            mesh: mesh.clone(),
            heartbeats: heartbeats.clone(),
            events: events_tx.clone(),
            data_dir: launch.data_dir.clone(),
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

    // Start-up: every shard must report ready before READY=1.
    let deadline = Instant::now() + limits::SHARD_START_TIMEOUT;
    let mut drivers = Vec::with_capacity(shards);
    while drivers.len() < shards {
        if let Some(signal) = wait_signal(&signals, Duration::ZERO) {
            tracing::info!(%signal, "signal during start-up, stopping");
            return stop(&mut running, launch.drain_timeout, &signals, None);
        }
        match running.events.recv_timeout(Duration::from_millis(5)) {
            Ok(ShardEvent::Ready { driver, .. }) => drivers.push(driver),
            Ok(ShardEvent::Recovering { shard, done, total }) => {
                systemd::status(&format!(
                    "recovering partitions: shard {shard} {done}/{total}"
                ));
            }
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
                return stop(&mut running, launch.drain_timeout, &signals, Some(failure));
            }
            Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline => {}
            Err(_) => {
                let failure = BootError::Runtime(format!(
                    "only {} of {shards} shards became ready within {:?}",
                    drivers.len(),
                    limits::SHARD_START_TIMEOUT
                ));
                return stop(&mut running, launch.drain_timeout, &signals, Some(failure));
            }
        }
    }
    let driver_summary = summarize_drivers(&drivers);
    let cores: std::collections::BTreeSet<u32> = launch
        .plan
        .shards
        .iter()
        .map(|planned| planned.core)
        .collect();
    let status = format!(
        "serving on {}: {shards} shards on {} cores ({driver_summary})",
        launch.address,
        cores.len()
    );
    tracing::info!(
        address = %launch.address,
        shards,
        driver = %driver_summary,
        startup_ms = launch.started.elapsed().as_secs_f64() * 1000.0,
        "iggyd ready"
    );
    systemd::ready(&status);

    loop {
        if let Some(signal) = wait_signal(&signals, limits::SUPERVISOR_TICK) {
            match signal {
                Signal::SIGTERM | Signal::SIGINT => {
                    tracing::info!(%signal, "stopping");
                    return stop(&mut running, launch.drain_timeout, &signals, None);
                }
                other => tracing::info!(signal = %other, "signal ignored: not handled yet"),
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
                return stop(&mut running, launch.drain_timeout, &signals, Some(failure));
            }
        }
    }
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

/// Ask every live shard to stop and wait for all of them, within `timeout`.
/// Returns `failure` (the reason for stopping) if there was one.
fn stop(
    running: &mut Running,
    timeout: Duration,
    signals: &SigSet,
    failure: Option<BootError>,
) -> Result<(), BootError> {
    systemd::stopping("stopping: draining shards");
    let deadline = Instant::now() + timeout;
    for shard in 0..running.exited.len() {
        if running.exited[shard] {
            continue;
        }
        // An inbox that stays full until the deadline belongs to a wedged
        // shard; the deadline below handles it.
        let inbox_deadline = deadline;
        let _ = running
            .mesh
            .send_deadline(shard, ShardMessage::Stop, inbox_deadline);
    }
    while running.exited.iter().any(|exited| !exited) {
        if let Some(signal) = wait_signal(signals, Duration::ZERO) {
            tracing::error!(%signal, "second signal during shutdown: exiting now");
            std::process::exit(i32::from(crate::error::EXIT_FAILURE));
        }
        let now = Instant::now();
        if now >= deadline {
            let stuck: Vec<String> = running
                .exited
                .iter()
                .enumerate()
                .filter(|(_, exited)| !**exited)
                .map(|(shard, _)| format!("shard {shard} (PU {})", running.pus[shard]))
                .collect();
            tracing::error!(stuck = %stuck.join(", "), ?timeout, "drain timeout: exiting now");
            std::process::exit(i32::from(crate::error::EXIT_FAILURE));
        }
        let wait = (deadline - now).min(Duration::from_millis(20));
        match running.events.recv_timeout(wait) {
            Ok(ShardEvent::Exited { shard, result }) => {
                running.exited[shard] = true;
                if let Err(message) = result {
                    tracing::error!(shard, %message, "shard failed while stopping");
                }
            }
            Ok(ShardEvent::Ready { .. } | ShardEvent::Recovering { .. })
            | Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    for handle in running.handles.drain(..) {
        let _ = handle.join();
    }
    match failure {
        Some(failure) => Err(failure),
        None => {
            tracing::info!("iggyd stopped cleanly");
            Ok(())
        }
    }
}
