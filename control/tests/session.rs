//! DDP stream session control over SCTP: every legal sequence of RFC 5043 §6
//! and RFC 6581 §7, the Enhanced Reject, private data limits, timeouts, the
//! no-segment-before-acknowledgement rule of RFC 5043 §6.6, protocol
//! violations, and arbitrary input to both roles.

use control::session::{
    Accept, FailReason, Initiator, Input, Outcome, Responder, Session, SessionConfig, Transmit,
    Violation,
};
use proptest::prelude::*;
use rnic_engine::qp::term::{EstablishmentError, TermCause};
use rnic_engine::wire::ddp_session::{FunctionCode, Packet, Repr, PPID_DDP_SEGMENT};
use rnic_engine::wire::ddp_session::{MESSAGE_LEN_MAX, PPID_SESSION_CONTROL};
use rnic_engine::wire::mpa_rr::EnhancedRepr;
use rnic_engine::wire::{ddp, rdmap, term};
use tcp_lite::{Duration, Instant};

const T0: Instant = Instant::ZERO;

fn plain() -> SessionConfig {
    SessionConfig {
        enhanced: false,
        ..SessionConfig::default()
    }
}

/// Every message queued, as (PPID, octets).
fn drain(poll: &mut dyn FnMut(&mut [u8]) -> Option<Transmit>) -> Vec<(u32, Vec<u8>)> {
    let mut out = Vec::new();
    let mut buf = [0u8; MESSAGE_LEN_MAX];
    while let Some(t) = poll(&mut buf) {
        out.push((t.ppid, buf[..t.len].to_vec()));
        assert!(out.len() <= control::session::OUTBOX_MESSAGES_MAX);
    }
    out
}

fn from_initiator(i: &mut Initiator) -> Vec<(u32, Vec<u8>)> {
    drain(&mut |b| i.poll_transmit(b))
}

fn from_responder(r: &mut Responder) -> Vec<(u32, Vec<u8>)> {
    drain(&mut |b| r.poll_transmit(b))
}

fn function(message: &(u32, Vec<u8>)) -> FunctionCode {
    assert_eq!(message.0, PPID_SESSION_CONTROL);
    Packet::new_checked(&message.1[..]).unwrap().function_code()
}

fn control_message(function: FunctionCode, enhanced: Option<EnhancedRepr>, pd: &[u8]) -> Vec<u8> {
    let repr = Repr {
        ssn: 0,
        function,
        enhanced,
        private_data: pd,
    };
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut out[..]));
    out
}

/// Runs the Initiate to the responder; returns both.
fn opened(ic: SessionConfig, rc: SessionConfig, pd: &[u8]) -> (Initiator, Responder) {
    let mut i = Initiator::new(ic, pd, T0).unwrap();
    let mut r = Responder::new(rc, T0).unwrap();
    for (ppid, m) in from_initiator(&mut i) {
        assert_eq!(r.handle_message(T0, ppid, &m), Input::Taken);
    }
    (i, r)
}

/// Delivers the responder's messages to the initiator.
fn answer(i: &mut Initiator, r: &mut Responder) -> Vec<FunctionCode> {
    let mut seen = Vec::new();
    for (ppid, m) in from_responder(r) {
        if ppid == PPID_SESSION_CONTROL {
            seen.push(function(&(ppid, m.clone())));
        }
        i.handle_message(T0, ppid, &m);
    }
    seen
}

fn failure(outcome: Option<&Outcome>) -> (FailReason, Option<TermCause>) {
    match outcome {
        Some(Outcome::Failed(f)) => (f.reason, f.term),
        other => panic!("not failed: {other:?}"),
    }
}

#[test]
fn plain_session_accepted() {
    let (mut i, mut r) = opened(plain(), plain(), b"hello");
    let request = r.request().unwrap().clone();
    assert_eq!(request.enhanced, None);
    assert_eq!(request.private_data, b"hello");
    r.accept(&Accept {
        private_data: b"welcome".to_vec(),
        ..Accept::default()
    })
    .unwrap();
    assert_eq!(answer(&mut i, &mut r), [FunctionCode::Accept]);
    let Some(Outcome::Established(e)) = i.outcome() else {
        panic!("{:?}", i.outcome())
    };
    assert!(!e.enhanced);
    assert_eq!((e.ssn_tx_start, e.ssn_rx_start), (0, 0));
    assert_eq!(e.peer_private_data, b"welcome");
    assert_eq!((e.ird, e.ord), (16, 16));
    let Some(Outcome::Established(e)) = r.outcome() else {
        panic!()
    };
    assert_eq!(e.peer_private_data, b"hello");
    assert!(i.may_send_segments());
}

