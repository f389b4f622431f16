//! `bench`: see `bench --help` and the README's "Benchmark" section.
#![allow(clippy::disallowed_methods)] // A benchmark reads the clock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use std::net::{SocketAddrV4, ToSocketAddrs};
use std::time::{Duration, Instant};

use bench::args::{Args, Compare, LlpArg, Plan, Role, TransportArg};
use bench::endpoint::now;
use bench::link::PeerTransport;
use bench::report::{self, Report};
use bench::responder::Server;
use bench::rig::{self, BenchRig, RigConfig, TransportKind};
use bench::spec::{memory_for, Mode, Spec, Stop};
use bench::workload;
use clap::Parser;
use dataplane::CoreTransport;
use indicatif::{ProgressBar, ProgressStyle};

/// mimalloc keeps freed memory for reuse: glibc's malloc returned the
/// blocks of SCTP's per-packet buffers to the kernel and faulted them in
/// again (README, "DDP over SCTP").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    let tool = match argv.get(1).map(String::as_str) {
        Some("rping") => Some(bench::rping::main as fn(Vec<String>, &AtomicBool) -> i32),
        Some("perftest") => Some(bench::perftest::main as fn(Vec<String>, &AtomicBool) -> i32),
        Some("port") => Some(bench::portcost::main as fn(Vec<String>, &AtomicBool) -> i32),
        Some("connect") => Some(bench::connect::main as fn(Vec<String>, &AtomicBool) -> i32),
        Some("sctp-echo") => Some(bench::sctpecho::main as fn(Vec<String>, &AtomicBool) -> i32),
        _ => None,
    };
    if let Some(tool) = tool {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let _ = ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst));
        std::process::exit(tool(argv[1..].to_vec(), &stop));
    }
    // The CPUs we may use, read before any thread is pinned.
    let _ = dataplane::lcore::cpus();
    let args = Args::parse();
    let plan = match args
        .plan()
        .and_then(|plan| check_outputs(&args, &plan).map(|()| plan))
    {
        Ok(plan) => plan,
        Err(why) => {
            eprintln!("bench: {why}");
            std::process::exit(2);
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        // Ctrl-C ends the current run; the results so far are printed.
        let _ = ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst));
    }
    if plan.role == Role::Server {
        std::process::exit(serve(&args, &plan, &stop));
    }
    if !args.cores.is_empty() {
        std::process::exit(run_cores(&args, &plan, &stop));
    }
    let first = match &plan.role {
        Role::Local(t) => kind(*t),
        _ => TransportKind::Remote(
            args.transport
                .and_then(TransportArg::peer)
                .unwrap_or(PeerTransport::Kernel),
        ),
    };
    // Each run: a transport and the lower layer under DDP.
    let mut runs = vec![(first, args.llp)];
    runs.extend(args.compare.iter().map(|&c| match c {
        Compare::Transport(t) => (kind(t), args.llp),
        Compare::Llp(llp) => (first, llp),
    }));
    let transports: Vec<TransportKind> = runs.iter().map(|r| r.0).collect();
    let mut reports: Vec<Report> = Vec::new();
    let shape = match plan.mode {
        Mode::Bandwidth => format!(
            "bandwidth | {} QP(s), {} in flight each",
            args.qps, args.depth
        ),
        Mode::Latency if args.active > 0 => format!(
            "latency | 1 QP{}, 1 in flight, beside {} QP(s) with {} Writes in flight each",
            if args.urgent { " (urgent)" } else { "" },
            args.active,
            args.depth
        ),
        Mode::Latency if args.idle > 0 => format!(
            "latency | 1 QP, 1 in flight, beside {} idle QP(s) (connected, nothing posted)",
            args.idle
        ),
        Mode::Latency => "latency | 1 QP, 1 in flight".to_string(),
    };
    let shape = match args.tos {
        Some(tos) => format!("{shape} | TOS {tos} (DSCP {})", tos >> 2),
        None => shape,
    };
    // The checksum clause only where the embedded link runs (DPDK ports say
    // theirs when they open).
    let checksums = if transports.contains(&TransportKind::Embedded) {
        format!(
            ", TCP/IP checksums {} on the embedded link",
            if args.link.sw_checksums {
                "in software"
            } else {
                "offloaded"
            }
        )
    } else {
        String::new()
    };
    let llps = if runs.iter().any(|r| r.1 == LlpArg::Sctp) {
        " | DDP over SCTP: one message per DDP segment over UDP encapsulation (RFC 5043, 6951)"
    } else {
        ""
    };
    let loss = match args.loss {
        Some(p) if p > 0.0 => format!(" | {p}% of frames lost each way (CUBIC)"),
        _ => String::new(),
    };
    // MPA's settings only where a run is MPA's (the plan refuses them
    // otherwise).
    let mpa = if runs.iter().any(|r| r.1 == LlpArg::Mpa) {
        format!(
            " | MPA CRC {}, markers {}",
            if args.no_crc { "off" } else { "on" },
            if args.markers { "on" } else { "off" },
        )
    } else {
        String::new()
    };
    println!(
        "{} {}{mpa} | MTU {}{checksums}{llps}{loss}",
        plan.op.name(),
        shape,
        args.mtu(),
    );
    for &(transport, llp) in &runs {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let result = match llp {
            LlpArg::Mpa => run_transport(&args, &plan, transport, &stop),
            LlpArg::Sctp => run_sctp(&args, &plan, transport, &stop),
        };
        match result {
            Ok(mut r) => reports.append(&mut r),
            Err(why) => {
                // Found by a review: a run at 45% loss failed with no word
                // of why.
                let hint = match args.loss {
                    Some(loss) if loss > LOSS_FINISHES => format!(
                        " (at {loss}% of frames lost each way TCP's retransmissions back off \
                         past the 10 s the run waits for progress: runs above about \
                         {LOSS_FINISHES}% may not finish; give a lower --loss)"
                    ),
                    _ => String::new(),
                };
                eprintln!(
                    "bench: {} transport ({}): {why}{hint}",
                    transport.name(),
                    llp.name()
                );
                print_tables(&args, &plan, &reports);
                // What was measured before is kept.
                if let Err(why) = write_files(&args, &plan, &reports) {
                    eprintln!("bench: {why}");
                }
                std::process::exit(1);
            }
        }
    }
    print_tables(&args, &plan, &reports);
    if let Err(why) = write_files(&args, &plan, &reports) {
        eprintln!("bench: {why}");
        std::process::exit(1);
    }
    clean_up_dpdk();
}

