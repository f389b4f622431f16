//! DDP stream session control over SCTP (RFC 5043 §6) with RFC 6581 §7's
//! enhanced session control, both roles, sans-IO.
//!
//! Heads up! Read RFC 5043 §5-§6 (the PPIDs, the legal sequences, §6.6 on
//! the first DDP segment) and RFC 6581 §7 (enhanced function codes), §9.1
//! (IRD/ORD) and §10 (interoperability) first.
//!
//! One machine per DDP stream (a pair of like-numbered SCTP streams); the
//! association is the caller's. Input: the stream's messages with their
//! PPID (`handle_message`), the association's acknowledgement of the
//! Initiate (`handle_acked`), and time (`handle_timeout`). Output:
//! `poll_transmit` writes the next message (PPID 17 session control, or PPID
//! 16 for the one DDP segment this module writes, an RDMAP Terminate), each
//! to be sent unordered on the stream (RFC 5043 §8).
//!
//! Legal sequences (RFC 5043 §6.2-§6.4; RFC 6581 §7 the same with 5/6/7):
//! Initiate then Accept (accepted), Initiate then Reject (rejected by the
//! ULP), Initiate then Terminate (non-ULP rejected: the passive side could
//! not hand the Initiate to a ULP). An established stream ends with
//! Terminate (RFC 6581 §7: "MUST use the DDP stream session termination
//! function code", enhanced or not).
//!
//! There is no RTR on SCTP: "\[RFC5043\] already supports either side sending
//! the first DDP Message since the Payload Protocol Identifier (PPID) already
//! distinguishes between Session Establishment and DDP Segments" (RFC 6581
//! §7). So an [`Initiator`] always asks the client-server model (A=0), which
//! restricts nothing here, and a [`Responder`] mirrors a foreign initiator's
//! A as RFC 6581 §9.2 requires but expects no RTR.
//!
//! Errors: peer errors end the stream with a Terminate (a Session Terminate,
//! preceded by an RDMAP Terminate segment carrying the layer/type/code once
//! this side had accepted the session); user errors are [`ConfigError`]s;
//! nothing a peer sends panics. Memory is bounded: one received request and
//! at most [`OUTBOX_MESSAGES_MAX`] queued messages of at most 516 octets.
//!
//! DDP-SSN (RFC 5043 §6.1): DDP segments of each direction start at 0
//! ([`Established::ssn_tx_start`], [`Established::ssn_rx_start`]). Session
//! control messages are counted apart, from 0 per direction; the DDP-SSN of
//! a received control message is not checked (the PPID tells the two kinds
//! apart, and each session has at most three control messages per
//! direction).

use core::fmt;

use rnic_engine::qp::term::{EstablishmentError, TermCause, Terminate, TERMINATE_ULPDU_LEN_MAX};
use rnic_engine::qp::RtrSet;
use rnic_engine::wire::ddp_session::{
    FunctionCode, Packet, Repr, MESSAGE_LEN_MAX, PPID_DDP_SEGMENT, PPID_SESSION_CONTROL,
    PRIVATE_DATA_LEN_MAX, ULP_PRIVATE_DATA_LEN_MAX_ENHANCED,
};
use rnic_engine::wire::mpa_rr::EnhancedRepr;
use tcp_lite::{Duration, Instant};

use crate::mpa::{ConfigError, PeerValues};
use crate::negotiate::{
    self, InitiatorLocal, ResponderLocal, Response, NO_NEGOTIATION, QP_DEPTH_MAX,
};

/// Messages a session queues at most: the Initiate or Accept, an RDMAP
/// Terminate segment and a Session Terminate, with one to spare.
pub const OUTBOX_MESSAGES_MAX: usize = 4;

/// What this side wants from session establishment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionConfig {
    /// Initiator: send Enhanced Initiate (RFC 6581 §7). Responder: understand
    /// 5/6/7; an unenhanced responder answers an Enhanced Initiate with
    /// Terminate, as an RFC 5043 peer would.
    pub enhanced: bool,
    /// IRD this side offers (initiator) or grants by default (responder).
    pub ird: u16,
    /// ORD this side wants (initiator) or uses by default (responder).
    pub ord: u16,
    /// The most inbound Reads this side can queue.
    pub ird_max: u16,
    /// Responder: the RTRs it names when a foreign initiator asks the
    /// peer-to-peer model (RFC 6581 §9.2); none is ever expected on SCTP.
    pub rtr: RtrSet,
    /// Initiator: how long to wait for Accept or Reject. Responder: how long
    /// to wait for the Initiate and the ULP's decision.
    pub timeout: Duration,
}

impl Default for SessionConfig {
    /// Enhanced, IRD/ORD 16 of at most 64, every RTR, 10 s.
    fn default() -> Self {
        SessionConfig {
            enhanced: true,
            ird: 16,
            ord: 16,
            ird_max: 64,
            rtr: RtrSet::ALL,
            timeout: Duration::from_secs(10),
        }
    }
}

