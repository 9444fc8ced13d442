//! The doctor's checks of the data directory's storage: whether its file
//! system takes `O_DIRECT` (start-up's own probe, `preflight::choose_access`,
//! after a plain file proved the directory writable), the device behind it
//! (its write cache and FUA as sysfs reports them, or no device at all),
//! and free space against what the topics' retention lets them hold.
//!
//! Must not: write anything but the two probes' files (each removed at
//! once), or change a sysfs setting.

use super::Check;
use super::data_dir::DataDir;
use super::latency::unnamed_file;
use crate::config::IoMode;
use crate::config::human_bytes;
use crate::{limits, preflight};
use std::path::{Path, PathBuf};

/// The O_DIRECT check and whether the segments would be written with it.
pub(super) struct DirectIo {
    pub check: Check,
    pub direct: bool,
}

pub(super) fn o_direct(state: &DataDir, io_mode: IoMode) -> DirectIo {
    const ID: &str = "o_direct";
    let Some(dir) = &state.probe_dir else {
        return DirectIo {
            check: state.nowhere_to_probe(ID),
            direct: false,
        };
    };
    let fs = state.file_system();
    let note = state.probe_note();
    if let Err(error) = unnamed_file(dir, false) {
        return DirectIo {
            check: Check::fail(
                ID,
                format!("cannot create a file in {}: {error}{note}", dir.display()),
                "run the doctor as the service's user (sudo -u iggyd iggyd doctor), and give \
                 that user a writable data directory",
            ),
            direct: false,
        };
    }
    let takes_it = preflight::choose_access(dir, iggyd_storage::Access::Direct)
        == iggyd_storage::Access::Direct;
    let check = match (takes_it, io_mode) {
        (true, IoMode::Direct) => Check::pass(
            ID,
            format!("{fs} takes O_DIRECT (an aligned write and fdatasync){note}"),
        ),
        (true, IoMode::Buffered) => Check::pass(
            ID,
            format!(
                "{fs} takes O_DIRECT, but storage.io_mode = buffered writes through the page \
                 cache{note}"
            ),
        ),
        (false, IoMode::Buffered) => Check::pass(
            ID,
            format!("{fs} refuses O_DIRECT; storage.io_mode = buffered does not need it{note}"),
        ),
        (false, IoMode::Direct) => Check::warn(
            ID,
            format!(
                "{fs} refuses O_DIRECT: segments would go through the page cache (start-up \
                 falls back and logs it){note}"
            ),
            "put data_dir on a file system that takes direct I/O (ext4, xfs), or set \
             storage.io_mode = \"buffered\" to choose the page cache",
        ),
    };
    let fs_type = state
        .mount
        .as_ref()
        .map_or_else(String::new, |mount| mount.fs_type.clone());
    DirectIo {
        check: check.value("direct", takes_it).value("fs_type", fs_type),
        direct: takes_it && io_mode == IoMode::Direct,
    }
}

/// What sysfs says about a block device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Device {
    pub name: String,
    /// `queue/write_cache`: what the kernel believes (`write back` /
    /// `write through`).
    pub write_cache: String,
    /// `queue/fua`.
    pub fua: bool,
    pub rotational: bool,
    /// What the device itself reports (`cache_type` of virtio and SCSI
    /// disks), when sysfs has it.
    pub device_cache: Option<String>,
}

fn read_trimmed(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|text| text.trim().to_string())
}

/// The sysfs directory of the whole disk behind `major:minor` (a
/// partition's parent).
fn sysfs_disk(major: u64, minor: u64) -> Option<PathBuf> {
    let dir = std::fs::canonicalize(format!("/sys/dev/block/{major}:{minor}")).ok()?;
    if dir.join("partition").exists() {
        return dir.parent().map(Path::to_path_buf);
    }
    Some(dir)
}

