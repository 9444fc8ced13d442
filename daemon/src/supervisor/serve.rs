//! The supervisor's serving phase: with every shard ready and `READY=1`
//! sent, it waits for signals and shard events until a stop signal or a
//! shard that exits on its own, petting the watchdog (`watchdog.rs`) and
//! refreshing `STATUS=` (`status.rs`) on the way; SIGHUP reloads the
//! configuration (`reload.rs`), SIGUSR2 rotates the log.
//!
//! It never spawns or joins a shard: the way out is always `stop.rs`.

use super::start::Started;
use super::status::StatusLine;
use super::stop::stop;
use super::watchdog::Watchdog;
use super::{Launch, Reload, Running, wait_signal};
use crate::error::BootError;
use crate::limits;
use crate::shard::ShardEvent;
use nix::sys::signal::Signal;
use std::time::Duration;

/// Serves until a stop signal or a shard's exit, then stops the daemon.
pub(super) fn serve(
    started: Started,
    launch: Launch,
    headline: String,
    mut drain_timeout: Duration,
) -> Result<(), BootError> {
    let Started {
        mut running,
        heartbeats,
        net,
        snapshot_files,
    } = started;
    // The snapshot worker runs; only the shards queue requests now.
    drop(snapshot_files);
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
        if let Some(signal) = wait_signal(&running.signals, wait) {
            match take_signal(signal, &mut reload, &status.headline) {
                Taken::Stop => return stop(&mut running, drain_timeout, None),
                Taken::DrainTimeout(timeout) => drain_timeout = timeout,
                Taken::Handled => {}
            }
        }
        if let Some(failure) = shard_exited(&mut running) {
            tracing::error!(%failure, "a shard stopped; stopping the daemon");
            return stop(&mut running, drain_timeout, Some(failure));
        }
        if let Some(watchdog) = watchdog.as_mut() {
            watchdog.tick(&heartbeats, &running.pus, &mut status);
            heartbeats.publish_watchdog(
                watchdog.interval.as_millis() as u64,
                watchdog.reported.first().copied(),
            );
        }
        status.tick(&heartbeats, &running.mesh);
    }
}

/// What a signal taken while serving asks of the loop.
enum Taken {
    /// SIGTERM or SIGINT.
    Stop,
    /// A SIGHUP reload was applied, with this drain timeout.
    DrainTimeout(Duration),
    /// Nothing more.
    Handled,
}

/// Handles one signal: a stop is the caller's, a SIGHUP reloads the
/// configuration, a SIGUSR2 rotates the log.
fn take_signal(signal: Signal, reload: &mut Reload, headline: &str) -> Taken {
    match signal {
        Signal::SIGTERM | Signal::SIGINT => {
            tracing::info!(%signal, "stopping");
            Taken::Stop
        }
        Signal::SIGHUP => match super::reload::reload_config(reload, headline) {
            Some(timeout) => Taken::DrainTimeout(timeout),
            None => Taken::Handled,
        },
        Signal::SIGUSR2 => {
            match reload.log.rotate_now() {
                Ok(rotated) => tracing::info!(?rotated, "log rotated on SIGUSR2"),
                Err(error) => tracing::warn!(%error, "log rotation on SIGUSR2 failed"),
            }
            Taken::Handled
        }
        other => {
            tracing::debug!(signal = %other, "signal ignored");
            Taken::Handled
        }
    }
}

/// The failure of the first shard that exited on its own, if one did
/// (events already queued are taken without waiting).
fn shard_exited(running: &mut Running) -> Option<BootError> {
    while let Ok(event) = running.events.try_recv() {
        if let ShardEvent::Exited { shard, result } = event {
            running.exited[shard] = true;
            let message = match result {
                Ok(()) => "stopped without being asked".to_string(),
                Err(message) => message,
            };
            return Some(BootError::Shard {
                shard,
                pu: running.pus[shard],
                message,
            });
        }
    }
    None
}
