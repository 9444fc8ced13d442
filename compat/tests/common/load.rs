//! A load that proves restarts refuse no client, written as an application
//! on the official SDK would be: while it runs, the daemon may be
//! restarted any number of times; `finish` then reads every partition back
//! and reports what a client saw.
//!
//! - producer `a`: an `IggyProducer` (direct sends, the SDK's default
//!   retries): the application's producer. Every error it returns is an
//!   error surfaced to the application.
//! - producer `b`: `IggyClient::send_messages` with no retries above the
//!   SDK's own reconnection: what the transport alone does. Its errors are
//!   reported, not counted as the application's.
//! - the consumer: `poll_messages` (next, auto-commit) over every
//!   partition; every error is the application's.
//! - a loop of new connections: a plain TCP connect and PING every
//!   `ping_every` (refused, reset or answered; an eviction means "connect
//!   again" and is retried), and every fifth round a new SDK client that
//!   connects, signs in, pings and shuts down (its errors are the
//!   application's).
//!
//! Every acknowledged message must be in the topic exactly once; every
//! message carries a unique payload (`a-N`, `b-N`).
//! Used by `compat/tests/sdk/handover.rs` and by
//! `compat/examples/handover-load.rs`, which `scripts/nspawn-e2e.sh` runs
//! under a real systemd.

use iggy::prelude::*;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Milliseconds since the epoch (comparable with `date +%s%3N`).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64)
}

#[derive(Debug, Clone)]
pub struct LoadConfig {
    pub address: SocketAddr,
    pub username: String,
    pub password: String,
    pub stream: String,
    pub topic: String,
    pub partitions: u32,
    /// Pause between two sends of each producer.
    pub send_every: Duration,
    /// Messages per send.
    pub batch: u64,
    /// Pause between two rounds of the connection loop.
    pub ping_every: Duration,
}

impl LoadConfig {
    pub fn new(address: SocketAddr, username: &str, password: &str) -> LoadConfig {
        LoadConfig {
            address,
            username: username.to_string(),
            password: password.to_string(),
            stream: "handover".to_string(),
            topic: "load".to_string(),
            partitions: 2,
            send_every: Duration::from_millis(5),
            batch: 10,
            ping_every: Duration::from_millis(20),
        }
    }
}

/// How one plain PING round went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PingOutcome {
    Served,
    Refused,
    /// Connected, then reset or closed without an answer.
    Broken(String),
}

#[derive(Debug, Clone)]
pub struct Ping {
    pub started_ms: u64,
    pub took: Duration,
    /// Evictions met before the answer (each one: connect again).
    pub evictions: u32,
    pub outcome: PingOutcome,
}

/// Something a client saw, with when the request it answered started.
#[derive(Debug, Clone)]
pub struct Seen {
    pub at_ms: u64,
    pub what: String,
}

#[derive(Default)]
struct Shared {
    acked_a: Mutex<Vec<String>>,
    acked_b: Mutex<Vec<String>>,
    app_errors: Mutex<Vec<Seen>>,
    transport_errors: Mutex<Vec<Seen>>,
    consumed: Mutex<Vec<String>>,
    pings: Mutex<Vec<Ping>>,
    clients: Mutex<u64>,
    /// The longest any application request took.
    longest: Mutex<Vec<(u64, Duration)>>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    /// An error returned to the application by a request started at
    /// `started_ms`.
    fn app_error(&self, started_ms: u64, what: String) {
        lock(&self.app_errors).push(Seen {
            at_ms: started_ms,
            what,
        });
    }

    fn transport_error(&self, started_ms: u64, what: String) {
        lock(&self.transport_errors).push(Seen {
            at_ms: started_ms,
            what,
        });
    }

    fn took(&self, started_ms: u64, took: Duration) {
        lock(&self.longest).push((started_ms, took));
    }
}

/// A running load; `finish` stops it and reports.
pub struct Load {
    config: LoadConfig,
    stop: Arc<AtomicBool>,
    shared: Arc<Shared>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    pinger: Option<std::thread::JoinHandle<()>>,
}

/// An SDK client that signs in by itself, with the SDK's default
/// reconnection (on, unlimited retries, 1 s apart).
pub async fn sdk_client(config: &LoadConfig) -> Result<IggyClient, IggyError> {
    let client = IggyClient::builder()
        .with_tcp()
        .with_server_address(config.address.to_string())
        .with_auto_sign_in(AutoLogin::Enabled(Credentials::UsernamePassword(
            config.username.clone(),
            config.password.clone().into(),
        )))
        .build()?;
    client.connect().await?;
    Ok(client)
}

fn messages(prefix: &str, first: u64, count: u64) -> Vec<IggyMessage> {
    (first..first + count)
        .map(|index| {
            IggyMessage::builder()
                .payload(format!("{prefix}-{index}").into_bytes().into())
                .build()
                .expect("message")
        })
        .collect()
}

