//! The benchmark's command line, its files read back, its JSON schema, and
//! a tiny run of every operation in both modes over the embedded rig.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use bench::args::{Args, Compare, LlpArg, TransportArg};
use bench::report::{self, Report};
use bench::rig::{self, BenchRig, RigConfig};
use bench::spec::{memory_for, Mode, Op, Spec, Stop};
use bench::workload;
use clap::Parser;

mod common;
use common::assert_refused;

const BENCH: &str = env!("CARGO_BIN_EXE_bench");

fn parse(line: &str) -> Result<Args, String> {
    Args::try_parse_from(line.split_whitespace()).map_err(|e| e.to_string())
}

#[test]
fn perftest_vocabulary_parses() {
    let a =
        parse("bench write -s 65536 -D 5 --compare kernel --json f.json --report_gbits").unwrap();
    let plan = a.plan().unwrap();
    assert_eq!(
        (plan.op, plan.mode, plan.sizes.clone()),
        (Op::Write, Mode::Bandwidth, vec![65536])
    );
    assert_eq!(plan.stop, Stop::Duration(Duration::from_secs(5)));
    assert_eq!(a.compare, [Compare::Transport(TransportArg::Kernel)]);
    assert!(a.report_gbits && a.json.is_some());
    let a = parse("bench write --transport memif --compare kernel,embedded").unwrap();
    assert_eq!(
        a.compare,
        [
            Compare::Transport(TransportArg::Kernel),
            Compare::Transport(TransportArg::Embedded)
        ]
    );
    assert!(a.plan().is_ok());
    let a = parse("bench write -s 64 -D 5 --lat --compare kernel --json f.json").unwrap();
    assert_eq!(a.plan().unwrap().mode, Mode::Latency);
    let a = parse("bench read -a -n 10 -q 4 -t 32 --no-crc --markers -p 2000").unwrap();
    let plan = a.plan().unwrap();
    assert_eq!(plan.sizes.first(), Some(&2));
    assert_eq!(plan.sizes.last(), Some(&(8 << 20)));
    assert_eq!(plan.sizes.len(), 23);
    assert_eq!(
        (a.qps, a.depth, a.no_crc, a.markers, a.port),
        (4, 32, true, true, 2000)
    );
    // Defaults as perftest's: 65536 for bandwidth, 2 for latency; atomics 8.
    assert_eq!(parse("bench send").unwrap().plan().unwrap().sizes, [65536]);
    assert_eq!(
        parse("bench send --lat").unwrap().plan().unwrap().sizes,
        [2]
    );
    assert_eq!(
        parse("bench fetch_add --lat")
            .unwrap()
            .plan()
            .unwrap()
            .sizes,
        [8]
    );
    for op in Op::ALL.map(Op::name) {
        assert!(parse(&format!("bench {op}")).is_ok(), "{op}");
    }
}

#[test]
fn bad_arguments_say_what_to_fix() {
    let bad = [
        ("bench write -s 0", "-s 0"),
        ("bench write -s 9999999999", "sizes go from 1"),
        ("bench write -n 0", "-n 0"),
        ("bench write -D 0", "-D 0"),
        ("bench write -D 99999", "-D 99999"),
        ("bench write -q 0", "-q 0"),
        ("bench write -t 100000", "-t 100000"),
        ("bench write --lat -q 2", "one queue pair"),
        ("bench fetch_add -s 64", "moves 8 octets"),
        ("bench write -a -s 64", "drop -s"),
        ("bench write --compare embedded", "--compare"),
        ("bench write --compare kernel,kernel", "twice"),
        ("bench write --mtu 100", "--mtu 100"),
        ("bench write --lat -s 1", "-s 2"),
        ("bench write 10.0.0.1 --transport tap", "use kernel, memif"),
        (
            "bench write --server --transport embedded",
            "use kernel, memif",
        ),
        ("bench write --server --transport memif", "needs --ip"),
        ("bench write --transport pci", "give a HOST"),
        (
            "bench write --transport af_packet --iface eth1",
            "drop --iface",
        ),
        (
            "bench write --transport net_tap --netns ns0",
            "drop --netns",
        ),
        ("bench write --transport tap --ip 10.0.0.2/24", "drop --ip"),
        ("bench write --transport memif -l 0,99", "CPU 99"),
        ("bench write --transport memif -l x", "-l x"),
        ("bench write --transport kernel --rx-buffered", "drop it"),
        ("bench write --llp sctp --rx-buffered", "drop it"),
        // Found by a review: the sum overflowed (a panic), and the kernel
        // run listened on port 1.
        (
            "bench write --lat --active 18446744073709551615",
            "QPs in all",
        ),
        (
            "bench write --lat --idle 18446744073709551615",
            "QPs in all",
        ),
        ("bench write -p 65535 --compare kernel", "-p 65534 or less"),
        (
            "bench write -p 65535 --transport kernel",
            "-p 65534 or less",
        ),
    ];
    for (line, want) in bad {
        let err = match parse(line) {
            Ok(args) => args.plan().expect_err(line),
            Err(e) => e,
        };
        assert!(err.contains(want), "{line}: {err}");
        assert!(
            !err.contains('\n') || err.starts_with("error:"),
            "{line}: one line: {err}"
        );
    }
    // clap's own errors: an unknown operation, -n with -D.
    assert!(parse("bench frobnicate")
        .unwrap_err()
        .contains("frobnicate"));
    assert!(parse("bench write -n 5 -D 5").is_err());
    // A server has no HOST and no baseline of its own.
    assert!(parse("bench write --server 10.0.0.1").is_err());
    assert!(parse("bench write --server --compare kernel").is_err());
}

