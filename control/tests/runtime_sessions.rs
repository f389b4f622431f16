//! DDP stream session control (RFC 5043 §6, RFC 6581 §7) on the
//! control-plane thread: a core's link forwards the messages of streams in
//! establishment and carries out what the control plane answers, and the
//! application's callback decides each Initiate there. The peer here is a
//! sans-IO `control::session` machine driven by the test, so every message
//! both ways is the real one.
//!
//! Tests bound themselves in real time (the control plane is a thread).
#![allow(clippy::disallowed_methods)]

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::{Arc, Mutex};
use std::time::{Duration as StdDuration, Instant as StdInstant};

use control::runtime::{
    ControlConfig, ControlPlane, CoreLink, Decision, SessionAction, SessionId, SessionResult,
};
use control::session::{
    self, Accept, FailReason, Initiator, Outcome, Responder, Session, SessionConfig,
};
use rnic_engine::sctp::{PPID_DDP_SEGMENT, PPID_SESSION_CONTROL};
use tcp_lite::{Duration, Instant};

const LIMIT: StdDuration = StdDuration::from_secs(20);

fn now() -> Instant {
    static EPOCH: std::sync::OnceLock<StdInstant> = std::sync::OnceLock::new();
    let epoch = EPOCH.get_or_init(StdInstant::now);
    Instant::from_micros(epoch.elapsed().as_micros() as i64 + 1)
}

fn peer() -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 9), 9899))
}

/// Every message a sans-IO machine queued, in order.
fn messages(machine: &mut Session) -> Vec<(u32, Vec<u8>)> {
    let mut out = [0u8; 600];
    let mut all = Vec::new();
    while let Some(t) = machine.poll_transmit(&mut out) {
        all.push((t.ppid, out[..t.len].to_vec()));
    }
    all
}

/// Polls `link` until stream `id` is done; what was sent on it before, and
/// how it ended.
fn until_done(link: &mut CoreLink, id: SessionId) -> (Vec<(u32, Vec<u8>)>, SessionResult) {
    let (sent, result) = poll_stream(link, id, usize::MAX);
    (
        sent,
        result.unwrap_or_else(|| panic!("stream {id:?} not done")),
    )
}

/// Polls `link` until it has `n` messages for stream `id` (and no end).
fn until_sent(link: &mut CoreLink, id: SessionId, n: usize) -> Vec<(u32, Vec<u8>)> {
    let (sent, result) = poll_stream(link, id, n);
    assert!(result.is_none(), "stream {id:?} ended: {result:?}");
    sent
}

/// Polls `link` until stream `id` has had `n` messages or its end; fails
/// after [`LIMIT`] or on an action for another stream.
fn poll_stream(
    link: &mut CoreLink,
    id: SessionId,
    n: usize,
) -> (Vec<(u32, Vec<u8>)>, Option<SessionResult>) {
    let start = StdInstant::now();
    let mut sent = Vec::new();
    while sent.len() < n {
        assert!(start.elapsed() < LIMIT, "stream {id:?}: {sent:?}");
        link.poll_sessions();
        while let Some(action) = link.next_session_action() {
            match action {
                SessionAction::Send {
                    id: on,
                    ppid,
                    message,
                } if on == id => sent.push((ppid, message)),
                SessionAction::Done { id: on, result } if on == id => return (sent, Some(result)),
                other => panic!("an action for another stream: {other:?}"),
            }
        }
    }
    (sent, None)
}

fn until_listening(link: &mut CoreLink) {
    let start = StdInstant::now();
    while !link.session_listening() {
        assert!(start.elapsed() < LIMIT);
        link.poll_sessions();
    }
}

/// The ULP: accepts an Initiate whose private data is "yes" (answering
/// "ok", ORD 4), rejects any other with "no"; records what it saw.
type Seen = Arc<Mutex<Vec<(Vec<u8>, Option<(u16, u16)>, SocketAddr)>>>;

