//! The doctor's write-latency probe: 1 MiB writes appended to a file in the
//! data directory (with `O_DIRECT` when the file system takes it, as the
//! segments are written), each followed by `fdatasync`, for the probe time;
//! p50 and p99 of the write, of the sync and of both, against what a
//! `persisted` send needs (it is acknowledged after the write and the fsync
//! of its group commit, so its p99 is at least this probe's).
//!
//! The file is unlinked as soon as it is open, so nothing is left behind even
//! if the doctor is killed; it never grows past [`WINDOW_BYTES`] or a
//! quarter of the free space (it is emptied, untimed, and filled again). Must not: write anywhere else, or run
//! past the probe time by more than one write and sync.

use super::data_dir::DataDir;
use super::{Check, fmt_duration};
use iggyd_metadata::Durability;
use std::fs::File;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

/// One write: a large group commit's worth.
const CHUNK_BYTES: usize = 1024 * 1024;
/// The file is emptied when the next write would pass this, or a quarter
/// of the free space when that is less (at least one write).
const WINDOW_BYTES: u64 = 64 * 1024 * 1024;
/// At most this many samples, whatever the probe time.
const SAMPLES_MAX: usize = 100_000;
/// A p99 of write + fsync up to this keeps a `persisted` send's
/// acknowledgement within what a message bus is expected to answer in (an
/// SSD's flush takes well under it; a disk arm's seek and a busy cloud
/// volume take about as much).
pub(super) const PERSISTED_P99_GOOD: Duration = Duration::from_millis(10);
/// Above this p99, every `persisted` producer waits tens of milliseconds a
/// send, and group commits pile up behind a slow flush.
pub(super) const PERSISTED_P99_BAD: Duration = Duration::from_millis(50);