fn payloads(polled: &PolledMessages) -> Vec<String> {
    polled
        .messages
        .iter()
        .map(|message| String::from_utf8_lossy(&message.payload).into_owned())
        .collect()
}

impl Load {
    /// Creates the stream and topic (when missing) and starts every actor.
    pub async fn start(config: LoadConfig) -> Result<Load, IggyError> {
        let admin = sdk_client(&config).await?;
        let stream = Identifier::named(&config.stream)?;
        if admin.get_stream(&stream).await?.is_none() {
            admin.create_stream(&config.stream).await?;
        }
        let topic = Identifier::named(&config.topic)?;
        if admin.get_topic(&stream, &topic).await?.is_none() {
            admin
                .create_topic(
                    &stream,
                    &config.topic,
                    &TopicCreateOptions {
                        partitions_count: Some(config.partitions),
                        ..TopicCreateOptions::default()
                    },
                )
                .await?;
        }
        admin.shutdown().await?;

        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared::default());
        let mut tasks = Vec::new();

        let client = sdk_client(&config).await?;
        let producer = client
            .producer(&config.stream, &config.topic)?
            .direct(DirectConfig::builder().build())
            .partitioning(Partitioning::balanced())
            .build();
        producer.init().await?;
        tasks.push(tokio::spawn(producer_a(
            config.clone(),
            client,
            producer,
            stop.clone(),
            shared.clone(),
        )));
        let client = sdk_client(&config).await?;
        tasks.push(tokio::spawn(producer_b(
            config.clone(),
            client,
            stop.clone(),
            shared.clone(),
        )));
        let client = sdk_client(&config).await?;
        tasks.push(tokio::spawn(consumer(
            config.clone(),
            client,
            stop.clone(),
            shared.clone(),
        )));
        tasks.push(tokio::spawn(new_clients(
            config.clone(),
            stop.clone(),
            shared.clone(),
        )));
        let pinger = {
            let (config, stop, shared) = (config.clone(), stop.clone(), shared.clone());
            std::thread::Builder::new()
                .name("pinger".into())
                .spawn(move || pinger(&config, &stop, &shared))
                .expect("pinger thread")
        };
        Ok(Load {
            config,
            stop,
            shared,
            tasks,
            pinger: Some(pinger),
        })
    }

    /// Acknowledged sends so far (both producers).
    pub fn acknowledged(&self) -> usize {
        lock(&self.shared.acked_a).len() + lock(&self.shared.acked_b).len()
    }

    /// Stops every actor and reads the topic back from offset 0.
    pub async fn finish(mut self) -> Result<Report, IggyError> {
        self.stop.store(true, Ordering::SeqCst);
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
        if let Some(pinger) = self.pinger.take() {
            let _ = pinger.join();
        }
        let reader = sdk_client(&self.config).await?;
        let stream = Identifier::named(&self.config.stream)?;
        let topic = Identifier::named(&self.config.topic)?;
        let mut stored: BTreeMap<String, u32> = BTreeMap::new();
        let mut total = 0u64;
        for partition in 0..self.config.partitions {
            let mut offset = 0u64;
            loop {
                let polled = reader
                    .poll_messages(
                        &stream,
                        &topic,
                        Some(partition),
                        &Consumer::new(Identifier::named("verifier")?),
                        &PollingStrategy::offset(offset),
                        1000,
                        false,
                    )
                    .await?;
                let Some(last) = polled.messages.last() else {
                    break;
                };
                offset = last.header.offset + 1;
                for payload in payloads(&polled) {
                    *stored.entry(payload).or_default() += 1;
                    total += 1;
                }
            }
        }
        reader.shutdown().await?;
        let shared = &self.shared;
        let acked: Vec<String> = lock(&shared.acked_a)
            .iter()
            .chain(lock(&shared.acked_b).iter())
            .cloned()
            .collect();
        let lost = acked
            .iter()
            .filter(|payload| !stored.contains_key(*payload))
            .cloned()
            .collect();
        let duplicated = stored
            .iter()
            .filter(|(_, count)| **count > 1)
            .map(|(payload, count)| format!("{payload} x{count}"))
            .collect();
        let consumed = lock(&shared.consumed).clone();
        let mut consumed_once: BTreeMap<&str, u32> = BTreeMap::new();
        for payload in &consumed {
            *consumed_once.entry(payload).or_default() += 1;
        }
        Ok(Report {
            acknowledged_a: lock(&shared.acked_a).len(),
            acknowledged_b: lock(&shared.acked_b).len(),
            stored: total,
            lost,
            duplicated,
            consumed: consumed.len(),
            consumed_twice: consumed_once.values().filter(|count| **count > 1).count(),
            consumed_missing: acked
                .iter()
                .filter(|payload| !consumed_once.contains_key(payload.as_str()))
                .count(),
            app_errors: lock(&shared.app_errors).clone(),
            transport_errors: lock(&shared.transport_errors).clone(),
            pings: lock(&shared.pings).clone(),
            new_clients: *lock(&shared.clients),
            longest: lock(&shared.longest).clone(),
        })
    }
}

