//! The daemon: its port, one pinned poll-mode core per configured lcore
//! (each a [`Server`] on its own queue pair, sharing one registration of
//! the memory and one control-plane thread), the operator's threads
//! (metrics, control socket) and the drain.
//!
//! Nothing here runs per packet: a core publishes its counters and its
//! connections to [`Shared`] every [`PUBLISH_EVERY`], and the operator's
//! threads read only that.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration as StdDuration, Instant as StdInstant};

use bench::endpoint::{now, Host};
use bench::link::{LinkArgs, PeerTransport};
use bench::pace::Pacer;
use bench::responder::{
    Admission, Connection, EventHook, Exposure, Foreign, Server, ServerEvent, Serving,
};
use bench::sctp::{SctpListen, SctpServer};
use control::mpa::StartupConfig;
use control::runtime::ControlConfig;
use dataplane::PdChoice;
use dataplane::{CoreCounters, CoreTransport, DpdkDevice, MessageTransport};
use rnic_engine::mem::Region;
use rnic_engine::verbs::{Mr, QpEvent};
use tcp_lite::sys::kernel::KernelTransport;
use tcp_lite::sys::udp::KernelUdp;
use tcp_lite::Stack;

use crate::config::{Config, Driver, HugepagesPolicy, IdlePolicy, ServiceKind};
use crate::histogram::{Histogram, SETUP_BUCKETS_US};
use crate::memory::MemoryService;
use std::collections::HashMap;

/// How often a core publishes its counters and connections.
pub const PUBLISH_EVERY: StdDuration = StdDuration::from_millis(50);

/// How often the main thread ticks ([`serve`]'s `tick`): signals and the
/// operator's requests wait for it at most this long.
pub const TICK: StdDuration = StdDuration::from_millis(100);

/// How long the cores keep turning after a drain's deadline ended the
/// last connections (their resets and Terminates go out).
const FLUSH_AFTER_ABORT: StdDuration = StdDuration::from_millis(100);

/// Protection domains a perftest service may hold per client it serves at
/// once: its sessions' (one each), and those of sessions and refused
/// connections whose QPs have not gone yet.
const PERFTEST_PDS_PER_CLIENT: usize = 2;

/// What one core shows the operator.
#[derive(Debug, Default)]
pub struct CoreShared {
    /// The CPU it is pinned to.
    pub cpu: Option<usize>,
    /// Its counters, as of its last publication.
    pub counters: Mutex<CoreCounters>,
    /// The bench service's connections on it, as of its last publication.
    pub connections: Mutex<Vec<Connection>>,
    /// Connections in Full Operation on it, every service's, as of its
    /// last publication.
    pub open: AtomicU64,
    /// Those of them that are urgent (services with `urgent`).
    pub urgent: AtomicU64,
    /// It has left its loop.
    pub done: AtomicBool,
    /// The generation of [`Shared::listeners`] whose listeners are up on
    /// this core (or failed, said in `listen_error`).
    pub listeners_applied: AtomicU64,
    /// Why its last change of listeners failed, if it did.
    pub listen_error: Mutex<Option<String>>,
    /// Its rping service: what it verified and the clients it serves now
    /// (QP number, peer), as of its last publication.
    pub rping: Mutex<(bench::rping::Outcome, Vec<(u32, String)>)>,
    /// Its QPs' traffic by RDMAP opcode, by our TCP port, ended QPs'
    /// included, as of its last publication.
    pub ops: Mutex<Vec<(u16, rnic_engine::qp::OpStats)>>,
    /// Naps it took between turns (`[daemon] idle = "nap"`).
    pub naps: AtomicU64,
}

/// The bench service's DDP over SCTP listener (RFC 5043 over UDP, RFC
/// 6951): an SCTP endpoint on every core, which the core's thread turns
/// beside its MPA connections, in the same leases, limits and drain, each
/// with a control-plane link of its own. Each association is one core's:
/// on a DPDK port its datagrams share the core's stack and queue pair with
/// the MPA connections, steered to the core their UDP four-tuple hashes to
/// (`dataplane::steer`); over Linux, each core's socket binds the port with
/// `SO_REUSEPORT` and Linux picks one by the four-tuple's hash (see
/// [`SctpCarrier`]).
pub struct SctpShared {
    /// Its UDP port.
    pub udp_port: u16,
    /// The protection domain of its streams' QPs and of the bench runs
    /// begun over it (the runs' lease STags): not the host's, so that no
    /// QP of another service (rping's, in the host's PD) can use a DDP
    /// over SCTP run's STag. (Runs over SCTP share it among themselves:
    /// a passive stream's QP is made before its run is decided.)
    pub pd: rnic_engine::mem::Pd,
    /// Each core's endpoint.
    pub cores: Vec<SctpCoreShared>,
}

impl SctpShared {
    /// Every core's counters, summed.
    pub fn counters(&self) -> dataplane::SctpCounters {
        let mut all = dataplane::SctpCounters::default();
        for c in &self.cores {
            all += *c.counters.lock().unwrap_or_else(|p| p.into_inner());
        }
        all
    }

    /// Associations every core holds.
    pub fn associations(&self) -> u64 {
        self.sum(|c| &c.associations)
    }

    /// Streams open on every core.
    pub fn streams(&self) -> u64 {
        self.sum(|c| &c.streams)
    }

    /// Streams that failed on every core.
    pub fn failed(&self) -> u64 {
        self.sum(|c| &c.failed)
    }

    fn sum(&self, of: impl Fn(&SctpCoreShared) -> &AtomicU64) -> u64 {
        self.cores
            .iter()
            .map(|c| of(c).load(Ordering::Relaxed))
            .sum()
    }
}

/// One core's DDP over SCTP endpoint, as of its last publication.
pub struct SctpCoreShared {
    /// Its slot among the serving cores (after the MPA cores), and its
    /// link of the control plane.
    pub slot: u16,
    /// The streams it serves, as of its last publication.
    pub connections: Mutex<Vec<Connection>>,
    /// The listener's generation `connections` is of (republished only
    /// when it changes, as the cores' lists are).
    pub published: AtomicU64,
    /// Its core's counters, as of its last publication.
    pub counters: Mutex<dataplane::SctpCounters>,
    /// Associations and streams open, as of its last publication.
    pub associations: AtomicU64,
    /// Streams open.
    pub streams: AtomicU64,
    /// Streams that ended with an RDMAP Terminate or whose workload
    /// failed.
    pub failed: AtomicU64,
}

/// One perftest service: its gate on the control-plane thread and its
/// sessions' memory. perftest's client opens a control connection and `-q`
/// data connections that say nothing of each other, so they must meet on
/// one core. By default one core serves all of a service's clients (the
/// DPDK port steers the service's TCP port to it; on Linux TCP only that
/// core listens), the services taking the cores in turn, in the order of
/// the configuration. A service with `spread = true` is served by every
/// core, each client host's connections by one (the DPDK port steers them
/// by the client's address: `Steer::by_host`; on Linux TCP every core
/// listens, and the reuseport group's program picks a listener by the
/// client's address: `KernelConfig::by_host`), its slots shared.
pub struct PerftestShared {
    /// Its TCP port.
    pub port: u16,
    /// The cores that serve it (indices into the cores): one, or every
    /// core (`spread`).
    pub cores: Vec<usize>,
    /// What its clients run.
    pub config: crate::config::PerftestConfig,
    /// Its listener's decisions.
    pub gate: Arc<bench::perftest::Gate>,
    /// Where its sessions' slots begin in the registered memory.
    pub origin: u64,
    /// Its slots, shared by its cores.
    pub slots: Arc<bench::perftest::Slots>,
    /// Its connections that ended (control and data).
    pub closed: AtomicU64,
    /// Sessions done and failed, and the clients served now (the control
    /// QP's number, the peer, where its session is), as of each of its
    /// cores' last publication (in the order of `cores`).
    pub state: Vec<Mutex<PerftestState>>,
}

/// What one core publishes of a perftest service.
pub type PerftestState = (
    bench::perftest::service::Counts,
    Vec<bench::perftest::service::Client>,
);

impl PerftestShared {
    /// Sessions done and failed on all its cores, the PDs its sessions
    /// hold, and the clients served now, each with the core serving it.
    pub fn snapshot(
        &self,
    ) -> (
        bench::perftest::service::Counts,
        Vec<(usize, bench::perftest::service::Client)>,
    ) {
        let mut counts = bench::perftest::service::Counts {
            pds: self.gate.held(),
            ..Default::default()
        };
        let mut clients = Vec::new();
        for (&core, state) in self.cores.iter().zip(&self.state) {
            let (c, served) = &*state.lock().unwrap_or_else(|p| p.into_inner());
            counts.done += c.done;
            counts.failed += c.failed;
            clients.extend(served.iter().cloned().map(|client| (core, client)));
        }
        (counts, clients)
    }
}

/// The token (control's `Accept::ulp_token`) of the rping service's
/// accepts, which each handoff carries back: the core hands the connection
/// to rping because rping accepted it, wherever a reload has moved the
/// services since ([`finisher`]). Above every memory grant's id (a counter
/// from 1), which are the memory service's tokens.
const RPING_ACCEPT: u64 = 1 << 63;

/// The rping service's gate on the control-plane thread: its accepts and
/// refusals, closed by a drain.
#[derive(Debug, Default)]
pub struct RpingGate {
    /// No new client.
    pub draining: AtomicBool,
    /// Clients accepted.
    pub accepted: AtomicU64,
    /// Clients refused (draining).
    pub refused: AtomicU64,
    /// Clients whose connection ended.
    pub closed: AtomicU64,
    /// Connection set-up times (the daemon's).
    pub setup: Arc<SetupClock>,
    /// What one client host may hold of the service over every core (its
    /// `clients_per_host`), shared by the cores' services; none without a
    /// rping service.
    pub hosts: Option<Arc<bench::rping::HostCap>>,
}

impl RpingGate {
    /// The listener's callback.
    fn on_request(self: &Arc<Self>) -> control::runtime::OnRequest {
        let gate = self.clone();
        Box::new(move |_, peer| {
            if gate.draining.load(Ordering::SeqCst) {
                gate.refused.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(service = "rping", %peer, "connection refused: draining");
                return control::runtime::Decision::Reject(b"dpwarpd is draining".to_vec());
            }
            // A host at its share is told so here; the core's service
            // holds the count (taken at establishment, so one host's
            // startups in flight at once may still pass this, and the core
            // resets those beyond).
            if let Some(hosts) = gate.hosts.as_ref() {
                if hosts.held_by(*peer.ip()) >= hosts.per_host() {
                    gate.refused.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        service = "rping",
                        %peer,
                        per_host = hosts.per_host(),
                        "connection refused: its host holds its clients_per_host"
                    );
                    return control::runtime::Decision::Reject(
                        format!(
                            "dpwarpd: {} holds {} rping connections already, as many as one \
                             host may",
                            peer.ip(),
                            hosts.per_host()
                        )
                        .into_bytes(),
                    );
                }
            }
            gate.accepted.fetch_add(1, Ordering::Relaxed);
            gate.setup.decided(peer);
            tracing::info!(service = "rping", %peer, "connection accepted");
            control::runtime::Decision::Accept(control::mpa::Accept {
                ulp_token: RPING_ACCEPT,
                ..control::mpa::Accept::default()
            })
        })
    }
}

/// How long each service's connections take from the accept decision to
/// Full Operation: the decision's time by peer (the control-plane thread
/// writes it), taken by the core that gets the connection.
#[derive(Debug)]
pub struct SetupClock {
    decided: Mutex<HashMap<std::net::SocketAddrV4, StdInstant>>,
    bench: Histogram,
    memory: Histogram,
    rping: Histogram,
    perftest: Histogram,
}

impl Default for SetupClock {
    fn default() -> SetupClock {
        SetupClock {
            decided: Mutex::new(HashMap::new()),
            bench: Histogram::new(SETUP_BUCKETS_US),
            memory: Histogram::new(SETUP_BUCKETS_US),
            rping: Histogram::new(SETUP_BUCKETS_US),
            perftest: Histogram::new(SETUP_BUCKETS_US),
        }
    }
}

