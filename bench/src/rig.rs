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
use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant as StdInstant};

use control::mpa::{Accept, StartupConfig};
use control::runtime::{ControlPlane, Decision, Handoff, StartupResult};
use dataplane::{Core, CoreConfig, CoreTransport};
use rnic_engine::cq::{Wc, WcOpcode, WcStatus};
use rnic_engine::mem::{Access, Region};
use rnic_engine::qp::QpEvent;
use rnic_engine::verbs::{CqHandle, Mr, QpHandle, QpInit, RemoteAddr, Rnic, RnicConfig, Sge};
use tcp_lite::link::{self, LinkConfig, LinkEnd};
use tcp_lite::sys::kernel::{KernelConfig, KernelTransport};
use tcp_lite::sys::netns::{self, Netns};
use tcp_lite::sys::tap::TapDevice;
use tcp_lite::{CongestionControl, ConnId, Duration, Instant, Stack, StackConfig, TcpConfig};

use crate::hello::{self, ClientHello, ServerHello};
use crate::responder::{Responder, Served};
use crate::workload::{memory_for, Spec};

/// Send and receive queue depth of every QP.
pub const QUEUE_DEPTH: usize = 512;
/// Completions per CQ: every work request of the most QPs (64) at the
/// deepest queues (512 sends and 512 receives each) can complete in one
/// step without overflowing it.
const CQ_DEPTH: usize = 64 * QUEUE_DEPTH * 2;
/// Connections one RNIC runs at once (64 QPs of a run, and room for a
/// persistent server's clients).
const CONNECTIONS_MAX: usize = 128;
/// How long connection set-up and teardown may take.
const SETUP_LIMIT: StdDuration = StdDuration::from_secs(10);

/// The process's clock as tcp-lite time (the data plane's).
pub fn now() -> Instant {
    dataplane::clock::now()
}

/// One RNIC: a poll-mode core (its transport, its link to the control
/// plane, its engine), its control plane, and registered memory.
pub struct Endpoint<T: CoreTransport> {
    /// The core: TCP, the engine and the QPs of its connections.
    pub core: Core<T>,
    pub(crate) control: ControlPlane,
    /// The CQ of every QP.
    pub cq: CqHandle,
    /// Registered memory, remotely readable, writable and atomic.
    pub region: Arc<Region>,
    /// Its registration.
    pub mr: Mr,
    /// Scratch for draining the CQ.
    wcs: Vec<Wc>,
}

impl<T: CoreTransport> Endpoint<T> {
    /// An RNIC on `transport`, with `memory` octets registered.
    pub fn new(transport: T, emss: usize, seed: u64, memory: usize) -> Endpoint<T> {
        let (control, mut links) = ControlPlane::start(1);
        let mut rnic = Rnic::new(RnicConfig {
            stag_seed: seed,
            ..RnicConfig::default()
        });
        let pd = rnic.alloc_pd().expect("a fresh RNIC has room for a PD");
        let cq = rnic
            .create_cq(CQ_DEPTH)
            .expect("a fresh RNIC has room for a CQ");
        let region = Region::new(memory);
        let access = Access::LOCAL_WRITE
            | Access::REMOTE_WRITE
            | Access::REMOTE_READ
            | Access::REMOTE_ATOMIC;
        let mr = rnic
            .reg_region(pd, region.clone(), access)
            .expect("registration");
        let qp_init = QpInit {
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            sq_size: QUEUE_DEPTH,
            rq_size: QUEUE_DEPTH,
        };
        let mut config = CoreConfig::new(emss);
        config.connections_max = CONNECTIONS_MAX;
        Endpoint {
            core: Core::new(config, transport, links.remove(0), rnic, qp_init),
            control,
            cq,
            region,
            mr,
            wcs: vec![BLANK_WC; 256],
        }
    }

    /// How long an initiator waits after the MPA Reply before its first
    /// FPDU (0 by default). Linux siw (6.1) sends its Reply before it hands
    /// the socket to its receive path, and an FPDU that lands in between
    /// is not read until another segment arrives: a fast initiator can
    /// stall there (seen with dpwarp, and between siw peers too).
    pub fn set_settle(&mut self, settle: Duration) {
        self.core.config_mut().settle = settle;
    }

