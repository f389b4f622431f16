//! `bench connect`: how many connections dpwarp establishes per second,
//! and how long each takes: the TCP handshake and RFC 6581's enhanced MPA
//! startup (revision 2, IRD/ORD negotiated, the peer-to-peer model with
//! its RTR) through the control-plane thread, to Full Operation on both
//! ends, then an orderly close, in a loop.
//!
//! Two RNICs run in this process, each a `dataplane::Core` (its transport,
//! its engine, its QPs), and share one control-plane thread, as two cores
//! of one RNIC would: every startup of both ends runs on that thread. One
//! thread turns both cores. The initiator's private data carries the
//! connection's number (8 octets), so the responder's handoff is matched
//! to its connect.
//!
//! One connection, as measured:
//!
//! 1. `ControlPlane::connect` (the latency clock starts); the core opens
//!    TCP, the control plane runs the initiator, the listener's core
//!    accepts and the control plane runs the responder, whose callback
//!    always accepts (the configured IRD/ORD).
//! 2. The initiator's handoff reports Established with its QP (the
//!    latency clock stops); the responder's does too, its QP fenced (RFC
//!    5044 §7.1). The connection counts once both have, if that is within
//!    the timed window.
//! 3. The initiator's QP sends the RTR (RFC 6581 §9.2; a zero-length RDMA
//!    Write, the one both ends offer), and the responder's QP takes it
//!    (all its octets reach the engine and the QP stays in RTS): both QPs
//!    are in Full Operation, as the engine sees it.
//! 4. The responder closes (FIN); the initiator's core answers with its
//!    FIN once the peer's octets are in; both QPs end. The responder is the
//!    active closer, so kernel TCP keeps TIME-WAIT on the server's side and
//!    the initiator's ephemeral port is free again at once (Linux takes a
//!    new SYN for a four-tuple in TIME-WAIT when its sequence number or
//!    timestamp is newer, RFC 6191); tcp-lite frees a socket in TIME-WAIT
//!    once the core releases it.
//!
//! At most `--parallel` startups are in flight at once (from the connect
//! to both handoffs), and at most twice that many connections are open
//! (startups and closes). Anything else is a failure, counted by reason:
//! a startup that fails or is rejected, a handoff without a QP or not
//! enhanced, a QP that ends before the RTR was taken, a Terminate, a
//! connection not done in [`CONNECTION_LIMIT`].

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use control::mpa::{Accept, Role, StartupConfig};
use control::runtime::{ControlPlane, CoreLink, Decision, Handoff, StartupResult};
use dataplane::{Core, CoreConfig, CoreTransport};
use hdrhistogram::Histogram;
use rnic_engine::cq::Wc;
use rnic_engine::qp::QpState;
use rnic_engine::verbs::{CqHandle, QpHandle, QpInit, Rnic, RnicConfig};
use rnic_engine::wire::{ddp, mpa_fpdu};
use serde_json::json;
use tcp_lite::link::{self, LinkConfig, LinkEnd};
use tcp_lite::sys::kernel::{KernelConfig, KernelTransport};
use tcp_lite::{CongestionControl, Stack, StackConfig, TcpConfig};

use crate::connect_report::{process_cpu, thread_cpu};
pub use crate::connect_report::{ConnectReport, Settings, CONNECTION_LIMIT};
use crate::endpoint::{now, QUEUE_DEPTH};

/// The listener's port unless `-p` says otherwise (perftest's).
pub const PORT: u16 = 18515;
/// TCP buffers per connection each way unless `--tcp-buffer` says
/// otherwise, in KiB: what `bench`'s embedded link and tcp-lite's kernel
/// transport give every connection.
pub const TCP_BUFFER_KIB: usize = 256;
/// The most startups `--parallel` may keep in flight.
pub const PARALLEL_MAX: usize = 256;
/// The IP MTU of the embedded link and the EMSS the kernel's FPDUs are
/// sized for (bench's default).
const MTU: usize = 9000;
/// Octets of the connection number in the initiator's private data.
const ID_LEN: usize = 8;
/// The RTR on the wire: a zero-length RDMA Write, one FPDU of a tagged DDP
/// header (no markers, CRC field present, as RFC 5044 §6 frames it).
const RTR_FPDU_LEN: u64 = mpa_fpdu::fpdu_len(ddp::TAGGED_HEADER_LEN) as u64;

