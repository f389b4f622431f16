//! perftest's server for any number of clients at once: one
//! [`Machine`] per client, each in a slot of the registered memory, all on
//! one core. `bench perftest` (no SERVER) runs it for one client; the
//! appliance runs one per configured perftest service.
//!
//! perftest's client opens a control connection, then, once the server
//! answered a handshake, `-q` data connections to the same port, none of
//! which says whose it is (perftest's own server listens again for one
//! client's data connections only). Here a connection from an address
//! whose session waits for data connections is one of them; any other is
//! a new client's control connection. Of the sessions from one address,
//! one at a time may answer that handshake (the others wait for it to have
//! its data connections), so two clients on one host never mix theirs.
//!
//! dpwarp's own client says in its MPA Request which kind each connection
//! is ([`super::CONTROL_MARK`], [`super::DATA_MARK`]), and is taken at its
//! word. For perftest's client, which does not, one case is left: a new
//! client's control connection from the same host in the instant between
//! that answer and the last data connection is taken for a data connection
//! (both sessions then fail, costing nothing else); perftest's server
//! serves one client at a time and cannot meet it. Seen with eight
//! clients started at once on one host, until they said so.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use control::mpa::{Accept, Request};
use control::runtime::Decision;
use dataplane::{CoreTransport, PdChoice};
use rnic_engine::cq::Wc;
use rnic_engine::mem::Pd;
use rnic_engine::qp::QpEvent;
use rnic_engine::verbs::{QpHandle, Registry, VerbError};

use super::machine::{Layout, Machine, SizeOutcome, Status};
use super::{Params, Test, Verb, CONTROL_MARK, DATA_MARK, HANG_UP_GRACE};
use crate::endpoint::Endpoint;

/// How long, after refusing a client's data connection, its retries are
/// refused too (perftest's client tries ten times, 100 ms apart).
const REFUSAL_QUIET: Duration = Duration::from_secs(2);

/// How long the gate keeps what it accepted a connection as, for the
/// core to ask (well past the MPA startup's own limit).
const KIND_KEPT: Duration = Duration::from_secs(30);

/// How often at most the gate looks for decisions older than
/// [`KIND_KEPT`] (found by a review: a look on every accept walked every
/// decision kept, so a flood of startups that never reach a core made each
/// accept on the control-plane thread cost what the flood had left).
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Decisions the gate keeps at most for connections on their way to a
/// core; a new client's connection beyond is refused until they go.
const KINDS_MAX: usize = 65_536;

/// Every how many of a service's ticks (a core's turns) the gate's retired
/// PDs and stale connections are looked at.
const SWEEP_TICKS: u64 = 1024;

/// What the gate accepted a connection as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A new client's control connection.
    Control,
    /// A data connection of the session from its address that waits for
    /// them.
    Data,
}

/// What a connection was accepted as, the PD its QP was made in, and when
/// it was accepted.
type Accepted = (Kind, Option<Pd>, Instant);

/// One client address's data connections to come.
#[derive(Debug, Default)]
struct Awaiting {
    /// Connections its sessions still wait for.
    count: u16,
    /// The PD of the session that waits for them, if sessions have PDs.
    pd: Option<Pd>,
    /// A data connection of it was refused (why), and when last.
    refused: Option<(String, Instant)>,
}

/// The listener's side of the service, on the control-plane thread: it
/// tells a client's data connections from a new client's control
/// connection (see the module docs) and answers each with what it needs.
pub struct Gate {
    p: Params,
    unfenced: bool,
    /// How this server is made unfenced (told to a write_lat client that
    /// cannot send an RTR, and in our log).
    unfence_how: &'static str,
    awaiting: Mutex<HashMap<Ipv4Addr, Awaiting>>,
    /// What each accepted connection was accepted as, by its peer, and
    /// the PD its QP was made in: the core serves it so (the gate's word
    /// is the only one).
    kinds: Mutex<HashMap<SocketAddrV4, Accepted>>,
    /// When `kinds` was last swept of stale decisions, and how many
    /// sweeps there have been.
    swept: Mutex<Instant>,
    sweeps: AtomicU64,
    /// Where sessions' PDs come from, if each session has one of its own
    /// ([`Gate::isolating`]).
    registry: Option<Arc<Registry>>,
    /// PDs of ended sessions and of control connections that never became
    /// one, not freed yet because a QP still held them, and how many.
    retired: Mutex<Vec<Pd>>,
    retired_count: AtomicU64,
    /// PDs it holds (its sessions', control connections' on their way,
    /// retired ones), and at most how many: what one service's clients
    /// can take of the host's pool, whatever they do.
    held: AtomicU64,
    held_max: u64,
    /// One client at a time (`bench perftest`'s server): the one it serves.
    single: Option<Mutex<Option<Ipv4Addr>>>,
    /// The service's slots, when one host may hold only some of them
    /// ([`Gate::limited_by`]).
    slots: Option<Arc<Slots>>,
    /// Refuse every new connection (a drain).
    pub draining: AtomicBool,
    /// Connections accepted and refused here.
    pub accepted: AtomicU64,
    /// Connections refused here.
    pub refused: AtomicU64,
}

impl Gate {
    /// A gate for sessions of `p` (the server's); `unfenced` as
    /// `bench perftest --unfenced`, which `unfence_how` names (e.g.
    /// `"--unfenced"`); `single` serves one client, refusing others
    /// meanwhile.
    pub fn new(p: Params, unfenced: bool, unfence_how: &'static str, single: bool) -> Arc<Gate> {
        Arc::new(Gate {
            p,
            unfenced,
            unfence_how,
            awaiting: Mutex::new(HashMap::new()),
            kinds: Mutex::new(HashMap::new()),
            swept: Mutex::new(Instant::now()),
            sweeps: AtomicU64::new(0),
            registry: None,
            retired: Mutex::new(Vec::new()),
            retired_count: AtomicU64::new(0),
            held: AtomicU64::new(0),
            held_max: 0,
            single: single.then(|| Mutex::new(None)),
            slots: None,
            draining: AtomicBool::new(false),
            accepted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        })
    }

    /// The same gate, whose sessions each get a protection domain of their
    /// own from `registry`, holding at most `held_max` at once (live and
    /// retired): a new client's control connection is made in a new PD,
    /// its data connections in the same one, and its slot is registered
    /// there (see [`Gate::pd_for`]). Before it is shared.
    pub fn isolating(mut gate: Arc<Gate>, registry: Arc<Registry>, held_max: u64) -> Arc<Gate> {
        let g = Arc::get_mut(&mut gate).expect("a gate is made isolating before it is shared");
        g.registry = Some(registry);
        g.held_max = held_max;
        gate
    }

