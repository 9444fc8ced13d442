//! What the compat suites add to the workspace's test kit: a daemon
//! (`iggyd_testkit::TestDaemon`, started with the root credentials the SDK
//! logs in with) that hands out official-SDK clients, and the SDK helpers
//! the scenarios share (names, topics, messages, polls, error codes).
//! Starting, readiness, the log gate and the failure report are the kit's;
//! this file must not grow a second harness.

#![allow(dead_code)]

pub mod load;

use iggy::prelude::*;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

pub const ROOT_USERNAME: &str = "iggy";
pub const ROOT_PASSWORD: &str = "iggy";

/// A kit daemon with SDK clients. Derefs to the kit's `TestDaemon` for
/// everything else (`address`, `restart`, `kill`, `log`, …).
pub struct SdkDaemon(iggyd_testkit::TestDaemon);

impl std::ops::Deref for SdkDaemon {
    type Target = iggyd_testkit::TestDaemon;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for SdkDaemon {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl SdkDaemon {
    pub fn start() -> SdkDaemon {
        SdkDaemon::start_with(&[])
    }

    /// Start with extra `IGGYD_*` environment (configuration keys).
    pub fn start_with(env: &[(&str, &str)]) -> SdkDaemon {
        let builder = iggyd_testkit::TestDaemon::builder()
            .env("IGGY_ROOT_USERNAME", ROOT_USERNAME)
            .env("IGGY_ROOT_PASSWORD", ROOT_PASSWORD);
        let builder = env
            .iter()
            .fold(builder, |builder, (key, value)| builder.env(key, value));
        SdkDaemon(builder.spawn())
    }

    /// Start with the kit playing systemd's file descriptor store: stops
    /// hand the listeners over and `restart` takes them back.
    pub fn start_handing_over() -> SdkDaemon {
        SdkDaemon(
            iggyd_testkit::TestDaemon::builder()
                .env("IGGY_ROOT_USERNAME", ROOT_USERNAME)
                .env("IGGY_ROOT_PASSWORD", ROOT_PASSWORD)
                .fd_store(64)
                .spawn(),
        )
    }

    /// Start on `dir` (its `data/` is the data directory: prepared by the
    /// test, e.g. a copy of a fixture).
    pub fn start_in(dir: tempfile::TempDir, env: &[(&str, &str)]) -> SdkDaemon {
        let builder = iggyd_testkit::TestDaemon::builder()
            .dir(dir)
            .env("IGGY_ROOT_USERNAME", ROOT_USERNAME)
            .env("IGGY_ROOT_PASSWORD", ROOT_PASSWORD);
        let builder = env
            .iter()
            .fold(builder, |builder, (key, value)| builder.env(key, value));
        SdkDaemon(builder.spawn())
    }

    /// One snapshot from the admin socket (`<data_dir>/iggyd.sock`).
    pub fn admin_snapshot(&self) -> iggyd_admin_api::Snapshot {
        use std::io::{BufRead, Write};
        let socket = self.data_dir().join("iggyd.sock");
        let mut stream = std::os::unix::net::UnixStream::connect(&socket)
            .unwrap_or_else(|error| panic!("admin socket {}: {error}", socket.display()));
        stream
            .write_all(iggyd_admin_api::snapshot_request().as_bytes())
            .expect("admin request");
        let mut line = String::new();
        std::io::BufReader::new(stream)
            .read_line(&mut line)
            .expect("admin response");
        match iggyd_admin_api::decode(line.as_bytes()) {
            Ok(iggyd_admin_api::Payload::Snapshot { snapshot, .. }) => *snapshot,
            other => panic!("admin snapshot: {other:?}"),
        }
    }

    /// The entries of a directory under the data directory, sorted.
    pub fn data_entries(&self, relative: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.data_dir().join(relative))
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .map(|entry| entry.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// SIGTERM and wait (bounded) for a clean exit; anything but exit 0
    /// fails with the kit's report.
    pub fn stop(&mut self) -> ExitStatus {
        let (status, _) = self.0.stop();
        if !status.success() {
            self.fail(&format!("iggyd exited with {status} after SIGTERM"));
        }
        status
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

/// `chattr +i` on files, undone (recursively, on the whole directory it
/// was given) when dropped, so a failing test never leaves undeletable
/// files behind. Declare it after the daemon, so it drops first.
pub struct Immutable {
    root: std::path::PathBuf,
}

impl Immutable {
    /// Guards `root`; `None` (after reporting a skip) when `chattr` cannot
    /// make files immutable here (not root, or a file system without it).
    pub fn guard(root: &std::path::Path) -> Option<Immutable> {
        let probe = root.join(".chattr-probe");
        std::fs::write(&probe, b"x").expect("write probe");
        let works = chattr("+i", &probe) && std::fs::remove_file(&probe).is_err();
        let _ = chattr("-i", &probe);
        let _ = std::fs::remove_file(&probe);
        if !works {
            iggyd_testkit::skip("chattr +i does not work here (needs root and ext4 or similar)");
            return None;
        }
        Some(Immutable {
            root: root.to_path_buf(),
        })
    }

    pub fn set(&self, path: &std::path::Path) {
        assert!(path.starts_with(&self.root));
        assert!(chattr("+i", path), "chattr +i {}", path.display());
    }

    /// `chattr -i` on every file and directory under the guarded one
    /// (sockets and the like cannot carry the flag).
    pub fn clear(&self) {
        assert!(self.clear_all(), "chattr -i under {}", self.root.display());
    }

    fn clear_all(&self) -> bool {
        let mut paths = Vec::new();
        let mut stack = vec![self.root.clone()];
        while let Some(dir) = stack.pop() {
            paths.push(dir.clone());
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.filter_map(Result::ok) {
                match entry.file_type() {
                    Ok(kind) if kind.is_dir() => stack.push(entry.path()),
                    Ok(kind) if kind.is_file() => paths.push(entry.path()),
                    _ => {}
                }
            }
        }
        std::process::Command::new("chattr")
            .arg("-i")
            .args(&paths)
            .status()
            .is_ok_and(|status| status.success())
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        self.clear_all();
    }
}

fn chattr(flag: &str, path: &std::path::Path) -> bool {
    std::process::Command::new("chattr")
        .arg(flag)
        .arg(path)
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Copies a directory tree (a fixture) into `target`.
pub fn copy_dir(source: &std::path::Path, target: &std::path::Path) {
    std::fs::create_dir_all(target).expect("create target");
    for entry in std::fs::read_dir(source).expect("read fixture") {
        let entry = entry.expect("fixture entry");
        let path = entry.path();
        let destination = target.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&path, &destination);
        } else {
            std::fs::copy(&path, &destination).expect("copy fixture file");
        }
    }
}
