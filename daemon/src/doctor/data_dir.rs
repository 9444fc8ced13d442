//! What the doctor knows about the data directory before its checks: where
//! to probe (the directory, or the nearest existing parent the daemon would
//! create it in), the file system and device it lives on (from
//! `/proc/self/mountinfo`), the topics' retention from the metadata store,
//! and the bytes the partitions hold now.
//!
//! The metadata store is recovered exactly as start-up does
//! (`MetadataStore::open`), but on a [`ReadOnlyIo`] whose writes stay in
//! memory: a torn tail it would cut, or the member reset it would journal,
//! never reaches the disk. Must not: write anything.

use super::Check;
use iggyd_metadata::io::MetadataIo;
use iggyd_metadata::{Metadata, MetadataStore};
use std::collections::HashMap;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The mountinfo line of a file system.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Mount {
    pub fs_type: String,
    /// The mount source (`/dev/vda1`, `tmpfs`, a server path).
    pub source: String,
    pub mount_point: String,
}

/// The mountinfo line of the file system whose device is `major:minor`
/// (`ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE
/// SOURCE SUPER`).
pub(super) fn find_mount(mountinfo: &str, major: u64, minor: u64) -> Option<Mount> {
    let device = format!("{major}:{minor}");
    mountinfo.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        let mut fields = before.split_whitespace();
        if fields.nth(2)? != device {
            return None;
        }
        let mount_point = fields.nth(1)?.to_string();
        let mut after = after.split_whitespace();
        Some(Mount {
            fs_type: after.next()?.to_string(),
            source: after.next().unwrap_or_default().to_string(),
            mount_point,
        })
    })
}

/// One topic's retention, as the doctor weighs it against free space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TopicRetention {
    /// `stream/topic`.
    pub name: String,
    pub partitions: u64,
    pub segment_size_bytes: u64,
    pub max_topic_size_bytes: Option<u64>,
    pub message_expiry_us: Option<u64>,
}

impl TopicRetention {
    /// The most the topic can hold on disk: its size limit plus an active
    /// segment a partition (size retention never deletes the active one);
    /// `None` without a size limit.
    pub(super) fn bound_bytes(&self) -> Option<u64> {
        self.max_topic_size_bytes.map(|limit| {
            limit.saturating_add(self.partitions.saturating_mul(self.segment_size_bytes))
        })
    }
}

/// The data directory as the doctor found it.
#[derive(Debug)]
pub(super) struct DataDir {
    pub configured: PathBuf,
    /// The configured directory when it exists, else its nearest existing
    /// parent (where the daemon would create it); `None` when neither is a
    /// directory.
    pub probe_dir: Option<PathBuf>,
    pub exists: bool,
    /// `st_dev` of the probe directory as (major, minor).
    pub device: Option<(u64, u64)>,
    pub mount: Option<Mount>,
    /// The topics, or why the metadata store could not be read; empty when
    /// the data directory has no metadata yet.
    pub topics: Result<Vec<TopicRetention>, String>,
    /// Bytes the partition directories take on disk now.
    pub partitions_bytes: u64,
}

impl DataDir {
    pub(super) fn inspect(configured: &Path) -> DataDir {
        let exists = configured.is_dir();
        let probe_dir = configured
            .ancestors()
            .find(|dir| !dir.as_os_str().is_empty() && dir.is_dir())
            .map(Path::to_path_buf)
            .or_else(|| configured.is_relative().then(|| PathBuf::from(".")));
        let device = probe_dir
            .as_deref()
            .and_then(|dir| std::fs::metadata(dir).ok())
            .map(|stat| {
                (
                    nix::sys::stat::major(stat.dev()),
                    nix::sys::stat::minor(stat.dev()),
                )
            });
        let mount = device.and_then(|(major, minor)| {
            let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
            find_mount(&mountinfo, major, minor)
        });
        let (topics, partitions_bytes) = if exists {
            (
                read_topics(&configured.join("metadata")),
                allocated_bytes(&configured.join("partitions")),
            )
        } else {
            (Ok(Vec::new()), 0)
        };
        DataDir {
            configured: configured.to_path_buf(),
            probe_dir,
            exists,
            device,
            mount,
            topics,
            partitions_bytes,
        }
    }

