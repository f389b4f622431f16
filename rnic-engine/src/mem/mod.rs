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
//! Octets map to words in memory order: octet `i` is byte `i % 8` of word
//! `i / 8` in the machine's byte order, so a 64-bit value stored at an
//! 8-aligned offset is the native-endian value RFC 7306's atomics act on
//! ("in the endian format of the target memory", seed 004 §5.1).
//!
//! # STags
//! RFC 5040 §6 (WIRE.md): an STag names a tagged buffer. Ours are, as on
//! most RNICs, a 24-bit index into the table and an 8-bit key; the key is
//! drawn from a ChaCha8 stream seeded by the caller (`dataplane` seeds it
//! from the OS), so a peer cannot guess the STag of a region it was not
//! given. A freed index comes back with a new key.

mod dma;

use std::sync::atomic::AtomicU64;
#[cfg(test)]
use std::sync::atomic::Ordering;
use std::sync::Arc;

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

#[derive(Debug)]
enum Slot {
    Free,
    /// Allocated for fast registration, not bound (or invalidated).
    Idle {
        pd: Pd,
    },
    Valid(Registration),
}

/// The STag table: fixed capacity, set at startup.
#[derive(Debug)]
pub(crate) struct StagTable {
    slots: Vec<(u8, Slot)>,
    free: Vec<u32>,
    rng: ChaCha8Rng,
}

/// A granted range: the region and the octet offset the TO maps to.
#[derive(Debug, Clone)]
pub(crate) struct Grant {
    pub(crate) region: Arc<Region>,
    pub(crate) offset: usize,
}

/// The most STags one RNIC holds (the index is 24 bits).
pub const STAGS_MAX: usize = 1 << 24;

impl StagTable {
    pub(crate) fn new(capacity: usize, seed: u64) -> StagTable {
        let capacity = capacity.min(STAGS_MAX - 1);
        // Index 0 is never used: STag 0 is commonly special, and siw's RTR
        // uses STag 1, so the first real index is 2.
        let slots = (0..capacity + 2).map(|_| (0, Slot::Free)).collect();
        let free = (2..capacity as u32 + 2).rev().collect();
        StagTable {
            slots,
            free,
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    fn allocate(&mut self, slot: Slot) -> Option<u32> {
        let index = self.free.pop()?;
        let key = (self.rng.next_u32() & 0xFF) as u8;
        self.slots[index as usize] = (key, slot);
        Some(index << 8 | u32::from(key))
    }

    /// Registers a window and returns its STag, or `None` when full.
    pub(crate) fn register(&mut self, registration: Registration) -> Option<u32> {
        self.allocate(Slot::Valid(registration))
    }

    /// An STag for fast registration, not yet bound.
    pub(crate) fn reserve(&mut self, pd: Pd) -> Option<u32> {
        self.allocate(Slot::Idle { pd })
    }

    fn slot(&self, stag: u32) -> Option<&Slot> {
        let (key, slot) = self.slots.get((stag >> 8) as usize)?;
        (*key == stag as u8 && !matches!(slot, Slot::Free)).then_some(slot)
    }

    fn slot_mut(&mut self, stag: u32) -> Option<&mut Slot> {
        let (key, slot) = self.slots.get_mut((stag >> 8) as usize)?;
        (*key == stag as u8 && !matches!(slot, Slot::Free)).then_some(slot)
    }

    /// Binds a reserved STag to a window (fast registration).
    pub(crate) fn bind(
        &mut self,
        stag: u32,
        registration: Registration,
    ) -> Result<(), AccessError> {
        match self.slot_mut(stag) {
            Some(slot @ Slot::Idle { .. }) => {
                let Slot::Idle { pd } = *slot else {
                    unreachable!()
                };
                if pd != registration.pd {
                    return Err(AccessError::PdMismatch);
                }
                *slot = Slot::Valid(registration);
                Ok(())
            }
            _ => Err(AccessError::InvalidStag),
        }
    }

    /// Invalidates an STag (local invalidate, or remote with
    /// `REMOTE_INVALIDATE` checked by the caller): it stays allocated to
    /// the PD for a later fast registration.
    pub(crate) fn invalidate(
        &mut self,
        stag: u32,
        pd: Pd,
        remote: bool,
    ) -> Result<(), AccessError> {
        let slot = self.slot_mut(stag).ok_or(AccessError::InvalidStag)?;
        match slot {
            Slot::Valid(r) if r.pd != pd => Err(AccessError::PdMismatch),
            Slot::Valid(r) if remote && !r.access.contains(Access::REMOTE_INVALIDATE) => {
                Err(AccessError::Rights)
            }
            Slot::Valid(r) => {
                *slot = Slot::Idle { pd: r.pd };
                Ok(())
            }
            Slot::Idle { .. } | Slot::Free => Err(AccessError::InvalidStag),
        }
    }

    /// Frees an STag (deregistration).
    pub(crate) fn free(&mut self, stag: u32) -> Result<(), AccessError> {
        let index = stag >> 8;
        self.slot(stag).ok_or(AccessError::InvalidStag)?;
        self.slots[index as usize].1 = Slot::Free;
        self.free.push(index);
        Ok(())
    }

    /// Checks an access of `len` octets at Tagged Offset `to`.
    pub(crate) fn check(
        &self,
        stag: u32,
        pd: Pd,
        access: Access,
        to: u64,
        len: usize,
    ) -> Result<Grant, AccessError> {
        let (region, offset) = self.lookup(stag, pd, access, to, len)?;
        Ok(Grant {
            region: region.clone(),
            offset,
        })
    }

    /// [`StagTable::check`] without taking a reference on the region: the
    /// region and the octet offset `to` maps to, borrowed from the table
    /// (placement of one segment needs no more).
    pub(crate) fn lookup(
        &self,
        stag: u32,
        pd: Pd,
        access: Access,
        to: u64,
        len: usize,
    ) -> Result<(&Arc<Region>, usize), AccessError> {
        let Some(Slot::Valid(r)) = self.slot(stag) else {
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
        Ok((&r.region, r.offset + (to - r.base_to) as usize))
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
        let mut table = StagTable::new(16, 7);
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
        let mut table = StagTable::new(1, 42);
        let pd = Pd(1);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..64 {
            let stag = table
                .register(registration(pd, 8, Access::LOCAL_WRITE))
                .unwrap();
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
        assert!(seen.len() > 32, "keys vary: {} distinct of 64", seen.len());
    }

    #[test]
    fn invalidation_and_fast_registration() {
        let mut table = StagTable::new(4, 1);
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
