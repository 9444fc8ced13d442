//! cgroup v2 limits of this process: `cpu.max` (rounded up to whole CPUs) and
//! `memory.max`. The cgroup directory can be injected (tests, diagnostics);
//! a missing cgroup filesystem means "no limit", never an error.
//!
//! For the process's own cgroup the effective limit is the tightest one on the
//! path from its directory up to the cgroup2 mount point: a parent's `cpu.max`
//! throttles every child, and the kernel shows the child's own file only. An
//! injected directory is read on its own, because there is no hierarchy to
//! trust above a test directory. Malformed files never stop the daemon: they
//! count as "no limit" and leave a warning in [`CgroupLimits::warnings`] for
//! the caller to log (this module does not log, so it stays pure enough to
//! test).

use std::io;
use std::path::{Path, PathBuf};

/// Where cgroup2 is mounted when `/proc/self/mountinfo` cannot tell us.
const DEFAULT_CGROUP2_MOUNT: &str = "/sys/fs/cgroup";

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupLimits {
    /// The directory the limits were read from, if any.
    pub dir: Option<PathBuf>,
    /// Whole CPUs allowed by `cpu.max` (rounded up); `None` = `max` or absent.
    pub cpu_quota: Option<u32>,
    /// Bytes allowed by `memory.max`; `None` = `max` or absent.
    pub memory_max_bytes: Option<u64>,
    /// Problems met while reading (malformed or unreadable files, an
    /// unresolvable cgroup path). Each one already counted as "no limit".
    pub warnings: Vec<String>,
}

impl CgroupLimits {
    /// Read the limits from `dir`, or from this process's own cgroup when `None`.
    pub fn read(dir: Option<&Path>) -> CgroupLimits {
        match dir {
            Some(dir) => {
                let mut limits = CgroupLimits {
                    dir: Some(dir.to_path_buf()),
                    ..CgroupLimits::default()
                };
                limits.merge_dir(dir);
                limits
            }
            None => Self::read_own(),
        }
    }

    /// Read the tightest limits on the path from `leaf` up to `root`, both
    /// included. `leaf` must be `root` or below it; otherwise only `leaf` is
    /// read and a warning says why.
    pub fn read_hierarchy(leaf: &Path, root: &Path) -> CgroupLimits {
        let mut limits = CgroupLimits {
            dir: Some(leaf.to_path_buf()),
            ..CgroupLimits::default()
        };
        if !leaf.starts_with(root) {
            limits.warnings.push(format!(
                "cgroup directory {} is not below the cgroup2 mount {}; reading only that directory",
                leaf.display(),
                root.display()
            ));
            limits.merge_dir(leaf);
            return limits;
        }
        // `ancestors()` walks leaf, parent, ... ; stop after the mount point
        // so nothing outside the cgroup filesystem is ever read.
        for dir in leaf.ancestors() {
            limits.merge_dir(dir);
            if dir == root {
                break;
            }
        }
        limits
    }

    /// This process's cgroup: `/proc/self/cgroup` gives the path, the cgroup2
    /// line of `/proc/self/mountinfo` gives where that path lives.
    fn read_own() -> CgroupLimits {
        let proc_cgroup = match std::fs::read_to_string("/proc/self/cgroup") {
            Ok(text) => text,
            // No procfs or no cgroups at all: no limit, nothing to warn about.
            Err(_) => return CgroupLimits::default(),
        };
        let Some(cgroup_path) = parse_proc_self_cgroup(&proc_cgroup) else {
            // cgroup v1 only: v2 limits do not exist for this process.
            return CgroupLimits::default();
        };
        let mount = std::fs::read_to_string("/proc/self/mountinfo")
            .ok()
            .and_then(|text| parse_cgroup2_mount(&text))
            .unwrap_or_else(|| Cgroup2Mount {
                root: "/".to_string(),
                mount_point: PathBuf::from(DEFAULT_CGROUP2_MOUNT),
            });
        match mount.dir_of(&cgroup_path) {
            Some(leaf) => Self::read_hierarchy(&leaf, &mount.mount_point),
            None => CgroupLimits {
                warnings: vec![format!(
                    "this process's cgroup {cgroup_path:?} lies outside the cgroup2 mount {} \
                     (root {:?}); no cgroup limits applied",
                    mount.mount_point.display(),
                    mount.root
                )],
                ..CgroupLimits::default()
            },
        }
    }

