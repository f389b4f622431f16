//! IRD/ORD and connection model negotiation of RFC 6581 §9.1-§9.2, shared by
//! the MPA startup over TCP ([`crate::mpa`]) and DDP stream session control
//! over SCTP ([`crate::session`]): RFC 6581 §7 has the Enhanced Initiate
//! and Accept carry the same `A|B|IRD|C|D|ORD` word as the MPA Request and
//! Reply, negotiated by the same rules.
//!
//! Heads up! Read RFC 6581 §9.1 (IRD/ORD), §9.2 (peer-to-peer and RTR) and
//! §9.3 (the flow) before changing anything here.
//!
//! Three steps, each a pure function: the initiator writes its word
//! ([`request`]), the responder answers it ([`respond`]), the initiator
//! checks the answer ([`check_reply`]). IRD and ORD are 14-bit; 0x3FFF
//! ([`NO_NEGOTIATION`]) leaves them to the ULP, and a QP then gets
//! [`QP_DEPTH_MAX`].

use rnic_engine::qp::term::EstablishmentError;
use rnic_engine::qp::{Rtr, RtrSet};
use rnic_engine::wire::mpa_rr::{EnhancedRepr, IRD_ORD_NO_NEGOTIATION};

/// IRD or ORD 0x3FFF: "automatic negotiation of the IRD or ORD is not
/// desired, and ... the ULP will be responsible for it" (RFC 6581 §9.1).
pub const NO_NEGOTIATION: u16 = IRD_ORD_NO_NEGOTIATION;

/// The deepest IRRQ or ORQ a QP gets (Linux siw's `SIW_MAX_IRD_QP` and
/// `SIW_MAX_ORD_QP` are 128 too): IRD/ORD 0x3FFF, "left to the ULP", means
/// this many in the engine.
pub const QP_DEPTH_MAX: u16 = 128;

/// The B, C and D flags of enhanced data.
pub fn rtr_of(e: &EnhancedRepr) -> RtrSet {
    RtrSet {
        send: e.rtr_send,
        write: e.rtr_write,
        read: e.rtr_read,
    }
}

/// The initiator's side: what it offers and what it can take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitiatorLocal {
    /// The IRD it offers (0x3FFF: left to the ULP).
    pub ird: u16,
    /// The ORD it wants (0x3FFF: left to the ULP).
    pub ord: u16,
    /// The most inbound Reads it can queue.
    pub ird_max: u16,
    /// Ask for the peer-to-peer model (A).
    pub peer_to_peer: bool,
    /// RTR indications it can send.
    pub rtr: RtrSet,
}

/// The initiator's word for the MPA Request or the Enhanced Initiate.
pub fn request(local: &InitiatorLocal) -> EnhancedRepr {
    EnhancedRepr {
        peer_to_peer: local.peer_to_peer,
        // RFC 6581 §9.2: "The initiator MUST set each Control Flag B, C, and
        // D to 1 for each of the options it supports, if Control Flag A is
        // set to 1." With A=0 they MUST be 0.
        rtr_send: local.peer_to_peer && local.rtr.send,
        rtr_write: local.peer_to_peer && local.rtr.write,
        rtr_read: local.peer_to_peer && local.rtr.read,
        ird: local.ird,
        ord: local.ord,
    }
}

/// What an initiator uses after an accepting answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitiatorValues {
    /// Its IRD.
    pub ird: u16,
    /// Its ORD.
    pub ord: u16,
    /// The peer-to-peer model was negotiated.
    pub peer_to_peer: bool,
    /// Peer-to-peer: the RTR it sends first.
    pub rtr: Option<Rtr>,
}

