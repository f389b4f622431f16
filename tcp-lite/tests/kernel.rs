//! The kernel-TCP transport over 127.0.0.1: a 1 GiB transfer checked octet
//! by octet, 1,000 concurrent connections, refusals, aborts, limits, stale
//! handles, a ping-pong and the user timeout. Busy-polled on one thread.
#![allow(clippy::disallowed_methods)] // Real sockets run in real time: the test reads the clock.

mod support;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration as StdDuration, Instant as StdInstant};

use support::{check, fill, pattern};
use tcp_lite::sys::kernel::{KernelConfig, KernelTransport};
use tcp_lite::{
    ConnId, ConnectError, Duration, Event, EventKind, Instant, ListenError, RecvError, SendError,
    Transport,
};

const LOCALHOST: Ipv4Addr = Ipv4Addr::LOCALHOST;

/// A port of this process for test `k` (0..10): 20000..30000, spread by
/// process id so that concurrent runs do not clash.
fn port(k: u16) -> u16 {
    20000 + (std::process::id() % 1000) as u16 * 10 + k
}

/// The real clock as the transport's time, and a deadline for the test.
struct Clock {
    start: StdInstant,
    limit: StdDuration,
}

impl Clock {
    fn new(limit: StdDuration) -> Self {
        Clock {
            start: StdInstant::now(),
            limit,
        }
    }

    fn now(&self) -> Instant {
        Instant::from_micros(self.start.elapsed().as_micros() as i64)
    }

    /// Fail the test once its time is up.
    fn check(&self, what: &str) {
        assert!(
            self.start.elapsed() < self.limit,
            "{what}: not done after {:?}",
            self.limit
        );
    }
}

fn config() -> KernelConfig {
    KernelConfig {
        bind: LOCALHOST,
        ..KernelConfig::default()
    }
}

/// Poll `t` and append its events to `events`.
fn pump(t: &mut KernelTransport, clock: &Clock, events: &mut Vec<Event>) -> bool {
    let moved = t.poll(clock.now());
    while let Some(e) = t.next_event() {
        events.push(e);
    }
    moved
}

fn seen(events: &[Event], conn: ConnId, kind: EventKind) -> bool {
    events.iter().any(|e| e.conn == conn && e.kind == kind)
}

/// Connect `client` on `a` to `port` on `b` (listening there already);
/// returns both ends once both are open.
fn open_pair(
    a: &mut KernelTransport,
    b: Option<&mut KernelTransport>,
    port: u16,
    clock: &Clock,
) -> (ConnId, ConnId, Vec<Event>) {
    let mut events = Vec::new();
    let mut b_events = Vec::new();
    let client = a
        .connect(SocketAddrV4::new(LOCALHOST, port), clock.now())
        .unwrap();
    let mut b = b;
    loop {
        clock.check("connect");
        pump(a, clock, &mut events);
        if let Some(b) = b.as_deref_mut() {
            pump(b, clock, &mut b_events);
        }
        let all = if b.is_some() { &b_events } else { &events };
        let server = all.iter().find_map(|e| match e.kind {
            EventKind::Accepted(l) if l.0 == port => Some(e.conn),
            _ => None,
        });
        if let Some(server) = server {
            if seen(&events, client, EventKind::Connected) {
                events.extend(b_events);
                return (client, server, events);
            }
        }
    }
}

