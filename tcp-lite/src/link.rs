//! An in-memory link between two smoltcp devices, with seeded fault
//! injection: the device of the tests and of the embedded benchmark.
//!
//! [`pair`] makes two [`LinkEnd`]s; what one transmits the other receives.
//! Each direction drops, duplicates, reorders and corrupts frames at the
//! rates of its [`Faults`], from its own ChaCha8 stream seeded by the
//! caller, and delays them by a fixed latency: the same seed gives the same
//! run (STYLE.md §4, as smoltcp's `FaultInjector` and `tests/netsim.rs`).
//!
//! The ends share their state through `Rc<RefCell<_>>`: both ends live on one
//! thread, like the stacks that poll them. Frame buffers are recycled, so a
//! warmed-up link does not allocate.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use smoltcp::phy::{self, Checksum, ChecksumCapabilities, DeviceCapabilities, Medium};
use smoltcp::time::{Duration, Instant};

/// Fault rates of one direction, each a probability per frame in `0.0..=1.0`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Faults {
    /// Frames lost.
    pub drop: f64,
    /// Frames delivered twice.
    pub duplicate: f64,
    /// Frames held back until a frame that is not itself reordered overtakes
    /// them (or, if none comes, until the queue is empty). One is held at a
    /// time.
    pub reorder: f64,
    /// Frames with one bit flipped (checksums, when on, catch it).
    pub corrupt: f64,
}

impl Faults {
    /// No faults.
    pub const NONE: Faults = Faults {
        drop: 0.0,
        duplicate: 0.0,
        reorder: 0.0,
        corrupt: 0.0,
    };

    /// Every rate in `0.0..=1.0`, or a message saying which is not.
    pub fn validate(&self) -> Result<(), &'static str> {
        for (name, p) in [
            ("drop", self.drop),
            ("duplicate", self.duplicate),
            ("reorder", self.reorder),
            ("corrupt", self.corrupt),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return Err(match name {
                    "drop" => "faults.drop must be a probability in 0.0..=1.0",
                    "duplicate" => "faults.duplicate must be a probability in 0.0..=1.0",
                    "reorder" => "faults.reorder must be a probability in 0.0..=1.0",
                    _ => "faults.corrupt must be a probability in 0.0..=1.0",
                });
            }
        }
        Ok(())
    }
}

/// Settings of a link.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkConfig {
    /// Largest frame, as smoltcp's `max_transmission_unit`: the IP MTU plus
    /// 14 for Ethernet.
    pub mtu: usize,
    /// Ethernet or bare IP frames.
    pub medium: Medium,
    /// Whether smoltcp computes and checks IPv4 and TCP checksums.
    pub checksums: bool,
    /// smoltcp's `max_burst_size`: caps the receive window it advertises at
    /// this many segments. `None`: no cap.
    pub max_burst: Option<usize>,
    /// Frames queued per direction; more are dropped (a full NIC ring),
    /// unless `backpressure`.
    pub queue_frames: usize,
    /// A full queue refuses smoltcp a transmit token (and receives, whose
    /// reply would need one), as a DPDK port's full ring does, instead of
    /// dropping: a lossless memory wire for benchmarks with more data in
    /// flight than the queue holds (many connections). Off by default.
    pub backpressure: bool,
    /// One-way delay of every frame.
    pub latency: Duration,
}

impl LinkConfig {
    /// An Ethernet link whose IP MTU is `ip_mtu`, checksums on, no latency.
    pub fn ethernet(ip_mtu: usize) -> Self {
        LinkConfig {
            mtu: ip_mtu + 14,
            medium: Medium::Ethernet,
            checksums: true,
            max_burst: None,
            queue_frames: 4096,
            backpressure: false,
            latency: Duration::ZERO,
        }
    }
}

/// Counters of one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Frames transmitted into the direction.
    pub frames: u64,
    /// Octets transmitted into the direction.
    pub octets: u64,
    /// Frames delivered to the receiving end.
    pub delivered: u64,
    /// Frames dropped by fault injection.
    pub dropped: u64,
    /// Frames duplicated.
    pub duplicated: u64,
    /// Frames reordered.
    pub reordered: u64,
    /// Frames corrupted.
    pub corrupted: u64,
    /// Frames dropped because `queue_frames` were queued.
    pub overflowed: u64,
}

struct Frame {
    buf: Vec<u8>,
    len: usize,
    deliver_at: Instant,
}

struct Direction {
    queue: VecDeque<Frame>,
    held: Option<Frame>,
    faults: Faults,
    rng: ChaCha8Rng,
    stats: LinkStats,
    capture: Option<(usize, Vec<Vec<u8>>)>,
}

