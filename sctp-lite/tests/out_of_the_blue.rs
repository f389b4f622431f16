//! Packets for no association (RFC 9260 §8.4), and the answers with the T
//! bit set that a peer sends to ours (§8.5.1 (B), (C)).
//!
//! Before, sctp-lite answered only a SHUTDOWN ACK, and the fork's endpoint,
//! which finds an association by our own verification tag, dropped every
//! answer that carried the peer's tag reflected: a peer that lost its
//! association (it restarted, or ended it) left ours retransmitting until
//! it gave up, tens of seconds later.

mod support;

use sctp_lite::{CloseReason, Config, Duration, Endpoint, Instant, PPID_DDP_SEGMENT};
use support::{addr, closed, sent, Pair};

/// RFC 9260 §3.2: chunk types.
const DATA: u8 = 0;
const HEARTBEAT: u8 = 4;
const ABORT: u8 = 6;
const SHUTDOWN_ACK: u8 = 8;
const ERROR: u8 = 9;
const COOKIE_ECHO: u8 = 10;
const COOKIE_ACK: u8 = 11;
const SHUTDOWN_COMPLETE: u8 = 14;
/// The T bit of ABORT and SHUTDOWN COMPLETE (§3.3.7, §3.3.13).
const T_BIT: u8 = 1;
/// RFC 6951's port on both sides, as the pair uses.
const PORT: u16 = sctp_lite::UDP_ENCAPSULATION_PORT;

/// An SCTP packet from PORT to PORT with Verification Tag `tag` holding
/// `chunks` (type, flags, value), each padded to 4 octets, under a right
/// CRC32c (§6.8, stored least significant octet first).
fn packet(tag: u32, chunks: &[(u8, u8, &[u8])]) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&PORT.to_be_bytes());
    p.extend_from_slice(&PORT.to_be_bytes());
    p.extend_from_slice(&tag.to_be_bytes());
    p.extend_from_slice(&[0; 4]);
    for &(typ, flags, value) in chunks {
        p.extend_from_slice(&[typ, flags]);
        p.extend_from_slice(&(4 + value.len() as u16).to_be_bytes());
        p.extend_from_slice(value);
        p.resize(p.len().next_multiple_of(4), 0);
    }
    let crc = crc32c::crc32c(&p);
    p[8..12].copy_from_slice(&crc.to_le_bytes());
    p
}

/// A DATA chunk's value: TSN, stream, SSN, PPID and one octet.
const DATA_VALUE: &[u8] = &[0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 16, 0x55];

fn tag_of(packet: &[u8]) -> u32 {
    u32::from_be_bytes(packet[4..8].try_into().unwrap())
}

/// The answer §8.4 prescribes: `typ` with the T bit, alone, the tag
/// reflected, the ports swapped (here equal), a right CRC32c.
fn assert_reflected(answer: &[u8], typ: u8, tag: u32) {
    assert_eq!(answer.len(), 16, "a lone chunk: {answer:?}");
    assert_eq!((answer[12], answer[13]), (typ, T_BIT), "{answer:?}");
    assert_eq!(&answer[14..16], &[0, 4]);
    assert_eq!(tag_of(answer), tag, "the tag reflected");
    let mut zeroed = answer.to_vec();
    zeroed[8..12].fill(0);
    assert_eq!(crc32c::crc32c(&zeroed).to_le_bytes(), answer[8..12]);
}

#[allow(clippy::disallowed_methods)] // Only the origin of sctp-proto's time.
fn fresh() -> Endpoint {
    Endpoint::new(Config::default(), std::time::Instant::now()).unwrap()
}

