//! sd_notify: readiness, status, stopping and watchdog messages to the service
//! manager. Every call is a no-op when `NOTIFY_SOCKET` is unset, so the daemon
//! behaves the same in a terminal, under systemd and under the test harness
//! (which owns its own `NOTIFY_SOCKET`). Failures to notify are logged, never
//! fatal: the manager may simply not listen.

use sd_notify::NotifyState;

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

/// `READY=1` together with a final start-up `STATUS=`.
pub fn ready(status_text: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status_text)]);
}

/// `STOPPING=1` when a graceful shutdown begins.
pub fn stopping(status_text: &str) {
    send(&[NotifyState::Stopping, NotifyState::Status(status_text)]);
}
