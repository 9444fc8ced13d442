//! Storage benchmarks: the daemon's own `Pump`s and `PartitionLog`s on
//! `MonoioIo`, each next to a raw baseline on the same disk measured in the
//! same run (plain `std::fs` writes/reads of the same bytes in the same
//! chunk sizes).
//!
//! * append, 1 and 8 partitions (8 spread over 2 shard threads, each with its
//!   own monoio runtime and `Pump`, as the daemon does), `replicated` and
//!   `persisted` (group commit: every producer has one batch in flight, so
//!   one commit per round), against raw buffered writes and raw write +
//!   fdatasync per chunk;
//! * read from page cache by offset in large polls, against a raw
//!   sequential read of the same segment file;
//! * recovery (`PartitionLog::open`) of ~1 GiB of clean segments, against a
//!   raw read of the index files;
//! * idle memory per open partition (RSS delta / N).
//!
//! This file owns the workloads and their timing. It calls only public
//! storage/pump APIs and never changes what they do; everything it writes
//! lives under its own directory, removed at the end.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use iggyd::shard::op::{PartitionOp, PollRequest};
use iggyd::shard::partition::{Durability, PartitionKey, PartitionSettings};
use iggyd::shard::pump::{Pump, PumpStorage};
use iggyd_storage::{
    Access, BufferPool, MonoioIo, OpenMode, PartitionConfig, PartitionLog, StorageIo, SystemClock,
};
use iggyd_wire::batch::ValidBatch;
use iggyd_wire::protocol::primitives::PollingStrategy;
use serde_json::{Value, json};

use crate::client::producer_batch;
use crate::report::{Row, Target, median};

/// Sizes of one storage benchmark run.
#[derive(Debug, Clone)]
pub struct StorageConfig {
    /// Parent directory; the run works in a fresh subdirectory of it.
    pub dir: PathBuf,
    pub message_size: usize,
    pub messages_per_batch: u32,
    /// Bytes appended per append scenario (split over its partitions).
    pub append_bytes: u64,
    /// Bytes of clean segments for the recovery measurement.
    pub recovery_bytes: u64,
    pub recovery_segment_bytes: u64,
    /// Partitions opened for the idle-memory measurement.
    pub idle_partitions: u32,
    /// Segments per idle partition.
    pub idle_segments: u32,
    /// Messages per poll in the read measurement.
    pub poll_count: u32,
    pub repeat: usize,
    /// This benchmark's executable, re-run with `--idle-child` to measure
    /// idle memory in a fresh process; `None` measures in-process.
    pub idle_child: Option<PathBuf>,
    /// Also time recovery with a cold page cache (drops the machine's
    /// caches; needs root).
    pub cold_recovery: bool,
    /// How the daemon's storage writes segments (direct I/O by default,
    /// as the daemon does where the file system takes it).
    pub access: Access,
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            dir: PathBuf::from("."),
            message_size: 1000,
            messages_per_batch: 1000,
            append_bytes: 256 * 1024 * 1024,
            recovery_bytes: 1024 * 1024 * 1024,
            recovery_segment_bytes: 256 * 1024 * 1024,
            idle_partitions: 1000,
            idle_segments: 3,
            poll_count: 10_000,
            repeat: 3,
            idle_child: None,
            cold_recovery: false,
            access: Access::Direct,
        }
    }
}

/// A pump over `data_dir` with the daemon's default pool size.
fn pump(data_dir: PathBuf, access: Access) -> Pump<MonoioIo> {
    Pump::new(
        MonoioIo,
        Rc::new(SystemClock),
        PumpStorage {
            data_dir,
            access,
            pool: BufferPool::new(32 * 1024 * 1024),
            trash: Default::default(),
            consumer_offsets_max: iggyd::limits::CONSUMER_OFFSETS_PER_PARTITION as usize,
            read_window_bytes: iggyd::limits::storage::READ_WINDOW_BYTES,
        },
    )
}

