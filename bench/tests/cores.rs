//! Two RNICs of one process, each on a core (thread) of its own: over
//! Linux TCP, over a DPDK net_ring pair and over DPDK memif, every
//! operation in both modes completes, and each core's counters account for
//! the traffic (what one side's device sent, the other's received). The
//! threads are not pinned here (tests share the machine's CPUs); `bench`
//! pins them. EAL starts once for the binary, without hugepages.
#![allow(clippy::disallowed_methods)] // The tests pace themselves by the clock.

use std::sync::atomic::AtomicBool;
use std::sync::Mutex;

use bench::args::LlpArg;
use bench::link::LinkArgs;
use bench::rig::{self, RigConfig};
use bench::spec::{memory_for, Mode, Op, Spec, Stop};
use bench::workload;
use dataplane::CoreTransport;

/// One rig at a time: ports and pools are process-wide.
static SERIAL: Mutex<()> = Mutex::new(());

fn config(port: u16) -> RigConfig {
    RigConfig {
        crc: true,
        markers: false,
        mtu: 9000,
        memory: memory_for(2, 65536),
        port,
        sw_checksums: false,
        loss: 0.0,
        direct_receive: true,
    }
}

fn link() -> LinkArgs {
    LinkArgs {
        hugepages: bench::link::HugepagesArg::Off,
        memif_socket: "/run/dpwarp/test.sock".into(),
        ..LinkArgs::default()
    }
}

/// Every operation, both modes, then each core's counters.
fn every_operation<C: CoreTransport, S: CoreTransport>(rig: &mut rig::Rig<C, S>, lossless: bool) {
    assert_eq!(rig.cores(), 2);
    for op in Op::ALL {
        for mode in [Mode::Bandwidth, Mode::Latency] {
            let size = if op.is_atomic() { 8 } else { 4096 };
            let spec = Spec {
                op,
                mode,
                size,
                stop: Stop::Iterations(300),
                depth: 32,
                qps: if mode == Mode::Latency { 1 } else { 2 },
                urgent: false,
                dscp: 0,
            };
            let m = workload::run(rig, &spec, false, &AtomicBool::new(false), &mut |_| {})
                .unwrap_or_else(|e| panic!("{op:?} {mode:?}: {e}"));
            assert_eq!(m.messages, 300, "{op:?} {mode:?}");
        }
    }
    // The last ACKs and FINs land.
    let start = std::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_millis(100) {
        rig.step().unwrap();
    }
    let cores = rig.core_reports();
    assert_eq!(cores.len(), 2);
    let (client, server) = (&cores[0].counters, &cores[1].counters);
    for c in [client, server] {
        assert!(c.turns > 0 && c.busy_turns > 0, "{c:?}");
        assert_eq!(c.busy_turns + c.idle_turns, c.turns, "{c:?}");
        assert!(c.established >= 18, "a connection per workload: {c:?}");
    }
    // What one engine wrote into TCP the other read, octet for octet.
    assert_eq!(client.tx_fpdu_octets, server.rx_fpdu_octets);
    assert_eq!(server.tx_fpdu_octets, client.rx_fpdu_octets);
    if lossless {
        let (cd, sd) = (&client.device, &server.device);
        assert_eq!(cd.tx_packets, sd.rx_packets, "{cd:?} {sd:?}");
        assert_eq!(sd.tx_packets, cd.rx_packets, "{cd:?} {sd:?}");
        assert_eq!(cd.rx_dropped() + sd.rx_dropped(), 0);
        assert!(cd.pool_low_water > 0 && sd.pool_low_water > 0);
    }
}

#[test]
fn two_cores_over_kernel_tcp() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut rig = rig::kernel(&config(7100)).unwrap();
    rig.split(None, None, None).unwrap();
    every_operation(&mut rig, false);
}

#[test]
fn two_cores_over_a_dpdk_ring_pair() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (mut rig, info) = rig::dpdk_pair(&config(7101), &link(), false).unwrap();
    rig.split(None, None, Some(info.eal)).unwrap();
    every_operation(&mut rig, true);
}

#[test]
fn two_cores_over_dpdk_memif() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (mut rig, info) = rig::dpdk_pair(&config(7102), &link(), true).unwrap();
    rig.split(None, None, Some(info.eal)).unwrap();
    every_operation(&mut rig, true);
}

/// `--cores`: the workload on one and then two pinned cores, each running
/// both ends of its own connections over its own link (the in-memory link,
/// then a DPDK ring pair per core): every core runs its share of the QPs
/// to completion, on its own CPU, and the total is the sum of the cores.
#[test]
fn a_workload_spreads_over_pinned_cores_and_adds_up() {
    spreads_over_pinned_cores(LlpArg::Mpa, 7450);
}

