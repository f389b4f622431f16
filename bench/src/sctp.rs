//! `--llp sctp`: the benchmark's two RNICs over DDP over SCTP (RFC 5043)
//! instead of MPA over TCP, each an [`SctpEndpoint`] (a
//! `dataplane::SctpCore`), joined by the embedded link (tcp-lite's UDP on
//! the in-memory link) or Linux UDP on loopback, with the same workloads
//! ([`crate::workload`]) and the same server side ([`Responder`]).
//!
//! The client opens one association to the server and one DDP stream per
//! QP of a workload (Enhanced Initiate, RFC 6581 §7), carrying the same
//! hello as MPA's private data ([`crate::hello`]); the server accepts every
//! stream with its own hello (its memory) and serves it as it serves an
//! MPA connection. Both RNICs run on this thread (one core); each has its
//! control-plane thread, which runs session establishment (the server's
//! decides every Initiate, as an MPA server's decides every Request). With
//! `--cores` ([`embedded_on`], [`dpdk_pair_cores`]) each core runs such a
//! pair on its own link or queue pair, and the client's and the server's
//! cores share their host's control-plane thread and registry.

use std::collections::{HashMap, HashSet};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::Instant as StdInstant;

use control::runtime::{ControlPlane, CoreLink, Decision};
use control::session::Accept;
use dataplane::DpdkDevice;
use dataplane::{MessageTransport, PdChoice, SctpCoreConfig, SctpEvent, SctpUnit};
use rnic_engine::cq::Wc;
use rnic_engine::mem::{Access, Pd, Region};
use rnic_engine::sctp::rx::ReorderConfig;
use rnic_engine::verbs::{CqHandle, Mr, QpHandle, QpInit, RemoteAddr, Rnic, RnicConfig, Sge};
use sctp_lite::AssocId;
use tcp_lite::link::{self, LinkConfig, LinkEnd};
use tcp_lite::sys::netns::Netns;
use tcp_lite::sys::tap::TapDevice;
use tcp_lite::sys::udp::KernelUdp;
use tcp_lite::{Stack, StackConfig};

use crate::endpoint::{now, Host, RnicEnd, QPS_MAX, QUEUE_DEPTH};
use crate::hello::{ClientHello, ServerHello};
use crate::responder::{
    check_fits, Connection, EventHook, Responder, Served, ServerEvent, Serving,
};
use crate::rig::{BenchRig, CoreReport, Pair, RigConfig};
use crate::spec::{credit_offset, Spec};

/// How long opening or closing streams may take.
const SETUP_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);
/// The smallest path MTU an association is given (IPv4's minimum
/// reassembly size is 576; SCTP's packets must hold a DATA chunk's header
/// and some data).
const MTU_MIN: usize = 576;
/// The server's UDP port (RFC 6951's SCTP over UDP port).
const SERVER_UDP_PORT: u16 = sctp_lite::UDP_ENCAPSULATION_PORT;

/// One RNIC over DDP over SCTP: its SCTP unit, CQ and registered memory,
/// turned over a transport its owner hands in ([`SctpEndpoint::turn`]):
/// its own, or a core's that also runs MPA on it.
pub struct SctpEndpoint {
    /// The unit.
    pub core: SctpUnit,
    /// Its own control plane (session establishment), alive as long as
    /// it; `None` on a host's ([`SctpServer::serving`]).
    _plane: Option<ControlPlane>,
    /// The host whose control plane it uses, kept alive as long as it
    /// (`bench --cores`: [`SctpEndpoint::on_host`]).
    _host: Option<Arc<Host>>,
    cq: CqHandle,
    region: Arc<Region>,
    mr: Mr,
    wcs: Vec<Wc>,
    /// QPs whose streams are up.
    live: HashSet<QpHandle>,
    /// Events not yet looked at.
    events: Vec<SctpEvent>,
}

/// The SCTP endpoint and DDP core configuration of an RNIC over a path
/// of `mtu` octets.
fn core_config(mtu: usize) -> SctpCoreConfig {
    let endpoint = sctp_lite::Config {
        path_mtu: mtu as u32,
        // One DDP stream per QP of a run (and the server's spare).
        streams: (QPS_MAX + 1) as u16,
        // A window like TCP's in the MPA rigs: 256 KiB each way, so both
        // stay in the core's L2 (4 MiB ran 64 KiB Writes at 10.3 Gbit/s
        // against 18.2 for 256 KiB, on the embedded link).
        receive_window: 256 << 10,
        send_buffer_max: 256 << 10,
        ..sctp_lite::Config::default()
    };
    let mut config = SctpCoreConfig::new(endpoint);
    quick_liveness(&mut config.endpoint);
    // Messages overtaken by a retransmission wait in the QP's reorder
    // window: room for what the peer can send meanwhile.
    config.reorder = ReorderConfig {
        messages: i16::MAX as u16,
        octets: 16 << 20,
    };
    // A run's streams share one association: it may take the whole
    // budget, as before associations had shares of their own.
    config.reorder_association_octets = config.reorder_budget;
    config.streams_max = QPS_MAX + 64;
    config
}

/// A benchmark's peer that vanished (killed, or its path gone) is found in
/// seconds, not in RFC 9260 §16's minutes: an idle association (one that
/// only receives, as a Write's server does) sends a HEARTBEAT every
/// [`BENCH_HEARTBEAT_MS`] (§8.3), and a retransmission, of DATA or of a
/// HEARTBEAT, waits at most [`BENCH_RTO_MAX_MS`] (§6.3.3's doubling capped
/// by RTO.Max), so that the ten unanswered in a row that end the
/// association (§8.1) take about 10 s while receiving and 5 s while
/// sending. Over UDP encapsulation nothing else would tell: a killed
/// process sends no ABORT, and RFC 6951 §5.5 forbids relying on the ICMP
/// its port then draws. A benchmark's paths are a LAN's or a host's own
/// (an RTT of microseconds, the RTO at RTO.Min), so the cap changes no
/// timer of a live association.
fn quick_liveness(endpoint: &mut sctp_lite::Config) {
    endpoint.heartbeat_interval_ms = Some(BENCH_HEARTBEAT_MS);
    endpoint.rto_initial_ms = endpoint.rto_initial_ms.min(BENCH_RTO_MAX_MS);
    endpoint.rto_max_ms = BENCH_RTO_MAX_MS;
}

/// Whether an association that ended for `reason` ended before its
/// client was done: it stopped answering ([`quick_liveness`]; a killed
/// process sends no ABORT) or broke the protocol. A bench client ends its
/// association with an ABORT (RFC 9260 §9.1) once its streams are closed,
/// so that its server hears at once that it is gone: an ABORT is its
/// normal end.
fn abrupt(reason: Option<sctp_lite::CloseReason>) -> bool {
    use sctp_lite::CloseReason as R;
    matches!(
        reason,
        Some(R::TimedOut | R::ProtocolError | R::ReceiveBufferExhausted)
    )
}

/// [`quick_liveness`]'s HB.interval.
const BENCH_HEARTBEAT_MS: u64 = 500;
/// [`quick_liveness`]'s RTO.Max (and RTO.Initial).
const BENCH_RTO_MAX_MS: u64 = 500;

/// Core `core`'s end of `host`'s control plane, and an engine on the
/// host's registry for its streams' QPs.
fn host_core(host: &Host, core: u16) -> Result<(CoreLink, Rnic), String> {
    let link = host
        .take_link(core)
        .ok_or_else(|| format!("the host has no control-plane link {core} left"))?;
    let rnic = Rnic::with_registry(
        RnicConfig {
            qps_max: QPS_MAX + 64,
            ..RnicConfig::default()
        },
        host.registry().clone(),
    );
    Ok((link, rnic))
}

/// A server's decision on every stream's Initiate: accepted, with the
/// server's memory (`mr`) in the Accept, as MPA's Reply carries it.
fn accept_all(mr: Mr) -> control::runtime::OnInitiate {
    let hello = ServerHello {
        stag: mr.stag,
        to: mr.base_to,
    }
    .encode();
    Box::new(move |_: &_, _| {
        Decision::Accept(Accept {
            private_data: hello.clone(),
            ..Accept::default()
        })
    })
}

/// What an [`SctpEndpoint`] is made of besides its transport.
struct Parts {
    rnic: Rnic,
    pd: Pd,
    region: Arc<Region>,
    mr: Mr,
    link: CoreLink,
    plane: Option<ControlPlane>,
    host: Option<Arc<Host>>,
}

