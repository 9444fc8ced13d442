//! The admin socket's `snapshot_file` op: an `iggy snapshot` ZIP built on
//! the same `snapshot` worker the wire's GetSnapshotFile uses (queued with
//! `SnapshotFiles::build_until`, so an admin client thread waits for the
//! worker, never for a shard), then written to the new file the operator
//! named: checked first (absolute, not there yet, its directory exists and
//! the daemon may write into it, outside the data directory), written to a
//! temporary name in that directory, fsynced, renamed into place without
//! replacing anything that appeared meanwhile, and the directory fsynced.
//!
//! Must not: replace or truncate an existing file, leave a temporary file
//! behind on failure, write into the data directory (the daemon's own
//! layout), or run on a shard thread.

use crate::net::snapshot_request::{SnapshotFileError, SnapshotFileRequest, SnapshotFiles};
use nix::errno::Errno;
use nix::fcntl::{AT_FDCWD, RenameFlags};
use nix::unistd::{AccessFlags, faccessat};
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Mode of a written snapshot: it holds logs and the (redacted)
/// configuration, so only the daemon's user and group may read it.
pub const SNAPSHOT_FILE_MODE: u32 = 0o640;

/// How long the admin side waits for the worker (queue and build).
pub const WAIT_MAX: Duration = Duration::from_millis(iggyd_admin_api::SNAPSHOT_FILE_WAIT_MS_MAX);

/// Why no snapshot was written; the text is the admin client's error line.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    #[error("snapshot_file: {path} is relative: give an absolute path")]
    Relative { path: PathBuf },
    #[error("snapshot_file: {path} names no file (it ends in a directory)")]
    NoFileName { path: PathBuf },
    #[error("snapshot_file: {path} already exists; choose a new name (nothing is replaced)")]
    Exists { path: PathBuf },
    #[error("snapshot_file: the directory {dir} does not exist or cannot be read: {source}")]
    NoDirectory {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("snapshot_file: {dir} is not a directory")]
    NotADirectory { dir: PathBuf },
    #[error("snapshot_file: the daemon may not write into {dir}: {errno}")]
    NotWritable { dir: PathBuf, errno: Errno },
    #[error(
        "snapshot_file: {path} is inside the data directory {data_dir}, which is the daemon's \
         own; choose another directory"
    )]
    InDataDirectory { path: PathBuf, data_dir: PathBuf },
    #[error("snapshot_file: this daemon has no snapshot worker")]
    NoWorker,
    #[error(
        "snapshot_file: the snapshot worker did not deliver within {} s (other snapshots \
         queued, or a slow build); nothing was written",
        WAIT_MAX.as_secs()
    )]
    TimedOut,
    #[error("snapshot_file: {0}")]
    Build(SnapshotFileError),
    #[error("snapshot_file: writing {path} failed: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A checked destination: the new file's directory (canonical) and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub dir: PathBuf,
    pub name: OsString,
}

impl Target {
    pub fn path(&self) -> PathBuf {
        self.dir.join(&self.name)
    }
}

/// Check that `path` can become a new snapshot file: absolute, naming a
/// file that does not exist (not even as a dangling link) in an existing
/// directory the daemon may write into, outside `data_dir`.
pub fn check(path: &Path, data_dir: &Path) -> Result<Target, SaveError> {
    if !path.is_absolute() {
        return Err(SaveError::Relative {
            path: path.to_path_buf(),
        });
    }
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(SaveError::NoFileName {
            path: path.to_path_buf(),
        });
    };
    if path.as_os_str().as_encoded_bytes().ends_with(b"/") {
        return Err(SaveError::NoFileName {
            path: path.to_path_buf(),
        });
    }
    let dir = std::fs::canonicalize(parent).map_err(|source| SaveError::NoDirectory {
        dir: parent.to_path_buf(),
        source,
    })?;
    if !dir.is_dir() {
        return Err(SaveError::NotADirectory { dir });
    }
    let target = Target {
        dir,
        name: name.to_os_string(),
    };
    if std::fs::symlink_metadata(target.path()).is_ok() {
        return Err(SaveError::Exists {
            path: path.to_path_buf(),
        });
    }
    if let Ok(data_dir) = std::fs::canonicalize(data_dir)
        && target.dir.starts_with(&data_dir)
    {
        return Err(SaveError::InDataDirectory {
            path: path.to_path_buf(),
            data_dir,
        });
    }
    // The effective ids decide, as they will for the write; root is refused
    // too on a read-only file system or an immutable directory.
    faccessat(
        AT_FDCWD,
        &target.dir,
        AccessFlags::W_OK | AccessFlags::X_OK,
        nix::fcntl::AtFlags::AT_EACCESS,
    )
    .map_err(|errno| SaveError::NotWritable {
        dir: target.dir.clone(),
        errno,
    })?;
    Ok(target)
}

