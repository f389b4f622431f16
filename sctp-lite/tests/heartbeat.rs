//! HEARTBEATs (RFC 9260 §8.3): an idle association whose peer vanished is
//! ended; one whose peer answers stays up. sctp-lite sent none (the fork
//! had no heartbeat timer, and took a HEARTBEAT ACK for an unknown chunk
//! that closed the association: its change 21), so an idle association
//! whose peer went away held its slot for ever.

mod support;

use sctp_lite::{CloseReason, Config, Duration, Instant};
use support::{closed, Pair};

#[test]
fn an_idle_association_whose_peer_vanished_ends() {
    let mut p = Pair::ddp();
    let (a, _) = p.connect();
    let cut_at = p.now;
    p.cut = true;
    p.drive_until(10_000, |p| {
        !closed(&p.events_a).is_empty() && !closed(&p.events_b).is_empty()
    });
    assert_eq!(closed(&p.events_a), [CloseReason::TimedOut]);
    assert_eq!(closed(&p.events_b), [CloseReason::TimedOut]);
    assert!(!p.a.is_up(a));
    // Eleven expiries of HB.interval (30 s) plus the RTO: ten HEARTBEATs
    // unanswered, the eleventh expiry ends it (Association.Max.Retrans 10).
    // The RTO is RTO.Initial, 1 s (an association that has sent no DATA has
    // measured no RTT), doubled for each HEARTBEAT unanswered before the
    // last up to RTO.Max (10 s): 1, 1, 2, 4, 8, then 10 six times, 76 s in
    // all, each jittered by ±50% (RFC 9260 §8.3). Without the doubling it
    // was 11 s in all.
    let took = p.now - cut_at;
    let (least, most) = (
        Duration::from_millis(330_000 + 38_000),
        Duration::from_millis(330_000 + 114_000 + 2_000),
    );
    assert!(
        took >= least && took <= most,
        "ended {took} after the cut, expected {least} to {most}"
    );
    p.settle(100);
    assert_eq!(p.slots(), (0, 0), "both slots free");
}

#[test]
fn an_idle_association_whose_peer_answers_stays_up() {
    let mut p = Pair::ddp();
    let (a, b) = p.connect();
    let sent = p.sent;
    let until = p.now + Duration::from_secs(3600);
    while p.now < until {
        assert!(p.step(), "the heartbeat timers keep running");
    }
    assert_eq!(closed(&p.events_a), []);
    assert_eq!(closed(&p.events_b), []);
    // Each side's HEARTBEAT every 30.5 to 31.5 s (HB.interval plus the RTO,
    // 1 s, jittered by ±50%) and its answer to the other's.
    for (side, (now, before)) in p.sent.iter().zip(sent).enumerate() {
        let packets = now - before;
        assert!(
            (2 * 113..=2 * 119).contains(&packets),
            "side {side} sent {packets} packets in an idle hour"
        );
    }
    p.a.send(a, 0, 16, true, b"still there").unwrap();
    p.settle(1000);
    let mut buf = vec![0u8; p.b.config().receive_message_max()];
    let r = p.b.recv(&mut buf).expect("delivered");
    assert_eq!((r.assoc, &buf[..r.len]), (b, &b"still there"[..]));
}

#[test]
fn without_heartbeats_an_idle_association_waits() {
    let quiet = Config {
        heartbeat_interval_ms: None,
        ..Config::default()
    };
    let mut p = Pair::new(quiet.clone(), quiet);
    let (a, b) = p.connect();
    p.cut = true;
    // Nothing is left to happen: no timer runs on either side.
    let mut steps = 0;
    while p.step() {
        steps += 1;
        assert!(steps < 1000, "a timer runs");
    }
    assert!(p.a.is_up(a) && p.b.is_up(b));
    assert_eq!(p.a.poll_timeout(), None::<Instant>);
}
