//! `iggyd doctor`: checks, before a production incident does, that this host
//! can keep the daemon's promises (io_uring, direct I/O, fsync latency, the
//! device's cache, disk and memory, descriptors and locked memory, the shard
//! plan, huge pages, the clock, the configuration, the unit's sandbox). Each
//! check measures something on this host and says PASS, WARN or FAIL with the
//! figure and, when not PASS, the fix; SKIP says a check does not apply (and
//! why). This module owns the report, its order, its text and JSON forms and
//! the exit code; the checks live in one file per group (`service.rs`,
//! `kernel.rs`, `disk.rs`, `latency.rs`, `process.rs`, `data_dir.rs`).
//!
//! Must not: change the host or the data directory. The only writes are the
//! latency probe's file (unlinked as soon as it is open, so nothing is left
//! even if the doctor is killed) and `preflight::choose_access`'s probe
//! (removed by it). It must not print or exit either: `boot` prints the
//! rendered report and turns [`Report::exit_code`] into the exit code.

mod data_dir;
mod disk;
mod kernel;
mod latency;
mod process;
mod service;

use crate::config::Sources;
use serde_json::{Map, Value};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

/// How long the latency probe writes when `--probe-time` is not given: a
/// few seconds of samples, so that the whole doctor stays well under 10 s.
pub const PROBE_TIME_DEFAULT: Duration = Duration::from_secs(2);
/// `--probe-time` accepts this range.
pub const PROBE_TIME_MIN: Duration = Duration::from_millis(50);
/// See [`PROBE_TIME_MIN`].
pub const PROBE_TIME_MAX: Duration = Duration::from_secs(10);

/// Every check's id, in the order the report gives them.
pub const CHECKS: [&str; 13] = [
    "config",
    "io_uring",
    "o_direct",
    "write_latency",
    "write_cache",
    "disk_space",
    "memory_budget",
    "descriptors",
    "memlock",
    "shard_plan",
    "transparent_hugepages",
    "clock",
    "systemd_hardening",
];

/// The version of the `--json` shape (see README.md, "Command line").
pub const JSON_VERSION: u64 = 1;

/// A check's verdict. Ordered from best to worst; the report's status is its
/// worst check's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// The check does not apply here (the measured text says why).
    Skip,
    Pass,
    Warn,
    Fail,
}

impl Status {
    pub fn label(self) -> &'static str {
        match self {
            Status::Skip => "SKIP",
            Status::Pass => "PASS",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
        }
    }
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    /// Stable snake_case name (`io_uring`, `write_latency`, …).
    pub id: &'static str,
    pub status: Status,
    /// What was measured, in words and numbers.
    pub measured: String,
    /// What to do about it; `None` on PASS and SKIP.
    pub fix: Option<String>,
    /// The measured figures as numbers and words, for scripts.
    pub values: Map<String, Value>,
}

impl Check {
    fn new(id: &'static str, status: Status, measured: impl Into<String>) -> Check {
        Check {
            id,
            status,
            measured: measured.into(),
            fix: None,
            values: Map::new(),
        }
    }

    pub(crate) fn pass(id: &'static str, measured: impl Into<String>) -> Check {
        Check::new(id, Status::Pass, measured)
    }

    pub(crate) fn skip(id: &'static str, measured: impl Into<String>) -> Check {
        Check::new(id, Status::Skip, measured)
    }

    pub(crate) fn warn(id: &'static str, measured: impl Into<String>, fix: &str) -> Check {
        Check::new(id, Status::Warn, measured).with_fix(fix)
    }

    pub(crate) fn fail(id: &'static str, measured: impl Into<String>, fix: &str) -> Check {
        Check::new(id, Status::Fail, measured).with_fix(fix)
    }

    pub(crate) fn with_fix(mut self, fix: &str) -> Check {
        self.fix = Some(fix.to_string());
        self
    }

