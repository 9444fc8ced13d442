//! The files of a snapshot ZIP, each produced from one source: the data
//! directory tree, `/proc`, the admin snapshot, the log directory, the
//! metadata view, the OS. Every function is bounded (`limits::SNAPSHOT_*`)
//! and turns a failure to read into a line in the file, never an error: a
//! snapshot is for diagnosing a sick host, so it reports what it could not
//! read instead of failing.
//!
//! Must not: include secrets (password hashes, token hashes, the root
//! password) or write anywhere.

use super::SnapshotFileRequest;
use crate::control::ControlSource;
use crate::limits;
use iggyd_metadata::MetadataView;
use serde_json::json;
use std::fmt::Write as _;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|text| text.trim().to_string())
        .unwrap_or_else(|error| format!("(unreadable: {error})"))
}

/// `PRETTY_NAME` of `/etc/os-release`, or the whole file's first line.
fn os_name() -> String {
    let text = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    text.lines()
        .find_map(|line| line.strip_prefix("PRETTY_NAME="))
        .map(|name| name.trim_matches('"').to_string())
        .unwrap_or_else(|| "unknown".to_string())
}

/// `summary.json`: what this is, from where, and what was asked.
pub(super) fn summary(
    request: &SnapshotFileRequest,
    files: &[&str],
    admin: &dyn ControlSource,
) -> Vec<u8> {
    let hello = admin.hello();
    let summary = json!({
        "iggyd_version": hello.version,
        "taken_at_unix_ms": std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_millis() as u64),
        "pid": hello.pid,
        "uptime_ms": hello.uptime_ms,
        "host": {
            "hostname": read_trimmed("/proc/sys/kernel/hostname"),
            "os": os_name(),
            "kernel": read_trimmed("/proc/sys/kernel/osrelease"),
            "kernel_version": read_trimmed("/proc/sys/kernel/version"),
            "arch": std::env::consts::ARCH,
            "cpus_online": std::thread::available_parallelism().map_or(0, usize::from),
        },
        "requested": {
            "compression": request.compression.name(),
            "types": request.types.iter().map(|kind| kind.name()).collect::<Vec<_>>(),
        },
        "files": files,
    });
    serde_json::to_vec_pretty(&summary).unwrap_or_default()
}

/// `filesystem_overview.txt`: disk usage of the data directory's file
/// system, then its tree (size, mode, path), depth first, at most
/// `SNAPSHOT_FILESYSTEM_ENTRIES_MAX` entries.
pub(super) fn filesystem_overview(data_dir: &Path) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "data directory: {}", data_dir.display());
    match crate::control::sysinfo::disk_usage(data_dir) {
        Ok(disk) => {
            let _ = writeln!(
                out,
                "file system: {} bytes total, {} used, {} free",
                disk.total_bytes, disk.used_bytes, disk.free_bytes
            );
        }
        Err(error) => {
            let _ = writeln!(out, "file system: (unreadable: {error})");
        }
    }
    let _ = writeln!(out, "\n{:>14}  {:>6}  path", "bytes", "mode");
    let mut stack = vec![data_dir.to_path_buf()];
    let mut listed = 0usize;
    let mut total_bytes = 0u64;
    while let Some(dir) = stack.pop() {
        let mut entries: Vec<PathBuf> = match std::fs::read_dir(&dir) {
            Ok(entries) => entries
                .filter_map(Result::ok)
                .map(|entry| entry.path())
                .collect(),
            Err(error) => {
                let _ = writeln!(
                    out,
                    "{:>14}  {:>6}  {} (unreadable: {error})",
                    "-",
                    "-",
                    dir.display()
                );
                continue;
            }
        };
        entries.sort();
        for path in entries.into_iter().rev() {
            let Ok(metadata) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            listed += 1;
            if listed > limits::SNAPSHOT_FILESYSTEM_ENTRIES_MAX {
                let _ = writeln!(
                    out,
                    "… stopped after {} entries",
                    limits::SNAPSHOT_FILESYSTEM_ENTRIES_MAX
                );
                return out;
            }
            let relative = path.strip_prefix(data_dir).unwrap_or(&path);
            let suffix = if metadata.is_dir() { "/" } else { "" };
            let _ = writeln!(
                out,
                "{:>14}  {:>6o}  {}{suffix}",
                metadata.len(),
                metadata.mode() & 0o7777,
                relative.display()
            );
            if metadata.is_dir() {
                stack.push(path);
            } else {
                total_bytes += metadata.len();
            }
        }
    }
    let _ = writeln!(out, "\n{listed} entries, {total_bytes} bytes in files");
    out
}