fn listen(plane: &ControlPlane, core: u16) -> Seen {
    let seen: Seen = Arc::default();
    let record = seen.clone();
    let listened = plane.listen_sessions(
        core,
        SessionConfig::default(),
        Box::new(move |request: &session::Request, from| {
            let peer = request.peer().map(|p| (p.ird, p.ord));
            let mut seen = record.lock().unwrap();
            seen.push((request.private_data.clone(), peer, from));
            if request.private_data == b"yes" {
                Decision::Accept(Accept {
                    ord: Some(4),
                    private_data: b"ok".to_vec(),
                    ..Accept::default()
                })
            } else {
                Decision::Reject(b"no".to_vec())
            }
        }),
    );
    listened.unwrap();
    seen
}

fn initiator(private_data: &[u8]) -> (Session, (u32, Vec<u8>)) {
    let mut m =
        Session::Initiator(Initiator::new(SessionConfig::default(), private_data, now()).unwrap());
    let mut sent = messages(&mut m);
    assert_eq!(sent.len(), 1, "one Initiate");
    (m, sent.remove(0))
}

#[test]
fn a_peer_opened_stream_is_decided_on_the_control_thread_and_handed_back_with_its_machine() {
    let (plane, mut links) = ControlPlane::start(1);
    let seen = listen(&plane, 0);
    let link = &mut links[0];
    until_listening(link);

    // Accepted: an Enhanced Accept goes out, then the stream comes back
    // established, its machine up.
    let (mut peer_machine, (ppid, initiate)) = initiator(b"yes");
    assert_eq!(ppid, PPID_SESSION_CONTROL);
    let id = link.initiated_session(peer(), ppid, &initiate).unwrap();
    assert_eq!(link.sessions_in_establishment(), 1);
    let (sent, result) = until_done(link, id);
    assert_eq!(link.sessions_in_establishment(), 0);
    assert_eq!(sent.len(), 1, "one Enhanced Accept: {sent:?}");
    for (ppid, message) in &sent {
        peer_machine.handle_message(now(), *ppid, message);
    }
    let Some(Outcome::Established(at_peer)) = peer_machine.outcome().cloned() else {
        panic!("the peer is not established: {:?}", peer_machine.outcome());
    };
    assert_eq!(at_peer.peer_private_data, b"ok");
    let SessionResult::Established {
        session,
        mut machine,
    } = result
    else {
        panic!("not established: {result:?}");
    };
    assert!(session.enhanced);
    assert_eq!(session.peer_private_data, b"yes");
    assert_eq!(session.ord, 4, "the ULP's ORD");
    assert_eq!(
        seen.lock().unwrap().as_slice(),
        &[(b"yes".to_vec(), Some((16, 16)), peer())],
        "the ULP saw the private data, the peer's IRD/ORD and address"
    );
    // The machine handed over keeps the session: the peer's Session
    // Terminate ends it here.
    peer_machine.terminate();
    for (ppid, message) in messages(&mut peer_machine) {
        machine.handle_message(now(), ppid, &message);
    }
    assert!(matches!(
        machine.outcome(),
        Some(Outcome::Failed(f)) if f.reason == FailReason::PeerTerminated
    ));

    // Rejected by the ULP: an Enhanced Reject with its private data.
    let (mut peer_machine, (ppid, initiate)) = initiator(b"maybe");
    let id = link.initiated_session(peer(), ppid, &initiate).unwrap();
    let (sent, result) = until_done(link, id);
    assert!(
        matches!(&result, SessionResult::Rejected(r) if r.enhanced),
        "{result:?}"
    );
    for (ppid, message) in &sent {
        peer_machine.handle_message(now(), *ppid, message);
    }
    assert!(matches!(
        peer_machine.outcome(),
        Some(Outcome::Rejected(r)) if r.private_data == b"no" && r.enhanced
    ));

    // A Segment before any Initiate (announced without its octets): RFC
    // 5043 §6.6 broken, a Session Terminate answers.
    let id = link
        .initiated_session(peer(), PPID_DDP_SEGMENT, &[])
        .unwrap();
    let (sent, result) = until_done(link, id);
    assert!(
        matches!(&result, SessionResult::Failed { failure: f, told: true }
            if f.reason == FailReason::Violation(session::Violation::SegmentBeforeInitiate)),
        "{result:?}"
    );
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].0, PPID_SESSION_CONTROL);

    let stats = plane.stop();
    assert_eq!((stats.established, stats.rejected, stats.failed), (1, 1, 1));
}