struct Shared {
    config: LinkConfig,
    /// Index 0 carries frames from end 0 to end 1.
    directions: [Direction; 2],
    pool: Vec<Vec<u8>>,
}

/// Frames kept for reuse; more are freed.
const POOL_FRAMES_MAX: usize = 8192;

/// Two connected ends with `config`. `seed` seeds both directions' fault
/// streams (each its own).
pub fn pair(config: LinkConfig, seed: u64) -> (LinkEnd, LinkEnd) {
    let direction = |n: u64| Direction {
        queue: VecDeque::with_capacity(config.queue_frames.min(1 << 16)),
        held: None,
        faults: Faults::NONE,
        rng: ChaCha8Rng::seed_from_u64(seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
        stats: LinkStats::default(),
        capture: None,
    };
    let shared = Rc::new(RefCell::new(Shared {
        directions: [direction(1), direction(2)],
        pool: Vec::new(),
        config,
    }));
    (
        LinkEnd {
            shared: shared.clone(),
            side: 0,
        },
        LinkEnd { shared, side: 1 },
    )
}

/// One end of an in-memory link: a smoltcp [`phy::Device`].
pub struct LinkEnd {
    shared: Rc<RefCell<Shared>>,
    side: usize,
}

impl LinkEnd {
    /// Set the faults of frames this end transmits.
    ///
    /// # Panics
    /// If a rate is outside `0.0..=1.0` (a test's mistake, not the peer's).
    pub fn set_tx_faults(&self, faults: Faults) {
        if let Err(why) = faults.validate() {
            panic!("{why}");
        }
        self.shared.borrow_mut().directions[self.side].faults = faults;
    }

    /// Counters of frames this end transmitted.
    pub fn tx_stats(&self) -> LinkStats {
        self.shared.borrow().directions[self.side].stats
    }

    /// Counters of frames toward this end (sent by the other).
    pub fn rx_stats(&self) -> LinkStats {
        self.shared.borrow().directions[1 - self.side].stats
    }

    /// Keep a copy of the next `frames` frames this end transmits (before
    /// faults), for tests that inspect the wire.
    pub fn capture_tx(&self, frames: usize) {
        self.shared.borrow_mut().directions[self.side].capture = Some((frames, Vec::new()));
    }

    /// The frames captured so far; capture goes on.
    pub fn take_captured(&self) -> Vec<Vec<u8>> {
        match &mut self.shared.borrow_mut().directions[self.side].capture {
            Some((_, frames)) => std::mem::take(frames),
            None => Vec::new(),
        }
    }

    /// When the next frame for this end is due, if one is on its way: a
    /// caller in virtual time advances its clock no further than this.
    pub fn rx_due(&self) -> Option<Instant> {
        let shared = self.shared.borrow();
        let d = &shared.directions[1 - self.side];
        match (d.queue.front(), &d.held) {
            (Some(f), _) => Some(f.deliver_at),
            (None, Some(h)) => Some(h.deliver_at),
            (None, None) => None,
        }
    }

    /// Frames waiting to be received by this end.
    pub fn rx_pending(&self) -> usize {
        let shared = self.shared.borrow();
        let d = &shared.directions[1 - self.side];
        d.queue.len() + usize::from(d.held.is_some())
    }
}

/// A probability as a threshold on a 32-bit draw.
fn chance(rng: &mut ChaCha8Rng, p: f64) -> bool {
    p > 0.0 && (rng.next_u32() as f64) < p * 4_294_967_296.0
}

impl Shared {
    fn buffer(&mut self, len: usize) -> Vec<u8> {
        let mut buf = self.pool.pop().unwrap_or_default();
        if buf.len() < len {
            buf.resize(len.max(self.config.mtu), 0);
        }
        buf
    }

    fn recycle(&mut self, buf: Vec<u8>) {
        if self.pool.len() < POOL_FRAMES_MAX {
            self.pool.push(buf);
        }
    }

    /// Put a transmitted frame on direction `d`, through its faults.
    fn transmit(&mut self, d: usize, mut buf: Vec<u8>, len: usize, now: Instant) {
        let deliver_at = now + self.config.latency;
        let queue_frames = self.config.queue_frames;
        let dir = &mut self.directions[d];
        dir.stats.frames += 1;
        dir.stats.octets += len as u64;
        if let Some((left, frames)) = &mut dir.capture {
            if *left > 0 {
                *left -= 1;
                frames.push(buf[..len].to_vec());
            }
        }
        let faults = dir.faults;
        if chance(&mut dir.rng, faults.drop) {
            dir.stats.dropped += 1;
            self.recycle(buf);
            return;
        }
        if chance(&mut dir.rng, faults.corrupt) && len > 0 {
            let bit = dir.rng.next_u32() as usize % (len * 8);
            buf[bit / 8] ^= 1 << (bit % 8);
            dir.stats.corrupted += 1;
        }
        let duplicate = chance(&mut dir.rng, faults.duplicate);
        let reorder = chance(&mut dir.rng, faults.reorder);
        let copy = if duplicate {
            let mut copy = self.pool.pop().unwrap_or_default();
            copy.clear();
            copy.extend_from_slice(&buf[..len]);
            Some(copy)
        } else {
            None
        };
        let dir = &mut self.directions[d];
        let mut frames = [
            Some(Frame {
                buf,
                len,
                deliver_at,
            }),
            None,
        ];
        if let Some(copy) = copy {
            dir.stats.duplicated += 1;
            frames[1] = Some(Frame {
                buf: copy,
                len,
                deliver_at,
            });
        }
        let mut overflow = Vec::new();
        for frame in frames.into_iter().flatten() {
            let frame = if reorder && dir.held.is_none() {
                dir.stats.reordered += 1;
                dir.held = Some(frame);
                continue;
            } else {
                frame
            };
            if dir.queue.len() >= queue_frames {
                dir.stats.overflowed += 1;
                overflow.push(frame.buf);
                continue;
            }
            dir.queue.push_back(frame);
            // A held frame goes after the frame that overtook it.
            if !reorder {
                if let Some(held) = dir.held.take() {
                    dir.queue.push_back(held);
                }
            }
        }
        for buf in overflow {
            self.recycle(buf);
        }
    }

    /// The next frame due on direction `d`.
    fn receive(&mut self, d: usize, now: Instant) -> Option<Frame> {
        let dir = &mut self.directions[d];
        let frame = match dir.queue.front() {
            Some(frame) if frame.deliver_at <= now => dir.queue.pop_front(),
            Some(_) => None,
            // Nothing overtook the held frame: deliver it anyway.
            None => match &dir.held {
                Some(held) if held.deliver_at <= now => dir.held.take(),
                _ => None,
            },
        };
        if frame.is_some() {
            dir.stats.delivered += 1;
        }
        frame
    }
}

impl LinkEnd {
    /// Whether this end's outgoing queue is full on a link with
    /// backpressure.
    fn full(&self) -> bool {
        let shared = self.shared.borrow();
        shared.config.backpressure
            && shared.directions[self.side].queue.len() >= shared.config.queue_frames
    }
}

impl phy::Device for LinkEnd {
    type RxToken<'a> = RxToken<'a>;
    type TxToken<'a> = TxToken<'a>;

    fn receive(&mut self, now: Instant) -> Option<(RxToken<'_>, TxToken<'_>)> {
        if self.full() {
            return None;
        }
        let frame = self.shared.borrow_mut().receive(1 - self.side, now)?;
        let end: &LinkEnd = self;
        Some((RxToken { end, frame }, TxToken { end, now }))
    }

    fn transmit(&mut self, now: Instant) -> Option<TxToken<'_>> {
        if self.full() {
            return None;
        }
        Some(TxToken { end: self, now })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let config = &self.shared.borrow().config;
        let mut caps = DeviceCapabilities::default();
        caps.medium = config.medium;
        caps.max_transmission_unit = config.mtu;
        caps.max_burst_size = config.max_burst;
        if !config.checksums {
            let mut checksum = ChecksumCapabilities::ignored();
            checksum.ipv4 = Checksum::None;
            checksum.tcp = Checksum::None;
            caps.checksum = checksum;
        }
        caps
    }
}