    /// `ext4 on /dev/vda` or what is known of it.
    pub(super) fn file_system(&self) -> String {
        match &self.mount {
            Some(mount) if mount.source.starts_with('/') => {
                format!("{} on {}", mount.fs_type, mount.source)
            }
            Some(mount) => format!("{} at {}", mount.fs_type, mount.mount_point),
            None => "an unknown file system".to_string(),
        }
    }

    /// Partitions the metadata lists (0 when it could not be read).
    pub(super) fn partitions(&self) -> u64 {
        self.topics
            .as_ref()
            .map(|topics| topics.iter().map(|topic| topic.partitions).sum())
            .unwrap_or(0)
    }

    /// The failure of check `id` when neither the data directory nor a
    /// parent of it exists.
    pub(super) fn nowhere_to_probe(&self, id: &'static str) -> Check {
        Check::fail(
            id,
            format!(
                "nowhere to probe: neither data_dir {} nor a parent of it exists",
                self.configured.display()
            ),
            "create the data directory (the packages' tmpfiles.d does) or set data_dir",
        )
    }

    /// Where the probes ran, when that is not the data directory itself.
    pub(super) fn probe_note(&self) -> String {
        match &self.probe_dir {
            Some(dir) if !self.exists => format!(
                " (data_dir {} does not exist yet; probed {}, where it would be created)",
                self.configured.display(),
                dir.display()
            ),
            _ => String::new(),
        }
    }
}

/// Bytes allocated to the files under `dir` (two levels: partitions and
/// their files); 0 when it does not exist.
fn allocated_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut total = 0u64;
    for partition in entries.flatten() {
        let Ok(files) = std::fs::read_dir(partition.path()) else {
            continue;
        };
        for file in files.flatten() {
            if let Ok(stat) = file.metadata() {
                total = total.saturating_add(stat.blocks().saturating_mul(512));
            }
        }
    }
    total
}

/// The metadata store's files, read from the disk; every write kept in
/// memory instead (see the module doc).
#[derive(Debug)]
pub(super) struct ReadOnlyIo {
    dir: PathBuf,
    written: HashMap<String, Vec<u8>>,
}

impl ReadOnlyIo {
    pub(super) fn new(dir: &Path) -> ReadOnlyIo {
        ReadOnlyIo {
            dir: dir.to_path_buf(),
            written: HashMap::new(),
        }
    }

    fn current(&mut self, name: &str) -> io::Result<Vec<u8>> {
        Ok(self.read(name)?.unwrap_or_default())
    }
}

impl MetadataIo for ReadOnlyIo {
    fn read(&mut self, name: &str) -> io::Result<Option<Vec<u8>>> {
        if let Some(bytes) = self.written.get(name) {
            return Ok(Some(bytes.clone()));
        }
        match std::fs::read(self.dir.join(name)) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(error),
        }
    }

    fn append_durable(&mut self, name: &str, bytes: &[u8]) -> io::Result<()> {
        let mut contents = self.current(name)?;
        contents.extend_from_slice(bytes);
        self.written.insert(name.to_string(), contents);
        Ok(())
    }

    fn truncate_durable(&mut self, name: &str, len: u64) -> io::Result<()> {
        let mut contents = self.current(name)?;
        contents.truncate(usize::try_from(len).unwrap_or(usize::MAX));
        self.written.insert(name.to_string(), contents);
        Ok(())
    }

    fn replace_durable(&mut self, name: &str, bytes: &[u8]) -> io::Result<()> {
        self.written.insert(name.to_string(), bytes.to_vec());
        Ok(())
    }

    fn sync_durable(&mut self, _name: &str) -> io::Result<()> {
        Ok(())
    }
}

/// Every topic's retention from the metadata store in `dir`.
fn read_topics(dir: &Path) -> Result<Vec<TopicRetention>, String> {
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let (store, _) = MetadataStore::open(ReadOnlyIo::new(dir)).map_err(|error| {
        format!(
            "the metadata store in {} is unreadable: {error}",
            dir.display()
        )
    })?;
    Ok(topics_of(store.metadata()))
}

