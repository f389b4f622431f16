//! Seeded loss at a port: [`Lossy`] wraps any smoltcp [`Device`] (a TAP
//! device, a DPDK port) and drops the frames it receives and the frames it
//! transmits, each with its own probability, from its own ChaCha8 stream
//! (STYLE.md §4, as [`link`](crate::link) does on the in-memory link).
//!
//! Each direction draws once per frame, in frame order, from a stream of its
//! own: the `n`th frame received is dropped or not whatever the timing of
//! the frames sent, and the same seed drops the same frames each run. A
//! dropped transmit frame is written by smoltcp into a scratch buffer and
//! never reaches the inner device (its token is released unused); a dropped
//! receive frame is taken from the inner device and thrown away, and the
//! next frame, if any, is offered instead.

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use smoltcp::phy::{self, Device, DeviceCapabilities, PacketMeta};
use smoltcp::time::Instant;

/// Frames a [`Lossy`] device saw and dropped, per direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LossyStats {
    /// Frames taken from the inner device (dropped ones included).
    pub rx_frames: u64,
    /// Of those, frames dropped.
    pub rx_dropped: u64,
    /// Frames smoltcp transmitted (dropped ones included).
    pub tx_frames: u64,
    /// Of those, frames dropped (never handed to the inner device).
    pub tx_dropped: u64,
}

/// Most dropped frames one [`Device::receive`] call skips before it says
/// there is nothing: a bound on the work of one call, even at a drop rate
/// of 1.
const RX_SKIP_MAX: usize = 64;

/// One direction's fault stream.
struct Direction {
    drop: f64,
    rng: ChaCha8Rng,
    /// The draw for the next frame, taken before it arrived (receive only:
    /// it is kept until a frame takes it, so draws follow frames, not
    /// calls). Compared with the rate when the frame comes.
    pending: Option<u32>,
}

impl Direction {
    fn new(drop: f64, seed: u64) -> Direction {
        Direction {
            drop,
            rng: ChaCha8Rng::seed_from_u64(seed),
            pending: None,
        }
    }

    /// Whether a frame whose draw is `x` is dropped: a probability as a
    /// threshold on a 32-bit draw (as `link` does). One draw per frame even
    /// at rate 0, so a rate changed midway does not shift which later
    /// frames the stream picks.
    fn dropped(&self, x: u32) -> bool {
        self.drop > 0.0 && (x as f64) < self.drop * 4_294_967_296.0
    }
}

/// The transmit side's state, lent to a transmit token.
struct TxSide {
    dir: Direction,
    frames: u64,
    dropped: u64,
    /// Where a dropped frame is written (kept: one allocation per MTU).
    scratch: Vec<u8>,
}

/// A smoltcp device that drops frames of `D` in each direction with a given
/// probability, from seeded streams. See the [module](self) documentation.
pub struct Lossy<D: Device> {
    inner: D,
    rx: Direction,
    rx_frames: u64,
    rx_dropped: u64,
    tx: TxSide,
}

fn check_probability(what: &str, p: f64) {
    assert!(
        (0.0..=1.0).contains(&p),
        "Lossy: the {what} drop rate must be a probability in 0.0..=1.0, not {p}"
    );
}

impl<D: Device> Lossy<D> {
    /// `inner`, with received frames dropped with probability `rx_drop` and
    /// transmitted frames with probability `tx_drop`; `seed` seeds both
    /// directions' streams (each its own).
    ///
    /// # Panics
    /// If a rate is outside `0.0..=1.0` (the caller's mistake).
    pub fn new(inner: D, rx_drop: f64, tx_drop: f64, seed: u64) -> Lossy<D> {
        check_probability("receive", rx_drop);
        check_probability("transmit", tx_drop);
        // The same derivation as `link::pair`'s two directions.
        let stream = |n: u64| seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        Lossy {
            inner,
            rx: Direction::new(rx_drop, stream(1)),
            rx_frames: 0,
            rx_dropped: 0,
            tx: TxSide {
                dir: Direction::new(tx_drop, stream(2)),
                frames: 0,
                dropped: 0,
                scratch: Vec::new(),
            },
        }
    }

    /// `inner` with the same drop rate `p` each way.
    pub fn symmetric(inner: D, p: f64, seed: u64) -> Lossy<D> {
        Lossy::new(inner, p, p, seed)
    }

    /// The receive drop rate.
    pub fn rx_drop(&self) -> f64 {
        self.rx.drop
    }

    /// The transmit drop rate.
    pub fn tx_drop(&self) -> f64 {
        self.tx.dir.drop
    }

