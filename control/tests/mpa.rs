//! The MPA startup state machines against each other and against crafted
//! frames: one table row per rule of RFC 6581 §9.1, §9.2 and §10 (each names
//! the sentence it checks), RFC 5044 basics, hostile input, and a property
//! test of the negotiation invariants.

use control::mpa::{
    Accept, Established, FailReason, Initiator, Outcome, PeerValues, Request, Responder, Rtr,
    RtrSet, StartupConfig, TermCode, NO_NEGOTIATION,
};
use rnic_engine::mpa::rx::{Deframer, Poll, RxConfig};
use rnic_engine::wire::mpa_rr::{EnhancedRepr, FrameKind, Packet, Repr};
use rnic_engine::wire::{ddp, rdmap};
use tcp_lite::{Duration, Instant};

const T0: Instant = Instant::ZERO;

/// What the responder's ULP does with a Request.
enum Decide {
    Accept(Accept),
    Reject(Vec<u8>),
}

struct Run {
    init: Option<Outcome>,
    resp: Option<Outcome>,
    /// Octets the responder sent (Reply and anything after it).
    reply: Vec<u8>,
    /// Octets the initiator sent (Request and anything after it).
    request: Vec<u8>,
    /// The Request as the responder's ULP saw it.
    seen: Option<Request>,
}

fn drain(out: &mut Vec<u8>, mut poll: impl FnMut(&mut [u8]) -> usize) {
    let mut buf = [0u8; 97]; // an odd size: frames cross calls
    loop {
        let n = poll(&mut buf);
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
}

/// Both machines, wired together, octets cut at `cut`.
fn run(
    init_cfg: StartupConfig,
    init_pd: &[u8],
    resp_cfg: StartupConfig,
    decide: Decide,
    cut: usize,
) -> Run {
    let mut init = Initiator::new(init_cfg, init_pd, T0).expect("initiator config");
    let mut resp = Responder::new(resp_cfg, T0).expect("responder config");
    let mut request = Vec::new();
    drain(&mut request, |b| init.poll_transmit(b));
    let mut at = 0;
    while at < request.len() && resp.request().is_none() && resp.outcome().is_none() {
        let end = (at + cut).min(request.len());
        let n = resp.handle_input(&request[at..end], T0);
        assert!(n <= end - at);
        at += n;
        if n == 0 {
            break;
        }
    }
    let seen = resp.request().cloned();
    if seen.is_some() {
        match decide {
            Decide::Accept(a) => resp.accept(&a).expect("accept"),
            Decide::Reject(pd) => resp.reject(&pd).expect("reject"),
        }
    }
    let mut reply = Vec::new();
    drain(&mut reply, |b| resp.poll_transmit(b));
    let mut at = 0;
    while at < reply.len() && init.outcome().is_none() {
        let end = (at + cut).min(reply.len());
        let n = init.handle_input(&reply[at..end], T0);
        at += n;
        if n == 0 {
            break;
        }
    }
    drain(&mut request, |b| init.poll_transmit(b));
    // A responder that failed closes TCP; the initiator sees the close.
    if init.outcome().is_none() && matches!(resp.outcome(), Some(Outcome::Failed(_))) {
        init.handle_peer_closed();
    }
    Run {
        init: init.outcome().cloned(),
        resp: resp.outcome().cloned(),
        reply,
        request,
        seen,
    }
}

fn enhanced(ird: u16, ord: u16) -> StartupConfig {
    StartupConfig {
        ird,
        ord,
        ird_max: 64,
        ..StartupConfig::default()
    }
}

fn p2p(ird: u16, ord: u16, rtr: RtrSet) -> StartupConfig {
    StartupConfig {
        peer_to_peer: true,
        rtr,
        ..enhanced(ird, ord)
    }
}

fn established(outcome: &Option<Outcome>) -> &Established {
    match outcome {
        Some(Outcome::Established(e)) => e,
        other => panic!("not established: {other:?}"),
    }
}

fn failed(outcome: &Option<Outcome>) -> (FailReason, Option<TermCode>) {
    match outcome {
        Some(Outcome::Failed(f)) => (f.reason, f.term),
        other => panic!("not failed: {other:?}"),
    }
}

fn accept() -> Decide {
    Decide::Accept(Accept::default())
}

/// The frame at the front of `octets`.
fn parse_frame(octets: &[u8]) -> Repr<'_> {
    Repr::parse(&Packet::new_checked(octets).unwrap()).unwrap()
}

/// The Terminate FPDU after the frame at the front of `octets`:
/// (layer, type, code).
fn terminate_after_frame(octets: &[u8], crc: bool, markers: bool) -> (u8, u8, u8) {
    let frame_len = parse_frame(octets).buffer_len();
    let mut deframer = Deframer::new(RxConfig {
        crc,
        markers,
        ulpdu_max: 1024,
    });
    match deframer.poll(&octets[frame_len..]) {
        (_, Poll::Ulpdu(ulpdu)) => {
            let message = rdmap::Repr::parse(&ddp::Packet::new_checked(ulpdu).unwrap()).unwrap();
            match message.header {
                rdmap::Header::Terminate(t) => (u8::from(t.layer), t.etype, t.ecode),
                other => panic!("not a Terminate: {other:?}"),
            }
        }
        (_, other) => panic!("no Terminate FPDU after the frame: {other:?}"),
    }
}

// ---------------------------------------------------------------- §9.1 ----

