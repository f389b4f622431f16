//! RNICs joined by a transport. Each [`Endpoint`] is a whole RNIC: its TCP
//! (a tcp-lite transport), a control-plane thread, and an RNIC engine; one
//! thread steps it, as one poll-mode core would.
//!
//! A [`Rig`] is a client endpoint and, in process, a [`Server`] endpoint;
//! for `--server`/`--client` runs the server is in another process (or
//! host) and the rig holds the client alone. Every size of a run opens its
//! own connections, announcing the workload in MPA private data
//! ([`crate::hello`]), so the in-process and the remote server are one code.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration as StdDuration, Instant as StdInstant};

use control::mpa::StartupConfig;
use control::runtime::{Handoff, StartupResult};
use dataplane::dpdk::Eal;
use dataplane::{CoreCounters, CoreTransport};
use rnic_engine::verbs::{QpHandle, RemoteAddr};
use tcp_lite::link::{self, LinkConfig, LinkEnd};
use tcp_lite::sys::kernel::{KernelConfig, KernelTransport};
use tcp_lite::sys::netns::{self, Netns};
use tcp_lite::sys::tap::TapDevice;
use tcp_lite::{CongestionControl, Stack, StackConfig, TcpConfig};

use dataplane::ports::{self, PortKind, PortOptions};
use dataplane::DpdkDevice;

use crate::endpoint::{now, Endpoint, Host, RnicEnd};
use crate::hello::{self, ClientHello, ServerHello};
use crate::link::{dpdk_port, dpdk_stack, LinkArgs, PeerTransport};
use crate::responder::Server;
use crate::spec::{credit_offset, Spec};

/// How long connection set-up and teardown may take.
const SETUP_LIMIT: StdDuration = StdDuration::from_secs(10);

/// A client's QP and what it addresses on the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pair {
    /// The client's QP.
    pub qp: QpHandle,
    /// The server's memory (its first octet; slots are offsets from it).
    pub remote: RemoteAddr,
    /// Its number among the run's QPs: the slot of memory it uses, on both
    /// sides.
    pub slot: usize,
    /// Where the server writes its credits in our memory.
    pub credit: u64,
}

/// A client RNIC and, in process, its server: on the client's thread
/// (one core for both), or on a pinned thread of its own (a core each).
pub struct Rig<C: CoreTransport, S: CoreTransport> {
    /// The side that opens connections and drives the workload.
    pub client: Endpoint<C>,
    /// The server, when it runs in this process.
    server: ServerSide<S>,
    server_addr: SocketAddrV4,
    startup: StartupConfig,
    /// This run's name in the hello.
    run: u64,
    /// The client's CPU, when pinned.
    client_cpu: Option<usize>,
}

/// Where the server runs.
enum ServerSide<S: CoreTransport> {
    /// In another process or on another host.
    Remote,
    /// On the client's thread, stepped with it.
    Local(Box<Server<S>>),
    /// On a thread (and core) of its own.
    Thread(ServerThread<S>),
}

/// A server running on its own pinned thread, and what it shares with the
/// client's.
struct ServerThread<S: CoreTransport> {
    shared: Arc<Shared>,
    handle: Option<std::thread::JoinHandle<Server<S>>>,
    cpu: Option<usize>,
}

impl<S: CoreTransport> ServerThread<S> {
    /// The server core's counters as of now: it is asked to publish them
    /// and given up to a second (a stopped thread's last ones otherwise).
    fn fresh_counters(&self) -> CoreCounters {
        let shared = &self.shared;
        shared.publish.store(true, Ordering::SeqCst);
        let start = StdInstant::now();
        while shared.publish.load(Ordering::SeqCst) && start.elapsed() < StdDuration::from_secs(1) {
            std::hint::spin_loop();
        }
        *shared.counters.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What a server thread tells the client's.
#[derive(Default)]
struct Shared {
    /// Set by the client: stop turning.
    stop: AtomicBool,
    /// Connections open on the server.
    open: AtomicUsize,
    /// The first error a server step returned.
    error: Mutex<Option<String>>,
    /// The core's counters, refreshed every [`PUBLISH_TURNS`] turns and
    /// when asked.
    counters: Mutex<CoreCounters>,
    /// Set by the client: publish the counters now (cleared when done).
    publish: AtomicBool,
}

/// Turns between two snapshots of a server thread's counters.
const PUBLISH_TURNS: u64 = 4096;

/// What the workloads need of a rig, whatever its lower layer: the
/// client's RNIC end, a step of both sides, and connections (DDP streams)
/// opened and closed per workload.
pub trait BenchRig {
    /// The client's RNIC end.
    type Client: RnicEnd;

    /// The client.
    fn client(&mut self) -> &mut Self::Client;

    /// Steps the client (and an in-process server on this thread) once.
    fn step(&mut self) -> Result<(), String>;

    /// Opens `spec.qps` connections numbered from `first` of `total` (their
    /// memory slots); `last` tells a remote server this is the last size.
    fn open_slots(
        &mut self,
        spec: &Spec,
        last: bool,
        first: usize,
        total: usize,
    ) -> Result<Vec<Pair>, String>;

    /// Closes the connections of `pairs` and waits until they are gone.
    fn close(&mut self, pairs: &[Pair]) -> Result<(), String>;

    /// Every core's counters.
    fn core_reports(&self) -> Vec<CoreReport>;

    /// Cores the two RNICs run on in this process.
    fn cores(&self) -> usize;
}

impl<C: CoreTransport, S: CoreTransport> BenchRig for Rig<C, S> {
    type Client = Endpoint<C>;

    fn client(&mut self) -> &mut Endpoint<C> {
        &mut self.client
    }

    fn step(&mut self) -> Result<(), String> {
        Rig::step(self)
    }

    fn open_slots(
        &mut self,
        spec: &Spec,
        last: bool,
        first: usize,
        total: usize,
    ) -> Result<Vec<Pair>, String> {
        Rig::open_slots(self, spec, last, first, total)
    }

    fn close(&mut self, pairs: &[Pair]) -> Result<(), String> {
        Rig::close(self, pairs)
    }

    fn core_reports(&self) -> Vec<CoreReport> {
        Rig::core_reports(self)
    }

    fn cores(&self) -> usize {
        Rig::cores(self)
    }
}

/// One core's counters in a report.
#[derive(Debug, Clone)]
pub struct CoreReport {
    /// `client` or `server`.
    pub role: &'static str,
    /// The CPU it was pinned to.
    pub cpu: Option<usize>,
    /// Its counters.
    pub counters: CoreCounters,
    /// Its share of the run, when cores run workloads of their own
    /// (`--cores`).
    pub share: Option<Share>,
}

/// What one core's own workload moved (`--cores`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Share {
    /// Messages completed.
    pub messages: u64,
    /// Octets moved.
    pub octets: u64,
    /// Seconds of its timed part.
    pub seconds: f64,
}

impl Share {
    /// Goodput in Gbit/s.
    pub fn gbit_s(&self) -> f64 {
        self.octets as f64 * 8.0 / self.seconds.max(1e-9) / 1e9
    }