impl SctpEndpoint {
    fn new<T: MessageTransport>(
        transport: &mut T,
        udp_port: u16,
        mtu: usize,
        memory: usize,
        seed: u64,
        serve: bool,
    ) -> Result<SctpEndpoint, String> {
        let mut rnic = Rnic::new(RnicConfig {
            stag_seed: seed,
            qps_max: QPS_MAX + 64,
            ..RnicConfig::default()
        });
        let pd = rnic.alloc_pd().map_err(|e| format!("{e:?}"))?;
        let region = Region::new(memory);
        let all = Access::LOCAL_WRITE
            .union(Access::REMOTE_WRITE)
            .union(Access::REMOTE_READ)
            .union(Access::REMOTE_ATOMIC);
        let mr = rnic
            .reg_region(pd, region.clone(), all)
            .map_err(|e| format!("{e:?}"))?;
        let config = core_config(mtu);
        let (plane, mut links) = ControlPlane::start(1);
        if serve {
            plane
                .listen_sessions(0, config.session.clone(), accept_all(mr))
                .map_err(|e| format!("the session configuration: {e}"))?;
        }
        let parts = Parts {
            rnic,
            pd,
            region,
            mr,
            link: links.remove(0),
            plane: Some(plane),
            host: None,
        };
        SctpEndpoint::assemble(config, transport, udp_port, parts, serve)
    }

    /// An endpoint as core `core` of `host` (its control-plane link, its
    /// registry and PD: `bench --cores`), on `transport`'s UDP port
    /// `udp_port`, addressing `region` through `mr`, a registration in the
    /// host's registry ([`Host::register`]). A server (`serve`) accepts
    /// every stream through the host's control plane, as
    /// [`SctpEndpoint::new`]'s does through its own.
    #[allow(clippy::too_many_arguments)]
    fn on_host<T: MessageTransport>(
        transport: &mut T,
        udp_port: u16,
        mtu: usize,
        host: &Arc<Host>,
        core: u16,
        (region, mr): (Arc<Region>, Mr),
        serve: bool,
    ) -> Result<SctpEndpoint, String> {
        let (link, rnic) = host_core(host, core)?;
        let config = core_config(mtu);
        if serve {
            host.listen_sessions(core, config.session.clone(), accept_all(mr))?;
        }
        let parts = Parts {
            rnic,
            pd: host.pd(),
            region,
            mr,
            link,
            plane: None,
            host: Some(host.clone()),
        };
        SctpEndpoint::assemble(config, transport, udp_port, parts, serve)
    }

    /// An endpoint on `transport`'s UDP port `udp_port` that makes its
    /// QPs in `parts`' PD and waits (at most 10 s) until the control plane
    /// listens for its streams, if `listening`.
    fn assemble<T: MessageTransport>(
        config: SctpCoreConfig,
        transport: &mut T,
        udp_port: u16,
        parts: Parts,
        listening: bool,
    ) -> Result<SctpEndpoint, String> {
        let Parts {
            mut rnic,
            pd,
            region,
            mr,
            link,
            plane,
            host,
        } = parts;
        let cq = rnic
            .create_cq(crate::endpoint::IN_FLIGHT_MAX * 2)
            .map_err(|e| format!("{e:?}"))?;
        let qp_init = QpInit {
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            sq_size: QUEUE_DEPTH,
            rq_size: QUEUE_DEPTH,
        };
        let epoch = StdInstant::now();
        let mut core = SctpUnit::new(config, transport, udp_port, link, rnic, qp_init, epoch)?;
        // Initiates before the listen reaches the core would be refused.
        while listening && !core.link().session_listening() {
            if epoch.elapsed() > SETUP_LIMIT {
                return Err("the control plane did not start listening for DDP streams".into());
            }
            core.turn(transport, now());
        }
        Ok(SctpEndpoint {
            core,
            _plane: plane,
            _host: host,
            cq,
            region,
            mr,
            wcs: vec![Wc::EMPTY; 256],
            live: HashSet::new(),
            events: Vec::new(),
        })
    }

    /// One turn of its unit over `transport` (the one it was made on),
    /// and the events that came of it.
    fn turn<T: MessageTransport>(&mut self, transport: &mut T) {
        self.core.turn(transport, now());
        while let Some(event) = self.core.next_event() {
            match &event {
                SctpEvent::StreamUp { qp, .. } => {
                    self.live.insert(*qp);
                }
                SctpEvent::StreamEnded { qp: Some(qp), .. } => {
                    self.live.remove(qp);
                }
                _ => {}
            }
            self.events.push(event);
        }
    }
}

impl RnicEnd for SctpEndpoint {
    fn rnic(&mut self) -> &mut Rnic {
        self.core.rnic()
    }

    fn sge(&self, offset: u64, len: u32) -> Sge {
        Sge {
            stag: self.mr.stag,
            to: self.mr.base_to + offset,
            len,
        }
    }

    fn region(&self) -> &Arc<Region> {
        &self.region
    }

    fn poll_cq(&mut self, out: &mut Vec<Wc>) {
        loop {
            let n = self
                .core
                .rnic()
                .poll_cq(self.cq, &mut self.wcs)
                .unwrap_or(0);
            out.extend_from_slice(&self.wcs[..n]);
            if n < self.wcs.len() {
                return;
            }
        }
    }

    fn is_live(&self, qp: QpHandle) -> bool {
        self.live.contains(&qp)
    }
}

/// The server's side of DDP over SCTP: an RNIC that accepts every stream
/// whose hello fits its memory, answering with its own (its memory, as
/// MPA's Reply does), and serves each stream's workload; in a rig's
/// process, or alone (`bench --server --llp sctp`). Its owner turns it over
/// the transport it was made on ([`SctpServer::step`]).
pub struct SctpServer {
    ep: SctpEndpoint,
    responder: Responder,
    /// Streams served.
    served: u64,
    /// Streams that ended with an RDMAP Terminate, or whose workload
    /// failed here.
    failed: u64,
    /// Associations that ended before their client was done ([`abrupt`]).
    ended_abruptly: u64,
    /// An appliance's bench service: admission, leases and events shared
    /// with its MPA cores.
    serving: Option<Appliance>,
}

/// Where and how an appliance's DDP over SCTP listener listens
/// ([`SctpServer::serving`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SctpListen {
    /// Its UDP port (RFC 6951 encapsulation; 9899 is SCTP's registered
    /// one).
    pub udp_port: u16,
    /// Its path's MTU.
    pub mtu: usize,
    /// RFC 6581 §7 (and §9.1): the most inbound Reads a stream's QP
    /// queues, granted as its IRD; and the ORD it uses.
    pub ird_max: u16,
    /// The ORD.
    pub ord: u16,
    /// The protection domain of its streams' QPs (and of the registration
    /// it is given for their local work); `None` for the host's.
    pub pd: Option<Pd>,
    /// Whether a vanished peer is found in seconds, as a benchmark's
    /// ([`quick_liveness`]); otherwise RFC 9260's defaults (an appliance's
    /// client that went silent is found in 6 to 7.5 minutes).
    pub quick_liveness: bool,
}

impl SctpListen {
    /// A benchmark server's listener (`bench --server --llp sctp`) on UDP
    /// port `udp_port` over a path of `mtu` octets, with the IRD and ORD
    /// its streams offer by default.
    pub fn bench(udp_port: u16, mtu: usize) -> SctpListen {
        let session = core_config(mtu).session;
        SctpListen {
            udp_port,
            mtu,
            ird_max: session.ird_max,
            ord: session.ord,
            pd: None,
            quick_liveness: true,
        }
    }
}

/// The state of an [`SctpServer`] that serves clients' runs in a shared
/// [`Serving`] ([`SctpServer::serving`]): an appliance's many runs, each in
/// a lease, or a benchmark server's one run at a time on several cores.
struct Appliance {
    serving: Arc<Serving>,
    /// Its slot among the serving cores.
    slot: usize,
    /// The core whose thread turns it, as its events say.
    core: usize,
    events: Option<EventHook>,
    /// The streams it serves.
    connections: HashMap<QpHandle, Connection>,
    /// Each association's peer.
    peers: HashMap<AssocId, SocketAddrV4>,
    /// Changes whenever `connections` does.
    generation: u64,
}