/// One `/proc/<pid>/stat` line as `(ppid, state, threads, rss pages, name)`.
fn parse_stat(text: &str) -> Option<(i64, char, i64, i64, String)> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let name = text.get(open + 1..close)?.to_string();
    let fields: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    // After the name: state (3), ppid (4), … num_threads (20), rss (24).
    let state = fields.first()?.chars().next()?;
    let ppid = fields.get(1)?.parse().ok()?;
    let threads = fields.get(17)?.parse().ok()?;
    let rss = fields.get(21)?.parse().ok()?;
    Some((ppid, state, threads, rss, name))
}

/// `process_list.txt`: every process `/proc` shows (at most
/// `SNAPSHOT_PROCESSES_MAX`), then this daemon's threads with CPU time.
pub(super) fn process_list() -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>8} {:>8} {:>5} {:>7} {:>12}  command",
        "pid", "ppid", "state", "threads", "rss_kib"
    );
    let page_kib = crate::control::sysinfo::page_size_bytes() as i64 / 1024;
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    pids.sort_unstable();
    for (listed, pid) in pids.iter().enumerate() {
        if listed >= limits::SNAPSHOT_PROCESSES_MAX {
            let _ = writeln!(out, "… stopped after {listed} processes");
            break;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((ppid, state, threads, rss, name)) = parse_stat(&stat) else {
            continue;
        };
        let command = std::fs::read(format!("/proc/{pid}/cmdline"))
            .ok()
            .filter(|bytes| !bytes.is_empty())
            .map(|bytes| {
                let mut line = String::from_utf8_lossy(&bytes).replace('\0', " ");
                line.truncate(line.trim_end().len().min(limits::SNAPSHOT_COMMAND_LINE_MAX));
                line
            })
            .unwrap_or_else(|| format!("[{name}]"));
        let _ = writeln!(
            out,
            "{pid:>8} {ppid:>8} {state:>5} {threads:>7} {:>12}  {command}",
            rss * page_kib
        );
    }
    let _ = writeln!(out, "\nthreads of iggyd (pid {}):", std::process::id());
    let _ = writeln!(out, "{:>8} {:>12}  name", "tid", "cpu_ms");
    match crate::control::sysinfo::threads_named("") {
        Ok(mut threads) => {
            threads.sort();
            for (tid, name) in threads {
                let cpu = crate::control::sysinfo::thread_cpu_time_ms(tid)
                    .map_or_else(|_| "-".to_string(), |ms| ms.to_string());
                let _ = writeln!(out, "{tid:>8} {cpu:>12}  {name}");
            }
        }
        Err(error) => {
            let _ = writeln!(out, "(unreadable: {error})");
        }
    }
    out
}

/// `resource_usage.json`: the admin snapshot (process, per-shard stats and
/// latencies, topics, recent warnings) and the host's load and memory.
pub(super) fn resource_usage(admin: &dyn ControlSource) -> Vec<u8> {
    let meminfo: Vec<String> = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .filter(|line| {
            [
                "MemTotal:",
                "MemFree:",
                "MemAvailable:",
                "Cached:",
                "SwapTotal:",
                "SwapFree:",
            ]
            .iter()
            .any(|key| line.starts_with(key))
        })
        .map(|line| line.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    let usage = json!({
        "daemon": admin.snapshot(),
        "host": {
            "loadavg": read_trimmed("/proc/loadavg"),
            "meminfo": meminfo,
        },
    });
    serde_json::to_vec_pretty(&usage).unwrap_or_default()
}

/// Paths of the daemon's log files, newest first.
fn log_files_newest_first(dir: &Path) -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<(u64, String, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let rank = match crate::logging::parse_log_name(&name)? {
                crate::logging::LogName::Active => u64::MAX,
                crate::logging::LogName::Rotated { sequence } => sequence,
            };
            Some((rank, name, entry.path()))
        })
        .collect();
    files.sort_by_key(|(rank, _, _)| std::cmp::Reverse(*rank));
    files
        .into_iter()
        .map(|(_, name, path)| (name, path))
        .collect()
}

/// The last whole lines of `path`, at most `lines` lines and `bytes` bytes.
fn tail(path: &Path, lines: usize, bytes: u64) -> std::io::Result<Vec<u8>> {
    let mut file = std::fs::File::open(path)?;
    let length = file.metadata()?.len();
    let start = length.saturating_sub(bytes);
    file.seek(SeekFrom::Start(start))?;
    let mut text = Vec::new();
    file.take(bytes).read_to_end(&mut text)?;
    if start > 0 {
        // Drop the partial first line.
        let first_newline = text
            .iter()
            .position(|byte| *byte == b'\n')
            .map_or(text.len(), |at| at + 1);
        text.drain(..first_newline);
    }
    let newlines: Vec<usize> = text
        .iter()
        .enumerate()
        .filter_map(|(at, byte)| (*byte == b'\n').then_some(at))
        .collect();
    // Keep the text after the newline that ends line `count - lines`.
    let complete = newlines.len() + usize::from(text.last().is_some_and(|byte| *byte != b'\n'));
    if complete > lines {
        let cut = newlines[complete - lines - 1] + 1;
        text.drain(..cut);
    }
    Ok(text)
}

