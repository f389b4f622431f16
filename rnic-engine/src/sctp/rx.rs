//! DDP over SCTP, receive: PPID 16 messages in, DDP segments out in
//! DDP-SSN order.
//!
//! Chunks arrive unordered (U=1, RFC 5043 §8): SCTP delivers each message
//! once, but not in the order it was sent. The [`Reorder`] window restores
//! the order of the DDP-SSN (RFC 5043 §6.1, modulo 2^16) for delivery:
//!
//! * the message with the next expected DDP-SSN goes to the queue pair at
//!   once, in place (no copy), and so do the held ones that follow it;
//! * an early RDMA Write segment is placed at once too, in place (tagged
//!   placement needs nothing earlier, RFC 5041 §5), and only its turn is
//!   recorded; a Write completes nothing at the data sink, so its delivery
//!   is that turn passing. Its STag is checked as it stands when the
//!   segment arrives: a Send with Invalidate of that STag that comes
//!   earlier in DDP-SSN order but has not arrived yet does not stop it, as
//!   on any receiver that places out of order; and when an earlier message
//!   turns out bad, the Write stays placed behind the Terminate;
//! * any other early message (untagged: Send, Read Request, Immediate
//!   Data, atomics, Terminate; and Read Responses, which the ORQ places in
//!   order) is copied and held until its turn.
//!
//! What a peer can make this side hold is bounded: at most
//! [`ReorderConfig::messages`] DDP-SSNs ahead of the next expected one,
//! and at most [`ReorderConfig::octets`] octets held. A message outside
//! the window, a DDP-SSN that already arrived, or one more octet than the
//! bound is the peer's error (an SCTP receive window no larger than the
//! bound never lets a correct peer exceed it). Held messages leave SCTP's
//! receive window, so one peer could fill the bound on every stream it
//! opens: the windows of one engine can also draw on a [`ReorderBudget`]
//! together, which bounds what they hold in all, and the windows of one
//! association on a budget within it ([`ReorderBudget::within`]), so that
//! one peer cannot take all of the engine's.
//!
//! The bounds count the octets of the messages held. The memory behind
//! them is at most twice that (a held message's buffer is one kept from an
//! earlier message only when it is no more than twice as large), and a
//! window keeps at most [`SPARE_OCTETS_MAX`] octets of buffers for reuse
//! besides, so that messages of the usual sizes reordered again and again
//! take buffers already there instead of new ones: a peer that has many
//! large messages held and delivered leaves no more than that behind on
//! every stream it opens.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Octets the reorder windows of several DDP streams (one engine's, one
/// core's) may hold together ([`crate::verbs::Rnic::set_reorder_budget`]):
/// a window that would take more than is left fails its hold, as one past
/// its own [`ReorderConfig::octets`] does. A budget may lie within another
/// (one association's within its engine's): a hold then takes from both.
#[derive(Debug)]
pub struct ReorderBudget {
    left: AtomicUsize,
    /// The budget this one lies within.
    parent: Option<Arc<ReorderBudget>>,
}

impl ReorderBudget {
    /// A budget of `octets`.
    pub fn new(octets: usize) -> Arc<ReorderBudget> {
        ReorderBudget::within(octets, None)
    }

    /// A budget of `octets` within `parent`: a hold takes its octets from
    /// both, and fails when either has fewer left.
    pub fn within(octets: usize, parent: Option<Arc<ReorderBudget>>) -> Arc<ReorderBudget> {
        Arc::new(ReorderBudget {
            left: AtomicUsize::new(octets),
            parent,
        })
    }

    /// Octets not held now (in this budget; its parent may have fewer).
    pub fn left(&self) -> usize {
        self.left.load(Ordering::Relaxed)
    }

    /// Takes `n` octets if that many are left here and in the parent.
    fn take(&self, n: usize) -> bool {
        let taken = self
            .left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                left.checked_sub(n)
            })
            .is_ok();
        if !taken {
            return false;
        }
        if let Some(parent) = &self.parent {
            if !parent.take(n) {
                self.left.fetch_add(n, Ordering::Relaxed);
                return false;
            }
        }
        true
    }

    fn give(&self, n: usize) {
        self.left.fetch_add(n, Ordering::Relaxed);
        if let Some(parent) = &self.parent {
            parent.give(n);
        }
    }
}

/// The bounds of a [`Reorder`] window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReorderConfig {
    /// DDP-SSNs after the next expected one that may arrive early (at most
    /// 32,767: beyond that the modulo 2^16 arithmetic is ambiguous).
    pub messages: u16,
    /// Octets of early messages held at most.
    pub octets: usize,
}

