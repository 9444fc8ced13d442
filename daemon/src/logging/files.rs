//! The log directory: the active file `iggyd.log`, rotated files
//! `iggyd.<UTC stamp>.<sequence>.log`, and the limits that bound them. This
//! file owns naming, rotation, the size caps and retention; it is driven only
//! by the `log-writer` and `log-janitor` threads (and the handle, from the
//! supervisor), always under one mutex, never from a shard.
//!
//! Invariants, held before every write reaches the file:
//! - the active file plus the line never exceeds `max_file_bytes` (a line
//!   that would overflow rotates first; a line longer than the limit alone
//!   is truncated with a marker);
//! - the active file plus every rotated file plus the line never exceeds
//!   `max_total_bytes` (the oldest rotated files go first);
//! - sequence numbers strictly increase across rotations and restarts (the
//!   next one is one past the largest found in the directory).
//!
//! Sizes are tracked in memory (bytes handed to the buffered writer), so the
//! disk can only hold less than the books say; the janitor re-reads the
//! directory each check to pick up files removed or added by others.

use super::format::compact_timestamp;
use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The file being written.
pub const ACTIVE_NAME: &str = "iggyd.log";
/// Held with `flock` while a daemon writes this directory: two daemons
/// rotating and deleting the same files would break every cap.
pub const LOCK_NAME: &str = ".iggyd-logs.lock";
/// Appended to a line cut to fit `max_file_bytes`.
const TRUNCATED_MARKER: &str = " …[truncated]\n";

/// The live limits (`logging.*`); 0 / zero disables the respective limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_file_bytes: u64,
    pub max_total_bytes: u64,
    pub retention: Duration,
    pub check_interval: Duration,
}

/// Called after every rotation, deletion and janitor check with the
/// directory, while the directory is locked (tests check the caps there).
pub type CheckHook = Arc<dyn Fn(&Path) + Send + Sync>;

#[derive(Debug, Clone)]
struct Rotated {
    sequence: u64,
    path: PathBuf,
    bytes: u64,
}

/// What a name in the log directory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogName {
    Active,
    Rotated { sequence: u64 },
}

/// The sequence numbers of the rotated files among `names` (as `measure`
/// lists them), oldest first: what the tests compare after rotations.
#[cfg(test)]
pub(super) fn rotated_sequences(names: &[(LogName, u64)]) -> Vec<u64> {
    let mut sequences: Vec<u64> = names
        .iter()
        .filter_map(|(name, _)| match name {
            LogName::Rotated { sequence } => Some(*sequence),
            LogName::Active => None,
        })
        .collect();
    sequences.sort();
    sequences
}

/// `iggyd.log` or `iggyd.YYYYMMDDTHHMMSSZ.<digits>.log`; anything else is not
/// ours and is never touched or counted.
pub fn parse_name(name: &str) -> Option<LogName> {
    if name == ACTIVE_NAME {
        return Some(LogName::Active);
    }
    let middle = name.strip_prefix("iggyd.")?.strip_suffix(".log")?;
    let (stamp, sequence) = middle.split_once('.')?;
    let stamp_ok = stamp.len() == 16
        && stamp.as_bytes()[8] == b'T'
        && stamp.as_bytes()[15] == b'Z'
        && stamp
            .bytes()
            .enumerate()
            .all(|(index, byte)| index == 8 || index == 15 || byte.is_ascii_digit());
    let sequence_ok = !sequence.is_empty() && sequence.bytes().all(|byte| byte.is_ascii_digit());
    if !(stamp_ok && sequence_ok) {
        return None;
    }
    Some(LogName::Rotated {
        sequence: sequence.parse().ok()?,
    })
}

pub fn rotated_name(time: SystemTime, sequence: u64) -> String {
    format!("iggyd.{}.{sequence:06}.log", compact_timestamp(time))
}

/// What one write did, for the writer's bookkeeping.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub bytes: u64,
    pub truncated: bool,
}

pub struct LogFiles {
    dir: PathBuf,
    limits: Limits,
    /// `None` after a failure to open; reopened on the next write.
    active: Option<BufWriter<File>>,
    active_bytes: u64,
    /// Oldest (smallest sequence) first.
    rotated: VecDeque<Rotated>,
    rotated_bytes: u64,
    next_sequence: u64,
    hook: Option<CheckHook>,
}

