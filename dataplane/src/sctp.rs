//! [`SctpCore`]: the poll-mode core of DDP over SCTP (RFC 5043), the second
//! lower layer beside [`Core`](crate::Core)'s MPA over TCP.
//!
//! Heads up! Read RFC 5043 §5-§10 (messages, session control, unordered
//! delivery, sizes), RFC 6581 §7 (enhanced session control) and RFC 6951
//! (SCTP over UDP) first, then `rnic_engine::sctp` (the engine's message
//! layer), `control::session` (the session state machines) and `sctp-lite`
//! (the associations).
//!
//! One core owns a UDP socket on its transport (a [`Stack`](tcp_lite::Stack)
//! on an in-memory link, a TAP fd or a DPDK queue, or the kernel's UDP), the
//! SCTP endpoint on it, an engine, and the DDP streams of its
//! associations: each stream is a pair of like-numbered SCTP streams with a
//! QP of its own (many QPs per association). All of it but the transport is
//! an [`SctpUnit`], which is handed the transport at each turn: an
//! [`SctpCore`] hands it its own; a [`Core`](crate::Core) running MPA over
//! TCP on a port lends it its stack, so one poll-mode core serves both lower
//! layers on one queue pair. One turn, given the time:
//!
//! 1. **rx**: the control plane's answers ([`CoreLink::poll_sessions`]);
//!    the transport's receive burst, each datagram to the SCTP endpoint;
//!    its timers;
//! 2. **association events**: up (the peer passed RFC 5043 §7.1's DDP
//!    check), refused, closed (every stream of it ends);
//! 3. **messages**: a DDP Segment (PPID 16) goes to its stream's QP
//!    (`Rnic::handle_message`, which orders them by DDP-SSN), or is held
//!    (bounded) while its session is not up here yet; a Session Control
//!    message (PPID 17) goes to the control plane while the stream is in
//!    establishment (a peer's first one opens the stream), to the stream's
//!    own session machine once it is up;
//! 4. **sessions**: the control plane's messages go out; a stream it hands
//!    back established connects its QP, which takes the held segments; one
//!    that ended reports why;
//! 5. **tx**: each session's control messages, then each QP's messages, as
//!    many as the association's send buffer has room for (a message the
//!    engine wrote is never dropped: the engine is asked for no more than
//!    fits), each sent unordered (U=1, RFC 5043 §8) on its stream;
//! 6. **tx burst**: the endpoint's SCTP packets into UDP datagrams, and the
//!    transport's poll and flush.
//!
//! Session control runs on the control-plane thread, as MPA's startups do
//! ([`CoreLink`]): the core forwards the messages of a stream in
//! establishment (a DDP Segment is held here and only announced) and sends
//! what the control plane answers; the application's callback
//! (`ControlPlane::listen_sessions`) accepts or rejects each Initiate there.
//! When establishment ends, the control plane hands the stream back with
//! its session machine, which the core keeps for the rest of the session
//! (a Session Terminate either way, RFC 6581 §7). The core itself answers
//! an Initiate with a Session Terminate (the non-ULP reject of RFC 5043
//! §6.4) only when it has no room for the stream (`streams_max`, no QP) or
//! its link refuses it (no one listens, a startup limit).

use std::collections::VecDeque;
use std::net::{SocketAddr, SocketAddrV4};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use rustc_hash::{FxHashMap, FxHashSet};

use control::runtime::{CoreLink, SessionAction, SessionId, SessionResult};
use control::session::{
    Established, Failure, Initiator, Input, Outcome, Rejected, Responder, Session, SessionConfig,
};
use rnic_engine::qp::{QpEvent, QpState};
use rnic_engine::sctp::rx::{ReorderBudget, ReorderConfig};
use rnic_engine::sctp::{PPID_DDP_SEGMENT, PPID_SESSION_CONTROL};
use rnic_engine::verbs::{MessageConnection, QpHandle, QpInit, Rnic};
use rnic_engine::wire::ddp_session::MESSAGE_LEN_MAX;
use rnic_engine::wire::term::Encoding;
use sctp_lite::{AssocId, CloseReason, EventKind};
use tcp_lite::{Instant, UdpId};

use crate::core::PdChoice;
use crate::transport::MessageTransport;

/// The most a stream's QP writes per batch (and at least one message).
const BATCH_MAX: usize = 64 << 10;

/// Streams a core remembers as ended or refused (its tombstones), over all
/// associations; the oldest is forgotten for a new one.
const TOMBSTONES_MAX: usize = 4096;

/// How an [`SctpCore`] runs.
#[derive(Debug, Clone)]
pub struct SctpCoreConfig {
    /// The SCTP endpoint: its port, path MTU, windows, streams, timers.
    pub endpoint: sctp_lite::Config,
    /// Session establishment of the streams this core opens (IRD/ORD,
    /// enhanced or not); the passive side's is the control plane's listen.
    pub session: SessionConfig,
    /// DDP streams open at once over all associations; an Initiate beyond
    /// it is answered with a Session Terminate (non-ULP reject).
    pub streams_max: usize,
    /// The reorder window of every QP.
    pub reorder: ReorderConfig,
    /// Octets all the core's reorder windows hold at most together
    /// ([`Rnic::set_reorder_budget`]): held messages have left SCTP's
    /// receive window, so without it a peer could make each stream it
    /// opens hold `reorder.octets`. A hold beyond it fails that stream
    /// (an RDMAP Terminate, as one past its own window's bound).
    pub reorder_budget: usize,
    /// Octets the reorder windows of one association's streams hold at
    /// most together, drawn from `reorder_budget`
    /// ([`Rnic::reorder_budget_within`]): without it one peer could take
    /// the whole budget (64 streams of 1 MiB each), after which every
    /// other peer's stream that held one reordered message would fail. A
    /// hold beyond it fails that stream, as one past the budget does.
    pub reorder_association_octets: usize,
    /// DDP Segments held per stream while its session is not up here yet
    /// (they may overtake the Accept: chunks are unordered); one more ends
    /// the session.
    pub early_max: usize,
    /// Octets of those Segments held per stream at most; one that would
    /// pass it ends the session, as one beyond `early_max` does. A message
    /// may be as long as a peer's path MTU makes it (up to 64 KiB), so
    /// `early_max` alone would let each stream in establishment hold 4 MiB.
    pub early_octets_max: usize,
    /// Datagrams taken from the transport per turn.
    pub rx_datagrams: usize,
    /// Messages taken from the endpoint per turn.
    pub rx_messages: usize,
    /// The layout of the Terminates our QPs send.
    pub terminate_layout: Encoding,
}

/// [`SctpCoreConfig::reorder_association_octets`]'s default: 1 MiB, what
/// one stream's window holds at most by default
/// ([`ReorderConfig::default`]), so that 64 associations at least share
/// the default budget.
pub const REORDER_ASSOCIATION_OCTETS_DEFAULT: usize = 1 << 20;

