//! SCTP over kernel UDP sockets on 127.0.0.1 (ephemeral ports): an
//! association comes up and messages go both ways, checked octet by octet,
//! within a deadline.
#![allow(clippy::disallowed_methods)] // Real sockets run in real time: the test reads the clock.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration as StdDuration, Instant as StdInstant};

use sctp_lite::{Config, Endpoint, EventKind, Instant, PPID_DDP_SEGMENT};
use tcp_lite::sys::udp::KernelUdp;
use tcp_lite::{Datagrams, UdpError, UdpId};

/// One round between `endpoint` and its kernel UDP socket: datagrams in,
/// due timers, packets out (one the socket cannot take now is dropped, as
/// a full network queue would: SCTP retransmits it).
fn pump(udp: &mut KernelUdp, socket: UdpId, endpoint: &mut Endpoint, now: Instant) {
    while udp
        .udp_recv_with(socket, |d, from| {
            endpoint.handle_datagram(now, SocketAddr::V4(from), d)
        })
        .is_some()
    {}
    if endpoint.poll_timeout().is_some_and(|t| t <= now) {
        endpoint.handle_timeout(now);
    }
    let mut packet = [0u8; 1500];
    while let Some(t) = endpoint.poll_transmit(now, &mut packet) {
        let SocketAddr::V4(remote) = t.remote else {
            continue;
        };
        let sent = udp.udp_send_with(socket, remote, t.len, |b| {
            b.copy_from_slice(&packet[..t.len])
        });
        assert!(matches!(sent, Ok(()) | Err(UdpError::Full)), "{sent:?}");
    }
}

fn octet(side: u8, tag: u32, index: usize) -> u8 {
    (index as u32)
        .wrapping_mul(13)
        .wrapping_add(tag)
        .wrapping_add(side as u32) as u8
}

#[test]
fn messages_both_ways_over_kernel_udp() {
    let start = StdInstant::now();
    let deadline = StdDuration::from_secs(10);
    let now = || Instant::from_micros(start.elapsed().as_micros() as i64);
    let (mut a_udp, mut b_udp) = (
        KernelUdp::new(Ipv4Addr::LOCALHOST, 1 << 20),
        KernelUdp::new(Ipv4Addr::LOCALHOST, 1 << 20),
    );
    let (a_socket, b_socket) = (a_udp.udp_bind(0).unwrap(), b_udp.udp_bind(0).unwrap());
    let mut a = Endpoint::new(
        Config {
            accept: false,
            ..Config::default()
        },
        start,
    )
    .unwrap();
    let mut b = Endpoint::new(Config::default(), start).unwrap();

    let b_addr = SocketAddr::V4(b_udp.udp_local(b_socket).unwrap());
    let a_assoc = a.connect(now(), b_addr).unwrap();
    let mut b_assoc = None;
    let mut a_up = false;
    const MESSAGES: u32 = 500;
    let (mut sent_a, mut sent_b, mut got_a, mut got_b) = (0u32, 0u32, 0u32, 0u32);
    let mut buf = vec![0u8; a.config().receive_message_max()];
    while got_a < MESSAGES || got_b < MESSAGES {
        assert!(
            start.elapsed() < deadline,
            "not done after {deadline:?}: A got {got_a}, B got {got_b}"
        );
        pump(&mut a_udp, a_socket, &mut a, now());
        pump(&mut b_udp, b_socket, &mut b, now());
        while let Some(e) = a.poll_event() {
            assert!(
                matches!(
                    e.kind,
                    EventKind::Up {
                        peer_adaptation: Some(1),
                        ..
                    }
                ),
                "{e:?}"
            );
            a_up = true;
        }
        while let Some(e) = b.poll_event() {
            assert!(
                matches!(
                    e.kind,
                    EventKind::Up {
                        peer_adaptation: Some(1),
                        ..
                    }
                ),
                "{e:?}"
            );
            b_assoc = Some(e.assoc);
        }
        let (true, Some(b_assoc)) = (a_up, b_assoc) else {
            continue;
        };
        // Send as the buffers allow; lengths 1..=1444.
        while sent_a < MESSAGES {
            let len = (sent_a as usize * 97) % 1444 + 1;
            let m: Vec<u8> = (0..len).map(|i| octet(1, sent_a, i)).collect();
            if a.send(a_assoc, (sent_a % 8) as u16, PPID_DDP_SEGMENT, true, &m)
                .is_err()
            {
                break;
            }
            sent_a += 1;
        }
        while sent_b < MESSAGES {
            let len = (sent_b as usize * 89) % 1444 + 1;
            let m: Vec<u8> = (0..len).map(|i| octet(2, sent_b, i)).collect();
            if b.send(b_assoc, (sent_b % 8) as u16, 17, true, &m).is_err() {
                break;
            }
            sent_b += 1;
        }
        // Unordered: check each message against the sender's pattern by the
        // tag that its length and first octet determine.
        while let Some(r) = b.recv(&mut buf) {
            assert_eq!((r.assoc, r.ppid), (b_assoc, PPID_DDP_SEGMENT));
            check(1, &buf[..r.len], 97);
            got_b += 1;
        }
        while let Some(r) = a.recv(&mut buf) {
            assert_eq!((r.assoc, r.ppid), (a_assoc, 17));
            check(2, &buf[..r.len], 89);
            got_a += 1;
        }
    }
}

/// The message is the one of some tag below 500 whose length and octets
/// match.
fn check(side: u8, data: &[u8], stride: usize) {
    let found = (0..500u32).any(|tag| {
        (tag as usize * stride) % 1444 + 1 == data.len()
            && data
                .iter()
                .enumerate()
                .all(|(i, &o)| o == octet(side, tag, i))
    });
    assert!(
        found,
        "a message of {} octets matches none sent",
        data.len()
    );
}
