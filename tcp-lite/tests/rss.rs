//! Receive-side scaling: the redirection table spreads tuples evenly, and
//! stacks that each own one queue of a port pick local ports whose reply
//! traffic reaches them.

mod support;

use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddrV4};

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use support::*;
use tcp_lite::link::{self, LinkConfig, LinkEnd};
use tcp_lite::rss::{MICROSOFT_KEY, RETA_ENTRIES_DEFAULT, SYMMETRIC_KEY};
use tcp_lite::{
    ConnectError, Duration, Instant, Reta, Stack, StackConfig, Steering, Toeplitz, Transport,
};

const KEYS: [(&str, [u8; 40]); 2] = [("microsoft", MICROSOFT_KEY), ("symmetric", SYMMETRIC_KEY)];

fn steering(key: &[u8; 40], queues: u16, queue: u16) -> Steering {
    Steering::new(
        Toeplitz::new(key),
        Reta::new(RETA_ENTRIES_DEFAULT, queues).unwrap(),
        queue,
    )
}

fn random_endpoint(rng: &mut ChaCha8Rng) -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::from(rng.next_u32()), rng.next_u32() as u16)
}

/// A stack on one end of a link nobody polls: enough for active opens,
/// whose SYNs never need to leave. Small buffers: hundreds are opened.
fn lone_stack(seed: u64, tweak: impl FnOnce(&mut StackConfig)) -> Stack<LinkEnd> {
    let (end, _) = link::pair(LinkConfig::ethernet(1500), seed);
    let mut config = StackConfig::new([2, 0, 0, 0, 0, 1], A_ADDR);
    config.seed = seed;
    config.tcp.rx_buffer = 1024;
    config.tcp.tx_buffer = 1024;
    tweak(&mut config);
    Stack::new(config, end, Instant::ZERO).unwrap()
}

/// 100,000 random tuples over 2, 4 and 8 queues of a 128-entry table: every
/// queue gets its share within 3% (the binomial's standard deviation is
/// below 1% of a share at 8 queues).
#[test]
fn the_redirection_table_spreads_random_tuples_evenly() {
    const TUPLES: u32 = 100_000;
    for (name, key) in KEYS {
        let hasher = Toeplitz::new(&key);
        for queues in [2, 4, 8] {
            let reta = Reta::new(RETA_ENTRIES_DEFAULT, queues).unwrap();
            let mut rng = ChaCha8Rng::seed_from_u64(u64::from(queues));
            let mut counts = vec![0u32; usize::from(queues)];
            for _ in 0..TUPLES {
                let (src, dst) = (random_endpoint(&mut rng), random_endpoint(&mut rng));
                counts[usize::from(reta.queue(hasher.hash_v4(src, dst)))] += 1;
            }
            let share = f64::from(TUPLES) / f64::from(queues);
            for &count in &counts {
                let off = (f64::from(count) - share).abs() / share;
                assert!(off < 0.03, "{name} key, {queues} queues: {counts:?}");
            }
        }
    }
}

/// What the port walk relies on: with the address pair fixed, the local
/// port alone spreads replies over every queue, about evenly, for any peer.
#[test]
fn every_queue_owns_a_share_of_the_ephemeral_ports_to_any_peer() {
    let mut rng = ChaCha8Rng::seed_from_u64(6056);
    for (name, key) in KEYS {
        for queues in [2, 3, 4, 8, 16] {
            let steering = steering(&key, queues, 0);
            for _ in 0..20 {
                let (local_addr, remote) =
                    (Ipv4Addr::from(rng.next_u32()), random_endpoint(&mut rng));
                let mut counts = vec![0u32; usize::from(queues)];
                for port in 49152..=65535 {
                    let local = SocketAddrV4::new(local_addr, port);
                    counts[usize::from(steering.owner(remote, local))] += 1;
                }
                let share = 16384.0 / f64::from(queues);
                for &count in &counts {
                    let off = (f64::from(count) - share).abs() / share;
                    assert!(
                        off < 0.05,
                        "{name} key, {queues} queues, {remote}: {counts:?}"
                    );
                }
            }
        }
    }
}

/// Four stacks on one address, one per queue and all with the same seed (so
/// without steering they would walk the same ports): every connect's reply
/// tuple is owned by the opening stack's queue, and no two stacks pick the
/// same four-tuple.
#[test]
fn steered_connects_land_on_their_queue_and_never_collide() {
    const QUEUES: u16 = 4;
    const CONNECTS_PER_QUEUE: usize = 100;
    let remotes = [
        SocketAddrV4::new(B_ADDR, 4000),
        SocketAddrV4::new(B_ADDR, 4001),
        SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 77), 4000),
    ];
    for (name, key) in KEYS {
        let mut tuples = HashSet::new();
        for queue in 0..QUEUES {
            let steering = steering(&key, QUEUES, queue);
            let mut stack = lone_stack(7, |c| c.steering = Some(steering.clone()));
            for i in 0..CONNECTS_PER_QUEUE {
                let remote = remotes[i % remotes.len()];
                let conn = stack.connect(remote, Instant::ZERO).unwrap();
                let (local, peer) = stack.endpoints(conn).unwrap();
                assert_eq!((*local.ip(), peer), (A_ADDR, remote));
                assert_eq!(steering.owner(peer, local), queue, "{name} key, {local}");
                assert!(steering.is_mine(local, peer));
                assert!(
                    tuples.insert((local, peer)),
                    "{name} key: {local} -> {peer} twice"
                );
            }
        }
        assert_eq!(tuples.len(), usize::from(QUEUES) * CONNECTS_PER_QUEUE);
    }
}

