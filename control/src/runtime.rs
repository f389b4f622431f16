//! The control-plane thread and its link to the poll-mode cores.
//!
//! The cores own TCP (a tcp-lite [`Transport`] each); the control plane owns
//! listeners and every MPA startup. A core's [`CoreLink`] forwards the
//! octets of connections in startup to the control plane and carries out
//! what it answers (send these octets, consume the frame, close), without
//! ever blocking: channels are bounded and polled with `try_*`. When a
//! startup ends, the core gets a [`Handoff`]: the negotiated parameters (ready
//! for `Established::connection`) of a connection whose TCP stream now
//! starts at its first FPDU. Octets past the frame are never consumed by the
//! startup: the core forwards at most one frame's worth it has not consumed,
//! and consumes only what a state machine took.
//!
//! # One control thread, many cores
//!
//! Each core has a bounded channel of its own each way
//! ([`ControlConfig::channel_depth`] messages). Neither side ever waits for
//! the other, and neither drops a message:
//!
//! * **Core to control plane.** What the channel has no room for waits in
//!   the link's backlog, in order, and goes first at the link's next poll;
//!   meanwhile the link forwards no octets. The link refuses an accept
//!   while its backlog holds `startups_max_per_core` messages, so the
//!   backlog holds at most that many Accepted, one Input, and one message
//!   per connection of the core that leaves startup or connects (Connected,
//!   Closed, ConnectFailed): about three messages per startup the core may
//!   hold.
//! * **Control plane to core.** The control thread serves the cores
//!   round-robin, at most [`ROUND_MESSAGES_MAX`] messages of each per
//!   round, so a core that floods it with startups delays another core's
//!   startups by one round's budget, not by the flood. Between rounds it
//!   waits (`crossbeam_channel::Select`) on every core's channel, the
//!   application's commands and the channels it has messages queued for,
//!   up to its next timer: it never spins and never blocks on a core. What
//!   a core's channel has no room for waits in that core's backlog, in
//!   order, and goes first in the next round. Everything the control plane
//!   sends a core is owed to a startup of that core or to the application,
//!   so the startups bound the backlog: per startup at most its frames (a
//!   Request, Reply or Reject, and a Terminate: three Sends), its Done (or,
//!   for an accept beyond `startups_max`, its Refuse), a Consume before
//!   each of those and one more (while the backlog is not empty, the octets
//!   a machine takes are owed to the connection and folded into one
//!   Consume), nine messages in all; plus one heartbeat per core, one
//!   message per listen and two per connect of the application. The
//!   startups a core holds are limited by [`ControlConfig`] (accepts; the
//!   application's own connects are its to bound).
//!
//! # Heartbeat
//!
//! Every [`ControlConfig::heartbeat`] the control thread sends each core a
//! heartbeat (one in flight per core at most); the link answers at its next
//! poll, ahead of its backlog. The answer is a message on the core's own
//! channel, sent from the poll the core runs anyway: it costs nothing per
//! packet, and the core writes no shared state. A core that has not
//! answered for [`ControlConfig::stall_after`] is reported stalled
//! ([`ControlPlane::health`], [`ControlStats::stalls`]) until it answers
//! again.
//!
//! # Limits a peer cannot push past
//!
//! An accept is refused at once (the core aborts the TCP connection) when
//! its core holds [`ControlConfig::startups_max_per_core`] startups (the
//! link refuses it without asking the control plane) or all cores together
//! hold [`ControlConfig::startups_max`] (the control plane refuses it).
//! Peers that connect and never send their MPA Request thus hold at most
//! that many startups, each until its responder's `request_timeout`
//! ([`StartupConfig`]; RFC 5044 §7.1 has the responder time out).
//!
//! # DDP streams over SCTP
//!
//! The same thread runs session establishment of DDP streams (RFC 5043 §6,
//! RFC 6581 §7; [`crate::session`]) for the cores that own SCTP
//! associations. The association stays the core's; a stream in
//! establishment is a [`SessionId`] here. The core's link forwards a
//! peer's first message on a stream ([`CoreLink::initiated_session`],
//! refused at once when no one listens ([`ControlPlane::listen_sessions`])
//! or a startup limit is reached, the same limits as MPA's), its own opens
//! ([`CoreLink::open_session`]) and the stream's messages until it is up;
//! the control plane answers with messages to send and the end
//! ([`SessionAction`]). An established stream comes back with its machine,
//! which the core keeps for the session's Terminate. Per stream the link
//! forwards its first message, at most [`SESSION_INPUTS_MAX`] more and one
//! end, and the control plane sends at most
//! [`crate::session::OUTBOX_MESSAGES_MAX`] messages and its end, so the
//! startups bound both backlogs as above. A stream whose end the core asks
//! while its result is already on the way comes back with that result,
//! which the core then ends itself (a Session Terminate); one gone with its
//! association comes back only if the peer opened it and its result was
//! `Established` (the ULP accepted a stream that never comes up).
//!
//! This module is the crate's one exception to sans-IO (STYLE.md §1.1): it
//! starts a thread and reads the clock. The state machines it drives are in
//! [`crate::mpa`] and [`crate::session`].

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::net::{SocketAddr, SocketAddrV4};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant as StdInstant};

use crossbeam_channel::{bounded, Receiver, Select, Sender, TryRecvError, TrySendError};
use rnic_engine::wire::ddp_session::MESSAGE_LEN_MAX;
use rnic_engine::wire::mpa_rr::{HEADER_LEN, PRIVATE_DATA_LEN_MAX};
use tcp_lite::{ConnId, Event, EventKind, Instant, ListenError, ListenerId, Transport};

use crate::mpa::{
    Accept, Established, FailReason, Failure, Initiator, Outcome, Rejected, Request, Responder,
    StartupConfig,
};
use crate::session::{self, Session, SessionConfig};

/// Which poll-mode core.
pub type CoreId = u16;

/// The default depth of each channel between a core and the control plane
/// (each way), and of the application's command channel.
pub const CHANNEL_DEPTH: usize = 1024;

/// The deepest channel [`ControlConfig::channel_depth`] may ask for.
pub const CHANNEL_DEPTH_MAX: usize = 1 << 20;

/// The most startups [`ControlConfig`] may allow, per core or in all.
pub const STARTUPS_LIMIT: usize = 1 << 20;

/// Messages the control thread takes from one core per round before it
/// serves the next: the budget that keeps one core's flood from starving
/// another core's startups.
pub const ROUND_MESSAGES_MAX: usize = 64;

/// Messages a link forwards per DDP stream in establishment beyond its
/// first (the Initiate, or the core's open): the answer, a Terminate, one
/// announced segment, one to spare. A stream's machine ends at the first
/// message it cannot take, so more would only cost the channel (a peer
/// could flood a stream in establishment); they are dropped.
pub const SESSION_INPUTS_MAX: u8 = 4;

/// Application commands the control thread takes per round.
const ROUND_COMMANDS_MAX: usize = 64;

/// The longest heartbeat period or stall threshold (the clock arithmetic
/// must not overflow; a day is longer than any core should be trusted
/// silent).
const PERIOD_LIMIT: Duration = Duration::from_secs(24 * 3600);

/// How long a connection closing after a failed startup may take to end
/// (its last frame out, the peer's FIN in) before it is reset: a peer that
/// never closes, trickling octets that keep TCP's user timeout from firing,
/// must not hold the connection (and its peer's share of startups) for
/// ever.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(3);

/// Octets a core forwards without the control plane having consumed them:
/// one frame at most, so nothing past a frame ever leaves TCP for it.
pub const FORWARD_MAX: usize = HEADER_LEN + PRIVATE_DATA_LEN_MAX;

/// Settings of the control plane: its channels, its heartbeat and the
/// limits on startups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlConfig {
    /// Messages each channel holds: one each way per core, and the
    /// application's commands. More wait in the sender's backlog (see the
    /// module's docs).
    pub channel_depth: usize,
    /// How often the control plane asks each core whether it still polls.
    pub heartbeat: Duration,
    /// A core that has not answered for this long is reported stalled.
    /// Longer than `heartbeat`: a polling core answers once per period.
    pub stall_after: Duration,
    /// MPA startups one core may hold at once (accepted and active opens);
    /// an accept beyond is refused by the core's link.
    pub startups_max_per_core: usize,
    /// MPA startups all cores may hold at once; an accept beyond is refused
    /// by the control plane.
    pub startups_max: usize,
    /// MPA startups of accepted connections from one peer address (IPv4)
    /// held at once, over all cores; an accept beyond is refused by the
    /// control plane. A peer that opens connections and never sends its
    /// MPA Request holds at most this many places until the Request
    /// timeout, so others still get theirs.
    pub startups_per_peer_max: usize,
}

impl Default for ControlConfig {
    /// Channels of [`CHANNEL_DEPTH`], a heartbeat every 100 ms, a stall
    /// after 1 s, 4096 startups per core and 16384 in all, 2048 of them
    /// from any one peer address: twice what a `bench` client opens at once
    /// (its most QPs; a run's connections may still be closing when the
    /// next opens), and half a core's, so a peer that never sends its
    /// Requests leaves the rest to others (found by a review: the default
    /// let one peer hold every place).
    fn default() -> Self {
        ControlConfig {
            channel_depth: CHANNEL_DEPTH,
            heartbeat: Duration::from_millis(100),
            stall_after: Duration::from_secs(1),
            startups_max_per_core: 4096,
            startups_max: 16384,
            startups_per_peer_max: 2048,
        }
    }
}

impl ControlConfig {
    /// Check the configuration, saying what to fix.
    pub fn validate(&self) -> Result<(), ControlConfigError> {
        if !(1..=CHANNEL_DEPTH_MAX).contains(&self.channel_depth) {
            return Err(ControlConfigError(
                "channel_depth must be 1..=1048576 (CHANNEL_DEPTH_MAX)",
            ));
        }
        if self.heartbeat.is_zero() || self.heartbeat > PERIOD_LIMIT {
            return Err(ControlConfigError(
                "heartbeat must be above zero and at most 24 hours",
            ));
        }
        if self.stall_after <= self.heartbeat || self.stall_after > PERIOD_LIMIT {
            return Err(ControlConfigError(
                "stall_after must be longer than heartbeat and at most 24 hours",
            ));
        }
        for n in [
            self.startups_max_per_core,
            self.startups_max,
            self.startups_per_peer_max,
        ] {
            if !(1..=STARTUPS_LIMIT).contains(&n) {
                return Err(ControlConfigError(
                    "startups_max_per_core, startups_max and startups_per_peer_max must be \
                     1..=1048576 (STARTUPS_LIMIT)",
                ));
            }
        }
        Ok(())
    }
}

/// A [`ControlConfig`] that cannot work; the message says what to fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlConfigError(pub &'static str);

impl fmt::Display for ControlConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid control-plane configuration: {}", self.0)
    }
}

impl std::error::Error for ControlConfigError {}

/// What the ULP answers to an MPA Request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Accept with these values.
    Accept(Accept),
    /// Reject with this private data (TCP stays open for the ULP).
    Reject(Vec<u8>),
}

/// The ULP's accept/reject callback of a listener: the Request (with the
/// peer's private data and, if enhanced, its IRD/ORD) and the peer's address.
pub type OnRequest = Box<dyn FnMut(&Request, SocketAddrV4) -> Decision + Send>;

/// A DDP stream of an SCTP association in session establishment (RFC 5043
/// §6), as the core that owns the association numbers it for the control
/// plane (the association and its streams stay the core's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(pub u64);

