//! Load scenarios against an Iggy-protocol server: producers and consumers
//! (plain or in a consumer group), each on its own thread and connection,
//! run together or one phase after the other, each repetition followed by
//! the raw loopback baselines with the same frames and the same stop rule.
//!
//! This file owns the shared driver ([`drive`]: start barrier, stop rule,
//! rate limit, latency histogram per worker) and the scenario runner. It
//! creates the streams/topics it needs and deletes them afterwards unless
//! asked to keep them. It never asserts on time.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::{Value, json};

use crate::client::{Connection, Durability, PollTarget, SaveThresholds, Tls, producer_batch};
use crate::loopback;
use crate::report::{Latency, Row, Target, Throughput, latency_histogram, median, record};
use iggyd_testkit::daemon::status_kib;

/// When a worker stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// After this many requests per worker.
    Requests(u64),
    /// After this much wall time.
    Duration(Duration),
}

/// One request/response step of a worker: `Ok(Some((payload_bytes,
/// messages)))` after a step, `Ok(None)` when it has nothing left to do.
pub type Work = Box<dyn FnMut() -> Result<Option<(u64, u64)>, String> + Send>;

/// One worker's histogram, bytes, messages, requests, start and end.
type WorkerTotals = (Histogram<u64>, u64, u64, u64, Instant, Instant);

/// What a set of workers did together.
#[derive(Debug, Clone)]
pub struct Aggregate {
    /// Payload bytes and messages over the wall time from the common start
    /// to the last worker's end.
    pub throughput: Throughput,
    pub requests: u64,
    pub latency: Latency,
    pub histogram: Histogram<u64>,
}

/// Runs every work item on its own thread from a common start until `stop`
/// (or until it returns `None`), optionally paced to `rate_bytes_per_s` per
/// worker. Steps that moved no messages are not timed when `time_empty` is
/// false (idle polls would otherwise fill the histogram).
pub fn drive(
    works: Vec<Work>,
    stop: Stop,
    rate_bytes_per_s: Option<f64>,
    time_empty: bool,
) -> Result<Aggregate, String> {
    let workers = works.len();
    let barrier = Arc::new(std::sync::Barrier::new(workers + 1));
    let mut handles = Vec::new();
    for (number, mut work) in works.into_iter().enumerate() {
        let barrier = barrier.clone();
        let handle = std::thread::Builder::new()
            .name(format!("bench-worker-{number}"))
            .spawn(move || -> Result<WorkerTotals, String> {
                let mut histogram = latency_histogram();
                let (mut bytes, mut messages, mut requests) = (0u64, 0u64, 0u64);
                barrier.wait();
                let started = Instant::now();
                loop {
                    match stop {
                        Stop::Requests(limit) if requests >= limit => break,
                        Stop::Duration(limit) if started.elapsed() >= limit => break,
                        _ => {}
                    }
                    let step_started = Instant::now();
                    let Some((step_bytes, step_messages)) = work()? else {
                        break;
                    };
                    if step_messages > 0 || time_empty {
                        record(&mut histogram, step_started.elapsed());
                    }
                    bytes += step_bytes;
                    messages += step_messages;
                    requests += 1;
                    if let Some(rate) = rate_bytes_per_s {
                        let due = Duration::from_secs_f64(bytes as f64 / rate);
                        let elapsed = started.elapsed();
                        if due > elapsed {
                            std::thread::sleep(due - elapsed);
                        }
                    }
                }
                Ok((
                    histogram,
                    bytes,
                    messages,
                    requests,
                    started,
                    Instant::now(),
                ))
            })
            .map_err(|error| format!("spawning a worker: {error}"))?;
        handles.push(handle);
    }
    barrier.wait();
    let mut started: Option<Instant> = None;
    let mut histogram = latency_histogram();
    let (mut bytes, mut messages, mut requests) = (0u64, 0u64, 0u64);
    let mut finished: Option<Instant> = None;
    let mut failure = None;
    for handle in handles {
        match handle.join() {
            Ok(Ok((
                worker_histogram,
                worker_bytes,
                worker_messages,
                worker_requests,
                began,
                ended,
            ))) => {
                histogram
                    .add(&worker_histogram)
                    .map_err(|error| format!("merging histograms: {error}"))?;
                bytes += worker_bytes;
                messages += worker_messages;
                requests += worker_requests;
                started = Some(started.map_or(began, |first| first.min(began)));
                finished = Some(finished.map_or(ended, |last| last.max(ended)));
            }
            Ok(Err(error)) => failure = Some(error),
            Err(_) => failure = Some("a worker panicked".to_owned()),
        }
    }
    if let Some(error) = failure {
        return Err(error);
    }
    Ok(Aggregate {
        throughput: Throughput {
            bytes,
            messages,
            elapsed: match (started, finished) {
                (Some(started), Some(finished)) => finished - started,
                _ => Duration::ZERO,
            },
        },
        requests,
        latency: Latency::of(&histogram),
        histogram,
    })
}