/// `bench connect`'s command line.
#[derive(Debug, Parser)]
#[command(
    name = "bench connect",
    bin_name = "bench connect",
    about = "connection establishment: the TCP handshake and RFC 6581's enhanced MPA startup \
             to Full Operation on both ends, then a close, in a loop"
)]
pub struct ConnectArgs {
    /// Seconds per transport.
    #[arg(short = 'D', long, default_value_t = 5.0)]
    pub duration: f64,

    /// Write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,

    /// The transport (without --transport and --compare: embedded, then
    /// kernel).
    #[arg(long, value_enum)]
    pub transport: Option<Transport>,

    /// Run the same over these transports too, in this invocation.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub compare: Vec<Transport>,

    /// The listener's port (kernel TCP on loopback).
    #[arg(short = 'p', long, default_value_t = PORT)]
    pub port: u16,

    /// Startups in flight at once (1: the rate is latency-bound).
    #[arg(long, default_value_t = 16)]
    pub parallel: usize,

    /// Pin the thread that turns both cores to this CPU (default: the
    /// scheduler places it; the control-plane thread is never pinned).
    #[arg(long)]
    pub cpu: Option<usize>,

    /// MPA CRC off (on by default).
    #[arg(long)]
    pub no_crc: bool,

    /// TCP buffers of every connection, each way, in KiB: smoltcp's socket
    /// buffers on the embedded link, the kernel transport's rings and
    /// `SO_RCVBUF`/`SO_SNDBUF` (default: bench's embedded link and
    /// tcp-lite's kernel transport, 256). MPA over TCP only.
    #[arg(long)]
    pub tcp_buffer: Option<usize>,

    /// The lower layer: `mpa` (TCP and RFC 6581's MPA startup, the
    /// default) or `sctp`: an SCTP association over UDP (RFC 6951; the
    /// kernel transport is Linux UDP) and one DDP stream on it opened with
    /// RFC 6581 §7's Enhanced Initiate and Accept, then an ABORT.
    #[arg(long, value_enum, default_value = "mpa")]
    pub llp: crate::args::LlpArg,
}

/// What joins the two RNICs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Transport {
    /// tcp-lite (smoltcp) over the in-memory link.
    Embedded,
    /// Linux TCP over loopback.
    Kernel,
}

impl Transport {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Embedded => "embedded",
            Transport::Kernel => "kernel",
        }
    }
}

/// Runs `bench connect`; returns the exit status.
pub fn main(argv: Vec<String>, stop: &AtomicBool) -> i32 {
    let args = match ConnectArgs::try_parse_from(argv) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    let settings = match check(&args) {
        Ok(s) => s,
        Err(why) => {
            eprintln!("bench connect: {why}");
            return 2;
        }
    };
    let transports = transports(&args);
    println!("{}", banner(&settings, args.llp));
    let mut reports = Vec::new();
    let mut code = 0;
    for &t in &transports {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let result = match args.llp {
            crate::args::LlpArg::Mpa => run(t, &settings, stop),
            crate::args::LlpArg::Sctp => {
                crate::sctp::connect_loop(t == Transport::Kernel, &settings, stop)
            }
        };
        match result {
            Ok(r) => reports.push(r),
            Err(why) => {
                eprintln!("bench connect: {} transport: {why}", t.name());
                code = 1;
                break;
            }
        }
    }
    print_table(&reports);
    // A failure, a connection left behind, or none measured (found by a
    // review: a run shorter than one establishment reported a rate of 0
    // with status 0) fails the run.
    let unhealthy = |r: &ConnectReport| {
        r.failed() > 0 || r.left_open != [0, 0] || r.left_in_startup != [0, 0] || r.connects == 0
    };
    if reports.iter().any(unhealthy) {
        code = 1;
    }
    if let Some(path) = &args.json {
        let doc = json!({ "results": reports.iter().map(ConnectReport::json).collect::<Vec<_>>() });
        let written = serde_json::to_string_pretty(&doc)
            .map_err(|e| e.to_string())
            .and_then(|text| std::fs::write(path, text).map_err(|e| e.to_string()));
        match written {
            Ok(()) => println!("JSON report: {}", path.display()),
            Err(why) => {
                eprintln!("bench connect: {}: {why}", path.display());
                code = 1;
            }
        }
    }
    code
}