impl SessionConfig {
    /// Checks the configuration, saying what to fix.
    pub fn validate(&self) -> Result<(), ConfigError> {
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
        if self.ird_max > QP_DEPTH_MAX || (self.ord != NO_NEGOTIATION && self.ord > QP_DEPTH_MAX) {
            return Err(ConfigError(
                "ird_max and ord must be at most 128 (QP_DEPTH_MAX), or ord 0x3FFF",
            ));
        }
        if self.enhanced && self.rtr.is_empty() {
            // RFC 6581 §9.2: "The responder MUST support at least one RTR
            // indication option if it supports Enhanced RDMA connection
            // establishment."
            return Err(ConfigError("an enhanced side must name at least one RTR"));
        }
        if self.timeout == Duration::ZERO || self.timeout > Duration::from_secs(24 * 3600) {
            return Err(ConfigError(
                "timeout must be above zero and at most 24 hours",
            ));
        }
        Ok(())
    }
}

/// Checks the ULP's private data for a message: RFC 6581 §7 "Private Data
/// length MUST NOT exceed 512 bytes in any message, including enhanced RDMA
/// connection establishment data".
fn check_private_data(private_data: &[u8], enhanced: bool) -> Result<(), ConfigError> {
    let max = if enhanced {
        ULP_PRIVATE_DATA_LEN_MAX_ENHANCED
    } else {
        PRIVATE_DATA_LEN_MAX
    };
    if private_data.len() > max {
        return Err(ConfigError(
            "private data is limited to 512 octets, 508 in enhanced messages",
        ));
    }
    Ok(())
}

/// What a peer sent that the rules do not allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Violation {
    /// Shorter than DDP-SSN and Function Code, or an enhanced message
    /// without room for its word.
    Malformed,
    /// A function code outside the registry (0, 8 and above, 0xFFFF).
    UnknownFunction(u16),
    /// Private data over 512 octets (RFC 6581 §7).
    PrivateDataTooLong(usize),
    /// A Terminate with private data (RFC 6581 §7: "MUST NOT").
    TerminateWithPrivateData,
    /// A DDP segment (PPID 16) before the Initiate.
    SegmentBeforeInitiate,
    /// A second Initiate on the stream.
    SecondInitiate,
    /// Both sides sent an Initiate.
    InitiatorInitiator,
    /// A message this role never receives at this point (an Accept to the
    /// passive side, an enhanced answer to a plain Initiate).
    Unexpected(FunctionCode),
    /// A PPID other than 16 and 17 on a DDP stream.
    UnknownPpid(u32),
}

/// Why a session did not get established, or ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailReason {
    /// No Accept or Reject (initiator), or no Initiate or ULP decision
    /// (responder), in time.
    Timeout,
    /// The passive side answered Terminate: no ULP took the Initiate (RFC
    /// 5043 §6.4), or it did not understand an Enhanced Initiate.
    NonUlpRejected,
    /// An Enhanced Initiate reached this unenhanced responder: it answered
    /// Terminate, as an RFC 5043 side does with an unknown function code.
    EnhancedNotSupported,
    /// A plain Accept to an Enhanced Initiate (RFC 6581 §10: "an enhanced
    /// responder is REQUIRED to respond with an enhanced RDMA connection
    /// establishment response").
    ReplyNotEnhanced,
    /// IRD/ORD could not be met (TERM 2/0/6, RFC 6581 §9.1).
    InsufficientIrd,
    /// The connection model did not match (TERM 2/0/7, RFC 6581 §9.2).
    NoMatchingRtr,
    /// The peer broke the rules.
    Violation(Violation),
    /// The peer terminated the session.
    PeerTerminated,
    /// The ULP or the provider failed (TERM 2/0/5, RFC 6581 §9.3).
    Local,
    /// The ULP's answer to the Initiate could not be sent: its Accept or
    /// Reject broke a rule ([`Responder::accept`]'s and
    /// [`Responder::reject`]'s errors), which the error names. The session
    /// fails as with [`FailReason::Local`].
    InvalidDecision(ConfigError),
}

impl fmt::Display for FailReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailReason::Timeout => f.write_str("DDP session establishment timed out"),
            FailReason::NonUlpRejected => f.write_str("the passive side answered Terminate"),
            FailReason::EnhancedNotSupported => {
                f.write_str("an Enhanced Initiate reached an unenhanced responder")
            }
            FailReason::ReplyNotEnhanced => f.write_str("an Enhanced Initiate got a plain Accept"),
            FailReason::InsufficientIrd => f.write_str("insufficient IRD resources"),
            FailReason::NoMatchingRtr => f.write_str("no matching connection model"),
            FailReason::Violation(v) => write!(f, "DDP session protocol violation: {v:?}"),
            FailReason::PeerTerminated => f.write_str("the peer terminated the DDP session"),
            FailReason::Local => f.write_str("local failure"),
            FailReason::InvalidDecision(e) => {
                write!(f, "the ULP's answer to the Initiate is invalid: {}", e.0)
            }
        }
    }
}