/// Everything a load scenario needs.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    pub address: SocketAddr,
    pub username: String,
    pub password: String,
    pub name: String,
    pub producers: usize,
    pub consumers: usize,
    pub consumer_group: bool,
    /// Producers first, then consumers (which then read from page cache);
    /// otherwise both run at the same time.
    pub sequential: bool,
    pub message_size: usize,
    pub messages_per_batch: u32,
    pub poll_count: u32,
    pub streams: u32,
    pub partitions: u32,
    pub durability: Durability,
    /// `messages_required_to_save` / `size_of_messages_required_to_save`.
    pub save: SaveThresholds,
    pub stop: Stop,
    /// Per producer, in payload bytes per second.
    pub rate_limit_bytes_per_s: Option<f64>,
    pub baselines: bool,
    pub keep_data: bool,
    /// Where the raw TCP→file baseline writes (the daemon's disk).
    pub raw_file_dir: PathBuf,
    /// Each producer sends to every partition of its stream in turn (so
    /// many partitions are busy with few producers); otherwise producer `p`
    /// keeps to partition `(p / streams) % partitions`.
    pub spread: bool,
    /// Connect over TLS (the server must serve `[tcp.tls]`).
    pub tls: Option<Tls>,
}

/// The outcome of one repetition.
#[derive(Debug, Clone)]
pub struct LoadRun {
    pub produce: Option<Aggregate>,
    pub consume: Option<Aggregate>,
    pub raw_upload: Option<Aggregate>,
    pub raw_to_file: Option<Aggregate>,
    /// TCP→file with an fdatasync per request (persisted scenarios only).
    pub raw_to_file_synced: Option<Aggregate>,
    pub raw_one_way: Option<Aggregate>,
    pub raw_download: Option<Aggregate>,
}

fn stream_name(config: &LoadConfig, index: u32) -> String {
    format!("{}-{index}", config.name)
}

fn err(error: impl std::fmt::Display) -> String {
    error.to_string()
}

/// Runs one repetition of the scenario (create, produce/consume, baselines,
/// clean up).
pub fn run_once(config: &LoadConfig) -> Result<LoadRun, String> {
    assert!(config.streams >= 1);
    assert!(config.partitions >= 1);
    let connect = || {
        Connection::connect_over(
            config.address,
            config.tls.as_ref(),
            &config.username,
            &config.password,
        )
    };
    let mut admin = connect().map_err(err)?;
    let mut topics = Vec::new();
    for index in 0..config.streams {
        let name = stream_name(config, index);
        admin.delete_stream_named(&name).map_err(err)?;
        let stream = admin.create_stream(&name).map_err(err)?;
        let topic = admin
            .create_topic_with(
                stream,
                "bench",
                config.partitions,
                config.durability,
                &config.save,
            )
            .map_err(err)?;
        let group = if config.consumer_group {
            Some(admin.create_group(stream, topic, "bench").map_err(err)?)
        } else {
            None
        };
        topics.push((stream, topic, group));
    }
    let result = run_phases(config, &topics, &connect);
    if !config.keep_data {
        for (stream, _, _) in &topics {
            admin.delete_stream(*stream).map_err(err)?;
        }
    }
    result
}

