//! `bench --server` and `bench OP HOST` as two processes over kernel TCP on
//! loopback: every operation in both modes, a server that refuses, and a
//! client with nobody to talk to. Every child is bounded in time and killed
//! (by its PID) if it overstays.

use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

mod common;
use bench::spec::Op;
use common::{port, serial};

const BENCH: &str = env!("CARGO_BIN_EXE_bench");
const LIMIT: Duration = Duration::from_secs(60);

fn spawn(args: &[&str]) -> Child {
    Command::new(BENCH)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bench runs")
}

/// A server, its output going to a file (a pipe nobody reads could fill).
struct Server {
    child: Child,
    log: std::path::PathBuf,
}

/// Starts `bench --server ARGS` and waits until it listens.
fn server(args: &[&str]) -> Server {
    let log = std::env::temp_dir().join(format!(
        "dpwarp-bench-server-{}-{}.log",
        std::process::id(),
        args.join("_").replace('/', "-")
    ));
    let file = std::fs::File::create(&log).unwrap();
    let child = Command::new(BENCH)
        .arg("--server")
        .args(args)
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .expect("bench runs");
    #[allow(clippy::disallowed_methods)] // A child process runs on real time.
    let start = std::time::Instant::now();
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("listening on port")
    {
        assert!(start.elapsed() < LIMIT, "the server never listened");
        std::thread::sleep(Duration::from_millis(10));
    }
    Server { child, log }
}