/// [`SctpCoreConfig::early_octets_max`]'s default: 128 KiB a stream, more
/// than `early_max` Segments of 1,444 octets (a 1500-octet path MTU, RFC
/// 5043 §9), and at most 128 MiB a core at `streams_max` 1024.
pub const EARLY_OCTETS_MAX_DEFAULT: usize = 128 << 10;

/// [`SctpCoreConfig::reorder_budget`]'s default: 64 MiB a core, the
/// 256 KiB receive window of 256 associations held out of order at once.
pub const REORDER_BUDGET_DEFAULT: usize = 64 << 20;

impl SctpCoreConfig {
    /// Defaults around `endpoint`.
    pub fn new(endpoint: sctp_lite::Config) -> SctpCoreConfig {
        SctpCoreConfig {
            endpoint,
            session: SessionConfig::default(),
            streams_max: 1024,
            reorder: ReorderConfig::default(),
            reorder_budget: REORDER_BUDGET_DEFAULT,
            reorder_association_octets: REORDER_ASSOCIATION_OCTETS_DEFAULT,
            early_max: 64,
            early_octets_max: EARLY_OCTETS_MAX_DEFAULT,
            rx_datagrams: 256,
            rx_messages: 1024,
            terminate_layout: Encoding::Rfc5040,
        }
    }
}

/// Something the application hears about from an [`SctpCore`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SctpEvent {
    /// An association came up (outbound: we connected).
    AssociationUp {
        /// The association.
        assoc: AssocId,
        /// The peer.
        remote: SocketAddr,
        /// We connected (true) or accepted (false).
        outbound: bool,
    },
    /// An association was refused (no DDP adaptation indication, RFC 5043
    /// §7.1) or ended; its streams ended with it.
    AssociationEnded {
        /// The association.
        assoc: AssocId,
        /// Refused: the peer's adaptation code point (`None`: none sent).
        refused: Option<Option<u32>>,
        /// Why it closed, when it was up.
        reason: Option<CloseReason>,
    },
    /// A DDP stream's session is up and its QP connected.
    StreamUp {
        /// The association.
        assoc: AssocId,
        /// The stream.
        stream: u16,
        /// Its QP.
        qp: QpHandle,
        /// We initiated it.
        outbound: bool,
        /// What the session negotiated.
        session: Established,
    },
    /// The passive side's ULP rejected our Initiate.
    StreamRejected {
        /// The association.
        assoc: AssocId,
        /// The stream.
        stream: u16,
        /// The Reject.
        rejected: Rejected,
    },
    /// A stream's session failed or ended; its QP (if it had one) is
    /// destroyed after its work flushed.
    StreamEnded {
        /// The association.
        assoc: AssocId,
        /// The stream.
        stream: u16,
        /// Its QP, if one was made.
        qp: Option<QpHandle>,
        /// Why, when the session says (`None`: the association ended, or
        /// the QP's Terminate ended it).
        failure: Option<Failure>,
        /// The RDMAP Terminate the QP sent or received, if one ended it.
        terminate: Option<QpEvent>,
    },
    /// A stream the peer opened, whose Initiate the ULP accepted (RFC 5043
    /// §6.2-§6.3), ended before it came up here: no `StreamUp` came or comes
    /// for it (its association ended before the control plane's answer
    /// reached this core, it was ending meanwhile, or its QP could not join
    /// its PD or be connected). Once per such stream, after its
    /// `StreamEnded`, so that a ULP that set something aside when it
    /// accepted (a client run's admission) gives it back.
    AcceptedNeverUp {
        /// What the control plane established: the peer's private data
        /// says what the ULP accepted.
        session: Established,
    },
}

/// Why [`SctpCore::open_stream`] refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenError {
    /// The association is not up.
    NotUp,
    /// The stream is open already, or beyond the streams of the association
    /// (ours, or fewer if the peer offered fewer inbound streams).
    Stream,
    /// `streams_max` streams are open.
    TooManyStreams,
    /// The engine has no room for a QP.
    NoQp,
    /// The control plane is gone.
    NoControlPlane,
    /// The session configuration or private data is invalid.
    Config(&'static str),
}

/// Who runs a stream's session.
enum Control {
    /// The control plane, while the stream is in establishment.
    Plane(SessionId),
    /// This core, once the control plane handed the stream over.
    Here(Box<Session>),
}

/// One DDP stream.
struct Stream {
    assoc: AssocId,
    id: u16,
    outbound: bool,
    control: Control,
    qp: QpHandle,
    /// The QP is connected (the session is up here).
    up: bool,
    /// Ended: reported, its QP destroyed; the slot goes at the end of the
    /// turn.
    ended: bool,
    /// DDP Segments that arrived before the session was up here (their
    /// packets' own buffers).
    early: VecDeque<Bytes>,
    /// Their octets.
    early_octets: usize,
    /// The DDP-SSN after the last Segment received (to count those that
    /// arrive out of order).
    rx_next_ssn: u16,
    /// The DDP-SSN after the last Segment its QP sent: the session's own
    /// RDMAP Terminate takes it (RFC 5043 §6.1).
    tx_next_ssn: u16,
    /// In establishment: its end was asked of the control plane (closed
    /// here, or too many early Segments); whatever comes back ends it.
    ending: bool,
    /// In establishment: a held Segment was announced to the control plane
    /// (once is all its machine needs).
    announced: bool,
    /// Where the QP's messages are written, a batch at a time, and handed
    /// to sctp-proto without a copy (each message a slice of its batch).
    /// The stream's own: a buffer lives while sctp-proto holds any of its
    /// batches, and only this stream's acknowledgements free it, so a
    /// stalled peer pins at most its send buffer's worth of buffers.
    window: BytesMut,
}

/// The counters of an [`SctpCore`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SctpCounters {
    /// Turns run.
    pub turns: u64,
    /// Turns that moved something.
    pub busy_turns: u64,
    /// Microseconds from the start of a busy turn to the start of the
    /// next turn (the clock each turn is given), summed: time spent
    /// working (the core's, where a `Core` lends the unit its turns).
    pub busy_us: u64,
    /// The same for turns that moved nothing.
    pub idle_us: u64,
    /// Datagrams received from the transport.
    pub rx_datagrams: u64,
    /// Datagrams sent.
    pub tx_datagrams: u64,
    /// Times the transport pushed back a datagram (kept, sent later).
    pub tx_full: u64,
    /// DDP Segments the engine wrote that the association refused (it is
    /// no longer up: its streams end this turn).
    pub tx_refused: u64,
    /// DDP Segment messages (PPID 16) handed to QPs.
    pub rx_segments: u64,
    /// Their octets.
    pub rx_segment_octets: u64,
    /// DDP Segment messages the QPs sent.
    pub tx_segments: u64,
    /// Their octets.
    pub tx_segment_octets: u64,
    /// Segments that arrived with another DDP-SSN than the one after the
    /// last (unordered delivery at work: loss and retransmission, or
    /// reordering on the path).
    pub rx_out_of_order: u64,
    /// Segments held until their session was up here.
    pub early_held: u64,
    /// Messages with no stream to take them, or another PPID, and DDP
    /// Segments on a stream that ended or was refused lately (dropped
    /// unanswered).
    pub stray: u64,
    /// Streams established.
    pub streams_up: u64,
    /// Streams ended.
    pub streams_ended: u64,
    /// Streams a peer opened that this core answered with a Session
    /// Terminate itself: no room (`streams_max`, no QP), its link refused
    /// them (no one listens, a startup limit), or a DDP Segment came first.
    /// A stream is answered only while no earlier message of ours on it
    /// awaits its acknowledgement, and a Segment first only once.
    pub refused_streams: u64,
}