/// `--cores`: the workload on each count of cores in turn, a table with
/// a row per core and the total, and the scaling.
fn run_cores(args: &Args, plan: &Plan, stop: &AtomicBool) -> i32 {
    use bench::cores::{self, CoreLink};
    let kind = match (&plan.role, args.transport) {
        (Role::Client(host), t) => match server_addr(host, args.port) {
            Ok(addr) => CoreLink::Remote(
                t.and_then(TransportArg::peer)
                    .unwrap_or(PeerTransport::Kernel),
                addr,
            ),
            Err(why) => {
                eprintln!("bench: {why}");
                return 1;
            }
        },
        (_, Some(TransportArg::Memif)) => CoreLink::Memif,
        (_, Some(TransportArg::Ring)) => CoreLink::Ring,
        _ => CoreLink::Embedded,
    };
    let cpus = match args.link.cpus() {
        Ok(list) => list.unwrap_or_else(dataplane::lcore::cpus),
        Err(why) => {
            eprintln!("bench: {why}");
            return 2;
        }
    };
    let config = rig_config(args, plan);
    let spec = Spec {
        op: plan.op,
        mode: plan.mode,
        size: plan.sizes[0],
        stop: plan.stop,
        depth: args.depth,
        qps: args.qps,
        urgent: args.urgent,
        dscp: args.dscp(),
    };
    let per_core = match kind {
        CoreLink::Remote(peer, addr) => {
            format!(
                "a client of the server at {addr} over {} per core",
                peer.name()
            )
        }
        _ => format!(
            "{} per core, both ends of its connections on it",
            kind.name()
        ),
    };
    let llp = match args.llp {
        LlpArg::Mpa => format!(
            "MPA CRC {}, markers {}",
            if args.no_crc { "off" } else { "on" },
            if args.markers { "on" } else { "off" },
        ),
        LlpArg::Sctp => "DDP over SCTP over UDP (RFC 5043, RFC 6951), an association a core".into(),
    };
    println!(
        "{} bandwidth | {} QP(s) spread over the cores, {} in flight each | {per_core} | {llp} \
         | MTU {}",
        plan.op.name(),
        args.qps,
        args.depth,
        args.mtu(),
    );
    for &count in &args.cores {
        println!(
            " {count} core(s) on CPU(s) {:?}, {} QP(s) each",
            &cpus[..count],
            (0..count)
                .map(|k| cores::qps_of(args.qps, count, k).to_string())
                .collect::<Vec<_>>()
                .join("/")
        );
    }
    let mut code = 0;
    let mut floods = Vec::new();
    let reports = match cores::run(
        &config,
        &args.link,
        kind,
        args.llp,
        &args.cores,
        &cpus,
        &spec,
        &plan.sizes,
        args.flood,
        &mut floods,
        stop,
    ) {
        Ok(r) => r,
        Err(why) => {
            eprintln!("bench: --cores: {why}");
            code = 1;
            Vec::new()
        }
    };
    println!();
    println!("{}", report::bw_header(args.report_gbits));
    for r in &reports {
        println!("{}", report::bw_row(r, args.report_gbits));
        for row in cores::core_rows(r, args.report_gbits) {
            println!("{row}");
        }
    }
    for line in cores::flood_lines(&reports, &floods) {
        println!("{line}");
    }
    let scaling = cores::scaling(&reports);
    if !scaling.is_empty() {
        println!();
        for line in scaling {
            println!("{line}");
        }
    }
    if let Err(why) = write_files(args, plan, &reports) {
        eprintln!("bench: {why}");
        code = 1;
    }
    clean_up_dpdk();
    code
}

/// Releases DPDK's EAL at the end of a run that started it (every port and
/// pool is gone by then): hugepage memory goes back, nothing stays behind.
fn clean_up_dpdk() {
    if let Some(eal) = dataplane::dpdk::Eal::running() {
        if let Err(why) = eal.cleanup() {
            eprintln!("bench: {why}");
        }
    }
}

fn kind(t: TransportArg) -> TransportKind {
    match t {
        TransportArg::Embedded => TransportKind::Embedded,
        TransportArg::Kernel => TransportKind::Kernel,
        TransportArg::Tap => TransportKind::Tap,
        TransportArg::Memif => TransportKind::Memif,
        TransportArg::Ring => TransportKind::Ring,
        TransportArg::NetTap => TransportKind::NetTap,
        TransportArg::AfPacket => TransportKind::AfPacket,
        // Refused by Args::plan for in-process runs and as a baseline.
        TransportArg::Pci => TransportKind::Remote(PeerTransport::Pci),
    }
}

/// The `--loss` below which runs were seen to finish here (at 25% some did
/// and some did not; at 30% none; a lost SYN's retransmission alone comes
/// seconds later).
const LOSS_FINISHES: f64 = 20.0;

fn rig_config(args: &Args, plan: &Plan) -> RigConfig {
    let largest = *plan.sizes.iter().max().unwrap_or(&8);
    RigConfig {
        crc: !args.no_crc,
        markers: args.markers,
        mtu: args.mtu(),
        memory: memory_for(args.qps + args.beside().0, largest),
        port: args.port,
        sw_checksums: args.link.sw_checksums,
        loss: args.loss.unwrap_or(0.0) / 100.0,
        direct_receive: !args.rx_buffered,
    }
}

