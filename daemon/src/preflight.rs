//! Checks that run before any shard starts, so that a daemon that cannot work
//! fails with one readable paragraph and an exit code instead of a panic or an
//! OOM inside a shard: the memory budget against what the machine and the
//! cgroup can give, the data directory (writable, not used by another
//! daemon), and the I/O driver. Also raises the soft open-files limit, since
//! every client connection is a descriptor. Nothing here starts threads or
//! binds ports.

use crate::cgroup::CgroupLimits;
use crate::limits;
use std::fs::File;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    #[error("{0}")]
    Memory(String),
    #[error(
        "data directory {path} is not usable: {source}. Set `data_dir` (or --data-dir) to a writable directory"
    )]
    DataDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "data directory {path} is already in use by another iggyd (lock {lock} is held). Stop that daemon or choose another `data_dir`"
    )]
    DataDirLocked { path: PathBuf, lock: PathBuf },
    #[error(
        "io_uring is unavailable ({reason}) and `sharding.require_io_uring` is true. Allow io_uring (kernel.io_uring_disabled=0, LimitMEMLOCK=infinity, no seccomp filter on io_uring_setup) or set `sharding.require_io_uring = false` to use epoll"
    )]
    IoUring { reason: String },
}

/// What the machine and the cgroup can give, and the split across shards.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MemoryPlan {
    /// `MemAvailable` from /proc/meminfo.
    pub mem_available_bytes: u64,
    /// The cgroup's `memory.max`, if any.
    pub cgroup_max_bytes: Option<u64>,
    /// min(MemAvailable, memory.max).
    pub available_bytes: u64,
    pub budget_bytes: u64,
    /// True when `memory.budget = "auto"`.
    pub derived: bool,
    pub shards: usize,
    pub per_shard_bytes: u64,
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// Parse `MemAvailable` out of /proc/meminfo content (kB units).
pub fn parse_mem_available(meminfo: &str) -> Option<u64> {
    meminfo.lines().find_map(|line| {
        let rest = line.strip_prefix("MemAvailable:")?;
        let kib: u64 = rest.trim().strip_suffix("kB")?.trim().parse().ok()?;
        kib.checked_mul(1024)
    })
}

/// Check the memory budget. `configured` is `memory.budget` (`None` = auto).
pub fn plan_memory(
    configured: Option<u64>,
    shards: usize,
    mem_available_bytes: u64,
    cgroup: &CgroupLimits,
) -> Result<MemoryPlan, PreflightError> {
    assert!(shards > 0);
    let available_bytes = match cgroup.memory_max_bytes {
        Some(max) => mem_available_bytes.min(max),
        None => mem_available_bytes,
    };
    let limit_text = match cgroup.memory_max_bytes {
        Some(max) => format!(
            "MemAvailable is {} and the cgroup's memory.max is {}",
            mib(mem_available_bytes),
            mib(max)
        ),
        None => format!(
            "MemAvailable is {} (no cgroup memory.max)",
            mib(mem_available_bytes)
        ),
    };
    let derived = configured.is_none();
    let budget_bytes = match configured {
        Some(bytes) => bytes,
        None => {
            (u128::from(available_bytes) * u128::from(limits::DERIVED_BUDGET_PERCENT) / 100) as u64
        }
    };
    let shards_u64 = shards as u64;
    let needed = limits::SHARD_MEMORY_MIN_BYTES.saturating_mul(shards_u64);
    if !derived && budget_bytes > available_bytes {
        return Err(PreflightError::Memory(format!(
            "memory.budget is {} but this machine can give only {}: {limit_text}. \
             Lower `memory.budget` (or set it to \"auto\"), free memory, or raise the \
             service's MemoryMax=.",
            mib(budget_bytes),
            mib(available_bytes)
        )));
    }
    if budget_bytes < needed {
        let source = if derived {
            format!(
                "the derived memory budget ({}% of {}) is {}",
                limits::DERIVED_BUDGET_PERCENT,
                mib(available_bytes),
                mib(budget_bytes)
            )
        } else {
            format!("memory.budget is {}", mib(budget_bytes))
        };
        return Err(PreflightError::Memory(format!(
            "{source}, but {shards} shards need at least {} each ({} in all); {limit_text}. \
             Raise `memory.budget`, run fewer shards with `sharding.cpu_allocation` \
             (a number N, or an explicit PU list), or give the service more memory \
             (MemoryMax=).",
            mib(limits::SHARD_MEMORY_MIN_BYTES),
            mib(needed)
        )));
    }
    Ok(MemoryPlan {
        mem_available_bytes,
        cgroup_max_bytes: cgroup.memory_max_bytes,
        available_bytes,
        budget_bytes,
        derived,
        shards,
        per_shard_bytes: budget_bytes / shards_u64,
    })
}

