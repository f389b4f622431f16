use core::fmt;
use managed::ManagedSlice;

use super::socket_meta::Meta;
use crate::socket::{AnySocket, Socket};
use crate::wire::IpAddress;

#[cfg(feature = "alloc")]
use alloc::collections::{BTreeMap, BinaryHeap, VecDeque};
#[cfg(feature = "alloc")]
use alloc::vec::Vec;
#[cfg(feature = "alloc")]
use core::cmp::Reverse;
#[cfg(feature = "alloc")]
use crate::time::Instant;

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

    /// dpwarp: puts socket `index` in the ready queue, if it is not there.
    pub(crate) fn wake(&mut self, index: usize) {
        #[cfg(feature = "alloc")]
        if let Some(item) = self.sockets.get_mut(index).and_then(|s| s.inner.as_mut()) {
            if !item.meta.ready {
                item.meta.ready = true;
                self.schedule.ready.push_back(index);
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
        if self.schedule.timers.len() > 2 * self.sockets.len() + 64 {
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