/// B restarts (a new endpoint at its address, knowing nothing) while A's
/// association is up. A's next message is out of the blue there: B answers
/// with an ABORT carrying A's packet's tag and the T bit, and A, whose
/// peer's tag that is, ends its association at once.
#[test]
fn a_peer_that_lost_its_association_ends_ours_at_once() {
    let mut p = Pair::ddp();
    let (a, _) = p.connect();
    p.settle(100);
    p.b = fresh();
    let now = p.now;
    p.a.send(a, 0, PPID_DDP_SEGMENT, true, b"after the restart")
        .unwrap();
    let data = sent(&mut p.a, now);
    let types: Vec<u8> = data.iter().map(|d| d[12]).collect();
    assert!(types.contains(&DATA), "{types:?}");
    for d in &data {
        p.b.handle_datagram(now, p.a_addr, d);
    }
    let answers = sent(&mut p.b, now);
    assert_eq!(answers.len(), data.len(), "each answered");
    for answer in &answers {
        assert_reflected(answer, ABORT, tag_of(&data[0]));
    }
    assert_eq!(p.b.out_of_the_blue(), data.len() as u64);
    assert_eq!(p.b.associations(), 0, "B made nothing of it");
    p.a.handle_datagram(now, p.b_addr, &answers[0]);
    let events: Vec<_> = std::iter::from_fn(|| p.a.poll_event()).collect();
    assert_eq!(closed(&events), [CloseReason::AbortedByPeer]);
    assert!(!p.a.is_up(a));
    assert_eq!(p.a.out_of_the_blue(), 0, "A took the answer as its own");
    // A answers nothing: an ABORT is never answered.
    assert_eq!(sent(&mut p.a, now), Vec::<Vec<u8>>::new());
}

/// A reflected ABORT is A's only if it carries A's peer's tag and comes
/// from A's peer's address: one from elsewhere, or with another tag, is
/// dropped and counted (§8.5.1 (B)).
#[test]
fn a_reflected_abort_is_taken_only_from_the_peer_with_its_tag() {
    let mut p = Pair::ddp();
    let (a, _) = p.connect();
    p.settle(100);
    let now = p.now;
    p.a.send(a, 0, PPID_DDP_SEGMENT, true, b"to learn the tag")
        .unwrap();
    let data = sent(&mut p.a, now);
    let peer_tag = tag_of(&data[0]);
    let abort = packet(peer_tag, &[(ABORT, T_BIT, &[])]);
    p.a.handle_datagram(now, addr(3), &abort);
    let other_tag = packet(peer_tag ^ 1, &[(ABORT, T_BIT, &[])]);
    p.a.handle_datagram(now, p.b_addr, &other_tag);
    // Not reflected: the T bit clear, so the tag would have to be A's own.
    let not_reflected = packet(peer_tag, &[(ABORT, 0, &[])]);
    p.a.handle_datagram(now, p.b_addr, &not_reflected);
    assert!(p.a.is_up(a));
    assert_eq!(p.a.out_of_the_blue(), 3);
    assert_eq!(sent(&mut p.a, now), Vec::<Vec<u8>>::new(), "none answered");
    p.a.handle_datagram(now, p.b_addr, &abort);
    let events: Vec<_> = std::iter::from_fn(|| p.a.poll_event()).collect();
    assert_eq!(closed(&events), [CloseReason::AbortedByPeer]);
    assert_eq!(p.a.out_of_the_blue(), 3);
}