/// `--server`: serve one client's run (every size it brings), then exit.
/// With `--cores K`, K pinned cores serve it together: one control-plane
/// thread, one registration of the memory, and each core its own
/// transport (queue pair K of a DPDK port, steered; or a kernel TCP
/// listener of its own on the same port, `SO_REUSEPORT`).
fn serve(args: &Args, plan: &Plan, stop: &AtomicBool) -> i32 {
    let mut config = rig_config(args, plan);
    // Room for one QP of the largest size -a reaches, whatever -s said.
    config.memory = config.memory.max(memory_for(1, bench::args::SIZE_MAX));
    if args.llp == LlpArg::Sctp {
        return serve_sctp(args, &config, stop);
    }
    let cores = args.cores.first().copied().unwrap_or(1);
    let transport = args
        .transport
        .and_then(TransportArg::peer)
        .unwrap_or(PeerTransport::Kernel);
    let code = if transport == PeerTransport::Kernel {
        let kc = tcp_lite::sys::kernel::KernelConfig {
            rx_buffer: 4 << 20,
            tx_buffer: 4 << 20,
            reuse_port: cores > 1,
            keep_alive: Some(bench::link::KEEP_ALIVE),
            ..Default::default()
        };
        let transports: Result<Vec<_>, String> = (0..cores)
            .map(|_| {
                tcp_lite::sys::kernel::KernelTransport::new(kc.clone()).map_err(|e| e.to_string())
            })
            .collect();
        match transports {
            Ok(t) => serve_on(
                t,
                args.mtu() - 40,
                args,
                &config,
                None,
                stop,
                Duration::ZERO,
            ),
            Err(e) => {
                eprintln!("bench: {e}");
                1
            }
        }
    } else {
        let opened = bench::link::dpdk_port_queues(
            transport,
            &args.link,
            args.mtu(),
            true,
            "dpwbench0",
            cores as u16,
        )
        .and_then(|(eal, port)| {
            let ip = args.link.address()?;
            let lossless = transport == PeerTransport::Memif;
            let steer = if cores > 1 { Some(port.steer()?) } else { None };
            let stacks = (0..cores as u16)
                .map(|k| bench::link::dpdk_stack_on(&port, k, steer.as_ref(), ip, lossless))
                .collect::<Result<Vec<_>, String>>()?;
            println!(
                "bench server: {}, {}",
                bench::link::describe_queues(&port, cores as u16),
                port.checksums()
            );
            Ok((eal, stacks))
        });
        match opened {
            Ok((eal, stacks)) => {
                let emss = stacks[0].emss();
                let quiet = if transport == PeerTransport::Memif {
                    bench::link::MEMIF_QUIET
                } else {
                    Duration::ZERO
                };
                serve_on(stacks, emss, args, &config, Some(eal), stop, quiet)
            }
            Err(why) => {
                eprintln!("bench server: {why}");
                1
            }
        }
    };
    clean_up_dpdk();
    code
}

/// Serves on `transports`, one pinned core each (core k on the k-th CPU
/// of -l, or of the CPUs this process may use when there are several);
/// stays `quiet` (no turn) before it lets the transports go (see
/// `MEMIF_QUIET`).
fn serve_on<T: CoreTransport + Send>(
    transports: Vec<T>,
    emss: usize,
    args: &Args,
    config: &RigConfig,
    eal: Option<dataplane::dpdk::Eal>,
    stop: &AtomicBool,
    quiet: Duration,
) -> i32 {
    let code = serve_until_done(transports, emss, args, config, eal, stop);
    std::thread::sleep(quiet);
    code
}

/// How one server core's run ended.
enum Served {
    /// Its client's run is done (on every core), or we were stopped.
    Done,
    /// No client for `IDLE_LIMIT` after one (served or refused): it went
    /// away.
    Idle,
}

fn serve_until_done<T: CoreTransport + Send>(
    transports: Vec<T>,
    emss: usize,
    args: &Args,
    config: &RigConfig,
    eal: Option<dataplane::dpdk::Eal>,
    stop: &AtomicBool,
) -> i32 {
    let cores = transports.len();
    let cpus = server_cpus(args, cores);
    let host = bench::endpoint::Host::new(cores as u16, 2);
    host.set_direct_receive(config.direct_receive);
    let (region, mr) = host.register(config.memory);
    let serving = bench::responder::Serving::new(cores);
    let servers: Vec<Server<T>> = transports
        .into_iter()
        .enumerate()
        .map(|(k, t)| {
            Server::serving(
                &host,
                k as u16,
                t,
                emss,
                region.clone(),
                mr,
                &serving,
                args.port,
                config.startup(),
                None,
            )
        })
        .collect();
    let listening = std::sync::Barrier::new(cores + 1);
    let failed = AtomicBool::new(false);
    let results: Vec<Result<(Served, dataplane::CoreCounters), String>> =
        std::thread::scope(|scope| {
            let threads: Vec<_> = servers
                .into_iter()
                .zip(&cpus)
                .map(|(mut server, &cpu)| {
                    let (listening, failed, serving) = (&listening, &failed, &serving);
                    scope.spawn(move || {
                        let up = dataplane::lcore::enter(cpu, eal)
                            .and_then(|pinned| server.wait_listening().map(|()| pinned));
                        if up.is_err() {
                            failed.store(true, Ordering::SeqCst);
                        }
                        listening.wait();
                        let _pinned = up?;
                        let served = serve_core(&mut server, serving, failed, stop)?;
                        Ok((served, server.endpoint.core.counters()))
                    })
                })
                .collect();
            listening.wait();
            if !failed.load(Ordering::SeqCst) {
                println!(
                "bench server: listening on port {} (MPA CRC {}, markers {}, {} MiB of memory, \
                 {cores} core(s)); run `bench <op> THIS_HOST -p {}{}` on the client",
                args.port,
                if args.no_crc { "off" } else { "on" },
                if args.markers { "on" } else { "off" },
                config.memory >> 20,
                args.port,
                client_options(args),
            );
            }
            bench::cores::joined(threads)
        });
    let mut code = 0;
    for (k, result) in results.iter().enumerate() {
        match result {
            Err(why) => {
                eprintln!("bench server: core {k}: {why}");
                code = 1;
            }
            Ok((Served::Idle, _)) if code == 0 => {
                eprintln!(
                    "bench server: no client for {} s ({} connection(s) served, {} refused)",
                    IDLE_LIMIT.as_secs(),
                    serving.served(),
                    serving.refused()
                );
                code = 1;
            }
            _ => {}
        }
    }
    if cores > 1 {
        for (k, cpu) in cpus.iter().enumerate() {
            // TCP frames that reached this core's queue but belonged to
            // another core, and those another core handed to it: 0 when
            // the client steers as we do (a dpwarp client), not when the
            // port's own hash picks the queue (net_tap's kernel side).
            let steering = match &results[k] {
                Ok((_, c)) => format!(
                    "; TCP frames handed to their core: {} ({} dropped); ARP frames copied to \
                     the others: {}",
                    c.device.rx_steered_out, c.device.rx_steer_dropped, c.device.rx_arp_shared
                ),
                Err(_) => String::new(),
            };
            println!(
                "bench server: core {k} (CPU {}): {} connection(s){steering}",
                cpu.map_or("-".into(), |c| c.to_string()),
                serving.served_by(k)
            );
        }
    }
    // Connections that ended by the client's reset or TCP's timeout, not
    // by its orderly close: a client killed mid-run (its run still ends
    // once its connections are gone) or a path that failed.
    let abrupt: u64 = results
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .map(|(_, c)| c.ended_abruptly)
        .sum();
    if code == 0 && abrupt > 0 {
        eprintln!(
            "bench server: the client's run ended with {abrupt} of {} connection(s) reset or \
             timed out, not closed: the client was killed or its path failed",
            serving.served()
        );
        code = 1;
    }
    if code == 0 {
        if serving.runs_done() > 0 {
            println!(
                "bench server: client done after {} connection(s)",
                serving.served()
            );
        } else {
            println!(
                "bench server: stopped after {} connection(s)",
                serving.served()
            );
        }
    }
    code
}