fn run_phases(
    config: &LoadConfig,
    topics: &[(u32, u32, Option<u32>)],
    connect: &dyn Fn() -> crate::client::Result<Connection>,
) -> Result<LoadRun, String> {
    let batch = producer_batch(config.messages_per_batch, config.message_size, 7);
    let payload_per_batch = (config.message_size as u64) * u64::from(config.messages_per_batch);
    let messages_per_batch = u64::from(config.messages_per_batch);

    // Producers: producer p writes stream p % S, partition (p / S) % P.
    let mut producer_works: Vec<Work> = Vec::new();
    let mut send_frame_bytes = Vec::new();
    for producer in 0..config.producers {
        let (stream, topic, _) = topics[producer % topics.len()];
        let first = (producer / topics.len()) as u32 % config.partitions;
        let mut connection = connect().map_err(err)?;
        let targets: Vec<u32> = if config.spread {
            (0..config.partitions)
                .map(|step| (first + step) % config.partitions)
                .collect()
        } else {
            vec![first]
        };
        let mut frames: Vec<_> = targets
            .iter()
            .map(|partition| {
                connection.send_frame(stream, topic, *partition, &batch, config.messages_per_batch)
            })
            .collect();
        send_frame_bytes = frames[0].bytes.clone();
        let mut next = 0usize;
        producer_works.push(Box::new(move || {
            let count = frames.len();
            let frame = &mut frames[next % count];
            next += 1;
            connection.send(frame).map_err(err)?;
            Ok(Some((payload_per_batch, messages_per_batch)))
        }));
    }

    // Consumers: plain ones split the partitions of their stream; group
    // members take what SyncConsumerGroup assigns them.
    let producers_done = Arc::new(AtomicBool::new(config.sequential || config.producers == 0));
    let mut consumer_connections = Vec::new();
    for consumer in 0..config.consumers {
        let (stream, topic, group) = topics[consumer % topics.len()];
        let mut connection = connect().map_err(err)?;
        if let Some(group) = group {
            connection.join_group(stream, topic, group).map_err(err)?;
        }
        consumer_connections.push((consumer, stream, topic, group, connection));
    }
    let mut consumer_works: Vec<Work> = Vec::new();
    for (consumer, stream, topic, group, mut connection) in consumer_connections {
        let partitions: Vec<u32> = match group {
            Some(group) => connection.sync_group(stream, topic, group).map_err(err)?,
            None => {
                let peers = (0..config.consumers)
                    .filter(|other| other % topics.len() == consumer % topics.len())
                    .count();
                let rank = consumer / topics.len();
                (0..config.partitions)
                    .filter(|partition| *partition as usize % peers == rank)
                    .collect()
            }
        };
        let mut targets: Vec<(PollTarget, u64, bool)> = partitions
            .into_iter()
            .map(|partition| {
                let target = PollTarget {
                    stream,
                    topic,
                    partition,
                    group,
                };
                (target, 0u64, false)
            })
            .collect();
        let poll_count = config.poll_count;
        let message_size = config.message_size as u64;
        let producers_done = producers_done.clone();
        let mut next = 0usize;
        consumer_works.push(Box::new(move || {
            if targets.is_empty() || targets.iter().all(|(_, _, exhausted)| *exhausted) {
                return Ok(None);
            }
            loop {
                let index = next % targets.len();
                next += 1;
                let (target, offset, exhausted) = &mut targets[index];
                if *exhausted {
                    continue;
                }
                let (messages, _) = connection.poll(target, *offset, poll_count).map_err(err)?;
                if messages == 0 {
                    if producers_done.load(Ordering::Acquire) {
                        *exhausted = true;
                    } else {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                    return Ok(Some((0, 0)));
                }
                *offset += u64::from(messages);
                return Ok(Some((
                    u64::from(messages) * message_size,
                    u64::from(messages),
                )));
            }
        }));
    }

    let mut run = LoadRun {
        produce: None,
        consume: None,
        raw_upload: None,
        raw_to_file: None,
        raw_to_file_synced: None,
        raw_one_way: None,
        raw_download: None,
    };
    // Consumers stop when everything is read; in a concurrent run the
    // producers' stop rule bounds them through `producers_done`.
    let consumer_stop = Stop::Requests(u64::MAX);
    if config.sequential || consumer_works.is_empty() || producer_works.is_empty() {
        if !producer_works.is_empty() {
            run.produce = Some(drive(
                producer_works,
                config.stop,
                config.rate_limit_bytes_per_s,
                true,
            )?);
        }
        if !consumer_works.is_empty() {
            run.consume = Some(drive(consumer_works, consumer_stop, None, false)?);
        }
    } else {
        let done = producers_done.clone();
        let stop = config.stop;
        let rate = config.rate_limit_bytes_per_s;
        let (produce, consume) = std::thread::scope(|scope| {
            let producers = scope.spawn(move || {
                let result = drive(producer_works, stop, rate, true);
                done.store(true, Ordering::Release);
                result
            });
            let consume = drive(consumer_works, consumer_stop, None, false);
            (producers.join(), consume)
        });
        run.produce = Some(produce.map_err(|_| "producers panicked".to_owned())??);
        run.consume = Some(consume?);
    }

    if config.baselines {
        if let Some(produce) = &run.produce {
            // Same frames, same number of exchanges per connection as iggyd
            // managed (so the same bytes), reply sized like a send ack.
            let per_connection = (produce.requests / config.producers as u64).max(1);
            let stop = Stop::Requests(per_connection);
            let lockstep = |sink: Option<loopback::Sink<'_>>| {
                loopback::lockstep(
                    config.producers,
                    &send_frame_bytes,
                    256 + 4 + 20,
                    payload_per_batch,
                    messages_per_batch,
                    stop,
                    sink,
                )
            };
            run.raw_upload = Some(lockstep(None)?);
            let sink = config
                .raw_file_dir
                .join(format!("iggyd-bench-raw-{}", std::process::id()));
            std::fs::create_dir_all(&sink)
                .map_err(|error| format!("{}: {error}", sink.display()))?;
            let to_file = |sync: bool| {
                let result = lockstep(Some(loopback::Sink { dir: &sink, sync }));
                let _ = std::fs::remove_dir_all(&sink);
                let _ = std::fs::create_dir_all(&sink);
                result
            };
            run.raw_to_file = Some(to_file(false)?);
            if config.durability == Durability::Persisted {
                run.raw_to_file_synced = Some(to_file(true)?);
            }
            let _ = std::fs::remove_dir_all(&sink);
            run.raw_one_way = Some(loopback::one_way(
                config.producers,
                &send_frame_bytes,
                payload_per_batch,
                messages_per_batch,
                stop,
            )?);
        }
        if let Some(consume) = &run.consume
            && consume.requests > 0
            && consume.throughput.messages > 0
        {
            // Poll-sized requests, replies sized like iggyd's average
            // non-empty poll reply, the same number of them.
            let full_polls = consume
                .throughput
                .messages
                .div_ceil(u64::from(config.poll_count));
            let per_connection = (full_polls / config.consumers as u64).max(1);
            let messages_per_poll = consume.throughput.messages / full_polls.max(1);
            let reply_body =
                16 + (batch.len() as u64 * messages_per_poll) / messages_per_batch.max(1);
            let request = loopback::frame_of_len(256 + 45);
            run.raw_download = Some(loopback::lockstep(
                config.consumers,
                &request,
                256 + reply_body as usize,
                messages_per_poll * config.message_size as u64,
                messages_per_poll,
                Stop::Requests(per_connection),
                None,
            )?);
        }
    }
    Ok(run)
}