/// What the clients saw, and what the topic holds.
#[derive(Debug)]
pub struct Report {
    pub acknowledged_a: usize,
    pub acknowledged_b: usize,
    /// Messages in the topic.
    pub stored: u64,
    /// Acknowledged, not in the topic.
    pub lost: Vec<String>,
    /// In the topic more than once.
    pub duplicated: Vec<String>,
    /// What the consumer received (next, auto-commit).
    pub consumed: usize,
    pub consumed_twice: usize,
    pub consumed_missing: usize,
    pub app_errors: Vec<Seen>,
    pub transport_errors: Vec<Seen>,
    pub pings: Vec<Ping>,
    pub new_clients: u64,
    /// (started, duration) of every application request.
    pub longest: Vec<(u64, Duration)>,
}

impl Report {
    pub fn refused(&self) -> usize {
        self.pings
            .iter()
            .filter(|ping| ping.outcome == PingOutcome::Refused)
            .count()
    }

    pub fn broken(&self) -> Vec<&Ping> {
        self.pings
            .iter()
            .filter(|ping| matches!(ping.outcome, PingOutcome::Broken(_)))
            .collect()
    }

    pub fn evictions(&self) -> u32 {
        self.pings.iter().map(|ping| ping.evictions).sum()
    }

    /// The longest a PING or an application request started in
    /// `[begin, end]` (ms since the epoch) waited for its answer.
    pub fn stall_in(&self, begin_ms: u64, end_ms: u64) -> Duration {
        let pings = self
            .pings
            .iter()
            .filter(|ping| (begin_ms..=end_ms).contains(&ping.started_ms))
            .map(|ping| ping.took);
        let requests = self
            .longest
            .iter()
            .filter(|(started, _)| (begin_ms..=end_ms).contains(started))
            .map(|(_, took)| *took);
        pings.chain(requests).max().unwrap_or_default()
    }

    /// One line per figure, `key=value`, for scripts and test output.
    pub fn summary(&self) -> String {
        let served = self
            .pings
            .iter()
            .filter(|ping| ping.outcome == PingOutcome::Served)
            .count();
        format!(
            "acknowledged={} (producer a {}, producer b {})\nstored={}\nlost={}\nduplicated={}\n\
             consumed={} consumed_twice={} consumed_missing={}\napp_errors={}\n\
             transport_errors={}\nnew_connections={} served={served} refused={} broken={} \
             evictions_retried={}\nnew_sdk_clients={}\n",
            self.acknowledged_a + self.acknowledged_b,
            self.acknowledged_a,
            self.acknowledged_b,
            self.stored,
            self.lost.len(),
            self.duplicated.len(),
            self.consumed,
            self.consumed_twice,
            self.consumed_missing,
            self.app_errors.len(),
            self.transport_errors.len(),
            self.pings.len(),
            self.refused(),
            self.broken().len(),
            self.evictions(),
            self.new_clients,
        )
    }

    /// The errors and broken connections, each with its time, for a report.
    pub fn details(&self) -> String {
        let mut out = String::new();
        for seen in &self.app_errors {
            out.push_str(&format!(
                "app_error (request started {}): {}\n",
                seen.at_ms, seen.what
            ));
        }
        for seen in &self.transport_errors {
            out.push_str(&format!(
                "transport_error (request started {}): {}\n",
                seen.at_ms, seen.what
            ));
        }
        for ping in self.broken() {
            out.push_str(&format!(
                "broken connection at {}: {:?}\n",
                ping.started_ms, ping.outcome
            ));
        }
        for payload in self.lost.iter().take(20) {
            out.push_str(&format!("lost: {payload}\n"));
        }
        for payload in self.duplicated.iter().take(20) {
            out.push_str(&format!("duplicated: {payload}\n"));
        }
        out
    }
}

async fn producer_a(
    config: LoadConfig,
    _client: IggyClient,
    producer: IggyProducer,
    stop: Arc<AtomicBool>,
    shared: Arc<Shared>,
) {
    let mut next = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let started_ms = now_ms();
        let started = Instant::now();
        match producer.send(messages("a", next, config.batch)).await {
            Ok(_) => {
                shared.took(started_ms, started.elapsed());
                lock(&shared.acked_a).extend((next..next + config.batch).map(|i| format!("a-{i}")));
            }
            Err(error) => {
                shared.app_error(started_ms, format!("producer a, send a-{next}: {error}"))
            }
        }
        next += config.batch;
        tokio::time::sleep(config.send_every).await;
    }
}

