//! The systemd watchdog, petted at half its interval and only while every
//! shard's heartbeat (which moves only when the shard's loop runs) advanced
//! since the last ping; a wedged shard is named in `STATUS=` and the log,
//! and systemd restarts the service.

use super::status::StatusLine;
use crate::limits;
use crate::shard::heartbeat::Heartbeats;
use crate::systemd;
use std::time::{Duration, Instant};

/// Pets the systemd watchdog only while every shard proves it is alive.
pub(super) struct Watchdog {
    pub(super) interval: Duration,
    ping_every: Duration,
    last_ping: Instant,
    /// Heartbeats at the last ping.
    seen: Vec<u64>,
    /// Shards reported wedged (reported once until they recover).
    pub(super) reported: Vec<usize>,
    /// When every shard last proved progress.
    progress_at: Instant,
}

impl Watchdog {
    pub(super) fn from_env(heartbeats: &Heartbeats) -> Option<Watchdog> {
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

    pub(super) fn until_due(&self) -> Duration {
        self.ping_every.saturating_sub(self.last_ping.elapsed())
    }

    pub(super) fn tick(&mut self, heartbeats: &Heartbeats, pus: &[u32], status: &mut StatusLine) {
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