    /// Messages per second.
    pub fn msgs_s(&self) -> f64 {
        self.messages as f64 / self.seconds.max(1e-9)
    }
}

/// A name for this process's run: its PID and the clock's nanoseconds.
pub(crate) fn run_id() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (u64::from(std::process::id()) << 32) ^ nanos
}

impl<C: CoreTransport, S: CoreTransport> Rig<C, S> {
    /// The memory of a server on this thread (tests look into it).
    pub fn server_region(&self) -> Option<Arc<rnic_engine::mem::Region>> {
        match &self.server {
            ServerSide::Local(server) => Some(server.endpoint.region.clone()),
            _ => None,
        }
    }

    /// Steps the client (and an in-process server on this thread) once.
    pub fn step(&mut self) -> Result<(), String> {
        let now = now();
        self.client.step(now);
        match &mut self.server {
            ServerSide::Local(server) => server.step(now)?,
            ServerSide::Thread(t) => {
                if let Some(why) = t
                    .shared
                    .error
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take()
                {
                    return Err(format!("the server's core: {why}"));
                }
            }
            ServerSide::Remote => {}
        }
        Ok(())
    }

    /// Turns [`CoreConfig::direct_receive`](dataplane::CoreConfig::direct_receive)
    /// on or off on the client's core and, when it runs on this thread, the
    /// server's (at once: the next poll of TCP reads the setting). Returns
    /// whether the server's was set too.
    pub fn set_direct_receive(&mut self, on: bool) -> bool {
        self.client.core.config_mut().direct_receive = on;
        match &mut self.server {
            ServerSide::Local(server) => {
                server.endpoint.core.config_mut().direct_receive = on;
                true
            }
            _ => false,
        }
    }

    /// Cores the two RNICs run on in this process (1: one thread steps
    /// both; 2: the server has a core of its own; a remote server's core
    /// is not counted).
    pub fn cores(&self) -> usize {
        match self.server {
            ServerSide::Thread(_) => 2,
            ServerSide::Local(_) | ServerSide::Remote => 1,
        }
    }

    /// Pins the client's thread (this one) to `client_cpu` and moves an
    /// in-process server to a thread of its own pinned to `server_cpu`;
    /// with `eal`, both threads become EAL threads (their own mempool
    /// caches).
    pub fn split(
        &mut self,
        client_cpu: Option<usize>,
        server_cpu: Option<usize>,
        eal: Option<Eal>,
    ) -> Result<(), String>
    where
        S: Send + 'static,
    {
        let side = std::mem::replace(&mut self.server, ServerSide::Remote);
        let ServerSide::Local(server) = side else {
            self.server = side;
            return Err("only an in-process server can move to a core of its own".into());
        };
        let shared = Arc::new(Shared::default());
        let theirs = shared.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let handle = std::thread::Builder::new()
            .name("dpwarp-server-core".into())
            .spawn(move || serve_on_core(*server, server_cpu, eal, &theirs, &ready_tx))
            .map_err(|e| format!("cannot start the server's thread: {e}"))?;
        let started = ready_rx
            .recv()
            .unwrap_or_else(|_| Err("the server's thread ended before it ran".into()));
        self.server = ServerSide::Thread(ServerThread {
            shared,
            handle: Some(handle),
            cpu: server_cpu,
        });
        started?;
        // The client's thread: pinned, and an EAL thread unless it is EAL's
        // main one already.
        dataplane::lcore::enter_for_life(client_cpu, eal)?;
        self.client_cpu = client_cpu;
        Ok(())
    }