impl std::ops::AddAssign for SctpCounters {
    /// Adds another core's counters (every field: a new one must be named
    /// here).
    fn add_assign(&mut self, other: SctpCounters) {
        let SctpCounters {
            turns,
            busy_turns,
            busy_us,
            idle_us,
            rx_datagrams,
            tx_datagrams,
            tx_full,
            tx_refused,
            rx_segments,
            rx_segment_octets,
            tx_segments,
            tx_segment_octets,
            rx_out_of_order,
            early_held,
            stray,
            streams_up,
            streams_ended,
            refused_streams,
        } = other;
        self.turns += turns;
        self.busy_turns += busy_turns;
        self.busy_us += busy_us;
        self.idle_us += idle_us;
        self.rx_datagrams += rx_datagrams;
        self.tx_datagrams += tx_datagrams;
        self.tx_full += tx_full;
        self.tx_refused += tx_refused;
        self.rx_segments += rx_segments;
        self.rx_segment_octets += rx_segment_octets;
        self.tx_segments += tx_segments;
        self.tx_segment_octets += tx_segment_octets;
        self.rx_out_of_order += rx_out_of_order;
        self.early_held += early_held;
        self.stray += stray;
        self.streams_up += streams_up;
        self.streams_ended += streams_ended;
        self.refused_streams += refused_streams;
    }
}

/// UDP datagrams to and from an SCTP endpoint through one UDP socket of a
/// [`MessageTransport`] that the caller hands in at each call (its own, or
/// one it shares with an MPA [`Core`](crate::Core)): received datagrams
/// into the endpoint, its packets into datagrams, and a packet the
/// transport pushed back kept and sent first next time (never dropped
/// here).
#[derive(Debug)]
pub struct UdpCarrier {
    udp: UdpId,
    held: Option<(SocketAddrV4, Bytes)>,
    /// Datagrams sent.
    pub tx_datagrams: u64,
    /// Times the transport pushed back a datagram.
    pub tx_full: u64,
}

impl UdpCarrier {
    /// A UDP socket on `port` of `transport` (0: an ephemeral one).
    pub fn bind<T: MessageTransport>(transport: &mut T, port: u16) -> Result<UdpCarrier, String> {
        let udp = transport
            .udp_bind(port)
            .map_err(|e| format!("cannot bind UDP port {port}: {e}"))?;
        Ok(UdpCarrier {
            udp,
            held: None,
            tx_datagrams: 0,
            tx_full: 0,
        })
    }

    /// The socket's local address on `transport` (the one it was bound
    /// on).
    pub fn local<T: MessageTransport>(&self, transport: &T) -> Option<SocketAddrV4> {
        transport.udp_local(self.udp).ok()
    }

    /// At most `budget` received datagrams into `endpoint` (a bounded
    /// burst, STYLE.md §5); how many.
    pub fn receive<T: MessageTransport>(
        &mut self,
        transport: &mut T,
        endpoint: &mut sctp_lite::Endpoint,
        now: Instant,
        budget: usize,
    ) -> usize {
        let mut n = 0;
        while n < budget {
            let got = transport.udp_recv_with(self.udp, |datagram, from| {
                endpoint.handle_datagram(now, SocketAddr::V4(from), datagram);
            });
            if got.is_none() {
                break;
            }
            n += 1;
        }
        n
    }

    /// The endpoint's packets into datagrams until it has none or the
    /// transport pushes back (the packet is kept for the next call);
    /// whether any went.
    pub fn transmit<T: MessageTransport>(
        &mut self,
        transport: &mut T,
        endpoint: &mut sctp_lite::Endpoint,
        now: Instant,
    ) -> bool {
        let mut busy = false;
        if let Some((remote, packet)) = self.held.take() {
            if !self.send(transport, remote, &packet) {
                self.held = Some((remote, packet));
                return false;
            }
            busy = true;
        }
        // Each packet straight from sctp-proto's buffer into the transport's
        // (one copy).
        while let Some((remote, packet)) = endpoint.poll_transmit_bytes(now) {
            busy = true;
            let SocketAddr::V4(remote) = remote else {
                continue;
            };
            if !self.send(transport, remote, &packet) {
                self.held = Some((remote, packet));
                break;
            }
        }
        busy
    }

    fn send<T: MessageTransport>(
        &mut self,
        transport: &mut T,
        remote: SocketAddrV4,
        packet: &[u8],
    ) -> bool {
        let len = packet.len();
        match transport.udp_send_with(self.udp, remote, len, |buf| buf.copy_from_slice(packet)) {
            Ok(()) => {
                self.tx_datagrams += 1;
                true
            }
            Err(tcp_lite::UdpError::Full) => {
                self.tx_full += 1;
                false
            }
            // A datagram the transport can never send: dropped, as a
            // network would; SCTP retransmits or gives up.
            Err(_) => true,
        }
    }
}

/// A [`UdpCarrier`] with a transport of its own: the carrier of anything
/// that drives a `sctp_lite::Endpoint` alone (`bench sctp-echo`).
pub struct Wire<T: MessageTransport> {
    transport: T,
    carrier: UdpCarrier,
}

impl<T: MessageTransport> Wire<T> {
    /// A UDP socket on `port` of `transport` (0: an ephemeral one).
    pub fn bind(mut transport: T, port: u16) -> Result<Wire<T>, String> {
        let carrier = UdpCarrier::bind(&mut transport, port)?;
        Ok(Wire { transport, carrier })
    }

    /// The transport.
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// The transport, to poll and flush.
    pub fn transport_mut(&mut self) -> &mut T {
        &mut self.transport
    }

    /// The socket's local address.
    pub fn local(&self) -> Option<SocketAddrV4> {
        self.carrier.local(&self.transport)
    }

    /// See [`UdpCarrier::receive`].
    pub fn receive(
        &mut self,
        endpoint: &mut sctp_lite::Endpoint,
        now: Instant,
        budget: usize,
    ) -> usize {
        self.carrier
            .receive(&mut self.transport, endpoint, now, budget)
    }

