//! Registered memory: regions, STags and the checks every access passes.
//!
//! # Soundness
//! Registered memory is where a remote peer writes while the application
//! may read (perftest's latency tests poll the last octet of a buffer the
//! peer is writing). In Rust a non-atomic write racing a read is undefined
//! behaviour, so a [`Region`] never hands out `&[u8]` or `&mut [u8]`: it
//! stores its octets in `AtomicU64` words, and every access, the engine's
//! placement as well as the application's reads and writes, goes through
//! relaxed atomic loads and stores, or on x86-64 a `rep movsb` the compiler
//! cannot see into ([`dma`], the one module with `unsafe` here, says why
//! that is sound). Concurrent accesses to the same octets may see old or
//! new values, as on a hardware RNIC, but never undefined behaviour. The atomic
//! unit ([`crate::atomics`]) works on the same words with read-modify-write
//! atomics, so no other access splits a 64-bit atomic operation.
//!
//! Octets map to words in memory order: octet `i` is byte `i % 8` of word `i /
//! 8` in the machine's byte order, so a 64-bit value stored at an 8-aligned
//! offset is the native-endian value RFC 7306's atomics act on ("in the endian
//! format of the target memory", draft-ietf-storm-rdmap-ext-00 §5.1).
//!
//! # STags
//! RFC 5040 §6: an STag names a tagged buffer. Ours are, as on
//! most RNICs, a 24-bit index into the table and an 8-bit key; the key is
//! drawn from a ChaCha8 stream seeded by the caller (`dataplane` seeds it
//! from the OS), so a peer cannot guess the STag of a region it was not
//! given. A freed index comes back with a new key.

mod dma;

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwapOption;

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A buffer shared by the application and the RNIC.
#[derive(Debug)]
pub struct Region {
    words: Box<[AtomicU64]>,
    len: usize,
}

/// An access outside a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfBounds;

impl Region {
    /// A zeroed region of `len` octets.
    pub fn new(len: usize) -> Arc<Region> {
        let words = (0..len.div_ceil(8)).map(|_| AtomicU64::new(0)).collect();
        Arc::new(Region { words, len })
    }

    /// A region holding a copy of `octets`.
    pub fn from_slice(octets: &[u8]) -> Arc<Region> {
        let region = Region::new(octets.len());
        region.write(0, octets).expect("sized to fit");
        region
    }

    /// Octets in the region.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), OutOfBounds> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(OutOfBounds),
        }
    }

    /// Copies `src` into the region at `offset`.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<(), OutOfBounds> {
        self.check(offset, src.len())?;
        dma::copy_in(&self.words, offset, src);
        Ok(())
    }

    /// Copies octets of the region at `offset` into `dst`.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), OutOfBounds> {
        self.check(offset, dst.len())?;
        dma::copy_out(&self.words, offset, dst);
        Ok(())
    }

    /// Octets `offset..offset + len` of the region as the one-pass framer
    /// reads them (`mpa::tx::Framer::frame_shared`): a view whose octets
    /// other threads may write meanwhile, read only by opaque loads.
    pub(crate) fn shared(&self, offset: usize, len: usize) -> Result<&[AtomicU8], OutOfBounds> {
        self.check(offset, len)?;
        Ok(dma::octets(&self.words, offset, len))
    }

    /// Reads the whole region into a new vector (tests, tools).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.len];
        self.read(0, &mut out).expect("whole region");
        out
    }

    /// The 64-bit word at an 8-aligned `offset`, for atomic operations.
    pub fn word(&self, offset: usize) -> Result<&AtomicU64, OutOfBounds> {
        if !offset.is_multiple_of(8) {
            return Err(OutOfBounds);
        }
        self.check(offset, 8)?;
        Ok(&self.words[offset / 8])
    }
}

/// What a region's STag allows (ibverbs' access flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(u8);

impl Access {
    /// Local read only (the RNIC may always read registered memory locally).
    pub const LOCAL_READ: Access = Access(0);
    /// The RNIC may write it for local work requests (receives, Read sinks).
    pub const LOCAL_WRITE: Access = Access(1);
    /// A peer may RDMA Write it.
    pub const REMOTE_WRITE: Access = Access(2);
    /// A peer may RDMA Read it.
    pub const REMOTE_READ: Access = Access(4);
    /// A peer may target it with atomics.
    pub const REMOTE_ATOMIC: Access = Access(8);
    /// A peer may invalidate its STag with Send with Invalidate.
    pub const REMOTE_INVALIDATE: Access = Access(16);

