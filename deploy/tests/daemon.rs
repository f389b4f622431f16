//! dpwarpd as its users run it: the real binary with a configuration file,
//! on Linux TCP over loopback (no root, no DPDK), driven by dpwarp's bench
//! clients (in this process, and in a child process this test kills),
//! watched through `dpwarpctl` and the metrics endpoint (a real HTTP
//! client), and stopped with SIGTERM.
//!
//! This binary is its own child: with `DPWARPD_TEST_CLIENT=ADDR` set it runs
//! one long Write client against ADDR and nothing else.

#![allow(clippy::disallowed_methods)]

use std::net::{SocketAddrV4, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use bench::rig::{self, RigConfig};
use bench::spec::{memory_for, Measured, Mode, Op, Spec, Stop};
use bench::workload;
use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::Value;

const DPWARPD: &str = env!("CARGO_BIN_EXE_dpwarpd");
const DPWARPCTL: &str = env!("CARGO_BIN_EXE_dpwarpctl");

fn main() {
    if let Ok(addr) = std::env::var("DPWARPD_TEST_CLIENT") {
        // The child: a Write client that runs until it is killed.
        let addr: SocketAddrV4 = addr.parse().expect("an address");
        let _ = client(
            addr,
            Op::Write,
            Mode::Bandwidth,
            65536,
            1,
            Stop::Duration(Duration::from_secs(120)),
        );
        std::process::exit(0);
    }
    let args = Arguments::from_args();
    let trials = vec![
        Trial::test("check_tells_a_valid_file_from_a_bad_one", check),
        Trial::test(
            "serves_clients_at_once_and_drains_on_sigterm",
            serve_and_drain,
        ),
    ];
    libtest_mimic::run(&args, trials).exit();
}

fn fail(why: impl Into<String>) -> Failed {
    Failed::from(why.into())
}

/// A free TCP port on loopback (bound and let go: a test's own).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("dpwarpd-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

fn example() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/dpwarpd.toml"))
        .expect("the example config")
}

/// The example, on Linux TCP at 127.0.0.1, with its sockets in `dir`.
fn loopback_config(dir: &Path, tcp_port: u16, metrics: u16, memory_mib: usize) -> String {
    example()
        .replace("driver = \"net_tap\"", "driver = \"kernel\"")
        .replace("address = \"10.77.0.2/24\"", "address = \"127.0.0.1/8\"")
        .replace("mtu = 1500", "mtu = 9000")
        .lines()
        .filter(|l| !l.starts_with("iface") && !l.starts_with("host_address"))
        .collect::<Vec<_>>()
        .join("\n")
        .replace(
            "/run/dpwarpd/control.sock",
            &dir.join("control.sock").display().to_string(),
        )
        .replace("127.0.0.1:9464", &format!("127.0.0.1:{metrics}"))
        .replace("tcp_port = 18515", &format!("tcp_port = {tcp_port}"))
        .replace("memory_mib = 256", &format!("memory_mib = {memory_mib}"))
        .replace("drain_deadline_ms = 5000", "drain_deadline_ms = 1500")
        .replace("client_idle_ms = 10000", "client_idle_ms = 1000")
}

