//! Configurations that cannot work, a listener's half-open handshakes at
//! its end, and `poll_at` after a deadline (each found by a review, and
//! each test failed before its fix).

mod support;

use std::net::{Ipv4Addr, SocketAddrV4};

use support::*;
use tcp_lite::link::{self, Faults, LinkConfig};
use tcp_lite::{ConnectError, Duration, EventKind, Instant, Stack, StackConfig, Transport};

/// `Stack::new` says what is wrong, and never panics (smoltcp panicked on
/// an address that is not unicast; a group MAC address was taken).
#[test]
fn addresses_that_are_not_unicast_are_refused() {
    let unicast_mac = [2, 0, 0, 0, 0, 1];
    let cases: [(&str, StackConfig); 6] = [
        (
            "addr",
            StackConfig::new(unicast_mac, Ipv4Addr::new(224, 0, 0, 1)),
        ),
        ("addr", StackConfig::new(unicast_mac, Ipv4Addr::BROADCAST)),
        ("addr", StackConfig::new(unicast_mac, Ipv4Addr::UNSPECIFIED)),
        ("mac", StackConfig::new([0x01, 0, 0x5e, 0, 0, 1], A_ADDR)),
        ("mac", StackConfig::new([0; 6], A_ADDR)),
        ("gateway", {
            let mut c = StackConfig::new(unicast_mac, A_ADDR);
            c.gateway = Some(Ipv4Addr::new(239, 1, 1, 1));
            c
        }),
    ];
    for (key, config) in cases {
        let why = config.validate().expect_err(key);
        assert!(why.0.starts_with(key), "{key}: {why}");
        let (end, _) = link::pair(LinkConfig::ethernet(1500), 1);
        let made = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            Stack::new(config, end, Instant::ZERO).is_err()
        }));
        assert_eq!(
            made.ok(),
            Some(true),
            "{key}: Stack::new panicked or took it"
        );
    }
}

/// UDP's buffers are bounded as TCP's are: `usize::MAX` passed and
/// `udp_bind` panicked; 0 datagrams passed and every send said "full".
#[test]
fn udp_buffers_that_cannot_work_are_refused() {
    for (key, tweak) in [
        (
            "udp_buffer",
            (|c: &mut StackConfig| c.udp_buffer = usize::MAX) as fn(&mut _),
        ),
        ("udp_buffer", |c| c.udp_buffer = 100),
        ("udp_datagrams", |c| c.udp_datagrams = 0),
        ("udp_datagrams", |c| c.udp_datagrams = usize::MAX),
    ] {
        let mut config = StackConfig::new([2, 0, 0, 0, 0, 1], A_ADDR);
        tweak(&mut config);
        let why = config.validate().expect_err(key);
        assert!(why.0.starts_with(key), "{key}: {why}");
    }
    assert!(StackConfig::new([2, 0, 0, 0, 0, 1], A_ADDR)
        .validate()
        .is_ok());
}

/// `poll_at` never names an instant already past once the caller has
/// polled at it: a caller that sleeps until `poll_at` would spin (here
/// until the next full scan, which is what sees a waiting connection's
/// deadline).
#[test]
fn poll_at_does_not_stay_in_the_past() {
    let mut net = Net::new(LinkConfig::ethernet(1500), 5, |c| {
        c.tcp.user_timeout = Duration::from_millis(2500);
    });
    // Nothing reaches b: the SYN goes unanswered.
    net.a.device().set_tx_faults(Faults {
        drop: 1.0,
        ..Faults::NONE
    });
    let conn = net
        .a
        .connect(SocketAddrV4::new(B_ADDR, 4000), Instant::ZERO)
        .unwrap();
    net.a.poll(Instant::ZERO);
    net.a.poll(Instant::from_millis(1000));
    // Some other traffic makes the stack poll shortly before the deadline.
    net.a.poll(Instant::from_millis(2450));
    let mut now = net.a.poll_at(Instant::from_millis(2450)).unwrap();
    let mut past = 0;
    let mut timed_out = false;
    while !timed_out && past < 1000 {
        net.a.poll(now);
        while let Some(e) = net.a.next_event() {
            timed_out |= e.conn == conn && e.kind == EventKind::TimedOut;
        }
        if timed_out {
            break;
        }
        match net.a.poll_at(now) {
            Some(at) if at <= now => {
                past += 1;
                now += Duration::from_micros(10);
            }
            Some(at) => now = at,
            None => break,
        }
    }
    assert!(timed_out, "the user timeout ended it");
    assert!(
        past < 10,
        "poll_at named a past instant {past} times in a row"
    );
    assert!(
        now <= Instant::from_millis(2500 + 110),
        "ended at {now}: within a full scan of the deadline"
    );
}