    /// The layout of the Terminates our QPs send (RFC 5040's by default).
    pub fn set_terminate_layout(&mut self, layout: rnic_engine::wire::term::Encoding) {
        self.core.config_mut().terminate_layout = layout;
    }

    /// Responder: send FPDUs before the initiator's first one arrived, as
    /// Linux siw does (false by default: RFC 5044 §7.1's MPA fencing). For
    /// ULPs whose passive side sends first (perftest's ib_write_lat) with
    /// an initiator that offers no RFC 6581 RTR.
    pub fn set_unfenced(&mut self, unfenced: bool) {
        self.core.config_mut().unfenced = unfenced;
    }

    /// One turn of the core (see `dataplane::core`). Startups that end
    /// here get their QPs, but those QPs take no octets before the next
    /// turn: the caller sees the handoff first
    /// ([`take_handoffs`](Self::take_handoffs)) and can post receives
    /// before the peer's first message is read.
    pub fn step(&mut self, now: Instant) {
        self.core.turn(now);
    }

    /// The engine.
    pub fn rnic(&mut self) -> &mut Rnic {
        self.core.rnic()
    }

    /// Startups that ended since the last call, each with its QP if it
    /// reached Full Operation.
    pub fn take_handoffs(&mut self) -> Vec<(Handoff, Option<QpHandle>)> {
        std::iter::from_fn(|| self.core.next_handoff()).collect()
    }

    /// Terminates sent and received since the last call, by QP (a QP that
    /// ended in this step is still named).
    pub fn take_events(&mut self) -> Vec<(QpHandle, QpEvent)> {
        std::iter::from_fn(|| self.core.next_event()).collect()
    }

    /// QPs whose connections ended since the last call (already destroyed).
    pub fn take_ended(&mut self) -> Vec<QpHandle> {
        std::iter::from_fn(|| self.core.next_ended()).collect()
    }

    /// Closes QP `qp`'s connection in order (FIN after what is queued).
    pub fn close(&mut self, qp: QpHandle) {
        self.core.close(qp);
    }

    /// Ends QP `qp`'s connection at once (RST): the QP's work flushes and the
    /// QP is destroyed now, so nothing the peer sends later can reach the
    /// memory it used. Reported by [`take_ended`](Self::take_ended).
    pub fn abort(&mut self, qp: QpHandle) {
        self.core.abort(qp);
    }

    /// How the listen on `port` went; `None` until the control plane's
    /// command has reached this core.
    pub fn listen_status(&self, port: u16) -> Option<Result<(), String>> {
        self.core
            .listen_status(port)
            .map(|r| r.map_err(|e| format!("cannot listen on port {port}: {e}")))
    }

    /// Connections in Full Operation or closing.
    pub fn open_connections(&self) -> usize {
        self.core.open_connections()
    }

    /// Whether QP `qp`'s connection is still open (or closing in order).
    pub fn is_live(&self, qp: QpHandle) -> bool {
        self.core.is_live(qp)
    }

    /// Octets QP `qp`'s connection has delivered to the engine (FPDUs of
    /// any kind), while it is live: a measure of the peer's activity that
    /// needs no completion (an RDMA Write or Read Request makes none here).
    pub fn rx_octets(&self, qp: QpHandle) -> Option<u64> {
        self.core.rx_octets(qp)
    }

    /// The TCP connection of QP `qp`.
    pub fn conn_of(&self, qp: QpHandle) -> Option<ConnId> {
        self.core.conn_of(qp)
    }

    /// Completions waiting, into `out`.
    pub fn poll_cq(&mut self, out: &mut Vec<Wc>) {
        loop {
            let n = self.core.poll_cq(self.cq, &mut self.wcs);
            out.extend_from_slice(&self.wcs[..n]);
            if n < self.wcs.len() {
                return;
            }
        }
    }

    /// An SGE of our memory.
    pub fn sge(&self, offset: u64, len: u32) -> Sge {
        Sge {
            stag: self.mr.stag,
            to: self.mr.base_to + offset,
            len,
        }
    }

