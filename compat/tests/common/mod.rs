//! The compat suites' `TestDaemon`: the same contract as the daemon's own
//! harness (`daemon/tests/e2e/harness/`), for a package that is not `iggyd`.
//! It spawns the real `target/<profile>/iggyd` with a temp data directory,
//! `--listen 127.0.0.1:0` and `NOTIFY_SOCKET` bound to a datagram socket it
//! owns; ready means `READY=1` arrived with `STATUS=serving on ADDR…`. No
//! sleeps. It adds what the SDK scenarios need on top: restart on the same
//! directory after SIGTERM or SIGKILL, and SDK clients logged in as root.
//!
//! The binary: `CARGO_BIN_EXE_iggyd` exists only for the daemon package's own
//! tests, so this harness finds `iggyd` next to the test executable's
//! `deps/` directory. `cargo nextest run --workspace` (and `cargo test
//! --workspace`) build every workspace binary before running tests; running
//! only this package (`-p iggyd-compat`) needs `cargo build -p iggyd` first,
//! and a missing binary fails the test with that instruction.

#![allow(dead_code)]

use iggy::prelude::*;
use std::net::SocketAddr;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Generous: debug builds on a loaded 2-core CI machine.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);
pub const ROOT_USERNAME: &str = "iggy";
pub const ROOT_PASSWORD: &str = "iggy";

/// `target/<profile>/iggyd`, found from the test executable
/// (`target/<profile>/deps/<test>-<hash>`).
pub fn iggyd_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("current test executable");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executable lives in target/<profile>/deps/");
    let binary = profile_dir.join("iggyd");
    assert!(
        binary.is_file(),
        "{} is missing: build the daemon first (`cargo build -p iggyd`); \
         `cargo nextest run --workspace` builds it before running tests",
        binary.display()
    );
    binary
}