    /// Where the RNICs run: with `split`, a core each on `cpus`' first two
    /// ([`split`](Self::split)); else, with `pin` (`-l` given), this
    /// thread on the first ([`pin`](Self::pin)); else where they are.
    pub fn place(
        &mut self,
        cpus: &[usize],
        split: bool,
        pin: bool,
        eal: Option<Eal>,
    ) -> Result<(), String>
    where
        S: Send + 'static,
    {
        let (c, s) = (cpus.first().copied(), cpus.get(1).copied());
        if split {
            self.split(c, s, eal)
        } else if pin {
            self.pin(c, eal)
        } else {
            Ok(())
        }
    }

    /// Pins this thread, on which both RNICs run (a server in this
    /// process stays on it), to `cpu`; with `eal`, it becomes an EAL
    /// thread. For `-l` without a core each (`--shared-core`, the
    /// embedded link): it was ignored there.
    pub fn pin(&mut self, cpu: Option<usize>, eal: Option<Eal>) -> Result<(), String> {
        dataplane::lcore::enter_for_life(cpu, eal)?;
        self.client_cpu = cpu;
        Ok(())
    }

    /// Every core's counters: the client's, and the in-process server's.
    pub fn core_reports(&self) -> Vec<CoreReport> {
        let mut out = vec![CoreReport {
            role: "client",
            cpu: self.client_cpu,
            counters: self.client.core.counters(),
            share: None,
        }];
        match &self.server {
            ServerSide::Local(s) => out.push(CoreReport {
                role: "server",
                cpu: self.client_cpu,
                counters: s.endpoint.core.counters(),
                share: None,
            }),
            ServerSide::Thread(t) => out.push(CoreReport {
                role: "server",
                cpu: t.cpu,
                counters: t.fresh_counters(),
                share: None,
            }),
            ServerSide::Remote => {}
        }
        out
    }

    /// The server's address.
    pub fn server_addr(&self) -> SocketAddrV4 {
        self.server_addr
    }

    /// The in-process server when it runs on this thread.
    pub fn local_server(&self) -> Option<&Server<S>> {
        match &self.server {
            ServerSide::Local(s) => Some(s),
            ServerSide::Thread(_) | ServerSide::Remote => None,
        }
    }

    /// Connections open on the in-process server.
    fn server_open(&self) -> usize {
        match &self.server {
            ServerSide::Local(s) => s.endpoint.open_connections(),
            ServerSide::Thread(t) => t.shared.open.load(Ordering::SeqCst),
            ServerSide::Remote => 0,
        }
    }

    fn wait_setup(
        &mut self,
        what: &str,
        done: &mut dyn FnMut(&mut Self) -> bool,
    ) -> Result<(), String> {
        let start = StdInstant::now();
        while !done(self) {
            if start.elapsed() > SETUP_LIMIT {
                return Err(format!("{what} took more than {} s", SETUP_LIMIT.as_secs()));
            }
            self.step()?;
        }
        Ok(())
    }

    /// Opens the connections of one workload (`spec.qps` of them); `last`
    /// tells a remote server this is the client's last size.
    pub fn open(&mut self, spec: &Spec, last: bool) -> Result<Vec<Pair>, String> {
        self.open_slots(spec, last, 0, spec.qps)
    }

    /// [`Rig::open`] for `spec.qps` QPs numbered from `first` of `total`
    /// QPs in all (their memory slots), so that QPs of two workloads (a
    /// latency run and the QPs active beside it) share nothing.
    pub fn open_slots(
        &mut self,
        spec: &Spec,
        last: bool,
        first: usize,
        total: usize,
    ) -> Result<Vec<Pair>, String> {
        let mut tokens = Vec::with_capacity(spec.qps);
        let mut slots = Vec::with_capacity(spec.qps);
        for qi in first..first + spec.qps {
            slots.push(qi);
            let h = ClientHello::of(
                spec,
                qi,
                total,
                last,
                (self.client.mr.stag, self.client.mr.base_to),
                self.run,
            );
            let token = self.client.control.connect_marked(
                self.server_addr,
                self.startup.clone(),
                &h.encode(),
                spec.dscp,
            );
            tokens.push(token);
        }
        let mut ended: Vec<(Handoff, Option<QpHandle>)> = Vec::new();
        let want = spec.qps;
        let addr = self.server_addr;
        let waited = self.wait_setup(&format!("connecting {want} QP(s) to {addr}"), &mut |rig| {
            ended.extend(rig.client.take_handoffs());
            ended.len() >= want
        });
        if let Err(why) = waited {
            // Those that did connect go again.
            for qp in ended.iter().filter_map(|(_, qp)| *qp) {
                self.client.close(qp);
            }
            return Err(why);
        }
        let mut pairs = Vec::with_capacity(want);
        let mut failure = None;
        for (token, qi) in tokens.into_iter().zip(slots) {
            let Some((handoff, qp)) = ended.iter().find(|(h, _)| h.token == token) else {
                failure.get_or_insert_with(|| "a connection never ended its startup".to_string());
                continue;
            };
            match (&handoff.result, qp) {
                (StartupResult::Established(e), Some(qp)) => {
                    match ServerHello::decode(&e.peer_private_data) {
                        Ok(s) => {
                            if spec.urgent {
                                self.client.core.set_urgent(*qp, true);
                            }
                            pairs.push(Pair {
                                qp: *qp,
                                remote: RemoteAddr {
                                    stag: s.stag,
                                    to: s.to,
                                },
                                slot: qi,
                                credit: credit_offset(total, qi, spec.size),
                            })
                        }
                        Err(why) => {
                            failure.get_or_insert(why);
                            self.client.close(*qp);
                        }
                    }
                }
                (StartupResult::Established(_), None) => {
                    failure.get_or_insert_with(|| "no QP for a connection".into());
                }
                (StartupResult::Rejected(r), _) => {
                    failure.get_or_insert_with(|| {
                        format!(
                            "the server refused: {}",
                            hello::decode_reject(&r.private_data)
                        )
                    });
                }
                (StartupResult::Failed(f), _) => {
                    failure.get_or_insert_with(|| {
                        format!("connecting to {addr} failed: {}", f.reason)
                    });
                }
            }
        }
        if let Some(why) = failure {
            let _ = self.close(&pairs);
            return Err(why);
        }
        Ok(pairs)
    }

