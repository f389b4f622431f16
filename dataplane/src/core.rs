//! [`Core`]: the poll-mode core's turn, the one loop that moves an RNIC's
//! octets between TCP and the engine (STYLE.md §5: "The lcore loop runs rx
//! burst, handle, poll_transmit, tx burst, then timers, and every step is
//! bounded").
//!
//! One turn, given the time (read once by the caller):
//!
//! 1. **rx burst and TCP**: the transport polls its device (a DPDK queue's
//!    receive burst, the in-memory link, a TAP fd, or kernel sockets) and
//!    runs TCP's timers; a segment that arrives in order for a connection
//!    in Full Operation whose receive buffer is empty goes to the engine at
//!    once, straight from the frame ([`CoreConfig::direct_receive`]);
//! 2. **events**: connections accepted, connected, readable, closed; those in
//!    MPA startup are the control plane's ([`CoreLink`]), the others ours;
//! 3. **the control link**: octets of startups to and from the
//!    control-plane thread, and handoffs of connections that reached Full
//!    Operation;
//! 4. **each connection in Full Operation** (urgent ones first, see
//!    [`Core::set_urgent`]): what TCP holds in its buffer goes to the
//!    engine (`handle_stream`, reading the buffer in place),
//!    then the engine's FPDUs go straight into TCP's transmit ring
//!    (`poll_transmit`, each FPDU sized by `segment_room` so it starts a TCP
//!    segment: RFC 5044 §5), and an orderly close once the peer's octets
//!    are in or a Terminate went either way (RFC 5040 §6.4.1); every
//!    [`Budgets::looks_per_poll`] connections, TCP is polled and the
//!    device flushed, so that the port keeps moving through a long turn;
//! 5. **new QPs** for the handoffs (they take octets from the next turn
//!    on, so the application sees the handoff first and can post receives);
//! 6. **tx burst**: the transport polls again to send what was queued, and
//!    the device flushes its staged frames.
//!
//! Every step has a named budget ([`Budgets`]); nothing in a turn allocates
//! once connections are set up (the core's queues are sized at start), as
//! long as the application takes the completions, handoffs and events the
//! core keeps for it (those queues grow while it does not; what it keeps of
//! a CQ, no further than the CQ's capacity: `CoreCounters::completions_lost`).
//! The core is generic over tcp-lite's [`Transport`](tcp_lite::Transport), so the in-memory
//! link, kernel TCP, the TAP fd and DPDK ports all run through it.

use std::collections::VecDeque;
use std::net::SocketAddrV4;

use control::runtime::{CoreLink, Handoff, StartupResult};
use rnic_engine::cq::{Wc, WcOpcode, WcStatus};
use rnic_engine::mem::Pd;
use rnic_engine::qp::{OpStats, QpEvent, QpState};
use rnic_engine::verbs::{CqHandle, QpHandle, QpInit, Rnic, VerbError};
use rnic_engine::wire::term::Encoding;
use tcp_lite::{ConnId, Duration, EventKind, Instant};

use crate::transport::{CoreTransport, Segmenting};
use crate::DeviceCounters;

/// How much one turn may do (STYLE.md §5: every loop has a bound).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budgets {
    /// Transport events handled per turn; the rest wait for the next.
    pub events: usize,
    /// Reads from one connection per turn (each takes what the transport
    /// holds contiguously): a peer that keeps sending must not keep the
    /// core from its other connections and its timers.
    pub rx_reads: usize,
    /// Calls of the engine's transmit per connection per turn: each fills
    /// the contiguous transmit space, or stops at a segment the next FPDU
    /// does not fit (TCP then sends that segment short before the next).
    pub tx_fills: usize,
    /// Handoffs of the control plane turned into QPs per turn.
    pub handoffs: usize,
    /// Times per turn TCP is polled between two fills of one connection (so
    /// that the peer works on one chunk while the engine makes the next):
    /// a poll of TCP visits every connection with something to send (each
    /// one a segment per round), so with many busy connections these polls
    /// are bounded per turn, not per connection; past the budget each
    /// connection fills what TCP has room for and the rest waits for the
    /// next turn.
    pub tx_polls: usize,
    /// Octets the engine writes into TCP per fill before TCP sends them:
    /// small enough that the peer works on one chunk while the engine
    /// makes the next (a whole ring per fill left the two cores taking
    /// turns), large enough to amortise a poll of TCP.
    pub tx_chunk: usize,
    /// Connections a turn looks at between two polls of TCP and flushes
    /// of the device (a receive burst and a transmit burst). A turn looks
    /// at every connection that needs it, so with many busy ones it grows
    /// long, and without polls between looks the port waited for the whole
    /// turn: with 1,024 QPs each keeping 8 64 KiB Writes in flight over
    /// memif, turns of 1.8 ms on the sending core and 2.9 ms on the
    /// receiving one left acknowledgements and segments in full rings, and
    /// each core waited for the other (up to 2.9 million refused transmit
    /// bursts in 3 s on a side). Polling every 8 looks took those 1,024
    /// QPs from 9.5-12.3 to 13.0-15.5 Gbit/s (seven runs each, in turn; the
    /// README's "Many cores"). Ending the turn after 8 looks instead moved
    /// as many octets but, in two runs, made a plain QP beside 255 busy
    /// ones wait longer (p50 0.8-1.2 ms against 0.6): woken behind the
    /// others, it waited for many short turns. Nothing changes for up to
    /// this many busy connections.
    pub looks_per_poll: usize,
    /// Connections other than the urgent ones looked at per turn while an
    /// urgent connection lives ([`Core::set_urgent`]): the turn an urgent
    /// connection waits for is this many connections long. A larger budget
    /// gives the others more of the core and the urgent connection longer
    /// waits: over memif, beside 255 QPs each keeping 8 64 B Writes in
    /// flight, a first version measured an urgent ping-pong's p99 at 1.3x,
    /// 2.3x, 3.5x and 12x of one alone with budgets of 1, 2, 4 and 16, the
    /// busy QPs keeping 25%, 48%, 68% and 90% of their rate. 1 by default:
    /// a QP asks to be urgent for its latency (the README's "Many cores").
    pub beside_urgent: usize,
}

impl Default for Budgets {
    fn default() -> Budgets {
        Budgets {
            events: 1024,
            rx_reads: 64,
            tx_fills: 16,
            handoffs: 64,
            tx_polls: 16,
            tx_chunk: 64 * 1024,
            looks_per_poll: 8,
            beside_urgent: 1,
        }
    }
}