#[test]
fn enhanced_session_accepted_negotiates_ird_ord() {
    let ic = SessionConfig {
        ird: 4,
        ord: 8,
        ..SessionConfig::default()
    };
    let rc = SessionConfig {
        ird: 2,
        ord: 16,
        ird_max: 6,
        ..SessionConfig::default()
    };
    let (mut i, mut r) = opened(ic, rc, b"");
    let word = r.request().unwrap().enhanced.unwrap();
    assert_eq!((word.ird, word.ord, word.peer_to_peer), (4, 8, false));
    r.accept(&Accept::default()).unwrap();
    assert_eq!(answer(&mut i, &mut r), [FunctionCode::EnhancedAccept]);
    // Responder IRD max(2, 8) limited to 6; ORD min(16, 4).
    let Some(Outcome::Established(re)) = r.outcome() else {
        panic!()
    };
    assert_eq!((re.ird, re.ord), (6, 4));
    // Initiator ORD min(8, 6); IRD max(4, 4).
    let Some(Outcome::Established(ie)) = i.outcome() else {
        panic!()
    };
    assert!(ie.enhanced);
    assert_eq!((ie.ird, ie.ord), (4, 6));
    assert_eq!(ie.peer.map(|p| (p.ird, p.ord)), Some((6, 4)));
}

#[test]
fn no_negotiation_values_pass_through() {
    let ic = SessionConfig {
        ird: 0x3FFF,
        ord: 0x3FFF,
        ..SessionConfig::default()
    };
    let (mut i, mut r) = opened(ic, SessionConfig::default(), b"");
    r.accept(&Accept::default()).unwrap();
    answer(&mut i, &mut r);
    let Some(Outcome::Established(ie)) = i.outcome() else {
        panic!()
    };
    // RFC 6581 §9.1: the responder answers 0x3FFF with 0x3FFF; the initiator
    // leaves its values unchanged.
    assert_eq!(ie.peer.map(|p| (p.ird, p.ord)), Some((0x3FFF, 0x3FFF)));
    assert_eq!((ie.ird, ie.ord), (0x3FFF, 0x3FFF));
}

#[test]
fn rejected_by_the_ulp_plain_and_enhanced() {
    for (config, code) in [
        (plain(), FunctionCode::Reject),
        (SessionConfig::default(), FunctionCode::EnhancedReject),
    ] {
        let (mut i, mut r) = opened(config.clone(), config, b"");
        r.reject(b"no thanks").unwrap();
        assert_eq!(answer(&mut i, &mut r), [code]);
        let Some(Outcome::Rejected(rej)) = i.outcome() else {
            panic!("{:?}", i.outcome())
        };
        assert_eq!(rej.private_data, b"no thanks");
        assert_eq!(rej.enhanced, code == FunctionCode::EnhancedReject);
        assert_eq!(rej.peer.is_some(), rej.enhanced);
        assert!(matches!(r.outcome(), Some(Outcome::Rejected(_))));
        assert!(!i.may_send_segments());
    }
}

#[test]
fn non_ulp_rejected_plain_and_enhanced() {
    for config in [plain(), SessionConfig::default()] {
        let (mut i, mut r) = opened(config.clone(), config.clone(), b"");
        r.reject_non_ulp();
        assert_eq!(answer(&mut i, &mut r), [FunctionCode::Terminate]);
        let Some(Outcome::Failed(f)) = i.outcome() else {
            panic!()
        };
        assert_eq!(f.reason, FailReason::NonUlpRejected);
        assert_eq!(f.retry_unenhanced, config.enhanced);
        assert!(!i.may_send_segments());
    }
}