    /// Closes the connections of `pairs` in order and waits until they are
    /// gone on this side (and on the in-process server).
    pub fn close(&mut self, pairs: &[Pair]) -> Result<(), String> {
        for p in pairs {
            self.client.close(p.qp);
        }
        self.wait_setup("closing the connections", &mut |rig| {
            let _ = rig.client.take_ended();
            rig.client.open_connections() == 0 && rig.server_open() == 0
        })
    }
}

impl<C: CoreTransport, S: CoreTransport> Drop for Rig<C, S> {
    // Waiting for a link to go down is by the clock.
    #[allow(clippy::disallowed_methods)]
    fn drop(&mut self) {
        if let ServerSide::Thread(t) = &mut self.server {
            t.shared.stop.store(true, Ordering::SeqCst);
            if let Some(handle) = t.handle.take() {
                // The server (its core, its port queues) drops on its own
                // thread's return, here.
                let _ = handle.join();
            }
            // An in-process memif pair: the server's port is closed, and
            // EAL's interrupt thread takes the client's side of the link
            // down when it handles the server leaving. The client's port
            // closes after that, not while the handler runs on it: one
            // close at a time on DPDK 22.11's memif (the crash it had after
            // runs was its deferred release, see `PortInner::drop` in
            // dataplane; this order alone did not stop it).
            let start = StdInstant::now();
            while self.client.core.transport().link_up() == Some(true)
                && start.elapsed() < StdDuration::from_secs(1)
            {
                std::thread::sleep(StdDuration::from_millis(1));
            }
        }
    }
}

/// The server's thread: pinned (and an EAL thread), it says it is ready,
/// then turns the server's core until told to stop. Returns the server.
fn serve_on_core<S: CoreTransport + Send + 'static>(
    mut server: Server<S>,
    cpu: Option<usize>,
    eal: Option<Eal>,
    shared: &Shared,
    ready: &std::sync::mpsc::Sender<Result<(), String>>,
) -> Server<S> {
    let pinned = match dataplane::lcore::enter(cpu, eal) {
        Ok(p) => p,
        Err(why) => {
            let _ = ready.send(Err(format!("the server's core: {why}")));
            return server;
        }
    };
    let _ = ready.send(Ok(()));
    let mut turns = 0u64;
    while !shared.stop.load(Ordering::Relaxed) {
        if let Err(why) = server.step(now()) {
            shared
                .error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert(why);
        }
        shared
            .open
            .store(server.endpoint.open_connections(), Ordering::Relaxed);
        turns += 1;
        let asked = shared.publish.load(Ordering::Relaxed);
        if asked || turns.is_multiple_of(PUBLISH_TURNS) {
            *shared.counters.lock().unwrap_or_else(|p| p.into_inner()) =
                server.endpoint.core.counters();
            if asked {
                shared.publish.store(false, Ordering::SeqCst);
            }
        }
    }
    *shared.counters.lock().unwrap_or_else(|p| p.into_inner()) = server.endpoint.core.counters();
    drop(pinned);
    server
}

/// Which transport joins the two RNICs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportKind {
    /// tcp-lite over the in-memory link: no NIC, no root, no DPDK.
    Embedded,
    /// Linux TCP over loopback.
    Kernel,
    /// tcp-lite over a TAP device, to Linux TCP in a network namespace.
    Tap,
    /// tcp-lite over DPDK memif, a server and a client port in this process.
    Memif,
    /// tcp-lite over a DPDK net_ring pair in this process.
    Ring,
    /// tcp-lite over DPDK's TAP driver, to Linux TCP in a namespace.
    NetTap,
    /// tcp-lite over DPDK's AF_PACKET driver on a veth pair, to Linux TCP.
    AfPacket,
    /// A `bench --server` in another process or host, over this transport.
    Remote(PeerTransport),
}

impl TransportKind {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            TransportKind::Embedded => "embedded",
            TransportKind::Kernel => "kernel",
            TransportKind::Tap => "tap",
            TransportKind::Memif => "memif",
            TransportKind::Ring => "ring",
            TransportKind::NetTap => "net_tap",
            TransportKind::AfPacket => "af_packet",
            TransportKind::Remote(PeerTransport::Kernel) => "remote",
            TransportKind::Remote(PeerTransport::Tap) => "remote_tap",
            TransportKind::Remote(PeerTransport::NetTap) => "remote_net_tap",
            TransportKind::Remote(PeerTransport::AfPacket) => "remote_af_packet",
            TransportKind::Remote(PeerTransport::Memif) => "remote_memif",
            TransportKind::Remote(PeerTransport::Pci) => "remote_pci",
        }
    }
}