    /// Adds a figure to `values`.
    pub(crate) fn value(mut self, name: &str, value: impl Into<Value>) -> Check {
        self.values.insert(name.to_string(), value.into());
        self
    }
}

/// What the command line gives the doctor besides the configuration.
#[derive(Debug, Clone)]
pub struct Options {
    /// How long the latency probe writes.
    pub probe_time: Duration,
    /// `--cgroup-dir`: read cgroup limits from here instead of this
    /// process's own cgroup (as `iggyd plan` does).
    pub cgroup_dir: Option<PathBuf>,
}

/// Every check's line, in the order they ran.
#[derive(Debug, Clone)]
pub struct Report {
    pub checks: Vec<Check>,
}

impl Report {
    /// The worst status of any check (SKIP counts as PASS).
    pub fn status(&self) -> Status {
        self.checks
            .iter()
            .map(|check| check.status)
            .max()
            .map_or(Status::Pass, |worst| worst.max(Status::Pass))
    }

    /// 0 when every check passed (or does not apply), 1 when the worst is a
    /// warning, 2 when any check failed.
    pub fn exit_code(&self) -> u8 {
        match self.status() {
            Status::Skip | Status::Pass => 0,
            Status::Warn => 1,
            Status::Fail => 2,
        }
    }

    /// One line a check (`STATUS  id  measured; fix: …`) and a summary.
    pub fn render_text(&self) -> String {
        let width = self
            .checks
            .iter()
            .map(|check| check.id.len())
            .max()
            .unwrap_or(0);
        let mut out = String::new();
        for check in &self.checks {
            let _ = write!(
                out,
                "{}  {:width$}  {}",
                check.status.label(),
                check.id,
                check.measured
            );
            if let Some(fix) = &check.fix {
                let _ = write!(out, "; fix: {fix}");
            }
            out.push('\n');
        }
        let count = |status: Status| {
            self.checks
                .iter()
                .filter(|check| check.status == status)
                .count()
        };
        let _ = writeln!(
            out,
            "{} checks: {} pass, {} warn, {} fail, {} skipped (exit {})",
            self.checks.len(),
            count(Status::Pass),
            count(Status::Warn),
            count(Status::Fail),
            count(Status::Skip),
            self.exit_code()
        );
        out
    }

    /// The `--json` form: `{"version", "status", "exit_code", "checks":
    /// [{"id", "status", "measured", "fix", "values"}]}`.
    pub fn to_json(&self) -> Value {
        let checks: Vec<Value> = self
            .checks
            .iter()
            .map(|check| {
                serde_json::json!({
                    "id": check.id,
                    "status": check.status,
                    "measured": check.measured,
                    "fix": check.fix,
                    "values": check.values,
                })
            })
            .collect();
        serde_json::json!({
            "version": JSON_VERSION,
            "status": self.status(),
            "exit_code": self.exit_code(),
            "checks": checks,
        })
    }
}

/// Runs every check once, in a fixed order, and returns the report. The
/// configuration is loaded here (its own check); when it is invalid, the
/// checks that depend on it are skipped and the others still run.
pub fn run(sources: &Sources, options: &Options) -> Report {
    let clock_start = kernel::ClockSample::now();
    let (config, config_check) = service::config(sources);
    let mut checks = vec![config_check];
    let skipped = |id: &'static str| {
        Check::skip(
            id,
            "not checked: the configuration is invalid (see the config line)",
        )
    };
    let Some(config) = config else {
        for &id in &CHECKS[1..] {
            checks.push(match id {
                "io_uring" => kernel::io_uring(false).check,
                "transparent_hugepages" => kernel::transparent_hugepages(),
                "clock" => kernel::clock(&clock_start),
                "systemd_hardening" => service::hardening(),
                _ => skipped(id),
            });
        }
        return Report { checks };
    };

    let io_uring = kernel::io_uring(config.sharding.require_io_uring);
    checks.push(io_uring.check);
    let state = data_dir::DataDir::inspect(&config.data_dir);
    let access = disk::o_direct(&state, config.storage.io_mode);
    checks.push(access.check);
    checks.push(latency::write_latency(
        &state,
        access.direct,
        options.probe_time,
        config.storage.default_durability,
    ));
    checks.push(disk::write_cache(&state));
    checks.push(disk::disk_space(&state));
    let plan = process::shard_plan(&config, options.cgroup_dir.as_deref());
    let shards = plan.shards;
    checks.push(process::memory_budget(
        &config,
        shards,
        options.cgroup_dir.as_deref(),
    ));
    checks.push(process::descriptors(&config, shards, &state));
    checks.push(kernel::memlock(io_uring.available, shards));
    checks.push(plan.check);
    checks.push(kernel::transparent_hugepages());
    checks.push(kernel::clock(&clock_start));
    checks.push(service::hardening());
    Report { checks }
}