    /// The same gate, refusing a new client's control connection, with the
    /// reason, while its host holds as many of `slots` as one host may
    /// ([`Slots::capped`]); the core still refuses one that comes past it
    /// meanwhile (two at once), by a reset. Before it is shared.
    pub fn limited_by(mut gate: Arc<Gate>, slots: Arc<Slots>) -> Arc<Gate> {
        let g = Arc::get_mut(&mut gate).expect("a gate is limited before it is shared");
        g.slots = Some(slots);
        gate
    }

    /// PDs it holds now (live, on their way to a session, retired).
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// Whether its sessions have PDs of their own.
    pub fn isolates(&self) -> bool {
        self.registry.is_some()
    }

    /// The PD a QP of the connection from `peer` is made in, asked by its
    /// core when the connection reaches it (`dataplane::PdFor`, for the
    /// service's port): a new PD for a new client's control connection, the
    /// PD of the session whose data connection it is, the core's own when
    /// sessions have no PDs. `Refuse` (the connection is reset) when no PD
    /// is left, or when the session its data connection was for is gone.
    pub fn pd_for(&self, peer: SocketAddrV4) -> PdChoice {
        let Some(registry) = &self.registry else {
            return PdChoice::Default;
        };
        // In the order `answer` takes them.
        let awaiting = self.awaiting.lock().unwrap_or_else(|p| p.into_inner());
        let mut kinds = self.kinds.lock().unwrap_or_else(|p| p.into_inner());
        let Some(&mut (kind, ref mut pd, _)) = kinds.get_mut(&peer) else {
            // Not accepted here (nothing reaches a core otherwise).
            return PdChoice::Refuse;
        };
        if let Some(p) = *pd {
            // A data connection whose session gave up on its data
            // connections since is refused while the gate still knows
            // that (the next decision forgets it; the session's end then
            // retires its PD, which forgets the connection: `retire`, or
            // else the core finds no session for it and resets it); one
            // whose session took all it waited for joins the session's PD
            // even after the gate has forgotten the address (a core may
            // ask late).
            let gave_up = kind == Kind::Data
                && awaiting
                    .get(peer.ip())
                    .is_some_and(|a| a.count == 0 && a.pd.is_none());
            if gave_up {
                kinds.remove(&peer);
                return PdChoice::Refuse;
            }
            return PdChoice::In(p);
        }
        let chosen = match kind {
            // At most `held_max`: a client that leaves refused connections
            // open (their PDs retired until their QPs go) takes no more.
            Kind::Control if self.held.load(Ordering::Relaxed) < self.held_max => {
                registry.alloc_pd().ok().inspect(|_| {
                    self.held.fetch_add(1, Ordering::Relaxed);
                })
            }
            Kind::Control => None,
            Kind::Data => awaiting.get(peer.ip()).and_then(|a| a.pd),
        };
        match chosen {
            Some(p) => {
                *pd = Some(p);
                PdChoice::In(p)
            }
            None => {
                if kind == Kind::Control {
                    eprintln!("bench perftest: {peer}: no protection domain left for a session");
                }
                kinds.remove(&peer);
                PdChoice::Refuse
            }
        }
    }