fn check() -> Result<(), Failed> {
    let dir = scratch("check");
    let good = dir.join("good.toml");
    std::fs::write(&good, example()).map_err(|e| fail(e.to_string()))?;
    let out = Command::new(DPWARPD).arg("--check").arg(&good).output()?;
    if !out.status.success() {
        return Err(fail(format!("the example was refused: {out:?}")));
    }
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, example().replace("mtu = 1500", "mtu = 1000"))
        .map_err(|e| fail(e.to_string()))?;
    let out = Command::new(DPWARPD).arg("--check").arg(&bad).output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = example()
        .lines()
        .position(|l| l.starts_with("mtu = 1500"))
        .unwrap()
        + 1;
    let want = format!("{}:{line}:", bad.display());
    if out.status.code() != Some(2)
        || !stderr.contains(&want)
        || !stderr.contains("`mtu`: 1000 is out of range: give 1280 to 9000")
    {
        return Err(fail(format!(
            "want exit 2 and {want:?} ... `mtu`, got {out:?}"
        )));
    }
    // Not even the control socket of a daemon whose file does not check.
    let out = Command::new(DPWARPD).arg(&bad).output()?;
    if out.status.code() != Some(2) {
        return Err(fail(format!("a bad file started a daemon: {out:?}")));
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// dpwarpd, killed if the test did not stop it.
struct Daemon {
    child: Child,
    socket: PathBuf,
    log: PathBuf,
}

impl Daemon {
    fn start(dir: &Path, config: &str) -> Result<Daemon, Failed> {
        let path = dir.join("dpwarpd.toml");
        std::fs::write(&path, config).map_err(|e| fail(e.to_string()))?;
        let log = dir.join("dpwarpd.log");
        let child = Command::new(DPWARPD)
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()?;
        let d = Daemon {
            child,
            socket: dir.join("control.sock"),
            log,
        };
        let start = Instant::now();
        loop {
            if let Ok(s) = d.ctl("status") {
                if s["state"] == "serving" {
                    return Ok(d);
                }
            }
            if start.elapsed() > Duration::from_secs(20) {
                return Err(fail(format!("dpwarpd never served: {}", d.log_text())));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn ctl(&self, command: &str) -> Result<Value, String> {
        deploy::ctl::request(&self.socket, command)
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Polls `stats` until `done` holds, at most `limit`.
    fn wait_stats(&self, limit: Duration, done: impl Fn(&Value) -> bool) -> Result<Value, Failed> {
        let start = Instant::now();
        loop {
            let s = self.ctl("stats").map_err(fail)?;
            if done(&s) {
                return Ok(s);
            }
            if start.elapsed() > limit {
                return Err(fail(format!("stats never got there: {s:#}")));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn client(
    addr: SocketAddrV4,
    op: Op,
    mode: Mode,
    size: usize,
    qps: usize,
    stop: Stop,
) -> Result<Measured, String> {
    let config = RigConfig {
        crc: true,
        markers: false,
        mtu: 9000,
        memory: memory_for(qps, size),
        port: addr.port(),
        sw_checksums: false,
    };
    let mut rig = rig::remote(&config, addr)?;
    let spec = Spec {
        op,
        mode,
        size,
        stop,
        depth: 16,
        qps,
    };
    workload::run(&mut rig, &spec, true, &AtomicBool::new(false), &mut |_| {})
}

/// A metric's value from an exposition (the first sample whose name and
/// labels start with `key`).
fn sample(text: &str, key: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.starts_with(key))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn scrape(metrics: u16) -> Result<String, Failed> {
    let response = ureq::get(&format!("http://127.0.0.1:{metrics}/metrics"))
        .timeout(Duration::from_secs(5))
        .call()
        .map_err(|e| fail(format!("scraping the metrics: {e}")))?;
    let kind = response.content_type().to_string();
    if kind != "text/plain" {
        return Err(fail(format!("metrics content type {kind}")));
    }
    response.into_string().map_err(|e| fail(e.to_string()))
}

fn serve_and_drain() -> Result<(), Failed> {
    let dir = scratch("serve");
    let (tcp_port, metrics) = (free_port(), free_port());
    // 16 MiB: room for the runs below, not for a 16 MiB message.
    let daemon = Daemon::start(&dir, &loopback_config(&dir, tcp_port, metrics, 16))?;
    let addr = SocketAddrV4::new([127, 0, 0, 1].into(), tcp_port);

    // Three clients at once, each with its own workload and memory.
    let runs: Vec<(Op, Mode, usize, usize, u64)> = vec![
        (Op::Write, Mode::Bandwidth, 65536, 1, 3000),
        (Op::Read, Mode::Bandwidth, 4096, 2, 3000),
        (Op::Send, Mode::Latency, 64, 1, 2000),
    ];
    let results: Vec<Result<Measured, String>> = std::thread::scope(|s| {
        let threads: Vec<_> = runs
            .iter()
            .map(|&(op, mode, size, qps, n)| {
                s.spawn(move || client(addr, op, mode, size, qps, Stop::Iterations(n)))
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().unwrap_or_else(|_| Err("a client panicked".into())))
            .collect()
    });
    for (&(op, _, size, qps, n), r) in runs.iter().zip(&results) {
        let m = r
            .as_ref()
            .map_err(|e| fail(format!("{op:?} {size} B: {e}\n{}", daemon.log_text())))?;
        if m.messages < n * qps as u64 && m.messages < n {
            return Err(fail(format!("{op:?}: {} of {n} messages", m.messages)));
        }
    }
    // Every run's memory goes back once its connections closed: nothing is
    // left leased, no QP stays.
    let stats = daemon.wait_stats(Duration::from_secs(10), |s| {
        s["service"]["clients"] == 0 && s["service"]["memory_leased"] == 0 && s["qps"] == 0
    })?;
    if stats["service"]["accepted"] != 4 || stats["service"]["closed"] != 4 {
        return Err(fail(format!(
            "want 4 connections accepted and closed: {stats:#}"
        )));
    }

    // A client whose workload does not fit is refused with the reason.
    let refused = client(
        addr,
        Op::Write,
        Mode::Bandwidth,
        16 << 20,
        1,
        Stop::Iterations(10),
    );
    match refused {
        Err(why) if why.contains("server memory") => {}
        other => {
            return Err(fail(format!(
                "a 16 MiB workload in 16 MiB: {:?}",
                other.map(|m| m.messages)
            )))
        }
    }

    // A client killed mid-transfer leaves no QP and no lease behind.
    let mut child = Command::new(std::env::current_exe()?)
        .env("DPWARPD_TEST_CLIENT", addr.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let running = daemon.wait_stats(Duration::from_secs(20), |s| {
        s["qps"] == 1 && s["cores"][0]["connections"] == 1
    });
    let _ = child.kill();
    let _ = child.wait();
    running?;
    daemon.wait_stats(Duration::from_secs(10), |s| {
        s["qps"] == 0 && s["service"]["clients"] == 0 && s["service"]["memory_leased"] == 0
    })?;

    // The operator's views.
    let listeners = daemon.ctl("listeners").map_err(fail)?;
    if listeners["listeners"][0]["tcp_port"] != tcp_port || listeners["listeners"][0]["up"] != true
    {
        return Err(fail(format!("listeners: {listeners:#}")));
    }
    let text = scrape(metrics)?;
    for (key, want) in [
        ("dpwarp_up ", 1.0),
        (
            "dpwarp_service_connections_accepted_total{service=\"bench\"}",
            5.0,
        ),
        (
            "dpwarp_service_connections_refused_total{service=\"bench\"}",
            1.0,
        ),
        (
            "dpwarp_service_connections_closed_total{service=\"bench\"}",
            5.0,
        ),
        ("dpwarp_service_memory_leased_bytes{service=\"bench\"}", 0.0),
        (
            "dpwarp_service_memory_bytes{service=\"bench\"}",
            16.0 * 1048576.0,
        ),
    ] {
        let got = sample(&text, key);
        if got != Some(want) {
            return Err(fail(format!("{key}: want {want}, got {got:?}\n{text}")));
        }
    }
    let busy = sample(&text, "dpwarp_core_busy_seconds_total{core=\"0\"").unwrap_or(0.0);
    let fpdus = sample(&text, "dpwarp_core_fpdu_rx_bytes_total{core=\"0\"").unwrap_or(0.0);
    if busy <= 0.0 || fpdus < (3000.0 * 65536.0) {
        return Err(fail(format!(
            "core 0 busy {busy} s, {fpdus} FPDU octets in\n{text}"
        )));
    }

    // SIGTERM while a client runs: no new connection, the running one is
    // ended at the deadline, the daemon exits 0 and removes its socket.
    let long = std::thread::spawn(move || {
        client(
            addr,
            Op::Write,
            Mode::Bandwidth,
            4096,
            1,
            Stop::Duration(Duration::from_secs(60)),
        )
    });
    daemon.wait_stats(Duration::from_secs(20), |s| s["qps"] == 1)?;
    let mut daemon = daemon;
    let term = Instant::now();
    Command::new("kill")
        .args(["-TERM", &daemon.child.id().to_string()])
        .status()?;
    // Draining: a new client is refused while the old one runs.
    std::thread::sleep(Duration::from_millis(200));
    let late = client(
        addr,
        Op::Write,
        Mode::Bandwidth,
        64,
        1,
        Stop::Iterations(10),
    );
    if !matches!(&late, Err(why) if why.contains("draining")) {
        return Err(fail(format!(
            "a client during the drain: {:?}",
            late.map(|m| m.messages)
        )));
    }
    let status = loop {
        if let Some(status) = daemon.child.try_wait()? {
            break status;
        }
        if term.elapsed() > Duration::from_secs(10) {
            return Err(fail(format!(
                "no exit 10 s after SIGTERM: {}",
                daemon.log_text()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = term.elapsed();
    let ended = long.join().map_err(|_| fail("the long client panicked"))?;
    if !status.success() || took < Duration::from_millis(1500) || took > Duration::from_millis(3500)
    {
        return Err(fail(format!(
            "exit {status:?} {took:?} after SIGTERM (deadline 1.5 s): {}",
            daemon.log_text()
        )));
    }
    if ended.is_ok() {
        return Err(fail("the client running past the deadline was not ended"));
    }
    if daemon.socket.exists() {
        return Err(fail("the control socket stayed"));
    }
    let log = daemon.log_text();
    for want in [
        "connection accepted",
        "connection refused",
        "connection closed",
        "draining",
        "drained",
    ] {
        if !log.contains(want) {
            return Err(fail(format!("no {want:?} in the log:\n{log}")));
        }
    }
    // dpwarpctl says clearly when there is no daemon.
    let out = Command::new(DPWARPCTL)
        .args(["-s", &daemon.socket.display().to_string(), "status"])
        .output()?;
    if out.status.success()
        || !String::from_utf8_lossy(&out.stderr).contains("cannot reach dpwarpd")
    {
        return Err(fail(format!("dpwarpctl without a daemon: {out:?}")));
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