/// A session that failed or ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Why.
    pub reason: FailReason,
    /// The Terminate cause from the engine's table. It goes out in an RDMAP
    /// Terminate segment (PPID 16) when this side had accepted the session;
    /// before that only the Session Terminate, which carries no code, goes
    /// out, and the cause is for the local report.
    pub term: Option<TermCause>,
    /// The peer's IRD/ORD, when an enhanced answer carried them.
    pub peer: Option<PeerValues>,
    /// Initiator: the responder answered an Enhanced Initiate with
    /// Terminate, so a plain Initiate may work (RFC 6581 §10: "the initiator
    /// MAY attempt to establish an RDMA connection using the unenhanced ...
    /// protocol ... and let the ULP deal with ORD and IRD").
    pub retry_unenhanced: bool,
}

/// A session rejected by the passive side's ULP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    /// The rejecting ULP's private data.
    pub private_data: Vec<u8>,
    /// The rejecting side's IRD/ORD, if the Reject was enhanced (RFC 6581
    /// §9.1: "pass the responder provided IRD and ORD to the ULP for both
    /// ... Accept and Reject messages").
    pub peer: Option<PeerValues>,
    /// Enhanced Reject (7) rather than Reject (3).
    pub enhanced: bool,
}

/// An established session: what a QP on this DDP stream needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Established {
    /// Whether the enhanced function codes were used.
    pub enhanced: bool,
    /// This side's IRD as negotiated (0x3FFF: left to the ULP).
    pub ird: u16,
    /// This side's ORD as negotiated (0x3FFF: left to the ULP).
    pub ord: u16,
    /// The peer's IRD/ORD as sent (enhanced only).
    pub peer: Option<PeerValues>,
    /// The peer asked the peer-to-peer model and it was mirrored (RFC 6581
    /// §9.2); on SCTP no RTR follows.
    pub peer_to_peer: bool,
    /// DDP-SSN of this side's first DDP segment (RFC 5043 §6.1: 0).
    pub ssn_tx_start: u16,
    /// DDP-SSN of the peer's first DDP segment (0).
    pub ssn_rx_start: u16,
    /// The peer's private data (its ULP part).
    pub peer_private_data: Vec<u8>,
}

impl Established {
    /// The QP's depth for IRD or ORD: 0x3FFF and anything larger give
    /// [`QP_DEPTH_MAX`].
    pub fn depth(value: u16) -> u16 {
        value.min(QP_DEPTH_MAX)
    }
}

/// How a session ended, or that it is up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The session is established.
    Established(Established),
    /// The passive side's ULP rejected it.
    Rejected(Rejected),
    /// Failed or ended.
    Failed(Failure),
}

/// What became of a message given to `handle_message`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// A session control message, taken.
    Taken,
    /// A DDP segment of an established session: the QP's.
    Segment,
    /// A DDP segment that arrived before this side saw the session
    /// established (messages are unordered, RFC 5043 §8): the caller holds
    /// it for the QP or drops it; the session keeps nothing.
    Early,
    /// Dropped: the session is over.
    Ignored,
}

/// The message `poll_transmit` wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Its PPID: 17 for session control, 16 for a DDP segment.
    pub ppid: u32,
    /// Its length in octets.
    pub len: usize,
}

/// Messages waiting to go out, a fixed table.
#[derive(Debug)]
struct Outbox {
    messages: [(u32, usize, [u8; MESSAGE_LEN_MAX]); OUTBOX_MESSAGES_MAX],
    head: usize,
    len: usize,
    control_ssn: u16,
}

impl Outbox {
    fn new() -> Outbox {
        Outbox {
            messages: [(0, 0, [0; MESSAGE_LEN_MAX]); OUTBOX_MESSAGES_MAX],
            head: 0,
            len: 0,
            control_ssn: 0,
        }
    }

    fn slot(&mut self) -> &mut (u32, usize, [u8; MESSAGE_LEN_MAX]) {
        assert!(self.len < OUTBOX_MESSAGES_MAX, "session outbox overflow");
        let at = (self.head + self.len) % OUTBOX_MESSAGES_MAX;
        self.len += 1;
        &mut self.messages[at]
    }

    /// Queues a session control message with the next control DDP-SSN.
    fn control(
        &mut self,
        function: FunctionCode,
        enhanced: Option<EnhancedRepr>,
        private_data: &[u8],
    ) {
        let repr = Repr {
            ssn: self.control_ssn,
            function,
            enhanced,
            private_data,
        };
        self.control_ssn = self.control_ssn.wrapping_add(1);
        let len = repr.buffer_len();
        let slot = self.slot();
        repr.emit(&mut Packet::new_unchecked(&mut slot.2[..len]));
        slot.0 = PPID_SESSION_CONTROL;
        slot.1 = len;
    }

    /// Queues an RDMAP Terminate as the stream's DDP segment numbered
    /// `ssn` (RFC 5043 §6.1: per stream and direction, from 0), then the
    /// engine's Terminate ULPDU (MSN 1: a stream's only Terminate).
    fn terminate_segment(&mut self, ssn: u16, cause: TermCause) {
        const _: () = assert!(2 + TERMINATE_ULPDU_LEN_MAX <= MESSAGE_LEN_MAX);
        let slot = self.slot();
        slot.2[..2].copy_from_slice(&ssn.to_be_bytes());
        let len = 2 + Terminate::bare(cause, 1).emit_ulpdu(&mut slot.2[2..]);
        slot.0 = PPID_DDP_SEGMENT;
        slot.1 = len;
    }