impl SctpServer {
    /// A server listening on UDP port `udp_port` of `transport` (0: an
    /// ephemeral one).
    pub fn new<S: MessageTransport>(
        transport: &mut S,
        udp_port: u16,
        config: &RigConfig,
    ) -> Result<SctpServer, String> {
        Ok(SctpServer {
            ep: SctpEndpoint::new(transport, udp_port, config.mtu, config.memory, 12, true)?,
            responder: Responder::default(),
            served: 0,
            failed: 0,
            ended_abruptly: 0,
            serving: None,
        })
    }

    /// [`SctpServer::new`] as core `core` of `host` (`bench --cores`):
    /// its memory registered in the host's registry, every stream
    /// accepted through the host's control plane.
    fn on_host<S: MessageTransport>(
        transport: &mut S,
        udp_port: u16,
        host: &Arc<Host>,
        core: u16,
        config: &RigConfig,
    ) -> Result<SctpServer, String> {
        let memory = host.register(config.memory);
        Ok(SctpServer {
            ep: SctpEndpoint::on_host(transport, udp_port, config.mtu, host, core, memory, true)?,
            responder: Responder::default(),
            served: 0,
            failed: 0,
            ended_abruptly: 0,
            serving: None,
        })
    }

    /// The DDP over SCTP listener of an appliance's bench service, on
    /// `transport` as `listen` says, turned by the
    /// thread of core `on_core`: core `core` of `host` (its control-plane
    /// link, its slot in `serving`), whose control plane decides each
    /// stream's Initiate with
    /// `serving` (a run's lease, or a Reject saying why, as its MPA
    /// listeners do), in `region`, registered for local work as `mr`.
    /// Its QPs are in the host's PD, on its registry; `events` hears of
    /// every stream as it does of MPA connections.
    #[allow(clippy::too_many_arguments)]
    pub fn serving<S: MessageTransport>(
        transport: &mut S,
        listen: &SctpListen,
        host: &Arc<Host>,
        (core, on_core): (u16, usize),
        region: Arc<Region>,
        mr: Mr,
        serving: &Arc<Serving>,
        events: Option<EventHook>,
    ) -> Result<SctpServer, String> {
        let (link, rnic) = host_core(host, core)?;
        let mut config = core_config(listen.mtu);
        if !listen.quick_liveness {
            let defaults = sctp_lite::Config::default();
            config.endpoint.heartbeat_interval_ms = defaults.heartbeat_interval_ms;
            config.endpoint.rto_initial_ms = defaults.rto_initial_ms;
            config.endpoint.rto_max_ms = defaults.rto_max_ms;
        }
        // Many clients, an association each: one may hold what one stream's
        // window holds, not the whole budget, so that one client cannot
        // leave none for the others (at least four of them share it).
        config.reorder_association_octets = config.reorder.octets;
        config.session.ird_max = listen.ird_max;
        config.session.ird = listen.ird_max;
        config.session.ord = listen.ord;
        let len = region.len();
        let (decider, hook) = (serving.clone(), events.clone());
        let on_initiate = move |request: &control::session::Request, peer: SocketAddr| {
            // A UDP peer over IPv4 (the transport's only family).
            let peer = match peer {
                SocketAddr::V4(p) => p,
                SocketAddr::V6(p) => SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, p.port()),
            };
            decider.decide(
                &request.private_data,
                len,
                mr,
                ("sctp", peer),
                hook.as_ref(),
            )
        };
        host.listen_sessions(core, config.session.clone(), Box::new(on_initiate))?;
        let parts = Parts {
            rnic,
            pd: listen.pd.unwrap_or(host.pd()),
            region,
            mr,
            link,
            plane: None,
            host: None,
        };
        let mut ep = SctpEndpoint::assemble(config, transport, listen.udp_port, parts, true)?;
        // Each stream's QP joins its run's PD (where runs have their own:
        // a server that exposes leases) before anything reaches it.
        let runs = serving.clone();
        ep.core.set_pd_for(Box::new(move |session, peer| {
            let (Ok(h), SocketAddr::V4(peer)) =
                (ClientHello::decode(&session.peer_private_data), peer)
            else {
                // The control plane accepted only hellos that decode, over
                // IPv4 (the transport's only family).
                return PdChoice::Refuse;
            };
            runs.pd_of(h.run, h.op, *peer.ip())
                .map_or(PdChoice::Default, PdChoice::In)
        }));
        Ok(SctpServer {
            ep,
            responder: Responder::default(),
            served: 0,
            failed: 0,
            ended_abruptly: 0,
            serving: Some(Appliance {
                serving: serving.clone(),
                slot: usize::from(core),
                core: on_core,
                events,
                connections: HashMap::new(),
                peers: HashMap::new(),
                generation: 0,
            }),
        })
    }

    /// The streams it serves now (an appliance's: [`SctpServer::serving`]).
    pub fn connections(&self) -> impl Iterator<Item = &Connection> {
        self.serving.iter().flat_map(|a| a.connections.values())
    }

    /// Changes whenever [`connections`](Self::connections) does.
    pub fn generation(&self) -> u64 {
        self.serving.as_ref().map_or(0, |a| a.generation)
    }

    /// Aborts every association (a drain's deadline passed): their streams
    /// end, their work flushes.
    pub fn abort_all(&mut self) {
        let assocs: Vec<AssocId> = self
            .serving
            .as_ref()
            .map(|a| a.peers.keys().copied().collect())
            .unwrap_or_default();
        for assoc in assocs {
            self.ep.core.abort(assoc);
        }
    }

    /// Where it listens on `transport` (the one it was made on).
    pub fn local<S: MessageTransport>(&self, transport: &S) -> Option<SocketAddrV4> {
        self.ep.core.local(transport)
    }

    /// One turn over `transport` (the one it was made on): its unit, the
    /// streams that came up or ended, their workloads. A stream that fails
    /// is closed and named.
    pub fn step<S: MessageTransport>(&mut self, transport: &mut S) -> Result<(), String> {
        self.ep.turn(transport);
        if self.serving.is_some() {
            return self.step_serving();
        }
        for event in std::mem::take(&mut self.ep.events) {
            match event {
                SctpEvent::StreamUp {
                    qp,
                    outbound: false,
                    session,
                    ..
                } => {
                    let hello = ClientHello::decode(&session.peer_private_data)
                        .and_then(|h| check_fits(&h, self.ep.region.len()).map(|()| h));
                    match hello {
                        Ok(h) => {
                            let client = RemoteAddr {
                                stag: h.stag,
                                to: h.to,
                            };
                            self.served += 1;
                            self.responder
                                .add(&mut self.ep, Served::new(qp, &h, client));
                        }
                        Err(_) => self.ep.core.close_stream(qp),
                    }
                }
                SctpEvent::StreamEnded {
                    qp: Some(qp),
                    terminate,
                    ..
                } => {
                    self.responder.remove(qp);
                    // An RDMAP Terminate ended it (a client's close is a
                    // Session Terminate, which ends every stream).
                    if terminate.is_some() {
                        self.failed += 1;
                    }
                }
                SctpEvent::AssociationEnded {
                    refused: None,
                    reason,
                    ..
                } if abrupt(reason) => self.ended_abruptly += 1,
                _ => {}
            }
        }
        self.step_workloads()
    }

    /// The streams' workloads: one that fails is closed (its end comes as
    /// an event) and named; the others run on.
    fn step_workloads(&mut self) -> Result<(), String> {
        if let Err(failed) = self.responder.step(&mut self.ep) {
            for &(qp, _) in &failed.0 {
                self.responder.remove(qp);
                self.ep.core.close_stream(qp);
                self.failed += 1;
            }
            return Err(failed.reasons());
        }
        Ok(())
    }

    /// [`step`](Self::step) of an appliance's listener: each stream in its
    /// run's lease, each event told.
    fn step_serving(&mut self) -> Result<(), String> {
        let Some(a) = self.serving.as_mut() else {
            return Ok(());
        };
        // Its buffer goes back once drained: no turn allocates.
        let mut events = std::mem::take(&mut self.ep.events);
        for event in events.drain(..) {
            match event {
                SctpEvent::AssociationUp {
                    assoc,
                    remote: SocketAddr::V4(peer),
                    outbound: false,
                } => {
                    a.peers.insert(assoc, peer);
                }
                SctpEvent::AssociationEnded { assoc, reason, .. } => {
                    // One that came up here.
                    let ours = a.peers.remove(&assoc).is_some();
                    self.ended_abruptly += u64::from(ours && abrupt(reason));
                }
                SctpEvent::StreamUp {
                    assoc,
                    qp,
                    outbound: false,
                    session,
                    ..
                } => {
                    // The control plane accepted only hellos that decode
                    // and fit, and leased their runs memory.
                    let Ok(h) = ClientHello::decode(&session.peer_private_data) else {
                        self.ep.core.close_stream(qp);
                        continue;
                    };
                    // A run with a PD of its own is served only on a QP
                    // in it (its core moved the QP there when the stream
                    // came up; a run given up and begun again meanwhile
                    // has another).
                    let peer = a.peers.get(&assoc).copied();
                    let run_pd = peer.and_then(|p| a.serving.pd_of(h.run, h.op, *p.ip()));
                    if run_pd.is_some_and(|pd| self.ep.core.rnic().qp_pd(qp) != Ok(pd)) {
                        self.ep.core.close_stream(qp);
                        continue;
                    }
                    // Given up meanwhile: its lease may be another's. (One
                    // run at a time has the whole memory: `bench --server`.)
                    // Where the run has a PD of its own, which the QP
                    // joined, its own work uses the run's STag.
                    let lease = if a.serving.many() {
                        a.serving.handed_local(h.run, h.op, None)
                    } else {
                        Some((0, None))
                    };
                    let Some((offset, local)) = lease else {
                        self.ep.core.close_stream(qp);
                        continue;
                    };
                    if !a.serving.many() {
                        a.serving.one_run_opened();
                    }
                    let client = RemoteAddr {
                        stag: h.stag,
                        to: h.to,
                    };
                    self.served += 1;
                    let served = Served::in_lease(qp, &h, client, offset);
                    let served = match local {
                        Some(stag) => served.with_local(stag, offset),
                        None => served,
                    };
                    self.responder.add(&mut self.ep, served);
                    let connection = Connection {
                        llp: "sctp",
                        qp,
                        peer: a.peers.get(&assoc).copied(),
                        run: h.run,
                        op: h.op,
                        mode: h.mode,
                        size: h.size,
                        enhanced: session.enhanced,
                        // SCTP's own CRC32c covers every packet (RFC 4960
                        // §6.8); MPA's CRC and markers are not there.
                        crc: false,
                        markers_tx: false,
                        markers_rx: false,
                        ird: session.ird,
                        ord: session.ord,
                    };
                    if let Some(hook) = &a.events {
                        hook(ServerEvent::Established {
                            core: a.core,
                            connection: connection.clone(),
                        });
                    }
                    a.connections.insert(qp, connection);
                    a.generation += 1;
                }
                SctpEvent::StreamEnded {
                    qp: Some(qp),
                    terminate,
                    ..
                } => {
                    self.responder.remove(qp);
                    if terminate.is_some() {
                        self.failed += 1;
                    }
                    let Some(connection) = a.connections.remove(&qp) else {
                        continue;
                    };
                    a.generation += 1;
                    if a.serving.many() {
                        a.serving.closed(connection.run, connection.op);
                    } else {
                        a.serving.one_run_closed();
                    }
                    a.serving.count_served(a.slot);
                    if let Some(hook) = &a.events {
                        if let Some(event) = terminate {
                            hook(ServerEvent::Terminated {
                                core: a.core,
                                connection: connection.clone(),
                                event,
                            });
                        }
                        hook(ServerEvent::Closed {
                            core: a.core,
                            connection,
                        });
                    }
                }
                // A stream its run was admitted that never comes up (told
                // once per stream): the run no longer waits for it, as for
                // an MPA startup that failed after its Accept
                // (`Server::step`).
                SctpEvent::AcceptedNeverUp { session } if a.serving.many() => {
                    if let Ok(h) = ClientHello::decode(&session.peer_private_data) {
                        a.serving.stream_never_up(h.run, h.op);
                    }
                }
                _ => {}
            }
        }
        self.ep.events = events;
        a.serving.publish(a.slot, self.ep.core.open_streams());
        self.step_workloads()
    }

    /// Streams that failed so far (an RDMAP Terminate, or their workload
    /// here).
    pub fn failed(&self) -> u64 {
        self.failed
    }

    /// Associations that ended before their client was done so far
    /// ([`abrupt`]).
    pub fn ended_abruptly(&self) -> u64 {
        self.ended_abruptly
    }

    /// Streams served so far.
    pub fn served(&self) -> u64 {
        self.served
    }

    /// Associations and streams open now.
    pub fn open(&self) -> (usize, usize) {
        (self.ep.core.associations(), self.ep.core.open_streams())
    }

    /// Its core's counters.
    pub fn counters(&self) -> dataplane::SctpCounters {
        self.ep.core.counters()
    }
}