/// Runs `repeat` repetitions and reduces them to table rows (medians).
pub fn run(config: &LoadConfig, repeat: usize) -> Result<(Vec<Row>, Value), String> {
    let runs = run_repeated(config, repeat)?;
    Ok((rows(config, &runs), runs_json(&runs)))
}

/// `repeat` repetitions of the scenario, as they came.
pub fn run_repeated(config: &LoadConfig, repeat: usize) -> Result<Vec<LoadRun>, String> {
    let mut runs = Vec::new();
    for _ in 0..repeat.max(1) {
        runs.push(run_once(config)?);
    }
    Ok(runs)
}

/// The JSON of `runs`, as `run` reports them.
pub fn runs_to_json(runs: &[LoadRun]) -> Value {
    runs_json(runs)
}

fn mb(aggregate: &Option<Aggregate>) -> Option<f64> {
    aggregate
        .as_ref()
        .map(|aggregate| aggregate.throughput.mb_per_s())
}

/// Median produce and consume throughput (MB/s) over `runs`; 0 for a side
/// that did not run.
pub fn throughput_medians(runs: &[LoadRun]) -> (f64, f64) {
    (
        medians(runs, |run| mb(&run.produce)).0,
        medians(runs, |run| mb(&run.consume)).0,
    )
}