    /// Fold one directory's files into the limits, keeping the tighter value.
    fn merge_dir(&mut self, dir: &Path) {
        if let Some(text) = self.read_file(&dir.join("cpu.max")) {
            match parse_cpu_max(&text) {
                Ok(quota) => self.cpu_quota = tighter(self.cpu_quota, quota),
                Err(why) => self.warnings.push(format!(
                    "ignoring {}: {why}; treating it as no CPU limit",
                    dir.join("cpu.max").display()
                )),
            }
        }
        if let Some(text) = self.read_file(&dir.join("memory.max")) {
            match parse_memory_max(&text) {
                Ok(bytes) => self.memory_max_bytes = tighter(self.memory_max_bytes, bytes),
                Err(why) => self.warnings.push(format!(
                    "ignoring {}: {why}; treating it as no memory limit",
                    dir.join("memory.max").display()
                )),
            }
        }
    }

    /// A missing file is normal (root cgroup, controller not enabled); any
    /// other read error is a warning.
    fn read_file(&mut self, path: &Path) -> Option<String> {
        match std::fs::read_to_string(path) {
            Ok(text) => Some(text),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => {
                self.warnings.push(format!(
                    "cannot read {}: {e}; treating it as no limit",
                    path.display()
                ));
                None
            }
        }
    }
}

fn tighter<T: Ord>(current: Option<T>, new: Option<T>) -> Option<T> {
    match (current, new) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The cgroup v2 path of this process: the `0::PATH` line of
/// `/proc/self/cgroup`. `None` when the process has no v2 cgroup.
pub fn parse_proc_self_cgroup(text: &str) -> Option<String> {
    text.lines()
        .find_map(|line| line.strip_prefix("0::"))
        // A cgroup removed under us shows " (deleted)"; the path is still the
        // best guess of where the limits were.
        .map(|path| path.trim_end_matches(" (deleted)").to_string())
}

/// Where the cgroup2 filesystem is mounted, from `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroup2Mount {
    /// The cgroup path (in this process's cgroup namespace) shown at the mount
    /// point; `/` for an ordinary mount.
    pub root: String,
    pub mount_point: PathBuf,
}

impl Cgroup2Mount {
    /// The directory of `cgroup_path` (as `/proc/self/cgroup` shows it) under
    /// this mount, or `None` if the path is not visible through it.
    pub fn dir_of(&self, cgroup_path: &str) -> Option<PathBuf> {
        let relative = if self.root == "/" {
            cgroup_path.strip_prefix('/')?
        } else {
            let rest = cgroup_path.strip_prefix(self.root.as_str())?;
            // "/a/bc" must not match a mount root of "/a/b".
            if !rest.is_empty() && !rest.starts_with('/') {
                return None;
            }
            rest.trim_start_matches('/')
        };
        // A process outside its cgroup namespace sees "/../..": not below us.
        if relative.split('/').any(|part| part == "..") {
            return None;
        }
        Some(if relative.is_empty() {
            self.mount_point.clone()
        } else {
            self.mount_point.join(relative)
        })
    }
}

/// The first cgroup2 mount in `/proc/self/mountinfo`
/// (`ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER`).
pub fn parse_cgroup2_mount(mountinfo: &str) -> Option<Cgroup2Mount> {
    mountinfo.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        if after.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        let mut fields = before.split_whitespace();
        let root = fields.nth(3)?;
        let mount_point = fields.next()?;
        Some(Cgroup2Mount {
            root: unescape_mountinfo(root),
            mount_point: PathBuf::from(unescape_mountinfo(mount_point)),
        })
    })
}