/// A client and its server over DDP over SCTP: both on this thread, or the
/// client alone with a server in another process ([`remote`]).
pub struct SctpRig<C: MessageTransport, S: MessageTransport> {
    client: SctpEndpoint,
    /// The client's transport.
    carrier: C,
    /// The server and its transport, when in this process.
    server: Option<(SctpServer, S)>,
    server_addr: SocketAddrV4,
    assoc: Option<AssocId>,
    /// The stream the next QP opens (streams are not reused within an
    /// association: a closed stream's last messages may still be about).
    next_stream: u16,
    run: u64,
    /// How long the client's port stays open but quiet after its last
    /// packets (its association's ABORT) when the rig goes: a memif peer
    /// reads them before the port's close takes the link down (see
    /// `link::MEMIF_QUIET`).
    quiet: Option<std::time::Duration>,
}

impl<C: MessageTransport, S: MessageTransport> SctpRig<C, S> {
    /// A client and a server whose endpoint listens on UDP port
    /// `server_port` of its transport (0: an ephemeral one).
    fn new(
        mut carrier: C,
        mut server_transport: S,
        server_port: u16,
        config: &RigConfig,
    ) -> Result<Self, String> {
        let client = SctpEndpoint::new(&mut carrier, 0, config.mtu, config.memory, 11, false)?;
        let server = SctpServer::new(&mut server_transport, server_port, config)?;
        let server_addr = server
            .local(&server_transport)
            .ok_or("the server's UDP socket has no address")?;
        Ok(SctpRig::assemble(
            client,
            carrier,
            Some((server, server_transport)),
            server_addr,
            None,
        ))
    }

    /// [`SctpRig::new`] as core `core` of a client host and a server host
    /// (`bench --cores`: a control-plane thread and a registry each,
    /// shared by their cores), the server on UDP port 9899 of its
    /// transport.
    fn on_hosts(
        (client_host, server_host): &(Arc<Host>, Arc<Host>),
        core: u16,
        mut carrier: C,
        mut server_transport: S,
        config: &RigConfig,
    ) -> Result<Self, String> {
        let memory = client_host.register(config.memory);
        let client = SctpEndpoint::on_host(
            &mut carrier,
            0,
            config.mtu,
            client_host,
            core,
            memory,
            false,
        )?;
        let server = SctpServer::on_host(
            &mut server_transport,
            SERVER_UDP_PORT,
            server_host,
            core,
            config,
        )?;
        let server_addr = server
            .local(&server_transport)
            .ok_or("the server's UDP socket has no address")?;
        Ok(SctpRig::assemble(
            client,
            carrier,
            Some((server, server_transport)),
            server_addr,
            None,
        ))
    }

    /// A rig of a client (and a server, if in this process) before its
    /// association.
    fn assemble(
        client: SctpEndpoint,
        carrier: C,
        server: Option<(SctpServer, S)>,
        server_addr: SocketAddrV4,
        quiet: Option<std::time::Duration>,
    ) -> Self {
        SctpRig {
            client,
            carrier,
            server,
            server_addr,
            assoc: None,
            next_stream: 0,
            run: crate::rig::run_id(),
            quiet,
        }
    }

    /// Associations open at the server, if it is in this process (0 if
    /// not).
    fn server_open(&self) -> (usize, usize) {
        self.server.as_ref().map_or((0, 0), |(s, _)| s.open())
    }

    fn wait(&mut self, what: &str, done: &mut dyn FnMut(&mut Self) -> bool) -> Result<(), String> {
        let start = StdInstant::now();
        while !done(self) {
            if start.elapsed() > SETUP_LIMIT {
                return Err(format!("{what} took more than {} s", SETUP_LIMIT.as_secs()));
            }
            BenchRig::step(self)?;
        }
        Ok(())
    }