/// Each kind of packet §8.4 names, to an endpoint with no association.
#[test]
fn packets_for_no_association_are_answered_as_rfc_9260_8_4_says() {
    let mut e = fresh();
    let now = Instant::ZERO;
    let from = addr(1);
    let tag = 0x1234_5678;
    let stale_cookie: &[u8] = &[0, 3, 0, 8, 0, 0, 0, 1];
    let other_cause: &[u8] = &[0, 1, 0, 8, 0, 0, 0, 1];
    let mut bad_crc = packet(tag, &[(DATA, 3, DATA_VALUE)]);
    bad_crc[8] ^= 1;
    // A chunk that says it is longer than the packet.
    let mut overlong = packet(tag, &[(DATA, 3, DATA_VALUE)]);
    overlong[15] += 8;
    let crc = {
        overlong[8..12].fill(0);
        crc32c::crc32c(&overlong)
    };
    overlong[8..12].copy_from_slice(&crc.to_le_bytes());
    let cases: Vec<(&str, Vec<u8>, Option<u8>)> = vec![
        // (8): anything else is answered with an ABORT.
        ("DATA", packet(tag, &[(DATA, 3, DATA_VALUE)]), Some(ABORT)),
        (
            "HEARTBEAT",
            packet(tag, &[(HEARTBEAT, 0, &[0, 1, 0, 8, 1, 2, 3, 4])]),
            Some(ABORT),
        ),
        // (4): a COOKIE ECHO we cannot take (the fork keeps state from the
        // INIT on; this one's handshake is gone).
        (
            "COOKIE ECHO",
            packet(tag, &[(COOKIE_ECHO, 0, &[9; 32])]),
            Some(ABORT),
        ),
        (
            "ERROR, another cause",
            packet(tag, &[(ERROR, 0, other_cause)]),
            Some(ABORT),
        ),
        // (5): SHUTDOWN ACK -> SHUTDOWN COMPLETE.
        (
            "SHUTDOWN ACK",
            packet(tag, &[(SHUTDOWN_ACK, 0, &[])]),
            Some(SHUTDOWN_COMPLETE),
        ),
        // (2): an ABORT anywhere, reflected or not, for none of ours.
        ("ABORT", packet(tag, &[(ABORT, 0, &[])]), None),
        ("ABORT, T bit", packet(tag, &[(ABORT, T_BIT, &[])]), None),
        (
            "DATA then ABORT",
            packet(tag, &[(DATA, 3, DATA_VALUE), (ABORT, 0, &[])]),
            None,
        ),
        // (6) and (7).
        (
            "SHUTDOWN COMPLETE",
            packet(tag, &[(SHUTDOWN_COMPLETE, 0, &[])]),
            None,
        ),
        (
            "SHUTDOWN COMPLETE, T bit",
            packet(tag, &[(SHUTDOWN_COMPLETE, T_BIT, &[])]),
            None,
        ),
        ("COOKIE ACK", packet(tag, &[(COOKIE_ACK, 0, &[])]), None),
        (
            "ERROR, Stale Cookie",
            packet(tag, &[(ERROR, 0, stale_cookie)]),
            None,
        ),
        // No peer could take an answer with tag 0; broken packets.
        ("DATA, tag 0", packet(0, &[(DATA, 3, DATA_VALUE)]), None),
        ("bad CRC32c", bad_crc, None),
        ("overlong chunk", overlong, None),
        ("common header only", packet(tag, &[])[..12].to_vec(), None),
    ];
    for (k, (what, p, answer)) in cases.iter().enumerate() {
        e.handle_datagram(now, from, p);
        let out = sent(&mut e, now);
        match answer {
            Some(typ) => {
                assert_eq!(out.len(), 1, "{what}: one answer");
                assert_reflected(&out[0], *typ, tag);
            }
            None => assert_eq!(out, Vec::<Vec<u8>>::new(), "{what}: no answer"),
        }
        assert_eq!(e.out_of_the_blue(), k as u64 + 1, "{what}: counted");
        assert_eq!(e.associations(), 0, "{what}");
    }
}

/// A flood of packets for no association between two calls of
/// `poll_transmit` queues a bounded number of answers; every packet is
/// counted.
#[test]
fn answers_to_a_flood_are_bounded() {
    let mut e = fresh();
    let now = Instant::ZERO;
    let flood = 10_000;
    for k in 0..flood {
        let p = packet(1 + k, &[(DATA, 3, DATA_VALUE)]);
        e.handle_datagram(now, addr(1), &p);
    }
    let out = sent(&mut e, now);
    assert_eq!(e.out_of_the_blue(), u64::from(flood));
    assert!(!out.is_empty() && out.len() <= 64, "{} answers", out.len());
    // The first ones were answered, in order.
    for (k, answer) in out.iter().enumerate() {
        assert_reflected(answer, ABORT, 1 + k as u32);
    }
    // Answered again once the queue is drained.
    e.handle_datagram(now, addr(1), &packet(7, &[(DATA, 3, DATA_VALUE)]));
    assert_eq!(sent(&mut e, now).len(), 1);
}

