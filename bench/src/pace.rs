//! Giving the CPU back while a peer is slow ([`Pacer`]).
//!
//! A poll-mode core spins: every turn polls the port, whether or not
//! anything came. That is what a benchmark wants, and what `bench`'s own
//! workloads do. `bench rping` and `bench perftest` mostly wait on another
//! host's rping or perftest, often a slow one (the interop suite's siw
//! runs in a QEMU guest without KVM, whose round trips take milliseconds),
//! and on a machine with few cores the spinning core takes CPU from that
//! very peer, or from the emulator carrying it: busy polling collapses
//! when another process competes for the core.
//!
//! So these tools pace their core: while turns move something, or for a
//! short spin after the last one that did, they turn back to back; once
//! the core has been idle for that long, each idle turn is followed by a
//! short nap. A peer that answers within the spin (a hardware RNIC, siw
//! on real hardware, a ping-pong latency test) never sees a nap; one that
//! takes longer gets its answer at most one nap later, and the core costs
//! a few percent of a CPU while it waits instead of all of it. The
//! decision is sans-IO (time is an argument); the caller sleeps.

use tcp_lite::{Duration, Instant};

/// Idle time after which turns are followed by naps: far above the round
/// trip of a peer on real hardware (a few to tens of microseconds), so
/// such a peer keeps a spinning core.
pub const SPIN: Duration = Duration::from_micros(200);
/// One nap. Linux's timer slack (50 us by default) makes a shorter sleep
/// about as long; a peer that answers while the core naps waits at most
/// about this much more.
pub const NAP: Duration = Duration::from_micros(50);

/// When a core should sleep between turns (module docs).
#[derive(Debug, Clone)]
pub struct Pacer {
    spin: Duration,
    nap: Duration,
    /// When the current run of idle turns began; `None` after a busy one.
    idle_since: Option<Instant>,
    naps: u64,
}

impl Pacer {
    /// Naps of `nap` once idle for `spin`.
    pub fn new(spin: Duration, nap: Duration) -> Pacer {
        Pacer {
            spin,
            nap,
            idle_since: None,
            naps: 0,
        }
    }

    /// After a turn that began at `now` and moved something (`busy`) or
    /// not: how long to sleep before the next turn, if at all.
    pub fn after_turn(&mut self, now: Instant, busy: bool) -> Option<Duration> {
        if busy {
            self.idle_since = None;
            return None;
        }
        let since = *self.idle_since.get_or_insert(now);
        if now - since < self.spin {
            return None;
        }
        self.naps += 1;
        Some(self.nap)
    }

    /// Naps advised so far.
    pub fn naps(&self) -> u64 {
        self.naps
    }
}

impl Default for Pacer {
    /// [`SPIN`] and [`NAP`].
    fn default() -> Pacer {
        Pacer::new(SPIN, NAP)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(us: i64) -> Instant {
        Instant::from_micros(us)
    }

    #[test]
    fn spins_while_busy_and_for_the_spin_after() {
        let mut p = Pacer::new(Duration::from_micros(200), Duration::from_micros(50));
        // Busy turns never nap, however long they go on.
        for us in (0..10_000).step_by(7) {
            assert_eq!(p.after_turn(at(us), true), None);
        }
        // Idle from 10,000 us: no nap until 200 us of it have passed.
        assert_eq!(p.after_turn(at(10_000), false), None);
        assert_eq!(p.after_turn(at(10_150), false), None);
        assert_eq!(p.after_turn(at(10_199), false), None);
        assert_eq!(p.naps(), 0);
        assert_eq!(
            p.after_turn(at(10_200), false),
            Some(Duration::from_micros(50))
        );
        assert_eq!(
            p.after_turn(at(10_260), false),
            Some(Duration::from_micros(50))
        );
        assert_eq!(p.naps(), 2);
    }

    #[test]
    fn a_busy_turn_starts_the_spin_over() {
        let mut p = Pacer::default();
        assert_eq!(p.after_turn(at(0), false), None);
        assert_eq!(p.after_turn(at(500), false), Some(NAP));
        // The peer answered: spin again, the full spin from the next idle
        // turn on.
        assert_eq!(p.after_turn(at(560), true), None);
        assert_eq!(p.after_turn(at(561), false), None);
        assert_eq!(p.after_turn(at(760), false), None);
        assert_eq!(p.after_turn(at(761), false), Some(NAP));
        assert_eq!(p.naps(), 2);
    }
}
