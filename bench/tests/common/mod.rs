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

/// What a refused `bench` run said: its exit status and its stderr.
pub(crate) struct Refusal {
    /// The exit status (none: killed at the time limit).
    pub code: Option<i32>,
    /// Its stderr.
    pub stderr: String,
}

/// Runs `bench ARGS` (the binary at `bench`) under a 4 GB address-space
/// limit, so that a refusal that regressed into a run cannot take the
/// machine's memory, and kills it (by its PID) if it has not ended within
/// 30 s.
pub(crate) fn run_refused(bench: &str, args: &[&str]) -> Refusal {
    use std::process::{Command, Stdio};
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 4000000 && exec \"$0\" \"$@\"")
        .arg(bench)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start bench");
    #[allow(clippy::disallowed_methods)] // A child process runs on real time.
    let start = std::time::Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > std::time::Duration::from_secs(30) {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let out = child.wait_with_output().expect("its output");
    Refusal {
        code: out.status.code(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Asserts that `bench ARGS` exits with status 2 before anything starts,
/// on one line of stderr that contains every one of `says` (the option
/// to fix first), without a panic.
pub(crate) fn assert_refused(bench: &str, args: &[&str], says: &[&str]) {
    let r = run_refused(bench, args);
    assert_eq!(r.code, Some(2), "{args:?}: {}", r.stderr);
    assert!(!r.stderr.contains("panicked"), "{args:?}: {}", r.stderr);
    assert_eq!(r.stderr.trim().lines().count(), 1, "{args:?}: {}", r.stderr);
    for word in says {
        assert!(
            r.stderr.contains(word),
            "{args:?}: {word:?} in {}",
            r.stderr
        );
    }
}

/// An embedded rig's configuration with `memory` octets registered: CRC on,
/// markers off, MTU 9000, listening on port 7000.
pub(crate) fn rig_config(memory: usize) -> bench::rig::RigConfig {
    bench::rig::RigConfig {
        crc: true,
        markers: false,
        mtu: 9000,
        memory,
        port: 7000,
        sw_checksums: true,
        loss: 0.0,
        direct_receive: true,
    }
}
