//! `TestDaemon`: the real `iggyd` binary on a temp data directory and
//! `--listen 127.0.0.1:0`, with `NOTIFY_SOCKET` bound to a datagram socket
//! this kit owns. Ready means `READY=1` arrived and `STATUS=serving on ADDR…`
//! named the bound address: no sleeps anywhere. Every command it builds has
//! the environment the daemon reads scrubbed first, so nothing from the
//! developer's shell leaks in. On failure the command, the notifications, the
//! data directory listing and the daemon log are printed; at teardown, ERROR
//! or panic lines the test did not allow fail the test.
//!
//! It owns the child process: dropping a `TestDaemon` kills it (SIGKILL) and
//! removes the directory unless `keep_dir` was called. It does not speak the
//! Iggy protocol (see `wire`). With `fd_store`, it also plays systemd's file
//! descriptor store (`fdstore`): what the daemon stores is passed back to
//! the next start on the same handle.

use std::net::SocketAddr;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Generous: debug builds on a loaded 2-core CI machine.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `stop` and `kill` wait for the process to exit.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(15);
/// Lines of the daemon log a failure report shows (the end of the log).
const REPORT_LOG_LINES: usize = 400;

/// Environment the daemon reads (configuration keys, root credentials,
/// topology fakes, systemd's variables, the driver switch): removed from
/// every command this kit builds. Prefixes compare case-insensitively, as
/// the daemon's own `IGGYD_` prefix does.
const SCRUBBED_PREFIXES: &[&str] = &["IGGYD_", "IGGY_", "HWLOC_"];
const SCRUBBED_NAMES: &[&str] = &[
    "NOTIFY_SOCKET",
    "WATCHDOG_USEC",
    "WATCHDOG_PID",
    "JOURNAL_STREAM",
    "LISTEN_FDS",
    "LISTEN_PID",
    "LISTEN_FDNAMES",
    "MONOIO_FORCE_LEGACY_DRIVER",
];

/// `target/<profile>/iggyd` of this build, found from the test executable
/// (`target/<profile>/deps/<test>-<hash>`), or `IGGYD_BIN` when set.
/// `cargo nextest run --workspace` (and `cargo test --workspace`) build every
/// workspace binary before running tests; running one other package alone
/// needs `cargo build -p iggyd` first, which the error says.
pub fn iggyd_binary() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("IGGYD_BIN") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().map_err(|error| format!("current executable: {error}"))?;
    let binary = exe
        .parent()
        .and_then(Path::parent)
        .map(|profile_dir| profile_dir.join("iggyd"))
        .ok_or_else(|| format!("{} is not in target/<profile>/deps/", exe.display()))?;
    if binary.is_file() {
        Ok(binary)
    } else {
        Err(format!(
            "{} is missing: build the daemon first (`cargo build -p iggyd`); \
             `cargo nextest run --workspace` builds it before running tests",
            binary.display()
        ))
    }
}

/// A command for `binary` with the daemon's environment scrubbed.
pub fn scrubbed_command(binary: &Path) -> Command {
    let mut command = Command::new(binary);
    for (key, _) in std::env::vars_os() {
        let Some(name) = key.to_str() else { continue };
        let upper = name.to_ascii_uppercase();
        if SCRUBBED_PREFIXES
            .iter()
            .any(|prefix| upper.starts_with(prefix))
            || SCRUBBED_NAMES.contains(&name)
        {
            command.env_remove(&key);
        }
    }
    command
}

/// `iggyd` of this build with a scrubbed environment, for short-lived runs
/// (`plan`, `config`, a start that must fail). Panics if it is not built.
pub fn iggyd_command() -> Command {
    let binary = iggyd_binary().unwrap_or_else(|why| panic!("{why}"));
    scrubbed_command(&binary)
}

/// Output of a short-lived `iggyd` command.
#[derive(Debug)]
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }
}