    /// See [`UdpCarrier::transmit`].
    pub fn transmit(&mut self, endpoint: &mut sctp_lite::Endpoint, now: Instant) -> bool {
        self.carrier.transmit(&mut self.transport, endpoint, now)
    }

    /// Datagrams sent, and times the transport pushed one back.
    pub fn sent(&self) -> (u64, u64) {
        (self.carrier.tx_datagrams, self.carrier.tx_full)
    }
}

/// One poll-mode core running DDP over SCTP over UDP, on a transport of
/// its own: an [`SctpUnit`] and its transport, turned together. Everything
/// else is the unit's (`Deref`).
pub struct SctpCore<T: MessageTransport> {
    transport: T,
    unit: SctpUnit,
}

impl<T: MessageTransport> SctpCore<T> {
    /// A core on `transport`, its SCTP endpoint on UDP port
    /// `config.endpoint.sctp_port`'s encapsulation port `udp_port` (RFC
    /// 6951: 9899 by default; 0 for an ephemeral one), with the engine
    /// `rnic`, each QP made from `qp_init`. `epoch` stands for time zero of
    /// the endpoint's clock (see `sctp_lite::Endpoint::new`). `link` is the
    /// core's end of the control plane, which runs session establishment.
    pub fn new(
        config: SctpCoreConfig,
        mut transport: T,
        udp_port: u16,
        link: CoreLink,
        rnic: Rnic,
        qp_init: QpInit,
        epoch: std::time::Instant,
    ) -> Result<SctpCore<T>, String> {
        let unit = SctpUnit::new(config, &mut transport, udp_port, link, rnic, qp_init, epoch)?;
        Ok(SctpCore { transport, unit })
    }

    /// One turn (see the module docs). Returns whether anything moved.
    pub fn turn(&mut self, now: Instant) -> bool {
        self.unit.turn(&mut self.transport, now)
    }

    /// The transport.
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// The local UDP address of the core's endpoint.
    pub fn local(&self) -> Option<SocketAddrV4> {
        self.unit.local(&self.transport)
    }
}

impl<T: MessageTransport> std::ops::Deref for SctpCore<T> {
    type Target = SctpUnit;

    fn deref(&self) -> &SctpUnit {
        &self.unit
    }
}

impl<T: MessageTransport> std::ops::DerefMut for SctpCore<T> {
    fn deref_mut(&mut self) -> &mut SctpUnit {
        &mut self.unit
    }
}

/// Chooses a [`PdChoice`] for a passive stream's QP by the session its
/// control plane accepted and the peer's address ([`SctpUnit::set_pd_for`]).
pub type StreamPdFor = Box<dyn FnMut(&Established, SocketAddr) -> PdChoice + Send>;

/// DDP over SCTP over UDP without a transport of its own: the SCTP
/// endpoint, its UDP socket, the engine and the DDP streams, turned over a
/// transport handed in at every turn. An [`SctpCore`] hands in its own; a
/// core that runs MPA over TCP on a port ([`Core`](crate::Core)) lends its
/// stack (`Core::transport_mut`), so that one poll-mode core serves both
/// lower layers on one port and one queue pair, as one port of a hardware
/// RNIC would. The transport must be the one the unit was made on (its UDP
/// socket is there).
pub struct SctpUnit {
    config: SctpCoreConfig,
    /// Which PD each passive stream's QP joins ([`SctpUnit::set_pd_for`]).
    pd_for: Option<StreamPdFor>,
    carrier: UdpCarrier,
    endpoint: sctp_lite::Endpoint,
    link: CoreLink,
    rnic: Rnic,
    qp_init: QpInit,
    streams: Vec<Option<Stream>>,
    free: Vec<usize>,
    by_key: FxHashMap<(AssocId, u16), usize>,
    by_qp: FxHashMap<QpHandle, usize>,
    by_session: FxHashMap<SessionId, usize>,
    /// Streams that ended here or were refused for a Segment first, oldest
    /// first, at most [`TOMBSTONES_MAX`]: a DDP Segment on one of them
    /// (late, or another stray) is dropped unanswered. A Session Terminate
    /// for it could end the peer's next session on the stream, and one per
    /// Segment would let a peer that never acknowledges fill the send
    /// buffer with them.
    tombstones: VecDeque<(AssocId, u16)>,
    /// The same, to look up.
    tombstoned: FxHashSet<(AssocId, u16)>,
    /// Each association's share of the reorder budget
    /// ([`SctpCoreConfig::reorder_association_octets`]), made when its
    /// first stream comes up; its streams' QPs hold it until destroyed.
    reorder_budgets: FxHashMap<AssocId, Arc<ReorderBudget>>,
    events: VecDeque<SctpEvent>,
    /// The most the engine writes per batch.
    batch_max: usize,
    lengths: Vec<u16>,
    counters: SctpCounters,
    /// When the last turn began, and whether it moved something.
    last_turn: Option<(Instant, bool)>,
}

impl SctpUnit {
    /// A unit whose SCTP endpoint is on UDP port `udp_port` of
    /// `transport` (see [`SctpCore::new`] for the rest).
    pub fn new<T: MessageTransport>(
        config: SctpCoreConfig,
        transport: &mut T,
        udp_port: u16,
        link: CoreLink,
        mut rnic: Rnic,
        qp_init: QpInit,
        epoch: std::time::Instant,
    ) -> Result<SctpUnit, String> {
        config
            .session
            .validate()
            .map_err(|e| format!("session: {e}"))?;
        rnic.set_reorder_budget(config.reorder_budget);
        // SCTP's packets take the engine's CRC32c (VPCLMULQDQ where the CPU
        // has it), as MPA's FPDUs do; set once per process.
        sctp_lite::use_crc32c(rnic_engine::mpa::crc::append);
        let carrier = UdpCarrier::bind(transport, udp_port)?;
        let endpoint = sctp_lite::Endpoint::new(config.endpoint.clone(), epoch)
            .map_err(|e| format!("SCTP endpoint: {e}"))?;
        let message_max = config.endpoint.message_size_max();
        Ok(SctpUnit {
            batch_max: BATCH_MAX.max(message_max),
            lengths: Vec::with_capacity(64),
            streams: Vec::new(),
            free: Vec::new(),
            by_key: FxHashMap::default(),
            by_qp: FxHashMap::default(),
            by_session: FxHashMap::default(),
            tombstones: VecDeque::new(),
            tombstoned: FxHashSet::default(),
            reorder_budgets: FxHashMap::default(),
            events: VecDeque::new(),
            counters: SctpCounters::default(),
            last_turn: None,
            pd_for: None,
            config,
            carrier,
            endpoint,
            link,
            rnic,
            qp_init,
        })
    }