/// 1 GiB from one connection to another in one transport, every octet and
/// stream position checked, then an orderly close of both.
#[test]
fn gib_transfer_then_close() {
    const TOTAL: u64 = 1 << 30;
    const SEED: u64 = 0x6b65_726e;
    let clock = Clock::new(StdDuration::from_secs(300));
    let mut t = KernelTransport::new(config()).unwrap();
    t.listen(port(0)).unwrap();
    let (client, server, _) = open_pair(&mut t, None, port(0), &clock);
    assert_eq!(t.segment_room(client), Ok(None));

    let started = StdInstant::now();
    let (mut sent, mut received) = (0u64, 0u64);
    let mut events = Vec::new();
    while received < TOTAL {
        clock.check("transfer");
        while sent < TOTAL {
            let want = (TOTAL - sent).min(1 << 20) as usize;
            let n = t
                .send_with(client, want, |buf| {
                    fill(SEED, sent, buf);
                    (buf.len(), buf.len())
                })
                .unwrap();
            if n == 0 {
                break;
            }
            sent += n as u64;
            assert_eq!(t.send_position(client), Ok(sent));
        }
        pump(&mut t, &clock, &mut events);
        for e in events.drain(..) {
            assert!(!e.kind.is_final(), "{e:?} during the transfer");
        }
        loop {
            let n = t
                .recv_with(server, |data, pos| {
                    assert_eq!(pos, received, "stream position");
                    if let Err(at) = check(SEED, pos, data) {
                        panic!("octet {at} is wrong");
                    }
                    (data.len(), data.len())
                })
                .unwrap();
            if n == 0 {
                break;
            }
            received += n as u64;
        }
    }
    let took = started.elapsed();
    eprintln!(
        "1 GiB over kernel TCP (loopback, opt-level of the test profile): {took:?}, {:.2} Gbit/s",
        TOTAL as f64 * 8.0 / took.as_secs_f64() / 1e9
    );
    assert_eq!(sent, TOTAL);
    assert_eq!(t.send_position(client), Ok(TOTAL));

    t.close(client).unwrap();
    let mut events = Vec::new();
    while !seen(&events, server, EventKind::PeerClosed) {
        clock.check("peer close");
        pump(&mut t, &clock, &mut events);
    }
    assert_eq!(
        t.recv_with(server, |data, _| (data.len(), ())),
        Err(RecvError::Finished)
    );
    t.close(server).unwrap();
    while !(seen(&events, client, EventKind::Closed) && seen(&events, server, EventKind::Closed)) {
        clock.check("close");
        pump(&mut t, &clock, &mut events);
    }
    assert!(!events
        .iter()
        .any(|e| matches!(e.kind, EventKind::Reset | EventKind::TimedOut)));
    assert_eq!(
        t.recv_with(client, |data, _| (data.len(), ())),
        Err(RecvError::Finished)
    );
    assert_eq!(t.connections(), 2);
    t.release(client);
    t.release(server);
    assert_eq!(t.connections(), 0);
    assert_eq!(t.stats().closed, 2);
}

const STREAM: u64 = 4096;

/// Octet `pos` of the 4 KiB test stream `seed`: the seed (8 octets, little
/// endian), then the pattern, so that a receiver learns which stream it got.
fn octet(seed: u64, pos: u64) -> u8 {
    match pos {
        0..8 => seed.to_le_bytes()[pos as usize],
        _ => pattern(seed, pos),
    }
}

/// One direction of one connection in the many-connections test.
#[derive(Debug, Default, Clone)]
struct Flow {
    /// Seed of the stream we send; `None` on the server until it learned
    /// the client's.
    tx_seed: Option<u64>,
    /// Seed of the stream we receive.
    rx_seed: Option<u64>,
    header: [u8; 8],
    sent: u64,
    received: u64,
    closing: bool,
    closed: bool,
}

