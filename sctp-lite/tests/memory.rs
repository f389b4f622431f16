//! Two endpoints in memory, in virtual time: the association and its DDP
//! check (RFC 5043 §7.1), unordered PPID 16/17 messages of every length both
//! ways checked octet by octet, loss repaired by SCTP's retransmission, many
//! streams, and the send-side limits.

mod support;

use std::collections::{HashMap, HashSet};

use sctp_lite::Duration;
use sctp_lite::{
    AssocId, CloseReason, Config, Event, EventKind, SendError, PPID_DDP_SEGMENT,
    PPID_DDP_STREAM_SESSION_CONTROL,
};
use support::{message, Loss, Pair, Side};

/// One message of a plan.
#[derive(Debug, Clone, Copy)]
struct Msg {
    stream: u16,
    ppid: u32,
    unordered: bool,
    len: usize,
    tag: u32,
}

/// Messages one side still waits for, by (stream, PPID, length); received
/// content must equal one of them exactly.
#[derive(Default)]
struct Expect {
    outstanding: HashMap<(u16, u32, usize), Vec<u32>>,
    count: usize,
}

impl Expect {
    fn add(&mut self, m: &Msg) {
        self.outstanding
            .entry((m.stream, m.ppid, m.len))
            .or_default()
            .push(m.tag);
        self.count += 1;
    }

    fn check(&mut self, from: Side, stream: u16, ppid: u32, data: &[u8]) {
        let tags = self
            .outstanding
            .get_mut(&(stream, ppid, data.len()))
            .unwrap_or_else(|| {
                panic!(
                    "unexpected message: stream {stream} ppid {ppid} len {}",
                    data.len()
                )
            });
        let at = tags
            .iter()
            .position(|&tag| message(from, tag, data.len()) == data)
            .unwrap_or_else(|| {
                panic!(
                    "octets differ: stream {stream} ppid {ppid} len {}",
                    data.len()
                )
            });
        tags.swap_remove(at);
        self.count -= 1;
    }
}

/// Send `plan_a` from A and `plan_b` from B as fast as the send buffers
/// allow, read everything on both sides, and check every message arrived
/// once with its stream, PPID and octets.
fn transfer(pair: &mut Pair, assocs: (AssocId, AssocId), plan_a: &[Msg], plan_b: &[Msg]) {
    let mut expect_b = Expect::default(); // what B waits for (A's messages)
    let mut expect_a = Expect::default();
    plan_a.iter().for_each(|m| expect_b.add(m));
    plan_b.iter().for_each(|m| expect_a.add(m));
    let (mut next_a, mut next_b) = (0, 0);
    let mut buf = vec![0u8; pair.a.config().receive_message_max()];
    let mut steps = 0;
    while expect_a.count + expect_b.count > 0 {
        next_a += send_some(pair, Side::A, assocs.0, &plan_a[next_a..]);
        next_b += send_some(pair, Side::B, assocs.1, &plan_b[next_b..]);
        if !pair.step() {
            panic!(
                "stalled with {} + {} messages outstanding, {} of {} and {} of {} sent, \
                 {} dropped; events {:?} {:?}",
                expect_a.count,
                expect_b.count,
                next_a,
                plan_a.len(),
                next_b,
                plan_b.len(),
                pair.dropped,
                pair.events_a,
                pair.events_b,
            );
        }
        while let Some(r) = pair.b.recv(&mut buf) {
            assert_eq!(r.assoc, assocs.1);
            expect_b.check(Side::A, r.stream, r.ppid, &buf[..r.len]);
        }
        while let Some(r) = pair.a.recv(&mut buf) {
            assert_eq!(r.assoc, assocs.0);
            expect_a.check(Side::B, r.stream, r.ppid, &buf[..r.len]);
        }
        steps += 1;
        assert!(
            steps < 200_000,
            "not done after {steps} steps: {} + {} outstanding, drop every {:?}",
            expect_a.count,
            expect_b.count,
            pair.drop_every
        );
    }
    assert_eq!((next_a, next_b), (plan_a.len(), plan_b.len()));
}

/// Queue messages of `plan` until a send buffer is full; how many went.
fn send_some(pair: &mut Pair, side: Side, assoc: AssocId, plan: &[Msg]) -> usize {
    let endpoint = pair.endpoint(side);
    for (i, m) in plan.iter().enumerate() {
        let data = message(side, m.tag, m.len);
        match endpoint.send(assoc, m.stream, m.ppid, m.unordered, &data) {
            Ok(()) => {}
            Err(SendError::Full) => return i,
            Err(e) => panic!("send {m:?}: {e}"),
        }
    }
    plan.len()
}

