//! The `StorageIo` trait: the only way storage reaches the disk.
//!
//! This file owns the trait and its production implementation on
//! `monoio::fs` (io_uring, or the legacy epoll driver). Storage code is
//! written against the trait so that the same code runs over `sim::SimIo`
//! in deterministic simulation. Implementations return plain
//! `std::io::Error`s (with the OS error code when there is one); wrapping them
//! into `StorageError` with a path is the caller's job. This file must not
//! know about segments, batches or offsets.

use std::io;
use std::path::{Path, PathBuf};

use monoio::buf::{IoBuf, IoBufMut};

use super::buf::AlignedBuf;

/// How [`StorageIo::open`] treats an existing or missing file. Files are
/// always opened read + write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// The file must exist.
    Existing,
    /// Create the file if missing, keep its contents if present.
    Create,
    /// Create the file, or empty it if present.
    CreateTruncate,
}

impl OpenMode {
    /// Whether a missing file is created (`O_CREAT`).
    fn creates(self) -> bool {
        matches!(self, OpenMode::Create | OpenMode::CreateTruncate)
    }

    /// Whether an existing file is emptied (`O_TRUNC`).
    fn truncates(self) -> bool {
        self == OpenMode::CreateTruncate
    }
}

/// How a file's data moves: through the page cache, or by DMA between an
/// aligned user buffer and the device (`O_DIRECT`: positions, lengths and
/// buffer addresses must be multiples of [`super::buf::IO_ALIGN`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Buffered,
    Direct,
}

/// Disk access for storage. All methods are async and may return futures
/// that are not `Send`: one runtime per shard thread drives them.
///
/// Buffers are owned (io_uring style): a write takes its buffer and hands it
/// back, a read returns a new buffer.
#[allow(async_fn_in_trait)]
pub trait StorageIo: Clone + 'static {
    type File: 'static;

    /// Opens a file for buffered access.
    async fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Self::File> {
        self.open_with(path, mode, Access::Buffered).await
    }
    /// Opens a file; with [`Access::Direct`] a file system that cannot do
    /// direct I/O fails with `EINVAL`.
    async fn open_with(
        &self,
        path: &Path,
        mode: OpenMode,
        access: Access,
    ) -> io::Result<Self::File>;
    /// Writes all of `buf` at `position`. On error some prefix may have been
    /// written. On a direct file, `position`, the length and the buffer's
    /// address must be aligned (else `EINVAL`).
    async fn write_at<B: IoBuf>(
        &self,
        file: &Self::File,
        buf: B,
        position: u64,
    ) -> (io::Result<()>, B);
    /// Reads exactly `buf.bytes_total()` bytes at `position` into `buf`;
    /// `UnexpectedEof` when the file is shorter.
    async fn read_exact_into<B: IoBufMut>(
        &self,
        file: &Self::File,
        buf: B,
        position: u64,
    ) -> (io::Result<()>, B);
    /// Reads up to `len` bytes at `position` into `buf`, after the bytes it
    /// already holds (`len` ≤ `buf.remaining()`), stopping early only at
    /// the end of the file; returns how many. On a direct file `position`
    /// and the bytes already held must be aligned (the buffer always is;
    /// the end of the file need not be).
    async fn read_at_most(
        &self,
        file: &Self::File,
        buf: AlignedBuf,
        position: u64,
        len: usize,
    ) -> (io::Result<usize>, AlignedBuf);
    /// Reads exactly `len` bytes at `position`; `UnexpectedEof` when the file
    /// is shorter.
    async fn read_exact_at(
        &self,
        file: &Self::File,
        position: u64,
        len: usize,
    ) -> io::Result<Vec<u8>>;
    /// fdatasync: data and the metadata needed to read it back (the size).
    async fn sync(&self, file: &Self::File) -> io::Result<()>;
    /// Sets the file length (truncates or extends with zeros).
    async fn truncate(&self, file: &Self::File, len: u64) -> io::Result<()>;
    async fn file_len(&self, file: &Self::File) -> io::Result<u64>;
    /// Removes a file (`EISDIR` for a directory).
    async fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Removes an empty directory (`ENOTEMPTY` otherwise).
    async fn remove_dir(&self, path: &Path) -> io::Result<()>;
    /// Renames a file or a directory (a directory moves with everything in
    /// it). Durable once both parents are fsynced.
    async fn rename(&self, source: &Path, target: &Path) -> io::Result<()>;
    /// Names of the entries of a directory (files and subdirectories, not
    /// full paths), sorted.
    async fn list_dir(&self, path: &Path) -> io::Result<Vec<String>>;
    async fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// fsync a directory so that created, removed and renamed entries in it
    /// are durable.
    async fn sync_dir(&self, path: &Path) -> io::Result<()>;
}

