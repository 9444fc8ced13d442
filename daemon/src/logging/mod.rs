//! Process-wide logging: the `tracing` subscriber, its console output
//! (journald under systemd, else stderr) and the size-capped, rotated file
//! logs in `logging.dir`, plus the `LogHandle` the supervisor and the admin
//! socket use to change the level, rotate, reload limits and flush. Callers
//! elsewhere only use `tracing` macros. This module must never make a shard
//! wait on file I/O or on a lock a file writer holds: a shard formats its
//! line, writes the console line, and offers the file line to a bounded
//! queue without waiting (a full queue drops and counts).
//!
//! **Journal: `<N>` prefixes on stderr, not the native protocol.** When
//! `JOURNAL_STREAM` names our stderr, stderr already is a journald stream,
//! and journald reads sd-daemon(3) `<N>` priority prefixes on it by default
//! (`SyslogLevelPrefix=yes`). So each line is `<6>message key=value …`, with
//! no timestamp (journald stamps) and no colour. Chosen over the native
//! socket (`tracing-journald`) because: the line goes to the one stream
//! systemd gave us, in order with everything else written there (panic
//! messages, `boot`'s error paragraph) and from the emitting thread, so the
//! last line before an abort still arrives; it needs no second connection
//! and no fixed socket path (`tracing-journald` hard-codes
//! `/run/systemd/journal/socket`, so it cannot be pointed at a test socket),
//! and the bytes a test captures are exactly the bytes journald parses; and
//! it adds no dependency. The cost: span and event fields (shard, pu,
//! stream, topic, partition, …) are `key=value` text inside `MESSAGE=`, not
//! separate journal fields, so one filters with `journalctl -u iggyd -g
//! 'shard=3'` rather than `journalctl SHARD=3`. Switching later is confined
//! to `format.rs` and `writer::Console`.
//!
//! **Files** are always written, in addition to the console, by one
//! `log-writer` thread; `log-janitor` applies retention and the total cap
//! every `rotation_check_interval`. See `files.rs` for the invariants and
//! `writer.rs` for the low-disk pause.
//!
//! Layout: `journal` (JOURNAL_STREAM, priorities), `format` (records and
//! their three renderings), `layer` (the `tracing` layer), `throttle` (the
//! consensus library's lines, one per call site per interval), `files` (the
//! log directory), `writer` (the two threads and the console).

mod files;
pub(crate) mod format;
mod journal;
mod layer;
pub use layer::{RecentEvent, recent_events};
mod throttle;
mod writer;

pub use files::ACTIVE_NAME;
pub(crate) use files::{LogName, parse_name as parse_log_name};
pub use journal::{JournalStream, priority, stderr_is_journal};
pub use writer::FreeSpace;

use crate::config::LoggingConfig;
use files::{CheckHook, Limits, LogFiles};
use format::ConsoleStyle;
use layer::{FileQueue, LogLayer};
use std::fs::File;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};
use tracing::Dispatch;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::{EnvFilter, Registry, reload};
use writer::{Console, ConsoleSink, FreeSpaceFn, JanitorControl, Message, Shared, lock};

#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    /// Not a level or `EnvFilter` directive list.
    #[error(
        "log level {value:?} is not accepted: {message}; expected trace, debug, info, warn, \
         error, off or a directive list like \"info,iggyd::shard=debug\""
    )]
    Level { value: String, message: String },
    /// `logging.dir` cannot be created, locked or written.
    #[error("config key `logging.dir` = {:?}: {source}", .path.display().to_string())]
    Dir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Another process writes this log directory.
    #[error(
        "config key `logging.dir` = {:?}: already in use by another iggyd (lock {:?}); two \
         daemons cannot share a log directory",
        .path.display().to_string(), .lock.display().to_string()
    )]
    DirInUse { path: PathBuf, lock: PathBuf },
    /// A log file operation requested through the handle failed.
    #[error("log file {:?}: {source}", .path.display().to_string())]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("a global tracing subscriber is already installed")]
    AlreadyInstalled,
    #[error("cannot start the {thread} thread: {source}")]
    Thread {
        thread: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("the log writer did not answer within {0:?} (is the log disk hung?)")]
    WriterStalled(Duration),
}

impl LoggingError {
    /// True when the configuration (the level or the directory) is what
    /// cannot work: the daemon exits 78 (EX_CONFIG) rather than 1.
    pub fn is_config(&self) -> bool {
        matches!(
            self,
            LoggingError::Level { .. } | LoggingError::Dir { .. } | LoggingError::DirInUse { .. }
        )
    }
}