impl Default for ReorderConfig {
    /// 1,024 messages and 1 MiB: more than the 256 KiB SCTP receive window
    /// dpwarp's associations advertise lets a peer have in flight.
    fn default() -> ReorderConfig {
        ReorderConfig {
            messages: 1024,
            octets: 1 << 20,
        }
    }
}

/// Where an arriving DDP-SSN falls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// The next expected: deliver it now, then [`Reorder::advance`].
    Next,
    /// `k` DDP-SSNs after the next expected (`k >= 1`), not seen before:
    /// [`Reorder::placed`] or [`Reorder::hold`] it.
    Early(u16),
    /// Outside the window, or a DDP-SSN that already arrived: the peer's
    /// error.
    Invalid,
}

#[derive(Debug)]
enum Slot {
    Empty,
    /// An early Write, already placed: only its turn is left.
    Placed,
    Held(Vec<u8>),
}

/// Buffers of delivered held messages kept for reuse, at most.
const SPARES_MAX: usize = 16;

/// Octets of capacity the buffers a window keeps for reuse have together,
/// at most: 32 KiB, 16 messages at a path MTU of 1500
/// ([`crate::sctp::MESSAGE_MAX_MTU_1500`]), 32 MiB for a core's 1,024
/// streams. They are outside [`ReorderConfig::octets`] and the
/// [`ReorderBudget`] (nothing is held in them), and a window lives as long
/// as its queue pair: without this bound a peer that had 16 messages of
/// 64 KiB held once left 1 MiB behind on every stream (found by an audit).
pub const SPARE_OCTETS_MAX: usize = 32 << 10;

/// The receive order of one DDP stream over SCTP.
#[derive(Debug)]
pub struct Reorder {
    config: ReorderConfig,
    /// The DDP-SSN delivered next.
    expected: u16,
    /// `slots[i]` stands for DDP-SSN `expected + i` (`slots[0]` stays
    /// empty: the expected message is delivered in place when it arrives).
    slots: VecDeque<Slot>,
    /// Octets held in `slots`.
    held: usize,
    /// Buffers of delivered held messages, for the next holds.
    spares: Vec<Vec<u8>>,
    /// The capacity of `spares` together (at most [`SPARE_OCTETS_MAX`]).
    spare_octets: usize,
    /// What `held` draws on besides the window's own bound.
    budget: Option<Arc<ReorderBudget>>,
}

impl Drop for Reorder {
    /// What it held goes back to the budget.
    fn drop(&mut self) {
        if let Some(budget) = &self.budget {
            budget.give(self.held);
        }
    }
}

impl Reorder {
    /// A window expecting DDP-SSN 0 first (RFC 5043 §6.1).
    pub fn new(config: ReorderConfig) -> Reorder {
        Reorder::with_budget(config, None)
    }

    /// [`Reorder::new`], its held octets also drawn from `budget`.
    pub fn with_budget(config: ReorderConfig, budget: Option<Arc<ReorderBudget>>) -> Reorder {
        Reorder {
            config: ReorderConfig {
                messages: config.messages.min(i16::MAX as u16),
                ..config
            },
            expected: 0,
            slots: VecDeque::new(),
            held: 0,
            spares: Vec::new(),
            spare_octets: 0,
            budget,
        }
    }

    /// The DDP-SSN delivered next.
    pub fn expected(&self) -> u16 {
        self.expected
    }

    /// Octets held for later delivery.
    pub fn held_octets(&self) -> usize {
        self.held
    }

    /// Where DDP-SSN `ssn` falls.
    pub fn arrival(&self, ssn: u16) -> Arrival {
        match ssn.wrapping_sub(self.expected) {
            0 => Arrival::Next,
            k if k <= self.config.messages => match self.slots.get(usize::from(k)) {
                None | Some(Slot::Empty) => Arrival::Early(k),
                Some(_) => Arrival::Invalid,
            },
            _ => Arrival::Invalid,
        }
    }

    /// The next expected message was delivered.
    pub fn advance(&mut self) {
        self.slots.pop_front();
        self.expected = self.expected.wrapping_add(1);
    }

    /// Records that the message `k` ahead ([`Arrival::Early`]) was placed
    /// and needs nothing more than its turn.
    pub fn placed(&mut self, k: u16) {
        *self.slot(k) = Slot::Placed;
    }

    /// Copies the message `k` ahead ([`Arrival::Early`]) for delivery in
    /// its turn; `false` (nothing held) when that would exceed
    /// [`ReorderConfig::octets`] or what is left of the budget.
    pub fn hold(&mut self, k: u16, segment: &[u8]) -> bool {
        if self.held + segment.len() > self.config.octets {
            return false;
        }
        if let Some(budget) = &self.budget {
            if !budget.take(segment.len()) {
                return false;
            }
        }
        let mut buffer = self
            .take_spare(segment.len())
            .unwrap_or_else(|| Vec::with_capacity(segment.len()));
        buffer.extend_from_slice(segment);
        self.held += segment.len();
        *self.slot(k) = Slot::Held(buffer);
        true
    }

