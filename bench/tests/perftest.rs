//! `bench perftest` as two processes over kernel TCP on loopback: each of
//! perftest's six RC tests with dpwarp in both roles, messages of many
//! FPDUs, ib_write_lat's MPA fencing, runs that must fail (sizes that
//! disagree, no server, bad arguments); and the perftest exchanges Linux
//! siw's perftest sent in `tests/data/golden/ib_*.pcap`, read back with the
//! module's own `Dest`, `BwReport` and `version_number`.
//!
//! Every child is bounded in time and killed (by its PID) if it overstays.
#![allow(clippy::disallowed_methods)] // Child processes run on real time.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bench::perftest::{version_number, BwReport, Dest, DEST_LEN, PORT, VERSION};
use dpwarp_pcap::decode::{self, Body, Message};
use rnic_engine::wire::{ddp, rdmap};

mod common;
use common::{port, serial};

const BENCH: &str = env!("CARGO_BIN_EXE_bench");
/// The longest one process may run: `bench perftest` gives up on a silent
/// peer after 10 s (its stall limit), so a failing run ends well before.
const LIMIT: Duration = Duration::from_secs(30);

/// How a process ended.
#[derive(Debug)]
struct Run {
    /// Its exit status (None: killed by a signal).
    code: Option<i32>,
    stdout: String,
    stderr: String,
    /// From its start to its exit.
    took: Duration,
}

impl Run {
    /// The last line it printed on stdout.
    fn last_line(&self) -> &str {
        self.stdout.lines().last().unwrap_or_default()
    }

    fn said(&self) -> String {
        format!(
            "exit {:?} after {:?}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.took, self.stdout, self.stderr
        )
    }
}

/// Waits for `child` at most [`LIMIT`] from `start`, killing it (by its
/// PID) past that; `out` and `err` are where its output went.
fn wait(mut child: Child, start: Instant, what: &str, out: &Path, err: &Path) -> Run {
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let run = Run {
        code: status.and_then(|s| s.code()),
        stdout: std::fs::read_to_string(out).unwrap_or_default(),
        stderr: std::fs::read_to_string(err).unwrap_or_default(),
        took: start.elapsed(),
    };
    let _ = std::fs::remove_file(out);
    let _ = std::fs::remove_file(err);
    assert!(
        status.is_some(),
        "{what} ran past {LIMIT:?}: {}",
        run.said()
    );
    run
}

/// A process whose output goes to files (a pipe nobody reads could fill).
struct Proc {
    child: Option<Child>,
    start: Instant,
    out: PathBuf,
    err: PathBuf,
}

impl Proc {
    fn spawn(who: &str, args: &[&str]) -> Proc {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let base =
            std::env::temp_dir().join(format!("dpwarp-perftest-{}-{n}-{who}", std::process::id()));
        let out = base.with_extension("out");
        let err = base.with_extension("err");
        let child = Command::new(BENCH)
            .arg("perftest")
            .args(args)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .expect("bench runs");
        Proc {
            child: Some(child),
            start: Instant::now(),
            out,
            err,
        }
    }

    /// Waits for it to exit (at most [`LIMIT`] from its start).
    fn finish(mut self, what: &str) -> Run {
        let child = self.child.take().expect("running");
        wait(child, self.start, what, &self.out, &self.err)
    }
}

impl Drop for Proc {
    /// A test that failed before the process ended ends it (by its PID).
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_file(&self.out);
            let _ = std::fs::remove_file(&self.err);
        }
    }
}