impl Device {
    fn read(dir: &Path) -> Option<Device> {
        let queue = dir.join("queue");
        let device_cache = read_trimmed(&dir.join("cache_type")).or_else(|| {
            let scsi = dir.join("device/scsi_disk");
            let entry = std::fs::read_dir(scsi).ok()?.flatten().next()?;
            read_trimmed(&entry.path().join("cache_type"))
        });
        Some(Device {
            name: dir.file_name()?.to_string_lossy().into_owned(),
            write_cache: read_trimmed(&queue.join("write_cache"))?,
            fua: read_trimmed(&queue.join("fua")).as_deref() == Some("1"),
            rotational: read_trimmed(&queue.join("rotational")).as_deref() == Some("1"),
            device_cache,
        })
    }
}

/// The device behind the data directory: its own `st_dev`, or for file
/// systems on an anonymous device (btrfs) the mount's `/dev/…` source.
fn device_of(state: &DataDir) -> Option<Device> {
    let direct = state
        .device
        .filter(|(major, _)| *major != 0)
        .and_then(|(major, minor)| sysfs_disk(major, minor));
    let dir = direct.or_else(|| {
        let source = &state.mount.as_ref()?.source;
        if !source.starts_with("/dev/") {
            return None;
        }
        let rdev = std::os::unix::fs::MetadataExt::rdev(&std::fs::metadata(source).ok()?);
        sysfs_disk(nix::sys::stat::major(rdev), nix::sys::stat::minor(rdev))
    })?;
    Device::read(&dir)
}

/// File systems that keep everything in memory.
const MEMORY_FILE_SYSTEMS: &[&str] = &["tmpfs", "ramfs"];

pub(super) fn write_cache(state: &DataDir) -> Check {
    const ID: &str = "write_cache";
    let fs = state.file_system();
    let fs_type = state
        .mount
        .as_ref()
        .map_or("", |mount| mount.fs_type.as_str());
    match device_of(state) {
        Some(device) => device_verdict(&device)
            .value("device", device.name.clone())
            .value("write_cache", device.write_cache.clone())
            .value("fua", device.fua)
            .value("rotational", device.rotational)
            .value("device_cache", device.device_cache.clone()),
        None if MEMORY_FILE_SYSTEMS.contains(&fs_type) => Check::fail(
            ID,
            format!(
                "data_dir is on {fs}: memory, not a device; nothing written, fsynced or not, \
                 survives a reboot{}",
                state.probe_note()
            ),
            "put data_dir on a disk",
        )
        .value("device", Option::<String>::None),
        None => Check::warn(
            ID,
            format!(
                "no block device is visible behind {fs}, so its cache and FUA cannot be read{}",
                state.probe_note()
            ),
            "make sure fsync reaches stable storage on this file system (a container's \
             overlay: put data_dir on a volume)",
        )
        .value("device", Option::<String>::None),
    }
}

fn device_verdict(device: &Device) -> Check {
    const ID: &str = "write_cache";
    let kind = if device.rotational {
        "rotational"
    } else {
        "non-rotational"
    };
    let reported = device
        .device_cache
        .as_ref()
        .map(|cache| format!(", the device reports {cache:?}"))
        .unwrap_or_default();
    let measured = format!(
        "{} ({kind}): kernel sees a {:?} cache, FUA {}{reported}",
        device.name,
        device.write_cache,
        if device.fua { "on" } else { "off" }
    );
    let kernel_write_back = device.write_cache == "write back";
    let device_write_back = device
        .device_cache
        .as_deref()
        .is_some_and(|cache| cache.starts_with("write back"));
    if device_write_back && !kernel_write_back {
        return Check::fail(
            ID,
            format!(
                "{measured}: the device has a volatile cache but the kernel was told it has \
                 none, so fsync sends no flush and acknowledged data can be lost on power loss"
            ),
            &format!(
                "echo \"write back\" > /sys/block/{}/queue/write_cache (and remove whatever \
                 set it, a udev rule or a tuning script)",
                device.name
            ),
        );
    }
    let meaning = match (kernel_write_back, device.fua) {
        (true, true) => "fsync flushes the cache and writes can go through it with FUA",
        (true, false) => "each fsync flushes the whole cache (the latency probe measured it)",
        (false, _) => "no volatile cache, nothing to flush",
    };
    Check::pass(ID, format!("{measured}: {meaning}"))
}

