//! The clock a core reads once per turn: microseconds since the process's
//! first reading, as tcp-lite's (smoltcp's) [`Instant`].

use tcp_lite::Instant;

/// Now, from one epoch for every core of the process (so times of
/// different cores compare). Never zero.
// The data plane is where the clock is read (STYLE.md §3: time is an
// argument everywhere below it).
#[allow(clippy::disallowed_methods)]
pub fn now() -> Instant {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let epoch = EPOCH.get_or_init(std::time::Instant::now);
    Instant::from_micros(epoch.elapsed().as_micros() as i64 + 1)
}