impl SetupClock {
    /// The control plane accepted `peer`'s connection now.
    pub fn decided(&self, peer: std::net::SocketAddrV4) {
        self.decided
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(peer, StdInstant::now());
    }

    /// `peer`'s connection reached Full Operation for `service`.
    pub fn established(&self, service: ServiceKind, peer: std::net::SocketAddrV4) {
        let at = self
            .decided
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&peer);
        if let Some(at) = at {
            let h = match service {
                ServiceKind::Bench => &self.bench,
                ServiceKind::Memory => &self.memory,
                ServiceKind::Rping => &self.rping,
                ServiceKind::Perftest => &self.perftest,
            };
            h.observe(at.elapsed());
        }
    }

    /// Forgets decisions older than `limit` (startups that failed after
    /// the decision): the table stays bounded.
    pub fn forget_older_than(&self, limit: StdDuration) {
        self.decided
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|_, at| at.elapsed() < limit);
    }

    /// Each service's histogram.
    pub fn histograms(&self) -> [(&'static str, &Histogram); 4] {
        [
            ("bench", &self.bench),
            ("memory", &self.memory),
            ("rping", &self.rping),
            ("perftest", &self.perftest),
        ]
    }
}

/// A Terminate's service, direction (`sent`, `received`) and what it said
/// ([`TermClass`]).
pub type TermKey = (&'static str, &'static str, TermClass);

/// A Terminate's layer, type and code as the metrics count them: the peer
/// chooses them (4, 4 and 8 bits), so only the values the registry names
/// keep series of their own, and a service's others share one (found by a
/// review: each value a peer sent was a series for the daemon's life,
/// 65,536 per service and direction). The log keeps the exact values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TermClass {
    /// A layer, type and code of the IANA "RDDP" registry (RFC 6580), as
    /// the engine keeps it (`rnic_engine::wire::term::REGISTRY`): RFC 5040
    /// §4.8's RDMAP codes, RFC 5041's DDP codes and the MPA codes (RFC
    /// 5044, RFC 6581 §8). The code is `None` where the registry takes
    /// every code of the type ("ALL": a Local Catastrophic Error's code is
    /// the implementation's own). RFC 7306's messages add no codes (its
    /// draft, draft-ietf-storm-rdmap-ext-00, §8: "In addition to error
    /// processing described in section 7 of RFC 5040"; §10: no IANA
    /// action).
    Registered {
        /// Layer.
        layer: u8,
        /// Error Type.
        etype: u8,
        /// Error Code, `None` for "ALL".
        ecode: Option<u8>,
    },
    /// Any other.
    Other,
}

impl TermClass {
    /// The class of a Terminate's layer, type and code.
    pub fn of(t: rnic_engine::verbs::TermInfo) -> TermClass {
        rnic_engine::wire::term::REGISTRY
            .iter()
            .find(|r| {
                r.layer == t.layer && r.etype == t.etype && r.ecode.is_none_or(|c| c == t.ecode)
            })
            .map_or(TermClass::Other, |r| TermClass::Registered {
                layer: r.layer,
                etype: r.etype,
                ecode: r.ecode,
            })
    }

    /// Its `layer`, `type` and `code` labels: the numbers, `code="all"` for
    /// a type whose every code is one entry, `"other"` for the rest.
    pub fn labels(self) -> String {
        match self {
            TermClass::Registered {
                layer,
                etype,
                ecode: Some(code),
            } => format!("layer=\"{layer}\",type=\"{etype}\",code=\"{code}\""),
            TermClass::Registered {
                layer,
                etype,
                ecode: None,
            } => format!("layer=\"{layer}\",type=\"{etype}\",code=\"all\""),
            TermClass::Other => "layer=\"other\",type=\"other\",code=\"other\"".into(),
        }
    }
}

/// Connections by what happened to them, and Terminates by layer, type,
/// code and direction.
#[derive(Debug, Default)]
pub struct Events {
    /// Connections accepted.
    pub accepted: AtomicU64,
    /// Connections refused (MPA Reject with the reason).
    pub refused: AtomicU64,
    /// Connections that ended.
    pub closed: AtomicU64,
    /// Terminates: (service, `sent`/`received`, what it said) -> count.
    pub terminates: Mutex<BTreeMap<TermKey, u64>>,
    /// Connection set-up times.
    pub setup: Arc<SetupClock>,
}

impl Events {
    /// Counts a Terminate ([`TermClass`]); its direction and what it said
    /// (the exact values, for the log).
    pub fn count_terminate(
        &self,
        service: &'static str,
        event: QpEvent,
    ) -> (&'static str, rnic_engine::verbs::TermInfo) {
        let (direction, t) = match event {
            QpEvent::TerminateSent(t) => ("sent", t),
            QpEvent::TerminateReceived(t) => ("received", t),
        };
        *self
            .terminates
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((service, direction, TermClass::of(t)))
            .or_default() += 1;
        (direction, t)
    }

    /// The hook the servers tell; logs one event per connection.
    pub fn hook(self: &Arc<Self>, service: &'static str) -> EventHook {
        let me = self.clone();
        Arc::new(move |event| match event {
            ServerEvent::Accepted {
                llp,
                peer,
                run,
                op,
                size,
            } => {
                me.accepted.fetch_add(1, Ordering::Relaxed);
                // Set-up times are timed by peer address: an MPA
                // connection's own, while an SCTP association's streams
                // share theirs.
                if llp == "mpa" {
                    me.setup.decided(peer);
                }
                tracing::info!(service, llp, %peer, run, op = op.name(), size, "connection accepted");
            }
            ServerEvent::Established { connection, .. } => {
                if let Some(peer) = connection.peer.filter(|_| connection.llp == "mpa") {
                    me.setup.established(ServiceKind::Bench, peer);
                }
            }
            ServerEvent::Refused { llp, peer, why } => {
                me.refused.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(service, llp, %peer, why, "connection refused");
            }
            ServerEvent::Terminated {
                core,
                connection,
                event,
            } => {
                let (direction, t) = me.count_terminate(service, event);
                tracing::warn!(
                    service,
                    core,
                    llp = connection.llp,
                    peer = %connection.peer.map_or("-".to_string(), |p| p.to_string()),
                    qp = connection.qp.index(),
                    direction,
                    layer = t.layer,
                    r#type = t.etype,
                    code = t.ecode,
                    "connection terminated"
                );
            }
            ServerEvent::Closed { core, connection } => {
                me.closed.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    service,
                    core,
                    llp = connection.llp,
                    peer = %connection.peer.map_or("-".to_string(), |p| p.to_string()),
                    qp = connection.qp.index(),
                    run = connection.run,
                    "connection closed"
                );
            }
        })
    }
}

/// A change of the listeners that the cores are applying.
#[derive(Debug, Clone, Copy)]
pub struct PendingReload {
    /// The ports before it (where a failed reload goes back to).
    pub before: ListenerPorts,
    /// The generation of [`Shared::listeners`] it made.
    pub generation: u64,
    /// It undoes a reload whose listener failed (and is not undone in
    /// turn).
    pub undoing: bool,
}

/// The TCP ports the services listen on now (SIGHUP may change them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ListenerPorts {
    /// The bench service's.
    pub bench: Option<u16>,
    /// The memory service's.
    pub memory: Option<u16>,
    /// The rping service's.
    pub rping: Option<u16>,
}

/// The local ports whose connections are urgent on their core: the
/// services `config` marks `urgent`, on the ports they listen on now
/// (`ports`; a perftest service's never moves).
fn urgent_ports(config: &Config, ports: &ListenerPorts) -> Vec<u16> {
    config
        .services()
        .filter(|s| s.urgent)
        .filter_map(|s| match s.kind {
            ServiceKind::Bench => ports.bench,
            ServiceKind::Memory => ports.memory,
            ServiceKind::Rping => ports.rping,
            ServiceKind::Perftest => Some(s.tcp_port),
        })
        .collect()
}

impl ListenerPorts {
    /// The ports `config` names.
    pub fn of(config: &Config) -> ListenerPorts {
        ListenerPorts {
            bench: config.service(ServiceKind::Bench).map(|s| s.tcp_port),
            memory: config.service(ServiceKind::Memory).map(|s| s.tcp_port),
            rping: config.service(ServiceKind::Rping).map(|s| s.tcp_port),
        }
    }
}

/// What the daemon's threads share.
pub struct Shared {
    /// When it started.
    pub started: StdInstant,
    /// Its configuration.
    pub config: Config,
    /// The configuration's file.
    pub config_path: PathBuf,
    /// What the port is (`net_tap on dpwarp0`, `Linux TCP`, ...).
    pub port_describe: Mutex<String>,
    /// The bench service's state (runs, leases, drain).
    pub serving: Arc<Serving>,
    /// The services' memory (bench leases, perftest and rping buffers).
    pub region: Arc<Region>,
    /// The memory service, if configured.
    pub memory: Option<Arc<MemoryService>>,
    /// The rping service's gate (its per-core state is the cores').
    pub rping: Arc<RpingGate>,
    /// Each core's rping slots: the offset of its buffers in the memory.
    pub rping_origin: Vec<Option<u64>>,
    /// The perftest services (each served by its core).
    pub perftest: Vec<PerftestShared>,
    /// The bench service's DDP over SCTP listener, if configured.
    pub sctp: Option<SctpShared>,
    /// The control plane and the registry.
    pub host: Arc<Host>,
    /// Each core.
    pub cores: Vec<CoreShared>,
    /// Connection events.
    pub events: Arc<Events>,
    /// Connection set-up times, every service's.
    pub setup: Arc<SetupClock>,
    /// Every listener is up.
    pub listening: AtomicBool,
    /// The listeners' ports now, and a count of their changes (each core
    /// applies a change at its next publication).
    pub listeners: Mutex<ListenerPorts>,
    /// Bumped by every change of `listeners`.
    pub listeners_generation: AtomicU64,
    /// A change of `listeners` (SIGHUP's, or its undoing) not yet applied
    /// by every core: [`settle_reload`] undoes a reload whose listener
    /// failed.
    pub reload_pending: Mutex<Option<PendingReload>>,
    /// A drain was asked for (SIGTERM, `dpwarpctl drain`).
    pub drain: AtomicBool,
    /// When the drain began.
    pub drain_started: Mutex<Option<StdInstant>>,
    /// The drain's deadline was brought to now (a second SIGTERM or
    /// SIGINT): the connections left are ended at once.
    pub forced: AtomicBool,
}

impl Shared {
    /// Why the cores' last listen commands failed, one line per failing
    /// core (none: every core listens as told).
    pub fn listen_errors(&self) -> Vec<String> {
        self.cores
            .iter()
            .filter_map(|c| {
                c.listen_error
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone()
            })
            .collect()
    }

    /// Asks for a drain: no new connection, those running may finish until
    /// the deadline, then the daemon exits.
    pub fn request_drain(&self) {
        if !self.drain.swap(true, Ordering::SeqCst) {
            *self.drain_started.lock().unwrap_or_else(|p| p.into_inner()) = Some(StdInstant::now());
            self.serving.drain();
            if let Some(m) = &self.memory {
                m.drain();
            }
            self.rping.draining.store(true, Ordering::SeqCst);
            for p in &self.perftest {
                p.gate.draining.store(true, Ordering::SeqCst);
            }
            tracing::info!(
                deadline_ms = self.config.daemon.drain_deadline_ms,
                "draining: no new connections"
            );
        }
    }

    /// Drains, its deadline now: the cores end the connections left at
    /// their next look and leave (a second SIGTERM or SIGINT).
    pub fn force_stop(&self) {
        self.request_drain();
        self.forced.store(true, Ordering::SeqCst);
    }