/// What `LogHandle::update_limits` did.
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitsUpdate {
    /// Sizes, retention and interval are live.
    Applied,
    /// Those are live, but `logging.dir` changed, which only a restart
    /// applies; the old directory stays in use until then.
    NeedsRestart {
        key: &'static str,
        running: PathBuf,
        configured: PathBuf,
    },
}

impl std::fmt::Display for LimitsUpdate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LimitsUpdate::Applied => write!(f, "logging limits applied"),
            LimitsUpdate::NeedsRestart {
                key,
                running,
                configured,
            } => write!(
                f,
                "logging limits applied; `{key}` changed from {:?} to {:?} and needs a restart",
                running.display().to_string(),
                configured.display().to_string()
            ),
        }
    }
}

type FilterHandle = reload::Handle<EnvFilter, Registry>;

/// Controls the installed logger. Cheap to clone; the writer threads stop
/// (after a flush and fsync) when the last clone is dropped.
#[derive(Clone)]
pub struct LogHandle {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for LogHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogHandle")
            .field("dir", &self.inner.dir)
            .field("level", &self.current_level())
            .finish()
    }
}

struct Inner {
    shared: Arc<Shared>,
    queue: SyncSender<Message>,
    filter: FilterHandle,
    level: Mutex<String>,
    dir: PathBuf,
    writer: Mutex<Option<JoinHandle<()>>>,
    janitor: Mutex<Option<JoinHandle<()>>>,
    /// Held for the life of the logger (see `files::LOCK_NAME`).
    _lock: nix::fcntl::Flock<File>,
}

/// What `build` takes besides the configuration; tests inject fakes.
pub(crate) struct Setup {
    pub console: Console,
    pub free_space: FreeSpaceFn,
    pub disk_check_interval: Duration,
    pub hook: Option<CheckHook>,
    pub queue_depth: usize,
}

/// The logger `init` installed, for `flush_installed`. Weak, so it does not
/// keep the writer alive past the last `LogHandle`.
static INSTALLED: Mutex<std::sync::Weak<Inner>> = Mutex::new(std::sync::Weak::new());

/// Flushes the installed logger's file (bounded by one second: the process
/// is about to abort, and the writer may be waiting on a lock the panicking
/// thread holds) if there
/// is one: the panic hook calls it before aborting so the file gets the
/// last lines too. A no-op on the logging threads themselves, which cannot
/// wait for their own queue.
pub fn flush_installed() {
    let current = std::thread::current();
    if matches!(current.name(), Some("log-writer" | "log-janitor")) {
        return;
    }
    let installed = lock(&INSTALLED).upgrade();
    if let Some(inner) = installed {
        let _ = inner.control(Message::Flush, Duration::from_secs(1));
    }
}

/// Installs the daemon's global subscriber: console (journal or stderr)
/// plus files in `config.dir`. Fails when the level does not parse, the
/// directory cannot be created, locked or opened, or a subscriber exists.
pub fn init(config: &LoggingConfig) -> Result<LogHandle, LoggingError> {
    let setup = Setup {
        console: Console {
            sink: ConsoleSink::Stderr,
            style: detect_style(),
        },
        free_space: Arc::new(writer::statvfs_free_space),
        disk_check_interval: crate::limits::LOG_DISK_CHECK_INTERVAL,
        hook: None,
        queue_depth: crate::limits::LOG_QUEUE_DEPTH,
    };
    let (handle, dispatch) = build(config, setup)?;
    tracing::dispatcher::set_global_default(dispatch)
        .map_err(|_| LoggingError::AlreadyInstalled)?;
    *lock(&INSTALLED) = Arc::downgrade(&handle.inner);
    Ok(handle)
}

/// The console-only subscriber for short subcommands (`iggyd plan`, `iggyd
/// config`): same console rendering, no files, no threads.
pub fn init_stderr_only(level: &str) -> Result<(), LoggingError> {
    let filter = parse_level(level)?;
    let console = Arc::new(Console {
        sink: ConsoleSink::Stderr,
        style: detect_style(),
    });
    let subscriber = Registry::default().with(filter).with(LogLayer {
        console,
        files: None,
    });
    tracing::subscriber::set_global_default(subscriber).map_err(|_| LoggingError::AlreadyInstalled)
}