/// The ULP's accept/reject callback for DDP streams a peer opens (RFC 5043
/// §6.2-§6.3): the Initiate (the peer's private data and, if enhanced, its
/// IRD/ORD) and the peer's address.
pub type OnInitiate = Box<dyn FnMut(&session::Request, SocketAddr) -> Decision + Send>;

/// How a DDP stream's session establishment ended, as the core hears it.
#[derive(Debug)]
pub enum SessionResult {
    /// Established: connect the stream's QP with `session`. The machine
    /// comes along, up: the core keeps it for the rest of the session (the
    /// peer's Session Terminate, its own; RFC 6581 §7).
    Established {
        /// The negotiated values.
        session: session::Established,
        /// The stream's session machine.
        machine: Box<Session>,
    },
    /// The passive side's ULP rejected it (RFC 5043 §6.3).
    Rejected(session::Rejected),
    /// It failed.
    Failed {
        /// Why.
        failure: session::Failure,
        /// The peer was told, or needs no telling: the machine's own
        /// messages (a Session Terminate, or the peer's own Terminate
        /// ended it) went out before this. `false` when the stream ended
        /// without its machine (the control plane stopped or is gone, or
        /// could not start the machine): the core sends the Session
        /// Terminate ([`session::terminate_message`]).
        told: bool,
    },
}

impl SessionResult {
    /// A stream ended without its machine: the core tells the peer.
    fn untold() -> SessionResult {
        SessionResult::Failed {
            failure: session_local_failure(),
            told: false,
        }
    }
}

/// What the control plane asks of a core's DDP streams, in the order it
/// asks.
#[derive(Debug)]
pub enum SessionAction {
    /// Send `message` with `ppid` on the stream, unordered (RFC 5043 §8).
    Send {
        /// The stream.
        id: SessionId,
        /// 17 for session control, 16 for an RDMAP Terminate segment.
        ppid: u32,
        /// The message.
        message: Vec<u8>,
    },
    /// The stream's establishment ended.
    Done {
        /// The stream.
        id: SessionId,
        /// How.
        result: SessionResult,
    },
}

/// From a core to the control plane (over the core's own channel: the
/// channel says which core).
#[derive(Debug)]
enum ToControl {
    Accepted {
        conn: ConnId,
        listener: ListenerId,
        peer: SocketAddrV4,
    },
    Connected {
        conn: ConnId,
        token: u64,
    },
    ConnectFailed {
        token: u64,
    },
    Input {
        conn: ConnId,
        octets: Vec<u8>,
    },
    Closed {
        conn: ConnId,
    },
    /// The answer to a heartbeat, with the accepts the link refused so far.
    Alive {
        refused: u64,
    },
    /// The core opens a DDP stream: run an initiator.
    SessionOpen {
        id: SessionId,
        peer: SocketAddr,
        config: SessionConfig,
        private_data: Vec<u8>,
    },
    /// A peer opened a DDP stream with this message (PPID `ppid`): run a
    /// responder.
    SessionInitiated {
        id: SessionId,
        peer: SocketAddr,
        ppid: u32,
        message: Vec<u8>,
    },
    /// A message on a stream in establishment (a DDP segment is announced
    /// with no octets: the core holds it).
    SessionInput {
        id: SessionId,
        ppid: u32,
        message: Vec<u8>,
    },
    /// The stream ends: with a Session Terminate (`terminate`), or with its
    /// association (nothing more can go out).
    SessionEnd {
        id: SessionId,
        terminate: bool,
    },
}

/// From the control plane to a core.
#[derive(Debug)]
enum ToCore {
    Listen {
        port: u16,
    },
    Unlisten {
        port: u16,
    },
    Connect {
        remote: SocketAddrV4,
        token: u64,
        /// The DSCP its segments carry from the SYN on (0: unmarked).
        dscp: u8,
    },
    Send {
        conn: ConnId,
        octets: Vec<u8>,
    },
    Consume {
        conn: ConnId,
        octets: usize,
    },
    Done {
        conn: Option<ConnId>,
        token: u64,
        ulp_token: u64,
        result: StartupResult,
    },
    /// An accept beyond `startups_max`: abort the connection.
    Refuse {
        conn: ConnId,
    },
    /// Answer at your next poll.
    Heartbeat,
    /// Take DDP streams peers open (the application listens for them).
    SessionListen,
    /// Send a message on a stream in establishment.
    SessionSend {
        id: SessionId,
        ppid: u32,
        message: Vec<u8>,
    },
    /// A stream's establishment ended, with the machine's last messages
    /// (an Accept, a Reject, a Terminate), which the core takes in the same
    /// poll as the end: an association that ends between the two cannot
    /// leave a stream accepted on the wire but never up here.
    SessionDone {
        id: SessionId,
        last: Vec<(u32, Vec<u8>)>,
        result: SessionResult,
    },
}

impl ToCore {
    /// The connection the message is about, if one.
    fn conn(&self) -> Option<ConnId> {
        match self {
            ToCore::Send { conn, .. }
            | ToCore::Consume { conn, .. }
            | ToCore::Refuse { conn }
            | ToCore::Done {
                conn: Some(conn), ..
            } => Some(*conn),
            ToCore::Listen { .. }
            | ToCore::Unlisten { .. }
            | ToCore::Connect { .. }
            | ToCore::Done { conn: None, .. }
            | ToCore::Heartbeat
            | ToCore::SessionListen
            | ToCore::SessionSend { .. }
            | ToCore::SessionDone { .. } => None,
        }
    }
}

/// How a startup ended, as the core hears it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartupResult {
    /// Full Operation: run a QP with these parameters.
    Established(Established),
    /// Rejected: MPA is left, TCP stays open (the core may hand the
    /// connection to the ULP or close it).
    Rejected(Rejected),
    /// Failed: the core closes the connection once the queued octets (a
    /// Terminate, if any) are sent.
    Failed(Failure),
}

/// A startup that ended, for the core that owns the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handoff {
    /// The TCP connection; on `Established` its next octets are FPDUs. On
    /// `Failed` it is closed (or closing) and released by the link; on
    /// `Rejected` it is the core's to close. `None` when an active open
    /// never connected, when a rejected connection had already closed
    /// (and was released) by the time the startup ended, or when the link
    /// had to abort (and release) it: its last frame did not fit TCP's
    /// send buffer.
    pub conn: Option<ConnId>,
    /// The `connect` token for active opens, 0 for accepted connections.
    pub token: u64,
    /// An accepted connection's [`Accept::ulp_token`](crate::mpa::Accept):
    /// what the ULP named its accept, whether the startup then reached
    /// Full Operation or failed; 0 when the ULP did not accept it (a
    /// Reject, a failure before its decision) and for active opens.
    pub ulp_token: u64,
    /// How it ended.
    pub result: StartupResult,
    /// An accepted connection's local and peer addresses (its four-tuple,
    /// which may be gone from the transport when a startup failed), so
    /// that the application can forget what it prepared for a connection
    /// that will not come (a grant the ULP's accept made); `None` for
    /// active opens.
    pub ends: Option<(SocketAddrV4, SocketAddrV4)>,
    /// The peer had closed its side (FIN) before the handoff: the
    /// transport tells that once, and it told the link, so the core must
    /// start the connection knowing it (the octets before the FIN are
    /// still to be read).
    pub peer_closed: bool,
}

/// A request to the control plane from the application.
enum Command {
    Listen {
        core: CoreId,
        port: u16,
        config: StartupConfig,
        on_request: OnRequest,
    },
    Unlisten {
        core: CoreId,
        port: u16,
    },
    Connect {
        core: CoreId,
        remote: SocketAddrV4,
        config: StartupConfig,
        private_data: Vec<u8>,
        token: u64,
        dscp: u8,
    },
    ListenSessions {
        core: CoreId,
        config: SessionConfig,
        on_initiate: OnInitiate,
    },
    Stop,
}

/// Counters of the control plane.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ControlStats {
    /// Startups that reached Full Operation at the control plane. A core's
    /// link may still fail one at its handoff (its last frame no longer
    /// fits, or the connection closed meanwhile: the handoff says
    /// `Failed`), which this does not take back: count the cores' QPs for
    /// the connections that run.
    pub established: u64,
    /// Startups rejected (either way).
    pub rejected: u64,
    /// Startups that failed (timeouts, bad frames, closes, Terminates).
    pub failed: u64,
    /// Accepts refused for a limit: by the control plane at once, by the
    /// cores' links as of their last heartbeat answer.
    pub refused_startups: u64,
    /// Times a core was seen stalled (no heartbeat answer for
    /// `stall_after`).
    pub stalls: u64,
}

/// How one core is doing, as the control plane sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoreHealth {
    /// The core.
    pub core: CoreId,
    /// Time since the core last answered a heartbeat (since the control
    /// plane started, if it never did).
    pub since_answer: Duration,
    /// No answer for `stall_after`: the core has stopped polling its link.
    /// Cleared when it answers again.
    pub stalled: bool,
    /// Times the core was seen stalled.
    pub stalls: u64,
    /// MPA startups of the core the control plane holds.
    pub startups: usize,
    /// Accepts of the core refused for a limit (the link's as of its last
    /// answer, the control plane's at once).
    pub refused_startups: u64,
    /// Messages for the core waiting for room in its channel.
    pub backlog: usize,
    /// The most that ever waited.
    pub backlog_max: usize,
    /// The core's link was dropped: it is neither polled nor reported
    /// stalled any more.
    pub detached: bool,
}

/// What the control thread publishes for [`ControlPlane::health`] and
/// [`ControlPlane::stats`]; written by the control thread only.
struct Published {
    stats: ControlStats,
    cores: Vec<(StdInstant, CoreHealth)>,
}

/// The control plane: a thread that runs MPA startups for the cores.
pub struct ControlPlane {
    commands: Sender<Command>,
    thread: Option<JoinHandle<ControlStats>>,
    next_token: u64,
    published: Arc<Mutex<Published>>,
    config: ControlConfig,
    /// The cores it serves: `CoreId`s `0..cores`.
    cores: u16,
}

/// A core's end of the control plane. Give it to the core's thread.
pub struct CoreLink {
    core: CoreId,
    to_control: Sender<ToControl>,
    from_control: Receiver<ToCore>,
    /// Messages taken from the control plane per poll (its channel's depth).
    inbound_budget: usize,
    /// Startups this core may hold (`startups_max_per_core`).
    startups_max: usize,
    /// Startups one peer address may hold here (`startups_per_peer_max`).
    per_peer_max: usize,
    /// Accepted connections in startup here, by the peer's address.
    per_peer: HashMap<std::net::Ipv4Addr, usize>,
    /// Ports the control plane stopped listening on (an accept still
    /// queued for one is refused here).
    unlistened: HashSet<u16>,
    /// Connections in startup: octets forwarded but not consumed, and the
    /// octets still to send.
    starting: HashMap<ConnId, Starting>,
    /// Connect tokens of active opens in progress.
    connecting: HashMap<ConnId, u64>,
    /// Ports the control plane listens on through this core.
    listening: HashSet<u16>,
    /// How each listen command ended, for [`CoreLink::listen_status`].
    listen_results: HashMap<u16, Result<(), ListenError>>,
    /// Connections closing after a failed startup: released once the
    /// transport reports their end (so a Terminate queued before the close
    /// still goes out), or reset [`DRAIN_LIMIT`] after the first poll that
    /// saw them. Each still counts against its peer's share and the
    /// core's startups until then.
    draining: HashMap<ConnId, Draining>,
    /// Messages the channel had no room for, retried first, in order.
    backlog: VecDeque<ToControl>,
    /// A heartbeat waits for its answer.
    alive_owed: bool,
    /// Accepts this link refused (its limit, or no control plane).
    refused: u64,
    /// The control plane is gone: no more startups.
    dead: bool,
    handoffs: VecDeque<Handoff>,
    /// Accepted connections that ended during their startup (so
    /// `starting` forgot them): their addresses, until the control plane's
    /// answer to their close names them in a handoff. At most one per
    /// connection handle.
    ended_ends: HashMap<ConnId, (SocketAddrV4, SocketAddrV4)>,
    /// The application listens for DDP streams peers open.
    session_listening: bool,
    /// DDP streams in establishment at the control plane: messages
    /// forwarded for each (beyond its first), whether its end was asked,
    /// and the address of the peer that opened it (counted in `per_peer`).
    sessions: HashMap<SessionId, (u8, bool, Option<std::net::Ipv4Addr>)>,
    next_session: u64,
    session_actions: VecDeque<SessionAction>,
}