/// Creates a new file in `dir` (with `O_DIRECT` when `direct`) and unlinks
/// it at once: the open descriptor is all that is left of it.
pub(super) fn unnamed_file(dir: &Path, direct: bool) -> std::io::Result<File> {
    let path = dir.join(format!(".iggyd-doctor-{}.probe", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(if direct { libc::O_DIRECT } else { 0 })
        .open(&path)?;
    std::fs::remove_file(&path)?;
    Ok(file)
}

/// The time of each write and each sync, in the order taken.
#[derive(Debug, Default)]
pub(super) struct Samples {
    pub writes: Vec<Duration>,
    pub syncs: Vec<Duration>,
    pub elapsed: Duration,
}

/// Writes 1 MiB and syncs it, again and again for `probe_time` (at least
/// once).
fn probe(dir: &Path, direct: bool, probe_time: Duration) -> std::io::Result<Samples> {
    let file = unnamed_file(dir, direct)?;
    let free = nix::sys::statvfs::statvfs(dir)
        .map(|stats| {
            stats
                .blocks_available()
                .saturating_mul(stats.fragment_size())
        })
        .unwrap_or(WINDOW_BYTES);
    let chunk_bytes = CHUNK_BYTES as u64;
    let window = (free / 4 / chunk_bytes * chunk_bytes).clamp(chunk_bytes, WINDOW_BYTES);
    let mut chunk = iggyd_storage::AlignedBuf::with_capacity(CHUNK_BYTES);
    // Bytes that do not compress or deduplicate (xorshift), so a device
    // that does either cannot make the write look cheaper than a batch.
    let mut state = 0x9e37_79b9_7f4a_7c15_u64 ^ u64::from(std::process::id());
    while chunk.len() < CHUNK_BYTES {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        chunk.extend_from_slice(&state.to_le_bytes());
    }
    let started = Instant::now();
    let deadline = started + probe_time;
    let mut samples = Samples::default();
    let mut offset = 0u64;
    while samples.writes.is_empty()
        || (Instant::now() < deadline && samples.writes.len() < SAMPLES_MAX)
    {
        if offset + chunk_bytes > window {
            file.set_len(0)?;
            offset = 0;
        }
        let before = Instant::now();
        file.write_all_at(chunk.as_slice(), offset)?;
        let written = Instant::now();
        file.sync_data()?;
        let synced = Instant::now();
        samples.writes.push(written - before);
        samples.syncs.push(synced - written);
        offset += chunk_bytes;
    }
    samples.elapsed = started.elapsed();
    Ok(samples)
}

/// The `percent` percentile (nearest rank) of `values`; zero when empty.
pub(super) fn percentile(values: &[Duration], percent: u32) -> Duration {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (sorted.len() * percent as usize).div_ceil(100).max(1);
    sorted[rank.min(sorted.len()) - 1]
}

/// The write-latency check.
pub(super) fn write_latency(
    state: &DataDir,
    direct: bool,
    probe_time: Duration,
    durability: Durability,
) -> Check {
    const ID: &str = "write_latency";
    let Some(dir) = &state.probe_dir else {
        return state.nowhere_to_probe(ID);
    };
    let how = if direct {
        "direct (O_DIRECT)"
    } else {
        "buffered"
    };
    let samples = match probe(dir, direct, probe_time) {
        Ok(samples) => samples,
        Err(error) => {
            return Check::fail(
                ID,
                format!(
                    "a 1 MiB {how} write and fdatasync in {} failed: {error}{}",
                    dir.display(),
                    state.probe_note()
                ),
                "run the doctor as the service's user (sudo -u iggyd iggyd doctor) on a \
                 writable data directory with free space",
            );
        }
    };
    let together: Vec<Duration> = samples
        .writes
        .iter()
        .zip(&samples.syncs)
        .map(|(write, sync)| *write + *sync)
        .collect();
    let figures = Figures {
        count: together.len(),
        elapsed: samples.elapsed,
        write: (
            percentile(&samples.writes, 50),
            percentile(&samples.writes, 99),
        ),
        sync: (
            percentile(&samples.syncs, 50),
            percentile(&samples.syncs, 99),
        ),
        both: (percentile(&together, 50), percentile(&together, 99)),
    };
    let waits = match durability {
        Durability::Persisted => "storage.default_durability = persisted: every send waits for one",
        Durability::Replicated => "topics that ask for persisted wait for one a send",
    };
    let measured = format!(
        "{} 1 MiB {how} writes + fdatasync on {} in {:.1} s: write p50 {} p99 {}, fdatasync \
         p50 {} p99 {}, together p50 {} p99 {} ({waits}; persisted wants a p99 under {}){}",
        figures.count,
        state.file_system(),
        figures.elapsed.as_secs_f64(),
        fmt_duration(figures.write.0),
        fmt_duration(figures.write.1),
        fmt_duration(figures.sync.0),
        fmt_duration(figures.sync.1),
        fmt_duration(figures.both.0),
        fmt_duration(figures.both.1),
        fmt_duration(PERSISTED_P99_GOOD),
        state.probe_note(),
    );
    verdict(&figures, measured)
        .value("samples", figures.count as u64)
        .value("direct", direct)
        .value("write_p50_us", micros(figures.write.0))
        .value("write_p99_us", micros(figures.write.1))
        .value("fdatasync_p50_us", micros(figures.sync.0))
        .value("fdatasync_p99_us", micros(figures.sync.1))
        .value("total_p50_us", micros(figures.both.0))
        .value("total_p99_us", micros(figures.both.1))
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// The percentiles the verdict is drawn from.
#[derive(Debug, Clone, Copy)]
struct Figures {
    count: usize,
    elapsed: Duration,
    /// (p50, p99)
    write: (Duration, Duration),
    sync: (Duration, Duration),
    both: (Duration, Duration),
}

fn verdict(figures: &Figures, measured: String) -> Check {
    const ID: &str = "write_latency";
    let p99 = figures.both.1;
    if p99 <= PERSISTED_P99_GOOD {
        Check::pass(ID, measured)
    } else if p99 <= PERSISTED_P99_BAD {
        Check::warn(
            ID,
            measured,
            "persisted sends will wait this long: put data_dir on a faster device (an SSD with \
             power-loss protection), or use replicated topics where a crash may take the \
             unsynced tail",
        )
    } else {
        Check::fail(
            ID,
            measured,
            "this device cannot keep persisted sends fast: move data_dir to an SSD or NVMe \
             device, look for an I/O limit on the service (IOWriteBandwidthMax=, io.max, \
             blkio throttling) or a saturated volume",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::Status;
    use super::*;

    fn ms(value: u64) -> Duration {
        Duration::from_millis(value)
    }

    // Proves percentiles are nearest-rank: p50 of 1..=100 ms is 50 ms, p99
    // is 99 ms, one sample is every percentile, none gives zero.
    #[test]
    fn percentiles_are_nearest_rank() {
        let values: Vec<Duration> = (1..=100).rev().map(ms).collect();
        assert_eq!(percentile(&values, 50), ms(50));
        assert_eq!(percentile(&values, 99), ms(99));
        assert_eq!(percentile(&values, 100), ms(100));
        assert_eq!(percentile(&[ms(7)], 99), ms(7));
        assert_eq!(percentile(&[], 99), Duration::ZERO);
    }

    // Proves the verdict follows the p99 of write + fsync: under the good
    // bound passes, between the bounds warns, above the bad one fails.
    #[test]
    fn verdict_follows_the_p99_of_write_and_sync() {
        let figures = |p99: Duration| Figures {
            count: 10,
            elapsed: ms(1000),
            write: (ms(1), ms(1)),
            sync: (ms(1), ms(1)),
            both: (ms(2), p99),
        };
        let status = |p99| verdict(&figures(p99), String::new()).status;
        assert_eq!(status(PERSISTED_P99_GOOD), Status::Pass);
        assert_eq!(status(PERSISTED_P99_GOOD + ms(1)), Status::Warn);
        assert_eq!(status(PERSISTED_P99_BAD), Status::Warn);
        assert_eq!(status(PERSISTED_P99_BAD + ms(1)), Status::Fail);
    }

    // Proves the probe measures real writes in a directory, stops near the
    // probe time, and leaves nothing behind in it.
    #[test]
    fn the_probe_writes_measures_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let samples = probe(dir.path(), false, ms(100)).unwrap();
        assert!(!samples.writes.is_empty());
        assert_eq!(samples.writes.len(), samples.syncs.len());
        assert!(samples.elapsed >= ms(100), "{:?}", samples.elapsed);
        assert!(samples.elapsed < ms(5000), "{:?}", samples.elapsed);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    // Proves a directory the probe cannot write in is an error, not a
    // measurement.
    #[test]
    fn a_missing_directory_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(probe(&dir.path().join("absent"), false, ms(10)).is_err());
    }
}