/// A producer batch as the daemon's receiving shard hands it on.
fn valid(batch: &[u8]) -> Result<ValidBatch, String> {
    ValidBatch::new(batch.to_vec(), 0..batch.len())
        .map_err(|error| format!("a generated batch does not validate: {error}"))
}

/// Creates the partition log in `dir`, appends `batch` `count` times and
/// fsyncs it: how the recovery and idle scenarios lay down their data.
async fn write_log(
    dir: &Path,
    config: PartitionConfig,
    pool_bytes: u64,
    batch: &[u8],
    count: u64,
) -> Result<(), String> {
    let mut log = PartitionLog::open(
        MonoioIo,
        dir,
        config,
        Rc::new(SystemClock),
        BufferPool::new(pool_bytes),
    )
    .await
    .map_err(|error| format!("create: {error}"))?;
    let batch = valid(batch)?;
    for _ in 0..count {
        log.append_and_write(&batch)
            .await
            .map_err(|error| format!("append: {error}"))?;
    }
    log.sync().await.map_err(|error| format!("sync: {error}"))
}

/// Runs `make()` to completion on a monoio runtime (io_uring when the
/// kernel and memlock allow it, epoll otherwise).
fn block_on<F, Fut>(make: F) -> Fut::Output
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future,
{
    match monoio::RuntimeBuilder::<monoio::IoUringDriver>::new().build() {
        Ok(mut runtime) => runtime.block_on(make()),
        Err(_) => monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .build()
            .expect("building an epoll monoio runtime")
            .block_on(make()),
    }
}

/// Which monoio driver [`block_on`] gets on this machine.
pub fn driver_name() -> &'static str {
    match monoio::RuntimeBuilder::<monoio::IoUringDriver>::new().build() {
        Ok(_) => "io_uring",
        Err(_) => "epoll",
    }
}

fn io_error(what: &str, path: &Path, error: std::io::Error) -> String {
    format!("{what} {}: {error}", path.display())
}

/// Raw sequential writes of `chunk` to a new file until `total` bytes,
/// with an fdatasync after every chunk when `sync_each`. Returns seconds.
fn raw_write(path: &Path, chunk: &[u8], total: u64, sync_each: bool) -> Result<f64, String> {
    let mut file = std::fs::File::create(path).map_err(|error| io_error("create", path, error))?;
    let started = Instant::now();
    let mut written = 0u64;
    while written < total {
        file.write_all(chunk)
            .map_err(|error| io_error("write", path, error))?;
        if sync_each {
            file.sync_data()
                .map_err(|error| io_error("fdatasync", path, error))?;
        }
        written += chunk.len() as u64;
    }
    let seconds = started.elapsed().as_secs_f64();
    drop(file);
    std::fs::remove_file(path).map_err(|error| io_error("remove", path, error))?;
    Ok(seconds)
}

/// [`raw_write`] through io_uring (`MonoioIo` positional writes and
/// fdatasync), the same path the partition log takes. Returns seconds.
fn raw_write_uring(path: &Path, chunk: &[u8], total: u64, sync_each: bool) -> Result<f64, String> {
    let chunk = chunk.to_vec();
    let owned = path.to_path_buf();
    let seconds = block_on(|| async move {
        let io = MonoioIo;
        let file = io
            .open(&owned, OpenMode::CreateTruncate)
            .await
            .map_err(|error| io_error("create", &owned, error))?;
        let started = Instant::now();
        let mut written = 0u64;
        let mut buffer = chunk;
        while written < total {
            let (result, returned) = io.write_at(&file, buffer, written).await;
            result.map_err(|error| io_error("write", &owned, error))?;
            buffer = returned;
            if sync_each {
                io.sync(&file)
                    .await
                    .map_err(|error| io_error("fdatasync", &owned, error))?;
            }
            written += buffer.len() as u64;
        }
        Ok::<_, String>(started.elapsed().as_secs_f64())
    })?;
    std::fs::remove_file(path).map_err(|error| io_error("remove", path, error))?;
    Ok(seconds)
}