/// Checks the responder's accepting word (RFC 6581 §9.1, §9.2). `Err` is
/// the Terminate the initiator owes: 2/0/6 when the responder's ORD needs
/// more IRD than `ird_max`, 2/0/7 when no RTR or connection model matches.
pub fn check_reply(
    local: &InitiatorLocal,
    reply: &EnhancedRepr,
) -> Result<InitiatorValues, EstablishmentError> {
    let mut values = InitiatorValues {
        ird: local.ird,
        ord: local.ord,
        peer_to_peer: false,
        rtr: None,
    };
    // RFC 6581 §9.1: "Upon receiving the MPA Accept Frame from the
    // responder, the initiator MUST set its IRD at least to the responder
    // ORD and its ORD at most to the responder IRD." "The initiator MUST
    // leave its local endpoint ORD value unchanged upon receiving a
    // responder IRD value of 0x3FFF."
    if reply.ird != NO_NEGOTIATION {
        values.ord = match local.ord {
            NO_NEGOTIATION => reply.ird.min(QP_DEPTH_MAX),
            ord => ord.min(reply.ird),
        };
    }
    // "The initiator MUST leave its local endpoint IRD value unchanged upon
    // receiving a responder ORD value of 0x3FFF."
    if reply.ord != NO_NEGOTIATION {
        if reply.ord > local.ird_max {
            // "If the initiator does not have sufficient resources for the
            // required IRD, it MUST send a TERM message ... Layer 2, Error
            // Type 0, Error Code 6."
            return Err(EstablishmentError::InsufficientIrd);
        }
        values.ird = match local.ird {
            NO_NEGOTIATION => reply.ord,
            ird => ird.max(reply.ord),
        };
    }
    match (local.peer_to_peer, reply.peer_to_peer) {
        (true, true) => {
            // "Upon receiving the MPA Accept Frame with Control Flag A set to
            // 1, the initiator MUST generate one of the negotiated RTR
            // indications." A Read RTR needs an ORD of at least 1 within the
            // responder's IRD.
            let mut offered = rtr_of(reply).intersect(local.rtr);
            if offered.read
                && values.ord == 0
                && (reply.ird == 0 || reply.ird == NO_NEGOTIATION && local.ord == 0)
            {
                offered.read = false;
            }
            // "... it MUST send a TERM message ... Layer 2, Error Type 0,
            // Error Code 7."
            let rtr = offered
                .preferred()
                .ok_or(EstablishmentError::NoMatchingRtr)?;
            if rtr == Rtr::Read && values.ord == 0 {
                values.ord = 1;
            }
            values.peer_to_peer = true;
            values.rtr = Some(rtr);
        }
        (false, false) => {}
        // "If Control Flag A is 1 in the MPA Request message, then the
        // responder MUST set Control Flag A to 1"; "The responder MUST set
        // Control Flag A to 0 if Control Flag A is 0 in the request." A
        // mismatch is no compatible connection model: TERM 2/0/7.
        _ => return Err(EstablishmentError::NoMatchingRtr),
    }
    Ok(values)
}

/// The responder's side, as the ULP and the configuration set it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponderLocal {
    /// The IRD it grants by default, already at most `ird_max` (or 0x3FFF).
    pub ird: u16,
    /// The ORD it uses by default (0x3FFF: left to the ULP).
    pub ord: u16,
    /// The ULP cannot work with less ORD than this.
    pub ord_required: Option<u16>,
    /// The most inbound Reads it can queue.
    pub ird_max: u16,
    /// RTR indications it takes.
    pub rtr: RtrSet,
}

/// What a responder uses after it accepts, and the word it answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponderValues {
    /// Its IRD.
    pub ird: u16,
    /// Its ORD.
    pub ord: u16,
    /// The peer-to-peer model was negotiated.
    pub peer_to_peer: bool,
    /// Peer-to-peer: the RTRs the initiator may send first.
    pub rtr_accept: RtrSet,
    /// The word of the accepting MPA Reply or Enhanced Accept.
    pub reply: EnhancedRepr,
}

/// The responder's answer to an initiator's word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Response {
    /// Accept with these values.
    Accept(ResponderValues),
    /// The initiator's IRD is below the ULP's required ORD: reject with this
    /// word, which states the required ORD, and TERM 2/0/6 (RFC 6581 §9.1).
    InsufficientIrd(EnhancedRepr),
}