    /// The association, opened at the first workload.
    fn association(&mut self) -> Result<AssocId, String> {
        if let Some(assoc) = self.assoc {
            return Ok(assoc);
        }
        let assoc = self.client.core.connect(now(), self.server_addr)?;
        self.wait("the SCTP association", &mut |rig| {
            rig.client.events.iter().any(|e| {
                matches!(e, SctpEvent::AssociationUp { assoc: a, .. } | SctpEvent::AssociationEnded { assoc: a, .. } if *a == assoc)
            })
        })?;
        let ended = self.client.events.iter().find_map(|e| match e {
            SctpEvent::AssociationEnded {
                assoc: a,
                refused,
                reason,
                ..
            } if *a == assoc => Some(format!("refused {refused:?}, closed {reason:?}")),
            _ => None,
        });
        self.client.events.clear();
        if let Some(why) = ended {
            return Err(format!(
                "the SCTP association to {}: {why}",
                self.server_addr
            ));
        }
        self.assoc = Some(assoc);
        Ok(assoc)
    }
}

impl<C: MessageTransport, S: MessageTransport> BenchRig for SctpRig<C, S> {
    type Client = SctpEndpoint;

    fn client(&mut self) -> &mut SctpEndpoint {
        &mut self.client
    }

    fn step(&mut self) -> Result<(), String> {
        self.client.turn(&mut self.carrier);
        match &mut self.server {
            Some((server, transport)) => server.step(transport),
            None => Ok(()),
        }
    }

    fn open_slots(
        &mut self,
        spec: &Spec,
        last: bool,
        first: usize,
        total: usize,
    ) -> Result<Vec<Pair>, String> {
        let streams = sctp_lite::Config::default()
            .streams
            .max((QPS_MAX + 1) as u16);
        // Streams are not reused within an association: when this workload's
        // would run past the last, the next association takes over (the
        // earlier workloads' streams are closed by now).
        if usize::from(self.next_stream) + spec.qps > usize::from(streams) {
            if let Some(old) = self.assoc.take() {
                if self.client.core.open_streams() > 0 {
                    return Err("no unused DDP stream left on the association".into());
                }
                self.client.core.abort(old);
                // Gone at both ends before the next INIT: opened at once
                // instead, the new association never came up here (within
                // the 10 s limit) while the old one was being torn down.
                self.wait("the old association's end", &mut |rig| {
                    rig.client.core.associations() == 0 && rig.server_open().0 == 0
                })?;
                self.client.events.clear();
            }
            self.next_stream = 0;
        }
        let assoc = self.association()?;
        let mut opened = Vec::with_capacity(spec.qps);
        for qi in first..first + spec.qps {
            if self.next_stream >= streams {
                return Err("the association has no unused stream left".into());
            }
            let h = ClientHello::of(
                spec,
                qi,
                total,
                last,
                (self.client.mr.stag, self.client.mr.base_to),
                self.run,
            );
            let stream = self.next_stream;
            self.next_stream += 1;
            let qp = self
                .client
                .core
                .open_stream(now(), assoc, stream, &h.encode())
                .map_err(|e| format!("opening DDP stream {stream}: {e:?}"))?;
            opened.push((qp, qi));
        }
        self.wait(&format!("opening {} DDP stream(s)", spec.qps), &mut |rig| {
            opened.iter().all(|(qp, _)| rig.client.live.contains(qp))
                || rig.client.events.iter().any(|e| {
                    matches!(
                        e,
                        SctpEvent::StreamEnded { .. } | SctpEvent::StreamRejected { .. }
                    )
                })
        })?;
        let mut pairs = Vec::with_capacity(opened.len());
        let mut failure = None;
        for event in std::mem::take(&mut self.client.events) {
            match event {
                SctpEvent::StreamUp { qp, session, .. } => {
                    let Some(&(_, qi)) = opened.iter().find(|(q, _)| *q == qp) else {
                        continue;
                    };
                    match ServerHello::decode(&session.peer_private_data) {
                        Ok(s) => pairs.push(Pair {
                            qp,
                            remote: RemoteAddr {
                                stag: s.stag,
                                to: s.to,
                            },
                            slot: qi,
                            credit: credit_offset(total, qi, spec.size),
                        }),
                        Err(why) => {
                            failure.get_or_insert(why);
                        }
                    }
                }
                SctpEvent::StreamEnded { failure: f, .. } => {
                    failure.get_or_insert(format!("a DDP stream failed: {f:?}"));
                }
                SctpEvent::StreamRejected { rejected, .. } => {
                    failure.get_or_insert(format!(
                        "the server rejected a stream: {}",
                        crate::hello::decode_reject(&rejected.private_data)
                    ));
                }
                _ => {}
            }
        }
        if let Some(why) = failure {
            let _ = self.close(&pairs);
            return Err(why);
        }
        pairs.sort_by_key(|p| p.slot);
        Ok(pairs)
    }

    fn close(&mut self, pairs: &[Pair]) -> Result<(), String> {
        for pair in pairs {
            self.client.core.close_stream(pair.qp);
        }
        self.wait("closing the DDP streams", &mut |rig| {
            rig.server_open().1 == 0 && rig.client.core.open_streams() == 0
        })?;
        self.client.events.clear();
        Ok(())
    }

    fn core_reports(&self) -> Vec<CoreReport> {
        let counters = |c: dataplane::SctpCounters, device| dataplane::CoreCounters {
            device,
            turns: c.turns,
            busy_turns: c.busy_turns,
            idle_turns: c.turns - c.busy_turns,
            busy_us: c.busy_us,
            idle_us: c.idle_us,
            tx_fpdu_octets: c.tx_segment_octets,
            rx_fpdu_octets: c.rx_segment_octets,
            established: c.streams_up,
            ended: c.streams_ended,
            ..dataplane::CoreCounters::default()
        };
        let mut reports = vec![CoreReport {
            role: "client",
            cpu: None,
            counters: counters(self.client.core.counters(), self.carrier.device_counters()),
            share: None,
        }];
        if let Some((server, transport)) = &self.server {
            reports.push(CoreReport {
                role: "server",
                cpu: None,
                counters: counters(server.counters(), transport.device_counters()),
                share: None,
            });
        }
        reports
    }

    fn cores(&self) -> usize {
        1
    }
}

/// The two RNICs over DDP over SCTP on the embedded link: tcp-lite's UDP on
/// the in-memory link (checksums offloaded unless asked, as for MPA).
pub fn embedded(config: &RigConfig) -> Result<EmbeddedSctpRig, String> {
    let (client, server) = embedded_stacks(config)?;
    SctpRig::new(client, server, SERVER_UDP_PORT, config)
}

/// [`SctpRig`] on tcp-lite's UDP over the in-memory link.
pub type EmbeddedSctpRig = SctpRig<Stack<LinkEnd>, Stack<LinkEnd>>;

/// [`embedded`] as core `core` of a client and a server host (`bench
/// --cores`: a control-plane thread and a registry each, shared by their
/// cores). The link is the core's own; make it on the core's thread (it is
/// not `Send`).
pub fn embedded_on(
    hosts: &(Arc<Host>, Arc<Host>),
    core: u16,
    config: &RigConfig,
) -> Result<EmbeddedSctpRig, String> {
    let (client, server) = embedded_stacks(config)?;
    SctpRig::on_hosts(hosts, core, client, server, config)
}

/// The client's and the server's tcp-lite stacks at the two ends of an
/// in-memory link of their own.
fn embedded_stacks(config: &RigConfig) -> Result<(Stack<LinkEnd>, Stack<LinkEnd>), String> {
    let mut link_config = LinkConfig::ethernet(config.mtu);
    link_config.checksums = config.sw_checksums;
    link_config.backpressure = true;
    let (end_c, end_s) = link::pair(link_config, 1);
    let (c_addr, s_addr) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    let stack = |mac: u8, addr, end| {
        let mut c = StackConfig::new([2, 0, 0, 0, 0, mac], addr);
        // Room for the association's whole window (256 KiB) four times
        // over, in datagrams of any size: 16,384 slots hold it in the
        // smallest DATA chunks (2 B Writes are 18 B messages), only their
        // metadata costs.
        c.udp_buffer = 1 << 20;
        c.udp_datagrams = 16384;
        Stack::new(c, end, now()).map_err(|e| e.to_string())
    };
    Ok((stack(1, c_addr, end_c)?, stack(2, s_addr, end_s)?))
}