/// Raw sequential read of a whole file in `chunk_bytes` reads, into one
/// reused buffer, or into a fresh buffer per read when `fresh` (what a
/// server that hands each read's buffer over to a reply must do). Returns
/// (bytes, seconds).
fn raw_read(path: &Path, chunk_bytes: usize, fresh: bool) -> Result<(u64, f64), String> {
    let mut file = std::fs::File::open(path).map_err(|error| io_error("open", path, error))?;
    let mut buffer = vec![0u8; chunk_bytes];
    let started = Instant::now();
    let mut total = 0u64;
    loop {
        if fresh {
            // calloc: fresh zero pages, faulted in by the read itself.
            buffer = vec![0u8; chunk_bytes];
        }
        let read = file
            .read(&mut buffer)
            .map_err(|error| io_error("read", path, error))?;
        if read == 0 {
            break;
        }
        total += read as u64;
    }
    Ok((total, started.elapsed().as_secs_f64()))
}

fn settings(durability: Durability) -> PartitionSettings {
    PartitionSettings {
        durability,
        offset_durability: durability,
        ..PartitionSettings::default()
    }
}

fn key(partition: u32) -> PartitionKey {
    PartitionKey {
        stream: 1,
        topic: 1,
        partition,
        storage_id: u64::from(partition),
    }
}

/// One shard thread's share of an append scenario: opens `partitions` in
/// its own `Pump` under `data_dir`, then for `rounds` rounds appends one
/// batch to each partition and runs one commit, checking every ack.
/// Returns the time from the start barrier to the last ack.
fn shard_appends(
    data_dir: PathBuf,
    partitions: Vec<u32>,
    settings: PartitionSettings,
    batch: Rc<Vec<u8>>,
    rounds: u64,
    barrier: &std::sync::Barrier,
    access: Access,
) -> Result<Duration, String> {
    block_on(|| async move {
        let mut pump = pump(data_dir, access);
        for partition in &partitions {
            pump.open(key(*partition), settings)
                .await
                .map_err(|error| format!("open partition {partition}: {error}"))?;
        }
        barrier.wait();
        let started = Instant::now();
        for _ in 0..rounds {
            let mut answers = Vec::with_capacity(partitions.len());
            for partition in &partitions {
                let (reply, answer) = flume::bounded(1);
                pump.apply(PartitionOp::Append {
                    key: key(*partition),
                    batch: valid(&batch)?,
                    reply,
                })
                .await;
                answers.push(answer);
            }
            pump.commit().await;
            for answer in answers {
                answer
                    .try_recv()
                    .map_err(|_| "no acknowledgement after the commit".to_owned())?
                    .map_err(|error| format!("append failed: {error}"))?;
            }
        }
        let elapsed = started.elapsed();
        pump.drain().await;
        Ok(elapsed)
    })
}

/// Appends `total_bytes` (rounded to whole batches per partition) to
/// `partitions` partitions spread over `shards` shard threads. Returns
/// (bytes appended, seconds).
fn append_scenario(
    data_dir: &Path,
    partitions: u32,
    shards: u32,
    settings: PartitionSettings,
    batch: &[u8],
    total_bytes: u64,
    access: Access,
) -> Result<(u64, f64), String> {
    let rounds = (total_bytes / (batch.len() as u64 * u64::from(partitions))).max(1);
    let barrier = std::sync::Barrier::new(shards as usize);
    let results: Vec<Result<Duration, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..shards)
            .map(|shard| {
                let owned: Vec<u32> = (0..partitions)
                    .filter(|partition| partition % shards == shard)
                    .collect();
                let batch = batch.to_vec();
                let dir = data_dir.join(format!("shard-{shard}"));
                let barrier = &barrier;
                scope.spawn(move || {
                    shard_appends(
                        dir,
                        owned,
                        settings,
                        Rc::new(batch),
                        rounds,
                        barrier,
                        access,
                    )
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|_| Err("a shard thread panicked".into()))
            })
            .collect()
    });
    let mut slowest = Duration::ZERO;
    for result in results {
        slowest = slowest.max(result?);
    }
    let bytes = rounds * batch.len() as u64 * u64::from(partitions);
    Ok((bytes, slowest.as_secs_f64()))
}

