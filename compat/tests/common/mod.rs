//! What the compat suites add to the workspace's test kit: a daemon
//! (`iggyd_testkit::TestDaemon`, started with the root credentials the SDK
//! logs in with) that hands out official-SDK clients, and the SDK helpers
//! the scenarios share (names, topics, messages, polls, error codes).
//! Starting, readiness, the log gate and the failure report are the kit's;
//! this file must not grow a second harness.

#![allow(dead_code)]

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