/// What a client needs besides its HOST and port to reach this server
/// over a DPDK port: the transport, and an address of its own beside ours
/// (`--ip`); nothing over kernel TCP.
fn client_options(args: &Args) -> String {
    match args.transport.and_then(|t| t.peer()) {
        Some(t) if t != bench::link::PeerTransport::Kernel => {
            format!(" --transport {} --ip CLIENT_ADDR/PREFIX", t.name())
        }
        _ => String::new(),
    }
}

/// A client that vanished mid-run (killed, Ctrl-C) is given up on after
/// this long without a connection.
const IDLE_LIMIT: Duration = Duration::from_secs(10);

/// `--server --llp sctp`: serve one client's run over DDP over SCTP (RFC
/// 5043) over UDP (RFC 6951), every size it brings, on `--cores K` pinned
/// cores (one by default), then exit: over Linux UDP (each core a socket
/// on the port, `SO_REUSEPORT` when several: Linux gives each association
/// to one by its four-tuple's hash), or on a DPDK port (each core its
/// stack on its queue pair, the port's datagrams steered to the core their
/// four-tuple hashes to). One control-plane thread decides every stream;
/// one registration of the memory serves every core.
fn serve_sctp(args: &Args, config: &RigConfig, stop: &AtomicBool) -> i32 {
    let cores = args.cores.first().copied().unwrap_or(1);
    let transport = args
        .transport
        .and_then(TransportArg::peer)
        .unwrap_or(PeerTransport::Kernel);
    let code = if transport == PeerTransport::Kernel {
        let udps = (0..cores)
            .map(|_| {
                let udp =
                    tcp_lite::sys::udp::KernelUdp::new(std::net::Ipv4Addr::UNSPECIFIED, 4 << 20);
                if cores > 1 {
                    udp.reuse_port()
                } else {
                    udp
                }
            })
            .collect();
        serve_sctp_on(udps, args.mtu(), args, config, None, stop)
    } else {
        let opened = bench::link::dpdk_port_queues(
            transport,
            &args.link,
            args.mtu(),
            true,
            "dpwbench0",
            cores as u16,
        )
        .and_then(|(eal, port)| {
            let ip = args.link.address()?;
            let lossless = transport == PeerTransport::Memif;
            let steer = if cores > 1 {
                Some(port.steer_pinning(&[], &[args.port])?)
            } else {
                None
            };
            let stacks = (0..cores as u16)
                .map(|k| bench::link::dpdk_stack_on(&port, k, steer.as_ref(), ip, lossless))
                .collect::<Result<Vec<_>, String>>()?;
            println!(
                "bench server: {}, {}",
                bench::link::describe_queues(&port, cores as u16),
                port.checksums()
            );
            Ok((eal, stacks))
        });
        match opened {
            Ok((eal, stacks)) => {
                // The port's MTU, which the stack's IP packets are held to.
                let mtu = stacks[0].emss() + 40;
                let code = serve_sctp_on(stacks, mtu, args, config, Some(eal), stop);
                if transport == PeerTransport::Memif {
                    std::thread::sleep(bench::link::MEMIF_QUIET);
                }
                code
            }
            Err(why) => {
                eprintln!("bench server: {why}");
                1
            }
        }
    };
    clean_up_dpdk();
    code
}

/// The CPUs of a server's `cores` cores: `-l`'s, else one each from the
/// first (one core: wherever the scheduler puts it).
fn server_cpus(args: &Args, cores: usize) -> Vec<Option<usize>> {
    match args.link.cpus().ok().flatten() {
        Some(cpus) => (0..cores).map(|k| cpus.get(k).copied()).collect(),
        None if cores > 1 => {
            let all = dataplane::lcore::cpus();
            (0..cores).map(|k| all.get(k).copied()).collect()
        }
        None => vec![None],
    }
}