/// Read /proc/meminfo and check the budget.
pub fn check_memory(
    configured: Option<u64>,
    shards: usize,
    cgroup: &CgroupLimits,
) -> Result<MemoryPlan, PreflightError> {
    let meminfo = std::fs::read_to_string("/proc/meminfo")
        .map_err(|error| PreflightError::Memory(format!("cannot read /proc/meminfo: {error}")))?;
    let available = parse_mem_available(&meminfo).ok_or_else(|| {
        PreflightError::Memory("/proc/meminfo has no readable MemAvailable line".to_string())
    })?;
    plan_memory(configured, shards, available, cgroup)
}

/// Held for the whole run: an exclusive `flock` on `<data_dir>/iggyd.lock`, so
/// two daemons never write one data directory.
#[derive(Debug)]
pub struct DataDirLock {
    _lock: nix::fcntl::Flock<File>,
}

/// Why [`lock_exclusive`] did not take its lock.
#[derive(Debug)]
pub(crate) enum LockError {
    /// Another process holds it.
    Held,
    Io(std::io::Error),
}

/// Opens (creating it) `lock_path` and takes an exclusive, non-blocking
/// `flock` on it, held as long as the returned value lives.
pub(crate) fn lock_exclusive(lock_path: &Path) -> Result<nix::fcntl::Flock<File>, LockError> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock_path)
        .map_err(LockError::Io)?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).map_err(
        |(_, errno)| {
            if errno == nix::errno::Errno::EWOULDBLOCK {
                LockError::Held
            } else {
                LockError::Io(std::io::Error::from(errno))
            }
        },
    )
}

/// Create the data directory if needed, prove it is writable, and lock it.
pub fn prepare_data_dir(path: &Path) -> Result<DataDirLock, PreflightError> {
    let wrap = |source| PreflightError::DataDir {
        path: path.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(path).map_err(wrap)?;
    let lock_path = path.join("iggyd.lock");
    let lock = lock_exclusive(&lock_path).map_err(|error| match error {
        LockError::Held => PreflightError::DataDirLocked {
            path: path.to_path_buf(),
            lock: lock_path.clone(),
        },
        LockError::Io(source) => wrap(source),
    })?;
    let probe = path.join(".iggyd-write-probe");
    std::fs::write(&probe, b"probe").map_err(wrap)?;
    std::fs::remove_file(&probe).map_err(wrap)?;
    Ok(DataDirLock { _lock: lock })
}

/// The I/O driver each shard's runtime uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Driver {
    IoUring,
    Epoll,
}

impl std::fmt::Display for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Driver::IoUring => "io_uring",
            Driver::Epoll => "epoll",
        })
    }
}

/// Pick the driver: io_uring when the kernel offers every operation monoio
/// uses (and `MONOIO_FORCE_LEGACY_DRIVER` is not set), else epoll, or an
/// error when io_uring is required.
/// Fixes the allocator's mmap threshold at `limits::MMAP_THRESHOLD_BYTES`
/// (see there): large blocks go back to the system when freed, so the
/// memory a burst of large polls took does not stay with the process.
/// Called once, before any thread starts.
pub fn fix_mmap_threshold() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let threshold = i32::try_from(crate::limits::MMAP_THRESHOLD_BYTES).unwrap_or(i32::MAX);
        // SAFETY: mallopt only changes glibc's tuning; called before any
        // other thread exists.
        let done = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, threshold) };
        if done != 1 {
            tracing::warn!(
                "mallopt(M_MMAP_THRESHOLD) refused; freed large buffers may stay in the heap"
            );
        }
    }
}