fn p99_ms(aggregate: &Option<Aggregate>) -> Option<f64> {
    aggregate
        .as_ref()
        .map(|aggregate| aggregate.latency.p99_us as f64 / 1000.0)
}

fn medians(runs: &[LoadRun], pick: impl Fn(&LoadRun) -> Option<f64>) -> (f64, Vec<f64>) {
    let samples: Vec<f64> = runs.iter().filter_map(pick).collect();
    (median(&samples), samples)
}

/// What a row set against the raw lockstep baseline measures.
#[derive(Clone, Copy)]
enum Compared {
    /// MB/s, higher is better.
    Throughput,
    /// The 99th percentile latency in ms, lower is better.
    P99,
}

/// A row whose baseline is the raw lockstep run of the same direction (no
/// baseline when the raw run measured nothing).
fn compared_row(
    name: String,
    (value, samples): (f64, Vec<f64>),
    raw: f64,
    compared: Compared,
    target: Target,
) -> Row {
    let (baseline_name, unit, higher_is_better) = match compared {
        Compared::Throughput => ("raw lockstep", "MB/s", true),
        Compared::P99 => ("raw lockstep p99", "ms", false),
    };
    Row {
        name,
        value,
        baseline_name: baseline_name.into(),
        baseline: (raw > 0.0).then_some(raw),
        unit: unit.into(),
        higher_is_better,
        target,
        samples,
    }
}

/// The table rows for a scenario.
pub fn rows(config: &LoadConfig, runs: &[LoadRun]) -> Vec<Row> {
    let label = format!(
        "{} ({}, {}P/{}C, {} B x {})",
        config.name,
        config.durability.as_str(),
        config.producers,
        config.consumers,
        config.message_size,
        config.messages_per_batch
    );
    let mut rows = Vec::new();
    let has = |pick: fn(&LoadRun) -> bool| runs.iter().any(pick);
    if has(|run| run.produce.is_some()) {
        let (value, samples) = medians(runs, |run| mb(&run.produce));
        let (upload, _) = medians(runs, |run| mb(&run.raw_upload));
        let (one_way, _) = medians(runs, |run| mb(&run.raw_one_way));
        let (to_file, _) = medians(runs, |run| mb(&run.raw_to_file));
        let (messages, _) = medians(runs, |run| {
            run.produce
                .as_ref()
                .map(|aggregate| aggregate.throughput.messages_per_s())
        });
        let ratio_target = match config.durability {
            Durability::Replicated => Target::RatioAtLeast(0.5),
            Durability::Persisted => Target::None,
        };
        let base = compared_row(
            format!("{label} produce"),
            (value, samples),
            upload,
            Compared::Throughput,
            ratio_target,
        );
        rows.push(base.clone());
        rows.push(Row {
            name: format!("{label} produce vs TCP→file"),
            baseline_name: "raw lockstep + file write".into(),
            baseline: (to_file > 0.0).then_some(to_file),
            target: Target::None,
            ..base.clone()
        });
        let (to_file_synced, _) = medians(runs, |run| mb(&run.raw_to_file_synced));
        if to_file_synced > 0.0 {
            rows.push(Row {
                name: format!("{label} produce vs TCP→file+fdatasync"),
                baseline_name: "raw lockstep + write + fdatasync".into(),
                baseline: Some(to_file_synced),
                target: Target::None,
                ..base.clone()
            });
        }
        rows.push(Row {
            name: format!("{label} produce vs one-way"),
            baseline_name: "raw one-way".into(),
            baseline: (one_way > 0.0).then_some(one_way),
            target: Target::None,
            ..base
        });
        rows.push(Row {
            name: format!("{label} produce"),
            value: messages,
            baseline_name: String::new(),
            baseline: None,
            unit: "msg/s".into(),
            higher_is_better: true,
            target: Target::None,
            samples: Vec::new(),
        });
        let (raw_p99, _) = medians(runs, |run| p99_ms(&run.raw_upload));
        let p99_target = match config.durability {
            Durability::Replicated => 2.0,
            Durability::Persisted => 5.0,
        };
        rows.push(compared_row(
            format!("{label} produce p99"),
            medians(runs, |run| p99_ms(&run.produce)),
            raw_p99,
            Compared::P99,
            Target::ValueAtMost(p99_target),
        ));
    }
    if has(|run| run.consume.is_some()) {
        let (download, _) = medians(runs, |run| mb(&run.raw_download));
        rows.push(compared_row(
            format!("{label} consume"),
            medians(runs, |run| mb(&run.consume)),
            download,
            Compared::Throughput,
            if config.sequential {
                Target::RatioAtLeast(0.6)
            } else {
                Target::None
            },
        ));
        let (raw_p99, _) = medians(runs, |run| p99_ms(&run.raw_download));
        rows.push(compared_row(
            format!("{label} consume p99"),
            medians(runs, |run| p99_ms(&run.consume)),
            raw_p99,
            Compared::P99,
            Target::None,
        ));
    }
    rows
}

