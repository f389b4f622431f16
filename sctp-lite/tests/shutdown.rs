//! Graceful shutdown (RFC 9260 §9.2): `Endpoint::shutdown` sends what was
//! queued, then SHUTDOWN; the messages each side received and had not read
//! when the association closed stay readable, and its `Closed` event comes
//! after the last of them. Messages received before a peer's SHUTDOWN were
//! lost when the association closed (a Linux peer closes its socket this
//! way once its last messages are acknowledged), and the fork's own shutdown
//! sent SHUTDOWN with data still queued and never completed (its change 19).

mod support;

use sctp_lite::{CloseReason, Event, EventKind, SendError};
use support::Pair;

fn closed(events: &[Event]) -> Vec<CloseReason> {
    events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Closed(why) => Some(why),
            _ => None,
        })
        .collect()
}

/// Every message `endpoint` has to read, as (stream, octets).
fn read_all(endpoint: &mut sctp_lite::Endpoint) -> Vec<(u16, Vec<u8>)> {
    let mut buf = vec![0u8; endpoint.config().receive_message_max()];
    std::iter::from_fn(|| {
        endpoint
            .recv(&mut buf)
            .map(|r| (r.stream, buf[..r.len].to_vec()))
    })
    .collect()
}

fn messages(prefix: &str, stream: u16) -> Vec<(u16, Vec<u8>)> {
    (0..3)
        .map(|i| (stream, format!("{prefix}{i}").into_bytes()))
        .collect()
}

/// Step until nothing is left to happen: no datagram in flight, no timer
/// (T2-shutdown runs on each side until it has closed), no event.
fn shut_down(p: &mut Pair) {
    for _ in 0..1000 {
        if !p.step() {
            assert!(p.a.poll_timeout().is_none() && p.b.poll_timeout().is_none());
            return;
        }
    }
    panic!("the shutdown did not settle in 1,000 steps");
}

#[test]
fn a_graceful_shutdown_delivers_what_both_sides_sent() {
    let mut p = Pair::ddp();
    let (a, b) = p.connect();
    for (stream, m) in messages("from b ", 1) {
        p.b.send(b, stream, 16, true, &m).unwrap();
    }
    p.settle(1000);
    // A has B's three unread; it queues three of its own and shuts down
    // before any of them is sent.
    for (stream, m) in messages("from a ", 2) {
        p.a.send(a, stream, 16, true, &m).unwrap();
    }
    p.a.shutdown(a).unwrap();
    assert!(!p.a.is_up(a));
    assert_eq!(
        p.a.send(a, 2, 16, true, b"late"),
        Err(SendError::InvalidState)
    );
    assert_eq!(p.a.shutdown(a), Err(SendError::InvalidState));
    shut_down(&mut p);
    // Both closed, and neither has said so: each has messages to read.
    assert_eq!(closed(&p.events_a), []);
    assert_eq!(closed(&p.events_b), []);

    assert_eq!(read_all(&mut p.b), messages("from a ", 2));
    let b_closed = p.b.poll_event().expect("B's Closed after its last message");
    assert_eq!(
        (b_closed.assoc, b_closed.kind),
        (b, EventKind::Closed(CloseReason::ShutdownByPeer))
    );
    assert_eq!(read_all(&mut p.a), messages("from b ", 1));
    let a_closed = p.a.poll_event().expect("A's Closed after its last message");
    assert_eq!(
        (a_closed.assoc, a_closed.kind),
        (a, EventKind::Closed(CloseReason::Shutdown))
    );

    p.settle(100);
    assert_eq!(
        (p.a.associations(), p.b.associations()),
        (0, 0),
        "both slots free"
    );
}

#[test]
fn a_graceful_shutdown_with_nothing_unread_closes_at_once() {
    let mut p = Pair::ddp();
    let (a, b) = p.connect();
    p.b.send(b, 0, 16, true, b"read in time").unwrap();
    p.settle(1000);
    assert_eq!(read_all(&mut p.a), [(0, b"read in time".to_vec())]);
    p.a.shutdown(a).unwrap();
    shut_down(&mut p);
    assert_eq!(closed(&p.events_a), [CloseReason::Shutdown]);
    assert_eq!(read_all(&mut p.b), []);
    assert_eq!(closed(&p.events_b), [CloseReason::ShutdownByPeer]);
    p.settle(100);
    assert_eq!((p.a.associations(), p.b.associations()), (0, 0));
}

#[test]
fn an_abort_while_unread_messages_wait_drops_them() {
    let mut p = Pair::ddp();
    let (a, b) = p.connect();
    p.a.send(a, 0, 16, true, b"never read").unwrap();
    p.a.shutdown(a).unwrap();
    shut_down(&mut p);
    assert_eq!(closed(&p.events_b), [], "B holds an unread message");
    assert_eq!(p.b.associations(), 1);
    p.b.abort(b).unwrap();
    assert_eq!(
        p.b.poll_event().map(|e| e.kind),
        Some(EventKind::Closed(CloseReason::Local))
    );
    assert_eq!(read_all(&mut p.b), []);
    assert_eq!(p.b.abort(b), Err(SendError::InvalidAssociation));
    p.settle(100);
    assert_eq!(p.b.associations(), 0);
    assert_eq!(closed(&p.events_a), [CloseReason::Shutdown]);
}
