//! Half-open incoming associations expire: a peer that sends INITs and never
//! the COOKIE ECHO (RFC 9260 §5.1) holds our association slots only until
//! `Config::handshake_timeout_ms` after each INIT, then a real peer gets in.

mod support;

use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddr};

use sctp_lite::{Config, Duration, Endpoint, EventKind, Instant, PPID_DDP_SEGMENT};
use support::{message, up, Pair, Side};

/// The server's `associations_max`.
const SLOTS: usize = 4;
/// The server's `handshake_timeout_ms`.
const TIMEOUT_MS: u64 = 3_000;

/// The chunk type of an SCTP packet's first chunk (RFC 9260 §3.2: after the
/// 12-octet common header).
fn first_chunk(packet: &[u8]) -> u8 {
    packet[12]
}

/// RFC 9260 §3.3.2: INIT is chunk type 1, INIT ACK 2, COOKIE ACK 11.
const INIT: u8 = 1;
const INIT_ACK: u8 = 2;
const COOKIE_ACK: u8 = 11;

/// Move packets between A and B at the current time, with no delay, until
/// neither has one to send; B's packets to anyone else (the flooder) are
/// dropped. Returns B's packets to A.
fn shuttle(pair: &mut Pair) -> Vec<Vec<u8>> {
    let mut buf = vec![0u8; 65_536];
    let mut to_a = Vec::new();
    loop {
        let mut any = false;
        while let Some(t) = pair.a.poll_transmit(pair.now, &mut buf) {
            any = true;
            pair.b.handle_datagram(pair.now, pair.a_addr, &buf[..t.len]);
        }
        while let Some(t) = pair.b.poll_transmit(pair.now, &mut buf) {
            any = true;
            if t.remote == pair.a_addr {
                to_a.push(buf[..t.len].to_vec());
                pair.a.handle_datagram(pair.now, pair.b_addr, &buf[..t.len]);
            }
        }
        if !any {
            break;
        }
    }
    while let Some(event) = pair.a.poll_event() {
        pair.events_a.push(event);
    }
    while let Some(event) = pair.b.poll_event() {
        pair.events_b.push(event);
    }
    to_a
}

#[test]
fn half_open_associations_expire_and_free_their_slots() {
    let server = Config {
        associations_max: SLOTS,
        handshake_timeout_ms: TIMEOUT_MS,
        ..Config::default()
    };
    let mut pair = Pair::new(Config::default(), server);
    let deadline = Instant::ZERO + Duration::from_millis(TIMEOUT_MS);

    // The flooder: one UDP socket (10.0.0.66) with an endpoint of its own
    // whose INITs reach B and whose every later packet is lost, so it never
    // answers an INIT ACK. Two INITs more than B has slots.
    let flooder = SocketAddr::from((Ipv4Addr::new(10, 0, 0, 66), pair.b_addr.port()));
    #[allow(clippy::disallowed_methods)]
    // Only the origin of sctp-proto's time; see Endpoint::new.
    let epoch = std::time::Instant::now();
    let mut x = Endpoint::new(Config::default(), epoch).expect("flooder config");
    for _ in 0..SLOTS + 2 {
        x.connect(pair.now, pair.b_addr).expect("flooder connect");
    }
    let mut buf = vec![0u8; 65_536];
    let mut tags = HashSet::new();
    while let Some(t) = x.poll_transmit(pair.now, &mut buf) {
        let init = &buf[..t.len];
        assert_eq!(first_chunk(init), INIT);
        // RFC 9260 §3.3.2: the Initiate Tag follows the chunk header.
        tags.insert(u32::from_be_bytes(init[16..20].try_into().unwrap()));
        pair.b.handle_datagram(pair.now, flooder, init);
    }
    assert_eq!(tags.len(), SLOTS + 2, "distinct Initiate Tags");
    let mut init_acks = 0;
    while let Some(t) = pair.b.poll_transmit(pair.now, &mut buf) {
        assert_eq!(t.remote, flooder);
        init_acks += usize::from(first_chunk(&buf[..t.len]) == INIT_ACK);
    }
    assert!(init_acks >= SLOTS, "B answered the INITs it took");
    assert_eq!(pair.b.associations(), SLOTS, "every slot half-open");
    // The half-open associations have no sctp-proto timer: their deadline
    // is what wakes a caller that sleeps until poll_timeout.
    assert_eq!(pair.b.poll_timeout(), Some(deadline));

    // (a) Before the deadline a real client does not get in.
    let refused = pair.a.connect(pair.now, pair.b_addr).expect("connect");
    shuttle(&mut pair);
    pair.now = deadline - Duration::from_micros(1);
    pair.a.handle_timeout(pair.now);
    pair.b.handle_timeout(pair.now);
    let to_a = shuttle(&mut pair);
    assert!(
        to_a.iter().all(|p| first_chunk(p) != COOKIE_ACK),
        "B completed a handshake while full"
    );
    assert_eq!(up(&pair.events_a), None, "A came up while B was full");
    assert!(pair.events_b.is_empty(), "B: {:?}", pair.events_b);
    assert_eq!(pair.b.associations(), SLOTS);
    assert_eq!(pair.b.handshakes_expired(), 0);
    // A gives that attempt up (it may have ended already).
    let _ = pair.a.abort(refused);
    shuttle(&mut pair);
    pair.events_a.clear();

    // (b) At the deadline every half-open slot is freed, with nothing but
    // the deadline to wake the pair.
    pair.drive_until(100, |p| p.b.associations() == 0);
    assert_eq!(pair.now, deadline);
    assert_eq!(pair.b.handshakes_expired(), SLOTS as u64);
    assert_eq!(pair.b.poll_timeout(), None);
    // The user never heard of them: no event.
    assert!(pair.events_b.is_empty(), "B: {:?}", pair.events_b);

    // A real client's association now comes up and carries messages.
    let (a, b) = pair.connect();
    assert!(matches!(
        pair.events_b[0].kind,
        EventKind::Up {
            outbound: false,
            ..
        }
    ));
    let to_b = message(Side::A, 1, 1000);
    let to_a = message(Side::B, 2, 700);
    pair.a
        .send(a, 0, PPID_DDP_SEGMENT, true, &to_b)
        .expect("send A");
    pair.b
        .send(b, 0, PPID_DDP_SEGMENT, true, &to_a)
        .expect("send B");
    let mut got_b = None;
    let mut got_a = None;
    let mut rx = vec![0u8; pair.a.config().receive_message_max()];
    pair.drive_until(1000, |p| {
        if let Some(r) = p.b.recv(&mut rx) {
            got_b = Some((r, rx[..r.len].to_vec()));
        }
        if let Some(r) = p.a.recv(&mut rx) {
            got_a = Some((r, rx[..r.len].to_vec()));
        }
        got_a.is_some() && got_b.is_some()
    });
    let (r, data) = got_b.unwrap();
    assert_eq!((r.assoc, r.stream, r.ppid), (b, 0, PPID_DDP_SEGMENT));
    assert_eq!(data, to_b);
    let (r, data) = got_a.unwrap();
    assert_eq!((r.assoc, r.stream, r.ppid), (a, 0, PPID_DDP_SEGMENT));
    assert_eq!(data, to_a);
    assert_eq!(pair.b.handshakes_expired(), SLOTS as u64);
}