    /// Frees `pd`, a session's or a connection's that never made one, now
    /// or, while a QP still holds it, on a later call.
    pub fn retire(&self, pd: Pd) {
        // Data connections accepted for its session and not yet at their
        // core no longer join it: the PD may be freed and handed out again
        // before they arrive (their core then finds nothing: reset).
        self.kinds
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|_, (kind, p, _)| !(*kind == Kind::Data && *p == Some(pd)));
        let mut retired = self.retired.lock().unwrap_or_else(|p| p.into_inner());
        retired.push(pd);
        self.retired_count
            .store(retired.len() as u64, Ordering::Relaxed);
        drop(retired);
        self.sweep();
    }

    /// Frees what [`Gate::retire`] could not free yet and now can.
    pub fn sweep(&self) {
        let Some(registry) = &self.registry else {
            return;
        };
        if self.retired_count.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut retired = self.retired.lock().unwrap_or_else(|p| p.into_inner());
        let before = retired.len();
        retired.retain(|&pd| matches!(registry.dealloc_pd(pd), Err(VerbError::InUse)));
        self.held
            .fetch_sub((before - retired.len()) as u64, Ordering::Relaxed);
        self.retired_count
            .store(retired.len() as u64, Ordering::Relaxed);
    }

    /// Forgets connections accepted so long ago ([`KIND_KEPT`]) that they
    /// never reached a core (their QP refused), retiring their PDs: done
    /// on an accept at most every [`SWEEP_EVERY`], and by the core now and
    /// then, so that one left while nothing else is accepted (a drain)
    /// goes too.
    pub fn forget_stale(&self) {
        *self.swept.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        self.sweeps.fetch_add(1, Ordering::Relaxed);
        let mut kinds = self.kinds.lock().unwrap_or_else(|p| p.into_inner());
        let mut stale = Vec::new();
        kinds.retain(|_, (kind, pd, at)| {
            let keep = at.elapsed() < KIND_KEPT;
            // A control connection's PD is its own until its session has
            // it; a data connection's is its session's.
            if let (false, Kind::Control, Some(pd)) = (keep, *kind, *pd) {
                stale.push(pd);
            }
            keep
        });
        drop(kinds);
        for pd in stale {
            self.retire(pd);
        }
    }

    /// Sweeps for stale decisions so far ([`forget_stale`](Self::forget_stale)).
    pub fn sweeps(&self) -> u64 {
        self.sweeps.load(Ordering::Relaxed)
    }

    /// Whether the last sweep was [`SWEEP_EVERY`] ago or more.
    fn sweep_due(&self) -> bool {
        self.swept
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
            >= SWEEP_EVERY
    }

    /// PDs retired and not yet free.
    pub fn retired(&self) -> u64 {
        self.retired_count.load(Ordering::Relaxed)
    }

    /// The listener's answer to `request` from `peer`.
    pub fn decide(&self, request: &Request, peer: SocketAddrV4) -> Decision {
        let decision = self.answer(request, peer);
        match &decision {
            Decision::Accept(_) => self.accepted.fetch_add(1, Ordering::Relaxed),
            Decision::Reject(_) => self.refused.fetch_add(1, Ordering::Relaxed),
        };
        decision
    }

    fn answer(&self, request: &Request, peer: SocketAddrV4) -> Decision {
        let ip = *peer.ip();
        // What the client says the connection is, if it says (dpwarp's).
        let said = match request.private_data.as_slice() {
            m if m == CONTROL_MARK => Some(Kind::Control),
            m if m == DATA_MARK => Some(Kind::Data),
            _ => None,
        };
        let mut awaiting = self.awaiting.lock().unwrap_or_else(|p| p.into_inner());
        for a in awaiting.values_mut() {
            if a.refused
                .as_ref()
                .is_some_and(|r| r.1.elapsed() >= REFUSAL_QUIET)
            {
                a.refused = None;
            }
        }
        awaiting.retain(|_, a| a.count > 0 || a.refused.is_some());
        // A control connection is a new client's, whatever its host's
        // other clients do.
        if let Some(a) = awaiting
            .get_mut(&ip)
            .filter(|_| said != Some(Kind::Control))
        {
            if let Some((why, at)) = &mut a.refused {
                // The refused client's retries, until it has been quiet.
                *at = Instant::now();
                return Decision::Reject(why.clone().into_bytes());
            }
            // A running session's data connection, even while draining
            // (its session may finish).
            if a.count > 0 {
                let decision = self.data_connection(request, peer, a);
                if matches!(decision, Decision::Accept(_)) {
                    a.count -= 1;
                    // Its session's PD, kept with it now: once the count
                    // is 0 the next decision (another client's) forgets
                    // this address's entry, maybe before the core asks
                    // (`pd_for`), which would then refuse the connection.
                    self.kind_of(peer, Kind::Data, a.pd);
                }
                return decision;
            }
        }
        if said == Some(Kind::Data) {
            // Not a new client: its session gave up on its data
            // connections, or never asked for them.
            eprintln!("bench perftest: refusing {peer}: a data connection no session waits for");
            return Decision::Reject(
                format!("dpwarp perftest: no session from {ip} waits for a data connection")
                    .into_bytes(),
            );
        }
        if self.draining.load(Ordering::SeqCst) {
            return Decision::Reject(b"dpwarp perftest: draining".to_vec());
        }
        if let Some(single) = &self.single {
            let mut serving = single.lock().unwrap_or_else(|p| p.into_inner());
            // Another host's client, or one that says it is a new client.
            if serving.is_some_and(|c| c != ip || said == Some(Kind::Control)) {
                eprintln!("bench perftest: refusing {peer}: a run is in progress");
                return Decision::Reject(
                    b"dpwarp perftest: a run is in progress; one client at a time".to_vec(),
                );
            }
            *serving = Some(ip);
        }
        if let Some(slots) = self.slots.as_ref().filter(|s| s.host_full(ip)) {
            eprintln!(
                "bench perftest: refusing {peer}: {ip} has {} sessions already \
                 (the service's clients_per_host)",
                slots.per_host()
            );
            return Decision::Reject(
                format!(
                    "dpwarp perftest: {ip} has {} sessions already, as many as one host may",
                    slots.per_host()
                )
                .into_bytes(),
            );
        }
        // Its decision is kept until the core asks for it: at most
        // KINDS_MAX of them, a flood of startups that never reach a core
        // (each reset after its Request) refused beyond.
        let full = || self.kinds.lock().unwrap_or_else(|p| p.into_inner()).len() >= KINDS_MAX;
        if full() {
            self.forget_stale();
        }
        if full() {
            eprintln!("bench perftest: refusing {peer}: {KINDS_MAX} connections on their way");
            return Decision::Reject(
                b"dpwarp perftest: too many connections starting; try again later".to_vec(),
            );
        }
        // A control connection: no Reads on it.
        self.kind_of(peer, Kind::Control, None);
        Decision::Accept(Accept {
            ird: Some(0),
            ord: Some(0),
            ..Accept::default()
        })
    }

    fn data_connection(&self, request: &Request, peer: SocketAddrV4, a: &mut Awaiting) -> Decision {
        // ib_write_lat's server writes first: allowed after the client's
        // RFC 6581 RTR, or unfenced (as Linux siw behaves).
        let p2p = request.enhanced.is_some_and(|e| e.peer_to_peer);
        if self.p.test == Test::WriteLat && !self.unfenced && !p2p {
            let why = format!(
                "dpwarp perftest: write_lat needs peer-to-peer (an RTR) or {}",
                self.unfence_how
            );
            eprintln!(
                "bench perftest: refusing {peer}'s data connection: ib_write_lat's server \
                 writes first, which RFC 5044 §7.1 (MPA fencing) forbids before the client's \
                 first FPDU, and the client offered no RFC 6581 peer-to-peer RTR. Give the \
                 client peer-to-peer mode (siw: echo 1 > \
                 /sys/module/siw/parameters/peer_to_peer; dpwarp's client does it), or run \
                 this server with {} (as Linux siw behaves)",
                self.unfence_how
            );
            a.refused = Some((why.clone(), Instant::now()));
            return Decision::Reject(why.into_bytes());
        }
        let reads = if self.p.test.verb() == Verb::Read {
            self.p.out_reads
        } else {
            0
        };
        Decision::Accept(Accept {
            ird: Some(reads),
            ord: Some(reads),
            ..Accept::default()
        })
    }

    /// The session from `ip` that may have its data connections coming
    /// now waits for `count` (0: none any more); `pd` is its PD.
    fn expect(&self, ip: Ipv4Addr, count: u16, pd: Option<Pd>) {
        let mut awaiting = self.awaiting.lock().unwrap_or_else(|p| p.into_inner());
        let a = awaiting.entry(ip).or_default();
        a.count = count;
        a.pd = pd.filter(|_| count > 0);
    }

    /// Remembers what the connection from `peer` was accepted as, and the
    /// PD it joins if known already (a data connection's, its session's;
    /// a control connection's is made when the core asks: `pd_for`). The
    /// core asks when it is established. Decisions older than
    /// [`KIND_KEPT`] belong to startups that never finished and go.
    fn kind_of(&self, peer: SocketAddrV4, kind: Kind, pd: Option<Pd>) {
        if self.sweep_due() {
            self.forget_stale();
        }
        let mut kinds = self.kinds.lock().unwrap_or_else(|p| p.into_inner());
        // The same peer again before its last connection reached the core.
        let replaced = kinds.insert(peer, (kind, pd, Instant::now()));
        drop(kinds);
        if let Some((Kind::Control, Some(pd), _)) = replaced {
            self.retire(pd);
        }
    }

    /// What the connection from `peer` was accepted as, if it was here,
    /// and the PD its QP was made in ([`Gate::pd_for`]).
    fn take_kind(&self, peer: SocketAddrV4) -> Option<(Kind, Option<Pd>)> {
        let mut kinds = self.kinds.lock().unwrap_or_else(|p| p.into_inner());
        kinds.remove(&peer).map(|(k, pd, _)| (k, pd))
    }

    /// Whether a client's data connection was refused so recently that
    /// its retries may still come (leaving in the middle of one's MPA
    /// startup would leave the client to time out: Linux siw's hung past a
    /// minute).
    pub fn refusing(&self) -> bool {
        let awaiting = self.awaiting.lock().unwrap_or_else(|p| p.into_inner());
        awaiting.values().any(|a| {
            a.refused
                .as_ref()
                .is_some_and(|r| r.1.elapsed() < REFUSAL_QUIET)
        })
    }

    /// One-client mode: the accepted connection of `ip`'s client came to
    /// no session (its startup failed, it was gone before we could ask its
    /// address, or it got no QP), and no session runs: another client may
    /// come. Kept, the gate refused every other host for good, saying a
    /// run was in progress (found by a review).
    pub fn release_single(&self, ip: Ipv4Addr) {
        if let Some(single) = &self.single {
            let mut serving = single.lock().unwrap_or_else(|p| p.into_inner());
            if *serving == Some(ip) {
                *serving = None;
            }
        }
    }

    /// Why a data connection from `ip` was refused, if one was.
    fn refusal(&self, ip: Ipv4Addr) -> Option<String> {
        let awaiting = self.awaiting.lock().unwrap_or_else(|p| p.into_inner());
        let (why, at) = awaiting.get(&ip)?.refused.as_ref()?;
        (at.elapsed() < REFUSAL_QUIET).then(|| why.clone())
    }
}