/// [`SctpRig`] on tcp-lite over DPDK ports.
pub type DpdkSctpRig = SctpRig<Stack<DpdkDevice>, Stack<DpdkDevice>>;

/// The two RNICs over DDP over SCTP on tcp-lite's UDP over DPDK ports in
/// this process: a `net_memif` server and client on one socket (`memif`),
/// or a `net_ring` pair; with what the ports run on.
pub fn dpdk(
    config: &RigConfig,
    link: &crate::link::LinkArgs,
    memif: bool,
) -> Result<(DpdkSctpRig, crate::rig::DpdkInfo), String> {
    let (eal, memory, server_port, client_port) = crate::rig::open_pair(config, link, memif, 1)?;
    let client = crate::link::dpdk_stack(&client_port, (crate::rig::DPDK_CLIENT_ADDR, 24), true)?;
    let server = crate::link::dpdk_stack(&server_port, (crate::rig::DPDK_SERVER_ADDR, 24), true)?;
    let info = crate::rig::DpdkInfo {
        eal,
        memory,
        ports: format!("{} and {}", client_port.describe, server_port.describe),
        checksums: client_port.checksums(),
    };
    Ok((SctpRig::new(client, server, SERVER_UDP_PORT, config)?, info))
}

/// [`dpdk`] on `cores` cores (`bench --cores`): one `net_memif` (or
/// `net_ring`) pair with a queue pair per core, core k's client and server
/// on queue k of each port, steered as MPA's are (`rig::dpdk_pair_cores`:
/// what core k sends on its queue arrives on the peer's queue k, so each
/// association's datagrams stay with the core that owns it), the two hosts'
/// control planes and registries shared by their cores.
pub fn dpdk_pair_cores(
    config: &RigConfig,
    link: &crate::link::LinkArgs,
    memif: bool,
    cores: u16,
) -> Result<Vec<DpdkSctpRig>, String> {
    let (_, _, server_port, client_port) = crate::rig::open_pair(config, link, memif, cores)?;
    let (client_steer, server_steer) = (client_port.steer()?, server_port.steer()?);
    let hosts = config.hosts(cores);
    (0..cores)
        .map(|k| {
            let client = crate::link::dpdk_stack_on(
                &client_port,
                k,
                Some(&client_steer),
                (crate::rig::DPDK_CLIENT_ADDR, 24),
                true,
            )?;
            let server = crate::link::dpdk_stack_on(
                &server_port,
                k,
                Some(&server_steer),
                (crate::rig::DPDK_SERVER_ADDR, 24),
                true,
            )?;
            SctpRig::on_hosts(&hosts, k, client, server, config)
        })
        .collect()
}

/// The client on tcp-lite's UDP over a TAP device, the server on Linux UDP
/// at the device's kernel end, in a namespace made for the run, which the
/// calling thread enters; the returned [`Netns`] must outlive the rig.
pub fn tap(config: &RigConfig) -> Result<(SctpRig<Stack<TapDevice>, KernelUdp>, Netns), String> {
    let (client, net) = crate::rig::tap_client(config)?;
    let server = KernelUdp::new(crate::rig::TAP_KERNEL_ADDR, 4 << 20);
    Ok((SctpRig::new(client, server, SERVER_UDP_PORT, config)?, net))
}

/// [`SctpRig`] on tcp-lite over a DPDK port, to Linux UDP.
pub type KernelSctpRig = SctpRig<Stack<DpdkDevice>, KernelUdp>;

/// The client on tcp-lite's UDP over a DPDK port (`net_tap`, or
/// `net_af_packet` on a veth pair), the server on Linux UDP at the kernel's
/// end, in a namespace made for the run (see `rig::dpdk_kernel`).
pub fn dpdk_kernel(
    config: &RigConfig,
    link: &crate::link::LinkArgs,
    eal: dataplane::dpdk::Eal,
    af_packet: bool,
) -> Result<(KernelSctpRig, Netns, crate::rig::DpdkInfo), String> {
    let (client, net, info) = crate::rig::dpdk_kernel_client(config, link, eal, af_packet)?;
    let server = KernelUdp::new(crate::rig::DPDK_KERNEL_ADDR, 4 << 20);
    let rig = SctpRig::new(client, server, SERVER_UDP_PORT, config)?;
    Ok((rig, net, info))
}

/// The client alone on Linux UDP, to a server in another process (`bench
/// --server --llp sctp`, or dpwarpd) at `server`: its UDP socket is on the
/// address Linux would send to the server from, its association's path MTU
/// the smaller of `config.mtu` and the route's.
pub fn remote(
    config: &RigConfig,
    server: SocketAddrV4,
) -> Result<SctpRig<KernelUdp, KernelUdp>, String> {
    let (local, path_mtu) =
        tcp_lite::sys::udp::route_to(server).map_err(|e| format!("no route to {server}: {e}"))?;
    let mut carrier = KernelUdp::new(*local.ip(), 4 << 20);
    // Packets no larger than the path takes: Linux would fragment the
    // rest, and a peer on a DPDK port does not reassemble.
    let mtu = config.mtu.min(path_mtu.max(MTU_MIN));
    let client = SctpEndpoint::new(&mut carrier, 0, mtu, config.memory, 11, false)?;
    Ok(SctpRig::assemble(client, carrier, None, server, None))
}

/// The client alone on tcp-lite's UDP over a DPDK port (memif as its
/// client, net_tap, af_packet, a PCI NIC: `link` says which and our
/// address), to a server in another process (`bench --server --llp sctp`
/// on the other end of the link, or dpwarpd on a DPDK port) at `server`;
/// with what the port runs on.
pub fn remote_dpdk(
    config: &RigConfig,
    link: &crate::link::LinkArgs,
    transport: crate::link::PeerTransport,
    server: SocketAddrV4,
) -> Result<(DpdkSctpRig, crate::rig::DpdkInfo), String> {
    let (eal, port) = crate::link::dpdk_port(transport, link, config.mtu, false, "dpwbench0")?;
    let lossless = transport == crate::link::PeerTransport::Memif;
    let mut carrier = crate::link::dpdk_stack(&port, link.address()?, lossless)?;
    // The port's MTU, which the stack's IP packets are held to.
    let mtu = carrier.emss() + 40;
    let client = SctpEndpoint::new(&mut carrier, 0, mtu, config.memory, 11, false)?;
    let info = crate::rig::DpdkInfo {
        eal,
        memory: String::new(),
        ports: port.describe.clone(),
        checksums: port.checksums(),
    };
    // The port itself lives as long as its queue, the stack's device.
    let quiet = lossless.then_some(crate::link::MEMIF_QUIET);
    Ok((
        SctpRig::assemble(client, carrier, None, server, quiet),
        info,
    ))
}

/// The cores of a DDP over SCTP client of a server in another process
/// (`bench OP HOST --llp sctp --cores K`).
pub enum RemoteSctpCores {
    /// Over Linux UDP: a socket per core (the server's Linux, if it
    /// spreads its sockets by `SO_REUSEPORT`, picks a core for each by its
    /// own hash).
    Kernel(Vec<SctpRig<KernelUdp, KernelUdp>>),
    /// Over a DPDK port with a queue pair per core, steered.
    Dpdk(Vec<DpdkSctpRig>, crate::rig::DpdkInfo),
}

