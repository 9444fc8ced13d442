//! Results: latency histograms, throughput, and the rows of the final table
//! (measurement, baseline, ratio, target), printed for humans or as JSON.
//!
//! This file owns formatting only; it does not measure anything and never
//! decides pass/fail for a test: a missed target is printed as `MISS`.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde_json::{Value, json};

/// Latency histogram in microseconds, 1 µs .. 60 s, 3 significant digits.
pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

/// Records `elapsed` in µs (clamped into the histogram's range).
pub fn record(histogram: &mut Histogram<u64>, elapsed: Duration) {
    let micros = (elapsed.as_micros() as u64).clamp(1, 60_000_000);
    histogram.saturating_record(micros);
}

/// Percentiles of a latency histogram, in µs.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Latency {
    pub count: u64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
}

impl Latency {
    pub fn of(histogram: &Histogram<u64>) -> Latency {
        if histogram.is_empty() {
            return Latency::default();
        }
        Latency {
            count: histogram.len(),
            p50_us: histogram.value_at_quantile(0.50),
            p90_us: histogram.value_at_quantile(0.90),
            p99_us: histogram.value_at_quantile(0.99),
            p999_us: histogram.value_at_quantile(0.999),
            max_us: histogram.max(),
        }
    }

    pub fn to_json(self) -> Value {
        json!({
            "count": self.count, "p50_us": self.p50_us, "p90_us": self.p90_us,
            "p99_us": self.p99_us, "p999_us": self.p999_us, "max_us": self.max_us,
        })
    }

    pub fn describe(&self) -> String {
        format!(
            "p50 {} p90 {} p99 {} p999 {} max {}",
            micros(self.p50_us),
            micros(self.p90_us),
            micros(self.p99_us),
            micros(self.p999_us),
            micros(self.max_us)
        )
    }
}

/// `1234` µs as `1.23 ms`, small values as `µs`.
pub fn micros(value: u64) -> String {
    if value >= 1000 {
        format!("{:.2} ms", value as f64 / 1000.0)
    } else {
        format!("{value} µs")
    }
}

/// Bytes and messages moved in some time.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Throughput {
    pub bytes: u64,
    pub messages: u64,
    pub elapsed: Duration,
}

impl Throughput {
    pub fn mb_per_s(&self) -> f64 {
        let seconds = self.elapsed.as_secs_f64();
        if seconds == 0.0 {
            return 0.0;
        }
        self.bytes as f64 / 1_000_000.0 / seconds
    }

    pub fn messages_per_s(&self) -> f64 {
        let seconds = self.elapsed.as_secs_f64();
        if seconds == 0.0 {
            return 0.0;
        }
        self.messages as f64 / seconds
    }

    pub fn to_json(self) -> Value {
        json!({
            "bytes": self.bytes, "messages": self.messages,
            "seconds": self.elapsed.as_secs_f64(),
            "mb_per_s": self.mb_per_s(), "msg_per_s": self.messages_per_s(),
        })
    }
}

/// How a ratio compares with its target.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Target {
    /// The ratio should be at least this.
    RatioAtLeast(f64),
    /// The measured value should be at most this (same unit as the value).
    ValueAtMost(f64),
    None,
}

impl Target {
    fn describe(&self, unit: &str) -> String {
        match self {
            Target::RatioAtLeast(ratio) => format!("ratio ≥ {ratio}"),
            Target::ValueAtMost(value) => format!("≤ {value} {unit}"),
            Target::None => String::new(),
        }
    }

    fn met(&self, value: f64, ratio: Option<f64>) -> Option<bool> {
        match self {
            Target::RatioAtLeast(target) => ratio.map(|ratio| ratio >= *target),
            Target::ValueAtMost(target) => Some(value <= *target),
            Target::None => None,
        }
    }
}

/// One line of the final table: a value, its baseline (same unit) and the
/// ratio `value / baseline` (or `baseline / value` for lower-is-better).
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub name: String,
    pub value: f64,
    pub baseline_name: String,
    pub baseline: Option<f64>,
    pub unit: String,
    /// True when a larger value is better (throughput); false for times.
    pub higher_is_better: bool,
    pub target: Target,
    /// Samples behind `value` (the median is reported when there are several).
    pub samples: Vec<f64>,
}

impl Row {
    pub fn ratio(&self) -> Option<f64> {
        let baseline = self.baseline?;
        if baseline <= 0.0 || self.value <= 0.0 {
            return None;
        }
        Some(if self.higher_is_better {
            self.value / baseline
        } else {
            baseline / self.value
        })
    }

    pub fn met(&self) -> Option<bool> {
        self.target.met(self.value, self.ratio())
    }

    pub fn to_json(&self) -> Value {
        json!({
            "name": self.name, "value": self.value, "unit": self.unit,
            "baseline_name": self.baseline_name, "baseline": self.baseline,
            "ratio": self.ratio(), "target": self.target.describe(&self.unit),
            "met": self.met(), "samples": self.samples,
        })
    }
}

/// Median of `samples` (the mean of the middle two for an even count).
pub fn median(samples: &[f64]) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[middle]
    } else {
        (sorted[middle - 1] + sorted[middle]) / 2.0
    }
}

fn number(value: f64) -> String {
    if value.abs() >= 100.0 {
        format!("{value:.0}")
    } else if value.abs() >= 1.0 {
        format!("{value:.2}")
    } else {
        format!("{value:.3}")
    }
}

/// The rows as an aligned text table.
pub fn table(rows: &[Row]) -> String {
    let mut lines = vec![[
        "measurement".to_owned(),
        "value".to_owned(),
        "baseline".to_owned(),
        "ratio".to_owned(),
        "target".to_owned(),
        String::new(),
    ]];
    for row in rows {
        let baseline = match row.baseline {
            Some(baseline) => format!("{} ({})", number(baseline), row.baseline_name),
            None => "-".to_owned(),
        };
        let verdict = match row.met() {
            Some(true) => "ok",
            Some(false) => "MISS",
            None => "",
        };
        lines.push([
            row.name.clone(),
            format!("{} {}", number(row.value), row.unit),
            baseline,
            row.ratio()
                .map_or("-".to_owned(), |ratio| format!("{ratio:.2}")),
            row.target.describe(&row.unit),
            verdict.to_owned(),
        ]);
    }
    let mut widths = [0usize; 6];
    for line in &lines {
        for (width, cell) in widths.iter_mut().zip(line) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for line in &lines {
        let cells: Vec<String> = line
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // The ratio follows the direction of "better", targets compare the
    // right number, and the median of an even count averages the middle.
    #[test]
    fn ratios_targets_and_medians() {
        let row = Row {
            name: "append".into(),
            value: 80.0,
            baseline_name: "raw".into(),
            baseline: Some(100.0),
            unit: "MB/s".into(),
            higher_is_better: true,
            target: Target::RatioAtLeast(0.8),
            samples: vec![80.0],
        };
        assert_eq!(row.ratio(), Some(0.8));
        assert_eq!(row.met(), Some(true));
        let time = Row {
            value: 2.0,
            baseline: Some(1.0),
            higher_is_better: false,
            target: Target::ValueAtMost(1.0),
            ..row.clone()
        };
        assert_eq!(time.ratio(), Some(0.5));
        assert_eq!(time.met(), Some(false));
        assert_eq!(median(&[3.0, 1.0, 2.0, 10.0]), 2.5);
        assert!(table(&[row, time]).contains("MISS"));
    }
}
