//! Timing for the examples that print throughput tables: the median of
//! [`RUNS`] runs of about [`RUN_TIME`] each, after a warm-up that picks the
//! number of calls per run. Included with `#[path]` by each example.
#![allow(dead_code)] // Each example uses what it needs.

use std::time::{Duration, Instant};

/// Timed runs per figure; the median is reported.
pub(crate) const RUNS: usize = 21;
/// Length of one timed run.
pub(crate) const RUN_TIME: Duration = Duration::from_millis(1);

/// Median GB/s over [`RUNS`] runs of `call`, which handles `octets` octets.
pub(crate) fn median_rate(octets: usize, mut call: impl FnMut()) -> f64 {
    // Warm-up, doubling the calls per run until a run takes 1 ms.
    let mut calls = 1u64;
    let mut elapsed = time(calls, &mut call);
    while elapsed < Duration::from_millis(1) {
        calls *= 2;
        elapsed = time(calls, &mut call);
    }
    let calls = (calls as f64 * RUN_TIME.as_secs_f64() / elapsed.as_secs_f64()).ceil() as u64;
    let mut rates: Vec<f64> = (0..RUNS)
        .map(|_| (octets as u64 * calls) as f64 / time(calls, &mut call).as_secs_f64() / 1e9)
        .collect();
    rates.sort_by(f64::total_cmp);
    rates[RUNS / 2]
}

/// How long `calls` calls of `call` take.
#[allow(clippy::disallowed_methods)] // A benchmark reads the clock; the library never does.
pub(crate) fn time(calls: u64, call: &mut impl FnMut()) -> Duration {
    let start = Instant::now();
    for _ in 0..calls {
        call();
    }
    start.elapsed()
}

pub(crate) fn size_name(size: usize) -> String {
    if size >= 1024 && size.is_multiple_of(1024) {
        format!("{} KiB", size / 1024)
    } else {
        format!("{size} B")
    }
}

/// The load average, to judge how busy the other core was.
pub(crate) fn load() -> String {
    match std::fs::read_to_string("/proc/loadavg") {
        Ok(text) => format!(
            "load average {}",
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        ),
        Err(_) => "load average unknown".to_string(),
    }
}

/// Median calls per second over [`RUNS`] runs of `call`.
pub(crate) fn median_calls(mut call: impl FnMut()) -> f64 {
    // One "octet" per call turns octets per second into calls per second.
    median_rate(1, &mut call) * 1e9
}