/// Runs `command` to completion with stdin closed.
pub fn run(command: &mut Command) -> Output {
    let output = command.stdin(Stdio::null()).output().expect("run iggyd");
    Output {
        status: output.status,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// A memory field of `/proc/PID/status` (`VmRSS`, `VmSize`, …) in KiB;
/// `None` when the process or the field is gone.
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
}

/// How a daemon is started; kept by the `TestDaemon` so that `restart`
/// starts the same one again on the same directory.
#[derive(Debug, Clone)]
struct Launch {
    binary: Option<PathBuf>,
    listen: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
    nofile_soft_limit: Option<u64>,
    nofile_hard_limit: Option<u64>,
    log_level: Option<String>,
    start_timeout: Duration,
    /// Start through `/bin/sh` so that `LISTEN_PID` names the daemon.
    listen_pid: bool,
    /// `Some(max)`: play a file descriptor store keeping `max` descriptors.
    fd_store: Option<usize>,
    /// A network namespace (its file, `/run/netns/<name>`) to run in.
    netns: Option<PathBuf>,
}

/// Options of a daemon to start; `TestDaemon::builder()` makes one.
#[derive(Debug)]
pub struct Builder {
    launch: Launch,
    dir: Option<tempfile::TempDir>,
    parent: Option<PathBuf>,
    store: Option<crate::fdstore::FdStore>,
}

impl Builder {
    /// Run this binary instead of `iggyd_binary()`.
    pub fn binary(mut self, binary: impl Into<PathBuf>) -> Self {
        self.launch.binary = Some(binary.into());
        self
    }
    pub fn arg(mut self, arg: &str) -> Self {
        self.launch.args.push(arg.to_string());
        self
    }
    /// An environment variable for the daemon (set after the scrub).
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.launch.env.push((key.to_string(), value.to_string()));
        self
    }
    /// Listen on a given address instead of a free port (restart tests).
    pub fn listen(mut self, address: &str) -> Self {
        self.launch.listen = address.to_string();
        self
    }
    /// Start iggyd with this soft RLIMIT_NOFILE (the hard limit is kept),
    /// as a shell with a low `ulimit -n` would.
    pub fn nofile_soft_limit(mut self, soft: u64) -> Self {
        self.launch.nofile_soft_limit = Some(soft);
        self
    }
    /// Start iggyd with this hard (and soft) RLIMIT_NOFILE, as
    /// `prlimit --nofile=N` or systemd's `LimitNOFILE=N` would: the daemon
    /// cannot raise it.
    pub fn nofile_hard_limit(mut self, hard: u64) -> Self {
        self.launch.nofile_hard_limit = Some(hard);
        self
    }
    /// The daemon's log level (`debug` unless told; `None` leaves the
    /// daemon's default, for measurements).
    pub fn log_level(mut self, level: Option<&str>) -> Self {
        self.launch.log_level = level.map(str::to_string);
        self
    }
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.launch.start_timeout = timeout;
        self
    }
    /// Set `LISTEN_PID` to the daemon's pid (for tests of `LISTEN_FDS`
    /// given through `env`).
    pub fn listen_pid(mut self) -> Self {
        self.launch.listen_pid = true;
        self
    }
    /// Play systemd's file descriptor store: `FDSTORE=max` in the
    /// environment, what the daemon stores kept, and passed back to every
    /// later start of this handle (`restart`).
    pub fn fd_store(mut self, max: usize) -> Self {
        self.launch.fd_store = Some(max);
        self.launch
            .env
            .push(("FDSTORE".to_string(), max.to_string()));
        self
    }
    /// Like `fd_store`, with descriptors already in the store for the first
    /// start (as a previous run would have left them).
    pub fn fd_store_with(mut self, store: crate::fdstore::FdStore) -> Self {
        self = self.fd_store(store.max());
        self.store = Some(store);
        self
    }
    /// Reuse a directory (restart tests); `data/` inside it is the data
    /// directory.
    pub fn dir(mut self, dir: tempfile::TempDir) -> Self {
        self.dir = Some(dir);
        self
    }
    /// Run the daemon in the network namespace `/run/netns/<name>` (made
    /// by the test with `ip netns add`): it joins it before exec, so its
    /// pid, signals and notifications are as without one.
    pub fn netns(mut self, name: &str) -> Self {
        self.launch.netns = Some(Path::new("/run/netns").join(name));
        self
    }
    /// Create the temp directory under `parent` instead of the system's.
    pub fn parent_dir(mut self, parent: &Path) -> Self {
        self.parent = Some(parent.to_path_buf());
        self
    }

    /// Start and wait for readiness; panics with the failure report.
    pub fn spawn(self) -> TestDaemon {
        self.try_spawn().unwrap_or_else(|report| panic!("{report}"))
    }

    /// Start and wait for readiness; `Err` carries the failure report.
    pub fn try_spawn(self) -> Result<TestDaemon, String> {
        let dir = match (self.dir, &self.parent) {
            (Some(dir), _) => dir,
            (None, Some(parent)) => tempfile::Builder::new()
                .prefix("iggyd-")
                .tempdir_in(parent)
                .map_err(|error| format!("temp dir in {}: {error}", parent.display()))?,
            (None, None) => tempfile::tempdir().map_err(|error| format!("temp dir: {error}"))?,
        };
        let notify_path = dir.path().join("notify.sock");
        let notify = UnixDatagram::unbound().map_err(|error| error.to_string())?;
        let store = match (self.store, self.launch.fd_store) {
            (Some(store), _) => Some(store),
            (None, Some(max)) => Some(crate::fdstore::FdStore::new(max)),
            (None, None) => None,
        };
        let mut daemon = TestDaemon {
            dir,
            address: SocketAddr::from(([0, 0, 0, 0], 0)),
            notifications: Vec::new(),
            status: String::new(),
            startup: Duration::ZERO,
            child: None,
            pid: 0,
            notify,
            notify_path,
            command_line: String::new(),
            allowed_log_lines: Vec::new(),
            launch: self.launch,
            keep_dir: false,
            store,
        };
        daemon.launch()?;
        Ok(daemon)
    }
}