/// How a core runs its connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoreConfig {
    /// TCP's effective MSS on this core's transport: FPDUs are sized for it.
    pub emss: usize,
    /// Segment-sized FPDUs: ask the transport where TCP cuts segments and
    /// start every FPDU at one (RFC 5044 §5). Off: FPDUs are EMSS-sized and
    /// packed back to back (for transports that do not say, kernel TCP).
    pub segmenting: Segmenting,
    /// The longest ULPDU this side accepts.
    pub ulpdu_max: usize,
    /// Connections in Full Operation at once; a handoff beyond it is
    /// refused (its connection reset).
    pub connections_max: usize,
    /// How long a connection may stay after our FIN before it is reset
    /// ([`CLOSING_LIMIT`] by default).
    pub closing_limit: std::time::Duration,
    /// How long an initiator waits after the MPA Reply before its first
    /// FPDU (0 by default). Linux siw (6.1) sends its Reply before it hands
    /// the socket to its receive path, and an FPDU that lands in between
    /// is not read until another segment arrives.
    pub settle: Duration,
    /// The layout of the Terminates our QPs send.
    pub terminate_layout: Encoding,
    /// Responder: send FPDUs before the initiator's first one arrived, as
    /// Linux siw does (off by default: RFC 5044 §7.1's MPA fencing).
    pub unfenced: bool,
    /// [`CoreConfig::unfenced`] for the connections to these local ports
    /// only (a service whose passive side sends first, beside others).
    pub unfenced_ports: Vec<u16>,
    /// Connections to these local ports are urgent from their start
    /// ([`Core::set_urgent`]): a latency-sensitive service beside bulk
    /// ones, as a hardware RNIC's priority queue serves a connection whose
    /// class asked for it.
    pub urgent_ports: Vec<u16>,
    /// The DSCP an urgent connection's segments carry (RFC 2474, 0 to 63;
    /// 46 by default, Expedited Forwarding, RFC 3246: the class switches
    /// queue first), so that the network serves them first too; 0 (or a
    /// value past six bits) leaves them unmarked. A transport that cannot
    /// mark (the default of `Transport::set_dscp`) leaves them as they
    /// are. Networks often police EF to a low rate: a bulk connection
    /// made urgent may want 0 or another class.
    pub urgent_dscp: u8,
    /// Take each accepted connection's class from its peer's SYN (off by
    /// default): where the transport can (`Transport::reflect_dscp`: a
    /// tcp-lite stack does, Linux TCP where Linux itself reflects,
    /// `net.ipv4.tcp_reflect_tos = 1`), the connection's segments
    /// carry the DSCP the SYN did from the SYN-ACK on, and once
    /// established it is urgent ([`Core::set_urgent`]) if that is
    /// [`CoreConfig::urgent_dscp`], as a hardware iWARP RNIC's passive
    /// side takes the TOS of the SYN and Linux does with
    /// `net.ipv4.tcp_reflect_tos`. A peer so chooses its own precedence on
    /// this core: for peers trusted with it. Active opens keep the class
    /// they were opened with (`control::runtime::ControlPlane::connect_marked`)
    /// either way; a connection's class is what it goes back to when it is
    /// no longer urgent.
    pub reflect_dscp: bool,
    /// Budgets of a turn.
    pub budgets: Budgets,
    /// Turns between two looks at the mbuf pool's free count (it sums every
    /// lcore's cache: not a per-turn cost).
    pub pool_sample_turns: u32,
    /// The engine takes a connection's FPDUs straight from the received
    /// frames while TCP polls, where TCP's receive buffer is empty (the
    /// transport's [`poll_direct`](tcp_lite::Transport::poll_direct); on by
    /// default): each octet is copied once, from the frame into registered
    /// memory, instead of into TCP's buffer and out again, and the buffer
    /// stays out of the cache. What TCP holds (out of order, or before the
    /// QP existed) is read from its buffer as before. Off: every octet goes
    /// through TCP's buffer.
    pub direct_receive: bool,
}

impl CoreConfig {
    /// Defaults for an EMSS of `emss`.
    pub fn new(emss: usize) -> CoreConfig {
        CoreConfig {
            emss,
            segmenting: Segmenting::Transport,
            ulpdu_max: 65535,
            connections_max: 1024,
            settle: Duration::ZERO,
            terminate_layout: Encoding::Rfc5040,
            unfenced: false,
            unfenced_ports: Vec::new(),
            urgent_ports: Vec::new(),
            urgent_dscp: 46,
            reflect_dscp: false,
            budgets: Budgets::default(),
            pool_sample_turns: 1024,
            direct_receive: true,
            closing_limit: CLOSING_LIMIT,
        }
    }
}

/// Traffic by RDMAP opcode, by our TCP port: a short list (a port per
/// service).
#[derive(Debug, Default)]
struct PortOps(Vec<(u16, OpStats)>);

impl PortOps {
    fn add(&mut self, port: u16, stats: &OpStats) {
        match self.0.iter_mut().find(|(p, _)| *p == port) {
            Some((_, s)) => s.add(stats),
            None => self.0.push((port, *stats)),
        }
    }
}

/// Counters of a core.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CoreCounters {
    /// Turns run.
    pub turns: u64,
    /// Turns that moved something (a packet, an event, an octet).
    pub busy_turns: u64,
    /// Turns that found nothing to do.
    pub idle_turns: u64,
    /// Microseconds from the start of a busy turn to the start of the
    /// next turn (the clock each turn is given), summed: time spent working.
    pub busy_us: u64,
    /// The same for idle turns: time spent polling for nothing.
    pub idle_us: u64,
    /// FPDU octets the engine wrote into TCP.
    pub tx_fpdu_octets: u64,
    /// FPDU octets TCP handed to the engine.
    pub rx_fpdu_octets: u64,
    /// Of those, the octets the engine took straight from received frames
    /// ([`CoreConfig::direct_receive`]), never in TCP's buffer.
    pub rx_direct_octets: u64,
    /// Connections that reached Full Operation with a QP.
    pub established: u64,
    /// Connections in Full Operation that ended.
    pub ended: u64,
    /// Handoffs refused for want of a QP or of room (connection reset).
    pub refused: u64,
    /// Connections reset because their peer had not ended them
    /// [`CoreConfig::closing_limit`] after our FIN.
    pub closes_reset: u64,
    /// Connections in Full Operation that ended by the peer's reset (RST)
    /// or by TCP's user timeout, not by an orderly close: a peer that
    /// crashed, was killed or became unreachable.
    pub ended_abruptly: u64,
    /// Accepted connections given the class of their peer's SYN
    /// ([`CoreConfig::reflect_dscp`]; unmarked SYNs not counted).
    pub classes_reflected: u64,
    /// Connections in Full Operation the turns looked at: those TCP or the
    /// engine's doorbells named, or left with work from the turn before.
    /// An idle connection adds nothing.
    pub looked_at: u64,
    /// Polls of TCP (and flushes of the device) a turn made between its
    /// looks at connections ([`Budgets::looks_per_poll`]).
    pub polls_between_looks: u64,
    /// Completions lost because the application had not polled: an end
    /// reads its QP's CQs out into the core's keeping, which holds at
    /// most a CQ's capacity of each CQ's completions; past that the
    /// newest are dropped, as a full CQ drops them, and the CQ says so as
    /// a full one does (`Cq::overflowed`; an ibverbs CQ overflows, it does
    /// not grow).
    pub completions_lost: u64,
    /// Turns run while an urgent connection lived ([`Core::set_urgent`]).
    pub turns_beside_urgent: u64,
    /// Connections other than the urgent ones those turns looked at (at
    /// most [`Budgets::beside_urgent`] a turn).
    pub looked_at_beside_urgent: u64,
    /// The device's counters (packets, drops, the mbuf pool's low water),
    /// where the transport has a device that counts.
    pub device: DeviceCounters,
}

impl CoreCounters {
    /// What was counted since `earlier`.
    pub fn since(&self, earlier: &CoreCounters) -> CoreCounters {
        CoreCounters {
            turns: self.turns - earlier.turns,
            busy_turns: self.busy_turns - earlier.busy_turns,
            idle_turns: self.idle_turns - earlier.idle_turns,
            busy_us: self.busy_us - earlier.busy_us,
            idle_us: self.idle_us - earlier.idle_us,
            tx_fpdu_octets: self.tx_fpdu_octets - earlier.tx_fpdu_octets,
            rx_fpdu_octets: self.rx_fpdu_octets - earlier.rx_fpdu_octets,
            rx_direct_octets: self.rx_direct_octets - earlier.rx_direct_octets,
            established: self.established - earlier.established,
            ended: self.ended - earlier.ended,
            refused: self.refused - earlier.refused,
            closes_reset: self.closes_reset - earlier.closes_reset,
            ended_abruptly: self.ended_abruptly - earlier.ended_abruptly,
            classes_reflected: self.classes_reflected - earlier.classes_reflected,
            looked_at: self.looked_at - earlier.looked_at,
            polls_between_looks: self.polls_between_looks - earlier.polls_between_looks,
            completions_lost: self.completions_lost - earlier.completions_lost,
            turns_beside_urgent: self.turns_beside_urgent - earlier.turns_beside_urgent,
            looked_at_beside_urgent: self.looked_at_beside_urgent - earlier.looked_at_beside_urgent,
            device: self.device.since(&earlier.device),
        }
    }
}