    fn poll(&mut self, out: &mut [u8]) -> Option<Transmit> {
        if self.len == 0 {
            return None;
        }
        let (ppid, len, ref octets) = self.messages[self.head];
        assert!(
            out.len() >= len,
            "poll_transmit needs {MESSAGE_LEN_MAX} octets"
        );
        out[..len].copy_from_slice(&octets[..len]);
        self.head = (self.head + 1) % OUTBOX_MESSAGES_MAX;
        self.len -= 1;
        Some(Transmit { ppid, len })
    }
}

/// A received PPID 17 message, checked: the parsed form or the violation.
/// Writes a Session Terminate (RFC 5043 §6.4, no private data) into `out`
/// and returns its length: for a side that ends a stream without a machine
/// (its machine was never run, or is gone). Its DDP-SSN is 0, which no one
/// checks on a control message (see the module's docs). `None` if `out` is
/// shorter than the 4 octets.
pub fn terminate_message(out: &mut [u8]) -> Option<usize> {
    let repr = Repr {
        ssn: 0,
        function: FunctionCode::Terminate,
        enhanced: None,
        private_data: &[],
    };
    let len = repr.buffer_len();
    repr.emit(&mut Packet::new_unchecked(out.get_mut(..len)?));
    Some(len)
}

fn read_control(message: &[u8]) -> Result<Repr<'_>, Violation> {
    let packet = Packet::new_unchecked(message);
    packet.check_len().map_err(|_| Violation::Malformed)?;
    let function = packet.function_code();
    let len = packet.private_data().len();
    if let FunctionCode::Unknown(code) = function {
        return Err(Violation::UnknownFunction(code));
    }
    if len > PRIVATE_DATA_LEN_MAX {
        return Err(Violation::PrivateDataTooLong(len));
    }
    if function == FunctionCode::Terminate && len > 0 {
        return Err(Violation::TerminateWithPrivateData);
    }
    Repr::parse(&packet).map_err(|_| Violation::Malformed)
}

/// Where a session is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Initiator: Initiate sent (or queued). Responder: waiting for it.
    Opening,
    /// Responder: the Initiate is the ULP's to decide.
    Deciding,
    /// Established.
    Up,
    /// Rejected, failed or ended.
    Done,
}

/// Shared parts of both roles.
#[derive(Debug)]
struct Core {
    config: SessionConfig,
    outbox: Outbox,
    deadline: Instant,
    phase: Phase,
    outcome: Option<Outcome>,
    /// The DDP-SSN of the stream's next DDP segment from this side: 0 until
    /// the QP has sent segments, then as its owner says
    /// ([`Session::set_next_segment_ssn`]).
    segment_ssn: u16,
}

impl Core {
    fn new(config: SessionConfig, now: Instant) -> Core {
        Core {
            deadline: now + config.timeout,
            config,
            outbox: Outbox::new(),
            phase: Phase::Opening,
            outcome: None,
            segment_ssn: 0,
        }
    }

    /// Ends the session with a Session Terminate; once it was accepted on
    /// this side, an RDMAP Terminate with `term` goes first.
    fn fail(&mut self, reason: FailReason, term: Option<TermCause>, peer: Option<PeerValues>) {
        if let (Phase::Up, Some(cause)) = (self.phase, term) {
            self.outbox.terminate_segment(self.segment_ssn, cause);
        }
        self.outbox.control(FunctionCode::Terminate, None, &[]);
        self.end(reason, term, peer, false);
    }

    /// Ends the session without sending anything.
    fn end(
        &mut self,
        reason: FailReason,
        term: Option<TermCause>,
        peer: Option<PeerValues>,
        retry_unenhanced: bool,
    ) {
        self.phase = Phase::Done;
        self.outcome = Some(Outcome::Failed(Failure {
            reason,
            term,
            peer,
            retry_unenhanced,
        }));
    }

    fn violation(&mut self, violation: Violation) {
        self.fail(
            FailReason::Violation(violation),
            Some(TermCause::InvalidSessionControl),
            None,
        );
    }

    /// What every phase does with a DDP segment.
    fn segment(&mut self) -> Input {
        match self.phase {
            Phase::Up => Input::Segment,
            Phase::Done => Input::Ignored,
            Phase::Opening | Phase::Deciding => Input::Early,
        }
    }

    /// A message on an established session: only Terminate is legal.
    fn when_up(&mut self, message: Result<Repr<'_>, Violation>) {
        match message {
            Ok(r) if r.function == FunctionCode::Terminate => {
                self.end(FailReason::PeerTerminated, None, None, false)
            }
            Ok(r)
                if matches!(
                    r.function,
                    FunctionCode::Initiate | FunctionCode::EnhancedInitiate
                ) =>
            {
                self.violation(Violation::SecondInitiate)
            }
            Ok(r) => self.violation(Violation::Unexpected(r.function)),
            Err(v) => self.violation(v),
        }
    }