/// Production implementation on `monoio::fs`.
///
/// monoio 0.2.4 offers async open, positional read/write, fsync/fdatasync and
/// statx. Directory listing, truncation, directory sync, and (with the
/// workspace's monoio feature set, which leaves out `unlinkat`, `renameat`
/// and `mkdirat`) remove, rename and mkdir have no async form, so they run as
/// short synchronous std calls on the shard thread. They are rare (recovery,
/// rotation, retention, ENOSPC rollback), never on the per-message path.
#[derive(Debug, Clone, Copy, Default)]
pub struct MonoioIo;

/// An open file: the monoio handle plus its path for the std-only operations.
#[derive(Debug)]
pub struct MonoioFile {
    file: monoio::fs::File,
    path: PathBuf,
}

impl StorageIo for MonoioIo {
    type File = MonoioFile;

    async fn open_with(
        &self,
        path: &Path,
        mode: OpenMode,
        access: Access,
    ) -> io::Result<MonoioFile> {
        let file = match access {
            Access::Buffered => {
                let mut options = monoio::fs::OpenOptions::new();
                options
                    .read(true)
                    .write(true)
                    .create(mode.creates())
                    .truncate(mode.truncates());
                options.open(path).await?
            }
            Access::Direct => {
                // monoio's options cannot carry O_DIRECT: open through std
                // (a short blocking call; segments are opened rarely).
                use std::os::unix::fs::OpenOptionsExt;
                let mut options = std::fs::OpenOptions::new();
                options
                    .read(true)
                    .write(true)
                    .create(mode.creates())
                    .truncate(mode.truncates())
                    .custom_flags(libc::O_DIRECT | libc::O_CLOEXEC);
                monoio::fs::File::from_std(options.open(path)?)?
            }
        };
        Ok(MonoioFile {
            file,
            path: path.to_path_buf(),
        })
    }

    async fn write_at<B: IoBuf>(
        &self,
        file: &MonoioFile,
        buf: B,
        position: u64,
    ) -> (io::Result<()>, B) {
        file.file.write_all_at(buf, position).await
    }

    async fn read_exact_into<B: IoBufMut>(
        &self,
        file: &MonoioFile,
        buf: B,
        position: u64,
    ) -> (io::Result<()>, B) {
        file.file.read_exact_at(buf, position).await
    }

    async fn read_at_most(
        &self,
        file: &MonoioFile,
        buf: AlignedBuf,
        position: u64,
        len: usize,
    ) -> (io::Result<usize>, AlignedBuf) {
        // One read returns less than asked only at the end of the file or
        // when interrupted; repeat until full or at the end. The slices
        // keep the buffer's own alignment for direct files (every partial
        // read of a direct file ends on a block boundary or at the end).
        let mut buf = buf;
        let held = buf.len();
        let total = held + len.min(buf.remaining());
        let mut done = 0usize;
        while held + done < total {
            let (result, slice) = file
                .file
                .read_at(buf.slice_mut(held + done..total), position + done as u64)
                .await;
            // The slice marks what the read filled as initialised.
            buf = slice.into_inner();
            match result {
                Ok(0) => break,
                Ok(read) => done += read,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => {
                    buf.truncate(held);
                    return (Err(error), buf);
                }
            }
        }
        (Ok(done), buf)
    }

    async fn read_exact_at(
        &self,
        file: &MonoioFile,
        position: u64,
        len: usize,
    ) -> io::Result<Vec<u8>> {
        if len == 0 {
            return Ok(Vec::new());
        }
        let buf = Vec::with_capacity(len).slice_mut(0..len);
        let (result, buf) = file.file.read_exact_at(buf, position).await;
        result?;
        let buf = buf.into_inner();
        assert!(buf.len() == len);
        Ok(buf)
    }

    async fn sync(&self, file: &MonoioFile) -> io::Result<()> {
        file.file.sync_data().await
    }

    async fn truncate(&self, file: &MonoioFile, len: u64) -> io::Result<()> {
        // No ftruncate op in monoio: a second descriptor by path does it.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&file.path)?
            .set_len(len)
    }

    async fn file_len(&self, file: &MonoioFile) -> io::Result<u64> {
        Ok(file.file.metadata().await?.len())
    }