/// The same under DDP over SCTP (`--llp sctp --cores`): each core's
/// association and streams on its own link or queue pair, every core's
/// session establishment through its host's one control plane.
#[test]
fn ddp_over_sctp_spreads_over_pinned_cores_and_adds_up() {
    spreads_over_pinned_cores(LlpArg::Sctp, 7460);
}

/// 64 B and 4 KiB Writes of 3 QPs on one and then two cores (one where
/// the machine has one CPU), over the in-memory link and a DPDK ring pair,
/// under `llp`; the report checked core by core.
fn spreads_over_pinned_cores(llp: LlpArg, port: u16) {
    use bench::cores::{self, CoreLink};
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let cpus = dataplane::lcore::cpus();
    let counts: Vec<usize> = if cpus.len() >= 2 { vec![1, 2] } else { vec![1] };
    let spec = Spec {
        op: Op::Write,
        mode: Mode::Bandwidth,
        size: 4096,
        stop: Stop::Iterations(400),
        depth: 16,
        qps: 3,
        urgent: false,
        dscp: 0,
    };
    let sizes = [64, 4096];
    for kind in [CoreLink::Embedded, CoreLink::Ring] {
        let reports = cores::run(
            &config(port),
            &link(),
            kind,
            llp,
            &counts,
            &cpus,
            &spec,
            &sizes,
            None,
            &mut Vec::new(),
            &AtomicBool::new(false),
        )
        .unwrap_or_else(|why| panic!("{} {}: {why}", kind.name(), llp.name()));
        assert_eq!(reports.len(), counts.len() * sizes.len(), "{}", kind.name());
        for (r, (&count, &size)) in reports.iter().zip(
            counts
                .iter()
                .flat_map(|c| sizes.iter().map(move |s| (c, s))),
        ) {
            let what = format!(
                "{} on {count} core(s), {size} B, {}",
                kind.name(),
                llp.name()
            );
            assert_eq!(
                (r.cores, r.size, r.transport, r.llp),
                (count, size, kind.name(), llp.name()),
                "{what}"
            );
            let clients: Vec<_> = r.per_core.iter().filter(|c| c.share.is_some()).collect();
            assert_eq!(clients.len(), count, "{what}: one share per core");
            let cpus_used: std::collections::HashSet<_> = clients.iter().map(|c| c.cpu).collect();
            assert_eq!(cpus_used.len(), count, "{what}: a CPU each");
            let mut messages = 0;
            for c in &clients {
                let share = c.share.expect("filtered");
                // -n is per core: each ran its QPs to the count.
                assert!(share.messages >= 400, "{what}: {share:?}");
                assert_eq!(share.octets, share.messages * size as u64, "{what}");
                // The core's own counters carried its share (FPDUs and DDP
                // segments add headers; nothing of another core's).
                assert!(
                    c.counters.tx_fpdu_octets >= share.octets,
                    "{what}: the core sent {} FPDU octets for {} of payload",
                    c.counters.tx_fpdu_octets,
                    share.octets
                );
                assert!(
                    c.counters.busy_us > 0 && c.counters.busy_turns > 0,
                    "{what}: the core's turns were counted: {:?}",
                    c.counters
                );
                messages += share.messages;
            }
            // Over the ring pair each core's frames arrived on its own
            // queue: none was handed to another core.
            for c in &r.per_core {
                assert_eq!(c.counters.device.rx_steered_out, 0, "{what}: {c:?}");
                if kind == CoreLink::Ring {
                    assert!(c.counters.device.rx_packets > 0, "{what}: {c:?}");
                }
            }
            assert_eq!(
                r.measured.messages, messages,
                "{what}: the total is the sum"
            );
            assert_eq!(r.measured.octets, messages * size as u64, "{what}");
        }
    }
}