/// Send what is left of `flow`'s stream, receive and check what came, and
/// close once both directions are complete.
fn serve(t: &mut KernelTransport, conn: ConnId, flow: &mut Flow) {
    loop {
        let received = flow.received;
        let n = t
            .recv_with(conn, |data, pos| {
                assert_eq!(pos, received, "stream position");
                for (i, &b) in data.iter().enumerate() {
                    let at = pos + i as u64;
                    if at < 8 {
                        flow.header[at as usize] = b;
                        if at == 7 && flow.rx_seed.is_none() {
                            // The server learns the client's seed and answers with its complement.
                            let seed = u64::from_le_bytes(flow.header);
                            flow.rx_seed = Some(seed);
                            flow.tx_seed = Some(!seed);
                        }
                    }
                    let expected = flow.rx_seed.map(|seed| octet(seed, at));
                    assert!(
                        expected.is_none_or(|x| x == b),
                        "{conn}: octet {at} is wrong"
                    );
                }
                (data.len(), data.len())
            })
            .unwrap_or_else(|e| match e {
                RecvError::Finished => 0,
                e => panic!("{conn}: {e}"),
            });
        if n == 0 {
            break;
        }
        flow.received += n as u64;
        assert!(flow.received <= STREAM);
    }
    if let Some(seed) = flow.tx_seed {
        while flow.sent < STREAM {
            let start = flow.sent;
            let n = t
                .send_with(conn, (STREAM - start) as usize, |buf| {
                    for (i, b) in buf.iter_mut().enumerate() {
                        *b = octet(seed, start + i as u64);
                    }
                    (buf.len(), buf.len())
                })
                .unwrap();
            if n == 0 {
                break;
            }
            flow.sent += n as u64;
        }
    }
    if flow.sent == STREAM && flow.received == STREAM && !flow.closing {
        flow.closing = true;
        t.close(conn).unwrap();
    }
}

/// Handle one transport's events in the many-connections test; counts the
/// kinds seen.
fn handle(
    t: &mut KernelTransport,
    clock: &Clock,
    flows: &mut [Flow],
    counts: &mut [usize; 3],
    client: bool,
) {
    t.poll(clock.now());
    while let Some(e) = t.next_event() {
        let flow = &mut flows[e.conn.index()];
        match e.kind {
            EventKind::Connected => {
                assert!(client);
                counts[0] += 1;
            }
            EventKind::Accepted(_) => {
                assert!(!client);
                counts[0] += 1;
                *flow = Flow::default();
            }
            EventKind::Readable | EventKind::Writable | EventKind::PeerClosed => {}
            EventKind::Closed => {
                assert!(flow.closing && !flow.closed);
                assert_eq!((flow.sent, flow.received), (STREAM, STREAM));
                flow.closed = true;
                counts[1] += 1;
                t.release(e.conn);
                continue;
            }
            EventKind::Reset | EventKind::TimedOut => panic!("{e:?}"),
        }
        serve(t, e.conn, flow);
    }
}

/// The soft limit on open files, from `/proc/self/limits` (`None`: unknown
/// or unlimited).
fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// 1,000 connections to one listener at once, 4 KiB each way on each,
/// checked octet by octet, then all closed in order.
#[test]
fn thousand_connections() {
    const N: usize = 1000;
    // Both ends are in this process: 2,000 descriptors, and the other tests'.
    let limit = open_files_limit();
    assert!(
        limit.is_none_or(|limit| limit >= 2 * N as u64 + 100),
        "this test needs 2,100 file descriptors; `ulimit -n` is {limit:?}"
    );
    let clock = Clock::new(StdDuration::from_secs(120));
    let small = KernelConfig {
        max_connections: N,
        rx_buffer: 16 * 1024,
        tx_buffer: 16 * 1024,
        ..config()
    };
    let mut server = KernelTransport::new(small.clone()).unwrap();
    let mut client = KernelTransport::new(small).unwrap();
    server.listen(port(1)).unwrap();
    let mut client_flows = vec![Flow::default(); N];
    let mut server_flows = vec![Flow::default(); N];
    for _ in 0..N {
        let conn = client
            .connect(SocketAddrV4::new(LOCALHOST, port(1)), clock.now())
            .unwrap();
        let seed = 0xC0FF_EE00_0000 + conn.index() as u64;
        client_flows[conn.index()] = Flow {
            tx_seed: Some(seed),
            rx_seed: Some(!seed),
            ..Flow::default()
        };
    }
    assert_eq!(
        client.connect(SocketAddrV4::new(LOCALHOST, port(1)), clock.now()),
        Err(ConnectError::TooManyConnections)
    );
    let (mut client_counts, mut server_counts) = ([0; 3], [0; 3]);
    while client_counts[1] < N || server_counts[1] < N {
        clock.check("1,000 connections");
        handle(
            &mut client,
            &clock,
            &mut client_flows,
            &mut client_counts,
            true,
        );
        handle(
            &mut server,
            &clock,
            &mut server_flows,
            &mut server_counts,
            false,
        );
    }
    assert_eq!(client_counts[..2], [N, N], "client: Connected, Closed");
    assert_eq!(server_counts[..2], [N, N], "server: Accepted, Closed");
    assert_eq!(client.connections(), 0);
    assert_eq!(server.connections(), 0);
    let (c, s) = (client.stats(), server.stats());
    assert_eq!(
        (c.connected, c.closed, c.reset, c.timed_out),
        (N as u64, N as u64, 0, 0)
    );
    assert_eq!(
        (s.accepted, s.closed, s.refused, s.reset),
        (N as u64, N as u64, 0, 0)
    );
    eprintln!("1,000 connections: {:?}", clock.start.elapsed());
}

