//! What consoles cost the daemon (issue 22, item 6): ten admin clients
//! subscribed with history at 100 ms (what ten `iggy-top --interval 100ms`
//! do) against a daemon under a steady load must leave the shards' request
//! p99 within noise. The test alternates phases without and with the
//! consoles, several times in one run on one daemon, and compares the
//! medians as a ratio (never an absolute time): the shards' own request
//! p99 per second, read back from the daemon's history once the run is
//! over (so the quiet phases carry no admin traffic at all), and the load
//! client's round-trip p99 per phase. Every number is printed.

use crate::control::{admin_socket, ask};
use crate::messages::batch;
use iggyd_admin_api::history::name;
use iggyd_testkit::TestDaemon;
use iggyd_testkit::wire::{
    Client, Consumer, Identifier, OptionEntry, Partitioning, PollingStrategy, Request,
};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Consoles attached in a console phase, and their refresh interval.
const CONSOLES: usize = 10;
const CONSOLE_INTERVAL_MS: u64 = 100;
/// Each phase's length; a history point counts for a phase when the
/// report it carries (the second before the sample) lies inside it, which
/// leaves the last `PHASE - 2 s` of each phase.
const PHASE: Duration = Duration::from_secs(5);
const REPORT_LAG_MS: u64 = 2_000;
/// Quiet and console phases alternate this many times.
const CYCLES: usize = 3;
/// How much higher the consoles' median p99 may be than the quiet one.
/// Generous: a debug daemon, the load, the consoles and this test share
/// two cores, so "within noise" means the same order, not the same
/// microseconds; a console that cost a shard real work (a request to a
/// shard per snapshot, a lock a shard takes) would show as a multiple.
const RATIO_MAX: f64 = 3.0;
/// The load: a batch of 100 × 1 KB to each of two partitions and a poll
/// of it back, every `LOAD_PERIOD`.
const LOAD_PERIOD: Duration = Duration::from_millis(5);

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64)
}

/// One phase: whether consoles were attached, when it ran (Unix ms), the
/// load's round trips in it, and the lines the consoles read.
#[derive(Debug)]
struct Phase {
    consoles: bool,
    start_ms: u64,
    end_ms: u64,
    round_trips: Vec<Duration>,
    console_lines: u64,
}

/// The p99 of `samples` (nearest rank).
fn p99(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[((samples.len() as f64 * 0.99).ceil() as usize).clamp(1, samples.len()) - 1]
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len() % 2 == 1 {
        values[middle]
    } else {
        (values[middle - 1] + values[middle]) / 2.0
    }
}

/// The steady load: a producer and a consumer on `load/events` (two
/// partitions, replicated, so a shared disk's fsync time is not what is
/// compared), paced at `LOAD_PERIOD`; every request's round trip is kept.
struct Load {
    producer: Client,
    consumer: Client,
    frames: [Vec<u8>; 2],
    next_offsets: [u64; 2],
}

impl Load {
    fn start(address: std::net::SocketAddr) -> Load {
        let mut producer = Client::login_to(address, "iggy", "iggy").expect("producer login");
        producer.create_stream("load").expect("load stream");
        producer
            .create_topic(
                Identifier::Name("load"),
                "events",
                2,
                &[OptionEntry::string("durability", "replicated")],
            )
            .expect("load topic");
        let consumer = Client::login_to(address, "iggy", "iggy").expect("consumer login");
        let payloads: Vec<Vec<u8>> = (0..100)
            .map(|i| vec![b'a' + (i % 26) as u8; 1024])
            .collect();
        let slices: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
        let frame = batch(&slices);
        Load {
            producer,
            consumer,
            frames: [frame.clone(), frame],
            next_offsets: [0, 0],
        }
    }