/// Reads every message of partition 0 under `data_dir/shard-0` back by
/// offset in polls of `poll_count` through a `Pump`. Returns (bytes of
/// records served, seconds).
fn read_scenario(data_dir: &Path, poll_count: u32, access: Access) -> Result<(u64, f64), String> {
    let dir = data_dir.join("shard-0");
    block_on(|| async move {
        let mut pump = pump(dir, access);
        pump.open(key(0), settings(Durability::Replicated))
            .await
            .map_err(|error| format!("open: {error}"))?;
        let started = Instant::now();
        let mut offset = 0u64;
        let mut bytes = 0u64;
        loop {
            let (reply, answer) = flume::bounded(1);
            pump.apply(PartitionOp::Poll {
                key: key(0),
                request: PollRequest {
                    consumer: None,
                    strategy: PollingStrategy::Offset(offset),
                    count: poll_count,
                    auto_commit: false,
                    bytes_max: iggyd::limits::POLL_REPLY_BYTES,
                },
                reply,
            })
            .await;
            // A poll whose read is in flight is parked: answered once done.
            pump.finish_parked().await;
            pump.commit().await;
            let result = answer
                .try_recv()
                .map_err(|_| "no poll reply".to_owned())?
                .map_err(|error| format!("poll failed: {error}"))?;
            if result.message_count == 0 {
                break;
            }
            bytes += result.bytes.len() as u64;
            offset += u64::from(result.message_count);
        }
        Ok((bytes, started.elapsed().as_secs_f64()))
    })
}

/// Files of a directory whose name ends with `suffix`.
fn files_ending(dir: &Path, suffix: &str) -> Result<Vec<PathBuf>, String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|error| io_error("list", dir, error))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.to_string_lossy().ends_with(suffix))
        .collect();
    files.sort();
    Ok(files)
}

/// Writes ~`bytes` of clean segments into `dir` through `PartitionLog`
/// (sealed by rotation, synced), then times a fresh `PartitionLog::open`
/// (after dropping the page cache when `cold`). Returns (stored bytes, open
/// seconds, raw index read seconds); the raw read runs after the open when
/// cold, so that the open meets the cold cache.
fn recovery_scenario(
    dir: &Path,
    batch: &[u8],
    bytes: u64,
    segment_bytes: u64,
    cold: bool,
) -> Result<(u64, f64, f64), String> {
    let batches = (bytes / batch.len() as u64).max(1);
    let batch = batch.to_vec();
    let dir_owned = dir.to_path_buf();
    block_on(|| async move {
        let config = PartitionConfig::new(0, segment_bytes);
        write_log(&dir_owned, config, 32 * 1024 * 1024, &batch, batches).await
    })?;
    let stored: u64 = files_ending(dir, ".log")?
        .iter()
        .filter_map(|path| std::fs::metadata(path).ok())
        .map(|metadata| metadata.len())
        .sum();
    // Raw baseline: read every index file.
    let raw_index_read = || -> Result<f64, String> {
        if cold && !drop_caches() {
            return Err("dropping caches needs root".into());
        }
        let started = Instant::now();
        for path in files_ending(dir, ".index")? {
            std::fs::read(&path).map_err(|error| io_error("read", &path, error))?;
        }
        Ok(started.elapsed().as_secs_f64())
    };
    let raw_seconds = raw_index_read()?;
    if cold && !drop_caches() {
        return Err("dropping caches needs root".into());
    }
    let dir_owned = dir.to_path_buf();
    let open_seconds = block_on(|| async move {
        let started = Instant::now();
        let log = PartitionLog::open(
            MonoioIo,
            &dir_owned,
            PartitionConfig::new(0, segment_bytes),
            Rc::new(SystemClock),
            BufferPool::new(1024 * 1024),
        )
        .await
        .map_err(|error| format!("recover: {error}"))?;
        let seconds = started.elapsed().as_secs_f64();
        assert!(log.recovery_report().torn_tail.is_none());
        Ok::<_, String>(seconds)
    })?;
    Ok((stored, open_seconds, raw_seconds))
}