/// What a [`Places`] map is keyed by: a handle with a small index of its
/// own (a QP's, a connection slot's).
trait Keyed: Copy + Eq {
    fn index(self) -> usize;
}

impl Keyed for QpHandle {
    fn index(self) -> usize {
        QpHandle::index(self)
    }
}

impl Keyed for ConnId {
    fn index(self) -> usize {
        ConnId::index(self)
    }
}

/// Where each live connection is in `Core::live`, by its QP or its
/// connection: an array by the key's index (a lookup per connection looked
/// at in a turn is a load, not a hash). It grows only for an index beyond
/// the capacity it was made with.
struct Places<K> {
    at: Vec<Option<(K, usize)>>,
}

impl<K: Keyed> Places<K> {
    fn with_capacity(n: usize) -> Places<K> {
        Places { at: vec![None; n] }
    }

    fn get(&self, key: &K) -> Option<&usize> {
        match self.at.get(key.index()) {
            Some(Some((k, at))) if k == key => Some(at),
            _ => None,
        }
    }

    fn contains_key(&self, key: &K) -> bool {
        self.get(key).is_some()
    }

    fn insert(&mut self, key: K, at: usize) {
        let i = key.index();
        if i >= self.at.len() {
            self.at.resize(i + 1, None);
        }
        self.at[i] = Some((key, at));
    }

    fn remove(&mut self, key: &K) {
        if self.get(key).is_some() {
            self.at[key.index()] = None;
        }
    }
}

/// Whether `limit` has passed from `at` to `now`.
fn past(limit: std::time::Duration, at: Instant, now: Instant) -> bool {
    let waited = now.total_micros().saturating_sub(at.total_micros());
    u128::try_from(waited).is_ok_and(|t| t >= limit.as_micros())
}

/// How long a connection may stay after our FIN before it is reset: its
/// peer's FIN (or the ACK of ours, after its FIN) is that late. A peer
/// that acknowledges our FIN and never sends its own, trickling octets
/// that keep TCP's user timeout away, must not keep the QP and the
/// connection for ever; an honest one answers in a round trip or a
/// moment of its application's (a slow guest's siw included). Counted
/// from when the FIN was queued, behind what TCP still had to send (up to
/// its send buffer, 4 MiB on the real transports): the default, TCP's
/// user timeout, leaves that tail room to go to a slow peer.
pub const CLOSING_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

/// A connection in Full Operation and its QP.
#[derive(Debug, Clone, Copy)]
struct Live {
    conn: ConnId,
    qp: QpHandle,
    /// The peer sent FIN; we close once its octets are read.
    peer_closed: bool,
    /// We sent FIN.
    closing: bool,
    /// The application asked to close.
    close_wanted: bool,
    /// The first look at which a close was due (asked, or the peer's
    /// octets all read after its FIN): FIN goes once the QP has nothing
    /// left to send, or [`control::runtime::DRAIN_LIMIT`] later whatever
    /// is left.
    close_from: Option<Instant>,
    /// No FPDU leaves before this (see [`CoreConfig::settle`]).
    hold_until: Instant,
    /// TCP said octets arrived (Readable) that the engine has not read to
    /// the end: a turn reads only such connections.
    rx_ready: bool,
    /// Octets the engine took from the connection so far.
    rx_octets: u64,
    /// The transport's stream position of the engine's first octet.
    rx_base: Option<u64>,
    /// Octets the engine took straight from frames while TCP polled
    /// ([`CoreConfig::direct_receive`]) since the connection was last
    /// looked at.
    rx_direct: u64,
    /// The turn (`CoreCounters::turns` then) whose handoffs made the QP:
    /// octets go to it straight from frames from the next turn on, once
    /// the application has seen the handoff (and posted its receives).
    born: u64,
    /// In the queue of connections the next turn looks at.
    active: bool,
    /// Our TCP port of it (by which an operator's counters group QPs).
    local_port: u16,
    /// Looked at before the others, its segments sent before theirs
    /// ([`Core::set_urgent`]).
    urgent: bool,
    /// Its class: the DSCP it was opened with, or its SYN's where the core
    /// reflects it; what its segments carry when it is not urgent.
    class: u8,
}

impl Live {
    /// The engine took `n` octets at stream position `position`, from
    /// TCP's buffer or straight from a frame. Pair assertion: it reads the
    /// stream once, in order, from where the startup left it.
    fn took(&mut self, position: u64, n: usize) {
        let base = *self.rx_base.get_or_insert(position);
        assert_eq!(
            position,
            base + self.rx_octets,
            "the transport skipped or repeated stream octets"
        );
        self.rx_octets += n as u64;
    }
}

/// The protection domain a connection's QP is made in, as the chooser
/// given to [`Core::set_pd_for`] decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PdChoice {
    /// The core's own (its `qp_init`'s).
    Default,
    /// This one: a client's own, in which only what it may reach is
    /// registered, so that an STag registered for another (guessed, or
    /// learnt) draws a Terminate on its QP: "STag not associated with
    /// the stream" (RFC 5040's DDP and RDMAP error codes), the engine's
    /// check that an STag's PD is the QP's.
    In(Pd),
    /// None: the connection is reset, counted as refused.
    Refuse,
}

/// Chooses a [`PdChoice`] by a connection's local and peer addresses and
/// the token of the ULP's accept of its startup (`Handoff::ulp_token` of
/// `control::runtime`; 0 for active opens and accepts that named none).
pub type PdFor = Box<dyn FnMut(SocketAddrV4, SocketAddrV4, u64) -> PdChoice + Send>;

/// One poll-mode core: a transport, its link to the control plane, an RNIC
/// engine, and the QPs of the connections it owns.
pub struct Core<T: CoreTransport> {
    config: CoreConfig,
    transport: T,
    link: CoreLink,
    rnic: Rnic,
    /// What each new QP is made from.
    qp_init: QpInit,
    /// Which PD each new QP joins ([`Core::set_pd_for`]); `qp_init`'s
    /// without one.
    pd_for: Option<PdFor>,
    /// What the transport was last told of [`CoreConfig::reflect_dscp`]
    /// (`Transport::reflect_dscp`), which [`Core::config_mut`] may change.
    learning_dscp: bool,
    live: Vec<Live>,
    /// Where each live connection is in `live`, by connection and by QP.
    by_conn: Places<ConnId>,
    by_qp: Places<QpHandle>,
    /// The connections the next turn looks at, by QP: those with octets
    /// to read (TCP said Readable), whose engine may transmit (work posted:
    /// the engine's doorbells; or left from the last turn), held back,
    /// closing, or with events. A turn walks these, not every connection,
    /// so an idle connection costs a turn nothing; each looked at goes to
    /// the back if it still needs looking at, so that no connection always
    /// comes last to a full link.
    active: VecDeque<QpHandle>,
    /// The urgent connections among those ([`Core::set_urgent`]), looked at
    /// before the others.
    urgent_active: VecDeque<QpHandle>,
    /// Live connections that are urgent.
    urgent_live: usize,
    /// The last turn left the others for the next.
    yielded: bool,
    /// Scratch for the engine's doorbells.
    doorbells: Vec<QpHandle>,
    /// Scratch: the connections the engine took octets of while TCP polled.
    fed: Vec<usize>,
    /// Intermediate polls of TCP left this turn ([`Budgets::tx_polls`]).
    polls_left: usize,
    /// Rejected connections we are closing (MPA left them to us), and
    /// when: one whose peer has not closed its side
    /// [`control::runtime::DRAIN_LIMIT`] later is reset.
    closing_raw: Vec<(ConnId, Instant)>,
    /// Live connections we sent FIN on, and when: one the peer has not
    /// ended [`CoreConfig::closing_limit`] later is reset.
    closing_live: Vec<(QpHandle, Option<Instant>)>,
    /// Ended QPs kept (in Error, their handles given to no new QP) while
    /// `pending` holds completions they made before their end: destroyed
    /// once the application has taken those.
    zombies: VecDeque<QpHandle>,
    /// Ends (Closed, Reset, TimedOut) of connections whose handoffs were
    /// made in the last turn, replayed at the start of this one: the
    /// application sees the handoff (and posts its receives) before the
    /// end, which reads what arrived first.
    deferred_ends: Vec<(ConnId, EventKind)>,
    /// Events of connections whose handoff waits in the link's queue (past
    /// a turn's handoff budget): neither the link's nor ours yet, so they
    /// are kept, each kind once, and replayed once the handoff is taken
    /// (tcp-lite reports an end once: lost, it left the QP and the TCP
    /// slot for good).
    early_events: Vec<(ConnId, EventKind)>,
    /// Startups that ended and were not yet taken, with their QPs.
    handoffs: VecDeque<(Handoff, Option<QpHandle>)>,
    /// QPs whose connection ended (destroyed), not yet taken.
    ended: VecDeque<QpHandle>,
    /// Completions of live QPs read while a QP was torn down, by CQ: at
    /// most a CQ's capacity of each CQ's (`drain_cq`). Only `qp_init`'s
    /// CQs are drained, so only theirs are here; a destroyed CQ's go
    /// (`forget_cq`).
    pending: VecDeque<(CqHandle, Wc)>,
    /// QP events (Terminates sent and received), not yet taken.
    events: VecDeque<(QpHandle, QpEvent)>,
    /// Scratch for draining a CQ.
    wcs: Vec<Wc>,
    counters: CoreCounters,
    /// Ended QPs' traffic by opcode, by our TCP port.
    ended_ops: PortOps,
    /// The last turn's start and whether it was busy, for the time counters.
    last_turn: Option<(Instant, bool)>,
}

