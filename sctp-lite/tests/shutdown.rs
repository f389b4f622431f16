//! Graceful shutdown (RFC 9260 §9.2): `Endpoint::shutdown` sends what was
//! queued, then SHUTDOWN; the messages each side received and had not read
//! when the association closed stay readable, and its `Closed` event comes
//! after the last of them. Messages received before a peer's SHUTDOWN were
//! lost when the association closed (a Linux peer closes its socket this
//! way once its last messages are acknowledged), and the fork's own shutdown
//! sent SHUTDOWN with data still queued and never completed (its change 19).

mod support;

use sctp_lite::{CloseReason, EventKind, SendError};
use support::{addr, closed, sent, Pair};

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
    assert_eq!(p.slots(), (0, 0), "both slots free");
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
    assert_eq!(p.slots(), (0, 0));
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

/// The first chunk's type and flags of an SCTP packet.
fn first_chunk(packet: &[u8]) -> (u8, u8) {
    (packet[12], packet[13])
}

/// A's SHUTDOWN COMPLETE is lost (found by a review): B, in SHUTDOWN-ACK-SENT
/// with a message unread, sends its SHUTDOWN ACK again. A, closed already,
/// answers it as RFC 9260 §8.4 (5) says, with a SHUTDOWN COMPLETE carrying
/// the tag it came with and the T bit, which B takes (§8.5.1 (C): the tag
/// is its peer's, reflected): the graceful close completes at the first
/// answer. B's message is read, then `ShutdownByPeer`. It was `TimedOut`,
/// the message dropped; later B did not take the reflected tag (the fork's
/// endpoint finds associations by our own tag only) and completed when its
/// T2-shutdown ran out, 86 s and ten answers later.
#[test]
fn a_lost_shutdown_complete_still_ends_gracefully() {
    #[allow(clippy::disallowed_methods)] // Only the origin of sctp-proto's time.
    let epoch = std::time::Instant::now();
    let mut a = sctp_lite::Endpoint::new(sctp_lite::Config::default(), epoch).unwrap();
    let mut b = sctp_lite::Endpoint::new(sctp_lite::Config::default(), epoch).unwrap();
    let mut now = sctp_lite::Instant::ZERO;
    let assoc_a = a.connect(now, addr(2)).unwrap();
    let mut lost_complete = false;
    let mut answers = 0;
    // B's last SHUTDOWN ACK: what A's answer must reflect.
    let mut shutdown_ack: Option<Vec<u8>> = None;
    let mut events_b = Vec::new();
    let mut shut_at = None;
    for round in 0..400 {
        if round == 10 {
            a.send(assoc_a, 0, 16, true, b"for b").unwrap();
        }
        if round == 20 {
            a.shutdown(assoc_a).unwrap();
            shut_at = Some(now);
        }
        for d in sent(&mut a, now) {
            match first_chunk(&d) {
                // SHUTDOWN COMPLETE: the first is lost.
                (14, 0) if !lost_complete => lost_complete = true,
                (14, 1) => {
                    // RFC 9260 §8.4 (5): the SHUTDOWN ACK's own tag, the T
                    // bit, the ports swapped, length 4, a right CRC32c.
                    let ack = shutdown_ack.as_ref().expect("after a SHUTDOWN ACK");
                    assert_eq!(d.len(), 16);
                    assert_eq!(&d[4..8], &ack[4..8], "the tag reflected");
                    assert_eq!((&d[0..2], &d[2..4]), (&ack[2..4], &ack[0..2]), "ports");
                    assert_eq!(&d[14..16], &[0, 4]);
                    let mut zeroed = d.clone();
                    zeroed[8..12].fill(0);
                    assert_eq!(crc32c::crc32c(&zeroed).to_le_bytes(), d[8..12], "CRC32c");
                    answers += 1;
                    b.handle_datagram(now, addr(1), &d);
                }
                _ => b.handle_datagram(now, addr(1), &d),
            }
        }
        for d in sent(&mut b, now) {
            if first_chunk(&d).0 == 8 {
                shutdown_ack = Some(d.clone());
            }
            a.handle_datagram(now, addr(2), &d);
        }
        events_b.extend(std::iter::from_fn(|| b.poll_event()));
        if round > 20 {
            now += sctp_lite::Duration::from_millis(500);
            a.handle_timeout(now);
            b.handle_timeout(now);
        }
        if b.associations() == 1 && b.poll_timeout().is_none() && round > 20 {
            break;
        }
    }
    assert!(lost_complete);
    assert!(
        answers >= 1,
        "A answered the SHUTDOWN ACK it had no association for"
    );
    assert_eq!(closed(&events_b), [], "B holds a message unread");
    assert_eq!(
        read_all(&mut b),
        [(0, b"for b".to_vec())],
        "B's message, kept"
    );
    assert_eq!(
        b.poll_event().map(|e| e.kind),
        Some(EventKind::Closed(CloseReason::ShutdownByPeer))
    );
    // One T2-shutdown expiry (RTO.Initial, 1 s) in this test's steps of
    // 500 ms, not the eleven tries of T2-shutdown.
    assert_eq!(answers, 1, "B took the first answer");
    let took = now - shut_at.unwrap();
    assert!(took <= sctp_lite::Duration::from_secs(5), "{took}");
}

#[test]
fn an_abort_during_a_shutdown_is_ours() {
    let mut p = Pair::ddp();
    let (a, _) = p.connect();
    p.a.send(a, 0, 16, true, b"thrown away").unwrap();
    p.a.shutdown(a).unwrap();
    p.a.abort(a).unwrap();
    assert_eq!(
        p.a.poll_event().map(|e| e.kind),
        Some(EventKind::Closed(CloseReason::Local)),
        "not Shutdown: nothing queued was acknowledged"
    );
}
