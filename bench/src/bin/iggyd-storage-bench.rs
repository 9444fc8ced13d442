//! `iggyd-storage-bench`: the storage benchmarks of `iggyd_bench::storage`
//! (append, read, recovery, idle memory), each as a ratio to a raw baseline
//! on the same disk measured in the same run. Defaults keep a run to a
//! couple of minutes on a small VM; the flags scale it up.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use serde_json::{Value, json};

use iggyd_bench::report::{Row, table};
use iggyd_bench::storage::{self, StorageConfig};

const MIB: u64 = 1024 * 1024;

#[derive(Debug, Parser)]
#[command(
    name = "iggyd-storage-bench",
    version,
    about = "iggyd storage benchmarks against raw disk baselines"
)]
struct Args {
    /// Parent directory for the benchmark's files (same disk as the data you care about).
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    #[arg(long, default_value_t = 1000)]
    message_size: usize,
    #[arg(long, default_value_t = 1000)]
    messages_per_batch: u32,
    /// MiB appended per append scenario.
    #[arg(long, default_value_t = 256)]
    append_mib: u64,
    /// MiB of clean segments for the recovery measurement.
    #[arg(long, default_value_t = 1024)]
    recovery_mib: u64,
    #[arg(long, default_value_t = 256)]
    recovery_segment_mib: u64,
    #[arg(long, default_value_t = 1000)]
    idle_partitions: u32,
    #[arg(long, default_value_t = 3)]
    idle_segments: u32,
    /// Messages per poll in the read measurement.
    #[arg(long, default_value_t = 10_000)]
    poll_count: u32,
    /// Repetitions of the append/read measurements (medians are shown).
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Time recovery with a cold page cache (drops the whole machine's
    /// caches through /proc/sys/vm/drop_caches; needs root).
    #[arg(long)]
    cold_recovery: bool,
    /// Write segments through the page cache instead of with direct I/O.
    #[arg(long)]
    buffered: bool,
    #[arg(long)]
    json: bool,
    /// Internal: open the partitions under this directory and print RSS
    /// before/after as JSON (the idle-memory measurement's fresh process).
    #[arg(long, hide = true)]
    idle_child: Option<PathBuf>,
    #[arg(long, hide = true, default_value_t = 0)]
    idle_segment_bytes: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(dir) = &args.idle_child {
        return match storage::idle_open(dir, args.idle_partitions, args.idle_segment_bytes) {
            Ok((before, after, heap)) => {
                let out = json!({
                    "rss_before_kib": before, "rss_after_kib": after,
                    "heap_per_partition_bytes": heap,
                });
                println!("{out}");
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("iggyd-storage-bench --idle-child: {error}");
                ExitCode::FAILURE
            }
        };
    }
    let config = StorageConfig {
        dir: args.dir.clone(),
        message_size: args.message_size,
        messages_per_batch: args.messages_per_batch,
        append_bytes: args.append_mib * MIB,
        recovery_bytes: args.recovery_mib * MIB,
        recovery_segment_bytes: args.recovery_segment_mib * MIB,
        idle_partitions: args.idle_partitions,
        idle_segments: args.idle_segments,
        poll_count: args.poll_count,
        repeat: args.repeat,
        idle_child: std::env::current_exe().ok(),
        cold_recovery: args.cold_recovery,
        access: if args.buffered {
            iggyd_storage::Access::Buffered
        } else {
            iggyd_storage::Access::Direct
        },
    };
    match storage::run(&config) {
        Ok((rows, samples)) => {
            if args.json {
                let rows: Vec<Value> = rows.iter().map(Row::to_json).collect();
                let out = json!({ "repeat": args.repeat, "rows": rows, "runs": samples });
                println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
            } else {
                println!(
                    "storage benchmark in {} ({} driver), medians of {} repetitions:\n",
                    args.dir.display(),
                    samples["driver"].as_str().unwrap_or("?"),
                    args.repeat
                );
                print!("{}", table(&rows));
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("iggyd-storage-bench: {error}");
            ExitCode::FAILURE
        }
    }
}