impl<T: CoreTransport> Core<T> {
    /// A core on `transport` whose startups run on the control plane behind
    /// `link`, with the engine `rnic`; every QP it makes for an established
    /// connection is made from `qp_init` (the application's PD, CQs and
    /// queue sizes).
    pub fn new(
        config: CoreConfig,
        mut transport: T,
        link: CoreLink,
        rnic: Rnic,
        qp_init: QpInit,
    ) -> Core<T> {
        let n = config.connections_max;
        let learning_dscp = config.reflect_dscp;
        if learning_dscp {
            transport.reflect_dscp(true);
        }
        let wcs = qp_init.sq_size + qp_init.rq_size;
        Core {
            live: Vec::with_capacity(n),
            by_conn: Places::with_capacity(n),
            by_qp: Places::with_capacity(rnic.config().qps_max),
            active: VecDeque::with_capacity(n),
            urgent_active: VecDeque::with_capacity(n),
            urgent_live: 0,
            yielded: false,
            doorbells: Vec::with_capacity(n),
            fed: Vec::with_capacity(n),
            polls_left: 0,
            closing_raw: Vec::with_capacity(n),
            closing_live: Vec::with_capacity(n),
            zombies: VecDeque::new(),
            deferred_ends: Vec::new(),
            early_events: Vec::new(),
            handoffs: VecDeque::with_capacity(config.budgets.handoffs),
            ended: VecDeque::with_capacity(n),
            pending: VecDeque::with_capacity(wcs.clamp(64, 4096)),
            events: VecDeque::with_capacity(n),
            wcs: vec![Wc::EMPTY; wcs.clamp(64, 4096)],
            counters: CoreCounters::default(),
            ended_ops: PortOps::default(),
            last_turn: None,
            config,
            transport,
            link,
            rnic,
            qp_init,
            pd_for: None,
            learning_dscp,
        }
    }

    /// From now on each new connection's QP joins the protection domain
    /// `choose` picks by the connection's local and peer addresses and its
    /// accept's ULP token, which names the service that accepted it (asked
    /// once per connection, when its startup has ended, on this core's
    /// thread): a service that lends each client memory of its own puts
    /// the client's QP and registrations in a PD of the client's. With an
    /// SRQ in `qp_init` only [`PdChoice::Default`] makes a QP (an SRQ
    /// serves QPs of its own PD); another choice is refused.
    pub fn set_pd_for(&mut self, choose: PdFor) {
        self.pd_for = Some(choose);
    }

    /// One turn at time `now` (see the module's docs). Returns whether it
    /// moved anything.
    pub fn turn(&mut self, now: Instant) -> bool {
        // The engine's clock for this turn (its responses' times).
        self.rnic.set_now(now.total_micros().max(0) as u64);
        if self.config.reflect_dscp != self.learning_dscp {
            self.learning_dscp = self.config.reflect_dscp;
            self.transport.reflect_dscp(self.learning_dscp);
        }
        self.forget_destroyed_cqs();
        let mut busy = self.replay_deferred_ends();
        busy |= self.poll_transport(now);
        busy |= self.transport_events();
        self.link.poll(&mut self.transport, now);
        busy |= self.connections(now);
        busy |= self.new_qps(now);
        self.reset_overdue_closes(now);
        // The tx burst: TCP sends what this turn queued. A turn that moved
        // nothing queued nothing (the control link's octets, if any, go at
        // the next turn's first poll), so an idle turn polls TCP once.
        if busy {
            self.poll_transport(now);
        }
        self.transport.flush();
        self.count_turn(now, busy);
        busy
    }

    /// The ends held back from the last turn's handoffs.
    fn replay_deferred_ends(&mut self) -> bool {
        if self.deferred_ends.is_empty() {
            return false;
        }
        let mut ends = std::mem::take(&mut self.deferred_ends);
        for &(conn, kind) in &ends {
            self.connection_event(conn, kind);
        }
        ends.clear();
        self.deferred_ends = ends;
        true
    }

    /// Resets rejected connections whose peers have not closed their side
    /// within [`control::runtime::DRAIN_LIMIT`] of our close: a peer that
    /// never does, trickling octets that keep TCP's user timeout away,
    /// must not keep a connection for ever.
    fn reset_overdue_closes(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.closing_raw.len() {
            let (conn, at) = self.closing_raw[i];
            if past(control::runtime::DRAIN_LIMIT, at, now) {
                self.closing_raw.swap_remove(i);
                let _ = self.transport.abort(conn);
                self.transport.release(conn);
            } else {
                i += 1;
            }
        }
        // Live ones whose peer has not ended them since our FIN (an entry
        // goes when its QP ends, so each names a live QP).
        let mut k = 0;
        while k < self.closing_live.len() {
            let at = *self.closing_live[k].1.get_or_insert(now);
            let qp = self.closing_live[k].0;
            match self.by_qp.get(&qp) {
                Some(&i) if past(self.config.closing_limit, at, now) => {
                    let _ = self.transport.abort(self.live[i].conn);
                    self.counters.closes_reset += 1;
                    // Takes its entry out.
                    self.end(i);
                }
                Some(_) => k += 1,
                None => {
                    self.closing_live.swap_remove(k);
                }
            }
        }
    }