    /// Our memory as the peer addresses it.
    pub fn remote(&self, offset: u64) -> RemoteAddr {
        RemoteAddr {
            stag: self.mr.stag,
            to: self.mr.base_to + offset,
        }
    }
}

/// A completion slot's filler.
const BLANK_WC: Wc = Wc {
    wr_id: 0,
    status: WcStatus::Success,
    opcode: WcOpcode::Send,
    qp: QpHandle(0),
    byte_len: 0,
    imm: None,
    invalidated: None,
    solicited: false,
};

/// A benchmark server: listens, serves each connection the workload its
/// client announces ([`Responder`]), and closes when the client does.
pub struct Server<T: CoreTransport> {
    /// Its RNIC.
    pub endpoint: Endpoint<T>,
    responder: Responder,
    /// Connections served to the end.
    pub served: u64,
    /// The client marked the connections now open as its last.
    last_open: bool,
    /// A client's last connections have all closed.
    pub client_done: bool,
    port: u16,
    /// The run being served (set by the accept callback, cleared when it
    /// is done): a second client's run is refused meanwhile.
    active: Arc<std::sync::Mutex<Option<u64>>>,
    refused: Arc<std::sync::atomic::AtomicU64>,
}

impl<T: CoreTransport> Server<T> {
    /// A server on `transport` with `memory` octets, listening on `port`.
    pub fn new(
        transport: T,
        emss: usize,
        memory: usize,
        port: u16,
        startup: StartupConfig,
    ) -> Server<T> {
        let endpoint = Endpoint::new(transport, emss, 2, memory);
        let mine = ServerHello {
            stag: endpoint.mr.stag,
            to: endpoint.mr.base_to,
        };
        let len = memory;
        let active: Arc<std::sync::Mutex<Option<u64>>> = Arc::default();
        let refused: Arc<std::sync::atomic::AtomicU64> = Arc::default();
        let (serving, refusals) = (active.clone(), refused.clone());
        endpoint.control.listen(
            0,
            port,
            startup,
            Box::new(move |request, peer| {
                let verdict = ClientHello::decode(&request.private_data)
                    .and_then(|h| check_fits(&h, len).map(|()| h))
                    .and_then(|h| {
                        let mut run = serving.lock().unwrap_or_else(|p| p.into_inner());
                        match *run {
                            Some(r) if r != h.run => {
                                Err("this server is serving another client's run: wait for it, \
                                 or start another server on another port (-p)"
                                    .to_string())
                            }
                            _ => {
                                *run = Some(h.run);
                                Ok(())
                            }
                        }
                    });
                match verdict {
                    Ok(()) => Decision::Accept(Accept {
                        private_data: mine.encode(),
                        ..Accept::default()
                    }),
                    Err(why) => {
                        eprintln!("bench server: refused the client at {peer}: {why}");
                        refusals.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        Decision::Reject(hello::encode_reject(&why))
                    }
                }
            }),
        );
        Server {
            endpoint,
            responder: Responder::default(),
            served: 0,
            last_open: false,
            client_done: false,
            port,
            active,
            refused,
        }
    }