/// [`serve_sctp`] on `transports`, a core each, over paths of `mtu`
/// octets.
fn serve_sctp_on<T: dataplane::MessageTransport + Send>(
    transports: Vec<T>,
    mtu: usize,
    args: &Args,
    config: &RigConfig,
    eal: Option<dataplane::dpdk::Eal>,
    stop: &AtomicBool,
) -> i32 {
    let cores = transports.len();
    let cpus = server_cpus(args, cores);
    let host = bench::endpoint::Host::new(cores as u16, 2);
    let (region, mr) = host.register(config.memory);
    let serving = bench::responder::Serving::new(cores);
    let listen = bench::sctp::SctpListen::bench(args.port, mtu);
    let listening = std::sync::Barrier::new(cores + 1);
    let failed = AtomicBool::new(false);
    // Each core: how it ended, its streams that failed, and its device's
    // counters.
    type CoreEnd = (Served, u64, u64, dataplane::DeviceCounters);
    let results: Vec<Result<CoreEnd, String>> = std::thread::scope(|scope| {
        let threads: Vec<_> = transports
            .into_iter()
            .zip(&cpus)
            .enumerate()
            .map(|(k, (mut udp, &cpu))| {
                let (listening, failed, serving) = (&listening, &failed, &serving);
                let (host, region, listen) = (&host, region.clone(), &listen);
                scope.spawn(move || {
                    let up = dataplane::lcore::enter(cpu, eal).and_then(|pinned| {
                        bench::sctp::SctpServer::serving(
                            &mut udp,
                            listen,
                            host,
                            (k as u16, k),
                            region,
                            mr,
                            serving,
                            None,
                        )
                        .map(|server| (pinned, server))
                    });
                    if up.is_err() {
                        failed.store(true, Ordering::SeqCst);
                    }
                    listening.wait();
                    let (_pinned, mut server) = up?;
                    let served = serve_sctp_core(&mut server, &mut udp, serving, failed, stop)?;
                    Ok((
                        served,
                        server.failed(),
                        server.ended_abruptly(),
                        udp.device_counters(),
                    ))
                })
            })
            .collect();
        listening.wait();
        if !failed.load(Ordering::SeqCst) {
            println!(
                "bench server: listening on port {} (UDP: DDP over SCTP, RFC 5043, over UDP, RFC \
                 6951; {} MiB of memory, {cores} core(s)); run `bench <op> THIS_HOST -p {} --llp \
                 sctp{}` on the client",
                args.port,
                config.memory >> 20,
                args.port,
                client_options(args),
            );
        }
        bench::cores::joined(threads)
    });
    let mut code = 0;
    let mut failed_streams = 0;
    let mut abrupt = 0;
    for (k, result) in results.iter().enumerate() {
        match result {
            Err(why) => {
                eprintln!("bench server: core {k}: {why}");
                code = 1;
            }
            Ok((served, failed, ended_abruptly, _)) => {
                failed_streams += failed;
                abrupt += ended_abruptly;
                if matches!(served, Served::Idle) && code == 0 {
                    eprintln!(
                        "bench server: no client for {} s ({} stream(s) served, {} refused)",
                        IDLE_LIMIT.as_secs(),
                        serving.served(),
                        serving.refused()
                    );
                    code = 1;
                }
            }
        }
    }
    if cores > 1 {
        for (k, cpu) in cpus.iter().enumerate() {
            // Datagrams that reached this core's queue but belonged to
            // another core's association: 0 when the client steers as we
            // do (a dpwarp client on as many cores).
            let steering = match &results[k] {
                Ok((_, _, _, d)) => format!(
                    "; datagrams handed to their core: {} ({} dropped)",
                    d.rx_steered_out, d.rx_steer_dropped
                ),
                Err(_) => String::new(),
            };
            println!(
                "bench server: core {k} (CPU {}): {} stream(s){steering}",
                cpu.map_or("-".into(), |c| c.to_string()),
                serving.served_by(k)
            );
        }
    }
    // Associations that ended by the client's silence (no answer to ten
    // retransmissions or HEARTBEATs in a row) or a protocol error, not by
    // its ABORT once its streams were closed: a client killed mid-run (its
    // run still ends once its streams are gone) or a path that failed.
    if code == 0 && abrupt > 0 {
        eprintln!(
            "bench server: the client's run ended with {abrupt} association(s) timed out or \
             broken, not closed ({} stream(s) served): the client was killed or its path failed",
            serving.served()
        );
        code = 1;
    }
    if code == 0 {
        if failed_streams > 0 {
            eprintln!(
                "bench server: client gone after {} stream(s), {failed_streams} of them failed",
                serving.served(),
            );
            code = 1;
        } else if serving.runs_done() > 0 {
            println!(
                "bench server: client done after {} stream(s)",
                serving.served()
            );
        } else {
            println!("bench server: stopped after {} stream(s)", serving.served());
        }
    }
    code
}

/// One core of [`serve_sctp_on`]: its endpoint's turns until the client's
/// run is done on every core, a stop, another core's failure, or nothing
/// open for [`IDLE_LIMIT`] after a client.
fn serve_sctp_core<T: dataplane::MessageTransport>(
    server: &mut bench::sctp::SctpServer,
    udp: &mut T,
    serving: &bench::responder::Serving,
    failed: &AtomicBool,
    stop: &AtomicBool,
) -> Result<Served, String> {
    let mut idle_since = None::<Instant>;
    loop {
        if let Err(why) = server.step(udp) {
            // One stream's failure ends that stream only.
            eprintln!("bench server: {why}");
        }
        if let Some(end) = core_end(serving, failed, stop, &mut idle_since) {
            return end;
        }
    }
}

/// One server core's loop, until its client's run is done on every core,
/// `stop`, another core failed, or the client went away.
fn serve_core<T: CoreTransport>(
    server: &mut Server<T>,
    serving: &bench::responder::Serving,
    failed: &AtomicBool,
    stop: &AtomicBool,
) -> Result<Served, String> {
    let mut idle_since = None::<Instant>;
    loop {
        if let Err(why) = server.step(now()) {
            // One connection's failure ends that connection only.
            eprintln!("bench server: {why}");
        }
        if let Some(end) = core_end(serving, failed, stop, &mut idle_since) {
            return end;
        }
    }
}