/// The arguments as settings, or what to fix.
fn check(args: &ConnectArgs) -> Result<Settings, String> {
    let min = crate::args::DURATION_MIN;
    if !(min..=3600.0).contains(&args.duration) {
        return Err(format!(
            "-D {}: give a duration in seconds from {min} to 3600 (a shorter one \
             measures no connection)",
            args.duration
        ));
    }
    if !(1..=PARALLEL_MAX).contains(&args.parallel) {
        return Err(format!(
            "--parallel {}: give 1 to {PARALLEL_MAX}",
            args.parallel
        ));
    }
    let tcp_buffer = args.tcp_buffer.unwrap_or(TCP_BUFFER_KIB);
    if !(4..=4096).contains(&tcp_buffer) {
        return Err(format!("--tcp-buffer {tcp_buffer}: give 4 to 4096 KiB"));
    }
    if args.llp == crate::args::LlpArg::Sctp {
        // DDP over SCTP has no MPA and no TCP: these would be ignored.
        let given = [
            ("--no-crc", args.no_crc),
            ("--tcp-buffer", args.tcp_buffer.is_some()),
        ];
        if let Some((name, _)) = given.iter().find(|(_, set)| *set) {
            return Err(format!(
                "{name} is for MPA over TCP, and --llp sctp runs neither (SCTP checks its own \
                 CRC32c; its buffers are the association's): drop {name}"
            ));
        }
    }
    if args.port == 0 {
        return Err("-p 0: give the listener a port".into());
    }
    if let Some(path) = &args.json {
        crate::report::check_json_output(path)?;
    }
    if let Some(cpu) = args.cpu {
        let allowed = dataplane::lcore::cpus();
        if !allowed.contains(&cpu) {
            return Err(format!(
                "--cpu {cpu}: this process may use CPUs {allowed:?}"
            ));
        }
    }
    Ok(Settings {
        duration: Duration::from_secs_f64(args.duration),
        parallel: args.parallel,
        port: args.port,
        cpu: args.cpu,
        crc: !args.no_crc,
        tcp_buffer: tcp_buffer << 10,
    })
}

/// The transports of this invocation, in order, each once.
fn transports(args: &ConnectArgs) -> Vec<Transport> {
    let mut out = match (args.transport, args.compare.is_empty()) {
        (None, true) => vec![Transport::Embedded, Transport::Kernel],
        (t, _) => vec![t.unwrap_or(Transport::Embedded)],
    };
    for &t in &args.compare {
        if !out.contains(&t) {
            out.push(t);
        }
    }
    out
}

/// What is measured, and how the threads run.
fn banner(s: &Settings, llp: crate::args::LlpArg) -> String {
    let place = match s.cpu {
        Some(cpu) => format!("pinned to CPU {cpu}"),
        None => "unpinned".to_string(),
    };
    if llp == crate::args::LlpArg::Sctp {
        return format!(
            "connect | an SCTP association over UDP (RFC 6951; INIT to COOKIE ACK, DDP's \
             adaptation indication both ways, RFC 5043 §7.1) + one DDP stream opened with RFC \
             6581 §7's Enhanced Initiate and Accept (IRD/ORD) to a connected QP on both ends, \
             then an ABORT | {} in flight\n \
             both RNICs' cores on one thread ({place}); session control on each RNIC's control-plane thread",
            s.parallel
        );
    }
    format!(
        "connect | TCP handshake + RFC 6581 enhanced MPA startup (revision 2, IRD/ORD, \
         peer-to-peer, zero-length Write RTR) to Full Operation on both ends, then an orderly close | \
         MPA CRC {} | {} startup(s) in flight | TCP buffers {} KiB each way\n \
         both RNICs' cores on one thread ({place}), one control-plane thread for both; \
         close: the responder's FIN once its QP took the RTR, then the initiator's",
        if s.crc { "on" } else { "off" },
        s.parallel,
        s.tcp_buffer >> 10
    )
}

fn print_table(reports: &[ConnectReport]) {
    if reports.is_empty() {
        return;
    }
    println!();
    println!(
        " {:<10} {:>8} {:>10} {:>8} {:>12} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>6}",
        "transport",
        "parallel",
        "connects",
        "seconds",
        "connects/s",
        "p50[us]",
        "p90",
        "p99",
        "p99.9",
        "max",
        "failed",
        "cpu"
    );
    for r in reports {
        println!(
            " {:<10} {:>8} {:>10} {:>8.2} {:>12.0} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>7} \
             {:>5.0}%{}",
            r.transport,
            r.parallel,
            r.connects,
            r.seconds,
            r.connects_per_s(),
            r.latency_us(50.0),
            r.latency_us(90.0),
            r.latency_us(99.0),
            r.latency_us(99.9),
            r.latency.max() as f64 / 1000.0,
            r.failed(),
            r.process_cpu.as_secs_f64() * 100.0 / r.seconds.max(1e-9),
            if r.interrupted { " (interrupted)" } else { "" }
        );
    }
    println!();
    for r in reports {
        print_details(r);
    }
    if let [first, rest @ ..] = reports {
        for base in rest {
            println!(
                " {} / {} = {:.2}x the connection rate",
                first.transport,
                base.transport,
                first.connects_per_s() / base.connects_per_s().max(1e-9)
            );
        }
    }
}