fn topics_of(metadata: &Metadata) -> Vec<TopicRetention> {
    metadata
        .streams()
        .flat_map(|stream| {
            stream.topics.values().map(|topic| TopicRetention {
                name: format!("{}/{}", stream.name, topic.name),
                partitions: topic.partitions.len() as u64,
                segment_size_bytes: topic.options.segment_size_bytes,
                max_topic_size_bytes: topic.options.max_topic_size_bytes,
                message_expiry_us: topic.options.message_expiry_us,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves the mount of a device is found by its major:minor, with its
    // type, source and mount point, and another device's line is not taken.
    #[test]
    fn mounts_are_found_by_device() {
        let mountinfo = "\
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
40 22 0:35 / /tmp/t rw - tmpfs tmpfs rw,size=8192k
";
        let root = find_mount(mountinfo, 254, 0).unwrap();
        assert_eq!(
            (
                root.fs_type.as_str(),
                root.source.as_str(),
                root.mount_point.as_str()
            ),
            ("ext4", "/dev/vda", "/")
        );
        assert_eq!(find_mount(mountinfo, 0, 35).unwrap().fs_type, "tmpfs");
        assert_eq!(find_mount(mountinfo, 8, 1), None);
    }

    // Proves a size-limited topic is bounded by its limit plus an active
    // segment a partition, and an unlimited one is not bounded.
    #[test]
    fn a_topic_bound_counts_an_active_segment_a_partition() {
        let topic = TopicRetention {
            name: "s/t".into(),
            partitions: 3,
            segment_size_bytes: 1 << 20,
            max_topic_size_bytes: Some(10 << 20),
            message_expiry_us: None,
        };
        assert_eq!(topic.bound_bytes(), Some(13 << 20));
        let unlimited = TopicRetention {
            max_topic_size_bytes: None,
            ..topic
        };
        assert_eq!(unlimited.bound_bytes(), None);
    }

    // Proves the read-only store keeps writes in memory: a store with a
    // topic and a torn journal tail is recovered (the tail cut in memory
    // only), the topic's retention comes back, and every file on disk is
    // byte for byte what it was, with nothing written beside it.
    #[test]
    fn recovery_through_the_read_only_io_leaves_the_files_alone() {
        use iggyd_metadata::io::StdIo;
        use iggyd_metadata::{Durability, Ident, MetadataCommand, TopicOptions};
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = MetadataStore::open(StdIo::open(dir.path()).unwrap()).unwrap();
        store
            .execute(MetadataCommand::CreateStream {
                name: "orders".into(),
                created_at_us: 1,
            })
            .unwrap();
        let options = TopicOptions {
            max_topic_size_bytes: Some(64 << 20),
            segment_size_bytes: 8 << 20,
            ..TopicOptions::defaults(Durability::Persisted)
        };
        store
            .execute(MetadataCommand::CreateTopic {
                stream: Ident::Id(0),
                name: "created".into(),
                partitions_count: 2,
                options,
                created_at_us: 1,
                shard_count: 1,
            })
            .unwrap();
        drop(store);
        let journal = dir.path().join("metadata.journal");
        let mut bytes = std::fs::read(&journal).unwrap();
        bytes.extend_from_slice(b"a torn record");
        std::fs::write(&journal, &bytes).unwrap();
        let listing = || {
            let mut names: Vec<_> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|entry| entry.unwrap().file_name())
                .collect();
            names.sort();
            names
        };
        let before = listing();

        let topics = read_topics(dir.path()).unwrap();
        assert_eq!(
            topics,
            [TopicRetention {
                name: "orders/created".into(),
                partitions: 2,
                segment_size_bytes: 8 << 20,
                max_topic_size_bytes: Some(64 << 20),
                message_expiry_us: None,
            }]
        );
        assert_eq!(std::fs::read(&journal).unwrap(), bytes);
        assert_eq!(listing(), before);

        let mut io = ReadOnlyIo::new(dir.path());
        io.truncate_durable("metadata.journal", 3).unwrap();
        io.append_durable("metadata.journal", b"!").unwrap();
        assert_eq!(
            io.read("metadata.journal").unwrap().unwrap(),
            [&bytes[..3], b"!"].concat()
        );
        assert_eq!(std::fs::read(&journal).unwrap(), bytes);
    }
}