#[test]
fn rfc6581_9_1_table() {
    struct Row {
        sentence: &'static str,
        init: StartupConfig,
        resp: StartupConfig,
        accept: Accept,
        /// Initiator IRD/ORD, responder IRD/ORD after the negotiation.
        want: (u16, u16, u16, u16),
        /// IRD/ORD in the Reply.
        reply: (u16, u16),
    }
    let rows = [
        Row {
            sentence: "The responder MUST set its ORD at most to the initiator IRD.",
            init: enhanced(4, 4),
            resp: enhanced(16, 16),
            accept: Accept::default(),
            want: (4, 4, 16, 4),
            reply: (16, 4),
        },
        Row {
            sentence: "Responder IRD: ... greater than or equal to the initiator ORD for successful negotiations.",
            init: enhanced(4, 12),
            resp: enhanced(2, 2),
            accept: Accept::default(),
            want: (4, 12, 12, 2),
            reply: (12, 2),
        },
        Row {
            sentence: "Upon receiving the MPA Accept Frame ... the initiator MUST set ... its ORD at most to the responder IRD.",
            init: enhanced(4, 40),
            resp: StartupConfig { ird_max: 8, ..enhanced(8, 2) },
            accept: Accept::default(),
            want: (4, 8, 8, 2),
            reply: (8, 2),
        },
        Row {
            sentence: "Upon receiving the MPA Accept Frame ... the initiator MUST set its IRD at least to the responder ORD",
            init: enhanced(2, 2),
            resp: enhanced(4, 4),
            accept: Accept { ord: Some(2), ..Accept::default() },
            want: (2, 2, 4, 2),
            reply: (4, 2),
        },
        Row {
            sentence: "The responder MUST respond to an initiator ORD value of 0x3FFF by leaving its local endpoint IRD value unchanged and setting the IRD to 0x3FFF in its reply message.",
            init: enhanced(4, NO_NEGOTIATION),
            resp: enhanced(7, 3),
            accept: Accept::default(),
            want: (4, NO_NEGOTIATION, 7, 3),
            reply: (NO_NEGOTIATION, 3),
        },
        Row {
            sentence: "The responder IRD is the actual value that the responder sets for its local IRD. (Ours left to the ULP, 0x3FFF: the most it queues, ird_max; the initiator's rule for a responder IRD of 0x3FFF is checked with a crafted Reply.)",
            init: enhanced(4, 9),
            resp: enhanced(NO_NEGOTIATION, 3),
            accept: Accept::default(),
            want: (4, 9, 64, 3),
            reply: (64, 3),
        },
        Row {
            sentence: "The responder MUST respond to an initiator IRD value of 0x3FFF by leaving its local endpoint ORD value unchanged, and setting ORD to 0x3FFF in its reply message.",
            init: enhanced(NO_NEGOTIATION, 4),
            resp: enhanced(8, 5),
            accept: Accept::default(),
            want: (NO_NEGOTIATION, 4, 8, 5),
            reply: (8, NO_NEGOTIATION),
        },
        Row {
            sentence: "The responder MUST set its ORD at most to the initiator IRD. (Also when its own ORD is left to the ULP.)",
            init: enhanced(6, 2),
            resp: enhanced(4, NO_NEGOTIATION),
            accept: Accept::default(),
            want: (6, 2, 4, 6),
            reply: (4, 6),
        },
    ];
    for row in rows {
        for cut in [1, 7, 1000] {
            let r = run(
                row.init.clone(),
                b"hi",
                row.resp.clone(),
                Decide::Accept(row.accept.clone()),
                cut,
            );
            let (i, s) = (established(&r.init), established(&r.resp));
            assert_eq!((i.ird, i.ord, s.ird, s.ord), row.want, "{}", row.sentence);
            let reply = parse_frame(&r.reply).enhanced.unwrap();
            assert_eq!((reply.ird, reply.ord), row.reply, "{}", row.sentence);
        }
    }
}

#[test]
fn rfc6581_9_1_initiator_keeps_its_ird_for_a_responder_ord_of_0x3fff() {
    // "The initiator MUST leave its local endpoint IRD value unchanged upon
    // receiving a responder ORD value of 0x3FFF." (Our responder sends that
    // only for an initiator IRD of 0x3FFF, so the Reply is crafted.)
    let mut init = Initiator::new(enhanced(6, 2), b"", T0).unwrap();
    drain(&mut Vec::new(), |b| init.poll_transmit(b));
    let reply = reply_frame(
        Some(EnhancedRepr {
            ird: 4,
            ord: NO_NEGOTIATION,
            ..Default::default()
        }),
        2,
        true,
    );
    assert_eq!(init.handle_input(&reply, T0), reply.len());
    let e = established(&init.outcome().cloned()).clone();
    assert_eq!((e.ird, e.ord), (6, 2));
}