    /// TCP polls its device; with [`CoreConfig::direct_receive`], octets
    /// that would land in an empty receive buffer of a live connection go
    /// to its engine at once, straight from the frame. Returns whether the
    /// poll moved anything.
    fn poll_transport(&mut self, now: Instant) -> bool {
        if !self.config.direct_receive {
            return self.transport.poll(now);
        }
        let Core {
            transport,
            rnic,
            live,
            by_conn,
            fed,
            counters,
            ..
        } = self;
        let turn = counters.turns;
        let mut taken = 0u64;
        let busy = transport.poll_direct(now, &mut |conn, octets, position| {
            let Some(&i) = by_conn.get(&conn) else {
                // In MPA startup (the control plane's), or not ours.
                return 0;
            };
            let l = &mut live[i];
            if l.born == turn {
                return 0;
            }
            let n = rnic.handle_stream(l.qp, octets).unwrap_or(0);
            if n == 0 {
                return 0;
            }
            l.took(position, n);
            if l.rx_direct == 0 {
                fed.push(i);
            }
            l.rx_direct += n as u64;
            taken += n as u64;
            n
        });
        self.counters.rx_fpdu_octets += taken;
        self.counters.rx_direct_octets += taken;
        // Each connection fed gets a look this turn or the next: the
        // engine may have responses to send, completions and events.
        for k in 0..self.fed.len() {
            let i = self.fed[k];
            self.wake(i);
        }
        self.fed.clear();
        busy
    }

    fn count_turn(&mut self, now: Instant, busy: bool) {
        let c = &mut self.counters;
        // The time since the last turn began was that turn's (and the
        // application's, between turns).
        if let Some((then, was_busy)) = self.last_turn {
            let us = (now - then).total_micros();
            if was_busy {
                c.busy_us += us;
            } else {
                c.idle_us += us;
            }
        }
        self.last_turn = Some((now, busy));
        c.turns += 1;
        if busy {
            c.busy_turns += 1;
        } else {
            c.idle_turns += 1;
        }
        let every = u64::from(self.config.pool_sample_turns.max(1));
        if c.turns.is_multiple_of(every) {
            self.transport.sample_pool();
        }
    }

    /// Step 2: events, the control plane's first.
    fn transport_events(&mut self) -> bool {
        let mut busy = false;
        for _ in 0..self.config.budgets.events {
            let Some(event) = self.transport.next_event() else {
                break;
            };
            busy = true;
            if self.link.handle_event(&mut self.transport, event) {
                continue;
            }
            self.connection_event(event.conn, event.kind);
        }
        busy
    }

    /// Queues connection `i` for the next look, if it is not queued (the
    /// urgent connections in a queue of their own, looked at first).
    fn wake(&mut self, i: usize) {
        let live = &mut self.live[i];
        if !live.active {
            live.active = true;
            if live.urgent {
                self.urgent_active.push_back(live.qp);
            } else {
                self.active.push_back(live.qp);
            }
        }
    }

    /// Gives `qp`'s connection precedence over the others on this core, or
    /// takes it back: each turn looks at it first, and TCP sends its
    /// segments before any other connection's (a class of service, as a
    /// hardware RNIC's strict-priority queue: latency-sensitive traffic
    /// beside bulk transfers waits for no other connection's turn). `false`
    /// if `qp` has no connection on this core.
    ///
    /// While an urgent connection lives, a turn looks at no more than
    /// [`Budgets::beside_urgent`] other connections (the rest keep their
    /// places for the next turns), so that the urgent one waits for a short
    /// turn, not for every busy connection's; what the urgent connections
    /// queued goes to the port before the others' work begins; and a turn
    /// in which an urgent connection received octets leaves the others to
    /// the next turn (not two turns running), so that the application sees
    /// them at once. The others' throughput pays for it.
    pub fn set_urgent(&mut self, qp: QpHandle, urgent: bool) -> bool {
        let Some(&i) = self.by_qp.get(&qp) else {
            return false;
        };
        let live = self.live[i];
        if self.transport.set_urgent(live.conn, urgent).is_err() {
            return false;
        }
        // Its class on the wire too (a connection in Full Operation has a
        // peer, so only a transport's own failure is left unmarked); its
        // own again when it is urgent no more. (A value past six bits is
        // no DSCP: nothing is marked.)
        let dscp = if urgent {
            self.config.urgent_dscp
        } else {
            live.class
        };
        if dscp < 64 {
            let _ = self.transport.set_dscp(live.conn, dscp);
        }
        if live.urgent != urgent {
            self.live[i].urgent = urgent;
            if urgent {
                self.urgent_live += 1;
            } else {
                self.urgent_live -= 1;
            }
            // Into the queue of its class, if it is queued.
            if live.active {
                let (from, to) = if urgent {
                    (&mut self.active, &mut self.urgent_active)
                } else {
                    (&mut self.urgent_active, &mut self.active)
                };
                from.retain(|&q| q != qp);
                to.push_back(qp);
            }
        }
        true
    }

    /// Connections on this core that are urgent ([`Core::set_urgent`]).
    pub fn urgent_connections(&self) -> usize {
        self.urgent_live
    }

    /// Step 4: each connection in Full Operation that needs a look (see
    /// `Core::active`), receive then transmit.
    fn connections(&mut self, now: Instant) -> bool {
        let mut busy = false;
        self.polls_left = self.config.budgets.tx_polls;
        self.rnic.take_doorbells(&mut self.doorbells);
        for k in 0..self.doorbells.len() {
            if let Some(&i) = self.by_qp.get(&self.doorbells[k]) {
                self.wake(i);
            }
        }
        self.doorbells.clear();
        // The urgent connections first, each once; then the others, as many
        // as the budget lets while an urgent connection lives (those left
        // keep their places for the next turn).
        let urgent = self.urgent_active.len();
        let others = if self.urgent_live > 0 {
            self.counters.turns_beside_urgent += 1;
            self.active.len().min(self.config.budgets.beside_urgent)
        } else {
            self.active.len()
        };
        let mut urgent_sent = false;
        let mut urgent_got = false;
        let every = self.config.budgets.looks_per_poll.max(1);
        let mut others_looked = 0usize;
        for k in 0..urgent + others {
            // What the urgent connections queued leaves before the others'
            // work begins.
            if k == urgent && urgent_sent {
                self.poll_transport(now);
                self.transport.flush();
            }
            if k == urgent && urgent_got && !self.yielded {
                self.yielded = true;
                break;
            }
            if k == urgent {
                self.yielded = false;
            }
            let queue = if k < urgent {
                &mut self.urgent_active
            } else {
                &mut self.active
            };
            let Some(qp) = queue.pop_front() else {
                continue;
            };
            let Some(&i) = self.by_qp.get(&qp) else {
                continue;
            };
            if !self.live[i].active {
                continue;
            }
            self.live[i].active = false;
            // The port moves while a long turn goes on.
            if k >= urgent {
                if others_looked > 0 && others_looked.is_multiple_of(every) {
                    self.counters.polls_between_looks += 1;
                    self.poll_transport(now);
                    self.transport.flush();
                }
                others_looked += 1;
            }
            self.counters.looked_at += 1;
            if k >= urgent && self.urgent_live > 0 {
                self.counters.looked_at_beside_urgent += 1;
            }
            if self.live[i].rx_ready || self.live[i].rx_direct > 0 {
                let got = self.receive(i) > 0;
                busy |= got;
                urgent_got |= got && k < urgent;
            }
            let live = self.live[i];
            if now >= live.hold_until && self.rnic.may_transmit(live.qp).unwrap_or(false) {
                let sent = self.transmit(live, now) > 0;
                busy |= sent;
                urgent_sent |= sent && k < urgent;
            }
            while let Ok(Some(event)) = self.rnic.poll_event(live.qp) {
                self.events.push_back((live.qp, event));
            }
            // Our side of an orderly close, once the peer's octets are in;
            // or, once a Terminate went either way, the end of the stream
            // (RFC 5040 §6.4.1: the LLP stream is closed after it; ours is
            // queued ahead of the FIN).
            // What the QP still has to send goes before our FIN (a Send
            // posted just before the application's close, a Read Response
            // owed for a Request that came with the peer's FIN), as long as
            // it can go: DRAIN_LIMIT at most.
            // Dead too: a QP the application destroyed itself (its
            // handle names nothing now, and no octet of this connection
            // reaches another QP: found by a review).
            let dead = !matches!(self.rnic.qp_state(live.qp), Ok(s) if s != QpState::Error);
            let drained =
                live.peer_closed && self.transport.recv_queue(live.conn).unwrap_or(0) == 0;
            if !live.closing && (dead || drained || live.close_wanted) {
                let from = *self.live[i].close_from.get_or_insert(now);
                if dead
                    || !self.rnic.may_transmit(live.qp).unwrap_or(false)
                    || past(control::runtime::DRAIN_LIMIT, from, now)
                {
                    let _ = self.transport.close(live.conn);
                    self.live[i].closing = true;
                    self.closing_live.push((live.qp, Some(now)));
                }
            }
            // Another look next turn: octets left to read, FPDUs left to
            // send before our FIN (TCP had no room, or a budget ran out; after
            // it nothing can go, a Terminate included), a hold not over, or a
            // close to make once the peer's octets are read.
            let live = self.live[i];
            if live.rx_ready
                || now < live.hold_until
                || (live.peer_closed && !live.closing)
                || (!live.closing && self.rnic.may_transmit(live.qp).unwrap_or(false))
            {
                self.wake(i);
            }
        }
        busy
    }