    /// Whether the drain's deadline has passed (or was forced).
    fn drain_overdue(&self) -> bool {
        if self.forced.load(Ordering::SeqCst) {
            return true;
        }
        let started = *self.drain_started.lock().unwrap_or_else(|p| p.into_inner());
        started.is_some_and(|t| {
            t.elapsed() >= StdDuration::from_millis(self.config.daemon.drain_deadline_ms)
        })
    }
}

/// The service listening on our TCP port `port` now (`other` for a port
/// none does: one a reload moved away from).
pub fn service_of(shared: &Shared, port: u16) -> &'static str {
    let now = *shared.listeners.lock().unwrap_or_else(|p| p.into_inner());
    if now.bench == Some(port) {
        "bench"
    } else if now.memory == Some(port) {
        "memory"
    } else if now.rping == Some(port) {
        "rping"
    } else if shared.perftest.iter().any(|p| p.port == port) {
        "perftest"
    } else {
        "other"
    }
}

/// Every core's traffic by RDMAP opcode, summed by service.
pub fn ops_by_service(shared: &Shared) -> Vec<(&'static str, rnic_engine::qp::OpStats)> {
    let mut out: Vec<(&'static str, rnic_engine::qp::OpStats)> = Vec::new();
    for core in &shared.cores {
        for (port, stats) in core.ops.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let service = service_of(shared, *port);
            match out.iter_mut().find(|(s, _)| *s == service) {
                Some((_, s)) => s.add(stats),
                None => out.push((service, *stats)),
            }
        }
    }
    out
}

/// Frames a core's device dropped, every cause.
pub fn drops(c: &CoreCounters) -> u64 {
    let d = &c.device;
    d.rx_runt
        + d.rx_oversized
        + d.rx_non_ip
        + d.rx_foreign_mac
        + d.rx_malformed
        + d.rx_fragment
        + d.rx_bad_checksum
        + d.tx_rejected
        + d.tx_reply_dropped
        + d.rx_steer_dropped
}

