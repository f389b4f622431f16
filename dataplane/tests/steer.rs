//! Several cores on one port: two `net_ring` ports of two queue pairs each
//! (two hosts of two cores, one IP address each), a tcp-lite stack per
//! queue. Connections belong to the core their four-tuple hashes to:
//!
//! * both hosts steer with the same (symmetric) key: every active open
//!   picks a source port whose traffic hashes to its own core, the peer's
//!   core of the same index accepts it, and no TCP frame is handed between
//!   cores;
//! * the client steers with another key (a peer that disagrees, as the
//!   kernel behind DPDK's TAP driver does): frames arrive at the wrong
//!   core on both hosts, are handed to their owners over the handoff rings
//!   (counted), and every connection still carries its data intact.
//!
//! EAL starts once for the binary (`--no-huge`); the cores are stepped by
//! one thread (ownership, not parallelism, is what is tested here).
#![allow(clippy::disallowed_methods)] // The tests pace themselves by the clock.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::{Arc, Mutex, MutexGuard};

mod support;

use dataplane::dpdk::{Eal, EalConfig, Rss};
use dataplane::ports::{self, Opened, PortOptions};
use dataplane::steer::Steer;
use dataplane::{DeviceCounters, DpdkDevice};
use support::now;
use tcp_lite::rss::{Reta, MICROSOFT_KEY, RETA_ENTRIES_DEFAULT};
use tcp_lite::{ConnId, EventKind, Instant, Stack, StackConfig, Transport};

const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 9, 1, 1);
const SERVER: Ipv4Addr = Ipv4Addr::new(10, 9, 1, 2);
const PORT: u16 = 5000;
const CORES: u16 = 2;

fn eal() -> Eal {
    Eal::init(&EalConfig::no_huge(768)).expect("EAL starts without hugepages")
}

fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// A host: one stack per queue of its port, all on `addr`.
struct Host {
    stacks: Vec<Stack<DpdkDevice>>,
    steer: Arc<Steer>,
}

fn host(port: &Opened, addr: Ipv4Addr, steer: Arc<Steer>, steered_opens: bool) -> Host {
    host_on(port, &[addr; CORES as usize], steer, steered_opens)
}

/// A host whose core k has address `addrs[k]` (two hosts in one port, as
/// far as a peer can tell).
fn host_on(port: &Opened, addrs: &[Ipv4Addr], steer: Arc<Steer>, steered_opens: bool) -> Host {
    let stacks = (0..CORES)
        .map(|k| {
            let addr = addrs[usize::from(k)];
            let device = port.device(k, None).unwrap().steered(steer.clone(), k);
            let mut config = StackConfig::new(port.mac(), addr);
            config.prefix_len = 24;
            config.seed = 0x5eed + u64::from(k) * 977 + u64::from(u32::from(addr));
            if steered_opens {
                config.steering = Some(steer.steering(k));
            }
            Stack::new(config, device, now()).unwrap()
        })
        .collect();
    Host { stacks, steer }
}

impl Host {
    fn poll(&mut self, t: Instant) {
        for s in &mut self.stacks {
            s.poll(t);
            s.device_mut().flush();
        }
    }

    fn counters(&self) -> Vec<DeviceCounters> {
        self.stacks.iter().map(|s| s.device().counters()).collect()
    }
}

/// A connection and where it lives on each host.
struct Conn {
    client_core: usize,
    client: ConnId,
    server: Option<(usize, ConnId)>,
    /// Octets echoed back so far.
    back: Vec<u8>,
}