    /// Both sets of flags (`|` in const contexts).
    pub const fn union(self, other: Access) -> Access {
        Access(self.0 | other.0)
    }

    /// Whether every flag of `other` is set here.
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
}

impl core::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        self.union(rhs)
    }
}

/// A protection domain handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Pd(pub(crate) u32);

/// Why an access through an STag is refused; the engine maps each to the
/// Terminate code of the layer that checked (DDP for tagged placement,
/// RDMAP for Read and atomic sources), as siw's `siw_tagged_error` and
/// `siw_rdmap_error` do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessError {
    /// No such STag, a stale key, or invalidated.
    InvalidStag,
    /// Outside the region.
    BaseBounds,
    /// The STag belongs to another protection domain.
    PdMismatch,
    /// The access is not allowed.
    Rights,
    /// The Tagged Offset plus length wraps 64 bits.
    ToWrap,
}

/// A registration: a window of a region, addressed by Tagged Offsets from
/// `base_to`.
#[derive(Debug, Clone)]
pub(crate) struct Registration {
    pub(crate) pd: Pd,
    pub(crate) region: Arc<Region>,
    /// First octet of the region the registration covers.
    pub(crate) offset: usize,
    pub(crate) len: usize,
    /// The Tagged Offset of the first covered octet.
    pub(crate) base_to: u64,
    pub(crate) access: Access,
}

impl Registration {
    /// Whether the window may be registered (by `reg_mr` or a fast
    /// registration): inside its region, with Tagged Offsets that do not
    /// wrap, and, if it allows remote atomics, mapping every 8-aligned
    /// Tagged Offset to an 8-aligned word of the region.
    ///
    /// RFC 7306 (draft-ietf-storm-rdmap-ext-00 §5.1.1-§5.1.3) has each
    /// atomic act on a 64-bit value "at a naturally aligned buffer
    /// address", and the address a peer names is the Remote Tagged Offset:
    /// the wire rule is on the TO (the requester checks it at post time,
    /// the responder on arrival). The atomic unit acts on one `AtomicU64`
    /// of the region ([`Region::word`]), which is what keeps an atomic
    /// whole against other QPs' atomics and the application's
    /// (draft-ietf-storm-rdmap-ext-00 §5.3). A window whose `base_to` and
    /// `offset` differ modulo 8 would put every aligned TO on a value
    /// that straddles two words, where no single atomic instruction
    /// reaches; doing it as two, or under a lock, would no longer be
    /// atomic against those other accessors. So such a window is refused
    /// remote atomic access here, the one place a TO and memory can part
    /// (on hardware RNICs the TO is the virtual address, so they never
    /// do), and for every window a remote atomic can reach an aligned TO
    /// and an aligned word are the same thing. Without remote atomic
    /// access any alignment is fine.
    pub(crate) fn is_valid(&self) -> bool {
        let fits = self
            .offset
            .checked_add(self.len)
            .is_some_and(|end| end <= self.region.len())
            && self.base_to.checked_add(self.len as u64).is_some();
        let atomic_aligned = !self.access.contains(Access::REMOTE_ATOMIC)
            || (self.offset as u64)
                .wrapping_sub(self.base_to)
                .is_multiple_of(8);
        fits && atomic_aligned
    }
}

/// What a live STag names.
#[derive(Debug)]
pub(crate) enum State {
    /// Allocated for fast registration, not bound (or invalidated).
    Idle {
        pd: Pd,
    },
    Valid(Registration),
}

/// A live STag: its key and what it names. Replaced whole (never changed
/// in place), so a reader holding one sees a consistent key and state.
#[derive(Debug)]
pub(crate) struct Entry {
    key: u8,
    state: State,
}

/// A slot of the table: `None` when free.
pub(crate) type Slot = ArcSwapOption<Entry>;