/// The daemon's state before its cores run: the host, the memory, the
/// service's shared state.
pub fn prepare(config: Config, config_path: PathBuf) -> Result<Arc<Shared>, String> {
    // The memory and the regions are allocated and zeroed below: refused
    // here if this machine does not have them now (an allocation that
    // fails aborts the process).
    if let Some(available) = crate::config::meminfo_mib("MemAvailable") {
        let text = std::fs::read_to_string(&config_path).unwrap_or_default();
        config
            .check_memory(
                &text,
                &config_path.display().to_string(),
                available,
                " available now",
            )
            .map_err(|e| e.to_string())?;
    }
    let cores = config.dpdk.lcores.len();
    let control = ControlConfig {
        startups_max: config.rnic.startups_max,
        startups_max_per_core: config.rnic.startups_max,
        startups_per_peer_max: config.rnic.startups_per_client_max,
        ..ControlConfig::default()
    };
    let sctp_port = config.bench_udp_port();
    let slots = cores * (1 + usize::from(sctp_port.is_some()));
    // The host's PD, DDP over SCTP's, one per memory client and one per
    // bench run (live, or ended and waiting for its QPs to go), and each
    // perftest service its share (`Gate::isolating`).
    let perftest_sessions: usize = config.perftests().map(|(_, p)| p.clients_max).sum();
    let pds = 2 + 4 * config.rnic.clients_max + PERFTEST_PDS_PER_CLIENT * perftest_sessions;
    let host = Host::with_pds(slots as u16, seed(), control, pds)?;
    // Each core's DDP over SCTP endpoint is one serving core more: its
    // own link of the control plane, its own slot in the bench service's
    // state; its streams' QPs and its runs' STags in a PD of their own.
    let sctp = match sctp_port {
        Some(udp_port) => Some(SctpShared {
            udp_port,
            pd: host
                .registry()
                .alloc_pd()
                .map_err(|e| format!("a protection domain for DDP over SCTP: {e:?}"))?,
            cores: (0..cores)
                .map(|k| SctpCoreShared {
                    slot: (cores + k) as u16,
                    connections: Mutex::new(Vec::new()),
                    published: AtomicU64::new(u64::MAX),
                    counters: Mutex::new(dataplane::SctpCounters::default()),
                    associations: AtomicU64::new(0),
                    streams: AtomicU64::new(0),
                    failed: AtomicU64::new(0),
                })
                .collect(),
        }),
        None => None,
    };
    // The services' memory: each bench run's lease under an STag of its
    // own, perftest's and rping's buffers reserved beside them; each run's
    // STag and QPs in a PD of the run's own, over either lower layer.
    let region = Region::new(config.rnic.memory_mib << 20);
    let serving = Serving::exposing(
        slots,
        Admission::Many {
            runs_max: config.rnic.clients_max,
            runs_per_host: config.clients_per_host(ServiceKind::Bench),
            idle: StdDuration::from_millis(config.daemon.client_idle_ms),
        },
        Exposure {
            registry: host.registry().clone(),
            pd: sctp.as_ref().map_or(host.pd(), |s| s.pd),
            region: region.clone(),
        },
    );
    let memory = config.service(ServiceKind::Memory).map(|_| {
        Arc::new(MemoryService::new(
            config.regions().cloned(),
            host.registry().clone(),
            config.rnic.clients_max,
            config.clients_per_host(ServiceKind::Memory),
            // Twice the MPA startup's own limit: a grant unclaimed so long
            // belongs to a startup that gave up.
            StdDuration::from_micros(2 * StartupConfig::default().startup_timeout.total_micros()),
        ))
    });
    let cores = config
        .dpdk
        .lcores
        .iter()
        .map(|&cpu| CoreShared {
            cpu: Some(cpu),
            ..CoreShared::default()
        })
        .collect();
    // rping's buffers: a slot per client, `clients_max` of them (at most
    // rping's own 64) on every core, taken from the memory for good.
    // (`Config::check` refused a file whose memory cannot hold them, with
    // the same words.)
    let rping_hosts = config
        .service(ServiceKind::Rping)
        .map(|_| bench::rping::HostCap::new(config.clients_per_host(ServiceKind::Rping)));
    let rping_origin = match config.service(ServiceKind::Rping) {
        None => vec![None; config.dpdk.lcores.len()],
        Some(_) => {
            let len = config.rping_memory();
            (0..config.dpdk.lcores.len())
                .map(|_| {
                    serving
                        .reserve(len)
                        .map(Some)
                        .ok_or_else(|| config.rping_too_little(len))
                })
                .collect::<Result<Vec<_>, String>>()?
        }
    };
    // Each perftest service's sessions: a slot per client, shared by the
    // cores that serve it (its one core, the services taking the cores in
    // turn, or every core for a spread one), taken from the memory for
    // good.
    let perftest = config
        .perftests()
        .enumerate()
        .map(|(i, (port, p))| {
            let params = p.command.params;
            let len = crate::config::perftest_memory(p);
            let origin = serving
                .reserve(len)
                .ok_or_else(|| config.perftest_too_little(port, p, len))?;
            let slots = bench::perftest::Slots::capped(p.clients_max, p.per_host());
            let lcores = config.dpdk.lcores.len();
            let cores: Vec<usize> = if p.spread {
                (0..lcores).collect()
            } else {
                vec![i % lcores]
            };
            Ok(PerftestShared {
                port,
                state: cores.iter().map(|_| Mutex::default()).collect(),
                cores,
                config: p.clone(),
                // Each session in a PD of its own, the service holding
                // at most its share of the host's; a client host at most
                // `clients_per_host` of its slots.
                gate: bench::perftest::Gate::limited_by(
                    bench::perftest::Gate::isolating(
                        bench::perftest::Gate::new(
                            params,
                            p.unfenced,
                            "`unfenced = true` in the service's [service.perftest]",
                            false,
                        ),
                        host.registry().clone(),
                        (PERFTEST_PDS_PER_CLIENT * p.clients_max) as u64,
                    ),
                    slots.clone(),
                ),
                origin,
                slots,
                closed: AtomicU64::new(0),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let ports = ListenerPorts::of(&config);
    let events = Arc::new(Events::default());
    Ok(Arc::new(Shared {
        started: StdInstant::now(),
        config,
        config_path,
        port_describe: Mutex::new(String::new()),
        serving,
        region,
        memory,
        rping: Arc::new(RpingGate {
            setup: events.setup.clone(),
            hosts: rping_hosts,
            ..RpingGate::default()
        }),
        rping_origin,
        perftest,
        sctp,
        host,
        cores,
        setup: events.setup.clone(),
        events,
        listening: AtomicBool::new(false),
        listeners: Mutex::new(ports),
        listeners_generation: AtomicU64::new(0),
        reload_pending: Mutex::new(None),
        drain: AtomicBool::new(false),
        drain_started: Mutex::new(None),
        forced: AtomicBool::new(false),
    }))
}

/// STag keys and TCP sequence numbers of this run: not predictable from one
/// run to the next (RFC 5042 §5).
fn seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish()
}

/// Runs the daemon until it has drained: opens the port, serves on every
/// core, and calls `tick` on this thread every [`TICK`] meanwhile
/// (signals, the operator's requests), from before the port opens: a
/// drain `tick` asks for then (a SIGTERM that came while the daemon
/// started) ends it at once, without serving, and one asked for while the
/// cores start is seen by them as they begin. Returns once every core has
/// left its loop and the port is closed.
pub fn serve(shared: &Arc<Shared>, mut tick: impl FnMut(&Arc<Shared>)) -> Result<(), String> {
    // The first tick before anything opens: a signal that came during the
    // start (the memory's allocation, the EAL's) waited for the cores'
    // listeners before (found by a review).
    tick(shared);
    if shared.drain.load(Ordering::SeqCst) {
        tracing::info!("a drain was asked for before the port opened: dpwarpd does not serve");
        return Ok(());
    }
    let config = &shared.config;
    let port = config.port();
    let cores = config.dpdk.lcores.len();
    let result = match port.driver {
        Driver::Kernel => {
            // Linux reflects a SYN's class into the connection, and so
            // tells it, only where it is asked to (host-wide in the
            // namespace).
            // `Config::load` refused it too (`--check`); the sysctl may
            // have changed since.
            if config.daemon.reflect_dscp && !tcp_lite::sys::kernel::linux_reflects_tos() {
                return Err(crate::config::REFLECT_DSCP_UNHONOURED.into());
            }
            let kc = tcp_lite::sys::kernel::KernelConfig {
                bind: port.address.0,
                // Every client's QPs (a bench client may bring 64) and the
                // startups; beyond, an accept is reset at once.
                max_connections: (config.rnic.clients_max * 64 + config.rnic.startups_max)
                    .min(65_536),
                rx_buffer: 4 << 20,
                tx_buffer: 4 << 20,
                // A client whose host vanished gives its QPs and lease back.
                keep_alive: Some(bench::link::KEEP_ALIVE),
                reuse_port: cores > 1,
                // A spread perftest service's listeners (one per core)
                // take each client host's connections on one of them.
                by_host: config
                    .perftests()
                    .filter(|(_, p)| p.spread)
                    .map(|(port, _)| (port, cores as u16))
                    .collect(),
                ..Default::default()
            };
            let transports = (0..cores)
                .map(|_| {
                    tcp_lite::sys::kernel::KernelTransport::new(kc.clone())
                        .map_err(|e| format!("Linux TCP: {e}"))
                })
                .collect::<Result<Vec<_>, String>>()?;
            *shared
                .port_describe
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = format!("Linux TCP on {}", port.address.0);
            run_cores(
                shared,
                transports,
                usize::from(port.mtu) - 40,
                None,
                &mut tick,
            )
        }
        driver => {
            let transport = match driver {
                Driver::NetTap => PeerTransport::NetTap,
                Driver::Memif => PeerTransport::Memif,
                Driver::AfPacket => PeerTransport::AfPacket,
                Driver::Pci => PeerTransport::Pci,
                Driver::Kernel => unreachable!("matched above"),
            };
            let link = LinkArgs {
                tap: port.iface.clone(),
                ip: Some(format!("{}/{}", port.address.0, port.address.1)),
                netns: port.netns.clone(),
                bridge: port.bridge.clone(),
                iface: port.iface.clone(),
                pci: port.pci.clone(),
                memif_socket: port.memif_socket.clone().unwrap_or_default(),
                hugepages: match config.dpdk.hugepages {
                    HugepagesPolicy::Auto => bench::link::HugepagesArg::Auto,
                    HugepagesPolicy::On => bench::link::HugepagesArg::On,
                    HugepagesPolicy::Off => bench::link::HugepagesArg::Off,
                },
                mbufs: Some(config.dpdk.mbufs_per_queue),
                ..LinkArgs::default()
            };
            let default_tap = port.iface.clone().unwrap_or_default();
            let opened = bench::link::dpdk_port_queues(
                transport,
                &link,
                usize::from(port.mtu),
                true,
                &default_tap,
                cores as u16,
            );
            let result = opened.and_then(|(eal, opened)| {
                if let (Driver::NetTap, Some(host)) = (driver, &port.host_address) {
                    host_side(&default_tap, port.netns.as_deref(), host)?;
                }
                let steer = if cores > 1 {
                    // Each perftest service's connections to its core, or
                    // a spread one's to its client host's core, the DDP
                    // over SCTP listener's datagrams to the core their
                    // four-tuple hashes to.
                    let pinned: Vec<(u16, u16)> = shared
                        .perftest
                        .iter()
                        .filter_map(|p| match p.cores[..] {
                            [core] => Some((p.port, core as u16)),
                            _ => None,
                        })
                        .collect();
                    let by_host: Vec<u16> = shared
                        .perftest
                        .iter()
                        .filter(|p| p.cores.len() > 1)
                        .map(|p| p.port)
                        .collect();
                    let udp: Vec<u16> = shared.sctp.iter().map(|s| s.udp_port).collect();
                    Some(opened.steer_pinning(&pinned, &udp)?.by_host(&by_host)?)
                } else {
                    None
                };
                let stacks = (0..cores as u16)
                    .map(|k| {
                        bench::link::dpdk_stack_on(
                            &opened,
                            k,
                            steer.as_ref(),
                            port.address,
                            driver == Driver::Memif,
                        )
                    })
                    .collect::<Result<Vec<_>, String>>()?;
                *shared
                    .port_describe
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) = if cores > 1 {
                    format!(
                        "{}, {}, {cores} queue pairs, {}",
                        opened.describe,
                        opened.checksums(),
                        opened.steering()
                    )
                } else {
                    format!("{}, {}", opened.describe, opened.checksums())
                };
                let emss = stacks[0].emss();
                let served = run_cores(shared, stacks, emss, Some(eal), &mut tick);
                if driver == Driver::Memif {
                    std::thread::sleep(bench::link::MEMIF_QUIET);
                }
                drop(opened);
                served
            });
            if let Some(eal) = dataplane::dpdk::Eal::running() {
                let _ = eal.cleanup();
            }
            result
        }
    };
    result
}

/// Gives the kernel side of the TAP interface `iface` (in `netns`) its
/// address: the clients' host on the link. Idempotent (`replace`).
fn host_side(iface: &str, netns: Option<&str>, address: &str) -> Result<(), String> {
    let run = |a: &[&str]| tcp_lite::sys::netns::ip(a).map_err(|e| e.to_string());
    match netns {
        Some(ns) => run(&["-n", ns, "addr", "replace", address, "dev", iface]),
        None => run(&["addr", "replace", address, "dev", iface]),
    }
}

/// How the bench service's DDP over SCTP listener reaches the network from
/// a core's transport: through Linux UDP sockets of its own beside Linux
/// TCP, or through the UDP of the core's own tcp-lite stack on a DPDK port
/// (the same queue pair, the same turn), lent to it at each step.
pub trait SctpCarrier: CoreTransport {
    /// What the listener has beside the core's transport.
    type Own;
    /// The transport its datagrams take.
    type Udp: MessageTransport;

    /// What the listener needs of its own on a port at `address`, one of
    /// `cores` cores' listeners on the same UDP port.
    fn own(address: std::net::Ipv4Addr, cores: usize) -> Self::Own;

    /// The transport of its datagrams, for one step.
    fn udp<'a>(core: &'a mut Self, own: &'a mut Self::Own) -> &'a mut Self::Udp;
}

impl SctpCarrier for KernelTransport {
    type Own = KernelUdp;
    type Udp = KernelUdp;

    fn own(address: std::net::Ipv4Addr, cores: usize) -> KernelUdp {
        let udp = KernelUdp::new(address, 4 << 20);
        // Each core's socket on the one port, Linux choosing by the
        // four-tuple's hash.
        if cores > 1 {
            udp.reuse_port()
        } else {
            udp
        }
    }

    fn udp<'a>(_core: &'a mut Self, own: &'a mut KernelUdp) -> &'a mut KernelUdp {
        own
    }
}

impl SctpCarrier for Stack<DpdkDevice> {
    type Own = ();
    type Udp = Stack<DpdkDevice>;

    fn own(_address: std::net::Ipv4Addr, _cores: usize) {}

    fn udp<'a>(core: &'a mut Self, _own: &'a mut ()) -> &'a mut Stack<DpdkDevice> {
        core
    }
}

/// The DDP over SCTP listener and what it has of its own.
struct SctpListener<T: SctpCarrier> {
    server: SctpServer,
    own: T::Own,
}

impl<T: SctpCarrier> SctpListener<T> {
    /// One step over the core's transport.
    fn step(&mut self, core: &mut Server<T>) -> Result<(), String> {
        let udp = T::udp(core.endpoint.core.transport_mut(), &mut self.own);
        self.server.step(udp)
    }
}

fn run_cores<T: SctpCarrier + Send>(
    shared: &Arc<Shared>,
    transports: Vec<T>,
    emss: usize,
    eal: Option<dataplane::dpdk::Eal>,
    tick: &mut impl FnMut(&Arc<Shared>),
) -> Result<(), String> {
    let config = &shared.config;
    let ports = *shared.listeners.lock().unwrap_or_else(|p| p.into_inner());
    // Port 0: no bench listener (see `Server::serving`).
    let bench_port = ports.bench.unwrap_or(0);
    let memory_port = ports.memory;
    let startup = StartupConfig {
        crc: config.rnic.crc.on(),
        markers: config.rnic.markers.on(),
        ird_max: config.rnic.ird_max,
        ird: config.rnic.ird_max,
        ord: config.rnic.ord,
        ..StartupConfig::default()
    };
    // For the cores' own work requests only: what a client may reach is
    // registered for it (its run's lease, its perftest session's slot).
    let region = shared.region.clone();
    let mr = shared.host.register_local(&region);
    // DDP over SCTP's streams do their local work in their own PD.
    let sctp_mr = shared
        .sctp
        .as_ref()
        .map(|s| shared.host.register_local_in(s.pd, &region));
    let hook = shared.events.hook("bench");
    let mut servers: Vec<Server<T>> = transports
        .into_iter()
        .enumerate()
        .map(|(k, t)| {
            Server::serving(
                &shared.host,
                k as u16,
                t,
                emss,
                region.clone(),
                mr,
                &shared.serving,
                bench_port,
                startup.clone(),
                Some(hook.clone()),
            )
        })
        .collect();
    if let Some(port) = ports.rping {
        for server in &servers {
            server
                .endpoint
                .control()
                .listen(port, startup.clone(), shared.rping.on_request());
        }
    }
    if let (Some(port), Some(memory)) = (memory_port, &shared.memory) {
        memory.listen_on(port);
        for server in &servers {
            let memory = memory.clone();
            server.endpoint.control().listen(
                port,
                startup.clone(),
                memory_listener(memory, port, shared.setup.clone()),
            );
        }
    }
    for server in &mut servers {
        let core = server.endpoint.core.config_mut();
        core.urgent_ports = urgent_ports(&shared.config, &ports);
        core.urgent_dscp = shared.config.daemon.urgent_dscp;
        core.reflect_dscp = shared.config.daemon.reflect_dscp;
    }
    // Each memory client's QP in its own PD, beside its STag; each bench
    // run's QPs in the run's, beside its lease's STag; each perftest
    // session's in the session's, beside its slot's.
    for server in &mut servers {
        let shared = shared.clone();
        server
            .endpoint
            .set_pd_for(Box::new(move |local, peer, ulp_token| {
                pd_choice(&shared, local, peer, ulp_token)
            }));
    }
    // perftest: each service on its cores only (see `PerftestShared`).
    // ib_write_lat's server writes first: unfenced where its service says
    // so.
    for (k, server) in servers.iter_mut().enumerate() {
        server.endpoint.core.config_mut().unfenced_ports = shared
            .perftest
            .iter()
            .filter(|p| p.cores.contains(&k) && p.config.unfenced)
            .map(|p| p.port)
            .collect();
    }
    for p in &shared.perftest {
        for &core in &p.cores {
            servers[core].endpoint.control().listen(
                p.port,
                startup.clone(),
                perftest_listener(p.gate.clone(), p.port, shared.setup.clone()),
            );
        }
    }
    let failed = AtomicBool::new(false);
    let listening = Rendezvous::new(servers.len() + 1);
    // Every core's DDP over SCTP endpoint stays (its socket bound) until
    // every core is done: over Linux UDP the cores' sockets share the port
    // (SO_REUSEPORT), and Linux hashes each association over the sockets
    // bound at the time, so a socket closed while others still drain would
    // move their associations to a core that does not have them.
    let finished = Rendezvous::new(servers.len());
    std::thread::scope(|scope| {
        let threads: Vec<_> = servers
            .into_iter()
            .enumerate()
            .map(|(k, mut server)| {
                let (shared, failed, listening) = (shared.clone(), &failed, &listening);
                let finished = &finished;
                let startup = &startup;
                // Each core also turns its DDP over SCTP endpoint.
                let sctp_parts = (region.clone(), sctp_mr.unwrap_or(mr), hook.clone());
                let mut others = vec![memory_port, ports.rping];
                others.extend(
                    shared
                        .perftest
                        .iter()
                        .filter(|p| p.cores.contains(&k))
                        .map(|p| Some(p.port)),
                );
                #[cfg(test)]
                if let Some(why) = tests::maybe_fail_spawn(&shared, k) {
                    return Err(why);
                }
                std::thread::Builder::new()
                    .name(format!("dpwarpd-core{k}"))
                    .spawn_scoped(scope, move || {
                        let me = &shared.cores[k];
                        // Should this thread panic, the guard passes the
                        // barriers for it, says it is done and stops the
                        // other cores: the main thread then sees the panic
                        // and the daemon exits with an error.
                        let mut guard = CoreGuard {
                            k,
                            me,
                            failed,
                            listening: Some(listening),
                            finished: Some(finished),
                        };
                        let mut sctp = None;
                        let up = dataplane::lcore::enter(me.cpu, eal).and_then(|pinned| {
                            wait_listening(&mut server, &others)?;
                            let (region, mr, hook) = sctp_parts;
                            sctp = sctp_listener(&shared, &mut server, k, region, mr, hook)?;
                            Ok(pinned)
                        });
                        if let Err(why) = &up {
                            tracing::error!(core = k, cpu = ?me.cpu, why, "core failed to start");
                            failed.store(true, Ordering::SeqCst);
                        }
                        guard.listened();
                        if up.is_ok() && !failed.load(Ordering::SeqCst) {
                            #[cfg(test)]
                            tests::maybe_panic(&shared, k);
                            core_loop(
                                &mut server,
                                sctp.as_mut(),
                                k,
                                &shared,
                                failed,
                                ports,
                                startup,
                            );
                        }
                        publish(&server, me);
                        if let (Some(l), Some(s)) = (sctp.as_ref(), shared.sctp.as_ref()) {
                            publish_sctp(&l.server, &s.cores[k]);
                        }
                        guard.finished();
                        drop(sctp);
                        drop(up);
                    })
                    .map_err(|e| format!("cannot start a core's thread: {e}"))
            })
            .collect();
        if let Some(why) = threads.iter().find_map(|t| t.as_ref().err()).cloned() {
            // The cores whose threads did start wait at the barriers for
            // the others: they are let through, see `failed` and end
            // without serving.
            failed.store(true, Ordering::SeqCst);
            listening.open();
            finished.open();
            let mut panicked = false;
            for t in threads.into_iter().flatten() {
                panicked |= t.join().is_err();
            }
            if panicked {
                return Err(CORE_PANICKED.into());
            }
            return Err(why);
        }
        let threads: Vec<_> = threads.into_iter().flatten().collect();
        // The cores may take seconds to listen (a DPDK port's queues, the
        // control plane's answers): ticks meanwhile.
        listening.wait_ticking(TICK, || tick(shared));
        if failed.load(Ordering::SeqCst) {
            let mut panicked = false;
            for t in threads {
                panicked |= t.join().is_err();
            }
            if panicked {
                return Err(CORE_PANICKED.into());
            }
            return Err("a core failed to start (see above)".into());
        }
        shared.listening.store(true, Ordering::SeqCst);
        tracing::info!(
            port = %shared.port_describe.lock().unwrap_or_else(|p| p.into_inner()),
            address = %config.port().address.0,
            bench = bench_port,
            memory = ?memory_port,
            cores = shared.cores.len(),
            memory_mib = config.rnic.memory_mib,
            "serving"
        );
        while !shared.cores.iter().all(|c| c.done.load(Ordering::SeqCst)) {
            tick(shared);
            settle_reload(shared);
            shared.serving.reap();
            // Leases runs gave back are zeroed here, off the control-plane
            // thread and the cores.
            shared.serving.scrub(&region);
            if let Some(m) = &shared.memory {
                m.reap();
            }
            shared.setup.forget_older_than(StdDuration::from_secs(30));
            std::thread::sleep(TICK);
        }
        let mut panicked = false;
        for t in threads {
            panicked |= t.join().is_err();
        }
        if panicked {
            return Err(CORE_PANICKED.into());
        }
        Ok(())
    })
}

/// Why the daemon stops when a core's thread panicked.
const CORE_PANICKED: &str = "a core's thread panicked: dpwarpd stops (see the panic above)";

/// What a core's thread owes the others however it ends, a panic
/// included: its place at the `listening` barrier (if it has not reached
/// it) and at the `finished` one, and its `done`. On a panic it also sets
/// `failed`, so that the other cores leave their loops and the main thread
/// (which waits for every core's `done`) sees the panic and ends the
/// daemon with an error, as it would not if the barriers waited forever.
struct CoreGuard<'a> {
    k: usize,
    me: &'a CoreShared,
    failed: &'a AtomicBool,
    listening: Option<&'a Rendezvous>,
    finished: Option<&'a Rendezvous>,
}

/// A barrier that can be opened for everyone: `n` parties meet, or
/// [`Rendezvous::open`] lets every waiter through, now and later, when
/// some parties will never come (a core whose thread could not be
/// started; `std::sync::Barrier` would wait for it forever). Used once.
struct Rendezvous {
    n: usize,
    /// Parties arrived, and whether it is open.
    state: Mutex<(usize, bool)>,
    opened: std::sync::Condvar,
}

impl Rendezvous {
    fn new(n: usize) -> Rendezvous {
        Rendezvous {
            n,
            state: Mutex::new((0, false)),
            opened: std::sync::Condvar::new(),
        }
    }

    /// Arrives (the last of `n` opens it); the state, locked.
    fn arrive(&self) -> std::sync::MutexGuard<'_, (usize, bool)> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.0 += 1;
        if s.0 >= self.n {
            s.1 = true;
            self.opened.notify_all();
        }
        s
    }

    /// Arrives, and waits until all `n` have or it is opened.
    fn wait(&self) {
        let mut s = self.arrive();
        while !s.1 {
            s = self.opened.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Arrives, and waits as [`Rendezvous::wait`] does, calling `tick`
    /// every `every` meanwhile (the lock not held).
    fn wait_ticking(&self, every: StdDuration, mut tick: impl FnMut()) {
        let mut s = self.arrive();
        while !s.1 {
            s = self
                .opened
                .wait_timeout(s, every)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            if !s.1 {
                drop(s);
                tick();
                s = self.state.lock().unwrap_or_else(|p| p.into_inner());
            }
        }
    }

    /// Lets every party through, those waiting and those to come.
    fn open(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
        self.opened.notify_all();
    }
}

impl CoreGuard<'_> {
    /// Waits at the `listening` barrier (the listeners are up, or a core
    /// failed to start).
    fn listened(&mut self) {
        if let Some(b) = self.listening.take() {
            b.wait();
        }
    }

    /// Says the core is done and waits at the `finished` barrier for the
    /// others.
    fn finished(&mut self) {
        self.listened();
        self.me.done.store(true, Ordering::SeqCst);
        if let Some(b) = self.finished.take() {
            b.wait();
        }
    }
}

impl Drop for CoreGuard<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            tracing::error!(
                core = self.k,
                "a core's thread panicked: stopping every core"
            );
            self.failed.store(true, Ordering::SeqCst);
        }
        self.finished();
    }
}