/// A connection closing after a failed startup.
#[derive(Debug, Clone, Copy)]
struct Draining {
    /// The first poll that saw it.
    since: Option<Instant>,
    /// Its peer, whose place in `CoreLink::per_peer` it holds (accepted
    /// connections).
    peer: Option<std::net::Ipv4Addr>,
}

#[derive(Debug, Default)]
struct Starting {
    /// An accepted connection's local and peer addresses (the peer's
    /// counted in `CoreLink::per_peer`).
    ends: Option<(SocketAddrV4, SocketAddrV4)>,
    forwarded: usize,
    outgoing: Vec<u8>,
    /// Close after `outgoing` is sent.
    closing: bool,
    /// The peer sent FIN: forward what is left, then tell the control plane.
    peer_closed: bool,
    /// The control plane was told of the FIN (`ToControl::Closed`); the
    /// connection stays here until its answer.
    told_closed: bool,
}

impl ControlPlane {
    /// Starts the control-plane thread for `cores` cores with the default
    /// [`ControlConfig`]; returns it and one [`CoreLink`] per core, in order.
    pub fn start(cores: u16) -> (ControlPlane, Vec<CoreLink>) {
        Self::start_with(ControlConfig::default(), cores)
            .expect("the default control-plane configuration is valid")
    }

    /// Starts the control-plane thread for `cores` cores with `config`;
    /// returns it and one [`CoreLink`] per core, in order.
    // The runtime is the crate's clock (the module's docs).
    #[allow(clippy::disallowed_methods)]
    pub fn start_with(
        config: ControlConfig,
        cores: u16,
    ) -> Result<(ControlPlane, Vec<CoreLink>), ControlConfigError> {
        config.validate()?;
        let depth = config.channel_depth;
        let (commands, command_rx) = bounded(depth);
        let epoch = StdInstant::now();
        let mut slots = Vec::with_capacity(usize::from(cores));
        let mut links = Vec::with_capacity(usize::from(cores));
        for core in 0..cores {
            // Each core its own pair: the link holds the only sender of its
            // inbox and the only receiver of its outbox, so either end sees
            // the other go.
            let (to_control, inbox) = bounded(depth);
            let (outbox, from_control) = bounded(depth);
            slots.push(CoreSlot::new(core, inbox, outbox, epoch));
            links.push(CoreLink::new(core, to_control, from_control, &config));
        }
        let published = Arc::new(Mutex::new(Published {
            stats: ControlStats::default(),
            cores: slots.iter().map(|s| (s.last_answer, s.health())).collect(),
        }));
        let worker = Worker::new(config.clone(), command_rx, slots, published.clone(), epoch);
        let thread = std::thread::Builder::new()
            .name("dpwarp-control".into())
            .spawn(move || worker.run())
            .expect("spawn the control-plane thread");
        let plane = ControlPlane {
            commands,
            thread: Some(thread),
            next_token: 1,
            published,
            config,
            cores,
        };
        Ok((plane, links))
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &ControlConfig {
        &self.config
    }

    /// The cores it serves, `CoreId`s `0..cores()`.
    pub fn cores(&self) -> u16 {
        self.cores
    }

    /// Refuses a core it does not serve: its commands were dropped, and a
    /// connect's result never reached anyone (found by a review).
    fn served(&self, core: CoreId) {
        assert!(
            core < self.cores,
            "core {core} is not served by this control plane: it serves cores 0..{}",
            self.cores
        );
    }

    /// Listens on `port` of `core`'s transport: every accepted connection
    /// runs a responder with `config`, and `on_request` decides. A second
    /// listen on the port replaces the first's `config` and `on_request`
    /// for connections accepted from then on.
    ///
    /// # Panics
    /// If this control plane serves no core `core`.
    pub fn listen(&self, core: CoreId, port: u16, config: StartupConfig, on_request: OnRequest) {
        self.served(core);
        let _ = self.commands.send(Command::Listen {
            core,
            port,
            config,
            on_request,
        });
    }

    /// Stops listening on `port` of `core`'s transport. Connections it
    /// accepted stay (established ones are the core's; those in their MPA
    /// startup fail, their listener's decision gone); a later
    /// [`listen`](Self::listen) on the port starts afresh.
    ///
    /// # Panics
    /// If this control plane serves no core `core`.
    pub fn unlisten(&self, core: CoreId, port: u16) {
        self.served(core);
        let _ = self.commands.send(Command::Unlisten { core, port });
    }

    /// Opens a connection from `core` to `remote` and runs an initiator with
    /// `config` and `private_data`; the handoff carries the returned token.
    ///
    /// # Panics
    /// If this control plane serves no core `core` (no core would ever
    /// hand the result over).
    pub fn connect(
        &mut self,
        core: CoreId,
        remote: SocketAddrV4,
        config: StartupConfig,
        private_data: &[u8],
    ) -> u64 {
        self.connect_marked(core, remote, config, private_data, 0)
    }

    /// [`connect`](Self::connect) with the connection's segments marked
    /// DSCP `dscp` from its SYN on (RFC 2474; 0: unmarked), as an rdma_cm
    /// user sets a connection's TOS before it connects
    /// (`RDMA_OPTION_ID_TOS`): the network, and a peer that takes its
    /// connections' class from their SYN (`Transport::reflect_dscp`), serve
    /// it so from the first segment. A core makes a connection of its
    /// urgent class urgent once established (`dataplane::CoreConfig::urgent_dscp`).
    ///
    /// # Panics
    /// If `dscp` is above 63 (a TOS octet given where its DSCP belongs), or
    /// this control plane serves no core `core`.
    pub fn connect_marked(
        &mut self,
        core: CoreId,
        remote: SocketAddrV4,
        config: StartupConfig,
        private_data: &[u8],
        dscp: u8,
    ) -> u64 {
        assert!(dscp < 64, "a DSCP is six bits: {dscp}");
        self.served(core);
        let token = self.next_token;
        self.next_token += 1;
        let _ = self.commands.send(Command::Connect {
            core,
            remote,
            config,
            private_data: private_data.to_vec(),
            token,
            dscp,
        });
        token
    }

    /// Takes the DDP streams peers open on `core`'s SCTP associations: each
    /// runs a responder with `config` (RFC 5043 §6, RFC 6581 §7) here, and
    /// `on_initiate` decides. Without it, a core answers every Initiate with
    /// a Session Terminate (no ULP, RFC 5043 §6.4).
    ///
    /// # Panics
    /// If this control plane serves no core `core`.
    pub fn listen_sessions(
        &self,
        core: CoreId,
        config: SessionConfig,
        on_initiate: OnInitiate,
    ) -> Result<(), crate::mpa::ConfigError> {
        self.served(core);
        config.validate()?;
        let _ = self.commands.send(Command::ListenSessions {
            core,
            config,
            on_initiate,
        });
        Ok(())
    }

    /// How each core is doing, in core order: readable at any time, from
    /// any thread. The control thread updates it once per round (at least
    /// once per heartbeat); `since_answer` is measured now.
    // The runtime is the crate's clock (the module's docs).
    #[allow(clippy::disallowed_methods)]
    pub fn health(&self) -> Vec<CoreHealth> {
        let now = StdInstant::now();
        let published = lock(&self.published);
        published
            .cores
            .iter()
            .map(|&(last_answer, health)| CoreHealth {
                since_answer: now.saturating_duration_since(last_answer),
                ..health
            })
            .collect()
    }

    /// The counters so far (as of the control thread's last round).
    pub fn stats(&self) -> ControlStats {
        lock(&self.published).stats
    }

    /// Stops the thread and returns its counters.
    pub fn stop(mut self) -> ControlStats {
        self.halt()
    }

    fn halt(&mut self) -> ControlStats {
        let _ = self.commands.send(Command::Stop);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.halt();
        }
    }
}

/// The published state, even if the control thread panicked while holding
/// it (it only ever writes whole values).
fn lock(published: &Mutex<Published>) -> MutexGuard<'_, Published> {
    published.lock().unwrap_or_else(PoisonError::into_inner)
}

impl CoreLink {
    fn new(
        core: CoreId,
        to_control: Sender<ToControl>,
        from_control: Receiver<ToCore>,
        config: &ControlConfig,
    ) -> CoreLink {
        CoreLink {
            core,
            to_control,
            from_control,
            inbound_budget: config.channel_depth,
            startups_max: config.startups_max_per_core,
            per_peer_max: config.startups_per_peer_max,
            per_peer: HashMap::new(),
            ended_ends: HashMap::new(),
            unlistened: HashSet::new(),
            starting: HashMap::new(),
            connecting: HashMap::new(),
            listening: HashSet::new(),
            listen_results: HashMap::new(),
            draining: HashMap::new(),
            backlog: VecDeque::new(),
            alive_owed: false,
            refused: 0,
            dead: false,
            handoffs: VecDeque::new(),
            session_listening: false,
            sessions: HashMap::new(),
            next_session: 0,
            session_actions: VecDeque::new(),
        }
    }

    /// Addresses kept of startups whose connection ended before the
    /// control plane's answer, until that answer ([`Handoff::ends`]): at
    /// most one per connection handle.
    pub fn ends_kept(&self) -> usize {
        self.ended_ends.len()
    }

    /// This core's id.
    pub fn core(&self) -> CoreId {
        self.core
    }

    /// Whether the listen command for `port` has reached this core, and
    /// how it went: `None` until it has (the control plane forwards it),
    /// then the transport's answer, so an application can say "port in
    /// use" instead of waiting for connections that never come.
    pub fn listen_status(&self, port: u16) -> Option<Result<(), ListenError>> {
        self.listen_results.get(&port).copied()
    }

    /// Forgets how the last listen on `port` went: call it before asking
    /// the control plane to listen there again (a reload), so that
    /// [`listen_status`](Self::listen_status) answers for the new listen,
    /// not the old.
    pub fn forget_listen_status(&mut self, port: u16) {
        self.listen_results.remove(&port);
    }

    /// Connections of this core in startup, connecting, or closing after a
    /// failed startup, and DDP streams in session establishment.
    pub fn in_startup(&self) -> usize {
        self.starting.len() + self.connecting.len() + self.draining.len() + self.sessions.len()
    }

    /// Accepts and DDP streams this link refused on its own: beyond
    /// [`ControlConfig::startups_max_per_core`], with no control plane, or
    /// (streams) with no one listening. (Those the control plane refuses,
    /// beyond `startups_max`, are counted there.)
    pub fn refused_startups(&self) -> u64 {
        self.refused
    }

    /// Whether `conn` is the link's (in startup, connecting, or closing).
    pub fn owns(&self, conn: ConnId) -> bool {
        self.starting.contains_key(&conn)
            || self.connecting.contains_key(&conn)
            || self.draining.contains_key(&conn)
    }