    /// Takes the next expected message if it arrived early: `Some(None)` for
    /// a placed Write (its turn passes), `Some(Some(segment))` for a held
    /// one, which the caller delivers and hands back with
    /// [`Reorder::recycle`]. Either way the window has advanced.
    pub fn next_ready(&mut self) -> Option<Option<Vec<u8>>> {
        match self.slots.front()? {
            Slot::Empty => None,
            Slot::Placed | Slot::Held(_) => {
                let slot = self.slots.pop_front()?;
                self.expected = self.expected.wrapping_add(1);
                match slot {
                    Slot::Held(buffer) => {
                        self.held -= buffer.len();
                        if let Some(budget) = &self.budget {
                            budget.give(buffer.len());
                        }
                        Some(Some(buffer))
                    }
                    Slot::Placed | Slot::Empty => Some(None),
                }
            }
        }
    }

    /// Gives back the buffer of a delivered held message: kept for reuse
    /// while the window's spares stay within 16 buffers and
    /// [`SPARE_OCTETS_MAX`] octets, freed otherwise.
    pub fn recycle(&mut self, buffer: Vec<u8>) {
        let capacity = buffer.capacity();
        if self.spares.len() < SPARES_MAX && self.spare_octets + capacity <= SPARE_OCTETS_MAX {
            self.spare_octets += capacity;
            self.spares.push(buffer);
        }
    }

    /// An empty spare buffer that takes `len` octets without growing and
    /// is at most twice as large: a larger one would hold more memory than
    /// the octets counted for the message, and a peer could have every
    /// message of its window held in one.
    fn take_spare(&mut self, len: usize) -> Option<Vec<u8>> {
        let fits = |buffer: &Vec<u8>| (len..=len.saturating_mul(2)).contains(&buffer.capacity());
        let index = self.spares.iter().position(fits)?;
        let mut buffer = self.spares.swap_remove(index);
        self.spare_octets -= buffer.capacity();
        buffer.clear();
        Some(buffer)
    }