/// Wait for `kind` on `conn`, polling `ts`; returns every transport's events.
fn wait_for(
    ts: &mut [&mut KernelTransport],
    clock: &Clock,
    at: usize,
    conn: ConnId,
    kind: EventKind,
) -> Vec<Vec<Event>> {
    let mut events = vec![Vec::new(); ts.len()];
    while !seen(&events[at], conn, kind) {
        clock.check(&format!("{kind:?} on {conn}"));
        for (t, events) in ts.iter_mut().zip(&mut events) {
            pump(t, clock, events);
        }
    }
    events
}

#[test]
fn refusals_aborts_limits_and_stale_handles() {
    let clock = Clock::new(StdDuration::from_secs(30));

    // Configuration and argument errors.
    for bad in [
        KernelConfig {
            max_connections: 0,
            ..config()
        },
        KernelConfig {
            rx_buffer: 10,
            ..config()
        },
        KernelConfig {
            user_timeout: Duration::ZERO,
            ..config()
        },
    ] {
        assert!(KernelTransport::new(bad).is_err());
    }
    let mut t = KernelTransport::new(KernelConfig {
        max_connections: 3,
        ..config()
    })
    .unwrap();
    assert_eq!(t.listen(0), Err(ListenError::Unaddressable));
    t.listen(port(2)).unwrap();
    assert_eq!(t.listen(port(2)), Err(ListenError::PortInUse));
    let mut other = KernelTransport::new(config()).unwrap();
    assert_eq!(
        other.listen(port(2)),
        Err(ListenError::PortInUse),
        "taken by another socket"
    );
    assert_eq!(
        t.connect(
            SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port(2)),
            clock.now()
        ),
        Err(ConnectError::Unaddressable)
    );

    // No listener: the kernel answers RST, reported as Reset.
    let refused = t
        .connect(SocketAddrV4::new(LOCALHOST, port(3)), clock.now())
        .unwrap();
    wait_for(&mut [&mut t], &clock, 0, refused, EventKind::Reset);
    assert_eq!(t.send_space(refused), Err(SendError::InvalidState));
    assert_eq!(
        t.recv_with(refused, |d, _| (d.len(), ())),
        Err(RecvError::InvalidState)
    );
    t.release(refused);

    // Abort: the peer sees Reset, the aborted end reports nothing more.
    let (client, server, _) = open_pair(&mut t, None, port(2), &clock);
    t.send_with(client, 100, |buf| (buf.len(), ())).unwrap();
    t.abort(client).unwrap();
    let events = wait_for(&mut [&mut t], &clock, 0, server, EventKind::Reset);
    assert!(
        !events[0].iter().any(|e| e.conn == client),
        "{:?}",
        events[0]
    );
    assert_eq!(
        t.send_with(client, 10, |buf| (buf.len(), ())),
        Err(SendError::InvalidState)
    );
    assert_eq!(t.connections(), 2);
    t.release(server);

    // Stale handles: released, and then with the slot reused.
    t.release(client);
    assert_eq!(t.connections(), 0);
    assert_eq!(
        t.send_with(client, 10, |buf| (buf.len(), ())),
        Err(SendError::InvalidConnection)
    );
    assert_eq!(t.send_space(client), Err(SendError::InvalidConnection));
    assert_eq!(t.send_position(client), Err(SendError::InvalidConnection));
    assert_eq!(
        t.recv_with(client, |d, _| (d.len(), ())),
        Err(RecvError::InvalidConnection)
    );
    assert_eq!(t.recv_queue(client), Err(RecvError::InvalidConnection));
    assert_eq!(t.close(client), Err(SendError::InvalidConnection));
    assert_eq!(t.abort(client), Err(SendError::InvalidConnection));
    let (a, b, _) = open_pair(&mut t, None, port(2), &clock);
    assert!(a.index() == client.index() || b.index() == client.index());
    assert_ne!(a, client);
    assert_ne!(b, client);
    assert_eq!(t.send_space(client), Err(SendError::InvalidConnection));
    t.release(client); // A stale release frees nothing.
    assert_eq!(t.connections(), 2);

    // max_connections: 2 open, a third may connect, a fourth may not.
    let third = t
        .connect(SocketAddrV4::new(LOCALHOST, port(3)), clock.now())
        .unwrap();
    assert_eq!(
        t.connect(SocketAddrV4::new(LOCALHOST, port(2)), clock.now()),
        Err(ConnectError::TooManyConnections)
    );
    t.release(third);

    // Send after close.
    t.close(a).unwrap();
    assert_eq!(
        t.send_with(a, 10, |buf| (buf.len(), ())),
        Err(SendError::InvalidState)
    );
    assert_eq!(t.send_space(a), Err(SendError::InvalidState));
    assert_eq!(t.close(a), Ok(()));
    let events = wait_for(&mut [&mut t], &clock, 0, b, EventKind::PeerClosed);
    assert!(
        !events[0].iter().any(|e| e.kind.is_final()),
        "{:?}",
        events[0]
    );
    assert_eq!(
        t.recv_with(b, |d, _| (d.len(), ())),
        Err(RecvError::Finished)
    );
    // Half-closed: the other direction still works.
    assert_eq!(t.send_with(b, 5, |buf| (buf.len(), buf.len())), Ok(5));
    t.close(b).unwrap();
    let mut events = Vec::new();
    while !(seen(&events, a, EventKind::Closed) && seen(&events, b, EventKind::Closed)) {
        clock.check("close");
        pump(&mut t, &clock, &mut events);
    }
    assert_eq!(
        t.recv_with(a, |d, pos| (d.len(), (d.len(), pos))),
        Ok((5, 0))
    );
    t.release(a);
    t.release(b);

    // A listener with every slot taken resets what it accepts.
    let mut small = KernelTransport::new(KernelConfig {
        max_connections: 1,
        ..config()
    })
    .unwrap();
    small.listen(port(4)).unwrap();
    let (first, kept, _) = open_pair(&mut t, Some(&mut small), port(4), &clock);
    let second = t
        .connect(SocketAddrV4::new(LOCALHOST, port(4)), clock.now())
        .unwrap();
    wait_for(
        &mut [&mut t, &mut small],
        &clock,
        0,
        second,
        EventKind::Reset,
    );
    assert_eq!(small.stats().refused, 1);
    assert_eq!(small.connections(), 1);
    small.release(kept);
    t.release(first);
    t.release(second);
    assert_eq!(t.connections(), 0);
    assert_eq!(small.connections(), 0);
}