    fn fail_local(&mut self, reason: FailReason) {
        if self.phase != Phase::Done {
            let term = TermCause::Establishment(EstablishmentError::LocalCatastrophic);
            self.fail(reason, Some(term), None);
        }
    }

    fn terminate(&mut self) {
        if self.phase != Phase::Done {
            self.outbox.control(FunctionCode::Terminate, None, &[]);
            self.end(FailReason::Local, None, None, false);
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        if matches!(self.phase, Phase::Opening | Phase::Deciding) && now >= self.deadline {
            // Tell the peer too, so that a late Initiate or Accept leaves no
            // half-open session behind.
            self.fail(FailReason::Timeout, None, None);
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        matches!(self.phase, Phase::Opening | Phase::Deciding).then_some(self.deadline)
    }
}

/// The active side of one DDP stream.
#[derive(Debug)]
pub struct Initiator {
    core: Core,
    acked: bool,
}

impl Initiator {
    /// Queues the Initiate (Enhanced Initiate if configured) with the ULP's
    /// `private_data` (at most 512 octets, 508 enhanced).
    pub fn new(
        config: SessionConfig,
        private_data: &[u8],
        now: Instant,
    ) -> Result<Initiator, ConfigError> {
        config.validate()?;
        check_private_data(private_data, config.enhanced)?;
        let mut core = Core::new(config, now);
        if core.config.enhanced {
            let word = negotiate::request(&core.initiator_local());
            core.outbox
                .control(FunctionCode::EnhancedInitiate, Some(word), private_data);
        } else {
            core.outbox
                .control(FunctionCode::Initiate, None, private_data);
        }
        Ok(Initiator { core, acked: false })
    }

    /// The association acknowledged the Initiate (its SACK arrived).
    pub fn handle_acked(&mut self) {
        self.acked = true;
    }

    /// Whether the ULP may send DDP segments. RFC 5043 §6.6: the active side
    /// sends no DDP segment before the Initiate is acknowledged or an Accept
    /// arrived, so that none overtakes it. Once acknowledged, segments may
    /// go before the Accept; an enhanced session's negotiated ORD is only
    /// known from the [`Established`] outcome, so Read Requests wait for it.
    pub fn may_send_segments(&self) -> bool {
        match self.core.phase {
            Phase::Up => true,
            Phase::Opening | Phase::Deciding => self.acked,
            Phase::Done => false,
        }
    }

    /// Takes one message of the stream with its PPID.
    pub fn handle_message(&mut self, now: Instant, ppid: u32, message: &[u8]) -> Input {
        self.core.handle_timeout(now);
        match ppid {
            PPID_SESSION_CONTROL => {}
            PPID_DDP_SEGMENT => return self.core.segment(),
            other => {
                if self.core.phase != Phase::Done {
                    self.core.violation(Violation::UnknownPpid(other));
                }
                return Input::Ignored;
            }
        }
        let message = read_control(message);
        match self.core.phase {
            Phase::Opening | Phase::Deciding => self.on_answer(message),
            Phase::Up => self.core.when_up(message),
            Phase::Done => return Input::Ignored,
        }
        Input::Taken
    }

    fn on_answer(&mut self, message: Result<Repr<'_>, Violation>) {
        let repr = match message {
            Ok(repr) => repr,
            Err(v) => return self.core.violation(v),
        };
        let enhanced = self.core.config.enhanced;
        let peer = repr.enhanced.map(|e| PeerValues {
            ird: e.ird,
            ord: e.ord,
        });
        match repr.function {
            FunctionCode::Accept if enhanced => self.core.fail(
                FailReason::ReplyNotEnhanced,
                Some(TermCause::InvalidSessionControl),
                None,
            ),
            FunctionCode::Accept => {
                self.establish(self.core.config.ird, self.core.config.ord, &repr)
            }
            FunctionCode::EnhancedAccept if enhanced => {
                let word = repr.enhanced.unwrap_or_default();
                match negotiate::check_reply(&self.core.initiator_local(), &word) {
                    Ok(values) => self.establish(values.ird, values.ord, &repr),
                    Err(code) => {
                        // The peer accepted: the stream is up on its side, so
                        // the TERM with the code goes out as a segment first
                        // (RFC 6581 §9.1, §9.2 "MUST send a TERM message").
                        self.core.phase = Phase::Up;
                        let reason = match code {
                            EstablishmentError::InsufficientIrd => FailReason::InsufficientIrd,
                            EstablishmentError::NoMatchingRtr => FailReason::NoMatchingRtr,
                            EstablishmentError::LocalCatastrophic => FailReason::Local,
                        };
                        self.core
                            .fail(reason, Some(TermCause::Establishment(code)), peer);
                    }
                }
            }
            // RFC 5043 §6.3, RFC 6581 §7: rejected by the ULP. Either Reject
            // is taken as one, whichever Initiate went out.
            FunctionCode::Reject | FunctionCode::EnhancedReject => {
                self.core.phase = Phase::Done;
                self.core.outcome = Some(Outcome::Rejected(Rejected {
                    private_data: repr.private_data.to_vec(),
                    peer,
                    enhanced: repr.function == FunctionCode::EnhancedReject,
                }));
            }
            // RFC 5043 §6.4: non-ULP rejected. After an Enhanced Initiate it
            // may also be an RFC 5043 responder that does not know code 5.
            FunctionCode::Terminate => {
                self.core
                    .end(FailReason::NonUlpRejected, None, None, enhanced)
            }
            FunctionCode::Initiate | FunctionCode::EnhancedInitiate => {
                self.core.violation(Violation::InitiatorInitiator)
            }
            other => self.core.violation(Violation::Unexpected(other)),
        }
    }

    fn establish(&mut self, ird: u16, ord: u16, repr: &Repr<'_>) {
        self.core.phase = Phase::Up;
        self.core.outcome = Some(Outcome::Established(Established {
            enhanced: repr.enhanced.is_some(),
            ird,
            ord,
            peer: repr.enhanced.map(|e| PeerValues {
                ird: e.ird,
                ord: e.ord,
            }),
            peer_to_peer: false,
            ssn_tx_start: 0,
            ssn_rx_start: 0,
            peer_private_data: repr.private_data.to_vec(),
        }));
    }

    /// The ULP or the provider failed: TERM 2/0/5 (RFC 6581 §9.3) in an
    /// RDMAP Terminate once established, then a Session Terminate.
    pub fn fail_local(&mut self) {
        self.core.fail_local(FailReason::Local);
    }

    /// Ends an established session (or abandons an opening one) with a
    /// Session Terminate.
    pub fn terminate(&mut self) {
        self.core.terminate();
    }

    /// Runs the timer.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.core.handle_timeout(now);
    }

    /// When to call `handle_timeout` next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.core.poll_timeout()
    }