/// Where the CPU went, and anything that went wrong.
fn print_details(r: &ConnectReport) {
    println!(
        " {}: cores' thread {:.0}% of a CPU, control-plane thread (the rest of the process) \
         {:.0}%; {:.1} us of CPU per connection",
        r.transport,
        r.core_cpu.as_secs_f64() * 100.0 / r.seconds.max(1e-9),
        r.process_cpu.saturating_sub(r.core_cpu).as_secs_f64() * 100.0 / r.seconds.max(1e-9),
        r.process_cpu.as_secs_f64() * 1e6 / r.connects.max(1) as f64
    );
    for (why, n) in &r.failures {
        println!(" {}: {n} failed: {why}", r.transport);
    }
    if r.left_open != [0, 0] || r.left_in_startup != [0, 0] {
        println!(
            " {}: left open after the run: {:?} connection(s), {:?} in startup \
             (initiator, responder)",
            r.transport, r.left_open, r.left_in_startup
        );
    }
}

/// One run over `transport`: both RNICs are made, and turned, on a thread
/// of its own (pinned if asked), so a pin never outlives the run nor
/// reaches the next run's control-plane thread.
pub fn run(
    transport: Transport,
    settings: &Settings,
    stop: &AtomicBool,
) -> Result<ConnectReport, String> {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("dpwarp-connect-cores".into())
            .spawn_scoped(scope, || match transport {
                Transport::Embedded => run_embedded(settings, stop),
                Transport::Kernel => run_kernel(settings, stop),
            })
            .map_err(|e| format!("cannot start the cores' thread: {e}"))?
            .join()
            .map_err(|_| "the cores' thread panicked".to_string())?
    })
}

/// tcp-lite over the in-memory link, configured as `bench`'s embedded rig
/// is (MTU 9000, checksums offloaded, no congestion control on a link that
/// never congests), with `settings.tcp_buffer` socket buffers (256 KiB, as
/// the rig's, by default).
fn run_embedded(settings: &Settings, stop: &AtomicBool) -> Result<ConnectReport, String> {
    let mut link_config = LinkConfig::ethernet(MTU);
    link_config.checksums = false;
    let (end_c, end_s) = link::pair(link_config, 1);
    let (c_addr, s_addr) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    let stack = |mac: u8, addr, end: LinkEnd| {
        let mut c = StackConfig::new([2, 0, 0, 0, 0, mac], addr);
        c.tcp = TcpConfig {
            rx_buffer: settings.tcp_buffer,
            tx_buffer: settings.tcp_buffer,
            congestion: CongestionControl::None,
            ..TcpConfig::default()
        };
        Stack::new(c, end, now()).map_err(|e| e.to_string())
    };
    let client = stack(1, c_addr, end_c)?;
    let server = stack(2, s_addr, end_s)?;
    let (ce, se) = (client.emss(), server.emss());
    let remote = SocketAddrV4::new(s_addr, settings.port);
    let mut driver = Driver::new(client, ce, server, se, remote, settings)?;
    driver.measure(Transport::Embedded, settings, stop)
}

/// Linux TCP over loopback with tcp-lite's kernel transport (`TCP_NODELAY`),
/// its rings and socket buffers `settings.tcp_buffer` (256 KiB, its
/// default, by default).
fn run_kernel(settings: &Settings, stop: &AtomicBool) -> Result<ConnectReport, String> {
    let transport = || {
        KernelTransport::new(KernelConfig {
            bind: Ipv4Addr::LOCALHOST,
            rx_buffer: settings.tcp_buffer,
            tx_buffer: settings.tcp_buffer,
            ..KernelConfig::default()
        })
        .map_err(|e| e.to_string())
    };
    let emss = MTU - 40;
    let remote = SocketAddrV4::new(Ipv4Addr::LOCALHOST, settings.port);
    let mut driver = Driver::new(transport()?, emss, transport()?, emss, remote, settings)?;
    driver.measure(Transport::Kernel, settings, stop)
}

