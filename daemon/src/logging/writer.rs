//! The two background threads of file logging and what they share:
//! `log-writer` drains the bounded queue the shards feed and writes the log
//! directory, pausing when the disk runs low; `log-janitor` enforces
//! retention and the total cap every `rotation_check_interval`. Also the
//! console sink (stderr or a test capture). Nothing here runs on a shard: a
//! shard only ever calls `SyncSender::try_send` and the console write.

use super::files::{Limits, LogFiles};
use super::format::{ConsoleStyle, Record, console_line, plain_line};
use crate::config::human_bytes;
use crate::limits::{LOG_DISK_CHECK_BYTES, low_disk_threshold};
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};
use tracing::Level;

/// Messages the writer takes from the queue before flushing its buffer.
const BATCH: usize = 1024;

/// Free and total bytes of the filesystem holding a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FreeSpace {
    /// Available to unprivileged users (`f_bavail`), what the daemon can use.
    pub available_bytes: u64,
    pub total_bytes: u64,
}

/// Injected so tests can fake a full disk.
pub type FreeSpaceFn = Arc<dyn Fn(&Path) -> io::Result<FreeSpace> + Send + Sync>;

pub fn statvfs_free_space(path: &Path) -> io::Result<FreeSpace> {
    let stat = nix::sys::statvfs::statvfs(path).map_err(io::Error::from)?;
    // The field types differ between libcs; all are unsigned and fit u64.
    #[allow(clippy::useless_conversion)]
    let fragment = u64::from(stat.fragment_size());
    #[allow(clippy::useless_conversion)]
    let (available, blocks) = (u64::from(stat.blocks_available()), u64::from(stat.blocks()));
    Ok(FreeSpace {
        available_bytes: available.saturating_mul(fragment),
        total_bytes: blocks.saturating_mul(fragment),
    })
}

/// What the queue carries to `log-writer`.
pub enum Message {
    Line(Record),
    /// Write everything queued before this, then answer.
    Flush(SyncSender<()>),
    /// Write everything queued before this, fsync, answer and exit.
    Shutdown(SyncSender<()>),
}

/// Where console lines go.
pub enum ConsoleSink {
    Stderr,
    /// Tests read what would have gone to stderr.
    #[cfg(test)]
    Capture(Arc<Mutex<Vec<u8>>>),
    /// Tests that only look at the files.
    #[cfg(test)]
    Discard,
}

/// stderr (or the journal behind it). Written synchronously by the thread
/// that logs, in one `write` per line, so lines keep their order with
/// anything else on stderr (a panic message) and reach journald even when
/// the process aborts right after.
pub struct Console {
    pub sink: ConsoleSink,
    pub style: ConsoleStyle,
}

impl Console {
    pub fn write(&self, record: &Record) {
        let line = console_line(record, self.style);
        match &self.sink {
            // Errors (a closed stderr, EPIPE) are ignored: there is nowhere
            // left to report them, and logging must not stop the daemon.
            ConsoleSink::Stderr => {
                let _ = io::stderr().lock().write_all(line.as_bytes());
            }
            #[cfg(test)]
            ConsoleSink::Capture(buffer) => lock(buffer).extend_from_slice(line.as_bytes()),
            #[cfg(test)]
            ConsoleSink::Discard => {}
        }
    }

    pub fn say(&self, level: Level, text: String) {
        self.write(&Record::internal(level, text));
    }
}

/// Wakes the janitor early (new limits) or stops it.
#[derive(Debug, Default)]
pub struct JanitorControl {
    pub stop: bool,
    pub generation: u64,
}

pub struct Shared {
    /// Locked by `log-writer`, `log-janitor` and the handle; never by a
    /// shard.
    pub files: Mutex<LogFiles>,
    pub console: Arc<Console>,
    /// Lines the layer could not queue since the writer last said so.
    pub dropped: Arc<AtomicU64>,
    pub free_space: FreeSpaceFn,
    /// `DISK_CHECK_INTERVAL` in the daemon; shorter in tests.
    pub disk_check_interval: Duration,
    pub janitor: Mutex<JanitorControl>,
    pub janitor_wake: Condvar,
}