/// Creates `partitions` partitions with `segments` small segments each,
/// then opens them all in one `Pump` and measures the RSS growth, in a
/// fresh child process when `child` names this benchmark's executable (so
/// that memory freed by earlier measurements cannot hide the growth).
/// Returns (RSS before KiB, RSS after KiB, approximate heap bytes per
/// partition from `PartitionStats::memory_bytes`).
fn idle_scenario(
    dir: &Path,
    partitions: u32,
    segments: u32,
    message_size: usize,
    child: Option<&Path>,
) -> Result<(u64, u64, f64), String> {
    // Batches of ~16 KiB in segments of one batch: every append rotates.
    let batch = producer_batch(16, message_size.min(1000), 3);
    let segment_bytes = batch.len() as u64;
    let data_dir = dir.to_path_buf();
    block_on(|| async move {
        for partition in 0..partitions {
            let path = key(partition).dir(&data_dir);
            let config = PartitionConfig::new(u64::from(partition), segment_bytes);
            write_log(&path, config, 1024 * 1024, &batch, u64::from(segments)).await?;
        }
        Ok::<_, String>(())
    })?;
    let Some(child) = child else {
        return idle_open(dir, partitions, segment_bytes);
    };
    let output = std::process::Command::new(child)
        .arg("--idle-child")
        .arg(dir)
        .args(["--idle-partitions", &partitions.to_string()])
        .args(["--idle-segment-bytes", &segment_bytes.to_string()])
        .output()
        .map_err(|error| format!("running {}: {error}", child.display()))?;
    if !output.status.success() {
        return Err(format!(
            "idle child failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let answer: Value = serde_json::from_slice(&output.stdout)
        .map_err(|error| format!("idle child output: {error}"))?;
    let field = |name: &str| {
        answer[name]
            .as_f64()
            .ok_or(format!("idle child: no {name}"))
    };
    Ok((
        field("rss_before_kib")? as u64,
        field("rss_after_kib")? as u64,
        field("heap_per_partition_bytes")?,
    ))
}

/// Opens `partitions` existing partitions under `dir` in one `Pump` and
/// returns (RSS before KiB, RSS after KiB, heap bytes per partition). Run in
/// a fresh process by `iggyd-storage-bench --idle-child`.
pub fn idle_open(
    dir: &Path,
    partitions: u32,
    segment_bytes: u64,
) -> Result<(u64, u64, f64), String> {
    let data_dir = dir.to_path_buf();
    block_on(|| async move {
        let mut pump = pump(data_dir, Access::Buffered);
        let settings = PartitionSettings {
            segment_size_bytes: segment_bytes,
            ..settings(Durability::Replicated)
        };
        let before = iggyd_testkit::daemon::status_kib(std::process::id(), "VmRSS").unwrap_or(0);
        for partition in 0..partitions {
            pump.open(key(partition), settings)
                .await
                .map_err(|error| format!("open: {error}"))?;
        }
        let after = iggyd_testkit::daemon::status_kib(std::process::id(), "VmRSS").unwrap_or(0);
        let (reply, answer) = flume::bounded(1);
        pump.apply(PartitionOp::Report { reply }).await;
        let reports = answer
            .try_recv()
            .map_err(|_| "no report".to_owned())?
            .map_err(|error| format!("report: {error}"))?;
        let heap: usize = reports.iter().map(|report| report.stats.memory_bytes).sum();
        Ok((before, after, heap as f64 / f64::from(partitions.max(1))))
    })
}

/// Writes back every dirty page (sync(2)) so that one measurement does not
/// pay for the writeback of the previous one.
fn settle() {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
}

/// Drops clean page-cache pages (root only) so the next read comes from the
/// device. Returns false when not permitted.
fn drop_caches() -> bool {
    settle();
    std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

/// Per-repetition numbers.
#[derive(Debug, Clone, Default)]
struct Sample {
    raw_buffered: f64,
    raw_fsync: f64,
    raw_fsync_uring: f64,
    append: Vec<(String, f64)>,
    raw_read: f64,
    raw_read_fresh: f64,
    read: f64,
}

const MB: f64 = 1_000_000.0;

/// Runs the whole storage benchmark and returns the table rows and the raw
/// JSON of every sample.
pub fn run(config: &StorageConfig) -> Result<(Vec<Row>, Value), String> {
    let root = config
        .dir
        .join(format!("iggyd-storage-bench-{}", std::process::id()));
    std::fs::create_dir_all(&root).map_err(|error| io_error("create", &root, error))?;
    let result = run_in(config, &root);
    let _ = std::fs::remove_dir_all(&root);
    result
}

fn run_in(config: &StorageConfig, root: &Path) -> Result<(Vec<Row>, Value), String> {
    let batch = producer_batch(config.messages_per_batch, config.message_size, 11);
    let chunk = batch.clone();
    // Replicated topics fsync once `messages_required_to_save` (1024) or
    // `size_of_messages_required_to_save` (1 MiB) are unsynced; the
    // "thresholds off" variants show the write path without those fsyncs.
    let no_thresholds = PartitionSettings {
        messages_required_to_save: u64::MAX,
        size_required_to_save_bytes: u64::MAX,
        ..settings(Durability::Replicated)
    };
    let durabilities = [
        ("replicated", settings(Durability::Replicated)),
        ("replicated, thresholds off", no_thresholds),
        ("persisted", settings(Durability::Persisted)),
    ];
    // Every durability on 1 partition (1 shard), then on 8 (2 shards); the
    // first scenario is also read back.
    let scenarios: Vec<(String, u32, u32, PartitionSettings)> =
        [(1, 1, "partition"), (8, 2, "partitions")]
            .into_iter()
            .flat_map(|(partitions, shards, noun)| {
                durabilities.map(|(durability, settings)| {
                    let name = format!("append {partitions} {noun} {durability}");
                    (name, partitions, shards, settings)
                })
            })
            .collect();
    let mut samples = Vec::new();
    for repetition in 0..config.repeat.max(1) {
        let mut sample = Sample::default();
        let raw_path = root.join("raw.bin");
        settle();
        sample.raw_buffered = config.append_bytes as f64
            / MB
            / raw_write(&raw_path, &chunk, config.append_bytes, false)?;
        settle();
        sample.raw_fsync = config.append_bytes as f64
            / MB
            / raw_write(&raw_path, &chunk, config.append_bytes, true)?;
        settle();
        sample.raw_fsync_uring = config.append_bytes as f64
            / MB
            / raw_write_uring(&raw_path, &chunk, config.append_bytes, true)?;
        for (number, (name, partitions, shards, settings)) in scenarios.iter().enumerate() {
            let data_dir = root.join(format!("append-{repetition}-{number}"));
            settle();
            let (bytes, seconds) = append_scenario(
                &data_dir,
                *partitions,
                *shards,
                *settings,
                &batch,
                config.append_bytes,
                config.access,
            )?;
            sample
                .append
                .push((name.clone(), bytes as f64 / MB / seconds));
            if number == 0 {
                // Read it back: raw sequential read of the segment, then
                // the pump's polls (both from page cache).
                let partition_dir = key(0).dir(&data_dir.join("shard-0"));
                let segment = files_ending(&partition_dir, ".log")?
                    .into_iter()
                    .next()
                    .ok_or("no segment written")?;
                let (raw_bytes, raw_seconds) = raw_read(&segment, 8 * 1024 * 1024, false)?;
                sample.raw_read = raw_bytes as f64 / MB / raw_seconds;
                let (raw_bytes, raw_seconds) = raw_read(&segment, 8 * 1024 * 1024, true)?;
                sample.raw_read_fresh = raw_bytes as f64 / MB / raw_seconds;
                let (read_bytes, read_seconds) =
                    read_scenario(&data_dir, config.poll_count, config.access)?;
                sample.read = read_bytes as f64 / MB / read_seconds;
            }
            std::fs::remove_dir_all(&data_dir)
                .map_err(|error| io_error("remove", &data_dir, error))?;
        }
        samples.push(sample);
    }

    let recovery_dir = root.join("recovery");
    let (recovered_bytes, open_seconds, index_seconds) = recovery_scenario(
        &recovery_dir,
        &batch,
        config.recovery_bytes,
        config.recovery_segment_bytes,
        config.cold_recovery,
    )?;
    std::fs::remove_dir_all(&recovery_dir)
        .map_err(|error| io_error("remove", &recovery_dir, error))?;

    let idle_dir = root.join("idle");
    let (rss_before, rss_after, heap_per_partition) = idle_scenario(
        &idle_dir,
        config.idle_partitions,
        config.idle_segments,
        config.message_size,
        config.idle_child.as_deref(),
    )?;

    Ok(build_rows(
        config,
        &samples,
        (recovered_bytes, open_seconds, index_seconds),
        (rss_before, rss_after, heap_per_partition),
    ))
}

fn build_rows(
    config: &StorageConfig,
    samples: &[Sample],
    recovery: (u64, f64, f64),
    idle: (u64, u64, f64),
) -> (Vec<Row>, Value) {
    let pick = |get: &dyn Fn(&Sample) -> f64| -> (f64, Vec<f64>) {
        let values: Vec<f64> = samples.iter().map(get).collect();
        (median(&values), values)
    };
    let (raw_buffered, raw_buffered_samples) = pick(&|sample| sample.raw_buffered);
    let (raw_fsync, raw_fsync_samples) = pick(&|sample| sample.raw_fsync);
    let (raw_fsync_uring, raw_fsync_uring_samples) = pick(&|sample| sample.raw_fsync_uring);
    let mut rows = vec![
        Row {
            name: "raw buffered write".into(),
            value: raw_buffered,
            baseline_name: String::new(),
            baseline: None,
            unit: "MB/s".into(),
            higher_is_better: true,
            target: Target::None,
            samples: raw_buffered_samples,
        },
        Row {
            name: "raw write + fdatasync per chunk".into(),
            value: raw_fsync,
            baseline_name: String::new(),
            baseline: None,
            unit: "MB/s".into(),
            higher_is_better: true,
            target: Target::None,
            samples: raw_fsync_samples,
        },
        Row {
            name: "raw write + fdatasync per chunk (io_uring)".into(),
            value: raw_fsync_uring,
            baseline_name: String::new(),
            baseline: None,
            unit: "MB/s".into(),
            higher_is_better: true,
            target: Target::None,
            samples: raw_fsync_uring_samples,
        },
    ];
    let names: Vec<String> = samples
        .first()
        .map(|sample| sample.append.iter().map(|(name, _)| name.clone()).collect())
        .unwrap_or_default();
    for (index, name) in names.iter().enumerate() {
        let (value, values) = pick(&|sample| sample.append[index].1);
        let persisted = name.ends_with("persisted");
        let (baseline_name, baseline) = if persisted {
            ("raw write+fsync", raw_fsync)
        } else {
            ("raw buffered", raw_buffered)
        };
        let target = match (persisted, name.contains("8 partitions")) {
            (false, _) => Target::RatioAtLeast(0.8),
            (true, true) => Target::RatioAtLeast(0.5),
            (true, false) => Target::None,
        };
        rows.push(Row {
            name: name.clone(),
            value,
            baseline_name: baseline_name.into(),
            baseline: Some(baseline),
            unit: "MB/s".into(),
            higher_is_better: true,
            target,
            samples: values,
        });
    }
    let (read, read_samples) = pick(&|sample| sample.read);
    let (raw_read, _) = pick(&|sample| sample.raw_read);
    let (raw_read_fresh, _) = pick(&|sample| sample.raw_read_fresh);
    let read_row = Row {
        name: format!("read by offset, polls of {}", config.poll_count),
        value: read,
        baseline_name: "raw sequential read".into(),
        baseline: Some(raw_read),
        unit: "MB/s".into(),
        higher_is_better: true,
        target: Target::RatioAtLeast(0.8),
        samples: read_samples,
    };
    rows.push(read_row.clone());
    rows.push(Row {
        name: format!(
            "read by offset, polls of {} (vs fresh buffers)",
            config.poll_count
        ),
        baseline_name: "raw read, fresh buffer per read".into(),
        baseline: Some(raw_read_fresh),
        target: Target::None,
        ..read_row
    });
    let (recovered_bytes, open_seconds, index_seconds) = recovery;
    rows.push(Row {
        name: format!(
            "recovery of {:.0} MiB in {} MiB segments ({} cache)",
            recovered_bytes as f64 / 1048576.0,
            config.recovery_segment_bytes / 1048576,
            if config.cold_recovery { "cold" } else { "warm" }
        ),
        value: open_seconds * 1000.0,
        baseline_name: "raw index read".into(),
        baseline: Some(index_seconds * 1000.0),
        unit: "ms".into(),
        higher_is_better: false,
        target: Target::ValueAtMost(1000.0),
        samples: vec![open_seconds * 1000.0],
    });
    let (rss_before, rss_after, heap_per_partition) = idle;
    let per_partition_kib =
        rss_after.saturating_sub(rss_before) as f64 / f64::from(config.idle_partitions.max(1));
    rows.push(Row {
        name: format!(
            "idle RSS per partition ({} partitions x {} segments)",
            config.idle_partitions, config.idle_segments
        ),
        value: per_partition_kib,
        baseline_name: String::new(),
        baseline: None,
        unit: "KiB".into(),
        higher_is_better: false,
        target: Target::ValueAtMost(64.0),
        samples: vec![per_partition_kib],
    });
    rows.push(Row {
        name: "idle heap per partition (PartitionStats)".into(),
        value: heap_per_partition / 1024.0,
        baseline_name: String::new(),
        baseline: None,
        unit: "KiB".into(),
        higher_is_better: false,
        target: Target::None,
        samples: vec![heap_per_partition / 1024.0],
    });
    let json = json!({
        "driver": driver_name(),
        "samples": samples.iter().map(|sample| json!({
            "raw_buffered_mb_s": sample.raw_buffered,
            "raw_fsync_mb_s": sample.raw_fsync,
            "raw_fsync_io_uring_mb_s": sample.raw_fsync_uring,
            "append_mb_s": sample.append.iter().map(|(name, value)| json!({"name": name, "mb_s": value})).collect::<Vec<_>>(),
            "raw_read_mb_s": sample.raw_read,
            "raw_read_fresh_buffer_mb_s": sample.raw_read_fresh,
            "read_mb_s": sample.read,
        })).collect::<Vec<_>>(),
        "recovery": {"bytes": recovered_bytes, "open_ms": open_seconds * 1000.0, "raw_index_read_ms": index_seconds * 1000.0},
        "idle": {"partitions": config.idle_partitions, "rss_before_kib": rss_before, "rss_after_kib": rss_after, "heap_per_partition_bytes": heap_per_partition},
    });
    (rows, json)
}