/// Starts `bench perftest ARGS -p PORT --bind 127.0.0.1` and waits until it
/// says it listens.
fn server(args: &[&str], port: u16) -> Proc {
    let p = port.to_string();
    let mut all = args.to_vec();
    all.extend(["-p", &p, "--bind", "127.0.0.1"]);
    let mut server = Proc::spawn("server", &all);
    let listening = format!("bench perftest: listening on port {port}");
    loop {
        let out = std::fs::read_to_string(&server.out).unwrap_or_default();
        if out.lines().any(|l| l == listening) {
            return server;
        }
        let child = server.child.as_mut().expect("running");
        if child.try_wait().expect("wait").is_some() {
            let run = server.finish("the server");
            panic!("the server exited before it listened: {}", run.said());
        }
        assert!(
            server.start.elapsed() < LIMIT,
            "the server never listened: {out}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `bench perftest ARGS 127.0.0.1 -p PORT` to its end.
fn client(args: &[&str], port: u16) -> Run {
    let p = port.to_string();
    let mut all = args.to_vec();
    all.extend(["127.0.0.1", "-p", &p]);
    Proc::spawn("client", &all).finish("the client")
}

/// A server with `server_args` and a client with `client_args`, on a fresh
/// port: how each ended.
fn pair(server_args: &[&str], client_args: &[&str]) -> (Run, Run) {
    let port = port();
    let s = server(server_args, port);
    let c = client(client_args, port);
    let s = s.finish("the server");
    (s, c)
}

/// perftest's title line for a test name (with or without `ib_`).
fn title(test: &str) -> &'static str {
    match test.trim_start_matches("ib_") {
        "write_bw" => "RDMA_Write BW Test",
        "read_bw" => "RDMA_Read BW Test",
        "send_bw" => "Send BW Test",
        "write_lat" => "RDMA_Write Latency Test",
        "read_lat" => "RDMA_Read Latency Test",
        "send_lat" => "Send Latency Test",
        other => panic!("no test {other}"),
    }
}

/// The run went well: exit 0, the completed line as its last, and (where
/// the side prints one) a result row that names the size and count.
fn assert_completed(run: &Run, test: &str, role: &str, iters: u64, size: u64) {
    assert_eq!(run.code, Some(0), "{test} {role}: {}", run.said());
    // ib_read_lat's server only answers the client's Reads: it says so.
    let done = if role == "server" && test.ends_with("read_lat") {
        "served"
    } else {
        "completed"
    };
    assert_eq!(
        run.last_line(),
        format!(
            "bench perftest: {} {role}: {iters} iterations of {size} octets {done}",
            title(test)
        ),
        "{test} {role}: {}",
        run.said()
    );
    // perftest's result row follows its "#bytes" header: size and
    // iterations, then rates or times, none negative.
    let mut lines = run.stdout.lines();
    let row = lines
        .by_ref()
        .find(|l| l.trim_start().starts_with("#bytes"))
        .and_then(|_| lines.next());
    // read_lat's server measures nothing.
    let must_have_row = role == "client" || !test.ends_with("read_lat");
    let Some(row) = row else {
        assert!(
            !must_have_row,
            "{test} {role}: no result row: {}",
            run.said()
        );
        return;
    };
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert!(cols.len() >= 5, "{test} {role}: {row:?}");
    assert_eq!(cols[0], size.to_string(), "{test} {role}: {row:?}");
    assert_eq!(cols[1], iters.to_string(), "{test} {role}: {row:?}");
    for c in &cols[2..] {
        let v: f64 = c
            .parse()
            .unwrap_or_else(|_| panic!("{test} {role}: {row:?}"));
        assert!(v.is_finite() && v >= 0.0, "{test} {role}: {row:?}");
    }
    // The average bandwidth or typical latency is not zero.
    let key: f64 = cols[if test.ends_with("bw") { 3 } else { 4 }]
        .parse()
        .unwrap();
    assert!(key > 0.0, "{test} {role}: {row:?}");
}

/// Both sides of a run that went well.
fn assert_pair_completed(s: &Run, c: &Run, test: &str, iters: u64, size: u64) {
    assert_completed(c, test, "client", iters, size);
    assert_completed(s, test, "server", iters, size);
    assert_eq!(
        s.stdout
            .matches("bench perftest: listening on port")
            .count(),
        1,
        "{}",
        s.said()
    );
    assert!(
        s.stderr.is_empty() && c.stderr.is_empty(),
        "{}{}",
        s.said(),
        c.said()
    );
}

/// Each of the six tests, both roles dpwarp: small runs complete on both
/// sides. The write_lat client offers peer-to-peer (MPA v2 by default), so
/// the fenced server accepts it. Names with `ib_` work, on either side.
#[test]
fn every_test_completes_between_two_processes() {
    let _serial = serial();
    for (server_test, client_test, size) in [
        ("write_bw", "write_bw", 4096),
        ("read_bw", "read_bw", 4096),
        ("send_bw", "send_bw", 4096),
        ("write_lat", "write_lat", 64),
        ("ib_read_lat", "read_lat", 64),
        ("send_lat", "ib_send_lat", 64),
    ] {
        let size_s = size.to_string();
        let (s, c) = pair(
            &[server_test, "-n", "100", "-s", &size_s],
            &[client_test, "-n", "100", "-s", &size_s],
        );
        assert_pair_completed(&s, &c, client_test, 100, size);
    }
}

/// The result rows a side printed: (size, iterations) of each, the peer's
/// direction of a `-b` run left out.
fn rows(run: &Run) -> Vec<(u64, u64)> {
    let mut lines = run.stdout.lines();
    if !lines.any(|l| l.trim_start().starts_with("#bytes")) {
        return Vec::new();
    }
    lines
        .take_while(|l| !l.starts_with("---"))
        .filter(|l| !l.contains("the peer's direction") && !l.contains("from its report"))
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            let n = |i: usize| -> u64 {
                cols.get(i)
                    .and_then(|c| c.parse().ok())
                    .unwrap_or_else(|| panic!("a result row {l:?}: {}", run.said()))
            };
            (n(0), n(1))
        })
        .collect()
}