fn aggregate_json(aggregate: &Option<Aggregate>) -> Value {
    match aggregate {
        Some(aggregate) => json!({
            "throughput": aggregate.throughput.to_json(),
            "requests": aggregate.requests,
            "latency": aggregate.latency.to_json(),
        }),
        None => Value::Null,
    }
}

fn runs_json(runs: &[LoadRun]) -> Value {
    Value::Array(
        runs.iter()
            .map(|run| {
                json!({
                    "produce": aggregate_json(&run.produce),
                    "consume": aggregate_json(&run.consume),
                    "raw_lockstep_upload": aggregate_json(&run.raw_upload),
                    "raw_lockstep_to_file": aggregate_json(&run.raw_to_file),
                    "raw_lockstep_to_file_synced": aggregate_json(&run.raw_to_file_synced),
                    "raw_one_way": aggregate_json(&run.raw_one_way),
                    "raw_lockstep_download": aggregate_json(&run.raw_download),
                })
            })
            .collect(),
    )
}

/// Human-readable latency lines for every part of every repetition.
pub fn describe(runs_json: &Value) -> String {
    let mut out = String::new();
    if let Value::Array(runs) = runs_json {
        for (number, run) in runs.iter().enumerate() {
            for part in [
                "produce",
                "consume",
                "raw_lockstep_upload",
                "raw_lockstep_to_file",
                "raw_one_way",
                "raw_lockstep_download",
            ] {
                let value = &run[part];
                if value.is_null() {
                    continue;
                }
                let latency = &value["latency"];
                let throughput = &value["throughput"];
                out.push_str(&format!(
                    "  run {} {part:<22} {:>8.1} MB/s {:>10.0} msg/s  p50 {} p90 {} p99 {} p999 {} max {} µs\n",
                    number + 1,
                    throughput["mb_per_s"].as_f64().unwrap_or(0.0),
                    throughput["msg_per_s"].as_f64().unwrap_or(0.0),
                    latency["p50_us"],
                    latency["p90_us"],
                    latency["p99_us"],
                    latency["p999_us"],
                    latency["max_us"],
                ));
            }
        }
    }
    out
}