fn kinds(events: &[Event]) -> Vec<EventKind> {
    events.iter().map(|e| e.kind).collect()
}

#[test]
fn association_comes_up_with_ddp_adaptation_both_sides() {
    let mut pair = Pair::ddp();
    let (a, b) = pair.connect();
    assert_eq!(
        kinds(&pair.events_a),
        [EventKind::Up {
            outbound: true,
            peer_adaptation: Some(1)
        }]
    );
    assert_eq!(
        kinds(&pair.events_b),
        [EventKind::Up {
            outbound: false,
            peer_adaptation: Some(1)
        }]
    );
    assert_eq!(pair.events_a[0].remote, pair.b_addr);
    assert_eq!(pair.events_b[0].remote, pair.a_addr);
    assert_eq!(pair.a.peer_adaptation(a), Some(1));
    assert_eq!(pair.b.peer_adaptation(b), Some(1));
    assert!(pair.a.is_up(a) && pair.b.is_up(b));
    assert_eq!((pair.a.associations(), pair.b.associations()), (1, 1));
}

#[test]
fn every_length_to_1444_unordered_ppid_16_and_17_both_ways() {
    let mut pair = Pair::ddp();
    let assocs = pair.connect();
    let plan: Vec<Msg> = (1..=1444)
        .map(|len| Msg {
            stream: (len % 4) as u16,
            ppid: if len % 2 == 0 {
                PPID_DDP_SEGMENT
            } else {
                PPID_DDP_STREAM_SESSION_CONTROL
            },
            unordered: true,
            len,
            tag: len as u32,
        })
        .collect();
    transfer(&mut pair, assocs, &plan, &plan);
}

#[test]
fn a_peer_without_the_indication_is_refused() {
    let no_indication = Config {
        adaptation_code_point: None,
        require_ddp: false,
        ..Config::default()
    };
    let other_code_point = Config {
        adaptation_code_point: Some(2),
        require_ddp: false,
        ..Config::default()
    };
    // The server sends none in its INIT ACK: the client refuses.
    let mut pair = Pair::new(Config::default(), no_indication.clone());
    refused(&mut pair, Side::A, None);
    // The client sends none in its INIT: the server refuses.
    let mut pair = Pair::new(no_indication.clone(), Config::default());
    refused(&mut pair, Side::B, None);
    // Another adaptation layer's code point.
    let mut pair = Pair::new(Config::default(), other_code_point);
    refused(&mut pair, Side::A, Some(2));

    // With the check off on both sides, an association without DDP is up.
    let mut pair = Pair::new(no_indication.clone(), no_indication);
    let (a, _) = pair.connect();
    assert_eq!(
        kinds(&pair.events_a),
        [EventKind::Up {
            outbound: true,
            peer_adaptation: None
        }]
    );
    assert_eq!(pair.a.peer_adaptation(a), None);
}

/// A connects to B; `refuser` sees the peer's `peer_adaptation` and refuses.
/// The other side sees the ABORT: after its `Up` when it was the server, or
/// instead of it when it was the client (the refusing server sends ABORT in
/// place of the COOKIE ACK). Both then free the association.
fn refused(pair: &mut Pair, refuser: Side, peer_adaptation: Option<u32>) {
    pair.a.connect(pair.now, pair.b_addr).unwrap();
    let closed = |events: &[Event]| {
        events
            .iter()
            .any(|e| e.kind == EventKind::Closed(CloseReason::AbortedByPeer))
    };
    pair.drive_until(1000, |p| match refuser {
        Side::A => closed(&p.events_b),
        Side::B => closed(&p.events_a),
    });
    let (refusing, other) = match refuser {
        Side::A => (&pair.events_a, &pair.events_b),
        Side::B => (&pair.events_b, &pair.events_a),
    };
    assert_eq!(kinds(refusing), [EventKind::Refused { peer_adaptation }]);
    let expected_other: &[EventKind] = match refuser {
        Side::A => &[
            EventKind::Up {
                outbound: false,
                peer_adaptation: Some(1),
            },
            EventKind::Closed(CloseReason::AbortedByPeer),
        ],
        Side::B => &[EventKind::Closed(CloseReason::AbortedByPeer)],
    };
    assert_eq!(kinds(other), expected_other);
    assert!(!pair.a.is_up(pair.events_a[0].assoc));
    pair.drive_until(100, |p| p.a.associations() == 0 && p.b.associations() == 0);
}