/// perftest's `-a`, `-q`, `-b` and `-D`, dpwarp in both roles, for each
/// test that takes them: every run completes on both sides, each says what
/// it ran, and the client prints a row per size with its iterations
/// (every QP's together, as perftest's report counts them; the
/// server of a one-way write_bw or read_bw prints the client's report of
/// its last size; read_lat's measures nothing).
#[test]
fn all_sizes_qps_both_ways_and_durations_complete() {
    let _serial = serial();
    let every = "every size from 2 to 8388608 octets";
    let all: Vec<u64> = (1..=23).map(|e| 1u64 << e).collect();
    for (args, last, client_rows, server_rows) in [
        (
            &["write_bw", "-a", "-n", "5"][..],
            format!("5 iterations of {every}"),
            all.iter().map(|&s| (s, 5)).collect::<Vec<_>>(),
            vec![(8388608, 5)],
        ),
        (
            &["read_bw", "-q", "4", "-n", "50", "-s", "4096"],
            "50 iterations of 4096 octets on each of 4 QPs".to_string(),
            vec![(4096, 200)],
            vec![(4096, 200)],
        ),
        (
            &[
                "send_bw", "-q", "3", "-b", "-n", "300", "-s", "1024", "-r", "16",
            ],
            "300 iterations of 1024 octets on each of 3 QPs".to_string(),
            vec![(1024, 900)],
            vec![(1024, 900)],
        ),
        (
            &["write_bw", "-b", "-a", "-q", "2", "-n", "5"],
            format!("5 iterations of {every} on each of 2 QPs"),
            all.iter().map(|&s| (s, 10)).collect(),
            all.iter().map(|&s| (s, 10)).collect(),
        ),
        (
            &["send_bw", "-a", "-n", "5"],
            format!("5 iterations of {every}"),
            all.iter().map(|&s| (s, 5)).collect(),
            all.iter().map(|&s| (s, 5)).collect(),
        ),
        (
            &["write_lat", "-a", "-n", "5"],
            format!("5 iterations of {every}"),
            all.iter().map(|&s| (s, 5)).collect(),
            all.iter().map(|&s| (s, 5)).collect(),
        ),
        (
            &["read_lat", "-a", "-n", "5"],
            format!("5 iterations of {every}"),
            all.iter().map(|&s| (s, 5)).collect(),
            vec![],
        ),
        (
            &["send_lat", "-a", "-n", "5"],
            format!("5 iterations of {every}"),
            all.iter().map(|&s| (s, 5)).collect(),
            all.iter().map(|&s| (s, 5)).collect(),
        ),
    ] {
        let (s, c) = pair(args, args);
        let test = args[0];
        for (run, role, want) in [(&c, "client", &client_rows), (&s, "server", &server_rows)] {
            assert_eq!(run.code, Some(0), "{args:?} {role}: {}", run.said());
            let done = if role == "server" && test == "read_lat" {
                "served"
            } else {
                "completed"
            };
            assert_eq!(
                run.last_line(),
                format!("bench perftest: {} {role}: {last} {done}", title(test)),
                "{args:?} {role}: {}",
                run.said()
            );
            assert_eq!(&rows(run), want, "{args:?} {role}: {}", run.said());
        }
        assert!(
            s.stderr.is_empty() && c.stderr.is_empty(),
            "{args:?}: {}{}",
            s.said(),
            c.said()
        );
    }
}

/// perftest's `-D`: each side runs for its seconds (no iteration count),
/// reports what it counted, and both end together.
#[test]
fn duration_runs_end_on_time_on_both_sides() {
    let _serial = serial();
    for args in [
        &["write_bw", "-D", "2", "-q", "2"][..],
        &["send_bw", "-D", "2", "-b"],
        &["send_lat", "-D", "2"],
        &["write_lat", "-D", "2"],
    ] {
        let (s, c) = pair(args, args);
        let test = args[0];
        for (run, role) in [(&c, "client"), (&s, "server")] {
            assert_eq!(run.code, Some(0), "{args:?} {role}: {}", run.said());
            assert!(
                run.last_line()
                    .starts_with(&format!("bench perftest: {} {role}: 2 s of ", title(test))),
                "{args:?} {role}: {}",
                run.said()
            );
            assert!(
                run.took >= Duration::from_secs(2) && run.took < LIMIT,
                "{args:?} {role}: {}",
                run.said()
            );
        }
        // The client counted messages: at least one, each a whole one.
        let r = rows(&c);
        assert_eq!(r.len(), 1, "{args:?}: {}", c.said());
        assert!(r[0].1 > 0, "{args:?}: {}", c.said());
    }
}

/// send_bw's credits: with 16 receives posted the client may run at most
/// 15 Sends ahead of the count the server writes back every 5 receives, so
/// 3000 Sends need hundreds of credit Writes, and the count wraps the
/// receive window many times. A wrong window or a lost credit shows as a
/// Terminate (no receive) or a stall.
#[test]
fn send_bw_runs_on_credits() {
    let _serial = serial();
    let args = ["send_bw", "-n", "3000", "-s", "1024", "-r", "16"];
    let (s, c) = pair(&args, &args);
    assert_pair_completed(&s, &c, "send_bw", 3000, 1024);
}

/// write_lat's poll byte wraps at 256 iterations.
#[test]
fn write_lat_wraps_its_poll_byte() {
    let _serial = serial();
    let args = ["write_lat", "-n", "700", "-s", "64"];
    let (s, c) = pair(&args, &args);
    assert_pair_completed(&s, &c, "write_lat", 700, 64);
}