#[test]
fn enhanced_reject_for_insufficient_ird() {
    let ic = SessionConfig {
        ird: 2,
        ..SessionConfig::default()
    };
    let (mut i, mut r) = opened(ic, SessionConfig::default(), b"");
    r.accept(&Accept {
        ord_required: Some(5),
        private_data: b"need 5".to_vec(),
        ..Accept::default()
    })
    .unwrap();
    let sent = from_responder(&mut r);
    assert_eq!(
        sent.len(),
        1,
        "only the Enhanced Reject: no segment follows a reject"
    );
    assert_eq!(function(&sent[0]), FunctionCode::EnhancedReject);
    assert_eq!(
        failure(r.outcome()),
        (
            FailReason::InsufficientIrd,
            Some(TermCause::Establishment(
                EstablishmentError::InsufficientIrd
            ))
        )
    );
    i.handle_message(T0, sent[0].0, &sent[0].1);
    let Some(Outcome::Rejected(rej)) = i.outcome() else {
        panic!()
    };
    // RFC 6581 §9.1: the required ORD is in the reject's responder ORD.
    assert_eq!(rej.peer.map(|p| p.ord), Some(5));
    assert_eq!(rej.private_data, b"need 5");
}

/// The DDP segment a failure sends before its Session Terminate: DDP-SSN 0
/// and an RDMAP Terminate with the layer/type/code.
fn terminate_code(segment: &[u8]) -> (u8, u8, u8) {
    terminate_code_at(segment, 0)
}

/// [`terminate_code`] of a segment numbered `ssn`.
fn terminate_code_at(segment: &[u8], ssn: u16) -> (u8, u8, u8) {
    assert_eq!(&segment[..2], &ssn.to_be_bytes());
    let packet = ddp::Packet::new_checked(&segment[2..]).unwrap();
    let repr = rdmap::Repr::parse(&packet).unwrap();
    let rdmap::Header::Terminate(t) = repr.header else {
        panic!("{repr:?}")
    };
    assert_eq!(t.encoding, term::Encoding::Rfc5040);
    (u8::from(t.layer), t.etype, t.ecode)
}

#[test]
fn initiator_without_ird_for_the_responder_ord_terminates_2_0_6() {
    let ic = SessionConfig {
        ird: 2,
        ird_max: 2,
        ..SessionConfig::default()
    };
    let mut i = Initiator::new(ic, b"", T0).unwrap();
    from_initiator(&mut i);
    // A responder that ignores the initiator's IRD (RFC 6581 §9.1 says it
    // MUST NOT) answers ORD 8.
    let word = EnhancedRepr {
        ird: 4,
        ord: 8,
        ..EnhancedRepr::default()
    };
    let accept = control_message(FunctionCode::EnhancedAccept, Some(word), b"");
    i.handle_message(T0, PPID_SESSION_CONTROL, &accept);
    let sent = from_initiator(&mut i);
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].0, PPID_DDP_SEGMENT);
    assert_eq!(terminate_code(&sent[0].1), (2, 0, 6));
    assert_eq!(function(&sent[1]), FunctionCode::Terminate);
    assert_eq!(failure(i.outcome()).0, FailReason::InsufficientIrd);
}

#[test]
fn peer_to_peer_answer_to_client_server_is_2_0_7() {
    let mut i = Initiator::new(SessionConfig::default(), b"", T0).unwrap();
    from_initiator(&mut i);
    let word = EnhancedRepr {
        peer_to_peer: true,
        rtr_write: true,
        ird: 1,
        ord: 1,
        ..EnhancedRepr::default()
    };
    let accept = control_message(FunctionCode::EnhancedAccept, Some(word), b"");
    i.handle_message(T0, PPID_SESSION_CONTROL, &accept);
    let sent = from_initiator(&mut i);
    assert_eq!(terminate_code(&sent[0].1), (2, 0, 7));
    assert_eq!(failure(i.outcome()).0, FailReason::NoMatchingRtr);
}

#[test]
fn responder_mirrors_a_foreign_peer_to_peer_initiate_without_rtr() {
    let mut r = Responder::new(SessionConfig::default(), T0).unwrap();
    let word = EnhancedRepr {
        peer_to_peer: true,
        rtr_read: true,
        ird: 2,
        ord: 2,
        ..EnhancedRepr::default()
    };
    let initiate = control_message(FunctionCode::EnhancedInitiate, Some(word), b"");
    r.handle_message(T0, PPID_SESSION_CONTROL, &initiate);
    r.accept(&Accept::default()).unwrap();
    let sent = from_responder(&mut r);
    let reply = Repr::parse(&Packet::new_checked(&sent[0].1[..]).unwrap()).unwrap();
    let e = reply.enhanced.unwrap();
    assert!(e.peer_to_peer && e.rtr_read);
    let Some(Outcome::Established(est)) = r.outcome() else {
        panic!()
    };
    assert!(est.peer_to_peer);
    // No RTR on SCTP: the peer's first segment is the QP's.
    assert_eq!(
        r.handle_message(T0, PPID_DDP_SEGMENT, &[0; 20]),
        Input::Segment
    );
}