/// Idle memory with many partitions: reads the daemon's `VmRSS`, creates a
/// stream with one topic of `partitions` partitions, waits `settle`, reads
/// `VmRSS` again, then deletes the stream (unless `keep_data`).
/// The stalled-readers scenario: fills one partition per shard-sized
/// slice of `config.partitions` with `fill_bytes` of messages, then opens
/// `readers` connections that each ask for `poll_bytes` and never read
/// their replies, and reads the server's RSS before and after (after
/// `settle`), then times one more client's poll while they stall. What
/// `limits.max_poll_reply_bytes_in_flight` bounds.
pub fn stalled_readers(
    config: &LoadConfig,
    pid: u32,
    settle: Duration,
    readers: usize,
    fill_bytes: u64,
    poll_bytes: u64,
) -> Result<(Vec<Row>, Value), String> {
    let read = || status_kib(pid, "VmRSS").ok_or_else(|| format!("cannot read /proc/{pid}/status"));
    let mut admin =
        Connection::connect(config.address, &config.username, &config.password).map_err(err)?;
    let name = format!("{}-stalled", config.name);
    admin.delete_stream_named(&name).map_err(err)?;
    let stream = admin.create_stream(&name).map_err(err)?;
    let partitions = config.partitions.max(1);
    let topic = admin
        .create_topic(stream, "bench", partitions, Durability::Replicated)
        .map_err(err)?;
    let batch = producer_batch(config.messages_per_batch, config.message_size, 7);
    let batch_bytes = (config.messages_per_batch as usize * config.message_size) as u64;
    let mut sent = 0u64;
    let mut partition = 0;
    while sent < fill_bytes {
        let mut frame =
            admin.send_frame(stream, topic, partition, &batch, config.messages_per_batch);
        admin.send(&mut frame).map_err(err)?;
        sent += batch_bytes;
        partition = (partition + 1) % partitions;
    }
    std::thread::sleep(settle);
    let before = read()?;
    let count = u32::try_from(poll_bytes / config.message_size.max(1) as u64).unwrap_or(u32::MAX);
    let mut stalled = Vec::with_capacity(readers);
    for reader in 0..readers {
        let mut connection =
            Connection::connect(config.address, &config.username, &config.password).map_err(err)?;
        let target = PollTarget {
            stream,
            topic,
            partition: reader as u32 % partitions,
            group: None,
        };
        connection.send_poll_only(&target, 0, count).map_err(err)?;
        stalled.push(connection);
    }
    std::thread::sleep(settle);
    let after = read()?;
    let mut late =
        Connection::connect(config.address, &config.username, &config.password).map_err(err)?;
    let target = PollTarget {
        stream,
        topic,
        partition: 0,
        group: None,
    };
    let started = Instant::now();
    let (messages, _) = late
        .poll(&target, 0, config.messages_per_batch)
        .map_err(err)?;
    let late_ms = started.elapsed().as_secs_f64() * 1000.0;
    drop(stalled);
    if !config.keep_data {
        admin.delete_stream(stream).map_err(err)?;
    }
    let mib = |kib: u64| kib as f64 / 1024.0;
    let rows = vec![
        Row {
            name: format!("RSS with {readers} readers stalled on {poll_bytes} B polls"),
            value: mib(after),
            baseline_name: "RSS before".into(),
            baseline: Some(mib(before)),
            unit: "MiB".into(),
            higher_is_better: false,
            target: Target::None,
            samples: vec![mib(after)],
        },
        Row {
            name: "a poll while they stall".into(),
            value: late_ms,
            baseline_name: String::new(),
            baseline: None,
            unit: "ms".into(),
            higher_is_better: false,
            target: Target::None,
            samples: vec![late_ms],
        },
    ];
    let json = json!({
        "readers": readers, "fill_bytes": fill_bytes, "poll_bytes": poll_bytes,
        "rss_before_kib": before, "rss_after_kib": after, "late_poll_ms": late_ms,
        "late_poll_messages": messages,
    });
    Ok((rows, json))
}

