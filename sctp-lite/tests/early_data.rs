//! A message that reaches the active side before its COOKIE ACK: found by
//! the `sctp_datagram` fuzz target (fuzz/regressions/sctp_datagram/
//! data-before-cookie-ack), which checks that only associations reported
//! `Up` deliver messages. The passive side is up once it has the COOKIE
//! ECHO and may send at once (RFC 9260 §5.1); with the COOKIE ACK lost the
//! active side is still in COOKIE-ECHOED when the DATA comes. `recv` gave
//! the message out before any `Up` event (and before the DDP check of RFC
//! 5043 §7.1 had run); now it waits for `Up`.

mod support;

use sctp_lite::{Config, Duration, Endpoint, EventKind, Instant};
use support::{addr, sent};

#[test]
fn a_message_before_the_cookie_ack_waits_for_up() {
    #[allow(clippy::disallowed_methods)] // Only the origin of sctp-proto's time.
    let epoch = std::time::Instant::now();
    let mut a = Endpoint::new(Config::default(), epoch).unwrap();
    let mut b = Endpoint::new(Config::default(), epoch).unwrap();
    let mut now = Instant::ZERO;
    let assoc_a = a.connect(now, addr(2)).unwrap();
    // INIT, INIT ACK, COOKIE ECHO: b is up.
    for d in sent(&mut a, now) {
        b.handle_datagram(now, addr(1), &d);
    }
    for d in sent(&mut b, now) {
        a.handle_datagram(now, addr(2), &d);
    }
    for d in sent(&mut a, now) {
        b.handle_datagram(now, addr(1), &d);
    }
    let assoc_b = std::iter::from_fn(|| b.poll_event())
        .find_map(|e| matches!(e.kind, EventKind::Up { .. }).then_some(e.assoc))
        .expect("b is up");
    // b's COOKIE ACK is lost; its message arrives.
    let cookie_ack = sent(&mut b, now);
    assert_eq!(cookie_ack.len(), 1);
    b.send(assoc_b, 0, 16, true, b"early").unwrap();
    for d in sent(&mut b, now) {
        a.handle_datagram(now, addr(2), &d);
    }
    let mut buf = vec![0u8; Config::default().receive_message_max()];
    assert!(!a.is_up(assoc_a));
    assert_eq!(a.poll_event(), None);
    assert_eq!(a.recv(&mut buf), None, "no message before Up");
    // a retransmits its COOKIE ECHO (T1-cookie, RFC 9260 §5.1 C), b answers
    // COOKIE ACK again: Up, then the message.
    for _ in 0..50 {
        now += Duration::from_millis(100);
        a.handle_timeout(now);
        b.handle_timeout(now);
        for d in sent(&mut a, now) {
            b.handle_datagram(now, addr(1), &d);
        }
        for d in sent(&mut b, now) {
            a.handle_datagram(now, addr(2), &d);
        }
        if a.is_up(assoc_a) {
            break;
        }
    }
    let up = a.poll_event().expect("an event");
    assert!(
        matches!(up.kind, EventKind::Up { outbound: true, .. }),
        "{up:?}"
    );
    let r = a.recv(&mut buf).expect("the message, once up");
    assert_eq!(
        (r.assoc, r.ppid, &buf[..r.len]),
        (assoc_a, 16, &b"early"[..])
    );
}
