//! The supervisor's last phase: stopping every live shard within the drain
//! timeout, in two phases — every shard stops accepting and lets its
//! connections finish (pumps keep running, since a connection on one shard
//! may wait on another shard's pump; bounded by `limits::QUIESCE_MAX`),
//! then every pump drains and fsyncs — after the control plane stopped. A
//! second signal or the timeout abandons the drain: the error goes up to
//! `boot` and the shards still running are left behind, not joined.

use super::{Running, wait_signal};
use crate::error::BootError;
use crate::limits;
use crate::shard::ShardEvent;
use crate::shard::mesh::ShardMessage;
use crate::systemd;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Stop every live shard in two phases within `timeout`: stop accepting and
/// let connections finish (bounded by `limits::QUIESCE_MAX`), then drain the
/// pumps. Returns `failure` (the reason for stopping) if there was one.
pub(super) fn stop(
    running: &mut Running,
    timeout: Duration,
    failure: Option<BootError>,
) -> Result<(), BootError> {
    systemd::stopping("stopping: finishing requests");
    stop_control_plane(running);
    let started = Instant::now();
    let mut drain = Drain {
        deadline: started + timeout,
        extended_at: started,
    };
    let live: Vec<usize> = (0..running.exited.len())
        .filter(|shard| !running.exited[*shard])
        .collect();
    quiesce(running, &live, &mut drain, started)?;
    systemd::status("stopping: draining and syncing partitions");
    if let Err(stuck) = drain_pumps(running, &live, &mut drain)? {
        // The stuck shards' threads are detached, not joined: `boot`
        // returns the exit code and the process ends with them. The
        // reason for stopping, if any, is logged here: the error that
        // travels up is the timeout.
        running.handles.clear();
        if let Some(failure) = &failure {
            tracing::error!("iggyd: {failure}");
        }
        return Err(BootError::DrainTimeout { timeout, stuck });
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

/// The drain's deadline, and when systemd's stop timeout was last extended.
struct Drain {
    deadline: Instant,
    extended_at: Instant,
}

/// The control plane's threads stop first: they read what the shards
/// publish, and nothing waits on them.
fn stop_control_plane(running: &mut Running) {
    if let Some(control) = running.control.take() {
        control.stop();
    }
    if let Some(metrics) = running.metrics.take() {
        metrics.stop();
    }
    if let Some(snapshot) = running.snapshot.take() {
        snapshot.stop();
    }
}

/// First phase: every live shard stops accepting and lets its connections
/// finish; waits until each says so (or exits), until `QUIESCE_MAX` after
/// `started` at most.
fn quiesce(
    running: &mut Running,
    live: &[usize],
    drain: &mut Drain,
    started: Instant,
) -> Result<(), BootError> {
    for shard in live {
        // An inbox that stays full until the deadline belongs to a wedged
        // shard; the deadline below handles it.
        let _ = running
            .mesh
            .send_deadline(*shard, ShardMessage::StopAccepting, drain.deadline);
    }
    let quiesce_deadline = drain.deadline.min(started + limits::QUIESCE_MAX);
    let mut quiesced = vec![false; running.exited.len()];
    while live
        .iter()
        .any(|shard| !quiesced[*shard] && !running.exited[*shard])
    {
        match wait_event(running, quiesce_deadline, &mut drain.extended_at)? {
            Some(ShardEvent::Quiesced { shard }) => quiesced[shard] = true,
            Some(_) => {}
            None => break,
        }
    }
    Ok(())
}

/// Second phase: every pump still running drains and fsyncs, and its shard
/// exits. `Ok(Err(stuck))` names the shards still running at the deadline.
fn drain_pumps(
    running: &mut Running,
    live: &[usize],
    drain: &mut Drain,
) -> Result<Result<(), String>, BootError> {
    for shard in live {
        if !running.exited[*shard] {
            let _ = running
                .mesh
                .send_deadline(*shard, ShardMessage::Stop, drain.deadline);
        }
    }
    while running.exited.iter().any(|exited| !exited) {
        if Instant::now() >= drain.deadline {
            let stuck: Vec<String> = running
                .exited
                .iter()
                .enumerate()
                .filter(|(_, exited)| !**exited)
                .map(|(shard, _)| format!("shard {shard} (PU {})", running.pus[shard]))
                .collect();
            return Ok(Err(stuck.join(", ")));
        }
        if wait_event(running, drain.deadline, &mut drain.extended_at)?.is_none()
            && running.handles.is_empty()
        {
            break;
        }
    }
    Ok(Ok(()))
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