    /// Clients refused so far (workloads that do not fit, a second run).
    pub fn refused(&self) -> u64 {
        self.refused.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Steps until the listener is up (or refused), at most 10 s.
    pub fn wait_listening(&mut self) -> Result<(), String> {
        let start = StdInstant::now();
        loop {
            if let Some(status) = self.endpoint.listen_status(self.port) {
                return status;
            }
            if start.elapsed() > SETUP_LIMIT {
                return Err("the control plane never set up the listener".into());
            }
            self.step(now())?;
        }
    }

    /// One turn: the RNIC, new connections, the workloads' replies.
    pub fn step(&mut self, now: Instant) -> Result<(), String> {
        self.endpoint.step(now);
        // Ends first: a new QP may take an ended one's handle in this step.
        for qp in self.endpoint.take_ended() {
            self.responder.remove(qp);
            self.served += 1;
        }
        // A benchmark's QPs do not terminate unless something is wrong; the
        // failures show as completions in error. Keep the queue bounded.
        let _ = self.endpoint.take_events();
        for (handoff, qp) in self.endpoint.take_handoffs() {
            let (StartupResult::Established(e), Some(qp)) = (&handoff.result, qp) else {
                continue;
            };
            // The callback accepted only hellos that decode and fit.
            let Ok(h) = ClientHello::decode(&e.peer_private_data) else {
                self.endpoint.close(qp);
                continue;
            };
            self.last_open |= h.last;
            self.responder.add(
                &mut self.endpoint,
                Served::new(
                    qp,
                    &h,
                    RemoteAddr {
                        stag: h.stag,
                        to: h.to,
                    },
                ),
            );
        }
        if self.last_open && self.endpoint.open_connections() == 0 {
            self.client_done = true;
            self.last_open = false;
            *self.active.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
        if let Err((qp, why)) = self.responder.step(&mut self.endpoint) {
            // One connection's failure ends that connection only.
            self.responder.remove(qp);
            self.endpoint.close(qp);
            return Err(why);
        }
        Ok(())
    }
}

/// Whether the workload of `h` (from the network) is well formed and fits
/// a server memory of `len` octets, saying why not.
pub fn check_fits(h: &ClientHello, len: usize) -> Result<(), String> {
    let size = h.size as usize;
    if size == 0 || h.qps == 0 || h.qi >= h.qps || h.depth == 0 || h.depth as usize > QUEUE_DEPTH {
        return Err(format!(
            "malformed workload: size {}, QP {} of {}, depth {}",
            h.size, h.qi, h.qps, h.depth
        ));
    }
    let need = memory_for(h.qps as usize, size);
    if h.to.checked_add(need as u64).is_none() {
        return Err(format!(
            "the client's memory at TO {:#x} would wrap past 2^64 octets",
            h.to
        ));
    }
    if need > len {
        return Err(format!(
            "{} QP(s) of {} B messages need {} octets of server memory; this server has {}: \
             start it with a larger -s (or -a) and -q",
            h.qps, h.size, need, len
        ));
    }
    Ok(())
}

/// A client's QP and what it addresses on the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pair {
    /// The client's QP.
    pub qp: QpHandle,
    /// The server's memory (its first octet; slots are offsets from it).
    pub remote: RemoteAddr,
}

/// A client RNIC and, in process, its server.
pub struct Rig<C: CoreTransport, S: CoreTransport> {
    /// The side that opens connections and drives the workload.
    pub client: Endpoint<C>,
    /// The server, when it runs in this process.
    pub server: Option<Server<S>>,
    server_addr: SocketAddrV4,
    startup: StartupConfig,
    /// This run's name in the hello.
    run: u64,
}

/// A name for this process's run: its PID and the clock's nanoseconds.
fn run_id() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (u64::from(std::process::id()) << 32) ^ nanos
}

