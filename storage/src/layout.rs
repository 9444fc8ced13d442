//! The data directory's layout, and its reconciliation with metadata at
//! start-up.
//!
//! ```text
//! data_dir/
//!     metadata/                  journal and snapshot (metadata::store)
//!     partitions/<storage_id>/   one live partition (segments, consumer offsets)
//!     trash/<seq>.<label>        deleted data waiting for the janitor (storage::trash)
//! ```
//!
//! A partition's directory is named by its storage id, which metadata gives
//! out once and never again, so a directory belongs to exactly one
//! partition for ever: a partition created after a delete (same stream,
//! topic and partition ids on the wire) gets a new, empty directory.
//!
//! [`reconcile`] runs before any shard opens a partition. It creates the
//! layout, adopts a data directory written by a version that kept
//! partitions at `streams/<s>/topics/<t>/partitions/<p>` (each partition
//! metadata lists is moved to `partitions/<storage_id>`; the move is
//! finished as a whole, by renaming a staging directory, before anything
//! else is trusted), then moves every directory under `partitions/` that
//! metadata does not list (and whatever is left of the old tree) into the
//! trash, saying so in the log, and hands what the trash holds to the
//! janitor. It never deletes anything itself, and never moves away a
//! directory whose storage id metadata lists.
//!
//! Must not: open partition data, or run while a shard serves requests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::StorageError;
use super::io::StorageIo;
use super::trash::{DiscardError, PendingRemoval, Trash, TrashStart, entry_seq, measure};

/// Directory of the live partitions.
pub const PARTITIONS_DIR: &str = "partitions";
/// Where an upgrade from the old layout gathers partitions before
/// `partitions/` exists.
const MIGRATING_DIR: &str = "partitions.migrating";
/// Root of the old layout (`streams/<s>/topics/<t>/partitions/<p>`).
const LEGACY_STREAMS_DIR: &str = "streams";

/// `data_dir/partitions/<storage_id>`.
pub fn partition_dir(data_dir: &Path, storage_id: u64) -> PathBuf {
    data_dir.join(PARTITIONS_DIR).join(storage_id.to_string())
}

/// Where the old layout kept a partition.
fn legacy_partition_dir(data_dir: &Path, stream: u32, topic: u32, partition: u32) -> PathBuf {
    data_dir
        .join(LEGACY_STREAMS_DIR)
        .join(stream.to_string())
        .join("topics")
        .join(topic.to_string())
        .join("partitions")
        .join(partition.to_string())
}

/// The partitions metadata lists: storage id → (stream, topic, partition).
pub type Listed = BTreeMap<u64, (u32, u32, u32)>;

/// What [`reconcile`] found and did.
#[derive(Debug, Default)]
pub struct Reconciled {
    /// Partitions moved from the old layout: (storage id, old path).
    pub migrated: Vec<(u64, PathBuf)>,
    /// Directories moved to the trash because metadata does not list them.
    pub orphans: Vec<PathBuf>,
    /// The old layout's remains went to the trash.
    pub legacy_discarded: bool,
    /// Directories that could not be moved (left where they are, never
    /// served; their removal is scheduled in place).
    pub stuck: Vec<PathBuf>,
    /// Where the shards' trashes start (all pending entries, and the first
    /// free sequence number).
    pub trash: TrashStart,
}