#[test]
fn a_stream_this_core_opens_runs_its_initiator_on_the_control_thread() {
    let (plane, mut links) = ControlPlane::start(1);
    let link = &mut links[0];
    let config = SessionConfig {
        ird: 8,
        ord: 2,
        ..SessionConfig::default()
    };
    let id = link.open_session(peer(), config, b"hello").unwrap();
    // The Enhanced Initiate comes to the core to send; the peer here
    // accepts it.
    let sent = until_sent(link, id, 1);
    let mut responder = Responder::new(SessionConfig::default(), now()).unwrap();
    responder.handle_message(now(), sent[0].0, &sent[0].1);
    let request = responder.request().cloned().unwrap();
    assert_eq!(request.private_data, b"hello");
    assert_eq!(request.peer().map(|p| (p.ird, p.ord)), Some((8, 2)));
    responder.accept(&Accept::default()).unwrap();
    let mut responder = Session::Responder(responder);
    for (ppid, message) in messages(&mut responder) {
        link.session_input(id, ppid, &message);
    }
    let (sent, result) = until_done(link, id);
    assert!(sent.is_empty());
    let SessionResult::Established { session, .. } = result else {
        panic!("{result:?}");
    };
    assert_eq!((session.ird, session.ord), (8, 2));

    // The core gives up on a stream in establishment: the control plane
    // sends the Session Terminate and reports the end.
    let id = link
        .open_session(peer(), SessionConfig::default(), b"")
        .unwrap();
    until_sent(link, id, 1);
    link.end_session(id, true);
    let (sent, result) = until_done(link, id);
    assert_eq!(sent.len(), 1, "a Session Terminate: {sent:?}");
    assert!(
        matches!(result, SessionResult::Failed { failure: f, told: true } if f.reason == FailReason::Local)
    );

    // No answer in time: it fails with Timeout (and a Terminate, so that a
    // late Accept leaves nothing half-open).
    let quick = SessionConfig {
        timeout: Duration::from_millis(50),
        ..SessionConfig::default()
    };
    let id = link.open_session(peer(), quick, b"").unwrap();
    let (sent, result) = until_done(link, id);
    assert_eq!(sent.len(), 2, "the Initiate, then a Terminate: {sent:?}");
    assert!(
        matches!(result, SessionResult::Failed { failure: f, told: true } if f.reason == FailReason::Timeout)
    );

    // Gone with its association: nothing more comes back, and the control
    // plane lets it go.
    let id = link
        .open_session(peer(), SessionConfig::default(), b"")
        .unwrap();
    until_sent(link, id, 1);
    link.end_session(id, false);
    assert_eq!(link.sessions_in_establishment(), 0);
    let start = StdInstant::now();
    while plane.health()[0].startups > 0 {
        assert!(start.elapsed() < LIMIT);
        link.poll_sessions();
    }
    assert!(link.next_session_action().is_none());
    drop(plane);
}

