//! Association handles and the events an [`Endpoint`](crate::Endpoint) reports.

use core::fmt;
use std::net::SocketAddr;

/// An association, valid until its slot is reused: the generation makes a
/// stale handle fail instead of reaching another association.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AssocId {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

impl AssocId {
    /// The slot index, below the endpoint's `associations_max`: usable as an
    /// index into per-association arrays of the caller.
    pub fn index(self) -> usize {
        self.index as usize
    }
}

impl fmt::Display for AssocId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "assoc#{}.{}", self.index, self.generation)
    }
}

/// Something that happened to an association.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// The association.
    pub assoc: AssocId,
    /// Its peer (the UDP source of its datagrams).
    pub remote: SocketAddr,
    /// What happened.
    pub kind: EventKind,
}

/// The kinds of [`Event`]. An association reports `Up` or `Refused` at most
/// once, then `Closed` at most once; after `Refused` or `Closed` its handle is
/// gone. An incoming association reports nothing before its `Up` or
/// `Refused`: one whose peer never completes the handshake is dropped
/// without an event after
/// [`Config::handshake_timeout_ms`](crate::Config::handshake_timeout_ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// The four-way handshake completed (RFC 9260 §5.1) and the peer's
    /// adaptation code point passed the DDP check (or the check is off).
    Up {
        /// Whether we connected (true) or accepted (false).
        outbound: bool,
        /// The code point of the peer's Adaptation Layer Indication
        /// (RFC 5061 §4.2.6), `None` when it sent none.
        peer_adaptation: Option<u32>,
    },
    /// The peer's INIT or INIT ACK carried no Adaptation Layer Indication, or
    /// a code point other than DDP's 1, so the association carries no DDP: we
    /// sent ABORT (RFC 5043 §7.1, §11.1).
    Refused {
        /// The peer's code point, `None` when it sent none.
        peer_adaptation: Option<u32>,
    },
    /// The association ended.
    Closed(CloseReason),
}

/// Why an association ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CloseReason {
    /// The peer sent ABORT (RFC 9260 §9.1).
    AbortedByPeer,
    /// The peer completed a graceful shutdown (RFC 9260 §9.2).
    ShutdownByPeer,
    /// The peer stopped answering: retransmissions ran out (RFC 9260 §8.1)
    /// or the handshake was never answered (§5.1, Max.Init.Retransmits).
    TimedOut,
    /// The peer broke the protocol or the handshake failed.
    ProtocolError,
    /// The receive window filled with parts of messages that can never
    /// complete; we sent ABORT.
    ReceiveBufferExhausted,
    /// We closed it ([`Endpoint::abort`](crate::Endpoint::abort)).
    Local,
    /// We shut it down gracefully ([`Endpoint::shutdown`](crate::Endpoint::shutdown))
    /// and the peer acknowledged everything we sent (RFC 9260 §9.2).
    Shutdown,
}

impl CloseReason {
    pub(crate) fn from_sctp(error: &sctp_proto::AssociationError) -> Self {
        use sctp_proto::AssociationError as E;
        use sctp_proto::Error as Cause;
        match error {
            E::AssociationClosed => CloseReason::AbortedByPeer,
            E::ApplicationClosed => CloseReason::ShutdownByPeer,
            E::TimedOut => CloseReason::TimedOut,
            // T1-init or T1-cookie ran out of retransmissions (RFC 9260 §5.1).
            E::HandshakeFailed(Cause::ErrHandshakeInitAck | Cause::ErrHandshakeCookieEcho) => {
                CloseReason::TimedOut
            }
            E::HandshakeFailed(_) | E::TransportError | E::Reset => CloseReason::ProtocolError,
            E::ReceiveBufferExhausted => CloseReason::ReceiveBufferExhausted,
            E::LocallyClosed => CloseReason::Local,
            // sctp-proto's enum is #[non_exhaustive]: a reason added upstream
            // is reported as a protocol error until it is named here.
            _ => CloseReason::ProtocolError,
        }
    }
}