    /// From now on the QP of each stream a peer opens joins the protection
    /// domain `choose` picks by the session the control plane accepted
    /// (its Initiate's private data, which a service that lends each
    /// client memory of its own reads) and the association's peer, asked
    /// once per stream when it comes up, before anything the peer sent
    /// reaches the QP; the QP was
    /// made in `qp_init`'s PD when the Initiate arrived, and moves
    /// (`Rnic::move_qp_to_pd`). [`PdChoice::Refuse`], or a PD that is
    /// gone, ends the stream with a Session Terminate. As
    /// [`crate::Core::set_pd_for`] for MPA connections.
    pub fn set_pd_for(&mut self, choose: StreamPdFor) {
        self.pd_for = Some(choose);
    }

    /// The local UDP address of the unit's endpoint on `transport` (the
    /// one it was made on).
    pub fn local<T: MessageTransport>(&self, transport: &T) -> Option<SocketAddrV4> {
        self.carrier.local(transport)
    }

    /// The core's end of the control plane.
    pub fn link(&self) -> &CoreLink {
        &self.link
    }

    /// The engine.
    pub fn rnic(&mut self) -> &mut Rnic {
        &mut self.rnic
    }

    /// Counters so far.
    pub fn counters(&self) -> SctpCounters {
        self.counters
    }

    /// The next event.
    pub fn next_event(&mut self) -> Option<SctpEvent> {
        self.events.pop_front()
    }

    /// Opens an association to the SCTP endpoint at `remote` (a UDP
    /// address); [`SctpEvent::AssociationUp`] or `AssociationEnded`
    /// follows.
    pub fn connect(&mut self, now: Instant, remote: SocketAddrV4) -> Result<AssocId, String> {
        self.endpoint
            .connect(now, SocketAddr::V4(remote))
            .map_err(|e| format!("cannot open an association to {remote}: {e}"))
    }

    /// Opens DDP stream `stream` of the association `assoc` (up): a QP is
    /// made now and connected when the peer accepts
    /// ([`SctpEvent::StreamUp`]); the control plane runs the initiator, and
    /// its Initiate or Enhanced Initiate with `private_data` goes out once
    /// it answers.
    pub fn open_stream(
        &mut self,
        now: Instant,
        assoc: AssocId,
        stream: u16,
        private_data: &[u8],
    ) -> Result<QpHandle, OpenError> {
        if !self.endpoint.is_up(assoc) {
            return Err(OpenError::NotUp);
        }
        // Beyond the streams the peer takes (RFC 9260 §5.1.1) as well as
        // ours: it would discard the messages (§6.5).
        if stream >= self.endpoint.outbound_streams(assoc)
            || self.by_key.contains_key(&(assoc, stream))
        {
            return Err(OpenError::Stream);
        }
        if self.by_key.len() >= self.config.streams_max {
            return Err(OpenError::TooManyStreams);
        }
        // Checked here, so the caller hears what to fix now; the control
        // plane makes its own.
        Initiator::new(self.config.session.clone(), private_data, now)
            .map_err(|e| OpenError::Config(e.0))?;
        let remote = self.endpoint.remote(assoc).ok_or(OpenError::NotUp)?;
        let qp = self
            .rnic
            .create_qp(self.qp_init)
            .map_err(|_| OpenError::NoQp)?;
        let Some(session) =
            self.link
                .open_session(remote, self.config.session.clone(), private_data)
        else {
            let _ = self.rnic.destroy_qp(qp);
            return Err(OpenError::NoControlPlane);
        };
        self.insert(Stream {
            assoc,
            id: stream,
            outbound: true,
            control: Control::Plane(session),
            qp,
            up: false,
            ended: false,
            early: VecDeque::new(),
            early_octets: 0,
            rx_next_ssn: 0,
            tx_next_ssn: 0,
            ending: false,
            announced: false,
            window: BytesMut::new(),
        });
        Ok(qp)
    }

    /// Ends the stream of `qp` with a Session Terminate (RFC 6581 §7); its
    /// QP's outstanding work flushes. [`SctpEvent::StreamEnded`] follows
    /// (for a stream in establishment, once the control plane has sent
    /// the Terminate).
    pub fn close_stream(&mut self, qp: QpHandle) {
        let Some(&index) = self.by_qp.get(&qp) else {
            return;
        };
        let Some(stream) = self.streams[index].as_mut() else {
            return;
        };
        match &mut stream.control {
            Control::Plane(session) => {
                stream.ending = true;
                self.link.end_session(*session, true);
            }
            Control::Here(machine) => {
                machine.terminate();
                self.end_stream(index, None);
            }
        }
    }

    /// Sends `message` as it is, unordered, with `ppid` on `stream` of
    /// `assoc`, outside any session's rules: fault injection, to show what a
    /// peer makes of a message the rules forbid.
    pub fn inject_message(
        &mut self,
        assoc: AssocId,
        stream: u16,
        ppid: u32,
        message: &[u8],
    ) -> Result<(), String> {
        self.endpoint
            .send(assoc, stream, ppid, true, message)
            .map_err(|e| format!("cannot send on stream {stream}: {e}"))
    }

    /// Aborts association `assoc` (ABORT, RFC 9260 §9.1): its streams end.
    pub fn abort(&mut self, assoc: AssocId) {
        let _ = self.endpoint.abort(assoc);
    }

    /// Associations the endpoint holds (closed ones until their last
    /// packets went).
    pub fn associations(&self) -> usize {
        self.endpoint.associations()
    }

    /// DDP streams open: those whose slots are taken, an ended one's until
    /// its session's last words went (a turn), so that a caller that waits
    /// for none to be open has turned the unit past their ends and their
    /// [`SctpEvent::StreamEnded`]s.
    pub fn open_streams(&self) -> usize {
        self.streams.len() - self.free.len()
    }

    /// One turn over `transport` (the one the unit was made on; see the
    /// module docs). Returns whether anything moved.
    pub fn turn<T: MessageTransport>(&mut self, transport: &mut T, now: Instant) -> bool {
        self.counters.turns += 1;
        // The engine's clock for this turn (its responses' times).
        self.rnic.set_now(now.total_micros().max(0) as u64);
        let mut busy = transport.poll(now);
        // The control plane's answers first: a listen that arrived is in
        // force for this turn's Initiates.
        self.link.poll_sessions();
        let received =
            self.carrier
                .receive(transport, &mut self.endpoint, now, self.config.rx_datagrams);
        self.counters.rx_datagrams += received as u64;
        busy |= received > 0;
        if self.endpoint.poll_timeout().is_some_and(|t| t <= now) {
            self.endpoint.handle_timeout(now);
        }
        busy |= self.association_events(now);
        busy |= self.receive_messages(now);
        self.sessions(now);
        busy |= self.transmit_messages();
        busy |= self.carrier.transmit(transport, &mut self.endpoint, now);
        self.counters.tx_datagrams = self.carrier.tx_datagrams;
        self.counters.tx_full = self.carrier.tx_full;
        if busy {
            transport.poll(now);
            self.counters.busy_turns += 1;
        }
        transport.flush();
        // The time since the last turn began was that turn's (and its
        // owner's, between turns).
        if let Some((then, was_busy)) = self.last_turn {
            let us = (now - then).total_micros();
            if was_busy {
                self.counters.busy_us += us;
            } else {
                self.counters.idle_us += us;
            }
        }
        self.last_turn = Some((now, busy));
        busy
    }