/// A session served.
struct Served {
    m: Machine,
    slot: usize,
    peer: SocketAddrV4,
    /// Data connections told to the gate as awaited.
    announced: u16,
    /// Done or failed, since when (its connections are being closed).
    over: Option<Instant>,
    /// Whether its connections were closed.
    closed: bool,
    /// A failed session's connections, closed at once (our Terminate, if
    /// any, ahead of the FIN), are reset if still there at this time.
    reset_at: Option<Instant>,
}

/// How a served session ended.
#[derive(Debug, Clone)]
pub struct Finished {
    /// The client.
    pub peer: SocketAddrV4,
    /// Every size's numbers, or why it failed.
    pub result: Result<Vec<SizeOutcome>, String>,
}

/// Counts of sessions.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    /// Completed.
    pub done: u64,
    /// Failed.
    pub failed: u64,
    /// Protection domains of sessions (served now, or ended and waiting
    /// for their QPs to go) and of control connections on their way to a
    /// session.
    pub pds: u64,
}

/// A client served now: its control QP's number, the peer, where its
/// session is.
pub type Client = (u32, String, String);

/// The slots of one service's registered memory, shared by the cores that
/// serve its clients (a service spread over several cores by client host):
/// a session takes one as it starts and gives it back once its QPs are
/// gone, on whichever core it was, so the service's `slots` clients at
/// once are its limit however they fall on the cores; one client host
/// holds at most `per_host` of them. A lock is taken per session, never
/// per packet.
#[derive(Debug)]
pub struct Slots {
    held: Mutex<Held>,
    len: usize,
    per_host: usize,
}

/// What [`Slots`] keeps under its lock.
#[derive(Debug)]
struct Held {
    /// The free slots.
    free: Vec<usize>,
    /// The host holding each slot, if taken.
    by: Vec<Option<Ipv4Addr>>,
    /// How many slots each host holds (hosts holding none are not kept).
    hosts: HashMap<Ipv4Addr, usize>,
}

/// Why [`Slots`] had none for a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoSlot {
    /// Every slot is taken.
    All(usize),
    /// The client's host holds as many as one host may.
    Host(usize),
}

impl std::fmt::Display for NoSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoSlot::All(n) => write!(f, "{n} clients already"),
            NoSlot::Host(n) => write!(f, "its host has {n} sessions already (clients_per_host)"),
        }
    }
}

impl Slots {
    /// `len` slots, all free, any host taking all of them.
    pub fn new(len: usize) -> Arc<Slots> {
        Slots::capped(len, len)
    }

    /// `len` slots, all free, one client host taking at most `per_host`
    /// (a host whose sessions trickle their work cannot keep every other
    /// host out). Many clients on one host (a benchmark's) need it as
    /// large as `len`, so it is a setting (`clients_per_host`).
    pub fn capped(len: usize, per_host: usize) -> Arc<Slots> {
        Arc::new(Slots {
            held: Mutex::new(Held {
                free: (0..len).rev().collect(),
                by: vec![None; len],
                hosts: HashMap::new(),
            }),
            len,
            per_host: per_host.clamp(1, len.max(1)),
        })
    }

