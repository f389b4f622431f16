//! The MPA startup phase (RFC 5044 §7.1) with RFC 6581 enhanced RDMA
//! connection establishment, both roles, sans-IO.
//!
//! Heads up! Read RFC 6581 whole, in particular §9.1 (IRD/ORD), §9.2
//! (peer-to-peer and RTR), §9.3 (the flow) and §10 (interoperability), and
//! RFC 5044 §7.1 (the MPA Request and Reply frames).
//!
//! An [`Initiator`] sends the MPA Request and reads the Reply; a [`Responder`]
//! reads the Request, lets the ULP [`accept`](Responder::accept) or
//! [`reject`](Responder::reject) it, and sends the Reply. Both read octets
//! with `handle_input`, which never consumes an octet past the frame (an
//! FPDU may follow in the same segment), write with `poll_transmit`, and
//! take time as an argument (`handle_timeout`, `poll_timeout`). Memory is
//! bounded: one frame buffer of 532 octets and the private data.
//!
//! The end is an [`Outcome`]: [`Established`] with everything the QP needs
//! (CRC, markers each way, IRD/ORD, the RTR, MPA fencing, stream positions),
//! [`Rejected`] (MPA is left, TCP stays open for the ULP), or [`Failure`]
//! (send what `poll_transmit` still has, a Terminate if the rules call for
//! one, then close TCP).

use core::fmt;

use crate::negotiate::{self, InitiatorLocal, ResponderLocal, Response};
use rnic_engine::mpa::tx::{Framer, TxConfig};
use rnic_engine::qp::term::{TermCause, Terminate, TERMINATE_ULPDU_LEN_MAX};
use rnic_engine::wire::mpa_rr::{
    self, EnhancedRepr, FrameKind, Packet, Repr, HEADER_LEN, PRIVATE_DATA_LEN_MAX,
};
use tcp_lite::{Duration, Instant};

pub use crate::negotiate::{NO_NEGOTIATION, QP_DEPTH_MAX};

/// Which end of the startup this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Sends the MPA Request (the TCP client in RFC 5044).
    Initiator,
    /// Answers it.
    Responder,
}

pub use rnic_engine::qp::{Rtr, RtrSet};

/// What this side wants from the startup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartupConfig {
    /// MPA revision to speak: 1 (RFC 5044) or 2 (RFC 6581).
    pub revision: u8,
    /// Initiator: send enhanced data (S=1, needs revision 2). Responder:
    /// understand it (an unenhanced responder closes on S=1, RFC 6581 §10).
    pub enhanced: bool,
    /// Ask for CRC (C). CRC is used if either side asks.
    pub crc: bool,
    /// Ask for markers in what this side receives (M).
    pub markers: bool,
    /// Initiator: ask for the peer-to-peer model (A).
    pub peer_to_peer: bool,
    /// RTR indications this side can send (initiator) or take (responder).
    pub rtr: RtrSet,
    /// IRD this side offers (initiator) or grants by default (responder).
    pub ird: u16,
    /// ORD this side wants (initiator) or uses by default (responder).
    pub ord: u16,
    /// The most inbound Reads this side can queue: a responder never grants
    /// more, an initiator terminates (2/0/6) if the responder's ORD needs
    /// more.
    pub ird_max: u16,
    /// Responder: how long to wait for the Request (RFC 5044 §7.1: the
    /// responder SHOULD time out).
    pub request_timeout: Duration,
    /// Both: how long the whole startup may take, the ULP's decision included.
    pub startup_timeout: Duration,
    /// Initiator: if the responder closes an enhanced Request unanswered,
    /// try again with RFC 5044's unenhanced startup (revision 1), as RFC
    /// 6581 §10 allows "if this protocol is compatible with the application,
    /// and let the ULP deal with ORD and IRD and peer-to-peer negotiations".
    /// The control-plane runtime does the retry.
    pub retry_unenhanced: bool,
}

impl Default for StartupConfig {
    /// Revision 2, enhanced, CRC, no markers, client-server, every RTR
    /// understood, IRD/ORD 16, 5 s for the Request and 10 s for everything.
    fn default() -> Self {
        StartupConfig {
            revision: mpa_rr::REVISION_2,
            enhanced: true,
            crc: true,
            markers: false,
            peer_to_peer: false,
            rtr: RtrSet::ALL,
            ird: 16,
            ord: 16,
            ird_max: 64,
            request_timeout: Duration::from_secs(5),
            startup_timeout: Duration::from_secs(10),
            retry_unenhanced: false,
        }
    }
}

