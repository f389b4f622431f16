//! Two endpoints back to back in memory, in virtual time, with fault
//! injection: the datagrams in flight are a `Vec`, and time jumps to the next
//! arrival or timer when nothing else can happen (quinn-proto's `Pair`).
#![allow(dead_code)] // Each test file uses part of it.

use std::net::{Ipv4Addr, SocketAddr};

use sctp_lite::{AssocId, Config, Duration, Endpoint, Event, EventKind, Instant};

/// Which endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// The client, at 10.0.0.1.
    A,
    /// The server, at 10.0.0.2.
    B,
}

struct InFlight {
    arrival: Instant,
    to: Side,
    from: SocketAddr,
    datagram: Vec<u8>,
}

/// The pair.
pub(crate) struct Pair {
    pub(crate) a: Endpoint,
    pub(crate) b: Endpoint,
    pub(crate) a_addr: SocketAddr,
    pub(crate) b_addr: SocketAddr,
    pub(crate) now: Instant,
    /// One-way delay of every datagram.
    pub(crate) latency: Duration,
    /// Drop every Nth datagram of each direction, `None` for none. (One
    /// count for both directions can fall into step with the two sides'
    /// retransmission rounds and drop every retransmission.)
    pub(crate) drop_every: Option<usize>,
    /// Drop datagrams at random, `None` for none.
    pub(crate) random_loss: Option<Loss>,
    /// Drop every datagram both ways: the link is cut (a dead peer).
    pub(crate) cut: bool,
    /// Datagrams sent by A and by B, and dropped, so far.
    pub(crate) sent: [usize; 2],
    pub(crate) dropped: usize,
    pub(crate) events_a: Vec<Event>,
    pub(crate) events_b: Vec<Event>,
    in_flight: Vec<InFlight>,
    buf: Vec<u8>,
}

/// The UDP port of RFC 6951 on both sides: the addresses differ.
const PORT: u16 = sctp_lite::UDP_ENCAPSULATION_PORT;

impl Pair {
    /// `a` will connect to `b`, which accepts.
    pub(crate) fn new(a: Config, b: Config) -> Self {
        let a_addr = SocketAddr::from((Ipv4Addr::new(10, 0, 0, 1), PORT));
        let b_addr = SocketAddr::from((Ipv4Addr::new(10, 0, 0, 2), PORT));
        #[allow(clippy::disallowed_methods)]
        // Only the origin of sctp-proto's time; see Endpoint::new.
        let epoch = std::time::Instant::now();
        Pair {
            a: Endpoint::new(a, epoch).expect("config a"),
            b: Endpoint::new(b, epoch).expect("config b"),
            a_addr,
            b_addr,
            now: Instant::ZERO,
            latency: Duration::from_micros(50),
            drop_every: None,
            random_loss: None,
            cut: false,
            sent: [0; 2],
            dropped: 0,
            events_a: Vec::new(),
            events_b: Vec::new(),
            in_flight: Vec::new(),
            buf: vec![0; 65_536],
        }
    }

    /// A pair with default (DDP) configs.
    pub(crate) fn ddp() -> Self {
        Pair::new(Config::default(), Config::default())
    }

    pub(crate) fn endpoint(&mut self, side: Side) -> &mut Endpoint {
        match side {
            Side::A => &mut self.a,
            Side::B => &mut self.b,
        }
    }