/// A running `iggyd` owned by a test (or a benchmark).
#[derive(Debug)]
pub struct TestDaemon {
    pub dir: tempfile::TempDir,
    /// The bound address, from `STATUS=` at readiness.
    pub address: SocketAddr,
    /// Every notification datagram received so far.
    pub notifications: Vec<String>,
    /// The `STATUS=` text at readiness, after `serving on ` (address,
    /// shards, cores, driver).
    pub status: String,
    /// Time from spawn to `READY=1`.
    pub startup: Duration,
    child: Option<Child>,
    pid: i32,
    notify: UnixDatagram,
    notify_path: PathBuf,
    command_line: String,
    allowed_log_lines: Vec<String>,
    launch: Launch,
    keep_dir: bool,
    /// The file descriptor store this kit plays (`Builder::fd_store`).
    store: Option<crate::fdstore::FdStore>,
}

impl TestDaemon {
    pub fn builder() -> Builder {
        Builder {
            launch: Launch {
                binary: None,
                listen: "127.0.0.1:0".to_string(),
                args: Vec::new(),
                env: Vec::new(),
                nofile_soft_limit: None,
                nofile_hard_limit: None,
                log_level: Some("debug".to_string()),
                start_timeout: START_TIMEOUT,
                listen_pid: false,
                fd_store: None,
                netns: None,
            },
            dir: None,
            parent: None,
            store: None,
        }
    }

    /// A daemon with default options, ready.
    pub fn start() -> TestDaemon {
        TestDaemon::builder().spawn()
    }