impl<C: CoreTransport, S: CoreTransport> Rig<C, S> {
    /// Steps every RNIC in this process once.
    pub fn step(&mut self) -> Result<(), String> {
        let now = now();
        self.client.step(now);
        if let Some(server) = &mut self.server {
            server.step(now)?;
        }
        Ok(())
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
        let mut tokens = Vec::with_capacity(spec.qps);
        for qi in 0..spec.qps {
            let h = ClientHello {
                op: spec.op,
                mode: spec.mode,
                size: spec.size as u32,
                depth: spec.depth as u16,
                qi: qi as u16,
                qps: spec.qps as u16,
                last,
                stag: self.client.mr.stag,
                to: self.client.mr.base_to,
                run: self.run,
            };
            let token =
                self.client
                    .control
                    .connect(0, self.server_addr, self.startup.clone(), &h.encode());
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
        for token in tokens {
            let Some((handoff, qp)) = ended.iter().find(|(h, _)| h.token == token) else {
                failure.get_or_insert_with(|| "a connection never ended its startup".to_string());
                continue;
            };
            match (&handoff.result, qp) {
                (StartupResult::Established(e), Some(qp)) => {
                    match ServerHello::decode(&e.peer_private_data) {
                        Ok(s) => pairs.push(Pair {
                            qp: *qp,
                            remote: RemoteAddr {
                                stag: s.stag,
                                to: s.to,
                            },
                        }),
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
            rig.client.open_connections() == 0
                && rig
                    .server
                    .as_ref()
                    .is_none_or(|s| s.endpoint.open_connections() == 0)
        })
    }
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
    /// Linux TCP to a `bench --server` in another process or host.
    Remote,
}

impl TransportKind {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            TransportKind::Embedded => "embedded",
            TransportKind::Kernel => "kernel",
            TransportKind::Tap => "tap",
            TransportKind::Remote => "remote",
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
}

impl RigConfig {
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
    let mut rig = Rig {
        client: Endpoint::new(client, client_emss, 1, config.memory),
        server: Some(Server::new(
            server,
            server_emss,
            config.memory,
            config.port,
            config.startup(),
        )),
        server_addr: SocketAddrV4::new(server_addr, config.port),
        startup: config.startup(),
        run: run_id(),
    };
    settle(&mut rig)?;
    Ok(rig)
}

/// Waits for the in-process server's listener before anyone connects.
fn settle<C: CoreTransport, S: CoreTransport>(rig: &mut Rig<C, S>) -> Result<(), String> {
    match &mut rig.server {
        Some(server) => server.wait_listening(),
        None => Ok(()),
    }
}

/// Two RNICs on tcp-lite over the in-memory link.
pub fn embedded(config: &RigConfig) -> Result<Rig<Stack<LinkEnd>, Stack<LinkEnd>>, String> {
    let mut link_config = LinkConfig::ethernet(config.mtu);
    // A NIC offloads the TCP/IP checksums (DPDK ports will use that
    // offload); the embedded link does likewise unless asked to compute them.
    link_config.checksums = config.sw_checksums;
    let (end_c, end_s) = link::pair(link_config, 1);
    let (c_addr, s_addr) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    // 256 KiB each way: the window outruns nothing on a zero-delay link, and
    // both rings stay in this core's L2 (1 MiB measured 35 against 70
    // Gbit/s for 64 KiB Writes).
    let tcp = TcpConfig {
        rx_buffer: 256 * 1024,
        tx_buffer: 256 * 1024,
        // The in-memory link never congests.
        congestion: CongestionControl::None,
        ..TcpConfig::default()
    };
    let stack = |mac: u8, addr, end| {
        let mut c = StackConfig::new([2, 0, 0, 0, 0, mac], addr);
        c.tcp = tcp.clone();
        Stack::new(c, end, now()).map_err(|e| e.to_string())
    };
    let client = stack(1, c_addr, end_c)?;
    let server = stack(2, s_addr, end_s)?;
    let (ce, se) = (client.emss(), server.emss());
    in_process(client, ce, server, se, s_addr, config)
}

/// Two RNICs on Linux TCP over loopback.
pub fn kernel(config: &RigConfig) -> Result<Rig<KernelTransport, KernelTransport>, String> {
    let kc = KernelConfig {
        bind: Ipv4Addr::LOCALHOST,
        rx_buffer: 4 << 20,
        tx_buffer: 4 << 20,
        ..KernelConfig::default()
    };
    let client = KernelTransport::new(kc.clone()).map_err(|e| e.to_string())?;
    let server = KernelTransport::new(kc).map_err(|e| e.to_string())?;
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
    let kc = KernelConfig {
        bind: TAP_KERNEL_ADDR,
        rx_buffer: 4 << 20,
        tx_buffer: 4 << 20,
        ..KernelConfig::default()
    };
    let server = KernelTransport::new(kc).map_err(|e| e.to_string())?;
    let emss = client.emss();
    Ok((
        in_process(client, emss, server, emss, TAP_KERNEL_ADDR, config)?,
        net,
    ))
}

/// A client on Linux TCP whose server is a `bench --server` at `server`.
pub fn remote(
    config: &RigConfig,
    server: SocketAddrV4,
) -> Result<Rig<KernelTransport, KernelTransport>, String> {
    let kc = KernelConfig {
        rx_buffer: 4 << 20,
        tx_buffer: 4 << 20,
        ..KernelConfig::default()
    };
    let client = KernelTransport::new(kc).map_err(|e| e.to_string())?;
    let emss = config.mtu - 40;
    Ok(Rig {
        client: Endpoint::new(client, emss, 1, config.memory),
        server: None,
        server_addr: server,
        startup: config.startup(),
        run: run_id(),
    })
}