#[test]
fn enhanced_initiate_to_an_unenhanced_responder() {
    let (mut i, mut r) = opened(SessionConfig::default(), plain(), b"");
    assert_eq!(failure(r.outcome()).0, FailReason::EnhancedNotSupported);
    assert_eq!(answer(&mut i, &mut r), [FunctionCode::Terminate]);
    let Some(Outcome::Failed(f)) = i.outcome() else {
        panic!()
    };
    // RFC 6581 §10: the initiator may retry unenhanced.
    assert!(f.retry_unenhanced);
    let (mut i, mut r) = opened(plain(), plain(), b"");
    r.accept(&Accept::default()).unwrap();
    answer(&mut i, &mut r);
    assert!(matches!(i.outcome(), Some(Outcome::Established(_))));
}

#[test]
fn plain_accept_to_an_enhanced_initiate_fails() {
    let mut i = Initiator::new(SessionConfig::default(), b"", T0).unwrap();
    from_initiator(&mut i);
    let accept = control_message(FunctionCode::Accept, None, b"");
    i.handle_message(T0, PPID_SESSION_CONTROL, &accept);
    assert_eq!(failure(i.outcome()).0, FailReason::ReplyNotEnhanced);
    let sent = from_initiator(&mut i);
    assert_eq!(function(sent.last().unwrap()), FunctionCode::Terminate);
}

#[test]
fn private_data_limits_on_send() {
    assert!(Initiator::new(plain(), &[0; 512], T0).is_ok());
    assert!(Initiator::new(plain(), &[0; 513], T0).is_err());
    assert!(Initiator::new(SessionConfig::default(), &[0; 508], T0).is_ok());
    assert!(Initiator::new(SessionConfig::default(), &[0; 509], T0).is_err());
    let (_, mut r) = opened(SessionConfig::default(), SessionConfig::default(), b"");
    let long = Accept {
        private_data: vec![0; 509],
        ..Accept::default()
    };
    assert!(r.accept(&long).is_err());
    assert!(r.reject(&[0; 509]).is_err());
    // The user error leaves the Initiate for another decision.
    assert!(r.request().is_some());
    assert!(r.reject(&[0; 508]).is_ok());
    let (_, mut r) = opened(plain(), plain(), b"");
    assert!(r
        .accept(&Accept {
            private_data: vec![0; 513],
            ..Accept::default()
        })
        .is_err());
    assert!(r
        .accept(&Accept {
            private_data: vec![0; 512],
            ..Accept::default()
        })
        .is_ok());
}

#[test]
fn private_data_limits_on_receive() {
    let mut r = Responder::new(plain(), T0).unwrap();
    let mut initiate = control_message(FunctionCode::Initiate, None, &[0; 512]);
    initiate.push(0);
    r.handle_message(T0, PPID_SESSION_CONTROL, &initiate);
    assert_eq!(
        failure(r.outcome()),
        (
            FailReason::Violation(Violation::PrivateDataTooLong(513)),
            Some(TermCause::InvalidSessionControl)
        )
    );
    assert_eq!(
        function(&from_responder(&mut r)[0]),
        FunctionCode::Terminate
    );
    // 4 + 508 octets in an Enhanced Initiate are fine.
    let mut r = Responder::new(SessionConfig::default(), T0).unwrap();
    let word = EnhancedRepr::default();
    let ok = control_message(FunctionCode::EnhancedInitiate, Some(word), &[0; 508]);
    r.handle_message(T0, PPID_SESSION_CONTROL, &ok);
    assert_eq!(r.request().unwrap().private_data.len(), 508);
    // An Accept with 513 to the initiator.
    let mut i = Initiator::new(plain(), b"", T0).unwrap();
    let mut accept = control_message(FunctionCode::Accept, None, &[0; 512]);
    accept.push(0);
    i.handle_message(T0, PPID_SESSION_CONTROL, &accept);
    assert_eq!(
        failure(i.outcome()).0,
        FailReason::Violation(Violation::PrivateDataTooLong(513))
    );
}