/// How the RNICs connect.
#[derive(Debug, Clone)]
pub struct RigConfig {
    /// MPA CRC.
    pub crc: bool,
    /// MPA markers (both directions).
    pub markers: bool,
    /// IP MTU of the link.
    pub mtu: usize,
    /// Octets of registered memory on each side.
    pub memory: usize,
    /// Port of the server's listener.
    pub port: u16,
    /// Embedded link: smoltcp computes and checks TCP/IP checksums in
    /// software, instead of the link offloading them as a NIC does.
    pub sw_checksums: bool,
    /// Embedded link: the share of frames it drops each way, at random
    /// (seeded): a network that loses packets (`--loss`). TCP then runs
    /// CUBIC, as on a real network, and repairs the losses.
    pub loss: f64,
    /// Each core's engine takes FPDUs straight from the received frames
    /// where TCP's receive buffer is empty (`dataplane::CoreConfig::direct_receive`);
    /// `false` (`--rx-buffered`): every octet through TCP's buffer.
    pub direct_receive: bool,
}

impl RigConfig {
    /// Two hosts (client, server) of `cores` cores, each core's receive
    /// path as this configuration says.
    pub(crate) fn hosts(&self, cores: u16) -> (Arc<Host>, Arc<Host>) {
        let hosts = (Host::new(cores, 1), Host::new(cores, 2));
        hosts.0.set_direct_receive(self.direct_receive);
        hosts.1.set_direct_receive(self.direct_receive);
        hosts
    }

    /// The MPA start-up both sides use.
    pub fn startup(&self) -> StartupConfig {
        StartupConfig {
            crc: self.crc,
            markers: self.markers,
            ..StartupConfig::default()
        }
    }
}

/// A client RNIC on `client` and an in-process server RNIC on `server`
/// listening at `server_addr`, ready once the listener is up.
fn in_process<C: CoreTransport, S: CoreTransport>(
    client: C,
    client_emss: usize,
    server: S,
    server_emss: usize,
    server_addr: Ipv4Addr,
    config: &RigConfig,
) -> Result<Rig<C, S>, String> {
    let hosts = config.hosts(1);
    in_process_on(
        &hosts,
        0,
        client,
        client_emss,
        server,
        server_emss,
        server_addr,
        config,
    )
}

/// [`in_process`] as core `core` of a client and a server host.
#[allow(clippy::too_many_arguments)]
fn in_process_on<C: CoreTransport, S: CoreTransport>(
    (client_host, server_host): &(Arc<Host>, Arc<Host>),
    core: u16,
    client: C,
    client_emss: usize,
    server: S,
    server_emss: usize,
    server_addr: Ipv4Addr,
    config: &RigConfig,
) -> Result<Rig<C, S>, String> {
    let mut server = Server::on_host(
        server_host,
        core,
        server,
        server_emss,
        config.memory,
        config.port,
        config.startup(),
    );
    // The listener is up before anyone connects.
    server.wait_listening()?;
    Ok(Rig {
        client: Endpoint::on_host(client_host, core, client, client_emss, config.memory),
        server: ServerSide::Local(Box::new(server)),
        server_addr: SocketAddrV4::new(server_addr, config.port),
        startup: config.startup(),
        run: run_id(),
        client_cpu: None,
    })
}

/// Two RNICs on tcp-lite over the in-memory link.
pub fn embedded(config: &RigConfig) -> Result<Rig<Stack<LinkEnd>, Stack<LinkEnd>>, String> {
    embedded_on(&config.hosts(1), 0, config)
}

/// Two RNICs over the in-memory link.
pub type EmbeddedRig = Rig<Stack<LinkEnd>, Stack<LinkEnd>>;

/// [`embedded`] as core `core` of a client and a server host (a
/// control-plane thread and a registry each, shared by their cores). The
/// link is the core's own; make it on the core's thread (it is not `Send`).
pub fn embedded_on(
    hosts: &(Arc<Host>, Arc<Host>),
    core: u16,
    config: &RigConfig,
) -> Result<EmbeddedRig, String> {
    let mut link_config = LinkConfig::ethernet(config.mtu);
    // A NIC offloads the TCP/IP checksums (DPDK ports will use that
    // offload); the embedded link does likewise unless asked to compute them.
    link_config.checksums = config.sw_checksums;
    // A memory wire: full means wait, not drop (many connections can have
    // more in flight than the queue holds).
    link_config.backpressure = true;
    let (end_c, end_s) = link::pair(link_config, 1);
    if config.loss > 0.0 {
        let faults = link::Faults {
            drop: config.loss,
            ..link::Faults::NONE
        };
        end_c.set_tx_faults(faults);
        end_s.set_tx_faults(faults);
    }
    let (c_addr, s_addr) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    // 256 KiB each way: the window outruns nothing on a zero-delay link, and
    // both rings stay in this core's L2 (1 MiB measured 35 against 70
    // Gbit/s for 64 KiB Writes).
    let tcp = TcpConfig {
        rx_buffer: 256 * 1024,
        tx_buffer: 256 * 1024,
        // The in-memory link never congests; one that loses packets stands
        // for a network, where CUBIC answers loss.
        congestion: if config.loss > 0.0 {
            CongestionControl::Cubic
        } else {
            CongestionControl::None
        },
        ..TcpConfig::default()
    };
    let stack = |mac: u8, addr, end| {
        let mut c = StackConfig::new([2, 0, 0, 0, 0, mac], addr);
        c.tcp = tcp.clone();
        c.max_connections = crate::endpoint::CONNECTIONS_MAX;
        Stack::new(c, end, now()).map_err(|e| e.to_string())
    };
    let client = stack(1, c_addr, end_c)?;
    let server = stack(2, s_addr, end_s)?;
    let (ce, se) = (client.emss(), server.emss());
    in_process_on(hosts, core, client, ce, server, se, s_addr, config)
}

