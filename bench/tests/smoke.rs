//! Smoke tests that keep the benchmark binaries working in CI: the load
//! generator runs for a fraction of a second against a real iggyd started
//! here (readiness via `NOTIFY_SOCKET`), and the storage benchmark runs with
//! tiny sizes. They check that numbers come out, never what the numbers are.

use std::path::PathBuf;
use std::process::Command;

/// The iggyd binary of this build (`IGGYD_BIN`, or `iggyd` next to the test
/// binary's `deps/` directory, which a workspace build compiles); `None`
/// after a skip through the kit, which fails under `CI=true`.
fn iggyd_binary() -> Option<PathBuf> {
    iggyd_testkit::iggyd_binary()
        .map_err(|why| iggyd_testkit::skip(&why))
        .ok()
}

// Drives iggyd with 2 producers and 2 consumer-group consumers for a few
// small batches, with baselines and cleanup, and checks the JSON report has
// produce and consume throughput and a raw lockstep ratio.
#[test]
fn load_generator_against_a_spawned_daemon() {
    let Some(iggyd) = iggyd_binary() else {
        return;
    };
    let temp = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_iggyd-bench"))
        .arg("--spawn")
        .arg(&iggyd)
        .arg("--spawn-dir")
        .arg(temp.path())
        .args(["--producers", "2", "--consumers", "2", "--consumer-group"])
        .args(["--message-size", "64", "--messages-per-batch", "50"])
        .args(["--batches", "10", "--json"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "iggyd-bench failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let rows = report["rows"].as_array().unwrap();
    let produce = rows
        .iter()
        .find(|row| row["name"].as_str().unwrap().ends_with(" produce"))
        .unwrap();
    assert!(produce["value"].as_f64().unwrap() > 0.0);
    assert!(produce["ratio"].as_f64().unwrap() > 0.0);
    let run = &report["runs"]["bench"][0];
    assert_eq!(run["produce"]["throughput"]["messages"], 2 * 10 * 50);
    assert_eq!(run["consume"]["throughput"]["messages"], 2 * 10 * 50);
}

// Idle RSS mode reads the spawned daemon's VmRSS around creating partitions.
#[test]
fn idle_rss_mode_reports_memory() {
    let Some(iggyd) = iggyd_binary() else {
        return;
    };
    let temp = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_iggyd-bench"))
        .arg("--spawn")
        .arg(&iggyd)
        .arg("--spawn-dir")
        .arg(temp.path())
        .args([
            "--idle-rss",
            "--partitions",
            "20",
            "--settle-ms",
            "50",
            "--json",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "iggyd-bench failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert!(
        report["runs"]["idle_rss"]["rss_after_kib"]
            .as_u64()
            .unwrap()
            > 0
    );
}

// The storage benchmark completes with tiny sizes and reports every row.
#[test]
fn storage_bench_with_tiny_sizes() {
    let temp = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_iggyd-storage-bench"))
        .arg("--dir")
        .arg(temp.path())
        .args(["--message-size", "100", "--messages-per-batch", "100"])
        .args([
            "--append-mib",
            "1",
            "--recovery-mib",
            "2",
            "--recovery-segment-mib",
            "1",
        ])
        .args([
            "--idle-partitions",
            "5",
            "--idle-segments",
            "2",
            "--repeat",
            "1",
        ])
        .arg("--json")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "iggyd-storage-bench failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let rows = report["rows"].as_array().unwrap();
    assert!(rows.len() >= 9, "{rows:?}");
    assert!(rows.iter().all(|row| row["value"].as_f64().is_some()));
}

// `--tls-ratio` runs the scenario against a plaintext and a TLS daemon it
// spawns (with a certificate it makes) and reports both throughputs with
// TLS over plaintext as the ratio.
#[test]
fn tls_ratio_against_spawned_daemons() {
    let Some(iggyd) = iggyd_binary() else {
        return;
    };
    let temp = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_iggyd-bench"))
        .arg("--spawn")
        .arg(&iggyd)
        .arg("--spawn-dir")
        .arg(temp.path())
        .args(["--tls-ratio", "--producers", "1"])
        .args(["--message-size", "64", "--messages-per-batch", "50"])
        .args(["--batches", "10", "--json"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "iggyd-bench failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let rows = report["rows"].as_array().unwrap();
    for what in ["produce", "consume"] {
        let row = rows
            .iter()
            .find(|row| row["name"].as_str().unwrap().ends_with(what))
            .unwrap_or_else(|| panic!("no {what} row: {rows:?}"));
        assert!(row["value"].as_f64().unwrap() > 0.0, "{row}");
        assert!(row["ratio"].as_f64().unwrap() > 0.0, "{row}");
        assert_eq!(row["baseline_name"], "plaintext");
    }
    for mode in ["plaintext", "tls"] {
        assert_eq!(
            report["runs"][mode][0]["consume"]["throughput"]["messages"],
            10 * 50,
            "{mode}"
        );
    }
}