impl StartupConfig {
    /// Check the configuration for `role` and private data of `pd_len`
    /// octets, saying what to fix.
    pub fn validate(&self, role: Role, pd_len: usize) -> Result<(), ConfigError> {
        if !(1..=2).contains(&self.revision) {
            return Err(ConfigError("revision must be 1 or 2"));
        }
        if self.enhanced && self.revision < 2 {
            return Err(ConfigError(
                "enhanced connection establishment needs revision 2",
            ));
        }
        let room = PRIVATE_DATA_LEN_MAX
            - if self.enhanced && role == Role::Initiator {
                4
            } else {
                0
            };
        if pd_len > room {
            return Err(ConfigError(
                "private data is limited to 512 octets, 508 with enhanced data",
            ));
        }
        for v in [self.ird, self.ord, self.ird_max] {
            if v > NO_NEGOTIATION {
                return Err(ConfigError(
                    "IRD, ORD and ird_max are 14-bit (at most 0x3FFF)",
                ));
            }
        }
        if self.ird != NO_NEGOTIATION && self.ird > self.ird_max {
            return Err(ConfigError("ird must not exceed ird_max"));
        }
        // A QP holds at most QP_DEPTH_MAX: promise no more than that.
        if self.ird_max > QP_DEPTH_MAX || (self.ord != NO_NEGOTIATION && self.ord > QP_DEPTH_MAX) {
            return Err(ConfigError(
                "ird_max and ord must be at most 128 (QP_DEPTH_MAX), or ord 0x3FFF",
            ));
        }
        if self.enhanced && role == Role::Responder && self.rtr.is_empty() {
            // RFC 6581 §9.2: "The responder MUST support at least one RTR
            // indication option if it supports Enhanced RDMA connection
            // establishment."
            return Err(ConfigError(
                "an enhanced responder must take at least one RTR",
            ));
        }
        if self.peer_to_peer && !self.enhanced {
            return Err(ConfigError(
                "the peer-to-peer model needs enhanced connection establishment",
            ));
        }
        if self.peer_to_peer && role == Role::Initiator && self.rtr.is_empty() {
            return Err(ConfigError(
                "the peer-to-peer model needs at least one RTR the initiator can send",
            ));
        }
        if self.request_timeout == Duration::ZERO || self.startup_timeout == Duration::ZERO {
            return Err(ConfigError("timeouts must be above zero"));
        }
        // Added to the clock: unbounded, they overflowed it (a panic with
        // overflow checks, a timeout at once without; found by a review).
        if self.startup_timeout > Duration::from_secs(24 * 3600) {
            return Err(ConfigError("startup_timeout must be at most 24 hours"));
        }
        if self.request_timeout > Duration::from_secs(24 * 3600) {
            return Err(ConfigError("request_timeout must be at most 24 hours"));
        }
        Ok(())
    }
}

impl StartupConfig {
    /// This side's part of the negotiation, as an initiator.
    fn initiator_local(&self) -> InitiatorLocal {
        InitiatorLocal {
            ird: self.ird,
            ord: self.ord,
            ird_max: self.ird_max,
            peer_to_peer: self.peer_to_peer,
            rtr: self.rtr,
        }
    }
}

/// A configuration that cannot work; the message says what to fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConfigError(pub &'static str);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid MPA startup configuration: {}", self.0)
    }
}

impl std::error::Error for ConfigError {}

/// The MPA error codes of Terminates sent during the startup (layer 2 LLP,
/// error type 0 MPA; RFC 6581 §8 adds 5-7 to RFC 5044's 1-4). They are the
/// engine's, from its one Terminate table: `code()` gives layer/type/code.
pub use rnic_engine::qp::term::EstablishmentError as TermCode;

/// The failure that goes with a Terminate of the negotiation.
fn reason_of(code: TermCode) -> FailReason {
    match code {
        TermCode::InsufficientIrd => FailReason::InsufficientIrd,
        TermCode::NoMatchingRtr => FailReason::NoMatchingRtr,
        TermCode::LocalCatastrophic => FailReason::Local,
    }
}

/// Why a startup failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailReason {
    /// The responder's wait for the Request timed out.
    RequestTimeout,
    /// The whole startup timed out.
    StartupTimeout,
    /// The key is neither frame's, or the wrong frame's for this role.
    BadKey,
    /// Both sides sent a Request (RFC 5044's Initiator/Initiator case).
    InitiatorInitiator,
    /// A revision this side does not speak (0, 3, ...; or 2 to a revision-1
    /// side, or a Reply above the Request's).
    BadRevision(u8),
    /// PD_Length above 512.
    PrivateDataTooLong(u16),
    /// A frame that is not well formed otherwise (R set in a Request, S set
    /// with revision 1 or too short for the enhanced data).
    Malformed,
    /// An enhanced Request to a responder that does not do RFC 6581: it
    /// closes, as an unenhanced responder does (RFC 6581 §10).
    EnhancedNotSupported,
    /// An unenhanced Reply to an enhanced Request (RFC 6581 §10: an enhanced
    /// responder MUST reply enhanced).
    ReplyNotEnhanced,
    /// The peer's ORD needs more IRD than this side has, or the responder
    /// rejected for want of IRD (TERM 2/0/6).
    InsufficientIrd,
    /// No RTR both sides support, or a connection model mismatch (TERM 2/0/7).
    NoMatchingRtr,
    /// The peer closed or reset TCP during the startup. An initiator that
    /// sent an enhanced Request may retry unenhanced (RFC 6581 §10).
    PeerClosed,
    /// The ULP or the provider failed locally (TERM 2/0/5).
    Local,
    /// The ULP's answer to the Request could not be sent: its Accept or
    /// Reject broke a rule ([`Responder::accept`]'s and
    /// [`Responder::reject`]'s errors), which the error names. The startup
    /// fails as with [`FailReason::Local`].
    InvalidDecision(ConfigError),
    /// The TCP connection of an active open could not be made (refused,
    /// reset or timed out before the handshake).
    Unreachable,
}

