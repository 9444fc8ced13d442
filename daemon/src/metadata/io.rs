//! The only way metadata persistence reaches the disk: a tiny
//! [`MetadataIo`] trait over named files in one directory, with the
//! production implementation on `std::fs` and a fault-injecting in-memory
//! one for tests.
//!
//! Why synchronous `std::fs`: metadata changes are rare (create a topic,
//! join a group), so shard 0 simply blocks for one write + fdatasync per
//! change (typically well under a millisecond on SSD/NVMe, up to tens of
//! ms on spinning disks or busy cloud volumes). Routing these through the
//! io_uring runtime would buy nothing measurable and cost a second code
//! path. Must not: be called from any shard other than 0, or from a hot
//! path.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Durable file operations on names inside one directory.
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

/// `std::fs` in one directory (created if missing).
#[derive(Debug)]
pub struct StdIo {
    dir: PathBuf,
}

impl StdIo {
    pub fn open(dir: impl Into<PathBuf>) -> io::Result<Self> {
        let dir = dir.into();
        fs::create_dir_all(&dir)?;
        Ok(Self { dir })
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
        match fs::read(self.dir.join(name)) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(error),
        }
    }

    fn append_durable(&mut self, name: &str, bytes: &[u8]) -> io::Result<()> {
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
        let file = OpenOptions::new().write(true).open(self.dir.join(name))?;
        file.set_len(len)?;
        file.sync_all()
    }

    fn replace_durable(&mut self, name: &str, bytes: &[u8]) -> io::Result<()> {
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
        File::open(self.dir.join(name))?.sync_all()?;
        self.sync_dir()
    }
}

/// In-memory files with injectable faults, for tests and the simulator.
#[derive(Debug, Default, Clone)]
pub struct MemIo {
    pub files: BTreeMap<String, Vec<u8>>,
    /// The next append writes only this many bytes, then fails (a torn write
    /// followed by a crash).
    pub tear_next_append_at: Option<usize>,
    /// The next durable operation of any kind fails with EIO, writing nothing.
    pub fail_next: bool,
}

impl MemIo {
    fn injected_failure(&mut self) -> io::Result<()> {
        if std::mem::take(&mut self.fail_next) {
            return Err(io::Error::other("injected EIO"));
        }
        Ok(())
    }

    /// Flips one bit of a file (test helper).
    pub fn flip_bit(&mut self, name: &str, offset: usize, bit: u8) {
        let file = self.files.get_mut(name).expect("file exists");
        file[offset] ^= 1 << bit;
    }
}

impl MetadataIo for MemIo {
    fn read(&mut self, name: &str) -> io::Result<Option<Vec<u8>>> {
        Ok(self.files.get(name).cloned())
    }

    fn append_durable(&mut self, name: &str, bytes: &[u8]) -> io::Result<()> {
        self.injected_failure()?;
        let file = self.files.entry(name.to_owned()).or_default();
        if let Some(keep) = self.tear_next_append_at.take() {
            file.extend_from_slice(bytes.get(..keep).unwrap_or(bytes));
            return Err(io::Error::other("injected torn write"));
        }
        file.extend_from_slice(bytes);
        Ok(())
    }

    fn truncate_durable(&mut self, name: &str, len: u64) -> io::Result<()> {
        self.injected_failure()?;
        let file = self
            .files
            .get_mut(name)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        file.truncate(usize::try_from(len).unwrap_or(usize::MAX));
        Ok(())
    }

    fn replace_durable(&mut self, name: &str, bytes: &[u8]) -> io::Result<()> {
        self.injected_failure()?;
        self.files.insert(name.to_owned(), bytes.to_vec());
        Ok(())
    }

    fn sync_durable(&mut self, name: &str) -> io::Result<()> {
        self.injected_failure()?;
        if !self.files.contains_key(name) {
            return Err(io::Error::from(io::ErrorKind::NotFound));
        }
        Ok(())
    }
}