/// Linux TCP bound to `bind` (unspecified: any address), with the 4 MiB
/// socket buffers every kernel transport of `bench` has.
fn kernel_transport(bind: Ipv4Addr) -> Result<KernelTransport, String> {
    let kc = KernelConfig {
        bind,
        rx_buffer: 4 << 20,
        tx_buffer: 4 << 20,
        max_connections: crate::endpoint::CONNECTIONS_MAX,
        ..KernelConfig::default()
    };
    KernelTransport::new(kc).map_err(|e| e.to_string())
}

/// Two RNICs on Linux TCP over loopback.
pub fn kernel(config: &RigConfig) -> Result<Rig<KernelTransport, KernelTransport>, String> {
    let client = kernel_transport(Ipv4Addr::LOCALHOST)?;
    let server = kernel_transport(Ipv4Addr::LOCALHOST)?;
    // The loopback MTU is 65536; FPDUs are sized for the configured path,
    // as on the embedded link.
    let emss = config.mtu - 40;
    in_process(client, emss, server, emss, Ipv4Addr::LOCALHOST, config)
}

/// Addresses of the TAP rig: the kernel end (in the namespace) and ours.
pub const TAP_KERNEL_ADDR: Ipv4Addr = Ipv4Addr::new(10, 211, 0, 1);
/// Our (tcp-lite's) address on the TAP link.
pub const TAP_STACK_ADDR: Ipv4Addr = Ipv4Addr::new(10, 211, 0, 2);

/// The client on tcp-lite over a TAP device, the server on Linux TCP at the
/// device's kernel end, inside a namespace made for the run. The calling
/// thread enters the namespace (so the server's sockets live there); the
/// returned [`Netns`] deletes both when dropped, and must outlive the rig.
pub fn tap(config: &RigConfig) -> Result<(Rig<Stack<TapDevice>, KernelTransport>, Netns), String> {
    let (client, net) = tap_client(config)?;
    let server = kernel_transport(TAP_KERNEL_ADDR)?;
    let emss = client.emss();
    Ok((
        in_process(client, emss, server, emss, TAP_KERNEL_ADDR, config)?,
        net,
    ))
}

/// tcp-lite over a TAP device whose kernel end is [`TAP_KERNEL_ADDR`] in a
/// namespace made for the run, which the calling thread enters; the
/// returned [`Netns`] deletes both when dropped.
pub fn tap_client(config: &RigConfig) -> Result<(Stack<TapDevice>, Netns), String> {
    if let Some(why) = tcp_lite::sys::tap::namespace_unavailable() {
        return Err(format!("the TAP transport cannot run here: {why}"));
    }
    let pid = std::process::id();
    let (device, net) = netns::tap_in_netns(
        &format!("dpwbench{pid}"),
        &format!("dpwb{}", pid % 100_000_000),
        config.mtu,
        TAP_KERNEL_ADDR,
        24,
    )
    .map_err(|e| format!("setting up the TAP device: {e}"))?;
    net.enter()
        .map_err(|e| format!("entering the namespace: {e}"))?;
    let tcp = TcpConfig {
        rx_buffer: 256 * 1024,
        tx_buffer: 256 * 1024,
        ..TcpConfig::default()
    };
    let mut c = StackConfig::new([2, 0, 0, 0, 0, 1], TAP_STACK_ADDR);
    c.tcp = tcp;
    let client = Stack::new(c, device, now()).map_err(|e| e.to_string())?;
    Ok((client, net))
}

/// A client on Linux TCP whose server is a `bench --server` at `server`.
pub fn remote(
    config: &RigConfig,
    server: SocketAddrV4,
) -> Result<Rig<KernelTransport, KernelTransport>, String> {
    let client = kernel_transport(Ipv4Addr::UNSPECIFIED)?;
    let emss = config.mtu - 40;
    Ok(Rig {
        client: Endpoint::new(client, emss, 1, config.memory),
        server: ServerSide::Remote,
        server_addr: server,
        startup: config.startup(),
        run: run_id(),
        client_cpu: None,
    })
}

/// A rig of two RNICs on DPDK ports.
pub type DpdkRig = Rig<Stack<DpdkDevice>, Stack<DpdkDevice>>;
/// A rig of an RNIC on a DPDK port and one on Linux TCP.
pub type DpdkKernelRig = Rig<Stack<DpdkDevice>, KernelTransport>;

/// Addresses of two in-process RNICs on a DPDK link (memif, ring).
pub const DPDK_CLIENT_ADDR: Ipv4Addr = Ipv4Addr::new(10, 88, 0, 1);
/// The server's.
pub const DPDK_SERVER_ADDR: Ipv4Addr = Ipv4Addr::new(10, 88, 0, 2);

/// What a rig on DPDK ports runs on, for reports.
#[derive(Debug, Clone)]
pub struct DpdkInfo {
    /// EAL, to register the cores' threads.
    pub eal: Eal,
    /// Hugepages or not, in words.
    pub memory: String,
    /// The ports.
    pub ports: String,
    /// How checksums are done.
    pub checksums: &'static str,
}