    fn insert(&mut self, stream: Stream) -> usize {
        let key = (stream.assoc, stream.id);
        let qp = stream.qp;
        let session = match &stream.control {
            Control::Plane(session) => Some(*session),
            Control::Here(_) => None,
        };
        let index = match self.free.pop() {
            Some(index) => {
                self.streams[index] = Some(stream);
                index
            }
            None => {
                self.streams.push(Some(stream));
                self.streams.len() - 1
            }
        };
        self.by_key.insert(key, index);
        self.by_qp.insert(qp, index);
        if let Some(session) = session {
            self.by_session.insert(session, index);
        }
        index
    }

    fn association_events(&mut self, now: Instant) -> bool {
        let mut busy = false;
        while let Some(event) = self.endpoint.poll_event() {
            busy = true;
            match event.kind {
                EventKind::Up { outbound, .. } => self.events.push_back(SctpEvent::AssociationUp {
                    assoc: event.assoc,
                    remote: event.remote,
                    outbound,
                }),
                EventKind::Refused { peer_adaptation } => {
                    self.end_association(event.assoc);
                    self.events.push_back(SctpEvent::AssociationEnded {
                        assoc: event.assoc,
                        refused: Some(peer_adaptation),
                        reason: None,
                    });
                }
                EventKind::Closed(reason) => {
                    self.end_association(event.assoc);
                    self.events.push_back(SctpEvent::AssociationEnded {
                        assoc: event.assoc,
                        refused: None,
                        reason: Some(reason),
                    });
                }
            }
        }
        let _ = now;
        busy
    }

    /// Every stream of `assoc` ends with it (RFC 5043 §11.3: no Terminate
    /// is owed on each stream when the association goes).
    fn end_association(&mut self, assoc: AssocId) {
        let indices: Vec<usize> = self
            .by_key
            .iter()
            .filter(|((a, _), _)| *a == assoc)
            .map(|(_, &i)| i)
            .collect();
        for index in indices {
            self.end_stream(index, None);
        }
        self.tombstones.retain(|&(a, _)| a != assoc);
        self.tombstoned.retain(|&(a, _)| a != assoc);
        self.reorder_budgets.remove(&assoc);
    }

    /// Remembers that stream `key` ended or was refused (see
    /// [`SctpUnit::tombstones`]).
    fn tombstone(&mut self, key: (AssocId, u16)) {
        if !self.tombstoned.insert(key) {
            return;
        }
        if self.tombstones.len() >= TOMBSTONES_MAX {
            if let Some(oldest) = self.tombstones.pop_front() {
                self.tombstoned.remove(&oldest);
            }
        }
        self.tombstones.push_back(key);
    }

    fn receive_messages(&mut self, now: Instant) -> bool {
        let mut n = 0;
        while n < self.config.rx_messages {
            let Some((received, message)) = self.endpoint.recv_bytes() else {
                break;
            };
            n += 1;
            let key = (received.assoc, received.stream);
            let index = match self.by_key.get(&key) {
                Some(&index) => index,
                // The peer opens a stream with its Initiate; a Segment there
                // first breaks RFC 5043 §6.6, which the Responder answers
                // (a Terminate).
                None if received.ppid == PPID_SESSION_CONTROL
                    || received.ppid == PPID_DDP_SEGMENT =>
                {
                    self.passive_stream(now, key, received.ppid, &message);
                    continue;
                }
                None => {
                    self.counters.stray += 1;
                    continue;
                }
            };
            let Some(stream) = self.streams[index].as_mut() else {
                continue;
            };
            if received.ppid == PPID_DDP_SEGMENT {
                if let Some((ssn, _)) = rnic_engine::sctp::split(&message) {
                    self.counters.rx_out_of_order += u64::from(ssn != stream.rx_next_ssn);
                    stream.rx_next_ssn = ssn.wrapping_add(1);
                }
            }
            if received.ppid == PPID_DDP_SEGMENT && stream.up {
                self.counters.rx_segments += 1;
                self.counters.rx_segment_octets += message.len() as u64;
                let _ = self.rnic.handle_message(stream.qp, &message);
                continue;
            }
            let early_room = stream.early.len() < self.config.early_max
                && stream.early_octets + message.len() <= self.config.early_octets_max;
            match &mut stream.control {
                Control::Here(machine) => {
                    machine.set_next_segment_ssn(stream.tx_next_ssn);
                    match machine.handle_message(now, received.ppid, &message) {
                        Input::Taken | Input::Ignored => {}
                        Input::Segment | Input::Early if early_room => {
                            stream.early_octets += message.len();
                            stream.early.push_back(held(message));
                            self.counters.early_held += 1;
                        }
                        Input::Segment | Input::Early => machine.terminate(),
                    }
                    // A message that ended the session ends the stream now:
                    // the peer may reuse it at once (its DDP-SSNs restart at
                    // 0, RFC 5043 §6.1), so the next message on it, in this
                    // batch or later, opens a new stream.
                    if let Some(Outcome::Failed(failure)) = machine.outcome() {
                        let failure = failure.clone();
                        self.end_stream(index, Some(failure));
                    }
                }
                // In establishment: a Segment is held here (the peer may
                // have sent it behind its acknowledged Initiate, or it
                // overtook the Accept, RFC 5043 §6.6, §8) and announced
                // without its octets; anything else is the machine's.
                Control::Plane(session) => {
                    let session = *session;
                    if received.ppid == PPID_DDP_SEGMENT {
                        if early_room {
                            stream.early_octets += message.len();
                            stream.early.push_back(held(message));
                            self.counters.early_held += 1;
                        } else {
                            // More than we hold: the stream ends, whatever
                            // the control plane has decided meanwhile.
                            stream.ending = true;
                            self.link.end_session(session, true);
                        }
                        if !stream.announced {
                            stream.announced = true;
                            self.link.session_input(session, received.ppid, &[]);
                        }
                    } else {
                        self.link.session_input(session, received.ppid, &message);
                    }
                }
            }
        }
        n > 0
    }

