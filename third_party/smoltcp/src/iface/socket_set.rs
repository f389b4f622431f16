use core::fmt;
use managed::ManagedSlice;

use super::socket_meta::Meta;
use crate::socket::{AnySocket, Socket};
use crate::wire::IpAddress;

#[cfg(feature = "alloc")]
use crate::time::Instant;
#[cfg(feature = "alloc")]
use alloc::collections::{BTreeMap, BinaryHeap, VecDeque};
#[cfg(feature = "alloc")]
use alloc::vec::Vec;
#[cfg(feature = "alloc")]
use core::cmp::Reverse;

/// dpwarp: a TCP flow as an incoming segment names it: our address and
/// port, then the peer's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub(crate) struct FlowKey {
    pub(crate) local: IpAddress,
    pub(crate) local_port: u16,
    pub(crate) remote: IpAddress,
    pub(crate) remote_port: u16,
}

/// dpwarp: which sockets need the interface's attention, so that a poll
/// costs what the active sockets cost, not what every socket in the set
/// does. An egress pass visits the ready queue (sockets the user touched
/// through `get_mut`, ingress delivered a segment to, or whose timer is
/// due) instead of every socket; ingress finds a TCP segment's socket by
/// its flow; and the user learns which sockets ingress or egress touched
/// (`SocketSet::take_changed`) instead of looking at every one.
#[cfg(feature = "alloc")]
#[derive(Debug, Default)]
pub(crate) struct Schedule {
    /// Sockets the next egress pass visits, in order.
    pub(crate) ready: VecDeque<usize>,
    /// Urgent sockets (`SocketSet::set_urgent`) the next egress pass
    /// visits, in order, before those in `ready`.
    pub(crate) urgent: VecDeque<usize>,
    /// Sockets whose poll time is in the future, by that time; an entry
    /// whose socket's `Meta::timer` no longer names its time is stale.
    pub(crate) timers: BinaryHeap<Reverse<(Instant, usize)>>,
    /// Sockets waiting for a neighbor to be discovered.
    pub(crate) waiting: Vec<usize>,
    /// Sockets ingress or egress touched since `take_changed`.
    pub(crate) changed: Vec<usize>,
    /// TCP sockets by the flow they last accepted a segment of.
    pub(crate) flows: BTreeMap<FlowKey, usize>,
}

/// dpwarp: the most entries the timer queue keeps for `sockets` sockets
/// before it drops the stale ones (`SocketSet::arm`).
#[cfg(feature = "alloc")]
fn timer_bound(sockets: usize) -> usize {
    2 * sockets + 64
}

/// Opaque struct with space for storing one socket.
///
/// This is public so you can use it to allocate space for storing
/// sockets when creating an Interface.
#[derive(Debug, Default)]
pub struct SocketStorage<'a> {
    inner: Option<Item<'a>>,
}

impl<'a> SocketStorage<'a> {
    pub const EMPTY: Self = Self { inner: None };
}

/// An item of a socket set.
#[derive(Debug)]
pub(crate) struct Item<'a> {
    pub(crate) meta: Meta,
    pub(crate) socket: Socket<'a>,
}

/// A handle, identifying a socket in an Interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SocketHandle(usize);

impl SocketHandle {
    /// dpwarp: its index in its set: below the most sockets the set has
    /// held, usable as an index into the user's per-socket arrays.
    pub fn index(self) -> usize {
        self.0
    }
}

impl fmt::Display for SocketHandle {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// An extensible set of sockets.
///
/// The lifetime `'a` is used when storing a `Socket<'a>`.  If you're using
/// owned buffers for your sockets (passed in as `Vec`s) you can use
/// `SocketSet<'static>`.
#[derive(Debug)]
pub struct SocketSet<'a> {
    sockets: ManagedSlice<'a, SocketStorage<'a>>,
    #[cfg(feature = "alloc")]
    pub(crate) schedule: Schedule,
}

impl<'a> SocketSet<'a> {
    /// Create a socket set using the provided storage.
    pub fn new<SocketsT>(sockets: SocketsT) -> SocketSet<'a>
    where
        SocketsT: Into<ManagedSlice<'a, SocketStorage<'a>>>,
    {
        let sockets = sockets.into();
        SocketSet {
            sockets,
            #[cfg(feature = "alloc")]
            schedule: Schedule::default(),
        }
    }

