//! One whole RNIC of the benchmark ([`Endpoint`]): a poll-mode core
//! (`dataplane::Core`: its TCP transport, its link to the control plane,
//! its engine), the control-plane thread, and registered memory. One thread
//! turns the core and runs the application's side with it, as one pinned
//! poll-mode core does.

use std::sync::Arc;

use control::mpa::StartupConfig;
use control::runtime::{ControlPlane, CoreId, CoreLink, Handoff, OnRequest};
use dataplane::{Core, CoreConfig, CoreTransport};
use rnic_engine::cq::Wc;
use rnic_engine::mem::Pd;
use rnic_engine::mem::{Access, Region};
use rnic_engine::qp::QpEvent;
use rnic_engine::verbs::{
    CqHandle, Mr, QpHandle, QpInit, Registry, RemoteAddr, Rnic, RnicConfig, Sge,
};
use std::net::SocketAddrV4;
use std::sync::Mutex;
use tcp_lite::{ConnId, Duration, Instant};

use crate::pace::Pacer;

/// Send and receive queue depth of every QP.
pub const QUEUE_DEPTH: usize = 512;
/// The most QPs a run has (`-q`).
pub const QPS_MAX: usize = 1024;
/// Work requests a run may have in flight over all its QPs (`-q` x `-t`).
pub const IN_FLIGHT_MAX: usize = 65536;
/// Completions per CQ: every work request in flight, and a receive for
/// each, can complete in one step without overflowing it.
const CQ_DEPTH: usize = IN_FLIGHT_MAX * 2;
/// Connections one RNIC core runs at once (the most QPs of a run, and
/// room for a persistent server's clients).
pub const CONNECTIONS_MAX: usize = QPS_MAX + 64;

/// The process's clock as tcp-lite time (the data plane's).
pub fn now() -> Instant {
    dataplane::clock::now()
}

/// What the cores of one RNIC share: the control-plane thread (one for
/// all its cores) and the registry of protection domains and memory
/// registrations (a region registered by one core is addressed from every
/// core). Each core is an [`Endpoint`] made with [`Endpoint::on_host`].
pub struct Host {
    /// Its cores' engines take FPDUs straight from received frames
    /// (`dataplane::CoreConfig::direct_receive`; on unless set off).
    direct_receive: std::sync::atomic::AtomicBool,
    plane: Mutex<ControlPlane>,
    links: Mutex<Vec<Option<CoreLink>>>,
    registry: Arc<Registry>,
    pd: Pd,
}

impl Host {
    /// A host of `cores` cores whose STag keys are drawn from `seed`.
    pub fn new(cores: u16, seed: u64) -> Arc<Host> {
        Host::with_control(cores, seed, control::runtime::ControlConfig::default())
            .expect("the default control-plane configuration is valid")
    }

    /// [`Host::new`] with the control plane's limits and timers `control`;
    /// says what is wrong with them.
    pub fn with_control(
        cores: u16,
        seed: u64,
        control: control::runtime::ControlConfig,
    ) -> Result<Arc<Host>, String> {
        Host::with_pds(cores, seed, control, RnicConfig::default().pds_max)
    }

    /// [`Host::with_control`] with a registry of `pds_max` protection
    /// domains (the host's own included): a service that gives each
    /// client a PD of its own needs one a client.
    pub fn with_pds(
        cores: u16,
        seed: u64,
        control: control::runtime::ControlConfig,
        pds_max: usize,
    ) -> Result<Arc<Host>, String> {
        let (plane, links) = ControlPlane::start_with(control, cores).map_err(|e| e.to_string())?;
        let registry = Registry::new(&RnicConfig {
            stag_seed: seed,
            pds_max: pds_max.max(1),
            ..RnicConfig::default()
        });
        let pd = registry
            .alloc_pd()
            .expect("a fresh registry has room for a PD");
        Ok(Arc::new(Host {
            direct_receive: std::sync::atomic::AtomicBool::new(true),
            plane: Mutex::new(plane),
            links: Mutex::new(links.into_iter().map(Some).collect()),
            registry,
            pd,
        }))
    }