#[test]
fn rfc6581_9_1_a_responder_ird_left_to_the_ulp_states_the_depth_its_qp_gets() {
    // The responder IRD is "the actual value that the responder sets for its
    // local IRD", and "the initiator MUST leave its local endpoint ORD value
    // unchanged upon receiving a responder IRD value of 0x3FFF". A foreign
    // initiator may ask an ORD above the QP_DEPTH_MAX reads a QP queues
    // (14 bits allow 16,383): answered with 0x3FFF, it kept its ORD and
    // overran the responder's IRRQ (found by a review).
    use control::negotiate::{respond, ResponderLocal, Response, QP_DEPTH_MAX};
    let answer = |ord: u16, ird_max: u16| {
        let local = ResponderLocal {
            ird: NO_NEGOTIATION,
            ord: NO_NEGOTIATION,
            ord_required: None,
            ird_max,
            rtr: RtrSet::NONE,
        };
        let request = EnhancedRepr {
            ird: 4,
            ord,
            ..Default::default()
        };
        match respond(&request, &local) {
            Response::Accept(v) => (v.ird, v.reply.ird),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(answer(200, QP_DEPTH_MAX), (QP_DEPTH_MAX, QP_DEPTH_MAX));
    assert_eq!(answer(3, QP_DEPTH_MAX), (QP_DEPTH_MAX, QP_DEPTH_MAX));
    assert_eq!(answer(200, 16), (16, 16), "at most what it can queue");
    // An initiator ORD of 0x3FFF still gets 0x3FFF (the RFC's MUST), and
    // the QP the depth it always had.
    assert_eq!(answer(NO_NEGOTIATION, 16), (NO_NEGOTIATION, NO_NEGOTIATION));
}

#[test]
fn timeouts_beyond_a_day_are_refused_not_added_to_the_clock() {
    // `now + request_timeout` overflowed the clock for the largest
    // duration: the startup panicked (found by a review).
    let huge = Duration::from_micros(i64::MAX as u64);
    let config = StartupConfig {
        request_timeout: huge,
        ..enhanced(4, 4)
    };
    let e = Responder::new(config, T0).expect_err("a request_timeout of 292,000 years");
    assert!(
        format!("{e:?}").contains("request_timeout must be at most 24 hours"),
        "{e:?}"
    );
    let config = StartupConfig {
        startup_timeout: huge,
        ..enhanced(4, 4)
    };
    assert!(Initiator::new(config, b"", T0).is_err());
}

#[test]
fn rfc6581_9_1_initiator_keeps_its_ord_for_a_responder_ird_of_0x3fff() {
    // "The initiator MUST leave its local endpoint ORD value unchanged upon
    // receiving a responder IRD value of 0x3FFF." (Our responder states its
    // actual IRD, so the Reply is crafted.)
    let mut init = Initiator::new(enhanced(4, 9), b"", T0).unwrap();
    drain(&mut Vec::new(), |b| init.poll_transmit(b));
    let reply = reply_frame(
        Some(EnhancedRepr {
            ird: NO_NEGOTIATION,
            ord: 3,
            ..Default::default()
        }),
        2,
        true,
    );
    assert_eq!(init.handle_input(&reply, T0), reply.len());
    let e = established(&init.outcome().cloned()).clone();
    assert_eq!((e.ird, e.ord), (4, 9));
}

#[test]
fn rfc6581_9_1_peer_values_reach_the_ulp_on_both_sides() {
    // "The responder and initiator MUST pass the peer's provided IRD and ORD
    // values to the ULP, in addition to using the values as calculated".
    let r = run(enhanced(3, 5), b"", enhanced(9, 7), accept(), 1000);
    assert_eq!(
        r.seen.as_ref().unwrap().peer(),
        Some(PeerValues { ird: 3, ord: 5 })
    );
    assert_eq!(
        established(&r.resp).peer,
        Some(PeerValues { ird: 3, ord: 5 })
    );
    assert_eq!(
        established(&r.init).peer,
        Some(PeerValues { ird: 9, ord: 3 })
    );
}

#[test]
fn rfc6581_9_1_reject_for_insufficient_ird_carries_the_required_ord_and_term_2_0_6() {
    // "The responder MAY reject the connection request if the initiator IRD
    // is not sufficient for the ULP-required ORD and specify the required
    // ORD in the MPA Reject Frame responder ORD. Thus, the TERM message MUST
    // contain Layer 2, Error Type 0, Error Code 6." And "The initiator MUST
    // pass the responder provided IRD and ORD to the ULP for both MPA Accept
    // and Reject messages."
    let decide = Decide::Accept(Accept {
        ord_required: Some(8),
        ..Accept::default()
    });
    let r = run(enhanced(2, 2), b"", enhanced(4, 4), decide, 1000);
    assert_eq!(
        failed(&r.resp),
        (FailReason::InsufficientIrd, Some(TermCode::InsufficientIrd))
    );
    let frame = parse_frame(&r.reply);
    assert!(frame.reject);
    assert_eq!(frame.enhanced.unwrap().ord, 8);
    assert_eq!(terminate_after_frame(&r.reply, true, false), (2, 0, 6));
    match &r.init {
        Some(Outcome::Rejected(rej)) => assert_eq!(rej.peer.unwrap().ord, 8),
        other => panic!("{other:?}"),
    }
}

#[test]
fn rfc6581_9_1_initiator_without_the_ird_the_responder_needs_sends_term_2_0_6() {
    // "If the initiator does not have sufficient resources for the required
    // IRD, it MUST send a TERM message ... Layer 2, Error Type 0, Error Code
    // 6." Our responder never asks that much, so the Reply is crafted.
    let mut init = Initiator::new(
        StartupConfig {
            ird_max: 4,
            ..enhanced(4, 4)
        },
        b"",
        T0,
    )
    .unwrap();
    drain(&mut Vec::new(), |b| init.poll_transmit(b));
    let reply = reply_frame(
        Some(EnhancedRepr {
            ird: 4,
            ord: 9,
            ..Default::default()
        }),
        2,
        true,
    );
    assert_eq!(init.handle_input(&reply, T0), reply.len());
    let mut term = reply.clone();
    drain(&mut term, |b| init.poll_transmit(b));
    assert_eq!(
        failed(&init.outcome().cloned()),
        (FailReason::InsufficientIrd, Some(TermCode::InsufficientIrd))
    );
    assert_eq!(terminate_after_frame(&term, true, false), (2, 0, 6));
}

fn reply_frame(enhanced: Option<EnhancedRepr>, revision: u8, crc: bool) -> Vec<u8> {
    let repr = Repr {
        kind: FrameKind::Reply,
        markers: false,
        crc,
        reject: false,
        reserved: 0,
        revision,
        enhanced,
        private_data: b"",
    };
    let mut out = vec![0; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut out[..]));
    out
}

fn request_frame(enhanced: Option<EnhancedRepr>, revision: u8, pd: &[u8]) -> Vec<u8> {
    let repr = Repr {
        kind: FrameKind::Request,
        markers: false,
        crc: true,
        reject: false,
        reserved: 0,
        revision,
        enhanced,
        private_data: pd,
    };
    let mut out = vec![0; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut out[..]));
    out
}

// ---------------------------------------------------------------- §9.2 ----