fn iggyd() -> Command {
    let mut command = Command::new(iggyd_binary());
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

pub struct TestDaemon {
    pub dir: tempfile::TempDir,
    pub address: SocketAddr,
    env: Vec<(String, String)>,
    child: Option<Child>,
    notify: Option<UnixDatagram>,
    notifications: Vec<String>,
    command_line: String,
    allowed_log_lines: Vec<String>,
}

impl TestDaemon {
    pub fn start() -> TestDaemon {
        TestDaemon::start_with(&[])
    }

    /// Start with extra `IGGYD_*` environment (configuration keys).
    pub fn start_with(env: &[(&str, &str)]) -> TestDaemon {
        let mut daemon = TestDaemon {
            dir: tempfile::tempdir().expect("temp dir"),
            address: "0.0.0.0:0".parse().unwrap(),
            env: env
                .iter()
                .map(|(key, value)| (key.to_string(), value.to_string()))
                .collect(),
            child: None,
            notify: None,
            notifications: Vec::new(),
            command_line: String::new(),
            allowed_log_lines: Vec::new(),
        };
        daemon.spawn();
        daemon
    }

    fn spawn(&mut self) {
        assert!(self.child.is_none(), "daemon already running");
        let notify_path = self.dir.path().join("notify.sock");
        let _ = std::fs::remove_file(&notify_path);
        let notify = UnixDatagram::bind(&notify_path).expect("bind notify socket");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("daemon.log"))
            .expect("daemon log");
        let mut command = iggyd();
        command
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--data-dir")
            .arg(self.data_dir())
            .env("NOTIFY_SOCKET", &notify_path)
            .env("IGGYD_LOGGING__LEVEL", "debug")
            .env("IGGY_ROOT_USERNAME", ROOT_USERNAME)
            .env("IGGY_ROOT_PASSWORD", ROOT_PASSWORD)
            .envs(self.env.iter().map(|(key, value)| (key, value)))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log fd"))
            .stderr(log);
        self.command_line = format!("{command:?}");
        self.notify = Some(notify);
        self.child = Some(command.spawn().expect("spawn iggyd"));
        self.wait_ready();
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("daemon.log")).unwrap_or_default()
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("daemon running").id() as i32
    }

    /// Let a log line containing `needle` pass the teardown gate.
    pub fn allow_log(&mut self, needle: &str) {
        self.allowed_log_lines.push(needle.to_string());
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + START_TIMEOUT;
        let mut buffer = vec![0u8; 4096];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                self.fail(&format!("no READY=1 within {START_TIMEOUT:?}"));
            }
            let notify = self.notify.as_ref().expect("notify socket");
            notify
                .set_read_timeout(Some(left.min(Duration::from_millis(500))))
                .expect("timeout");
            match notify.recv(&mut buffer) {
                Ok(length) => {
                    let text = String::from_utf8_lossy(&buffer[..length]).into_owned();
                    self.notifications.push(text.clone());
                    if text.contains("READY=1") {
                        self.address = self.bound_address(&text);
                        return;
                    }
                }
                Err(_) => {
                    if let Some(status) = self.try_exit_status() {
                        self.fail(&format!("iggyd exited with {status} before READY=1"));
                    }
                }
            }
        }
    }

    /// `STATUS=serving on 127.0.0.1:PORT: …` → the address.
    fn bound_address(&self, message: &str) -> SocketAddr {
        let status = message
            .lines()
            .find_map(|line| line.strip_prefix("STATUS="))
            .unwrap_or_else(|| self.fail("READY=1 came without STATUS="));
        status
            .strip_prefix("serving on ")
            .and_then(|rest| {
                rest.split(':')
                    .take(2)
                    .collect::<Vec<_>>()
                    .join(":")
                    .parse()
                    .ok()
            })
            .unwrap_or_else(|| {
                self.fail(&format!(
                    "STATUS= does not name the bound address: {status:?}"
                ))
            })
    }

    fn try_exit_status(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|child| child.try_wait().ok().flatten())
    }

    fn signal(&self, signal: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), signal).expect("signal");
    }

    /// SIGTERM and wait (bounded) for a clean exit.
    pub fn stop(&mut self) -> ExitStatus {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        let status = self.reap(Duration::from_secs(15));
        if !status.success() {
            self.fail(&format!("iggyd exited with {status} after SIGTERM"));
        }
        status
    }

    /// SIGKILL: the crash the storage contract is about.
    pub fn kill(&mut self) {
        self.signal(nix::sys::signal::Signal::SIGKILL);
        self.reap(Duration::from_secs(15));
    }

    /// Wait for the child in a helper thread, bounded by `timeout`.
    fn reap(&mut self, timeout: Duration) -> ExitStatus {
        let mut child = self.child.take().expect("daemon running");
        let pid = child.id() as i32;
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = sender.send(child.wait());
        });
        match receiver.recv_timeout(timeout) {
            Ok(status) => status.expect("wait"),
            Err(_) => {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
                self.fail(&format!("iggyd did not exit within {timeout:?}"))
            }
        }
    }

    /// Start again on the same data directory (after `stop` or `kill`).
    pub fn restart(&mut self) {
        self.spawn();
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
        panic!(
            "{why}\n--- command\n{}\n--- notifications\n{:?}\n--- files\n{}--- daemon log (tail)\n{}",
            self.command_line,
            self.notifications,
            list_dir(self.dir.path()),
            tail(&self.log(), 200)
        );
    }

    /// A connected TCP client, not logged in.
    pub async fn client(&self) -> IggyClient {
        let client = IggyClient::builder()
            .with_tcp()
            .with_server_address(self.address.to_string())
            .build()
            .expect("build SDK client");
        client.connect().await.expect("connect");
        client
    }

    /// A connected client logged in as root with the SDK's `login_user`.
    pub async fn root_client(&self) -> IggyClient {
        let client = self.client().await;
        client
            .login_user(ROOT_USERNAME, ROOT_PASSWORD)
            .await
            .expect("root login");
        client
    }

    /// A client that logs in by itself from a connection string (the SDK's
    /// auto-login path, which also runs its leader check on connect).
    pub async fn connection_string_client(&self, username: &str, password: &str) -> IggyClient {
        let client = IggyClient::from_connection_string(&format!(
            "iggy://{username}:{password}@{}",
            self.address
        ))
        .expect("connection string");
        client.connect().await.expect("connect with auto-login");
        client
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
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

/// Poll `condition` until it is true or `timeout` passes (bounded wait on a
/// condition; never a fixed sleep standing in for readiness).
pub async fn eventually<F, Fut>(timeout: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if condition().await {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The wire code of an SDK error.
pub fn code(error: &IggyError) -> u32 {
    error.as_code()
}

/// A name identifier (the SDK's most common way to address resources).
pub fn named(name: &str) -> Identifier {
    Identifier::named(name).expect("identifier")
}

pub fn numeric(id: u32) -> Identifier {
    Identifier::numeric(id).expect("identifier")
}

/// Topic options as the SDK fills them, with `partitions` partitions.
pub fn topic_options(partitions: u32) -> TopicCreateOptions {
    TopicCreateOptions {
        partitions_count: Some(partitions),
        ..TopicCreateOptions::default()
    }
}

/// Create `stream` with one topic `topic` of `partitions` partitions.
pub async fn stream_with_topic(client: &IggyClient, stream: &str, topic: &str, partitions: u32) {
    client.create_stream(stream).await.expect("create stream");
    client
        .create_topic(&named(stream), topic, &topic_options(partitions))
        .await
        .expect("create topic");
}

/// `count` messages whose payloads are `"{prefix}-{index}"`, each with two
/// user headers (the index as u64 and the prefix as a string).
pub fn messages(prefix: &str, first: u64, count: u64) -> Vec<IggyMessage> {
    (first..first + count)
        .map(|index| {
            let headers = std::collections::BTreeMap::from([
                (
                    HeaderKey::try_from("index").unwrap(),
                    HeaderValue::from(index),
                ),
                (
                    HeaderKey::try_from("prefix").unwrap(),
                    HeaderValue::try_from(prefix).unwrap(),
                ),
            ]);
            IggyMessage::builder()
                .payload(format!("{prefix}-{index}").into_bytes().into())
                .user_headers(headers)
                .build()
                .expect("message")
        })
        .collect()
}

/// Send `messages` to one explicit partition.
pub async fn send_to(
    client: &IggyClient,
    stream: &str,
    topic: &str,
    partition: u32,
    mut messages: Vec<IggyMessage>,
) {
    client
        .send_messages(
            &named(stream),
            &named(topic),
            &Partitioning::partition_id(partition),
            &mut messages,
        )
        .await
        .expect("send messages");
}

/// Payloads of polled messages as strings.
pub fn payloads(polled: &PolledMessages) -> Vec<String> {
    polled
        .messages
        .iter()
        .map(|message| String::from_utf8_lossy(&message.payload).into_owned())
        .collect()
}

pub fn offsets(polled: &PolledMessages) -> Vec<u64> {
    polled
        .messages
        .iter()
        .map(|message| message.header.offset)
        .collect()
}

/// Poll one partition as `consumer`.
#[allow(clippy::too_many_arguments)]
pub async fn poll(
    client: &IggyClient,
    stream: &str,
    topic: &str,
    partition: u32,
    consumer: &Consumer,
    strategy: PollingStrategy,
    count: u32,
    auto_commit: bool,
) -> PolledMessages {
    client
        .poll_messages(
            &named(stream),
            &named(topic),
            Some(partition),
            consumer,
            &strategy,
            count,
            auto_commit,
        )
        .await
        .expect("poll messages")
}

/// Assert that `result` failed with wire code `expected`.
#[track_caller]
pub fn assert_code<T: std::fmt::Debug>(result: Result<T, IggyError>, expected: u32, what: &str) {
    match result {
        Ok(value) => panic!("{what}: expected error {expected}, got Ok({value:?})"),
        Err(error) => assert_eq!(
            error.as_code(),
            expected,
            "{what}: expected code {expected}, got {error:?}"
        ),
    }
}
