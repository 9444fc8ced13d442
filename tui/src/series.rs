//! Reading the daemon's history for a graph: which ring a time window uses
//! (one-second points up to 15 minutes, ten-second points beyond), the
//! points of one series or of a sum of series inside the window as `(x, y)`
//! with x in seconds before the newest point, and the rates derived from a
//! series (disk growth). Pure functions over `HistoryWindow`; no clock: the
//! newest point is "now".

use crate::api::{History, HistoryWindow};

/// The time span a graph shows; `w` cycles through them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    M1,
    M5,
    M15,
    H1,
    H6,
}

impl Window {
    pub const ALL: [Window; 5] = [Window::M1, Window::M5, Window::M15, Window::H1, Window::H6];

    pub fn seconds(self) -> u64 {
        match self {
            Window::M1 => 60,
            Window::M5 => 300,
            Window::M15 => 900,
            Window::H1 => 3600,
            Window::H6 => 21_600,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Window::M1 => "1m",
            Window::M5 => "5m",
            Window::M15 => "15m",
            Window::H1 => "1h",
            Window::H6 => "6h",
        }
    }

    pub fn next(self) -> Window {
        let index = Window::ALL.iter().position(|w| *w == self).unwrap_or(0);
        Window::ALL[(index + 1) % Window::ALL.len()]
    }

    pub fn previous(self) -> Window {
        let index = Window::ALL.iter().position(|w| *w == self).unwrap_or(0);
        Window::ALL[(index + Window::ALL.len() - 1) % Window::ALL.len()]
    }

    /// The ring this window reads: one-second points up to 15 minutes.
    pub fn ring(self, history: &HistoryWindow) -> &History {
        if self.seconds() <= 900 {
            &history.second
        } else {
            &history.ten_second
        }
    }
}

/// Index of the first point of `ring` inside `window` (points newer than
/// the newest minus the window).
fn first_in_window(ring: &History, window: Window) -> usize {
    let Some(newest) = ring.at_ms.last() else {
        return 0;
    };
    let start = newest.saturating_sub(window.seconds() * 1000);
    ring.at_ms.partition_point(|at| *at <= start)
}

/// `(seconds before the newest point (≤ 0), value)` of `name` within
/// `window`; empty when the series is unknown.
pub fn points(history: &HistoryWindow, window: Window, name: &str) -> Vec<(f64, f64)> {
    sum(history, window, std::iter::once(name.to_string()))
}

/// The sum of several series (missing values count as 0) within `window`.
pub fn sum(
    history: &HistoryWindow,
    window: Window,
    names: impl IntoIterator<Item = String>,
) -> Vec<(f64, f64)> {
    let ring = window.ring(history);
    let first = first_in_window(ring, window);
    let count = ring.at_ms.len() - first;
    let mut totals = vec![0.0f64; count];
    let mut any = false;
    for series_name in names {
        let Some(values) = ring.series(&series_name) else {
            continue;
        };
        any = true;
        // Series are aligned to the end: value i belongs to point
        // at_ms.len() - values.len() + i.
        let offset = ring.at_ms.len() - values.len().min(ring.at_ms.len());
        for (index, value) in values.iter().enumerate() {
            let point = offset + index;
            if point >= first {
                totals[point - first] += f64::from(*value);
            }
        }
    }
    if !any {
        return Vec::new();
    }
    let newest = ring.at_ms.last().copied().unwrap_or(0);
    ring.at_ms[first..]
        .iter()
        .zip(totals)
        .map(|(at, value)| (-((newest - at) as f64) / 1000.0, value))
        .collect()
}

/// The newest value of a series.
pub fn latest(history: &HistoryWindow, name: &str) -> Option<f64> {
    history
        .second
        .series(name)
        .and_then(|values| values.last())
        .or_else(|| {
            history
                .ten_second
                .series(name)
                .and_then(|values| values.last())
        })
        .map(|value| f64::from(*value))
}

/// Change per second of a level (e.g. disk bytes) over the points in
/// `window`: (last - first) / time between them. `None` with fewer than two
/// points.
pub fn growth_per_second(points: &[(f64, f64)]) -> Option<f64> {
    let (first, last) = (points.first()?, points.last()?);
    let seconds = last.0 - first.0;
    (seconds > 0.0).then(|| (last.1 - first.1) / seconds)
}

/// The largest y, for a graph's scale (at least `floor`).
pub fn max_y(points: &[(f64, f64)], floor: f64) -> f64 {
    points.iter().map(|point| point.1).fold(floor, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Series;

    fn window(at_ms: Vec<u64>, series: &[(&str, Vec<f32>)]) -> HistoryWindow {
        HistoryWindow {
            second: History {
                step_ms: 1000,
                at_ms,
                series: series
                    .iter()
                    .map(|(name, values)| Series {
                        name: (*name).into(),
                        values: values.clone(),
                    })
                    .collect(),
            },
            ten_second: History::default(),
        }
    }

    /// Proves points are placed relative to the newest point, limited to the
    /// window, and that sums align late-starting series to the end.
    #[test]
    fn points_and_sums_align_to_the_newest_point() {
        let at_ms: Vec<u64> = (0..120).map(|second| 1_000_000 + second * 1000).collect();
        let history = window(at_ms, &[("a", vec![1.0; 120]), ("b", vec![2.0; 30])]);
        let a = points(&history, Window::M1, "a");
        assert_eq!(a.len(), 60);
        assert_eq!(a.last(), Some(&(0.0, 1.0)));
        assert_eq!(a.first(), Some(&(-59.0, 1.0)));
        let both = sum(&history, Window::M1, ["a".into(), "b".into()]);
        assert_eq!(both[29].1, 1.0, "b has no value 31 s ago");
        assert_eq!(both[30].1, 3.0);
        assert!(points(&history, Window::M1, "missing").is_empty());
        assert_eq!(latest(&history, "b"), Some(2.0));
        assert_eq!(
            growth_per_second(&[(-10.0, 100.0), (0.0, 300.0)]),
            Some(20.0)
        );
        assert_eq!(growth_per_second(&[(0.0, 1.0)]), None);
        assert!(std::ptr::eq(Window::H1.ring(&history), &history.ten_second));
        assert_eq!(Window::H6.next(), Window::M1);
        assert_eq!(Window::M1.previous(), Window::H6);
    }
}
