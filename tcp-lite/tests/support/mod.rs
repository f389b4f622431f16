//! Two stacks joined by an in-memory link, driven in virtual time.
#![allow(dead_code)] // Each test file uses what it needs.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4};

use tcp_lite::link::{self, LinkConfig, LinkEnd};
use tcp_lite::{ConnId, Duration, Event, EventKind, Instant, Stack, StackConfig, Transport};

pub(crate) const A_ADDR: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
pub(crate) const B_ADDR: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

/// Two stacks, `a` and `b`, on one link, and the virtual clock.
pub(crate) struct Net {
    pub(crate) a: Stack<LinkEnd>,
    pub(crate) b: Stack<LinkEnd>,
    pub(crate) now: Instant,
    /// Events seen, per stack, in order.
    pub(crate) a_events: Vec<Event>,
    pub(crate) b_events: Vec<Event>,
}

impl Net {
    pub(crate) fn new(link: LinkConfig, seed: u64, tweak: impl Fn(&mut StackConfig)) -> Self {
        let (end_a, end_b) = link::pair(link, seed);
        let mut config_a = StackConfig::new([2, 0, 0, 0, 0, 1], A_ADDR);
        let mut config_b = StackConfig::new([2, 0, 0, 0, 0, 2], B_ADDR);
        config_a.seed = seed;
        config_b.seed = seed.wrapping_add(1);
        tweak(&mut config_a);
        tweak(&mut config_b);
        let now = Instant::ZERO;
        Net {
            a: Stack::new(config_a, end_a, now).unwrap(),
            b: Stack::new(config_b, end_b, now).unwrap(),
            now,
            a_events: Vec::new(),
            b_events: Vec::new(),
        }
    }

    /// Poll both stacks once; if neither moved, advance the clock to the
    /// next deadline (at most `step`). Returns whether anything happened.
    pub(crate) fn step(&mut self, step: Duration) -> bool {
        self.step_with(step, |b, now| b.poll(now))
    }

    /// [`Net::step`] with `b` polled by `poll_b`.
    pub(crate) fn step_with(
        &mut self,
        step: Duration,
        poll_b: impl FnOnce(&mut Stack<LinkEnd>, Instant) -> bool,
    ) -> bool {
        let moved = self.a.poll(self.now) | poll_b(&mut self.b, self.now);
        while let Some(e) = self.a.next_event() {
            self.a_events.push(e);
        }
        while let Some(e) = self.b.next_event() {
            self.b_events.push(e);
        }
        if !moved {
            let next = [
                self.a.poll_at(self.now),
                self.b.poll_at(self.now),
                self.a.device().rx_due(),
                self.b.device().rx_due(),
            ]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(self.now + step);
            self.now = next
                .max(self.now + Duration::from_micros(1))
                .min(self.now + step);
        }
        moved
    }

    /// Step until `done` holds, failing after `limit` of virtual time.
    pub(crate) fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&mut Net) -> bool) {
        let end = self.now + limit;
        while !done(self) {
            assert!(self.now < end, "not done after {limit} of virtual time");
            self.step(Duration::from_millis(10));
        }
    }

    /// Open `n` connections at once from `a` to `b`'s `port` (listening
    /// there first); each client with its server, in the order opened.
    pub(crate) fn open_many(&mut self, n: usize, port: u16) -> Vec<(ConnId, ConnId)> {
        let _ = self.b.listen(port);
        let now = self.now;
        let clients: Vec<ConnId> = (0..n)
            .map(|_| {
                self.a
                    .connect(SocketAddrV4::new(B_ADDR, port), now)
                    .unwrap()
            })
            .collect();
        let mut servers: HashMap<SocketAddrV4, ConnId> = HashMap::new();
        self.run_until(Duration::from_secs(10), |net| {
            for e in net.b_events.drain(..) {
                if let EventKind::Accepted(_) = e.kind {
                    let (_, peer) = net.b.endpoints(e.conn).unwrap();
                    servers.insert(peer, e.conn);
                }
            }
            servers.len() == n
        });
        clients
            .into_iter()
            .map(|c| {
                let (local, _) = self.a.endpoints(c).unwrap();
                (c, servers[&local])
            })
            .collect()
    }

    /// Open a connection from `a` to `b`'s `port` (listening there first).
    pub(crate) fn connect(&mut self, port: u16) -> (ConnId, ConnId) {
        self.connect_marked(port, 0)
    }

    /// [`Net::connect`] with the connection marked DSCP `dscp` from its
    /// SYN on (`Transport::connect_marked`).
    pub(crate) fn connect_marked(&mut self, port: u16, dscp: u8) -> (ConnId, ConnId) {
        let _ = self.b.listen(port);
        let now = self.now;
        let client = self
            .a
            .connect_marked(SocketAddrV4::new(B_ADDR, port), now, dscp)
            .unwrap();
        let mut server = None;
        self.run_until(Duration::from_secs(5), |net| {
            if server.is_none() {
                server = net.b_events.iter().find_map(|e| match e.kind {
                    EventKind::Accepted(_) => Some(e.conn),
                    _ => None,
                });
            }
            server.is_some()
                && net
                    .a_events
                    .iter()
                    .any(|e| e.conn == client && e.kind == EventKind::Connected)
        });
        (client, server.unwrap())
    }
}