impl Drop for Server {
    /// A test that failed before the server ended ends it (by its PID).
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Server {
    /// Ends the server with SIGTERM (as a user would), waits for it, and
    /// checks that it left nothing of DPDK's behind; what it said.
    fn terminate(self) -> String {
        let pid = self.child.id();
        let killed = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let (_, said) = self.finish();
        for base in ["/var/run/dpdk", "/tmp/dpdk"] {
            let dir = std::path::Path::new(base).join(format!("dpwarp-{pid}"));
            assert!(!dir.exists(), "{} was left behind: {said}", dir.display());
        }
        said
    }

    /// Waits for the server to exit; its exit status and what it said.
    fn finish(mut self) -> (bool, String) {
        #[allow(clippy::disallowed_methods)] // A child process runs on real time.
        let start = std::time::Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                break Some(status);
            }
            if start.elapsed() > LIMIT {
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let said = std::fs::read_to_string(&self.log).unwrap_or_default();
        let _ = std::fs::remove_file(&self.log);
        match status {
            Some(status) => (status.success(), said),
            None => panic!("the server ran past {LIMIT:?}: {said}"),
        }
    }
}

/// Waits for `child` at most [`LIMIT`], killing it past that.
fn finish(mut child: Child, what: &str) -> Output {
    #[allow(clippy::disallowed_methods)] // A child process runs on real time.
    let start = std::time::Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "{what} ran past {LIMIT:?}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn every_operation_between_two_processes() {
    let _serial = serial();
    let dir = std::env::temp_dir().join(format!("dpwarp-bench-proc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for op in Op::ALL.map(Op::name) {
        for lat in [false, true] {
            let p = port().to_string();
            let server = server(&[op, "-p", &p]);
            let json = dir.join(format!("{op}-{lat}.json"));
            let json_s = json.to_str().unwrap();
            let out_dir = dir.to_str().unwrap();
            let mut args = vec![
                op,
                "127.0.0.1",
                "-p",
                &p,
                "-n",
                "300",
                "--json",
                json_s,
                "--out",
                out_dir,
            ];
            if lat {
                args.push("--lat");
            } else {
                // Two QPs, each its own connection with its own slot.
                args.extend(["-q", "2"]);
            }
            let client = finish(spawn(&args), "the client");
            assert!(client.status.success(), "{op} lat={lat}: {}", text(&client));
            let (ok, said) = server.finish();
            assert!(
                ok && said.contains("client done"),
                "{op} lat={lat} server: {said}"
            );
            let doc: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
            let r = &doc["results"][0];
            assert_eq!(r["transport"], "remote");
            assert_eq!(r["operation"], op);
            assert_eq!(r["iterations"], 300, "{r}");
            assert!(r["gbit_s"].as_f64().unwrap() > 0.0);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_client_sweeps_sizes_against_one_server() {
    let _serial = serial();
    let p = port().to_string();
    let server = server(&["send", "-p", &p]);
    let dir = std::env::temp_dir().join(format!("dpwarp-bench-sweep-{}", std::process::id()));
    let json = dir.join("sweep.json");
    std::fs::create_dir_all(&dir).unwrap();
    // -a reaches 8 MiB, which the server's memory holds for one QP.
    let client = finish(
        spawn(&[
            "send",
            "127.0.0.1",
            "-p",
            &p,
            "-a",
            "-n",
            "20",
            "-t",
            "4",
            "--json",
            json.to_str().unwrap(),
        ]),
        "the client",
    );
    let (ok, said) = server.finish();
    assert!(client.status.success(), "{}", text(&client));
    assert!(
        ok && said.contains("client done after 23 connection(s)"),
        "{said}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(doc["results"].as_array().unwrap().len(), 23);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--llp sctp` between two processes over Linux UDP on loopback: every
/// operation in both modes (DDP streams opened by RFC 6581 §7's Enhanced
/// Initiate, one per QP, on one association), then a sweep of every size
/// `-a` reaches against one server (23 workloads on one association's
/// streams); each server exits once its client's last size is served.
#[test]
fn every_operation_over_sctp_between_two_processes() {
    let _serial = serial();
    let dir = std::env::temp_dir().join(format!("dpwarp-bench-sctp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let run = |op: &str, extra: &[&str], what: &str| -> (serde_json::Value, String) {
        let p = port().to_string();
        let server = server(&[op, "-p", &p, "--llp", "sctp"]);
        let json = dir.join(format!("{what}.json"));
        let mut args = vec![
            op,
            "127.0.0.1",
            "-p",
            &p,
            "--llp",
            "sctp",
            "--json",
            json.to_str().unwrap(),
        ];
        args.extend(extra);
        let client = finish(spawn(&args), "the client");
        assert!(client.status.success(), "{what}: {}", text(&client));
        let (ok, said) = server.finish();
        assert!(ok && said.contains("client done"), "{what} server: {said}");
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        (doc, said)
    };
    for op in Op::ALL.map(Op::name) {
        for lat in [false, true] {
            let what = format!("{op} lat={lat}");
            let extra: &[&str] = if lat {
                &["-n", "300", "--lat"]
            } else {
                &["-n", "300", "-q", "2"]
            };
            let (doc, said) = run(op, extra, &what);
            let r = &doc["results"][0];
            assert_eq!(r["transport"], "remote", "{what}");
            assert_eq!(r["llp"], "sctp", "{what}");
            assert_eq!(r["operation"], op);
            assert_eq!(r["iterations"], 300, "{what}: {r}");
            assert!(r["gbit_s"].as_f64().unwrap() > 0.0, "{what}");
            let streams = if lat { 1 } else { 2 };
            assert!(
                said.contains(&format!("client done after {streams} stream(s)")),
                "{what} server: {said}"
            );
        }
    }
    let (doc, said) = run("write", &["-a", "-n", "20", "-t", "4"], "sweep");
    assert_eq!(doc["results"].as_array().unwrap().len(), 23);
    assert!(said.contains("client done after 23 stream(s)"), "{said}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_server_that_cannot_serve_says_why_and_keeps_going() {
    let _serial = serial();
    let p = port().to_string();
    // 4 QPs of 8 MiB are more than the server's memory (one 8 MiB QP).
    let server = server(&["write", "-p", &p]);
    let client = finish(
        spawn(&[
            "write",
            "127.0.0.1",
            "-p",
            &p,
            "-s",
            "8388608",
            "-q",
            "4",
            "-n",
            "10",
        ]),
        "the refused client",
    );
    assert_eq!(client.status.code(), Some(1), "{}", text(&client));
    let said = text(&client);
    assert!(
        said.contains("the server refused") && said.contains("-q"),
        "{said}"
    );
    // The server is still there for a client that fits.
    let client = finish(
        spawn(&["write", "127.0.0.1", "-p", &p, "-n", "100"]),
        "the next client",
    );
    assert!(client.status.success(), "{}", text(&client));
    let (ok, said) = server.finish();
    assert!(ok, "{said}");
    assert!(
        said.contains("refused the client") && said.contains("client done"),
        "{said}"
    );
}

/// A server serves one client's run at a time: a second client meanwhile
/// is refused, saying why; the first is not disturbed.
#[test]
fn a_second_client_is_refused_while_a_run_is_served() {
    let _serial = serial();
    let p = port().to_string();
    let server = server(&["write", "-p", &p]);
    let first = spawn(&["write", "127.0.0.1", "-p", &p, "-D", "3"]);
    std::thread::sleep(Duration::from_millis(700));
    let second = finish(
        spawn(&["write", "127.0.0.1", "-p", &p, "-n", "100"]),
        "the second client",
    );
    assert_eq!(second.status.code(), Some(1), "{}", text(&second));
    assert!(
        text(&second).contains("another client's run"),
        "{}",
        text(&second)
    );
    let first = finish(first, "the first client");
    assert!(first.status.success(), "{}", text(&first));
    let (ok, said) = server.finish();
    assert!(ok && said.contains("client done"), "{said}");
}

/// A server whose only client was refused gives up after its idle limit
/// (10 s) instead of waiting forever.
#[test]
fn a_server_with_only_a_refused_client_exits() {
    let _serial = serial();
    let p = port().to_string();
    let server = server(&["write", "-p", &p]);
    let refused = finish(
        spawn(&[
            "write",
            "127.0.0.1",
            "-p",
            &p,
            "-s",
            "8388608",
            "-q",
            "64",
            "-n",
            "1",
        ]),
        "the refused client",
    );
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    let (ok, said) = server.finish();
    assert!(
        !ok && said.contains("no client for 10 s") && said.contains("64 refused"),
        "{said}"
    );
}

#[test]
fn a_client_with_no_server_fails_in_time_and_says_so() {
    let _serial = serial();
    let p = port().to_string();
    let client = finish(
        spawn(&["write", "127.0.0.1", "-p", &p, "-n", "10"]),
        "the client",
    );
    assert_eq!(client.status.code(), Some(1));
    let said = text(&client);
    assert!(
        said.contains("127.0.0.1") && said.contains("failed"),
        "{said}"
    );
}

#[test]
fn a_server_on_a_taken_port_says_so() {
    let _serial = serial();
    let taken = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let p = taken.local_addr().unwrap().port().to_string();
    let out = finish(spawn(&["--server", "write", "-p", &p]), "the server");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("cannot listen on port {p}")),
        "{}",
        text(&out)
    );
}

/// Ctrl-C (SIGINT) or SIGTERM ends a run at once and prints what it
/// measured, marked as interrupted, in both modes.
#[test]
fn an_interrupted_run_prints_its_results() {
    let _serial = serial();
    for (mode, signal) in [("bandwidth", "-INT"), ("latency", "-TERM")] {
        let mut args = vec!["write", "-D", "30"];
        if mode == "latency" {
            args.push("--lat");
        }
        let child = spawn(&args);
        std::thread::sleep(Duration::from_millis(1500));
        let killed = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        #[allow(clippy::disallowed_methods)] // A child process runs on real time.
        let start = std::time::Instant::now();
        let out = finish(child, "the interrupted run");
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{mode}: took {:?} to stop",
            start.elapsed()
        );
        assert!(out.status.success(), "{mode}: {}", text(&out));
        assert!(
            text(&out).contains("(interrupted)"),
            "{mode}: {}",
            text(&out)
        );
    }
}

/// `bench --server` and its client over DPDK memif, two processes joined
/// only by the shared-memory wire (its socket named for this test): a
/// bandwidth and a latency run, the server's memif server side quiet before
/// the client leaves and the other way round.
#[test]
fn two_processes_over_memif() {
    let _serial = serial();
    let socket = format!("/run/dpwarp/test-bench-{}.sock", std::process::id());
    for (op, lat) in [("write", false), ("read", true)] {
        let p = port().to_string();
        let server = server(&[
            "--transport",
            "memif",
            "--memif-socket",
            &socket,
            "--ip",
            "10.91.0.2/24",
            "--hugepages",
            "off",
            "-p",
            &p,
        ]);
        let mut args = vec![
            op,
            "10.91.0.2",
            "--transport",
            "memif",
            "--memif-socket",
            &socket,
            "--ip",
            "10.91.0.1/24",
            "--hugepages",
            "off",
            "-p",
            &p,
            "-n",
            "2000",
            "-s",
            "4096",
        ];
        if lat {
            args.push("--lat");
        }
        let client = finish(spawn(&args), "the client");
        assert!(client.status.success(), "{op}: {}", text(&client));
        assert!(text(&client).contains("remote_memif"), "{}", text(&client));
        let (ok, said) = server.finish();
        assert!(ok && said.contains("client done"), "{op} server: {said}");
    }
}

/// `bench --server --cores 2` and a client on one and then two cores
/// (`--cores 1,2`) over one memif port with two queue pairs on each side:
/// Sends (credit flow control: each core's QPs use their own slots and
/// credit words of the server's one region) and Reads. Both sides steer by
/// the same hash, so core k's connections are core k's on the server too:
/// its counts are exact, and no frame reaches the wrong core.
#[test]
fn two_cores_each_side_over_memif() {
    let _serial = serial();
    let socket = format!("/run/dpwarp/test-cores-{}.sock", std::process::id());
    for op in ["send", "read"] {
        let p = port().to_string();
        let server = server(&[
            "--transport",
            "memif",
            "--memif-socket",
            &socket,
            "--ip",
            "10.92.0.2/24",
            "--hugepages",
            "off",
            "--cores",
            "2",
            "-q",
            "4",
            "-p",
            &p,
        ]);
        let client = finish(
            spawn(&[
                op,
                "10.92.0.2",
                "--transport",
                "memif",
                "--memif-socket",
                &socket,
                "--ip",
                "10.92.0.1/24",
                "--hugepages",
                "off",
                "--cores",
                "1,2",
                "-q",
                "4",
                "-p",
                &p,
                "-n",
                "4000",
                "-s",
                "4096",
            ]),
            "the client",
        );
        let said = text(&client);
        assert!(client.status.success(), "{op}: {said}");
        assert!(
            said.contains("2 queue pairs, steered in software (net_memif: the port has no RSS)"),
            "{said}"
        );
        assert_eq!(said.matches("remote_memif").count(), 2, "{said}");
        assert!(said.contains("2 cores / 1 = "), "{said}");
        assert_eq!(
            said.matches("frames at the wrong core: 0").count(),
            3,
            "one row for the 1-core run, two for the 2-core run: {said}"
        );
        let (ok, served) = server.finish();
        assert!(ok, "{op} server: {served}");
        // 4 QPs on core 0, then 2 on each.
        assert!(
            served.contains("core 0 (CPU 0): 6 connection(s); TCP frames handed to their core: 0 ")
                && served.contains(
                    "core 1 (CPU 1): 2 connection(s); TCP frames handed to their core: 0 "
                )
                && served.contains("client done after 8 connection(s)"),
            "{op} server: {served}"
        );
    }
}

/// `bench --server --cores 2` over kernel TCP: each core listens on the
/// port (SO_REUSEPORT) and the kernel spreads the connections; a client on
/// two cores runs 16 QPs of Sends, and the server serves them all as one
/// run.
#[test]
fn two_cores_each_side_over_kernel_tcp() {
    let _serial = serial();
    let p = port().to_string();
    let server = server(&["--cores", "2", "-q", "16", "-p", &p]);
    let client = finish(
        spawn(&[
            "send",
            "127.0.0.1",
            "--cores",
            "2",
            "-q",
            "16",
            "-p",
            &p,
            "-n",
            "4000",
            "-s",
            "4096",
            "-t",
            "16",
        ]),
        "the client",
    );
    let said = text(&client);
    assert!(client.status.success(), "{said}");
    assert!(said.contains("8/8 QP(s) each"), "{said}");
    let (ok, served) = server.finish();
    assert!(
        ok && served.contains("core 0 (CPU 0): ")
            && served.contains("core 1 (CPU 1): ")
            && served.contains("client done after 16 connection(s)"),
        "{served}"
    );
}

/// A DDP over SCTP client on one and then two cores (`bench write HOST
/// --llp sctp --cores 1,2 -q 2`) to a one-core `bench --server --llp sctp`
/// over Linux UDP: each core an association of its own and its share of
/// the streams, all of one run; the server ends after the last size's two
/// streams, though one core's may close before the other's open.
#[test]
fn an_sctp_client_on_two_cores() {
    let _serial = serial();
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        eprintln!("one CPU: no second core");
        return;
    }
    let p = port().to_string();
    let server = server(&["--llp", "sctp", "-p", &p]);
    let client = finish(
        spawn(&[
            "write",
            "127.0.0.1",
            "--llp",
            "sctp",
            "--cores",
            "1,2",
            "-q",
            "2",
            "-p",
            &p,
            "-n",
            "2000",
            "-s",
            "4096",
        ]),
        "the client",
    );
    let said = text(&client);
    assert!(client.status.success(), "{said}");
    assert!(said.contains("1/1 QP(s) each"), "{said}");
    assert!(said.contains("2 cores / 1 = "), "{said}");
    assert_eq!(said.matches("remote/sctp").count(), 2, "{said}");
    let (ok, served) = server.finish();
    assert!(
        ok && served.contains("client done after 4 stream(s)"),
        "{served}"
    );
}

/// `bench --server --llp sctp --cores 2` and a client on one and then two
/// cores over one memif port with two queue pairs on each side: each
/// client core's association leaves from a UDP port that hashes to it, so
/// the server's core of the same number serves it (its counts are exact)
/// and no datagram reaches the wrong core.
#[test]
fn sctp_on_two_cores_each_side_over_memif() {
    let _serial = serial();
    let socket = format!("/run/dpwarp/test-sctp-cores-{}.sock", std::process::id());
    let p = port().to_string();
    let link = |ip: &'static str| {
        [
            "--llp",
            "sctp",
            "--transport",
            "memif",
            "--memif-socket",
            socket.as_str(),
            "--ip",
            ip,
            "--hugepages",
            "off",
        ]
    };
    let mut args = link("10.94.0.2/24").to_vec();
    args.extend(["--cores", "2", "-q", "4", "-p", &p]);
    let server = server(&args);
    let mut args = vec!["write", "10.94.0.2"];
    args.extend(link("10.94.0.1/24"));
    args.extend([
        "--cores", "1,2", "-q", "4", "-p", &p, "-n", "2000", "-s", "4096",
    ]);
    let client = finish(spawn(&args), "the client");
    let said = text(&client);
    assert!(client.status.success(), "{said}");
    assert!(
        said.contains("2 queue pairs, steered in software (net_memif: the port has no RSS)"),
        "{said}"
    );
    assert_eq!(said.matches("remote_memif/sctp").count(), 2, "{said}");
    assert_eq!(
        said.matches("frames at the wrong core: 0").count(),
        3,
        "one row for the 1-core run, two for the 2-core run: {said}"
    );
    let (ok, served) = server.finish();
    // 4 streams on core 0, then 2 on each.
    assert!(
        ok && served.contains("core 0 (CPU 0): 6 stream(s); datagrams handed to their core: 0 ")
            && served.contains("core 1 (CPU 1): 2 stream(s); datagrams handed to their core: 0 ")
            && served.contains("client done after 8 stream(s)"),
        "{served}"
    );
}

/// `bench rping` both roles over memif between two processes: ten
/// iterations, each verified on both sides.
#[test]
fn rping_between_two_processes_over_memif() {
    let _serial = serial();
    let socket = format!("/run/dpwarp/test-rping-{}.sock", std::process::id());
    let log = std::env::temp_dir().join(format!("dpwarp-rping-memif-{}.log", std::process::id()));
    let file = std::fs::File::create(&log).unwrap();
    let mut srv = Command::new(BENCH)
        .args([
            "rping",
            "-s",
            "-a",
            "10.92.0.2",
            "--transport",
            "memif",
            "--memif-socket",
            &socket,
            "--ip",
            "10.92.0.2/24",
            "--hugepages",
            "off",
        ])
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .expect("bench runs");
    // The memif server listens at once (its link comes up with the client).
    std::thread::sleep(Duration::from_millis(700));
    let client = finish(
        spawn(&[
            "rping",
            "-c",
            "-a",
            "10.92.0.2",
            "-C",
            "10",
            "-v",
            "--transport",
            "memif",
            "--memif-socket",
            &socket,
            "--ip",
            "10.92.0.1/24",
            "--hugepages",
            "off",
        ]),
        "the rping client",
    );
    let said = text(&client);
    let status = srv.wait().unwrap();
    let server_said = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    assert!(client.status.success(), "{said}");
    assert_eq!(said.matches("ping data: rdma-ping-").count(), 10, "{said}");
    assert!(status.success(), "{server_said}");
}

/// A memif run stopped by SIGTERM: both cores stop, the results so far are
/// printed, the ports close and EAL cleans up: nothing of DPDK's stays in
/// its runtime directory.
#[test]
fn a_signalled_dpdk_run_stops_its_cores_and_leaves_nothing() {
    let _serial = serial();
    let child = spawn(&[
        "write",
        "-D",
        "30",
        "--transport",
        "memif",
        "--hugepages",
        "off",
    ]);
    let pid = child.id();
    std::thread::sleep(Duration::from_millis(2500));
    let killed = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = finish(child, "the signalled memif run");
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("(interrupted)"), "{}", text(&out));
    for base in ["/var/run/dpdk", "/tmp/dpdk"] {
        let dir = std::path::Path::new(base).join(format!("dpwarp-{pid}"));
        assert!(!dir.exists(), "{} was left behind", dir.display());
    }
}

/// What cannot work here says so in one line that names the fix: hugepages
/// insisted on where none are free, a PCI address with no NIC bound to
/// vfio-pci, a memif server on a socket another process serves.
#[test]
fn dpdk_setup_failures_say_what_to_fix() {
    let _serial = serial();
    let free: u64 =
        std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
    if free < 512 {
        let out = finish(
            spawn(&[
                "write",
                "-n",
                "10",
                "--transport",
                "memif",
                "--hugepages",
                "on",
            ]),
            "bench with hugepages it cannot have",
        );
        assert!(!out.status.success());
        assert!(text(&out).contains("nr_hugepages"), "{}", text(&out));
    }
    let out = finish(
        spawn(&[
            "write",
            "192.0.2.1",
            "--transport",
            "pci",
            "--pci",
            "0000:7f:1f.7",
            "--ip",
            "192.0.2.2/24",
            "--hugepages",
            "off",
            "-n",
            "10",
        ]),
        "bench on a PCI address with no NIC",
    );
    assert!(!out.status.success());
    assert!(
        text(&out).contains("0000:7f:1f.7") && text(&out).contains("vfio-pci"),
        "{}",
        text(&out)
    );
    let socket = format!("/run/dpwarp/test-busy-{}.sock", std::process::id());
    let p = port().to_string();
    let first = server(&[
        "--transport",
        "memif",
        "--memif-socket",
        &socket,
        "--ip",
        "10.94.0.2/24",
        "--hugepages",
        "off",
        "-p",
        &p,
    ]);
    let second = finish(
        spawn(&[
            "--server",
            "--transport",
            "memif",
            "--memif-socket",
            &socket,
            "--ip",
            "10.94.0.3/24",
            "--hugepages",
            "off",
            "-p",
            &p,
        ]),
        "a second memif server on the same socket",
    );
    assert!(!second.status.success());
    assert!(
        text(&second).contains("memif socket") && text(&second).contains("another process"),
        "{}",
        text(&second)
    );
    first.terminate();
}

/// `--llp sctp` over DPDK in one process (both RNICs on one core): Writes
/// over memif beside MPA over memif (`--compare mpa`) and Reads over a
/// net_ring pair, each a process of its own (EAL starts once a process);
/// every message completed and the JSON names each run's lower layer.
#[test]
fn ddp_over_sctp_over_dpdk_memif_and_ring() {
    let _serial = serial();
    let dir = std::env::temp_dir().join(format!("dpwarp-bench-sctp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (op, transport, extra) in [
        ("write", "memif", ["--compare", "mpa"]),
        ("read", "ring", ["--lat", "--report_gbits"]),
    ] {
        let json = dir.join(format!("{op}-{transport}.json"));
        let mut args = vec![
            op,
            "--llp",
            "sctp",
            "--transport",
            transport,
            "-s",
            "8192",
            "-n",
            "300",
            "--json",
            json.to_str().unwrap(),
            "--out",
            dir.to_str().unwrap(),
        ];
        // An in-process memif pair names its own socket (a --memif-socket
        // would be refused: it places a server or HOST client only).
        args.extend(extra);
        let out = finish(spawn(&args), "the run");
        assert!(
            out.status.success(),
            "{op} over {transport}: {}",
            text(&out)
        );
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let results = doc["results"].as_array().unwrap();
        assert_eq!(results[0]["transport"], transport);
        assert_eq!(results[0]["llp"], "sctp");
        assert_eq!(results[0]["iterations"], 300, "{}", results[0]);
        if extra[1] == "mpa" {
            assert_eq!(results[1]["llp"], "mpa");
            assert_eq!(results[1]["iterations"], 300);
            assert!(
                text(&out).contains("memif/sctp / memif ="),
                "{}",
                text(&out)
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `-l` where both RNICs share one thread (the embedded link, and kernel
/// TCP with `--shared-core`) pins that thread to its first CPU, which the
/// report names for each core (it was ignored: no core was pinned, and the
/// report named none).
#[test]
fn lcores_pin_a_shared_thread() {
    let _serial = serial();
    let dir = std::env::temp_dir().join(format!("dpwarp-bench-lcores-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cpu = *dataplane::lcore::cpus().last().expect("a CPU");
    let list = cpu.to_string();
    let p = port().to_string();
    for extra in [
        &["--transport", "embedded"][..],
        &["--transport", "kernel", "--shared-core"],
    ] {
        let json = dir.join("lcores.json");
        let mut args = vec!["write", "-n", "300", "-l", &list, "-p", &p, "--json"];
        args.push(json.to_str().unwrap());
        args.extend(extra);
        let out = finish(spawn(&args), "the run");
        assert!(out.status.success(), "{extra:?}: {}", text(&out));
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let cores = doc["results"][0]["per_core"].as_array().unwrap().clone();
        assert_eq!(cores.len(), 2, "{extra:?}");
        for core in cores {
            assert_eq!(core["cpu"], cpu, "{extra:?}: {core}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A client killed in the middle of its run (its Read Responses unread, so
/// Linux resets its connections) is not reported as done: the server says
/// how many connections were reset and exits 1. Before, its run ended once
/// the connections were gone and the server said "client done" with 0.
#[test]
fn a_client_killed_mid_run_is_not_done() {
    let _serial = serial();
    let p = port().to_string();
    let server = server(&["-p", &p]);
    let mut client = spawn(&[
        "read",
        "127.0.0.1",
        "-p",
        &p,
        "-s",
        "65536",
        "-q",
        "4",
        "-D",
        "30",
    ]);
    // Its connections are up and the run under way (set-up takes
    // milliseconds; the run, 30 s).
    std::thread::sleep(Duration::from_millis(1500));
    client.kill().expect("the client is killed");
    let _ = client.wait();
    let (ok, said) = server.finish();
    assert!(!ok, "the server exited 0: {said}");
    assert!(
        said.contains("reset or timed out") && !said.contains("client done"),
        "{said}"
    );
}

/// The same over DDP over SCTP: a killed client sends no ABORT, and over
/// UDP nothing tells its server it went, so its association ends only when
/// its HEARTBEATs go unanswered (a benchmark's come every half second, its
/// retransmissions wait at most half a second: about 10 s here, where RFC
/// 9260's defaults would have kept the server 6 to 7.5 minutes), and the
/// server says so and fails instead of calling the run done.
#[test]
fn an_sctp_client_killed_mid_run_is_not_done() {
    let _serial = serial();
    let p = port().to_string();
    let server = server(&["-p", &p, "--llp", "sctp"]);
    let mut client = spawn(&[
        "write",
        "127.0.0.1",
        "-p",
        &p,
        "--llp",
        "sctp",
        "-s",
        "4096",
        "-q",
        "2",
        "-D",
        "60",
    ]);
    // Its streams are up and the run under way (set-up takes
    // milliseconds; the run, a minute).
    std::thread::sleep(Duration::from_millis(2500));
    client.kill().expect("the client is killed");
    let _ = client.wait();
    let (ok, said) = server.finish();
    assert!(!ok, "the server exited 0: {said}");
    assert!(
        said.contains("timed out or broken") && !said.contains("client done"),
        "{said}"
    );
}