/// B drops an incoming association whose COOKIE ECHO has not come within
/// its handshake deadline; the COOKIE ECHO that comes later is out of the
/// blue and answered with an ABORT, which ends A's attempt at once (it
/// waited out its T1-cookie retransmissions before).
#[test]
fn a_cookie_echo_after_the_handshake_deadline_is_aborted() {
    let mut p = Pair::ddp();
    let mut now = p.now;
    let a = p.a.connect(now, p.b_addr).unwrap();
    let init = sent(&mut p.a, now);
    assert_eq!(init.len(), 1);
    p.b.handle_datagram(now, p.a_addr, &init[0]);
    let init_ack = sent(&mut p.b, now);
    assert_eq!(init_ack.len(), 1);
    assert_eq!(p.b.associations(), 1);
    // Past B's deadline, with A's T1-init not yet due again.
    now += Duration::from_millis(Config::default().handshake_timeout_ms + 1);
    p.b.handle_timeout(now);
    assert_eq!(sent(&mut p.b, now), Vec::<Vec<u8>>::new());
    assert_eq!(p.b.associations(), 0);
    assert_eq!(p.b.handshakes_expired(), 1);
    p.a.handle_datagram(now, p.b_addr, &init_ack[0]);
    let echo = sent(&mut p.a, now);
    assert_eq!(echo.len(), 1);
    assert_eq!(echo[0][12], COOKIE_ECHO);
    p.b.handle_datagram(now, p.a_addr, &echo[0]);
    let answers = sent(&mut p.b, now);
    assert_eq!(answers.len(), 1);
    assert_reflected(&answers[0], ABORT, tag_of(&echo[0]));
    p.a.handle_datagram(now, p.b_addr, &answers[0]);
    let events: Vec<_> = std::iter::from_fn(|| p.a.poll_event()).collect();
    assert_eq!(closed(&events), [CloseReason::AbortedByPeer], "{events:?}");
    assert!(!p.a.is_up(a));
}

/// §8.4 (3): an INIT to an endpoint that takes no associations is answered
/// with an ABORT whose tag is the INIT's Initiate Tag, T bit clear, so
/// the peer gives up at once (found by a review: it was dropped, and the
/// peer retransmitted its INIT until its handshake timed out). An INIT
/// with a tag, beside another chunk, or with Initiate Tag 0 is dropped.
#[test]
fn an_init_to_an_endpoint_that_takes_none_is_aborted() {
    const INIT: u8 = 1;
    let closed_config = || Config {
        accept: false,
        ..Config::default()
    };
    let mut p = Pair::new(Config::default(), closed_config());
    let start = p.now;
    let a = p.a.connect(start, p.b_addr).unwrap();
    p.drive_until(1_000, |p| !closed(&p.events_a).is_empty());
    assert_eq!(p.b.out_of_the_blue(), 1, "the INIT, counted");
    assert_eq!(p.b.associations(), 0);
    let ended = p.events_a.iter().find(|e| e.assoc == a).expect("A's end");
    assert!(
        matches!(ended.kind, sctp_lite::EventKind::Closed(_)),
        "{ended:?}"
    );
    assert!(
        p.now.total_micros() - start.total_micros() < 1_000,
        "at once, not after INIT retransmissions: {} us",
        p.now.total_micros() - start.total_micros()
    );

    // The answer itself: ABORT, tag = Initiate Tag, T clear, no cause.
    #[allow(clippy::disallowed_methods)] // Only the origin of sctp-proto's time.
    let mut e = Endpoint::new(closed_config(), std::time::Instant::now()).unwrap();
    let now = Instant::ZERO;
    // Initiate Tag, a_rwnd, outbound and inbound streams, initial TSN.
    let init_value: &[u8] = &[0xCA, 0xFE, 0xF0, 0x0D, 0, 1, 0, 0, 0, 10, 0, 10, 0, 0, 0, 1];
    e.handle_datagram(now, addr(1), &packet(0, &[(INIT, 0, init_value)]));
    let out = sent(&mut e, now);
    assert_eq!(out.len(), 1, "one answer");
    let abort = &out[0];
    assert_eq!(abort.len(), 16);
    assert_eq!(tag_of(abort), 0xCAFE_F00D, "the Initiate Tag");
    assert_eq!(&abort[12..16], &[ABORT, 0, 0, 4], "T bit clear, no cause");
    let mut zeroed = abort.to_vec();
    zeroed[8..12].fill(0);
    assert_eq!(crc32c::crc32c(&zeroed).to_le_bytes(), abort[8..12]);
    let mut no_tag = init_value.to_vec();
    no_tag[..4].fill(0);
    for (what, bad) in [
        ("a tag", packet(7, &[(INIT, 0, init_value)])),
        (
            "another chunk",
            packet(0, &[(INIT, 0, init_value), (DATA, 3, DATA_VALUE)]),
        ),
        ("Initiate Tag 0", packet(0, &[(INIT, 0, &no_tag)])),
    ] {
        e.handle_datagram(now, addr(1), &bad);
        assert_eq!(sent(&mut e, now), Vec::<Vec<u8>>::new(), "{what}");
    }
    assert_eq!(e.out_of_the_blue(), 4, "every one counted");
}
