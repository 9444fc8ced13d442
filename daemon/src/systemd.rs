//! sd_notify: readiness, status, reloading, stopping, watchdog and timeout
//! extensions for the service manager. Every call is a no-op when
//! `NOTIFY_SOCKET` is unset, so the daemon behaves the same in a terminal,
//! under systemd and under the test harness (which owns its own
//! `NOTIFY_SOCKET`). Failures to notify are logged, never fatal: the manager
//! may simply not listen. This module decides nothing: the supervisor says
//! when.

use sd_notify::NotifyState;
use std::time::Duration;

fn send(states: &[NotifyState]) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    if let Err(error) = sd_notify::notify(false, states) {
        tracing::warn!(%error, "sd_notify failed");
    }
}

/// `STATUS=` line shown by `systemctl status`.
pub fn status(text: &str) {
    send(&[NotifyState::Status(text)]);
}

/// `READY=1` together with a `STATUS=`.
pub fn ready(status_text: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status_text)]);
}

/// `STOPPING=1` when a graceful shutdown begins.
pub fn stopping(status_text: &str) {
    send(&[NotifyState::Stopping, NotifyState::Status(status_text)]);
}

/// `RELOADING=1` with `MONOTONIC_USEC=` (systemd ≥ 253 wants both for
/// `Type=notify-reload`; older versions ignore the timestamp).
pub fn reloading(status_text: &str) {
    match NotifyState::monotonic_usec_now() {
        Ok(now) => send(&[
            NotifyState::Reloading,
            now,
            NotifyState::Status(status_text),
        ]),
        Err(_) => send(&[NotifyState::Reloading, NotifyState::Status(status_text)]),
    }
}

/// `WATCHDOG=1`.
pub fn watchdog() {
    send(&[NotifyState::Watchdog]);
}

/// `EXTEND_TIMEOUT_USEC=`: ask for `extra` more time for the current start
/// or stop job.
pub fn extend_timeout(extra: Duration, status_text: &str) {
    let usec = u32::try_from(extra.as_micros()).unwrap_or(u32::MAX);
    send(&[
        NotifyState::ExtendTimeoutUsec(usec),
        NotifyState::Status(status_text),
    ]);
}

/// The watchdog interval systemd expects pings within, when it is enabled
/// for this process (`WATCHDOG_USEC` set and `WATCHDOG_PID` absent or ours).
///
/// (The sd-notify crate's `watchdog_enabled` insists on `WATCHDOG_PID`;
/// sd_watchdog_enabled(3) treats an absent one as "this process".)
pub fn watchdog_interval() -> Option<Duration> {
    let usec = std::env::var("WATCHDOG_USEC")
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()?;
    watchdog_for(
        usec,
        std::env::var("WATCHDOG_PID").ok().as_deref(),
        std::process::id(),
    )
}

fn watchdog_for(usec: u64, pid: Option<&str>, own_pid: u32) -> Option<Duration> {
    if usec == 0 {
        return None;
    }
    match pid.map(|pid| pid.trim().parse::<u32>()) {
        None => Some(Duration::from_micros(usec)),
        Some(Ok(pid)) if pid == own_pid => Some(Duration::from_micros(usec)),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watchdog_is_ours_when_the_pid_is_absent_or_matches() {
        assert_eq!(
            watchdog_for(1_000_000, None, 42),
            Some(Duration::from_secs(1))
        );
        assert_eq!(
            watchdog_for(1_000_000, Some("42"), 42),
            Some(Duration::from_secs(1))
        );
        assert_eq!(watchdog_for(1_000_000, Some("7"), 42), None);
        assert_eq!(watchdog_for(1_000_000, Some("x"), 42), None);
        assert_eq!(watchdog_for(0, None, 42), None);
    }
}