/// Whether a server's core is done, after a turn: the client's run is done
/// on every core or we were stopped, another core failed, or nothing has
/// been open for [`IDLE_LIMIT`] after a client (served or refused: it went
/// away; `idle_since` keeps when that began).
fn core_end(
    serving: &bench::responder::Serving,
    failed: &AtomicBool,
    stop: &AtomicBool,
    idle_since: &mut Option<Instant>,
) -> Option<Result<Served, String>> {
    if serving.runs_done() > 0 || stop.load(Ordering::SeqCst) {
        return Some(Ok(Served::Done));
    }
    if failed.load(Ordering::SeqCst) {
        return Some(Err("stopped: another core failed".into()));
    }
    if (serving.served() > 0 || serving.refused() > 0) && serving.open() == 0 {
        let since = *idle_since.get_or_insert_with(Instant::now);
        if since.elapsed() > IDLE_LIMIT {
            return Some(Ok(Served::Idle));
        }
    } else {
        *idle_since = None;
    }
    None
}

/// The server a HOST names, on port `port`.
fn server_addr(host: &str, port: u16) -> Result<SocketAddrV4, String> {
    let addrs = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve server {host:?}: {e}"))?;
    addrs
        .filter_map(|a| match a {
            std::net::SocketAddr::V4(v4) => Some(v4),
            std::net::SocketAddr::V6(_) => None,
        })
        .next()
        .ok_or_else(|| format!("server {host:?} has no IPv4 address"))
}

/// One transport's sweep over DDP over SCTP (`--llp sctp`): both RNICs on
/// this thread.
fn run_sctp(
    args: &Args,
    plan: &Plan,
    transport: TransportKind,
    stop: &AtomicBool,
) -> Result<Vec<Report>, String> {
    let config = rig_config(args, plan);
    // Both RNICs run on this thread: `-l`'s first CPU (it was ignored).
    if let Some(cpus) = args.link.cpus()? {
        dataplane::lcore::enter_for_life(cpus.first().copied(), None)?;
    }
    let mut reports = match transport {
        TransportKind::Embedded => sweep(
            &mut bench::sctp::embedded(&config)?,
            args,
            plan,
            transport,
            stop,
        ),
        TransportKind::Kernel => sweep(
            &mut bench::sctp::kernel(&config)?,
            args,
            plan,
            transport,
            stop,
        ),
        TransportKind::Memif | TransportKind::Ring => {
            let (mut rig, info) =
                bench::sctp::dpdk(&config, &args.link, transport == TransportKind::Memif)?;
            println!(
                " 1 core: {}; {}; {}; SCTP over UDP on tcp-lite",
                info.ports, info.checksums, info.memory
            );
            sweep(&mut rig, args, plan, transport, stop)
        }
        TransportKind::Tap | TransportKind::NetTap | TransportKind::AfPacket => {
            in_namespace(args, transport, |eal| {
                namespace_run_sctp(args, plan, transport, &config, eal, stop)
            })
        }
        TransportKind::Remote(PeerTransport::Kernel) => {
            let Role::Client(host) = &plan.role else {
                return Err("no server address".into());
            };
            let server = server_addr(host, args.port)?;
            sweep(
                &mut bench::sctp::remote(&config, server)?,
                args,
                plan,
                transport,
                stop,
            )
        }
        TransportKind::Remote(peer) => {
            let Role::Client(host) = &plan.role else {
                return Err("no server address".into());
            };
            let server = server_addr(host, args.port)?;
            let (mut rig, info) = bench::sctp::remote_dpdk(&config, &args.link, peer, server)?;
            let cpus = args.link.cpus()?.unwrap_or_default();
            if let Some(&cpu) = cpus.first() {
                dataplane::lcore::enter_for_life(Some(cpu), Some(info.eal))?;
            }
            println!(
                " 1 core: {}; {}; SCTP over UDP on tcp-lite, to {server}",
                info.ports, info.checksums
            );
            // A memif port stays quiet a while before it closes (the rig's
            // drop: its association's ABORT first).
            sweep(&mut rig, args, plan, transport, stop)
        }
    }?;
    for r in &mut reports {
        r.llp = LlpArg::Sctp.name();
    }
    Ok(reports)
}

fn run_transport(
    args: &Args,
    plan: &Plan,
    transport: TransportKind,
    stop: &AtomicBool,
) -> Result<Vec<Report>, String> {
    let mut config = rig_config(args, plan);
    let cpus = args.link.cpus()?.unwrap_or_else(dataplane::lcore::cpus);
    // One pinned core per RNIC, where there are two CPUs and it is asked.
    let split = !args.shared_core && cpus.len() >= 2;
    // `-l` where both RNICs share this thread: its first CPU.
    let pinned = args.link.lcores.is_some();
    match transport {
        TransportKind::Embedded => {
            let mut rig = rig::embedded(&config)?;
            if pinned {
                rig.pin(cpus.first().copied(), None)?;
            }
            sweep(&mut rig, args, plan, transport, stop)
        }
        TransportKind::Kernel => {
            // Next to a TAP or embedded run's port, never the same.
            config.port = args.port.wrapping_add(1).max(1);
            let mut rig = rig::kernel(&config)?;
            rig.place(&cpus, split, pinned, None)?;
            sweep(&mut rig, args, plan, transport, stop)
        }
        TransportKind::Memif | TransportKind::Ring => {
            let memif = transport == TransportKind::Memif;
            let (mut rig, info) = rig::dpdk_pair(&config, &args.link, memif)?;
            rig.place(&cpus, split, pinned, Some(info.eal))?;
            say_dpdk(&info, &rig);
            sweep(&mut rig, args, plan, transport, stop)
        }
        TransportKind::Tap | TransportKind::NetTap | TransportKind::AfPacket => {
            in_namespace(args, transport, |eal| {
                namespace_run(args, plan, transport, &config, eal, split, &cpus, stop)
            })
        }
        TransportKind::Remote(peer) => {
            let Role::Client(host) = &plan.role else {
                return Err("no server address".into());
            };
            let server = server_addr(host, args.port)?;
            if peer == PeerTransport::Kernel {
                let mut rig = rig::remote(&config, server)?;
                if pinned {
                    rig.pin(cpus.first().copied(), None)?;
                }
                return sweep(&mut rig, args, plan, transport, stop);
            }
            let (mut rig, info) = rig::remote_dpdk(&config, &args.link, peer, server)?;
            if pinned {
                rig.pin(cpus.first().copied(), Some(info.eal))?;
            }
            say_dpdk(&info, &rig);
            let reports = sweep(&mut rig, args, plan, transport, stop);
            if peer == PeerTransport::Memif {
                std::thread::sleep(bench::link::MEMIF_QUIET);
            }
            reports
        }
    }
}