    /// One step: move every packet either side has to send, deliver what
    /// has arrived, collect events; if none of that happened, jump to the
    /// next arrival or timer. False when nothing is left to happen.
    pub(crate) fn step(&mut self) -> bool {
        let mut progress = self.transmit(Side::A) | self.transmit(Side::B);
        let now = self.now;
        let (due, later): (Vec<_>, Vec<_>) =
            self.in_flight.drain(..).partition(|d| d.arrival <= now);
        self.in_flight = later;
        for d in due {
            progress = true;
            match d.to {
                Side::A => self.a.handle_datagram(now, d.from, &d.datagram),
                Side::B => self.b.handle_datagram(now, d.from, &d.datagram),
            }
        }
        while let Some(event) = self.a.poll_event() {
            progress = true;
            self.events_a.push(event);
        }
        while let Some(event) = self.b.poll_event() {
            progress = true;
            self.events_b.push(event);
        }
        if progress {
            return true;
        }
        let next = [
            self.in_flight.iter().map(|d| d.arrival).min(),
            self.a.poll_timeout(),
            self.b.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min();
        match next {
            Some(t) => {
                self.now = self.now.max(t);
                self.a.handle_timeout(self.now);
                self.b.handle_timeout(self.now);
                true
            }
            None => false,
        }
    }

    fn transmit(&mut self, from: Side) -> bool {
        let (endpoint, from_addr, to, sent) = match from {
            Side::A => (&mut self.a, self.a_addr, Side::B, &mut self.sent[0]),
            Side::B => (&mut self.b, self.b_addr, Side::A, &mut self.sent[1]),
        };
        let mut any = false;
        while let Some(t) = endpoint.poll_transmit(self.now, &mut self.buf) {
            any = true;
            *sent += 1;
            assert!(
                t.len <= endpoint.config().packet_size_max(),
                "packet of {} octets above the MTU: {:02x?}",
                t.len,
                &self.buf[..40.min(t.len)]
            );
            let random_drop = self.random_loss.as_mut().is_some_and(Loss::drop_next);
            if self.cut || random_drop || self.drop_every.is_some_and(|n| *sent % n == 0) {
                self.dropped += 1;
                continue;
            }
            self.in_flight.push(InFlight {
                arrival: self.now + self.latency,
                to,
                from: from_addr,
                datagram: self.buf[..t.len].to_vec(),
            });
        }
        any
    }

    /// Step until `done` holds, at most `steps` steps.
    pub(crate) fn drive_until(&mut self, steps: usize, mut done: impl FnMut(&mut Pair) -> bool) {
        for _ in 0..steps {
            if done(self) {
                return;
            }
            if !self.step() {
                assert!(done(self), "nothing left to happen and not done");
                return;
            }
        }
        assert!(
            done(self),
            "not done after {steps} steps (time {})",
            self.now
        );
    }

    /// Step until nothing is left to happen (timers aside, which run for
    /// ever on a live association), at most `steps` steps.
    pub(crate) fn settle(&mut self, steps: usize) {
        for _ in 0..steps {
            let busy = !self.in_flight.is_empty();
            let before = self.now;
            if !self.step() || (!busy && self.in_flight.is_empty() && self.now > before) {
                return;
            }
        }
    }

    /// The slots each side holds (its associations, closed ones included
    /// until their last packets went).
    pub(crate) fn slots(&self) -> (usize, usize) {
        (self.a.associations(), self.b.associations())
    }

    /// Connect A to B and wait for both `Up` events.
    pub(crate) fn connect(&mut self) -> (AssocId, AssocId) {
        let a = self.a.connect(self.now, self.b_addr).expect("connect");
        self.drive_until(1000, |p| {
            up(&p.events_a).is_some() && up(&p.events_b).is_some()
        });
        assert_eq!(up(&self.events_a), Some(a));
        (a, up(&self.events_b).unwrap())
    }
}

/// Seeded random loss: each datagram is dropped with a fixed probability,
/// drawn from SplitMix64 (no dependency; the same sequence on every machine).
pub(crate) struct Loss {
    state: u64,
    /// The drop probability in millionths.
    per_million: u64,
}

impl Loss {
    /// Drop `percent` % of datagrams, in the order `seed` gives.
    pub(crate) fn new(seed: u64, percent: u64) -> Self {
        assert!(percent <= 100);
        Loss {
            state: seed,
            per_million: percent * 10_000,
        }
    }

    fn drop_next(&mut self) -> bool {
        // SplitMix64 (Steele, Lea and Flood, 2014).
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        z % 1_000_000 < self.per_million
    }
}

/// Host `host` of 10.0.0.0/24 on RFC 6951's UDP port, for tests that move
/// datagrams between two endpoints by hand.
pub(crate) fn addr(host: u8) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::new(10, 0, 0, host), PORT))
}

/// Every packet `endpoint` has to send at `now`.
pub(crate) fn sent(endpoint: &mut Endpoint, now: Instant) -> Vec<Vec<u8>> {
    let mut buf = vec![0u8; Config::default().packet_size_max()];
    std::iter::from_fn(|| {
        endpoint
            .poll_transmit(now, &mut buf)
            .map(|t| buf[..t.len].to_vec())
    })
    .collect()
}

/// The reasons of the `Closed` events among `events`, in order.
pub(crate) fn closed(events: &[Event]) -> Vec<sctp_lite::CloseReason> {
    events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Closed(why) => Some(why),
            _ => None,
        })
        .collect()
}

/// The association of the first `Up` event.
pub(crate) fn up(events: &[Event]) -> Option<AssocId> {
    events.iter().find_map(|e| match e.kind {
        EventKind::Up { .. } => Some(e.assoc),
        _ => None,
    })
}

/// The octet at `index` of the message of `len` octets that `side` sends
/// with `tag`: every message differs, so a misplaced octet shows.
pub(crate) fn octet(side: Side, tag: u32, len: usize, index: usize) -> u8 {
    let side = match side {
        Side::A => 0x5a,
        Side::B => 0xa5,
    };
    (index as u32)
        .wrapping_mul(31)
        .wrapping_add(tag.wrapping_mul(7))
        .wrapping_add(len as u32)
        .wrapping_add(side) as u8
}

/// The message `side` sends with `tag`, `len` octets long.
pub(crate) fn message(side: Side, tag: u32, len: usize) -> Vec<u8> {
    (0..len).map(|i| octet(side, tag, len, i)).collect()
}
