//! `iggy snapshot` (GetSnapshotFile, code 11): a ZIP of diagnostics built
//! on a control-plane thread named `snapshot`, never on a shard. The
//! requests arrive over the queue of `net::snapshot_request` (a
//! connection's handler parses one and awaits the bytes; its shard's pump
//! keeps running meanwhile).
//!
//! What the archive holds, by requested type (100 = all but `test`, as the
//! Apache SDK expands it):
//!
//! | type | files |
//! |---|---|
//! | always | `summary.json`: version, host, OS and kernel, process, what was asked |
//! | 1 filesystem_overview | `filesystem_overview.txt`: the data directory tree (sizes, modes), disk usage |
//! | 2 process_list | `process_list.txt`: the host's processes from `/proc`, and this daemon's threads with their CPU time |
//! | 3 resource_usage | `resource_usage.json`: the admin snapshot (per-shard stats, latencies, topics), load average, memory |
//! | 4 test | `test.txt` |
//! | 5 server_logs | `logs/<file>`: the last lines of the newest log files |
//! | 6 server_config | `server_config.toml` (secrets redacted), `plan.json` (`iggyd plan --json`), `metadata.json` (streams, topics, partitions, groups, users and token names; no password hashes or tokens) |
//!
//! Compression: the requested ZIP method (stored, deflated, bzip2, zstd,
//! xz); LZMA (5) cannot be written by the `zip` crate and is answered with
//! "feature unavailable". Sizes are bounded (`limits::SNAPSHOT_*`), so a
//! snapshot stays far below the 64 MiB reply limit.
//!
//! Must not: run on a shard thread, send anything to a shard, or include a
//! secret (the root password, password hashes, token hashes).

use crate::config::Config;
use crate::control::ControlSource;
use crate::net::snapshot_request::{
    Answer, Compression, Job, SnapshotFileError, SnapshotFileRequest, SnapshotFiles, SnapshotJobs,
    SnapshotType,
};
use crate::shard::heartbeat::Heartbeats;
use crate::topology::ShardPlan;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

/// What the worker reads.
pub struct SnapshotSources {
    /// Per-shard stats, the process and topics (the admin snapshot).
    pub admin: Arc<dyn ControlSource>,
    /// For the published metadata view.
    pub heartbeats: Heartbeats,
    pub config: Config,
    pub plan: ShardPlan,
}

/// The running worker; `stop` (or drop) answers what is queued with
/// "stopping" and joins it.
pub struct SnapshotWorker {
    stopping: Arc<AtomicBool>,
    wake: flume::Sender<Job>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for SnapshotWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotWorker").finish_non_exhaustive()
    }
}

impl SnapshotWorker {
    pub fn start(
        files: &SnapshotFiles,
        jobs: SnapshotJobs,
        sources: SnapshotSources,
    ) -> std::io::Result<SnapshotWorker> {
        let stopping = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stopping);
        let thread = std::thread::Builder::new()
            .name("snapshot".into())
            .spawn(move || {
                while let Ok(job) = jobs.0.recv() {
                    let Job::Build(request, reply) = job else {
                        if flag.load(Ordering::SeqCst) {
                            break;
                        }
                        continue;
                    };
                    let answer = if flag.load(Ordering::SeqCst) {
                        Err(SnapshotFileError::Stopping)
                    } else {
                        build(&request, &sources)
                    };
                    if let Err(error) = &answer {
                        tracing::warn!(%error, "snapshot file");
                    }
                    let _ = reply.send(answer);
                }
                // Whatever is still queued hears that the daemon stops.
                while let Ok(Job::Build(_, reply)) = jobs.0.try_recv() {
                    let _ = reply.send(Err(SnapshotFileError::Stopping));
                }
            })?;
        Ok(SnapshotWorker {
            stopping,
            wake: files.waker(),
            thread: Some(thread),
        })
    }

    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.stopping.store(true, Ordering::SeqCst);
            // A full queue still drains: each queued job is answered at once.
            let _ = self.wake.send(Job::Wake);
            let _ = thread.join();
        }
    }
}