/// 1,000 round trips of 64-octet messages, each checked.
#[test]
fn ping_pong() {
    const ROUNDS: u64 = 1000;
    const SIZE: u64 = 64;
    let clock = Clock::new(StdDuration::from_secs(60));
    let mut t = KernelTransport::new(config()).unwrap();
    t.listen(port(5)).unwrap();
    let (client, server, _) = open_pair(&mut t, None, port(5), &clock);
    let mut events = Vec::new();
    let started = StdInstant::now();
    for round in 0..ROUNDS {
        for (from, to, seed) in [(client, server, 1), (server, client, 2)] {
            let pos = round * SIZE;
            let n = t
                .send_with(from, SIZE as usize, |buf| {
                    fill(seed, pos, buf);
                    (buf.len(), buf.len())
                })
                .unwrap();
            assert_eq!(n as u64, SIZE);
            let mut got = 0;
            while got < SIZE {
                clock.check("ping-pong");
                let n = t
                    .recv_with(to, |data, at| {
                        assert_eq!(at, pos + got);
                        let data = &data[..data.len().min((SIZE - got) as usize)];
                        check(seed, at, data).unwrap();
                        (data.len(), data.len())
                    })
                    .unwrap();
                got += n as u64;
                if n == 0 {
                    pump(&mut t, &clock, &mut events);
                }
            }
        }
    }
    eprintln!(
        "ping-pong: {ROUNDS} round trips of {SIZE} octets in {:?}",
        started.elapsed()
    );
    assert!(!events.iter().any(|e| e.kind.is_final()));
    t.release(client);
    t.release(server);
    assert_eq!(t.connections(), 0);
}

