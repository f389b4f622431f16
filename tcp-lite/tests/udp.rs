//! `Datagrams`: UDP beside TCP on a `Stack` (its in-memory link) and on the
//! kernel's sockets: datagrams of every size both ways, octet for octet,
//! back-pressure instead of loss, bad arguments refused, and TCP
//! connections on the same stack unaffected.

#![allow(clippy::disallowed_methods)] // The kernel test runs in real time: it reads the clock.

mod support;

use std::net::{Ipv4Addr, SocketAddrV4};

use support::{check, fill, Net, A_ADDR, B_ADDR};
use tcp_lite::link::LinkConfig;
use tcp_lite::sys::udp::KernelUdp;
use tcp_lite::{Datagrams, Duration, ListenError, Transport, UdpError};

/// Datagram lengths: empty, small, around the 1,472-octet UDP payload of
/// an MTU of 1500.
const LENGTHS: [usize; 6] = [0, 1, 100, 1000, 1444, 1472];

#[test]
fn stacks_exchange_datagrams_beside_a_tcp_connection() {
    let mut net = Net::new(LinkConfig::ethernet(1500), 7, |_| {});
    let ua = net.a.udp_bind(9899).unwrap();
    let ub = net.b.udp_bind(0).unwrap();
    assert_eq!(
        net.a.udp_local(ua).unwrap(),
        SocketAddrV4::new(A_ADDR, 9899)
    );
    let b_local = net.b.udp_local(ub).unwrap();
    assert_eq!(*b_local.ip(), B_ADDR);
    assert_ne!(b_local.port(), 0);
    assert_eq!(net.a.udp_bind(9899), Err(ListenError::PortInUse));
    let (ca, cb) = net.connect(4000);
    for (i, &len) in LENGTHS.iter().enumerate() {
        let seed = i as u64;
        net.a
            .udp_send_with(ua, b_local, len, |buf| fill(seed, 0, buf))
            .unwrap();
        net.b
            .udp_send_with(ub, SocketAddrV4::new(A_ADDR, 9899), len, |buf| {
                fill(seed + 100, 0, buf)
            })
            .unwrap();
    }
    net.a
        .send_with(ca, 5, |buf| {
            buf[..5].copy_from_slice(b"hello");
            (5, ())
        })
        .unwrap();
    let mut at_b = Vec::new();
    let mut at_a = Vec::new();
    net.run_until(Duration::from_secs(1), |net| {
        while let Some(got) = net.b.udp_recv_with(ub, |d, from| (d.to_vec(), from)) {
            at_b.push(got);
        }
        while let Some(got) = net.a.udp_recv_with(ua, |d, from| (d.to_vec(), from)) {
            at_a.push(got);
        }
        at_a.len() == LENGTHS.len() && at_b.len() == LENGTHS.len()
    });
    for (i, &len) in LENGTHS.iter().enumerate() {
        let (data, from) = &at_b[i];
        assert_eq!((data.len(), *from), (len, SocketAddrV4::new(A_ADDR, 9899)));
        assert_eq!(check(i as u64, 0, data), Ok(()));
        let (data, from) = &at_a[i];
        assert_eq!((data.len(), *from), (len, b_local));
        assert_eq!(check(i as u64 + 100, 0, data), Ok(()));
    }
    let got = net.b.recv_with(cb, |d, _| (d.len(), d.to_vec())).unwrap();
    assert_eq!(got, b"hello");
}

#[test]
fn a_stack_refuses_what_it_cannot_send_and_pushes_back_when_full() {
    let mut net = Net::new(LinkConfig::ethernet(1500), 9, |c| {
        c.udp_buffer = 8192;
        c.udp_datagrams = 4;
    });
    let ua = net.a.udp_bind(1000).unwrap();
    let to = SocketAddrV4::new(B_ADDR, 1000);
    assert_eq!(
        net.a.udp_send_with(ua, to, 1473, |_| {}),
        Err(UdpError::TooLong),
        "beyond the 1,472 octets an MTU of 1500 carries"
    );
    assert_eq!(
        net.a
            .udp_send_with(ua, SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 1), 1, |_| {}),
        Err(UdpError::Unaddressable)
    );
    for _ in 0..4 {
        net.a.udp_send_with(ua, to, 1000, |_| {}).unwrap();
    }
    assert_eq!(
        net.a.udp_send_with(ua, to, 1000, |_| {}),
        Err(UdpError::Full),
        "four datagrams are queued: back-pressure, not loss"
    );
    // Nobody listens at b: the datagrams leave (after ARP) and the room
    // comes back.
    net.run_until(Duration::from_secs(1), |net| {
        net.a.udp_send_with(ua, to, 1000, |_| {}).is_ok()
    });
}