#[test]
fn timeouts() {
    let timeout = Duration::from_secs(10);
    let mut i = Initiator::new(plain(), b"", T0).unwrap();
    from_initiator(&mut i);
    assert_eq!(i.poll_timeout(), Some(T0 + timeout));
    i.handle_timeout(T0 + Duration::from_secs(9));
    assert!(i.outcome().is_none());
    i.handle_timeout(T0 + timeout);
    assert_eq!(failure(i.outcome()).0, FailReason::Timeout);
    assert_eq!(
        function(&from_initiator(&mut i)[0]),
        FunctionCode::Terminate
    );
    assert_eq!(i.poll_timeout(), None);
    // A late Accept changes nothing.
    let accept = control_message(FunctionCode::Accept, None, b"");
    assert_eq!(
        i.handle_message(T0 + timeout, PPID_SESSION_CONTROL, &accept),
        Input::Ignored
    );

    // The responder: no Initiate, then no decision.
    let mut r = Responder::new(plain(), T0).unwrap();
    r.handle_timeout(T0 + timeout);
    assert_eq!(failure(r.outcome()).0, FailReason::Timeout);
    let (_, mut r) = opened(plain(), plain(), b"");
    r.handle_timeout(T0 + timeout);
    assert_eq!(failure(r.outcome()).0, FailReason::Timeout);
    assert!(r.request().is_none());
    assert!(r.accept(&Accept::default()).is_err());
}

#[test]
fn no_segment_before_the_initiate_is_acknowledged_or_accepted() {
    // RFC 5043 §6.6.
    let mut i = Initiator::new(plain(), b"", T0).unwrap();
    assert!(!i.may_send_segments());
    from_initiator(&mut i);
    assert!(!i.may_send_segments(), "sent is not acknowledged");
    i.handle_acked();
    assert!(i.may_send_segments());

    let mut i = Initiator::new(plain(), b"", T0).unwrap();
    from_initiator(&mut i);
    let accept = control_message(FunctionCode::Accept, None, b"");
    i.handle_message(T0, PPID_SESSION_CONTROL, &accept);
    assert!(
        i.may_send_segments(),
        "an Accept implies the Initiate arrived"
    );
    i.terminate();
    assert!(!i.may_send_segments());
}

#[test]
fn segments_before_the_session_is_up_here() {
    // A responder's segment may overtake its Accept (unordered delivery).
    let mut i = Initiator::new(plain(), b"", T0).unwrap();
    assert_eq!(
        i.handle_message(T0, PPID_DDP_SEGMENT, &[0; 20]),
        Input::Early
    );
    assert!(i.outcome().is_none());
    // An initiator's segment after its acknowledged Initiate, while the
    // passive ULP decides.
    let (_, mut r) = opened(plain(), plain(), b"");
    assert_eq!(
        r.handle_message(T0, PPID_DDP_SEGMENT, &[0; 20]),
        Input::Early
    );
    // But a segment before any Initiate is a violation.
    let mut r = Responder::new(plain(), T0).unwrap();
    assert_eq!(
        r.handle_message(T0, PPID_DDP_SEGMENT, &[0; 20]),
        Input::Taken
    );
    assert_eq!(
        failure(r.outcome()),
        (
            FailReason::Violation(Violation::SegmentBeforeInitiate),
            Some(TermCause::InvalidSessionControl)
        )
    );
    assert_eq!(
        function(&from_responder(&mut r)[0]),
        FunctionCode::Terminate
    );
}

#[test]
fn violations_get_a_terminate() {
    let cases: Vec<(Vec<u8>, Violation)> = vec![
        (vec![0, 0, 0], Violation::Malformed),
        (vec![0, 0, 0, 0], Violation::UnknownFunction(0)),
        (vec![0, 0, 0, 8, 1, 2], Violation::UnknownFunction(8)),
        (vec![0, 0, 0xFF, 0xFF], Violation::UnknownFunction(0xFFFF)),
        (vec![0, 0, 0, 4, 1], Violation::TerminateWithPrivateData),
        (vec![0, 0, 0, 5, 0, 0], Violation::Malformed),
        (
            control_message(FunctionCode::Accept, None, b""),
            Violation::Unexpected(FunctionCode::Accept),
        ),
    ];
    for (message, violation) in cases {
        let mut r = Responder::new(SessionConfig::default(), T0).unwrap();
        r.handle_message(T0, PPID_SESSION_CONTROL, &message);
        assert_eq!(
            failure(r.outcome()),
            (
                FailReason::Violation(violation),
                Some(TermCause::InvalidSessionControl)
            ),
            "{message:?}"
        );
        let sent = from_responder(&mut r);
        assert_eq!(
            sent.len(),
            1,
            "only a Session Terminate before the session is up"
        );
        assert_eq!(function(&sent[0]), FunctionCode::Terminate);
        assert_eq!(TermCause::InvalidSessionControl.code(), (2, 0, 4));
    }
}

