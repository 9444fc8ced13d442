//! `handover_load`: the load of `compat/tests/common/load.rs` (official SDK
//! producers, a consumer, a loop of new connections) against a daemon that
//! something else restarts — `scripts/nspawn-e2e.sh` runs it inside a
//! container booted with systemd while it calls `systemctl restart iggyd`
//! and `systemctl kill -s KILL iggyd`.
//!
//! ```text
//! handover_load --address ADDR --username U --password P \
//!     --ready FILE --stop FILE --windows FILE --report FILE
//! ```
//!
//! It writes `--ready` once the load runs, runs until `--stop` exists,
//! then reads the topic back and writes the report (`key=value` lines,
//! then one `window` line per line of `--windows`: `LABEL BEGIN_MS END_MS
//! [SERVING_MS]`, with the longest wait a client saw in it) to `--report`
//! and stdout. Exit status 0 when nothing was refused, broken, lost,
//! duplicated or returned as an error to the application, else 1.

#[path = "../tests/common/load.rs"]
#[allow(dead_code)]
mod load;

use load::{Load, LoadConfig};
use std::path::PathBuf;
use std::time::Duration;

struct Args {
    address: std::net::SocketAddr,
    username: String,
    password: String,
    ready: PathBuf,
    stop: PathBuf,
    windows: PathBuf,
    report: PathBuf,
}

fn args() -> Result<Args, String> {
    let mut values = std::collections::BTreeMap::new();
    let mut argv = std::env::args().skip(1);
    while let Some(flag) = argv.next() {
        let value = argv.next().ok_or_else(|| format!("{flag} needs a value"))?;
        values.insert(flag, value);
    }
    let mut take = |flag: &str| values.remove(flag).ok_or_else(|| format!("missing {flag}"));
    Ok(Args {
        address: take("--address")?
            .parse()
            .map_err(|error| format!("--address: {error}"))?,
        username: take("--username")?,
        password: take("--password")?,
        ready: take("--ready")?.into(),
        stop: take("--stop")?.into(),
        windows: take("--windows")?.into(),
        report: take("--report")?.into(),
    })
}

/// The value at quantile `q` of `values` (sorted here), nearest rank.
fn quantile(values: &mut [u64], q: f64) -> u64 {
    values.sort_unstable();
    if values.is_empty() {
        return 0;
    }
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    values[rank - 1]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> std::process::ExitCode {
    let args = match args() {
        Ok(args) => args,
        Err(why) => {
            eprintln!("handover_load: {why}");
            return std::process::ExitCode::from(2);
        }
    };
    let config = LoadConfig::new(args.address, &args.username, &args.password);
    let load = match Load::start(config).await {
        Ok(load) => load,
        Err(error) => {
            eprintln!("handover_load: the load did not start: {error}");
            return std::process::ExitCode::from(2);
        }
    };
    let _ = std::fs::write(&args.ready, "running\n");
    while !args.stop.exists() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let report = match load.finish().await {
        Ok(report) => report,
        Err(error) => {
            eprintln!("handover_load: reading the topic back failed: {error}");
            return std::process::ExitCode::from(2);
        }
    };
    let mut out = report.summary();
    let windows = std::fs::read_to_string(&args.windows).unwrap_or_default();
    let mut serving = Vec::new();
    let mut stalls = Vec::new();
    // Where a SIGKILL may break what was in flight: [kill, serving again].
    let mut kills: Vec<(u64, u64)> = Vec::new();
    for line in windows.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(label), Some(begin), Some(end)) = (fields.first(), fields.get(1), fields.get(2))
        else {
            continue;
        };
        let (Ok(begin), Ok(end)) = (begin.parse::<u64>(), end.parse::<u64>()) else {
            continue;
        };
        if label.starts_with("kill") {
            kills.push((begin, end));
        }
        let stall = report.stall_in(begin, end).as_millis() as u64;
        let served = fields.get(3).and_then(|ms| ms.parse::<u64>().ok());
        if let Some(served) = served
            && label.starts_with("restart")
        {
            serving.push(served);
            stalls.push(stall);
        }
        out.push_str(&format!(
            "window {label} begin={begin} end={end} serving_ms={} longest_client_wait_ms={stall}\n",
            served.map_or("?".to_string(), |ms| ms.to_string())
        ));
    }
    if !serving.is_empty() {
        out.push_str(&format!(
            "restart_to_serving_ms p50={} p99={} max={} (n={})\n",
            quantile(&mut serving.clone(), 0.5),
            quantile(&mut serving.clone(), 0.99),
            serving.iter().max().copied().unwrap_or(0),
            serving.len()
        ));
        out.push_str(&format!(
            "longest_client_wait_ms p50={} p99={} max={}\n",
            quantile(&mut stalls.clone(), 0.5),
            quantile(&mut stalls.clone(), 0.99),
            stalls.iter().max().copied().unwrap_or(0),
        ));
    }
    let in_kill = |at: u64| {
        kills
            .iter()
            .any(|(begin, end)| (*begin..=*end).contains(&at))
    };
    let broken_elsewhere = report
        .broken()
        .iter()
        .filter(|ping| !in_kill(ping.started_ms))
        .count();
    let transport_elsewhere = report
        .transport_errors
        .iter()
        .filter(|seen| !in_kill(seen.at_ms))
        .count();
    out.push_str(&format!(
        "outside_kill broken={broken_elsewhere} transport_errors={transport_elsewhere}\n"
    ));
    out.push_str(&report.details());
    print!("{out}");
    let _ = std::fs::write(&args.report, &out);
    // Duplicates are reported, not refused: a send in flight when the
    // process is killed may have been written before its answer was lost,
    // and the SDK's retry writes it again (its documented contract).
    let clean = report.app_errors.is_empty()
        && report.refused() == 0
        && report.lost.is_empty()
        && broken_elsewhere == 0
        && transport_elsewhere == 0;
    if clean {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::from(1)
    }
}