/// A received frame, owned until smoltcp has read it.
pub struct RxToken<'a> {
    end: &'a LinkEnd,
    frame: Frame,
}

impl phy::RxToken for RxToken<'_> {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        let result = f(&self.frame.buf[..self.frame.len]);
        self.end.shared.borrow_mut().recycle(self.frame.buf);
        result
    }
}

/// Room for one frame to transmit.
pub struct TxToken<'a> {
    end: &'a LinkEnd,
    now: Instant,
}

impl phy::TxToken for TxToken<'_> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        let mut buf = self.end.shared.borrow_mut().buffer(len);
        let result = f(&mut buf[..len]);
        self.end
            .shared
            .borrow_mut()
            .transmit(self.end.side, buf, len, self.now);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::phy::{Device, RxToken as _, TxToken as _};

    fn send(end: &mut LinkEnd, byte: u8, now: Instant) {
        end.transmit(now).unwrap().consume(60, |buf| buf.fill(byte));
    }

    fn drain(end: &mut LinkEnd, now: Instant) -> Vec<u8> {
        let mut got = Vec::new();
        while let Some((rx, _)) = end.receive(now) {
            got.push(rx.consume(|buf| buf[0]));
        }
        got
    }

    #[test]
    fn clean_link_delivers_in_order() {
        let (mut a, mut b) = pair(LinkConfig::ethernet(1500), 1);
        let now = Instant::ZERO;
        for byte in 0..10 {
            send(&mut a, byte, now);
        }
        assert_eq!(drain(&mut b, now), (0..10).collect::<Vec<_>>());
        assert!(
            drain(&mut a, now).is_empty(),
            "nothing goes back the other way"
        );
    }

    #[test]
    fn faults_follow_their_rates_and_the_seed() {
        let run = |seed| {
            let (mut a, mut b) = pair(LinkConfig::ethernet(1500), seed);
            a.set_tx_faults(Faults {
                drop: 0.1,
                duplicate: 0.05,
                reorder: 0.05,
                corrupt: 0.0,
            });
            let now = Instant::ZERO;
            let mut got = Vec::new();
            for i in 0..10_000u32 {
                send(&mut a, i as u8, now);
                got.extend(drain(&mut b, now));
            }
            (got, a.tx_stats())
        };
        let (got, stats) = run(7);
        assert_eq!(run(7).0, got, "same seed, same run");
        assert_ne!(run(8).0, got, "another seed, another run");
        // 10% drops of 10,000 frames: far outside 800..1200 is a broken RNG use.
        assert!((800..1200).contains(&stats.dropped), "{stats:?}");
        assert!((350..650).contains(&stats.duplicated), "{stats:?}");
        assert!((350..650).contains(&stats.reordered), "{stats:?}");
        assert_eq!(stats.delivered, 10_000 - stats.dropped + stats.duplicated);
        assert_eq!(got.len() as u64, stats.delivered);
        let out_of_order = got
            .windows(2)
            .filter(|w| w[1] != w[0].wrapping_add(1))
            .count();
        assert!(
            out_of_order > 1000,
            "drops, duplicates and reorders show: {out_of_order}"
        );
    }

    #[test]
    fn corruption_flips_exactly_one_bit() {
        let (mut a, mut b) = pair(LinkConfig::ethernet(1500), 3);
        a.set_tx_faults(Faults {
            corrupt: 1.0,
            ..Faults::NONE
        });
        send(&mut a, 0, Instant::ZERO);
        let (rx, _) = b.receive(Instant::ZERO).unwrap();
        let ones: u32 = rx.consume(|buf| buf.iter().map(|b| b.count_ones()).sum());
        assert_eq!(ones, 1);
    }

    #[test]
    fn latency_holds_frames_until_due() {
        let mut config = LinkConfig::ethernet(1500);
        config.latency = Duration::from_micros(50);
        let (mut a, mut b) = pair(config, 1);
        send(&mut a, 1, Instant::from_micros(100));
        assert!(drain(&mut b, Instant::from_micros(149)).is_empty());
        assert_eq!(drain(&mut b, Instant::from_micros(150)), [1]);
    }

    #[test]
    fn a_full_queue_drops_and_counts() {
        let mut config = LinkConfig::ethernet(1500);
        config.queue_frames = 4;
        let (mut a, mut b) = pair(config, 1);
        for byte in 0..6 {
            send(&mut a, byte, Instant::ZERO);
        }
        assert_eq!(a.tx_stats().overflowed, 2);
        assert_eq!(drain(&mut b, Instant::ZERO), [0, 1, 2, 3]);
    }

    #[test]
    fn a_full_queue_with_backpressure_refuses_tokens_and_keeps_every_frame() {
        let mut config = LinkConfig::ethernet(1500);
        config.queue_frames = 4;
        config.backpressure = true;
        let (mut a, mut b) = pair(config, 1);
        for byte in 0..4 {
            send(&mut a, byte, Instant::ZERO);
        }
        assert!(a.transmit(Instant::ZERO).is_none(), "full: no token");
        // Nor a receive, whose reply would need one: B sends A a frame.
        send(&mut b, 9, Instant::ZERO);
        assert!(a.receive(Instant::ZERO).is_none(), "full: no receive");
        assert_eq!(a.tx_stats().overflowed, 0);
        assert_eq!(drain(&mut b, Instant::ZERO), [0, 1, 2, 3]);
        assert!(a.transmit(Instant::ZERO).is_some(), "room again");
        assert_eq!(drain(&mut a, Instant::ZERO), [9]);
    }

    #[test]
    #[should_panic(expected = "faults.drop must be a probability")]
    fn bad_rates_are_refused() {
        let (a, _b) = pair(LinkConfig::ethernet(1500), 1);
        a.set_tx_faults(Faults {
            drop: 1.5,
            ..Faults::NONE
        });
    }
}
