//! `TestDaemon`: spawns `iggyd` with a temp data directory, `--listen
//! 127.0.0.1:0` and `NOTIFY_SOCKET` bound to a datagram socket this harness
//! owns. Ready means `READY=1` arrived and `STATUS=` named the bound address:
//! no sleeps anywhere. On failure the command, the data directory listing and
//! the daemon log are printed; at teardown, ERROR or panic lines the test did
//! not allow fail the test.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Generous: debug builds on a loaded 2-core CI machine.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

pub fn iggyd() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_iggyd"));
    // Hermetic: nothing from the developer's environment leaks in.
    for (key, _) in std::env::vars() {
        if key.starts_with("IGGYD_")
            || key.starts_with("IGGY_ROOT_")
            || key.starts_with("HWLOC_")
            || key == "NOTIFY_SOCKET"
            || key == "WATCHDOG_USEC"
            || key == "JOURNAL_STREAM"
        {
            command.env_remove(key);
        }
    }
    command
}

/// Output of a short-lived `iggyd` command (plan, config, a failed start).
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

pub fn run(command: &mut Command) -> Output {
    let output = command.stdin(Stdio::null()).output().expect("run iggyd");
    Output {
        status: output.status,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

pub struct TestDaemon {
    pub dir: tempfile::TempDir,
    pub address: SocketAddr,
    pub notifications: Vec<String>,
    /// Time from spawn to `READY=1`.
    pub startup: Duration,
    child: Option<Child>,
    pid: i32,
    notify: UnixDatagram,
    command_line: String,
    allowed_log_lines: Vec<String>,
}

pub struct Builder {
    listen: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
    dir: Option<tempfile::TempDir>,
    nofile_soft_limit: Option<u64>,
}

impl Builder {
    pub fn arg(mut self, arg: &str) -> Self {
        self.args.push(arg.to_string());
        self
    }
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }
    /// Listen on a given address instead of a free port (restart tests).
    pub fn listen(mut self, address: &str) -> Self {
        self.listen = address.to_string();
        self
    }
    /// Start iggyd with this soft RLIMIT_NOFILE (the hard limit is kept),
    /// as a shell with a low `ulimit -n` would.
    pub fn nofile_soft_limit(mut self, soft: u64) -> Self {
        self.nofile_soft_limit = Some(soft);
        self
    }
    /// Reuse a data directory (restart tests).
    pub fn dir(mut self, dir: tempfile::TempDir) -> Self {
        self.dir = Some(dir);
        self
    }

    pub fn spawn(self) -> TestDaemon {
        let dir = self
            .dir
            .unwrap_or_else(|| tempfile::tempdir().expect("temp dir"));
        let notify_path = dir.path().join("notify.sock");
        let _ = std::fs::remove_file(&notify_path);
        let notify = UnixDatagram::bind(&notify_path).expect("bind notify socket");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.path().join("daemon.log"))
            .expect("daemon log");
        let mut command = iggyd();
        command
            .arg("--listen")
            .arg(&self.listen)
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(&self.args)
            .env("NOTIFY_SOCKET", &notify_path)
            .env("IGGYD_LOGGING__LEVEL", "debug")
            .envs(self.env.iter().map(|(key, value)| (key, value)))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log fd"))
            .stderr(log);
        if let Some(soft) = self.nofile_soft_limit {
            use nix::sys::resource::{Resource, getrlimit, setrlimit};
            use std::os::unix::process::CommandExt;
            let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
            let soft = soft.min(hard);
            // SAFETY: the closure runs in the forked child before exec and
            // only calls setrlimit(2), which is async-signal-safe.
            unsafe {
                command.pre_exec(move || {
                    setrlimit(Resource::RLIMIT_NOFILE, soft, hard).map_err(std::io::Error::from)
                });
            }
        }
        let command_line = format!("{command:?}");
        let spawned_at = Instant::now();
        let child = command.spawn().expect("spawn iggyd");
        let pid = child.id() as i32;
        let mut daemon = TestDaemon {
            dir,
            address: "0.0.0.0:0".parse().unwrap(),
            notifications: Vec::new(),
            startup: Duration::ZERO,
            child: Some(child),
            pid,
            notify,
            command_line,
            allowed_log_lines: Vec::new(),
        };
        daemon.wait_ready(spawned_at);
        daemon
    }
}