impl Drop for SnapshotWorker {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Builds the ZIP for `request`.
pub fn build(request: &SnapshotFileRequest, sources: &SnapshotSources) -> Answer {
    let started = std::time::Instant::now();
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    for kind in &request.types {
        match kind {
            SnapshotType::FilesystemOverview => files.push((
                "filesystem_overview.txt".into(),
                contents::filesystem_overview(&sources.config.data_dir).into_bytes(),
            )),
            SnapshotType::ProcessList => files.push((
                "process_list.txt".into(),
                contents::process_list().into_bytes(),
            )),
            SnapshotType::ResourceUsage => files.push((
                "resource_usage.json".into(),
                contents::resource_usage(sources.admin.as_ref()),
            )),
            SnapshotType::Test => files.push(("test.txt".into(), b"test\n".to_vec())),
            SnapshotType::ServerLogs => {
                for (name, tail) in contents::log_tails(&sources.config.logging.dir) {
                    files.push((format!("logs/{name}"), tail));
                }
            }
            SnapshotType::ServerConfig => {
                files.push((
                    "server_config.toml".into(),
                    sources.config.to_toml_redacted().into_bytes(),
                ));
                files.push((
                    "plan.json".into(),
                    serde_json::to_vec_pretty(&sources.plan).unwrap_or_default(),
                ));
                files.push((
                    "metadata.json".into(),
                    contents::metadata(sources.heartbeats.view().as_deref()),
                ));
            }
        }
    }
    let names: Vec<&str> = files.iter().map(|(name, _)| name.as_str()).collect();
    let summary = contents::summary(request, &names, sources.admin.as_ref());
    files.insert(0, ("summary.json".into(), summary));
    let zip = write_zip(request.compression, &files)?;
    tracing::info!(
        compression = request.compression.name(),
        types = ?request.types.iter().map(|kind| kind.name()).collect::<Vec<_>>(),
        bytes = zip.len(),
        took_ms = started.elapsed().as_millis() as u64,
        "snapshot file built"
    );
    Ok(zip)
}

/// `files` as one ZIP archive, every entry compressed with `compression`
/// and stamped with the current time.
fn write_zip(compression: Compression, files: &[(String, Vec<u8>)]) -> Answer {
    let method = zip_method(compression).ok_or(SnapshotFileError::LzmaUnavailable)?;
    let zip_error = |error: zip::result::ZipError| SnapshotFileError::Zip(error.to_string());
    let mut options = zip::write::SimpleFileOptions::default()
        .compression_method(method)
        .unix_permissions(0o644);
    if let Some(now) = zip_time(SystemTime::now()) {
        options = options.last_modified_time(now);
    }
    let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, bytes) in files {
        writer
            .start_file(name.as_str(), options)
            .map_err(zip_error)?;
        writer
            .write_all(bytes)
            .map_err(|error| SnapshotFileError::Zip(error.to_string()))?;
    }
    Ok(writer.finish().map_err(zip_error)?.into_inner())
}

/// `time` as a ZIP (MS-DOS) timestamp in UTC; `None` before 1980.
fn zip_time(time: SystemTime) -> Option<zip::DateTime> {
    let (year, month, day, hour, minute, second, _) = crate::logging::format::utc(time);
    let small = |field: u32| u8::try_from(field).ok();
    zip::DateTime::from_date_and_time(
        u16::try_from(year).ok()?,
        small(month)?,
        small(day)?,
        small(hour)?,
        small(minute)?,
        small(second)?,
    )
    .ok()
}

/// The `zip` crate's method for a requested compression (LZMA has none).
fn zip_method(compression: Compression) -> Option<zip::CompressionMethod> {
    match compression {
        Compression::Stored => Some(zip::CompressionMethod::Stored),
        Compression::Deflated => Some(zip::CompressionMethod::Deflated),
        Compression::Bzip2 => Some(zip::CompressionMethod::Bzip2),
        Compression::Zstd => Some(zip::CompressionMethod::Zstd),
        Compression::Lzma => None,
        Compression::Xz => Some(zip::CompressionMethod::Xz),
    }
}

mod contents;
pub mod save;

#[cfg(test)]
mod tests;