/// mountinfo escapes space, tab, newline and backslash as `\OOO` (octal).
fn unescape_mountinfo(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let value = bytes[i + 1..i + 4]
                .iter()
                .fold(0u32, |acc, b| acc * 8 + u32::from(b - b'0'));
            if let Ok(byte) = u8::try_from(value) {
                out.push(byte);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `cpu.max`: `max [PERIOD]` = no quota, `QUOTA PERIOD` = QUOTA/PERIOD CPUs,
/// rounded up (1.5 CPUs of time still lets 2 threads run) and at least 1.
pub fn parse_cpu_max(text: &str) -> Result<Option<u32>, String> {
    let malformed =
        || format!("expected `max PERIOD` or `QUOTA PERIOD` (microseconds), found {text:?}");
    let mut fields = text.split_whitespace();
    let quota = fields.next().ok_or_else(malformed)?;
    let period = fields.next();
    if fields.next().is_some() {
        return Err(malformed());
    }
    if quota == "max" {
        // The period does not matter without a quota, but must still be a
        // number if present.
        return match period.map(str::parse::<u64>) {
            None | Some(Ok(_)) => Ok(None),
            Some(Err(_)) => Err(malformed()),
        };
    }
    let quota: u64 = quota.parse().map_err(|_| malformed())?;
    let period: u64 = period
        .ok_or_else(malformed)?
        .parse()
        .map_err(|_| malformed())?;
    if period == 0 {
        return Err(malformed());
    }
    let cpus = quota.div_ceil(period).max(1);
    Ok(Some(u32::try_from(cpus).unwrap_or(u32::MAX)))
}

/// `memory.max`: `max` = no limit, otherwise bytes.
pub fn parse_memory_max(text: &str) -> Result<Option<u64>, String> {
    let value = text.trim();
    if value == "max" {
        return Ok(None);
    }
    value
        .parse::<u64>()
        .map(Some)
        .map_err(|_| format!("expected `max` or a byte count, found {text:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn write(dir: &Path, file: &str, text: &str) {
        fs::create_dir_all(dir).unwrap();
        fs::write(dir.join(file), text).unwrap();
    }

    #[test]
    fn cpu_max_parsing() {
        assert_eq!(parse_cpu_max("max 100000\n"), Ok(None));
        assert_eq!(parse_cpu_max("max"), Ok(None));
        assert_eq!(parse_cpu_max("200000 100000\n"), Ok(Some(2)));
        assert_eq!(parse_cpu_max("150000 100000"), Ok(Some(2)));
        assert_eq!(parse_cpu_max("1000 100000"), Ok(Some(1)));
        assert_eq!(parse_cpu_max("0 100000"), Ok(Some(1)));
        assert!(parse_cpu_max("").is_err());
        assert!(parse_cpu_max("200000").is_err());
        assert!(parse_cpu_max("200000 0").is_err());
        assert!(parse_cpu_max("lots 100000").is_err());
        assert!(parse_cpu_max("1 2 3").is_err());
        assert!(parse_cpu_max("max soon").is_err());
    }

    #[test]
    fn memory_max_parsing() {
        assert_eq!(parse_memory_max("max\n"), Ok(None));
        assert_eq!(parse_memory_max("1073741824\n"), Ok(Some(1 << 30)));
        assert!(parse_memory_max("1G").is_err());
        assert!(parse_memory_max("").is_err());
    }

    #[test]
    fn proc_self_cgroup_parsing() {
        let hybrid = "4:memory:/x\n1:cpu:/\n0::/system.slice/iggyd.service\n";
        assert_eq!(
            parse_proc_self_cgroup(hybrid).as_deref(),
            Some("/system.slice/iggyd.service")
        );
        assert_eq!(parse_proc_self_cgroup("0::/\n").as_deref(), Some("/"));
        assert_eq!(parse_proc_self_cgroup("4:memory:/x\n"), None);
    }

    #[test]
    fn mountinfo_parsing_and_paths() {
        let mountinfo = "\
22 1 0:21 / /proc rw,nosuid - proc proc rw
30 25 0:26 / /sys/fs/cgroup/unified rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate
31 25 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
";
        let mount = parse_cgroup2_mount(mountinfo).unwrap();
        assert_eq!(mount.root, "/");
        assert_eq!(mount.mount_point, PathBuf::from("/sys/fs/cgroup/unified"));
        assert_eq!(
            mount.dir_of("/system.slice/a.service"),
            Some(PathBuf::from(
                "/sys/fs/cgroup/unified/system.slice/a.service"
            ))
        );
        assert_eq!(
            mount.dir_of("/"),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(mount.dir_of("/../../x"), None);
        assert_eq!(
            parse_cgroup2_mount("22 1 0:21 / /proc rw - proc proc rw\n"),
            None
        );

        let escaped = "30 25 0:26 /a\\040b /mnt/cg\\134x rw - cgroup2 none rw\n";
        let mount = parse_cgroup2_mount(escaped).unwrap();
        assert_eq!(mount.root, "/a b");
        assert_eq!(mount.mount_point, PathBuf::from("/mnt/cg\\x"));
        assert_eq!(mount.dir_of("/a b/c"), Some(PathBuf::from("/mnt/cg\\x/c")));
        assert_eq!(mount.dir_of("/a b"), Some(PathBuf::from("/mnt/cg\\x")));
        assert_eq!(mount.dir_of("/a bc"), None);
    }

    #[test]
    fn injected_dir_reads_limits() {
        let tmp = tempfile::tempdir().unwrap();
        write(tmp.path(), "cpu.max", "200000 100000\n");
        write(tmp.path(), "memory.max", "536870912\n");
        let limits = CgroupLimits::read(Some(tmp.path()));
        assert_eq!(limits.cpu_quota, Some(2));
        assert_eq!(limits.memory_max_bytes, Some(512 << 20));
        assert_eq!(limits.dir.as_deref(), Some(tmp.path()));
        assert!(limits.warnings.is_empty());
    }

    #[test]
    fn injected_dir_with_max_or_missing_files_is_unlimited() {
        let tmp = tempfile::tempdir().unwrap();
        let limits = CgroupLimits::read(Some(tmp.path()));
        assert_eq!((limits.cpu_quota, limits.memory_max_bytes), (None, None));
        assert!(limits.warnings.is_empty());

        write(tmp.path(), "cpu.max", "max 100000\n");
        write(tmp.path(), "memory.max", "max\n");
        let limits = CgroupLimits::read(Some(tmp.path()));
        assert_eq!((limits.cpu_quota, limits.memory_max_bytes), (None, None));
        assert!(limits.warnings.is_empty());

        let gone = tmp.path().join("no-such-cgroup");
        let limits = CgroupLimits::read(Some(&gone));
        assert_eq!((limits.cpu_quota, limits.memory_max_bytes), (None, None));
        assert!(limits.warnings.is_empty());
    }

    #[test]
    fn malformed_files_are_no_limit_with_warning() {
        let tmp = tempfile::tempdir().unwrap();
        write(tmp.path(), "cpu.max", "two cpus please\n");
        write(tmp.path(), "memory.max", "1G\n");
        let limits = CgroupLimits::read(Some(tmp.path()));
        assert_eq!((limits.cpu_quota, limits.memory_max_bytes), (None, None));
        assert_eq!(limits.warnings.len(), 2, "{:?}", limits.warnings);
        assert!(limits.warnings[0].contains("cpu.max"));
        assert!(limits.warnings[0].contains("two cpus please"));
        assert!(limits.warnings[1].contains("memory.max"));
    }

    #[test]
    fn injected_dir_ignores_parents() {
        let tmp = tempfile::tempdir().unwrap();
        write(tmp.path(), "cpu.max", "100000 100000\n");
        let child = tmp.path().join("child");
        write(&child, "cpu.max", "400000 100000\n");
        assert_eq!(CgroupLimits::read(Some(&child)).cpu_quota, Some(4));
    }

    #[test]
    fn hierarchy_takes_the_tightest_limit() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("cgroup");
        let slice = root.join("system.slice");
        let leaf = slice.join("iggyd.service");
        // Above the mount point: must never be read.
        write(tmp.path(), "cpu.max", "100000 100000\n");
        write(&root, "memory.max", "max\n");
        write(&slice, "cpu.max", "250000 100000\n");
        write(&slice, "memory.max", "1000\n");
        write(&leaf, "cpu.max", "800000 100000\n");
        write(&leaf, "memory.max", "5000\n");
        let limits = CgroupLimits::read_hierarchy(&leaf, &root);
        assert_eq!(limits.cpu_quota, Some(3));
        assert_eq!(limits.memory_max_bytes, Some(1000));
        assert_eq!(limits.dir.as_deref(), Some(leaf.as_path()));
        assert!(limits.warnings.is_empty());

        // A malformed ancestor does not hide a valid limit further down.
        write(&slice, "cpu.max", "garbage\n");
        let limits = CgroupLimits::read_hierarchy(&leaf, &root);
        assert_eq!(limits.cpu_quota, Some(8));
        assert_eq!(limits.warnings.len(), 1);
    }

    #[test]
    fn hierarchy_outside_root_reads_only_leaf() {
        let tmp = tempfile::tempdir().unwrap();
        let leaf = tmp.path().join("a");
        write(&leaf, "cpu.max", "100000 100000\n");
        let limits = CgroupLimits::read_hierarchy(&leaf, &tmp.path().join("b"));
        assert_eq!(limits.cpu_quota, Some(1));
        assert_eq!(limits.warnings.len(), 1);
    }

    #[test]
    fn own_cgroup_never_fails() {
        // Whatever this machine has (v1, hybrid, v2, none): no panic, and a
        // quota, when present, is at least one CPU.
        let limits = CgroupLimits::read(None);
        assert!(limits.cpu_quota.is_none_or(|q| q >= 1));
    }
}