    /// Whether one more accepted startup fits: the core holds fewer than
    /// `startups_max_per_core` startups, and the control plane is not
    /// behind by as many messages (which bounds the backlog).
    /// Takes `conn`'s startup off this core's books.
    fn stop_starting(&mut self, conn: ConnId) -> Option<Starting> {
        let state = self.starting.remove(&conn)?;
        if let Some((_, peer)) = state.ends {
            self.give_peer_place(*peer.ip());
        }
        Some(state)
    }

    /// Takes `conn`'s startup off the books to close it: it drains, its
    /// peer's place held until it is released.
    fn start_draining(&mut self, conn: ConnId) -> Option<Starting> {
        let state = self.starting.remove(&conn);
        let peer = state.as_ref().and_then(|s| s.ends).map(|(_, p)| *p.ip());
        self.draining.insert(conn, Draining { since: None, peer });
        state
    }

    /// A draining connection is gone: its peer's place goes back.
    fn stop_draining(&mut self, conn: ConnId) -> bool {
        match self.draining.remove(&conn) {
            Some(d) => {
                if let Some(ip) = d.peer {
                    self.give_peer_place(ip);
                }
                true
            }
            None => false,
        }
    }

    fn has_room(&self) -> bool {
        let held =
            self.starting.len() + self.connecting.len() + self.draining.len() + self.sessions.len();
        !self.dead && held < self.startups_max && self.backlog.len() < self.startups_max
    }

    /// Offers a transport event. Returns `true` if the link took it (a
    /// connection it owns, or an accept on a port the control plane listens
    /// on); other events are the core's.
    pub fn handle_event<T: Transport>(&mut self, transport: &mut T, event: Event) -> bool {
        let conn = event.conn;
        match event.kind {
            EventKind::Accepted(listener) => {
                if self.unlistened.contains(&listener.0) {
                    // Accepted before the listener went (the event was
                    // queued): nobody decides it now; refuse it.
                    let _ = transport.abort(conn);
                    transport.release(conn);
                    self.refused += 1;
                    return true;
                }
                if !self.listening.contains(&listener.0) {
                    return false;
                }
                match transport.endpoints(conn) {
                    Ok((local, peer)) if self.has_room() && self.peer_has_room(*peer.ip()) => {
                        *self.per_peer.entry(*peer.ip()).or_default() += 1;
                        // A handle used again: what an earlier connection
                        // of it left is stale.
                        self.ended_ends.remove(&conn);
                        self.starting.insert(
                            conn,
                            Starting {
                                ends: Some((local, peer)),
                                ..Starting::default()
                            },
                        );
                        self.send(ToControl::Accepted {
                            conn,
                            listener,
                            peer,
                        });
                    }
                    // A limit, no control plane, or no peer address: refuse
                    // at once, before the peer costs anything more.
                    _ => {
                        let _ = transport.abort(conn);
                        transport.release(conn);
                        self.refused += 1;
                    }
                }
                true
            }
            EventKind::Connected => match self.connecting.remove(&conn) {
                Some(token) => {
                    self.starting.insert(conn, Starting::default());
                    self.send(ToControl::Connected { conn, token });
                    true
                }
                None => false,
            },
            EventKind::Readable | EventKind::Writable => self.owns(conn),
            EventKind::PeerClosed => {
                if let Some(state) = self.starting.get_mut(&conn) {
                    // Octets before the FIN (a Reply, a reject) still count:
                    // `poll` forwards them first.
                    state.peer_closed = true;
                    return true;
                }
                self.owns(conn)
            }
            EventKind::Closed | EventKind::Reset | EventKind::TimedOut => {
                self.connection_ended(transport, conn)
            }
        }
    }

    fn connection_ended<T: Transport>(&mut self, transport: &mut T, conn: ConnId) -> bool {
        if self.stop_draining(conn) {
            transport.release(conn);
            return true;
        }
        if let Some(token) = self.connecting.remove(&conn) {
            transport.release(conn);
            self.send(ToControl::ConnectFailed { token });
            return true;
        }
        if let Some(state) = self.stop_starting(conn) {
            self.keep_ends(conn, &state);
            transport.release(conn);
            self.send(ToControl::Closed { conn });
            return true;
        }
        false
    }

    /// A startup's connection ended before the control plane's answer:
    /// its addresses wait for that answer's handoff.
    fn keep_ends(&mut self, conn: ConnId, state: &Starting) {
        if let Some(ends) = state.ends {
            self.ended_ends.insert(conn, ends);
        }
    }

    /// Moves startup octets both ways, carries out the control plane's
    /// answers and answers its heartbeat; never blocks. Call it every loop,
    /// after handling events.
    pub fn poll<T: Transport>(&mut self, transport: &mut T, now: Instant) {
        self.flush_backlog();
        self.take_inbound(|link, message| link.apply(transport, message, now));
        self.answer_heartbeat();
        if self.dead {
            self.abandon(transport);
            return;
        }
        // A connection closing after a failed startup: what the peer still
        // sends is dropped (a bounded amount per poll), so its FIN, and with
        // it the end of the connection, is seen.
        // One that takes longer than `DRAIN_LIMIT` is reset.
        let mut overdue = Vec::new();
        for (&conn, d) in self.draining.iter_mut() {
            let since = *d.since.get_or_insert(now);
            let waited = now.total_micros().saturating_sub(since.total_micros());
            if u128::try_from(waited).is_ok_and(|t| t >= DRAIN_LIMIT.as_micros()) {
                overdue.push(conn);
                continue;
            }
            for _ in 0..4 {
                match transport.recv_with(conn, |data, _| (data.len(), data.len())) {
                    Ok(n) if n > 0 => {}
                    _ => break,
                }
            }
        }
        for conn in overdue {
            self.stop_draining(conn);
            let _ = transport.abort(conn);
            transport.release(conn);
        }
        let conns: Vec<ConnId> = self.starting.keys().copied().collect();
        for conn in conns {
            self.flush(transport, conn);
            if self.backlog.is_empty() {
                self.forward(transport, conn);
            }
        }
    }