impl fmt::Display for FailReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailReason::RequestTimeout => write!(f, "no MPA Request within the request timeout"),
            FailReason::StartupTimeout => {
                write!(f, "MPA startup did not finish within its timeout")
            }
            FailReason::BadKey => write!(f, "the frame's key is not the expected MPA key"),
            FailReason::InitiatorInitiator => write!(f, "both sides sent an MPA Request"),
            FailReason::BadRevision(r) => write!(f, "MPA revision {r} is not acceptable"),
            FailReason::PrivateDataTooLong(n) => write!(f, "PD_Length {n} exceeds 512"),
            FailReason::Malformed => write!(f, "the MPA frame is malformed"),
            FailReason::EnhancedNotSupported => {
                write!(
                    f,
                    "an enhanced MPA Request reached a responder without RFC 6581"
                )
            }
            FailReason::ReplyNotEnhanced => {
                write!(f, "an enhanced MPA Request got an unenhanced Reply")
            }
            FailReason::InsufficientIrd => write!(f, "insufficient IRD resources"),
            FailReason::NoMatchingRtr => write!(f, "no matching RTR option or connection model"),
            FailReason::PeerClosed => {
                write!(f, "the peer closed the connection during MPA startup")
            }
            FailReason::Local => write!(f, "local failure"),
            FailReason::InvalidDecision(e) => {
                write!(f, "the ULP's answer to the MPA Request is invalid: {}", e.0)
            }
            FailReason::Unreachable => write!(f, "the TCP connection could not be opened"),
        }
    }
}

/// A failed startup: send what `poll_transmit` still returns (the Terminate,
/// if any), then close TCP in order (the runtime's `CoreLink` does both).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Why.
    pub reason: FailReason,
    /// The Terminate queued for the peer, if the rules call for one.
    pub term: Option<TermCode>,
    /// The peer's IRD/ORD, when a Reply carried them (RFC 6581 §9.1: "The
    /// initiator MUST pass the responder provided IRD and ORD to the ULP").
    pub peer: Option<PeerValues>,
    /// Initiator: the peer closed an enhanced Request, so an unenhanced retry
    /// may work (RFC 6581 §10), if the application allows it.
    pub retry_unenhanced: bool,
}

/// IRD and ORD as the peer sent them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerValues {
    /// The peer's IRD.
    pub ird: u16,
    /// The peer's ORD.
    pub ord: u16,
}

/// A rejected startup: MPA is left, TCP stays open for the ULP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    /// The rejecting side's private data (the ULP's part).
    pub private_data: Vec<u8>,
    /// The rejecting side's IRD/ORD, if the Reply was enhanced.
    pub peer: Option<PeerValues>,
}

/// A connection ready for Full Operation: what the QP is configured with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Established {
    /// This side's role.
    pub role: Role,
    /// The revision in use.
    pub revision: u8,
    /// Whether RFC 6581 enhanced data was exchanged.
    pub enhanced: bool,
    /// CRC on (either side set C).
    pub crc: bool,
    /// Markers in what this side sends (the peer set M).
    pub markers_tx: bool,
    /// Markers in what this side receives (this side set M).
    pub markers_rx: bool,
    /// This side's IRD (inbound Read queue depth) as negotiated.
    pub ird: u16,
    /// This side's ORD as negotiated.
    pub ord: u16,
    /// The peer's IRD/ORD as sent (enhanced only), for the ULP.
    pub peer: Option<PeerValues>,
    /// The peer-to-peer model was negotiated.
    pub peer_to_peer: bool,
    /// Initiator, peer-to-peer: the RTR to send before any other FPDU.
    pub rtr: Option<Rtr>,
    /// Responder, peer-to-peer: the RTRs the initiator may send first; the
    /// provider consumes it.
    pub rtr_accept: RtrSet,
    /// Responder: send no FPDU before the first FPDU from the initiator has
    /// arrived and was valid (MPA fencing, RFC 5044 §7.1).
    pub fenced: bool,
    /// The peer's private data (its ULP part).
    pub peer_private_data: Vec<u8>,
    /// Octets this side sent before Full Operation (its frame).
    pub tx_start: u64,
    /// Octets this side received before Full Operation (the peer's frame).
    pub rx_start: u64,
}

impl Established {
    /// A Terminate FPDU with `code`, framed for this connection, for a core
    /// that fails after the handoff (RFC 6581 §9.3: TERM 2/0/5 "before
    /// resetting the connection"). Send it as the connection's first FPDU
    /// (nothing else went out), then close.
    pub fn terminate(&self, code: TermCode) -> Vec<u8> {
        terminate_fpdu(code, self.crc, self.markers_tx)
    }