/// Opens `per_core` connections from each client core, sends each a
/// message the server echoes, and returns them when every echo is back.
fn run(client: &mut Host, server: &mut Host, per_core: usize) -> Vec<Conn> {
    for s in &mut server.stacks {
        s.listen(PORT).unwrap();
    }
    let remote = SocketAddrV4::new(SERVER, PORT);
    let mut conns = Vec::new();
    for k in 0..usize::from(CORES) {
        for _ in 0..per_core {
            let id = client.stacks[k].connect(remote, now()).unwrap();
            conns.push(Conn {
                client_core: k,
                client: id,
                server: None,
                back: Vec::new(),
            });
        }
    }
    let message = |i: usize| format!("connection {i} says hello").into_bytes();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut sent = vec![false; conns.len()];
    loop {
        let t = now();
        client.poll(t);
        server.poll(t);
        // Server: accept, echo what arrives.
        for (k, s) in server.stacks.iter_mut().enumerate() {
            while let Some(e) = s.next_event() {
                if let EventKind::Accepted(_) = e.kind {
                    let (_, peer) = s.endpoints(e.conn).unwrap();
                    if let Some(c) = conns.iter_mut().find(|c| {
                        client.stacks[c.client_core]
                            .endpoints(c.client)
                            .is_ok_and(|(local, _)| local == peer)
                    }) {
                        c.server = Some((k, e.conn));
                    }
                }
            }
        }
        for c in &conns {
            if let Some((k, id)) = c.server {
                let s = &mut server.stacks[k];
                let got = s
                    .recv_with(id, |data, _| (data.len(), data.to_vec()))
                    .unwrap_or_default();
                if !got.is_empty() {
                    s.send_with(id, got.len(), |space| {
                        space.copy_from_slice(&got[..space.len()]);
                        (space.len(), ())
                    })
                    .unwrap();
                }
            }
        }
        // Client: send once connected, read the echo.
        for (i, c) in conns.iter_mut().enumerate() {
            let s = &mut client.stacks[c.client_core];
            while s.next_event().is_some() {}
            if !sent[i] && s.send_space(c.client).unwrap_or(0) > 64 {
                let m = message(i);
                let n = s
                    .send_with(c.client, m.len(), |space| {
                        space.copy_from_slice(&m[..space.len()]);
                        (space.len(), space.len())
                    })
                    .unwrap();
                sent[i] = n == m.len();
            }
            let got = s
                .recv_with(c.client, |data, _| (data.len(), data.to_vec()))
                .unwrap_or_default();
            c.back.extend_from_slice(&got);
        }
        let done = conns
            .iter()
            .enumerate()
            .all(|(i, c)| c.back.len() >= message(i).len());
        if done {
            for (i, c) in conns.iter().enumerate() {
                assert_eq!(c.back, message(i), "connection {i}: the echo, intact");
            }
            return conns;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "echoes back: {} of {}; client {:?}; server {:?}",
            conns
                .iter()
                .enumerate()
                .filter(|(i, c)| c.back.len() >= message(*i).len())
                .count(),
            conns.len(),
            client.counters(),
            server.counters()
        );
    }
}

fn ports_of(eal: Eal) -> (Opened, Opened) {
    let mut options = PortOptions::new(1500);
    options.queues = CORES;
    options.mbufs = 2048;
    ports::ring_pair(eal, &options).unwrap()
}

#[test]
fn with_one_key_each_connection_stays_on_its_core_at_both_ends() {
    let _one = serial();
    let (a, b) = ports_of(eal());
    // net_ring has no RSS: the cores steer in software, by the default
    // table a dpwarp peer (or a NIC programmed by us) uses too.
    for port in [&a, &b] {
        assert_eq!(
            port.port.rss(),
            &Rss::Software("net_ring: the port has no RSS".into())
        );
        assert_eq!(
            port.steer().unwrap().reta(),
            &Reta::new(RETA_ENTRIES_DEFAULT, CORES).unwrap()
        );
    }
    let mut client = host(&a, CLIENT, a.steer().unwrap(), true);
    let mut server = host(&b, SERVER, b.steer().unwrap(), true);
    let conns = run(&mut client, &mut server, 24);
    for c in &conns {
        let (server_core, _) = c.server.expect("accepted");
        let (local, remote) = client.stacks[c.client_core].endpoints(c.client).unwrap();
        assert_eq!(
            usize::from(client.steer.owner(remote, local)),
            c.client_core,
            "the source port was picked for the opening core"
        );
        assert_eq!(
            server_core, c.client_core,
            "the server's core of the same index owns it"
        );
    }
    for (side, counters) in [("client", client.counters()), ("server", server.counters())] {
        // What a core took from its ring were the others' ARP copies.
        let shared: u64 = counters.iter().map(|c| c.rx_arp_shared).sum();
        let taken: u64 = counters.iter().map(|c| c.rx_steered_in).sum();
        assert_eq!(taken, shared, "{side}: only ARP went between cores");
        for (k, c) in counters.iter().enumerate() {
            assert_eq!(
                (c.rx_steered_out, c.rx_steer_dropped),
                (0, 0),
                "{side} core {k}: no TCP frame at the wrong core ({c:?})"
            );
            assert!(c.rx_packets > 0, "{side} core {k} carried traffic");
        }
    }
}