#[test]
fn streams_beyond_the_limits_or_with_no_listener_are_refused_and_the_control_plane_gone_fails_the_rest(
) {
    let config = ControlConfig {
        startups_max_per_core: 1,
        ..ControlConfig::default()
    };
    let (plane, mut links) = ControlPlane::start_with(config, 2).unwrap();
    let _seen = listen(&plane, 1);
    // Core 0: no one listens there; the link refuses at once.
    let (_, (ppid, initiate)) = initiator(b"yes");
    assert!(links[0]
        .initiated_session(peer(), ppid, &initiate)
        .is_none());
    assert_eq!(links[0].refused_startups(), 1);
    // Core 1: one stream in establishment at most; the second is refused.
    until_listening(&mut links[1]);
    let held = links[1].open_session(peer(), SessionConfig::default(), b"");
    let held = held.unwrap();
    assert!(links[1]
        .initiated_session(peer(), ppid, &initiate)
        .is_none());
    assert_eq!(links[1].refused_startups(), 1);
    until_sent(&mut links[1], held, 1);
    // The control plane stops: the stream it held fails, for its core.
    let _ = plane.stop();
    let (_, result) = until_done(&mut links[1], held);
    assert!(
        matches!(&result, SessionResult::Failed { failure: f, told: false } if f.reason == FailReason::Local),
        "ended without its machine: the core must tell the peer: {result:?}"
    );
    assert!(links[1]
        .open_session(peer(), SessionConfig::default(), b"")
        .is_none());
}

/// The core asks to end a stream whose establishment has just ended at the
/// control plane: the result on the way (here, established) still comes,
/// for the core to end the stream itself; asking twice sends nothing more.
/// A listen with a configuration that cannot work is refused up front.
#[test]
fn an_end_asked_after_establishment_ended_leaves_the_result_to_the_core() {
    let (plane, mut links) = ControlPlane::start(1);
    let link = &mut links[0];
    let id = link
        .open_session(peer(), SessionConfig::default(), b"")
        .unwrap();
    let sent = until_sent(link, id, 1);
    let mut responder = Responder::new(SessionConfig::default(), now()).unwrap();
    responder.handle_message(now(), sent[0].0, &sent[0].1);
    responder.accept(&Accept::default()).unwrap();
    let mut responder = Session::Responder(responder);
    for (ppid, message) in messages(&mut responder) {
        link.session_input(id, ppid, &message);
    }
    // Give the control plane time to decide before the core asks.
    let start = StdInstant::now();
    while plane.stats().established == 0 {
        assert!(start.elapsed() < LIMIT);
        std::thread::yield_now();
    }
    link.end_session(id, true);
    link.end_session(id, true);
    let (sent, result) = until_done(link, id);
    assert!(sent.is_empty(), "{sent:?}");
    assert!(
        matches!(result, SessionResult::Established { .. }),
        "{result:?}"
    );
    assert_eq!(plane.stats().failed, 0);

    let bad = SessionConfig {
        ird: 200,
        ..SessionConfig::default()
    };
    let refuse = Box::new(|_: &session::Request, _| Decision::Reject(Vec::new()));
    assert!(plane.listen_sessions(0, bad, refuse).is_err());
}

/// A listener's Accept that breaks a rule (509 octets of private data in
/// an Enhanced Accept, which has room for 508) fails the session with the
/// rule it broke, so that the ULP learns what to fix (it was a bare local
/// failure); the peer hears a Session Terminate.
#[test]
fn an_invalid_accept_fails_the_session_with_what_was_wrong() {
    let (plane, mut links) = ControlPlane::start(1);
    let listened = plane.listen_sessions(
        0,
        SessionConfig::default(),
        Box::new(|_: &session::Request, _| {
            Decision::Accept(Accept {
                private_data: vec![7; 509],
                ..Accept::default()
            })
        }),
    );
    listened.unwrap();
    let link = &mut links[0];
    until_listening(link);
    let (mut peer_machine, (ppid, initiate)) = initiator(b"yes");
    let id = link.initiated_session(peer(), ppid, &initiate).unwrap();
    let (sent, result) = until_done(link, id);
    let SessionResult::Failed {
        failure,
        told: true,
    } = &result
    else {
        panic!("{result:?}");
    };
    let FailReason::InvalidDecision(error) = failure.reason else {
        panic!("{failure:?}");
    };
    assert!(error.0.contains("508"), "{error}");
    assert!(failure.reason.to_string().contains("508"));
    // A Session Terminate, which the initiator reads as no ULP's answer.
    for (ppid, message) in &sent {
        peer_machine.handle_message(now(), *ppid, message);
    }
    assert!(
        matches!(peer_machine.outcome(), Some(Outcome::Failed(f)) if f.reason == FailReason::NonUlpRejected),
        "{:?}",
        peer_machine.outcome()
    );
    drop(plane);
}