    /// At most how many one host holds.
    pub fn per_host(&self) -> usize {
        self.per_host
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many are taken now.
    pub fn taken(&self) -> usize {
        self.len - self.lock().free.len()
    }

    /// Whether `host` holds as many as one host may (its next client is
    /// refused at its MPA Request, with the reason: [`Gate::limited_by`]).
    pub fn host_full(&self, host: Ipv4Addr) -> bool {
        self.lock().hosts.get(&host).copied().unwrap_or(0) >= self.per_host
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn take(&self, host: Ipv4Addr) -> Result<usize, NoSlot> {
        let held = &mut *self.lock();
        if held.free.is_empty() {
            return Err(NoSlot::All(self.len));
        }
        let count = held.hosts.get(&host).copied().unwrap_or(0);
        if count >= self.per_host {
            return Err(NoSlot::Host(self.per_host));
        }
        let slot = held.free.pop().ok_or(NoSlot::All(self.len))?;
        held.by[slot] = Some(host);
        held.hosts.insert(host, count + 1);
        Ok(slot)
    }

    /// Gives back a slot taken before: a slot given twice would be served
    /// twice at once, so that is refused (and loud in debug builds).
    fn give(&self, slot: usize) {
        let held = &mut *self.lock();
        match held.by.get_mut(slot).and_then(Option::take) {
            Some(host) => {
                held.free.push(slot);
                if let Some(n) = held.hosts.get_mut(&host) {
                    *n -= 1;
                    if *n == 0 {
                        held.hosts.remove(&host);
                    }
                }
            }
            None => debug_assert!(false, "slot {slot} given back but not taken"),
        }
    }
}

/// perftest's server for the clients of one core (see the module docs).
pub struct PerftestService {
    p: Params,
    gate: Arc<Gate>,
    ib_mtu: u8,
    origin: u64,
    slot_len: u64,
    /// The session in each slot.
    served: Vec<Option<Served>>,
    /// The slot of each QP a session has (a completion's session in one
    /// look-up, not a search of every session's QPs).
    owner: HashMap<QpHandle, usize>,
    /// The free slots (this core's alone, or shared with the service's
    /// other cores).
    slots: Arc<Slots>,
    counts: Counts,
    seed: u64,
    /// Its [`PerftestService::tick`]s, for [`SWEEP_TICKS`].
    ticks: u64,
}

impl PerftestService {
    /// Octets of registered memory `slots` sessions of `p` take.
    pub fn memory(p: &Params, slots: usize) -> usize {
        Layout::memory(p).next_multiple_of(4096) * slots
    }

    /// Heap octets `slots` sessions of `p` take for their timestamps at
    /// most (iteration mode: 16 octets per iteration and QP, per kind a
    /// session keeps), beside [`PerftestService::memory`].
    pub fn timestamps_memory(p: &Params, slots: usize) -> usize {
        super::machine::timestamps_memory(p).saturating_mul(slots)
    }

    /// A service of `p` (the server's parameters) for `slots` clients at
    /// once, in the registered memory from `origin` on
    /// ([`PerftestService::memory`] octets of it); `ib_mtu` is the IB MTU
    /// enum told to clients.
    pub fn new(
        p: Params,
        gate: Arc<Gate>,
        slots: usize,
        origin: u64,
        ib_mtu: u8,
        seed: u64,
    ) -> PerftestService {
        PerftestService::sharing(p, gate, Slots::new(slots), origin, ib_mtu, seed)
    }

    /// [`PerftestService::new`] on one of the cores that serve a service,
    /// its slots shared with the others' (the same `gate`, `slots` and
    /// `origin` on each): each of a client host's connections must reach
    /// the core of that host (`dataplane::steer::Steer::by_host`).
    pub fn sharing(
        p: Params,
        gate: Arc<Gate>,
        slots: Arc<Slots>,
        origin: u64,
        ib_mtu: u8,
        seed: u64,
    ) -> PerftestService {
        PerftestService {
            p,
            gate,
            ib_mtu,
            origin,
            slot_len: Layout::memory(&p).next_multiple_of(4096) as u64,
            served: (0..slots.len()).map(|_| None).collect(),
            owner: HashMap::new(),
            slots,
            counts: Counts::default(),
            seed,
            ticks: 0,
        }
    }

    /// Sessions completed and failed so far.
    pub fn counts(&self) -> Counts {
        Counts {
            pds: self.gate.held(),
            ..self.counts
        }
    }

    /// A connection accepted on the service's port: a data connection of a
    /// session from its address that waits for one, else a new client's
    /// control connection. Returns false if it closed it (no free slot, or
    /// its receives could not be posted).
    pub fn established<T: CoreTransport>(
        &mut self,
        ep: &mut Endpoint<T>,
        qp: QpHandle,
        peer: SocketAddrV4,
    ) -> bool {
        let taken = self.gate.take_kind(peer);
        if let Some((Kind::Data, pd)) = taken {
            // The session it was made for (the same PD, where they have
            // them): another one's data would draw Terminates there.
            let Some(s) = self.served.iter_mut().flatten().find(|s| {
                s.peer.ip() == peer.ip() && s.over.is_none() && s.m.in_window() && s.m.pd() == pd
            }) else {
                // Its session ended meanwhile.
                eprintln!("bench perftest: {peer}: a data connection whose session is gone");
                // Reset: nothing to tell it, and a peer that never closes
                // must not keep its QP (and PD) alive.
                ep.abort(qp);
                return false;
            };
            s.m.add_data(qp);
            self.owner.insert(qp, s.slot);
            announce(&self.gate, s);
            return true;
        }
        let pd = taken.and_then(|(_, pd)| pd);
        let without_pd = pd.is_none() && self.gate.isolates();
        let slot = if without_pd {
            None
        } else {
            self.slots
                .take(*peer.ip())
                .inspect_err(|why| eprintln!("bench perftest: {why}; resetting {peer}"))
                .ok()
        };
        let Some(slot) = slot else {
            if without_pd {
                eprintln!("bench perftest: {peer}: a session without its PD; resetting it");
            }
            // Reset, as above.
            ep.abort(qp);
            // Freed once its QP is.
            if let Some(pd) = pd {
                self.gate.retire(pd);
            }
            return false;
        };
        self.seed = self.seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        let mut m = Machine::new(
            self.p,
            self.origin + slot as u64 * self.slot_len,
            self.ib_mtu,
            self.seed,
        );
        let ready = match pd {
            Some(pd) => m.set_pd(ep, pd).and_then(|()| m.set_ctrl(ep, qp)),
            None => m.set_ctrl(ep, qp),
        };
        if let Err(why) = ready {
            eprintln!("bench perftest: {peer}: {why}");
            ep.abort(qp);
            // Its registration goes with it, the PD once its QP is freed.
            drop(m);
            if let Some(pd) = pd {
                self.gate.retire(pd);
            }
            // Last: another core may take it at once.
            self.slots.give(slot);
            return false;
        }
        self.owner.insert(qp, slot);
        self.served[slot] = Some(Served {
            m,
            slot,
            peer,
            announced: 0,
            over: None,
            closed: false,
            reset_at: None,
        });
        true
    }

    /// The session `qp` belongs to.
    fn session_of(&mut self, qp: QpHandle) -> Option<&mut Served> {
        let slot = *self.owner.get(&qp)?;
        self.served[slot].as_mut().filter(|s| s.m.owns(qp))
    }

    /// A Terminate on `qp`; returns whether `qp` is served here.
    pub fn terminated(&mut self, qp: QpHandle, event: QpEvent) -> bool {
        match self.session_of(qp) {
            Some(s) => {
                s.m.terminated(event);
                true
            }
            None => false,
        }
    }

    /// A completion; returns whether its QP is served here.
    pub fn completion(&mut self, wc: &Wc) -> bool {
        match self.session_of(wc.qp) {
            Some(s) => {
                s.m.completion(*wc);
                true
            }
            None => false,
        }
    }

    /// QP `qp` is gone; returns whether it was served here. A session's
    /// slot is free again once all its QPs are gone.
    pub fn ended(&mut self, qp: QpHandle) -> bool {
        match self.session_of(qp) {
            Some(s) => {
                s.m.ended(qp);
                // Its handle may serve another connection from now on.
                self.owner.remove(&qp);
                true
            }
            None => false,
        }
    }

    /// Advances every session; those that completed or failed this turn
    /// are added to `finished`. A completed session's client may hang up
    /// first for [`HANG_UP_GRACE`] (see `bench perftest`'s `finish`); then
    /// its connections are closed. A failed one's are closed at once (its
    /// slot's STag is deregistered as it fails, so nothing its client
    /// sends later lands in the slot), and reset if its client has not
    /// closed them in turn within [`HANG_UP_GRACE`].
    pub fn tick<T: CoreTransport>(&mut self, ep: &mut Endpoint<T>, finished: &mut Vec<Finished>) {
        // One session per client address at a time has its data
        // connections coming (see `Machine::wants_window`), and none while
        // a data connection from there was refused so lately that its
        // client's retries may still come: those would be taken for the
        // next session's (and its data connections refused with them).
        for i in 0..self.served.len() {
            let Some(ip) = self.served[i]
                .as_ref()
                .filter(|s| s.m.wants_window())
                .map(|s| *s.peer.ip())
            else {
                continue;
            };
            let busy = self
                .served
                .iter()
                .flatten()
                .any(|o| *o.peer.ip() == ip && o.over.is_none() && o.m.in_window())
                || self.gate.refusal(ip).is_some();
            if !busy {
                if let Some(s) = self.served[i].as_mut() {
                    s.m.open_window();
                }
            }
        }
        for s in self.served.iter_mut().flatten() {
            if let Some(since) = s.over {
                if s.reset_at.is_some_and(|at| Instant::now() >= at) {
                    s.reset_at = None;
                    for qp in s.m.qps().collect::<Vec<_>>() {
                        ep.abort(qp);
                    }
                }
                if !s.closed && since.elapsed() > HANG_UP_GRACE {
                    s.closed = true;
                    for qp in s.m.qps().collect::<Vec<_>>() {
                        ep.close(qp);
                    }
                }
                continue;
            }
            if s.m.wants_data() > 0 {
                if let Some(why) = self.gate.refusal(*s.peer.ip()) {
                    s.m.fail(format!("its data connection was refused: {why}"));
                }
            }
            let status = s.m.poll(ep);
            announce(&self.gate, s);
            match status {
                Status::Running | Status::Connect => {}
                Status::Done => {
                    self.counts.done += 1;
                    s.over = Some(Instant::now());
                    finished.push(Finished {
                        peer: s.peer,
                        result: Ok(s.m.results().to_vec()),
                    });
                }
                Status::Failed(why) => {
                    self.counts.failed += 1;
                    s.over = Some(Instant::now());
                    s.closed = true;
                    // Closed, not reset: a reset makes the peer's kernel
                    // drop what it has not read yet, our Terminate among
                    // it (seen under load: the client heard only the
                    // reset). A peer that does not close in turn is reset.
                    for qp in s.m.qps().collect::<Vec<_>>() {
                        ep.close(qp);
                    }
                    s.reset_at = Some(Instant::now() + HANG_UP_GRACE);
                    finished.push(Finished {
                        peer: s.peer,
                        result: Err(why),
                    });
                }
            }
        }
        // Over and every connection gone: the slot serves another, and
        // the session's PD goes once its registrations (dropped with it)
        // and QPs have.
        for slot in 0..self.served.len() {
            if self.served[slot]
                .as_ref()
                .is_some_and(|s| s.over.is_some() && s.m.qps().next().is_none())
            {
                let pd = self.served[slot].take().and_then(|s| s.m.pd());
                self.owner.retain(|_, &mut s| s != slot);
                self.slots.give(slot);
                if let Some(pd) = pd {
                    self.gate.retire(pd);
                }
            }
        }
        // Now and then (each takes the registry's lock while anything is
        // retired): PDs whose QPs have gone, and stale connections'.
        self.ticks = self.ticks.wrapping_add(1);
        if self.ticks.is_multiple_of(SWEEP_TICKS) {
            self.gate.sweep();
            if self.gate.isolates() {
                self.gate.forget_stale();
            }
        }
    }

    /// The clients it serves now: the control QP's number, the peer, where
    /// the session is.
    pub fn clients(&self) -> Vec<Client> {
        self.served
            .iter()
            .flatten()
            .map(|s| {
                (
                    s.m.qps().next().map_or(0, |q| q.index() as u32),
                    s.peer.to_string(),
                    s.m.phase(),
                )
            })
            .collect()
    }

    /// Every QP it serves (to end them at a drain's deadline).
    pub fn qps(&self) -> Vec<QpHandle> {
        self.served
            .iter()
            .flatten()
            .flat_map(|s| s.m.qps())
            .collect()
    }

    /// Sessions served now.
    pub fn len(&self) -> usize {
        self.served.iter().flatten().count()
    }

    /// Whether it serves none.
    pub fn is_empty(&self) -> bool {
        self.served.iter().all(Option::is_none)
    }
}

/// Tells the gate how many data connections `s` waits for now.
///
/// It tells the gate when its data connections may start coming (the gate
/// counts them as it accepts them), and when it gave up on them (failed or
/// over before they all came). One session per address at a time waits for
/// them, so nothing else's count is touched.
fn announce(gate: &Gate, s: &mut Served) {
    let now = s.m.wants_data();
    if s.announced == 0 && now > 0 {
        gate.expect(*s.peer.ip(), now, s.m.pd());
    } else if s.announced > 0
        && now == 0
        && !s.m.in_window()
        && s.m.data_qps().len() < usize::from(s.m.params().qps)
    {
        gate.expect(*s.peer.ip(), 0, None);
    }
    s.announced = now;
}

#[cfg(test)]
mod tests {
    use super::*;
    use rnic_engine::verbs::RnicConfig;

    fn write_bw() -> Params {
        Params {
            test: Test::WriteBw,
            client: false,
            size: 65536,
            iters: 100,
            tx_depth: 128,
            rx_depth: 1,
            out_reads: 1,
            all_sizes: false,
            duration: None,
            qps: 2,
            duplex: false,
        }
    }

    fn request() -> Request {
        Request {
            revision: 2,
            crc: false,
            markers: false,
            enhanced: None,
            private_data: Vec::new(),
        }
    }

    fn peer(ip: u8, port: u16) -> SocketAddrV4 {
        SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, ip), port)
    }

