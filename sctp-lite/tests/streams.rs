//! The streams a message may go on are the smaller of our outbound count and
//! the peer's inbound one (RFC 9260 §5.1.1). A send beyond the peer's count
//! was accepted; the peer discarded the message with an ERROR chunk (§6.5),
//! which the fork took as the end of the association (its change 20: an
//! ERROR chunk is not fatal, §3.3.10). It is now refused at the send.

mod support;

use sctp_lite::{Config, EventKind, SendError};
use support::Pair;

#[test]
fn a_send_beyond_the_peers_streams_is_refused_and_the_association_stays() {
    let many = Config {
        streams: 8,
        ..Config::default()
    };
    let few = Config {
        streams: 2,
        ..Config::default()
    };
    let mut p = Pair::new(many, few);
    let (a, b) = p.connect();
    assert_eq!(p.a.outbound_streams(a), 2, "the peer takes 2");
    assert_eq!(p.b.outbound_streams(b), 2, "its own 2");
    assert_eq!(
        p.a.send(a, 5, 16, true, b"beyond"),
        Err(SendError::InvalidStream)
    );
    assert_eq!(p.a.send_space(a, 5), 0);
    p.a.send(a, 1, 16, true, b"within").unwrap();
    p.settle(1000);
    let mut buf = vec![0u8; p.b.config().receive_message_max()];
    let r = p.b.recv(&mut buf).expect("delivered");
    assert_eq!((r.stream, &buf[..r.len]), (1, &b"within"[..]));
    assert!(p.a.is_up(a) && p.b.is_up(b));
    assert!(
        !p.events_a
            .iter()
            .chain(&p.events_b)
            .any(|e| matches!(e.kind, EventKind::Closed(_))),
        "both up"
    );
}