    /// The engine's connection parameters for a QP of this connection, with
    /// the TCP effective MSS and the longest ULPDU this side takes.
    pub fn connection(&self, emss: usize, ulpdu_max: usize) -> rnic_engine::qp::Connection {
        // 0x3FFF leaves IRD/ORD to the ULP (RFC 6581 §9.1); a QP still
        // needs a bound, so it gets QP_DEPTH_MAX, as does any larger value.
        let depth = |v: u16| v.min(QP_DEPTH_MAX);
        rnic_engine::qp::Connection {
            crc: self.crc,
            markers_tx: self.markers_tx,
            markers_rx: self.markers_rx,
            emss,
            ird: depth(self.ird),
            ord: depth(self.ord),
            ulpdu_max,
            rtr_send: self.rtr,
            rtr_accept: self.rtr_accept,
            fenced: self.fenced,
            terminate_layout: rnic_engine::wire::term::Encoding::Rfc5040,
        }
    }
}

/// How a startup ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Full Operation.
    Established(Established),
    /// Rejected (by the peer for an initiator, by the ULP for a responder).
    Rejected(Rejected),
    /// Failed: close TCP after sending what is queued.
    Failed(Failure),
}

/// Reads one frame, octet-exactly, whatever the cuts.
#[derive(Debug)]
struct FrameReader {
    buf: [u8; HEADER_LEN + PRIVATE_DATA_LEN_MAX],
    len: usize,
}

/// What the reader has.
enum Read {
    /// Needs more octets.
    More,
    /// A whole frame of this many octets is in `buf`.
    Frame(usize),
    /// The header says the frame cannot be accepted.
    Bad(FailReason),
}

impl FrameReader {
    fn new() -> Self {
        FrameReader {
            buf: [0; HEADER_LEN + PRIVATE_DATA_LEN_MAX],
            len: 0,
        }
    }

    /// Takes octets up to the end of the frame; returns octets taken.
    fn feed(&mut self, input: &[u8]) -> (usize, Read) {
        let mut taken = 0;
        loop {
            let want = if self.len < HEADER_LEN {
                HEADER_LEN
            } else {
                // Checked before the private data is read, the key first: a
                // stream that is no MPA frame at all, or announces more than
                // 512 octets, is refused at once, nothing more buffered.
                if Packet::new_unchecked(&self.buf[..HEADER_LEN])
                    .frame_kind()
                    .is_none()
                {
                    return (taken, Read::Bad(FailReason::BadKey));
                }
                let pd = u16::from_be_bytes([self.buf[18], self.buf[19]]);
                if usize::from(pd) > PRIVATE_DATA_LEN_MAX {
                    return (taken, Read::Bad(FailReason::PrivateDataTooLong(pd)));
                }
                HEADER_LEN + usize::from(pd)
            };
            if self.len == want {
                return (taken, Read::Frame(want));
            }
            let n = (want - self.len).min(input.len() - taken);
            if n == 0 {
                return (taken, Read::More);
            }
            self.buf[self.len..self.len + n].copy_from_slice(&input[taken..taken + n]);
            self.len += n;
            taken += n;
        }
    }
}

/// Writes a Terminate FPDU (untagged QN 2, MSN 1, no headers echoed) for a
/// startup error, framed as Full Operation would frame it (RFC 6581 §8). The
/// engine's encoder writes the ULPDU.
fn terminate_fpdu(code: TermCode, crc: bool, markers: bool) -> Vec<u8> {
    let terminate = Terminate::bare(TermCause::Establishment(code), 1);
    let mut ulpdu = [0u8; TERMINATE_ULPDU_LEN_MAX];
    let len = terminate.emit_ulpdu(&mut ulpdu);
    let mut framer = Framer::new(TxConfig {
        crc,
        markers,
        emss: 1460,
    })
    .expect("EMSS 1460 is valid");
    let mut out = vec![0; framer.wire_len(len)];
    let n = framer
        .frame(&[&ulpdu[..len]], &mut out)
        .expect("sized by wire_len");
    out.truncate(n);
    out
}

/// Writes an MPA frame.
fn frame(repr: &Repr<'_>) -> Vec<u8> {
    let mut out = vec![0; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut out[..]));
    out
}

/// Octets waiting to go out.
#[derive(Debug, Default)]
struct Outbox {
    octets: Vec<u8>,
    sent: usize,
}

impl Outbox {
    fn push(&mut self, octets: &[u8]) {
        self.octets.extend_from_slice(octets);
    }

    fn poll(&mut self, out: &mut [u8]) -> usize {
        let n = (self.octets.len() - self.sent).min(out.len());
        out[..n].copy_from_slice(&self.octets[self.sent..self.sent + n]);
        self.sent += n;
        n
    }

    fn is_empty(&self) -> bool {
        self.sent == self.octets.len()
    }
}

/// The initiator's side of the startup.
#[derive(Debug)]
pub struct Initiator {
    config: StartupConfig,
    outbox: Outbox,
    reader: FrameReader,
    deadline: Instant,
    request_len: u64,
    outcome: Option<Outcome>,
}

