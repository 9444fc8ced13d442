//! The only way metadata persistence reaches the disk: a tiny
//! [`MetadataIo`] trait over named files in one directory, with the
//! production implementation on `std::fs` ([`StdIo`]) and, for tests, the
//! same steps on the simulated disk that storage is tested on
//! (`SimDirIo` over `storage::sim::SimIo`: unsynced writes are lost or torn
//! on a crash, fsyncs fail on demand, the disk fills up).
//!
//! Why synchronous `std::fs`: metadata changes are rare (create a topic,
//! join a group), so shard 0 simply blocks for one write + fdatasync per
//! change (typically well under a millisecond on SSD/NVMe, up to tens of
//! ms on spinning disks or busy cloud volumes). Routing these through the
//! io_uring runtime would buy nothing measurable and cost a second code
//! path. Must not: be called from any shard other than 0, or from a hot
//! path.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Durable file operations on names inside one directory. Each operation
/// is a fixed sequence of disk steps, which every implementation follows
/// (the simulator's crash model depends on it):
///
/// * `append_durable`: append the bytes, fdatasync the file, and fsync the
///   directory when the file was created;
/// * `truncate_durable`: set the length, fsync the file;
/// * `replace_durable`: write `<name>.tmp` (created or emptied), fsync it,
///   rename it over `name`, fsync the directory;
/// * `sync_durable`: fsync the file, then the directory.
pub trait MetadataIo {
    /// The whole file, or `None` when it does not exist.
    fn read(&mut self, name: &str) -> io::Result<Option<Vec<u8>>>;
    /// Appends `bytes` (creating the file if needed) and makes them durable
    /// (fdatasync; plus a directory fsync when the file was created).
    fn append_durable(&mut self, name: &str, bytes: &[u8]) -> io::Result<()>;
    /// Cuts the file to `len` bytes and makes that durable.
    fn truncate_durable(&mut self, name: &str, len: u64) -> io::Result<()>;
    /// Replaces the file atomically: write a temporary file, fsync it,
    /// rename it over `name`, fsync the directory.
    fn replace_durable(&mut self, name: &str, bytes: &[u8]) -> io::Result<()>;
    /// Makes an existing file and its directory entry durable as they are
    /// now (fsync the file, then the directory): recovery calls it so that
    /// what it read and will serve cannot be taken back by a power loss.
    fn sync_durable(&mut self, name: &str) -> io::Result<()>;
}

/// `std::fs` in one directory (created if missing), or, for a cluster
/// node, memory: there the metadata group's Raft log is the durable record
/// and the store is rebuilt from it at every start.
#[derive(Debug)]
pub struct StdIo {
    dir: PathBuf,
    /// `Some` for [`StdIo::in_memory`]: the files by name.
    memory: Option<std::collections::HashMap<String, Vec<u8>>>,
}

impl StdIo {
    pub fn open(dir: impl Into<PathBuf>) -> io::Result<Self> {
        let dir = dir.into();
        fs::create_dir_all(&dir)?;
        Ok(Self { dir, memory: None })
    }

    /// Files that live in memory only (a cluster node's store); `dir` only
    /// names it in messages.
    pub fn in_memory(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            memory: Some(std::collections::HashMap::new()),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn sync_dir(&self) -> io::Result<()> {
        File::open(&self.dir)?.sync_all()
    }
}

impl MetadataIo for StdIo {
    fn read(&mut self, name: &str) -> io::Result<Option<Vec<u8>>> {
        if let Some(memory) = &self.memory {
            return Ok(memory.get(name).cloned());
        }
        match fs::read(self.dir.join(name)) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(error),
        }
    }

    fn append_durable(&mut self, name: &str, bytes: &[u8]) -> io::Result<()> {
        if let Some(memory) = &mut self.memory {
            memory
                .entry(name.to_owned())
                .or_default()
                .extend_from_slice(bytes);
            return Ok(());
        }
        let path = self.dir.join(name);
        let created = !path.exists();
        let mut file = OpenOptions::new().create(true).append(true).open(&path)?;
        file.write_all(bytes)?;
        file.sync_data()?;
        if created {
            self.sync_dir()?;
        }
        Ok(())
    }

    fn truncate_durable(&mut self, name: &str, len: u64) -> io::Result<()> {
        if let Some(memory) = &mut self.memory {
            let file = memory
                .get_mut(name)
                .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
            file.resize(usize::try_from(len).map_err(io::Error::other)?, 0);
            return Ok(());
        }
        let file = OpenOptions::new().write(true).open(self.dir.join(name))?;
        file.set_len(len)?;
        file.sync_all()
    }

