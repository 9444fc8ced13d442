//! The requesting side of `iggy snapshot` (GetSnapshotFile, code 11): a
//! connection's handler parses the request ([`SnapshotFileRequest::parse`],
//! on its shard: cheap, and a bad request never leaves it), sends it over a
//! bounded queue ([`SnapshotFiles`], which every shard's connections hold)
//! and awaits the ZIP's bytes; its shard's pump keeps running meanwhile.
//! The control plane's `snapshot` thread (`control::snapshot_file`) takes
//! the other end of the queue and builds the archive.
//!
//! Must not: build anything or read the daemon's state; it only carries
//! requests and answers, so that `net` never calls up into `control`.

use crate::limits;
use std::collections::BTreeSet;

/// The ZIP compression a client asks for (wire codes 1 to 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    Stored,
    Deflated,
    Bzip2,
    Zstd,
    Lzma,
    Xz,
}

impl Compression {
    pub fn from_code(code: u8) -> Option<Compression> {
        Some(match code {
            1 => Compression::Stored,
            2 => Compression::Deflated,
            3 => Compression::Bzip2,
            4 => Compression::Zstd,
            5 => Compression::Lzma,
            6 => Compression::Xz,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Compression::Stored => "stored",
            Compression::Deflated => "deflated",
            Compression::Bzip2 => "bzip2",
            Compression::Zstd => "zstd",
            Compression::Lzma => "lzma",
            Compression::Xz => "xz",
        }
    }
}

/// What a snapshot may contain (wire codes 1 to 6; 100 = all but `Test`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SnapshotType {
    FilesystemOverview,
    ProcessList,
    ResourceUsage,
    Test,
    ServerLogs,
    ServerConfig,
}

impl SnapshotType {
    pub fn name(self) -> &'static str {
        match self {
            SnapshotType::FilesystemOverview => "filesystem_overview",
            SnapshotType::ProcessList => "process_list",
            SnapshotType::ResourceUsage => "resource_usage",
            SnapshotType::Test => "test",
            SnapshotType::ServerLogs => "server_logs",
            SnapshotType::ServerConfig => "server_config",
        }
    }
}

/// A parsed GetSnapshotFile request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotFileRequest {
    pub compression: Compression,
    pub types: BTreeSet<SnapshotType>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotFileError {
    #[error("unknown snapshot compression {0} (1 stored … 6 xz)")]
    UnknownCompression(u8),
    #[error("unknown snapshot type {0} (1 … 6, or 100 for all)")]
    UnknownType(u8),
    #[error("a snapshot request must name at least one type")]
    NoTypes,
    #[error("LZMA (5) cannot be written into a ZIP here; ask for xz (6) or another method")]
    LzmaUnavailable,
    #[error("the daemon is stopping")]
    Stopping,
    #[error("building the ZIP failed: {0}")]
    Zip(String),
}

impl SnapshotFileRequest {
    /// Checks the request body's fields (done on the shard: cheap, and a bad
    /// request never reaches the worker).
    pub fn parse(compression: u8, types: &[u8]) -> Result<SnapshotFileRequest, SnapshotFileError> {
        let compression = Compression::from_code(compression)
            .ok_or(SnapshotFileError::UnknownCompression(compression))?;
        if compression == Compression::Lzma {
            return Err(SnapshotFileError::LzmaUnavailable);
        }
        let mut parsed = BTreeSet::new();
        for code in types {
            match code {
                1 => parsed.insert(SnapshotType::FilesystemOverview),
                2 => parsed.insert(SnapshotType::ProcessList),
                3 => parsed.insert(SnapshotType::ResourceUsage),
                4 => parsed.insert(SnapshotType::Test),
                5 => parsed.insert(SnapshotType::ServerLogs),
                6 => parsed.insert(SnapshotType::ServerConfig),
                100 => {
                    parsed.extend([
                        SnapshotType::FilesystemOverview,
                        SnapshotType::ProcessList,
                        SnapshotType::ResourceUsage,
                        SnapshotType::ServerLogs,
                        SnapshotType::ServerConfig,
                    ]);
                    true
                }
                other => return Err(SnapshotFileError::UnknownType(*other)),
            };
        }
        if parsed.is_empty() {
            return Err(SnapshotFileError::NoTypes);
        }
        Ok(SnapshotFileRequest {
            compression,
            types: parsed,
        })
    }
}

/// The ZIP's bytes, or why there are none.
pub type Answer = Result<Vec<u8>, SnapshotFileError>;

/// What the queue carries to the control plane's worker.
pub enum Job {
    Build(SnapshotFileRequest, flume::Sender<Answer>),
    /// Wakes the worker so it sees the stop flag.
    Wake,
}

/// The shards' handle: queue a build and await the ZIP.
#[derive(Clone)]
pub struct SnapshotFiles {
    jobs: flume::Sender<Job>,
}

impl SnapshotFiles {
    /// A sender of jobs, for the worker's own wake-up.
    pub fn waker(&self) -> flume::Sender<Job> {
        self.jobs.clone()
    }
}

impl std::fmt::Debug for SnapshotFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotFiles").finish_non_exhaustive()
    }
}

/// The worker's end of the queue, until the worker starts.
pub struct SnapshotJobs(pub flume::Receiver<Job>);

impl std::fmt::Debug for SnapshotJobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotJobs").finish_non_exhaustive()
    }
}

/// A bounded queue: requests beyond `SNAPSHOT_QUEUE_DEPTH` wait (the
/// sender's task, not its shard).
pub fn queue() -> (SnapshotFiles, SnapshotJobs) {
    let (jobs, receiver) = flume::bounded(limits::SNAPSHOT_QUEUE_DEPTH);
    (SnapshotFiles { jobs }, SnapshotJobs(receiver))
}

impl SnapshotFiles {
    /// Queue `request` and wait for its ZIP, blocking the calling thread
    /// until `deadline` at most (for the admin socket's client threads; a
    /// shard uses `build`). `None`: the queue stayed full or the ZIP was not
    /// ready by then (the worker still finishes it and drops the answer).
    pub fn build_until(
        &self,
        request: SnapshotFileRequest,
        deadline: std::time::Instant,
    ) -> Option<Answer> {
        let (reply, answer) = flume::bounded(1);
        match self
            .jobs
            .send_deadline(Job::Build(request, reply), deadline)
        {
            Ok(()) => {}
            Err(flume::SendTimeoutError::Timeout(_)) => return None,
            Err(flume::SendTimeoutError::Disconnected(_)) => {
                return Some(Err(SnapshotFileError::Stopping));
            }
        }
        match answer.recv_deadline(deadline) {
            Ok(built) => Some(built),
            Err(flume::RecvTimeoutError::Timeout) => None,
            Err(flume::RecvTimeoutError::Disconnected) => Some(Err(SnapshotFileError::Stopping)),
        }
    }

    /// Queue `request` and wait for its ZIP without blocking the thread.
    pub async fn build(&self, request: SnapshotFileRequest) -> Answer {
        let (reply, answer) = flume::bounded(1);
        self.jobs
            .send_async(Job::Build(request, reply))
            .await
            .map_err(|_| SnapshotFileError::Stopping)?;
        answer
            .recv_async()
            .await
            .map_err(|_| SnapshotFileError::Stopping)?
    }
}