    /// Change the receive drop rate (the stream goes on where it was).
    ///
    /// # Panics
    /// If `p` is outside `0.0..=1.0`.
    pub fn set_rx_drop(&mut self, p: f64) {
        check_probability("receive", p);
        self.rx.drop = p;
    }

    /// Change the transmit drop rate (the stream goes on where it was).
    ///
    /// # Panics
    /// If `p` is outside `0.0..=1.0`.
    pub fn set_tx_drop(&mut self, p: f64) {
        check_probability("transmit", p);
        self.tx.dir.drop = p;
    }

    /// Frames seen and dropped so far.
    pub fn stats(&self) -> LossyStats {
        LossyStats {
            rx_frames: self.rx_frames,
            rx_dropped: self.rx_dropped,
            tx_frames: self.tx.frames,
            tx_dropped: self.tx.dropped,
        }
    }

    /// The wrapped device.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// The wrapped device, mutably (frames sent or received through it
    /// directly bypass the faults and the counters).
    pub fn inner_mut(&mut self) -> &mut D {
        &mut self.inner
    }

    /// The wrapped device, unwrapped.
    pub fn into_inner(self) -> D {
        self.inner
    }
}

impl<D: Device> Device for Lossy<D> {
    type RxToken<'a>
        = D::RxToken<'a>
    where
        Self: 'a;
    type TxToken<'a>
        = TxToken<'a, D::TxToken<'a>>
    where
        Self: 'a;

    fn receive(&mut self, now: Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        for _ in 0..RX_SKIP_MAX {
            // The decision is drawn first and kept until a frame takes it.
            let x = match self.rx.pending {
                Some(x) => x,
                None => {
                    let x = self.rx.rng.next_u32();
                    self.rx.pending = Some(x);
                    x
                }
            };
            if self.rx.dropped(x) {
                let (rx, _tx) = self.inner.receive(now)?;
                self.rx.pending = None;
                self.rx_frames += 1;
                self.rx_dropped += 1;
                phy::RxToken::consume(rx, |_| ());
            } else {
                let (rx, tx) = self.inner.receive(now)?;
                self.rx.pending = None;
                self.rx_frames += 1;
                return Some((
                    rx,
                    TxToken {
                        inner: tx,
                        side: &mut self.tx,
                    },
                ));
            }
        }
        None
    }

    fn transmit(&mut self, now: Instant) -> Option<Self::TxToken<'_>> {
        let inner = self.inner.transmit(now)?;
        Some(TxToken {
            inner,
            side: &mut self.tx,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        self.inner.capabilities()
    }
}

/// A transmit token of a [`Lossy`] device: the frame goes to the inner
/// device's token, or, if its draw says so, nowhere.
pub struct TxToken<'a, T: phy::TxToken> {
    inner: T,
    side: &'a mut TxSide,
}