/// One RNIC: its core and the CQ of its QPs.
struct Side<T: CoreTransport> {
    core: Core<T>,
    cq: CqHandle,
}

impl<T: CoreTransport> Side<T> {
    /// An RNIC on `transport` whose startups run behind `link`, with room
    /// for `connections` QPs.
    fn new(transport: T, emss: usize, link: CoreLink, seed: u64, connections: usize) -> Self {
        let mut rnic = Rnic::new(RnicConfig {
            stag_seed: seed,
            qps_max: connections,
            ..RnicConfig::default()
        });
        let pd = rnic.alloc_pd().expect("a fresh RNIC has room for a PD");
        // No work is posted: completions could only be flushes.
        let cq = rnic.create_cq(256).expect("a fresh RNIC has room for a CQ");
        let qp_init = QpInit {
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            sq_size: QUEUE_DEPTH,
            rq_size: QUEUE_DEPTH,
        };
        let mut config = CoreConfig::new(emss);
        config.connections_max = connections;
        Side {
            core: Core::new(config, transport, link, rnic, qp_init),
            cq,
        }
    }

    /// Completions (none are expected), so the CQ never fills.
    fn drain_cq(&mut self, wcs: &mut [Wc]) {
        while self.core.poll_cq(self.cq, wcs) == wcs.len() {}
    }
}

/// One connection, from its connect to its end on both sides.
#[derive(Debug)]
struct Conn {
    started: Instant,
    /// Its `connect` token.
    token: u64,
    /// From the connect to the initiator's Established handoff.
    latency: Duration,
    /// Counted among the startups in flight.
    in_startup: bool,
    /// The initiator's QP, once established.
    client_qp: Option<QpHandle>,
    client_established: bool,
    /// The initiator's side is over: its QP ended, or its startup failed.
    client_done: bool,
    /// The responder's QP, once established.
    server_qp: Option<QpHandle>,
    server_established: bool,
    /// The responder's side is over: its QP ended.
    server_done: bool,
    /// The responder's QP took the RTR.
    rtr_taken: bool,
}

impl Conn {
    /// Between the connect and both Established handoffs (or the
    /// initiator's failure).
    fn starting(&self) -> bool {
        let established = self.client_established && self.server_established;
        !(established || self.client_done)
    }

    /// Nothing more will happen on either side.
    fn over(&self) -> bool {
        self.client_done && (self.server_done || !self.server_established)
    }
}

/// The two RNICs, their control plane, and the connections in flight.
struct Driver<C: CoreTransport, S: CoreTransport> {
    control: ControlPlane,
    client: Side<C>,
    server: Side<S>,
    remote: SocketAddrV4,
    startup: StartupConfig,
    parallel: usize,
    conns: HashMap<u64, Conn>,
    by_token: HashMap<u64, u64>,
    client_qps: HashMap<QpHandle, u64>,
    server_qps: HashMap<QpHandle, u64>,
    /// Responder QPs whose RTR has not arrived yet, with their connection.
    awaiting_rtr: Vec<(QpHandle, u64)>,
    /// Connections in startup (see [`Conn::starting`]).
    starting: usize,
    next_id: u64,
    /// Count connections that establish now (the timed window).
    counting: bool,
    connects: u64,
    latency: Histogram<u64>,
    failures: BTreeMap<String, u64>,
    established: [u64; 2],
    rtrs_taken: u64,
    ended: [u64; 2],
    wcs: Vec<Wc>,
}