fn io_error(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> StorageError {
    let path = path.to_path_buf();
    move |source| StorageError::io(op, path, source)
}

/// Lists a directory; a missing one is empty.
async fn list_or_empty<I: StorageIo>(io: &I, dir: &Path) -> Result<Vec<String>, StorageError> {
    match io.list_dir(dir).await {
        Ok(names) => Ok(names),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(error) => Err(StorageError::io("list directory", dir, error)),
    }
}

async fn exists<I: StorageIo>(io: &I, dir: &Path, name: &str) -> Result<bool, StorageError> {
    Ok(list_or_empty(io, dir)
        .await?
        .iter()
        .any(|entry| entry == name))
}

/// Brings the data directory in line with metadata (see the module doc).
pub async fn reconcile<I: StorageIo + Clone>(
    io: &I,
    data_dir: &Path,
    listed: &Listed,
) -> Result<Reconciled, StorageError> {
    let mut reconciled = Reconciled::default();
    let trash_dir = super::trash::trash_dir(data_dir);
    io.create_dir_all(&trash_dir)
        .await
        .map_err(io_error("create directory", &trash_dir))?;
    let already_trashed = list_or_empty(io, &trash_dir).await?;
    let next_seq = already_trashed
        .iter()
        .filter_map(|name| entry_seq(name))
        .max()
        .map_or(0, |seq| seq + 1);
    let mut trash = Trash::new(
        io.clone(),
        data_dir,
        TrashStart {
            next_seq,
            pending: Vec::new(),
        },
    );

    if !exists(io, data_dir, PARTITIONS_DIR).await? {
        migrate_legacy(io, data_dir, listed, &mut reconciled).await?;
    }
    if exists(io, data_dir, LEGACY_STREAMS_DIR).await? {
        // Everything metadata lists was moved out above (in this start or
        // an earlier one that crashed): the rest belongs to no partition.
        let legacy = data_dir.join(LEGACY_STREAMS_DIR);
        let (files, bytes) = measure(io, &legacy).await;
        match trash
            .discard_durably(&legacy, "legacy-streams", bytes)
            .await
        {
            Ok(_) => {
                tracing::warn!(
                    path = %legacy.display(),
                    files,
                    bytes,
                    "old-layout directories that metadata does not list were moved to the trash"
                );
                reconciled.legacy_discarded = true;
            }
            Err(error) => stuck(&mut trash, &mut reconciled, &legacy, bytes, error),
        }
    }

    let partitions = data_dir.join(PARTITIONS_DIR);
    for name in list_or_empty(io, &partitions).await? {
        let live = name.parse::<u64>().is_ok_and(|storage_id| {
            storage_id.to_string() == name && listed.contains_key(&storage_id)
        });
        if live {
            continue;
        }
        let path = partitions.join(&name);
        let (files, bytes) = measure(io, &path).await;
        match trash.discard(&path, &format!("orphan-{name}"), bytes).await {
            Ok(_) => {
                tracing::warn!(
                    path = %path.display(),
                    files,
                    bytes,
                    "partition directory that metadata does not list (deleted before a crash finished removing it): moved to the trash, never served"
                );
                reconciled.orphans.push(path);
            }
            Err(error) => stuck(&mut trash, &mut reconciled, &path, bytes, error),
        }
    }
    if !reconciled.orphans.is_empty()
        && let Err(error) = trash.make_durable(&partitions).await
    {
        // The moves may come undone by a power loss; the next start finds
        // the directories again and moves them again.
        tracing::warn!(%error, "moving orphaned partition directories is not durable yet");
    }

    // What the trash holds now: entries left by earlier runs, then the
    // ones just added (already known to `trash`).
    let mut pending = Vec::new();
    for name in already_trashed {
        let path = trash_dir.join(&name);
        let (_, bytes) = measure(io, &path).await;
        pending.push(PendingRemoval::new(path, bytes));
    }
    pending.extend(trash.pending().cloned());
    let pending_bytes: u64 = pending.iter().map(|entry| entry.bytes).sum();
    if !pending.is_empty() {
        tracing::info!(
            entries = pending.len(),
            bytes = pending_bytes,
            "deleted data pending removal; the trash is emptied in the background"
        );
    }
    reconciled.trash = TrashStart {
        next_seq: trash.next_seq(),
        pending,
    };
    Ok(reconciled)
}

/// A directory that could not be moved to the trash: it stays (never
/// served: metadata does not list it) and is removed where it is.
fn stuck<I: StorageIo>(
    trash: &mut Trash<I>,
    reconciled: &mut Reconciled,
    path: &Path,
    bytes: u64,
    error: DiscardError,
) {
    tracing::warn!(
        path = %path.display(),
        %error,
        "a directory that metadata does not list could not be moved to the trash; it is not served and will be removed in place"
    );
    if matches!(error, DiscardError::NotMoved { .. }) {
        trash.schedule(path.to_path_buf(), bytes);
    }
    reconciled.stuck.push(path.to_path_buf());
}

/// The upgrade from the old layout: every listed partition that has a
/// directory at its old place is moved into the staging directory under
/// its storage id; then the staging directory becomes `partitions/` in one
/// rename. A crash midway leaves no `partitions/`, and the next start goes
/// on from where this one stopped. A fresh data directory takes the same
/// path with nothing to move.
async fn migrate_legacy<I: StorageIo>(
    io: &I,
    data_dir: &Path,
    listed: &Listed,
    reconciled: &mut Reconciled,
) -> Result<(), StorageError> {
    let staging = data_dir.join(MIGRATING_DIR);
    io.create_dir_all(&staging)
        .await
        .map_err(io_error("create directory", &staging))?;
    let staged: BTreeSet<String> = list_or_empty(io, &staging).await?.into_iter().collect();
    let mut touched = BTreeSet::new();
    for (storage_id, (stream, topic, partition)) in listed {
        if staged.contains(&storage_id.to_string()) {
            continue;
        }
        let legacy = legacy_partition_dir(data_dir, *stream, *topic, *partition);
        let Some(parent) = legacy.parent() else {
            continue;
        };
        if !exists(io, parent, &partition.to_string()).await? {
            continue;
        }
        let target = staging.join(storage_id.to_string());
        io.rename(&legacy, &target)
            .await
            .map_err(io_error("move partition to the new layout", &legacy))?;
        tracing::info!(
            from = %legacy.display(),
            to = %target.display(),
            stream,
            topic,
            partition,
            "partition directory moved to the new layout"
        );
        touched.insert(parent.to_path_buf());
        reconciled.migrated.push((*storage_id, legacy));
    }
    for dir in touched
        .iter()
        .map(PathBuf::as_path)
        .chain([staging.as_path()])
    {
        io.sync_dir(dir)
            .await
            .map_err(io_error("fsync directory", dir))?;
    }
    let partitions = data_dir.join(PARTITIONS_DIR);
    io.rename(&staging, &partitions)
        .await
        .map_err(io_error("rename directory", &staging))?;
    io.sync_dir(data_dir)
        .await
        .map_err(io_error("fsync directory", data_dir))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::OpenMode;
    use crate::sim::{SimIo, block_on};
    use crate::trash::{Trash, trash_dir};

    const DATA: &str = "/data";

    fn write(io: &SimIo, path: &Path, bytes: usize) {
        block_on(async {
            io.create_dir_all(path.parent().unwrap()).await.unwrap();
            let file = io.open(path, OpenMode::Create).await.unwrap();
            let (result, _) = io.write_at(&file, vec![1u8; bytes], 0).await;
            result.unwrap();
            io.sync(&file).await.unwrap();
            io.sync_dir(path.parent().unwrap()).await.unwrap();
        });
    }

    fn listed(entries: &[(u64, (u32, u32, u32))]) -> Listed {
        entries.iter().copied().collect()
    }

    fn names(io: &SimIo, dir: &Path) -> Vec<String> {
        block_on(io.list_dir(dir)).unwrap()
    }

    // A fresh data directory gets the layout and nothing to remove.
    #[test]
    fn fresh_directory() {
        let io = SimIo::new(1);
        let data = Path::new(DATA);
        let reconciled = block_on(reconcile(&io, data, &Listed::new())).unwrap();
        assert_eq!(names(&io, data), vec!["partitions", "trash"]);
        assert!(reconciled.trash.pending.is_empty());
        assert!(reconciled.migrated.is_empty() && reconciled.orphans.is_empty());
        assert_eq!(reconciled.trash.next_seq, 0);
    }

    // The old layout: every listed partition moves to its storage id with
    // all its files; the rest of the old tree (a partition whose delete
    // could not remove it) goes to the trash and is never served; a crash
    // midway (staging directory half full) is finished by the next start.
    #[test]
    fn old_layout_is_adopted() {
        let io = SimIo::new(2);
        let data = Path::new(DATA);
        let kept = legacy_partition_dir(data, 0, 0, 1);
        let second = legacy_partition_dir(data, 0, 2, 0);
        let leftover = legacy_partition_dir(data, 1, 0, 0);
        write(&io, &kept.join("00000000000000000000.log"), 100);
        write(&io, &kept.join("consumer_offsets.log"), 32);
        write(&io, &second.join("00000000000000000000.log"), 50);
        write(&io, &leftover.join("00000000000000000000.log"), 70);
        let listed = listed(&[(4, (0, 0, 1)), (9, (0, 2, 0)), (11, (0, 3, 0))]);
        // A first start moved one partition and died.
        block_on(io.create_dir_all(&data.join(MIGRATING_DIR))).unwrap();
        block_on(io.rename(&second, &data.join(MIGRATING_DIR).join("9"))).unwrap();

        let reconciled = block_on(reconcile(&io, data, &listed)).unwrap();
        assert_eq!(reconciled.migrated, vec![(4, kept.clone())]);
        assert!(reconciled.legacy_discarded);
        assert_eq!(names(&io, data), vec!["partitions", "trash"]);
        assert_eq!(names(&io, &data.join("partitions")), vec!["4", "9"]);
        assert_eq!(
            names(&io, &partition_dir(data, 4)),
            vec!["00000000000000000000.log", "consumer_offsets.log"]
        );
        assert_eq!(
            io.len_of(&partition_dir(data, 9).join("00000000000000000000.log")),
            Some(50)
        );
        assert_eq!(reconciled.trash.pending.len(), 1);
        assert_eq!(reconciled.trash.pending[0].bytes, 70);

        // Nothing more happens on the next start; the janitor empties the
        // trash.
        let again = block_on(reconcile(&io, data, &listed)).unwrap();
        assert!(again.migrated.is_empty() && !again.legacy_discarded);
        assert_eq!(again.trash.pending.len(), 1);
        let mut trash = Trash::new(io.clone(), data, again.trash);
        block_on(trash.collect(0, 1_000));
        assert!(trash.is_empty());
        assert!(names(&io, &trash_dir(data)).is_empty());
        assert_eq!(io.files_under(data).len(), 3);
    }

    // Directories under `partitions/` that metadata does not list go to the
    // trash (one that cannot be moved is removed in place); listed ones
    // stay; names continue after the entries already in the trash.
    #[test]
    fn orphans_go_to_the_trash() {
        let io = SimIo::new(3);
        let data = Path::new(DATA);
        block_on(reconcile(&io, data, &Listed::new())).unwrap();
        write(&io, &partition_dir(data, 3).join("a"), 10);
        write(&io, &partition_dir(data, 7).join("b"), 20);
        write(&io, &data.join("partitions/junk/c"), 30);
        write(&io, &partition_dir(data, 8).join("d"), 40);
        io.set_immutable(&partition_dir(data, 8), true);
        write(&io, &trash_dir(data).join("00000000000000000041.2/e"), 50);

        let reconciled = block_on(reconcile(&io, data, &listed(&[(3, (0, 0, 0))]))).unwrap();
        assert_eq!(
            reconciled.orphans,
            vec![partition_dir(data, 7), data.join("partitions/junk")]
        );
        assert_eq!(reconciled.stuck, vec![partition_dir(data, 8)]);
        assert_eq!(names(&io, &data.join("partitions")), vec!["3", "8"]);
        let pending: Vec<u64> = reconciled
            .trash
            .pending
            .iter()
            .map(|entry| entry.bytes)
            .collect();
        assert_eq!(pending, vec![50, 20, 40, 30]);
        // 42 and 44 are used; the failed move took 43.
        assert_eq!(reconciled.trash.next_seq, 45);
        assert!(
            names(&io, &trash_dir(data))
                .iter()
                .all(|name| name.starts_with("0000000000000000004"))
        );
        io.set_immutable(&partition_dir(data, 8), false);
        let mut trash = Trash::new(io.clone(), data, reconciled.trash);
        block_on(trash.collect(0, 1_000));
        assert!(trash.is_empty());
        assert_eq!(names(&io, &data.join("partitions")), vec!["3"]);
        assert_eq!(io.files_under(data), vec![partition_dir(data, 3).join("a")]);
    }
}