async fn producer_b(
    config: LoadConfig,
    client: IggyClient,
    stop: Arc<AtomicBool>,
    shared: Arc<Shared>,
) {
    let stream = Identifier::named(&config.stream).expect("stream name");
    let topic = Identifier::named(&config.topic).expect("topic name");
    let mut next = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let mut batch = messages("b", next, config.batch);
        let started_ms = now_ms();
        let started = Instant::now();
        match client
            .send_messages(&stream, &topic, &Partitioning::balanced(), &mut batch)
            .await
        {
            Ok(_) => {
                shared.took(started_ms, started.elapsed());
                lock(&shared.acked_b).extend((next..next + config.batch).map(|i| format!("b-{i}")));
            }
            Err(error) => {
                shared.transport_error(started_ms, format!("producer b, send b-{next}: {error}"))
            }
        }
        next += config.batch;
        tokio::time::sleep(config.send_every).await;
    }
    let _ = client.shutdown().await;
}

async fn consumer(
    config: LoadConfig,
    client: IggyClient,
    stop: Arc<AtomicBool>,
    shared: Arc<Shared>,
) {
    let stream = Identifier::named(&config.stream).expect("stream name");
    let topic = Identifier::named(&config.topic).expect("topic name");
    let me = Consumer::new(Identifier::named("handover-consumer").expect("consumer name"));
    let mut partition = 0;
    while !stop.load(Ordering::SeqCst) {
        let started_ms = now_ms();
        let started = Instant::now();
        match client
            .poll_messages(
                &stream,
                &topic,
                Some(partition),
                &me,
                &PollingStrategy::next(),
                100,
                true,
            )
            .await
        {
            Ok(polled) => {
                shared.took(started_ms, started.elapsed());
                if polled.messages.is_empty() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                lock(&shared.consumed).extend(payloads(&polled));
            }
            Err(error) => {
                shared.app_error(
                    started_ms,
                    format!("consumer, poll partition {partition}: {error}"),
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        partition = (partition + 1) % config.partitions;
    }
    let _ = client.shutdown().await;
}

/// Every fifth round of the connection loop: a new SDK client.
async fn new_clients(config: LoadConfig, stop: Arc<AtomicBool>, shared: Arc<Shared>) {
    while !stop.load(Ordering::SeqCst) {
        let started_ms = now_ms();
        let started = Instant::now();
        let outcome = async {
            let client = sdk_client(&config).await?;
            client.ping().await?;
            client.shutdown().await
        }
        .await;
        match outcome {
            Ok(()) => {
                shared.took(started_ms, started.elapsed());
                *lock(&shared.clients) += 1;
            }
            Err(error) => shared.app_error(started_ms, format!("new client: {error}")),
        }
        tokio::time::sleep(config.ping_every * 5).await;
    }
}

/// The plain connection loop (its own thread: blocking sockets).
fn pinger(config: &LoadConfig, stop: &AtomicBool, shared: &Shared) {
    let frame = iggyd_testkit::wire::Request::ping().frame(0, 0, 0);
    while !stop.load(Ordering::SeqCst) {
        let started_ms = now_ms();
        let started = Instant::now();
        let mut evictions = 0;
        let outcome = loop {
            match ping_once(config.address, &frame) {
                Ok(true) => break PingOutcome::Served,
                Ok(false) => evictions += 1,
                Err(outcome) => break outcome,
            }
            if evictions > 100 {
                break PingOutcome::Broken("evicted 100 times".into());
            }
        };
        lock(&shared.pings).push(Ping {
            started_ms,
            took: started.elapsed(),
            evictions,
            outcome,
        });
        std::thread::sleep(config.ping_every);
    }
}

/// One connect + PING: `Ok(true)` answered, `Ok(false)` evicted (connect
/// again), `Err` refused or broken.
fn ping_once(address: SocketAddr, frame: &[u8]) -> Result<bool, PingOutcome> {
    let mut stream = match TcpStream::connect_timeout(&address, Duration::from_secs(30)) {
        Ok(stream) => stream,
        Err(error) if error.kind() == std::io::ErrorKind::ConnectionRefused => {
            return Err(PingOutcome::Refused);
        }
        Err(error) => return Err(PingOutcome::Broken(format!("connect: {error}"))),
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let mut reply = [0u8; 256];
    match stream
        .write_all(frame)
        .and_then(|()| stream.read_exact(&mut reply))
    {
        Ok(()) if reply[60] == 8 && reply[216..220] == [0, 0, 0, 0] => Ok(true),
        Ok(()) if reply[60] == 13 => Ok(false),
        Ok(()) => Err(PingOutcome::Broken(format!(
            "unexpected reply header {:?}",
            &reply[56..64]
        ))),
        Err(error) => Err(PingOutcome::Broken(format!("after connect: {error}"))),
    }
}