/// What allocation and freeing take a lock for (never the data path).
#[derive(Debug)]
struct Allocator {
    free: Vec<u32>,
    rng: ChaCha8Rng,
    /// The key each index had when it was last freed (`None`: never
    /// freed). A new STag at that index never gets the same key again:
    /// with a random 8-bit key alone, one reuse in 256 made the STag just
    /// invalidated name the new registration (the appliance's lease test
    /// saw two runs told one STag). A peer still holding the old STag gets
    /// an Invalid STag Terminate (RFC 5040, RFC 5041), as for any freed one.
    last_key: Vec<Option<u8>>,
}

/// The STag table: fixed capacity, set at startup, shared by every core of
/// an RNIC (see [`crate::verbs::Registry`]).
///
/// # Concurrency
/// Checks and lookups (every FPDU that places or sources data, every work
/// request's SGL) read a slot with one `arc_swap` load: no lock, no write
/// to memory another core reads, so cores checking the same STag do not
/// bounce a cache line between them. Registration, fast-registration
/// binds, invalidation and deregistration replace a slot's entry with a
/// compare-and-swap against the entry they checked, so two of them racing
/// on one STag (a Local Invalidate on one core, a remote Send with
/// Invalidate on another) cannot both succeed; allocation and freeing of
/// indexes (and the key stream) take a mutex, off the data path.
///
/// A change is seen by every access that starts after it: the engine checks
/// the STag again for every FPDU it places or sends (RFC 5040 §7.1 checks
/// per DDP segment), so invalidating or deregistering a region on one core
/// stops the Read Responses another core is streaming from it at the next
/// segment. A segment already being copied finishes into the region it
/// checked, which the entry it loaded keeps alive (as a hardware RNIC
/// finishes a DMA already started).
#[derive(Debug)]
pub(crate) struct StagTable {
    slots: Box<[Slot]>,
    allocator: Mutex<Allocator>,
    /// Changes of any slot so far (bind, invalidate, free; not
    /// registration, which changes no STag a list holds): a list resolved
    /// when this read `n` still names what it named while it reads `n`
    /// (see [`StagTable::changes`]).
    changes: AtomicU64,
}

/// A granted range: the region and the octet offset the TO maps to.
#[derive(Debug, Clone)]
pub(crate) struct Grant {
    pub(crate) region: Arc<Region>,
    pub(crate) offset: usize,
}

/// A checked access for one segment: the region (kept alive by the table
/// entry it was read from, without touching the region's reference count)
/// and the octet offset the Tagged Offset maps to.
pub(crate) struct Lease {
    entry: arc_swap::Guard<Option<Arc<Entry>>>,
    pub(crate) offset: usize,
}

impl Lease {
    /// The region.
    pub(crate) fn region(&self) -> &Region {
        match self.entry.as_deref() {
            Some(Entry {
                state: State::Valid(r),
                ..
            }) => &r.region,
            // A lease is made only from a valid entry, which the guard holds.
            _ => unreachable!("a lease holds a valid registration"),
        }
    }
}

/// One slot of a shared table, owned (for [`StagCache`]).
#[derive(Debug)]
pub(crate) struct SlotRef {
    table: Arc<StagTable>,
    index: usize,
}

impl core::ops::Deref for SlotRef {
    type Target = Slot;
    fn deref(&self) -> &Slot {
        &self.table.slots[self.index]
    }
}

/// A QP's copy of the entry of the STag it used last: checking that STag
/// again reads the slot's pointer once and compares it (no write, no
/// reference count), and reloads only when the slot changed. Most work
/// targets one STag over and over (a peer's Writes into one buffer, a
/// sender's SGL in one region), so the data path seldom pays more. It keeps
/// the entry it copied (and its region) alive until it next looks, or the
/// QP goes: the region's memory, never its registration.
#[derive(Debug, Default)]
pub(crate) struct StagCache {
    cache: Option<arc_swap::Cache<SlotRef, Option<Arc<Entry>>>>,
}

/// The number of STag indexes (the index is the STag's upper 24 bits). One
/// RNIC holds two fewer STags: indexes 0 and 1 are never handed out.
pub const STAGS_MAX: usize = 1 << 24;