impl<C: CoreTransport, S: CoreTransport> Driver<C, S> {
    /// Both RNICs on one control plane (core 0 the initiator's, core 1 the
    /// responder's), the responder listening on `settings.port` with a
    /// callback that accepts every Request; ready once the listener is up.
    fn new(
        client: C,
        client_emss: usize,
        server: S,
        server_emss: usize,
        remote: SocketAddrV4,
        settings: &Settings,
    ) -> Result<Self, String> {
        let (control, mut links) = ControlPlane::start(2);
        let (Some(server_link), Some(client_link)) = (links.pop(), links.pop()) else {
            return Err("the control plane gave fewer than two core links".into());
        };
        // Startups and closes in flight, and room for strays.
        let connections = (2 * settings.parallel + 64).max(256);
        let client = Side::new(client, client_emss, client_link, 1, connections);
        let server = Side::new(server, server_emss, server_link, 2, connections);
        let startup = settings.startup();
        control.listen(
            1,
            settings.port,
            startup.clone(),
            Box::new(|_request, _peer| Decision::Accept(Accept::default())),
        );
        let mut driver = Driver {
            control,
            client,
            server,
            remote,
            startup,
            parallel: settings.parallel,
            conns: HashMap::with_capacity(2 * settings.parallel),
            by_token: HashMap::with_capacity(2 * settings.parallel),
            client_qps: HashMap::with_capacity(2 * settings.parallel),
            server_qps: HashMap::with_capacity(2 * settings.parallel),
            awaiting_rtr: Vec::with_capacity(2 * settings.parallel),
            starting: 0,
            next_id: 1,
            counting: false,
            connects: 0,
            latency: Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds"),
            failures: BTreeMap::new(),
            established: [0; 2],
            rtrs_taken: 0,
            ended: [0; 2],
            wcs: vec![Wc::EMPTY; 64],
        };
        driver.wait_listening(settings.port)?;
        Ok(driver)
    }

    /// Turns both cores until the listen command has reached the
    /// responder's core, and says how it went.
    fn wait_listening(&mut self, port: u16) -> Result<(), String> {
        let begin = Instant::now();
        loop {
            self.step();
            match self.server.core.listen_status(port) {
                Some(Ok(())) => return Ok(()),
                Some(Err(e)) => return Err(format!("cannot listen on port {port}: {e}")),
                None if begin.elapsed() > CONNECTION_LIMIT => {
                    return Err("the control plane never set up the listener".into())
                }
                None => {}
            }
        }
    }

    /// The timed window, then the drain: no new connects, every connection
    /// in flight ends (at most [`CONNECTION_LIMIT`]).
    fn measure(
        &mut self,
        transport: Transport,
        settings: &Settings,
        stop: &AtomicBool,
    ) -> Result<ConnectReport, String> {
        // Pinned now, after the control-plane thread started unpinned.
        let _pinned = dataplane::lcore::enter(settings.cpu, None)?;
        let (thread_before, process_before) = (thread_cpu(), process_cpu());
        let start = Instant::now();
        let deadline = start + settings.duration;
        self.counting = true;
        let mut window = None;
        let mut next_expiry = start;
        loop {
            let t = Instant::now();
            if self.counting && (t >= deadline || stop.load(Ordering::Relaxed)) {
                self.counting = false;
                window = Some((t, thread_cpu(), process_cpu()));
            }
            if self.counting {
                self.open_more(t);
            }
            self.step();
            if t >= next_expiry {
                self.expire(t);
                next_expiry = t + Duration::from_millis(100);
            }
            if let Some((end, _, _)) = window {
                if self.quiet() || t.duration_since(end) > CONNECTION_LIMIT {
                    break;
                }
            }
        }
        let (end, thread_after, process_after) = window.expect("the window ended");
        Ok(ConnectReport {
            transport: transport.name(),
            connects: self.connects,
            seconds: end.duration_since(start).as_secs_f64(),
            parallel: self.parallel,
            tcp_buffer: settings.tcp_buffer,
            latency: self.latency.clone(),
            failures: self.failures.clone(),
            established: self.established,
            rtrs_taken: self.rtrs_taken,
            ended: self.ended,
            left_open: [
                self.client.core.open_connections(),
                self.server.core.open_connections(),
            ],
            left_in_startup: [self.client.core.in_startup(), self.server.core.in_startup()],
            core_cpu: thread_after.saturating_sub(thread_before),
            process_cpu: process_after.saturating_sub(process_before),
            interrupted: end < deadline,
            llp: "mpa",
        })
    }

    /// Nothing in flight, nothing open on either core.
    fn quiet(&self) -> bool {
        self.conns.is_empty()
            && [
                self.client.core.open_connections(),
                self.client.core.in_startup(),
                self.server.core.open_connections(),
                self.server.core.in_startup(),
            ] == [0; 4]
    }

    /// Connects until `parallel` startups are in flight (and at most twice
    /// as many connections open).
    fn open_more(&mut self, t: Instant) {
        while self.starting < self.parallel && self.conns.len() < 2 * self.parallel {
            let id = self.next_id;
            self.next_id += 1;
            let token =
                self.control
                    .connect(0, self.remote, self.startup.clone(), &id.to_be_bytes());
            self.by_token.insert(token, id);
            self.conns.insert(
                id,
                Conn {
                    started: t,
                    token,
                    latency: Duration::ZERO,
                    in_startup: true,
                    client_qp: None,
                    client_established: false,
                    client_done: false,
                    server_qp: None,
                    server_established: false,
                    server_done: false,
                    rtr_taken: false,
                },
            );
            self.starting += 1;
        }
    }