    /// Writes the next queued message into `out` (room for 516 octets).
    pub fn poll_transmit(&mut self, out: &mut [u8]) -> Option<Transmit> {
        self.core.outbox.poll(out)
    }

    /// The outcome so far: `Established` while up, then how it ended.
    pub fn outcome(&self) -> Option<&Outcome> {
        self.core.outcome.as_ref()
    }
}

impl Core {
    fn initiator_local(&self) -> InitiatorLocal {
        InitiatorLocal {
            ird: self.config.ird,
            ord: self.config.ord,
            ird_max: self.config.ird_max,
            // See the module docs: no RTR on SCTP, so client-server.
            peer_to_peer: false,
            rtr: self.config.rtr,
        }
    }
}

/// The passive side's view of an Initiate, for the ULP's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The RFC 6581 word of an Enhanced Initiate.
    pub enhanced: Option<EnhancedRepr>,
    /// The initiator's ULP private data.
    pub private_data: Vec<u8>,
}

impl Request {
    /// The initiator's IRD/ORD (RFC 6581 §9.1: the responder "MUST pass the
    /// peer's provided IRD and ORD values to the ULP").
    pub fn peer(&self) -> Option<PeerValues> {
        self.enhanced.map(|e| PeerValues {
            ird: e.ird,
            ord: e.ord,
        })
    }
}

/// The ULP's acceptance of a [`Request`]: the same answer as MPA's
/// ([`crate::mpa::Accept`]); its private data goes in the Accept.
pub use crate::mpa::Accept;

/// The passive side of one DDP stream.
#[derive(Debug)]
pub struct Responder {
    core: Core,
    request: Option<Request>,
}

impl Responder {
    /// Waits for an Initiate.
    pub fn new(config: SessionConfig, now: Instant) -> Result<Responder, ConfigError> {
        config.validate()?;
        Ok(Responder {
            core: Core::new(config, now),
            request: None,
        })
    }

    /// Takes one message of the stream with its PPID.
    pub fn handle_message(&mut self, now: Instant, ppid: u32, message: &[u8]) -> Input {
        let input = self.take_message(now, ppid, message);
        // Whatever ended the session (the timer, a violation of any kind)
        // also withdraws the Initiate from the ULP: a later accept or reject
        // must not answer a session that was terminated.
        if self.core.phase == Phase::Done {
            self.request = None;
        }
        input
    }

    fn take_message(&mut self, now: Instant, ppid: u32, message: &[u8]) -> Input {
        self.core.handle_timeout(now);
        match ppid {
            PPID_SESSION_CONTROL => {}
            PPID_DDP_SEGMENT if self.core.phase == Phase::Opening => {
                // RFC 5043 §6.6 keeps the active side's segments behind its
                // Initiate; one before it has no session to belong to.
                self.core.violation(Violation::SegmentBeforeInitiate);
                return Input::Taken;
            }
            PPID_DDP_SEGMENT => return self.core.segment(),
            other => {
                if self.core.phase != Phase::Done {
                    self.core.violation(Violation::UnknownPpid(other));
                }
                return Input::Ignored;
            }
        }
        let message = read_control(message);
        match self.core.phase {
            Phase::Opening => self.on_initiate(message),
            // While the ULP decides, as once up, only Terminate is legal;
            // either way the session ends (`handle_message` withdraws the
            // request).
            Phase::Deciding | Phase::Up => self.core.when_up(message),
            Phase::Done => return Input::Ignored,
        }
        Input::Taken
    }