#[test]
fn rfc6581_9_2_table() {
    let read = RtrSet {
        read: true,
        ..RtrSet::NONE
    };
    let send = RtrSet {
        send: true,
        ..RtrSet::NONE
    };
    let write_read = RtrSet {
        write: true,
        read: true,
        send: false,
    };
    struct Row {
        sentence: &'static str,
        init: StartupConfig,
        resp: StartupConfig,
        /// A/B/C/D in the Request and in the Reply.
        request: (bool, RtrSet),
        reply: (bool, RtrSet),
        /// The initiator's RTR; None with Some(term) means it failed.
        rtr: Option<Rtr>,
        term: Option<TermCode>,
    }
    let rows = [
        Row {
            sentence: "The initiator MUST set Control Flag A to 1 for the peer-to-peer model. The initiator MUST set each Control Flag B, C, and D to 1 for each of the options it supports",
            init: p2p(4, 4, RtrSet::ALL),
            resp: p2p(4, 4, RtrSet::ALL),
            request: (true, RtrSet::ALL),
            reply: (true, RtrSet::ALL),
            rtr: Some(Rtr::Write),
            term: None,
        },
        Row {
            sentence: "For each initiator-supported RTR indication option, the responder SHOULD set the corresponding Control Flag if the responder can support that option",
            init: p2p(4, 4, write_read),
            resp: p2p(4, 4, read),
            request: (true, write_read),
            reply: (true, read),
            rtr: Some(Rtr::Read),
            term: None,
        },
        Row {
            sentence: "If the responder does not support any of the initiator-specified RTR indication options, then the responder MUST set at least one RTR indication type option it supports. ... it MUST send a TERM message ... Error Code 7.",
            init: p2p(4, 4, send),
            resp: p2p(4, 4, write_read),
            request: (true, send),
            reply: (true, write_read),
            rtr: None,
            term: Some(TermCode::NoMatchingRtr),
        },
        Row {
            sentence: "Upon receiving the MPA Accept Frame with Control Flag A set to 1, the initiator MUST generate one of the negotiated RTR indications.",
            init: p2p(4, 4, send),
            resp: p2p(4, 4, RtrSet::ALL),
            request: (true, send),
            reply: (true, send),
            rtr: Some(Rtr::Send),
            term: None,
        },
        Row {
            sentence: "The initiator MUST set Control Flag A to 0 for the client-server model. The responder MUST set Control Flag A to 0 if Control Flag A is 0 in the request. If Control Flag A is set to 0, then Control Flags B, C, and D MUST also be set to 0.",
            init: enhanced(4, 4),
            resp: p2p(4, 4, RtrSet::ALL),
            request: (false, RtrSet::NONE),
            reply: (false, RtrSet::NONE),
            rtr: None,
            term: None,
        },
    ];
    for row in rows {
        let r = run(row.init.clone(), b"", row.resp.clone(), accept(), 1000);
        let req = parse_frame(&r.request).enhanced.unwrap();
        let rep = parse_frame(&r.reply).enhanced.unwrap();
        let flags = |e: EnhancedRepr| {
            (
                e.peer_to_peer,
                RtrSet {
                    send: e.rtr_send,
                    write: e.rtr_write,
                    read: e.rtr_read,
                },
            )
        };
        assert_eq!(flags(req), row.request, "request: {}", row.sentence);
        assert_eq!(flags(rep), row.reply, "reply: {}", row.sentence);
        match row.term {
            None => {
                let i = established(&r.init);
                assert_eq!(i.rtr, row.rtr, "{}", row.sentence);
                assert_eq!(i.peer_to_peer, row.request.0, "{}", row.sentence);
                assert_eq!(
                    established(&r.resp).rtr_accept,
                    row.reply.1,
                    "{}",
                    row.sentence
                );
            }
            Some(code) => {
                assert_eq!(failed(&r.init).1, Some(code), "{}", row.sentence);
                let (l, t, c) = code.code();
                assert_eq!(
                    terminate_after_frame(&r.request, true, false),
                    (l, t, c),
                    "{}",
                    row.sentence
                );
            }
        }
    }
}

#[test]
fn rfc6581_9_2_responder_ignores_bcd_when_a_is_0() {
    // "On reception, if Control Flag A is set to 0, then Control Flags B, C,
    // and D MUST be ignored."
    let mut resp = Responder::new(p2p(4, 4, RtrSet::ALL), T0).unwrap();
    let request = request_frame(
        Some(EnhancedRepr {
            peer_to_peer: false,
            rtr_send: true,
            rtr_write: true,
            rtr_read: true,
            ird: 4,
            ord: 4,
        }),
        2,
        b"",
    );
    assert_eq!(resp.handle_input(&request, T0), request.len());
    resp.accept(&Accept::default()).unwrap();
    let mut reply = Vec::new();
    drain(&mut reply, |b| resp.poll_transmit(b));
    let e = parse_frame(&reply).enhanced.unwrap();
    assert!(!(e.peer_to_peer || e.rtr_send || e.rtr_write || e.rtr_read));
    let s = established(&resp.outcome().cloned()).clone();
    assert!(!s.peer_to_peer && s.rtr_accept.is_empty() && s.fenced);
}

#[test]
fn rfc6581_9_2_a_model_mismatch_in_the_reply_is_term_2_0_7() {
    // "If Control Flag A is 1 in the MPA Request message, then the responder
    // MUST set Control Flag A to 1 in the MPA reply message": a Reply with
    // A=0 leaves no compatible connection model.
    let mut init = Initiator::new(p2p(4, 4, RtrSet::ALL), b"", T0).unwrap();
    drain(&mut Vec::new(), |b| init.poll_transmit(b));
    let reply = reply_frame(
        Some(EnhancedRepr {
            ird: 4,
            ord: 4,
            ..Default::default()
        }),
        2,
        true,
    );
    init.handle_input(&reply, T0);
    let mut out = reply.clone();
    drain(&mut out, |b| init.poll_transmit(b));
    assert_eq!(
        failed(&init.outcome().cloned()),
        (FailReason::NoMatchingRtr, Some(TermCode::NoMatchingRtr))
    );
    assert_eq!(terminate_after_frame(&out, true, false), (2, 0, 7));
}

#[test]
fn rfc6581_9_1_read_rtr_raises_the_responder_ird_from_zero() {
    // "if the initiator ORD is 0 (RDMA Reads will not be used by the ULP) and
    // the responder supports use of a zero-length RDMA Read RTR indication,
    // then the responder IRD can be set to 1."
    let read = RtrSet {
        read: true,
        ..RtrSet::NONE
    };
    let r = run(p2p(4, 0, read), b"", p2p(0, 4, read), accept(), 1000);
    let (i, s) = (established(&r.init), established(&r.resp));
    assert_eq!(s.ird, 1);
    assert_eq!(i.rtr, Some(Rtr::Read));
    assert_eq!(i.ord, 1, "the Read RTR needs one outbound Read");
    assert!(i.ord <= s.ird);
}

// ----------------------------------------------------------------- §10 ----