/// Core `k`'s endpoint of the bench service's DDP over SCTP listener at the
/// port's address (on Linux UDP, or on `core`'s stack: [`SctpCarrier`]),
/// if the configuration has one; why not, if it cannot start.
fn sctp_listener<T: SctpCarrier>(
    shared: &Shared,
    core: &mut Server<T>,
    k: usize,
    region: Arc<Region>,
    mr: Mr,
    hook: EventHook,
) -> Result<Option<SctpListener<T>>, String> {
    let Some(s) = &shared.sctp else {
        return Ok(None);
    };
    let port = shared.config.port();
    let mut own = T::own(port.address.0, s.cores.len());
    let listen = SctpListen {
        pd: Some(s.pd),
        udp_port: s.udp_port,
        mtu: usize::from(port.mtu),
        ird_max: shared.config.rnic.ird_max,
        ord: shared.config.rnic.ord,
        // A client that went silent is found by RFC 9260's defaults.
        quick_liveness: false,
    };
    SctpServer::serving(
        T::udp(core.endpoint.core.transport_mut(), &mut own),
        &listen,
        &shared.host,
        // Core k's thread turns it.
        (s.cores[k].slot, k),
        region,
        mr,
        &shared.serving,
        Some(hook),
    )
    .map(|server| Some(SctpListener { server, own }))
    .map_err(|why| format!("UDP port {} (DDP over SCTP): {why}", s.udp_port))
}

/// What a core's DDP over SCTP endpoint serves, for `dpwarpctl` and the
/// metrics.
fn publish_sctp(listener: &SctpServer, s: &SctpCoreShared) {
    let (associations, streams) = listener.open();
    s.associations.store(associations as u64, Ordering::Relaxed);
    s.streams.store(streams as u64, Ordering::Relaxed);
    s.failed.store(listener.failed(), Ordering::Relaxed);
    *s.counters.lock().unwrap_or_else(|p| p.into_inner()) = listener.counters();
    let generation = listener.generation();
    if s.published.swap(generation, Ordering::Relaxed) != generation {
        *s.connections.lock().unwrap_or_else(|p| p.into_inner()) =
            listener.connections().cloned().collect();
    }
}

/// Steps `server` until its listeners are up: the bench service's and
/// those on `others` (at most 10 s each).
fn wait_listening<T: CoreTransport>(
    server: &mut Server<T>,
    others: &[Option<u16>],
) -> Result<(), String> {
    server.wait_listening()?;
    for port in others.iter().flatten().copied() {
        let start = StdInstant::now();
        loop {
            match server.endpoint.listen_status(port) {
                Some(Ok(())) => break,
                Some(Err(why)) => return Err(format!("TCP port {port}: {why}")),
                None if start.elapsed() > StdDuration::from_secs(10) => {
                    return Err(format!("TCP port {port}: no listener after 10 s"))
                }
                None => server.step(now())?,
            }
        }
    }
    Ok(())
}