/// A run on a transport whose server is Linux TCP in a namespace made for
/// it: the old TAP fd, DPDK's TAP driver, or DPDK's AF_PACKET driver.
#[allow(clippy::too_many_arguments)]
fn namespace_run(
    args: &Args,
    plan: &Plan,
    transport: TransportKind,
    config: &RigConfig,
    eal: Option<(dataplane::dpdk::Eal, String)>,
    split: bool,
    cpus: &[usize],
    stop: &AtomicBool,
) -> Result<Vec<Report>, String> {
    match (transport, eal) {
        (TransportKind::Tap, _) => {
            let (mut rig, netns) = rig::tap(config)?;
            rig.place(cpus, split, args.link.lcores.is_some(), None)?;
            sweep_in(rig, netns, args, plan, transport, stop)
        }
        (_, Some((eal, memory))) => {
            let af_packet = transport == TransportKind::AfPacket;
            let (mut rig, netns, mut info) = rig::dpdk_kernel(config, &args.link, eal, af_packet)?;
            info.memory = memory;
            rig.place(cpus, split, args.link.lcores.is_some(), Some(eal))?;
            say_dpdk(&info, &rig);
            sweep_in(rig, netns, args, plan, transport, stop)
        }
        (_, None) => Err("DPDK did not start".into()),
    }
}

/// Runs `run` on a thread of its own, which the rig makes enter the run's
/// namespace; the namespace (and its devices) go when the thread is done.
/// DPDK (for the transports that need it) starts here, outside the
/// namespace: its threads must not keep the namespace alive after the run.
fn in_namespace(
    args: &Args,
    transport: TransportKind,
    run: impl FnOnce(Option<(dataplane::dpdk::Eal, String)>) -> Result<Vec<Report>, String> + Send,
) -> Result<Vec<Report>, String> {
    let eal = match transport {
        TransportKind::Tap => None,
        _ => Some(dataplane::ports::start_eal(args.link.hugepages(), &[])?),
    };
    std::thread::scope(|scope| {
        scope
            .spawn(|| run(eal))
            .join()
            .map_err(|_| "the run's thread panicked".to_string())?
    })
}

/// [`namespace_run`] over DDP over SCTP: the client on tcp-lite's UDP over
/// the TAP device or the DPDK port, the server on Linux UDP in the
/// namespace; both RNICs on this thread.
fn namespace_run_sctp(
    args: &Args,
    plan: &Plan,
    transport: TransportKind,
    config: &RigConfig,
    eal: Option<(dataplane::dpdk::Eal, String)>,
    stop: &AtomicBool,
) -> Result<Vec<Report>, String> {
    match (transport, eal) {
        (TransportKind::Tap, _) => {
            let (rig, netns) = bench::sctp::tap(config)?;
            println!(" 1 core: TAP device; the server on Linux UDP in the run's namespace");
            sweep_in(rig, netns, args, plan, transport, stop)
        }
        (_, Some((eal, memory))) => {
            let af_packet = transport == TransportKind::AfPacket;
            let (rig, netns, info) = bench::sctp::dpdk_kernel(config, &args.link, eal, af_packet)?;
            println!(
                " 1 core: {}; {}; {memory}; SCTP over UDP on tcp-lite, the server on Linux UDP \
                 in the run's namespace",
                info.ports, info.checksums
            );
            sweep_in(rig, netns, args, plan, transport, stop)
        }
        (_, None) => Err("DPDK did not start".into()),
    }
}

/// One line on what a DPDK rig runs on.
fn say_dpdk<C: CoreTransport, S: CoreTransport>(info: &rig::DpdkInfo, rig: &rig::Rig<C, S>) {
    let cores: Vec<String> = rig
        .core_reports()
        .iter()
        .map(|c| match c.cpu {
            Some(cpu) => format!("{} on CPU {cpu}", c.role),
            None => format!("{} unpinned", c.role),
        })
        .collect();
    let memory = if info.memory.is_empty() {
        String::new()
    } else {
        format!("; {}", info.memory)
    };
    println!(
        " {}: {}; {}{memory}; {} core(s): {}",
        if rig.cores() == 2 {
            "2 cores"
        } else {
            "1 core"
        },
        info.ports,
        info.checksums,
        rig.cores(),
        cores.join(", ")
    );
}

/// [`sweep`] on a rig in a namespace made for the run: the rig goes
/// first, then the namespace and its devices.
fn sweep_in<R: BenchRig>(
    mut rig: R,
    netns: tcp_lite::sys::netns::Netns,
    args: &Args,
    plan: &Plan,
    transport: TransportKind,
    stop: &AtomicBool,
) -> Result<Vec<Report>, String> {
    let reports = sweep(&mut rig, args, plan, transport, stop);
    drop(rig);
    drop(netns);
    reports
}