impl StagTable {
    pub(crate) fn new(capacity: usize, seed: u64) -> StagTable {
        // Indexes run 2..capacity + 2, and each must fit the STag's 24 bits
        // (`index << 8` drops any above): at most STAGS_MAX - 2 of them.
        let capacity = capacity.min(STAGS_MAX - 2);
        // Index 0 is never used: STag 0 is commonly special, and siw's RTR
        // uses STag 1, so the first real index is 2.
        let slots = (0..capacity + 2).map(|_| Slot::empty()).collect();
        let free = (2..capacity as u32 + 2).rev().collect();
        StagTable {
            slots,
            changes: AtomicU64::new(0),
            allocator: Mutex::new(Allocator {
                free,
                rng: ChaCha8Rng::seed_from_u64(seed),
                last_key: vec![None; capacity + 2],
            }),
        }
    }

    fn allocator(&self) -> std::sync::MutexGuard<'_, Allocator> {
        // A panic elsewhere while holding it left the free list whole (each
        // step is one push or pop): go on with it.
        self.allocator.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn allocate(&self, state: State) -> Option<u32> {
        let mut allocator = self.allocator();
        let index = allocator.free.pop()?;
        let mut key = (allocator.rng.next_u32() & 0xFF) as u8;
        while Some(key) == allocator.last_key[index as usize] {
            key = (allocator.rng.next_u32() & 0xFF) as u8;
        }
        // `index << 8` keeps 24 bits of it: a larger one would name
        // another slot (`new` bounds the table so none is).
        debug_assert!(
            (index as usize) < STAGS_MAX,
            "STag index {index} exceeds 24 bits"
        );
        self.slots[index as usize].store(Some(Arc::new(Entry { key, state })));
        Some(index << 8 | u32::from(key))
    }

    /// STags registered or reserved now.
    pub(crate) fn in_use(&self) -> usize {
        // Indices 0 and 1 are never handed out.
        (self.slots.len() - 2) - self.allocator().free.len()
    }

    /// Registers a window and returns its STag, or `None` when full.
    pub(crate) fn register(&self, registration: Registration) -> Option<u32> {
        self.allocate(State::Valid(registration))
    }

    /// An STag for fast registration, not yet bound.
    pub(crate) fn reserve(&self, pd: Pd) -> Option<u32> {
        self.allocate(State::Idle { pd })
    }

    /// The live entry `stag` names (key included).
    fn entry(&self, stag: u32) -> Option<arc_swap::Guard<Option<Arc<Entry>>>> {
        let slot = self.slots.get((stag >> 8) as usize)?;
        let entry = slot.load();
        (entry.as_ref()?.key == stag as u8).then_some(entry)
    }