/// One core's loop: turns until the drain is done here (no connection
/// left, or the deadline passed and the rest were ended), or another core
/// failed.
#[allow(clippy::too_many_arguments)]
fn core_loop<T: SctpCarrier>(
    server: &mut Server<T>,
    mut sctp: Option<&mut SctpListener<T>>,
    k: usize,
    shared: &Shared,
    failed: &AtomicBool,
    mut ports: ListenerPorts,
    startup: &StartupConfig,
) {
    let me = &shared.cores[k];
    let mut found = Foreign::default();
    let mut rping = shared.rping_origin[k].map(|origin| {
        let service = bench::rping::RpingService::new(
            bench::rping::SIZE_MAX,
            shared.config.rping_slots(),
            origin as usize,
            false,
        );
        match &shared.rping.hosts {
            Some(hosts) => service.limited_by(hosts.clone()),
            None => service,
        }
    });
    // The sessions of the perftest services this core serves.
    let mut perftests: Vec<PerftestCore> = shared
        .perftest
        .iter()
        .enumerate()
        .filter_map(|(i, p)| Some((i, p, p.cores.iter().position(|&c| c == k)?)))
        .map(|(i, p, state)| PerftestCore {
            index: i,
            state,
            port: p.port,
            service: bench::perftest::PerftestService::sharing(
                p.config.command.params,
                p.gate.clone(),
                p.slots.clone(),
                p.origin,
                ib_mtu(shared.config.port().mtu),
                seed(),
            ),
            finished: Vec::new(),
        })
        .collect();
    let mut ops = Vec::new();
    let mut listeners_seen = 0;
    // A change of listeners waiting for the control plane's answer, since
    // when.
    let mut pending: Option<StdInstant> = None;
    let mut last = StdInstant::now();
    let mut turns = 0u32;
    let mut published = u64::MAX;
    let mut aborted_at: Option<StdInstant> = None;
    // `[daemon] idle = "nap"`: naps while nothing is open and nothing moves.
    let mut pacer = (shared.config.daemon.idle == IdlePolicy::Nap).then(Pacer::default);
    loop {
        let turn_at = now();
        if let Err(why) = server.step(turn_at) {
            // One connection's failure ends that connection only.
            tracing::warn!(core = k, why, "connection failed");
        }
        others(
            server,
            k,
            shared,
            rping.as_mut(),
            &mut perftests,
            &mut found,
        );
        for p in &mut perftests {
            p.tick(&mut server.endpoint, k);
        }
        if let Some(l) = sctp.as_deref_mut() {
            if let Err(why) = l.step(server) {
                // One stream's failure ends that stream only.
                tracing::warn!(core = k, llp = "sctp", why, "connection failed");
            }
        }
        if let Some(p) = pacer.as_mut() {
            // Anything open counts as work (a connection, one still in its
            // MPA startup, an association): its packets may come at any
            // moment, and over Linux TCP DDP over SCTP has sockets of its
            // own that the core's turn does not see. Only a core with
            // nothing open and nothing moved for the spin naps.
            let open = server.endpoint.open_connections() > 0
                || server.endpoint.core.in_startup() > 0
                || sctp.as_deref().is_some_and(|l| l.server.open().0 > 0);
            let busy = server.endpoint.last_turn_busy() || open;
            if let Some(nap) = p.after_turn(turn_at, busy) {
                me.naps.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(StdDuration::from_micros(nap.total_micros()));
            }
        }
        turns = turns.wrapping_add(1);
        // The clock at most every 64 turns (a turn may be a microsecond).
        if !turns.is_multiple_of(64) {
            continue;
        }
        let t = StdInstant::now();
        if t.duration_since(last) < PUBLISH_EVERY {
            continue;
        }
        last = t;
        if let Some(r) = rping.as_mut() {
            r.tick(&mut server.endpoint);
            *me.rping.lock().unwrap_or_else(|p| p.into_inner()) = (r.outcome(), r.clients());
        }
        for p in &perftests {
            *shared.perftest[p.index].state[p.state]
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = (p.service.counts(), p.service.clients());
        }
        *me.counters.lock().unwrap_or_else(|p| p.into_inner()) = server.endpoint.core.counters();
        server.endpoint.core.op_stats_by_port(&mut ops);
        me.ops
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone_from(&ops);
        me.open
            .store(server.endpoint.open_connections() as u64, Ordering::Relaxed);
        me.urgent.store(
            server.endpoint.core.urgent_connections() as u64,
            Ordering::Relaxed,
        );
        if server.generation() != published {
            published = server.generation();
            *me.connections.lock().unwrap_or_else(|p| p.into_inner()) =
                server.connections().cloned().collect();
        }
        if let (Some(l), Some(s)) = (sctp.as_deref(), shared.sctp.as_ref()) {
            publish_sctp(&l.server, &s.cores[k]);
        }
        if failed.load(Ordering::SeqCst) {
            return;
        }
        let generation = shared.listeners_generation.load(Ordering::SeqCst);
        if generation != listeners_seen {
            listeners_seen = generation;
            let new = *shared.listeners.lock().unwrap_or_else(|p| p.into_inner());
            relisten(server, shared, ports, new, startup);
            ports = new;
            pending = Some(t);
        }
        if let Some(since) = pending {
            let status =
                |port: Option<u16>| port.map_or(Some(Ok(())), |p| server.endpoint.listen_status(p));
            // Up when every listener is; failed when any did.
            let others = match (status(ports.memory), status(ports.rping)) {
                (Some(Err(e)), _) | (_, Some(Err(e))) => Some(Err(e)),
                (Some(Ok(())), Some(Ok(()))) => Some(Ok(())),
                _ => None,
            };
            match (status(ports.bench), others) {
                (Some(Ok(())), Some(Ok(()))) => {
                    *me.listen_error.lock().unwrap_or_else(|p| p.into_inner()) = None;
                    me.listeners_applied.store(listeners_seen, Ordering::SeqCst);
                    pending = None;
                }
                (Some(Err(why)), _) | (_, Some(Err(why))) => {
                    tracing::error!(
                        core = k,
                        why,
                        "a listener of the reloaded configuration failed"
                    );
                    *me.listen_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
                    me.listeners_applied.store(listeners_seen, Ordering::SeqCst);
                    pending = None;
                }
                _ if since.elapsed() > StdDuration::from_secs(10) => {
                    let why = "no answer from the control plane for 10 s".to_string();
                    tracing::error!(core = k, why, "the reloaded listeners did not come up");
                    *me.listen_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
                    me.listeners_applied.store(listeners_seen, Ordering::SeqCst);
                    pending = None;
                }
                _ => {}
            }
        }
        if !shared.drain.load(Ordering::SeqCst) {
            continue;
        }
        if let Some(at) = aborted_at {
            if at.elapsed() >= FLUSH_AFTER_ABORT {
                return;
            }
            continue;
        }
        // An association whose streams all ended is done too: its client
        // closes it (or the drain's deadline aborts it).
        let streams = sctp.as_deref().map_or(0, |l| l.server.open().1);
        let open = server.endpoint.open_connections() + server.endpoint.core.in_startup() + streams;
        if open == 0 {
            if let Some(l) = sctp.as_deref_mut() {
                // Associations left without a stream: their clients hear
                // at once (an ABORT), not at their heartbeats' timeout.
                l.server.abort_all();
                for _ in 0..8 {
                    let _ = l.step(server);
                }
            }
            return;
        }
        if shared.drain_overdue() {
            tracing::warn!(
                core = k,
                open,
                "drain deadline passed: ending the connections left"
            );
            server.abort_all();
            if let Some(l) = sctp.as_deref_mut() {
                l.server.abort_all();
            }
            if let Some(m) = &shared.memory {
                for qp in m.qps_of(k) {
                    server.endpoint.abort(qp);
                }
            }
            for qp in rping.as_ref().map(|r| r.qps()).unwrap_or_default() {
                server.endpoint.abort(qp);
            }
            for qp in perftests.iter().flat_map(|p| p.service.qps()) {
                server.endpoint.abort(qp);
            }
            aborted_at = Some(t);
        }
    }
}

/// A perftest service's listener callback: its gate decides, the accepts
/// are timed and logged.
fn perftest_listener(
    gate: Arc<bench::perftest::Gate>,
    port: u16,
    setup: Arc<SetupClock>,
) -> control::runtime::OnRequest {
    Box::new(move |request, peer| {
        let decision = gate.decide(request, peer);
        match &decision {
            control::runtime::Decision::Accept(_) => {
                setup.decided(peer);
                tracing::info!(service = "perftest", tcp_port = port, %peer, "connection accepted");
            }
            control::runtime::Decision::Reject(why) => {
                tracing::warn!(
                    service = "perftest",
                    tcp_port = port,
                    %peer,
                    why = %String::from_utf8_lossy(why),
                    "connection refused"
                );
            }
        }
        decision
    })
}

/// A perftest service on one of its cores.
struct PerftestCore {
    /// Its index in [`Shared::perftest`].
    index: usize,
    /// This core's entry in its `state`.
    state: usize,
    port: u16,
    service: bench::perftest::PerftestService,
    /// Sessions that ended this turn (reused).
    finished: Vec<bench::perftest::service::Finished>,
}

impl PerftestCore {
    /// Advances its sessions; one event per session that ended.
    fn tick<T: CoreTransport>(&mut self, ep: &mut bench::endpoint::Endpoint<T>, k: usize) {
        self.service.tick(ep, &mut self.finished);
        for f in self.finished.drain(..) {
            match f.result {
                Ok(sizes) => {
                    let last = sizes.last();
                    tracing::info!(
                        service = "perftest",
                        tcp_port = self.port,
                        core = k,
                        peer = %f.peer,
                        sizes = sizes.len(),
                        mb_s = last
                            .and_then(|o| o.peer_bw.or(o.bw))
                            .map_or(0.0, |r| r.bw_avg),
                        "session completed"
                    );
                }
                Err(why) => {
                    tracing::warn!(
                        service = "perftest",
                        tcp_port = self.port,
                        core = k,
                        peer = %f.peer,
                        why,
                        "session failed"
                    );
                }
            }
        }
    }
}

/// The IB MTU enum perftest tells its peer for an IP MTU (the largest IB
/// MTU, 256 to 4096, within it).
fn ib_mtu(mtu: u16) -> u8 {
    let mut e = 1;
    while e < 5 && (256usize << e) <= usize::from(mtu) {
        e += 1;
    }
    e
}

/// The PD a core makes the QP of a connection from `peer` to `local` in,
/// whose startup's accept named `ulp_token`: its perftest session's, its
/// memory grant's, its bench run's, or the core's own (rping's, whose
/// accept is [`RPING_ACCEPT`], wherever a reload has moved the services:
/// [`finisher`] hands it to rping).
fn pd_choice(
    shared: &Shared,
    local: std::net::SocketAddrV4,
    peer: std::net::SocketAddrV4,
    ulp_token: u64,
) -> PdChoice {
    if let Some(p) = shared.perftest.iter().find(|p| p.port == local.port()) {
        return p.gate.pd_for(peer);
    }
    if ulp_token == RPING_ACCEPT {
        // Not the memory service's to refuse on a port that became its own
        // after rping accepted it there.
        return PdChoice::Default;
    }
    let memory = shared
        .memory
        .as_ref()
        .map_or(PdChoice::Default, |m| m.pd_for(local, peer, ulp_token));
    // The bench service's own port only: another service's connection
    // from the same address and port is not a run's.
    let bench = shared
        .listeners
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .bench;
    match memory {
        PdChoice::Default if bench == Some(local.port()) => shared
            .serving
            .pd_for(peer)
            .map_or(PdChoice::Default, PdChoice::In),
        choice => choice,
    }
}

/// The memory service's listener callback on our TCP port `port`, its
/// accepts timed.
fn memory_listener(
    memory: Arc<MemoryService>,
    port: u16,
    setup: Arc<SetupClock>,
) -> control::runtime::OnRequest {
    Box::new(move |request, peer| {
        let decision = memory.decide(&request.private_data, port, peer);
        if matches!(decision, control::runtime::Decision::Accept(_)) {
            setup.decided(peer);
        }
        decision
    })
}

/// Hands what the bench service's step found for the other services to
/// them (the rping and memory services): connections to the service that
/// accepted them ([`finisher`]; others are ended), completions, ends,
/// Terminates. `found` is this core's buffer, drained here and handed back
/// to the server next turn.
fn others<T: CoreTransport>(
    server: &mut Server<T>,
    k: usize,
    shared: &Shared,
    mut rping: Option<&mut bench::rping::RpingService>,
    perftests: &mut [PerftestCore],
    found: &mut Foreign,
) {
    server.take_foreign(found);
    // Terminates, completions and ends before new connections: a new QP
    // may have taken an ended one's handle in the same step.
    for (qp, event) in found.events.drain(..) {
        let rpings = rping
            .as_deref_mut()
            .is_some_and(|r| r.terminated(qp, event));
        let service = if rpings {
            "rping"
        } else if perftests
            .iter_mut()
            .any(|p| p.service.terminated(qp, event))
        {
            "perftest"
        } else {
            "memory"
        };
        let (direction, t) = shared.events.count_terminate(service, event);
        tracing::warn!(
            service,
            core = k,
            qp = qp.index(),
            direction,
            layer = t.layer,
            r#type = t.etype,
            code = t.ecode,
            "connection terminated"
        );
    }

    for wc in found.wcs.drain(..) {
        if let Some(r) = rping.as_deref_mut() {
            if r.completion(&mut server.endpoint, &wc) {
                continue;
            }
        }
        for p in perftests.iter_mut() {
            if p.service.completion(&wc) {
                break;
            }
        }
    }
    // Startups that ended without a QP after their accept: what the
    // memory service granted them goes now (the grant their accept named,
    // not a later one to the same four-tuple).
    for (local, peer, ulp_token) in found.failed.drain(..) {
        if let Some(m) = &shared.memory {
            m.unclaimed(local, peer, ulp_token);
        }
    }
    for qp in found.ended.drain(..) {
        if let Some(p) = perftests
            .iter_mut()
            .find_map(|p| p.service.ended(qp).then_some(p.index))
        {
            shared.perftest[p].closed.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        if let Some(ended) = rping.as_deref_mut().and_then(|r| r.ended(qp)) {
            shared.rping.closed.fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                service = "rping",
                core = k,
                qp = qp.index(),
                ?ended,
                "connection closed"
            );
            continue;
        }
        if let Some(m) = &shared.memory {
            m.ended(k, qp);
        }
    }
    for (qp, _, local, peer, ulp_token) in found.established.drain(..) {
        match finisher(shared, perftests, k, qp, local, peer, ulp_token) {
            Finisher::Perftest(i) => {
                // It closes what it cannot serve.
                if perftests[i]
                    .service
                    .established(&mut server.endpoint, qp, peer)
                {
                    shared.setup.established(ServiceKind::Perftest, peer);
                }
            }
            Finisher::Memory => shared.setup.established(ServiceKind::Memory, peer),
            Finisher::Rping => match rping.as_deref_mut() {
                // It closes what it cannot serve.
                Some(r) => {
                    if r.established(&mut server.endpoint, qp, Some(peer)) {
                        shared.setup.established(ServiceKind::Rping, peer);
                    }
                }
                None => server.endpoint.abort(qp),
            },
            // No service of ours (or a grant revoked meanwhile): its
            // memory is not reachable, end it at once.
            Finisher::Nobody => server.endpoint.abort(qp),
        }
    }
}

/// The service that finishes a connection handed over on a port other
/// than the bench service's ([`finisher`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Finisher {
    /// The perftest service of the core's `perftests[i]`.
    Perftest(usize),
    /// The memory service, which has claimed the grant its accept made.
    Memory,
    /// The rping service.
    Rping,
    /// None: no service of ours accepted it, or its grant went meanwhile.
    Nobody,
}

