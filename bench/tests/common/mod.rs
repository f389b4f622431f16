//! What the process tests share.
#![allow(dead_code)] // Each test binary uses its own part of it.

/// Both sides of a pair busy-poll, as poll-mode cores do: one pair at a
/// time, or the tests' processes starve each other on a small machine.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Holds the one-pair-at-a-time lock (a failed test leaves it usable).
pub(crate) fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A free port: one the kernel just gave out, released again.
pub(crate) fn port() -> u16 {
    let l = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    l.local_addr().unwrap().port()
}