    /// Applies the control plane's messages: one channel's worth per poll
    /// (the control plane may refill it meanwhile, and a poll is bounded).
    fn take_inbound(&mut self, mut apply: impl FnMut(&mut Self, ToCore)) {
        for _ in 0..self.inbound_budget {
            match self.from_control.try_recv() {
                Ok(message) => apply(self, message),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    self.dead = true;
                    break;
                }
            }
        }
    }

    /// Sends what the channel had no room for, in order.
    fn flush_backlog(&mut self) {
        while let Some(message) = self.backlog.pop_front() {
            match self.to_control.try_send(message) {
                Ok(()) => {}
                Err(TrySendError::Full(message)) => {
                    self.backlog.push_front(message);
                    break;
                }
                Err(TrySendError::Disconnected(_)) => {
                    self.backlog.clear();
                    self.dead = true;
                }
            }
        }
    }

    /// The answer to a heartbeat goes ahead of the backlog (it says only
    /// that this core polls, so its order does not matter); with no room,
    /// at the next poll.
    fn answer_heartbeat(&mut self) {
        if !self.alive_owed {
            return;
        }
        let refused = self.refused;
        match self.to_control.try_send(ToControl::Alive { refused }) {
            Ok(()) => self.alive_owed = false,
            Err(TrySendError::Full(_)) => {}
            Err(TrySendError::Disconnected(_)) => self.dead = true,
        }
    }

    /// Forwards what the control plane has not seen of `conn`'s octets, or
    /// its close once everything before the peer's FIN was taken.
    fn forward<T: Transport>(&mut self, transport: &mut T, conn: ConnId) {
        let Some(state) = self.starting.get_mut(&conn) else {
            return;
        };
        if state.closing {
            return;
        }
        // Peek: forward what the control plane has not seen, consume
        // nothing (it says how much its frame took).
        let skip = state.forwarded;
        let room = FORWARD_MAX.saturating_sub(skip);
        let peeked = transport.recv_with(conn, |data, _| {
            let fresh = data.get(skip..).unwrap_or(&[]);
            (0, fresh[..fresh.len().min(room)].to_vec())
        });
        match peeked {
            Ok(octets) if !octets.is_empty() => {
                state.forwarded += octets.len();
                self.send(ToControl::Input { conn, octets });
            }
            // Everything before the peer's FIN was forwarded and taken
            // by the state machine: the control plane is told of the
            // close, and the connection stays until its answer, which may
            // be on the way already (a Reply and the handoff, for a
            // Request the machine took whole): a Failed answer closes it,
            // any other goes out before the handoff (which carries the
            // FIN). Closing here dropped a Reply that came after the
            // Consume in its own message (found by a review: with a
            // shallow channel, an accepted startup ended Failed).
            _ if state.peer_closed && state.forwarded == 0 && !state.told_closed => {
                state.told_closed = true;
                self.send(ToControl::Closed { conn });
            }
            _ => {}
        }
    }

    /// Whether a handoff of `conn` waits in [`CoreLink::next_handoff`]'s
    /// queue: its connection is no longer the link's, and not yet the
    /// core's (events about it are the core's to keep for it).
    pub fn hands_off(&self, conn: ConnId) -> bool {
        self.handoffs.iter().any(|h| h.conn == Some(conn))
    }

    /// The next startup that ended.
    pub fn next_handoff(&mut self) -> Option<Handoff> {
        self.handoffs.pop_front()
    }

    /// Moves session messages both ways and answers the heartbeat, for a
    /// core that runs no TCP (an SCTP core); never blocks. A TCP command
    /// reaching such a core fails: a listen reports
    /// [`ListenError::Io`], a connect fails.
    pub fn poll_sessions(&mut self) {
        self.flush_backlog();
        self.take_inbound(Self::apply_without_transport);
        self.answer_heartbeat();
        if self.dead {
            self.abandon_sessions();
        }
    }

    /// Opens a DDP stream to `peer`: the control plane runs its initiator
    /// with `config` and `private_data`; its messages and its end come back
    /// as [`SessionAction`]s. `None` when the control plane is gone.
    pub fn open_session(
        &mut self,
        peer: SocketAddr,
        config: SessionConfig,
        private_data: &[u8],
    ) -> Option<SessionId> {
        if self.dead {
            return None;
        }
        let id = self.new_session(None);
        self.send(ToControl::SessionOpen {
            id,
            peer,
            config,
            private_data: private_data.to_vec(),
        });
        Some(id)
    }

    /// A peer opened a DDP stream with `message` (PPID `ppid`): the control
    /// plane runs its responder and asks the application. `None` (the link
    /// refuses it, counted) when no one listens for streams, this core holds
    /// `startups_max_per_core` startups, the peer's address holds
    /// `startups_per_peer_max` of them (MPA startups and streams together,
    /// so that one peer cannot take every place), or the control plane is
    /// gone: the core answers the Initiate with a Session Terminate itself.
    pub fn initiated_session(
        &mut self,
        peer: SocketAddr,
        ppid: u32,
        message: &[u8],
    ) -> Option<SessionId> {
        let ip = match peer {
            SocketAddr::V4(v4) => Some(*v4.ip()),
            SocketAddr::V6(_) => None,
        };
        let peer_full = ip.is_some_and(|ip| !self.peer_has_room(ip));
        if !self.session_listening || !self.has_room() || peer_full {
            self.refused += 1;
            return None;
        }
        if let Some(ip) = ip {
            *self.per_peer.entry(ip).or_default() += 1;
        }
        let id = self.new_session(ip);
        self.send(ToControl::SessionInitiated {
            id,
            peer,
            ppid,
            message: message.to_vec(),
        });
        Some(id)
    }

    /// A message on stream `id` while it is in establishment. A DDP segment
    /// (PPID 16) is the core's to hold; pass it with no octets, so the
    /// machine sees one came.
    ///
    /// At most [`SESSION_INPUTS_MAX`] messages per stream are forwarded (the
    /// machine has ended by then); more are dropped here.
    pub fn session_input(&mut self, id: SessionId, ppid: u32, message: &[u8]) {
        let Some((inputs, _, _)) = self.sessions.get_mut(&id) else {
            return;
        };
        if *inputs >= SESSION_INPUTS_MAX {
            return;
        }
        *inputs += 1;
        let message = message.to_vec();
        self.send(ToControl::SessionInput { id, ppid, message });
    }

    /// Ends stream `id` while it is in establishment. With `terminate` the
    /// control plane sends a Session Terminate and reports the end, unless
    /// its establishment had ended already: then its result is on the way
    /// (possibly `Established`), and the core must end the stream itself
    /// when it arrives. Asked once; again is a no-op. Without `terminate`,
    /// the stream is gone with its association and nothing more comes back,
    /// but for a stream the peer opened whose establishment had ended
    /// `Established` already: that `Done` still comes (without its
    /// messages), for the ULP that accepted it may hold something the core
    /// gives back then.
    pub fn end_session(&mut self, id: SessionId, terminate: bool) {
        let Some((_, ending, _)) = self.sessions.get_mut(&id) else {
            return;
        };
        if terminate && *ending {
            return;
        }
        *ending = true;
        if !terminate {
            self.forget_session(id);
        }
        self.send(ToControl::SessionEnd { id, terminate });
    }

    /// Whether the application's listen for DDP streams
    /// ([`ControlPlane::listen_sessions`]) has reached this core: until it
    /// has, streams peers open are refused.
    pub fn session_listening(&self) -> bool {
        self.session_listening
    }

    /// DDP streams of this core in establishment.
    pub fn sessions_in_establishment(&self) -> usize {
        self.sessions.len()
    }

    /// The next thing the control plane asks of a stream: messages to send
    /// in order, then its end.
    pub fn next_session_action(&mut self) -> Option<SessionAction> {
        self.session_actions.pop_front()
    }

    fn new_session(&mut self, peer: Option<std::net::Ipv4Addr>) -> SessionId {
        let id = SessionId(self.next_session);
        self.next_session += 1;
        self.sessions.insert(id, (0, false, peer));
        id
    }

    /// Stream `id` is no longer in establishment here: its peer's place
    /// goes back. Whether it was.
    fn forget_session(&mut self, id: SessionId) -> bool {
        let Some((_, _, peer)) = self.sessions.remove(&id) else {
            return false;
        };
        if let Some(ip) = peer {
            self.give_peer_place(ip);
        }
        true
    }

    /// Whether address `ip` holds fewer than `startups_per_peer_max` of
    /// this core's startups (MPA startups and streams together).
    fn peer_has_room(&self, ip: std::net::Ipv4Addr) -> bool {
        self.per_peer.get(&ip).copied().unwrap_or(0) < self.per_peer_max
    }

    /// One of `ip`'s startups ended here: its place goes back.
    fn give_peer_place(&mut self, ip: std::net::Ipv4Addr) {
        if let Some(n) = self.per_peer.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                self.per_peer.remove(&ip);
            }
        }
    }

    /// What the control plane sends about DDP streams (no transport
    /// needed); `false` for the other messages.
    fn apply_session(&mut self, message: &mut Option<ToCore>) -> bool {
        match message.take() {
            Some(ToCore::SessionListen) => self.session_listening = true,
            Some(ToCore::SessionSend { id, ppid, message }) => {
                if self.sessions.contains_key(&id) {
                    let action = SessionAction::Send { id, ppid, message };
                    self.session_actions.push_back(action);
                }
            }
            Some(ToCore::SessionDone { id, last, result }) => {
                if self.forget_session(id) {
                    for (ppid, message) in last {
                        let action = SessionAction::Send { id, ppid, message };
                        self.session_actions.push_back(action);
                    }
                    self.session_actions
                        .push_back(SessionAction::Done { id, result });
                } else if matches!(
                    &result,
                    SessionResult::Established { machine, .. }
                        if matches!(**machine, Session::Responder(_))
                ) {
                    // A stream the peer opened, whose association ended
                    // here (`end_session` without `terminate`) after the ULP
                    // had accepted it (RFC 5043 §6.2-§6.3): the core hears
                    // so, once, to give back what the ULP set aside for it
                    // (a client run's admission waited for a stream that
                    // never comes up). Its last messages have no association
                    // to go on.
                    self.session_actions
                        .push_back(SessionAction::Done { id, result });
                }
            }
            Some(ToCore::Heartbeat) => self.alive_owed = true,
            other => {
                *message = other;
                return false;
            }
        }
        true
    }

    /// A core without TCP: session messages as usual, TCP commands fail.
    fn apply_without_transport(&mut self, message: ToCore) {
        let mut message = Some(message);
        if self.apply_session(&mut message) {
            return;
        }
        match message {
            Some(ToCore::Listen { port }) => {
                self.listen_results.insert(port, Err(ListenError::Io));
            }
            Some(ToCore::Connect { token, .. }) => self.send(ToControl::ConnectFailed { token }),
            Some(ToCore::Done {
                conn: None,
                token,
                ulp_token,
                result,
            }) => self.handoffs.push_back(Handoff {
                conn: None,
                token,
                ulp_token,
                result,
                ends: None,
                peer_closed: false,
            }),
            // About connections this core never had.
            _ => {}
        }
    }

    /// The control plane is gone: every stream in establishment fails.
    fn abandon_sessions(&mut self) {
        let mut ids: Vec<SessionId> = self.sessions.keys().copied().collect();
        ids.sort();
        for id in ids {
            self.forget_session(id);
            let result = SessionResult::untold();
            self.session_actions
                .push_back(SessionAction::Done { id, result });
        }
    }

    fn send(&mut self, message: ToControl) {
        if !self.backlog.is_empty() {
            self.backlog.push_back(message);
            return;
        }
        match self.to_control.try_send(message) {
            Ok(()) => {}
            // Full: keep it, in order; `poll` retries and holds back octets.
            Err(TrySendError::Full(message)) => self.backlog.push_back(message),
            Err(TrySendError::Disconnected(_)) => self.dead = true,
        }
    }

    /// The control plane is gone: every startup of this core fails.
    fn abandon<T: Transport>(&mut self, transport: &mut T) {
        self.abandon_sessions();
        self.per_peer.clear();
        self.ended_ends.clear();
        for (conn, state) in self.starting.drain() {
            let _ = transport.abort(conn);
            transport.release(conn);
            // Whether the ULP had accepted it is the control plane's to
            // know, and it is gone: the handoff names no accept.
            self.handoffs.push_back(Handoff {
                conn: Some(conn),
                token: 0,
                ulp_token: 0,
                result: StartupResult::Failed(local_failure()),
                ends: state.ends,
                peer_closed: false,
            });
        }
        for (conn, token) in self.connecting.drain() {
            let _ = transport.abort(conn);
            transport.release(conn);
            self.handoffs.push_back(Handoff {
                conn: Some(conn),
                token,
                ulp_token: 0,
                result: StartupResult::Failed(local_failure()),
                ends: None,
                peer_closed: false,
            });
        }
    }

    fn flush<T: Transport>(&mut self, transport: &mut T, conn: ConnId) {
        let Some(state) = self.starting.get_mut(&conn) else {
            return;
        };
        while !state.outgoing.is_empty() {
            let pending = &state.outgoing;
            let sent = transport.send_with(conn, pending.len(), |space| {
                space.copy_from_slice(&pending[..space.len()]);
                (space.len(), space.len())
            });
            match sent {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    state.outgoing.drain(..n);
                }
            }
        }
        if state.closing && state.outgoing.is_empty() {
            // An orderly close: what was queued (a Terminate, a Reject) goes
            // out before the FIN; the slot is released when the transport
            // reports the end.
            let _ = transport.close(conn);
            self.start_draining(conn);
        }
    }

    fn apply<T: Transport>(&mut self, transport: &mut T, message: ToCore, now: Instant) {
        let mut message = Some(message);
        if self.apply_session(&mut message) {
            return;
        }
        let Some(message) = message else {
            return;
        };
        match message {
            ToCore::Listen { port } => {
                // A second listen on a port replaces the decision at the
                // control plane; the transport's listener stays (found by a
                // review: the listen was reported `PortInUse` and went on
                // working).
                let result = if self.listening.contains(&port) {
                    Ok(())
                } else {
                    transport.listen(port).map(|_| ())
                };
                if result.is_ok() {
                    self.listening.insert(port);
                    self.unlistened.remove(&port);
                }
                self.listen_results.insert(port, result);
            }
            ToCore::Unlisten { port } => {
                if self.listening.remove(&port) {
                    transport.unlisten(ListenerId(port));
                    self.unlistened.insert(port);
                }
                self.listen_results.remove(&port);
            }
            ToCore::Connect {
                remote,
                token,
                dscp,
            } => match transport.connect_marked(remote, now, dscp) {
                Ok(conn) => {
                    self.connecting.insert(conn, token);
                }
                Err(_) => self.send(ToControl::ConnectFailed { token }),
            },
            ToCore::Send { conn, octets } => {
                if let Some(state) = self.starting.get_mut(&conn) {
                    state.outgoing.extend_from_slice(&octets);
                    self.flush(transport, conn);
                }
            }
            ToCore::Consume { conn, octets } => self.consume(transport, conn, octets),
            ToCore::Done {
                conn: None,
                token,
                ulp_token,
                result,
            } => {
                self.handoffs.push_back(Handoff {
                    conn: None,
                    token,
                    ulp_token,
                    result,
                    ends: None,
                    peer_closed: false,
                });
            }
            ToCore::Done {
                conn: Some(conn),
                token,
                ulp_token,
                result,
            } => self.done(transport, conn, (token, ulp_token), result),
            ToCore::Refuse { conn } => {
                // The accept was beyond the control plane's limit; the core
                // aborts it as it aborts its own refusals.
                if self.stop_starting(conn).is_some() {
                    let _ = transport.abort(conn);
                    transport.release(conn);
                } else {
                    // It ended first and its addresses were kept for an
                    // answer: this is the answer, and it is no handoff.
                    self.ended_ends.remove(&conn);
                }
            }
            ToCore::Heartbeat
            | ToCore::SessionListen
            | ToCore::SessionSend { .. }
            | ToCore::SessionDone { .. } => {}
        }
    }

    fn consume<T: Transport>(&mut self, transport: &mut T, conn: ConnId, octets: usize) {
        let Some(state) = self.starting.get_mut(&conn) else {
            return;
        };
        let mut left = octets;
        while left > 0 {
            match transport.recv_with(conn, |data, _| {
                let n = data.len().min(left);
                (n, n)
            }) {
                Ok(0) | Err(_) => break,
                Ok(n) => left -= n,
            }
        }
        state.forwarded = state.forwarded.saturating_sub(octets);
    }

    /// `tokens`: the connect token and the ULP's accept token.
    fn done<T: Transport>(
        &mut self,
        transport: &mut T,
        conn: ConnId,
        tokens: (u64, u64),
        result: StartupResult,
    ) {
        let (token, ulp_token) = tokens;
        let mut result = result;
        let mut handed = Some(conn);
        let mut peer_closed = false;
        let ends = match self.starting.get(&conn) {
            Some(state) => state.ends,
            None => self.ended_ends.remove(&conn),
        };
        match &result {
            StartupResult::Failed(_) => {
                if let Some(state) = self.starting.get_mut(&conn) {
                    state.closing = true;
                }
                self.flush(transport, conn);
            }
            StartupResult::Established(_) | StartupResult::Rejected(_) => {
                // The frame still queued goes out first; then the
                // connection is the core's.
                self.flush(transport, conn);
                match self.stop_starting(conn) {
                    Some(state) if state.outgoing.is_empty() => peer_closed = state.peer_closed,
                    // No room in TCP for the frame: the core cannot
                    // take over a half-sent frame.
                    // An abort reports nothing more (no Closed or Reset
                    // would ever take it out of `draining`): release now,
                    // as the refusals do.
                    Some(_) => {
                        let _ = transport.abort(conn);
                        transport.release(conn);
                        handed = None;
                        result = StartupResult::Failed(local_failure());
                    }
                    // Closed (and released) meanwhile: a reject
                    // stands (the ULP gets its private data) without
                    // a connection; a connection to run is gone.
                    None if matches!(result, StartupResult::Rejected(_)) => handed = None,
                    None => {
                        result = StartupResult::Failed(Failure {
                            reason: FailReason::PeerClosed,
                            term: None,
                            peer: None,
                            retry_unenhanced: false,
                        });
                    }
                }
            }
        }
        self.handoffs.push_back(Handoff {
            conn: handed,
            token,
            ulp_token,
            result,
            ends,
            peer_closed,
        });
    }
}