    /// The first message of a stream we do not have: the peer opens it. The
    /// control plane's Responder takes it (it may well be no Initiate, or a
    /// Segment: the Responder answers that as the rules say). Without room
    /// for the stream, or with the link refusing it, the core answers a
    /// Session Terminate itself.
    fn passive_stream(
        &mut self,
        now: Instant,
        (assoc, id): (AssocId, u16),
        ppid: u32,
        first: &[u8],
    ) {
        if ppid == PPID_DDP_SEGMENT {
            // A Segment first breaks RFC 5043 §6.6 whatever a ULP would
            // say: the answer (a Session Terminate) is made here, once. A
            // late Segment of a stream that ended here gets none.
            if self.tombstoned.contains(&(assoc, id)) {
                self.counters.stray += 1;
                return;
            }
            self.tombstone((assoc, id));
            return self.refuse_stream(now, (assoc, id), ppid, first);
        }
        let full = self.by_key.len() >= self.config.streams_max;
        let qp = if full {
            None
        } else {
            self.rnic.create_qp(self.qp_init).ok()
        };
        let peer = self.endpoint.remote(assoc);
        let session = match (qp, peer) {
            (Some(_), Some(peer)) => self.link.initiated_session(peer, ppid, first),
            _ => None,
        };
        let (Some(qp), Some(session)) = (qp, session) else {
            if let Some(qp) = qp {
                let _ = self.rnic.destroy_qp(qp);
            }
            return self.refuse_stream(now, (assoc, id), ppid, first);
        };
        self.insert(Stream {
            assoc,
            id,
            outbound: false,
            control: Control::Plane(session),
            qp,
            up: false,
            ended: false,
            early: VecDeque::new(),
            early_octets: 0,
            rx_next_ssn: 0,
            tx_next_ssn: 0,
            ending: false,
            announced: false,
            window: BytesMut::new(),
        });
    }

    /// No room, or a Segment first: a Responder here answers with a Session
    /// Terminate (the non-ULP reject of RFC 5043 §6.4, or the §6.6
    /// violation), sent once; nothing is kept. No answer while a message of
    /// ours on the stream awaits its acknowledgement (the stream's send
    /// buffer is not empty): a peer that repeats itself without
    /// acknowledging gets one Terminate, not one per message, each of which
    /// would cost sctp-proto far more than its 4 octets of send buffer.
    fn refuse_stream(
        &mut self,
        now: Instant,
        (assoc, id): (AssocId, u16),
        ppid: u32,
        first: &[u8],
    ) {
        if self.endpoint.send_space(assoc, id) < self.config.endpoint.send_buffer_max {
            self.counters.stray += 1;
            return;
        }
        self.counters.refused_streams += 1;
        let Ok(mut responder) = Responder::new(self.config.session.clone(), now) else {
            return;
        };
        let _ = responder.handle_message(now, ppid, first);
        responder.reject_non_ulp();
        let mut out = [0u8; MESSAGE_LEN_MAX];
        while let Some(t) = responder.poll_transmit(&mut out) {
            let _ = self.endpoint.send(assoc, id, t.ppid, true, &out[..t.len]);
        }
    }

    /// What the control plane asks (messages of streams in establishment,
    /// their ends), then the streams this core runs: an established
    /// session connects its QP, an ended one is reported.
    fn sessions(&mut self, now: Instant) {
        // The link was polled at the start of the turn.
        while let Some(action) = self.link.next_session_action() {
            match action {
                SessionAction::Send { id, ppid, message } => {
                    let Some(stream) = self
                        .by_session
                        .get(&id)
                        .and_then(|&index| self.streams[index].as_ref())
                    else {
                        continue;
                    };
                    let _ = self
                        .endpoint
                        .send(stream.assoc, stream.id, ppid, true, &message);
                }
                SessionAction::Done { id, result } => {
                    let Some(index) = self.by_session.remove(&id) else {
                        // It ended here with its association, in
                        // establishment. Only a stream the peer opened and
                        // the ULP accepted is told: the link hands on such a
                        // Done after the end, but one it had taken before
                        // (in this turn, ahead of the ABORT) may be any
                        // stream's, ours too (found by a review).
                        if let SessionResult::Established { session, machine } = result {
                            if matches!(*machine, Session::Responder(_)) {
                                self.events
                                    .push_back(SctpEvent::AcceptedNeverUp { session });
                            }
                        }
                        continue;
                    };
                    self.handed_back(index, result);
                }
            }
        }
        for index in 0..self.streams.len() {
            let Some(stream) = self.streams[index].as_mut() else {
                continue;
            };
            if stream.ended || !stream.up {
                continue;
            }
            let Control::Here(machine) = &mut stream.control else {
                continue;
            };
            machine.handle_timeout(now);
            let failed = match machine.outcome() {
                Some(Outcome::Failed(failure)) => Some(failure.clone()),
                _ => None,
            };
            let qp_down = matches!(self.rnic.qp_state(stream.qp), Ok(QpState::Error) | Err(_));
            if failed.is_some() || qp_down {
                if qp_down && failed.is_none() {
                    // The QP sent or received an RDMAP Terminate: the
                    // stream ends with a Session Terminate too.
                    machine.terminate();
                }
                self.end_stream(index, failed);
            }
        }
    }

    /// The control plane ended a stream's establishment.
    fn handed_back(&mut self, index: usize, result: SessionResult) {
        let Some(stream) = self.streams[index].as_mut() else {
            return;
        };
        if stream.ended {
            return;
        }
        match result {
            SessionResult::Established {
                session,
                mut machine,
            } if stream.ending => {
                // Up at the control plane just as the core asked to end it:
                // the stream ends here, with a Session Terminate.
                machine.terminate();
                stream.control = Control::Here(machine);
                let passive = !stream.outbound;
                self.end_stream(index, None);
                if passive {
                    self.events
                        .push_back(SctpEvent::AcceptedNeverUp { session });
                }
            }
            SessionResult::Established { session, machine } => {
                stream.control = Control::Here(machine);
                self.stream_up(index, session);
            }
            SessionResult::Rejected(rejected) => {
                let (assoc, id) = (stream.assoc, stream.id);
                self.events.push_back(SctpEvent::StreamRejected {
                    assoc,
                    stream: id,
                    rejected,
                });
                self.end_stream(index, None);
            }
            SessionResult::Failed { failure, told } => {
                if !told {
                    // Ended without its machine: the peer hears it from us.
                    let mut out = [0u8; 8];
                    if let Some(len) = control::session::terminate_message(&mut out) {
                        let (assoc, id) = (stream.assoc, stream.id);
                        let ppid = PPID_SESSION_CONTROL;
                        let _ = self.endpoint.send(assoc, id, ppid, true, &out[..len]);
                    }
                }
                self.end_stream(index, Some(failure));
            }
        }
    }