/// A peer that never reads: the sender's staged octets make no progress
/// and the user timeout aborts the connection.
#[test]
fn user_timeout() {
    let clock = Clock::new(StdDuration::from_secs(30));
    let mut t = KernelTransport::new(KernelConfig {
        rx_buffer: 4096,
        tx_buffer: 4096,
        user_timeout: Duration::from_millis(300),
        ..config()
    })
    .unwrap();
    t.listen(port(6)).unwrap();
    let (client, server, _) = open_pair(&mut t, None, port(6), &clock);
    let mut events = Vec::new();
    while !seen(&events, client, EventKind::TimedOut) {
        clock.check("user timeout");
        if t.send_space(client).is_ok() {
            t.send_with(client, usize::MAX, |buf| (buf.len(), ()))
                .unwrap();
        }
        pump(&mut t, &clock, &mut events);
    }
    assert!(clock.start.elapsed() >= StdDuration::from_millis(300));
    assert_eq!(t.send_space(client), Err(SendError::InvalidState));
    assert!(t.poll_at(clock.now()).is_none());
    eprintln!("user timeout: TimedOut after {:?}", clock.start.elapsed());
    while !events.iter().any(|e| e.conn == server && e.kind.is_final()) {
        clock.check("the peer's reset");
        pump(&mut t, &clock, &mut events);
    }
    assert!(seen(&events, server, EventKind::Reset), "{events:?}");
    t.release(client);
    t.release(server);
    assert_eq!(t.connections(), 0);
}

/// `reuse_port`: two transports (two cores' worth) listen on one port, and
/// the kernel spreads 64 connections over both; without it the second
/// listen is refused.
#[test]
fn reuse_port_spreads_connections_over_listeners() {
    let clock = Clock::new(StdDuration::from_secs(30));
    let p = port(9);
    let shared = KernelConfig {
        reuse_port: true,
        ..config()
    };
    let mut a = KernelTransport::new(shared.clone()).unwrap();
    let mut b = KernelTransport::new(shared).unwrap();
    a.listen(p).unwrap();
    b.listen(p).unwrap();
    let mut alone = KernelTransport::new(config()).unwrap();
    assert_eq!(alone.listen(p), Err(ListenError::PortInUse));

    let mut client = KernelTransport::new(config()).unwrap();
    const N: usize = 64;
    let mut conns = Vec::new();
    for _ in 0..N {
        conns.push(
            client
                .connect(SocketAddrV4::new(LOCALHOST, p), clock.now())
                .unwrap(),
        );
    }
    let (mut on_a, mut on_b) = (0, 0);
    let mut events = Vec::new();
    while on_a + on_b < N {
        clock.check("accepting on two listeners");
        pump(&mut client, &clock, &mut Vec::new());
        for (t, count) in [(&mut a, &mut on_a), (&mut b, &mut on_b)] {
            events.clear();
            pump(t, &clock, &mut events);
            *count += events
                .iter()
                .filter(|e| matches!(e.kind, EventKind::Accepted(l) if l.0 == p))
                .count();
        }
    }
    assert_eq!(on_a + on_b, N);
    // Each listener misses every one of 64 by chance with probability 2^-64.
    assert!(on_a > 0 && on_b > 0, "accepted {on_a} and {on_b}");
}