    /// Replaces `stag`'s entry with what `change` makes of it, atomically
    /// against every other change of the slot.
    fn update(
        &self,
        stag: u32,
        mut change: impl FnMut(&State) -> Result<Option<State>, AccessError>,
    ) -> Result<(), AccessError> {
        let slot = self
            .slots
            .get((stag >> 8) as usize)
            .ok_or(AccessError::InvalidStag)?;
        loop {
            let current = slot.load();
            let Some(entry) = current.as_ref().filter(|e| e.key == stag as u8) else {
                return Err(AccessError::InvalidStag);
            };
            let next = change(&entry.state)?.map(|state| {
                Arc::new(Entry {
                    key: entry.key,
                    state,
                })
            });
            let previous = slot.compare_and_swap(&*current, next);
            let same = match (&*previous, &*current) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                _ => false,
            };
            if same {
                // After the slot: a reader that sees the count unchanged
                // started its access before this change (SeqCst both
                // sides), as one that loaded the old entry did.
                self.changes.fetch_add(1, Ordering::SeqCst);
                return Ok(());
            }
            // Another change came first: check again against it.
        }
    }

    /// How many times a slot has changed (bound, invalidated or freed).
    /// One load of a line every core only reads, unless a change wrote it:
    /// what lets a resolved list be checked again per segment at the cost
    /// of a compare while nothing changes.
    #[inline]
    pub(crate) fn changes(&self) -> u64 {
        self.changes.load(Ordering::SeqCst)
    }

    /// The live entry `stag` names, through `cache`.
    fn cached<'c>(self: &Arc<Self>, cache: &'c mut StagCache, stag: u32) -> Option<&'c Entry> {
        let index = (stag >> 8) as usize;
        if index >= self.slots.len() {
            return None;
        }
        let hit = cache
            .cache
            .as_ref()
            .is_some_and(|c| std::ptr::eq(c.arc_swap(), &self.slots[index]));
        if !hit {
            cache.cache = Some(arc_swap::Cache::new(SlotRef {
                table: self.clone(),
                index,
            }));
        }
        let entry = cache.cache.as_mut()?.load().as_deref()?;
        (entry.key == stag as u8).then_some(entry)
    }

    /// [`StagTable::check`] through a QP's cache.
    pub(crate) fn check_cached(
        self: &Arc<Self>,
        cache: &mut StagCache,
        stag: u32,
        pd: Pd,
        access: Access,
        to: u64,
        len: usize,
    ) -> Result<Grant, AccessError> {
        let entry = self.cached(cache, stag).ok_or(AccessError::InvalidStag)?;
        let (r, offset) = Self::grant(Some(entry), pd, access, to, len)?;
        Ok(Grant {
            region: r.region.clone(),
            offset,
        })
    }

    /// [`StagTable::lookup`] through a QP's cache: the region, borrowed
    /// from the cache, and the octet offset. The region comes as its `Arc`,
    /// so that a caller holding a [`Grant`] can tell whether the STag still
    /// names the same memory (`Arc::ptr_eq`) without touching the
    /// reference count.
    pub(crate) fn lookup_cached<'c>(
        self: &Arc<Self>,
        cache: &'c mut StagCache,
        stag: u32,
        pd: Pd,
        access: Access,
        to: u64,
        len: usize,
    ) -> Result<(&'c Arc<Region>, usize), AccessError> {
        let entry = self.cached(cache, stag).ok_or(AccessError::InvalidStag)?;
        let (r, offset) = Self::grant(Some(entry), pd, access, to, len)?;
        Ok((&r.region, offset))
    }

    /// Binds a reserved STag to a window (fast registration).
    pub(crate) fn bind(&self, stag: u32, registration: Registration) -> Result<(), AccessError> {
        self.update(stag, |state| match state {
            State::Idle { pd } if *pd != registration.pd => Err(AccessError::PdMismatch),
            State::Idle { .. } => Ok(Some(State::Valid(registration.clone()))),
            State::Valid(_) => Err(AccessError::InvalidStag),
        })
    }

    /// Invalidates an STag (local invalidate, or remote with
    /// `REMOTE_INVALIDATE` checked by the caller): it stays allocated to
    /// the PD for a later fast registration.
    pub(crate) fn invalidate(&self, stag: u32, pd: Pd, remote: bool) -> Result<(), AccessError> {
        self.update(stag, |state| match state {
            State::Valid(r) if r.pd != pd => Err(AccessError::PdMismatch),
            State::Valid(r) if remote && !r.access.contains(Access::REMOTE_INVALIDATE) => {
                Err(AccessError::Rights)
            }
            State::Valid(r) => Ok(Some(State::Idle { pd: r.pd })),
            State::Idle { .. } => Err(AccessError::InvalidStag),
        })
    }

    /// Frees an STag (deregistration).
    pub(crate) fn free(&self, stag: u32) -> Result<Pd, AccessError> {
        // The index goes back to the free list only after its slot is
        // empty, under the allocator's lock, so no allocation can reuse it
        // while the old entry is still in place.
        let mut allocator = self.allocator();
        let mut pd = Pd(0);
        self.update(stag, |state| {
            pd = match state {
                State::Idle { pd } => *pd,
                State::Valid(r) => r.pd,
            };
            Ok(None)
        })?;
        allocator.last_key[(stag >> 8) as usize] = Some(stag as u8);
        allocator.free.push(stag >> 8);
        Ok(pd)
    }

    /// Checks an access of `len` octets at Tagged Offset `to`, and takes a
    /// reference on the region (work requests keep theirs until they
    /// complete).
    #[cfg(test)]
    pub(crate) fn check(
        &self,
        stag: u32,
        pd: Pd,
        access: Access,
        to: u64,
        len: usize,
    ) -> Result<Grant, AccessError> {
        let entry = self.entry(stag).ok_or(AccessError::InvalidStag)?;
        let (r, offset) = Self::grant(entry.as_deref(), pd, access, to, len)?;
        Ok(Grant {
            region: r.region.clone(),
            offset,
        })
    }

    /// [`StagTable::check`] for one segment, without taking a reference on
    /// the region: placement and sourcing of one segment need no more.
    pub(crate) fn lookup(
        &self,
        stag: u32,
        pd: Pd,
        access: Access,
        to: u64,
        len: usize,
    ) -> Result<Lease, AccessError> {
        let entry = self.entry(stag).ok_or(AccessError::InvalidStag)?;
        let (_, offset) = Self::grant(entry.as_deref(), pd, access, to, len)?;
        Ok(Lease { entry, offset })
    }

    fn grant(
        entry: Option<&Entry>,
        pd: Pd,
        access: Access,
        to: u64,
        len: usize,
    ) -> Result<(&Registration, usize), AccessError> {
        let Some(Entry {
            state: State::Valid(r),
            ..
        }) = entry
        else {
            return Err(AccessError::InvalidStag);
        };
        if r.pd != pd {
            return Err(AccessError::PdMismatch);
        }
        if !r.access.contains(access) {
            return Err(AccessError::Rights);
        }
        let end = to.checked_add(len as u64).ok_or(AccessError::ToWrap)?;
        // Registrations never wrap (`reg_mr` and fast registration check);
        // saturating keeps a violated invariant a refusal, not a panic.
        if to < r.base_to || end > r.base_to.saturating_add(r.len as u64) {
            return Err(AccessError::BaseBounds);
        }
        Ok((r, r.offset + (to - r.base_to) as usize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_reads_back_any_write() {
        let region = Region::new(100);
        for offset in 0..40 {
            for len in 0..40 {
                let data: Vec<u8> = (0..len).map(|i| (offset * 7 + i) as u8).collect();
                region.write(offset, &data).unwrap();
                let mut back = vec![0u8; len];
                region.read(offset, &mut back).unwrap();
                assert_eq!(back, data, "offset {offset} len {len}");
            }
        }
        assert_eq!(region.write(95, &[0; 6]), Err(OutOfBounds));
        assert_eq!(region.read(usize::MAX, &mut [0; 2]), Err(OutOfBounds));
    }

    #[test]
    fn partial_words_keep_their_neighbours() {
        let region = Region::from_slice(&[0xAA; 24]);
        region.write(3, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]).unwrap();
        let mut expected = [0xAA; 24];
        expected[3..13].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        assert_eq!(region.to_vec(), expected);
    }

    #[test]
    fn words_are_native_endian_values() {
        let region = Region::new(16);
        region
            .write(8, &0x0102_0304_0506_0708u64.to_ne_bytes())
            .unwrap();
        assert_eq!(
            region.word(8).unwrap().load(Ordering::Relaxed),
            0x0102_0304_0506_0708
        );
        assert!(region.word(4).is_err(), "misaligned");
        assert!(region.word(16).is_err(), "out of bounds");
    }

    fn registration(pd: Pd, len: usize, access: Access) -> Registration {
        Registration {
            pd,
            region: Region::new(len),
            offset: 0,
            len,
            base_to: 0x1000,
            access,
        }
    }

    #[test]
    fn stag_checks() {
        let table = StagTable::new(16, 7);
        let pd = Pd(1);
        let stag = table
            .register(registration(pd, 64, Access::REMOTE_WRITE))
            .unwrap();
        assert!(table
            .check(stag, pd, Access::REMOTE_WRITE, 0x1000, 64)
            .is_ok());
        assert_eq!(
            table
                .check(stag, pd, Access::REMOTE_WRITE, 0x1001, 64)
                .unwrap_err(),
            AccessError::BaseBounds
        );
        assert_eq!(
            table
                .check(stag, pd, Access::REMOTE_WRITE, 0xFFF, 1)
                .unwrap_err(),
            AccessError::BaseBounds
        );
        assert_eq!(
            table
                .check(stag, pd, Access::REMOTE_READ, 0x1000, 1)
                .unwrap_err(),
            AccessError::Rights
        );
        assert_eq!(
            table
                .check(stag, Pd(2), Access::REMOTE_WRITE, 0x1000, 1)
                .unwrap_err(),
            AccessError::PdMismatch
        );
        assert_eq!(
            table
                .check(stag ^ 1, pd, Access::REMOTE_WRITE, 0x1000, 1)
                .unwrap_err(),
            AccessError::InvalidStag
        );
        assert_eq!(
            table
                .check(stag, pd, Access::REMOTE_WRITE, u64::MAX, 2)
                .unwrap_err(),
            AccessError::ToWrap
        );
        assert_eq!(
            table.check(0, pd, Access::LOCAL_READ, 0, 0).unwrap_err(),
            AccessError::InvalidStag
        );
        assert_eq!(
            table
                .check(0x100, pd, Access::LOCAL_READ, 0, 0)
                .unwrap_err(),
            AccessError::InvalidStag
        );
    }

    #[test]
    fn keys_change_when_an_index_is_reused() {
        let table = StagTable::new(1, 42);
        let pd = Pd(1);
        let mut seen = std::collections::HashSet::new();
        let mut previous = None;
        // 2,048 reuses: a random key alone would repeat the one before
        // about 8 times.
        for _ in 0..2048 {
            let stag = table
                .register(registration(pd, 8, Access::LOCAL_WRITE))
                .unwrap();
            assert_ne!(Some(stag), previous, "the STag just freed named again");
            previous = Some(stag);
            assert!(
                table
                    .register(registration(pd, 8, Access::LOCAL_WRITE))
                    .is_none(),
                "full"
            );
            seen.insert(stag & 0xFF);
            table.free(stag).unwrap();
            assert_eq!(
                table
                    .check(stag, pd, Access::LOCAL_READ, 0x1000, 1)
                    .unwrap_err(),
                AccessError::InvalidStag
            );
        }
        assert!(seen.len() > 200, "keys vary: {} distinct", seen.len());
    }

    /// A table of the largest size hands out its last index too: the STag
    /// made of it (`index << 8 | key`) must still name its slot, which it
    /// did not when the index reached 2^24 (the STag named slot 0: every
    /// access was refused and the STag could not be freed).
    #[test]
    fn the_last_index_of_a_full_size_table_makes_a_usable_stag() {
        let table = StagTable::new(STAGS_MAX, 1);
        let last = {
            let mut allocator = table.allocator();
            // The free list is in reverse: its first entry goes out last.
            let last = *allocator.free.first().unwrap();
            allocator.free = vec![last];
            last
        };
        let pd = Pd(1);
        let stag = table
            .register(registration(pd, 64, Access::REMOTE_WRITE))
            .expect("registered");
        assert_eq!(stag >> 8, last, "STag {stag:#x} names its index");
        assert!(
            table
                .check(stag, pd, Access::REMOTE_WRITE, 0x1000, 8)
                .is_ok(),
            "STag {stag:#x} names nothing"
        );
        assert_eq!(table.free(stag), Ok(pd));
        assert_eq!(table.allocator().free, vec![last], "the index came back");
    }

    #[test]
    fn invalidation_and_fast_registration() {
        let table = StagTable::new(4, 1);
        let pd = Pd(3);
        let stag = table.reserve(pd).unwrap();
        assert_eq!(
            table
                .check(stag, pd, Access::LOCAL_READ, 0x1000, 1)
                .unwrap_err(),
            AccessError::InvalidStag
        );
        table
            .bind(stag, registration(pd, 16, Access::REMOTE_READ))
            .unwrap();
        assert!(table
            .check(stag, pd, Access::REMOTE_READ, 0x1000, 16)
            .is_ok());
        assert_eq!(
            table.invalidate(stag, pd, true),
            Err(AccessError::Rights),
            "not remote-invalidatable"
        );
        table.invalidate(stag, pd, false).unwrap();
        assert_eq!(
            table
                .check(stag, pd, Access::REMOTE_READ, 0x1000, 1)
                .unwrap_err(),
            AccessError::InvalidStag
        );
        assert_eq!(
            table.bind(stag, registration(Pd(4), 16, Access::REMOTE_READ)),
            Err(AccessError::PdMismatch)
        );
        table
            .bind(
                stag,
                registration(pd, 16, Access::REMOTE_READ | Access::REMOTE_INVALIDATE),
            )
            .unwrap();
        assert_eq!(
            table.invalidate(stag, Pd(9), true),
            Err(AccessError::PdMismatch)
        );
        table.invalidate(stag, pd, true).unwrap();
        assert_eq!(
            table.invalidate(stag, pd, true),
            Err(AccessError::InvalidStag)
        );
    }
}