impl LogFiles {
    /// Opens (creating) the directory and the active file and reads what
    /// earlier runs left, so sizes and the sequence continue from there.
    pub fn open(dir: &Path, limits: Limits, hook: Option<CheckHook>) -> io::Result<LogFiles> {
        std::fs::create_dir_all(dir)?;
        let mut files = LogFiles {
            dir: dir.to_path_buf(),
            limits,
            active: None,
            active_bytes: 0,
            rotated: VecDeque::new(),
            rotated_bytes: 0,
            next_sequence: 1,
            hook,
        };
        files.rescan()?;
        files.open_active()?;
        Ok(files)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn active_path(&self) -> PathBuf {
        self.dir.join(ACTIVE_NAME)
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Bytes of iggyd log files in the directory, by the books.
    pub fn total_bytes(&self) -> u64 {
        self.active_bytes + self.rotated_bytes
    }

    /// Reads the directory: rotated files and their sizes, the active
    /// file's size, and the next sequence number. The active file is
    /// flushed first so its size on disk is the size in the books.
    pub fn rescan(&mut self) -> io::Result<()> {
        if let Some(active) = self.active.as_mut() {
            active.flush()?;
        }
        let mut rotated = Vec::new();
        let mut active_bytes = None;
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            let Some(name) = entry.file_name().to_str().and_then(parse_name) else {
                continue;
            };
            let Ok(meta) = entry.metadata() else {
                continue; // removed between readdir and stat
            };
            if !meta.is_file() {
                continue;
            }
            match name {
                LogName::Active => active_bytes = Some(meta.len()),
                LogName::Rotated { sequence } => rotated.push(Rotated {
                    sequence,
                    path: entry.path(),
                    bytes: meta.len(),
                }),
            }
        }
        rotated.sort_by_key(|file| file.sequence);
        if let Some(last) = rotated.last() {
            self.next_sequence = self.next_sequence.max(last.sequence + 1);
        }
        self.rotated_bytes = rotated.iter().map(|file| file.bytes).sum();
        self.rotated = rotated.into();
        self.active_bytes = active_bytes.unwrap_or(0);
        Ok(())
    }

    fn open_active(&mut self) -> io::Result<()> {
        let path = self.active_path();
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        self.active_bytes = file.metadata()?.len();
        // 64 KiB: a batch of lines becomes one write(2) when the writer
        // drains its queue; the writer flushes after every batch.
        self.active = Some(BufWriter::with_capacity(64 * 1024, file));
        Ok(())
    }

    /// After an I/O error: forget buffered bytes (they may be half-written
    /// already; writing them again would duplicate) and reopen, taking the
    /// size from the disk.
    pub fn recover(&mut self) -> io::Result<()> {
        if let Some(active) = self.active.take() {
            let (_file, _discarded) = active.into_parts();
        }
        self.open_active()
    }

    pub fn flush(&mut self) -> io::Result<()> {
        match self.active.as_mut() {
            Some(active) => active.flush(),
            None => Ok(()),
        }
    }

    /// Flush and fsync the active file (shutdown).
    pub fn sync(&mut self) -> io::Result<()> {
        match self.active.as_mut() {
            Some(active) => {
                active.flush()?;
                active.get_ref().sync_data()
            }
            None => Ok(()),
        }
    }

    /// Appends one line (ending in `\n`), rotating and deleting first as the
    /// limits require. On error nothing is counted as written and the caller
    /// should `recover`.
    pub fn write_line(&mut self, line: &[u8]) -> io::Result<Written> {
        let mut truncated = false;
        let cut;
        let cap = match (self.limits.max_file_bytes, self.limits.max_total_bytes) {
            (0, 0) => 0,
            (0, total) => total,
            (file, 0) => file,
            (file, total) => file.min(total),
        };
        let line = if cap > 0 && line.len() as u64 > cap {
            cut = truncate_line(line, cap as usize);
            truncated = true;
            &cut[..]
        } else {
            line
        };
        let length = line.len() as u64;
        let max_file = self.limits.max_file_bytes;
        if max_file > 0 && self.active_bytes > 0 && self.active_bytes + length > max_file {
            self.rotate(SystemTime::now())?;
        }
        if self.limits.max_total_bytes > 0 {
            self.make_room(length)?;
        }
        if self.active.is_none() {
            self.open_active()?;
        }
        let Some(active) = self.active.as_mut() else {
            return Err(io::Error::other("active log file not open"));
        };
        active.write_all(line)?;
        self.active_bytes += length;
        assert!(max_file == 0 || self.active_bytes <= max_file);
        let total = self.limits.max_total_bytes;
        assert!(total == 0 || self.total_bytes() <= total);
        Ok(Written {
            bytes: length,
            truncated,
        })
    }

    /// Renames the active file to the next rotated name and starts an empty
    /// one. An empty active file is not rotated. Returns the new name.
    pub fn rotate(&mut self, now: SystemTime) -> io::Result<Option<PathBuf>> {
        if self.active_bytes == 0 {
            return Ok(None);
        }
        if let Some(active) = self.active.as_mut() {
            active.flush()?;
        }
        let target = self.dir.join(rotated_name(now, self.next_sequence));
        std::fs::rename(self.active_path(), &target)?;
        self.rotated.push_back(Rotated {
            sequence: self.next_sequence,
            path: target.clone(),
            bytes: self.active_bytes,
        });
        self.rotated_bytes += self.active_bytes;
        self.next_sequence += 1;
        self.active = None;
        self.active_bytes = 0;
        self.open_active()?;
        self.checked();
        Ok(Some(target))
    }

    /// Deletes the oldest rotated files (rotating the active one into their
    /// place when it alone is too big) until `incoming` more bytes fit under
    /// `max_total_bytes`.
    fn make_room(&mut self, incoming: u64) -> io::Result<()> {
        let total = self.limits.max_total_bytes;
        let mut changed = false;
        while self.total_bytes() + incoming > total {
            if let Some(oldest) = self.rotated.front() {
                match std::fs::remove_file(&oldest.path) {
                    Ok(()) => {}
                    Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                    Err(error) => return Err(error),
                }
                self.rotated_bytes -= oldest.bytes;
                self.rotated.pop_front();
                changed = true;
            } else if self.active_bytes > 0 {
                self.rotate(SystemTime::now())?;
            } else {
                break;
            }
        }
        if changed {
            self.checked();
        }
        Ok(())
    }

    /// New limits, applied at once: an active file over the new file limit
    /// is rotated, and the directory is brought under the new total.
    pub fn set_limits(&mut self, limits: Limits) -> io::Result<()> {
        self.limits = limits;
        if limits.max_file_bytes > 0 && self.active_bytes > limits.max_file_bytes {
            self.rotate(SystemTime::now())?;
        }
        if limits.max_total_bytes > 0 {
            self.make_room(0)?;
        }
        Ok(())
    }

    /// The janitor's periodic check: re-read the directory, delete files
    /// whose last write is older than `retention` (the active one is rotated
    /// out first when even its newest line is that old), and re-apply the
    /// total cap. Returns how many files were deleted.
    pub fn enforce(&mut self, now: SystemTime) -> io::Result<usize> {
        self.rescan()?;
        let before = self.rotated.len();
        let retention = self.limits.retention;
        if !retention.is_zero() {
            let too_old = |path: &Path| {
                std::fs::metadata(path)
                    .and_then(|meta| meta.modified())
                    .map(|modified| now.duration_since(modified).unwrap_or_default() > retention)
                    .unwrap_or(false)
            };
            if self.active_bytes > 0 && too_old(&self.active_path()) {
                self.rotate(now)?;
            }
            let mut kept = VecDeque::with_capacity(self.rotated.len());
            while let Some(file) = self.rotated.pop_front() {
                if too_old(&file.path) {
                    match std::fs::remove_file(&file.path) {
                        Ok(()) => self.rotated_bytes -= file.bytes,
                        Err(error) if error.kind() == io::ErrorKind::NotFound => {
                            self.rotated_bytes -= file.bytes;
                        }
                        Err(error) => {
                            kept.push_back(file);
                            kept.extend(self.rotated.drain(..));
                            self.rotated = kept;
                            return Err(error);
                        }
                    }
                } else {
                    kept.push_back(file);
                }
            }
            self.rotated = kept;
        }
        if self.limits.max_total_bytes > 0 {
            self.make_room(0)?;
        }
        self.checked();
        Ok(before.saturating_sub(self.rotated.len()))
    }

    fn checked(&self) {
        if let Some(hook) = &self.hook {
            hook(&self.dir);
        }
    }
}

/// Cuts a line to at most `cap` bytes, on a character boundary, ending with
/// the truncation marker and a newline.
fn truncate_line(line: &[u8], cap: usize) -> Vec<u8> {
    let marker = TRUNCATED_MARKER.as_bytes();
    if cap <= marker.len() {
        // Only tiny limits (config forbids < 4 KiB) get here: keep a newline.
        return b"\n"[..cap.min(1)].to_vec();
    }
    let mut keep = cap - marker.len();
    // Step back to a UTF-8 boundary (continuation bytes are 0b10xx_xxxx).
    while keep > 0 && (line[keep] & 0b1100_0000) == 0b1000_0000 {
        keep -= 1;
    }
    let mut out = Vec::with_capacity(keep + marker.len());
    out.extend_from_slice(&line[..keep]);
    out.extend_from_slice(marker);
    assert!(out.len() <= cap);
    out
}

/// (largest file, total, every file with its size), in bytes.
#[cfg(test)]
pub type Measured = (u64, u64, Vec<(LogName, u64)>);

/// Sizes of the iggyd log files in `dir`, largest file and total (tests; the
/// writer keeps its own books).
#[cfg(test)]
pub fn measure(dir: &Path) -> io::Result<Measured> {
    let mut largest = 0;
    let mut total = 0;
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let Some(name) = entry.file_name().to_str().and_then(parse_name) else {
            continue;
        };
        let Ok(meta) = entry.metadata() else { continue };
        largest = largest.max(meta.len());
        total += meta.len();
        names.push((name, meta.len()));
    }
    Ok((largest, total, names))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_file_bytes: u64, max_total_bytes: u64) -> Limits {
        Limits {
            max_file_bytes,
            max_total_bytes,
            retention: Duration::ZERO,
            check_interval: Duration::from_secs(1),
        }
    }

    /// Proves only our own names are recognised, with their sequence.
    #[test]
    fn names_are_parsed_strictly() {
        assert_eq!(parse_name("iggyd.log"), Some(LogName::Active));
        assert_eq!(
            parse_name("iggyd.20261129T170843Z.000001.log"),
            Some(LogName::Rotated { sequence: 1 })
        );
        assert_eq!(
            parse_name("iggyd.20261129T170843Z.1234567.log"),
            Some(LogName::Rotated {
                sequence: 1_234_567
            })
        );
        for other in [
            "iggyd.log.1",
            "iggyd.20261129T170843.000001.log",
            "iggyd.20261129X170843Z.000001.log",
            "iggyd.20261129T170843Z..log",
            "iggyd.20261129T170843Z.00a001.log",
            "other.log",
            ".iggyd-logs.lock",
        ] {
            assert_eq!(parse_name(other), None, "{other}");
        }
        let name = rotated_name(
            std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
            42,
        );
        assert_eq!(name, "iggyd.20231114T221320Z.000042.log");
        assert_eq!(parse_name(&name), Some(LogName::Rotated { sequence: 42 }));
    }

    /// Proves a line that would overflow rotates first, an oversized line is
    /// truncated with the marker on a character boundary, the total cap
    /// deletes the oldest, and a reopen continues the sequence.
    #[test]
    fn rotation_caps_and_sequence_resume() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut files = LogFiles::open(dir.path(), limits(4096, 3 * 4096), None).expect("open");
        let line = vec![b'a'; 999];
        let mut line = line;
        line.push(b'\n');
        for _ in 0..40 {
            files.write_line(&line).expect("write");
            files.flush().expect("flush");
            let (largest, total, _) = measure(dir.path()).expect("measure");
            assert!(largest <= 4096, "{largest}");
            assert!(total <= 3 * 4096, "{total}");
        }
        let mut long = "é".repeat(5000).into_bytes();
        long.push(b'\n');
        let written = files.write_line(&long).expect("write long");
        assert!(written.truncated);
        assert!(written.bytes <= 4096);
        files.flush().expect("flush");
        let active = std::fs::read(dir.path().join(ACTIVE_NAME)).expect("read");
        let text = String::from_utf8(active).expect("still UTF-8");
        assert!(text.ends_with(TRUNCATED_MARKER), "{text:?}");
        let (_, _, names) = measure(dir.path()).expect("measure");
        let sequences = rotated_sequences(&names);
        assert!(sequences[0] > 1, "oldest deleted: {sequences:?}");
        let last = *sequences.last().expect("some rotated");
        drop(files);

        let mut files = LogFiles::open(dir.path(), limits(4096, 3 * 4096), None).expect("reopen");
        files.rotate(SystemTime::now()).expect("rotate");
        let (_, _, names) = measure(dir.path()).expect("measure");
        assert!(
            names
                .iter()
                .any(|(name, _)| *name == LogName::Rotated { sequence: last + 1 }),
            "the sequence continues after a reopen: {names:?}"
        );
    }
}