/// What was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Saved {
    pub path: PathBuf,
    pub bytes: u64,
}

impl Saved {
    /// The `done` line's message.
    pub fn message(&self) -> String {
        format!(
            "wrote a snapshot ZIP of {} bytes to {}",
            self.bytes,
            self.path.display()
        )
    }
}

/// Check `path`, have the worker build `request` (waiting at most
/// `wait`), and write the ZIP there.
pub fn save(
    files: Option<&SnapshotFiles>,
    request: SnapshotFileRequest,
    path: &Path,
    data_dir: &Path,
    wait: Duration,
) -> Result<Saved, SaveError> {
    let files = files.ok_or(SaveError::NoWorker)?;
    // Checked before the build, so a typo costs nothing, and again by the
    // write itself (the directory may change meanwhile).
    let target = check(path, data_dir)?;
    let zip = files
        .build_until(request, Instant::now() + wait)
        .ok_or(SaveError::TimedOut)?
        .map_err(SaveError::Build)?;
    write_new(&target, &zip)?;
    let saved = Saved {
        path: target.path(),
        bytes: zip.len() as u64,
    };
    tracing::info!(path = %saved.path.display(), bytes = saved.bytes, "snapshot file written from the admin socket");
    Ok(saved)
}

/// Temporary names differ per call within the process.
static NEXT_TEMPORARY: AtomicU64 = AtomicU64::new(0);

/// Write `bytes` as the new file `target`: a temporary file in the same
/// directory, fsynced, renamed into place only if nothing has the name yet,
/// then the directory fsynced. The temporary file is removed on failure.
pub fn write_new(target: &Target, bytes: &[u8]) -> Result<(), SaveError> {
    let path = target.path();
    let mut temporary_name = OsString::from(".");
    temporary_name.push(&target.name);
    temporary_name.push(format!(
        ".{}.{}.tmp",
        std::process::id(),
        NEXT_TEMPORARY.fetch_add(1, Ordering::Relaxed)
    ));
    let temporary = target.dir.join(temporary_name);
    let failed = |source: std::io::Error| SaveError::Write {
        path: path.clone(),
        source,
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(SNAPSHOT_FILE_MODE)
        .open(&temporary)
        .map_err(|source| match source.raw_os_error() {
            Some(code @ (libc::EACCES | libc::EPERM | libc::EROFS)) => SaveError::NotWritable {
                dir: target.dir.clone(),
                errno: Errno::from_raw(code),
            },
            _ => failed(source),
        })?;
    let written = file
        .write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(failed)
        .and_then(|()| rename_new(&temporary, &path));
    drop(file);
    if let Err(error) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(error);
    }
    std::fs::File::open(&target.dir)
        .and_then(|dir| dir.sync_all())
        .map_err(failed)
}

/// Rename `from` to `to` unless `to` exists (`RENAME_NOREPLACE`; where the
/// file system lacks it, a hard link, which fails on an existing name too).
fn rename_new(from: &Path, to: &Path) -> Result<(), SaveError> {
    let exists = || SaveError::Exists {
        path: to.to_path_buf(),
    };
    match nix::fcntl::renameat2(AT_FDCWD, from, AT_FDCWD, to, RenameFlags::RENAME_NOREPLACE) {
        Ok(()) => Ok(()),
        Err(Errno::EEXIST) => Err(exists()),
        Err(Errno::EINVAL | Errno::ENOSYS) => match std::fs::hard_link(from, to) {
            Ok(()) => std::fs::remove_file(from).map_err(|source| SaveError::Write {
                path: to.to_path_buf(),
                source,
            }),
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Err(exists()),
            Err(source) => Err(SaveError::Write {
                path: to.to_path_buf(),
                source,
            }),
        },
        Err(errno) => Err(SaveError::Write {
            path: to.to_path_buf(),
            source: errno.into(),
        }),
    }
}

#[cfg(test)]
mod tests;
