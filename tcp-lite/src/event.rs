//! Connection handles and the events a transport reports.

use core::fmt;

/// A connection, valid until its slot is reused: the generation makes a
/// stale handle fail with `InvalidConnection` instead of reaching another
/// connection (the ABA problem of index handles).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

impl ConnId {
    /// The slot index, below the transport's `max_connections`: usable as
    /// an index into per-connection arrays of the caller.
    pub fn index(self) -> usize {
        self.index as usize
    }
}

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "conn#{}.{}", self.index, self.generation)
    }
}

/// A listener, named by its local port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ListenerId(pub u16);

/// What happened to a connection. Events are edge-triggered and coalesced:
/// at most one of each kind is pending per connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// The connection.
    pub conn: ConnId,
    /// What happened.
    pub kind: EventKind,
}

/// The kinds of [`Event`], in the order a connection can report them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// An active open completed the three-way handshake.
    Connected,
    /// A listener accepted this connection (handshake complete).
    Accepted(ListenerId),
    /// New data arrived since the receive queue was last drained.
    Readable,
    /// Transmit space opened after a send found none.
    Writable,
    /// The peer sent FIN: no more data will arrive once the queue is read.
    PeerClosed,
    /// Both directions closed in order. Release the handle.
    Closed,
    /// The peer reset the connection, or refused it. Release the handle.
    Reset,
    /// No progress for `user_timeout`: the connection was aborted (RST sent).
    /// Release the handle.
    TimedOut,
}

impl EventKind {
    pub(crate) const fn bit(self) -> u8 {
        match self {
            EventKind::Connected | EventKind::Accepted(_) => 1 << 0,
            EventKind::Readable => 1 << 1,
            EventKind::Writable => 1 << 2,
            EventKind::PeerClosed => 1 << 3,
            EventKind::Closed => 1 << 4,
            EventKind::Reset => 1 << 5,
            EventKind::TimedOut => 1 << 6,
        }
    }

    /// Whether the connection is finished: its handle must be released.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            EventKind::Closed | EventKind::Reset | EventKind::TimedOut
        )
    }
}

/// Pending events of every connection, each connection queued at most once:
/// bounded by the number of connections, whatever the peers do.
#[derive(Debug, Default)]
pub(crate) struct EventQueue {
    queue: std::collections::VecDeque<u32>,
    /// Per slot: pending kinds as bits, the listener of an `Accepted`, and
    /// the generation the bits belong to.
    pending: Vec<(u8, u16, u32)>,
    /// Per slot: whether its index is in `queue` (possibly with no bits left,
    /// after `forget`): the queue never holds an index twice.
    queued: Vec<bool>,
}

impl EventQueue {
    pub(crate) fn with_capacity(slots: usize) -> Self {
        EventQueue {
            queue: std::collections::VecDeque::with_capacity(slots),
            pending: vec![(0, 0, 0); slots],
            queued: vec![false; slots],
        }
    }

    pub(crate) fn push(&mut self, conn: ConnId, kind: EventKind) {
        let slot = &mut self.pending[conn.index as usize];
        if slot.2 != conn.generation {
            *slot = (0, 0, conn.generation);
        }
        if !self.queued[conn.index as usize] {
            self.queued[conn.index as usize] = true;
            self.queue.push_back(conn.index);
        }
        slot.0 |= kind.bit();
        if let EventKind::Accepted(ListenerId(port)) = kind {
            slot.1 = port;
        }
    }

    /// The next event, oldest connection first and, within a connection,
    /// in [`EventKind`] order.
    pub(crate) fn pop(&mut self) -> Option<Event> {
        loop {
            let index = *self.queue.front()?;
            let (bits, port, generation) = &mut self.pending[index as usize];
            if *bits == 0 {
                self.queue.pop_front();
                self.queued[index as usize] = false;
                continue;
            }
            let bit = *bits & bits.wrapping_neg();
            *bits &= !bit;
            if *bits == 0 {
                self.queue.pop_front();
                self.queued[index as usize] = false;
            }
            let conn = ConnId {
                index,
                generation: *generation,
            };
            let kind = match bit {
                0b1 if *port != 0 => EventKind::Accepted(ListenerId(*port)),
                0b1 => EventKind::Connected,
                0b10 => EventKind::Readable,
                0b100 => EventKind::Writable,
                0b1000 => EventKind::PeerClosed,
                0b1_0000 => EventKind::Closed,
                0b10_0000 => EventKind::Reset,
                _ => EventKind::TimedOut,
            };
            return Some(Event { conn, kind });
        }
    }

    /// Drop whatever is pending for a released slot.
    pub(crate) fn forget(&mut self, index: u32) {
        self.pending[index as usize].0 = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalesces_and_orders() {
        let mut q = EventQueue::with_capacity(4);
        let a = ConnId {
            index: 2,
            generation: 7,
        };
        let b = ConnId {
            index: 0,
            generation: 1,
        };
        q.push(a, EventKind::Readable);
        q.push(b, EventKind::Connected);
        q.push(a, EventKind::Readable);
        q.push(a, EventKind::Accepted(ListenerId(80)));
        let got: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(
            got,
            [
                Event {
                    conn: a,
                    kind: EventKind::Accepted(ListenerId(80))
                },
                Event {
                    conn: a,
                    kind: EventKind::Readable
                },
                Event {
                    conn: b,
                    kind: EventKind::Connected
                },
            ]
        );
    }

    #[test]
    fn forget_and_push_cycles_never_grow_the_queue() {
        let mut q = EventQueue::with_capacity(3);
        for generation in 0..100_000 {
            let conn = ConnId {
                index: generation % 3,
                generation,
            };
            q.push(conn, EventKind::Reset);
            q.forget(conn.index);
        }
        assert!(q.queue.len() <= 3, "{} queued", q.queue.len());
        assert_eq!(q.pop(), None);
        assert!(q.queue.is_empty());
    }

    #[test]
    fn forgotten_and_stale_events_vanish() {
        let mut q = EventQueue::with_capacity(2);
        let old = ConnId {
            index: 1,
            generation: 1,
        };
        q.push(old, EventKind::Readable);
        q.forget(1);
        assert_eq!(q.pop(), None);
        q.push(old, EventKind::Writable);
        let new = ConnId {
            index: 1,
            generation: 2,
        };
        q.push(new, EventKind::Reset);
        assert_eq!(
            q.pop(),
            Some(Event {
                conn: new,
                kind: EventKind::Reset
            })
        );
        assert_eq!(q.pop(), None);
    }
}
