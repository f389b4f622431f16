//! `bench`: see `bench --help` and the README's "Benchmark" section.
#![allow(clippy::disallowed_methods)] // A benchmark reads the clock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use std::net::{SocketAddrV4, ToSocketAddrs};
use std::time::{Duration, Instant};

use bench::args::{Args, Plan, Role, TransportArg};
use bench::endpoint::now;
use bench::link::PeerTransport;
use bench::report::{self, Report};
use bench::responder::Server;
use bench::rig::{self, RigConfig, TransportKind};
use bench::spec::{memory_for, Mode, Spec, Stop};
use bench::workload;
use clap::Parser;
use dataplane::CoreTransport;
use indicatif::{ProgressBar, ProgressStyle};

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    let tool = match argv.get(1).map(String::as_str) {
        Some("rping") => Some(bench::rping::main as fn(Vec<String>, &AtomicBool) -> i32),
        Some("perftest") => Some(bench::perftest::main as fn(Vec<String>, &AtomicBool) -> i32),
        Some("port") => Some(bench::portcost::main as fn(Vec<String>, &AtomicBool) -> i32),
        Some("connect") => Some(bench::connect::main as fn(Vec<String>, &AtomicBool) -> i32),
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
    let plan = match args.plan() {
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
    let mut transports = vec![match &plan.role {
        Role::Local(t) => kind(*t),
        _ => TransportKind::Remote(
            args.transport
                .and_then(TransportArg::peer)
                .unwrap_or(PeerTransport::Kernel),
        ),
    }];
    transports.extend(args.compare.iter().map(|&c| kind(c)));
    let mut reports: Vec<Report> = Vec::new();
    let shape = match plan.mode {
        Mode::Bandwidth => format!(
            "bandwidth | {} QP(s), {} in flight each",
            args.qps, args.depth
        ),
        Mode::Latency if args.active > 0 => format!(
            "latency | 1 QP, 1 in flight, beside {} QP(s) with {} Writes in flight each",
            args.active, args.depth
        ),
        Mode::Latency => "latency | 1 QP, 1 in flight".to_string(),
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
    println!(
        "{} {} | MPA CRC {}, markers {} | MTU {}{checksums}",
        plan.op.name(),
        shape,
        if args.no_crc { "off" } else { "on" },
        if args.markers { "on" } else { "off" },
        args.mtu(),
    );
    for &transport in &transports {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        match run_transport(&args, &plan, transport, &stop) {
            Ok(mut r) => reports.append(&mut r),
            Err(why) => {
                eprintln!("bench: {} transport: {why}", transport.name());
                print_tables(&args, &plan, &reports);
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
    let kind = match args.transport {
        Some(TransportArg::Memif) => CoreLink::Memif,
        Some(TransportArg::Ring) => CoreLink::Ring,
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
    };
    println!(
        "{} bandwidth | {} QP(s) spread over the cores, {} in flight each | {} per core, \
         both ends of its connections on it | MPA CRC {}, markers {} | MTU {}",
        plan.op.name(),
        args.qps,
        args.depth,
        kind.name(),
        if args.no_crc { "off" } else { "on" },
        if args.markers { "on" } else { "off" },
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
        // Refused by Args::plan for in-process runs.
        TransportArg::Pci => TransportKind::Remote(PeerTransport::Pci),
    }
}

fn rig_config(args: &Args, plan: &Plan) -> RigConfig {
    let largest = *plan.sizes.iter().max().unwrap_or(&8);
    RigConfig {
        crc: !args.no_crc,
        markers: args.markers,
        mtu: args.mtu(),
        memory: memory_for(args.qps + args.active, largest),
        port: args.port,
        sw_checksums: args.link.sw_checksums,
    }
}

/// `--server`: serve one client's run (every size it brings), then exit.
fn serve(args: &Args, plan: &Plan, stop: &AtomicBool) -> i32 {
    let mut config = rig_config(args, plan);
    // Room for one QP of the largest size -a reaches, whatever -s said.
    config.memory = config.memory.max(memory_for(1, bench::args::SIZE_MAX));
    let transport = args
        .transport
        .and_then(TransportArg::peer)
        .unwrap_or(PeerTransport::Kernel);
    let code = if transport == PeerTransport::Kernel {
        let kc = tcp_lite::sys::kernel::KernelConfig {
            rx_buffer: 4 << 20,
            tx_buffer: 4 << 20,
            ..Default::default()
        };
        match tcp_lite::sys::kernel::KernelTransport::new(kc) {
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
        let opened = bench::link::dpdk_port(transport, &args.link, args.mtu(), true, "dpwbench0")
            .and_then(|(eal, port)| {
                let ip = args.link.address()?;
                let lossless = transport == PeerTransport::Memif;
                let stack = bench::link::dpdk_stack(&port, ip, lossless)?;
                println!("bench server: {}, {}", port.describe, port.checksums());
                Ok((eal, stack))
            });
        match opened {
            Ok((eal, stack)) => {
                let emss = stack.emss();
                let quiet = if transport == PeerTransport::Memif {
                    bench::link::MEMIF_QUIET
                } else {
                    Duration::ZERO
                };
                serve_on(stack, emss, args, &config, Some(eal), stop, quiet)
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

/// Serves on `transport`, pinned to the first CPU of -l if given; stays
/// `quiet` (no turn) before it lets the transport go (see `MEMIF_QUIET`).
fn serve_on<T: CoreTransport>(
    transport: T,
    emss: usize,
    args: &Args,
    config: &RigConfig,
    eal: Option<dataplane::dpdk::Eal>,
    stop: &AtomicBool,
    quiet: Duration,
) -> i32 {
    let code = serve_until_done(transport, emss, args, config, eal, stop);
    std::thread::sleep(quiet);
    code
}

fn serve_until_done<T: CoreTransport>(
    transport: T,
    emss: usize,
    args: &Args,
    config: &RigConfig,
    eal: Option<dataplane::dpdk::Eal>,
    stop: &AtomicBool,
) -> i32 {
    let mut server = Server::new(transport, emss, config.memory, args.port, config.startup());
    if let Err(why) = server.wait_listening() {
        eprintln!("bench server: {why}");
        return 1;
    }
    let cpu = args
        .link
        .cpus()
        .ok()
        .flatten()
        .and_then(|c| c.first().copied());
    let _pinned = match dataplane::lcore::enter(cpu, eal) {
        Ok(p) => p,
        Err(why) => {
            eprintln!("bench server: {why}");
            return 1;
        }
    };
    println!(
        "bench server: listening on port {} (MPA CRC {}, markers {}, {} MiB of memory); \
         run `bench <op> THIS_HOST -p {}` on the client",
        args.port,
        if args.no_crc { "off" } else { "on" },
        if args.markers { "on" } else { "off" },
        config.memory >> 20,
        args.port,
    );
    // A client that vanished mid-run (killed, Ctrl-C) is given up on after
    // this long without a connection.
    const IDLE_LIMIT: Duration = Duration::from_secs(10);
    let mut idle_since = None::<Instant>;
    let mut failures = 0u64;
    loop {
        if let Err(why) = server.step(now()) {
            eprintln!("bench server: {why}");
            failures += 1;
        }
        if server.client_done {
            println!(
                "bench server: client done after {} connection(s)",
                server.served
            );
            return 0;
        }
        if stop.load(Ordering::SeqCst) {
            println!(
                "bench server: stopped after {} connection(s)",
                server.served
            );
            return 0;
        }
        // Idle after a client (served or refused): it went away.
        if (server.served > 0 || server.refused() > 0) && server.endpoint.open_connections() == 0 {
            let since = *idle_since.get_or_insert_with(Instant::now);
            if since.elapsed() > IDLE_LIMIT {
                eprintln!(
                    "bench server: no client for {} s ({} connection(s) served, {} refused, \
                     {failures} failed)",
                    IDLE_LIMIT.as_secs(),
                    server.served,
                    server.refused()
                );
                return 1;
            }
        } else {
            idle_since = None;
        }
    }
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
    let place = |cores: &[usize]| -> (Option<usize>, Option<usize>) {
        (cores.first().copied(), cores.get(1).copied())
    };
    match transport {
        TransportKind::Embedded => sweep(&mut rig::embedded(&config)?, args, plan, transport, stop),
        TransportKind::Kernel => {
            // Next to a TAP or embedded run's port, never the same.
            config.port = args.port.wrapping_add(1).max(1);
            let mut rig = rig::kernel(&config)?;
            if split {
                let (c, s) = place(&cpus);
                rig.split(c, s, None)?;
            }
            sweep(&mut rig, args, plan, transport, stop)
        }
        TransportKind::Memif | TransportKind::Ring => {
            let memif = transport == TransportKind::Memif;
            let (mut rig, info) = rig::dpdk_pair(&config, &args.link, memif)?;
            if split {
                let (c, s) = place(&cpus);
                rig.split(c, s, Some(info.eal))?;
            }
            say_dpdk(&info, &rig);
            sweep(&mut rig, args, plan, transport, stop)
        }
        TransportKind::Tap | TransportKind::NetTap | TransportKind::AfPacket => {
            // DPDK starts outside the run's namespace: its threads must not
            // keep the namespace (and its devices) alive after the run.
            let eal = match transport {
                TransportKind::Tap => None,
                _ => Some(dataplane::ports::start_eal(args.link.hugepages(), &[])?),
            };
            // The rig's thread enters the run's namespace; the namespace
            // (and the devices) go when it is done.
            std::thread::scope(|scope| {
                scope
                    .spawn(|| {
                        namespace_run(args, plan, transport, &config, eal, split, &cpus, stop)
                    })
                    .join()
                    .map_err(|_| "the run's thread panicked".to_string())?
            })
        }
        TransportKind::Remote(peer) => {
            let Role::Client(host) = &plan.role else {
                return Err("no server address".into());
            };
            let server = server_addr(host, args.port)?;
            if peer == PeerTransport::Kernel {
                return sweep(
                    &mut rig::remote(&config, server)?,
                    args,
                    plan,
                    transport,
                    stop,
                );
            }
            let (mut rig, info) = rig::remote_dpdk(&config, &args.link, peer, server)?;
            let (c, _) = place(&cpus);
            if args.link.lcores.is_some() {
                let pinned = dataplane::lcore::enter(c, Some(info.eal))?;
                std::mem::forget(pinned);
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
    let (c, s) = (cpus.first().copied(), cpus.get(1).copied());
    match (transport, eal) {
        (TransportKind::Tap, _) => {
            let (mut rig, netns) = rig::tap(config)?;
            if split {
                rig.split(c, s, None)?;
            }
            let reports = sweep(&mut rig, args, plan, transport, stop);
            drop(rig);
            drop(netns);
            reports
        }
        (_, Some((eal, memory))) => {
            let af_packet = transport == TransportKind::AfPacket;
            let (mut rig, netns, mut info) = rig::dpdk_kernel(config, &args.link, eal, af_packet)?;
            info.memory = memory;
            if split {
                rig.split(c, s, Some(eal))?;
            }
            say_dpdk(&info, &rig);
            let reports = sweep(&mut rig, args, plan, transport, stop);
            drop(rig);
            drop(netns);
            reports
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

fn sweep<C: CoreTransport, S: CoreTransport>(
    rig: &mut rig::Rig<C, S>,
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
        let measured = workload::run_beside(rig, &spec, args.active, last, stop, &mut |f| {
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
        let first = reports[0].transport;
        println!();
        for r in reports.iter().filter(|r| r.transport == first) {
            for base in reports
                .iter()
                .filter(|b| b.transport != first && b.size == r.size)
            {
                match plan.mode {
                    Mode::Bandwidth => println!(
                        " {} B: {} / {} = {:.2}x the bandwidth",
                        r.size,
                        r.transport,
                        base.transport,
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
                            r.transport,
                            how(p(base, 50.0) / p(r, 50.0).max(1.0)),
                            how(p(base, 99.0) / p(r, 99.0).max(1.0)),
                            base.transport
                        );
                    }
                }
            }
        }
    }
}

fn write_files(args: &Args, plan: &Plan, reports: &[Report]) -> Result<(), String> {
    if plan.mode == Mode::Latency && !reports.is_empty() {
        std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
        for r in reports {
            let base = args.out.join(r.stem());
            let hgrm = base.with_extension("hgrm");
            std::fs::write(&hgrm, report::hgrm(&r.measured.latency))
                .map_err(|e| format!("{}: {e}", hgrm.display()))?;
            report::write_interval_log(&base.with_extension("hlog"), &r.measured.intervals)?;
        }
        // One plot per size, every transport on it.
        let mut sizes: Vec<usize> = reports.iter().map(|r| r.size).collect();
        sizes.dedup();
        for size in sizes {
            let series: Vec<_> = reports
                .iter()
                .filter(|r| r.size == size)
                .map(|r| (r.transport, &r.measured.latency))
                .collect();
            let title = format!("{} latency, {} B", plan.op.name(), size);
            let path = args
                .out
                .join(format!("{}_lat_{}B.svg", plan.op.name(), size));
            std::fs::write(&path, report::svg(&title, &series))
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
        println!(
            "\nhistograms (.hgrm), interval logs (.hlog) and plots (.svg) in {}",
            args.out.display()
        );
    }
    if let Some(path) = &args.json {
        let doc =
            serde_json::json!({ "results": reports.iter().map(Report::json).collect::<Vec<_>>() });
        let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        println!("JSON report: {}", path.display());
    }
    Ok(())
}