    /// What TCP holds for connection `i`, read in place by the engine.
    /// Returns the octets the engine took, those it took straight from
    /// frames since the last look included.
    fn receive(&mut self, i: usize) -> u64 {
        let Live { conn, qp, .. } = self.live[i];
        let direct = std::mem::take(&mut self.live[i].rx_direct);
        if !self.live[i].rx_ready {
            return direct;
        }
        let mut got = 0;
        for _ in 0..self.config.budgets.rx_reads {
            let rnic = &mut self.rnic;
            let read = self.transport.recv_with(conn, |data, position| {
                let n = rnic.handle_stream(qp, data).unwrap_or(0);
                (n, (n, position))
            });
            let Ok((n, position)) = read else {
                self.live[i].rx_ready = false;
                break;
            };
            if n == 0 {
                // Read to the end (or the engine stopped at a Terminate):
                // nothing more until TCP says Readable again.
                self.live[i].rx_ready = false;
                break;
            }
            self.live[i].took(position, n);
            got += n as u64;
        }
        self.counters.rx_fpdu_octets += got;
        direct + got
    }

    /// The engine's FPDUs for `live`, straight into TCP's transmit ring,
    /// each inside one TCP segment where the transport says where segments
    /// end. When the next FPDU does not fit the rest of a segment, TCP sends
    /// that segment short (a poll) and the next FPDU starts a new one.
    /// Returns the octets written.
    fn transmit(&mut self, live: Live, now: Instant) -> u64 {
        let mut total = 0;
        for _ in 0..self.config.budgets.tx_fills {
            let segments = match self.config.segmenting {
                Segmenting::Transport => match self.transport.segment_room(live.conn) {
                    Ok(room) => room.map(|first| (first, self.config.emss)),
                    Err(_) => break,
                },
                Segmenting::Off => None,
            };
            let rnic = &mut self.rnic;
            // A chunk ends where a segment does, or TCP would send its tail
            // as a short segment of its own.
            let chunk = match segments {
                Some((first, size)) => {
                    let whole = self.config.budgets.tx_chunk.saturating_sub(first) / size.max(1);
                    first + whole.max(1) * size
                }
                None => self.config.budgets.tx_chunk,
            };
            let written = self.transport.send_with(live.conn, chunk, |space| {
                let n = crate::transport::fill(rnic, live.qp, space, segments);
                (n, n)
            });
            let Ok(n) = written else { break };
            total += n as u64;
            // Nothing more to send: done. Nothing written into a fresh
            // segment: no room at all (the transmit ring is full, or wraps
            // before the next FPDU fits): the next turn goes on.
            let open_segment = segments.is_some_and(|(first, size)| first > 0 && first < size);
            if !self.rnic.transmit_short(live.qp).unwrap_or(false) || (n == 0 && !open_segment) {
                break;
            }
            // TCP sends what this fill queued (a segment cut short where the
            // next FPDU did not fit), and the device hands it to the port,
            // so the peer works on it while the engine makes the next. A
            // poll visits every connection with something to send: past the
            // turn's budget, the rest waits for the next turn.
            if self.polls_left == 0 {
                break;
            }
            self.polls_left -= 1;
            self.poll_transport(now);
            self.transport.flush();
        }
        self.counters.tx_fpdu_octets += total;
        total
    }

    /// Step 5: QPs for the startups that ended.
    fn new_qps(&mut self, now: Instant) -> bool {
        let mut busy = false;
        for _ in 0..self.config.budgets.handoffs {
            let Some(handoff) = self.link.next_handoff() else {
                break;
            };
            busy = true;
            let qp = match (&handoff.result, handoff.conn) {
                (StartupResult::Established(e), Some(conn)) => {
                    let initiator = handoff.token != 0;
                    let (peer_closed, ulp_token) = (handoff.peer_closed, handoff.ulp_token);
                    self.establish(conn, e, initiator, peer_closed, ulp_token, now)
                }
                // MPA leaves a rejected connection's TCP to us: close it.
                (StartupResult::Rejected(_), Some(conn)) => {
                    let _ = self.transport.close(conn);
                    self.closing_raw.push((conn, now));
                    None
                }
                _ => None,
            };
            if let Some(conn) = handoff.conn {
                if self.early_events.iter().any(|&(c, _)| c == conn) {
                    let mut replay = Vec::new();
                    self.early_events.retain(|&(c, kind)| {
                        if c == conn {
                            replay.push(kind);
                        }
                        c != conn
                    });
                    for kind in replay {
                        match kind {
                            // After the application has seen the handoff.
                            EventKind::Closed | EventKind::Reset | EventKind::TimedOut => {
                                self.deferred_ends.push((conn, kind))
                            }
                            _ => self.connection_event(conn, kind),
                        }
                    }
                }
            }
            self.handoffs.push_back((handoff, qp));
        }
        busy
    }

    /// A QP for an established connection, or `None` (the connection is
    /// reset) when the engine has no room for one.
    fn establish(
        &mut self,
        conn: ConnId,
        e: &control::mpa::Established,
        initiator: bool,
        peer_closed: bool,
        ulp_token: u64,
        now: Instant,
    ) -> Option<QpHandle> {
        let refuse = |core: &mut Core<T>| {
            core.counters.refused += 1;
            // An abort reports nothing more: release now.
            let _ = core.transport.abort(conn);
            core.transport.release(conn);
            None
        };
        if self.live.len() >= self.config.connections_max {
            return refuse(self);
        }
        let choice = match (&mut self.pd_for, self.transport.endpoints(conn)) {
            (None, _) => PdChoice::Default,
            (Some(choose), Ok((local, peer))) => choose(local, peer, ulp_token),
            // Whose it is cannot be told: not into anyone's PD.
            (Some(_), Err(_)) => PdChoice::Refuse,
        };
        let pd = match choice {
            PdChoice::Default => self.qp_init.pd,
            PdChoice::In(pd) => pd,
            PdChoice::Refuse => return refuse(self),
        };
        // No room while ended QPs hold their slots for completions the
        // application has not taken: the connection is refused, the
        // completions (data delivered) are not dropped.
        let Ok(qp) = self.rnic.create_qp(QpInit { pd, ..self.qp_init }) else {
            return refuse(self);
        };
        let base = e.connection(self.config.emss, self.config.ulpdu_max);
        let local_port = self
            .transport
            .endpoints(conn)
            .map_or(0, |(local, _)| local.port());
        let unfenced = self.config.unfenced || self.config.unfenced_ports.contains(&local_port);
        let connection = rnic_engine::qp::Connection {
            terminate_layout: self.config.terminate_layout,
            fenced: base.fenced && !unfenced,
            ..base
        };
        if self.rnic.connect(qp, connection).is_err() {
            let _ = self.rnic.destroy_qp(qp);
            return refuse(self);
        }
        self.by_conn.insert(conn, self.live.len());
        self.by_qp.insert(qp, self.live.len());
        self.live.push(Live {
            conn,
            qp,
            // A FIN that came during the startup (told once, to the link).
            peer_closed,
            closing: false,
            close_wanted: false,
            close_from: None,
            hold_until: if initiator {
                now + self.config.settle
            } else {
                now
            },
            // What arrived before the QP (after the startup's frame) is
            // read at once.
            rx_ready: true,
            rx_octets: 0,
            rx_base: None,
            rx_direct: 0,
            born: self.counters.turns,
            active: false,
            local_port,
            urgent: false,
            class: 0,
        });
        self.wake(self.live.len() - 1);
        self.counters.established += 1;
        // Its class: what an active open was opened with, what the peer's
        // SYN carried where the core reflects it (its transport marks its
        // segments so since the SYN-ACK).
        let class = if initiator {
            self.transport.dscp(conn)
        } else if self.config.reflect_dscp {
            let class = self.transport.peer_dscp(conn).unwrap_or(0);
            if class != 0 {
                self.counters.classes_reflected += 1;
            }
            class
        } else {
            0
        };
        let i = self.live.len() - 1;
        self.live[i].class = class;
        let urgent_class = class != 0 && class == self.config.urgent_dscp;
        if urgent_class || self.config.urgent_ports.contains(&local_port) {
            self.set_urgent(qp, true);
        }
        Some(qp)
    }