    /// Add a socket to the set, and return its handle.
    ///
    /// # Panics
    /// This function panics if the storage is fixed-size (not a `Vec`) and is full.
    pub fn add<T: AnySocket<'a>>(&mut self, socket: T) -> SocketHandle {
        fn put<'a>(index: usize, slot: &mut SocketStorage<'a>, socket: Socket<'a>) -> SocketHandle {
            net_trace!("[{}]: adding", index);
            let handle = SocketHandle(index);
            let mut meta = Meta::default();
            meta.handle = handle;
            *slot = SocketStorage {
                inner: Some(Item { meta, socket }),
            };
            handle
        }

        let socket = socket.upcast();

        let free = self.sockets.iter().position(|slot| slot.inner.is_none());
        let handle = match (free, &mut self.sockets) {
            (Some(index), sockets) => put(index, &mut sockets[index], socket),
            (None, ManagedSlice::Borrowed(_)) => panic!("adding a socket to a full SocketSet"),
            #[cfg(feature = "alloc")]
            (None, ManagedSlice::Owned(sockets)) => {
                sockets.push(SocketStorage { inner: None });
                let index = sockets.len() - 1;
                put(index, &mut sockets[index], socket)
            }
        };
        // dpwarp: the queues get room for every socket now, so that polling
        // never allocates: the ready and changed queues hold a socket once,
        // the timer queue at most `arm`'s bound (stale entries pile up to it
        // at a rate that depends on timing, so without this a core's steady
        // state allocated now and then, under load).
        #[cfg(feature = "alloc")]
        {
            let n = self.sockets.len();
            let schedule = &mut self.schedule;
            schedule
                .ready
                .reserve(n.saturating_sub(schedule.ready.len()));
            schedule
                .urgent
                .reserve(n.saturating_sub(schedule.urgent.len()));
            schedule
                .changed
                .reserve(n.saturating_sub(schedule.changed.len()));
            schedule
                .waiting
                .reserve(n.saturating_sub(schedule.waiting.len()));
            let timers = timer_bound(n) + 1;
            schedule
                .timers
                .reserve(timers.saturating_sub(schedule.timers.len()));
        }
        // dpwarp: a new socket may have something to send (a SYN).
        self.wake(handle.0);
        handle
    }

    /// Get a socket from the set by its handle, as mutable.
    ///
    /// # Panics
    /// This function may panic if the handle does not belong to this socket set
    /// or the socket has the wrong type.
    pub fn get<T: AnySocket<'a>>(&self, handle: SocketHandle) -> &T {
        match self.sockets[handle.0].inner.as_ref() {
            Some(item) => {
                T::downcast(&item.socket).expect("handle refers to a socket of a wrong type")
            }
            None => panic!("handle does not refer to a valid socket"),
        }
    }

    /// Get a mutable socket from the set by its handle, as mutable.
    ///
    /// # Panics
    /// This function may panic if the handle does not belong to this socket set
    /// or the socket has the wrong type.
    pub fn get_mut<T: AnySocket<'a>>(&mut self, handle: SocketHandle) -> &mut T {
        // dpwarp: what the user does to it may give it something to send.
        self.wake(handle.0);
        match self.sockets[handle.0].inner.as_mut() {
            Some(item) => T::downcast_mut(&mut item.socket)
                .expect("handle refers to a socket of a wrong type"),
            None => panic!("handle does not refer to a valid socket"),
        }
    }

    /// Remove a socket from the set, without changing its state.
    ///
    /// # Panics
    /// This function may panic if the handle does not belong to this socket set.
    pub fn remove(&mut self, handle: SocketHandle) -> Socket<'a> {
        net_trace!("[{}]: removing", handle.0);
        match self.sockets[handle.0].inner.take() {
            Some(item) => {
                // dpwarp: its flow no longer leads here. Its other entries
                // (ready, timers, ...) find no socket, or a new one, and
                // are harmless.
                #[cfg(feature = "alloc")]
                if let Some(flow) = item.meta.flow {
                    if self.schedule.flows.get(&flow) == Some(&handle.0) {
                        self.schedule.flows.remove(&flow);
                    }
                }
                item.socket
            }
            None => panic!("handle does not refer to a valid socket"),
        }
    }

    /// Get an iterator to the inner sockets.
    pub fn iter(&self) -> impl Iterator<Item = (SocketHandle, &Socket<'a>)> {
        self.items().map(|i| (i.meta.handle, &i.socket))
    }

    /// Get a mutable iterator to the inner sockets.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (SocketHandle, &mut Socket<'a>)> {
        // dpwarp: any of them may be changed.
        for index in 0..self.sockets.len() {
            self.wake(index);
        }
        self.items_mut().map(|i| (i.meta.handle, &mut i.socket))
    }

    /// dpwarp: the sockets whose state ingress or egress may have changed
    /// since the last call (a segment arrived for it, it sent one, a timer
    /// of its ran), each once, into `out`. A user that keeps its own view
    /// of every socket (its state, what it holds) needs to look again only
    /// at these, and at those it changed itself.
    #[cfg(feature = "alloc")]
    #[inline]
    pub fn take_changed(&mut self, out: &mut Vec<SocketHandle>) {
        if self.schedule.changed.is_empty() {
            return;
        }
        for index in self.schedule.changed.drain(..) {
            if let Some(item) = self.sockets.get_mut(index).and_then(|s| s.inner.as_mut()) {
                if item.meta.changed {
                    item.meta.changed = false;
                    out.push(item.meta.handle);
                }
            }
        }
    }

    /// dpwarp: marks the socket `handle` urgent, or not. An egress pass
    /// visits the urgent sockets that are ready before all others, each
    /// once, in the order they became ready; the others keep their order
    /// among themselves. A socket that carries latency-sensitive traffic
    /// beside bulk transfers (a class of service, as a NIC's strict
    /// priority queue gives it) then sends at the next pass instead of
    /// after a segment of every busy socket. It takes effect from the
    /// socket's next wake-up; a new socket is not urgent.
    #[cfg(feature = "alloc")]
    pub fn set_urgent(&mut self, handle: SocketHandle, urgent: bool) {
        if let Some(item) = self.sockets[handle.0].inner.as_mut() {
            item.meta.urgent = urgent;
        }
    }

    /// dpwarp: whether the socket `handle` is urgent (`set_urgent`).
    #[cfg(feature = "alloc")]
    pub fn is_urgent(&self, handle: SocketHandle) -> bool {
        self.sockets[handle.0]
            .inner
            .as_ref()
            .is_some_and(|item| item.meta.urgent)
    }

    /// dpwarp: puts socket `index` in the ready queue (the urgent one, if
    /// it is urgent), if it is not there.
    pub(crate) fn wake(&mut self, index: usize) {
        #[cfg(feature = "alloc")]
        if let Some(item) = self.sockets.get_mut(index).and_then(|s| s.inner.as_mut()) {
            if !item.meta.ready {
                item.meta.ready = true;
                if item.meta.urgent {
                    self.schedule.urgent.push_back(index);
                } else {
                    self.schedule.ready.push_back(index);
                }
            }
        }
        #[cfg(not(feature = "alloc"))]
        let _ = index;
    }

    /// dpwarp: notes that socket `index` may have changed.
    pub(crate) fn note_changed(&mut self, index: usize) {
        #[cfg(feature = "alloc")]
        if let Some(item) = self.sockets.get_mut(index).and_then(|s| s.inner.as_mut()) {
            if !item.meta.changed {
                item.meta.changed = true;
                self.schedule.changed.push(index);
            }
        }
        #[cfg(not(feature = "alloc"))]
        let _ = index;
    }

    /// dpwarp: indexes socket `index` under `flow` for ingress, in place of
    /// the flow it had.
    #[cfg(feature = "alloc")]
    pub(crate) fn index_flow(&mut self, index: usize, flow: FlowKey) {
        let Some(item) = self.sockets.get_mut(index).and_then(|s| s.inner.as_mut()) else {
            return;
        };
        if item.meta.flow == Some(flow) && self.schedule.flows.get(&flow) == Some(&index) {
            return;
        }
        if let Some(old) = item.meta.flow.replace(flow) {
            if self.schedule.flows.get(&old) == Some(&index) {
                self.schedule.flows.remove(&old);
            }
        }
        self.schedule.flows.insert(flow, index);
    }

    /// dpwarp: a timer entry for socket `index` at `at` (its `Meta::timer`
    /// says `at` already). Entries a socket no longer names (its timer moved
    /// earlier, it was removed) stay until due or until they outnumber the
    /// sockets, when the queue is rebuilt from the entries still named: it
    /// stays within twice the sockets, and stops allocating once it has
    /// grown to that.
    #[cfg(feature = "alloc")]
    pub(crate) fn arm(&mut self, index: usize, at: Instant) {
        self.schedule.timers.push(Reverse((at, index)));
        if self.schedule.timers.len() > timer_bound(self.sockets.len()) {
            let sockets = &self.sockets;
            self.schedule.timers.retain(|&Reverse((at, index))| {
                sockets
                    .get(index)
                    .and_then(|s| s.inner.as_ref())
                    .is_some_and(|item| item.meta.timer == Some(at))
            });
        }
    }

    /// dpwarp: socket `index`, if there is one.
    pub(crate) fn item_mut(&mut self, index: usize) -> Option<&mut Item<'a>> {
        self.sockets.get_mut(index).and_then(|s| s.inner.as_mut())
    }

    /// Iterate every socket in this set.
    pub(crate) fn items(&self) -> impl Iterator<Item = &Item<'a>> + '_ {
        self.sockets.iter().filter_map(|x| x.inner.as_ref())
    }

    /// Iterate every socket in this set.
    pub(crate) fn items_mut(&mut self) -> impl Iterator<Item = &mut Item<'a>> + '_ {
        self.sockets.iter_mut().filter_map(|x| x.inner.as_mut())
    }
}