/// A startup the control plane runs.
enum Machine {
    Initiator(Initiator),
    Responder(Responder),
}

impl Machine {
    fn poll_timeout(&self) -> Option<Instant> {
        match self {
            Machine::Initiator(m) => m.poll_timeout(),
            Machine::Responder(m) => m.poll_timeout(),
        }
    }

    fn outcome(&self) -> Option<Outcome> {
        match self {
            Machine::Initiator(m) => m.outcome().cloned(),
            Machine::Responder(m) => m.outcome().cloned(),
        }
    }
}

struct Startup {
    machine: Machine,
    token: u64,
    /// Responders: the ULP's [`Accept::ulp_token`](crate::mpa::Accept),
    /// once it accepted; it goes with the handoff however the startup ends.
    ulp_token: u64,
    peer: SocketAddrV4,
    /// The listen that accepted it (`Listener::generation`; responders,
    /// 0 for initiators): its decision, and no later listen's on the port.
    listener: u64,
    /// Initiators: the configuration and private data, for an unenhanced
    /// retry (RFC 6581 §10).
    retry: Option<(StartupConfig, Vec<u8>, u8)>,
}

struct Listener {
    core: CoreId,
    port: u16,
    /// Which listen this is (from 1): a startup it accepted is decided by
    /// it, and fails once it is gone (unlistened or replaced).
    generation: u64,
    config: StartupConfig,
    on_request: OnRequest,
}

/// A DDP stream's session establishment the control plane runs.
struct StreamStartup {
    machine: Session,
    peer: SocketAddr,
}

/// The application's listen for DDP streams on a core.
struct SessionListener {
    core: CoreId,
    config: SessionConfig,
    on_initiate: OnInitiate,
}

/// The control thread's side of one core.
struct CoreSlot {
    core: CoreId,
    inbox: Receiver<ToControl>,
    outbox: Sender<ToCore>,
    /// Messages the core's channel had no room for, oldest first; sent
    /// before anything else (see the module's docs for its bound).
    backlog: VecDeque<ToCore>,
    backlog_max: usize,
    /// Octets machines took from a connection while the backlog was not
    /// empty, owed to the core as one Consume per connection: sent before
    /// any other message about the connection, or once the backlog empties.
    owed: HashMap<ConnId, usize>,
    /// The link was dropped.
    detached: bool,
    heartbeat_in_flight: bool,
    last_answer: StdInstant,
    stalled: bool,
    stalls: u64,
    /// Startups of this core the control plane holds.
    startups: usize,
    /// Accepts the link refused, as of its last answer.
    refused_by_link: u64,
    /// Accepts of this core the control plane refused.
    refused_here: u64,
}

impl CoreSlot {
    fn new(
        core: CoreId,
        inbox: Receiver<ToControl>,
        outbox: Sender<ToCore>,
        now: StdInstant,
    ) -> CoreSlot {
        CoreSlot {
            core,
            inbox,
            outbox,
            backlog: VecDeque::new(),
            backlog_max: 0,
            owed: HashMap::new(),
            detached: false,
            heartbeat_in_flight: false,
            last_answer: now,
            stalled: false,
            stalls: 0,
            startups: 0,
            refused_by_link: 0,
            refused_here: 0,
        }
    }

    /// Queues `message` behind what waits, or sends it; never blocks.
    fn push(&mut self, message: ToCore) {
        if self.detached {
            return;
        }
        if !self.backlog.is_empty() {
            self.backlog.push_back(message);
            self.backlog_max = self.backlog_max.max(self.backlog.len());
            return;
        }
        match self.outbox.try_send(message) {
            Ok(()) => {}
            Err(TrySendError::Full(message)) => {
                self.backlog.push_back(message);
                self.backlog_max = self.backlog_max.max(1);
            }
            Err(TrySendError::Disconnected(_)) => self.detach(),
        }
    }

    /// Sends what waits, in order, as far as the channel has room; then,
    /// once nothing waits, what is owed.
    fn flush(&mut self) {
        while let Some(message) = self.backlog.pop_front() {
            match self.outbox.try_send(message) {
                Ok(()) => {}
                Err(TrySendError::Full(message)) => {
                    self.backlog.push_front(message);
                    return;
                }
                Err(TrySendError::Disconnected(_)) => return self.detach(),
            }
        }
        if !self.owed.is_empty() {
            let mut owed = std::mem::take(&mut self.owed);
            for (conn, octets) in owed.drain() {
                self.push(ToCore::Consume { conn, octets });
            }
            // Keep the map's room for the next time.
            self.owed = owed;
        }
    }

    /// The core's link was dropped: nothing more goes to it.
    fn detach(&mut self) {
        self.detached = true;
        self.backlog = VecDeque::new();
        self.owed = HashMap::new();
        self.heartbeat_in_flight = false;
        self.stalled = false;
    }

    fn health(&self) -> CoreHealth {
        CoreHealth {
            core: self.core,
            since_answer: Duration::ZERO,
            stalled: self.stalled,
            stalls: self.stalls,
            startups: self.startups,
            refused_startups: self.refused_by_link + self.refused_here,
            backlog: self.backlog.len(),
            backlog_max: self.backlog_max,
            detached: self.detached,
        }
    }
}

struct Worker {
    config: ControlConfig,
    commands: Receiver<Command>,
    cores: Vec<CoreSlot>,
    /// The core served first in the next round (round-robin).
    next_core: usize,
    listeners: Vec<Listener>,
    /// Listens made so far (`Listener::generation`).
    listens: u64,
    /// Active opens by token: their startup, private data, peer and DSCP.
    pending_connects: HashMap<u64, (StartupConfig, Vec<u8>, SocketAddrV4, u8)>,
    startups: HashMap<(CoreId, ConnId), Startup>,
    /// Startups of accepted connections held, by the peer's address.
    per_peer: HashMap<std::net::Ipv4Addr, usize>,
    session_listeners: Vec<SessionListener>,
    /// DDP streams in establishment; they count against the same limits
    /// as MPA startups.
    sessions: HashMap<(CoreId, SessionId), StreamStartup>,
    /// No startup's timer is due before this: a lower bound, lowered as
    /// machines move and made exact whenever timers run.
    timer_at: Option<Instant>,
    next_heartbeat: StdInstant,
    epoch: StdInstant,
    stats: ControlStats,
    published: Arc<Mutex<Published>>,
}

impl Worker {
    fn new(
        config: ControlConfig,
        commands: Receiver<Command>,
        cores: Vec<CoreSlot>,
        published: Arc<Mutex<Published>>,
        epoch: StdInstant,
    ) -> Worker {
        Worker {
            next_heartbeat: epoch,
            config,
            commands,
            cores,
            next_core: 0,
            listeners: Vec::new(),
            listens: 0,
            pending_connects: HashMap::new(),
            startups: HashMap::new(),
            per_peer: HashMap::new(),
            session_listeners: Vec::new(),
            sessions: HashMap::new(),
            timer_at: None,
            epoch,
            stats: ControlStats::default(),
            published,
        }
    }

    // The runtime is the crate's clock (the module's docs).
    #[allow(clippy::disallowed_methods)]
    fn clock(&self) -> StdInstant {
        StdInstant::now()
    }

    /// The machines' time: microseconds since the thread's epoch.
    fn instant(&self, at: StdInstant) -> Instant {
        Instant::from_micros(at.saturating_duration_since(self.epoch).as_micros() as i64)
    }

    fn now(&self) -> Instant {
        self.instant(self.clock())
    }

    fn run(mut self) -> ControlStats {
        loop {
            let Some(commands_left) = self.serve_commands() else {
                return self.stop();
            };
            let cores_left = self.serve_cores();
            let now = self.clock();
            self.timers(now);
            self.heartbeats(now);
            self.publish();
            // Work left over from a round's budgets: the next round at once.
            if !commands_left && !cores_left {
                self.wait(now);
            }
        }
    }

    /// Takes up to a round's commands; `None` on Stop (or the application
    /// gone), else whether more wait.
    fn serve_commands(&mut self) -> Option<bool> {
        for _ in 0..ROUND_COMMANDS_MAX {
            match self.commands.try_recv() {
                Ok(Command::Stop) | Err(TryRecvError::Disconnected) => return None,
                Ok(command) => self.command(command),
                Err(TryRecvError::Empty) => return Some(false),
            }
        }
        Some(true)
    }

    /// One round over the cores, starting one further each round; returns
    /// whether a core has messages left over.
    fn serve_cores(&mut self) -> bool {
        let n = self.cores.len();
        let mut left = false;
        for i in 0..n {
            left |= self.serve_core((self.next_core + i) % n);
        }
        if n > 0 {
            self.next_core = (self.next_core + 1) % n;
        }
        left
    }

    /// What waits for core `index` first, then up to [`ROUND_MESSAGES_MAX`]
    /// of its messages; returns whether it may have more.
    fn serve_core(&mut self, index: usize) -> bool {
        self.cores[index].flush();
        let core = self.cores[index].core;
        for _ in 0..ROUND_MESSAGES_MAX {
            let slot = &mut self.cores[index];
            if slot.detached {
                return false;
            }
            match slot.inbox.try_recv() {
                Ok(message) => self.message(core, message),
                Err(TryRecvError::Empty) => return false,
                Err(TryRecvError::Disconnected) => {
                    slot.detach();
                    return false;
                }
            }
        }
        true
    }

    /// Sleeps until a channel has something (a message from a core or the
    /// application, room for a core's backlog) or the next timer: a startup's,
    /// the heartbeat, a core's stall deadline.
    fn wait(&self, now: StdInstant) {
        let mut wake = self.next_heartbeat;
        if let Some(at) = self.timer_at {
            let micros = u64::try_from(at.total_micros()).unwrap_or(0);
            wake = wake.min(self.epoch + Duration::from_micros(micros));
        }
        for slot in self.cores.iter().filter(|s| !s.detached && !s.stalled) {
            wake = wake.min(slot.last_answer + self.config.stall_after);
        }
        let timeout = wake.saturating_duration_since(now);
        if timeout.is_zero() {
            return;
        }
        let mut select = Select::new();
        select.recv(&self.commands);
        for slot in self.cores.iter().filter(|s| !s.detached) {
            select.recv(&slot.inbox);
            if !slot.backlog.is_empty() {
                select.send(&slot.outbox);
            }
        }
        // Which one is ready does not matter: the next round looks at all.
        let _ = select.ready_timeout(timeout);
    }