/// 64 KiB messages are 46 FPDUs each at the default MTU of 1500.
#[test]
fn messages_of_many_fpdus_complete() {
    let _serial = serial();
    for test in ["send_bw", "read_bw"] {
        let args = [test, "-n", "50", "-s", "65536"];
        let (s, c) = pair(&args, &args);
        assert_pair_completed(&s, &c, test, 50, 65536);
    }
}

/// ib_write_lat's server writes first. Fenced (the default) it refuses a
/// client that can send no RTR (MPA v1 has no RFC 6581 peer-to-peer mode),
/// naming the rule and the way out; `--unfenced` serves it.
#[test]
fn write_lat_without_an_rtr_needs_an_unfenced_server() {
    let _serial = serial();
    let client_args = ["write_lat", "-n", "100", "-s", "64", "--mpa-rev", "1"];
    let (s, c) = pair(&["write_lat", "-n", "100", "-s", "64"], &client_args);
    assert_eq!(s.code, Some(1), "{}", s.said());
    assert!(
        s.stderr.contains("RFC 5044 §7.1") && s.stderr.contains("--unfenced"),
        "{}",
        s.said()
    );
    assert!(!s.stdout.contains("completed"), "{}", s.said());
    assert_eq!(c.code, Some(1), "{}", c.said());
    assert!(
        c.stderr.contains("rejected the connection") && c.stderr.contains("--unfenced"),
        "{}",
        c.said()
    );
    assert!(!c.stdout.contains("completed"), "{}", c.said());
    // A refusal is an answer: nobody waits out a stall limit.
    assert!(
        s.took < Duration::from_secs(5) && c.took < Duration::from_secs(5),
        "{}{}",
        s.said(),
        c.said()
    );

    let (s, c) = pair(
        &["write_lat", "-n", "100", "-s", "64", "--unfenced"],
        &client_args,
    );
    assert_pair_completed(&s, &c, "write_lat", 100, 64);
}

/// Sizes that disagree fail on both sides, in time, the receiver saying
/// what is wrong. A Send longer than the receive overflows it (the server's
/// receive completes in error); a shorter one arrives and is named.
#[test]
fn sizes_that_disagree_fail_on_both_sides() {
    let _serial = serial();
    // The client's 128-octet Sends into the server's 64-octet receives: the
    // server's DDP layer terminates (RFC 5041 §7.2: untagged buffer, code
    // 5, too long for the buffer), and the client hears why.
    mismatch(
        "64",
        "128",
        "a Send longer than our receives of 64 octets arrived",
        "the peer sent a Terminate: layer 1 type 2 code 0x05 (a Send longer than the receive",
    );
    // The client's 64-octet Sends into the server's 128-octet receives:
    // DDP is content, the test is not; the server hangs up.
    mismatch(
        "128",
        "64",
        "a Send of 64 octets arrived; the test's are 128",
        "the peer closed",
    );
}

/// send_lat with the server at `-s server` and the client at `-s client`:
/// both fail, the server saying `why` and to give the same -s, the client
/// saying `heard`.
fn mismatch(server: &str, client: &str, why: &str, heard: &str) {
    let (s, c) = pair(
        &["send_lat", "-n", "100", "-s", server],
        &["send_lat", "-n", "100", "-s", client],
    );
    assert_eq!(s.code, Some(1), "{}", s.said());
    assert!(
        s.stderr.contains(why) && s.stderr.contains("the same -s"),
        "{}",
        s.said()
    );
    assert_eq!(c.code, Some(1), "{}", c.said());
    assert!(c.stderr.contains(heard), "{}", c.said());
    for run in [&s, &c] {
        assert!(!run.stdout.contains("completed"), "{}", run.said());
    }
}

/// A client whose `-s` is larger than the server's writes past the
/// server's buffers: the server's session exposes only its own slot, under
/// an STag of its own, so the Write is refused by the server's DDP layer
/// (RFC 5041 §7.2: tagged buffer, base or bounds violation) and both sides
/// fail, in time, saying so. (This server's memory is its one slot; the
/// daemon's test `perftest_services_serve_clients_at_once` writes past a
/// slot with other memory behind it.)
#[test]
fn a_client_writing_past_the_servers_buffers_is_terminated() {
    let _serial = serial();
    let (s, c) = pair(
        &["write_bw", "-n", "20", "-s", "4096"],
        &["write_bw", "-n", "20", "-s", "1048576"],
    );
    for run in [&s, &c] {
        assert_eq!(run.code, Some(1), "{}", run.said());
        assert!(!run.stdout.contains("completed"), "{}", run.said());
    }
    assert!(
        c.stderr.contains("layer 1 type 1 code 0x01"),
        "the client hears the DDP base or bounds violation: {}",
        c.said()
    );
}