    /// Spawn the process on `self.dir` and wait for readiness.
    fn launch(&mut self) -> Result<(), String> {
        let binary = match &self.launch.binary {
            Some(binary) => binary.clone(),
            None => iggyd_binary()?,
        };
        let _ = std::fs::remove_file(&self.notify_path);
        self.notify = UnixDatagram::bind(&self.notify_path)
            .map_err(|error| format!("binding {}: {error}", self.notify_path.display()))?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(|error| format!("daemon log: {error}"))?;
        let stderr = log
            .try_clone()
            .map_err(|error| format!("daemon log: {error}"))?;
        let passing = self.store.as_ref().is_some_and(|store| !store.is_empty());
        let mut command = if self.launch.listen_pid || passing {
            let mut command = scrubbed_command(Path::new("/bin/sh"));
            command
                .arg("-c")
                .arg(crate::fdstore::LISTEN_PID_WRAPPER)
                .arg(&binary);
            command
        } else {
            scrubbed_command(&binary)
        };
        command
            .arg("--listen")
            .arg(&self.launch.listen)
            .arg("--data-dir")
            .arg(self.data_dir())
            .args(&self.launch.args)
            .env("NOTIFY_SOCKET", &self.notify_path);
        if let Some(level) = &self.launch.log_level {
            command.env("IGGYD_LOGGING__LEVEL", level);
        }
        command
            .envs(self.launch.env.iter().map(|(key, value)| (key, value)))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(stderr);
        if self.launch.nofile_soft_limit.is_some() || self.launch.nofile_hard_limit.is_some() {
            use nix::sys::resource::{Resource, getrlimit, setrlimit};
            use std::os::unix::process::CommandExt;
            let (_, current_hard) = getrlimit(Resource::RLIMIT_NOFILE)
                .map_err(|error| format!("getrlimit: {error}"))?;
            let hard = self
                .launch
                .nofile_hard_limit
                .unwrap_or(current_hard)
                .min(current_hard);
            let soft = self.launch.nofile_soft_limit.unwrap_or(hard).min(hard);
            // SAFETY: the closure runs in the forked child before exec and
            // only calls setrlimit(2), which is async-signal-safe.
            unsafe {
                command.pre_exec(move || {
                    setrlimit(Resource::RLIMIT_NOFILE, soft, hard).map_err(std::io::Error::from)
                });
            }
        }
        // Kept open until the child is spawned.
        let netns = match &self.launch.netns {
            Some(path) => Some(
                std::fs::File::open(path)
                    .map_err(|error| format!("network namespace {}: {error}", path.display()))?,
            ),
            None => None,
        };
        if let Some(netns) = &netns {
            use std::os::fd::AsRawFd;
            use std::os::unix::process::CommandExt;
            let fd = netns.as_raw_fd();
            // SAFETY: the closure runs in the forked child before exec and
            // only calls setns(2), which is async-signal-safe; the file it
            // names stays open in the parent until the child is spawned.
            unsafe {
                command.pre_exec(move || {
                    let fd = std::os::fd::BorrowedFd::borrow_raw(fd);
                    nix::sched::setns(fd, nix::sched::CloneFlags::CLONE_NEWNET)
                        .map_err(std::io::Error::from)
                });
            }
        }
        let passed = match &self.store {
            Some(store) if passing => store
                .pass_to(&mut command)
                .map_err(|error| format!("passing the stored descriptors: {error}"))?,
            _ => Vec::new(),
        };
        self.command_line = format!("{command:?}");
        let spawned_at = Instant::now();
        let child = command
            .spawn()
            .map_err(|error| self.report(&format!("spawning {}: {error}", binary.display())))?;
        drop(passed);
        drop(netns);
        self.pid = i32::try_from(child.id()).unwrap_or(i32::MAX);
        self.child = Some(child);
        let message = self.wait_for("READY=1", self.launch.start_timeout)?;
        self.startup = spawned_at.elapsed();
        let status = message
            .lines()
            .find_map(|line| line.strip_prefix("STATUS="))
            .or_else(|| {
                self.notifications
                    .iter()
                    .rev()
                    .flat_map(|text| text.lines())
                    .find_map(|line| line.strip_prefix("STATUS="))
            })
            .unwrap_or_default()
            .to_string();
        let rest = status.strip_prefix("serving on ").unwrap_or_default();
        let address = rest.split_once(": ").map_or(rest, |(address, _)| address);
        match address.parse() {
            Ok(address) => {
                self.address = address;
                self.status = rest.to_string();
                Ok(())
            }
            Err(_) => Err(self.report(&format!(
                "READY=1 came without a STATUS= naming the bound address: {status:?}"
            ))),
        }
    }