#[cfg(all(test, feature = "alloc", feature = "socket-tcp"))]
mod test {
    use super::*;
    use crate::socket::tcp;

    fn tcp_socket() -> tcp::Socket<'static> {
        tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0; 64]),
            tcp::SocketBuffer::new(vec![0; 64]),
        )
    }

    /// dpwarp: once its sockets are added, a set's queues never grow: stale
    /// timer entries pile up to the bound `arm` keeps, and the ready and
    /// changed queues take every socket, without a reallocation.
    #[test]
    fn queues_have_room_for_every_socket_once_added() {
        let mut set = SocketSet::new(vec![]);
        let handles: Vec<_> = (0..5).map(|_| set.add(tcp_socket())).collect();
        let (ready, changed, timers) = (
            set.schedule.ready.capacity(),
            set.schedule.changed.capacity(),
            set.schedule.timers.capacity(),
        );
        assert!(timers > timer_bound(5));
        // Every socket's timer moves earlier again and again: the stale
        // entries reach the bound and are dropped there.
        for round in 0..1_000i64 {
            for h in &handles {
                let at = Instant::from_micros(1_000_000 - round);
                set.item_mut(h.0).unwrap().meta.timer = Some(at);
                set.arm(h.0, at);
                set.wake(h.0);
                set.note_changed(h.0);
            }
        }
        assert!(set.schedule.timers.len() <= timer_bound(5) + 1);
        assert_eq!(set.schedule.ready.len(), 5);
        assert_eq!(set.schedule.changed.len(), 5);
        assert_eq!(set.schedule.ready.capacity(), ready);
        assert_eq!(set.schedule.changed.capacity(), changed);
        assert_eq!(set.schedule.timers.capacity(), timers);
    }

    /// dpwarp: an urgent socket wakes into the urgent queue (which an
    /// egress pass visits first), the others into the ready queue; each
    /// is queued once; a socket taken back wakes into the ready queue; a
    /// socket added in a removed urgent one's slot is not urgent.
    #[test]
    fn urgent_sockets_wake_into_their_own_queue() {
        let mut set = SocketSet::new(vec![]);
        let a = set.add(tcp_socket());
        let b = set.add(tcp_socket());
        assert!(set.schedule.urgent.capacity() >= 2);
        // `add` woke both (a new socket may have a SYN to send).
        assert_eq!(set.schedule.ready, [a.0, b.0]);
        set.schedule.ready.clear();
        for h in [a, b] {
            set.item_mut(h.0).unwrap().meta.ready = false;
        }
        set.set_urgent(b, true);
        assert!(set.is_urgent(b) && !set.is_urgent(a));
        for h in [a, b, b, a] {
            set.wake(h.0);
        }
        assert_eq!(set.schedule.ready, [a.0]);
        assert_eq!(set.schedule.urgent, [b.0]);
        set.schedule.urgent.clear();
        set.item_mut(b.0).unwrap().meta.ready = false;
        set.set_urgent(b, false);
        set.wake(b.0);
        assert_eq!(set.schedule.ready, [a.0, b.0]);
        assert!(set.schedule.urgent.is_empty());
        set.set_urgent(b, true);
        set.remove(b);
        let c = set.add(tcp_socket());
        assert_eq!(c.0, b.0, "the slot is reused");
        assert!(!set.is_urgent(c));
    }
}