    fn on_initiate(&mut self, message: Result<Repr<'_>, Violation>) {
        let repr = match message {
            Ok(repr) => repr,
            Err(v) => return self.core.violation(v),
        };
        match repr.function {
            FunctionCode::Initiate => {}
            FunctionCode::EnhancedInitiate if self.core.config.enhanced => {}
            // RFC 6581 §10: an unenhanced responder "treats the enhanced
            // request as incorrectly formatted"; over SCTP it answers
            // Terminate (the association carries other streams).
            FunctionCode::EnhancedInitiate => {
                return self.core.fail(FailReason::EnhancedNotSupported, None, None)
            }
            FunctionCode::Terminate => {
                return self.core.end(FailReason::PeerTerminated, None, None, false)
            }
            other => return self.core.violation(Violation::Unexpected(other)),
        }
        self.request = Some(Request {
            enhanced: repr.enhanced,
            private_data: repr.private_data.to_vec(),
        });
        self.core.phase = Phase::Deciding;
    }

    /// The Initiate, once read, until the ULP decides.
    pub fn request(&self) -> Option<&Request> {
        self.request.as_ref()
    }

    /// Accepts the Initiate: queues Accept or Enhanced Accept, or an
    /// Enhanced Reject when `ord_required` exceeds the initiator's IRD (the
    /// outcome is then `Failed` with TERM 2/0/6 reported).
    pub fn accept(&mut self, accept: &Accept) -> Result<(), ConfigError> {
        let Some(request) = self.request.as_ref() else {
            return Err(ConfigError("there is no Initiate to accept"));
        };
        check_private_data(&accept.private_data, request.enhanced.is_some())?;
        if [accept.ird, accept.ord, accept.ord_required]
            .into_iter()
            .flatten()
            .any(|v| v > QP_DEPTH_MAX && v != NO_NEGOTIATION)
        {
            return Err(ConfigError(
                "IRD and ORD must be at most 128 (QP_DEPTH_MAX), or 0x3FFF",
            ));
        }
        let Some(request) = self.request.take() else {
            return Err(ConfigError("there is no Initiate to accept"));
        };
        let config = &self.core.config;
        let ird = match accept.ird.unwrap_or(config.ird) {
            NO_NEGOTIATION => NO_NEGOTIATION,
            ird => ird.min(config.ird_max),
        };
        let ord = accept.ord.unwrap_or(config.ord);
        let mut established = Established {
            enhanced: request.enhanced.is_some(),
            ird,
            ord,
            peer: request.peer(),
            peer_to_peer: false,
            ssn_tx_start: 0,
            ssn_rx_start: 0,
            peer_private_data: request.private_data,
        };
        match request.enhanced {
            None => self
                .core
                .outbox
                .control(FunctionCode::Accept, None, &accept.private_data),
            Some(word) => {
                let local = ResponderLocal {
                    ird,
                    ord,
                    ord_required: accept.ord_required,
                    ird_max: config.ird_max,
                    rtr: config.rtr,
                };
                match negotiate::respond(&word, &local) {
                    Response::InsufficientIrd(reply) => {
                        // RFC 6581 §7: "The Enhanced Reject function code MUST
                        // be used to indicate rejection of enhanced DDP stream
                        // session for a configuration that would have been
                        // accepted for unenhanced DDP stream session
                        // negotiation." The reject ends the legal sequence
                        // (RFC 5043 §6.3): no segment follows it, so the TERM
                        // 2/0/6 of RFC 6581 §9.1 is reported, not sent.
                        self.core.outbox.control(
                            FunctionCode::EnhancedReject,
                            Some(reply),
                            &accept.private_data,
                        );
                        let term = TermCause::Establishment(EstablishmentError::InsufficientIrd);
                        self.core.end(
                            FailReason::InsufficientIrd,
                            Some(term),
                            request_peer(&word),
                            false,
                        );
                        return Ok(());
                    }
                    Response::Accept(values) => {
                        established.ird = values.ird;
                        established.ord = values.ord;
                        established.peer_to_peer = values.peer_to_peer;
                        self.core.outbox.control(
                            FunctionCode::EnhancedAccept,
                            Some(values.reply),
                            &accept.private_data,
                        );
                    }
                }
            }
        }
        self.core.phase = Phase::Up;
        self.core.outcome = Some(Outcome::Established(established));
        Ok(())
    }

    /// Rejects the Initiate at the ULP's direction (RFC 5043 §6.3): Reject,
    /// or Enhanced Reject with this side's IRD/ORD for an Enhanced Initiate
    /// (RFC 6581 §7).
    pub fn reject(&mut self, private_data: &[u8]) -> Result<(), ConfigError> {
        let Some(request) = self.request.as_ref() else {
            return Err(ConfigError("there is no Initiate to reject"));
        };
        check_private_data(private_data, request.enhanced.is_some())?;
        let request = self.request.take().expect("checked above");
        let config = &self.core.config;
        match request.enhanced {
            None => self
                .core
                .outbox
                .control(FunctionCode::Reject, None, private_data),
            Some(word) => {
                let reply = negotiate::reject(&word, config.ird, config.ord);
                self.core
                    .outbox
                    .control(FunctionCode::EnhancedReject, Some(reply), private_data)
            }
        }
        self.core.phase = Phase::Done;
        self.core.outcome = Some(Outcome::Rejected(Rejected {
            private_data: private_data.to_vec(),
            peer: None,
            enhanced: request.enhanced.is_some(),
        }));
        Ok(())
    }