    /// One turn of each core, and what each reported. A side's ended QPs
    /// go first: a new QP may take an ended one's handle in the same turn.
    fn step(&mut self) {
        let t = now();
        self.client.core.turn(t);
        self.client_ended();
        self.events(Role::Initiator);
        let mut seen = None;
        while let Some((handoff, qp)) = self.client.core.next_handoff() {
            let seen = *seen.get_or_insert_with(Instant::now);
            self.client_handoff(&handoff, qp, seen);
        }
        self.server.core.turn(t);
        self.server_ended();
        self.events(Role::Responder);
        while let Some((handoff, qp)) = self.server.core.next_handoff() {
            self.server_handoff(&handoff, qp);
        }
        self.rtrs();
        self.client.drain_cq(&mut self.wcs);
        self.server.drain_cq(&mut self.wcs);
    }

    fn client_handoff(&mut self, handoff: &Handoff, qp: Option<QpHandle>, seen: Instant) {
        let Some(id) = self.by_token.remove(&handoff.token) else {
            // A connect given up on (expired): let it go.
            if let Some(qp) = qp {
                self.client.core.abort(qp);
            }
            return;
        };
        let failure = match (&handoff.result, qp) {
            (StartupResult::Established(e), Some(qp)) => {
                self.established[0] += 1;
                if enhanced(e, Role::Initiator) {
                    self.client_qps.insert(qp, id);
                    if let Some(conn) = self.conns.get_mut(&id) {
                        conn.client_qp = Some(qp);
                        conn.client_established = true;
                        conn.latency = seen.duration_since(conn.started);
                    }
                    None
                } else {
                    self.client.core.abort(qp);
                    Some("initiator: established without RFC 6581's peer-to-peer startup".into())
                }
            }
            (StartupResult::Established(_), None) => {
                Some("initiator: established, but the core had no QP for it".into())
            }
            (StartupResult::Rejected(_), _) => Some("initiator: rejected".into()),
            (StartupResult::Failed(f), _) => Some(format!("initiator: {}", f.reason)),
        };
        if let Some(why) = failure {
            self.fail(why);
            if let Some(conn) = self.conns.get_mut(&id) {
                conn.client_done = true;
            }
        }
        self.update(id);
    }

    fn server_handoff(&mut self, handoff: &Handoff, qp: Option<QpHandle>) {
        let failure = match (&handoff.result, qp) {
            (StartupResult::Established(e), Some(qp)) => {
                self.established[1] += 1;
                let id = id_of(&e.peer_private_data).filter(|id| self.conns.contains_key(id));
                match id {
                    Some(id) if enhanced(e, Role::Responder) => {
                        self.server_qps.insert(qp, id);
                        self.awaiting_rtr.push((qp, id));
                        if let Some(conn) = self.conns.get_mut(&id) {
                            conn.server_qp = Some(qp);
                            conn.server_established = true;
                        }
                        self.update(id);
                        None
                    }
                    Some(_) => {
                        self.server.core.abort(qp);
                        Some("responder: established without RFC 6581's peer-to-peer startup")
                    }
                    None => {
                        self.server.core.abort(qp);
                        Some("responder: established a connection the initiator gave up on")
                    }
                }
            }
            (StartupResult::Established(_), None) => {
                Some("responder: established, but the core had no QP for it")
            }
            (StartupResult::Rejected(_), _) => Some("responder: rejected"),
            (StartupResult::Failed(f), _) => {
                return self.fail(format!("responder: {}", f.reason));
            }
        };
        if let Some(why) = failure {
            self.fail(why.to_string());
        }
    }

    /// Responder QPs that took their RTR (all its octets reached the engine
    /// and the QP is in RTS): both ends are in Full Operation, and the
    /// responder closes.
    fn rtrs(&mut self) {
        let mut i = 0;
        while i < self.awaiting_rtr.len() {
            let (qp, id) = self.awaiting_rtr[i];
            let core = &mut self.server.core;
            match core.rx_octets(qp) {
                Some(n) if n < RTR_FPDU_LEN => i += 1,
                Some(_) => {
                    self.awaiting_rtr.swap_remove(i);
                    if core.rnic_ref().qp_state(qp) == Ok(QpState::Rts) {
                        self.rtrs_taken += 1;
                        if let Some(conn) = self.conns.get_mut(&id) {
                            conn.rtr_taken = true;
                        }
                    }
                    // Not in RTS: its Terminate is counted as a failure.
                    core.close(qp);
                }
                // Ended: `server_ended` says why.
                None => {
                    self.awaiting_rtr.swap_remove(i);
                }
            }
        }
    }