/// A duration in the unit that suits it (`850 µs`, `12.3 ms`, `1.20 s`).
pub(crate) fn fmt_duration(duration: Duration) -> String {
    let micros = duration.as_secs_f64() * 1e6;
    if micros < 1000.0 {
        format!("{micros:.0} µs")
    } else if micros < 1e6 {
        format!("{:.1} ms", micros / 1000.0)
    } else {
        format!("{:.2} s", micros / 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(statuses: &[Status]) -> Report {
        Report {
            checks: statuses
                .iter()
                .map(|&status| Check::new("x", status, "m"))
                .collect(),
        }
    }

    // Proves the exit code is the worst status: SKIP counts as a pass, a
    // warning gives 1, any failure gives 2.
    #[test]
    fn exit_code_is_the_worst_status() {
        assert_eq!(report(&[]).exit_code(), 0);
        assert_eq!(report(&[Status::Skip, Status::Pass]).exit_code(), 0);
        assert_eq!(report(&[Status::Pass, Status::Warn]).exit_code(), 1);
        assert_eq!(
            report(&[Status::Fail, Status::Warn, Status::Skip]).exit_code(),
            2
        );
        assert_eq!(report(&[Status::Skip]).status(), Status::Pass);
    }

    // Proves the text form has one line a check with its status, id,
    // figure and (only when not PASS) its fix, and a summary line.
    #[test]
    fn text_form_is_one_line_a_check() {
        let report = Report {
            checks: vec![
                Check::pass("config", "valid"),
                Check::warn("clock", "hpet, 900 ns a read", "use tsc"),
            ],
        };
        let text = report.render_text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert_eq!(lines[0], "PASS  config  valid");
        assert_eq!(lines[1], "WARN  clock   hpet, 900 ns a read; fix: use tsc");
        assert!(lines[2].contains("1 pass, 1 warn, 0 fail"), "{text}");
        assert!(lines[2].ends_with("(exit 1)"), "{text}");
    }

    // Proves the JSON form has the documented keys, statuses in lower case
    // and a null fix on PASS.
    #[test]
    fn json_form_has_the_documented_shape() {
        let report = Report {
            checks: vec![Check::pass("config", "valid").value("key", "none")],
        };
        let json = report.to_json();
        assert_eq!(json["version"], JSON_VERSION);
        assert_eq!(json["status"], "pass");
        assert_eq!(json["exit_code"], 0);
        let check = &json["checks"][0];
        assert_eq!(check["id"], "config");
        assert_eq!(check["status"], "pass");
        assert_eq!(check["measured"], "valid");
        assert!(check["fix"].is_null());
        assert_eq!(check["values"]["key"], "none");
    }

    // Proves durations are printed in the unit that suits them.
    #[test]
    fn durations_are_formatted_in_readable_units() {
        assert_eq!(fmt_duration(Duration::from_micros(850)), "850 µs");
        assert_eq!(fmt_duration(Duration::from_micros(12_340)), "12.3 ms");
        assert_eq!(fmt_duration(Duration::from_millis(1200)), "1.20 s");
    }
}