/// A DDP over SCTP client of `cores` cores, each with an association of
/// its own to the server at `server` and its share of the run's streams:
/// one host (a control-plane thread, a registry) for all of them, and each
/// core its own transport. On a DPDK port (`link` says which) core k's
/// association leaves from a UDP port whose four-tuple with the server's
/// hashes to k, and the port steers those datagrams by that hash, so that
/// its replies reach core k whichever queue they arrive at (and a server
/// steering by the same hash, dpwarpd on as many cores, serves it on its
/// core k); over Linux UDP the kernel picks each socket's port. Every
/// core's streams are of one run (they share its id).
pub fn remote_cores(
    config: &RigConfig,
    link: &crate::link::LinkArgs,
    transport: crate::link::PeerTransport,
    server: SocketAddrV4,
    cores: u16,
) -> Result<RemoteSctpCores, String> {
    let host = Host::new(cores, 1);
    let run = crate::rig::run_id();
    if transport == crate::link::PeerTransport::Kernel {
        let (local, path_mtu) = tcp_lite::sys::udp::route_to(server)
            .map_err(|e| format!("no route to {server}: {e}"))?;
        let mtu = config.mtu.min(path_mtu.max(MTU_MIN));
        let rigs = (0..cores)
            .map(|k| {
                let mut carrier = KernelUdp::new(*local.ip(), 4 << 20);
                let memory = host.register(config.memory);
                let client = SctpEndpoint::on_host(&mut carrier, 0, mtu, &host, k, memory, false)?;
                let mut rig = SctpRig::assemble(client, carrier, None, server, None);
                rig.run = run;
                Ok(rig)
            })
            .collect::<Result<Vec<_>, String>>()?;
        return Ok(RemoteSctpCores::Kernel(rigs));
    }
    let (eal, port) =
        crate::link::dpdk_port_queues(transport, link, config.mtu, false, "dpwbench0", cores)?;
    let lossless = transport == crate::link::PeerTransport::Memif;
    let ip = link.address()?;
    // Each core's UDP port: the next whose four-tuple with the server's
    // hashes to the core (ephemeral ports, RFC 6335's range, from a place
    // of the run's own); the port steers their datagrams by that hash, so
    // a reply that arrives at another core's queue (net_tap's kernel side
    // picks queues by its own hash) is handed to its core.
    let mut udp_ports = vec![0u16; usize::from(cores)];
    let steer = if cores > 1 {
        let hash = port.steer()?;
        let mut next = 49152 + (run % 16384) as u16;
        for (k, udp_port) in udp_ports.iter_mut().enumerate() {
            for _ in 0..16384 {
                let p = next;
                next = if next == u16::MAX { 49152 } else { next + 1 };
                if usize::from(hash.owner(server, SocketAddrV4::new(ip.0, p))) == k {
                    *udp_port = p;
                    break;
                }
            }
            if *udp_port == 0 {
                return Err(format!("no UDP port whose replies come back to core {k}"));
            }
        }
        Some(port.steer_pinning(&[], &udp_ports)?)
    } else {
        None
    };
    let mut rigs = Vec::with_capacity(usize::from(cores));
    for k in 0..cores {
        let mut carrier = crate::link::dpdk_stack_on(&port, k, steer.as_ref(), ip, lossless)?;
        let mtu = carrier.emss() + 40;
        let memory = host.register(config.memory);
        let udp_port = udp_ports[usize::from(k)];
        let client = SctpEndpoint::on_host(&mut carrier, udp_port, mtu, &host, k, memory, false)?;
        let quiet = lossless.then_some(crate::link::MEMIF_QUIET);
        let mut rig = SctpRig::assemble(client, carrier, None, server, quiet);
        rig.run = run;
        rigs.push(rig);
    }
    let info = crate::rig::DpdkInfo {
        eal,
        memory: String::new(),
        ports: crate::link::describe_queues(&port, cores),
        checksums: port.checksums(),
    };
    Ok(RemoteSctpCores::Dpdk(rigs, info))
}

impl<C: MessageTransport, S: MessageTransport> Drop for SctpRig<C, S> {
    fn drop(&mut self) {
        // A server in another process hears at once that this client is
        // gone (an ABORT), not at its heartbeats' timeout.
        if let Some(assoc) = self.assoc.take() {
            self.client.core.abort(assoc);
            for _ in 0..8 {
                self.client.turn(&mut self.carrier);
            }
        }
        if let Some(quiet) = self.quiet {
            std::thread::sleep(quiet);
        }
    }
}

/// The two RNICs over DDP over SCTP over Linux UDP on loopback.
pub fn kernel(config: &RigConfig) -> Result<SctpRig<KernelUdp, KernelUdp>, String> {
    let client = KernelUdp::new(Ipv4Addr::LOCALHOST, 4 << 20);
    let server = KernelUdp::new(Ipv4Addr::LOCALHOST, 4 << 20);
    // An ephemeral port for the server: 9899 may be taken on this host.
    SctpRig::new(client, server, 0, config)
}

/// One association and stream of [`connect_loop`] in flight.
struct Opening {
    started: StdInstant,
    /// The client's stream is up (its Enhanced Accept arrived; the server's
    /// was up when it sent that).
    up: bool,
    /// The ABORT was asked for.
    aborted: bool,
}