/// A poisoned lock only means another logging thread panicked, and a panic
/// aborts the process (see `boot`), so the data is still the best there is.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Called first thing in each logging thread. The logging threads start
/// before the supervisor blocks the signals it waits for, so without this a
/// SIGTERM could be delivered here and kill the process with the default
/// action instead of draining. No asynchronous signal is ever handled on a
/// logging thread, so all are blocked except the synchronous ones (a fault
/// in this thread must still be reported, not silently held).
pub fn block_async_signals() {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::all();
    for synchronous in [
        Signal::SIGSEGV,
        Signal::SIGBUS,
        Signal::SIGFPE,
        Signal::SIGILL,
        Signal::SIGTRAP,
        Signal::SIGSYS,
        Signal::SIGABRT,
    ] {
        set.remove(synchronous);
    }
    // Cannot fail with a valid set and SIG_BLOCK; if it somehow did, the
    // supervisor's own mask still catches signals sent after start-up.
    let _ = set.thread_block();
}

/// `log-writer`: runs until `Shutdown` or until every sender is gone.
pub fn run_writer(shared: Arc<Shared>, queue: Receiver<Message>) {
    block_async_signals();
    let mut writer = Writer {
        shared,
        paused: false,
        skipped_lines: 0,
        skipped_bytes: 0,
        last_disk_check: None,
        bytes_since_check: 0,
        write_failed: false,
    };
    loop {
        let first = match queue.recv_timeout(writer.shared.disk_check_interval) {
            Ok(message) => message,
            Err(RecvTimeoutError::Timeout) => {
                // Quiet: still resume promptly after a low-disk pause and
                // report drops, without waiting for the next line.
                let shared = Arc::clone(&writer.shared);
                let mut files = lock(&shared.files);
                writer.check_disk_if_due(&mut files);
                writer.note_drops(&mut files);
                writer.flush(&mut files);
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => {
                let shared = Arc::clone(&writer.shared);
                let mut files = lock(&shared.files);
                writer.note_drops(&mut files);
                writer.sync(&mut files);
                return;
            }
        };
        let shared = Arc::clone(&writer.shared);
        let mut files = lock(&shared.files);
        let mut next = Some(first);
        let mut handled = 0;
        while let Some(message) = next.take() {
            match message {
                Message::Line(record) => writer.line(&mut files, &record),
                Message::Flush(ack) => {
                    writer.note_drops(&mut files);
                    writer.flush(&mut files);
                    let _ = ack.send(());
                }
                Message::Shutdown(ack) => {
                    writer.note_drops(&mut files);
                    writer.sync(&mut files);
                    let _ = ack.send(());
                    return;
                }
            }
            handled += 1;
            if handled < BATCH {
                next = queue.try_recv().ok();
            }
        }
        writer.flush(&mut files);
    }
}

struct Writer {
    shared: Arc<Shared>,
    /// Low disk: lines are counted, not written.
    paused: bool,
    skipped_lines: u64,
    skipped_bytes: u64,
    last_disk_check: Option<Instant>,
    bytes_since_check: u64,
    /// A write failed and was reported; the next success is reported too.
    write_failed: bool,
}

impl Writer {
    fn line(&mut self, files: &mut LogFiles, record: &Record) {
        self.note_drops(files);
        self.check_disk_if_due(files);
        let text = plain_line(record);
        if self.paused {
            self.skipped_lines += 1;
            self.skipped_bytes += text.len() as u64;
            return;
        }
        self.write(files, &text);
    }

    fn write(&mut self, files: &mut LogFiles, text: &str) {
        match files.write_line(text.as_bytes()) {
            Ok(written) => {
                self.bytes_since_check += written.bytes;
                if self.write_failed {
                    self.write_failed = false;
                    self.shared.console.say(
                        Level::INFO,
                        format!(
                            "log file `{}` is writable again",
                            files.active_path().display()
                        ),
                    );
                }
            }
            Err(error) => self.failed(files, &error),
        }
    }

    /// ENOSPC, EIO and the like: one warning on the console, then keep
    /// trying with a freshly opened file; the daemon keeps running.
    fn failed(&mut self, files: &mut LogFiles, error: &io::Error) {
        if !self.write_failed {
            self.write_failed = true;
            self.shared.console.say(
                Level::WARN,
                format!(
                    "log file `{}`: {error}; the daemon keeps running, file log lines are lost \
                     until writing works again (stderr/journal logging continues)",
                    files.active_path().display()
                ),
            );
        }
        let _ = files.recover();
    }

    fn flush(&mut self, files: &mut LogFiles) {
        if let Err(error) = files.flush() {
            self.failed(files, &error);
        }
    }

    fn sync(&mut self, files: &mut LogFiles) {
        if let Err(error) = files.sync() {
            self.failed(files, &error);
        }
    }

    /// One line in the file for the lines the layer could not queue.
    fn note_drops(&mut self, files: &mut LogFiles) {
        let dropped = self.shared.dropped.swap(0, Ordering::Relaxed);
        if dropped == 0 {
            return;
        }
        if self.paused {
            self.skipped_lines += dropped;
            return;
        }
        let record = Record::internal(
            Level::WARN,
            format!("{dropped} log lines dropped: the log writer fell behind"),
        );
        self.write(files, &plain_line(&record));
    }

    fn check_disk_if_due(&mut self, files: &mut LogFiles) {
        let now = Instant::now();
        let due = self
            .last_disk_check
            .is_none_or(|last| now.duration_since(last) >= self.shared.disk_check_interval)
            || self.bytes_since_check >= LOG_DISK_CHECK_BYTES;
        if !due {
            return;
        }
        self.last_disk_check = Some(now);
        self.bytes_since_check = 0;
        // An error (the directory vanished) leaves the state as it is; the
        // write that follows reports the real problem.
        let Ok(space) = (self.shared.free_space)(files.dir()) else {
            return;
        };
        let threshold = low_disk_threshold(space.total_bytes);
        let low = space.available_bytes < threshold;
        if low && !self.paused {
            self.paused = true;
            self.skipped_lines = 0;
            self.skipped_bytes = 0;
            self.flush(files);
            self.shared.console.say(
                Level::WARN,
                format!(
                    "free space on the log filesystem of `{}` is {}, under {}: file logging \
                     pauses until space is back (stderr/journal logging continues)",
                    files.dir().display(),
                    human_bytes(space.available_bytes),
                    human_bytes(threshold)
                ),
            );
        } else if !low && self.paused {
            self.paused = false;
            let text = format!(
                "free space on the log filesystem is back ({}): file logging resumed; {} lines \
                 ({}) were skipped while it was low",
                human_bytes(space.available_bytes),
                self.skipped_lines,
                human_bytes(self.skipped_bytes)
            );
            let record = Record::internal(Level::INFO, text);
            self.shared.console.write(&record);
            self.write(files, &plain_line(&record));
        }
    }
}

/// `log-janitor`: every `check_interval` (or at once when woken by new
/// limits), retention and the total cap, until stopped.
pub fn run_janitor(shared: Arc<Shared>) {
    block_async_signals();
    let mut seen = 0;
    let mut failed = false;
    loop {
        let interval = lock(&shared.files).limits().check_interval;
        let interval = interval.max(Duration::from_secs(1));
        {
            let control = lock(&shared.janitor);
            let (control, _) = shared
                .janitor_wake
                .wait_timeout_while(control, interval, |control| {
                    !control.stop && control.generation == seen
                })
                .unwrap_or_else(PoisonError::into_inner);
            if control.stop {
                return;
            }
            seen = control.generation;
        }
        let mut files = lock(&shared.files);
        match files.enforce(SystemTime::now()) {
            Ok(_) => failed = false,
            Err(error) => {
                if !failed {
                    failed = true;
                    shared.console.say(
                        Level::WARN,
                        format!(
                            "log directory `{}`: retention check failed: {error}",
                            files.dir().display()
                        ),
                    );
                }
            }
        }
    }
}

/// Applies new limits and wakes the janitor so retention applies at once.
pub fn apply_limits(shared: &Shared, limits: Limits) -> io::Result<()> {
    let result = lock(&shared.files).set_limits(limits);
    lock(&shared.janitor).generation += 1;
    shared.janitor_wake.notify_all();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves the low-disk threshold is 5 % on small filesystems and 1 GiB
    /// on large ones.
    #[test]
    fn low_disk_threshold_is_the_smaller_of_floor_and_percent() {
        assert_eq!(low_disk_threshold(10 << 30), (10u64 << 30) / 100 * 5);
        assert_eq!(low_disk_threshold(100 << 30), 1 << 30);
        assert_eq!(low_disk_threshold(0), 0);
    }
}