#[test]
fn frames_at_the_wrong_core_are_handed_to_their_owner() {
    let _one = serial();
    let (a, b) = ports_of(eal());
    // The client picks its ports and its owners by another key: half its
    // connections reach the server at the core that does not own them, and
    // the replies reach it at the wrong core too.
    let client_steer = Steer::with_key(&a.pools, &MICROSOFT_KEY).unwrap();
    let mut client = host(&a, CLIENT, client_steer, true);
    let mut server = host(&b, SERVER, b.steer().unwrap(), true);
    let conns = run(&mut client, &mut server, 24);
    let mut misplaced = 0;
    for c in &conns {
        let (server_core, id) = c.server.expect("accepted");
        let (local, remote) = server.stacks[server_core].endpoints(id).unwrap();
        assert_eq!(
            usize::from(server.steer.owner(remote, local)),
            server_core,
            "accepted by the core the server's hash names"
        );
        misplaced += usize::from(server_core != c.client_core);
    }
    assert!(
        misplaced > 0,
        "the keys disagree on some of {} connections",
        conns.len()
    );
    // Frames handed over in the last round are taken in the next ones.
    let handed = |h: &Host| {
        let c = h.counters();
        (
            c.iter()
                .map(|c| c.rx_steered_out + c.rx_arp_shared)
                .sum::<u64>(),
            c.iter().map(|c| c.rx_steered_in).sum::<u64>(),
        )
    };
    let settle = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while (handed(&client).0 != handed(&client).1 || handed(&server).0 != handed(&server).1)
        && std::time::Instant::now() < settle
    {
        let t = now();
        client.poll(t);
        server.poll(t);
    }
    for (side, counters) in [("client", client.counters()), ("server", server.counters())] {
        let out: u64 = counters.iter().map(|c| c.rx_steered_out).sum();
        let shared: u64 = counters.iter().map(|c| c.rx_arp_shared).sum();
        let into: u64 = counters.iter().map(|c| c.rx_steered_in).sum();
        let dropped: u64 = counters.iter().map(|c| c.rx_steer_dropped).sum();
        assert!(out > 0, "{side}: frames handed over ({counters:?})");
        assert_eq!(
            out + shared,
            into,
            "{side}: every frame handed over was taken"
        );
        assert_eq!(dropped, 0, "{side}: none lost");
    }
}

/// A pinned port (`Steer::pinning`): every connection to it is served by
/// the core it is pinned to (here the second), whichever queue its frames
/// arrive at; the other core's frames are handed over, none dropped. A
/// core the port does not have is refused.
#[test]
fn a_pinned_ports_connections_all_meet_on_its_core() {
    let _one = serial();
    let (a, b) = ports_of(eal());
    let refused = Steer::pinning(&b.pools, &[(PORT, 2)], &[]).unwrap_err();
    assert!(refused.contains("core 2; the port has 2"), "{refused}");
    let mut client = host(&a, CLIENT, a.steer().unwrap(), true);
    let mut server = host(
        &b,
        SERVER,
        Steer::pinning(&b.pools, &[(PORT, 1)], &[]).unwrap(),
        true,
    );
    let conns = run(&mut client, &mut server, 24);
    for c in &conns {
        let (server_core, _) = c.server.expect("accepted");
        assert_eq!(server_core, 1, "the pinned port's connections are core 1's");
    }
    let counters = server.counters();
    assert!(
        counters[0].rx_steered_out > 0,
        "frames reached core 0 and were handed over: {counters:?}"
    );
    assert!(
        counters.iter().all(|c| c.rx_steer_dropped == 0),
        "none dropped: {counters:?}"
    );
    // Client core 0's connections really arrived at the first queue.
    assert!(conns.iter().any(|c| c.client_core == 0));
}

/// A port spread by host (`Steer::by_host`): every connection from one
/// client address meets on the core `host_owner` names, whatever its
/// source port and whichever queue its frames arrive at; two client
/// addresses that hash to different cores are served by different cores.
/// A port both pinned and spread is refused.
#[test]
fn a_port_spread_by_host_serves_each_client_host_on_one_core() {
    let _one = serial();
    let (a, b) = ports_of(eal());
    let pinned = Steer::pinning(&b.pools, &[(PORT, 1)], &[]).unwrap();
    let refused = pinned.by_host(&[PORT]).unwrap_err();
    assert!(refused.contains("pinned to core 1"), "{refused}");
    let steer = Steer::new(&b.pools).unwrap().by_host(&[PORT]).unwrap();
    let local = SocketAddrV4::new(SERVER, PORT);
    // A second client address whose connections another core owns.
    let first = CLIENT;
    let second = (3..=250)
        .map(|o| Ipv4Addr::new(10, 9, 1, o))
        .find(|&ip| steer.host_owner(ip, local) != steer.host_owner(first, local))
        .expect("an address of another core");
    let mut client = host_on(&a, &[first, second], a.steer().unwrap(), true);
    let mut server = host(&b, SERVER, steer.clone(), true);
    let conns = run(&mut client, &mut server, 12);
    for c in &conns {
        let (server_core, _) = c.server.expect("accepted");
        let ip = [first, second][c.client_core];
        assert_eq!(
            server_core as u16,
            steer.host_owner(ip, local),
            "a connection from {ip} is its host's core's"
        );
    }
    let cores: std::collections::HashSet<usize> =
        conns.iter().map(|c| c.server.unwrap().0).collect();
    assert_eq!(cores.len(), 2, "the two hosts on two cores");
    // The client's cores pick source ports by the four-tuple, so some
    // frames arrived at the other core and were handed over, none lost.
    let counters = server.counters();
    assert!(
        counters.iter().map(|c| c.rx_steered_out).sum::<u64>() > 0,
        "frames handed over: {counters:?}"
    );
    assert!(
        counters.iter().all(|c| c.rx_steer_dropped == 0),
        "none dropped: {counters:?}"
    );
}