#[test]
fn a_client_with_no_server_fails_in_time_and_says_so() {
    let _serial = serial();
    let port = port();
    let c = client(&["send_bw", "-n", "100"], port);
    assert_eq!(c.code, Some(1), "{}", c.said());
    assert!(
        c.stderr.contains(&format!(
            "connecting the control connection to 127.0.0.1:{port} failed"
        )),
        "{}",
        c.said()
    );
    assert!(c.took < Duration::from_secs(15), "{}", c.said());
}

/// Bad arguments: exit 2 and what to fix, before any connection (each is
/// given a server with nobody there, so one that went on would fail fast
/// with exit 1 instead).
#[test]
fn bad_arguments_exit_2_and_say_why() {
    let _serial = serial();
    for (args, says) in [
        (&["write_bw", "-n", "4"][..], "-n 4: give at least 5"),
        (&["write_bw", "-s", "0"], "-s 0: give 1 to 8388608 octets"),
        (
            &["send_lat", "-s", "8388609"],
            "-s 8388609: give 1 to 8388608",
        ),
        (&["write_bw", "-o", "4"], "-o is for the Read tests"),
        (&["read_bw", "-r", "8"], "-r is for the Send tests"),
        (&["write_bw", "--mpa-rev", "3"], "--mpa-rev 3: give 1 or 2"),
        (&["atomic_bw"], "invalid value 'atomic_bw'"),
        // The transport named is the one given.
        (
            &["write_bw", "--transport", "memif"],
            "--transport memif needs --ip",
        ),
        (
            &["write_bw", "--transport", "memif", "--ip", "10.0.0.1"],
            "--ip 10.0.0.1: give ADDR/PREFIX",
        ),
        // -l is checked against the CPUs this process may use.
        (&["write_bw", "-l", "4000000000"], "-l 4000000000"),
        // A server's option on a client (`client` gives the server's
        // address), which it ignored.
        (&["write_lat", "--unfenced"], "--unfenced is the server's"),
    ] {
        let c = client(args, port());
        assert_eq!(c.code, Some(2), "{args:?}: {}", c.said());
        assert!(c.stderr.contains(says), "{args:?}: {}", c.said());
        assert!(!c.stdout.contains("listening"), "{args:?}: {}", c.said());
        assert!(c.took < Duration::from_secs(5), "{args:?}: {}", c.said());
    }
}

// ---------------------------------------------------------------------------
// Golden captures: Linux siw's perftest, read with the module's types.

/// One side's Sends on the control connection (their payloads), and the
/// data connection's FPDUs (DDP segments) with whether they went to the
/// server.
#[derive(Debug, Default)]
struct Capture {
    /// The client's control Sends, in order.
    client: Vec<Vec<u8>>,
    /// The server's control Sends, in order.
    server: Vec<Vec<u8>>,
    /// The data connection's FPDUs: (to the server, ULPDU).
    data: Vec<(bool, Vec<u8>)>,
    /// Every MPA frame: (control connection, to the server, IRD, ORD).
    mpa: Vec<(bool, bool, u16, u16)>,
}

/// Decodes `tests/data/golden/NAME.pcap`: it must decode without a
/// problem, every CRC good, on two iWARP connections to perftest's port.
fn golden(name: &str) -> Capture {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data/golden")
        .join(format!("{name}.pcap"));
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let (messages, summary, failure) =
        dpwarp_pcap::decode_capture(file, decode::Options::default());
    assert!(failure.is_none(), "{name}: {failure:?}");
    assert_eq!(summary.iwarp_connections, 2, "{name}: {summary:?}");
    assert_eq!(
        (summary.problems, summary.crc_bad),
        (0, 0),
        "{name}: {summary:?}"
    );
    assert_eq!(summary.crc_good, summary.fpdus, "{name}: {summary:?}");

    // The client's address names a connection; the control connection is
    // the one whose first Send is a version string.
    let client_of = |m: &Message| -> (SocketAddr, bool) {
        let to_server = m.dst.port() == PORT;
        assert!(to_server || m.src.port() == PORT, "{name}: {m:?}");
        (if to_server { m.src } else { m.dst }, to_server)
    };
    let mut control = None;
    let mut cap = Capture::default();
    let mut mpa = Vec::new();
    for m in &messages {
        let (conn, to_server) = client_of(m);
        match &m.body {
            Body::Mpa(f) => {
                let e = f.enhanced.expect("siw's perftest speaks MPA v2");
                mpa.push((conn, to_server, e.ird, e.ord));
            }
            Body::Fpdu(f) => {
                let segment = ddp::Packet::new_checked(&f.ulpdu[..]).expect("a DDP segment");
                let is_send = !segment.tagged()
                    && segment.qn() == 0
                    && rdmap::Control::from_octet(segment.rsvd_ulp()).opcode == rdmap::Opcode::Send;
                if control.is_none() && is_send && segment.payload().starts_with(VERSION.as_bytes())
                {
                    control = Some(conn);
                }
                if Some(conn) == control {
                    assert!(is_send, "{name}: the control connection carries only Sends");
                    let side = if to_server {
                        &mut cap.client
                    } else {
                        &mut cap.server
                    };
                    side.push(segment.payload().to_vec());
                } else {
                    cap.data.push((to_server, f.ulpdu.clone()));
                }
            }
            _ => {}
        }
    }
    let control = control.expect("a control connection");
    cap.mpa = mpa
        .into_iter()
        .map(|(conn, to_server, ird, ord)| (conn == control, to_server, ird, ord))
        .collect();
    cap
}