impl Initiator {
    /// Starts a startup: the Request (with `private_data`) is queued.
    pub fn new(
        config: StartupConfig,
        private_data: &[u8],
        now: Instant,
    ) -> Result<Initiator, ConfigError> {
        config.validate(Role::Initiator, private_data.len())?;
        let enhanced = config
            .enhanced
            .then(|| negotiate::request(&config.initiator_local()));
        let request = frame(&Repr {
            kind: FrameKind::Request,
            markers: config.markers,
            crc: config.crc,
            reject: false,
            reserved: 0,
            revision: config.revision,
            enhanced,
            private_data,
        });
        let mut outbox = Outbox::default();
        outbox.push(&request);
        Ok(Initiator {
            deadline: now + config.startup_timeout,
            request_len: request.len() as u64,
            config,
            outbox,
            reader: FrameReader::new(),
            outcome: None,
        })
    }

    /// Writes queued octets (the Request, later a Terminate) into `out`.
    pub fn poll_transmit(&mut self, out: &mut [u8]) -> usize {
        self.outbox.poll(out)
    }

    /// Whether octets wait for `poll_transmit`.
    pub fn wants_transmit(&self) -> bool {
        !self.outbox.is_empty()
    }

    /// Reads the Reply from `input`; returns the octets consumed, never past
    /// the Reply's last octet.
    pub fn handle_input(&mut self, input: &[u8], now: Instant) -> usize {
        if self.outcome.is_some() {
            return 0;
        }
        self.handle_timeout(now);
        if self.outcome.is_some() {
            return 0;
        }
        let (taken, read) = self.reader.feed(input);
        match read {
            Read::More => {}
            Read::Bad(reason) => self.fail(reason, None, None),
            Read::Frame(len) => self.on_reply(len),
        }
        taken
    }

    /// The ULP or the provider failed: TERM 2/0/5 once the Reply accepted
    /// (RFC 6581 §9.3, see [`Responder::fail_local`]), else just close.
    pub fn fail_local(&mut self) {
        match &self.outcome {
            Some(Outcome::Established(e)) => {
                let term = terminate_fpdu(TermCode::LocalCatastrophic, e.crc, e.markers_tx);
                self.outbox.push(&term);
                self.outcome = Some(Outcome::Failed(Failure {
                    reason: FailReason::Local,
                    term: Some(TermCode::LocalCatastrophic),
                    peer: e.peer,
                    retry_unenhanced: false,
                }));
            }
            Some(_) => {}
            None => self.fail(FailReason::Local, None, None),
        }
    }

    /// The peer closed or reset TCP before the startup ended.
    pub fn handle_peer_closed(&mut self) {
        if self.outcome.is_none() {
            let retry = self.config.enhanced && self.reader.len == 0;
            self.outcome = Some(Outcome::Failed(Failure {
                reason: FailReason::PeerClosed,
                term: None,
                peer: None,
                retry_unenhanced: retry,
            }));
        }
    }

    /// Runs the startup timer.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.outcome.is_none() && now >= self.deadline {
            self.fail(FailReason::StartupTimeout, None, None);
        }
    }

    /// When to call [`handle_timeout`](Initiator::handle_timeout) next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.outcome.is_none().then_some(self.deadline)
    }

    /// How the startup ended, once it has and its octets are sent.
    pub fn outcome(&self) -> Option<&Outcome> {
        self.outcome.as_ref().filter(|_| self.outbox.is_empty())
    }

    fn fail(
        &mut self,
        reason: FailReason,
        term: Option<(TermCode, bool)>,
        peer: Option<PeerValues>,
    ) {
        if let Some((code, markers)) = term {
            // The Reply told us CRC; markers go where the responder asked.
            let crc = self.config.crc || self.reply_crc();
            self.outbox.push(&terminate_fpdu(code, crc, markers));
        }
        self.outcome = Some(Outcome::Failed(Failure {
            reason,
            term: term.map(|(code, _)| code),
            peer,
            retry_unenhanced: false,
        }));
    }

    fn reply_crc(&self) -> bool {
        self.reader.len > 16 && Packet::new_unchecked(&self.reader.buf[..]).crc()
    }

    fn on_reply(&mut self, len: usize) {
        let packet = Packet::new_unchecked(&self.reader.buf[..len]);
        match packet.frame_kind() {
            Some(FrameKind::Reply) => {}
            // RFC 5044: the keys differ, so a Request here means both sides
            // initiated.
            Some(FrameKind::Request) => {
                return self.fail(FailReason::InitiatorInitiator, None, None)
            }
            None => return self.fail(FailReason::BadKey, None, None),
        }
        let revision = packet.revision();
        if revision == 0 || revision > self.config.revision {
            return self.fail(FailReason::BadRevision(revision), None, None);
        }
        let Ok(reply) = Repr::parse(&packet) else {
            return self.fail(FailReason::Malformed, None, None);
        };
        let peer = reply.enhanced.map(|e| PeerValues {
            ird: e.ird,
            ord: e.ord,
        });
        if reply.enhanced.is_some() && (!self.config.enhanced || revision < 2) {
            return self.fail(FailReason::Malformed, None, None);
        }
        if reply.reject {
            // RFC 6581 §9.1: "The initiator MUST pass the responder provided
            // IRD and ORD to the ULP for both MPA Accept and Reject messages."
            self.outcome = Some(Outcome::Rejected(Rejected {
                private_data: reply.private_data.to_vec(),
                peer,
            }));
            return;
        }
        let crc = self.config.crc || reply.crc;
        let markers_tx = reply.markers;
        let mut established = Established {
            role: Role::Initiator,
            revision,
            enhanced: reply.enhanced.is_some(),
            crc,
            markers_tx,
            markers_rx: self.config.markers,
            ird: self.config.ird,
            ord: self.config.ord,
            peer,
            peer_to_peer: false,
            rtr: None,
            rtr_accept: RtrSet::NONE,
            fenced: false,
            peer_private_data: reply.private_data.to_vec(),
            tx_start: self.request_len,
            rx_start: len as u64,
        };
        match (self.config.enhanced, reply.enhanced) {
            // RFC 6581 §10: "an enhanced responder is REQUIRED to respond with
            // an enhanced RDMA connection establishment response".
            (true, None) => return self.fail(FailReason::ReplyNotEnhanced, None, None),
            (false, _) => {}
            (true, Some(e)) => match negotiate::check_reply(&self.config.initiator_local(), &e) {
                Ok(values) => {
                    established.ird = values.ird;
                    established.ord = values.ord;
                    established.peer_to_peer = values.peer_to_peer;
                    established.rtr = values.rtr;
                }
                Err(code) => return self.fail(reason_of(code), Some((code, markers_tx)), peer),
            },
        }
        self.outcome = Some(Outcome::Established(established));
    }
}