/// Free space against the floor and the topics' retention.
pub(super) fn disk_space(state: &DataDir) -> Check {
    const ID: &str = "disk_space";
    let Some(dir) = &state.probe_dir else {
        return state.nowhere_to_probe(ID);
    };
    let stats = match nix::sys::statvfs::statvfs(dir.as_path()) {
        Ok(stats) => stats,
        Err(error) => {
            return Check::fail(
                ID,
                format!("statvfs({}) failed: {error}", dir.display()),
                "make the data directory readable to the service's user",
            );
        }
    };
    let fragment = stats.fragment_size();
    let free = stats.blocks_available().saturating_mul(fragment);
    let total = stats.blocks().saturating_mul(fragment);
    let space = Space {
        free,
        total,
        held: state.partitions_bytes,
    };
    space_verdict(&space, state.topics.as_ref(), &state.file_system())
        .value("free_bytes", free)
        .value("total_bytes", total)
        .value("partitions_bytes", state.partitions_bytes)
}

/// Bytes of the file system, and what the partitions hold now.
#[derive(Debug, Clone, Copy)]
struct Space {
    free: u64,
    total: u64,
    held: u64,
}

impl Space {
    /// Below this much free space the daemon's file logging pauses, and an
    /// append is a few batches from ENOSPC: min(1 GiB, 5 % of the file
    /// system).
    fn floor(&self) -> u64 {
        limits::low_disk_threshold(self.total)
    }
}