/// Every length from 1 to 1444 once, in a scattered order (37 is prime to
/// 1444), on streams 0 to 2, ordered and unordered, PPID 16 and 17.
fn lossy_plan() -> Vec<Msg> {
    (0..1444u32)
        .map(|tag| Msg {
            stream: (tag % 3) as u16,
            ppid: if tag % 5 == 0 {
                PPID_DDP_STREAM_SESSION_CONTROL
            } else {
                PPID_DDP_SEGMENT
            },
            unordered: tag % 2 == 0,
            len: (tag as usize * 37) % 1444 + 1,
            tag,
        })
        .collect()
}

/// Run the lossy plan both ways over `pair` and check that SCTP repaired the
/// loss (RFC 9260 §6.3.3, §7.2.4) within `time_max` of virtual time, and
/// that the association stayed up.
fn transfer_with_loss(mut pair: Pair, case: &str, time_max: Duration) {
    let assocs = pair.connect();
    let plan = lossy_plan();
    let lengths: HashSet<usize> = plan.iter().map(|m| m.len).collect();
    assert_eq!(lengths.len(), 1444);
    let start = pair.now;
    transfer(&mut pair, assocs, &plan, &plan);
    let elapsed = pair.now - start;
    assert!(pair.dropped > 0, "{case}: nothing was dropped");
    assert!(
        elapsed <= time_max,
        "{case}: took {elapsed} of virtual time, more than {time_max}"
    );
    assert!(pair.a.is_up(assocs.0) && pair.b.is_up(assocs.1), "{case}");
    assert!(
        !pair
            .events_a
            .iter()
            .chain(&pair.events_b)
            .any(|e| matches!(e.kind, EventKind::Closed(_))),
        "{case}: {:?} {:?}",
        pair.events_a,
        pair.events_b
    );
}

// Every Nth datagram of each direction is dropped. This used to stall for
// ever: after a T3-rtx expiry sctp-proto resent every outstanding chunk,
// one cwnd per poll_transmit, so each side's recovery round was a fixed
// number of packets ending with its one SACK; when that number was a
// multiple of N the SACK was dropped in every round, on both sides alike
// (fork change 5, RFC 9260 §6.3.3 E3).
#[test]
fn dropped_datagrams_are_retransmitted() {
    // A third of all datagrams lost takes 177 s of virtual time (RTO backs
    // off to RTO.Max, 10 s); a twentieth, 4 s.
    for (drop_every, time_max_s) in [(3, 300), (5, 80), (7, 40), (20, 10)] {
        let mut pair = Pair::ddp();
        pair.drop_every = Some(drop_every);
        transfer_with_loss(
            pair,
            &format!("every {drop_every}th"),
            Duration::from_secs(time_max_s),
        );
    }
}

// 1 % and 5 % of the datagrams both ways, dropped at random from fixed seeds.
#[test]
fn random_loss_is_repaired() {
    // 0.2 to 0.6 s of virtual time at 1 %, 2.2 to 4.2 s at 5 %.
    for (percent, time_max_s) in [(1, 5), (5, 20)] {
        for seed in [1, 2, 3] {
            let mut pair = Pair::ddp();
            pair.random_loss = Some(Loss::new(seed, percent));
            transfer_with_loss(
                pair,
                &format!("{percent} % loss, seed {seed}"),
                Duration::from_secs(time_max_s),
            );
        }
    }
}

// A peer that goes silent mid-transfer is declared unreachable after
// Association.Max.Retrans (10) consecutive T3-rtx expiries (RFC 9260 §8.1,
// fork change 6): Closed(TimedOut), 62.6 s after the cut with the default
// RTOs (0.2 + 0.4 + ... + 6.4 s, then 5 × RTO.Max 10 s; RFC 9260 §6.3.3 E2).
#[test]
fn a_silent_peer_times_out() {
    let mut pair = Pair::ddp();
    let (a, _) = pair.connect();
    let message = message(Side::A, 0, 1000);
    for _ in 0..200 {
        pair.a.send(a, 0, PPID_DDP_SEGMENT, true, &message).unwrap();
    }
    // Part of it goes through (and A's RTO falls to RTO.Min with the first
    // SACKs), then the link dies.
    let mut buf = vec![0u8; pair.a.config().receive_message_max()];
    let mut read = 0;
    pair.drive_until(1000, |p| {
        while p.b.recv(&mut buf).is_some() {
            read += 1;
        }
        read >= 100
    });
    assert!(read < 200);
    pair.cut = true;
    let cut_at = pair.now;
    let timed_out = |p: &mut Pair| {
        p.events_a
            .iter()
            .any(|e| e.kind == EventKind::Closed(CloseReason::TimedOut))
    };
    pair.drive_until(10_000, timed_out);
    let elapsed = pair.now - cut_at;
    assert!(
        elapsed >= Duration::from_secs(62) && elapsed <= Duration::from_secs(64),
        "declared dead {elapsed} after the cut"
    );
    assert_eq!(
        kinds(&pair.events_a)[1..],
        [EventKind::Closed(CloseReason::TimedOut)]
    );
    assert!(!pair.a.is_up(a));
    assert_eq!(
        pair.a.send(a, 0, PPID_DDP_SEGMENT, true, b"x"),
        Err(SendError::InvalidAssociation)
    );
    pair.drive_until(100, |p| p.a.associations() == 0);
}