fn detect_style() -> ConsoleStyle {
    if stderr_is_journal() {
        ConsoleStyle::Journal
    } else if std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty())
    {
        ConsoleStyle::Terminal
    } else {
        ConsoleStyle::Plain
    }
}

/// The consensus library logs every RPC at `info`; unless the level names
/// it, only its warnings and errors reach the log.
const QUIET_TARGETS: &str = "openraft=warn";

fn parse_level(level: &str) -> Result<EnvFilter, LoggingError> {
    let filter = if level.contains("openraft") {
        level.to_string()
    } else {
        format!("{level},{QUIET_TARGETS}")
    };
    EnvFilter::try_new(&filter).map_err(|error| LoggingError::Level {
        value: level.to_string(),
        message: error.to_string(),
    })
}

fn limits_of(config: &LoggingConfig) -> Limits {
    Limits {
        max_file_bytes: config.max_file_size_bytes,
        max_total_bytes: config.max_total_size_bytes,
        retention: config.retention,
        check_interval: config.rotation_check_interval,
    }
}

fn lock_dir(dir: &Path) -> Result<nix::fcntl::Flock<File>, LoggingError> {
    let wrap = |source| LoggingError::Dir {
        path: dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(wrap)?;
    let lock_path = dir.join(files::LOCK_NAME);
    crate::preflight::lock_exclusive(&lock_path).map_err(|error| match error {
        crate::preflight::LockError::Held => LoggingError::DirInUse {
            path: dir.to_path_buf(),
            lock: lock_path.clone(),
        },
        crate::preflight::LockError::Io(source) => wrap(source),
    })
}

/// Builds the subscriber and starts the threads without installing it
/// globally (tests run it with `tracing::dispatcher::with_default`).
pub(crate) fn build(
    config: &LoggingConfig,
    setup: Setup,
) -> Result<(LogHandle, Dispatch), LoggingError> {
    let filter = parse_level(&config.level)?;
    let dir_lock = lock_dir(&config.dir)?;
    let files = LogFiles::open(&config.dir, limits_of(config), setup.hook).map_err(|source| {
        LoggingError::Dir {
            path: config.dir.clone(),
            source,
        }
    })?;
    let console = Arc::new(setup.console);
    let dropped = Arc::new(AtomicU64::new(0));
    let shared = Arc::new(Shared {
        files: Mutex::new(files),
        console: Arc::clone(&console),
        dropped: Arc::clone(&dropped),
        free_space: setup.free_space,
        disk_check_interval: setup.disk_check_interval,
        janitor: Mutex::new(JanitorControl::default()),
        janitor_wake: Condvar::new(),
    });
    let (sender, receiver) = sync_channel(setup.queue_depth.max(1));
    let writer = {
        let shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("log-writer".into())
            .spawn(move || writer::run_writer(shared, receiver))
            .map_err(|source| LoggingError::Thread {
                thread: "log-writer",
                source,
            })?
    };
    let janitor = {
        let shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("log-janitor".into())
            .spawn(move || writer::run_janitor(shared))
    };
    let (filter_layer, filter_handle) = reload::Layer::new(filter);
    let inner = Inner {
        shared,
        queue: sender.clone(),
        filter: filter_handle,
        level: Mutex::new(config.level.clone()),
        dir: config.dir.clone(),
        writer: Mutex::new(Some(writer)),
        janitor: Mutex::new(None),
        _lock: dir_lock,
    };
    // From here on, dropping `inner` stops the writer cleanly.
    let janitor = janitor.map_err(|source| LoggingError::Thread {
        thread: "log-janitor",
        source,
    })?;
    *lock(&inner.janitor) = Some(janitor);
    let subscriber = Registry::default().with(filter_layer).with(LogLayer {
        console,
        files: Some(FileQueue { sender, dropped }),
    });
    Ok((
        LogHandle {
            inner: Arc::new(inner),
        },
        Dispatch::new(subscriber),
    ))
}

impl LogHandle {
    /// Changes the level (or directive list) at once, for every thread.
    pub fn set_level(&self, level: &str) -> Result<(), LoggingError> {
        let filter = parse_level(level)?;
        self.inner
            .filter
            .reload(filter)
            .map_err(|error| LoggingError::Level {
                value: level.to_string(),
                message: error.to_string(),
            })?;
        *lock(&self.inner.level) = level.to_string();
        Ok(())
    }

    /// The level or directive list in force.
    pub fn current_level(&self) -> String {
        lock(&self.inner.level).clone()
    }

    /// Rotates the active file now (SIGUSR2, the admin socket). Returns the
    /// rotated file's path, or `None` when the active file was empty.
    pub fn rotate_now(&self) -> Result<Option<PathBuf>, LoggingError> {
        let mut files = lock(&self.inner.shared.files);
        let rotated = files.rotate(SystemTime::now());
        rotated.map_err(|source| LoggingError::File {
            path: files.active_path(),
            source,
        })
    }

    /// Applies new sizes, retention and check interval at once (SIGHUP).
    /// The level is not touched (`set_level`). A different `dir` cannot
    /// move while running: reported as `NeedsRestart` for the caller to log.
    pub fn update_limits(&self, config: &LoggingConfig) -> Result<LimitsUpdate, LoggingError> {
        writer::apply_limits(&self.inner.shared, limits_of(config)).map_err(|source| {
            LoggingError::File {
                path: self.inner.dir.clone(),
                source,
            }
        })?;
        if config.dir == self.inner.dir {
            Ok(LimitsUpdate::Applied)
        } else {
            Ok(LimitsUpdate::NeedsRestart {
                key: "logging.dir",
                running: self.inner.dir.clone(),
                configured: config.dir.clone(),
            })
        }
    }

    /// Waits (at most `limits::LOG_FLUSH_TIMEOUT`) until every line logged before this
    /// call is in the file (written to the OS, not fsynced). Never call it
    /// from a shard.
    pub fn flush(&self) -> Result<(), LoggingError> {
        self.inner
            .control(Message::Flush, crate::limits::LOG_FLUSH_TIMEOUT)
    }

    /// Bytes of iggyd log files in the log directory (active + rotated).
    pub fn dir_size_bytes(&self) -> u64 {
        lock(&self.inner.shared.files).total_bytes()
    }

    /// The directory in use (a reload cannot move it).
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Runs `f` on the directory while no logging thread can change it:
    /// tests measure the caps at a consistent instant.
    #[cfg(test)]
    fn with_dir_locked<T>(&self, f: impl FnOnce(&Path) -> T) -> T {
        let files = lock(&self.inner.shared.files);
        f(files.dir())
    }
}

impl Inner {
    /// Sends a control message (never dropped: retried while the queue is
    /// full) and waits for the writer's answer, both within `timeout`. A
    /// writer that is already gone has nothing left to flush.
    fn control(
        &self,
        message: fn(SyncSender<()>) -> Message,
        timeout: Duration,
    ) -> Result<(), LoggingError> {
        let deadline = Instant::now() + timeout;
        let (ack, answer) = sync_channel(1);
        let mut message = message(ack);
        loop {
            match self.queue.try_send(message) {
                Ok(()) => break,
                Err(TrySendError::Disconnected(_)) => return Ok(()),
                Err(TrySendError::Full(returned)) => {
                    if Instant::now() >= deadline {
                        return Err(LoggingError::WriterStalled(timeout));
                    }
                    message = returned;
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match answer.recv_timeout(left) {
            Ok(()) => Ok(()),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Ok(()),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                Err(LoggingError::WriterStalled(timeout))
            }
        }
    }
}

impl Drop for Inner {
    /// Flush, fsync and stop both threads. A writer stuck on a hung disk is
    /// left behind rather than joined: exit must not hang on the log.
    fn drop(&mut self) {
        let stopped = self
            .control(Message::Shutdown, crate::limits::LOG_FLUSH_TIMEOUT)
            .is_ok();
        lock(&self.shared.janitor).stop = true;
        self.shared.janitor_wake.notify_all();
        if stopped && let Some(writer) = lock(&self.writer).take() {
            let _ = writer.join();
        }
        if let Some(janitor) = lock(&self.janitor).take() {
            let _ = janitor.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use files::{measure, rotated_sequences};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    const KIB: u64 = 1024;

    fn config(dir: &Path, level: &str) -> LoggingConfig {
        LoggingConfig {
            level: level.to_string(),
            dir: dir.to_path_buf(),
            max_file_size_bytes: 0,
            max_total_size_bytes: 0,
            retention: Duration::ZERO,
            rotation_check_interval: Duration::from_secs(1),
        }
    }

    fn plenty_of_space() -> FreeSpaceFn {
        Arc::new(|_: &Path| {
            Ok(FreeSpace {
                available_bytes: 500 << 30,
                total_bytes: 1000 << 30,
            })
        })
    }

    fn setup(sink: ConsoleSink, style: ConsoleStyle) -> Setup {
        Setup {
            console: Console { sink, style },
            free_space: plenty_of_space(),
            disk_check_interval: Duration::from_millis(20),
            hook: None,
            queue_depth: crate::limits::LOG_QUEUE_DEPTH,
        }
    }

    fn read(path: &Path) -> String {
        std::fs::read_to_string(path).unwrap_or_default()
    }

    fn captured(buffer: &Arc<Mutex<Vec<u8>>>) -> String {
        String::from_utf8_lossy(&lock(buffer)).into_owned()
    }

    /// Polls `condition` every 10 ms for at most `limit`; panics with `what`.
    fn wait_for(limit: Duration, what: &str, mut condition: impl FnMut() -> bool) {
        let deadline = Instant::now() + limit;
        while !condition() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Proves the caps hold under load: four threads log at trace level for
    /// two seconds through the real queue and writer with 64 KiB files and
    /// a 256 KiB total. The caps are measured on disk after every rotation
    /// and deletion (a hook the writer calls with the directory locked) and
    /// by a watcher thread sampling throughout; at the end at least three
    /// files were rotated and the oldest were deleted.
    #[test]
    fn rotation_caps_hold_under_trace_load_from_several_threads() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut config = config(dir.path(), "trace");
        config.max_file_size_bytes = 64 * KIB;
        config.max_total_size_bytes = 256 * KIB;
        let largest_seen = Arc::new(AtomicU64::new(0));
        let total_seen = Arc::new(AtomicU64::new(0));
        let checks = Arc::new(AtomicU64::new(0));
        let mut setup = setup(ConsoleSink::Discard, ConsoleStyle::Plain);
        setup.hook = Some({
            let (largest_seen, total_seen, checks) =
                (largest_seen.clone(), total_seen.clone(), checks.clone());
            Arc::new(move |dir: &Path| {
                let (largest, total, _) = measure(dir).expect("measure in hook");
                largest_seen.fetch_max(largest, Ordering::Relaxed);
                total_seen.fetch_max(total, Ordering::Relaxed);
                checks.fetch_add(1, Ordering::Relaxed);
            })
        });
        let (handle, dispatch) = build(&config, setup).expect("build");

        let done = Arc::new(AtomicBool::new(false));
        let watcher = {
            let (handle, done) = (handle.clone(), done.clone());
            std::thread::spawn(move || {
                let (mut largest_max, mut total_max, mut samples) = (0, 0, 0u64);
                while !done.load(Ordering::Relaxed) {
                    let (largest, total, _) =
                        handle.with_dir_locked(measure).expect("measure in watcher");
                    largest_max = largest_max.max(largest);
                    total_max = total_max.max(total);
                    samples += 1;
                    std::thread::sleep(Duration::from_millis(2));
                }
                (largest_max, total_max, samples)
            })
        };
        let started = Instant::now();
        let producers: Vec<_> = (0..4)
            .map(|shard| {
                let dispatch = dispatch.clone();
                std::thread::Builder::new()
                    .name(format!("shard-{shard}"))
                    .spawn(move || {
                        tracing::dispatcher::with_default(&dispatch, || {
                            let span = tracing::info_span!("shard", shard, pu = shard * 2);
                            let _entered = span.enter();
                            let mut sequence = 0u64;
                            while started.elapsed() < Duration::from_secs(2) {
                                tracing::trace!(
                                    stream = "orders",
                                    topic = "payments",
                                    partition = sequence % 16,
                                    "appended message {sequence} to the partition log, padding"
                                );
                                sequence += 1;
                            }
                            sequence
                        })
                    })
                    .expect("spawn producer")
            })
            .collect();
        let produced: u64 = producers
            .into_iter()
            .map(|producer| producer.join().expect("producer"))
            .sum();
        handle.flush().expect("flush");
        done.store(true, Ordering::Relaxed);
        let (watched_largest, watched_total, samples) = watcher.join().expect("watcher");
        let (largest, total, names) = measure(dir.path()).expect("measure at end");
        let rotated = rotated_sequences(&names);
        eprintln!(
            "rotation test: {produced} lines in 2 s; hook: {} checks, largest file {} B, \
             largest total {} B; watcher: {samples} samples, largest file {watched_largest} B, \
             largest total {watched_total} B; end: largest {largest} B, total {total} B, \
             rotated sequences {rotated:?}",
            checks.load(Ordering::Relaxed),
            largest_seen.load(Ordering::Relaxed),
            total_seen.load(Ordering::Relaxed),
        );
        for observed in [
            largest_seen.load(Ordering::Relaxed),
            watched_largest,
            largest,
        ] {
            assert!(observed <= 64 * KIB, "a file reached {observed} bytes");
        }
        for observed in [total_seen.load(Ordering::Relaxed), watched_total, total] {
            assert!(
                observed <= 256 * KIB,
                "the directory reached {observed} bytes"
            );
        }
        let last = *rotated.last().expect("files were rotated");
        assert!(last >= 3, "at least three rotations: {rotated:?}");
        assert!(
            rotated[0] > 1,
            "the oldest rotated files were deleted: {rotated:?}"
        );
        assert!(checks.load(Ordering::Relaxed) >= 3);
        assert!(samples > 0);
        assert_eq!(handle.dir_size_bytes(), total);
        let active = std::fs::read(dir.path().join(ACTIVE_NAME)).expect("active file");
        assert!(!active.contains(&0x1b), "no escape bytes in the file");
        assert!(read(&dir.path().join(ACTIVE_NAME)).contains("shard=")); // span fields
    }

    /// Proves retention: rotated files whose mtime is two days old are
    /// deleted by the janitor within one 1 s check interval, while a recent
    /// rotated file and a file that is not ours stay, and the sequence
    /// resumes after the largest one found.
    #[test]
    fn retention_deletes_old_files_within_one_check_interval() {
        use nix::sys::stat::{UtimensatFlags, utimensat};
        use nix::sys::time::TimeSpec;
        let dir = tempfile::tempdir().expect("temp dir");
        let old_time = SystemTime::now() - Duration::from_secs(2 * 86_400);
        let old_spec = TimeSpec::from(
            old_time
                .duration_since(std::time::UNIX_EPOCH)
                .expect("after epoch"),
        );
        let old_files = [
            "iggyd.20200101T000000Z.000001.log",
            "iggyd.20200101T000000Z.000002.log",
        ];
        for name in old_files.iter().chain(["notes.txt"].iter()) {
            let path = dir.path().join(name);
            std::fs::write(&path, b"old line\n").expect("write old file");
            utimensat(
                nix::fcntl::AT_FDCWD,
                &path,
                &old_spec,
                &old_spec,
                UtimensatFlags::FollowSymlink,
            )
            .expect("set mtime");
        }
        let recent = dir.path().join("iggyd.20200101T000000Z.000003.log");
        std::fs::write(&recent, b"recent line\n").expect("write recent");
        let mut config = config(dir.path(), "info");
        config.retention = Duration::from_secs(3600);
        config.rotation_check_interval = Duration::from_secs(1);
        let (handle, dispatch) =
            build(&config, setup(ConsoleSink::Discard, ConsoleStyle::Plain)).expect("build");
        let started = Instant::now();
        wait_for(Duration::from_millis(2500), "retention deletes", || {
            old_files.iter().all(|name| !dir.path().join(name).exists())
        });
        let took = started.elapsed();
        assert!(took < Duration::from_millis(2500), "took {took:?}");
        assert!(recent.exists(), "a recent rotated file stays");
        assert!(dir.path().join("notes.txt").exists(), "not ours: kept");

        tracing::dispatcher::with_default(&dispatch, || tracing::info!("a line"));
        handle.flush().expect("flush");
        let rotated = handle.rotate_now().expect("rotate").expect("non-empty");
        let name = rotated.file_name().and_then(|name| name.to_str());
        assert!(
            name.is_some_and(|name| name.ends_with(".000004.log")),
            "{rotated:?}"
        );
    }

    /// Proves the low-disk guard with an injected free-space function: file
    /// logging pauses with exactly one console warning however many lines
    /// follow, those lines are not written, and when space returns one info
    /// line (console and file) says how many were skipped.
    #[test]
    fn low_disk_pauses_file_logging_with_one_warning_then_resumes() {
        let dir = tempfile::tempdir().expect("temp dir");
        let available = Arc::new(AtomicU64::new(500 << 30));
        let console = Arc::new(Mutex::new(Vec::new()));
        let mut setup = setup(ConsoleSink::Capture(console.clone()), ConsoleStyle::Plain);
        setup.free_space = {
            let available = available.clone();
            Arc::new(move |_: &Path| {
                Ok(FreeSpace {
                    available_bytes: available.load(Ordering::Relaxed),
                    total_bytes: 1000 << 30,
                })
            })
        };
        let (handle, dispatch) = build(&config(dir.path(), "info"), setup).expect("build");
        let active = dir.path().join(ACTIVE_NAME);
        let log = |text: &str| {
            tracing::dispatcher::with_default(&dispatch, || tracing::info!("{text}"));
            handle.flush().expect("flush");
        };
        log("before the disk filled");
        available.store(10 << 20, Ordering::Relaxed);
        let mut during = 0;
        wait_for(Duration::from_secs(5), "the low-disk warning", || {
            during += 1;
            log(&format!("while the disk is full {during}"));
            captured(&console).contains("file logging pauses")
        });
        for extra in 0..50 {
            log(&format!("still full {extra}"));
        }
        available.store(500 << 30, Ordering::Relaxed);
        wait_for(Duration::from_secs(5), "file logging to resume", || {
            log("after the disk was freed");
            read(&active).contains("file logging resumed")
        });
        let console = captured(&console);
        assert_eq!(
            console.matches("file logging pauses").count(),
            1,
            "{console}"
        );
        assert!(console.contains("WARN"), "{console}");
        assert!(console.contains("file logging resumed"), "{console}");
        let file = read(&active);
        assert!(file.contains("before the disk filled"), "{file}");
        assert!(!file.contains("still full"), "{file}");
        assert!(file.contains("after the disk was freed"), "{file}");
        let resumed = file
            .lines()
            .find(|line| line.contains("file logging resumed"))
            .expect("resume line");
        assert!(
            !resumed.contains("; 0 lines"),
            "it counts what was skipped: {resumed}"
        );
    }

    /// Proves the level changes at runtime through the handle, and that a
    /// bad directive is refused without changing the level.
    #[test]
    fn level_changes_at_runtime() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (handle, dispatch) = build(
            &config(dir.path(), "info"),
            setup(ConsoleSink::Discard, ConsoleStyle::Plain),
        )
        .expect("build");
        let active = dir.path().join(ACTIVE_NAME);
        tracing::dispatcher::with_default(&dispatch, || tracing::debug!("hidden at info"));
        handle.set_level("debug").expect("set level");
        assert_eq!(handle.current_level(), "debug");
        tracing::dispatcher::with_default(&dispatch, || tracing::debug!("shown at debug"));
        handle.flush().expect("flush");
        let file = read(&active);
        assert!(!file.contains("hidden at info"), "{file}");
        assert!(file.contains("shown at debug"), "{file}");
        let error = handle.set_level("iggyd=notalevel").expect_err("bad level");
        assert!(error.is_config(), "{error}");
        assert_eq!(handle.current_level(), "debug");
    }

    /// Proves the journal rendering end to end through the layer: `<N>`
    /// priority per level, span fields (shard, pu) and event fields
    /// (stream, topic, partition) as `key=value`, and no escape byte in the
    /// console or the file even when a message carries one.
    #[test]
    fn journal_console_has_priorities_and_fields_and_no_ansi() {
        let dir = tempfile::tempdir().expect("temp dir");
        let console = Arc::new(Mutex::new(Vec::new()));
        let (handle, dispatch) = build(
            &config(dir.path(), "trace"),
            setup(ConsoleSink::Capture(console.clone()), ConsoleStyle::Journal),
        )
        .expect("build");
        std::thread::Builder::new()
            .name("shard-2".into())
            .spawn(move || {
                tracing::dispatcher::with_default(&dispatch, || {
                    let span = tracing::info_span!("shard", shard = 2, pu = 5);
                    let _entered = span.enter();
                    tracing::error!(
                        stream = "orders",
                        topic = "eu",
                        partition = 7,
                        "fsync failed"
                    );
                    tracing::warn!("slow \x1b[31mred\x1b[0m disk\nsecond line");
                    tracing::info!("ready");
                    tracing::debug!("detail");
                    tracing::trace!("noise");
                });
            })
            .expect("spawn")
            .join()
            .expect("join");
        handle.flush().expect("flush");
        let console = captured(&console);
        let lines: Vec<&str> = console.lines().collect();
        assert_eq!(lines.len(), 5, "{console}");
        assert_eq!(
            lines[0],
            "<3>fsync failed stream=orders topic=eu partition=7 shard=2 pu=5 thread=shard-2"
        );
        assert!(
            lines[1].starts_with("<4>slow \\u{1b}[31mred"),
            "{}",
            lines[1]
        );
        assert!(lines[1].contains("\\nsecond line"), "{}", lines[1]);
        assert!(
            lines[2].starts_with("<6>ready shard=2 pu=5"),
            "{}",
            lines[2]
        );
        assert!(lines[3].starts_with("<7>detail"), "{}", lines[3]);
        assert!(lines[4].starts_with("<7>noise"), "{}", lines[4]);
        assert!(!console.contains('\x1b'), "{console:?}");
        let file = read(&dir.path().join(ACTIVE_NAME));
        assert_eq!(file.lines().count(), 5, "{file}");
        assert!(!file.contains('\x1b'), "{file:?}");
        assert!(file.contains(" ERROR "), "{file}");
        assert!(file.contains("fsync failed stream=orders topic=eu partition=7 shard=2 pu=5"));
    }

    /// Proves a full queue never blocks the logging thread: with the writer
    /// held off the directory, lines beyond the queue depth are dropped and
    /// the writer then writes one `N log lines dropped` line, and nothing is
    /// lost from the count.
    #[test]
    fn a_full_queue_drops_lines_and_reports_the_count() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut setup = setup(ConsoleSink::Discard, ConsoleStyle::Plain);
        setup.queue_depth = 8;
        let (handle, dispatch) = build(&config(dir.path(), "info"), setup).expect("build");
        let started = Instant::now();
        handle.with_dir_locked(|_| {
            tracing::dispatcher::with_default(&dispatch, || {
                for line in 0..100 {
                    tracing::info!("line {line}");
                }
            });
        });
        assert!(started.elapsed() < Duration::from_secs(1), "never blocked");
        handle.flush().expect("flush");
        let file = read(&dir.path().join(ACTIVE_NAME));
        let written = file.lines().filter(|line| line.contains(": line ")).count();
        let note = file
            .lines()
            .find(|line| line.contains("log lines dropped"))
            .expect("the drop note");
        let dropped: usize = note
            .split(": ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|count| count.parse().ok())
            .expect("a count");
        assert_eq!(file.matches("log lines dropped").count(), 1, "{file}");
        assert_eq!(written + dropped, 100, "{file}");
        assert!(dropped >= 100 - 8 - 1, "{file}");
    }

    /// Proves `update_limits` applies new caps at once and reports a changed
    /// directory as needing a restart; and that a second logger on the same
    /// directory is refused as a configuration error.
    #[test]
    fn limits_reload_live_and_a_directory_is_not_shared() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut config = config(dir.path(), "info");
        let (handle, dispatch) =
            build(&config, setup(ConsoleSink::Discard, ConsoleStyle::Plain)).expect("build");
        tracing::dispatcher::with_default(&dispatch, || {
            for line in 0..2000 {
                tracing::info!("filler line {line} with some padding to make it longer");
            }
        });
        handle.flush().expect("flush");
        assert!(handle.dir_size_bytes() > 64 * KIB);
        config.max_file_size_bytes = 16 * KIB;
        config.max_total_size_bytes = 64 * KIB;
        assert_eq!(
            handle.update_limits(&config).expect("update"),
            LimitsUpdate::Applied
        );
        let (largest, total, _) = measure(dir.path()).expect("measure");
        assert!(total <= 64 * KIB, "{total}");
        assert!(largest <= 64 * KIB, "{largest}");
        assert!(handle.dir_size_bytes() <= 64 * KIB);
        tracing::dispatcher::with_default(&dispatch, || {
            for line in 0..500 {
                tracing::info!("more line {line}");
            }
        });
        handle.flush().expect("flush");
        let (largest, total, _) = measure(dir.path()).expect("measure");
        assert!(
            largest <= 16 * KIB && total <= 64 * KIB,
            "{largest} {total}"
        );

        let mut moved = config.clone();
        moved.dir = dir.path().join("elsewhere");
        let update = handle.update_limits(&moved).expect("update");
        assert!(matches!(
            update,
            LimitsUpdate::NeedsRestart {
                key: "logging.dir",
                ..
            }
        ));
        assert!(update.to_string().contains("needs a restart"));

        let second = build(&config, setup(ConsoleSink::Discard, ConsoleStyle::Plain));
        let error = second.expect_err("refused");
        assert!(matches!(error, LoggingError::DirInUse { .. }), "{error}");
        assert!(error.is_config());
    }
}