/// Options that used to be taken and then ignored, misread, or acted on
/// too late (filling memory, panicking, starting DPDK first) are refused
/// by the binary before anything starts: exit 2, one line naming the
/// option, no panic. Each run is held to 4 GB of address space.
#[test]
fn bad_options_are_refused_before_anything_starts() {
    let cpu = dataplane::lcore::cpus()
        .first()
        .copied()
        .unwrap_or(0)
        .to_string();
    let twice = format!("{cpu},{cpu}");
    let refused = |args: &[&str], says: &[&str]| assert_refused(BENCH, args, says);
    // A huge -l range is checked before it is expanded.
    refused(
        &["write", "-l", "0-4000000000", "-n", "10"],
        &["-l 0-4000000000"],
    );
    // A backwards range is not an empty list.
    refused(
        &["write", "-l", "1-0", "-n", "10"],
        &["-l 1-0", "backwards"],
    );
    // Two pollers on one CPU.
    refused(&["write", "-l", &twice, "-n", "10"], &["-l", "twice"]);
    // Memory for -q x -s is bounded, for a run and for a server.
    refused(
        &[
            "write", "-s", "8388608", "-q", "1024", "-t", "64", "-n", "10",
        ],
        &["-q 1024", "-s 8388608"],
    );
    refused(
        &["--server", "-a", "-q", "1024", "-t", "64"],
        &["-q 1024", "-a"],
    );
    // Core counts each once, rising (found by a review: 2,1 printed the
    // inverse of the scaling, 1,1 ran one core twice).
    refused(
        &["write", "--cores", "2,1", "-q", "2"],
        &["--cores 2,1", "rising"],
    );
    refused(
        &["write", "--cores", "1,1", "-q", "2"],
        &["--cores 1,1", "rising"],
    );
    // A flood past a core's connections, which used to panic.
    refused(
        &[
            "write",
            "--cores",
            "2",
            "-q",
            "2",
            "-D",
            "1",
            "--flood",
            "18446744073709551615",
        ],
        &["--flood 18446744073709551615"],
    );
    // Too much in flight names -q and -t, not an --active that was not given.
    let r = common::run_refused(BENCH, &["write", "-q", "1024", "-n", "10"]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("-q 1024 x -t 128"), "{}", r.stderr);
    assert!(!r.stderr.contains("--active"), "{}", r.stderr);
    // A duration too short to complete a message.
    refused(&["write", "-D", "0.0000001"], &["-D 0.0000001", "0.01"]);
    // Where the results go, checked before the run, not after it (found by
    // a review: a -D 3600 sweep ran and then failed on its --json).
    refused(
        &[
            "write",
            "-D",
            "3600",
            "--json",
            "/nonexistent/dpwarp/r.json",
        ],
        &["--json /nonexistent/dpwarp/r.json", "give a file to write"],
    );
    refused(
        &["port", "-D", "60", "--json", "/nonexistent/dpwarp/p.json"],
        &["--json /nonexistent/dpwarp/p.json", "give a file to write"],
    );
    // -D 0 is refused, and the message does not offer it.
    let r = common::run_refused(BENCH, &["port", "-D", "0"]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(
        r.stderr.contains("-D 0") && !r.stderr.contains("give 0"),
        "{}",
        r.stderr
    );
    refused(
        &["write", "--lat", "-D", "3600", "--out", "/proc/dpwarp-nope"],
        &["--out /proc/dpwarp-nope", "give a directory to write"],
    );
    // A directory that exists but takes no files (found by a review: the
    // run's files and its JSON report were lost at the end).
    refused(
        &["write", "--lat", "-D", "3600", "--out", "/proc"],
        &["--out /proc", "give a directory to write"],
    );
    // A lossy run against a lossless baseline.
    refused(
        &["write", "--loss", "1", "--compare", "sctp"],
        &["--loss", "--compare"],
    );
    // pci as a baseline (it joins this host to another).
    refused(
        &["write", "--compare", "pci", "-n", "10"],
        &["--compare pci"],
    );
    // MPA's options where no run is MPA's.
    refused(&["write", "--llp", "sctp", "--markers"], &["--markers"]);
    refused(&["write", "--llp", "sctp", "--no-crc"], &["--no-crc"]);
    // --rx-buffered over kernel TCP, the default of a HOST client and a
    // server; said without a run of spaces.
    refused(&["write", "127.0.0.1", "--rx-buffered"], &["--rx-buffered"]);
    let r = common::run_refused(BENCH, &["--server", "--rx-buffered"]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("--rx-buffered"), "{}", r.stderr);
    assert!(!r.stderr.contains("  "), "a run of spaces: {:?}", r.stderr);
    // Link options the transport would ignore.
    refused(&["--server", "--ip", "10.0.0.1/24"], &["--ip", "kernel"]);
    // DPDK's memory with no run on a DPDK port; software checksums where
    // the kernel or the TAP device computes them.
    refused(
        &["write", "--hugepages", "on", "-n", "10"],
        &["--hugepages"],
    );
    refused(
        &[
            "write",
            "--transport",
            "kernel",
            "--hugepages",
            "off",
            "-n",
            "10",
        ],
        &["--hugepages"],
    );
    refused(
        &["write", "127.0.0.1", "--hugepages", "on"],
        &["--hugepages"],
    );
    refused(
        &[
            "write",
            "--transport",
            "kernel",
            "--sw-checksums",
            "-n",
            "10",
        ],
        &["--sw-checksums"],
    );
    refused(
        &["write", "--transport", "tap", "--sw-checksums", "-n", "10"],
        &["--sw-checksums"],
    );
    refused(&["--server", "--sw-checksums"], &["--sw-checksums"]);
    refused(&["write", "127.0.0.1", "--pci", "0000:01:00.0"], &["--pci"]);
    refused(
        &["write", "127.0.0.1", "--memif-socket", "/run/dpwarp/x.sock"],
        &["--memif-socket"],
    );
    refused(
        &[
            "write",
            "--transport",
            "memif",
            "--memif-socket",
            "/run/dpwarp/x.sock",
        ],
        &["--memif-socket"],
    );
    refused(
        &[
            "--server",
            "--transport",
            "memif",
            "--ip",
            "10.0.0.1/24",
            "--iface",
            "eth1",
        ],
        &["--iface", "memif"],
    );
    // A client's options that a server would ignore.
    for option in [
        &["--json", "x.json"][..],
        &["--out", "elsewhere"],
        &["-D", "1"],
        &["-n", "10"],
        &["--tos", "184"],
        &["--urgent"],
    ] {
        let mut args = vec!["--server"];
        args.extend_from_slice(option);
        refused(&args, &[option[0], "client"]);
    }
    // --ip is checked before DPDK starts.
    refused(
        &["--server", "--transport", "memif", "--ip", "10.0.0.1/33"],
        &["--ip 10.0.0.1/33"],
    );
    refused(
        &[
            "write",
            "127.0.0.1",
            "--transport",
            "memif",
            "--ip",
            "10.0.0.1",
        ],
        &["--ip 10.0.0.1"],
    );
    // A flood needs a count of two cores or more.
    refused(
        &[
            "write", "--cores", "1", "-q", "2", "-D", "1", "--flood", "10",
        ],
        &["--flood", "--cores"],
    );
    // A client of another host is told so first, not sent to --cores
    // (which it would then be refused with).
    refused(
        &[
            "write",
            "127.0.0.1",
            "--cores",
            "1",
            "-D",
            "1",
            "--flood",
            "5",
        ],
        &["--flood", "HOST"],
    );
    // Atomics move 8 octets: no -a.
    refused(&["fetch_add", "-a", "-n", "10"], &["-a", "fetch_add"]);
}

/// What the refusals above leave alone: the same options where they are
/// used.
#[test]
fn options_are_taken_where_they_are_used() {
    for ok in [
        "bench write -D 0.01",
        "bench write --llp sctp --compare mpa --markers --no-crc",
        "bench write --server --transport memif --ip 10.0.0.2/24 --memif-socket /run/x.sock",
        "bench write --server --transport net_tap --ip 10.0.0.2/24 --tap t0 --netns n0 --bridge b0",
        "bench write 10.0.0.1 --transport af_packet --iface v0 --netns n0 --ip 10.0.0.1/24",
        "bench write --server -q 1024 -t 64",
        "bench write --server --lat --active 7",
        "bench write -s 65536 -q 1024 -t 64 -n 10",
        "bench write --transport memif --rx-buffered",
        "bench write 10.0.0.1 --transport memif --ip 10.0.0.1/24 --rx-buffered",
        "bench write --loss 1",
        "bench write --sw-checksums",
        "bench write --transport kernel --compare embedded --sw-checksums",
        "bench write --transport memif --hugepages off --sw-checksums",
        "bench write --compare ring --hugepages on",
        "bench write --server --transport memif --ip 10.0.0.2/24 --hugepages off",
        "bench write --hugepages auto",
    ] {
        let plan = parse(ok).and_then(|a| a.plan());
        assert!(plan.is_ok(), "{ok}: {plan:?}");
    }
}

#[test]
fn roles_follow_perftest() {
    use bench::args::Role;
    let role = |line: &str| parse(line).unwrap().plan().unwrap().role;
    assert_eq!(role("bench write"), Role::Local(TransportArg::Embedded));
    assert_eq!(
        role("bench write --transport tap"),
        Role::Local(TransportArg::Tap)
    );
    assert_eq!(role("bench read --server -p 7000"), Role::Server);
    assert_eq!(
        role("bench read server.example -p 7000 --transport kernel"),
        Role::Client("server.example".into())
    );
    // A client may still compare against an in-process baseline.
    assert_eq!(
        role("bench write 127.0.0.1 --compare embedded"),
        Role::Client("127.0.0.1".into())
    );
}

fn config(memory: usize) -> RigConfig {
    common::rig_config(memory)
}

fn spec(op: Op, mode: Mode, size: usize, qps: usize) -> Spec {
    Spec {
        op,
        mode,
        size,
        stop: Stop::Iterations(200),
        depth: 16,
        qps,
        urgent: false,
        dscp: 0,
    }
}

fn tiny(op: Op, mode: Mode) -> Report {
    let size = if op.is_atomic() { 8 } else { 1024 };
    let mut rig = rig::embedded(&config(memory_for(1, size))).unwrap();
    let spec = spec(op, mode, size, 1);
    let measured =
        workload::run(&mut rig, &spec, true, &AtomicBool::new(false), &mut |_| {}).unwrap();
    Report {
        op,
        mode,
        size,
        transport: "embedded",
        llp: "mpa",
        cores: rig.cores(),
        per_core: rig.core_reports(),
        measured,
    }
}

/// `--rx-buffered`: the cores read every received octet from TCP's buffer;
/// by default the server's engine takes the Writes straight from the
/// frames. Either way every Write completes.
#[test]
fn rx_buffered_reads_every_octet_from_tcps_buffer() {
    assert!(!parse("bench write").unwrap().rx_buffered);
    assert!(parse("bench write --rx-buffered --transport memif")
        .unwrap()
        .plan()
        .is_ok());
    for direct in [true, false] {
        let mut c = config(memory_for(1, 65536));
        c.direct_receive = direct;
        let mut rig = rig::embedded(&c).unwrap();
        let s = spec(Op::Write, Mode::Bandwidth, 65536, 1);
        let m = workload::run(&mut rig, &s, true, &AtomicBool::new(false), &mut |_| {}).unwrap();
        assert_eq!(m.messages, 200);
        let server = rig
            .core_reports()
            .into_iter()
            .find(|r| r.role == "server")
            .unwrap();
        let k = server.counters;
        assert!(k.rx_fpdu_octets >= 200 * 65536, "{k:?}");
        if direct {
            assert!(k.rx_direct_octets * 10 >= k.rx_fpdu_octets * 9, "{k:?}");
        } else {
            assert_eq!(k.rx_direct_octets, 0);
        }
    }
}

/// `--llp sctp`: DDP over SCTP (RFC 5043), the same workloads and server.
#[test]
fn the_sctp_lower_layer_parses_and_is_checked() {
    let a = parse("bench write -s 65536 -D 5 --llp sctp --compare mpa --json f.json").unwrap();
    assert_eq!(a.llp, LlpArg::Sctp);
    assert_eq!(a.compare, [Compare::Llp(LlpArg::Mpa)]);
    assert!(a.plan().is_ok());
    let a = parse("bench write --llp sctp --transport kernel --compare embedded").unwrap();
    assert!(a.plan().is_ok());
    let a = parse("bench write --compare sctp").unwrap();
    assert_eq!(a.compare, [Compare::Llp(LlpArg::Sctp)]);
    assert!(a.plan().is_ok());
    let why = |line: &str| parse(line).unwrap().plan().unwrap_err();
    assert!(why("bench write --llp sctp --compare sctp").contains("already measured"));
    for ok in [
        "bench write --llp sctp --transport memif",
        "bench write --llp sctp --transport net_tap",
        "bench write --llp sctp --transport tap --compare mpa",
        "bench write --compare sctp --transport af_packet",
    ] {
        assert!(parse(ok).unwrap().plan().is_ok(), "{ok}");
    }
    // Between two processes: each over Linux UDP or a DPDK port; no
    // baselines.
    for ok in [
        "bench write --llp sctp --server",
        "bench write --llp sctp --server --transport memif --ip 10.0.0.2/24",
        "bench write --llp sctp --server --transport net_tap --ip 10.0.0.2/24",
    ] {
        assert!(parse(ok).unwrap().plan().is_ok(), "{ok}");
    }
    for ok in [
        "bench write 10.0.0.1 --llp sctp --transport kernel",
        "bench write 10.0.0.1 --llp sctp --transport memif --ip 10.0.0.2/24",
        "bench write 10.0.0.1 --llp sctp --transport net_tap --ip 10.0.0.2/24",
        "bench write 10.0.0.1 --llp sctp --transport af_packet --iface v0 --ip 10.0.0.2/24",
        "bench write 10.0.0.1 --llp sctp --transport pci --pci 0000:01:00.0 --ip 10.0.0.2/24",
    ] {
        assert!(parse(ok).unwrap().plan().is_ok(), "{ok}");
    }
    // On several cores: both ends of each core's association in this
    // process, each core's association to a HOST, or a server's cores (a
    // CPU's worth here, so that a one-CPU host parses it too).
    for ok in [
        "bench write -q 2 --llp sctp --cores 1",
        "bench write -q 2 --llp sctp --cores 1 --transport memif",
        "bench write -q 2 --llp sctp --cores 1 --transport ring",
        "bench write --llp sctp --server --cores 1",
        "bench write --llp sctp --server --cores 1 --transport memif --ip 10.0.0.2/24",
    ] {
        assert!(parse(ok).unwrap().plan().is_ok(), "{ok}");
    }
    for ok in [
        "bench write 10.0.0.1 -q 2 --llp sctp --cores 1",
        "bench write 10.0.0.1 -q 2 --llp sctp --cores 1 --transport memif --ip 10.0.0.2/24",
    ] {
        assert!(parse(ok).unwrap().plan().is_ok(), "{ok}");
    }
    assert!(why("bench write --llp sctp --cores 1 --transport kernel").contains("in this process"));
    assert!(why("bench write --llp sctp --cores 1 -D 1 --flood 10").contains("MPA startups"));
    assert!(why("bench write --llp sctp --server --transport tap").contains("memif, net_tap"));
    assert!(why("bench write 10.0.0.1 --llp sctp --transport tap").contains("memif, net_tap"));
    assert!(why("bench write 10.0.0.1 --llp sctp --compare mpa").contains("in this process"));
    assert!(parse("bench write --compare udp").is_err());
}

/// Every operation in both modes over DDP over SCTP, on the embedded link
/// and on kernel UDP: the counts exact, one latency per message.
#[test]
fn every_operation_runs_over_sctp_in_both_modes() {
    for kernel in [false, true] {
        for op in Op::ALL {
            for mode in [Mode::Bandwidth, Mode::Latency] {
                let size = if op.is_atomic() { 8 } else { 1024 };
                let c = config(memory_for(2, size));
                let s = spec(op, mode, size, if mode == Mode::Latency { 1 } else { 2 });
                let stop = AtomicBool::new(false);
                let m = if kernel {
                    let mut rig = bench::sctp::kernel(&c).unwrap();
                    workload::run(&mut rig, &s, true, &stop, &mut |_| {})
                } else {
                    let mut rig = bench::sctp::embedded(&c).unwrap();
                    let m = workload::run(&mut rig, &s, true, &stop, &mut |_| {});
                    let reports = rig.core_reports();
                    assert_eq!(reports.len(), 2);
                    assert!(reports[0].counters.tx_fpdu_octets > 0, "{op:?} {mode:?}");
                    m
                }
                .unwrap_or_else(|e| panic!("{op:?} {mode:?} kernel {kernel}: {e}"));
                assert_eq!(m.messages, 200, "{op:?} {mode:?}");
                assert_eq!(m.latency.len(), 200, "{op:?} {mode:?}");
                assert!(!m.interrupted);
            }
        }
    }
}

/// Sizes in a row over SCTP: each size's DDP streams are closed on both
/// sides before the next opens new ones on the same association.
#[test]
fn sctp_sizes_in_a_row_use_fresh_streams() {
    let mut rig = bench::sctp::embedded(&config(memory_for(3, 8192))).unwrap();
    for (i, size) in [4096, 2, 8192].into_iter().enumerate() {
        for op in [Op::Send, Op::Write, Op::Read] {
            let s = spec(op, Mode::Bandwidth, size, 3);
            let m = workload::run(&mut rig, &s, i == 2, &AtomicBool::new(false), &mut |_| {})
                .unwrap_or_else(|e| panic!("{op:?} {size} B: {e}"));
            assert_eq!(m.messages, 200, "{op:?} {size} B");
        }
    }
}

/// Streams are not reused within an association: workloads whose streams
/// would run past the association's last go on a new association.
#[test]
fn sctp_workloads_past_the_streams_take_a_new_association() {
    let mut rig = bench::sctp::embedded(&config(memory_for(400, 64))).unwrap();
    for round in 0..3 {
        let s = spec(Op::Write, Mode::Bandwidth, 64, 400);
        let m = workload::run(
            &mut rig,
            &s,
            round == 2,
            &AtomicBool::new(false),
            &mut |_| {},
        )
        .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_eq!(m.messages, 200, "round {round}");
    }
    let reports = rig.core_reports();
    assert_eq!(
        reports[0].counters.established, 1200,
        "streams up at the client"
    );
}

#[test]
fn every_operation_runs_in_both_modes() {
    for op in Op::ALL {
        for mode in [Mode::Bandwidth, Mode::Latency] {
            let r = tiny(op, mode);
            let m = &r.measured;
            assert_eq!(m.messages, 200, "{op:?} {mode:?}");
            assert_eq!(m.octets, 200 * r.size as u64);
            assert!(!m.interrupted);
            assert_eq!(
                m.latency.len(),
                200,
                "{op:?} {mode:?}: one latency per message"
            );
            assert!(r.gbit_s() > 0.0 && r.msgs_s() > 0.0);
            assert!(m.latency.min() > 0);
        }
    }
}

/// Every size of a sweep gets fresh connections on the same RNICs: what one
/// size leaves (receives posted for its size, flushed completions, the
/// octets Write latency watches) must not reach the next.
#[test]
fn sizes_in_a_row_share_nothing_but_the_rnics() {
    for op in [Op::Send, Op::WriteImm, Op::Write, Op::Read] {
        for mode in [Mode::Bandwidth, Mode::Latency] {
            let sizes = [4096, 2, 64, 8192, 2];
            let mut rig = rig::embedded(&config(memory_for(3, 8192))).unwrap();
            for (i, &size) in sizes.iter().enumerate() {
                let qps = if mode == Mode::Latency { 1 } else { 3 };
                let s = spec(op, mode, size, qps);
                let last = i + 1 == sizes.len();
                let m = workload::run(&mut rig, &s, last, &AtomicBool::new(false), &mut |_| {})
                    .unwrap_or_else(|e| panic!("{op:?} {mode:?} {size} B: {e}"));
                assert_eq!(m.messages, 200, "{op:?} {mode:?} {size} B");
                assert_eq!(rig.client.open_connections(), 0, "closed after each size");
            }
            let server = rig.local_server().unwrap();
            assert_eq!(
                server.served,
                (sizes.len() * if mode == Mode::Latency { 1 } else { 3 }) as u64
            );
            assert!(server.client_done, "the last size's connections said so");
        }
    }
}

/// A workload too big for the memory is refused before anything is sent
/// (a server too small refuses it in MPA: tests/processes.rs).
#[test]
fn a_workload_that_does_not_fit_is_refused_and_says_why() {
    let mut rig = rig::embedded(&config(memory_for(1, 4096))).unwrap();
    let err = workload::run(
        &mut rig,
        &spec(Op::Write, Mode::Bandwidth, 65536, 1),
        true,
        &AtomicBool::new(false),
        &mut |_| {},
    )
    .map(|_| ())
    .unwrap_err();
    assert!(
        err.contains("need") && err.contains("octets of memory"),
        "{err}"
    );
    // The rig is still good for what fits.
    let m = workload::run(
        &mut rig,
        &spec(Op::Write, Mode::Bandwidth, 4096, 1),
        true,
        &AtomicBool::new(false),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(m.messages, 200);
}

#[test]
fn the_bench_hello_round_trips_and_refuses_garbage() {
    use bench::hello::{decode_reject, encode_reject, ClientHello, ServerHello, CLIENT_LEN};
    let h = ClientHello {
        op: Op::CmpSwap,
        mode: Mode::Latency,
        size: 0x0102_0304,
        depth: 0x0506,
        qi: 7,
        qps: 9,
        last: true,
        urgent: true,
        stag: 0xdead_beef,
        to: 0x1122_3344_5566_7788,
        run: 0x0102_0304_0506_0708,
    };
    let octets = h.encode();
    assert_eq!(octets.len(), CLIENT_LEN);
    assert_eq!(ClientHello::decode(&octets), Ok(h));
    // Every field lands where the layout says (big-endian).
    assert_eq!(&octets[..4], b"DPWB");
    // The flags: the last size (bit 0), an urgent QP (bit 1).
    assert_eq!(octets[7], 0b11);
    let plain = ClientHello {
        last: false,
        urgent: false,
        ..h
    };
    assert_eq!(plain.encode()[7], 0);
    assert_eq!(ClientHello::decode(&plain.encode()), Ok(plain));
    assert_eq!(&octets[8..12], &[1, 2, 3, 4]);
    assert_eq!(&octets[18..22], &[0xde, 0xad, 0xbe, 0xef]);
    assert_eq!(&octets[22..30], &0x1122_3344_5566_7788u64.to_be_bytes());
    assert_eq!(&octets[30..38], &[1, 2, 3, 4, 5, 6, 7, 8]);
    let s = ServerHello {
        stag: 5,
        to: u64::MAX,
    };
    assert_eq!(ServerHello::decode(&s.encode()), Ok(s));
    for bad in [&b""[..], b"DPWB", &octets[..CLIENT_LEN - 1], &[0u8; 40]] {
        assert!(ClientHello::decode(bad).is_err());
    }
    let mut wrong_version = octets.clone();
    wrong_version[4] = 9;
    assert!(ClientHello::decode(&wrong_version)
        .unwrap_err()
        .contains("version 9"));
    // A workload that fits; the same with a TO near 2^64 decodes, and the
    // server refuses it (no overflow); other malformed ones likewise.
    let fits = ClientHello {
        size: 64,
        qi: 0,
        qps: 1,
        depth: 16,
        ..h
    };
    assert_eq!(bench::responder::check_fits(&fits, 1 << 20), Ok(()));
    let wraps = ClientHello {
        to: u64::MAX - 10,
        ..fits
    };
    assert_eq!(ClientHello::decode(&wraps.encode()), Ok(wraps));
    let why = bench::responder::check_fits(&wraps, 1 << 20).unwrap_err();
    assert!(why.contains("wrap"), "{why}");
    let why = bench::responder::check_fits(
        &ClientHello {
            size: 1 << 20,
            ..fits
        },
        1 << 20,
    )
    .unwrap_err();
    assert!(why.contains("server memory"), "{why}");
    for bad in [
        ClientHello { qi: 1, ..fits },
        ClientHello { depth: 0, ..fits },
        ClientHello { depth: 513, ..fits },
        ClientHello { size: 0, ..fits },
    ] {
        assert!(
            bench::responder::check_fits(&bad, 1 << 20).is_err(),
            "{bad:?}"
        );
    }
    let mut wrong_op = octets.clone();
    wrong_op[5] = 6;
    assert!(ClientHello::decode(&wrong_op).is_err());
    assert_eq!(decode_reject(&encode_reject("too big")), "too big");
    // A reason longer than private data allows is cut, on a character.
    let long = "é".repeat(400);
    assert!(encode_reject(&long).len() <= 500);
    assert!(decode_reject(b"nope").contains("not a bench server"));
}

#[test]
fn the_histogram_files_read_back() {
    let r = tiny(Op::Write, Mode::Latency);
    let h = &r.measured.latency;
    let rows = report::parse_hgrm(&report::hgrm(h)).unwrap();
    assert!(rows.len() > 10);
    // Percentiles and values rise; the last line is 100% with every count.
    for pair in rows.windows(2) {
        assert!(pair[0].1 <= pair[1].1 && pair[0].0 <= pair[1].0, "{pair:?}");
    }
    let last = rows.last().unwrap();
    assert_eq!((last.1, last.2), (1.0, h.len()));
    assert!((last.0 - h.max() as f64 / 1000.0).abs() < 0.01 * last.0.max(1.0));
    // The interval log is HdrHistogram's: its reader gets the counts back.
    let dir = std::env::temp_dir().join(format!("dpwarp-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("x.hlog");
    report::write_interval_log(&path, &r.measured.intervals, r.measured.elapsed).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let mut total = 0;
    let mut logged = std::time::Duration::ZERO;
    let mut deserializer = hdrhistogram::serialization::Deserializer::new();
    for entry in hdrhistogram::serialization::interval_log::IntervalLogIterator::new(&bytes) {
        if let Ok(hdrhistogram::serialization::interval_log::LogEntry::Interval(i)) = entry {
            logged += i.duration();
            let decoded = base64_decode(i.encoded_histogram());
            let hist: hdrhistogram::Histogram<u64> =
                deserializer.deserialize(&mut &decoded[..]).unwrap();
            total += hist.len();
        }
    }
    assert_eq!(total, h.len(), "every sample is in the interval log");
    // The intervals' lengths are the run's (each said 1 s before; found by
    // a review), to the log's millisecond.
    let run = r.measured.elapsed.as_secs_f64();
    assert!(
        (logged.as_secs_f64() - run).abs() < 0.002 * r.measured.intervals.len() as f64,
        "the intervals add to {logged:?}, the run took {:?}",
        r.measured.elapsed
    );
    // The plot is SVG with one line per series.
    let svg = report::svg("t", &[("embedded", h)]);
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches("<polyline").count(), 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Standard base64, as the interval log stores histograms.
fn base64_decode(s: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let bytes: Vec<u8> = s.bytes().filter(|&c| c != b'=').collect();
    let mut out = Vec::new();
    for chunk in bytes.chunks(4) {
        let n = chunk.iter().enumerate().fold(0u32, |acc, (i, &c)| {
            acc | (u32::from(value(c)) << (18 - 6 * i))
        });
        out.push((n >> 16) as u8);
        if chunk.len() > 2 {
            out.push((n >> 8) as u8);
        }
        if chunk.len() > 3 {
            out.push(n as u8);
        }
    }
    out
}

#[test]
fn the_json_report_has_the_documented_fields() {
    let r = tiny(Op::Read, Mode::Latency);
    let v = r.json();
    for (field, kind) in [
        ("operation", "string"),
        ("mode", "string"),
        ("size", "number"),
        ("transport", "string"),
        ("iterations", "number"),
        ("seconds", "number"),
        ("gbit_s", "number"),
        ("msgs_per_s", "number"),
        ("cpu_ns_per_msg", "number"),
        ("interrupted", "bool"),
    ] {
        let f = &v[field];
        let ok = match kind {
            "string" => f.is_string(),
            "number" => f.is_number(),
            _ => f.is_boolean(),
        };
        assert!(ok, "{field} is a {kind}: {f}");
    }
    assert_eq!(v["operation"], "read");
    assert_eq!(v["mode"], "latency");
    for p in ["min", "p50", "p90", "p99", "p99_9", "p99_99", "max", "mean"] {
        assert!(v["latency_ns"][p].is_number(), "latency_ns.{p}");
    }
    assert!(v["latency_ns"]["p50"].as_u64().unwrap() <= v["latency_ns"]["p99"].as_u64().unwrap());
}

/// RDMA over a link that loses 1% of its frames each way (`--loss 1`): 64
/// KiB Writes and Reads complete, every FPDU's CRC checked on the way
/// (MPA CRC on), and the memory each ended in is the octets sent; the
/// losses were real, so TCP repaired them (SACK, RACK-TLP).
#[test]
fn rdma_over_a_lossy_link_arrives_exactly() {
    const SIZE: usize = 65536;
    let mut c = config(memory_for(1, SIZE));
    c.loss = 0.01;
    let mut rig = rig::embedded(&c).unwrap();
    let pattern = |seed: u32| -> Vec<u8> {
        (0..SIZE as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) ^ seed).rotate_left(seed % 31) as u8)
            .collect()
    };
    let server = rig.server_region().expect("an in-process server");
    // Writes: the client's slot into the server's.
    rig.client().region.write(0, &pattern(1)).unwrap();
    let mut spec = spec(Op::Write, Mode::Bandwidth, SIZE, 1);
    spec.stop = Stop::Iterations(400);
    let m = workload::run(&mut rig, &spec, false, &AtomicBool::new(false), &mut |_| {}).unwrap();
    assert_eq!(m.messages, 400);
    let mut got = vec![0; SIZE];
    server.read(0, &mut got).unwrap();
    assert!(
        got == pattern(1),
        "the Writes' octets in the server's memory"
    );
    // Reads: the server's slot into the client's.
    server.write(0, &pattern(2)).unwrap();
    spec.op = Op::Read;
    let m = workload::run(&mut rig, &spec, true, &AtomicBool::new(false), &mut |_| {}).unwrap();
    assert_eq!(m.messages, 400);
    rig.client().region.read(0, &mut got).unwrap();
    assert!(
        got == pattern(2),
        "the Reads' octets in the client's memory"
    );
    let dropped = rig.client().core.transport().device().tx_stats().dropped;
    assert!(
        dropped > 10,
        "the link dropped {dropped} of the client's frames"
    );
}

/// `--loss` is the embedded link's: refused elsewhere, and out of range,
/// with what to fix.
#[test]
fn loss_is_the_embedded_links_only() {
    let why = |line: &str| parse(line).unwrap().plan().unwrap_err();
    assert!(parse("bench write --loss 1").unwrap().plan().is_ok());
    assert!(parse("bench read -s 65536 --loss 0.1 --transport embedded")
        .unwrap()
        .plan()
        .is_ok());
    assert!(why("bench write --loss 1 --transport kernel").contains("embedded link"));
    assert!(why("bench write --loss 1 --compare kernel").contains("embedded link"));
    assert!(why("bench write --loss 1 --llp sctp").contains("embedded link"));
    assert!(why("bench write --loss 80").contains("from 0 to 50"));
}

/// A run at a loss TCP cannot get through in time fails saying so, and what
/// to give instead (found by a review: at 45% it failed with only "took
/// more than 10 s").
#[test]
fn a_run_that_loss_stops_says_to_lower_the_loss() {
    let r = common::run_refused(BENCH, &["write", "-s", "65536", "-D", "1", "--loss", "50"]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    assert!(
        r.stderr.contains("50% of frames lost") && r.stderr.contains("give a lower --loss"),
        "{}",
        r.stderr
    );
}