#[test]
fn sixty_four_streams_in_one_association() {
    let mut pair = Pair::ddp();
    let assocs = pair.connect();
    let plan: Vec<Msg> = (0..64 * 8u32)
        .map(|tag| Msg {
            stream: (tag % 64) as u16,
            ppid: if tag % 5 == 0 {
                PPID_DDP_STREAM_SESSION_CONTROL
            } else {
                PPID_DDP_SEGMENT
            },
            unordered: tag % 2 == 0,
            len: 100 + (tag as usize % 1344),
            tag,
        })
        .collect();
    transfer(&mut pair, assocs, &plan, &plan);
    // Every stream carried messages (transfer checked their stream ids).
    let streams: HashSet<u16> = plan.iter().map(|m| m.stream).collect();
    assert_eq!(streams.len(), 64);
}

#[test]
fn send_limits_and_abort() {
    let mut pair = Pair::ddp();
    let (a, b) = pair.connect();
    let max = pair.a.config().message_size_max();
    assert_eq!(max, 1444);
    let big = vec![7u8; max + 1];
    assert_eq!(pair.a.send(a, 0, 16, true, &big), Err(SendError::TooLarge));
    assert_eq!(pair.a.send(a, 0, 16, true, &[]), Err(SendError::Empty));
    assert_eq!(
        pair.a.send(a, 64, 16, true, b"x"),
        Err(SendError::InvalidStream)
    );
    assert_eq!(pair.a.send(a, 0, 16, true, &big[..max]), Ok(()));

    // The send buffer is bounded: without the peer's SACKs it fills.
    let mut queued = max;
    let result = loop {
        match pair.a.send(a, 1, 16, true, &big[..max]) {
            Ok(()) => queued += max,
            Err(e) => break e,
        }
        assert!(queued < 1 << 20, "the send buffer never filled");
    };
    assert_eq!(result, SendError::Full);

    pair.a.abort(a).unwrap();
    assert_eq!(
        pair.a.send(a, 0, 16, true, b"x"),
        Err(SendError::InvalidAssociation)
    );
    assert_eq!(pair.a.abort(a), Err(SendError::InvalidAssociation));
    pair.drive_until(1000, |p| p.events_b.len() >= 2);
    assert_eq!(pair.events_a[1].kind, EventKind::Closed(CloseReason::Local));
    assert_eq!(
        pair.events_b[1].kind,
        EventKind::Closed(CloseReason::AbortedByPeer)
    );
    assert_eq!(pair.events_b[1].assoc, b);
    pair.drive_until(100, |p| p.a.associations() == 0 && p.b.associations() == 0);
}

/// Associations to one peer opened and aborted in a loop, four at a time:
/// every one comes up. sctp-proto reuses the handle of an association it
/// let go for the next one; the endpoint once forgot the newer
/// association's handle when it freed the older one's slot, and the newer
/// association never came up (its packets had nowhere to go).
#[test]
fn associations_opened_and_aborted_in_a_loop_all_come_up() {
    let mut pair = Pair::ddp();
    let mut opening: HashSet<AssocId> = HashSet::new();
    for _ in 0..4 {
        opening.insert(pair.a.connect(pair.now, pair.b_addr).unwrap());
    }
    let mut up = 0;
    while up < 500 {
        assert!(pair.step(), "nothing moves with {opening:?} opening");
        assert!(
            pair.now < sctp_lite::Instant::from_secs(5),
            "{up} came up; stuck: {opening:?}"
        );
        let fresh: Vec<Event> = pair.events_a.drain(..).collect();
        for event in fresh {
            match event.kind {
                EventKind::Up { .. } => {
                    assert!(opening.remove(&event.assoc));
                    up += 1;
                    pair.a.abort(event.assoc).unwrap();
                    let next = pair.a.connect(pair.now, pair.b_addr).unwrap();
                    opening.insert(next);
                }
                EventKind::Closed(CloseReason::Local) => {}
                other => panic!("{other:?} on {:?}", event.assoc),
            }
        }
    }
}