    fn replace_durable(&mut self, name: &str, bytes: &[u8]) -> io::Result<()> {
        if let Some(memory) = &mut self.memory {
            memory.insert(name.to_owned(), bytes.to_vec());
            return Ok(());
        }
        let temporary = self.dir.join(format!("{name}.tmp"));
        let mut file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&temporary)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&temporary, self.dir.join(name))?;
        self.sync_dir()
    }

    fn sync_durable(&mut self, name: &str) -> io::Result<()> {
        if self.memory.is_some() {
            return Ok(());
        }
        File::open(self.dir.join(name))?.sync_all()?;
        self.sync_dir()
    }
}

/// [`MetadataIo`] on the simulated disk, in one directory (tests only):
/// the steps of [`StdIo`], each one a `SimIo` operation, so a crash or an
/// injected fault can land between any two of them. Clones share the disk.
#[cfg(test)]
#[derive(Debug, Clone)]
pub struct SimDirIo {
    pub io: iggyd_storage::sim::SimIo,
    pub dir: PathBuf,
}

#[cfg(test)]
mod sim_dir {
    use super::{MetadataIo, SimDirIo};
    use iggyd_storage::io::{OpenMode, StorageIo};
    use iggyd_storage::sim::{SimIo, block_on};
    use std::io;
    use std::path::PathBuf;

    impl SimDirIo {
        /// A fresh simulated disk seeded with `seed`, holding the empty
        /// directory `/metadata`.
        pub fn new(seed: u64) -> SimDirIo {
            let io = SimIo::new(seed);
            let dir = PathBuf::from("/metadata");
            block_on(io.create_dir_all(&dir)).expect("the simulated disk creates directories");
            SimDirIo { io, dir }
        }

        /// Current contents of `name` (what a read would see).
        pub fn contents(&self, name: &str) -> Option<Vec<u8>> {
            self.io.contents_of(&self.dir.join(name))
        }

        /// Replaces `name`'s contents at once, durably (corruption scenarios).
        pub fn set_contents(&self, name: &str, contents: Vec<u8>) {
            self.io.set_contents(&self.dir.join(name), contents);
        }

        /// Flips one bit of `name` (bit rot).
        pub fn flip_bit(&self, name: &str, offset: u64, bit: u8) {
            assert!(self.io.flip_bit(&self.dir.join(name), offset, bit));
        }
    }

    fn exists(io: &SimIo, path: &std::path::Path) -> io::Result<bool> {
        match block_on(io.open(path, OpenMode::Existing)) {
            Ok(_) => Ok(true),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(error) => Err(error),
        }
    }

    impl MetadataIo for SimDirIo {
        fn read(&mut self, name: &str) -> io::Result<Option<Vec<u8>>> {
            let path = self.dir.join(name);
            if !exists(&self.io, &path)? {
                return Ok(None);
            }
            block_on(async {
                let file = self.io.open(&path, OpenMode::Existing).await?;
                let len = self.io.file_len(&file).await?;
                let len = usize::try_from(len).map_err(io::Error::other)?;
                self.io.read_exact_at(&file, 0, len).await.map(Some)
            })
        }

        fn append_durable(&mut self, name: &str, bytes: &[u8]) -> io::Result<()> {
            let path = self.dir.join(name);
            let created = !exists(&self.io, &path)?;
            block_on(async {
                let file = self.io.open(&path, OpenMode::Create).await?;
                let end = self.io.file_len(&file).await?;
                self.io.write_at(&file, bytes.to_vec(), end).await.0?;
                self.io.sync(&file).await?;
                if created {
                    self.io.sync_dir(&self.dir).await?;
                }
                Ok(())
            })
        }

        fn truncate_durable(&mut self, name: &str, len: u64) -> io::Result<()> {
            let path = self.dir.join(name);
            block_on(async {
                let file = self.io.open(&path, OpenMode::Existing).await?;
                self.io.truncate(&file, len).await?;
                self.io.sync(&file).await
            })
        }

        fn replace_durable(&mut self, name: &str, bytes: &[u8]) -> io::Result<()> {
            let temporary = self.dir.join(format!("{name}.tmp"));
            block_on(async {
                let file = self.io.open(&temporary, OpenMode::CreateTruncate).await?;
                self.io.write_at(&file, bytes.to_vec(), 0).await.0?;
                self.io.sync(&file).await?;
                self.io.rename(&temporary, &self.dir.join(name)).await?;
                self.io.sync_dir(&self.dir).await
            })
        }

        fn sync_durable(&mut self, name: &str) -> io::Result<()> {
            let path = self.dir.join(name);
            block_on(async {
                let file = self.io.open(&path, OpenMode::Existing).await?;
                self.io.sync(&file).await?;
                self.io.sync_dir(&self.dir).await
            })
        }
    }
}