#[test]
fn a_second_initiate() {
    let initiate = control_message(FunctionCode::Initiate, None, b"");
    // While the ULP decides: a Session Terminate.
    let (_, mut r) = opened(plain(), plain(), b"");
    r.handle_message(T0, PPID_SESSION_CONTROL, &initiate);
    assert_eq!(
        failure(r.outcome()).0,
        FailReason::Violation(Violation::SecondInitiate)
    );
    assert!(r.request().is_none());
    // Once accepted: the RDMAP Terminate with 2/0/4, then the Session
    // Terminate.
    let (_, mut r) = opened(plain(), plain(), b"");
    r.accept(&Accept::default()).unwrap();
    from_responder(&mut r);
    r.handle_message(T0, PPID_SESSION_CONTROL, &initiate);
    let sent = from_responder(&mut r);
    assert_eq!(terminate_code(&sent[0].1), (2, 0, 4));
    assert_eq!(function(&sent[1]), FunctionCode::Terminate);
    // Both sides initiating.
    let mut i = Initiator::new(plain(), b"", T0).unwrap();
    i.handle_message(T0, PPID_SESSION_CONTROL, &initiate);
    assert_eq!(
        failure(i.outcome()).0,
        FailReason::Violation(Violation::InitiatorInitiator)
    );
}

/// Once the stream's QP has sent segments, an RDMAP Terminate the machine
/// sends takes the DDP-SSN after theirs (RFC 5043 §6.1), not 0, which a
/// peer took for a segment out of sequence (its own error instead of
/// ours; found by a review); before any, it is the stream's first, 0.
#[test]
fn a_terminate_after_the_qps_segments_follows_them() {
    let initiate = control_message(FunctionCode::Initiate, None, b"");
    for (sent_before, want) in [(None, 0), (Some(7), 7), (Some(0xFFFF), 0xFFFF)] {
        let (_, mut r) = opened(plain(), plain(), b"");
        r.accept(&Accept::default()).unwrap();
        from_responder(&mut r);
        let mut s = Session::Responder(r);
        if let Some(next) = sent_before {
            s.set_next_segment_ssn(next);
        }
        s.handle_message(T0, PPID_SESSION_CONTROL, &initiate);
        let sent = drain(&mut |b| s.poll_transmit(b));
        assert_eq!(sent[0].0, PPID_DDP_SEGMENT);
        assert_eq!(terminate_code_at(&sent[0].1, want), (2, 0, 4));
        assert_eq!(function(&sent[1]), FunctionCode::Terminate);
    }
}

#[test]
fn established_sessions_end_with_terminate() {
    let (mut i, mut r) = opened(SessionConfig::default(), SessionConfig::default(), b"");
    r.accept(&Accept::default()).unwrap();
    answer(&mut i, &mut r);
    // RFC 6581 §7: an enhanced session also ends with function code 4.
    i.terminate();
    let sent = from_initiator(&mut i);
    assert_eq!(function(&sent[0]), FunctionCode::Terminate);
    r.handle_message(T0, sent[0].0, &sent[0].1);
    assert_eq!(failure(r.outcome()).0, FailReason::PeerTerminated);
    assert_eq!(
        r.handle_message(T0, PPID_DDP_SEGMENT, &[0; 20]),
        Input::Ignored
    );
}

#[test]
fn local_failure_after_accept_sends_2_0_5() {
    let (_, mut r) = opened(plain(), plain(), b"");
    r.accept(&Accept::default()).unwrap();
    from_responder(&mut r);
    r.fail_local();
    let sent = from_responder(&mut r);
    assert_eq!(sent[0].0, PPID_DDP_SEGMENT);
    assert_eq!(terminate_code(&sent[0].1), (2, 0, 5));
    assert_eq!(function(&sent[1]), FunctionCode::Terminate);
    assert_eq!(failure(r.outcome()).0, FailReason::Local);
}

#[test]
fn unknown_ppid_is_a_violation() {
    let mut r = Responder::new(plain(), T0).unwrap();
    r.handle_message(T0, 58, b"x");
    assert_eq!(
        failure(r.outcome()).0,
        FailReason::Violation(Violation::UnknownPpid(58))
    );
}