    /// Start again on the same data directory with the same options (after
    /// `stop` or `kill`); the address may change unless `listen` fixed it.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "restart: the daemon is still running");
        if let Err(report) = self.launch() {
            panic!("{report}");
        }
    }

    /// Take the temp directory (to restart a daemon on it with other
    /// options); this handle keeps an empty one.
    pub fn take_dir(&mut self) -> tempfile::TempDir {
        std::mem::replace(&mut self.dir, tempfile::tempdir().expect("temp dir"))
    }

    /// Keep the directory (data and log) when this handle is dropped.
    pub fn keep_dir(&mut self) {
        self.keep_dir = true;
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("daemon.log")
    }

    /// Everything the daemon wrote to stdout and stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The file descriptor store this kit plays, if any.
    pub fn fd_store(&self) -> Option<&crate::fdstore::FdStore> {
        self.store.as_ref()
    }

    pub fn fd_store_mut(&mut self) -> Option<&mut crate::fdstore::FdStore> {
        self.store.as_mut()
    }

    /// Let a log line containing `needle` pass the teardown gate.
    pub fn allow_log(&mut self, needle: &str) {
        self.allowed_log_lines.push(needle.to_string());
    }

    /// Receive the next notification datagram (each may hold several lines).
    pub fn next_notification(&mut self, timeout: Duration) -> Option<String> {
        // A zero timeout would mean "block forever" to the socket.
        let timeout = timeout.max(Duration::from_millis(1));
        self.notify.set_read_timeout(Some(timeout)).ok()?;
        // With the descriptors it carries (a store keeps them; otherwise
        // they are closed here).
        let (text, fds) = crate::fdstore::receive(&self.notify).ok()?;
        if let Some(store) = &mut self.store {
            store.receive(&text, fds);
        }
        self.notifications.push(text.clone());
        Some(text)
    }

    /// Wait until a notification contains `needle`, or fail with the report.
    pub fn wait_notification(&mut self, needle: &str, timeout: Duration) -> String {
        self.wait_for(needle, timeout)
            .unwrap_or_else(|report| panic!("{report}"))
    }

    fn wait_for(&mut self, needle: &str, timeout: Duration) -> Result<String, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.report(&format!(
                    "no notification containing {needle:?} within {timeout:?}"
                )));
            }
            // Wake at least twice a second to notice an early exit.
            match self.next_notification(left.min(Duration::from_millis(500))) {
                Some(message) if message.contains(needle) => return Ok(message),
                Some(_) => {}
                None => {
                    if let Some(status) = self.try_exit_status() {
                        return Err(self.report(&format!(
                            "iggyd exited with {status} before sending {needle:?}"
                        )));
                    }
                }
            }
        }
    }

    fn try_exit_status(&mut self) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        let status = child.try_wait().ok().flatten()?;
        self.child = None;
        Some(status)
    }

    pub fn signal(&self, signal: Signal) {
        kill(Pid::from_raw(self.pid), signal).expect("signal iggyd");
    }

    /// Wait (bounded) for the process to exit; a helper thread blocks in
    /// wait(2). On timeout the process is SIGKILLed and `Err` says so.
    fn reap(&mut self, timeout: Duration) -> Result<(ExitStatus, Duration), String> {
        let started = Instant::now();
        let mut child = self
            .child
            .take()
            .ok_or_else(|| "iggyd is not running (already reaped)".to_string())?;
        let (sender, receiver) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let status = child.wait();
            let _ = sender.send(status);
        });
        match receiver.recv_timeout(timeout) {
            Ok(status) => {
                let _ = waiter.join();
                let status = status.map_err(|error| format!("wait: {error}"))?;
                Ok((status, started.elapsed()))
            }
            Err(_) => {
                let _ = kill(Pid::from_raw(self.pid), Signal::SIGKILL);
                let _ = waiter.join();
                Err(format!("iggyd did not exit within {timeout:?}"))
            }
        }
    }

    /// Wait for the process to exit, or fail with the report.
    pub fn wait_exit(&mut self, timeout: Duration) -> (ExitStatus, Duration) {
        self.reap(timeout).unwrap_or_else(|why| self.fail(&why))
    }

    /// SIGTERM, then wait for the exit: its status and how long it took.
    pub fn stop(&mut self) -> (ExitStatus, Duration) {
        self.signal(Signal::SIGTERM);
        self.wait_exit(STOP_TIMEOUT)
    }

    /// SIGKILL: the crash the storage contract is about.
    pub fn kill(&mut self) {
        self.signal(Signal::SIGKILL);
        self.wait_exit(STOP_TIMEOUT);
    }

    /// SIGTERM and wait up to `timeout` (then SIGKILL), without panicking:
    /// for tools. A daemon that already exited reports its status.
    pub fn terminate(&mut self, timeout: Duration) -> Result<ExitStatus, String> {
        if let Some(status) = self.try_exit_status() {
            return Ok(status);
        }
        if self.child.is_none() {
            return Err("iggyd is not running".to_string());
        }
        let _ = kill(Pid::from_raw(self.pid), Signal::SIGTERM);
        self.reap(timeout).map(|(status, _)| status)
    }

    /// Fail on ERROR/panic lines the test did not allow.
    pub fn assert_clean_log(&self) {
        let log = self.log();
        let bad: Vec<&str> = log
            .lines()
            .filter(|line| line.contains("ERROR") || line.contains("panicked"))
            .filter(|line| {
                !self
                    .allowed_log_lines
                    .iter()
                    .any(|allowed| line.contains(allowed))
            })
            .collect();
        if !bad.is_empty() {
            self.fail(&format!(
                "unexpected error lines in the daemon log:\n{}",
                bad.join("\n")
            ));
        }
    }

    /// Panic with `why` and the failure report.
    pub fn fail(&self, why: &str) -> ! {
        panic!("{}", self.report(why));
    }

    /// `why`, then the command, the notifications, the files under the
    /// directory and the end of the daemon log.
    pub fn report(&self, why: &str) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        let shown = &lines[lines.len().saturating_sub(REPORT_LOG_LINES)..];
        format!(
            "{why}\n--- command\n{}\n--- notifications\n{:?}\n--- files\n{}--- daemon log ({} of {} lines)\n{}",
            self.command_line,
            self.notifications,
            list_dir(self.dir.path()),
            shown.len(),
            lines.len(),
            shown.join("\n")
        )
    }
}

/// Every path under `path` with its size, one a line.
fn list_dir(path: &Path) -> String {
    let mut out = String::new();
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let size = entry.metadata().map(|meta| meta.len()).unwrap_or(0);
            out.push_str(&format!("{} {size}\n", path.display()));
            if path.is_dir() {
                stack.push(path);
            }
        }
    }
    out
}

impl Drop for TestDaemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // `IGGYD_TEST_KEEP` keeps every test daemon's directory, to look
        // into a failed run.
        if (self.keep_dir || std::env::var_os("IGGYD_TEST_KEEP").is_some())
            && let Ok(empty) = tempfile::tempdir()
        {
            let _ = std::mem::replace(&mut self.dir, empty).keep();
        }
    }
}