/// Answers the initiator's word by RFC 6581 §9.1 and §9.2.
pub fn respond(request: &EnhancedRepr, local: &ResponderLocal) -> Response {
    let mut ird = local.ird;
    let mut ord = local.ord;
    // Responder ORD. RFC 6581 §9.1: "The responder MUST respond to an
    // initiator IRD value of 0x3FFF by leaving its local endpoint ORD value
    // unchanged, and setting ORD to 0x3FFF in its reply message." Otherwise
    // "The responder MUST set its ORD at most to the initiator IRD."
    let reply_ord = if request.ird == NO_NEGOTIATION {
        NO_NEGOTIATION
    } else {
        if let Some(required) = local.ord_required {
            if required > request.ird {
                // "The responder MAY reject the connection request if the
                // initiator IRD is not sufficient for the ULP-required ORD and
                // specify the required ORD in the MPA Reject Frame responder
                // ORD. Thus, the TERM message MUST contain Layer 2, Error Type
                // 0, Error Code 6."
                return Response::InsufficientIrd(EnhancedRepr {
                    peer_to_peer: request.peer_to_peer,
                    ird,
                    ord: required,
                    ..Default::default()
                });
            }
        }
        // Our own ORD left to the ULP is no exception: the reply must state
        // a number within the initiator's IRD.
        ord = if ord == NO_NEGOTIATION {
            request.ird.min(QP_DEPTH_MAX)
        } else {
            ord.min(request.ird)
        };
        ord
    };
    // Peer-to-peer. "If Control Flag A is 1 in the MPA Request message, then
    // the responder MUST set Control Flag A to 1 in the MPA reply message.
    // For each initiator-supported RTR indication option, the responder
    // SHOULD set the corresponding Control Flag if the responder can support
    // that option". "If the responder does not support any of the
    // initiator-specified RTR indication options, then the responder MUST
    // set at least one RTR indication type option it supports." With A=0,
    // B/C/D are 0 and the request's are ignored.
    let mut rtr_accept = RtrSet::NONE;
    if request.peer_to_peer {
        let mut rtr = rtr_of(request).intersect(local.rtr);
        if rtr.is_empty() {
            rtr = local.rtr;
        }
        rtr_accept = rtr;
    }
    // Responder IRD. "The responder MUST respond to an initiator ORD value
    // of 0x3FFF by leaving its local endpoint IRD value unchanged and
    // setting the IRD to 0x3FFF in its reply message." Otherwise the
    // responder IRD is at least the initiator ORD where resources allow,
    // and "If the initiator ORD is insufficient to support the selected
    // connection model, the responder IRD MAY be increased" (a Read RTR
    // needs one IRRQ entry).
    let reply_ird = if request.ord == NO_NEGOTIATION {
        NO_NEGOTIATION
    } else {
        // Our IRD left to the ULP (0x3FFF) is the most we queue: the reply
        // states "the actual value that the responder sets for its local
        // IRD", since an initiator keeps its ORD for a responder IRD of
        // 0x3FFF, and a foreign one may hold more than a QP queues.
        if ird == NO_NEGOTIATION {
            ird = local.ird_max;
        } else {
            ird = ird.max(request.ord).min(local.ird_max);
        }
        if rtr_accept.read && ird == 0 {
            if local.ird_max >= 1 {
                ird = 1;
            } else if rtr_accept.write || rtr_accept.send {
                rtr_accept.read = false;
            }
        }
        ird
    };
    Response::Accept(ResponderValues {
        ird,
        ord,
        peer_to_peer: request.peer_to_peer,
        rtr_accept,
        reply: EnhancedRepr {
            peer_to_peer: request.peer_to_peer,
            rtr_send: rtr_accept.send,
            rtr_write: rtr_accept.write,
            rtr_read: rtr_accept.read,
            ird: reply_ird,
            ord: reply_ord,
        },
    })
}

/// The word of a rejecting MPA Reply or Enhanced Reject that the ULP chose
/// (not for want of IRD): this side's configured IRD/ORD, for RFC 6581
/// §9.1's "The initiator MUST pass the responder provided IRD and ORD to the
/// ULP for both MPA Accept and Reject messages", and A mirrored.
pub fn reject(request: &EnhancedRepr, ird: u16, ord: u16) -> EnhancedRepr {
    EnhancedRepr {
        peer_to_peer: request.peer_to_peer,
        ird,
        ord,
        ..Default::default()
    }
}