#[test]
fn rfc6581_10_table() {
    let v1 = StartupConfig {
        revision: 1,
        enhanced: false,
        ..StartupConfig::default()
    };
    let v2_plain = StartupConfig {
        enhanced: false,
        ..StartupConfig::default()
    };
    // "An enhanced responder is REQUIRED to respond with an enhanced RDMA
    // connection establishment response" / "If the responder receives an
    // enhanced MPA message, it MUST respond with an enhanced MPA message."
    let r = run(enhanced(4, 4), b"", enhanced(4, 4), accept(), 1000);
    assert!(parse_frame(&r.reply).enhanced.is_some());
    assert!(established(&r.init).enhanced && established(&r.resp).enhanced);
    // "All responders are REQUIRED to issue unenhanced RDMA connection
    // establishment responses in response to unenhanced RDMA connection
    // establishment requests." / "If the responder receives an unenhanced MPA
    // message ('S' is set to 0), it MUST respond with an unenhanced MPA
    // message."
    for init in [v1.clone(), v2_plain.clone()] {
        let rev = init.revision;
        let r = run(init, b"v", enhanced(4, 4), accept(), 1000);
        let reply = parse_frame(&r.reply);
        assert!(reply.enhanced.is_none());
        assert_eq!(reply.revision, rev);
        assert!(!established(&r.init).enhanced && !established(&r.resp).enhanced);
    }
    // "The responder MUST continue to accept unenhanced connection requests."
    // (RFC 6581 §6: "A host accepting MPA connections MUST continue to accept
    // MPA Requests with version one, even if it supports version two.")
    let r = run(v1.clone(), b"", StartupConfig::default(), accept(), 1);
    assert_eq!(established(&r.resp).revision, 1);
    // "The initiator MUST NOT use the enhanced RDMA connection establishment
    // formats or function codes when no enhanced functionality is desired."
    let r = run(v2_plain, b"", enhanced(4, 4), accept(), 1000);
    assert!(parse_frame(&r.request).enhanced.is_none());
    // "If the responder receives an enhanced MPA message and it does not
    // support enhanced RDMA connection establishment, it MUST close the TCP
    // connection and exit MPA." ... "the initiator MAY attempt to establish
    // an RDMA connection using the unenhanced MPA protocol".
    let unenhanced_responder = StartupConfig {
        enhanced: false,
        ..StartupConfig::default()
    };
    let r = run(
        enhanced(4, 4),
        b"",
        unenhanced_responder.clone(),
        accept(),
        1000,
    );
    assert_eq!(failed(&r.resp), (FailReason::EnhancedNotSupported, None));
    assert!(r.reply.is_empty(), "closed without a Reply");
    match &r.init {
        Some(Outcome::Failed(f)) => {
            assert!(f.reason == FailReason::PeerClosed && f.retry_unenhanced)
        }
        other => panic!("{other:?}"),
    }
    let r = run(v1, b"", unenhanced_responder, accept(), 1000);
    assert!(!established(&r.init).enhanced);
    // An enhanced initiator that gets an unenhanced Reply: the responder broke
    // "an enhanced responder is REQUIRED to respond with an enhanced ... response".
    let mut init = Initiator::new(enhanced(4, 4), b"", T0).unwrap();
    drain(&mut Vec::new(), |b| init.poll_transmit(b));
    let reply = reply_frame(None, 2, true);
    init.handle_input(&reply, T0);
    assert_eq!(
        failed(&init.outcome().cloned()).0,
        FailReason::ReplyNotEnhanced
    );
}

// ------------------------------------------------------- RFC 5044 basics ----

#[test]
fn crc_if_either_asks_markers_per_direction_private_data_both_ways() {
    for (ic, rc) in [(false, false), (true, false), (false, true), (true, true)] {
        for (im, rm) in [(false, false), (true, false), (false, true), (true, true)] {
            let init = StartupConfig {
                crc: ic,
                markers: im,
                ..StartupConfig::default()
            };
            let resp = StartupConfig {
                crc: rc,
                markers: rm,
                ..StartupConfig::default()
            };
            let decide = Decide::Accept(Accept {
                private_data: b"from responder".to_vec(),
                ..Accept::default()
            });
            let r = run(init, b"from initiator", resp, decide, 3);
            let (i, s) = (established(&r.init), established(&r.resp));
            assert_eq!((i.crc, s.crc), (ic || rc, ic || rc));
            assert_eq!((i.markers_rx, i.markers_tx), (im, rm));
            assert_eq!((s.markers_rx, s.markers_tx), (rm, im));
            assert_eq!(i.peer_private_data, b"from responder");
            assert_eq!(s.peer_private_data, b"from initiator");
            assert_eq!((i.tx_start, i.rx_start), (s.rx_start, s.tx_start));
            assert!(s.fenced && !i.fenced);
        }
    }
}

