//! What `dpwarpd --check` refuses because the start would fail, the
//! control socket's answers and the systemd unit's capabilities: the real
//! binary, a configuration like the example on Linux TCP at 127.0.0.1 (no
//! DPDK). Each test was found failing by a review.

#![allow(clippy::disallowed_methods)]

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::free_port;

const DPWARPD: &str = env!("CARGO_BIN_EXE_dpwarpd");

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("dpwarpd-check-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The example on Linux TCP at 127.0.0.1, its control socket in `dir`,
/// metrics on `metrics`, the bench service on `bench`, every other service
/// on a free port, a short drain.
fn loopback(dir: &Path, bench: u16, metrics: u16) -> String {
    common::loopback(dir, bench, metrics, 64)
        .replace("drain_deadline_ms = 5000", "drain_deadline_ms = 500")
}

fn check(dir: &Path, name: &str, text: &str) -> Output {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    Command::new(DPWARPD)
        .arg("--check")
        .arg(&path)
        .output()
        .unwrap()
}

/// Starts dpwarpd on `text` and waits (at most 20 s) until it serves or
/// exits.
fn start(dir: &Path, text: &str) -> (Child, Option<std::process::ExitStatus>) {
    let path = dir.join("dpwarpd.toml");
    std::fs::write(&path, text).unwrap();
    let mut child = Command::new(DPWARPD)
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("dpwarpd.log")).unwrap())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        if let Some(status) = child.try_wait().unwrap() {
            return (child, Some(status));
        }
        if let Ok(s) = deploy::ctl::request(&dir.join("control.sock"), "status") {
            if s["state"] == "serving" {
                return (child, None);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("dpwarpd neither served nor exited in 20 s");
}

fn stop(mut child: Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if child.try_wait().unwrap().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// `reflect_dscp = true` with driver "kernel" where Linux does not reflect
/// a SYN's TOS: dpwarpd refuses to start, so `--check` (the unit's
/// ExecStartPre) refuses it too, naming the key, as it refuses memory and
/// CPUs this machine lacks (found by a review: `--check` passed it).
#[test]
fn check_refuses_reflect_dscp_that_linux_will_not_honour() {
    if tcp_lite::sys::kernel::linux_reflects_tos() {
        println!("net.ipv4.tcp_reflect_tos = 1 here: nothing to check");
        return;
    }
    let dir = scratch("reflect");
    let text = loopback(&dir, free_port(), free_port())
        .replace("reflect_dscp = false", "reflect_dscp = true");
    let out = check(&dir, "reflect.toml", &text);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(2) && stderr.contains("reflect_dscp"),
        "--check passed a file dpwarpd refuses to start with: {out:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The metrics endpoint and a service on one TCP port over Linux TCP: the
/// daemon binds the metrics first and then its core cannot listen ("a core
/// failed to start", exit 1), so `--check` refuses it, naming
/// `metrics_listen` (found by a review: `--check` passed it).
#[test]
fn check_refuses_metrics_on_a_services_port() {
    let dir = scratch("metrics");
    let bench = free_port();
    let text = loopback(&dir, bench, bench);
    let out = check(&dir, "metrics.toml", &text);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(2) && stderr.contains("metrics_listen"),
        "--check passed metrics_listen on the bench service's port: {out:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A control socket path longer than a Unix socket address takes (107
/// octets) is refused by `--check`, and a start with it makes no directory
/// for it (found by a review: `--check` passed it, then the start failed,
/// "path must be shorter than SUN_LEN", and left the directory it made).
#[test]
fn check_refuses_a_control_socket_path_too_long_for_a_socket() {
    let dir = scratch("long");
    let sub = dir.join("d".repeat(110));
    let text = loopback(&dir, free_port(), free_port()).replace(
        &dir.join("control.sock").display().to_string(),
        &sub.join("control.sock").display().to_string(),
    );
    let out = check(&dir, "long.toml", &text);
    let checked = out.status.code();
    let (child, exited) = start(&dir, &text);
    let made = sub.exists();
    if exited.is_none() {
        stop(child);
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        checked,
        Some(2),
        "--check passed a control_socket no socket can be bound at: {out:?}"
    );
    assert!(!made, "a failed start left the control socket's directory");
}

/// A command line longer than the 256 octets read is answered with an
/// error, and the connection ends in order: the rest is read and dropped
/// (found by a review: the connection was closed with it unread, so the
/// client got ECONNRESET instead of the end of the answer, and
/// `dpwarpctl`'s own reader, `read_to_string`, lost the answer).
#[test]
fn a_long_command_is_answered_without_a_reset() {
    let dir = scratch("long-command");
    let (child, exited) = start(&dir, &loopback(&dir, free_port(), free_port()));
    assert!(exited.is_none(), "dpwarpd did not start: {exited:?}");
    let mut s = UnixStream::connect(dir.join("control.sock")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut command = vec![b'x'; 300];
    command.push(b'\n');
    s.write_all(&command).unwrap();
    let mut text = String::new();
    let read = s.read_to_string(&mut text);
    stop(child);
    let _ = std::fs::remove_dir_all(&dir);
    read.unwrap_or_else(|e| panic!("the answer ended in {e} after {text:?}"));
    // Said in words, not echoed.
    assert!(
        text.contains("the command is longer than 256 octets") && !text.contains("xxxx"),
        "{text}"
    );
}

/// The systemd unit's capability bounding set lets dpwarpd bind the ports
/// its configuration may name: `tcp_port` takes 1 to 65535 and passes
/// `--check` (found by a review: without CAP_NET_BIND_SERVICE in the unit a
/// port below 1024 could not be bound, and the log said only "the
/// operating system refused the listening socket"). Root and setpriv
/// needed.
#[test]
fn the_units_capabilities_bind_every_port_the_config_takes() {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0");
    let setpriv = Command::new("setpriv").arg("--version").output().is_ok();
    if !root || !setpriv {
        println!("needs root and setpriv: skipped");
        return;
    }
    let unit = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("debian/dpwarpd.service"),
    )
    .unwrap();
    let caps: Vec<String> = unit
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .unwrap()
        .split_whitespace()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect();
    let dir = scratch("caps");
    // A port below 1024 that no one listens on.
    let low = (900..1000)
        .find(|&p| TcpListener::bind(("127.0.0.1", p)).is_ok())
        .unwrap();
    let text = loopback(&dir, low, free_port());
    let path = dir.join("dpwarpd.toml");
    std::fs::write(&path, &text).unwrap();
    assert!(check(&dir, "dpwarpd.toml", &text).status.success());
    let mut child = Command::new("setpriv")
        .arg(format!("--bounding-set=-all,{}", caps.join(",")))
        .arg("--no-new-privs")
        .arg(DPWARPD)
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("dpwarpd.log")).unwrap())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let mut served = false;
    while start.elapsed() < Duration::from_secs(20) {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if let Ok(s) = deploy::ctl::request(&dir.join("control.sock"), "status") {
            if s["state"] == "serving" {
                served = true;
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = std::fs::read_to_string(dir.join("dpwarpd.log")).unwrap_or_default();
    if child.try_wait().unwrap().is_none() {
        stop(child);
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        served,
        "under the unit's capabilities dpwarpd could not serve tcp_port {low}:\n{log}"
    );
}