/// Found by the `session_control` fuzz target
/// (fuzz/regressions/session_control/unknown-ppid-while-deciding): a
/// message with PPID 0 while the ULP decided ended the session with a
/// Terminate, but left the Initiate with the ULP, whose Reject then went
/// out after the Terminate and turned the outcome from Failed into
/// Rejected. Ending the session in any way withdraws the request.
#[test]
fn a_session_that_ended_while_the_ulp_decides_cannot_be_answered() {
    let enhanced = SessionConfig::default();
    // The fuzzer's case: an unknown PPID.
    let (_, mut r) = opened(enhanced.clone(), enhanced.clone(), b"");
    assert!(r.request().is_some());
    assert_eq!(r.handle_message(T0, 0, b""), Input::Ignored);
    assert_eq!(
        failure(r.outcome()).0,
        FailReason::Violation(Violation::UnknownPpid(0))
    );
    assert!(r.request().is_none());
    assert!(r.reject(b"no").is_err());
    assert!(r.accept(&Accept::default()).is_err());
    let sent = from_responder(&mut r);
    assert_eq!(sent.len(), 1);
    assert_eq!(function(&sent[0]), FunctionCode::Terminate);
    assert_eq!(
        failure(r.outcome()).0,
        FailReason::Violation(Violation::UnknownPpid(0))
    );

    // The timer running out inside handle_message (here a DDP segment's).
    let (_, mut r) = opened(enhanced.clone(), enhanced, b"");
    let late = T0 + Duration::from_secs(10);
    assert_eq!(
        r.handle_message(late, PPID_DDP_SEGMENT, &[0; 20]),
        Input::Ignored
    );
    assert_eq!(failure(r.outcome()).0, FailReason::Timeout);
    assert!(r.request().is_none());
    assert!(r.accept(&Accept::default()).is_err());
}

fn arbitrary_messages() -> impl Strategy<Value = Vec<(bool, u8, Vec<u8>)>> {
    // (control or segment, function code 0..=9, tail)
    proptest::collection::vec(
        (
            any::<bool>(),
            0u8..10,
            proptest::collection::vec(any::<u8>(), 0..530),
        ),
        0..8,
    )
}

/// A message from the strategy's parts: DDP-SSN 0, a function code near
/// the registered ones, an arbitrary rest, sometimes cut short.
fn message(code: u8, tail: &[u8]) -> Vec<u8> {
    let mut m = vec![0, 0, 0, code];
    m.extend_from_slice(tail);
    if tail.len() % 7 == 1 {
        m.truncate(tail.len() % 5);
    }
    m
}

fn ppid(control: bool) -> u32 {
    if control {
        PPID_SESSION_CONTROL
    } else {
        PPID_DDP_SEGMENT
    }
}

proptest! {
    #[test]
    fn arbitrary_input_never_panics(
        messages in arbitrary_messages(),
        enhanced in any::<bool>(),
        decide in 0u8..4,
    ) {
        let config = SessionConfig { enhanced, ..SessionConfig::default() };
        let mut i = Initiator::new(config.clone(), b"pd", T0).unwrap();
        from_initiator(&mut i);
        for (n, (control, code, tail)) in messages.iter().enumerate() {
            if n == 1 {
                i.handle_acked();
            }
            let now = T0 + Duration::from_millis(n as u64);
            i.handle_message(now, ppid(*control), &message(*code, tail));
            from_initiator(&mut i);
            let _ = i.may_send_segments();
        }
        i.fail_local();
        from_initiator(&mut i);

        let mut r = Responder::new(config, T0).unwrap();
        for (n, (control, code, tail)) in messages.iter().enumerate() {
            let now = T0 + Duration::from_millis(n as u64);
            r.handle_message(now, ppid(*control), &message(*code, tail));
            if r.request().is_some() {
                let _ = match decide {
                    0 => r.accept(&Accept { ord_required: Some(3), ..Accept::default() }),
                    1 => r.reject(b"x"),
                    2 => { r.reject_non_ulp(); Ok(()) }
                    _ => Ok(()),
                };
            }
            from_responder(&mut r);
        }
        r.handle_timeout(T0 + Duration::from_secs(60));
        from_responder(&mut r);
        prop_assert!(r.poll_timeout().is_none() || r.outcome().is_none());
    }
}