#[test]
fn reject_with_private_data_leaves_tcp_open_on_both_sides() {
    let r = run(
        enhanced(4, 4),
        b"please",
        enhanced(4, 4),
        Decide::Reject(b"no thanks".to_vec()),
        5,
    );
    let frame = parse_frame(&r.reply);
    assert!(frame.reject && frame.enhanced.is_some());
    assert_eq!(
        r.reply.len(),
        frame.buffer_len(),
        "nothing after a plain reject"
    );
    match (&r.init, &r.resp) {
        (Some(Outcome::Rejected(i)), Some(Outcome::Rejected(s))) => {
            assert_eq!(i.private_data, b"no thanks");
            assert_eq!(s.private_data, b"no thanks");
            assert_eq!(i.peer, Some(PeerValues { ird: 4, ord: 4 }));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn private_data_limits() {
    // 512 octets unenhanced, 508 with the enhanced data (RFC 6581 §9: "The
    // maximum amount of ULP-specified Private Data is therefore reduced by 4
    // bytes").
    let plain = StartupConfig {
        enhanced: false,
        ..StartupConfig::default()
    };
    assert!(Initiator::new(plain.clone(), &[7; 512], T0).is_ok());
    assert!(Initiator::new(plain.clone(), &[7; 513], T0).is_err());
    assert!(Initiator::new(enhanced(4, 4), &[7; 508], T0).is_ok());
    assert!(Initiator::new(enhanced(4, 4), &[7; 509], T0).is_err());
    let r = run(plain, &[9; 512], StartupConfig::default(), accept(), 64);
    assert_eq!(established(&r.resp).peer_private_data, vec![9; 512]);
    let mut resp = Responder::new(StartupConfig::default(), T0).unwrap();
    let request = request_frame(Some(EnhancedRepr::default()), 2, b"");
    resp.handle_input(&request, T0);
    let too_long = Accept {
        private_data: vec![0; 509],
        ..Accept::default()
    };
    assert!(resp.accept(&too_long).is_err());
    assert!(
        resp.request().is_some(),
        "a refused accept leaves the Request pending"
    );
}

#[test]
fn never_consumes_past_the_frame() {
    // The initiator's first FPDU follows the Request in the same segment.
    let mut resp = Responder::new(StartupConfig::default(), T0).unwrap();
    let mut stream = request_frame(None, 2, b"abc");
    let frame_len = stream.len();
    stream.extend_from_slice(b"FPDU octets that belong to the engine");
    assert_eq!(resp.handle_input(&stream, T0), frame_len);
    assert_eq!(resp.handle_input(&stream[frame_len..], T0), 0);
    // And the Reply, for the initiator.
    let mut init = Initiator::new(StartupConfig::default(), b"", T0).unwrap();
    drain(&mut Vec::new(), |b| init.poll_transmit(b));
    let mut stream = reply_frame(
        Some(EnhancedRepr {
            ird: 4,
            ord: 4,
            ..Default::default()
        }),
        2,
        true,
    );
    let frame_len = stream.len();
    stream.extend_from_slice(&[0xAA; 100]);
    assert_eq!(init.handle_input(&stream, T0), frame_len);
    assert_eq!(
        established(&init.outcome().cloned()).rx_start,
        frame_len as u64
    );
}

// ------------------------------------------------------- hostile input ----

/// Feeds `octets` to a fresh responder one octet at a time (or whole) and
/// returns how it ended.
fn responder_fed(octets: &[u8], one_at_a_time: bool) -> Option<Outcome> {
    let mut resp = Responder::new(StartupConfig::default(), T0).unwrap();
    let mut at = 0;
    while at < octets.len() && resp.outcome().is_none() && resp.request().is_none() {
        let end = if one_at_a_time { at + 1 } else { octets.len() };
        let n = resp.handle_input(&octets[at..end], T0);
        if n == 0 {
            break;
        }
        at += n;
    }
    if resp.request().is_some() {
        return None;
    }
    resp.outcome().cloned()
}

#[test]
fn hostile_requests_close_without_a_reply() {
    let good = request_frame(
        Some(EnhancedRepr {
            ird: 1,
            ord: 1,
            ..Default::default()
        }),
        2,
        b"pd",
    );
    let mut wrong_key = good.clone();
    wrong_key[4] ^= 0x20;
    let mut reply_key = good.clone();
    reply_key[..16].copy_from_slice(b"MPA ID Rep Frame");
    let with_rev = |rev: u8| {
        let mut f = good.clone();
        f[17] = rev;
        f
    };
    let mut pd513 = good.clone();
    pd513[18..20].copy_from_slice(&513u16.to_be_bytes());
    let mut r_set = good.clone();
    r_set[16] |= 0x20;
    let s_with_rev1 = request_frame(Some(EnhancedRepr::default()), 1, b"");
    let mut s_too_short = request_frame(None, 2, b"ab");
    s_too_short[16] |= 0x10;
    let cases: [(&str, Vec<u8>, FailReason); 7] = [
        ("wrong key", wrong_key, FailReason::BadKey),
        (
            "a Reply's key (not a Request)",
            reply_key,
            FailReason::BadKey,
        ),
        ("revision 0", with_rev(0), FailReason::BadRevision(0)),
        ("revision 3", with_rev(3), FailReason::BadRevision(3)),
        ("PD_Length 513", pd513, FailReason::PrivateDataTooLong(513)),
        ("S set with revision 1", s_with_rev1, FailReason::Malformed),
        ("S set, PD_Length 2", s_too_short, FailReason::Malformed),
    ];
    for (what, octets, reason) in cases {
        for dribble in [false, true] {
            let outcome = responder_fed(&octets, dribble);
            assert_eq!(
                failed(&outcome),
                (reason, None),
                "{what}, dribbled: {dribble}"
            );
        }
    }
    // RFC 5044 §7.1.1: R is "not checked on reception in the MPA Request
    // Frame": a Request with it set goes to the ULP as the good one does.
    for dribble in [false, true] {
        assert_eq!(
            responder_fed(&r_set, dribble),
            None,
            "R set, dribbled: {dribble}"
        );
        assert_eq!(responder_fed(&good, dribble), None);
    }
    // PD_Length 513 is refused from the header alone: nothing more is read.
    let mut resp = Responder::new(StartupConfig::default(), T0).unwrap();
    let mut header = good[..20].to_vec();
    header[18..20].copy_from_slice(&513u16.to_be_bytes());
    header.extend_from_slice(&[0; 600]);
    assert_eq!(resp.handle_input(&header, T0), 20);
}

#[test]
fn a_truncated_frame_waits_then_times_out() {
    let good = request_frame(None, 2, b"0123456789");
    let mut resp = Responder::new(StartupConfig::default(), T0).unwrap();
    let cut = good.len() - 3;
    assert_eq!(resp.handle_input(&good[..cut], T0), cut);
    assert!(resp.outcome().is_none() && resp.request().is_none());
    let deadline = resp.poll_timeout().unwrap();
    assert_eq!(deadline, T0 + Duration::from_secs(5), "the request timeout");
    resp.handle_timeout(deadline);
    assert_eq!(
        failed(&resp.outcome().cloned()),
        (FailReason::RequestTimeout, None)
    );
}

#[test]
fn a_dribbled_frame_is_read_exactly() {
    let good = request_frame(
        Some(EnhancedRepr {
            ird: 3,
            ord: 2,
            ..Default::default()
        }),
        2,
        &[5; 300],
    );
    let mut resp = Responder::new(StartupConfig::default(), T0).unwrap();
    for (i, octet) in good.iter().enumerate() {
        assert!(resp.request().is_none(), "complete before octet {i}");
        assert_eq!(resp.handle_input(std::slice::from_ref(octet), T0), 1);
    }
    let request = resp.request().unwrap();
    assert_eq!(
        (request.private_data.len(), request.peer()),
        (300, Some(PeerValues { ird: 3, ord: 2 }))
    );
}

#[test]
fn silent_peers_time_out_in_both_roles() {
    // The responder waits request_timeout for the Request...
    let config = StartupConfig {
        request_timeout: Duration::from_secs(2),
        startup_timeout: Duration::from_secs(7),
        ..StartupConfig::default()
    };
    let mut resp = Responder::new(config.clone(), T0).unwrap();
    resp.handle_timeout(T0 + Duration::from_millis(1999));
    assert!(resp.outcome().is_none());
    resp.handle_timeout(T0 + Duration::from_secs(2));
    assert_eq!(
        failed(&resp.outcome().cloned()).0,
        FailReason::RequestTimeout
    );
    // ... and startup_timeout for everything once it has it (the ULP too).
    let mut resp = Responder::new(config.clone(), T0).unwrap();
    resp.handle_input(&request_frame(None, 2, b""), T0 + Duration::from_secs(1));
    assert!(resp.request().is_some());
    assert_eq!(resp.poll_timeout(), Some(T0 + Duration::from_secs(7)));
    resp.handle_timeout(T0 + Duration::from_secs(7));
    assert_eq!(
        failed(&resp.outcome().cloned()).0,
        FailReason::StartupTimeout
    );
    assert!(
        resp.accept(&Accept::default()).is_err(),
        "too late to accept"
    );
    // The initiator waits startup_timeout for the Reply.
    let mut init = Initiator::new(config, b"", T0).unwrap();
    drain(&mut Vec::new(), |b| init.poll_transmit(b));
    init.handle_input(
        &reply_frame(None, 2, true)[..10],
        T0 + Duration::from_secs(6),
    );
    assert!(init.outcome().is_none());
    init.handle_timeout(T0 + Duration::from_secs(7));
    assert_eq!(
        failed(&init.outcome().cloned()).0,
        FailReason::StartupTimeout
    );
}

#[test]
fn initiator_initiator_is_detected() {
    // Both sides sent a Request: the keys differ (RFC 5044 §7.1).
    let mut init = Initiator::new(StartupConfig::default(), b"", T0).unwrap();
    drain(&mut Vec::new(), |b| init.poll_transmit(b));
    init.handle_input(&request_frame(None, 2, b""), T0);
    assert_eq!(
        failed(&init.outcome().cloned()).0,
        FailReason::InitiatorInitiator
    );
}

#[test]
fn hostile_replies_fail_the_initiator() {
    let good = reply_frame(
        Some(EnhancedRepr {
            ird: 4,
            ord: 4,
            ..Default::default()
        }),
        2,
        true,
    );
    let with = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut v = good.clone();
        f(&mut v);
        v
    };
    let cases: [(&str, Vec<u8>, FailReason); 5] = [
        ("wrong key", with(&|v| v[0] = b'X'), FailReason::BadKey),
        (
            "revision 0",
            with(&|v| v[17] = 0),
            FailReason::BadRevision(0),
        ),
        (
            "revision 3",
            with(&|v| v[17] = 3),
            FailReason::BadRevision(3),
        ),
        (
            "PD_Length 513",
            with(&|v| v[18..20].copy_from_slice(&513u16.to_be_bytes())),
            FailReason::PrivateDataTooLong(513),
        ),
        (
            "S with revision 1",
            with(&|v| v[17] = 1),
            FailReason::Malformed,
        ),
    ];
    for (what, octets, reason) in cases {
        for dribble in [false, true] {
            let mut init = Initiator::new(StartupConfig::default(), b"", T0).unwrap();
            drain(&mut Vec::new(), |b| init.poll_transmit(b));
            let mut at = 0;
            while at < octets.len() && init.outcome().is_none() {
                let end = if dribble { at + 1 } else { octets.len() };
                let n = init.handle_input(&octets[at..end], T0);
                if n == 0 {
                    break;
                }
                at += n;
            }
            assert_eq!(failed(&init.outcome().cloned()).0, reason, "{what}");
        }
    }
}

// ---------------------------------------------------------- properties ----

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 2000, ..Default::default() })]

    /// Any enhanced parameters: a success satisfies RFC 6581 §9.1's
    /// "initiator ORD <= responder IRD" and "responder ORD <= initiator IRD"
    /// (where neither side left it to the ULP), and a failure is the
    /// specified TERM.
    #[test]
    fn negotiation_invariants(
        init_ird in 0u16..140, init_ord in 0u16..140, init_ird_max in 0u16..140,
        resp_ird in 0u16..140, resp_ord in 0u16..140, resp_ird_max in 0u16..140,
        init_p2p: bool, init_rtr in 1u8..8, resp_rtr in 1u8..8,
        required in proptest::option::of(0u16..20),
        no_neg in 0u8..16,
    ) {
        let rtr = |bits: u8| RtrSet { send: bits & 1 != 0, write: bits & 2 != 0, read: bits & 4 != 0 };
        let pick = |bit: u8, v: u16| if no_neg & bit != 0 { NO_NEGOTIATION } else { v };
        let init = StartupConfig {
            peer_to_peer: init_p2p,
            rtr: rtr(init_rtr),
            ird: pick(1, init_ird.min(init_ird_max)),
            ord: pick(2, init_ord),
            ird_max: init_ird_max,
            ..StartupConfig::default()
        };
        let resp = StartupConfig {
            rtr: rtr(resp_rtr),
            ird: pick(4, resp_ird.min(resp_ird_max)),
            ord: pick(8, resp_ord),
            ird_max: resp_ird_max,
            ..StartupConfig::default()
        };
        proptest::prop_assume!(init.validate(control::mpa::Role::Initiator, 0).is_ok());
        proptest::prop_assume!(resp.validate(control::mpa::Role::Responder, 0).is_ok());
        let r = run(init.clone(), b"", resp, Decide::Accept(Accept { ord_required: required, ..Accept::default() }), 1000);
        match (&r.init, &r.resp) {
            (Some(Outcome::Established(i)), Some(Outcome::Established(s))) => {
                if i.ord != NO_NEGOTIATION && s.ird != NO_NEGOTIATION {
                    proptest::prop_assert!(i.ord <= s.ird, "initiator ORD {} > responder IRD {}", i.ord, s.ird);
                }
                if s.ord != NO_NEGOTIATION && i.ird != NO_NEGOTIATION {
                    proptest::prop_assert!(s.ord <= i.ird, "responder ORD {} > initiator IRD {}", s.ord, i.ird);
                }
                proptest::prop_assert!(i.ird <= init.ird_max || i.ird == NO_NEGOTIATION);
                // What the QPs get: neither side can overrun the other's
                // IRRQ, unless that direction was left to the ULPs (0x3FFF
                // in the Reply: "the ULP will be responsible for it").
                let (ic, sc) = (i.connection(1448, 65535), s.connection(1448, 65535));
                let reply = parse_frame(&r.reply).enhanced.unwrap();
                // "The responder MUST set its ORD at most to the initiator IRD."
                if init.ird != NO_NEGOTIATION {
                    proptest::prop_assert!(reply.ord <= init.ird, "reply ORD {:#x} > initiator IRD {}", reply.ord, init.ird);
                }
                if reply.ird != NO_NEGOTIATION {
                    proptest::prop_assert!(ic.ord <= sc.ird, "initiator QP ORD {} > responder QP IRD {}", ic.ord, sc.ird);
                }
                if reply.ord != NO_NEGOTIATION {
                    proptest::prop_assert!(sc.ord <= ic.ird, "responder QP ORD {} > initiator QP IRD {}", sc.ord, ic.ird);
                }
                if let Some(rtr) = i.rtr {
                    proptest::prop_assert!(s.rtr_accept.contains(rtr));
                    // A Read RTR takes one outbound Read and, where the
                    // responder negotiated its IRD, one IRRQ entry (with
                    // IRD 0x3FFF the provider answers it outside the IRRQ).
                    let reply_ird = parse_frame(&r.reply).enhanced.unwrap().ird;
                    if rtr == Rtr::Read {
                        proptest::prop_assert!(i.ord >= 1);
                        proptest::prop_assert!(reply_ird == NO_NEGOTIATION || s.ird >= 1 || !s.rtr_accept.write && !s.rtr_accept.send);
                    }
                }
                proptest::prop_assert_eq!(i.peer_to_peer, init.peer_to_peer);
                proptest::prop_assert_eq!(i.rtr.is_some(), init.peer_to_peer);
            }
            (Some(Outcome::Failed(f)), _) => {
                let code = f.term.expect("a failed negotiation sends a TERM");
                proptest::prop_assert!(matches!(code, TermCode::InsufficientIrd | TermCode::NoMatchingRtr));
                let (l, t, c) = code.code();
                proptest::prop_assert_eq!(terminate_after_frame(&r.request, true, false), (l, t, c));
            }
            (Some(Outcome::Rejected(rej)), Some(Outcome::Failed(f))) => {
                proptest::prop_assert_eq!(f.term, Some(TermCode::InsufficientIrd));
                proptest::prop_assert_eq!(rej.peer.map(|p| p.ord), required);
                proptest::prop_assert_eq!(terminate_after_frame(&r.reply, true, false), (2, 0, 6));
            }
            other => proptest::prop_assert!(false, "unexpected {:?}", other),
        }
    }

    /// Arbitrary octets never panic either machine, are consumed at most up
    /// to one frame, and end in a Request, an outcome, or a wait.
    #[test]
    fn arbitrary_octets(octets in proptest::collection::vec(proptest::num::u8::ANY, 0..700), cut in 1usize..64) {
        let mut resp = Responder::new(StartupConfig::default(), T0).unwrap();
        let mut init = Initiator::new(StartupConfig::default(), b"", T0).unwrap();
        drain(&mut Vec::new(), |b| init.poll_transmit(b));
        let (mut a, mut b) = (0, 0);
        for chunk in octets.chunks(cut) {
            a += resp.handle_input(chunk, T0);
            b += init.handle_input(chunk, T0);
        }
        proptest::prop_assert!(a <= 532 && b <= 532);
        resp.handle_timeout(T0 + Duration::from_secs(3600));
        init.handle_timeout(T0 + Duration::from_secs(3600));
        proptest::prop_assert!(resp.outcome().is_some() || resp.request().is_some());
        proptest::prop_assert!(init.outcome().is_some());
    }
}