/// A 56-octet handshake, decoded; encoding it again gives the same octets,
/// except the 4 octets of padding after `rkey`, which we send as zeros and
/// perftest sends as whatever its stack held.
fn dest(o: &[u8]) -> Dest {
    assert_eq!(o.len(), DEST_LEN, "{o:?}");
    let d = Dest::decode(o).expect("a pingpong_dest");
    let mut unpadded = o.to_vec();
    unpadded[20..24].fill(0);
    assert_eq!(d.encode()[..], unpadded[..], "{d:?}");
    assert_eq!(Dest::decode(&d.encode()), Ok(d));
    d
}

/// What both sides send first (perftest's `ctx_xchg_data` order, as the
/// module docs give it), identical in siw's and our encoding; and the test's
/// handshakes, which must all carry the same `pingpong_dest` per side.
/// Returns (the client's, the server's).
fn preamble(name: &str, cap: &Capture, handshakes: usize, sends: usize) -> (Dest, Dest) {
    let mut version = [0u8; 16];
    version[..VERSION.len()].copy_from_slice(VERSION.as_bytes());
    let mut out = Vec::new();
    for side in [&cap.client, &cap.server] {
        assert_eq!(side.len(), sends, "{name}: {side:?}");
        assert_eq!(side[0], version, "{name}");
        assert_eq!(version_number(&side[0]), 6.06, "{name}");
        assert_eq!(side[1], 4096u32.to_be_bytes(), "{name}: the cycle buffer");
        assert_eq!(side[2], 64u32.to_be_bytes(), "{name}: the cache line");
        assert_eq!(side[3], b"3\0", "{name}: IB MTU 1024");
        // Before and after the data connection: `my_dest` still zero.
        for zero in &side[4..6] {
            assert_eq!(zero[..], Dest::default().encode()[..], "{name}");
            assert_eq!(dest(zero), Dest::default(), "{name}");
        }
        let mine = dest(&side[6]);
        let all = side
            .iter()
            .filter(|s| s.len() == DEST_LEN)
            .skip(2)
            .map(|s| dest(s))
            .collect::<Vec<_>>();
        assert_eq!(all.len(), handshakes, "{name}");
        assert!(all.iter().all(|d| *d == mine), "{name}: {all:?}");
        out.push(mine);
    }
    (out[0], out[1])
}

/// What perftest printed in the capture's `.txt` as the client's "local
/// address" and "remote address" (the server's): LID, QPN and PSN in hex,
/// the GID's octets in decimal. Returns (the client's, the server's) as
/// (lid, qpn, psn, gid).
fn printed(name: &str) -> [(u32, u32, u32, [u8; 16]); 2] {
    let txt = golden_txt(name);
    let mut lines = txt
        .lines()
        .skip_while(|l| !l.starts_with("----- client output"));
    let mut side = |which: &str| {
        let line = lines
            .by_ref()
            .find(|l| l.trim_start().starts_with(which))
            .unwrap_or_else(|| panic!("{name}: no {which}"));
        let words: Vec<&str> = line.split_whitespace().collect();
        let hex = |key: &str| {
            let i = words.iter().position(|w| *w == key).expect(key);
            u32::from_str_radix(words[i + 1].trim_start_matches("0x"), 16).expect(key)
        };
        let gid_line = lines.next().expect("a GID line");
        let octets: Vec<u8> = gid_line
            .trim()
            .trim_start_matches("GID:")
            .trim()
            .split(':')
            .map(|o| o.parse().expect("a decimal octet"))
            .collect();
        (
            hex("LID"),
            hex("QPN"),
            hex("PSN"),
            octets.try_into().expect("16 octets"),
        )
    };
    [side("local address:"), side("remote address:")]
}

/// The handshakes agree with what perftest printed of them.
fn assert_printed(name: &str, c: &Dest, s: &Dest) {
    let [pc, ps] = printed(name);
    assert_eq!((c.lid, c.qpn, c.psn, c.gid), pc, "{name}: the client's");
    assert_eq!((s.lid, s.qpn, s.psn, s.gid), ps, "{name}: the server's");
}