    fn accepted(gate: &Gate, from: SocketAddrV4) -> bool {
        matches!(gate.decide(&request(), from), Decision::Accept(_))
    }

    /// Each session's control connection gets a PD of its own, its data
    /// connections the same one, another client's another; a connection
    /// the gate did not accept gets none, nor one past the gate's share of
    /// PDs; a retired PD goes back once nothing holds it.
    #[test]
    fn each_session_has_a_pd_its_data_connections_share() {
        let registry = Registry::new(&RnicConfig {
            pds_max: 3,
            ..RnicConfig::default()
        });
        let gate = Gate::isolating(
            Gate::new(write_bw(), false, "--unfenced", false),
            registry.clone(),
            2,
        );
        assert!(gate.isolates());
        // Two clients' control connections, from two hosts.
        assert!(accepted(&gate, peer(1, 1000)));
        assert!(accepted(&gate, peer(2, 1000)));
        let PdChoice::In(a) = gate.pd_for(peer(1, 1000)) else {
            panic!("no PD for a session")
        };
        let PdChoice::In(b) = gate.pd_for(peer(2, 1000)) else {
            panic!("no PD for a session")
        };
        assert_ne!(a, b, "two sessions share a PD");
        // Asked again (the same connection), the same answer.
        assert_eq!(gate.pd_for(peer(1, 1000)), PdChoice::In(a));
        assert_eq!(gate.held(), 2);
        // Nothing accepted from there: no PD, reset.
        assert_eq!(gate.pd_for(peer(3, 1000)), PdChoice::Refuse);
        // The core takes the first session's: the PD is its session's now.
        assert_eq!(
            gate.take_kind(peer(1, 1000)),
            Some((Kind::Control, Some(a)))
        );
        // The session waits for its two data connections: they join its
        // PD, not a new one.
        gate.expect(*peer(1, 0).ip(), 2, Some(a));
        for port in [1001, 1002] {
            assert!(accepted(&gate, peer(1, port)));
            assert_eq!(gate.pd_for(peer(1, port)), PdChoice::In(a));
            assert_eq!(gate.take_kind(peer(1, port)), Some((Kind::Data, Some(a))));
        }
        assert_eq!(gate.held(), 2);
        // A session that gave up on its data connections: one accepted
        // before it did finds no PD and is reset.
        gate.expect(*peer(2, 0).ip(), 1, Some(b));
        assert!(accepted(&gate, peer(2, 1001)));
        gate.expect(*peer(2, 0).ip(), 0, None);
        assert_eq!(gate.pd_for(peer(2, 1001)), PdChoice::Refuse);
        // A session that took both its data connections, the second
        // reaching its core only after another client's connection was
        // decided (the gate then forgets the address whose count is 0):
        // it still joins its session's PD.
        gate.expect(*peer(2, 0).ip(), 2, Some(b));
        assert!(accepted(&gate, peer(2, 1002)));
        assert!(accepted(&gate, peer(2, 1003)));
        assert!(accepted(&gate, peer(6, 1000)), "another client's");
        assert_eq!(gate.pd_for(peer(2, 1003)), PdChoice::In(b));
        assert_eq!(gate.pd_for(peer(2, 1002)), PdChoice::In(b));
        assert_eq!(gate.take_kind(peer(6, 1000)), Some((Kind::Control, None)));
        // Its share (2) held: a new session is reset though the host has
        // a PD left.
        assert!(accepted(&gate, peer(4, 1000)));
        assert_eq!(gate.pd_for(peer(4, 1000)), PdChoice::Refuse);
        let spare = registry.alloc_pd().expect("the host's last PD");
        registry.dealloc_pd(spare).unwrap();
        // Retired while held (an STag of the session still in it): kept,
        // and counted, then freed once it is empty.
        let mr = registry
            .reg_mr(
                a,
                rnic_engine::mem::Region::new(4096),
                0,
                4096,
                0,
                rnic_engine::mem::Access::LOCAL_WRITE,
            )
            .unwrap();
        gate.retire(a);
        assert_eq!((gate.retired(), gate.held()), (1, 2));
        gate.sweep();
        assert_eq!(gate.retired(), 1);
        registry.dereg_mr(mr.stag).unwrap();
        gate.sweep();
        assert_eq!((gate.retired(), gate.held()), (0, 1));
        // Below its share again: a new session gets a PD.
        assert!(accepted(&gate, peer(5, 1000)));
        assert!(matches!(gate.pd_for(peer(5, 1000)), PdChoice::In(_)));
        assert_eq!(gate.held(), 2);
        // The second session ended before a data connection accepted for
        // it reached its core: retiring its PD forgets that connection,
        // which is reset (the PD may be handed out again before it
        // arrives).
        gate.expect(*peer(2, 0).ip(), 1, Some(b));
        assert!(accepted(&gate, peer(2, 1004)));
        gate.retire(b);
        assert_eq!(gate.pd_for(peer(2, 1004)), PdChoice::Refuse);
    }