/// The consumer-offsets scenario: one partition with a message, then
/// `count` consumers with names of their own store an offset in it (what a
/// client allowed to poll can do); the server's RSS before and after, per
/// stored offset. `limits.max_consumer_offsets_per_partition` must be at
/// least `count` for all to be stored.
pub fn consumer_offsets(
    config: &LoadConfig,
    pid: u32,
    settle: Duration,
    count: u64,
) -> Result<(Vec<Row>, Value), String> {
    let read = || status_kib(pid, "VmRSS").ok_or_else(|| format!("cannot read /proc/{pid}/status"));
    let mut admin =
        Connection::connect(config.address, &config.username, &config.password).map_err(err)?;
    let name = format!("{}-offsets", config.name);
    admin.delete_stream_named(&name).map_err(err)?;
    let stream = admin.create_stream(&name).map_err(err)?;
    let topic = admin
        .create_topic(stream, "bench", 1, Durability::Replicated)
        .map_err(err)?;
    let batch = producer_batch(1, 10, 1);
    let mut frame = admin.send_frame(stream, topic, 0, &batch, 1);
    admin.send(&mut frame).map_err(err)?;
    let target = PollTarget {
        stream,
        topic,
        partition: 0,
        group: None,
    };
    std::thread::sleep(settle);
    let before = read()?;
    for consumer in 0..count {
        admin
            .store_named_offset(&target, &format!("consumer-{consumer:08}"), 0)
            .map_err(err)?;
    }
    std::thread::sleep(settle);
    let after = read()?;
    if !config.keep_data {
        admin.delete_stream(stream).map_err(err)?;
    }
    let per_offset = after.saturating_sub(before) as f64 * 1024.0 / count.max(1) as f64;
    let rows = vec![Row {
        name: format!("RSS growth per stored consumer offset ({count})"),
        value: per_offset,
        baseline_name: String::new(),
        baseline: None,
        unit: "B".into(),
        higher_is_better: false,
        target: Target::None,
        samples: vec![per_offset],
    }];
    let json = json!({
        "count": count, "rss_before_kib": before, "rss_after_kib": after,
        "bytes_per_offset": per_offset,
    });
    Ok((rows, json))
}

pub fn idle_rss(
    config: &LoadConfig,
    pid: u32,
    settle: Duration,
) -> Result<(Vec<Row>, Value), String> {
    let read = || status_kib(pid, "VmRSS").ok_or_else(|| format!("cannot read /proc/{pid}/status"));
    let mut admin =
        Connection::connect(config.address, &config.username, &config.password).map_err(err)?;
    let name = format!("{}-rss", config.name);
    admin.delete_stream_named(&name).map_err(err)?;
    std::thread::sleep(settle);
    let before = read()?;
    let stream = admin.create_stream(&name).map_err(err)?;
    let creating = std::time::Instant::now();
    admin
        .create_topic(stream, "bench", config.partitions, config.durability)
        .map_err(err)?;
    let created = creating.elapsed();
    std::thread::sleep(settle);
    let after = read()?;
    if !config.keep_data {
        admin.delete_stream(stream).map_err(err)?;
    }
    let mib = |kib: u64| kib as f64 / 1024.0;
    let per_partition = after.saturating_sub(before) as f64 / f64::from(config.partitions);
    let rows = vec![
        Row {
            name: format!("idle RSS with {} partitions", config.partitions),
            value: mib(after),
            baseline_name: "RSS before".into(),
            baseline: Some(mib(before)),
            unit: "MiB".into(),
            higher_is_better: false,
            target: Target::ValueAtMost(100.0),
            samples: vec![mib(after)],
        },
        Row {
            name: format!("creating the topic of {} partitions", config.partitions),
            value: created.as_secs_f64(),
            baseline_name: String::new(),
            baseline: None,
            unit: "s".into(),
            higher_is_better: false,
            target: Target::None,
            samples: vec![created.as_secs_f64()],
        },
        Row {
            name: "idle RSS growth per partition".into(),
            value: per_partition,
            baseline_name: String::new(),
            baseline: None,
            unit: "KiB".into(),
            higher_is_better: false,
            target: Target::None,
            samples: vec![per_partition],
        },
    ];
    let json = json!({
        "partitions": config.partitions, "rss_before_kib": before, "rss_after_kib": after,
        "growth_per_partition_kib": per_partition, "create_topic_seconds": created.as_secs_f64(),
    });
    Ok((rows, json))
}
