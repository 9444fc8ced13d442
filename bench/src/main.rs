//! `iggyd-bench`: the load generator. Speaks the Iggy 0.11.0 TCP protocol to
//! any compatible server (iggyd or Apache Iggy), runs producers/consumers,
//! and reports throughput and latency next to raw loopback TCP baselines
//! measured in the same run (see `iggyd_bench::load`).
//!
//! `--standard` runs the scenarios of the benchmark issue against one
//! server; `--scaling` runs the scaling matrix (1–8 producers and
//! consumers, 1/8/64 busy partitions with `persisted` group commit, 100 B
//! and 10 KB messages, a mixed run); `--guard` runs a short subset and
//! fails when a ratio to its raw baseline falls under a generous floor (the
//! CI regression guard). `--spawn BINARY` starts a fresh iggyd on a temp
//! directory first (readiness via `NOTIFY_SOCKET`) and stops it at the end.
//! `--tls-ratio` (with `--spawn`) runs the same produce-then-consume
//! scenario against a plaintext iggyd and against one serving TLS with a
//! certificate made for the run, and reports TLS throughput as a ratio to
//! plaintext.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use serde_json::{Value, json};

use iggyd_bench::client::{Durability, SaveThresholds};
use iggyd_bench::load::{self, LoadConfig, Stop};
use iggyd_bench::report::{Row, Target, table};
use iggyd_testkit::TestDaemon;