    /// Connections whose startups never reach a core (reset after their
    /// Request) leave their decisions for `KIND_KEPT`: the gate sweeps
    /// them at most every `SWEEP_EVERY`, not on every accept (found by a
    /// review: each accept walked them all), and keeps at most
    /// `KINDS_MAX`, refusing a new client's connection beyond.
    #[test]
    fn decisions_for_startups_that_never_arrive_are_bounded_and_swept_rarely() {
        let gate = Gate::new(write_bw(), false, "--unfenced", false);
        let start = Instant::now();
        let mut refused = 0;
        for k in 0..=KINDS_MAX {
            let from = SocketAddrV4::new(Ipv4Addr::from(0x0a00_0000 + k as u32), 4000);
            if !accepted(&gate, from) {
                refused += 1;
            }
        }
        assert_eq!(refused, 1, "the one beyond KINDS_MAX");
        let sweeps = gate.sweeps();
        // One for the refusal, and at most one a second besides.
        assert!(
            sweeps <= start.elapsed().as_secs() + 2,
            "{sweeps} sweeps in {:?}",
            start.elapsed()
        );
        let Decision::Reject(why) = gate.decide(&request(), peer(9, 9)) else {
            panic!("accepted beyond KINDS_MAX");
        };
        assert!(String::from_utf8_lossy(&why).contains("too many connections starting"));
        // One reaching its core makes room.
        let first = SocketAddrV4::new(Ipv4Addr::from(0x0a00_0000), 4000);
        assert_eq!(gate.take_kind(first), Some((Kind::Control, None)));
        assert!(accepted(&gate, peer(9, 9)));
    }

    fn marked(data: bool) -> Request {
        Request {
            private_data: if data { DATA_MARK } else { CONTROL_MARK }.to_vec(),
            ..request()
        }
    }

    fn decided(gate: &Gate, request: &Request, from: SocketAddrV4) -> bool {
        matches!(gate.decide(request, from), Decision::Accept(_))
    }