    /// One period: a send and a poll per partition, their round trips
    /// appended to `round_trips`.
    fn round(&mut self, round_trips: &mut Vec<Duration>) {
        for partition in 0..2u32 {
            let index = partition as usize;
            let request = Request::send_messages(
                Identifier::Name("load"),
                Identifier::Name("events"),
                Partitioning::PartitionId(partition),
                100,
                &self.frames[index],
            );
            let started = Instant::now();
            self.producer.call(&request).expect("a send is served");
            round_trips.push(started.elapsed());
            let poll = Request::poll_messages(
                Consumer::Single(Identifier::Numeric(3)),
                Identifier::Name("load"),
                Identifier::Name("events"),
                Some(partition),
                PollingStrategy::offset(self.next_offsets[index]),
                100,
                false,
            );
            let started = Instant::now();
            let body = self.consumer.call(&poll).expect("a poll is served");
            round_trips.push(started.elapsed());
            let count = body
                .get(12..16)
                .map_or(0, |bytes| u32::from_le_bytes(bytes.try_into().unwrap()));
            assert_eq!(count, 100, "the poll returns the batch just sent");
            self.next_offsets[index] += 100;
        }
    }

    /// Rounds at `LOAD_PERIOD` for `length`.
    fn run(&mut self, length: Duration) -> Vec<Duration> {
        let started = Instant::now();
        let mut next = started;
        let mut round_trips = Vec::new();
        while started.elapsed() < length {
            self.round(&mut round_trips);
            next += LOAD_PERIOD;
            // Pacing, not readiness: the load's rate is the point.
            if let Some(left) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(left);
            } else {
                next = Instant::now();
            }
        }
        round_trips
    }
}