/// Who finishes the connection `qp` from `peer` to `local` on core `k`,
/// whose startup's accept named `ulp_token` (the memory service claims its
/// grant here).
///
/// The service that accepted the startup finishes it, not the one that
/// listens on its port now. A reload may swap the memory and rping
/// services' ports while a startup is under way. A Request that arrives
/// after the move fails (its listener's decision is gone: control's
/// `unlisten`), but one decided before it was answered in the old
/// listener's name, and its connection reaches the core after the move: a
/// memory client was told its grant's STag, TO and length in the Reply's
/// private data (RFC 5044 §7.1) and expects that lending, not rping (found
/// by a review: rping, which the port named by then, took it, its QP in
/// the grant's PD, the grant left for `reap`); an rping client expects
/// rping. Each accept's token names its service (a grant's id, or
/// [`RPING_ACCEPT`]). The perftest services never move (`reload` refuses
/// to put another service on their ports), so their port names them.
fn finisher(
    shared: &Shared,
    perftests: &[PerftestCore],
    k: usize,
    qp: rnic_engine::verbs::QpHandle,
    local: std::net::SocketAddrV4,
    peer: std::net::SocketAddrV4,
    ulp_token: u64,
) -> Finisher {
    if let Some(i) = perftests.iter().position(|p| p.port == local.port()) {
        return Finisher::Perftest(i);
    }
    if ulp_token == RPING_ACCEPT {
        return Finisher::Rping;
    }
    // The memory service's by the grant its accept made, still this
    // four-tuple's: on the port it listens on, or on one it listened on
    // before a reload (a startup under way there when it moved, its QP
    // already in the grant's PD).
    let claimed = shared
        .memory
        .as_ref()
        .is_some_and(|m| m.established(k, qp, local, peer, ulp_token));
    if claimed {
        Finisher::Memory
    } else {
        Finisher::Nobody
    }
}

/// Moves this core's listeners from `old` to `new` ports: connections
/// they accepted stay.
fn relisten<T: CoreTransport>(
    server: &mut Server<T>,
    shared: &Shared,
    old: ListenerPorts,
    new: ListenerPorts,
    startup: &StartupConfig,
) {
    // Urgency follows the services to their new ports (connections
    // already made keep theirs).
    server.endpoint.core.config_mut().urgent_ports = urgent_ports(&shared.config, &new);
    // Every old listener goes before any new one comes, so ports may swap
    // between services.
    if new.rping != old.rping {
        if let Some(port) = old.rping {
            server.endpoint.control().unlisten(port);
        }
    }
    if new.memory != old.memory {
        if let Some(port) = old.memory {
            server.endpoint.control().unlisten(port);
        }
    }
    if new.bench != old.bench {
        // Its old listener goes first, its new one comes.
        server.set_port(0, startup.clone());
    }
    if new.bench != old.bench {
        server.set_port(new.bench.unwrap_or(0), startup.clone());
    }
    if new.rping != old.rping {
        if let Some(port) = new.rping {
            server.endpoint.core.forget_listen_status(port);
            server
                .endpoint
                .control()
                .listen(port, startup.clone(), shared.rping.on_request());
        }
    }
    if new.memory != old.memory {
        if let Some(memory) = &shared.memory {
            // Its old port may now be another service's.
            memory.listen_on(new.memory.unwrap_or(0));
        }
        if let (Some(port), Some(memory)) = (new.memory, &shared.memory) {
            server.endpoint.core.forget_listen_status(port);
            server.endpoint.control().listen(
                port,
                startup.clone(),
                memory_listener(memory.clone(), port, shared.setup.clone()),
            );
        }
    }
}

/// SIGHUP: reads the configuration file again. A file that does not check
/// changes nothing, nor does one that moves a service onto a running
/// perftest service's port (those stay until a restart); otherwise the
/// services' listeners move to the ports it names (established connections
/// stay), undone as a whole if one of them fails ([`settle_reload`]), and
/// what else it changes is named as needing a restart. Returns what was
/// done, for the log.
pub fn reload(shared: &Shared) -> Result<String, String> {
    let new = Config::load(&shared.config_path).map_err(|e| e.to_string())?;
    let old = &shared.config;
    let mut restart = Vec::new();
    let differs =
        |a: &dyn std::fmt::Debug, b: &dyn std::fmt::Debug| format!("{a:?}") != format!("{b:?}");
    if differs(&old.daemon, &new.daemon) {
        restart.push("[daemon]");
    }
    if differs(&old.dpdk, &new.dpdk) {
        restart.push("[dpdk]");
    }
    if differs(&old.rnic, &new.rnic) {
        restart.push("[rnic]");
    }
    if differs(old.port(), new.port()) {
        restart.push("[[port]]");
    }
    // Its listener is made at the start, with its own control-plane link.
    if old.bench_udp_port() != new.bench_udp_port() {
        restart.push("the bench service's udp_port");
    }
    if differs(
        &old.regions().collect::<Vec<_>>(),
        &new.regions().collect::<Vec<_>>(),
    ) {
        restart.push("[[region]]");
    }
    // Their sessions' memory is taken at the start.
    let perftests = |c: &Config| {
        c.perftests()
            .map(|(port, p)| (port, p.clone()))
            .collect::<Vec<_>>()
    };
    if differs(&perftests(old), &perftests(&new)) {
        restart.push("the perftest services");
    }
    let urgent = |c: &Config| {
        c.services()
            .filter(|s| s.urgent)
            // A perftest service is named by its port (which never moves).
            .map(|s| (s.kind, s.perftest.as_ref().map(|_| s.tcp_port)))
            .collect::<Vec<_>>()
    };
    if urgent(old) != urgent(&new) {
        restart.push("a service's urgent");
    }
    // The memory, bench and rping services' limits are set at the start (a
    // review found rping's left out: a reload that changed it said nothing).
    let per_host = |c: &Config| {
        [ServiceKind::Memory, ServiceKind::Bench, ServiceKind::Rping]
            .map(|kind| c.clients_per_host(kind))
    };
    if per_host(old) != per_host(&new) {
        restart.push("a service's clients_per_host");
    }
    let mut ports = ListenerPorts::of(&new);
    // A perftest service's listener stays where it is until a restart: a
    // service moved onto its port would take its connections (a second
    // listen on a port replaces the first's decision), and moving back
    // would end its listener. Refused as a whole.
    for (service, port) in [
        ("bench", ports.bench),
        ("memory", ports.memory),
        ("rping", ports.rping),
    ] {
        if let Some(port) = port.filter(|&p| shared.perftest.iter().any(|t| t.port == p)) {
            return Err(format!(
                "the {service} service's tcp_port {port} is a running perftest service's \
                 (perftest services keep their ports until a restart): give the {service} \
                 service another port, or restart dpwarpd"
            ));
        }
    }
    if ports.memory.is_some() && shared.memory.is_none() {
        // Its regions are allocated at the start.
        restart.push("a memory service added");
        ports.memory = None;
    }
    if ports.rping.is_some() && shared.rping_origin.iter().any(Option::is_none) {
        // Its buffers are taken at the start.
        restart.push("an rping service added");
        ports.rping = None;
    }
    let mut pending = shared
        .reload_pending
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if pending.is_some() {
        return Err(
            "the cores are still moving the listeners of the last change: send SIGHUP again \
             in a moment"
                .into(),
        );
    }
    let mut listeners = shared.listeners.lock().unwrap_or_else(|p| p.into_inner());
    let before = *listeners;
    if ports != before {
        *listeners = ports;
        let generation = shared.listeners_generation.fetch_add(1, Ordering::SeqCst) + 1;
        *pending = Some(PendingReload {
            before,
            generation,
            undoing: false,
        });
    }
    let show = |p: Option<u16>| p.map_or("off".to_string(), |p| p.to_string());
    let mut done = format!(
        "listeners: bench {} -> {}, memory {} -> {}, rping {} -> {}",
        show(before.bench),
        show(ports.bench),
        show(before.memory),
        show(ports.memory),
        show(before.rping),
        show(ports.rping)
    );
    if !restart.is_empty() {
        done.push_str(&format!(
            "; changed but applied only by a restart: {}",
            restart.join(", ")
        ));
    }
    Ok(done)
}

/// Once every core has applied the last change of the listeners: if a
/// listener of it failed on any core (its port taken by another program,
/// say), the change is undone as a whole, every service back on the port
/// it listened on before, and the log says why. The main thread calls it
/// between its ticks.
pub fn settle_reload(shared: &Shared) {
    let mut pending = shared
        .reload_pending
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let Some(p) = *pending else {
        return;
    };
    let applied = shared
        .cores
        .iter()
        .all(|c| c.listeners_applied.load(Ordering::SeqCst) >= p.generation);
    if !applied {
        return;
    }
    *pending = None;
    let errors = shared.listen_errors();
    if errors.is_empty() {
        if p.undoing {
            tracing::info!("SIGHUP: the listeners are back on their ports before the reload");
        }
        return;
    }
    if p.undoing {
        tracing::error!(
            why = errors.join("; "),
            "SIGHUP: the listeners did not come back on their ports before the reload either"
        );
        return;
    }
    let mut listeners = shared.listeners.lock().unwrap_or_else(|p| p.into_inner());
    let failed = *listeners;
    *listeners = p.before;
    let generation = shared.listeners_generation.fetch_add(1, Ordering::SeqCst) + 1;
    *pending = Some(PendingReload {
        before: failed,
        generation,
        undoing: true,
    });
    tracing::error!(
        why = errors.join("; "),
        "SIGHUP: a listener of the reloaded configuration failed: every service goes back to \
         the port it listened on before"
    );
}