    /// Connections that say what they are (dpwarp's client) are taken at
    /// their word: a new client's control connection from a host whose
    /// session waits for data connections starts a session and takes none
    /// of that session's count, even while that host's data connections
    /// are refused; a data connection no session waits for is refused, not
    /// served as a new client. Connections that do not say (perftest's)
    /// are told apart by what their host's sessions wait for, as before.
    #[test]
    fn connections_that_say_what_they_are_are_taken_at_their_word() {
        let gate = Gate::new(write_bw(), false, "--unfenced", false);
        let host = *peer(1, 0).ip();
        assert!(decided(&gate, &marked(false), peer(1, 1000)));
        assert_eq!(gate.take_kind(peer(1, 1000)), Some((Kind::Control, None)));
        // Its session waits for two data connections; another client on
        // the same host comes meanwhile, in the middle of them.
        gate.expect(host, 2, None);
        assert!(decided(&gate, &marked(true), peer(1, 1001)));
        assert!(decided(&gate, &marked(false), peer(1, 2000)));
        assert!(decided(&gate, &marked(true), peer(1, 1002)));
        assert_eq!(gate.take_kind(peer(1, 1001)), Some((Kind::Data, None)));
        assert_eq!(gate.take_kind(peer(1, 2000)), Some((Kind::Control, None)));
        assert_eq!(gate.take_kind(peer(1, 1002)), Some((Kind::Data, None)));
        // Both came: a third data connection is no one's.
        let Decision::Reject(why) = gate.decide(&marked(true), peer(1, 1003)) else {
            panic!("a data connection no session waits for was accepted")
        };
        assert!(String::from_utf8_lossy(&why).contains("waits for a data connection"));
        assert_eq!(gate.take_kind(peer(1, 1003)), None);
        // perftest's client, which does not say: the same arrival order
        // takes the second client's control connection for a data
        // connection (the case the marks close).
        gate.expect(host, 2, None);
        assert!(accepted(&gate, peer(1, 1004)));
        assert!(accepted(&gate, peer(1, 2001)));
        assert_eq!(gate.take_kind(peer(1, 2001)), Some((Kind::Data, None)));
        // A host whose data connection was refused (write_lat without an
        // RTR): its retries are refused, a new client's control connection
        // that says so is not.
        let lat = Gate::new(
            Params {
                test: Test::WriteLat,
                ..write_bw()
            },
            false,
            "--unfenced",
            false,
        );
        assert!(decided(&lat, &marked(false), peer(2, 1000)));
        lat.expect(*peer(2, 0).ip(), 1, None);
        assert!(!decided(&lat, &marked(true), peer(2, 1001)));
        assert!(!decided(&lat, &marked(true), peer(2, 1002)), "a retry");
        assert!(!accepted(&lat, peer(2, 1003)), "a retry that does not say");
        assert!(decided(&lat, &marked(false), peer(2, 3000)));
        assert_eq!(lat.take_kind(peer(2, 3000)), Some((Kind::Control, None)));
        // One client at a time (`bench perftest`'s server): a second
        // client from the same host that says so is refused, as one from
        // another host is, not reset later for want of a slot.
        let one = Gate::new(write_bw(), false, "--unfenced", true);
        assert!(decided(&one, &marked(false), peer(3, 1000)));
        one.expect(*peer(3, 0).ip(), 1, None);
        assert!(decided(&one, &marked(true), peer(3, 1001)));
        let Decision::Reject(why) = one.decide(&marked(false), peer(3, 2000)) else {
            panic!("a second client accepted by a one-client server")
        };
        assert!(String::from_utf8_lossy(&why).contains("one client at a time"));
        assert!(!decided(&one, &marked(false), peer(4, 1000)));
    }

    /// One client at a time: a client whose accepted connection came to no
    /// session (reset before its handoff, no QP) frees the server for the
    /// next (it refused every other host for good: found by a review); a
    /// release for another host changes nothing.
    #[test]
    fn a_one_client_gate_is_freed_when_its_client_came_to_nothing() {
        let one = Gate::new(write_bw(), false, "--unfenced", true);
        assert!(decided(&one, &marked(false), peer(3, 1000)));
        assert!(!decided(&one, &marked(false), peer(4, 1000)));
        one.release_single(*peer(4, 0).ip());
        assert!(
            !decided(&one, &marked(false), peer(4, 1001)),
            "not 4's to free"
        );
        one.release_single(*peer(3, 0).ip());
        assert!(decided(&one, &marked(false), peer(4, 1002)));
    }

    #[test]
    fn slots_are_taken_once_and_given_back_once() {
        let slots = Slots::new(2);
        let host = *peer(1, 0).ip();
        let (a, b) = (slots.take(host).unwrap(), slots.take(host).unwrap());
        assert_ne!(a, b);
        assert_eq!(
            slots.take(host),
            Err(NoSlot::All(2)),
            "two slots, two sessions"
        );
        assert_eq!(slots.take(*peer(2, 0).ip()), Err(NoSlot::All(2)));
        assert_eq!(slots.taken(), 2);
        slots.give(a);
        assert_eq!(slots.taken(), 1);
        assert_eq!(slots.take(host), Ok(a), "the one given back serves again");
        slots.give(b);
        slots.give(a);
        assert_eq!(slots.taken(), 0);
    }

    /// One host holds at most `per_host` slots: its next client is refused
    /// (by the gate with the reason, by the slots if it came past the gate
    /// meanwhile) while other hosts still get theirs, and a slot it gives
    /// back lets its next client in.
    #[test]
    fn one_host_holds_at_most_its_share_of_the_slots() {
        let slots = Slots::capped(4, 2);
        let (one, two) = (*peer(1, 0).ip(), *peer(2, 0).ip());
        let a = slots.take(one).unwrap();
        let _b = slots.take(one).unwrap();
        assert!(slots.host_full(one));
        assert_eq!(slots.take(one), Err(NoSlot::Host(2)));
        assert!(!slots.host_full(two));
        slots.take(two).unwrap();
        let gate = Gate::limited_by(
            Gate::new(write_bw(), false, "--unfenced", false),
            slots.clone(),
        );
        let Decision::Reject(why) = gate.decide(&marked(false), peer(1, 3000)) else {
            panic!("a host holding its share was let start a third session")
        };
        let why = String::from_utf8_lossy(&why);
        assert!(why.contains("2 sessions already"), "{why}");
        assert_eq!(gate.take_kind(peer(1, 3000)), None);
        assert!(
            decided(&gate, &marked(false), peer(2, 3000)),
            "another host's"
        );
        slots.give(a);
        assert!(!slots.host_full(one));
        assert!(decided(&gate, &marked(false), peer(1, 3001)));
        assert_eq!(slots.take(one).map(|s| s == a), Ok(true));
        // A host holding none is not kept; the cap never exceeds the slots.
        assert_eq!(Slots::capped(2, 9).per_host(), 2);
        assert_eq!(Slots::capped(2, 0).per_host(), 1);
    }

    /// Without a registry (`bench perftest`'s one client) nothing changes:
    /// every QP in the core's PD.
    #[test]
    fn a_gate_without_pds_leaves_qps_in_the_cores_pd() {
        let gate = Gate::new(write_bw(), false, "--unfenced", true);
        assert!(!gate.isolates());
        assert!(accepted(&gate, peer(1, 1000)));
        assert_eq!(gate.pd_for(peer(1, 1000)), PdChoice::Default);
        assert_eq!(gate.take_kind(peer(1, 1000)), Some((Kind::Control, None)));
    }
}