#[test]
fn kernel_sockets_exchange_datagrams_on_loopback() {
    let mut a = KernelUdp::new(Ipv4Addr::LOCALHOST, 1 << 20);
    let mut b = KernelUdp::new(Ipv4Addr::LOCALHOST, 1 << 20);
    let ua = a.udp_bind(0).unwrap();
    let ub = b.udp_bind(0).unwrap();
    let (a_local, b_local) = (a.udp_local(ua).unwrap(), b.udp_local(ub).unwrap());
    assert_eq!(b.udp_bind(b_local.port()), Err(ListenError::PortInUse));
    for (i, &len) in LENGTHS.iter().enumerate() {
        a.udp_send_with(ua, b_local, len, |buf| fill(i as u64, 0, buf))
            .unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut got = Vec::new();
    while got.len() < LENGTHS.len() {
        assert!(
            std::time::Instant::now() < deadline,
            "only {} arrived",
            got.len()
        );
        match b.udp_recv_with(ub, |d, from| (d.to_vec(), from)) {
            Some(d) => got.push(d),
            None => std::thread::sleep(std::time::Duration::from_millis(1)),
        }
    }
    for (i, (data, from)) in got.iter().enumerate() {
        assert_eq!((data.len(), *from), (LENGTHS[i], a_local));
        assert_eq!(check(i as u64, 0, data), Ok(()));
    }
    assert_eq!(b.udp_recv_with(ub, |d, _| d.len()), None);
    assert_eq!(
        a.udp_send_with(ua, SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0), 1, |_| {}),
        Err(UdpError::Unaddressable)
    );
    assert_eq!(
        a.udp_send_with(ua, b_local, 70_000, |_| {}),
        Err(UdpError::TooLong)
    );
}

/// `KernelUdp::reuse_port`: two of them (a core each) bind one port; Linux
/// gives each sender's datagrams to one of the two sockets, always the
/// same one, and spreads 32 senders over both. Without it the second bind
/// is refused.
#[test]
fn kernel_sockets_share_a_port_by_four_tuple() {
    let mut first = KernelUdp::new(Ipv4Addr::LOCALHOST, 1 << 20).reuse_port();
    let u0 = first.udp_bind(0).unwrap();
    let port = first.udp_local(u0).unwrap().port();
    let mut plain = KernelUdp::new(Ipv4Addr::LOCALHOST, 1 << 20);
    assert_eq!(plain.udp_bind(port), Err(ListenError::PortInUse));
    let mut second = KernelUdp::new(Ipv4Addr::LOCALHOST, 1 << 20).reuse_port();
    let u1 = second.udp_bind(port).unwrap();
    let to = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
    const SENDERS: usize = 32;
    const EACH: usize = 4;
    let mut senders = KernelUdp::new(Ipv4Addr::LOCALHOST, 1 << 20);
    let ids: Vec<_> = (0..SENDERS).map(|_| senders.udp_bind(0).unwrap()).collect();
    for _ in 0..EACH {
        for &id in &ids {
            senders.udp_send_with(id, to, 8, |b| b.fill(7)).unwrap();
        }
    }
    // Which socket received each sender's datagrams.
    let mut at: std::collections::HashMap<SocketAddrV4, Vec<usize>> = Default::default();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut got = 0;
    while got < SENDERS * EACH {
        assert!(std::time::Instant::now() < deadline, "only {got} arrived");
        let mut any = false;
        for (k, (udp, id)) in [(&mut first, u0), (&mut second, u1)]
            .into_iter()
            .enumerate()
        {
            while let Some(from) = udp.udp_recv_with(id, |_, from| from) {
                at.entry(from).or_default().push(k);
                got += 1;
                any = true;
            }
        }
        if !any {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    assert_eq!(at.len(), SENDERS);
    for (from, sockets) in &at {
        assert!(
            sockets.iter().all(|&k| k == sockets[0]),
            "{from}'s datagrams reached one socket: {sockets:?}"
        );
    }
    let used: std::collections::HashSet<usize> = at.values().map(|s| s[0]).collect();
    assert_eq!(
        used.len(),
        2,
        "the senders spread over both sockets: {at:?}"
    );
}