    /// Whether the cores made from now on take FPDUs straight from
    /// received frames (`dataplane::CoreConfig::direct_receive`), or read
    /// every octet from TCP's receive buffer.
    pub fn set_direct_receive(&self, on: bool) {
        self.direct_receive
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// The control plane's counters (startups established, refused, ...).
    pub fn stats(&self) -> control::runtime::ControlStats {
        self.plane().stats()
    }

    /// The registry every core's engine uses.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// `memory` octets registered once in the host's PD, remotely readable,
    /// writable and atomic, for one core or for several
    /// ([`Endpoint::on_host_sharing`]).
    pub fn register(&self, memory: usize) -> (Arc<Region>, Mr) {
        let region = Region::new(memory);
        let access = Access::LOCAL_WRITE
            | Access::REMOTE_WRITE
            | Access::REMOTE_READ
            | Access::REMOTE_ATOMIC;
        let mr = self
            .registry
            .reg_region(self.pd, region.clone(), access)
            .expect("a registry has room for a benchmark's registrations");
        (region, mr)
    }

    /// `region` registered in the host's PD for local work requests only
    /// (receives, the sources and sinks of our own operations): a peer
    /// told its STag could do nothing with it. A server that lends parts
    /// of it registers each part for its client ([`crate::responder::Exposure`]).
    pub fn register_local(&self, region: &Arc<Region>) -> Mr {
        self.register_local_in(self.pd, region)
    }

    /// [`Host::register_local`] in protection domain `pd` (one of this
    /// host's registry).
    pub fn register_local_in(&self, pd: Pd, region: &Arc<Region>) -> Mr {
        self.registry
            .reg_region(pd, region.clone(), Access::LOCAL_WRITE)
            .expect("a registry has room for a server's registration")
    }

    /// Core `core`'s end of the control plane, for a core that is not an
    /// [`Endpoint`] (a DDP over SCTP core: `crate::sctp::SctpServer::serving`);
    /// `None` if there is no such core or it was taken.
    pub fn take_link(&self, core: CoreId) -> Option<CoreLink> {
        self.links
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(usize::from(core))
            .and_then(Option::take)
    }

    /// Listens for DDP streams (RFC 5043 §6, RFC 6581 §7) on core `core`'s
    /// SCTP endpoint: `on_initiate` decides each Initiate.
    pub fn listen_sessions(
        &self,
        core: CoreId,
        config: control::session::SessionConfig,
        on_initiate: control::runtime::OnInitiate,
    ) -> Result<(), String> {
        self.plane()
            .listen_sessions(core, config, on_initiate)
            .map_err(|e| format!("the session configuration: {e}"))
    }

    /// The protection domain of every QP and registration of this host.
    pub fn pd(&self) -> Pd {
        self.pd
    }

    fn plane(&self) -> std::sync::MutexGuard<'_, ControlPlane> {
        self.plane.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A core's handle on its host's control plane: listens and connects
/// through this core.
pub struct Control {
    host: Arc<Host>,
    core: CoreId,
}

impl Control {
    /// Listens on `port` of this core's transport (see
    /// `ControlPlane::listen`).
    pub fn listen(&self, port: u16, config: StartupConfig, on_request: OnRequest) {
        self.host
            .plane()
            .listen(self.core, port, config, on_request);
    }

    /// Stops listening on `port` of this core's transport (see
    /// `ControlPlane::unlisten`).
    pub fn unlisten(&self, port: u16) {
        self.host.plane().unlisten(self.core, port);
    }

    /// Opens a connection from this core (see `ControlPlane::connect`);
    /// returns the handoff's token.
    pub fn connect(&self, remote: SocketAddrV4, config: StartupConfig, private_data: &[u8]) -> u64 {
        self.connect_marked(remote, config, private_data, 0)
    }

    /// [`Control::connect`] with the connection's segments marked DSCP
    /// `dscp` from its SYN on (see `ControlPlane::connect_marked`).
    pub fn connect_marked(
        &self,
        remote: SocketAddrV4,
        config: StartupConfig,
        private_data: &[u8],
        dscp: u8,
    ) -> u64 {
        self.host
            .plane()
            .connect_marked(self.core, remote, config, private_data, dscp)
    }

    /// The host.
    pub fn host(&self) -> &Arc<Host> {
        &self.host
    }
}

/// What the workloads and the server's responder use of one RNIC end,
/// whatever its lower layer: MPA over TCP ([`Endpoint`]) or DDP over SCTP
/// ([`crate::sctp::SctpEndpoint`]).
pub trait RnicEnd {
    /// The engine.
    fn rnic(&mut self) -> &mut Rnic;
    /// An SGE of our memory.
    fn sge(&self, offset: u64, len: u32) -> Sge;
    /// Our registered memory.
    fn region(&self) -> &Arc<Region>;
    /// Completions waiting, into `out`.
    fn poll_cq(&mut self, out: &mut Vec<Wc>);
    /// Whether QP `qp`'s connection (or DDP stream) is still open.
    fn is_live(&self, qp: QpHandle) -> bool;
    /// Gives QP `qp`'s connection precedence on this end's core, or takes
    /// it back (`dataplane::Core::set_urgent`); `false` where the lower
    /// layer has no such class.
    fn set_urgent(&mut self, qp: QpHandle, urgent: bool) -> bool {
        let _ = (qp, urgent);
        false
    }
}

impl<T: CoreTransport> RnicEnd for Endpoint<T> {
    fn rnic(&mut self) -> &mut Rnic {
        Endpoint::rnic(self)
    }

    fn sge(&self, offset: u64, len: u32) -> Sge {
        Endpoint::sge(self, offset, len)
    }

    fn region(&self) -> &Arc<Region> {
        &self.region
    }

    fn poll_cq(&mut self, out: &mut Vec<Wc>) {
        Endpoint::poll_cq(self, out);
    }

    fn is_live(&self, qp: QpHandle) -> bool {
        Endpoint::is_live(self, qp)
    }

    fn set_urgent(&mut self, qp: QpHandle, urgent: bool) -> bool {
        self.core.set_urgent(qp, urgent)
    }
}

/// One RNIC core: a poll-mode core (its transport, its link to the
/// control plane, its engine), its host's control plane, and registered
/// memory.
pub struct Endpoint<T: CoreTransport> {
    /// The core: TCP, the engine and the QPs of its connections.
    pub core: Core<T>,
    pub(crate) control: Control,
    /// The CQ of every QP.
    pub cq: CqHandle,
    /// Registered memory, remotely readable, writable and atomic.
    pub region: Arc<Region>,
    /// Its registration.
    pub mr: Mr,
    /// Scratch for draining the CQ.
    wcs: Vec<Wc>,
    /// Naps between idle turns (`crate::pace`); none: the core spins.
    pacer: Option<Pacer>,
    /// Whether the last turn moved anything.
    last_busy: bool,
}

impl<T: CoreTransport> Endpoint<T> {
    /// An RNIC of one core on `transport`, with `memory` octets
    /// registered.
    pub fn new(transport: T, emss: usize, seed: u64, memory: usize) -> Endpoint<T> {
        Endpoint::on_host(&Host::new(1, seed), 0, transport, emss, memory)
    }

    /// [`Endpoint::new`] with its memory registered for local work only
    /// ([`Host::register_local`]): for a server that tells its peers
    /// STags of its own making, or none (rping's server, perftest's
    /// sides), so that no peer can reach the rest of its memory, whatever
    /// STag it guesses.
    pub fn new_local(transport: T, emss: usize, seed: u64, memory: usize) -> Endpoint<T> {
        let host = Host::new(1, seed);
        let region = Region::new(memory);
        let mr = host.register_local(&region);
        Endpoint::on_host_sharing(&host, 0, transport, emss, region, mr)
    }

    /// Core `core` of `host` on `transport`, with `memory` octets of its
    /// own registered in the host's registry.
    ///
    /// # Panics
    /// If the host has no core `core`, or it was taken already.
    pub fn on_host(
        host: &Arc<Host>,
        core: CoreId,
        transport: T,
        emss: usize,
        memory: usize,
    ) -> Endpoint<T> {
        let (region, mr) = host.register(memory);
        Endpoint::on_host_sharing(host, core, transport, emss, region, mr)
    }

    /// Core `core` of `host` on `transport`, addressing `region` through
    /// `mr`, a registration in the host's registry that other cores may
    /// use too ([`Host::register`]).
    ///
    /// # Panics
    /// If the host has no core `core`, or it was taken already.
    pub fn on_host_sharing(
        host: &Arc<Host>,
        core: CoreId,
        transport: T,
        emss: usize,
        region: Arc<Region>,
        mr: Mr,
    ) -> Endpoint<T> {
        let link = host
            .links
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(usize::from(core))
            .and_then(Option::take)
            .expect("each core of a host is taken once");
        let rnic_config = RnicConfig {
            qps_max: CONNECTIONS_MAX,
            ..RnicConfig::default()
        };
        let mut rnic = Rnic::with_registry(rnic_config, host.registry.clone());
        let pd = host.pd;
        let cq = rnic
            .create_cq(CQ_DEPTH)
            .expect("a fresh RNIC has room for a CQ");
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
        config.direct_receive = host
            .direct_receive
            .load(std::sync::atomic::Ordering::Relaxed);
        Endpoint {
            core: Core::new(config, transport, link, rnic, qp_init),
            control: Control {
                host: host.clone(),
                core,
            },
            cq,
            region,
            mr,
            wcs: vec![Wc::EMPTY; 256],
            pacer: None,
            last_busy: false,
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

    /// The protection domain each new connection's QP joins, chosen by
    /// the connection's addresses and its accept's ULP token
    /// ([`dataplane::Core::set_pd_for`]).
    pub fn set_pd_for(&mut self, choose: dataplane::PdFor) {
        self.core.set_pd_for(choose);
    }

    /// Paces [`step`](Self::step) with `pacer` (naps once the core has
    /// been idle a while, see `crate::pace`), or lets it spin (`None`,
    /// the default).
    pub fn set_pacing(&mut self, pacer: Option<Pacer>) {
        self.pacer = pacer;
    }

    /// Whether the last [`step`](Self::step)'s turn moved anything (a
    /// packet, an event, an octet for the engine, a new QP).
    pub fn last_turn_busy(&self) -> bool {
        self.last_busy
    }

    /// Naps taken between turns so far (0 without pacing).
    pub fn naps(&self) -> u64 {
        self.pacer.as_ref().map_or(0, Pacer::naps)
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
    ///
    /// With pacing ([`set_pacing`](Self::set_pacing)), an idle turn past
    /// the spin is followed by a nap.
    pub fn step(&mut self, now: Instant) {
        let busy = self.core.turn(now);
        self.last_busy = busy;
        if let Some(nap) = self.pacer.as_mut().and_then(|p| p.after_turn(now, busy)) {
            std::thread::sleep(std::time::Duration::from_micros(nap.total_micros()));
        }
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

    /// QPs whose connections ended since the last call (destroyed, or in
    /// Error until their last completions are polled: `Core::next_ended`).
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

    /// Its handle on the control plane (more listeners on this core).
    pub fn control(&self) -> &Control {
        &self.control
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

    /// The protection domain of its QPs and registrations.
    pub fn pd(&self) -> Pd {
        self.control.host.pd
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

/// An RNIC core with `memory` octets registered, on the in-memory link
/// whose other end is silent: every turn after the first finds nothing to
/// do (for unit tests of what runs on a core).
#[cfg(test)]
pub(crate) fn idle_endpoint(memory: usize) -> Endpoint<tcp_lite::Stack<tcp_lite::link::LinkEnd>> {
    use tcp_lite::link::{self, LinkConfig};
    let (end, _silent) = link::pair(LinkConfig::ethernet(1500), 1);
    let addr = std::net::Ipv4Addr::new(10, 0, 0, 1);
    let config = tcp_lite::StackConfig::new([2, 0, 0, 0, 0, 1], addr);
    let stack = tcp_lite::Stack::new(config, end, Instant::from_micros(0)).expect("a stack");
    let emss = stack.emss();
    Endpoint::new(stack, emss, 1, memory)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_paced_core_naps_once_idle_past_its_spin_and_an_unpaced_one_never() {
        let mut paced = idle_endpoint(4096);
        paced.set_pacing(Some(Pacer::new(
            Duration::from_micros(100),
            Duration::from_micros(1),
        )));
        let mut spinning = idle_endpoint(4096);
        // Turns every 50 us of the core's clock for 1 ms.
        for t in 0..20 {
            paced.step(Instant::from_micros(50 * t));
            spinning.step(Instant::from_micros(50 * t));
        }
        // Idle from the first turn or the second: no nap within 100 us of
        // that, a nap after every turn from then on.
        assert!((17..=18).contains(&paced.naps()), "{} naps", paced.naps());
        assert_eq!(spinning.naps(), 0);
    }
}
