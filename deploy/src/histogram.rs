//! Prometheus histograms of durations the daemon observes (connection
//! set-up), written by the cores and read by the metrics thread.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A Prometheus histogram of durations: cumulative buckets of seconds,
/// their sum and count, written with relaxed atomics (once per
/// observation: per connection, never per packet).
#[derive(Debug)]
pub struct Histogram {
    /// Each bucket's upper bound in microseconds.
    bounds_us: &'static [u64],
    /// Observations at or below each bound (not cumulative here), then
    /// those above every bound.
    counts: Vec<AtomicU64>,
    sum_us: AtomicU64,
}

/// Buckets for connection set-up: 50 us to 5 s.
pub const SETUP_BUCKETS_US: &[u64] = &[
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 5_000_000,
];

impl Histogram {
    /// An empty histogram with buckets `bounds_us` (ascending).
    pub fn new(bounds_us: &'static [u64]) -> Histogram {
        Histogram {
            bounds_us,
            counts: (0..=bounds_us.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_us: AtomicU64::new(0),
        }
    }

    /// Counts one observation of `d`.
    pub fn observe(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let i = self.bounds_us.partition_point(|&b| b < us);
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    /// Its samples (`_bucket` with `le`, `_sum`, `_count`) labelled
    /// `labels`, appended to `out` under the family `name`.
    pub(crate) fn samples(&self, name: &str, labels: &str, out: &mut String) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (i, c) in self.counts.iter().enumerate() {
            cumulative += c.load(Ordering::Relaxed);
            let le = match self.bounds_us.get(i) {
                Some(&b) => format!("{}", b as f64 / 1e6),
                None => "+Inf".to_string(),
            };
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {cumulative}"
            );
        }
        let sum = self.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {sum}");
        let _ = writeln!(out, "{name}_count{braces} {cumulative}");
    }
}