/// `by_host`: two transports listen on one port with the reuseport group's
/// program: every connection from one client address reaches one listener,
/// whatever its source port, the listener the address and the port pick
/// (`by_host_index`, the first listener to join the group being index 0),
/// for four client hosts of eight connections each; the same four hosts to
/// a plain reuseport group on another port
/// are spread by Linux's hash of the four-tuple (their connections parted,
/// for contrast).
#[test]
fn by_host_gives_each_client_hosts_connections_to_one_listener() {
    let clock = Clock::new(StdDuration::from_secs(30));
    let (p, plain) = (port(8), port(7));
    let shared = KernelConfig {
        reuse_port: true,
        by_host: vec![(p, 2)],
        ..config()
    };
    let mut a = KernelTransport::new(shared.clone()).unwrap();
    let mut b = KernelTransport::new(shared).unwrap();
    a.listen(p).unwrap();
    b.listen(p).unwrap();
    a.listen(plain).unwrap();
    b.listen(plain).unwrap();
    const EACH: usize = 8;
    let hosts: Vec<Ipv4Addr> = (2..=5).map(|o| Ipv4Addr::new(127, 0, 0, o)).collect();
    // Per port: the listener (0: a, 1: b) each accepted connection's
    // client address reached.
    let mut parted_somewhere = false;
    for port in [p, plain] {
        let mut clients: Vec<KernelTransport> = hosts
            .iter()
            .map(|&bind| KernelTransport::new(KernelConfig { bind, ..config() }).unwrap())
            .collect();
        for c in &mut clients {
            for _ in 0..EACH {
                c.connect(SocketAddrV4::new(LOCALHOST, port), clock.now())
                    .unwrap();
            }
        }
        let mut reached: Vec<(Ipv4Addr, usize)> = Vec::new();
        let mut events = Vec::new();
        while reached.len() < hosts.len() * EACH {
            clock.check("accepting by host");
            for c in &mut clients {
                pump(c, &clock, &mut Vec::new());
            }
            for (k, t) in [&mut a, &mut b].into_iter().enumerate() {
                events.clear();
                pump(t, &clock, &mut events);
                for e in &events {
                    if matches!(e.kind, EventKind::Accepted(l) if l.0 == port) {
                        let (_, peer) = t.endpoints(e.conn).unwrap();
                        reached.push((*peer.ip(), k));
                    }
                }
            }
        }
        for &host in &hosts {
            let listeners: std::collections::HashSet<usize> = reached
                .iter()
                .filter(|(ip, _)| *ip == host)
                .map(|&(_, k)| k)
                .collect();
            if port == p {
                let want = usize::from(tcp_lite::sys::kernel::by_host_index(host, p, 2));
                assert_eq!(
                    listeners,
                    [want].into(),
                    "{host}'s connections to the by-host port"
                );
            } else {
                parted_somewhere |= listeners.len() > 1;
            }
        }
    }
    // Each host's eight connections all on one listener by chance: 2^-7
    // per host, 2^-28 for all four.
    assert!(
        parted_somewhere,
        "Linux's own hash parts a host's connections"
    );
}

/// `set_dscp` on a kernel connection sets its socket's IP_TOS (ip(7)):
/// the DSCP in the upper six bits, taken back with 0.
#[test]
fn a_kernel_connection_is_marked_through_ip_tos() {
    let clock = Clock::new(StdDuration::from_secs(20));
    let mut t = KernelTransport::new(config()).unwrap();
    let p = port(8);
    t.listen(p).unwrap();
    let (client, server, _) = open_pair(&mut t, None, p, &clock);
    assert_eq!(t.tos(client).unwrap(), 0);
    t.set_dscp(client, 46).unwrap();
    assert_eq!(t.tos(client).unwrap(), 46 << 2);
    assert_eq!(t.tos(server).unwrap(), 0, "only the one asked for");
    t.set_dscp(client, 0).unwrap();
    assert_eq!(t.tos(client).unwrap(), 0);
    t.release(client);
    assert!(t.set_dscp(client, 46).is_err());
}