    async fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    async fn remove_dir(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_dir(path)
    }

    async fn rename(&self, source: &Path, target: &Path) -> io::Result<()> {
        std::fs::rename(source, target)
    }

    async fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(path)? {
            let entry = entry?;
            if let Some(name) = entry.file_name().to_str() {
                names.push(name.to_owned());
            }
        }
        names.sort();
        Ok(names)
    }

    async fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir_all(path)
    }

    async fn sync_dir(&self, path: &Path) -> io::Result<()> {
        std::fs::File::open(path)?.sync_all()
    }
}

/// A monoio runtime for tests of the real implementation (legacy driver, so
/// it runs where io_uring is unavailable or memlock is small); the crates
/// above use it through the `sim` feature.
#[cfg(any(test, feature = "sim"))]
#[expect(clippy::expect_used, reason = "a test helper: a panic fails the test")]
pub fn test_runtime() -> monoio::Runtime<monoio::time::TimeDriver<monoio::LegacyDriver>> {
    monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
        .enable_timer()
        .build()
        .expect("building a monoio runtime for a test")
}

#[cfg(test)]
mod tests {
    use super::*;

    // The monoio implementation round-trips bytes, reports lengths, truncates,
    // lists and removes, on a real temp directory (legacy driver).
    #[test]
    fn monoio_io_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        test_runtime().block_on(round_trip(dir.path().to_path_buf()));
    }

    // The same on the io_uring driver, when the kernel and memlock allow it
    // (skipped through the test kit otherwise, which fails under CI=true).
    #[test]
    fn monoio_io_round_trip_io_uring() {
        let dir = tempfile::tempdir().unwrap();
        match monoio::RuntimeBuilder::<monoio::IoUringDriver>::new().build() {
            Ok(mut runtime) => runtime.block_on(round_trip(dir.path().to_path_buf())),
            Err(error) => iggyd_testkit::skip(&format!("io_uring unavailable: {error}")),
        }
    }

    async fn round_trip(dir: PathBuf) {
        {
            let io = MonoioIo;
            let sub = dir.join("a/b");
            io.create_dir_all(&sub).await.unwrap();
            let path = sub.join("f.log");
            let file = io.open(&path, OpenMode::Create).await.unwrap();
            let (result, _) = io.write_at(&file, b"hello world".to_vec(), 0).await;
            result.unwrap();
            io.sync(&file).await.unwrap();
            assert_eq!(io.file_len(&file).await.unwrap(), 11);
            assert_eq!(io.read_exact_at(&file, 6, 5).await.unwrap(), b"world");
            let error = io.read_exact_at(&file, 6, 6).await.unwrap_err();
            assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
            io.truncate(&file, 5).await.unwrap();
            assert_eq!(io.file_len(&file).await.unwrap(), 5);
            io.sync_dir(&sub).await.unwrap();
            assert_eq!(io.list_dir(&sub).await.unwrap(), vec!["f.log".to_owned()]);
            io.rename(&path, &sub.join("g.log")).await.unwrap();
            io.remove_file(&sub.join("g.log")).await.unwrap();
            assert!(io.list_dir(&sub).await.unwrap().is_empty());
            // Directories: listed, renamed with their contents, removed
            // only when empty; unlinking one is EISDIR.
            let inner = sub.join("c");
            io.create_dir_all(&inner).await.unwrap();
            let file = io.open(&inner.join("x"), OpenMode::Create).await.unwrap();
            drop(file);
            assert_eq!(io.list_dir(&sub).await.unwrap(), vec!["c".to_owned()]);
            let error = io.remove_file(&inner).await.unwrap_err();
            assert!(matches!(
                error.raw_os_error(),
                Some(libc::EISDIR) | Some(libc::EPERM)
            ));
            let moved = dir.join("moved");
            io.rename(&inner, &moved).await.unwrap();
            assert_eq!(io.list_dir(&moved).await.unwrap(), vec!["x".to_owned()]);
            let error = io.remove_dir(&moved).await.unwrap_err();
            assert_eq!(error.raw_os_error(), Some(libc::ENOTEMPTY));
            io.remove_file(&moved.join("x")).await.unwrap();
            io.remove_dir(&moved).await.unwrap();
            assert!(io.list_dir(&sub).await.unwrap().is_empty());
            let missing = io.open(&path, OpenMode::Existing).await.unwrap_err();
            assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        }
    }
}