/// `logs/<file>`: the last `SNAPSHOT_LOG_LINES_MAX` lines (and at most
/// `SNAPSHOT_LOG_BYTES_MAX` bytes) over the newest log files.
pub(super) fn log_tails(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut lines_left = limits::SNAPSHOT_LOG_LINES_MAX;
    let mut bytes_left = limits::SNAPSHOT_LOG_BYTES_MAX;
    let mut tails = Vec::new();
    for (name, path) in log_files_newest_first(dir) {
        if lines_left == 0 || bytes_left == 0 {
            break;
        }
        let text = match tail(&path, lines_left, bytes_left) {
            Ok(text) => text,
            Err(error) => format!("(unreadable: {error})\n").into_bytes(),
        };
        let lines = text.iter().filter(|byte| **byte == b'\n').count();
        lines_left = lines_left.saturating_sub(lines.max(1));
        bytes_left = bytes_left.saturating_sub(text.len() as u64);
        tails.push((name, text));
    }
    if tails.is_empty() {
        tails.push((
            "README.txt".to_string(),
            format!(
                "no iggyd log files in {} (the journal has the same events: journalctl -u iggyd)\n",
                dir.display()
            )
            .into_bytes(),
        ));
    }
    tails
}

/// `metadata.json`: streams, topics (with options), partitions, consumer
/// groups (members and assignments), users (permissions, token names and
/// expiry). Never a password hash or a token hash.
pub(super) fn metadata(view: Option<&MetadataView>) -> Vec<u8> {
    let Some(view) = view else {
        return b"{\"error\": \"no metadata view published yet\"}\n".to_vec();
    };
    let streams: Vec<serde_json::Value> = view
        .streams()
        .map(|stream| {
            let topics: Vec<serde_json::Value> = stream
                .topics
                .values()
                .map(|topic| {
                    let groups: Vec<serde_json::Value> = topic
                        .groups
                        .values()
                        .map(|group| {
                            json!({
                                "id": group.id,
                                "name": group.name,
                                "generation": group.generation,
                                "members": group.members.iter().map(|member| json!({
                                    "partitions": member.partitions,
                                })).collect::<Vec<_>>(),
                            })
                        })
                        .collect();
                    json!({
                        "id": topic.id,
                        "name": topic.name,
                        "created_at_us": topic.created_at_us,
                        "partitions": topic.partitions.iter().map(|partition| json!({
                            "id": partition.id,
                            "owner_shard": partition.owner_shard,
                        })).collect::<Vec<_>>(),
                        "options": topic.options,
                        "consumer_groups": groups,
                    })
                })
                .collect();
            json!({
                "id": stream.id,
                "name": stream.name,
                "created_at_us": stream.created_at_us,
                "topics": topics,
            })
        })
        .collect();
    let users: Vec<serde_json::Value> = view
        .users()
        .map(|user| {
            json!({
                "id": user.id,
                "username": user.username,
                "status": user.status,
                "created_at_us": user.created_at_us,
                "permissions": user.permissions.as_ref().map(|permissions| format!("{permissions:?}")),
                "personal_access_tokens": user.tokens.values().map(|token| json!({
                    "name": token.name,
                    "expiry_at_us": token.expiry_at_us,
                    "created_at_us": token.created_at_us,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let summary = json!({
        "streams_count": view.streams_count(),
        "topics_count": view.topics_count(),
        "partitions_count": view.partitions_count(),
        "consumer_groups_count": view.consumer_groups_count(),
        "streams": streams,
        "users": users,
    });
    serde_json::to_vec_pretty(&summary).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves a tail keeps whole lines only: the last N lines, and within a
    /// byte budget it drops the partial first line.
    #[test]
    fn tail_keeps_the_last_whole_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("iggyd.log");
        std::fs::write(&path, "one\ntwo\nthree\nfour\n").unwrap();
        assert_eq!(tail(&path, 2, 1 << 20).unwrap(), b"three\nfour\n");
        assert_eq!(
            tail(&path, 10, 1 << 20).unwrap(),
            b"one\ntwo\nthree\nfour\n"
        );
        assert_eq!(tail(&path, 10, 8).unwrap(), b"four\n");
        std::fs::write(&path, "one\ntwo\npartial").unwrap();
        assert_eq!(tail(&path, 2, 1 << 20).unwrap(), b"two\npartial");
    }

    #[test]
    fn stat_lines_parse_with_odd_names() {
        let line = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 7 0 100 \
                    1000000 250 18446744073709551615";
        assert_eq!(
            parse_stat(line),
            Some((1, 'S', 7, 250, "a (b) c".to_string()))
        );
        assert_eq!(parse_stat("garbage"), None);
    }
}