/// A stream the peer opened that goes with its association while the
/// control plane's answer is on its way (the core ends it without a Session
/// Terminate): nothing comes back for it but an Accept's `Established`,
/// once and without its messages. The ULP that accepted may hold something
/// for the stream (a client run's admission), which the core gives back
/// only once it hears.
#[test]
fn a_peer_opened_stream_gone_with_its_association_comes_back_only_if_accepted() {
    let (plane, mut links) = ControlPlane::start(1);
    let _seen = listen(&plane, 0);
    let link = &mut links[0];
    until_listening(link);
    // Each decided before the core ends it: its answer is on the way.
    let decided = |plane: &ControlPlane, n: u64| {
        let start = StdInstant::now();
        while plane.stats().established + plane.stats().rejected < n {
            assert!(start.elapsed() < LIMIT);
            std::thread::yield_now();
        }
    };
    let (_, (ppid, initiate)) = initiator(b"maybe");
    let rejected = link.initiated_session(peer(), ppid, &initiate).unwrap();
    decided(&plane, 1);
    link.end_session(rejected, false);
    let (_, (ppid, initiate)) = initiator(b"yes");
    let accepted = link.initiated_session(peer(), ppid, &initiate).unwrap();
    decided(&plane, 2);
    link.end_session(accepted, false);
    assert_eq!(link.sessions_in_establishment(), 0);
    // The Reject's end, first on the way, would be an action for another
    // stream.
    let (sent, result) = until_done(link, accepted);
    assert!(
        sent.is_empty(),
        "its Enhanced Accept has nowhere to go: {sent:?}"
    );
    let SessionResult::Established { session, .. } = result else {
        panic!("{result:?}");
    };
    assert_eq!(session.peer_private_data, b"yes");
    let start = StdInstant::now();
    while start.elapsed() < StdDuration::from_millis(50) {
        link.poll_sessions();
        assert!(link.next_session_action().is_none(), "once");
    }
    let stats = plane.stop();
    assert_eq!((stats.established, stats.rejected), (1, 1));
}

/// One peer's address holds at most `startups_per_peer_max` of a core's
/// places for streams in establishment (as for MPA startups; a review
/// found streams counted only per core, so one peer could hold them all),
/// and gets its place back when one's establishment ends; another peer
/// meanwhile gets in.
#[test]
fn one_peer_holds_at_most_its_share_of_stream_startups() {
    let config = ControlConfig {
        startups_per_peer_max: 2,
        ..ControlConfig::default()
    };
    let (plane, mut links) = ControlPlane::start_with(config, 1).unwrap();
    let _seen = listen(&plane, 0);
    let link = &mut links[0];
    until_listening(link);
    // Rejected by the ULP ("no"): each establishment ends at once.
    let (_, (ppid, initiate)) = initiator(b"no");
    let other = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 10), 9899));
    let first = link.initiated_session(peer(), ppid, &initiate).unwrap();
    let _second = link.initiated_session(peer(), ppid, &initiate).unwrap();
    assert!(link.initiated_session(peer(), ppid, &initiate).is_none());
    assert_eq!(link.refused_startups(), 1);
    let _theirs = link.initiated_session(other, ppid, &initiate).unwrap();
    // The first one's establishment ends: its peer has a place again.
    let start = StdInstant::now();
    let mut done = false;
    while !done {
        assert!(start.elapsed() < LIMIT, "the first stream's end");
        link.poll_sessions();
        while let Some(action) = link.next_session_action() {
            done |= matches!(action, SessionAction::Done { id, .. } if id == first);
        }
    }
    assert!(link.initiated_session(peer(), ppid, &initiate).is_some());
    let _ = plane.stop();
}