/// `connect_marked` sets IP_TOS before connect(2), so the class is on the
/// socket before its SYN leaves; Linux tells no listener its peer's class.
#[test]
fn a_kernel_connection_marked_before_it_connects_keeps_its_class() {
    // Told or not as the host's Linux reflects (its default: not).
    let reflected = tcp_lite::sys::kernel::linux_reflects_tos().then_some(34);
    assert_eq!(marked_exchange(9), (34, reflected));
}

/// A listener and a client of one transport in the calling thread's
/// network namespace, on port `k`, the client marked 34 before it
/// connects, the listener asked to reflect: the client's class once both
/// ends are open, and the class told of the accepted end.
fn marked_exchange(k: u16) -> (u8, Option<u8>) {
    let clock = Clock::new(StdDuration::from_secs(20));
    let mut t = KernelTransport::new(config()).unwrap();
    let p = port(k);
    t.reflect_dscp(true);
    t.listen(p).unwrap();
    let client = t
        .connect_marked(SocketAddrV4::new(LOCALHOST, p), clock.now(), 34)
        .unwrap();
    assert_eq!(t.tos(client).unwrap(), 34 << 2, "before the first poll");
    assert_eq!(t.dscp(client), 34);
    let mut events = Vec::new();
    let server = loop {
        clock.check("connect");
        pump(&mut t, &clock, &mut events);
        let server = events.iter().find_map(|e| match e.kind {
            EventKind::Accepted(_) => Some(e.conn),
            _ => None,
        });
        if let (Some(server), true) = (server, seen(&events, client, EventKind::Connected)) {
            break server;
        }
    };
    assert_eq!(t.peer_dscp(client), None, "an active open is told nothing");
    if let Some(class) = t.peer_dscp(server) {
        // What Linux reflected is what the accepted end sends with.
        assert_eq!(t.dscp(server), class);
    }
    (t.dscp(client), t.peer_dscp(server))
}

/// Where Linux reflects each SYN's class (`net.ipv4.tcp_reflect_tos = 1`,
/// set in a namespace of the test's own), a listening `KernelTransport`
/// asked to reflect tells each accepted connection's class, which its
/// segments carry too; where Linux does not (0), it tells nothing. Needs
/// root (a namespace); says so and passes without.
#[test]
fn a_kernel_listener_tells_the_class_linux_reflected() {
    let name = format!("dpwrefl{}", std::process::id());
    let ns = match tcp_lite::sys::netns::Netns::create(&name) {
        Ok(ns) => ns,
        Err(e) => {
            eprintln!("no network namespace to set net.ipv4.tcp_reflect_tos in (root?): {e}");
            return;
        }
    };
    for (on, want) in [("0", None), ("1", Some(34))] {
        // (sysctl(8) without procps: the file, inside the namespace.)
        let set = std::process::Command::new("ip")
            .args(["netns", "exec", &name, "sh", "-c"])
            .arg(format!("echo {on} > /proc/sys/net/ipv4/tcp_reflect_tos"))
            .status()
            .unwrap();
        assert!(set.success(), "sysctl in {name}");
        let name = name.clone();
        let got = std::thread::spawn(move || {
            tcp_lite::sys::netns::enter(&name).unwrap();
            assert_eq!(
                tcp_lite::sys::kernel::linux_reflects_tos(),
                on == "1",
                "read in the namespace"
            );
            marked_exchange(8)
        })
        .join()
        .unwrap();
        assert_eq!(got, (34, want), "net.ipv4.tcp_reflect_tos = {on}");
    }
    drop(ns);
}