fn golden_txt(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data/golden")
        .join(format!("{name}.txt"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

/// The gid both of siw's hosts derive from their MAC (52:54:00:77:00:0X).
fn gid(host: u8) -> [u8; 16] {
    let mut g = [0; 16];
    g[..6].copy_from_slice(&[0x52, 0x54, 0x00, 0x77, 0x00, host]);
    g
}

/// The client's report (five 8-octet fields from its 11th Send on), as
/// perftest printed it in the capture's `.txt`.
fn report(name: &str, cap: &Capture) -> BwReport {
    let fields: [[u8; 8]; 5] =
        std::array::from_fn(|i| <[u8; 8]>::try_from(&cap.client[10 + i][..]).expect("8 octets"));
    let r = BwReport::from_fields(&fields);
    assert_eq!(r.fields(), fields, "{name}: the round trip is bit-exact");
    // The server's answers are 8 octets too (perftest's server sends a
    // report it never filled).
    assert!(cap.server[10..15].iter().all(|f| f.len() == 8), "{name}");
    let txt = golden_txt(name);
    let mut lines = txt
        .lines()
        .skip_while(|l| !l.starts_with("----- client output"));
    let row: Vec<&str> = lines
        .by_ref()
        .find(|l| l.trim_start().starts_with("#bytes"))
        .and_then(|_| lines.next())
        .expect("the client's result row")
        .split_whitespace()
        .collect();
    assert_eq!(
        row,
        [
            r.size.to_string(),
            r.iters.to_string(),
            format!("{:.2}", r.bw_peak),
            format!("{:.2}", r.bw_avg),
            format!("{:.6}", r.msg_rate),
        ],
        "{name}: {r:?}"
    );
    r
}

/// The data connection's tagged segments: (to the server, STag, TO).
fn tagged(cap: &Capture) -> Vec<(bool, u32, u64)> {
    cap.data
        .iter()
        .filter_map(|(to_server, u)| {
            let s = ddp::Packet::new_checked(&u[..]).unwrap();
            s.tagged()
                .then(|| (*to_server, s.stag(), s.tagged_offset()))
        })
        .collect()
}

/// The MPA frames: the control connection's IRD = ORD = 0 each way; the
/// data connection's `reads` each way.
fn assert_mpa(name: &str, cap: &Capture, reads: u16) {
    let mut expected = vec![
        (true, true, 0, 0),
        (true, false, 0, 0),
        (false, true, reads, reads),
        (false, false, reads, reads),
    ];
    let mut got = cap.mpa.clone();
    expected.sort();
    got.sort();
    assert_eq!(got, expected, "{name}");
}

/// ib_write_bw -n 5 -s 64: the handshakes as the module reads them, the
/// Writes go where the server's handshake says, and the client's report.
#[test]
fn golden_ib_write_bw_reads_bit_exactly() {
    let cap = golden("ib_write_bw");
    assert_mpa("ib_write_bw", &cap, 0);
    // 4 + 2 + 3 handshakes, one after the run, 5 report fields, the last.
    let (c, s) = preamble("ib_write_bw", &cap, 5, 16);
    assert_printed("ib_write_bw", &c, &s);
    assert_eq!(
        c,
        Dest {
            lid: 0,
            out_reads: 1,
            qpn: 2,
            psn: 0x0b_08df,
            rkey: 0x221c_7600,
            vaddr: 0x0000_5564_2b44_4000,
            gid: gid(3),
            srqn: 0,
            gid_index: 0,
        }
    );
    assert_eq!(
        s,
        Dest {
            lid: 0,
            out_reads: 1,
            qpn: 2,
            psn: 0xd9_6266,
            rkey: 0x8075_6600,
            vaddr: 0x0000_55ae_2388_4000,
            gid: gid(2),
            srqn: 0,
            gid_index: 0,
        }
    );
    // The last handshake's padding is not zero; it decodes the same.
    assert_ne!(cap.client[15][20..24], [0; 4]);
    // Five Writes into the server's buffer, a cache line apart.
    let writes = tagged(&cap);
    let expected: Vec<_> = (0..5).map(|i| (true, s.rkey, s.vaddr + 64 * i)).collect();
    assert_eq!(writes, expected);
    let r = report("ib_write_bw", &cap);
    assert_eq!((r.size, r.iters), (64, 5));
}

/// ib_read_bw -n 5 -s 64: 128 outstanding Reads in the handshakes and the
/// data connection's MPA; Read Requests for the server's buffer; the
/// client's report names 64 octets and 5 iterations.
#[test]
fn golden_ib_read_bw_reads_bit_exactly() {
    let cap = golden("ib_read_bw");
    assert_mpa("ib_read_bw", &cap, 128);
    let (c, s) = preamble("ib_read_bw", &cap, 5, 16);
    assert_printed("ib_read_bw", &c, &s);
    assert_eq!((c.out_reads, s.out_reads), (128, 128));
    assert_eq!((c.qpn, c.psn, c.rkey), (2, 0xac_b64c, 0x2e41_9c00));
    assert_eq!((s.qpn, s.psn, s.rkey), (2, 0xe8_ce33, 0x8928_fe00));
    assert_eq!(
        (c.vaddr, s.vaddr),
        (0x0000_555b_bebc_7000, 0x0000_55a7_4886_b000)
    );
    assert_eq!((c.gid, s.gid), (gid(3), gid(2)));
    // Each Read Request: the sink is the client's STag, the source the
    // server's buffer, a cache line apart.
    let requests: Vec<_> = cap
        .data
        .iter()
        .filter_map(|(to_server, u)| {
            let seg = ddp::Packet::new_checked(&u[..]).unwrap();
            let op = rdmap::Control::from_octet(seg.rsvd_ulp()).opcode;
            (!seg.tagged() && op == rdmap::Opcode::RdmaReadRequest).then(|| {
                assert!(*to_server);
                let rr = rdmap::ReadRequestPacket::new_checked(seg.payload()).unwrap();
                (
                    rr.sink_stag(),
                    rr.read_size(),
                    rr.source_stag(),
                    rr.source_to(),
                )
            })
        })
        .collect();
    let expected: Vec<_> = (0..5)
        .map(|i| (c.rkey, 64, s.rkey, s.vaddr + 64 * i))
        .collect();
    assert_eq!(requests, expected);
    let r = report("ib_read_bw", &cap);
    assert_eq!((r.size, r.iters), (64, 5));
    assert_eq!(cap.client[10], 64u64.to_be_bytes());
    assert_eq!(cap.client[11], 5u64.to_be_bytes());
}

/// ib_send_lat -n 5 -s 64: 3 handshakes, one before the run, one after;
/// 5 Sends of 64 octets each way on the data connection, the client's first.
#[test]
fn golden_ib_send_lat_reads_bit_exactly() {
    let cap = golden("ib_send_lat");
    assert_mpa("ib_send_lat", &cap, 0);
    let (c, s) = preamble("ib_send_lat", &cap, 5, 11);
    assert_printed("ib_send_lat", &c, &s);
    assert_eq!(
        (c.out_reads, c.qpn, c.psn, c.rkey),
        (1, 2, 0x1c_5f6c, 0x1aad_0000)
    );
    assert_eq!((s.out_reads, s.qpn, s.gid), (1, 2, gid(2)));
    let sends: Vec<_> = cap
        .data
        .iter()
        .map(|(to_server, u)| {
            let seg = ddp::Packet::new_checked(&u[..]).unwrap();
            assert!(!seg.tagged() && seg.qn() == 0);
            (*to_server, seg.payload().len())
        })
        .collect();
    let expected: Vec<_> = (0..10).map(|i| (i % 2 == 0, 64)).collect();
    assert_eq!(sends, expected);
}

/// ib_write_lat -n 5 -s 64: 4 handshakes and none after the run; the server
/// writes first, each side into the buffer the other's handshake names.
#[test]
fn golden_ib_write_lat_reads_bit_exactly() {
    let cap = golden("ib_write_lat");
    assert_mpa("ib_write_lat", &cap, 0);
    let (c, s) = preamble("ib_write_lat", &cap, 4, 10);
    assert_printed("ib_write_lat", &c, &s);
    assert_eq!((c.rkey, c.vaddr), (0xf46b_3100, 0x0000_55f2_9ee7_9000));
    assert_eq!((s.rkey, s.vaddr), (0x7788_3d00, 0x0000_5652_c407_6000));
    let writes = tagged(&cap);
    let expected: Vec<_> = (0..10)
        .map(|i| {
            if i % 2 == 0 {
                (false, c.rkey, c.vaddr)
            } else {
                (true, s.rkey, s.vaddr)
            }
        })
        .collect();
    assert_eq!(writes, expected);
}

/// What we send is what we read: every field lands where perftest's
/// `pingpong_dest` has it, big-endian, padding zero; reports likewise.
#[test]
fn dest_and_report_round_trip() {
    let d = Dest {
        lid: 0x0102_0304,
        out_reads: 0x0506_0708,
        qpn: 0x090a_0b0c,
        psn: 0x0d0e_0f10,
        rkey: 0x1112_1314,
        vaddr: 0x191a_1b1c_1d1e_1f20,
        gid: std::array::from_fn(|i| 0x21 + i as u8),
        srqn: 0x3132_3334,
        gid_index: 0x3536_3738,
    };
    let o = d.encode();
    let mut expected: Vec<u8> = (1..=0x14).collect();
    expected.extend([0; 4]);
    expected.extend(0x19..=0x38);
    assert_eq!(o[..], expected[..]);
    assert_eq!(Dest::decode(&o), Ok(d));
    assert!(Dest::decode(&o[..DEST_LEN - 1]).is_err());
    let mut long = o.to_vec();
    long.push(0);
    assert!(Dest::decode(&long).is_err());

    let r = BwReport {
        size: 65536,
        iters: 1000,
        bw_peak: 2023.73,
        bw_avg: 1999.5,
        msg_rate: 0.518076,
    };
    let f = r.fields();
    assert_eq!(f[0], 65536u64.to_be_bytes());
    assert_eq!(f[1], 1000u64.to_be_bytes());
    assert_eq!(f[2], 2023.73f64.to_bits().to_be_bytes());
    assert_eq!(BwReport::from_fields(&f), r);

    assert_eq!(version_number(b"6.06\0\0\0\0\0\0\0\0\0\0\0\0"), 6.06);
    assert_eq!(version_number(b"5.60"), 5.60);
}