/// A full stack refuses another connection with its reason.
#[test]
fn connect_beyond_max_connections_is_refused() {
    let mut net = Net::new(LinkConfig::ethernet(1500), 5, |c| c.max_connections = 1);
    net.a
        .connect(SocketAddrV4::new(B_ADDR, 4000), net.now)
        .unwrap();
    assert_eq!(
        net.a.connect(SocketAddrV4::new(B_ADDR, 4000), net.now),
        Err(ConnectError::TooManyConnections)
    );
}

/// After `unlisten`, a handshake half open at the time is reset, as Linux
/// resets what a closed listener had not handed out: before, it completed
/// and was reported as accepted by the listener that was gone.
#[test]
fn unlisten_resets_its_half_open_handshakes() {
    let mut net = Net::new(LinkConfig::ethernet(1500), 5, |_| {});
    // Neighbours resolved first (ARP), with a connection of their own.
    let _ = net.connect(4001);
    net.b_events.clear();
    net.a_events.clear();
    let listener = net.b.listen(4000).unwrap();
    // a's SYN reaches b, b's SYN-ACK is lost.
    net.b.device().set_tx_faults(Faults {
        drop: 1.0,
        ..Faults::NONE
    });
    let conn = net
        .a
        .connect(SocketAddrV4::new(B_ADDR, 4000), net.now)
        .unwrap();
    for _ in 0..5 {
        net.step(Duration::from_millis(1));
    }
    assert_eq!(net.b.connections(), 2, "b holds the half-open handshake");
    let dropped = net.b.stats().half_open_dropped;
    net.b.unlisten(listener);
    net.b.device().set_tx_faults(Faults::NONE);
    for _ in 0..300 {
        net.step(Duration::from_millis(10));
    }
    let accepted: Vec<_> = net
        .b_events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Accepted(_)))
        .collect();
    assert!(accepted.is_empty(), "accepted after unlisten: {accepted:?}");
    assert_eq!(net.b.stats().half_open_dropped, dropped + 1);
    assert_eq!(net.b.connections(), 1, "its slot freed");
    // a hears the reset.
    assert!(
        net.a_events
            .iter()
            .any(|e| e.conn == conn && e.kind == EventKind::Reset),
        "{:?}",
        net.a_events
    );
}

/// A port an active open holds cannot be listened on, as bind(2) refuses
/// it with EADDRINUSE; it can once the connection has let it go. Before,
/// the listener took it and shared the port with a connection it had not
/// accepted.
#[test]
fn a_port_a_connection_holds_is_not_listened_on() {
    let mut net = Net::new(LinkConfig::ethernet(1500), 5, |_| {});
    let (a_conn, _) = net.connect(4000);
    let (local, _) = net.a.endpoints(a_conn).unwrap();
    assert_eq!(
        net.a.listen(local.port()),
        Err(tcp_lite::ListenError::PortInUse)
    );
    net.a.abort(a_conn).unwrap();
    net.a.release(a_conn);
    for _ in 0..50 {
        net.step(Duration::from_millis(10));
    }
    assert_eq!(net.a.connections(), 0, "the connection is gone");
    assert!(net.a.listen(local.port()).is_ok());
}