fn sweep<R: BenchRig>(
    rig: &mut R,
    args: &Args,
    plan: &Plan,
    transport: TransportKind,
    stop: &AtomicBool,
) -> Result<Vec<Report>, String> {
    let mut out = Vec::new();
    for (i, &size) in plan.sizes.iter().enumerate() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let spec = Spec {
            op: plan.op,
            mode: plan.mode,
            size,
            stop: plan.stop,
            depth: args.depth,
            qps: args.qps,
            urgent: args.urgent,
            dscp: args.dscp(),
        };
        let last = i + 1 == plan.sizes.len();
        // A progress bar on runs of a second or more (a hidden one otherwise).
        let bar = match plan.stop {
            Stop::Duration(d) if d.as_secs_f64() >= 1.0 => ProgressBar::new(1000),
            _ if plan.sizes.len() == 1 => ProgressBar::new(1000),
            _ => ProgressBar::hidden(),
        };
        bar.set_style(
            ProgressStyle::with_template("{prefix} [{bar:40}] {percent}% {elapsed}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.set_prefix(format!("{} {} B", transport.name(), size));
        let started = std::time::Instant::now();
        let before = rig.core_reports();
        let (beside, busy) = args.beside();
        let measured = workload::run_beside(rig, &spec, beside, busy, last, stop, &mut |f| {
            if started.elapsed().as_secs_f64() >= 1.0 {
                bar.set_position((f * 1000.0) as u64);
            }
        })?;
        bar.finish_and_clear();
        let per_core = rig
            .core_reports()
            .into_iter()
            .zip(&before)
            .map(|(after, before)| bench::rig::CoreReport {
                counters: after.counters.since(&before.counters),
                ..after
            })
            .collect();
        out.push(Report {
            op: plan.op,
            mode: plan.mode,
            size,
            transport: transport.name(),
            llp: LlpArg::Mpa.name(),
            cores: rig.cores(),
            per_core,
            measured,
        });
    }
    Ok(out)
}

fn print_tables(args: &Args, plan: &Plan, reports: &[Report]) {
    if reports.is_empty() {
        return;
    }
    println!();
    match plan.mode {
        Mode::Bandwidth => {
            println!("{}", report::bw_header(args.report_gbits));
            for r in reports {
                println!("{}", report::bw_row(r, args.report_gbits));
            }
        }
        Mode::Latency => {
            println!("{}", report::lat_header());
            for r in reports {
                println!("{}", report::lat_row(r));
            }
            for r in reports.iter().filter(|r| r.measured.beside > 0) {
                println!(
                    " {} {} B: {} Writes completed on the {} busy QP(s) meanwhile ({:.3} M/s)",
                    r.transport,
                    r.size,
                    r.measured.beside,
                    args.active,
                    r.measured.beside as f64 / r.measured.elapsed.as_secs_f64().max(1e-9) / 1e6
                );
            }
        }
    }
    // Same-run comparison: the first transport against each baseline, per
    // size.
    if !args.compare.is_empty() {
        let first = reports[0].label();
        println!();
        for r in reports.iter().filter(|r| r.label() == first) {
            for base in reports
                .iter()
                .filter(|b| b.label() != first && b.size == r.size)
            {
                match plan.mode {
                    Mode::Bandwidth => println!(
                        " {} B: {} / {} = {:.2}x the bandwidth",
                        r.size,
                        r.label(),
                        base.label(),
                        r.gbit_s() / base.gbit_s().max(1e-12)
                    ),
                    Mode::Latency => {
                        let p =
                            |x: &Report, q: f64| x.measured.latency.value_at_percentile(q) as f64;
                        // "2.00x faster" or "4.00x slower", never "0.25x faster".
                        let how = |ratio: f64| {
                            if ratio >= 1.0 {
                                format!("{ratio:.2}x faster")
                            } else {
                                format!("{:.2}x slower", 1.0 / ratio.max(1e-12))
                            }
                        };
                        println!(
                            " {} B: {} is {} at p50, {} at p99 than {}",
                            r.size,
                            r.label(),
                            how(p(base, 50.0) / p(r, 50.0).max(1.0)),
                            how(p(base, 99.0) / p(r, 99.0).max(1.0)),
                            base.label()
                        );
                    }
                }
            }
        }
    }
}

/// Where the results go, checked before anything runs: an unwritable
/// `--json` or `--out` was found only after the whole run (found by a
/// review). A `--json` file that did not exist is not left behind.
fn check_outputs(args: &Args, plan: &Plan) -> Result<(), String> {
    if plan.mode == Mode::Latency && plan.role != Role::Server {
        let refused = |e: std::io::Error| {
            format!(
                "--out {}: {e}: give a directory to write",
                args.out.display()
            )
        };
        std::fs::create_dir_all(&args.out).map_err(refused)?;
        // A directory that exists may still refuse files (`/`, for a user;
        // `/proc` even for root): write one and take it back (found by a
        // review: the run's files, and the JSON report after them, were
        // lost at the end).
        let probe = args
            .out
            .join(format!(".bench-out-probe-{}", std::process::id()));
        std::fs::write(&probe, b"").map_err(refused)?;
        let _ = std::fs::remove_file(&probe);
    }
    if let Some(path) = &args.json {
        report::check_json_output(path)?;
    }
    Ok(())
}

fn write_files(args: &Args, plan: &Plan, reports: &[Report]) -> Result<(), String> {
    // The JSON report first: a histogram file that cannot be written
    // (the directory changed during the run) loses no more than itself.
    if let Some(path) = &args.json {
        let doc =
            serde_json::json!({ "results": reports.iter().map(Report::json).collect::<Vec<_>>() });
        let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        println!("JSON report: {}", path.display());
    }
    if plan.mode == Mode::Latency && !reports.is_empty() {
        std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
        for r in reports {
            let base = args.out.join(r.stem());
            let hgrm = base.with_extension("hgrm");
            std::fs::write(&hgrm, report::hgrm(&r.measured.latency))
                .map_err(|e| format!("{}: {e}", hgrm.display()))?;
            report::write_interval_log(
                &base.with_extension("hlog"),
                &r.measured.intervals,
                r.measured.elapsed,
            )?;
        }
        // One plot per size, every transport on it.
        let mut sizes: Vec<usize> = reports.iter().map(|r| r.size).collect();
        sizes.dedup();
        for size in sizes {
            let series: Vec<_> = reports
                .iter()
                .filter(|r| r.size == size)
                .map(|r| (r.label(), &r.measured.latency))
                .collect();
            let title = format!("{} latency, {} B", plan.op.name(), size);
            let path = args
                .out
                .join(format!("{}_lat_{}B.svg", plan.op.name(), size));
            let series: Vec<_> = series.iter().map(|(l, h)| (l.as_str(), *h)).collect();
            std::fs::write(&path, report::svg(&title, &series))
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
        println!(
            "\nhistograms (.hgrm), interval logs (.hlog) and plots (.svg) in {}",
            args.out.display()
        );
    }
    Ok(())
}