/// Two RNICs in this process on tcp-lite over DPDK ports: a `net_memif`
/// server and client on one socket (`memif`), or a `net_ring` pair.
pub fn dpdk_pair(
    config: &RigConfig,
    link: &LinkArgs,
    memif: bool,
) -> Result<(DpdkRig, DpdkInfo), String> {
    let (eal, memory, server_port, client_port) = open_pair(config, link, memif, 1)?;
    let client = dpdk_stack(&client_port, (DPDK_CLIENT_ADDR, 24), true)?;
    let server = dpdk_stack(&server_port, (DPDK_SERVER_ADDR, 24), true)?;
    let info = DpdkInfo {
        eal,
        memory,
        ports: format!("{} and {}", client_port.describe, server_port.describe),
        checksums: client_port.checksums(),
    };
    let (ce, se) = (client.emss(), server.emss());
    Ok((
        in_process(client, ce, server, se, DPDK_SERVER_ADDR, config)?,
        info,
    ))
}

/// EAL and a started memif (or net_ring) pair of `queues` queue pairs each,
/// its link up: the server's port, then the client's.
pub(crate) fn open_pair(
    config: &RigConfig,
    link: &LinkArgs,
    memif: bool,
    queues: u16,
) -> Result<(Eal, String, ports::Opened, ports::Opened), String> {
    let (eal, memory) = ports::start_eal(link.hugepages(), &[])?;
    let mut options = PortOptions::new(mtu16(config.mtu)?);
    options.sw_checksums = link.sw_checksums;
    options.queues = queues;
    let (server_port, client_port) = if memif {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let socket = format!(
            "/run/dpwarp/bench-{}-{}.sock",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        ports::memif_pair(eal, &socket, &options)?
    } else {
        ports::ring_pair(eal, &options)?
    };
    ports::wait_link(&[&server_port, &client_port], options.link_timeout)?;
    Ok((eal, memory, server_port, client_port))
}

/// One DPDK memif or net_ring pair with a queue pair per core, and a rig
/// per core on it: rig k's client and server stacks are core k of their
/// port (queue k, steered: `dataplane::steer`), so each connection stays on
/// its core at both ends.
pub fn dpdk_pair_cores(
    config: &RigConfig,
    link: &LinkArgs,
    memif: bool,
    cores: u16,
) -> Result<Vec<DpdkRig>, String> {
    let (_, _, server_port, client_port) = open_pair(config, link, memif, cores)?;
    let (client_steer, server_steer) = (client_port.steer()?, server_port.steer()?);
    // Two hosts of `cores` cores: a control-plane thread and a registry
    // each, shared by its cores.
    let hosts = config.hosts(cores);
    (0..cores)
        .map(|k| {
            let client = crate::link::dpdk_stack_on(
                &client_port,
                k,
                Some(&client_steer),
                (DPDK_CLIENT_ADDR, 24),
                true,
            )?;
            let server = crate::link::dpdk_stack_on(
                &server_port,
                k,
                Some(&server_steer),
                (DPDK_SERVER_ADDR, 24),
                true,
            )?;
            let (ce, se) = (client.emss(), server.emss());
            in_process_on(&hosts, k, client, ce, server, se, DPDK_SERVER_ADDR, config)
        })
        .collect()
}

/// Addresses of the DPDK TAP and AF_PACKET rigs: the kernel's end (in the
/// namespace) and ours.
pub const DPDK_KERNEL_ADDR: Ipv4Addr = Ipv4Addr::new(10, 212, 0, 1);
/// Our (tcp-lite's) address there.
pub const DPDK_STACK_ADDR: Ipv4Addr = Ipv4Addr::new(10, 212, 0, 2);

/// The client on tcp-lite over a DPDK port into a namespace made for the
/// run, the server on Linux TCP there: `net_tap` (DPDK's TAP driver, its
/// interface made in the namespace) or `net_af_packet` (on one end of a
/// veth pair whose other end is the kernel's). The calling thread enters
/// the namespace (so the server's sockets and the port's live there); the
/// returned [`Netns`] deletes it and its devices when dropped, after the
/// rig. EAL must already run (started outside the namespace).
pub fn dpdk_kernel(
    config: &RigConfig,
    link: &LinkArgs,
    eal: Eal,
    af_packet: bool,
) -> Result<(DpdkKernelRig, Netns, DpdkInfo), String> {
    let (client, net, info) = dpdk_kernel_client(config, link, eal, af_packet)?;
    let server = kernel_transport(DPDK_KERNEL_ADDR)?;
    let emss = client.emss();
    let rig = in_process(client, emss, server, emss, DPDK_KERNEL_ADDR, config)?;
    Ok((rig, net, info))
}

/// tcp-lite over a DPDK port (`net_tap` or `net_af_packet`) whose kernel
/// end is [`DPDK_KERNEL_ADDR`] in a namespace made for the run, which the
/// calling thread enters (see [`dpdk_kernel`]).
pub fn dpdk_kernel_client(
    config: &RigConfig,
    link: &LinkArgs,
    eal: Eal,
    af_packet: bool,
) -> Result<(Stack<DpdkDevice>, Netns, DpdkInfo), String> {
    if let Some(why) = tcp_lite::sys::tap::namespace_unavailable() {
        return Err(format!("this transport cannot run here: {why}"));
    }
    let pid = std::process::id();
    let net = Netns::create(&format!("dpwbench{pid}")).map_err(|e| e.to_string())?;
    let kernel_addr = format!("{DPDK_KERNEL_ADDR}/24");
    let ours = format!("dpwd{}", pid % 100_000_000);
    let theirs = format!("dpwk{}", pid % 100_000_000);
    let ns = |args: &[&str]| net.ip(args).map_err(|e| e.to_string());
    if af_packet {
        net.veth(&ours, &theirs, config.mtu, &kernel_addr)
            .map_err(|e| e.to_string())?;
    }
    net.enter()
        .map_err(|e| format!("entering the namespace: {e}"))?;
    if af_packet {
        ports::kernel_checksums_complete(&theirs)?;
    }
    let kind = if af_packet {
        PortKind::AfPacket {
            iface: ours.clone(),
            netns: None,
        }
    } else {
        PortKind::Tap {
            iface: ours.clone(),
            netns: None,
        }
    };
    let mut options = PortOptions::new(mtu16(config.mtu)?);
    options.sw_checksums = link.sw_checksums;
    let port = ports::open(eal, &kind, &options)?;
    if !af_packet {
        // DPDK made the interface (here, in the namespace) with its MTU and
        // brought it up; the kernel's end gets its address.
        ns(&["addr", "add", &kernel_addr, "dev", &ours])?;
        ns(&["link", "set", "dev", &ours, "up"])?;
    }
    ports::wait_link(&[&port], options.link_timeout)?;
    let client = dpdk_stack(&port, (DPDK_STACK_ADDR, 24), false)?;
    let info = DpdkInfo {
        eal,
        memory: String::new(),
        ports: port.describe.clone(),
        checksums: port.checksums(),
    };
    Ok((client, net, info))
}

/// A client on a DPDK port (memif client, net_tap, af_packet, PCI) whose
/// server is a `bench --server` at `server` on that link.
pub fn remote_dpdk(
    config: &RigConfig,
    link: &LinkArgs,
    transport: PeerTransport,
    server: SocketAddrV4,
) -> Result<(DpdkRig, DpdkInfo), String> {
    let (eal, port) = dpdk_port(transport, link, config.mtu, false, "dpwbench0")?;
    let lossless = transport == PeerTransport::Memif;
    let client = dpdk_stack(&port, link.address()?, lossless)?;
    let emss = client.emss();
    let info = DpdkInfo {
        eal,
        memory: String::new(),
        ports: port.describe.clone(),
        checksums: port.checksums(),
    };
    Ok((
        Rig {
            client: Endpoint::new(client, emss, 1, config.memory),
            server: ServerSide::Remote,
            server_addr: server,
            startup: config.startup(),
            run: run_id(),
            client_cpu: None,
        },
        info,
    ))
}

fn mtu16(mtu: usize) -> Result<u16, String> {
    u16::try_from(mtu).map_err(|_| format!("--mtu {mtu} is too large for a DPDK port"))
}

/// The cores of a client of a `bench --server` (`--cores` with a HOST).
pub enum RemoteCores {
    /// Over Linux TCP: a transport per core.
    Kernel(Vec<Rig<KernelTransport, KernelTransport>>),
    /// Over a DPDK port with a queue pair per core, steered.
    Dpdk(Vec<DpdkRig>, DpdkInfo),
}

/// A client of `cores` cores whose server is a `bench --server` at
/// `server`, over `transport`: one host (a control-plane thread, a
/// registry) for all of them, and each core its own transport (a DPDK
/// queue pair whose active opens pick ports that hash to it, or Linux
/// TCP). Every core's QPs are of one run (they share its id), so the
/// server serves them together.
pub fn remote_cores(
    config: &RigConfig,
    link: &LinkArgs,
    transport: PeerTransport,
    server: SocketAddrV4,
    cores: u16,
) -> Result<RemoteCores, String> {
    let host = Host::new(cores, 1);
    host.set_direct_receive(config.direct_receive);
    let run = run_id();
    fn rig<C: CoreTransport>(
        client: Endpoint<C>,
        server_addr: SocketAddrV4,
        startup: StartupConfig,
        run: u64,
    ) -> Rig<C, C> {
        Rig {
            client,
            server: ServerSide::Remote,
            server_addr,
            startup,
            run,
            client_cpu: None,
        }
    }
    if transport == PeerTransport::Kernel {
        let rigs = (0..cores)
            .map(|k| {
                let t = kernel_transport(Ipv4Addr::UNSPECIFIED)?;
                let client = Endpoint::on_host(&host, k, t, config.mtu - 40, config.memory);
                Ok(rig(client, server, config.startup(), run))
            })
            .collect::<Result<Vec<_>, String>>()?;
        return Ok(RemoteCores::Kernel(rigs));
    }
    let (eal, port) =
        crate::link::dpdk_port_queues(transport, link, config.mtu, false, "dpwbench0", cores)?;
    let steer = if cores > 1 { Some(port.steer()?) } else { None };
    let lossless = transport == PeerTransport::Memif;
    let mut rigs = Vec::with_capacity(usize::from(cores));
    for k in 0..cores {
        let stack =
            crate::link::dpdk_stack_on(&port, k, steer.as_ref(), link.address()?, lossless)?;
        let emss = stack.emss();
        let client = Endpoint::on_host(&host, k, stack, emss, config.memory);
        rigs.push(rig(client, server, config.startup(), run));
    }
    let info = DpdkInfo {
        eal,
        memory: String::new(),
        ports: crate::link::describe_queues(&port, cores),
        checksums: port.checksums(),
    };
    Ok(RemoteCores::Dpdk(rigs, info))
}