/// `bench connect --llp sctp`: associations over UDP encapsulation (RFC
/// 6951), each with one DDP stream opened by RFC 6581 §7's Enhanced
/// Initiate and Accept, then aborted, in a loop with up to `--parallel` in
/// flight, for `-D` seconds; on the embedded link or kernel UDP. The
/// latency is from the association's INIT to the client's stream up.
pub fn connect_loop(
    kernel: bool,
    settings: &crate::connect_report::Settings,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<crate::connect_report::ConnectReport, String> {
    let config = RigConfig {
        crc: settings.crc,
        markers: false,
        mtu: 9000,
        memory: 1 << 16,
        port: settings.port,
        sw_checksums: false,
        loss: 0.0,
        direct_receive: true,
    };
    if kernel {
        let rig = self::kernel(&config)?;
        connect_on(rig, "kernel/sctp", settings, stop)
    } else {
        let rig = embedded(&config)?;
        connect_on(rig, "embedded/sctp", settings, stop)
    }
}

fn connect_on<C: MessageTransport, S: MessageTransport>(
    mut rig: SctpRig<C, S>,
    label: &'static str,
    settings: &crate::connect_report::Settings,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<crate::connect_report::ConnectReport, String> {
    use std::collections::{BTreeMap, HashMap};
    use std::sync::atomic::Ordering;
    let mut latency = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)
        .map_err(|e| e.to_string())?;
    let mut failures: BTreeMap<String, u64> = BTreeMap::new();
    let mut open: HashMap<AssocId, Opening> = HashMap::new();
    let (mut connects, mut established, mut ended) = (0u64, [0u64; 2], [0u64; 2]);
    let start = StdInstant::now();
    let deadline = start + settings.duration;
    let (thread0, process0) = (
        crate::connect_report::thread_cpu(),
        crate::connect_report::process_cpu(),
    );
    let mut window: Option<(StdInstant, std::time::Duration, std::time::Duration)> = None;
    loop {
        let t = StdInstant::now();
        let timing = window.is_none() && t < deadline && !stop.load(Ordering::Relaxed);
        if !timing && window.is_none() {
            window = Some((
                t,
                crate::connect_report::thread_cpu(),
                crate::connect_report::process_cpu(),
            ));
        }
        while timing && open.len() < settings.parallel {
            let assoc = rig.client.core.connect(now(), rig.server_addr)?;
            open.insert(
                assoc,
                Opening {
                    started: StdInstant::now(),
                    up: false,
                    aborted: false,
                },
            );
        }
        rig.client.turn(&mut rig.carrier);
        let (server, transport) = rig
            .server
            .as_mut()
            .expect("bench connect --llp sctp has its server in this process");
        let server = &mut server.ep;
        server.turn(transport);
        let t = StdInstant::now();
        for event in std::mem::take(&mut server.events) {
            match event {
                SctpEvent::StreamUp { .. } => established[1] += 1,
                SctpEvent::StreamEnded { .. } => ended[1] += 1,
                _ => {}
            }
        }
        for event in std::mem::take(&mut rig.client.events) {
            match event {
                SctpEvent::AssociationUp { assoc, .. } => {
                    if let Err(e) = rig.client.core.open_stream(now(), assoc, 0, b"dpwarp") {
                        *failures.entry(format!("open_stream: {e:?}")).or_default() += 1;
                        rig.client.core.abort(assoc);
                    }
                }
                SctpEvent::StreamUp { assoc, .. } => {
                    established[0] += 1;
                    if let Some(o) = open.get_mut(&assoc) {
                        o.up = true;
                        if window.is_none() {
                            let ns = t.duration_since(o.started).as_nanos() as u64;
                            let _ = latency.record(ns.max(1));
                            connects += 1;
                        }
                    }
                }
                SctpEvent::StreamEnded { assoc, failure, .. } => {
                    ended[0] += 1;
                    if open.get(&assoc).is_some_and(|o| !o.up) {
                        *failures
                            .entry(format!("stream failed: {failure:?}"))
                            .or_default() += 1;
                    }
                }
                SctpEvent::StreamRejected { .. } => {
                    *failures.entry("stream rejected".into()).or_default() += 1;
                }
                SctpEvent::AssociationEnded { assoc, refused, .. } => {
                    if let Some(o) = open.remove(&assoc) {
                        if !o.up {
                            *failures
                                .entry(format!("association ended before its stream: {refused:?}"))
                                .or_default() += 1;
                        }
                    }
                }
                // The client opens every stream: it accepts none.
                SctpEvent::AcceptedNeverUp { .. } => {}
            }
        }
        // A stream up on both ends: the association goes (ABORT).
        for (&assoc, o) in open.iter_mut().filter(|(_, o)| o.up && !o.aborted) {
            o.aborted = true;
            rig.client.core.abort(assoc);
        }
        for (assoc, o) in &open {
            if t.duration_since(o.started) > crate::connect_report::CONNECTION_LIMIT && !o.up {
                *failures.entry("not up in 10 s".into()).or_default() += 1;
                rig.client.core.abort(*assoc);
            }
        }
        if window.is_some()
            && (open.is_empty()
                || t.duration_since(deadline) > crate::connect_report::CONNECTION_LIMIT)
        {
            break;
        }
    }
    // The server's side of the last aborts.
    let settle = StdInstant::now();
    while rig.server_open().1 > 0 && settle.elapsed() < SETUP_LIMIT {
        rig.client.turn(&mut rig.carrier);
        if let Some((server, transport)) = &mut rig.server {
            server.ep.turn(transport);
        }
    }
    let (end, thread1, process1) = window.expect("the window ended");
    Ok(crate::connect_report::ConnectReport {
        transport: label,
        connects,
        seconds: end.duration_since(start).as_secs_f64(),
        parallel: settings.parallel,
        tcp_buffer: settings.tcp_buffer,
        latency,
        failures,
        established,
        rtrs_taken: 0,
        ended,
        left_open: [rig.client.core.open_streams(), rig.server_open().1],
        left_in_startup: [0, 0],
        core_cpu: thread1.saturating_sub(thread0),
        process_cpu: process1.saturating_sub(process0),
        interrupted: end < deadline,
        llp: "sctp",
    })
}

#[cfg(test)]
mod tests {
    use std::sync::{Condvar, Mutex};
    use std::time::Duration;

    use super::*;
    use crate::responder::Admission;
    use crate::spec::{Mode, Op};

    /// A client's RNIC and an appliance's DDP over SCTP listener on the
    /// embedded link, turned on this thread.
    struct Ends {
        client: SctpEndpoint,
        carrier: Stack<LinkEnd>,
        server: SctpServer,
        transport: Stack<LinkEnd>,
    }

    impl Ends {
        /// Turns both until `done`, failing after 10 s.
        fn until(&mut self, what: &str, mut done: impl FnMut(&mut Ends) -> bool) {
            let start = StdInstant::now();
            while !done(self) {
                assert!(start.elapsed() < SETUP_LIMIT, "{what}: not within 10 s");
                self.client.turn(&mut self.carrier);
                let _ = self.server.step(&mut self.transport);
            }
        }

        /// An association from the client, up at both ends.
        fn associate(&mut self) -> AssocId {
            let to = self.server.local(&self.transport).unwrap();
            let assoc = self.client.core.connect(now(), to).unwrap();
            self.until("the association", |e| {
                let up = |ev: &SctpEvent| matches!(ev, SctpEvent::AssociationUp { assoc: a, .. } if *a == assoc);
                e.client.events.iter().any(up)
                    && e.server.serving.as_ref().unwrap().peers.len() == 1
            });
            self.client.events.clear();
            assoc
        }

        /// Stream `stream` of `assoc` for QP `qi` of `qps` of run 7's
        /// Writes of `size` octets.
        fn open(
            &mut self,
            assoc: AssocId,
            stream: u16,
            (qi, qps): (u16, u16),
            size: u32,
            last: bool,
        ) -> QpHandle {
            let hello = ClientHello {
                op: Op::Write,
                mode: Mode::Bandwidth,
                size,
                depth: 4,
                qi,
                qps,
                last,
                urgent: false,
                stag: self.client.mr.stag,
                to: self.client.mr.base_to,
                run: 7,
            };
            self.client
                .core
                .open_stream(now(), assoc, stream, &hello.encode())
                .unwrap()
        }
    }

    /// A DDP over SCTP stream the control plane accepted for a client's
    /// run, whose association ended before the Accept reached the stream's
    /// core, never came up: its run takes it back, once, as it takes back
    /// an MPA connection whose startup failed after its Accept. It was
    /// counted as on its way for good, so the run refused a larger size
    /// (its smaller one's streams not all done) until the idle reaper gave
    /// the whole run up. The control plane's thread holds the second
    /// stream's Accept here until the association is gone, as a busy
    /// control plane may by itself.
    #[test]
    fn a_stream_whose_association_ended_before_its_accept_arrived_is_not_waited_for() {
        let config = RigConfig {
            crc: false,
            markers: false,
            mtu: 1500,
            memory: 1 << 20,
            port: 0,
            sw_checksums: false,
            loss: 0.0,
            direct_receive: true,
        };
        let (mut carrier, mut transport) = embedded_stacks(&config).unwrap();
        let host = Host::new(1, 2);
        let (region, mr) = host.register(config.memory);
        let idle = Duration::from_secs(3600);
        let serving = Serving::with(
            1,
            Admission::Many {
                runs_max: 4,
                runs_per_host: 4,
                idle,
            },
            config.memory as u64,
        );
        // Accepts so far, and whether the second may go back to the core.
        let gate = Arc::new((Mutex::new((0u32, false)), Condvar::new()));
        let hook: EventHook = {
            let gate = gate.clone();
            Arc::new(move |event| {
                if !matches!(event, ServerEvent::Accepted { .. }) {
                    return;
                }
                let (lock, opened) = &*gate;
                let mut g = lock.lock().unwrap();
                g.0 += 1;
                let start = StdInstant::now();
                while g.0 == 2 && !g.1 && start.elapsed() < SETUP_LIMIT {
                    g = opened.wait_timeout(g, Duration::from_millis(10)).unwrap().0;
                }
            })
        };
        let listen = SctpListen::bench(SERVER_UDP_PORT, config.mtu);
        let server = SctpServer::serving(
            &mut transport,
            &listen,
            &host,
            (0, 0),
            region,
            mr,
            &serving,
            Some(hook),
        )
        .unwrap();
        let client =
            SctpEndpoint::new(&mut carrier, 0, config.mtu, config.memory, 11, false).unwrap();
        let mut ends = Ends {
            client,
            carrier,
            server,
            transport,
        };
        let assoc = ends.associate();
        // Run 7's first stream comes up.
        let first = ends.open(assoc, 0, (0, 2), 4096, false);
        ends.until("the first stream", |e| {
            e.client.live.contains(&first) && e.server.connections().count() == 1
        });
        // Its second is accepted, and its Accept held.
        ends.open(assoc, 1, (1, 2), 4096, false);
        ends.until("the second stream's Accept", |_| {
            gate.0.lock().unwrap().0 == 2
        });
        ends.client.core.abort(assoc);
        ends.until("the association's end at the server", |e| {
            e.server.serving.as_ref().unwrap().peers.is_empty() && e.server.open().1 == 0
        });
        assert_eq!(ends.server.served(), 1, "the second stream never came up");
        gate.0.lock().unwrap().1 = true;
        gate.1.notify_all();
        // A larger size of the run: refused while the second stream counts
        // as on its way, admitted once the core heard of its Accept.
        let assoc = ends.associate();
        let mut stream = 0;
        let larger = loop {
            let qp = ends.open(assoc, stream, (0, 1), 1 << 16, true);
            stream += 1;
            ends.until("the larger size's answer", |e| {
                e.client.live.contains(&qp)
                    || e.client
                        .events
                        .iter()
                        .any(|ev| matches!(ev, SctpEvent::StreamRejected { .. }))
            });
            if ends.client.live.contains(&qp) {
                break qp;
            }
            let why = ends.client.events.iter().find_map(|ev| match ev {
                SctpEvent::StreamRejected { rejected, .. } => {
                    Some(crate::hello::decode_reject(&rejected.private_data))
                }
                _ => None,
            });
            assert!(
                stream < 50,
                "the larger size is still refused: {}",
                why.unwrap_or_default()
            );
            ends.client.events.clear();
        };
        // The run ends with its last size's stream: nothing else of it is
        // counted as on its way (its second stream was taken back once).
        ends.client.core.close_stream(larger);
        ends.until("the run's end", |e| e.server.open().1 == 0);
        assert_eq!(serving.stats().runs, 0, "{:?}", serving.stats());
        assert_eq!(serving.runs_done(), 1);
    }
}