    /// Runs the machines' timers, if one may be due.
    fn timers(&mut self, now: StdInstant) {
        let now = self.instant(now);
        if self.timer_at.is_none_or(|at| at > now) {
            return;
        }
        let due: Vec<_> = self
            .startups
            .iter()
            .filter(|(_, s)| s.machine.poll_timeout().is_some_and(|at| at <= now))
            .map(|(k, _)| *k)
            .collect();
        for key in due {
            if let Some(s) = self.startups.get_mut(&key) {
                match &mut s.machine {
                    Machine::Initiator(m) => m.handle_timeout(now),
                    Machine::Responder(m) => m.handle_timeout(now),
                }
            }
            self.progress(key);
        }
        let due: Vec<_> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.machine.poll_timeout().is_some_and(|at| at <= now))
            .map(|(k, _)| *k)
            .collect();
        for key in due {
            if let Some(s) = self.sessions.get_mut(&key) {
                s.machine.handle_timeout(now);
            }
            self.progress_session(key);
        }
        self.timer_at = self
            .startups
            .values()
            .filter_map(|s| s.machine.poll_timeout())
            .chain(
                self.sessions
                    .values()
                    .filter_map(|s| s.machine.poll_timeout()),
            )
            .min();
    }

    /// Sends the heartbeat when it is due, and notes the cores that have
    /// not answered for `stall_after`.
    fn heartbeats(&mut self, now: StdInstant) {
        if now >= self.next_heartbeat {
            self.next_heartbeat = now + self.config.heartbeat;
            for slot in self.cores.iter_mut() {
                // One in flight per core: a core that has not answered the
                // last one gets no other (it waits in the backlog at most).
                if !slot.detached && !slot.heartbeat_in_flight {
                    slot.heartbeat_in_flight = true;
                    slot.push(ToCore::Heartbeat);
                }
            }
        }
        for slot in self.cores.iter_mut() {
            let silent = now.saturating_duration_since(slot.last_answer);
            if !slot.detached && !slot.stalled && silent >= self.config.stall_after {
                slot.stalled = true;
                slot.stalls += 1;
                self.stats.stalls += 1;
            }
        }
    }

    /// Publishes the counters and each core's health.
    fn publish(&self) {
        let mut published = lock(&self.published);
        published.stats = self.stats;
        for (out, slot) in published.cores.iter_mut().zip(&self.cores) {
            *out = (slot.last_answer, slot.health());
        }
    }

    /// Ends every startup in flight (the cores close them) and the thread.
    /// What a core's channel has no room for is dropped with the thread: a
    /// link whose control plane is gone aborts every startup it still has.
    fn stop(mut self) -> ControlStats {
        let keys: Vec<_> = self.startups.keys().copied().collect();
        for (core, conn) in keys {
            if let Some(s) = self.release((core, conn)) {
                self.done(
                    core,
                    Some(conn),
                    (s.token, s.ulp_token),
                    StartupResult::Failed(local_failure()),
                );
            }
        }
        let keys: Vec<_> = self.sessions.keys().copied().collect();
        for key in keys {
            if self.release_session(key).is_some() {
                self.session_done(key, SessionResult::untold());
            }
        }
        for slot in self.cores.iter_mut() {
            slot.flush();
        }
        self.publish();
        self.stats
    }

    /// Queues `message` for `core`, behind a Consume owed for the same
    /// connection: a core must have consumed a frame before it takes the
    /// connection over or answers it.
    fn send_to(&mut self, core: CoreId, message: ToCore) {
        let Some(slot) = self.cores.get_mut(usize::from(core)) else {
            return;
        };
        if let Some(conn) = message.conn() {
            if let Some(octets) = slot.owed.remove(&conn) {
                slot.push(ToCore::Consume { conn, octets });
            }
        }
        slot.push(message);
    }

    /// Tells `core` that a machine took `octets` of `conn`. While messages
    /// wait for the core, the octets are owed instead, one Consume per
    /// connection (this is what bounds the backlog by the startups).
    fn consume(&mut self, core: CoreId, conn: ConnId, octets: usize) {
        let Some(slot) = self.cores.get_mut(usize::from(core)) else {
            return;
        };
        if slot.backlog.is_empty() {
            slot.push(ToCore::Consume { conn, octets });
        } else {
            *slot.owed.entry(conn).or_default() += octets;
        }
    }

    /// Holds a startup of `key.0`, counted against the limits.
    fn hold(&mut self, key: (CoreId, ConnId), startup: Startup) {
        self.note_timer(startup.machine.poll_timeout());
        let (passive, peer) = (startup.token == 0, *startup.peer.ip());
        if !self.startups.contains_key(&key) && passive {
            *self.per_peer.entry(peer).or_default() += 1;
        }
        hold_in(&mut self.startups, &mut self.cores, key, startup);
    }

    /// Lets go of a startup.
    fn release(&mut self, key: (CoreId, ConnId)) -> Option<Startup> {
        let startup = release_from(&mut self.startups, &mut self.cores, key)?;
        if startup.token == 0 {
            let ip = *startup.peer.ip();
            if let Some(n) = self.per_peer.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    self.per_peer.remove(&ip);
                }
            }
        }
        Some(startup)
    }

    fn note_timer(&mut self, at: Option<Instant>) {
        if let Some(at) = at {
            self.timer_at = Some(self.timer_at.map_or(at, |t| t.min(at)));
        }
    }

    fn command(&mut self, command: Command) {
        match command {
            Command::Listen {
                core,
                port,
                config,
                on_request,
            } => {
                self.send_to(core, ToCore::Listen { port });
                // A second listen on a port replaces the first's decision
                // (for connections it accepts from now on).
                self.listeners.retain(|l| (l.core, l.port) != (core, port));
                self.listens += 1;
                self.listeners.push(Listener {
                    core,
                    port,
                    generation: self.listens,
                    config,
                    on_request,
                });
            }
            Command::Unlisten { core, port } => {
                self.listeners.retain(|l| (l.core, l.port) != (core, port));
                self.send_to(core, ToCore::Unlisten { port });
            }
            Command::Connect {
                core,
                remote,
                config,
                private_data,
                token,
                dscp,
            } => {
                self.pending_connects
                    .insert(token, (config, private_data, remote, dscp));
                self.send_to(
                    core,
                    ToCore::Connect {
                        remote,
                        token,
                        dscp,
                    },
                );
            }
            Command::ListenSessions {
                core,
                config,
                on_initiate,
            } => {
                self.send_to(core, ToCore::SessionListen);
                self.session_listeners.retain(|l| l.core != core);
                self.session_listeners.push(SessionListener {
                    core,
                    config,
                    on_initiate,
                });
            }
            Command::Stop => {}
        }
    }

    fn message(&mut self, core: CoreId, message: ToControl) {
        match message {
            ToControl::Accepted {
                conn,
                listener,
                peer,
            } => self.accepted(core, conn, listener, peer),
            ToControl::Connected { conn, token } => self.connected(core, conn, token),
            ToControl::ConnectFailed { token } => {
                self.pending_connects.remove(&token);
                let failure = Failure {
                    reason: FailReason::Unreachable,
                    term: None,
                    peer: None,
                    retry_unenhanced: false,
                };
                self.done(core, None, (token, 0), StartupResult::Failed(failure));
            }
            ToControl::Input { conn, octets } => self.input(core, conn, &octets),
            ToControl::Closed { conn } => self.closed(core, conn),
            ToControl::Alive { refused } => self.alive(core, refused),
            ToControl::SessionOpen {
                id,
                peer,
                config,
                private_data,
            } => self.session_open((core, id), peer, config, &private_data),
            ToControl::SessionInitiated {
                id,
                peer,
                ppid,
                message,
            } => self.session_initiated((core, id), peer, ppid, &message),
            ToControl::SessionInput { id, ppid, message } => {
                let now = self.now();
                if let Some(s) = self.sessions.get_mut(&(core, id)) {
                    s.machine.handle_message(now, ppid, &message);
                    self.progress_session((core, id));
                }
            }
            ToControl::SessionEnd { id, terminate } => {
                if terminate {
                    if let Some(s) = self.sessions.get_mut(&(core, id)) {
                        s.machine.terminate();
                        self.progress_session((core, id));
                    }
                } else if self.release_session((core, id)).is_some() {
                    // Gone with its association: the core expects no answer.
                    self.stats.failed += 1;
                }
            }
        }
    }

    /// Holds a stream's establishment, counted against the limits.
    fn hold_session(&mut self, key: (CoreId, SessionId), startup: StreamStartup) {
        self.note_timer(startup.machine.poll_timeout());
        hold_in(&mut self.sessions, &mut self.cores, key, startup);
    }

    fn release_session(&mut self, key: (CoreId, SessionId)) -> Option<StreamStartup> {
        release_from(&mut self.sessions, &mut self.cores, key)
    }

    fn session_open(
        &mut self,
        key: (CoreId, SessionId),
        peer: SocketAddr,
        config: SessionConfig,
        private_data: &[u8],
    ) {
        match session::Initiator::new(config, private_data, self.now()) {
            Ok(m) => {
                let machine = Session::Initiator(m);
                self.hold_session(key, StreamStartup { machine, peer });
                self.progress_session(key);
            }
            Err(_) => self.session_done(key, SessionResult::untold()),
        }
    }

    /// A peer opened a stream. Beyond a limit, or with no one listening,
    /// the Initiate gets a Session Terminate (the non-ULP reject of RFC
    /// 5043 §6.4) at once and nothing is held.
    fn session_initiated(
        &mut self,
        key: (CoreId, SessionId),
        peer: SocketAddr,
        ppid: u32,
        message: &[u8],
    ) {
        let now = self.now();
        let held = self
            .cores
            .get(usize::from(key.0))
            .map_or(0, |slot| slot.startups);
        let over = self.startups.len() + self.sessions.len() >= self.config.startups_max
            || held >= self.config.startups_max_per_core;
        let listener = self.session_listeners.iter().find(|l| l.core == key.0);
        let config = listener.map_or_else(SessionConfig::default, |l| l.config.clone());
        let Ok(responder) = session::Responder::new(config, now) else {
            return self.session_done(key, SessionResult::untold());
        };
        let mut machine = Session::Responder(responder);
        machine.handle_message(now, ppid, message);
        if over || listener.is_none() {
            if over {
                if let Some(slot) = self.cores.get_mut(usize::from(key.0)) {
                    slot.refused_here += 1;
                }
                self.stats.refused_startups += 1;
            }
            if let Session::Responder(r) = &mut machine {
                r.reject_non_ulp();
            }
            return self.finish_session(key, machine);
        }
        self.hold_session(key, StreamStartup { machine, peer });
        self.progress_session(key);
    }

    /// Asks the ULP about an Initiate, sends what the machine has, and
    /// hands over a stream whose establishment ended.
    fn progress_session(&mut self, key: (CoreId, SessionId)) {
        let Some(s) = self.sessions.get_mut(&key) else {
            return;
        };
        if let Session::Responder(m) = &mut s.machine {
            if let (Some(request), None) = (m.request().cloned(), m.outcome()) {
                let decision = self
                    .session_listeners
                    .iter_mut()
                    .find(|l| l.core == key.0)
                    .map(|l| (l.on_initiate)(&request, s.peer));
                let ok = match decision {
                    Some(Decision::Accept(accept)) => m.accept(&accept),
                    Some(Decision::Reject(pd)) => m.reject(&pd),
                    None => {
                        m.reject_non_ulp();
                        Ok(())
                    }
                };
                // The ULP hears what was wrong with its answer, not just
                // that the session failed.
                if let Err(error) = ok {
                    m.fail_decision(error);
                }
            }
        }
        let timer = s.machine.poll_timeout();
        if s.machine.outcome().is_some() {
            if let Some(s) = self.release_session(key) {
                self.finish_session(key, s.machine);
            }
            return;
        }
        let messages = take_messages(&mut s.machine);
        self.note_timer(timer);
        self.send_session_messages(key, messages);
    }

    fn send_session_messages(&mut self, key: (CoreId, SessionId), messages: Vec<(u32, Vec<u8>)>) {
        for (ppid, message) in messages {
            let id = key.1;
            self.send_to(key.0, ToCore::SessionSend { id, ppid, message });
        }
    }

    /// A machine no longer held: its outcome, with its last messages.
    fn finish_session(&mut self, key: (CoreId, SessionId), mut machine: Session) {
        let last = take_messages(&mut machine);
        let result = match machine.outcome().cloned() {
            Some(session::Outcome::Established(session)) => SessionResult::Established {
                session,
                machine: Box::new(machine),
            },
            Some(session::Outcome::Rejected(r)) => SessionResult::Rejected(r),
            Some(session::Outcome::Failed(failure)) => SessionResult::Failed {
                failure,
                told: true,
            },
            None => SessionResult::untold(),
        };
        self.session_done_with(key, last, result);
    }

    fn session_done(&mut self, key: (CoreId, SessionId), result: SessionResult) {
        self.session_done_with(key, Vec::new(), result);
    }

    fn session_done_with(
        &mut self,
        key: (CoreId, SessionId),
        last: Vec<(u32, Vec<u8>)>,
        result: SessionResult,
    ) {
        match &result {
            SessionResult::Established { .. } => self.stats.established += 1,
            SessionResult::Rejected(_) => self.stats.rejected += 1,
            SessionResult::Failed { .. } => self.stats.failed += 1,
        }
        let id = key.1;
        self.send_to(key.0, ToCore::SessionDone { id, last, result });
    }

    /// A heartbeat's answer: the core polls.
    // The runtime is the crate's clock (the module's docs).
    #[allow(clippy::disallowed_methods)]
    fn alive(&mut self, core: CoreId, refused: u64) {
        let Some(slot) = self.cores.get_mut(usize::from(core)) else {
            return;
        };
        slot.heartbeat_in_flight = false;
        slot.last_answer = StdInstant::now();
        slot.stalled = false;
        // The link's count only grows; take what is new.
        self.stats.refused_startups += refused.saturating_sub(slot.refused_by_link);
        slot.refused_by_link = slot.refused_by_link.max(refused);
    }

    fn accepted(&mut self, core: CoreId, conn: ConnId, listener: ListenerId, peer: SocketAddrV4) {
        let held = self
            .cores
            .get(usize::from(core))
            .map_or(0, |slot| slot.startups);
        let from_peer = self.per_peer.get(peer.ip()).copied().unwrap_or(0);
        if self.startups.len() + self.sessions.len() >= self.config.startups_max
            || held >= self.config.startups_max_per_core
            || from_peer >= self.config.startups_per_peer_max
        {
            // Beyond a limit: refused at once, the core aborts it. (The
            // link enforces the per-core limit first; its count is never
            // below ours.)
            if let Some(slot) = self.cores.get_mut(usize::from(core)) {
                slot.refused_here += 1;
            }
            self.stats.refused_startups += 1;
            return self.send_to(core, ToCore::Refuse { conn });
        }
        let now = self.now();
        let config = self
            .listeners
            .iter()
            .find(|l| l.core == core && l.port == listener.0)
            .map(|l| (l.config.clone(), l.generation));
        match config.and_then(|(c, generation)| Some((Responder::new(c, now).ok()?, generation))) {
            Some((m, generation)) => {
                let startup = Startup {
                    machine: Machine::Responder(m),
                    token: 0,
                    ulp_token: 0,
                    peer,
                    listener: generation,
                    retry: None,
                };
                self.hold((core, conn), startup);
            }
            None => self.done(
                core,
                Some(conn),
                (0, 0),
                StartupResult::Failed(local_failure()),
            ),
        }
    }

    fn connected(&mut self, core: CoreId, conn: ConnId, token: u64) {
        let Some((config, private_data, remote, dscp)) = self.pending_connects.remove(&token)
        else {
            return self.done(
                core,
                Some(conn),
                (token, 0),
                StartupResult::Failed(local_failure()),
            );
        };
        let retry = (config.retry_unenhanced && config.enhanced)
            .then(|| (config.clone(), private_data.clone(), dscp));
        match Initiator::new(config, &private_data, self.now()) {
            Ok(m) => {
                let startup = Startup {
                    machine: Machine::Initiator(m),
                    token,
                    ulp_token: 0,
                    peer: remote,
                    listener: 0,
                    retry,
                };
                self.hold((core, conn), startup);
                self.progress((core, conn));
            }
            Err(_) => self.done(
                core,
                Some(conn),
                (token, 0),
                StartupResult::Failed(local_failure()),
            ),
        }
    }

    fn input(&mut self, core: CoreId, conn: ConnId, octets: &[u8]) {
        let now = self.now();
        let Some(s) = self.startups.get_mut(&(core, conn)) else {
            return;
        };
        let taken = match &mut s.machine {
            Machine::Initiator(m) => m.handle_input(octets, now),
            Machine::Responder(m) => m.handle_input(octets, now),
        };
        if taken > 0 {
            self.consume(core, conn, taken);
        }
        self.progress((core, conn));
    }

    fn closed(&mut self, core: CoreId, conn: ConnId) {
        let Some(mut s) = self.release((core, conn)) else {
            return;
        };
        match &mut s.machine {
            Machine::Initiator(m) => m.handle_peer_closed(),
            Machine::Responder(m) => m.handle_peer_closed(),
        }
        let outcome = s.machine.outcome();
        // RFC 6581 §10: an enhanced Request closed unanswered may
        // be retried unenhanced, if the application allows it.
        if let (Some(Outcome::Failed(f)), Some((config, pd, dscp))) = (&outcome, &s.retry) {
            if f.retry_unenhanced {
                let config = StartupConfig {
                    revision: 1,
                    enhanced: false,
                    peer_to_peer: false,
                    retry_unenhanced: false,
                    ..config.clone()
                };
                self.pending_connects
                    .insert(s.token, (config, pd.clone(), s.peer, *dscp));
                let (remote, token, dscp) = (s.peer, s.token, *dscp);
                return self.send_to(
                    core,
                    ToCore::Connect {
                        remote,
                        token,
                        dscp,
                    },
                );
            }
        }
        // The ULP hears how it ended, with RFC 6581 §10's hint
        // that an unenhanced retry may work.
        let result = match outcome {
            Some(Outcome::Failed(f)) => StartupResult::Failed(f),
            Some(Outcome::Rejected(r)) => StartupResult::Rejected(r),
            _ => StartupResult::Failed(Failure {
                reason: FailReason::PeerClosed,
                term: None,
                peer: None,
                retry_unenhanced: false,
            }),
        };
        self.done(core, Some(conn), (s.token, s.ulp_token), result);
    }

    /// Sends what a machine has, asks the ULP about a Request, and ends
    /// finished startups.
    fn progress(&mut self, key: (CoreId, ConnId)) {
        let (core, conn) = key;
        let Some(s) = self.startups.get_mut(&key) else {
            return;
        };
        // The ULP's decision on a Request.
        if let Machine::Responder(m) = &mut s.machine {
            if let Some(request) = m.request().cloned() {
                let (peer, generation) = (s.peer, s.listener);
                // Only the listen that accepted the connection decides: once
                // it is gone (unlistened, or replaced by a later listen on
                // the port), the startup fails, its decision gone, as
                // `ControlPlane::unlisten` says (found by a review: the
                // port's next listener decided it, with the old one's
                // configuration, or with none an MPA Reject went out in the
                // ULP's name).
                let decision = self
                    .listeners
                    .iter_mut()
                    .find(|l| l.generation == generation)
                    .map(|l| (l.on_request)(&request, peer));
                let answered = match decision {
                    // What the ULP prepared for it is named in the handoff
                    // even if the accept fails here (the startup then
                    // fails), so that the ULP can let it go at once.
                    Some(Decision::Accept(accept)) => {
                        s.ulp_token = accept.ulp_token;
                        m.accept(&accept)
                    }
                    Some(Decision::Reject(pd)) => m.reject(&pd),
                    None => {
                        m.fail_local();
                        Ok(())
                    }
                };
                // The ULP hears what was wrong with its answer, not just
                // that the startup failed.
                if let Err(error) = answered {
                    m.fail_decision(error);
                }
            }
        }
        let mut out = Vec::new();
        let mut buf = [0u8; 1024];
        loop {
            let n = match &mut s.machine {
                Machine::Initiator(m) => m.poll_transmit(&mut buf),
                Machine::Responder(m) => m.poll_transmit(&mut buf),
            };
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        let (outcome, timer) = (s.machine.outcome(), s.machine.poll_timeout());
        self.note_timer(timer);
        if !out.is_empty() {
            self.send_to(core, ToCore::Send { conn, octets: out });
        }
        if let Some(outcome) = outcome {
            let tokens = self.release(key).map_or((0, 0), |s| (s.token, s.ulp_token));
            let result = match outcome {
                Outcome::Established(e) => StartupResult::Established(e),
                Outcome::Rejected(r) => StartupResult::Rejected(r),
                Outcome::Failed(f) => StartupResult::Failed(f),
            };
            self.done(core, Some(conn), tokens, result);
        }
    }

    /// `tokens`: the connect token and the ULP's accept token.
    fn done(
        &mut self,
        core: CoreId,
        conn: Option<ConnId>,
        tokens: (u64, u64),
        result: StartupResult,
    ) {
        let (token, ulp_token) = tokens;
        match &result {
            StartupResult::Established(_) => self.stats.established += 1,
            StartupResult::Rejected(_) => self.stats.rejected += 1,
            StartupResult::Failed(_) => self.stats.failed += 1,
        }
        self.send_to(
            core,
            ToCore::Done {
                conn,
                token,
                ulp_token,
                result,
            },
        );
    }
}