#[derive(Debug, Parser)]
// The command's name is the package's, `iggyd-bench`.
#[command(
    version,
    about = "Load generator for iggyd / Apache Iggy (TCP protocol 0.11.0)"
)]
struct Args {
    /// Server address (ignored with --spawn).
    #[arg(long, default_value = "127.0.0.1:8090")]
    address: SocketAddr,
    /// Start this iggyd binary on a fresh temp directory and use it.
    #[arg(long)]
    spawn: Option<PathBuf>,
    /// Parent directory for --spawn's data directory and for the raw
    /// TCP→file baseline's files (default: the system temp dir).
    #[arg(long)]
    spawn_dir: Option<PathBuf>,
    #[arg(long, default_value = "iggy")]
    username: String,
    #[arg(long, default_value = "iggy")]
    password: String,
    /// Run the standard scenarios (replicated and persisted producers,
    /// consumers from page cache, idle RSS with 1,000 partitions).
    #[arg(long)]
    standard: bool,
    /// Run the scaling matrix (see the crate doc).
    #[arg(long)]
    scaling: bool,
    /// Run the CI regression guard: a short subset whose ratios to their raw
    /// baselines must stay above generous floors (exit 1 otherwise).
    #[arg(long)]
    guard: bool,
    /// Each producer sends to every partition of its stream in turn.
    #[arg(long)]
    spread: bool,
    /// Measure idle RSS with --partitions partitions (needs --daemon-pid or --spawn).
    #[arg(long)]
    idle_rss: bool,
    /// Open this many connections that each poll --stalled-poll-mb and never
    /// read the reply; report the server's RSS before and after (needs
    /// --daemon-pid or --spawn).
    #[arg(long)]
    stalled_readers: Option<usize>,
    /// MB of messages the stalled-readers scenario stores first.
    #[arg(long, default_value_t = 600)]
    stalled_fill_mb: u64,
    /// MB each stalled reader asks for.
    #[arg(long, default_value_t = 300)]
    stalled_poll_mb: u64,
    /// Store offsets for this many consumers named one by one in one
    /// partition; report the server's RSS growth per offset (needs
    /// --daemon-pid or --spawn).
    #[arg(long)]
    consumer_offsets: Option<u64>,
    /// PID of the server, for --idle-rss, --stalled-readers and
    /// --consumer-offsets.
    #[arg(long)]
    daemon_pid: Option<u32>,
    #[arg(long, default_value_t = 2)]
    producers: usize,
    #[arg(long, default_value_t = 0)]
    consumers: usize,
    /// Consumers join one consumer group per stream and poll their assignment.
    #[arg(long)]
    consumer_group: bool,
    /// Producers first, then consumers (reading from page cache).
    #[arg(long)]
    sequential: bool,
    /// Payload bytes per message.
    #[arg(long, default_value_t = 1000)]
    message_size: usize,
    #[arg(long, default_value_t = 1000)]
    messages_per_batch: u32,
    /// Messages per poll (default: messages per batch).
    #[arg(long)]
    poll_count: Option<u32>,
    #[arg(long, default_value_t = 1)]
    streams: u32,
    /// Partitions per topic (default: enough for one per producer).
    #[arg(long)]
    partitions: Option<u32>,
    /// Topic durability: replicated or persisted.
    #[arg(long, default_value = "replicated")]
    durability: Durability,
    /// Topic option messages_required_to_save (replicated flush threshold).
    #[arg(long)]
    messages_required_to_save: Option<u32>,
    /// Topic option size_of_messages_required_to_save in bytes.
    #[arg(long)]
    size_of_messages_required_to_save: Option<u64>,
    /// Batches per producer (instead of --duration).
    #[arg(long)]
    batches: Option<u64>,
    /// Seconds per producer phase.
    #[arg(long, default_value_t = 3.0)]
    duration: f64,
    /// Per-producer rate limit in MB/s of payload.
    #[arg(long)]
    rate_limit_mb_s: Option<f64>,
    /// Repetitions; the table shows medians.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Skip the raw loopback baselines.
    #[arg(long)]
    no_baseline: bool,
    /// Keep the streams (and the --spawn directory) afterwards.
    #[arg(long)]
    keep_data: bool,
    /// Scenario name (stream name prefix).
    #[arg(long, default_value = "bench")]
    name: String,
    /// Milliseconds to wait before each RSS reading.
    #[arg(long, default_value_t = 1000)]
    settle_ms: u64,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Produce then consume over TLS and over plaintext (two spawned
    /// daemons, needs --spawn) and report TLS throughput as a ratio.
    #[arg(long)]
    tls_ratio: bool,
}

fn config(args: &Args, address: SocketAddr) -> LoadConfig {
    let partitions = args
        .partitions
        .unwrap_or_else(|| (args.producers as u32).div_ceil(args.streams).max(1));
    LoadConfig {
        address,
        username: args.username.clone(),
        password: args.password.clone(),
        name: args.name.clone(),
        producers: args.producers,
        consumers: args.consumers,
        consumer_group: args.consumer_group,
        sequential: args.sequential,
        message_size: args.message_size,
        messages_per_batch: args.messages_per_batch,
        poll_count: args.poll_count.unwrap_or(args.messages_per_batch),
        streams: args.streams.max(1),
        partitions,
        durability: args.durability,
        save: SaveThresholds {
            messages: args.messages_required_to_save,
            bytes: args.size_of_messages_required_to_save,
        },
        stop: match args.batches {
            Some(batches) => Stop::Requests(batches),
            None => Stop::Duration(Duration::from_secs_f64(args.duration)),
        },
        rate_limit_bytes_per_s: args.rate_limit_mb_s.map(|rate| rate * 1_000_000.0),
        baselines: !args.no_baseline,
        keep_data: args.keep_data,
        raw_file_dir: args.spawn_dir.clone().unwrap_or_else(std::env::temp_dir),
        spread: args.spread,
        tls: None,
    }
}

/// One scenario of a matrix run: a name and its configuration.
type Scenario = (String, LoadConfig);

/// The scaling matrix, on top of `base` (address, sizes, duration, repeat).
fn scaling_scenarios(base: &LoadConfig) -> Vec<Scenario> {
    let replicated = LoadConfig {
        durability: Durability::Replicated,
        consumers: 0,
        sequential: false,
        spread: false,
        ..base.clone()
    };
    let mut scenarios = Vec::new();
    for actors in [1usize, 2, 4, 8] {
        scenarios.push((
            format!("produce-{actors}p"),
            LoadConfig {
                producers: actors,
                partitions: actors as u32,
                name: format!("{}-p{actors}", base.name),
                ..replicated.clone()
            },
        ));
    }
    for actors in [1usize, 2, 4, 8] {
        scenarios.push((
            format!("consume-{actors}c"),
            LoadConfig {
                producers: actors,
                consumers: actors,
                partitions: actors as u32,
                sequential: true,
                name: format!("{}-c{actors}", base.name),
                ..replicated.clone()
            },
        ));
    }
    for partitions in [1u32, 8, 64] {
        scenarios.push((
            format!("persisted-{partitions}-partitions"),
            LoadConfig {
                producers: 8,
                partitions,
                spread: true,
                durability: Durability::Persisted,
                name: format!("{}-gc{partitions}", base.name),
                ..replicated.clone()
            },
        ));
    }
    scenarios.push((
        "message-100b".into(),
        LoadConfig {
            producers: 2,
            partitions: 2,
            message_size: 100,
            messages_per_batch: 1000,
            poll_count: 1000,
            name: format!("{}-m100", base.name),
            ..replicated.clone()
        },
    ));
    scenarios.push((
        "message-10kb".into(),
        LoadConfig {
            producers: 2,
            partitions: 2,
            message_size: 10_000,
            messages_per_batch: 100,
            poll_count: 100,
            name: format!("{}-m10k", base.name),
            ..replicated.clone()
        },
    ));
    scenarios.push((
        "mixed-2p-2c".into(),
        LoadConfig {
            producers: 2,
            consumers: 2,
            partitions: 2,
            name: format!("{}-mix", base.name),
            ..replicated
        },
    ));
    scenarios
}

/// The guard's scenarios and, for each, the floor of its throughput ratio
/// to its raw baseline row (a row name suffix). Each scenario runs
/// `GUARD_REPEAT` times, daemon and baselines interleaved, and the ratio is
/// of the medians. Measured on the 2-core CI-sized machine (2026-12-03,
/// eight interleaved runs of two builds): produce 0.22-0.40x a raw
/// TCP→file write (the raw write lands in the page cache at 2.5-4 GB/s),
/// `persisted` 0.72-0.88x a raw write + fdatasync, consume 0.12-0.26x a
/// pure loopback copy; a single 1 s run under a busy neighbour went as low
/// as 0.11 for produce. The floors sit under the noisy lows, so only a real
/// regression (an fsync per append, a lost batching, a copy per byte
/// served) trips them. `guard-concurrent` (8 producers and 8 consumers on
/// 8 partitions at once) guards the many-clients case.
const GUARD_REPEAT: usize = 3;

fn guard_scenarios(base: &LoadConfig) -> Vec<(Scenario, &'static str, f64)> {
    let short = LoadConfig {
        stop: Stop::Duration(Duration::from_secs(1)),
        consumers: 0,
        sequential: false,
        spread: false,
        ..base.clone()
    };
    vec![
        (
            (
                "guard-produce".into(),
                LoadConfig {
                    producers: 2,
                    partitions: 2,
                    durability: Durability::Replicated,
                    name: format!("{}-gp", base.name),
                    ..short.clone()
                },
            ),
            " produce vs TCP→file",
            0.12,
        ),
        (
            (
                "guard-consume".into(),
                LoadConfig {
                    producers: 2,
                    consumers: 2,
                    partitions: 2,
                    sequential: true,
                    durability: Durability::Replicated,
                    name: format!("{}-gc", base.name),
                    ..short.clone()
                },
            ),
            " consume",
            // The raw download is a pure loopback copy of bytes already in
            // memory; the daemon reads them from the disk first.
            0.025,
        ),
        (
            (
                "guard-concurrent".into(),
                LoadConfig {
                    producers: 8,
                    consumers: 8,
                    partitions: 8,
                    durability: Durability::Replicated,
                    name: format!("{}-g8", base.name),
                    ..short.clone()
                },
            ),
            " produce vs TCP→file",
            // Eight producers and eight consumers at once on two cores:
            // 0.21-0.32x in three runs (2026-12-06, the low one beside a
            // build); a shard that stalls under concurrency falls far under.
            0.10,
        ),
        (
            (
                "guard-persisted".into(),
                LoadConfig {
                    producers: 4,
                    partitions: 8,
                    spread: true,
                    durability: Durability::Persisted,
                    name: format!("{}-gs", base.name),
                    ..short
                },
            ),
            " produce vs TCP→file+fdatasync",
            0.25,
        ),
    ]
}

fn run(args: &Args) -> Result<(Vec<Row>, Value, String), String> {
    // A spawned daemon logs at its default level (not the kit's debug), so
    // logging costs what it costs in production.
    let mut spawned = match &args.spawn {
        Some(binary) => {
            let parent = args.spawn_dir.clone().unwrap_or_else(std::env::temp_dir);
            Some(
                TestDaemon::builder()
                    .binary(binary)
                    .parent_dir(&parent)
                    .log_level(None)
                    .start_timeout(Duration::from_secs(30))
                    .try_spawn()?,
            )
        }
        None => None,
    };
    let address = spawned
        .as_ref()
        .map_or(args.address, |daemon| daemon.address);
    let pid = args
        .daemon_pid
        .or(spawned.as_ref().map(|daemon| daemon.pid().unsigned_abs()));
    let settle = Duration::from_millis(args.settle_ms);
    let base = config(args, address);
    let mut rows = Vec::new();
    let mut json_parts = serde_json::Map::new();
    let mut details = String::new();
    if let Some(daemon) = &spawned {
        details.push_str(&format!(
            "iggyd: {} (pid {})\n",
            daemon.status,
            daemon.pid()
        ));
    }

    if args.standard {
        let pid = pid.ok_or("--standard needs --daemon-pid or --spawn for the RSS scenario")?;
        let rss = LoadConfig {
            partitions: 1000,
            name: format!("{}-idle", args.name),
            ..base.clone()
        };
        let (rss_rows, rss_json) = load::idle_rss(&rss, pid, settle)?;
        rows.extend(rss_rows);
        json_parts.insert("idle_rss".into(), rss_json);
    } else if args.idle_rss {
        let pid = pid.ok_or("--idle-rss needs --daemon-pid or --spawn")?;
        let (rss_rows, rss_json) = load::idle_rss(&base, pid, settle)?;
        rows.extend(rss_rows);
        json_parts.insert("idle_rss".into(), rss_json);
    }
    if let Some(count) = args.consumer_offsets {
        let pid = pid.ok_or("--consumer-offsets needs --daemon-pid or --spawn")?;
        let (offset_rows, offset_json) = load::consumer_offsets(&base, pid, settle, count)?;
        rows.extend(offset_rows);
        json_parts.insert("consumer_offsets".into(), offset_json);
    }
    if let Some(readers) = args.stalled_readers {
        let pid = pid.ok_or("--stalled-readers needs --daemon-pid or --spawn")?;
        let (stalled_rows, stalled_json) = load::stalled_readers(
            &base,
            pid,
            settle,
            readers,
            args.stalled_fill_mb * 1_000_000,
            args.stalled_poll_mb * 1_000_000,
        )?;
        rows.extend(stalled_rows);
        json_parts.insert("stalled_readers".into(), stalled_json);
    }

    if args.guard {
        for ((name, config), row_suffix, floor) in guard_scenarios(&base) {
            let (scenario_rows, runs) = load::run(&config, GUARD_REPEAT)?;
            details.push_str(&format!("{name}:\n{}", load::describe(&runs)));
            let row = scenario_rows
                .iter()
                .find(|row| row.name.ends_with(row_suffix) && row.unit == "MB/s")
                .ok_or(format!("{name}: no row ending in {row_suffix:?}"))?;
            let ratio = row.baseline.map_or(0.0, |baseline| row.value / baseline);
            details.push_str(&format!(
                "{name}: {:.1} MB/s, ratio {ratio:.2} to {} (floor {floor})\n",
                row.value, row.baseline_name
            ));
            if ratio < floor {
                // What the failing run measured, so a red CI says more than
                // one ratio.
                eprint!("{details}");
                eprint!("{}", table(&scenario_rows));
                return Err(format!(
                    "regression guard: {name} ran at {ratio:.2}x its raw baseline ({}), under the floor {floor}",
                    row.baseline_name
                ));
            }
            rows.extend(scenario_rows);
            json_parts.insert(name, runs);
        }
    }
    let mut scenario = |name: &str, config: LoadConfig| -> Result<(), String> {
        let (scenario_rows, runs) = load::run(&config, args.repeat)?;
        details.push_str(&format!("{name}:\n{}", load::describe(&runs)));
        rows.extend(scenario_rows);
        json_parts.insert(name.to_owned(), runs);
        Ok(())
    };
    if args.scaling {
        for (name, config) in scaling_scenarios(&base) {
            scenario(&name, config)?;
        }
    }
    if args.standard {
        let producers = LoadConfig {
            consumers: 0,
            ..base.clone()
        };
        scenario(
            "produce_replicated",
            LoadConfig {
                durability: Durability::Replicated,
                name: format!("{}-rep", args.name),
                ..producers.clone()
            },
        )?;
        scenario(
            "produce_persisted",
            LoadConfig {
                durability: Durability::Persisted,
                name: format!("{}-per", args.name),
                ..producers.clone()
            },
        )?;
        scenario(
            "consume_page_cache",
            LoadConfig {
                durability: Durability::Replicated,
                consumers: base.producers.max(1),
                sequential: true,
                name: format!("{}-con", args.name),
                ..producers
            },
        )?;
    } else if !args.idle_rss
        && !args.scaling
        && !args.guard
        && args.stalled_readers.is_none()
        && args.consumer_offsets.is_none()
    {
        scenario(&args.name, base)?;
    }
    if let Some(daemon) = spawned.as_mut() {
        if args.keep_data {
            daemon.keep_dir();
        }
        // SIGTERM, then SIGKILL after 30 s; how it ended does not change
        // the measurements.
        let _ = daemon.terminate(Duration::from_secs(30));
    }
    Ok((rows, Value::Object(json_parts), details))
}

/// `--tls-ratio`: the same scenario (producers, then as many consumers
/// reading it back) against a spawned plaintext iggyd and a spawned iggyd
/// serving TLS with a certificate made for the run; rows are the TLS
/// throughput with the plaintext one as baseline.
fn tls_ratio(args: &Args) -> Result<(Vec<Row>, Value, String), String> {
    use iggyd_bench::client::Tls;
    use iggyd_testkit::tls::{TestCa, client_config, write};
    let binary = args
        .spawn
        .as_ref()
        .ok_or("--tls-ratio needs --spawn BINARY")?;
    let parent = args.spawn_dir.clone().unwrap_or_else(std::env::temp_dir);
    let certificates = tempfile::Builder::new()
        .prefix("iggyd-bench-tls-")
        .tempdir_in(&parent)
        .map_err(|error| format!("certificate directory: {error}"))?;
    let ca = TestCa::new("iggyd-bench CA");
    let server = ca.server(&["localhost"]);
    let cert = write(certificates.path(), "server.crt", &server.cert_pem);
    let key = write(certificates.path(), "server.key", &server.key_pem);
    let tls = Tls {
        config: client_config(&ca.pem, None),
        server_name: "localhost".into(),
    };
    let mut measured = Vec::new();
    let mut runs_json = serde_json::Map::new();
    let mut details = String::new();
    for (mode, tls) in [("plaintext", None), ("tls", Some(tls))] {
        let mut builder = TestDaemon::builder()
            .binary(binary)
            .parent_dir(&parent)
            .log_level(None)
            .start_timeout(Duration::from_secs(30));
        if tls.is_some() {
            builder = builder
                .env("IGGYD_TCP__TLS__ENABLED", "true")
                .env("IGGYD_TCP__TLS__CERT_FILE", &cert.to_string_lossy())
                .env("IGGYD_TCP__TLS__KEY_FILE", &key.to_string_lossy());
        }
        let mut daemon = builder.try_spawn()?;
        let config = LoadConfig {
            consumers: args.producers.max(1),
            consumer_group: false,
            sequential: true,
            baselines: false,
            name: format!("{}-{mode}", args.name),
            tls,
            ..config(args, daemon.address)
        };
        let runs = load::run_repeated(&config, args.repeat);
        let _ = daemon.terminate(Duration::from_secs(30));
        let runs = runs?;
        details.push_str(&format!(
            "{mode}:\n{}",
            load::describe(&load::runs_to_json(&runs))
        ));
        runs_json.insert(mode.to_owned(), load::runs_to_json(&runs));
        measured.push(load::throughput_medians(&runs));
    }
    let ((plain_produce, plain_consume), (tls_produce, tls_consume)) = (measured[0], measured[1]);
    let label = format!(
        "TLS ({}, {}P then {}C, {} B x {})",
        args.durability.as_str(),
        args.producers,
        args.producers.max(1),
        args.message_size,
        args.messages_per_batch
    );
    let row = |what: &str, value: f64, baseline: f64| Row {
        name: format!("{label} {what}"),
        value,
        baseline_name: "plaintext".into(),
        baseline: (baseline > 0.0).then_some(baseline),
        unit: "MB/s".into(),
        higher_is_better: true,
        target: Target::None,
        samples: vec![value],
    };
    let rows = vec![
        row("produce", tls_produce, plain_produce),
        row("consume", tls_consume, plain_consume),
    ];
    Ok((rows, Value::Object(runs_json), details))
}

fn main() -> ExitCode {
    let args = Args::parse();
    let outcome = if args.tls_ratio {
        tls_ratio(&args)
    } else {
        run(&args)
    };
    match outcome {
        Ok((rows, runs, details)) => {
            if args.json {
                let rows: Vec<Value> = rows.iter().map(Row::to_json).collect();
                let out = json!({ "repeat": args.repeat, "rows": rows, "runs": runs });
                println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
            } else {
                print!("{details}");
                if args.repeat > 1 {
                    println!("\nmedians of {} repetitions:", args.repeat);
                }
                print!("\n{}", table(&rows));
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("iggyd-bench: {error}");
            ExitCode::FAILURE
        }
    }
}