impl<T: phy::TxToken> phy::TxToken for TxToken<'_, T> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        let side = self.side;
        side.frames += 1;
        let x = side.dir.rng.next_u32();
        if side.dir.dropped(x) {
            side.dropped += 1;
            if side.scratch.len() < len {
                side.scratch.resize(len, 0);
            }
            // The inner token is released unused: nothing is sent.
            return f(&mut side.scratch[..len]);
        }
        self.inner.consume(len, f)
    }

    fn set_meta(&mut self, meta: PacketMeta) {
        self.inner.set_meta(meta);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::{self, LinkConfig, LinkEnd};
    use smoltcp::phy::{RxToken as _, TxToken as _};

    fn send(dev: &mut impl Device, tag: u16) {
        dev.transmit(Instant::ZERO)
            .unwrap()
            .consume(60, |buf| buf[..2].copy_from_slice(&tag.to_be_bytes()));
    }

    fn drain(dev: &mut impl Device) -> Vec<u16> {
        let mut got = Vec::new();
        while let Some((rx, _)) = dev.receive(Instant::ZERO) {
            got.push(rx.consume(|buf| u16::from_be_bytes([buf[0], buf[1]])));
        }
        got
    }

    /// A lossy device on one end of a clean in-memory link; the other end
    /// plain.
    fn rig(rx_drop: f64, tx_drop: f64, seed: u64) -> (Lossy<LinkEnd>, LinkEnd) {
        let mut config = LinkConfig::ethernet(1500);
        config.queue_frames = 1 << 16;
        let (a, b) = link::pair(config, 1);
        (Lossy::new(a, rx_drop, tx_drop, seed), b)
    }

    /// 10,000 frames each way through 10% receive and 5% transmit loss:
    /// which arrive, and the counters.
    fn run(seed: u64) -> (Vec<u16>, Vec<u16>, LossyStats) {
        let (mut lossy, mut plain) = rig(0.10, 0.05, seed);
        let (mut got_rx, mut got_tx) = (Vec::new(), Vec::new());
        for i in 0..10_000u16 {
            send(&mut plain, i);
            send(&mut lossy, i);
            // Drain at different paces, so the directions interleave
            // differently from the frame order.
            if i % 7 == 0 {
                got_rx.extend(drain(&mut lossy));
            }
            if i % 3 == 0 {
                got_tx.extend(drain(&mut plain));
            }
        }
        got_rx.extend(drain(&mut lossy));
        got_tx.extend(drain(&mut plain));
        (got_rx, got_tx, lossy.stats())
    }

    #[test]
    fn drops_follow_their_rates_each_way() {
        let (got_rx, got_tx, stats) = run(7);
        assert_eq!(stats.rx_frames, 10_000, "{stats:?}");
        assert_eq!(stats.tx_frames, 10_000, "{stats:?}");
        // 10% of 10,000 (sd 30) and 5% (sd 22): far outside is a broken draw.
        assert!((850..1150).contains(&stats.rx_dropped), "{stats:?}");
        assert!((400..600).contains(&stats.tx_dropped), "{stats:?}");
        assert_eq!(got_rx.len() as u64, stats.rx_frames - stats.rx_dropped);
        assert_eq!(got_tx.len() as u64, stats.tx_frames - stats.tx_dropped);
        // What is not dropped arrives once, in order.
        assert!(got_rx.windows(2).all(|w| w[0] < w[1]));
        assert!(got_tx.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn the_seed_decides_which_frames_are_dropped() {
        let first = run(7);
        assert_eq!(run(7), first, "same seed, same drops");
        let other = run(8);
        assert_ne!(other.0, first.0, "another seed, other receive drops");
        assert_ne!(other.1, first.1, "another seed, other transmit drops");
    }

    #[test]
    fn drops_depend_on_frame_order_not_on_polling() {
        // Polling an empty device draws nothing: the same frames are
        // dropped however often the receiver looks.
        let arrivals = |polls_between: usize| {
            let (mut lossy, mut plain) = rig(0.2, 0.0, 3);
            let mut got = Vec::new();
            for i in 0..2_000u16 {
                for _ in 0..polls_between {
                    got.extend(drain(&mut lossy));
                }
                send(&mut plain, i);
            }
            got.extend(drain(&mut lossy));
            got
        };
        assert_eq!(arrivals(0), arrivals(5));
    }

    #[test]
    fn rates_zero_and_one() {
        let (mut lossy, mut plain) = rig(0.0, 1.0, 5);
        for i in 0..100 {
            send(&mut plain, i);
            send(&mut lossy, i);
        }
        assert_eq!(drain(&mut lossy), (0..100).collect::<Vec<_>>());
        assert!(drain(&mut plain).is_empty(), "every transmit dropped");
        lossy.set_tx_drop(0.0);
        lossy.set_rx_drop(1.0);
        send(&mut lossy, 1);
        send(&mut plain, 2);
        assert_eq!(drain(&mut plain), [1]);
        assert!(drain(&mut lossy).is_empty(), "every receive dropped");
        let stats = lossy.stats();
        assert_eq!(stats.tx_dropped, 100);
        assert_eq!(stats.rx_dropped, 1);
        assert_eq!(lossy.inner().rx_pending(), 0, "dropped frames are consumed");
    }

    #[test]
    fn a_dropped_receive_passes_on_to_the_next_frame() {
        // Rate 1 drops everything; the call still returns (bounded).
        let (mut lossy, mut plain) = rig(1.0, 0.0, 9);
        for i in 0..(RX_SKIP_MAX as u16 * 3) {
            send(&mut plain, i);
        }
        for calls in 1..=3 {
            assert!(lossy.receive(Instant::ZERO).is_none());
            assert_eq!(lossy.stats().rx_dropped, RX_SKIP_MAX as u64 * calls);
        }
        lossy.set_rx_drop(0.0);
        send(&mut plain, 7);
        assert_eq!(drain(&mut lossy), [7], "the frame after the dropped ones");
        let _ = lossy.inner_mut();
        assert_eq!(lossy.into_inner().rx_pending(), 0);
    }

    #[test]
    #[should_panic(expected = "must be a probability")]
    fn bad_rates_are_refused() {
        let _ = rig(1.5, 0.0, 1);
    }
}
