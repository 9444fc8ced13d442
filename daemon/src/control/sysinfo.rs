//! Process and filesystem facts the admin snapshot reports, read from
//! `/proc` and `statvfs`: resident memory, a thread's CPU time, the threads
//! of this process by name, disk usage of a filesystem and the size of a
//! directory tree. Every function is a plain read with a typed result; none
//! caches, spawns or touches shard state, so the admin thread may call them
//! at any time. Parsing is split from reading so tests can feed text.

use std::io;
use std::path::Path;

/// Bytes of one memory page (`sysconf(_SC_PAGESIZE)`).
pub fn page_size_bytes() -> u64 {
    // SAFETY: sysconf has no preconditions; it only reads a constant.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size)
        .ok()
        .filter(|size| *size > 0)
        .unwrap_or(4096)
}

/// Clock ticks per second of `/proc` CPU times (`sysconf(_SC_CLK_TCK)`).
fn clock_ticks_per_second() -> u64 {
    // SAFETY: as above.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks)
        .ok()
        .filter(|ticks| *ticks > 0)
        .unwrap_or(100)
}

/// Open file descriptors of this process: the entries of `/proc/self/fd`
/// (less the one the listing itself holds open).
pub fn open_fds() -> io::Result<u64> {
    let entries = std::fs::read_dir("/proc/self/fd")?.count() as u64;
    Ok(entries.saturating_sub(1))
}

/// Resident set size of this process, from `/proc/self/statm`.
pub fn rss_bytes() -> io::Result<u64> {
    let text = std::fs::read_to_string("/proc/self/statm")?;
    parse_statm_resident_pages(&text)
        .map(|pages| pages * page_size_bytes())
        .ok_or_else(|| invalid(format!("unexpected /proc/self/statm: {text:?}")))
}

/// The second field of `statm`: resident pages.
pub fn parse_statm_resident_pages(text: &str) -> Option<u64> {
    text.split_whitespace().nth(1)?.parse().ok()
}

/// CPU time (user + system) of thread `tid` of this process, in milliseconds.
pub fn thread_cpu_time_ms(tid: i32) -> io::Result<u64> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))?;
    let (user_ticks, system_ticks) = parse_stat_cpu_ticks(&text)
        .ok_or_else(|| invalid(format!("unexpected /proc/self/task/{tid}/stat")))?;
    Ok((user_ticks + system_ticks) * 1000 / clock_ticks_per_second())
}

/// CPU time (user + system) of thread `tid` of this process in
/// nanoseconds, from the kernel's per-thread CPU clock: one
/// `clock_gettime` instead of opening and parsing `/proc/.../stat` (which
/// the kernel formats in full on every read), and exact rather than in
/// clock ticks. The clock id is the one glibc's `pthread_getcpuclockid`
/// builds (`MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)` in the kernel's
/// posix-cpu-timers ABI); the kernel refuses threads of other processes.
pub fn thread_cpu_time_ns(tid: i32) -> io::Result<u64> {
    const CPUCLOCK_SCHED: libc::clockid_t = 2;
    const CPUCLOCK_PERTHREAD_MASK: libc::clockid_t = 4;
    // The id keeps the tid in its upper 29 bits; any real tid fits
    // (`pid_max` is at most 2^22), and a larger one must not wrap into
    // another thread's id (0 would name the calling thread).
    if !(1..=i32::MAX >> 3).contains(&tid) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("thread id {tid} is out of range"),
        ));
    }
    let clock = ((!tid) << 3) | CPUCLOCK_PERTHREAD_MASK | CPUCLOCK_SCHED;
    let mut time = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `time` is a valid, writable timespec for the call's duration;
    // an invalid clock id is answered with EINVAL, never undefined behaviour.
    let result = unsafe { libc::clock_gettime(clock, &mut time) };
    if result != 0 {
        return Err(io::Error::last_os_error());
    }
    let seconds = u64::try_from(time.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(time.tv_nsec).unwrap_or(0);
    Ok(seconds.saturating_mul(1_000_000_000).saturating_add(nanos))
}

/// `utime` and `stime` (fields 14 and 15) of a `/proc/.../stat` line. The
/// command name (field 2) may contain spaces and parentheses, so fields are
/// counted from the last `)`.
pub fn parse_stat_cpu_ticks(text: &str) -> Option<(u64, u64)> {
    let after_name = &text[text.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace();
    // After the name: state is field 3, so utime (14) is the 12th field here.
    let user = fields.nth(11)?.parse().ok()?;
    let system = fields.next()?.parse().ok()?;
    Some((user, system))
}

/// `(tid, name)` of every thread of this process whose name starts with
/// `prefix`. Threads that exit while being listed are skipped.
pub fn threads_named(prefix: &str) -> io::Result<Vec<(i32, String)>> {
    let mut threads = Vec::new();
    for entry in std::fs::read_dir("/proc/self/task")? {
        let Ok(entry) = entry else { continue };
        let Some(tid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse().ok())
        else {
            continue;
        };
        let Ok(name) = std::fs::read_to_string(entry.path().join("comm")) else {
            continue;
        };
        let name = name.trim_end_matches('\n');
        if name.starts_with(prefix) {
            threads.push((tid, name.to_string()));
        }
    }
    threads.sort();
    Ok(threads)
}

/// Space of the filesystem holding a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskUsage {
    pub total_bytes: u64,
    /// Blocks in use (total minus all free blocks, the root reserve included).
    pub used_bytes: u64,
    /// Blocks an unprivileged writer may still use.
    pub free_bytes: u64,
}