pub fn choose_driver(require_io_uring: bool) -> Result<Driver, PreflightError> {
    if monoio::utils::detect_uring() {
        return Ok(Driver::IoUring);
    }
    let reason = if std::env::var_os("MONOIO_FORCE_LEGACY_DRIVER").is_some() {
        "MONOIO_FORCE_LEGACY_DRIVER is set".to_string()
    } else {
        match std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled") {
            Ok(value) if value.trim() != "0" => {
                format!("kernel.io_uring_disabled = {}", value.trim())
            }
            _ => "io_uring_setup failed or lacks required operations".to_string(),
        }
    };
    if require_io_uring {
        return Err(PreflightError::IoUring { reason });
    }
    tracing::warn!(%reason, "io_uring unavailable, shards use the epoll driver");
    Ok(Driver::Epoll)
}

/// Whether the data directory's file system takes direct I/O: a probe file
/// is created with `O_DIRECT` and one aligned block written and synced. A
/// file system that refuses (tmpfs, some overlay set-ups) makes the daemon
/// write segments through the page cache, said in one log line; so does
/// `wanted = Buffered`.
pub fn choose_access(data_dir: &Path, wanted: iggyd_storage::Access) -> iggyd_storage::Access {
    use iggyd_storage::Access;
    if wanted == Access::Buffered {
        tracing::info!("segments are written through the page cache (storage.io_mode = buffered)");
        return Access::Buffered;
    }
    let probe = data_dir.join(".direct-io-probe");
    let outcome = probe_direct_io(&probe);
    let _ = std::fs::remove_file(&probe);
    match outcome {
        Ok(()) => {
            tracing::info!(data_dir = %data_dir.display(), "segments are written with direct I/O");
            Access::Direct
        }
        Err(error) => {
            tracing::warn!(
                data_dir = %data_dir.display(),
                %error,
                "the data directory's file system refuses direct I/O (O_DIRECT); segments are written through the page cache instead"
            );
            Access::Buffered
        }
    }
}

fn probe_direct_io(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)?;
    let mut block = iggyd_storage::AlignedBuf::with_capacity(iggyd_storage::IO_ALIGN);
    block.zero_extend_to(iggyd_storage::IO_ALIGN);
    file.write_all_at(block.as_slice(), 0)?;
    file.sync_data()
}

/// The open-files limit after [`raise_nofile_limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NofileLimit {
    pub soft_before: u64,
    pub soft: u64,
    pub hard: u64,
}

/// The soft limit to ask for: the hard limit, except that an unlimited hard
/// limit is capped at the kernel's `fs.nr_open` (the largest value
/// setrlimit accepts for RLIMIT_NOFILE).
pub fn nofile_target(hard: u64, nr_open: Option<u64>) -> u64 {
    if hard == nix::sys::resource::RLIM_INFINITY {
        nr_open.unwrap_or(1 << 20)
    } else {
        hard
    }
}