fn space_verdict(
    space: &Space,
    topics: Result<&Vec<super::data_dir::TopicRetention>, &String>,
    fs: &str,
) -> Check {
    const ID: &str = "disk_space";
    let base = format!(
        "{} free of {} on {fs}, {} held by partitions",
        human_bytes(space.free),
        human_bytes(space.total),
        human_bytes(space.held)
    );
    if space.total == 0 {
        return Check::warn(
            ID,
            format!(
                "{fs} reports no size (ramfs grows until memory runs out), so free space \
                 cannot be weighed"
            ),
            "put data_dir on a file system with a size: a disk",
        );
    }
    if space.free < space.floor() {
        return Check::fail(
            ID,
            format!(
                "{base}: under {} (min 1 GiB, 5 %), where file logging pauses and appends are \
                 near ENOSPC",
                human_bytes(space.floor())
            ),
            "free space on this file system, lower the topics' max_topic_size or \
             message_expiry, or grow the volume",
        );
    }
    let topics = match topics {
        Ok(topics) => topics,
        Err(why) => {
            return Check::warn(
                ID,
                format!("{base}; retention not weighed: {why}"),
                "run the doctor as the service's user so it can read the metadata store",
            );
        }
    };
    let bounded: Vec<u64> = topics
        .iter()
        .filter_map(super::data_dir::TopicRetention::bound_bytes)
        .collect();
    let bound: u64 = bounded.iter().fold(0u64, |sum, b| sum.saturating_add(*b));
    let by_age = topics
        .iter()
        .filter(|t| t.max_topic_size_bytes.is_none() && t.message_expiry_us.is_some())
        .count();
    let forever: Vec<&str> = topics
        .iter()
        .filter(|t| t.max_topic_size_bytes.is_none() && t.message_expiry_us.is_none())
        .map(|t| t.name.as_str())
        .collect();
    let room = space.free.saturating_add(space.held);
    let measured = if topics.is_empty() {
        format!("{base}; no topics yet")
    } else {
        format!(
            "{base}; {} topic(s): size limits let {} of them hold up to {} (with an active \
             segment a partition), {by_age} limited by age only, {} without any limit",
            topics.len(),
            bounded.len(),
            human_bytes(bound),
            forever.len()
        )
    };
    let check = if bound > room {
        Check::fail(
            ID,
            format!(
                "{measured}: more than the {} free and held space can give",
                human_bytes(room)
            ),
            "lower max_topic_size of the largest topics, or grow the file system",
        )
    } else if !forever.is_empty() {
        Check::warn(
            ID,
            format!(
                "{measured}: {} keep(s) every message until the disk is full",
                forever.join(", ")
            ),
            "set max_topic_size or message_expiry on these topics (UpdateTopic, `iggy topic \
             update`)",
        )
    } else {
        Check::pass(ID, measured)
    };
    check
        .value("topics", topics.len() as u64)
        .value("bounded_bytes", bound)
        .value("unlimited_topics", forever.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::super::Status;
    use super::super::data_dir::TopicRetention;
    use super::*;

    const GIB: u64 = 1 << 30;

    fn topic(name: &str, max: Option<u64>, expiry: Option<u64>) -> TopicRetention {
        TopicRetention {
            name: name.into(),
            partitions: 1,
            segment_size_bytes: GIB,
            max_topic_size_bytes: max,
            message_expiry_us: expiry,
        }
    }

    // Proves free space under the floor fails whatever the topics, and the
    // floor is 5 % on small file systems and 1 GiB on large ones.
    #[test]
    fn nearly_full_fails() {
        let small = Space {
            free: 4 << 20,
            total: 100 << 20,
            held: 0,
        };
        assert_eq!(small.floor(), 5 << 20);
        let check = space_verdict(&small, Ok(&Vec::new()), "tmpfs on tmpfs");
        assert_eq!(check.status, Status::Fail, "{check:?}");
        let large = Space {
            free: 50 * GIB,
            total: 200 * GIB,
            held: 0,
        };
        assert_eq!(large.floor(), GIB);
        assert_eq!(
            space_verdict(&large, Ok(&Vec::new()), "ext4").status,
            Status::Pass
        );
    }

    // Proves size limits that pass the free and held space fail, a topic
    // without any limit warns, and age-limited topics pass.
    #[test]
    fn retention_is_weighed_against_the_room() {
        let space = Space {
            free: 10 * GIB,
            total: 100 * GIB,
            held: 2 * GIB,
        };
        let fits = vec![
            topic("a/b", Some(5 * GIB), None),
            topic("a/c", None, Some(1)),
        ];
        assert_eq!(
            space_verdict(&space, Ok(&fits), "ext4").status,
            Status::Pass
        );
        // A 12 GiB limit and a 1 GiB active segment: 13 GiB, over the 10 GiB
        // free and 2 GiB held.
        let over = vec![topic("a/b", Some(12 * GIB), None)];
        let check = space_verdict(&space, Ok(&over), "ext4");
        assert_eq!(check.status, Status::Fail, "{check:?}");
        assert_eq!(check.values["bounded_bytes"], 13 * GIB);
        let forever = vec![topic("a/b", None, None)];
        let check = space_verdict(&space, Ok(&forever), "ext4");
        assert_eq!(check.status, Status::Warn);
        assert!(
            check.measured.contains("a/b keep(s) every message"),
            "{check:?}"
        );
        let unreadable = "denied".to_string();
        assert_eq!(
            space_verdict(&space, Err(&unreadable), "ext4").status,
            Status::Warn
        );
    }

    fn device(write_cache: &str, fua: bool, reported: Option<&str>) -> Device {
        Device {
            name: "sda".into(),
            write_cache: write_cache.into(),
            fua,
            rotational: false,
            device_cache: reported.map(str::to_string),
        }
    }

    // Proves a device whose volatile cache the kernel was told away fails,
    // naming the sysfs file that fixes it; honest set-ups pass.
    #[test]
    fn a_cache_the_kernel_does_not_flush_fails() {
        let lie = device_verdict(&device("write through", false, Some("write back")));
        assert_eq!(lie.status, Status::Fail);
        assert!(
            lie.fix
                .unwrap()
                .contains("/sys/block/sda/queue/write_cache")
        );
        for honest in [
            device("write back", true, Some("write back")),
            device("write back", false, None),
            device("write through", false, Some("write through")),
            device("write through", false, None),
        ] {
            assert_eq!(device_verdict(&honest).status, Status::Pass, "{honest:?}");
        }
        assert!(
            device_verdict(&device("write back", false, None))
                .measured
                .contains("flushes the whole cache")
        );
    }
}