    fn client_ended(&mut self) {
        while let Some(qp) = self.client.core.next_ended() {
            self.ended[0] += 1;
            let Some(id) = self.client_qps.remove(&qp) else {
                continue;
            };
            let Some(conn) = self.conns.get_mut(&id) else {
                continue;
            };
            conn.client_done = true;
            if !conn.rtr_taken {
                self.fail(
                    "initiator: the connection ended before the responder took the RTR".into(),
                );
            }
            self.update(id);
        }
    }

    fn server_ended(&mut self) {
        while let Some(qp) = self.server.core.next_ended() {
            self.ended[1] += 1;
            let Some(id) = self.server_qps.remove(&qp) else {
                continue;
            };
            self.awaiting_rtr.retain(|&(q, _)| q != qp);
            let Some(conn) = self.conns.get_mut(&id) else {
                continue;
            };
            conn.server_done = true;
            if !conn.rtr_taken {
                self.fail("responder: the connection ended before its QP took the RTR".into());
            }
            self.update(id);
        }
    }

    /// Terminates, sent or received, on `role`'s side: none in a healthy run.
    fn events(&mut self, role: Role) {
        loop {
            let event = match role {
                Role::Initiator => self.client.core.next_event(),
                Role::Responder => self.server.core.next_event(),
            };
            let Some((_, event)) = event else {
                return;
            };
            let side = match role {
                Role::Initiator => "initiator",
                Role::Responder => "responder",
            };
            self.fail(format!("{side}: {event:?}"));
        }
    }

    /// Connection `id` changed: it leaves startup (counted if both ends
    /// established within the window) and, once over, goes.
    fn update(&mut self, id: u64) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        if conn.in_startup && !conn.starting() {
            conn.in_startup = false;
            self.starting -= 1;
            if conn.client_established && conn.server_established && self.counting {
                self.connects += 1;
                let ns = u64::try_from(conn.latency.as_nanos()).unwrap_or(u64::MAX);
                self.latency.saturating_record(ns.max(1));
            }
        }
        if conn.over() {
            if conn.in_startup {
                self.starting -= 1;
            }
            self.conns.remove(&id);
        }
    }

    /// Connections not done within [`CONNECTION_LIMIT`] fail; their QPs are
    /// aborted and their handoffs, if any come, let go.
    fn expire(&mut self, t: Instant) {
        let late: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| t.duration_since(c.started) > CONNECTION_LIMIT)
            .map(|(&id, _)| id)
            .collect();
        for id in late {
            let Some(conn) = self.conns.remove(&id) else {
                continue;
            };
            if conn.in_startup {
                self.starting -= 1;
            }
            self.by_token.remove(&conn.token);
            if let Some(qp) = conn
                .client_qp
                .filter(|qp| self.client_qps.remove(qp).is_some())
            {
                self.client.core.abort(qp);
            }
            if let Some(qp) = conn
                .server_qp
                .filter(|qp| self.server_qps.remove(qp).is_some())
            {
                self.awaiting_rtr.retain(|&(q, _)| q != qp);
                self.server.core.abort(qp);
            }
            self.fail(format!(
                "not done within {} s of its connect",
                CONNECTION_LIMIT.as_secs()
            ));
        }
    }

    fn fail(&mut self, why: String) {
        *self.failures.entry(why).or_default() += 1;
    }
}

/// Whether a handoff is RFC 6581's enhanced, peer-to-peer startup as asked:
/// the initiator with the RTR it sends, the responder fenced until it
/// arrives.
fn enhanced(e: &control::mpa::Established, role: Role) -> bool {
    let model = e.role == role && e.enhanced && e.revision == 2 && e.peer_to_peer;
    model
        && match role {
            Role::Initiator => e.rtr.is_some(),
            Role::Responder => e.fenced && !e.rtr_accept.is_empty(),
        }
}

/// The connection number in the initiator's private data.
fn id_of(private_data: &[u8]) -> Option<u64> {
    let octets: [u8; ID_LEN] = private_data.try_into().ok()?;
    Some(u64::from_be_bytes(octets))
}