/// The octet at stream position `pos` of test stream `seed`: a cheap
/// position-dependent pattern, so a lost, duplicated or misplaced octet shows.
pub(crate) fn pattern(seed: u64, pos: u64) -> u8 {
    let x = (pos / 8)
        .wrapping_add(seed)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (x >> (8 * (pos % 8))) as u8 ^ (x >> 59) as u8
}

/// Fill `buf` with the pattern from `pos` on.
pub(crate) fn fill(seed: u64, pos: u64, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = pattern(seed, pos + i as u64);
    }
}

/// Check `buf` against the pattern from `pos`; the position of the first
/// wrong octet.
pub(crate) fn check(seed: u64, pos: u64, buf: &[u8]) -> Result<(), u64> {
    match buf
        .iter()
        .enumerate()
        .find(|&(i, &b)| b != pattern(seed, pos + i as u64))
    {
        Some((i, _)) => Err(pos + i as u64),
        None => Ok(()),
    }
}

/// Move `total` octets from `tx` on `a` to `rx` on `b`, checking every
/// octet and its stream position. Returns the virtual time it took.
pub(crate) fn transfer(
    net: &mut Net,
    tx: ConnId,
    rx: ConnId,
    total: u64,
    seed: u64,
    limit: Duration,
) -> Duration {
    let start = net.now;
    let mut sent = 0u64;
    let mut received = 0u64;
    let end = net.now + limit;
    while received < total {
        assert!(
            net.now < end,
            "transfer stalled at {received} of {total} octets"
        );
        send_pattern(net, tx, &mut sent, total, seed);
        net.step(Duration::from_millis(10));
        read_pattern(net, rx, &mut received, seed);
    }
    net.now - start
}

/// `a` queues on `tx` what room it has of the pattern, from `*sent` up to
/// `total`.
pub(crate) fn send_pattern(net: &mut Net, tx: ConnId, sent: &mut u64, total: u64, seed: u64) {
    while *sent < total {
        let want = (total - *sent).min(1 << 20) as usize;
        let at = *sent;
        let n = net
            .a
            .send_with(tx, want, |buf| {
                fill(seed, at, buf);
                (buf.len(), buf.len())
            })
            .unwrap();
        if n == 0 {
            break;
        }
        *sent += n as u64;
    }
}

/// `b` reads all `rx` holds, checking every octet of the pattern and that
/// it starts at `*received`.
pub(crate) fn read_pattern(net: &mut Net, rx: ConnId, received: &mut u64, seed: u64) {
    loop {
        let at = *received;
        let n = net
            .b
            .recv_with(rx, |data, pos| {
                assert_eq!(pos, at, "stream position");
                if let Err(at) = check(seed, pos, data) {
                    panic!("octet {at} is wrong");
                }
                (data.len(), data.len())
            })
            .unwrap();
        if n == 0 {
            break;
        }
        *received += n as u64;
    }
}