    /// No ULP can take the Initiate (none listens, none has resources):
    /// answer Terminate, the non-ULP reject of RFC 5043 §6.4.
    pub fn reject_non_ulp(&mut self) {
        if self.core.phase == Phase::Deciding {
            self.request = None;
            self.core.fail(FailReason::Local, None, None);
        }
    }

    /// The ULP or the provider failed: TERM 2/0/5 (RFC 6581 §9.3) in an
    /// RDMAP Terminate once accepted, then a Session Terminate.
    pub fn fail_local(&mut self) {
        self.request = None;
        self.core.fail_local(FailReason::Local);
    }

    /// The ULP's answer was refused with `error` ([`Responder::accept`],
    /// [`Responder::reject`]) and it has no other: the session fails as
    /// with [`Responder::fail_local`], its reason
    /// [`FailReason::InvalidDecision`], so that the ULP learns what to fix.
    pub fn fail_decision(&mut self, error: ConfigError) {
        self.request = None;
        self.core.fail_local(FailReason::InvalidDecision(error));
    }

    /// Ends an established session with a Session Terminate.
    pub fn terminate(&mut self) {
        self.request = None;
        self.core.terminate();
    }

    /// Runs the timer.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.core.handle_timeout(now);
        if self.core.phase == Phase::Done {
            self.request = None;
        }
    }

    /// When to call `handle_timeout` next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.core.poll_timeout()
    }

    /// Writes the next queued message into `out` (room for 516 octets).
    pub fn poll_transmit(&mut self, out: &mut [u8]) -> Option<Transmit> {
        self.core.outbox.poll(out)
    }

    /// The outcome so far: `Established` while up, then how it ended.
    pub fn outcome(&self) -> Option<&Outcome> {
        self.core.outcome.as_ref()
    }
}

fn request_peer(word: &EnhancedRepr) -> Option<PeerValues> {
    Some(PeerValues {
        ird: word.ird,
        ord: word.ord,
    })
}

/// One DDP stream's session machine, by role: what a core keeps per stream.
#[derive(Debug)]
pub enum Session {
    /// The active side.
    Initiator(Initiator),
    /// The passive side.
    Responder(Responder),
}

impl Session {
    /// The DDP-SSN the stream's next DDP segment from this side takes: an
    /// RDMAP Terminate this machine sends once the stream's QP has sent
    /// segments must follow them (RFC 5043 §6.1); with 0, the stream's
    /// first, a peer took a later one for a segment out of sequence and
    /// never saw the error (found by a review). Its owner tells it before
    /// each input that may end the session.
    pub fn set_next_segment_ssn(&mut self, ssn: u16) {
        match self {
            Session::Initiator(s) => s.core.segment_ssn = ssn,
            Session::Responder(s) => s.core.segment_ssn = ssn,
        }
    }

    /// Takes one message of the stream with its PPID.
    pub fn handle_message(&mut self, now: Instant, ppid: u32, message: &[u8]) -> Input {
        match self {
            Session::Initiator(s) => s.handle_message(now, ppid, message),
            Session::Responder(s) => s.handle_message(now, ppid, message),
        }
    }

    /// The outcome so far.
    pub fn outcome(&self) -> Option<&Outcome> {
        match self {
            Session::Initiator(s) => s.outcome(),
            Session::Responder(s) => s.outcome(),
        }
    }

    /// Writes the next queued message into `out`.
    pub fn poll_transmit(&mut self, out: &mut [u8]) -> Option<Transmit> {
        match self {
            Session::Initiator(s) => s.poll_transmit(out),
            Session::Responder(s) => s.poll_transmit(out),
        }
    }

    /// Runs the timer.
    pub fn handle_timeout(&mut self, now: Instant) {
        match self {
            Session::Initiator(s) => s.handle_timeout(now),
            Session::Responder(s) => s.handle_timeout(now),
        }
    }

    /// When to call `handle_timeout` next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self {
            Session::Initiator(s) => s.poll_timeout(),
            Session::Responder(s) => s.poll_timeout(),
        }
    }

    /// The ULP or the provider failed: TERM 2/0/5 (RFC 6581 §9.3) in an
    /// RDMAP Terminate once established, then a Session Terminate.
    pub fn fail_local(&mut self) {
        match self {
            Session::Initiator(s) => s.fail_local(),
            Session::Responder(s) => s.fail_local(),
        }
    }

    /// Ends the session with a Session Terminate.
    pub fn terminate(&mut self) {
        match self {
            Session::Initiator(s) => s.terminate(),
            Session::Responder(s) => s.terminate(),
        }
    }
}