    fn stream_up(&mut self, index: usize, session: Established) {
        let Some(stream) = self.streams[index].as_mut() else {
            return;
        };
        let peer = self.endpoint.remote(stream.assoc);
        let joined = match (&mut self.pd_for, stream.outbound, peer) {
            (Some(choose), false, Some(peer)) => match choose(&session, peer) {
                PdChoice::Default => true,
                PdChoice::In(pd) => self.rnic.move_qp_to_pd(stream.qp, pd).is_ok(),
                PdChoice::Refuse => false,
            },
            // Its association is gone: it goes too.
            (Some(_), false, None) => false,
            _ => true,
        };
        let connection = MessageConnection {
            message_max: self.config.endpoint.message_size_max(),
            ird: Established::depth(session.ird),
            ord: Established::depth(session.ord),
            reorder: self.config.reorder,
            terminate_layout: self.config.terminate_layout,
        };
        let octets = self.config.reorder_association_octets;
        let rnic = &mut self.rnic;
        let budget = self
            .reorder_budgets
            .entry(stream.assoc)
            .or_insert_with(|| rnic.reorder_budget_within(octets))
            .clone();
        if !joined
            || self
                .rnic
                .connect_messages_within(stream.qp, connection, budget)
                .is_err()
        {
            if let Control::Here(machine) = &mut stream.control {
                machine.fail_local();
            }
            let passive = !stream.outbound;
            self.end_stream(index, None);
            if passive {
                self.events
                    .push_back(SctpEvent::AcceptedNeverUp { session });
            }
            return;
        }
        stream.up = true;
        self.counters.streams_up += 1;
        self.events.push_back(SctpEvent::StreamUp {
            assoc: stream.assoc,
            stream: stream.id,
            qp: stream.qp,
            outbound: stream.outbound,
            session,
        });
        stream.early_octets = 0;
        while let Some(segment) = stream.early.pop_front() {
            self.counters.rx_segments += 1;
            self.counters.rx_segment_octets += segment.len() as u64;
            let _ = self.rnic.handle_message(stream.qp, &segment);
        }
    }

    /// Ends stream `index`: reported once, its QP destroyed with the work
    /// outstanding on it; its session's last messages still go out this
    /// turn.
    fn end_stream(&mut self, index: usize, failure: Option<Failure>) {
        let Some(stream) = self.streams[index].as_mut() else {
            return;
        };
        if stream.ended {
            return;
        }
        stream.ended = true;
        self.counters.streams_ended += 1;
        // Its key and QP handle are free at once: a message after this one
        // on the stream opens a new stream, and a new QP may get the handle.
        // The slot stays until its session's last words went.
        let key = (stream.assoc, stream.id);
        self.by_key.remove(&key);
        self.by_qp.remove(&stream.qp);
        if let Control::Plane(session) = stream.control {
            // Still in establishment: the control plane lets it go, and
            // anything it still sends about it is dropped.
            self.link.end_session(session, false);
            self.by_session.remove(&session);
        }
        let qp = stream.qp;
        let mut terminate = None;
        while let Ok(Some(event)) = self.rnic.poll_event(qp) {
            terminate.get_or_insert(event);
        }
        // Its outstanding work requests go with it, uncompleted (the
        // consumer learns of them from `StreamEnded`); completions already
        // in its CQ stay there for the consumer, under a handle that
        // `Rnic::create_qp` hands a new QP only after every other free one
        // (at once only when every other slot is taken: then one of them
        // may be taken for the new QP's; `Core::end` instead drops an
        // ending QP's flushes and keeps it until the rest are polled).
        let _ = self.rnic.destroy_qp(qp);
        self.events.push_back(SctpEvent::StreamEnded {
            assoc: stream.assoc,
            stream: stream.id,
            qp: Some(qp),
            failure,
            terminate,
        });
        // Its late Segments (unordered delivery, RFC 5043 §8) are dropped.
        self.tombstone(key);
    }

    /// Session messages, then each up QP's DDP Segments, into the endpoint.
    fn transmit_messages(&mut self) -> bool {
        let mut busy = false;
        let message_max = self.config.endpoint.message_size_max();
        for index in 0..self.streams.len() {
            let Some(stream) = self.streams[index].as_mut() else {
                continue;
            };
            if let Control::Here(machine) = &mut stream.control {
                let mut out = [0u8; MESSAGE_LEN_MAX];
                while let Some(t) = machine.poll_transmit(&mut out) {
                    busy = true;
                    let _ =
                        self.endpoint
                            .send(stream.assoc, stream.id, t.ppid, true, &out[..t.len]);
                }
            }
            if stream.ended {
                // Its session's last words went: the slot is free (its key
                // and QP handle went when it ended).
                self.streams[index] = None;
                self.free.push(index);
                continue;
            }
            if !stream.up {
                continue;
            }
            loop {
                // An idle QP costs no buffer and no call (as in `Core`).
                if !self.rnic.may_transmit(stream.qp).unwrap_or(false) {
                    break;
                }
                let room = self.endpoint.send_space(stream.assoc, stream.id);
                if room < message_max {
                    break;
                }
                let room = room.min(self.batch_max);
                // Batches are carved off the stream's buffer, front to back:
                // each octet is zeroed once (`resize` fills only what is
                // new), and a fresh buffer of two batches comes when this
                // one has less than `room` left, so each buffer carries at
                // least `batch_max` octets of messages.
                if stream.window.capacity() < room {
                    stream.window = BytesMut::with_capacity(2 * self.batch_max);
                }
                if stream.window.len() < room {
                    stream.window.resize(room, 0);
                }
                self.lengths.clear();
                let n = self
                    .rnic
                    .poll_transmit_messages(
                        stream.qp,
                        &mut stream.window[..room],
                        &mut self.lengths,
                    )
                    .unwrap_or(0);
                if n == 0 {
                    break;
                }
                busy = true;
                let batch = stream.window.split_to(n).freeze();
                let mut at = 0;
                for &len in &self.lengths {
                    let len = usize::from(len);
                    // Fits: the send buffer had `room` octets for them all;
                    // refused only by an association no longer up.
                    let sent = self.endpoint.send_bytes(
                        stream.assoc,
                        stream.id,
                        PPID_DDP_SEGMENT,
                        true,
                        batch.slice(at..at + len),
                    );
                    self.counters.tx_refused += u64::from(sent.is_err());
                    at += len;
                }
                // Each message starts with its DDP-SSN (RFC 5043 §6.1); the
                // batch's last is the QP's last.
                if let Some(&len) = self.lengths.last() {
                    let last = &batch[n - usize::from(len)..];
                    if let Some((ssn, _)) = rnic_engine::sctp::split(last) {
                        stream.tx_next_ssn = ssn.wrapping_add(1);
                    }
                }
                self.counters.tx_segments += self.lengths.len() as u64;
                self.counters.tx_segment_octets += n as u64;
            }
        }
        busy
    }
}

/// A Segment held while its stream is in establishment, as its own copy:
/// the message may be a slice of the whole received packet (sctp-lite
/// copies a datagram once and the fork hands out slices of it), which
/// `early_octets_max` does not count, so holding the slice would keep the
/// packet (up to its MTU, whatever the Segment's length) alive for each
/// (found by a review: 60 Segments of 16 octets, each bundled with 1,380
/// octets of a message we drop, kept 90 KB alive).
fn held(message: Bytes) -> Bytes {
    Bytes::copy_from_slice(&message)
}