/// `--flood`: core 0 opens TCP connections to its peer that never start
/// MPA while core 1 runs the workload: the flood is bounded on the peer (it
/// holds at most its connection limit), core 1 completes its share, and
/// the report names what each did.
#[test]
fn a_flood_on_one_core_leaves_the_other_running() {
    use bench::cores::{self, CoreLink};
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let cpus = dataplane::lcore::cpus();
    if cpus.len() < 2 {
        eprintln!("one CPU: no second core to flood beside");
        return;
    }
    let spec = Spec {
        op: Op::Write,
        mode: Mode::Bandwidth,
        size: 4096,
        stop: Stop::Duration(std::time::Duration::from_millis(600)),
        depth: 16,
        qps: 2,
        urgent: false,
        dscp: 0,
    };
    let mut floods = Vec::new();
    let reports = cores::run(
        &config(7470),
        &link(),
        CoreLink::Ring,
        LlpArg::Mpa,
        &[2],
        &cpus,
        &spec,
        &[4096],
        Some(300),
        &mut floods,
        &AtomicBool::new(false),
    )
    .unwrap();
    assert_eq!(reports.len(), 2, "the run, then the run with the flood");
    assert_eq!(floods.len(), 1);
    let (at, f) = floods[0];
    assert_eq!(reports[at].transport, "ring+flood");
    assert!(
        f.opened > 300,
        "the flood opened and reset connections: {f:?}"
    );
    assert!(
        f.held_max > 0 && f.held_max <= bench::endpoint::CONNECTIONS_MAX,
        "the peer held half-open startups, bounded: {f:?}"
    );
    let shares: Vec<_> = reports[at]
        .per_core
        .iter()
        .filter_map(|c| c.share)
        .collect();
    assert_eq!(shares.len(), 1, "only core 1 ran the workload");
    assert!(shares[0].messages > 0);
    assert!(
        reports[at].per_core.iter().any(|c| c.role == "flooder"),
        "core 0's counters are in the report"
    );
}

/// An embedded rig with memory for a 64 B Write latency QP and `beside`
/// more QPs, listening on `port`, and that latency run (300 rounds).
fn write_latency_beside(beside: usize, port: u16) -> (rig::EmbeddedRig, Spec) {
    let rig = rig::embedded(&RigConfig {
        memory: memory_for(1 + beside, 64),
        ..config(port)
    })
    .unwrap();
    let spec = Spec {
        op: Op::Write,
        mode: Mode::Latency,
        size: 64,
        stop: Stop::Iterations(300),
        depth: 4,
        qps: 1,
        urgent: false,
        dscp: 0,
    };
    (rig, spec)
}

/// `spec`'s latency run beside `active` busy QPs, the last size.
fn beside_busy(rig: &mut rig::EmbeddedRig, spec: &Spec, active: usize) -> bench::spec::Measured {
    workload::run_beside(
        rig,
        spec,
        active,
        true,
        true,
        &AtomicBool::new(false),
        &mut |_| {},
    )
    .unwrap()
}

/// `--active`: a Write latency run beside busy QPs on the same core: the
/// latency QP completes its rounds, the busy QPs complete Writes meanwhile,
/// and their memory slots are their own (the latency QP's pong is its own).
#[test]
fn a_latency_run_beside_busy_qps_measures_both() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let active = 16;
    let (mut rig, spec) = write_latency_beside(active, 7490);
    let m = beside_busy(&mut rig, &spec, active);
    assert!(m.messages >= 300, "the latency QP's rounds: {}", m.messages);
    assert!(m.latency.len() >= 300);
    assert!(m.beside > 0, "the busy QPs completed Writes meanwhile");
    assert_eq!(rig.client.open_connections(), 0, "every connection closed");
    // Beside a bandwidth run it is refused, and says why.
    let bw = Spec {
        mode: Mode::Bandwidth,
        ..spec
    };
    let refused = workload::run_beside(
        &mut rig,
        &bw,
        2,
        true,
        true,
        &AtomicBool::new(false),
        &mut |_| {},
    );
    match refused {
        Err(why) => assert!(why.contains("Write latency"), "{why}"),
        Ok(_) => panic!("busy QPs beside a bandwidth run were accepted"),
    }
}

/// `--idle N`: N QPs connected beside a latency run and never used: they
/// complete nothing, and every one of them is closed after the run.
#[test]
fn a_latency_run_beside_idle_qps() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let idle = 32;
    let (mut rig, spec) = write_latency_beside(idle, 7491);
    let before = rig.core_reports()[0].counters;
    let m = workload::run_beside(
        &mut rig,
        &spec,
        idle,
        false,
        true,
        &AtomicBool::new(false),
        &mut |_| {},
    )
    .unwrap();
    let c = rig.core_reports()[0].counters.since(&before);
    assert!(m.messages >= 300, "the latency QP's rounds: {}", m.messages);
    assert_eq!(m.beside, 0, "idle QPs completed nothing");
    // The client core's turns looked at the QPs with work (the latency
    // QP's rounds, each QP's set-up and close), not at every QP each turn.
    eprintln!(
        "{} turns looked at {} connections for {} rounds",
        c.turns, c.looked_at, m.messages
    );
    assert!(
        c.looked_at * 4 < c.turns * (1 + idle as u64),
        "{} turns looked at {} connections",
        c.turns,
        c.looked_at
    );
    assert_eq!(rig.client.open_connections(), 0, "every connection closed");
    let server = rig.local_server().unwrap();
    assert_eq!(server.served, 1 + idle as u64, "each idle QP was connected");
}