/// Puts `value` (an MPA startup or a DDP stream's establishment) in `map`,
/// counted in its core's startups.
fn hold_in<K: Eq + std::hash::Hash, V>(
    map: &mut HashMap<(CoreId, K), V>,
    cores: &mut [CoreSlot],
    key: (CoreId, K),
    value: V,
) {
    let core = key.0;
    if map.insert(key, value).is_none() {
        if let Some(slot) = cores.get_mut(usize::from(core)) {
            slot.startups += 1;
        }
    }
}

/// Takes what [`hold_in`] put in `map`, uncounted.
fn release_from<K: Eq + std::hash::Hash, V>(
    map: &mut HashMap<(CoreId, K), V>,
    cores: &mut [CoreSlot],
    key: (CoreId, K),
) -> Option<V> {
    let value = map.remove(&key)?;
    if let Some(slot) = cores.get_mut(usize::from(key.0)) {
        slot.startups -= 1;
    }
    Some(value)
}

/// The messages a session machine queued, in order (at most
/// [`session::OUTBOX_MESSAGES_MAX`]).
fn take_messages(machine: &mut Session) -> Vec<(u32, Vec<u8>)> {
    let mut out = [0u8; MESSAGE_LEN_MAX];
    let mut messages = Vec::new();
    while let Some(t) = machine.poll_transmit(&mut out) {
        messages.push((t.ppid, out[..t.len].to_vec()));
    }
    messages
}

fn session_local_failure() -> session::Failure {
    session::Failure {
        reason: session::FailReason::Local,
        term: None,
        peer: None,
        retry_unenhanced: false,
    }
}

fn local_failure() -> Failure {
    Failure {
        reason: FailReason::Local,
        term: None,
        peer: None,
        retry_unenhanced: false,
    }
}