/// The responder's view of a Request, for the ULP's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Its revision.
    pub revision: u8,
    /// C.
    pub crc: bool,
    /// M: the initiator wants markers in what it receives.
    pub markers: bool,
    /// The enhanced data, if S=1.
    pub enhanced: Option<EnhancedRepr>,
    /// The ULP's private data.
    pub private_data: Vec<u8>,
}

impl Request {
    /// The initiator's IRD/ORD (RFC 6581 §9.1: "The responder ... MUST pass
    /// the peer's provided IRD and ORD values to the ULP").
    pub fn peer(&self) -> Option<PeerValues> {
        self.enhanced.map(|e| PeerValues {
            ird: e.ird,
            ord: e.ord,
        })
    }
}

/// The ULP's answer to a [`Request`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Accept {
    /// IRD to grant, if not the configured one.
    pub ird: Option<u16>,
    /// ORD to use, if not the configured one.
    pub ord: Option<u16>,
    /// The ULP cannot work with less than this ORD: reject with TERM 2/0/6
    /// if the initiator's IRD is lower (RFC 6581 §9.1).
    pub ord_required: Option<u16>,
    /// Private data for the Reply (or, over SCTP, the Accept).
    pub private_data: Vec<u8>,
    /// The ULP's own name for what this accept prepared (a grant of its
    /// resources), never sent: the runtime hands it back in the startup's
    /// handoff (`runtime::Handoff::ulp_token`), established or failed, so
    /// that the ULP can tell this startup's end from that of a later
    /// connection with the same four-tuple (a client reconnecting from the
    /// same port once the first connection is gone). 0 names nothing. The
    /// machines ignore it, and a DDP stream's session establishment (RFC
    /// 5043) does not carry it.
    pub ulp_token: u64,
}

#[derive(Debug)]
enum ResponderState {
    AwaitRequest,
    AwaitDecision(Request, u64),
    Done,
}

/// The responder's side of the startup.
#[derive(Debug)]
pub struct Responder {
    config: StartupConfig,
    outbox: Outbox,
    reader: FrameReader,
    request_deadline: Instant,
    deadline: Instant,
    state: ResponderState,
    outcome: Option<Outcome>,
}

impl Responder {
    /// Waits for a Request.
    pub fn new(config: StartupConfig, now: Instant) -> Result<Responder, ConfigError> {
        config.validate(Role::Responder, 0)?;
        Ok(Responder {
            request_deadline: now + config.request_timeout,
            deadline: now + config.startup_timeout,
            config,
            outbox: Outbox::default(),
            reader: FrameReader::new(),
            state: ResponderState::AwaitRequest,
            outcome: None,
        })
    }

    /// Reads the Request from `input`; returns the octets consumed, never
    /// past the Request's last octet.
    pub fn handle_input(&mut self, input: &[u8], now: Instant) -> usize {
        self.handle_timeout(now);
        if !matches!(self.state, ResponderState::AwaitRequest) {
            return 0;
        }
        let (taken, read) = self.reader.feed(input);
        match read {
            Read::More => {}
            Read::Bad(reason) => self.fail(reason, None),
            Read::Frame(len) => self.on_request(len),
        }
        taken
    }

    /// The Request, once read, until the ULP decides.
    pub fn request(&self) -> Option<&Request> {
        match &self.state {
            ResponderState::AwaitDecision(request, _) => Some(request),
            _ => None,
        }
    }