impl TestDaemon {
    pub fn builder() -> Builder {
        Builder {
            listen: "127.0.0.1:0".to_string(),
            args: Vec::new(),
            env: Vec::new(),
            dir: None,
            nofile_soft_limit: None,
        }
    }

    pub fn start() -> TestDaemon {
        TestDaemon::builder().spawn()
    }

    /// Take the temp directory (to restart a daemon on it); this handle
    /// keeps an empty one.
    pub fn take_dir(&mut self) -> tempfile::TempDir {
        std::mem::replace(&mut self.dir, tempfile::tempdir().expect("temp dir"))
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("daemon.log")).unwrap_or_default()
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Let a log line containing `needle` pass the teardown gate.
    pub fn allow_log(&mut self, needle: &str) {
        self.allowed_log_lines.push(needle.to_string());
    }

    /// Receive the next notification datagram (each may hold several lines).
    pub fn next_notification(&mut self, timeout: Duration) -> Option<String> {
        self.notify
            .set_read_timeout(Some(timeout))
            .expect("timeout");
        let mut buffer = vec![0u8; 4096];
        match self.notify.recv(&mut buffer) {
            Ok(length) => {
                let text = String::from_utf8_lossy(&buffer[..length]).into_owned();
                self.notifications.push(text.clone());
                Some(text)
            }
            Err(_) => None,
        }
    }

    /// Wait until a notification contains `needle`, or panic with context.
    pub fn wait_notification(&mut self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                self.fail(&format!(
                    "no notification containing {needle:?} within {timeout:?}"
                ));
            }
            if let Some(message) = self.next_notification(left) {
                if message.contains(needle) {
                    return message;
                }
            } else if let Some(status) = self.try_exit_status() {
                self.fail(&format!(
                    "iggyd exited with {status} before sending {needle:?}"
                ));
            }
        }
    }

    fn wait_ready(&mut self, spawned_at: Instant) {
        let message = self.wait_notification("READY=1", START_TIMEOUT);
        self.startup = spawned_at.elapsed();
        let status = message
            .lines()
            .find_map(|line| line.strip_prefix("STATUS="))
            .unwrap_or_else(|| self.fail("READY=1 came without STATUS="))
            .to_string();
        let address = status.strip_prefix("serving on ").and_then(|rest| {
            rest.split(':')
                .take(2)
                .collect::<Vec<_>>()
                .join(":")
                .parse()
                .ok()
        });
        match address {
            Some(address) => self.address = address,
            None => self.fail(&format!(
                "STATUS= does not name the bound address: {status:?}"
            )),
        }
    }

    fn try_exit_status(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|child| child.try_wait().ok().flatten())
    }

    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), signal).expect("signal");
    }

    /// Wait for the process to exit (a helper thread blocks in wait(2)).
    pub fn wait_exit(&mut self, timeout: Duration) -> (ExitStatus, Duration) {
        let mut child = self.child.take().expect("daemon already reaped");
        let started = Instant::now();
        let (sender, receiver) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let status = child.wait();
            let _ = sender.send(status);
            child
        });
        match receiver.recv_timeout(timeout) {
            Ok(status) => {
                let _ = waiter.join();
                (status.expect("wait"), started.elapsed())
            }
            Err(_) => {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(self.pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
                self.fail(&format!("iggyd did not exit within {timeout:?}"))
            }
        }
    }

    /// SIGTERM, then wait for a clean exit.
    pub fn stop(&mut self) -> (ExitStatus, Duration) {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        self.wait_exit(Duration::from_secs(10))
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

    pub fn fail(&self, why: &str) -> ! {
        let listing = list_dir(self.dir.path());
        panic!(
            "{why}\n--- command\n{}\n--- notifications\n{:?}\n--- files\n{listing}\n--- daemon log\n{}",
            self.command_line,
            self.notifications,
            self.log()
        );
    }
}

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
    }
}