    fn slot(&mut self, k: u16) -> &mut Slot {
        let index = usize::from(k);
        if self.slots.len() <= index {
            self.slots.resize_with(index + 1, || Slot::Empty);
        }
        &mut self.slots[index]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(messages: u16, octets: usize) -> Reorder {
        Reorder::new(ReorderConfig { messages, octets })
    }

    #[test]
    fn in_order_messages_pass_without_holding() {
        let mut r = window(4, 100);
        for ssn in 0..10u16 {
            assert_eq!(r.arrival(ssn), Arrival::Next);
            r.advance();
            assert_eq!(r.next_ready(), None);
        }
        assert_eq!(r.expected(), 10);
    }

    #[test]
    fn early_messages_wait_for_their_turn() {
        let mut r = window(4, 100);
        assert_eq!(r.arrival(2), Arrival::Early(2));
        assert!(r.hold(2, b"two"));
        assert_eq!(r.arrival(1), Arrival::Early(1));
        r.placed(1);
        assert_eq!(r.held_octets(), 3);
        assert_eq!(r.next_ready(), None, "0 has not arrived");
        assert_eq!(r.arrival(2), Arrival::Invalid, "a duplicate");
        assert_eq!(r.arrival(0), Arrival::Next);
        r.advance();
        assert_eq!(r.next_ready(), Some(None), "1 was placed");
        let held = r.next_ready().unwrap().unwrap();
        assert_eq!(held, b"two");
        r.recycle(held);
        assert_eq!(r.next_ready(), None);
        assert_eq!((r.expected(), r.held_octets()), (3, 0));
        assert_eq!(r.arrival(2), Arrival::Invalid, "already delivered");
    }

    #[test]
    fn the_window_bounds_messages_and_octets() {
        let mut r = window(4, 5);
        assert_eq!(r.arrival(4), Arrival::Early(4));
        assert_eq!(r.arrival(5), Arrival::Invalid);
        assert!(r.hold(1, b"abc"));
        assert!(!r.hold(2, b"def"), "6 octets held would exceed 5");
        assert!(r.hold(2, b"de"));
        assert_eq!(r.held_octets(), 5);
    }

    #[test]
    fn a_budget_within_another_draws_on_both() {
        let engine = ReorderBudget::new(100);
        let (a, b) = (
            ReorderBudget::within(40, Some(engine.clone())),
            ReorderBudget::within(80, Some(engine.clone())),
        );
        let config = ReorderConfig {
            messages: 8,
            octets: 1000,
        };
        let mut ra = Reorder::with_budget(config, Some(a.clone()));
        let mut rb = Reorder::with_budget(config, Some(b.clone()));
        assert!(ra.hold(1, &[1; 30]));
        assert!(!ra.hold(2, &[2; 20]), "past its own 40, with 70 left above");
        assert_eq!((a.left(), engine.left()), (10, 70));
        assert!(rb.hold(1, &[3; 60]));
        assert!(
            !rb.hold(2, &[4; 20]),
            "within its own 80, past the 10 above"
        );
        assert_eq!((b.left(), engine.left()), (20, 10));
        drop(ra);
        assert_eq!((a.left(), engine.left()), (40, 40));
        assert!(rb.hold(2, &[4; 20]));
        assert_eq!((b.left(), engine.left()), (0, 20));
    }

    /// Delivers, in DDP-SSN order, `sizes.len()` early messages of those
    /// sizes held behind the expected one, and that one.
    fn hold_and_deliver(r: &mut Reorder, sizes: &[usize]) {
        for (k, &len) in (1u16..).zip(sizes) {
            assert_eq!(r.arrival(r.expected().wrapping_add(k)), Arrival::Early(k));
            assert!(r.hold(k, &vec![k as u8; len]));
        }
        assert_eq!(r.arrival(r.expected()), Arrival::Next);
        r.advance();
        while let Some(held) = r.next_ready() {
            r.recycle(held.expect("held, not placed"));
        }
        assert_eq!(r.held_octets(), 0);
    }

    fn spare_capacity(r: &Reorder) -> usize {
        r.spares.iter().map(Vec::capacity).sum()
    }

    #[test]
    fn delivered_large_messages_leave_at_most_the_spare_bound_behind() {
        let mut r = Reorder::new(ReorderConfig::default());
        hold_and_deliver(&mut r, &[64 << 10; SPARES_MAX]);
        assert!(
            spare_capacity(&r) <= SPARE_OCTETS_MAX,
            "{} octets kept",
            spare_capacity(&r)
        );
        assert_eq!(r.spare_octets, spare_capacity(&r));
        // Messages of the usual size are kept, and reused.
        hold_and_deliver(&mut r, &[crate::sctp::MESSAGE_MAX_MTU_1500; SPARES_MAX]);
        assert_eq!(r.spares.len(), SPARES_MAX);
        assert!(spare_capacity(&r) <= SPARE_OCTETS_MAX);
        let buffers = |r: &Reorder| {
            let mut at: Vec<_> = r.spares.iter().map(|b| b.as_ptr()).collect();
            at.sort();
            at
        };
        let before = buffers(&r);
        hold_and_deliver(&mut r, &[crate::sctp::MESSAGE_MAX_MTU_1500; SPARES_MAX]);
        assert_eq!(buffers(&r), before, "the same buffers again");
    }

    #[test]
    fn a_small_message_is_not_held_in_a_large_spare() {
        let mut r = Reorder::new(ReorderConfig::default());
        hold_and_deliver(&mut r, &[16 << 10]);
        assert_eq!(r.spares.len(), 1);
        assert!(r.hold(1, b"small"));
        let Slot::Held(buffer) = &r.slots[1] else {
            panic!("held");
        };
        assert!(buffer.capacity() <= 10, "{} octets", buffer.capacity());
        assert_eq!(r.spares.len(), 1, "the spare stays");
        assert!(r.hold(2, &[2; 10 << 10]));
        assert!(r.spares.is_empty(), "a message half its size takes it");
    }

    #[test]
    fn ssns_wrap_modulo_2_16() {
        let mut r = window(8, 100);
        for _ in 0..u16::MAX {
            r.advance();
        }
        assert_eq!(r.expected(), u16::MAX);
        assert_eq!(r.arrival(1), Arrival::Early(2));
        assert!(r.hold(2, b"x"));
        assert_eq!(r.arrival(0), Arrival::Early(1));
        r.placed(1);
        r.advance();
        assert_eq!(r.next_ready(), Some(None));
        assert_eq!(r.next_ready(), Some(Some(b"x".to_vec())));
        assert_eq!(r.expected(), 2);
    }

    #[test]
    fn the_window_never_exceeds_half_the_ssn_space() {
        let r = window(u16::MAX, 100);
        assert_eq!(r.arrival(i16::MAX as u16), Arrival::Early(i16::MAX as u16));
        assert_eq!(r.arrival(0x8000), Arrival::Invalid);
    }
}