/// `CONSOLES` subscribers with history at `CONSOLE_INTERVAL_MS`, each on
/// its own thread reading every line (as a console's client thread does)
/// until `stop`; `lines` counts the snapshot lines read.
struct Consoles {
    stop: Arc<AtomicBool>,
    lines: Arc<AtomicU64>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Consoles {
    fn attach(socket: &Path) -> Consoles {
        let stop = Arc::new(AtomicBool::new(false));
        let lines = Arc::new(AtomicU64::new(0));
        let threads = (0..CONSOLES)
            .map(|_| {
                let socket: PathBuf = socket.to_path_buf();
                let (stop, lines) = (stop.clone(), lines.clone());
                std::thread::spawn(move || {
                    let stream = UnixStream::connect(&socket).expect("a console connects");
                    stream
                        .set_read_timeout(Some(Duration::from_secs(5)))
                        .unwrap();
                    writeln!(
                        &stream,
                        r#"{{"v":1,"op":"subscribe","interval_ms":{CONSOLE_INTERVAL_MS},"history":true}}"#
                    )
                    .unwrap();
                    let mut reader = BufReader::new(&stream);
                    let mut line = String::new();
                    while !stop.load(Ordering::Relaxed) {
                        line.clear();
                        let read = reader.read_line(&mut line).expect("a snapshot line");
                        assert!(read > 0, "the daemon closed a console");
                        assert!(line.starts_with(r#"{"v":1,"ok":true,"type":"snapshot""#), "{line}");
                        lines.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        Consoles {
            stop,
            lines,
            threads,
        }
    }

    /// Detach every console; the snapshot lines they read.
    fn detach(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads {
            thread.join().expect("a console thread");
        }
        self.lines.load(Ordering::Relaxed)
    }
}

/// Per shard, the `(at_ms, request p99 µs)` points of the daemon's
/// one-second history.
fn request_p99s(socket: &Path) -> Vec<Vec<(u64, f64)>> {
    let answer = ask(socket, &[r#"{"v":1,"op":"history"}"#]);
    let second = &answer[0]["history"]["second"];
    let times: Vec<u64> = second["at_ms"]
        .as_array()
        .expect("history points")
        .iter()
        .map(|at| at.as_u64().unwrap())
        .collect();
    let mut shards = Vec::new();
    for shard in 0.. {
        let name = name::shard(shard, name::REQUEST_P99);
        let Some(series) = second["series"]
            .as_array()
            .unwrap()
            .iter()
            .find(|series| series["name"] == name.as_str())
        else {
            break;
        };
        let values: Vec<f64> = series["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|value| value.as_f64().unwrap())
            .collect();
        // Values are aligned to the newest point.
        let skip = times.len() - values.len();
        shards.push(times[skip..].iter().copied().zip(values).collect());
    }
    shards
}

/// Proves ten consoles at 100 ms cost the shards nothing measurable: over
/// `CYCLES` interleaved quiet and console phases of a steady load, the
/// median of the shards' per-second request p99 (worst shard each second)
/// with consoles stays within `RATIO_MAX` of the median without them, and
/// so does the load client's round-trip p99; the consoles really read
/// (at least half their lines arrived).
#[test]
fn ten_consoles_leave_the_shards_request_p99_within_noise() {
    let daemon = TestDaemon::start();
    let socket = admin_socket(&daemon);
    let mut load = Load::start(daemon.address);
    // Warm up: the partitions' windows, the connections, the history.
    load.run(Duration::from_secs(2));
    let mut phases = Vec::new();
    for _ in 0..CYCLES {
        for consoles in [false, true] {
            let attached = consoles.then(|| Consoles::attach(&socket));
            let start_ms = unix_ms();
            let round_trips = load.run(PHASE);
            let end_ms = unix_ms();
            let console_lines = attached.map_or(0, Consoles::detach);
            phases.push(Phase {
                consoles,
                start_ms,
                end_ms,
                round_trips,
                console_lines,
            });
        }
    }
    // The last phase's newest second must be in the history.
    let last_end = phases.last().map_or(0, |phase| phase.end_ms);
    let deadline = Instant::now() + Duration::from_secs(10);
    let shards = loop {
        let shards = request_p99s(&socket);
        assert!(!shards.is_empty(), "the history has no request p99 series");
        let newest = shards
            .first()
            .and_then(|points| points.last())
            .map_or(0, |point| point.0);
        if newest >= last_end {
            break shards;
        }
        assert!(Instant::now() < deadline, "history stopped at {newest}");
        std::thread::sleep(Duration::from_millis(200));
    };

    let mut shard_p99 = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
    for phase in &phases {
        // Each second, the worst shard's p99; the phase's value is their
        // median.
        let mut seconds: Vec<f64> = Vec::new();
        for (at_ms, _) in &shards[0] {
            if *at_ms < phase.start_ms + REPORT_LAG_MS || *at_ms > phase.end_ms {
                continue;
            }
            let worst = shards
                .iter()
                .filter_map(|points| points.iter().find(|point| point.0 == *at_ms))
                .map(|point| point.1)
                .fold(0.0, f64::max);
            seconds.push(worst);
        }
        assert!(!seconds.is_empty(), "no history point inside {phase:?}");
        let kind = usize::from(phase.consoles);
        let client = p99(phase.round_trips.clone()).as_secs_f64() * 1e6;
        shard_p99.0[kind].push(median(seconds.clone()));
        shard_p99.1[kind].push(client);
        println!(
            "phase {}: shard request p99 per second (µs, worst shard) {seconds:?}; load round trips {} p99 {client:.0} µs; console lines {}",
            if phase.consoles {
                "consoles"
            } else {
                "quiet   "
            },
            phase.round_trips.len(),
            phase.console_lines
        );
        if phase.consoles {
            let expected = CONSOLES as u64 * PHASE.as_millis() as u64 / CONSOLE_INTERVAL_MS;
            assert!(
                phase.console_lines * 2 >= expected,
                "the consoles read {} of {expected} lines",
                phase.console_lines
            );
        }
    }
    let ratio = |pair: &[Vec<f64>; 2]| {
        let quiet = median(pair[0].clone());
        let consoles = median(pair[1].clone());
        (quiet, consoles, consoles / quiet.max(1.0))
    };
    let (shard_quiet, shard_consoles, shard_ratio) = ratio(&shard_p99.0);
    let (client_quiet, client_consoles, client_ratio) = ratio(&shard_p99.1);
    println!(
        "{CONSOLES} consoles at {CONSOLE_INTERVAL_MS} ms, {CYCLES} interleaved cycles of {PHASE:?}: \
         shard request p99 median {shard_quiet:.0} µs quiet, {shard_consoles:.0} µs with consoles \
         (ratio {shard_ratio:.2}); load round-trip p99 median {client_quiet:.0} µs quiet, \
         {client_consoles:.0} µs with consoles (ratio {client_ratio:.2}); bound {RATIO_MAX}"
    );
    assert!(
        shard_ratio <= RATIO_MAX,
        "consoles raised the shards' request p99 {shard_ratio:.2}x"
    );
    assert!(
        client_ratio <= RATIO_MAX,
        "consoles raised the load's round-trip p99 {client_ratio:.2}x"
    );
}