/// `--urgent`: the latency QP beside busy ones is urgent on both ends (the
/// client's core from `open_slots`, the server's from the hello's flag):
/// while it lives each core's turn looks at it first and at one busy QP at
/// most, so the busy QPs' work is spread over many short turns; without
/// it a turn looks at every busy QP with work.
#[test]
fn an_urgent_qp_beside_busy_ones_keeps_each_cores_turns_short() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let active = 16;
    let budget = dataplane::Budgets::default().beside_urgent as u64;
    let mut per_turn = Vec::new();
    for (urgent, port) in [(false, 7494), (true, 7495)] {
        let (mut rig, spec) = write_latency_beside(active, port);
        let spec = Spec { urgent, ..spec };
        let before: Vec<_> = rig.core_reports().iter().map(|r| r.counters).collect();
        let m = beside_busy(&mut rig, &spec, active);
        assert!(m.messages >= 300, "the latency QP's rounds: {}", m.messages);
        assert!(m.beside > 0, "the busy QPs completed Writes meanwhile");
        assert_eq!(rig.client.open_connections(), 0, "every connection closed");
        assert_eq!(
            rig.client.core.urgent_connections(),
            0,
            "the urgent QP's end went with its connection"
        );
        let reports = rig.core_reports();
        assert_eq!(reports.len(), 2, "a client core and a server core");
        for (r, before) in reports.iter().zip(&before) {
            let c = r.counters.since(before);
            eprintln!(
                "urgent {urgent}, {}: {} busy turns looked at {} connections; \
                 {} turns beside the urgent QP looked at {} others",
                r.role, c.busy_turns, c.looked_at, c.turns_beside_urgent, c.looked_at_beside_urgent
            );
            if urgent {
                assert!(
                    c.turns_beside_urgent >= m.messages,
                    "{}: {} turns beside the urgent QP for {} rounds",
                    r.role,
                    c.turns_beside_urgent,
                    m.messages
                );
                assert!(c.looked_at_beside_urgent <= c.turns_beside_urgent * budget);
            } else {
                assert_eq!(c.turns_beside_urgent, 0, "{}: no urgent QP", r.role);
            }
            if r.role == "client" {
                per_turn.push(c.looked_at as f64 / c.busy_turns.max(1) as f64);
            }
        }
    }
    // The contrast that shows the budget bit: busy QPs per client turn.
    assert!(
        per_turn[0] > 2.0 * per_turn[1],
        "connections looked at per busy turn: {:.2} plain, {:.2} urgent",
        per_turn[0],
        per_turn[1]
    );
}

/// A turn that looks at many busy QPs polls the port between its looks
/// (`Budgets::looks_per_poll`), at most once per that many looks, so that
/// acknowledgements and segments keep moving; with no more busy QPs than
/// that, a turn polls as it did (before its looks and after them only).
#[test]
fn a_long_turn_polls_the_port_between_its_looks() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let every = dataplane::Budgets::default().looks_per_poll as u64;
    for (qps, port) in [(every as usize, 7496), (4 * every as usize, 7497)] {
        let mut rig = rig::embedded(&RigConfig {
            memory: memory_for(qps, 65536),
            ..config(port)
        })
        .unwrap();
        let spec = Spec {
            op: Op::Write,
            mode: Mode::Bandwidth,
            size: 65536,
            stop: Stop::Iterations(50 * qps as u64),
            depth: 8,
            qps,
            urgent: false,
            dscp: 0,
        };
        let before: Vec<_> = rig.core_reports().iter().map(|r| r.counters).collect();
        let m =
            workload::run(&mut rig, &spec, false, &AtomicBool::new(false), &mut |_| {}).unwrap();
        assert_eq!(m.messages, 50 * qps as u64, "{qps} QPs");
        for (r, before) in rig.core_reports().iter().zip(&before) {
            let c = r.counters.since(before);
            eprintln!(
                "{qps} QPs, {}: {} busy turns looked at {} connections, {} polls between",
                r.role, c.busy_turns, c.looked_at, c.polls_between_looks
            );
            assert!(
                c.polls_between_looks * every <= c.looked_at,
                "{}: {} polls for {} looks",
                r.role,
                c.polls_between_looks,
                c.looked_at
            );
            if qps as u64 <= every {
                assert_eq!(c.polls_between_looks, 0, "{}: {qps} QPs", r.role);
            } else if r.role == "client" {
                assert!(
                    c.polls_between_looks > 0,
                    "the client's turns over {qps} busy QPs polled between looks"
                );
            }
        }
    }
}