/// With the symmetric key the peer computes the same owner from its side of
/// the tuple: software RSS between two dpwarp hosts agrees whoever hashes.
#[test]
fn with_the_symmetric_key_both_ends_agree_on_the_owner() {
    let steering = steering(&SYMMETRIC_KEY, 4, 3);
    let mut stack = lone_stack(11, |c| c.steering = Some(steering.clone()));
    for port in [4000, 4001, 9999] {
        let remote = SocketAddrV4::new(B_ADDR, port);
        let conn = stack.connect(remote, Instant::ZERO).unwrap();
        let (local, peer) = stack.endpoints(conn).unwrap();
        // The peer receives our packets: local -> peer.
        assert_eq!(steering.owner(local, peer), 3);
        assert_eq!(steering.owner(peer, local), 3);
    }
}

/// Steering changes only the port: a steered connection opens and carries
/// data like any other.
#[test]
fn a_steered_connection_opens_and_carries_data() {
    let mut net = Net::new(LinkConfig::ethernet(1500), 3, |c| {
        c.steering = Some(steering(&SYMMETRIC_KEY, 8, 5));
    });
    let (client, server) = net.connect(4000);
    let (local, peer) = net.a.endpoints(client).unwrap();
    assert!(steering(&SYMMETRIC_KEY, 8, 5).is_mine(local, peer));
    transfer(
        &mut net,
        client,
        server,
        1 << 20,
        9,
        Duration::from_secs(10),
    );
}

/// Without steering the walk is today's: consecutive ports from the seed's
/// start (RFC 6056 §3.3.1's walk, with every free port suitable).
#[test]
fn without_steering_ports_follow_each_other() {
    let mut stack = lone_stack(0, |c| c.ephemeral_ports = 50000..=50009);
    let ports: Vec<u16> = (0..10)
        .map(|i| {
            let remote = SocketAddrV4::new(B_ADDR, 4000 + i);
            let conn = stack.connect(remote, Instant::ZERO).unwrap();
            stack.endpoints(conn).unwrap().0.port()
        })
        .collect();
    assert_eq!(ports, (50000..=50009).collect::<Vec<u16>>());
    assert_eq!(
        stack.connect(SocketAddrV4::new(B_ADDR, 5000), Instant::ZERO),
        Err(ConnectError::NoPort)
    );
}

/// A range of one port whose reply hashes to another queue leaves nothing to
/// pick: `NoPort`, after one candidate. The queue that owns the port gets it.
#[test]
fn a_steering_no_port_of_the_range_satisfies_is_no_port() {
    let remote = SocketAddrV4::new(B_ADDR, 4000);
    let owner = steering(&MICROSOFT_KEY, 4, 0).owner(remote, SocketAddrV4::new(A_ADDR, 50000));
    let other = (owner + 1) % 4;
    let mut stack = lone_stack(1, |c| {
        c.ephemeral_ports = 50000..=50000;
        c.steering = Some(steering(&MICROSOFT_KEY, 4, other));
    });
    assert_eq!(
        stack.connect(remote, Instant::ZERO),
        Err(ConnectError::NoPort)
    );
    assert_eq!(stack.connections(), 0);
    let mut stack = lone_stack(1, |c| {
        c.ephemeral_ports = 50000..=50000;
        c.steering = Some(steering(&MICROSOFT_KEY, 4, owner));
    });
    let conn = stack.connect(remote, Instant::ZERO).unwrap();
    assert_eq!(stack.endpoints(conn).unwrap().0.port(), 50000);
}

/// A queue no entry of the table holds would receive nothing: the
/// configuration is refused, saying what to fix.
#[test]
fn a_queue_outside_the_table_is_refused() {
    let mut config = StackConfig::new([2, 0, 0, 0, 0, 1], A_ADDR);
    config.steering = Some(steering(&SYMMETRIC_KEY, 4, 4));
    let error = config.validate().unwrap_err();
    assert!(error.0.contains("steering.queue"), "{error}");
    let (end, _) = link::pair(LinkConfig::ethernet(1500), 1);
    assert_eq!(
        Stack::new(config.clone(), end, Instant::ZERO).err(),
        Some(error)
    );
    config.steering = Some(steering(&SYMMETRIC_KEY, 4, 3));
    assert_eq!(config.validate(), Ok(()));
    // A table read back from a NIC may leave queues out.
    let reta = Reta::from_entries(&[0, 2, 0, 2]).unwrap();
    config.steering = Some(Steering::new(Toeplitz::new(&SYMMETRIC_KEY), reta, 1));
    assert!(config.validate().is_err());
}