/// A steered UDP port (`Steer::pinning`, a DDP over SCTP listener's with
/// an endpoint on every core): every datagram to it reaches the core its
/// four-tuple hashes to, whichever queue it arrives at, so an association
/// (one pair of UDP ports) meets one core; datagrams to another UDP port
/// stay where they arrive.
#[test]
fn a_steered_udp_ports_datagrams_reach_the_core_they_hash_to() {
    use tcp_lite::Datagrams;
    const STEERED: u16 = 9899;
    const OTHER: u16 = 9900;
    /// Source ports each client core sends from.
    const SOURCES: usize = 8;
    let _one = serial();
    let (a, b) = ports_of(eal());
    let mut client = host(&a, CLIENT, a.steer().unwrap(), true);
    let steer = Steer::pinning(&b.pools, &[], &[STEERED]).unwrap();
    let mut server = host(&b, SERVER, steer.clone(), true);
    // Every core has the steered port; core 1 also has the other.
    let steered: Vec<_> = server
        .stacks
        .iter_mut()
        .map(|s| s.udp_bind(STEERED).unwrap())
        .collect();
    let other = server.stacks[1].udp_bind(OTHER).unwrap();
    let senders: Vec<Vec<_>> = client
        .stacks
        .iter_mut()
        .map(|s| (0..SOURCES).map(|_| s.udp_bind(0).unwrap()).collect())
        .collect();
    const EACH: usize = 20;
    let want = 2 * SOURCES * EACH;
    // (the receiving core, the sender's address) of each datagram.
    let (mut at_steered, mut at_other) = (Vec::new(), Vec::new());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut sent = 0;
    while at_steered.len() < want || at_other.len() < EACH {
        assert!(
            std::time::Instant::now() < deadline,
            "datagrams missing: {} of {want} to the steered port, {} of {EACH} to the other",
            at_steered.len(),
            at_other.len()
        );
        // Each client core sends from each of its sockets to the steered
        // port; core 1 also to the other port (the server's core 1 has
        // it).
        if sent < EACH {
            for (k, s) in client.stacks.iter_mut().enumerate() {
                for &udp in &senders[k] {
                    let to = SocketAddrV4::new(SERVER, STEERED);
                    s.udp_send_with(udp, to, 2, |b| b.copy_from_slice(&[k as u8, sent as u8]))
                        .unwrap();
                }
                if k == 1 {
                    let to = SocketAddrV4::new(SERVER, OTHER);
                    s.udp_send_with(senders[k][0], to, 2, |b| b.copy_from_slice(&[1, 0]))
                        .unwrap();
                }
            }
            sent += 1;
        }
        let t = now();
        client.poll(t);
        server.poll(t);
        for (core, stack) in server.stacks.iter_mut().enumerate() {
            while let Some(from) = stack.udp_recv_with(steered[core], |_, from| from) {
                at_steered.push((core as u16, from));
            }
        }
        while let Some(p) = server.stacks[1].udp_recv_with(other, |d, _| d.to_vec()) {
            at_other.push(p);
        }
    }
    assert_eq!(
        at_steered.len(),
        want,
        "every datagram to the steered port once"
    );
    let to = SocketAddrV4::new(SERVER, STEERED);
    for &(core, from) in &at_steered {
        assert_eq!(
            core,
            steer.owner(from, to),
            "{from}'s datagrams at the core their four-tuple hashes to"
        );
    }
    // Both cores own some of the 16 source ports (a fixed key and table,
    // ports the client's stacks chose): the hash, not a pin, decided.
    let owners: std::collections::HashSet<u16> = at_steered.iter().map(|&(c, _)| c).collect();
    assert_eq!(owners.len(), 2, "both cores received: {at_steered:?}");
    let counters = server.counters();
    assert!(
        counters.iter().any(|c| c.rx_steered_out > 0),
        "datagrams arrived at the other core's queue and were handed over: {counters:?}"
    );
    assert!(
        counters.iter().all(|c| c.rx_steer_dropped == 0),
        "{counters:?}"
    );
}