/// Raises the soft RLIMIT_NOFILE to the hard limit. Each client connection
/// holds a descriptor, and shells often start processes with a soft limit
/// of 1,024 (systemd's default soft limit is 1,024 too unless
/// `LimitNOFILE=` says otherwise), far below what a server needs; the hard
/// limit is what the administrator allows. Never fails start-up: a refusal
/// is logged and the daemon runs with the limit it has.
pub fn raise_nofile_limit() -> Option<NofileLimit> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft_before, hard) = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok(limits) => limits,
        Err(error) => {
            tracing::warn!(%error, "cannot read RLIMIT_NOFILE");
            return None;
        }
    };
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|text| text.trim().parse().ok());
    let target = nofile_target(hard, nr_open);
    let soft = if soft_before >= target {
        soft_before
    } else {
        match setrlimit(Resource::RLIMIT_NOFILE, target, hard) {
            Ok(()) => target,
            Err(error) => {
                tracing::warn!(%error, soft_before, target, "cannot raise the soft RLIMIT_NOFILE");
                soft_before
            }
        }
    };
    tracing::info!(soft_before, soft, hard, "open files limit");
    Some(NofileLimit {
        soft_before,
        soft,
        hard,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;
    const GIB: u64 = 1024 * MIB;

    #[test]
    fn mem_available_parses_kib_lines() {
        let meminfo = "MemTotal:       24000000 kB\nMemFree: 1 kB\nMemAvailable:   2048 kB\n";
        assert_eq!(parse_mem_available(meminfo), Some(2048 * 1024));
        assert_eq!(parse_mem_available("MemTotal: 1 kB\n"), None);
        assert_eq!(parse_mem_available("MemAvailable: lots kB\n"), None);
    }

    #[test]
    fn derived_budget_is_half_of_the_tighter_limit() {
        // The cgroup limit (4 GiB) is tighter than MemAvailable (20 GiB).
        let cgroup = CgroupLimits {
            memory_max_bytes: Some(4 * GIB),
            ..Default::default()
        };
        let plan = plan_memory(None, 2, 20 * GIB, &cgroup).unwrap();
        assert!(plan.derived);
        assert_eq!(plan.available_bytes, 4 * GIB);
        assert_eq!(plan.budget_bytes, 2 * GIB);
        assert_eq!(plan.per_shard_bytes, GIB);
    }

    #[test]
    fn budget_beyond_the_machine_is_refused_with_the_numbers_and_knobs() {
        let cgroup = CgroupLimits {
            memory_max_bytes: Some(GIB),
            ..Default::default()
        };
        let error = plan_memory(Some(8 * GIB), 2, 20 * GIB, &cgroup)
            .unwrap_err()
            .to_string();
        assert!(error.contains("8192.0 MiB"), "{error}");
        assert!(error.contains("1024.0 MiB"), "{error}");
        assert!(error.contains("memory.budget"), "{error}");
        assert!(error.contains("MemoryMax="), "{error}");
    }

    #[test]
    fn too_many_shards_for_the_budget_is_refused_naming_the_shard_knob() {
        // 32 shards x 32 MiB = 1 GiB needed, 512 MiB given: the SMT failure mode.
        let cgroup = CgroupLimits::default();
        let error = plan_memory(Some(512 * MIB), 32, 20 * GIB, &cgroup)
            .unwrap_err()
            .to_string();
        assert!(error.contains("32 shards"), "{error}");
        assert!(error.contains("sharding.cpu_allocation"), "{error}");
        let small_machine = plan_memory(None, 4, 100 * MIB, &cgroup)
            .unwrap_err()
            .to_string();
        assert!(
            small_machine.contains("derived memory budget"),
            "{small_machine}"
        );
    }

    #[test]
    fn data_dir_is_created_and_locked_once() {
        let dir = tempfile::tempdir().unwrap();
        let data_dir = dir.path().join("nested/data");
        let lock = prepare_data_dir(&data_dir).unwrap();
        assert!(data_dir.is_dir());
        let second = prepare_data_dir(&data_dir).unwrap_err();
        assert!(
            matches!(second, PreflightError::DataDirLocked { .. }),
            "{second}"
        );
        drop(lock);
        prepare_data_dir(&data_dir).unwrap();
    }

    // An unlimited hard NOFILE limit is capped at fs.nr_open; a finite one
    // is taken as is. raise_nofile_limit leaves soft == hard (or reports
    // why not) and never lowers the limit.
    #[test]
    fn nofile_limit_is_raised_to_the_hard_limit() {
        use nix::sys::resource::RLIM_INFINITY;
        assert_eq!(nofile_target(RLIM_INFINITY, Some(1_048_576)), 1_048_576);
        assert_eq!(nofile_target(RLIM_INFINITY, None), 1 << 20);
        assert_eq!(nofile_target(20_000, Some(1_048_576)), 20_000);
        let limit = raise_nofile_limit().expect("getrlimit works");
        assert!(limit.soft >= limit.soft_before);
        if limit.hard != RLIM_INFINITY {
            assert_eq!(limit.soft, limit.hard);
        }
    }
}