    /// The peer closed or reset TCP before the startup ended.
    pub fn handle_peer_closed(&mut self) {
        if self.outcome.is_none() {
            self.state = ResponderState::Done;
            self.outcome = Some(Outcome::Failed(Failure {
                reason: FailReason::PeerClosed,
                term: None,
                peer: None,
                retry_unenhanced: false,
            }));
        }
    }

    /// Runs the request and startup timers.
    pub fn handle_timeout(&mut self, now: Instant) {
        match self.state {
            ResponderState::AwaitRequest if now >= self.request_deadline => {
                self.fail(FailReason::RequestTimeout, None)
            }
            ResponderState::AwaitRequest | ResponderState::AwaitDecision(..)
                if now >= self.deadline =>
            {
                self.fail(FailReason::StartupTimeout, None)
            }
            _ => {}
        }
    }

    /// When to call [`handle_timeout`](Responder::handle_timeout) next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            ResponderState::AwaitRequest => Some(self.request_deadline.min(self.deadline)),
            ResponderState::AwaitDecision(..) => Some(self.deadline),
            ResponderState::Done => None,
        }
    }

    /// Writes queued octets (the Reply, perhaps a Terminate) into `out`.
    pub fn poll_transmit(&mut self, out: &mut [u8]) -> usize {
        self.outbox.poll(out)
    }

    /// Whether octets wait for `poll_transmit`.
    pub fn wants_transmit(&self) -> bool {
        !self.outbox.is_empty()
    }

    /// How the startup ended, once it has and its octets are sent.
    pub fn outcome(&self) -> Option<&Outcome> {
        self.outcome.as_ref().filter(|_| self.outbox.is_empty())
    }

    fn fail(&mut self, reason: FailReason, term: Option<(TermCode, bool, bool)>) {
        if let Some((code, crc, markers)) = term {
            self.outbox.push(&terminate_fpdu(code, crc, markers));
        }
        self.state = ResponderState::Done;
        self.outcome = Some(Outcome::Failed(Failure {
            reason,
            term: term.map(|(code, ..)| code),
            peer: None,
            retry_unenhanced: false,
        }));
    }

    fn on_request(&mut self, len: usize) {
        let packet = Packet::new_unchecked(&self.reader.buf[..len]);
        match packet.frame_kind() {
            Some(FrameKind::Request) => {}
            _ => return self.fail(FailReason::BadKey, None),
        }
        // RFC 5044 §7.1: an unsupported revision is an improperly formatted
        // Request: close. RFC 6581 §6: "A host accepting MPA connections MUST
        // continue to accept MPA Requests with version one".
        let revision = packet.revision();
        if revision == 0 || revision > self.config.revision {
            return self.fail(FailReason::BadRevision(revision), None);
        }
        let Ok(request) = Repr::parse(&packet) else {
            return self.fail(FailReason::Malformed, None);
        };
        // RFC 5044 §7.1.1: R "is set to zero, and not checked on reception
        // in the MPA Request Frame".
        if request.enhanced.is_some() && revision < 2 {
            return self.fail(FailReason::Malformed, None);
        }
        if request.enhanced.is_some() && !self.config.enhanced {
            // RFC 6581 §10: "If the responder receives an enhanced MPA message
            // and it does not support enhanced RDMA connection establishment,
            // it MUST close the TCP connection and exit MPA."
            return self.fail(FailReason::EnhancedNotSupported, None);
        }
        self.state = ResponderState::AwaitDecision(
            Request {
                revision,
                crc: request.crc,
                markers: request.markers,
                enhanced: request.enhanced,
                private_data: request.private_data.to_vec(),
            },
            len as u64,
        );
    }

    fn take_request(&mut self) -> Option<(Request, u64)> {
        match std::mem::replace(&mut self.state, ResponderState::Done) {
            ResponderState::AwaitDecision(request, len) => Some((request, len)),
            other => {
                self.state = other;
                None
            }
        }
    }

    /// Accepts the Request: queues the Reply. The outcome is `Established`
    /// once it is sent, or `Failed` with TERM 2/0/6 when `ord_required`
    /// exceeds the initiator's IRD (the Reply then rejects, carrying the
    /// required ORD).
    pub fn accept(&mut self, accept: &Accept) -> Result<(), ConfigError> {
        let enhanced_len = if self.request().is_some_and(|r| r.enhanced.is_some()) {
            4
        } else {
            0
        };
        if accept.private_data.len() + enhanced_len > PRIVATE_DATA_LEN_MAX {
            return Err(ConfigError(
                "private data is limited to 512 octets, 508 with enhanced data",
            ));
        }
        if [accept.ird, accept.ord, accept.ord_required]
            .into_iter()
            .flatten()
            .any(|v| v > QP_DEPTH_MAX && v != NO_NEGOTIATION)
        {
            return Err(ConfigError(
                "IRD and ORD must be at most 128 (QP_DEPTH_MAX), or 0x3FFF",
            ));
        }
        let Some((request, request_len)) = self.take_request() else {
            return Err(ConfigError("there is no Request to accept"));
        };
        let crc = request.crc || self.config.crc;
        let mut ird = match accept.ird.unwrap_or(self.config.ird) {
            NO_NEGOTIATION => NO_NEGOTIATION,
            ird => ird.min(self.config.ird_max),
        };
        let mut ord = accept.ord.unwrap_or(self.config.ord);
        let mut reply_enhanced = None;
        let mut rtr_accept = RtrSet::NONE;
        let mut peer_to_peer = false;
        if let Some(e) = request.enhanced {
            let local = ResponderLocal {
                ird,
                ord,
                ord_required: accept.ord_required,
                ird_max: self.config.ird_max,
                rtr: self.config.rtr,
            };
            match negotiate::respond(&e, &local) {
                Response::InsufficientIrd(word) => {
                    let reject = frame(&Repr {
                        kind: FrameKind::Reply,
                        markers: self.config.markers,
                        crc,
                        reject: true,
                        reserved: 0,
                        revision: request.revision,
                        enhanced: Some(word),
                        private_data: &accept.private_data,
                    });
                    self.outbox.push(&reject);
                    self.fail(
                        FailReason::InsufficientIrd,
                        Some((TermCode::InsufficientIrd, crc, request.markers)),
                    );
                    return Ok(());
                }
                Response::Accept(values) => {
                    ird = values.ird;
                    ord = values.ord;
                    peer_to_peer = values.peer_to_peer;
                    rtr_accept = values.rtr_accept;
                    reply_enhanced = Some(values.reply);
                }
            }
        }
        let reply = frame(&Repr {
            kind: FrameKind::Reply,
            markers: self.config.markers,
            crc,
            reject: false,
            reserved: 0,
            // RFC 6581 §10: "If the responder receives an unenhanced MPA
            // message ('S' is set to 0), it MUST respond with an unenhanced
            // MPA message."
            revision: request.revision,
            enhanced: reply_enhanced,
            private_data: &accept.private_data,
        });
        self.outbox.push(&reply);
        self.outcome = Some(Outcome::Established(Established {
            role: Role::Responder,
            revision: request.revision,
            enhanced: reply_enhanced.is_some(),
            crc,
            markers_tx: request.markers,
            markers_rx: self.config.markers,
            ird,
            ord,
            peer: request.peer(),
            peer_to_peer,
            rtr: None,
            rtr_accept,
            // RFC 5044 §7.1 (rule 4): the responder sends no FPDU before it
            // received and validated one from the initiator.
            fenced: true,
            peer_private_data: request.private_data,
            tx_start: reply.len() as u64,
            rx_start: request_len,
        }));
        Ok(())
    }

    /// Rejects the Request with `private_data`: queues a Reply with R=1
    /// (enhanced if the Request was, carrying this side's IRD/ORD). The
    /// outcome is `Rejected`; TCP stays open for the ULP.
    pub fn reject(&mut self, private_data: &[u8]) -> Result<(), ConfigError> {
        let enhanced_len = if self.request().is_some_and(|r| r.enhanced.is_some()) {
            4
        } else {
            0
        };
        if private_data.len() + enhanced_len > PRIVATE_DATA_LEN_MAX {
            return Err(ConfigError(
                "private data is limited to 512 octets, 508 with enhanced data",
            ));
        }
        let Some((request, _)) = self.take_request() else {
            return Err(ConfigError("there is no Request to reject"));
        };
        let enhanced = request
            .enhanced
            .map(|e| negotiate::reject(&e, self.config.ird, self.config.ord));
        self.outbox.push(&frame(&Repr {
            kind: FrameKind::Reply,
            markers: self.config.markers,
            crc: request.crc || self.config.crc,
            reject: true,
            reserved: 0,
            revision: request.revision,
            enhanced,
            private_data,
        }));
        self.outcome = Some(Outcome::Rejected(Rejected {
            private_data: private_data.to_vec(),
            peer: None,
        }));
        Ok(())
    }

    /// The ULP or the provider failed. RFC 6581 §9.3: "The initiator or
    /// responder MUST generate the TERM message that contains Layer 2, Error
    /// Type 0, Error Code 5 when it encounters any error locally for which
    /// the special Error Code is not defined in Section 8 before resetting
    /// the connection." Past an accepting Reply that is a Terminate FPDU;
    /// before it, the connection just closes (no FPDU mode yet). A startup
    /// that already failed or was rejected stays as it ended.
    pub fn fail_local(&mut self) {
        self.fail_local_because(FailReason::Local);
    }

    /// The ULP's answer was refused with `error` ([`Responder::accept`],
    /// [`Responder::reject`]) and it has no other: the startup fails as
    /// with [`Responder::fail_local`], its reason
    /// [`FailReason::InvalidDecision`], so that the ULP learns what to fix.
    pub fn fail_decision(&mut self, error: ConfigError) {
        self.fail_local_because(FailReason::InvalidDecision(error));
    }

    fn fail_local_because(&mut self, reason: FailReason) {
        match &self.outcome {
            Some(Outcome::Established(e)) => {
                let term = (TermCode::LocalCatastrophic, e.crc, e.markers_tx);
                self.fail(reason, Some(term));
            }
            Some(_) => {}
            None => self.fail(reason, None),
        }
    }
}