    fn connection_event(&mut self, conn: ConnId, kind: EventKind) {
        if let Some(&i) = self.by_conn.get(&conn) {
            match kind {
                EventKind::PeerClosed => {
                    self.live[i].peer_closed = true;
                    self.wake(i);
                }
                EventKind::Readable => {
                    self.live[i].rx_ready = true;
                    self.wake(i);
                }
                EventKind::Closed => self.end(i),
                EventKind::Reset | EventKind::TimedOut => {
                    self.counters.ended_abruptly += 1;
                    self.end(i);
                }
                _ => {}
            }
        } else if let Some(i) = self.closing_raw.iter().position(|&(c, _)| c == conn) {
            match kind {
                EventKind::PeerClosed => {
                    let _ = self.transport.close(conn);
                }
                EventKind::Closed | EventKind::Reset | EventKind::TimedOut => {
                    self.closing_raw.swap_remove(i);
                    self.transport.release(conn);
                }
                _ => {}
            }
        } else if self.link.hands_off(conn) && !self.early_events.contains(&(conn, kind)) {
            self.early_events.push((conn, kind));
        }
    }

    /// Connection `i` ended: its QP flushes and goes.
    fn end(&mut self, i: usize) {
        // What arrived before the end still counts: a peer that sends a
        // Terminate and then resets (siw's rping does, when it exits) must
        // be heard.
        self.receive(i);
        let live = self.live.swap_remove(i);
        if live.urgent {
            self.urgent_live -= 1;
        }
        self.by_conn.remove(&live.conn);
        self.by_qp.remove(&live.qp);
        if let Some(moved) = self.live.get(i) {
            self.by_conn.insert(moved.conn, i);
            self.by_qp.insert(moved.qp, i);
        }
        self.transport.release(live.conn);
        // Outstanding work completes flushed, then the QP goes. What it
        // completed before its end is kept for the application with the
        // others' completions, in order (a Send the peer made just before
        // it closed is data delivered, however late the CQ is polled);
        // the flushes, which the end itself made, are dropped: the end is
        // reported by `next_ended`, and every work request not completed
        // by then is gone with the QP (but for a receive it had taken from
        // a shared receive queue: the SRQ's buffer, reported flushed).
        let _ = self.rnic.close(live.qp);
        while let Ok(Some(event)) = self.rnic.poll_event(live.qp) {
            self.events.push_back((live.qp, event));
        }
        let cqs = [self.qp_init.send_cq, self.qp_init.recv_cq];
        for (k, &cq) in cqs.iter().enumerate() {
            if k == 1 && cq == cqs[0] {
                break;
            }
            self.drain_cq(cq, live.qp);
        }
        let srq = self.qp_init.srq.is_some();
        self.pending.retain(|(_, wc)| !ends_with(wc, live.qp, srq));
        if let Ok(stats) = self.rnic.op_stats(live.qp) {
            self.ended_ops.add(live.local_port, &stats);
        }
        if live.closing {
            self.closing_live.retain(|&(qp, _)| qp != live.qp);
        }
        // Its handle is not given to another QP while completions of its
        // are kept for the application.
        if self.pending.iter().any(|(_, wc)| wc.qp == live.qp) {
            self.zombies.push_back(live.qp);
        } else {
            let _ = self.rnic.destroy_qp(live.qp);
        }
        self.ended.push_back(live.qp);
        self.counters.ended += 1;
    }

    /// Destroys the ended QPs none of whose completions are kept any more.
    fn bury(&mut self) {
        let pending = &self.pending;
        let rnic = &mut self.rnic;
        self.zombies.retain(|&zombie| {
            let kept = pending.iter().any(|(_, wc)| wc.qp == zombie);
            if !kept {
                let _ = rnic.destroy_qp(zombie);
            }
            kept
        });
    }

    /// Moves what CQ `cq` holds into `pending`, but for the flushes of
    /// QP `ending` (its end is reported instead). `pending` keeps at most
    /// the CQ's capacity of its completions, the newest past that lost
    /// and counted: each read-out empties the ring, which the live QPs
    /// may fill again, so without a bound an application that posts and
    /// never polls made every end (a peer's reset) keep another ring's
    /// worth, without end. An application that sizes its CQ for every
    /// request that can complete, as it must, never loses one here: what
    /// it has not polled, kept or in the ring, is within the capacity.
    fn drain_cq(&mut self, cq: CqHandle, ending: QpHandle) {
        debug_assert!(
            cq == self.qp_init.send_cq || cq == self.qp_init.recv_cq,
            "only the core's CQs are kept (forget_destroyed_cqs looks at those)"
        );
        self.forget_destroyed_cqs();
        let Ok(ring) = self.rnic.cq(cq) else {
            return;
        };
        let capacity = ring.capacity();
        let mut kept = self.pending.iter().filter(|(c, _)| *c == cq).count();
        loop {
            let n = self.rnic.poll_cq(cq, &mut self.wcs).unwrap_or(0);
            for wc in &self.wcs[..n] {
                if ends_with(wc, ending, self.qp_init.srq.is_some()) {
                    continue;
                }
                if kept >= capacity {
                    self.counters.completions_lost += 1;
                    if let Ok(ring) = self.rnic.cq(cq) {
                        ring.note_overflow();
                    }
                    continue;
                }
                self.pending.push_back((cq, *wc));
                kept += 1;
            }
            if n < self.wcs.len() {
                return;
            }
        }
    }

    /// The next startup that ended since, with its QP if it reached Full
    /// Operation. A QP takes no octets before the turn after its handoff:
    /// post receives first.
    pub fn next_handoff(&mut self) -> Option<(Handoff, Option<QpHandle>)> {
        self.handoffs.pop_front()
    }

    /// The next Terminate sent or received, by QP (a QP that ended in the
    /// last turn is still named).
    pub fn next_event(&mut self) -> Option<(QpHandle, QpEvent)> {
        self.events.pop_front()
    }

    /// The next QP whose connection ended: destroyed, or, while
    /// completions it made before its end wait in [`poll_cq`](Core::poll_cq),
    /// in Error (work posted to it fails) until they are taken.
    pub fn next_ended(&mut self) -> Option<QpHandle> {
        self.ended.pop_front()
    }