fn publish<T: CoreTransport>(server: &Server<T>, me: &CoreShared) {
    me.open
        .store(server.endpoint.open_connections() as u64, Ordering::Relaxed);
    me.urgent.store(
        server.endpoint.core.urgent_connections() as u64,
        Ordering::Relaxed,
    );
    *me.counters.lock().unwrap_or_else(|p| p.into_inner()) = server.endpoint.core.counters();
    *me.connections.lock().unwrap_or_else(|p| p.into_inner()) =
        server.connections().cloned().collect();
    server
        .endpoint
        .core
        .op_stats_by_port(&mut me.ops.lock().unwrap_or_else(|p| p.into_inner()));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The configuration file of a daemon one of whose cores panics as it
    /// enters its loop, and which core: set by a test only.
    static PANIC_IN: Mutex<Option<(PathBuf, usize)>> = Mutex::new(None);

    /// The configuration file of a daemon whose core's thread cannot be
    /// started, and which core: set by a test only.
    static FAIL_SPAWN: Mutex<Option<(PathBuf, usize)>> = Mutex::new(None);

    /// Whether `fault` names core `k` of the daemon of `shared`.
    fn names(fault: &Mutex<Option<(PathBuf, usize)>>, shared: &Shared, k: usize) -> bool {
        fault
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .is_some_and(|(path, core)| *path == shared.config_path && *core == k)
    }

    /// Why core `k`'s thread of the daemon `FAIL_SPAWN` names cannot be
    /// started, if it is that one.
    pub(super) fn maybe_fail_spawn(shared: &Shared, k: usize) -> Option<String> {
        names(&FAIL_SPAWN, shared, k)
            .then(|| format!("cannot start a core's thread: the test's refusal for core {k}"))
    }

    /// Panics on core `k` of the daemon `PANIC_IN` names.
    pub(super) fn maybe_panic(shared: &Shared, k: usize) {
        if names(&PANIC_IN, shared, k) {
            panic!("the test's panic on core {k}");
        }
    }

    /// The example on Linux TCP at 127.0.0.1, MPA only, each service on a
    /// port free now, on `lcores`.
    fn loopback(lcores: &str) -> Config {
        let mut text = crate::config::on_kernel(include_str!("../examples/dpwarpd.toml"))
            .replace("address = \"10.77.0.2/24\"", "address = \"127.0.0.1/8\"")
            .replace("udp_port = 9899\n", "")
            .replace("memory_mib = 256", "memory_mib = 64")
            .replace("lcores = [0]", lcores);
        for port in [18515, 18516, 7174, 18521, 18522, 18523, 18524, 18525, 18526] {
            let free = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            text = text.replace(
                &format!("tcp_port = {port}\n"),
                &format!("tcp_port = {free}\n"),
            );
        }
        Config::parse(&text, "loopback.toml").expect("the example on loopback")
    }

    /// A core's thread that panics ends the daemon with an error, its
    /// other cores stopped, instead of leaving the main thread waiting for
    /// it forever, even past SIGTERM (found by a review: the panicking
    /// thread never said it was done nor reached the cores' barrier).
    /// Serves a daemon (two cores where the host has two CPUs) whose last
    /// core `fault` names, under the configuration name `name`, and
    /// returns why it ended: it must end with an error within 30 s.
    fn error_with_a_faulty_core(fault: &Mutex<Option<(PathBuf, usize)>>, name: &str) -> String {
        let two = std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2;
        let (lcores, last) = if two {
            ("lcores = [0, 1]", 1)
        } else {
            ("lcores = [0]", 0)
        };
        let path = PathBuf::from(format!("{name}-{}.toml", std::process::id()));
        let shared = prepare(loopback(lcores), path.clone()).expect("prepared");
        *fault.lock().unwrap() = Some((path, last));
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(serve(&shared, |_| {}));
        });
        let result = rx
            .recv_timeout(StdDuration::from_secs(30))
            .unwrap_or_else(|_| panic!("{name}: the daemon hung"));
        result.expect_err("a daemon with a faulty core ended well")
    }

    #[test]
    fn a_core_that_panics_ends_the_daemon_with_an_error() {
        let why = error_with_a_faulty_core(&PANIC_IN, "panicking-core");
        assert!(why.starts_with("a core's thread panicked"), "{why}");
    }

    /// A core whose thread cannot be started (after another's was) ends
    /// the daemon with the reason: the core that did start is let past the
    /// barriers it waits at for the others (with `std::sync::Barrier` it
    /// waited for ever, and the daemon with it).
    #[test]
    fn a_core_that_cannot_start_ends_the_daemon_with_the_reason() {
        let why = error_with_a_faulty_core(&FAIL_SPAWN, "unstartable-core");
        assert!(why.starts_with("cannot start a core's thread"), "{why}");
    }

    /// A peer chooses the layer, type and code of the Terminates it sends
    /// (4, 4 and 8 bits): every distinct one it sent was a series of its
    /// own in `dpwarp_service_terminates_total`, kept for the daemon's
    /// life and rendered in every scrape. One client that sent each value
    /// once, on a connection of its own, made 65536 series per service
    /// (26 MB a scrape over four services; found by a review). Values the
    /// registry names keep series of their own; the rest of a service's
    /// fold into one.
    #[test]
    fn terminates_a_peer_makes_up_stay_few_series() {
        let events = Events::default();
        for layer in 0..16u8 {
            for etype in 0..16u8 {
                for ecode in 0..=255u8 {
                    events.count_terminate(
                        "bench",
                        QpEvent::TerminateReceived(rnic_engine::verbs::TermInfo {
                            layer,
                            etype,
                            ecode,
                        }),
                    );
                }
            }
        }
        let series = events.terminates.lock().unwrap().len();
        assert!(
            series <= 256,
            "{series} series of dpwarp_service_terminates_total from one peer's Terminates"
        );
        // A registered value keeps its own series (DDP / Tagged Buffer
        // Error / Invalid STag, sent once), one made up shares "other".
        let t = |layer, etype, ecode| rnic_engine::verbs::TermInfo {
            layer,
            etype,
            ecode,
        };
        events.count_terminate("memory", QpEvent::TerminateSent(t(1, 1, 0)));
        events.count_terminate("memory", QpEvent::TerminateReceived(t(1, 1, 0x77)));
        events.count_terminate("memory", QpEvent::TerminateReceived(t(9, 9, 9)));
        let counts = events.terminates.lock().unwrap();
        let registered = TermClass::of(t(1, 1, 0));
        assert_eq!(registered.labels(), "layer=\"1\",type=\"1\",code=\"0\"");
        assert_eq!(counts.get(&("memory", "sent", registered)), Some(&1));
        assert_eq!(
            counts.get(&("memory", "received", TermClass::Other)),
            Some(&2)
        );
        // A Local Catastrophic Error's code is the sender's own: one
        // series for every code.
        assert_eq!(
            TermClass::of(t(0, 0, 0x42)).labels(),
            "layer=\"0\",type=\"0\",code=\"all\""
        );
    }

    /// A stop asked for before the daemon serves (SIGTERM or SIGINT
    /// while it starts) is acted on before the port opens: the first tick
    /// comes before the start-up, sees the drain asked for and ends the
    /// daemon without serving (found by a review: the first tick came
    /// once every listener was up, however long the start took, and the
    /// signal waited for it).
    #[test]
    fn a_stop_asked_for_before_the_start_ends_the_daemon_before_it_serves() {
        let path = PathBuf::from(format!("stop-before-start-{}.toml", std::process::id()));
        let shared = prepare(loopback("lcores = [0]"), path).expect("prepared");
        let listening_at_first_tick = Arc::new(Mutex::new(None));
        let seen = listening_at_first_tick.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let theirs = shared.clone();
        std::thread::spawn(move || {
            let _ = tx.send(serve(&theirs, |shared| {
                let mut seen = seen.lock().unwrap();
                if seen.is_none() {
                    *seen = Some(shared.listening.load(Ordering::SeqCst));
                    // The signal that came before the start.
                    shared.request_drain();
                }
            }));
        });
        let result = rx
            .recv_timeout(StdDuration::from_secs(30))
            .expect("the daemon did not end");
        assert_eq!(result, Ok(()));
        assert_eq!(
            *listening_at_first_tick.lock().unwrap(),
            Some(false),
            "the first tick came only once the daemon served"
        );
        assert!(
            !shared.listening.load(Ordering::SeqCst),
            "served after a stop asked for before the start"
        );
    }

    /// Every party waits for the last, or for the opening.
    #[test]
    fn a_rendezvous_waits_for_all_or_for_its_opening() {
        let met = Arc::new(Rendezvous::new(2));
        let other = met.clone();
        let t = std::thread::spawn(move || other.wait());
        met.wait();
        t.join().unwrap();
        let shut = Arc::new(Rendezvous::new(3));
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let r = shut.clone();
                std::thread::spawn(move || r.wait())
            })
            .collect();
        std::thread::sleep(StdDuration::from_millis(50));
        assert!(
            waiters.iter().all(|w| !w.is_finished()),
            "through before all came"
        );
        shut.open();
        for w in waiters {
            w.join().unwrap();
        }
        // And whoever comes later.
        shut.wait();
        // A party that ticks while it waits (the main thread, while the
        // cores start) ticks until the last comes.
        let late = Arc::new(Rendezvous::new(2));
        let other = late.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(StdDuration::from_millis(300));
            other.wait();
        });
        let mut ticks = 0;
        late.wait_ticking(StdDuration::from_millis(50), || ticks += 1);
        t.join().unwrap();
        assert!(ticks >= 2, "{ticks} ticks in 300 ms");
    }

    /// A reload swaps the memory and rping services' ports while a startup
    /// of each is under way: each was decided by its service's listener
    /// before the move (the memory client told its grant in the Reply, the
    /// rping client accepted), and its connection reaches its core after
    /// it. Each is finished by the service that accepted it, not by the
    /// one its port names now: the memory client's QP is made in its
    /// grant's PD and the memory service lends it the region, the rping
    /// client's is made in the core's own PD and goes to rping (found by
    /// a review: the memory client's connection went to rping, which the
    /// port named by then, its grant left for `reap`).
    #[test]
    fn a_reload_that_swaps_the_memory_and_rping_ports_leaves_each_startup_to_its_service() {
        use control::runtime::Decision;
        use std::net::{Ipv4Addr, SocketAddrV4};
        let shared =
            prepare(loopback("lcores = [0]"), PathBuf::from("swap.toml")).expect("prepared");
        let before = *shared.listeners.lock().unwrap();
        let (memory_port, rping_port) = (before.memory.unwrap(), before.rping.unwrap());
        let memory = shared.memory.clone().expect("the example's memory service");
        memory.listen_on(memory_port);
        let on = |port| SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
        let (lender, pinger) = (on(40000), on(40001));
        // Under the configuration of the start, both Requests are accepted.
        let request = crate::memory::encode_request("shared");
        let Decision::Accept(lent) = memory.decide(&request, memory_port, lender) else {
            panic!("the memory client refused");
        };
        let rping_request = control::mpa::Request {
            revision: 2,
            crc: true,
            markers: false,
            enhanced: None,
            private_data: Vec::new(),
        };
        let Decision::Accept(pinged) = (shared.rping.on_request())(&rping_request, pinger) else {
            panic!("the rping client refused");
        };
        // SIGHUP swaps the two ports, and the core applies it (`relisten`).
        let swapped = ListenerPorts {
            memory: Some(rping_port),
            rping: Some(memory_port),
            ..before
        };
        *shared.listeners.lock().unwrap() = swapped;
        memory.listen_on(rping_port);
        // Then the memory client's connection reaches the core, on the
        // port that is rping's now.
        let qp = rnic_engine::verbs::QpHandle(3);
        let pd = pd_choice(&shared, on(memory_port), lender, lent.ulp_token);
        assert!(matches!(pd, PdChoice::In(_)), "not its grant's PD: {pd:?}");
        let by = finisher(&shared, &[], 0, qp, on(memory_port), lender, lent.ulp_token);
        assert_eq!(by, Finisher::Memory, "the memory client's connection");
        assert_eq!(memory.lendings().len(), 1, "its region lent");
        // And the rping client's, on the port that is the memory
        // service's now.
        let pd = pd_choice(&shared, on(rping_port), pinger, pinged.ulp_token);
        assert_eq!(pd, PdChoice::Default, "the rping client's QP");
        let qp = rnic_engine::verbs::QpHandle(4);
        let by = finisher(
            &shared,
            &[],
            0,
            qp,
            on(rping_port),
            pinger,
            pinged.ulp_token,
        );
        assert_eq!(by, Finisher::Rping, "the rping client's connection");
        assert_eq!(memory.lendings().len(), 1);
        // A connection on either port that no service accepted is ended,
        // and one on the memory service's port gets no QP at all.
        let stranger = on(40002);
        assert_eq!(
            pd_choice(&shared, on(rping_port), stranger, 0),
            PdChoice::Refuse
        );
        for port in [memory_port, rping_port] {
            let by = finisher(&shared, &[], 0, qp, on(port), stranger, 0);
            assert_eq!(by, Finisher::Nobody, "port {port}");
        }
    }

    /// A bench run begun over DDP over SCTP has its lease STag in DDP over
    /// SCTP's own PD, with that lower layer's QPs, not in the host's, where
    /// rping's QPs are (found by a review: any rping client could use an
    /// SCTP run's STag, guessing its 8-bit key).
    #[test]
    fn runs_over_sctp_have_their_stags_outside_the_hosts_pd() {
        let text = crate::config::on_kernel(include_str!("../examples/dpwarpd.toml"));
        let config = Config::parse(&text, "x.toml").expect("the example on Linux TCP");
        assert!(
            config.bench_udp_port().is_some(),
            "the example serves DDP over SCTP"
        );
        let shared = prepare(config, PathBuf::from("x.toml")).expect("prepared");
        let sctp_pd = shared.sctp.as_ref().expect("DDP over SCTP").pd;
        assert_ne!(sctp_pd, shared.host.pd());
        assert_eq!(shared.serving.exposure_pd(), Some(sctp_pd));
    }
}