#[test]
fn rfc6581_9_3_local_failures_after_the_reply_send_term_2_0_5() {
    // "The initiator or responder MUST generate the TERM message that
    // contains Layer 2, Error Type 0, Error Code 5 when it encounters any
    // error locally for which the special Error Code is not defined in
    // Section 8 before resetting the connection."
    let mut resp = Responder::new(StartupConfig::default(), T0).unwrap();
    resp.handle_input(&request_frame(None, 2, b""), T0);
    resp.accept(&Accept::default()).unwrap();
    resp.fail_local();
    let mut out = Vec::new();
    drain(&mut out, |b| resp.poll_transmit(b));
    assert_eq!(terminate_after_frame(&out, true, false), (2, 0, 5));
    assert_eq!(
        failed(&resp.outcome().cloned()),
        (FailReason::Local, Some(TermCode::LocalCatastrophic))
    );
    // The initiator, established, does the same.
    let mut init = Initiator::new(StartupConfig::default(), b"", T0).unwrap();
    let mut request = Vec::new();
    drain(&mut request, |b| init.poll_transmit(b));
    init.handle_input(
        &reply_frame(
            Some(EnhancedRepr {
                ird: 4,
                ord: 4,
                ..Default::default()
            }),
            2,
            true,
        ),
        T0,
    );
    init.fail_local();
    drain(&mut request, |b| init.poll_transmit(b));
    assert_eq!(terminate_after_frame(&request, true, false), (2, 0, 5));
    // Before any Reply there is no FPDU mode: close without a Terminate.
    let mut resp = Responder::new(StartupConfig::default(), T0).unwrap();
    resp.fail_local();
    assert_eq!(failed(&resp.outcome().cloned()), (FailReason::Local, None));
    assert!(!resp.wants_transmit());
}