    /// Completions of CQ `cq` into `out`; returns how many. What a QP
    /// completed before its end is kept for this (its flushes are
    /// dropped), its handle given to no new QP meanwhile (its slot in the
    /// engine stays taken until then: an application that never polls
    /// leaves new connections refused, `CoreCounters::refused`, once
    /// [`RnicConfig::qps_max`](rnic_engine::verbs::RnicConfig::qps_max)
    /// slots are live or kept so). What is kept of a CQ is bounded by its
    /// capacity (`CoreCounters::completions_lost`).
    pub fn poll_cq(&mut self, cq: CqHandle, out: &mut [Wc]) -> usize {
        self.forget_destroyed_cqs();
        let mut n = 0;
        while n < out.len() {
            match self.pending.iter().position(|(c, _)| *c == cq) {
                Some(at) => {
                    out[n] = self.pending.remove(at).expect("found").1;
                    n += 1;
                }
                None => break,
            }
        }
        if n > 0 && !self.zombies.is_empty() {
            self.bury();
        }
        n + self.rnic.poll_cq(cq, &mut out[n..]).unwrap_or(0)
    }

    /// Destroys completion queue `cq` ([`Rnic::destroy_cq`], refused as it
    /// refuses) with the completions the core kept of it for
    /// [`poll_cq`](Core::poll_cq): an application destroys a CQ through
    /// this. The kept completions are of QPs that no longer use it (the
    /// engine refuses a CQ a QP completes to), and go with its ring, as
    /// `ibv_destroy_cq` drops what was not polled: none is handed out for
    /// another CQ, even one that gets the same handle later, and none
    /// counts against another CQ's bound. (One destroyed through
    /// [`Core::rnic`] instead is found at the next turn or poll; its
    /// completions go then.)
    pub fn destroy_cq(&mut self, cq: CqHandle) -> Result<(), VerbError> {
        self.rnic.destroy_cq(cq)?;
        self.forget_cq(cq);
        Ok(())
    }

    /// Drops what `pending` holds of CQ `cq`, which the engine no longer
    /// has, and destroys the ended QPs that kept their handles only for
    /// those completions.
    fn forget_cq(&mut self, cq: CqHandle) {
        let before = self.pending.len();
        self.pending.retain(|(c, _)| *c != cq);
        if self.pending.len() < before && !self.zombies.is_empty() {
            self.bury();
        }
    }

    /// `forget_cq` for the core's CQs the engine no longer has: an
    /// application may destroy one through [`Core::rnic`] (found by a
    /// review: its completions stayed in `pending`, were still handed out
    /// for its handle, and counted against the bound of the next CQ given
    /// that handle). Two lookups, so every turn and poll may look.
    fn forget_destroyed_cqs(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        for cq in [self.qp_init.send_cq, self.qp_init.recv_cq] {
            if self.rnic.cq(cq).is_err() {
                self.forget_cq(cq);
            }
        }
    }

    /// Closes QP `qp`'s connection in order: FIN after what was posted
    /// to it is sent (a Send posted just before is not lost), or, if that
    /// cannot go (the peer's window stays shut),
    /// [`control::runtime::DRAIN_LIMIT`] later after what went. A peer
    /// that has not ended the connection [`CoreConfig::closing_limit`]
    /// after our FIN is reset.
    /// With nothing left to send, the FIN is queued at once (a transport
    /// that sends by itself, kernel TCP, sends it without another turn).
    pub fn close(&mut self, qp: QpHandle) {
        let Some(&i) = self.by_qp.get(&qp) else {
            return;
        };
        if self.live[i].closing {
            return;
        }
        if self.rnic.may_transmit(qp).unwrap_or(false) {
            // The next looks send it, then close.
            self.live[i].close_wanted = true;
            self.wake(i);
        } else {
            let _ = self.transport.close(self.live[i].conn);
            self.live[i].closing = true;
            // Timed from the next turn.
            self.closing_live.push((qp, None));
        }
    }

    /// Ends QP `qp`'s connection at once (RST): the QP's work flushes and
    /// the QP is destroyed now, so nothing the peer sends later can reach
    /// the memory it used. Reported by [`next_ended`](Core::next_ended).
    pub fn abort(&mut self, qp: QpHandle) {
        if let Some(&i) = self.by_qp.get(&qp) {
            let _ = self.transport.abort(self.live[i].conn);
            // An abort reports nothing more: end it here as a reset would.
            self.end(i);
        }
    }

    /// How the listen on `port` went; `None` until the control plane's
    /// command has reached this core.
    pub fn listen_status(&self, port: u16) -> Option<Result<(), tcp_lite::ListenError>> {
        self.link.listen_status(port)
    }

    /// Forgets how the last listen on `port` went, before a new one
    /// (`CoreLink::forget_listen_status`).
    pub fn forget_listen_status(&mut self, port: u16) {
        self.link.forget_listen_status(port);
    }

    /// Connections in Full Operation or closing.
    pub fn open_connections(&self) -> usize {
        self.live.len() + self.closing_raw.len()
    }

    /// Connections of this core in MPA startup (or connecting).
    pub fn in_startup(&self) -> usize {
        self.link.in_startup()
    }

    /// Whether QP `qp`'s connection is still open (or closing in order).
    pub fn is_live(&self, qp: QpHandle) -> bool {
        self.by_qp.contains_key(&qp)
    }

    /// Octets QP `qp`'s connection has delivered to the engine (FPDUs of
    /// any kind), while it is live: a measure of the peer's activity that
    /// needs no completion.
    pub fn rx_octets(&self, qp: QpHandle) -> Option<u64> {
        self.by_qp.get(&qp).map(|&i| self.live[i].rx_octets)
    }

    /// Every QP's traffic by RDMAP opcode so far, grouped by our TCP port
    /// of its connection (ended QPs' included), into `out` (cleared
    /// first). Not per packet: an operator's publication calls it.
    pub fn op_stats_by_port(&self, out: &mut Vec<(u16, OpStats)>) {
        out.clear();
        out.extend_from_slice(&self.ended_ops.0);
        for live in &self.live {
            if let Ok(stats) = self.rnic.op_stats(live.qp) {
                match out.iter_mut().find(|(p, _)| *p == live.local_port) {
                    Some((_, s)) => s.add(&stats),
                    None => out.push((live.local_port, stats)),
                }
            }
        }
    }

    /// The TCP connection of QP `qp`.
    pub fn conn_of(&self, qp: QpHandle) -> Option<ConnId> {
        self.by_qp.get(&qp).map(|&i| self.live[i].conn)
    }

    /// The engine, e.g. to post work requests.
    pub fn rnic(&mut self) -> &mut Rnic {
        &mut self.rnic
    }

    /// The engine, to read.
    pub fn rnic_ref(&self) -> &Rnic {
        &self.rnic
    }

    /// The transport.
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// The transport, mutably.
    pub fn transport_mut(&mut self) -> &mut T {
        &mut self.transport
    }

    /// The configuration.
    pub fn config(&self) -> &CoreConfig {
        &self.config
    }

    /// The configuration, to change: what it says about QPs (settle,
    /// fencing, the Terminate layout, EMSS) applies to the QPs made after;
    /// `reflect_dscp` from the next turn (SYNs from then on).
    pub fn config_mut(&mut self) -> &mut CoreConfig {
        &mut self.config
    }

    /// The counters, with the device's.
    pub fn counters(&self) -> CoreCounters {
        let mut c = self.counters;
        c.device = self.transport.device_counters();
        c
    }
}

/// Whether completion `wc` goes with QP `ending`'s end (not kept for the
/// application): the flushes the end made, of the QP's own queues. A
/// receive taken from a shared receive queue (`srq`: the QPs have one) is
/// the SRQ's buffer, not the QP's: its flush is kept, or the application
/// never learns that the buffer left the SRQ (found by a review: repeated
/// resets drained an SRQ until the other QPs had no buffer).
fn ends_with(wc: &Wc, ending: QpHandle, srq: bool) -> bool {
    wc.qp == ending
        && wc.status == WcStatus::Flushed
        && !(srq && matches!(wc.opcode, WcOpcode::Recv | WcOpcode::RecvImmediate))
}