pub fn disk_usage(path: &Path) -> io::Result<DiskUsage> {
    let stat = nix::sys::statvfs::statvfs(path).map_err(io::Error::from)?;
    let fragment = stat.fragment_size() as u64;
    let total = stat.blocks() as u64;
    let free_all = stat.blocks_free() as u64;
    let available = stat.blocks_available() as u64;
    Ok(DiskUsage {
        total_bytes: total.saturating_mul(fragment),
        used_bytes: total.saturating_sub(free_all).saturating_mul(fragment),
        free_bytes: available.saturating_mul(fragment),
    })
}

/// Sum of the lengths of the regular files under `path` (symbolic links are
/// not followed; a missing directory is 0 bytes). The apparent size is what
/// the log size limits count, so it is what is reported.
pub fn dir_size_bytes(path: &Path) -> io::Result<u64> {
    let mut total = 0u64;
    let mut pending = vec![path.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
            Err(error) => return Err(error),
        };
        for entry in entries.flatten() {
            let Ok(metadata) = entry.metadata() else {
                continue; // removed while walking
            };
            if metadata.is_dir() {
                pending.push(entry.path());
            } else if metadata.is_file() {
                total = total.saturating_add(metadata.len());
            }
        }
    }
    Ok(total)
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves the statm parser takes the resident field and that the live
    /// value is plausible (a running test binary has some resident memory).
    #[test]
    fn rss_is_read_from_statm() {
        assert_eq!(
            parse_statm_resident_pages("1000 250 30 1 0 200 0\n"),
            Some(250)
        );
        assert_eq!(parse_statm_resident_pages("1000\n"), None);
        let rss = rss_bytes().unwrap();
        assert!(rss > 1024 * 1024, "rss {rss}");
    }

    /// Proves utime/stime are found after a command name with spaces and
    /// parentheses, and that this thread's own CPU time can be read.
    #[test]
    fn thread_cpu_time_parses_and_reads() {
        let line = "4242 (shard (0) x) S 1 4242 4242 0 -1 4194368 100 0 0 0 \
                    1234 567 0 0 20 0 3 0 12345 1000 100 18446744073709551615";
        assert_eq!(parse_stat_cpu_ticks(line), Some((1234, 567)));
        assert_eq!(parse_stat_cpu_ticks("42 (short) S 1 2"), None);
        assert_eq!(parse_stat_cpu_ticks("no paren"), None);
        // Burn a little CPU on this thread so its time is likely non-zero.
        let mut sum = 0u64;
        for value in 0..3_000_000u64 {
            sum = sum.wrapping_add(value * value);
        }
        assert_ne!(sum, 1);
        let tid = nix::unistd::gettid().as_raw();
        let cpu_ms = thread_cpu_time_ms(tid).unwrap();
        assert!(cpu_ms < 3_600_000, "{cpu_ms}");
        assert!(thread_cpu_time_ms(i32::MAX).is_err());
        // The thread CPU clock agrees with /proc (which counts in ticks of
        // at most 10 ms) and moves with work; other tids are refused.
        let clock_ns = thread_cpu_time_ns(tid).unwrap();
        let proc_ms = thread_cpu_time_ms(tid).unwrap();
        let clock_ms = clock_ns / 1_000_000;
        assert!(
            clock_ms + 20 >= proc_ms && clock_ms <= proc_ms + 20,
            "clock {clock_ms} ms, /proc {proc_ms} ms"
        );
        for value in 0..3_000_000u64 {
            sum = sum.wrapping_add(value ^ sum);
        }
        assert_ne!(sum, 1);
        assert!(thread_cpu_time_ns(tid).unwrap() > clock_ns);
        assert!(thread_cpu_time_ns(i32::MAX).is_err());
        assert!(thread_cpu_time_ns(0).is_err());
        assert!(thread_cpu_time_ns(4_194_305).is_err(), "beyond pid_max");
        assert!(thread_cpu_time_ns(1).is_err(), "pid 1's thread is not ours");
    }

    /// Proves threads are found by name prefix.
    #[test]
    fn threads_are_listed_by_name() {
        let (started, ready) = std::sync::mpsc::channel();
        let (finish, finished) = std::sync::mpsc::channel::<()>();
        let handle = std::thread::Builder::new()
            .name("sysinfo-probe".into())
            .spawn(move || {
                started.send(nix::unistd::gettid().as_raw()).unwrap();
                let _ = finished.recv();
            })
            .unwrap();
        let tid = ready.recv().unwrap();
        let found = threads_named("sysinfo-pro").unwrap();
        assert_eq!(found, vec![(tid, "sysinfo-probe".to_string())]);
        finish.send(()).unwrap();
        handle.join().unwrap();
    }

    /// Proves disk usage is consistent (used + free never exceeds total) and
    /// directory sizes add up file lengths, recursing, with a missing
    /// directory counting as empty.
    #[test]
    fn disk_and_directory_sizes() {
        let dir = tempfile::tempdir().unwrap();
        let usage = disk_usage(dir.path()).unwrap();
        assert!(usage.total_bytes > 0);
        assert!(usage.used_bytes + usage.free_bytes <= usage.total_bytes);
        std::fs::write(dir.path().join("a.log"), vec![0u8; 1000]).unwrap();
        std::fs::create_dir(dir.path().join("old")).unwrap();
        std::fs::write(dir.path().join("old/b.log"), vec![0u8; 234]).unwrap();
        assert_eq!(dir_size_bytes(dir.path()).unwrap(), 1234);
        assert_eq!(dir_size_bytes(&dir.path().join("missing")).unwrap(), 0);
        assert!(disk_usage(&dir.path().join("missing")).is_err());
    }
}
