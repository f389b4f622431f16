//! The verbs: what an application sees of the RNIC, in the shapes of
//! libibverbs (protection domains, memory registration, completion queues,
//! queue pairs, `post_send`/`post_recv`/`poll_cq`), plus the sans-IO data
//! path the data plane drives: [`Rnic::handle_stream`] with the octets TCP
//! received, [`Rnic::poll_transmit`] for the octets to send.
//!
//! One `Rnic` serves the QPs of one poll-mode core; everything is `&mut
//! self`, bounded and allocation-free after setup (rings, tables and
//! buffers are sized by [`RnicConfig`] and [`QpInit`]). Registered memory
//! ([`Region`]) is shared through `Arc` and is safe to touch from any
//! thread at any time (see [`crate::mem`]).

use std::sync::Arc;

use crate::cq::{Cq, Notify, Wc};
use crate::mem::{Access, Pd, Region, Registration, StagTable};
use crate::qp::{Ctx, NoCuts, Qp};
use crate::sctp::rx::ReorderBudget;

pub use crate::qp::{Connection, MessageConnection, QpEvent, QpState, Segments, TermInfo};

/// Sizes of an RNIC's tables, fixed at startup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RnicConfig {
    /// Protection domains.
    pub pds_max: usize,
    /// STags (memory registrations, fast-registration STags); at most
    /// [`STAGS_MAX`](crate::mem::STAGS_MAX) - 2, a larger number is cut to it.
    pub stags_max: usize,
    /// Completion queues; at most [`CQS_MAX`], a larger number is cut to
    /// it.
    pub cqs_max: usize,
    /// Queue pairs.
    pub qps_max: usize,
    /// Shared receive queues; at most [`SRQS_MAX`], a larger number is cut
    /// to it.
    pub srqs_max: usize,
    /// Seed of the STag keys: give it entropy (the data plane seeds it from
    /// the OS) so that a peer cannot predict STags.
    pub stag_seed: u64,
}

impl Default for RnicConfig {
    fn default() -> RnicConfig {
        RnicConfig {
            pds_max: 64,
            stags_max: 4096,
            cqs_max: 256,
            qps_max: 256,
            srqs_max: 64,
            stag_seed: 0,
        }
    }
}

/// The most entries a completion queue may have: 4 Mi (mlx5 allows about
/// as many); a larger [`Rnic::create_cq`] is refused with
/// [`VerbError::Invalid`] (it panicked, or aborted the process on the
/// allocation, found by a review).
pub const CQ_ENTRIES_MAX: usize = 1 << 22;

/// The most entries a send, receive or shared receive queue may have: 1 Mi
/// ([`Rnic::create_qp`], [`Rnic::create_srq`] refuse more with
/// [`VerbError::Invalid`]).
pub const WQ_ENTRIES_MAX: usize = 1 << 20;

/// A queue pair handle: the QP's slot in its RNIC ([`QpHandle::index`]) in
/// the low 32 bits, how many QPs the slot held before it (16 bits) and
/// which RNIC of its registry made it (16 bits) above. A handle whose QP
/// was destroyed, or another RNIC's, names nothing
/// ([`VerbError::UnknownHandle`]), even once its slot holds another QP
/// (found by a review: a stale handle reached the slot's next QP, and a
/// QP destroyed behind `dataplane::Core`'s back had its peer's octets fed
/// to the next connection's). The first QP of each slot of a registry's
/// first RNIC has the handle its index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QpHandle(pub u64);

impl QpHandle {
    /// The slot it names in its RNIC: below [`RnicConfig::qps_max`], and
    /// unique among the RNIC's live QPs (a dense index for a caller's
    /// tables).
    pub fn index(self) -> usize {
        slot_index(self.0)
    }
}

/// The bits of a queue handle ([`QpHandle`], [`CqHandle`], [`SrqHandle`])
/// that name its slot.
const SLOT_MASK: u64 = 0xFFFF_FFFF;

/// Where a queue handle's generation starts: the 16 bits above the slot
/// count the queues of its kind the slot held before it (wrapping).
const GENERATION_SHIFT: u32 = 32;

/// Where a queue handle's RNIC number starts: the top 16 bits say which
/// RNIC of its registry made it.
const RNIC_SHIFT: u32 = 48;

/// The most completion queues an RNIC has: a bound on its table (the
/// handle could name more slots).
pub const CQS_MAX: usize = 1 << 16;

/// The most shared receive queues an RNIC has: a bound on its table.
pub const SRQS_MAX: usize = 1 << 16;

/// A completion queue handle, laid out as a [`QpHandle`] is: the CQ's
/// slot in its RNIC ([`CqHandle::index`]) in the low 32 bits, how many CQs
/// the slot held before it (16 bits, wrapping) and which RNIC of its
/// registry made it (16 bits) above. A handle kept past
/// [`Rnic::destroy_cq`] names nothing ([`VerbError::UnknownHandle`]), even
/// once its slot holds another CQ (until the slot has held 65,536 more);
/// nor does another RNIC's (found by a review: one core's CQ handle named
/// the CQ in the same slot of another core's RNIC, to poll, destroy or
/// make a QP complete to). The first CQ of each slot of a registry's first
/// RNIC has the handle its index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CqHandle(pub u64);

impl CqHandle {
    /// The slot it names in its RNIC: below [`RnicConfig::cqs_max`], and
    /// unique among the RNIC's live CQs.
    pub fn index(self) -> usize {
        slot_index(self.0)
    }
}

/// A shared receive queue handle, made as a [`CqHandle`] is: a handle kept
/// past [`Rnic::destroy_srq`], or another RNIC's, names nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SrqHandle(pub u64);

impl SrqHandle {
    /// The slot it names in its RNIC: below [`RnicConfig::srqs_max`], and
    /// unique among the RNIC's live SRQs.
    pub fn index(self) -> usize {
        slot_index(self.0)
    }
}

/// The slot a queue handle names.
fn slot_index(handle: u64) -> usize {
    (handle & SLOT_MASK) as usize
}

/// The handle of slot `index` of the RNIC numbered `rnic` (in place,
/// [`Rnic`]'s `tag`) holding its `generation`th occupant.
fn slot_handle(rnic: u64, index: usize, generation: u16) -> u64 {
    debug_assert!(index as u64 <= SLOT_MASK, "tables are smaller");
    debug_assert_eq!(rnic & !(u64::MAX << RNIC_SHIFT), 0, "a number in place");
    rnic | u64::from(generation) << GENERATION_SHIFT | index as u64
}

/// The slot `handle` names, if it is of the RNIC numbered `rnic` and of
/// the slot's current `generations` (the slot may be empty).
fn live_slot(generations: &[u16], rnic: u64, handle: u64) -> Option<usize> {
    let index = slot_index(handle);
    let generation = *generations.get(index)?;
    (slot_handle(rnic, index, generation) == handle).then_some(index)
}

/// A memory registration: `lkey` and `rkey` are both its STag, as on
/// iWARP RNICs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mr {
    /// The STag.
    pub stag: u32,
    /// The Tagged Offset of the first octet.
    pub base_to: u64,
    /// Octets covered.
    pub len: usize,
}

/// A scatter/gather entry: `len` octets at Tagged Offset `to` of the
/// registration `stag` (ibverbs' lkey and addr).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sge {
    /// The local STag.
    pub stag: u32,
    /// The Tagged Offset.
    pub to: u64,
    /// Octets.
    pub len: u32,
}

/// A peer's buffer: its STag and a Tagged Offset in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteAddr {
    /// The peer's STag.
    pub stag: u32,
    /// The Tagged Offset.
    pub to: u64,
}

/// What a send work request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendOp {
    /// Send (with Solicited Event when the WR asks for it).
    Send,
    /// Send with Invalidate of the peer's STag.
    SendWithInvalidate(u32),
    /// RDMA Write of the SGL to the peer's buffer.
    Write(RemoteAddr),
    /// RDMA Write, then Immediate Data (RFC 7306): one completion.
    WriteWithImmediate(RemoteAddr, [u8; 8]),
    /// Immediate Data (RFC 7306), with SE when the WR asks for it.
    Immediate([u8; 8]),
    /// RDMA Read of the peer's buffer into the SGL (one entry).
    Read(RemoteAddr),
    /// Masked FetchAdd on the peer's 8-aligned word; the original value
    /// lands in the SGL (one entry of 8 octets).
    FetchAdd {
        /// Target.
        remote: RemoteAddr,
        /// Add Data.
        add: u64,
        /// Add Mask (0: one 64-bit add).
        mask: u64,
    },
    /// Masked CmpSwap.
    CmpSwap {
        /// Target.
        remote: RemoteAddr,
        /// Compare Data.
        compare: u64,
        /// Compare Mask.
        compare_mask: u64,
        /// Swap Data.
        swap: u64,
        /// Swap Mask.
        swap_mask: u64,
    },
    /// Unconditional Swap, sent as CmpSwap with compare mask 0 so that RFC
    /// 7306 peers understand it.
    Swap {
        /// Target.
        remote: RemoteAddr,
        /// The new value.
        swap: u64,
    },
    /// Invalidates a local STag.
    LocalInvalidate(u32),
    /// Binds a fast-registration STag to a window of a region.
    FastRegister(FastRegistration),
}

/// The window a fast registration binds. A window [`Registry::reg_mr`]
/// would refuse (outside the region, wrapping Tagged Offsets, remote
/// atomic access with `base_to` and `offset` apart modulo 8) is not bound:
/// its work request completes with [`WcStatus::LocalProtection`].
///
/// [`WcStatus::LocalProtection`]: crate::cq::WcStatus::LocalProtection
#[derive(Debug, Clone)]
pub struct FastRegistration {
    /// The STag from [`Rnic::alloc_fast_reg_stag`].
    pub stag: u32,
    /// The memory.
    pub region: Arc<Region>,
    /// First octet of the region covered.
    pub offset: usize,
    /// Octets covered.
    pub len: usize,
    /// Tagged Offset of the first covered octet.
    pub base_to: u64,
    /// What it allows.
    pub access: Access,
}

impl PartialEq for FastRegistration {
    fn eq(&self, other: &FastRegistration) -> bool {
        self.stag == other.stag
            && Arc::ptr_eq(&self.region, &other.region)
            && (self.offset, self.len, self.base_to, self.access)
                == (other.offset, other.len, other.base_to, other.access)
    }
}

impl Eq for FastRegistration {}

/// A send work request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub op: SendOp,
    /// The local buffers.
    pub sgl: &'a [Sge],
    /// Complete with a CQE when it succeeds (errors always complete).
    pub signaled: bool,
    /// Ask the peer for a Solicited Event (Send and Immediate Data).
    pub solicited: bool,
    /// Start only after every earlier Read and atomic of the QP completed
    /// (ibverbs' `IBV_SEND_FENCE`). Without it a later Write may be placed
    /// at the peer before an earlier Read's data is fetched there, as RFC
    /// 5040 §5.5 and draft-ietf-storm-rdmap-ext-00 §5.4 item 3 allow.
    pub fence: bool,
}

impl<'a> SendWr<'a> {
    /// A signaled request with no Solicited Event and no fence, the common
    /// case: `SendWr { solicited: true, ..SendWr::signaled(..) }` for the
    /// others.
    pub fn signaled(wr_id: u64, op: SendOp, sgl: &'a [Sge]) -> SendWr<'a> {
        SendWr {
            wr_id,
            op,
            sgl,
            signaled: true,
            solicited: false,
            fence: false,
        }
    }
}

/// A receive work request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where the message goes.
    pub sgl: &'a [Sge],
}

/// How to create a queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInit {
    /// Its protection domain.
    pub pd: Pd,
    /// Where send completions go.
    pub send_cq: CqHandle,
    /// Where receive completions go.
    pub recv_cq: CqHandle,
    /// Receive from a shared receive queue instead of its own.
    pub srq: Option<SrqHandle>,
    /// Send queue depth.
    pub sq_size: usize,
    /// Receive queue depth (ignored with an SRQ).
    pub rq_size: usize,
}

/// Why a verb was refused: the caller's mistake or a resource limit; the
/// QP is not affected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerbError {
    /// No such handle.
    UnknownHandle,
    /// A table or queue is full.
    Full,
    /// More scatter/gather entries than [`SGE_MAX`].
    TooManySge,
    /// The QP's state does not allow it.
    State,
    /// A length or argument is wrong for the operation (an atomic or Read
    /// sink of the wrong length, an empty region window, ...).
    Invalid,
    /// The STag is invalid or in use.
    Stag,
    /// Still in use (ibverbs' `EBUSY`): a protection domain that still has
    /// registrations, STags, QPs or SRQs; a completion queue a QP completes
    /// to; a shared receive queue a QP receives from.
    InUse,
}

impl core::fmt::Display for VerbError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            VerbError::UnknownHandle => "no such handle",
            VerbError::Full => "table or queue full",
            VerbError::TooManySge => "too many scatter/gather entries",
            VerbError::State => "not allowed in the queue pair's state",
            VerbError::Invalid => "invalid argument for the operation",
            VerbError::Stag => "invalid or busy STag",
            VerbError::InUse => {
                "still in use (by a queue pair; a protection domain also by a registration, \
                 an STag or an SRQ)"
            }
        })
    }
}

impl std::error::Error for VerbError {}

/// The most scatter/gather entries of one work request.
pub const SGE_MAX: usize = 4;

/// A shared receive queue.
#[derive(Debug)]
pub(crate) struct Srq {
    pub(crate) pd: Pd,
    pub(crate) ring: std::collections::VecDeque<crate::qp::RecvWqe>,
    pub(crate) capacity: usize,
}

/// The protection domains: each allocated one's users, and the free ones
/// (handed out last freed first).
#[derive(Debug)]
struct Pds {
    /// By index: the users of an allocated PD (`None`: free), and the
    /// generation its handle carries now.
    users: Vec<(Option<u32>, u32)>,
    /// Free indices, the longest free first.
    free: std::collections::VecDeque<u32>,
    /// The bits of a handle its index takes (as few as `pds_max` needs).
    index_bits: u32,
}

/// A PD handle is its index and, in the bits above it, the generation of
/// the index: a handle kept past its PD's [`Registry::dealloc_pd`] names
/// nothing, even once the index is handed out again (a QP made from a
/// stale handle must not join the next owner's PD). The index takes as few
/// bits as the table needs, at most this many, so the generation has at
/// least 8 (24 at the default 256 PDs: it wrapped after 256 reuses of an
/// index when it had 8 whatever the table's size, found by a review).
const PD_INDEX_BITS: u32 = 24;

impl Pds {
    fn new(n: usize) -> Pds {
        let n = n.min(1 << PD_INDEX_BITS);
        let index_bits = (usize::BITS - n.saturating_sub(1).leading_zeros()).max(1);
        Pds {
            users: vec![(None, 0); n],
            free: (0..n as u32).collect(),
            index_bits,
        }
    }

    fn index(&self, pd: Pd) -> u32 {
        pd.0 & ((1 << self.index_bits) - 1)
    }

    /// The users of the PD `pd` names, if it is allocated and the handle
    /// is of its generation.
    fn get_mut(&mut self, pd: Pd) -> Option<&mut Option<u32>> {
        let index = self.index(pd) as usize;
        let generation = pd.0 >> self.index_bits;
        match self.users.get_mut(index) {
            Some((users, g)) if *g == generation => Some(users),
            _ => None,
        }
    }
}

/// What every core of an RNIC shares: protection domains, memory
/// registrations and their STags. The control side (the application, a
/// daemon's memory service) registers a region once; QPs on every core
/// address it by its STag, and every core checks it, per DDP segment,
/// without a lock (see the STag table's concurrency notes in
/// [`crate::mem`]). Invalidation (a Local Invalidate or a Send with
/// Invalidate on any core) and deregistration are seen by every core at
/// its next segment.
///
/// Everything per QP (QPs, SRQs, CQs) stays in each core's own [`Rnic`].
#[derive(Debug)]
pub struct Registry {
    /// Allocated PDs, each with how many registrations, STags, QPs and
    /// SRQs (on any core) are in it: taken and checked only when one of
    /// those is made or goes, never per segment.
    pds: std::sync::Mutex<Pds>,
    stags: Arc<StagTable>,
    /// RNICs made over it so far: each one's number tags its QP, CQ and
    /// SRQ handles.
    rnics: std::sync::atomic::AtomicU16,
}

impl Registry {
    /// A registry sized by `config`'s `pds_max`, `stags_max` and keyed from
    /// `stag_seed`.
    pub fn new(config: &RnicConfig) -> Arc<Registry> {
        Arc::new(Registry {
            pds: std::sync::Mutex::new(Pds::new(config.pds_max)),
            stags: Arc::new(StagTable::new(config.stags_max, config.stag_seed)),
            rnics: std::sync::atomic::AtomicU16::new(0),
        })
    }

    fn pds(&self) -> std::sync::MutexGuard<'_, Pds> {
        // No change panics half-made: a panic elsewhere left it whole.
        self.pds.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> Result<Pd, VerbError> {
        let mut pds = self.pds();
        let index = pds.free.pop_front().ok_or(VerbError::Full)?;
        let bits = pds.index_bits;
        let (users, generation) = &mut pds.users[index as usize];
        *users = Some(0);
        Ok(Pd(index | *generation << bits))
    }

    /// Frees a protection domain, which another [`Registry::alloc_pd`] may
    /// then hand out again. Refused with [`VerbError::InUse`] while a
    /// registration, an STag, a QP or an SRQ is still in it (as
    /// `ibv_dealloc_pd` refuses): a QP left in a freed PD would reach what
    /// the PD's next owner registers.
    pub fn dealloc_pd(&self, pd: Pd) -> Result<(), VerbError> {
        let mut pds = self.pds();
        match pds.get_mut(pd) {
            Some(slot @ Some(0)) => {
                *slot = None;
                let index = pds.index(pd);
                let bits = pds.index_bits;
                let generation = &mut pds.users[index as usize].1;
                *generation = generation.wrapping_add(1) & (u32::MAX >> bits);
                pds.free.push_back(index);
                Ok(())
            }
            Some(Some(_)) => Err(VerbError::InUse),
            _ => Err(VerbError::UnknownHandle),
        }
    }

    /// Protection domains allocated now.
    pub fn pds_in_use(&self) -> usize {
        let pds = self.pds();
        pds.users.len() - pds.free.len()
    }

    fn check_pd(&self, pd: Pd) -> Result<(), VerbError> {
        match self.pds().get_mut(pd) {
            Some(Some(_)) => Ok(()),
            _ => Err(VerbError::UnknownHandle),
        }
    }

    /// One more user of `pd` (a registration, STag, QP or SRQ made in it),
    /// if it is allocated.
    fn hold_pd(&self, pd: Pd) -> Result<(), VerbError> {
        match self.pds().get_mut(pd) {
            Some(Some(users)) => {
                *users += 1;
                Ok(())
            }
            _ => Err(VerbError::UnknownHandle),
        }
    }

    /// One user of `pd` fewer.
    fn release_pd(&self, pd: Pd) {
        if let Some(Some(users)) = self.pds().get_mut(pd) {
            debug_assert!(*users > 0, "a PD released more often than held");
            *users = users.saturating_sub(1);
        }
    }

    /// Registers `len` octets of `region` from `offset`, addressed by Tagged
    /// Offsets from `base_to`. [`VerbError::Invalid`] for a window outside
    /// the region, whose Tagged Offsets wrap, or that allows
    /// [`Access::REMOTE_ATOMIC`] while `base_to` and `offset` differ
    /// modulo 8 (an 8-aligned Tagged Offset, which RFC 7306 atomics need,
    /// would name a misaligned word).
    pub fn reg_mr(
        &self,
        pd: Pd,
        region: Arc<Region>,
        offset: usize,
        len: usize,
        base_to: u64,
        access: Access,
    ) -> Result<Mr, VerbError> {
        self.check_pd(pd)?;
        let registration = Registration {
            pd,
            region,
            offset,
            len,
            base_to,
            access,
        };
        if !registration.is_valid() {
            return Err(VerbError::Invalid);
        }
        self.hold_pd(pd)?;
        let stag = self.stags.register(registration);
        let Some(stag) = stag else {
            self.release_pd(pd);
            return Err(VerbError::Full);
        };
        Ok(Mr { stag, base_to, len })
    }

    /// Registers a whole region with Tagged Offsets from 0.
    pub fn reg_region(&self, pd: Pd, region: Arc<Region>, access: Access) -> Result<Mr, VerbError> {
        let len = region.len();
        self.reg_mr(pd, region, 0, len, 0, access)
    }

    /// Frees a registration's STag: no core places into or reads from it
    /// after this returns (a segment being copied finishes).
    pub fn dereg_mr(&self, stag: u32) -> Result<(), VerbError> {
        let pd = self.stags.free(stag).map_err(|_| VerbError::Stag)?;
        self.release_pd(pd);
        Ok(())
    }

    /// STags registered or reserved now (on every core): what a
    /// deployment watches to see that ended sessions left none behind.
    pub fn stags_in_use(&self) -> usize {
        self.stags.in_use()
    }

    /// Allocates an STag for fast registration (bound later by a
    /// [`SendOp::FastRegister`] work request on any core).
    pub fn alloc_fast_reg_stag(&self, pd: Pd) -> Result<u32, VerbError> {
        self.hold_pd(pd)?;
        let stag = self.stags.reserve(pd);
        if stag.is_none() {
            self.release_pd(pd);
        }
        stag.ok_or(VerbError::Full)
    }
}

/// One core's RNIC: its QPs, SRQs and CQs, over a [`Registry`] it may share
/// with the RNICs of other cores.
#[derive(Debug)]
pub struct Rnic {
    config: RnicConfig,
    registry: Arc<Registry>,
    cqs: Vec<Option<Cq>>,
    /// CQs each slot has held (its next CQ's generation, wrapping).
    cq_generations: Vec<u16>,
    qps: Vec<Option<Qp>>,
    /// QPs each slot has held (its next QP's generation, wrapping).
    qp_generations: Vec<u16>,
    /// This RNIC's number in its registry, in place in a QP, CQ or SRQ
    /// handle.
    tag: u64,
    /// Where [`Rnic::create_qp`] looks for a free slot first: the one
    /// after the last it handed out.
    next_qp: usize,
    srqs: Vec<Option<Srq>>,
    /// SRQs each slot has held (its next SRQ's generation, wrapping).
    srq_generations: Vec<u16>,
    /// QPs given work from outside the data path since the last
    /// [`Rnic::take_doorbells`], each once (`rung` by QP index).
    doorbells: Vec<QpHandle>,
    rung: Vec<bool>,
    /// The time of this turn, in microseconds ([`Rnic::set_now`]).
    now_us: u64,
    /// [`Rnic::set_one_pass_framing`].
    one_pass: bool,
    /// [`Rnic::set_reorder_budget`].
    reorder_budget: Option<Arc<ReorderBudget>>,
}

/// Puts `value` in the first free slot; returns its handle (the RNIC
/// numbered `rnic`, the slot and its generation).
fn take_slot<T>(slots: &mut [Option<T>], generations: &[u16], rnic: u64, value: T) -> Option<u64> {
    let index = slots.iter().position(Option::is_none)?;
    slots[index] = Some(value);
    Some(slot_handle(rnic, index, generations[index]))
}

impl Drop for Rnic {
    /// Its QPs and SRQs leave their protection domains (which
    /// [`Registry::dealloc_pd`] may then free).
    fn drop(&mut self) {
        for qp in self.qps.iter().flatten() {
            self.registry.release_pd(qp.pd());
        }
        for srq in self.srqs.iter().flatten() {
            self.registry.release_pd(srq.pd);
        }
    }
}

impl Rnic {
    /// An RNIC with empty tables of the configured sizes and a registry of
    /// its own.
    pub fn new(config: RnicConfig) -> Rnic {
        Rnic::with_registry(config, Registry::new(&config))
    }

    /// An RNIC (one core's) over a shared `registry`: `config`'s CQ, QP and
    /// SRQ sizes apply; its PD and STag sizes and seed are the registry's.
    pub fn with_registry(config: RnicConfig, registry: Arc<Registry>) -> Rnic {
        let tag = u64::from(
            registry
                .rnics
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        ) << RNIC_SHIFT;
        let cqs_max = config.cqs_max.min(CQS_MAX);
        let srqs_max = config.srqs_max.min(SRQS_MAX);
        Rnic {
            config,
            registry,
            cqs: (0..cqs_max).map(|_| None).collect(),
            cq_generations: vec![0; cqs_max],
            qps: (0..config.qps_max).map(|_| None).collect(),
            qp_generations: vec![0; config.qps_max],
            tag,
            next_qp: 0,
            srqs: (0..srqs_max).map(|_| None).collect(),
            srq_generations: vec![0; srqs_max],
            doorbells: Vec::with_capacity(config.qps_max),
            rung: vec![false; config.qps_max],
            now_us: 0,
            one_pass: true,
            reorder_budget: None,
        }
    }

    /// Whether this RNIC's QPs frame the FPDUs of Writes, Sends and Read
    /// Responses of 6,144 octets or more (jumbo segments) in one pass from
    /// registered memory, the payload copied and folded into the CRC at
    /// once (`mpa::tx::Framer::frame_region`; the default), or copy the
    /// payload and then fold the copy, as they do for shorter FPDUs. For
    /// measuring one against the other (`engine_table`), and as a way back
    /// should the one-pass kernel misbehave on some CPU.
    pub fn set_one_pass_framing(&mut self, enabled: bool) {
        self.one_pass = enabled;
    }

    /// The time of this turn, in microseconds from any fixed epoch: the
    /// engine reads no clock (it is sans-IO); a core sets it once per turn.
    /// Inbound Read and Atomic Requests are stamped with it, and their
    /// responses measured against it ([`crate::qp::ResponseTimes`]); left
    /// at 0, every response counts as immediate.
    pub fn set_now(&mut self, micros: u64) {
        self.now_us = micros;
    }

    /// Notes that QP `qp` was given work to send (a hardware RNIC's
    /// doorbell).
    fn ring(&mut self, qp: QpHandle) {
        if self.qp(qp).is_none() {
            return;
        }
        if let Some(rung) = self.rung.get_mut(qp.index()) {
            if !*rung {
                *rung = true;
                self.doorbells.push(qp);
            }
        }
    }

    /// The QPs given work to send since the last call, each once, into
    /// `out`: those a send work request was posted to
    /// ([`Rnic::post_send`]), an ULPDU injected into, or that were moved to
    /// Error ([`Rnic::close`]). With what a core learns on the data path
    /// (what TCP delivered, what the engine still holds), these are the
    /// only QPs whose transmit path can have new work: a core with many
    /// QPs looks at the others only when TCP says so.
    pub fn take_doorbells(&mut self, out: &mut Vec<QpHandle>) {
        for qp in self.doorbells.drain(..) {
            if let Some(rung) = self.rung.get_mut(qp.index()) {
                *rung = false;
            }
            out.push(qp);
        }
    }

    /// The configuration.
    pub fn config(&self) -> RnicConfig {
        self.config
    }

    /// The registry (PDs, registrations, STags) this RNIC uses.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Allocates a protection domain (in the registry).
    pub fn alloc_pd(&mut self) -> Result<Pd, VerbError> {
        self.registry.alloc_pd()
    }

    /// Registers memory (in the registry): see [`Registry::reg_mr`].
    pub fn reg_mr(
        &mut self,
        pd: Pd,
        region: Arc<Region>,
        offset: usize,
        len: usize,
        base_to: u64,
        access: Access,
    ) -> Result<Mr, VerbError> {
        self.registry
            .reg_mr(pd, region, offset, len, base_to, access)
    }

    /// Registers a whole region with Tagged Offsets from 0.
    pub fn reg_region(
        &mut self,
        pd: Pd,
        region: Arc<Region>,
        access: Access,
    ) -> Result<Mr, VerbError> {
        self.registry.reg_region(pd, region, access)
    }

    /// Frees a registration's STag.
    pub fn dereg_mr(&mut self, stag: u32) -> Result<(), VerbError> {
        self.registry.dereg_mr(stag)
    }

    /// Allocates an STag for fast registration (bound later by a
    /// [`SendOp::FastRegister`] work request).
    pub fn alloc_fast_reg_stag(&mut self, pd: Pd) -> Result<u32, VerbError> {
        self.registry.alloc_fast_reg_stag(pd)
    }

    /// Creates a completion queue of `capacity` entries.
    pub fn create_cq(&mut self, capacity: usize) -> Result<CqHandle, VerbError> {
        if capacity > CQ_ENTRIES_MAX {
            return Err(VerbError::Invalid);
        }
        take_slot(
            &mut self.cqs,
            &self.cq_generations,
            self.tag,
            Cq::new(capacity),
        )
        .map(CqHandle)
        .ok_or(VerbError::Full)
    }

    /// A completion queue, to poll or arm.
    pub fn cq(&mut self, cq: CqHandle) -> Result<&mut Cq, VerbError> {
        let index =
            live_slot(&self.cq_generations, self.tag, cq.0).ok_or(VerbError::UnknownHandle)?;
        self.cqs[index].as_mut().ok_or(VerbError::UnknownHandle)
    }

    /// Destroys a completion queue (ibverbs' `ibv_destroy_cq`): refused
    /// with [`VerbError::InUse`] while a QP of this RNIC completes to it
    /// (as its send or receive CQ; `ibv_destroy_cq` fails with `EBUSY`),
    /// since that QP's completions would have nowhere to go. Completions
    /// still in it are dropped with it. Its slot is free for the next
    /// [`Rnic::create_cq`], and its handle names nothing from now on.
    pub fn destroy_cq(&mut self, cq: CqHandle) -> Result<(), VerbError> {
        self.cq(cq)?;
        if self.qps.iter().flatten().any(|qp| qp.uses_cq(cq)) {
            return Err(VerbError::InUse);
        }
        let index = cq.index();
        self.cqs[index] = None;
        self.cq_generations[index] = self.cq_generations[index].wrapping_add(1);
        Ok(())
    }

    /// Moves completions into `out` (ibverbs' `poll_cq`).
    pub fn poll_cq(&mut self, cq: CqHandle, out: &mut [Wc]) -> Result<usize, VerbError> {
        Ok(self.cq(cq)?.poll(out))
    }

    /// Arms the completion event (ibverbs' `req_notify_cq`).
    pub fn req_notify_cq(&mut self, cq: CqHandle, mode: Notify) -> Result<(), VerbError> {
        self.cq(cq)?.request_notify(mode);
        Ok(())
    }

    /// Creates a shared receive queue.
    pub fn create_srq(&mut self, pd: Pd, capacity: usize) -> Result<SrqHandle, VerbError> {
        if capacity > WQ_ENTRIES_MAX {
            return Err(VerbError::Invalid);
        }
        self.registry.check_pd(pd)?;
        if !self.srqs.iter().any(Option::is_none) {
            return Err(VerbError::Full);
        }
        self.registry.hold_pd(pd)?;
        let srq = Srq {
            pd,
            ring: std::collections::VecDeque::with_capacity(capacity),
            capacity,
        };
        take_slot(&mut self.srqs, &self.srq_generations, self.tag, srq)
            .map(SrqHandle)
            .ok_or(VerbError::Full)
    }

    /// The SRQ `srq` names, if it is live.
    fn srq_mut(&mut self, srq: SrqHandle) -> Result<&mut Srq, VerbError> {
        let index =
            live_slot(&self.srq_generations, self.tag, srq.0).ok_or(VerbError::UnknownHandle)?;
        self.srqs[index].as_mut().ok_or(VerbError::UnknownHandle)
    }

    /// Destroys a shared receive queue (ibverbs' `ibv_destroy_srq`):
    /// refused with [`VerbError::InUse`] while a QP of this RNIC receives
    /// from it (`ibv_destroy_srq` fails with `EBUSY`). The receives still
    /// posted to it go with it, without completions (they belong to no
    /// QP). It leaves its protection domain, its slot is free for the
    /// next [`Rnic::create_srq`], and its handle names nothing from now
    /// on.
    pub fn destroy_srq(&mut self, srq: SrqHandle) -> Result<(), VerbError> {
        self.srq_mut(srq)?;
        if self.qps.iter().flatten().any(|qp| qp.uses_srq(srq)) {
            return Err(VerbError::InUse);
        }
        let index = srq.index();
        let gone = self.srqs[index].take().expect("looked up");
        self.srq_generations[index] = self.srq_generations[index].wrapping_add(1);
        self.registry.release_pd(gone.pd);
        Ok(())
    }

    /// Posts a receive to a shared receive queue.
    pub fn post_srq_recv(&mut self, srq: SrqHandle, wr: &RecvWr<'_>) -> Result<(), VerbError> {
        let wqe = crate::qp::RecvWqe::new(wr)?;
        let srq = self.srq_mut(srq)?;
        if srq.ring.len() == srq.capacity {
            return Err(VerbError::Full);
        }
        srq.ring.push_back(wqe);
        Ok(())
    }

    /// Creates a queue pair in state Idle. A destroyed QP's handle is
    /// handed out again only once every other free one has been.
    pub fn create_qp(&mut self, init: QpInit) -> Result<QpHandle, VerbError> {
        if init.sq_size > WQ_ENTRIES_MAX || init.rq_size > WQ_ENTRIES_MAX {
            return Err(VerbError::Invalid);
        }
        self.registry.check_pd(init.pd)?;
        for cq in [init.send_cq, init.recv_cq] {
            self.cq(cq)?;
        }
        if let Some(srq) = init.srq {
            let srq = self.srq_mut(srq)?;
            if srq.pd != init.pd {
                return Err(VerbError::Invalid);
            }
        }
        // The first free slot from the one after the last handed out,
        // wrapping: a destroyed QP's handle comes back only after every
        // other free one, so what still names it (its flushed completions
        // in a CQ its consumer polls later, its events) is not taken for a
        // new QP's in the meantime.
        let n = self.qps.len();
        let index = (0..n)
            .map(|k| (self.next_qp + k) % n)
            .find(|&i| self.qps[i].is_none())
            .ok_or(VerbError::Full)?;
        self.registry.hold_pd(init.pd)?;
        let handle = QpHandle(slot_handle(self.tag, index, self.qp_generations[index]));
        self.qps[index] = Some(Qp::new(handle, init));
        self.next_qp = (index + 1) % n;
        Ok(handle)
    }

    /// Destroys a queue pair.
    pub fn destroy_qp(&mut self, qp: QpHandle) -> Result<(), VerbError> {
        self.qp_mut(qp).ok_or(VerbError::UnknownHandle)?;
        let index = qp.index();
        let qp = self.qps[index].take().expect("looked up");
        self.qp_generations[index] = self.qp_generations[index].wrapping_add(1);
        self.registry.release_pd(qp.pd());
        Ok(())
    }

    /// The QP `qp` names, if it is this RNIC's and live.
    fn qp(&self, qp: QpHandle) -> Option<&Qp> {
        self.qps
            .get(qp.index())
            .and_then(Option::as_ref)
            .filter(|q| q.handle() == qp)
    }

    fn qp_mut(&mut self, qp: QpHandle) -> Option<&mut Qp> {
        self.qps
            .get_mut(qp.index())
            .and_then(Option::as_mut)
            .filter(|q| q.handle() == qp)
    }

    /// Moves queue pair `qp` into protection domain `pd`: only a QP that
    /// is still Idle (never connected) with no work request posted and no
    /// SRQ, so that nothing it did was checked against its old PD. For a
    /// QP made before its consumer is known, as a DDP over SCTP stream's
    /// is: the stream's QP is made when the peer's Initiate arrives, and
    /// its ULP picks the PD once it has read the Initiate (as an MPA
    /// connection's QP is made after its MPA Request was read, in the PD
    /// its ULP picks). [`VerbError::State`] for a QP past Idle or with
    /// work posted, [`VerbError::Invalid`] for one with an SRQ (an SRQ
    /// serves QPs of its own PD only).
    pub fn move_qp_to_pd(&mut self, qp: QpHandle, pd: Pd) -> Result<(), VerbError> {
        let q = self
            .qps
            .get_mut(qp.index())
            .and_then(Option::as_mut)
            .filter(|q| q.handle() == qp)
            .ok_or(VerbError::UnknownHandle)?;
        let old = q.pd();
        if old == pd {
            return self.registry.check_pd(pd);
        }
        // Held first: another thread may free `pd` meanwhile.
        self.registry.hold_pd(pd)?;
        if let Err(e) = q.move_to_pd(pd) {
            self.registry.release_pd(pd);
            return Err(e);
        }
        self.registry.release_pd(old);
        Ok(())
    }

    /// The protection domain queue pair `qp` is in.
    pub fn qp_pd(&self, qp: QpHandle) -> Result<Pd, VerbError> {
        self.qps
            .get(qp.index())
            .and_then(Option::as_ref)
            .filter(|q| q.handle() == qp)
            .map(Qp::pd)
            .ok_or(VerbError::UnknownHandle)
    }

    fn split(&mut self, qp: QpHandle) -> Result<(&mut Qp, Ctx<'_>), VerbError> {
        let qp = self
            .qps
            .get_mut(qp.index())
            .and_then(Option::as_mut)
            .filter(|q| q.handle() == qp)
            .ok_or(VerbError::UnknownHandle)?;
        Ok((
            qp,
            Ctx {
                stags: &self.registry.stags,
                cqs: &mut self.cqs,
                srqs: &mut self.srqs,
                now_us: self.now_us,
                one_pass: self.one_pass,
            },
        ))
    }

    /// Moves an Idle QP to RTS with the parameters its connection
    /// negotiated (MPA CRC and markers, RFC 6581 IRD/ORD, the EMSS).
    pub fn connect(&mut self, qp: QpHandle, connection: Connection) -> Result<(), VerbError> {
        let (qp, _) = self.split(qp)?;
        qp.connect(connection)
    }

    /// Connects an idle QP to a DDP stream over SCTP (RFC 5043) that the
    /// control plane's session control established: from now on it takes
    /// [`Rnic::handle_message`] and gives [`Rnic::poll_transmit_messages`].
    pub fn connect_messages(
        &mut self,
        qp: QpHandle,
        connection: MessageConnection,
    ) -> Result<(), VerbError> {
        let budget = self.reorder_budget.clone();
        let (qp, _) = self.split(qp)?;
        qp.connect_messages(connection, budget)
    }

    /// [`Rnic::connect_messages`], the QP's reorder window drawing on
    /// `budget` (made by [`Rnic::reorder_budget_within`], so within the
    /// engine's) instead of on the engine's budget directly: the streams
    /// of one association share one, and a peer that makes them hold
    /// messages takes at most that budget's octets of the engine's.
    pub fn connect_messages_within(
        &mut self,
        qp: QpHandle,
        connection: MessageConnection,
        budget: Arc<ReorderBudget>,
    ) -> Result<(), VerbError> {
        let (qp, _) = self.split(qp)?;
        qp.connect_messages(connection, Some(budget))
    }

    /// A budget of `octets` within the engine's
    /// ([`Rnic::set_reorder_budget`]; on its own without one), for
    /// [`Rnic::connect_messages_within`].
    pub fn reorder_budget_within(&self, octets: usize) -> Arc<ReorderBudget> {
        ReorderBudget::within(octets, self.reorder_budget.clone())
    }

    /// Bounds what the reorder windows of this engine's DDP streams over
    /// SCTP hold together to `octets` (besides each window's own bound),
    /// for QPs connected from now on: held messages leave SCTP's receive
    /// window, so a peer could otherwise make every stream it opens hold
    /// its window's worth. Without it there is no common bound.
    pub fn set_reorder_budget(&mut self, octets: usize) {
        self.reorder_budget = Some(ReorderBudget::new(octets));
    }

    /// Octets the reorder windows may still hold ([`Rnic::set_reorder_budget`]).
    pub fn reorder_budget_left(&self) -> Option<usize> {
        self.reorder_budget.as_ref().map(|b| b.left())
    }

    /// Feeds one DDP Segment message (SCTP PPID 16, `DDP-SSN | DDP
    /// segment`) of a QP connected with [`Rnic::connect_messages`], in
    /// whatever order SCTP delivered it (chunks are unordered, RFC 5043
    /// §8): RDMA Writes are placed as they arrive, everything else is
    /// processed and completed in DDP-SSN order. A message that breaks the
    /// rules (too short, a DDP-SSN outside the window or seen before, more
    /// than the window holds, or any DDP/RDMAP error) makes the QP send a
    /// Terminate, as over MPA. [`VerbError::State`] for a QP connected
    /// over MPA or not at all; a QP no longer in RTS ignores the message.
    pub fn handle_message(&mut self, qp: QpHandle, message: &[u8]) -> Result<(), VerbError> {
        let (qp, mut ctx) = self.split(qp)?;
        if !qp.is_message_llp() {
            return Err(VerbError::State);
        }
        qp.handle_message(&mut ctx, message);
        Ok(())
    }

    /// Writes DDP Segment messages (`DDP-SSN | DDP segment`, each at most
    /// the connection's `message_max` octets) back to back into `out`,
    /// appends each one's length to `lengths`, and returns the octets
    /// written; the caller sends each as one unordered SCTP user message
    /// with PPID 16 on the QP's stream. Everything else is as in
    /// [`Rnic::poll_transmit`] (message order, responses, Terminates, IRD
    /// and ORD); 0 when there is nothing to send or no room for the next
    /// message. [`VerbError::State`] for a QP connected over MPA.
    pub fn poll_transmit_messages(
        &mut self,
        qp: QpHandle,
        out: &mut [u8],
        lengths: &mut Vec<u16>,
    ) -> Result<usize, VerbError> {
        let (qp, mut ctx) = self.split(qp)?;
        if !qp.is_message_llp() {
            return Err(VerbError::State);
        }
        let n = qp.poll_transmit(&mut ctx, out, NoCuts);
        qp.take_message_lengths(lengths);
        Ok(n)
    }

    /// The QP's traffic by RDMAP opcode, each way.
    pub fn op_stats(&self, qp: QpHandle) -> Result<crate::qp::OpStats, VerbError> {
        self.qps
            .get(qp.index())
            .and_then(Option::as_ref)
            .filter(|q| q.handle() == qp)
            .map(Qp::op_stats)
            .ok_or(VerbError::UnknownHandle)
    }

    /// The QP's state.
    pub fn qp_state(&self, qp: QpHandle) -> Result<QpState, VerbError> {
        self.qps
            .get(qp.index())
            .and_then(Option::as_ref)
            .filter(|q| q.handle() == qp)
            .map(Qp::state)
            .ok_or(VerbError::UnknownHandle)
    }

    /// Posts a send work request.
    pub fn post_send(&mut self, qp: QpHandle, wr: &SendWr<'_>) -> Result<(), VerbError> {
        self.ring(qp);
        let (qp, _) = self.split(qp)?;
        qp.post_send(wr)
    }

    /// Posts a receive work request.
    pub fn post_recv(&mut self, qp: QpHandle, wr: &RecvWr<'_>) -> Result<(), VerbError> {
        let (qp, _) = self.split(qp)?;
        qp.post_recv(wr)
    }

    /// Feeds octets TCP received for the QP; returns how many were consumed
    /// (all, unless the stream ended in a Terminate).
    pub fn handle_stream(&mut self, qp: QpHandle, octets: &[u8]) -> Result<usize, VerbError> {
        let (qp, mut ctx) = self.split(qp)?;
        Ok(qp.handle_stream(&mut ctx, octets))
    }

    /// Writes whole FPDUs into `out` (a TCP segment's or send window's
    /// room) and returns the octets written; 0 when there is nothing to
    /// send or no room for the next FPDU.
    ///
    /// FPDUs are sized to MULPDU, not to TCP's segments: one that follows
    /// a short FPDU straddles a segment boundary. A transport that controls
    /// segmentation calls [`Rnic::poll_transmit_segments`] instead.
    /// [`VerbError::State`] for a QP connected over SCTP
    /// ([`Rnic::poll_transmit_messages`]).
    pub fn poll_transmit(&mut self, qp: QpHandle, out: &mut [u8]) -> Result<usize, VerbError> {
        let (qp, mut ctx) = self.split(qp)?;
        if qp.is_message_llp() {
            // Its messages need their lengths: `poll_transmit_messages`.
            return Err(VerbError::State);
        }
        Ok(qp.poll_transmit(&mut ctx, out, NoCuts))
    }

    /// Writes whole FPDUs back to back into `out`, as
    /// [`Rnic::poll_transmit`] does, but none across a boundary of the TCP
    /// segments `segments` describes: each FPDU starts a segment or follows
    /// another FPDU in the same segment (RFC 5044 §5, MPA-aware TCP; Linux
    /// siw starts every FPDU a segment). Returns the octets written.
    ///
    /// * A data FPDU (RDMA Write, Send, Read Response) that would cross a
    ///   boundary is shrunk to end at it, carrying the most payload that
    ///   fits (at least 1 octet; markers counted, see
    ///   [`crate::mpa::tx::Framer::ulpdu_len_max`]); the next FPDU starts
    ///   the next segment. The peer receives the same messages, cut into
    ///   more DDP segments; any ULPDU up to MULPDU is legal.
    /// * When the next FPDU cannot fit the rest of its segment at all (any
    ///   other FPDU: a Read or atomic Request, Immediate Data, a Terminate,
    ///   an RTR, an injected ULPDU; or a data FPDU with no room for one
    ///   octet of payload), the call stops there and returns what it wrote,
    ///   0 if nothing. A segment can end with up to 7 octets no FPDU fits:
    ///   FPDUs are multiples of 4 octets, a boundary need not be 4-aligned
    ///   in the stream, and with markers a full FPDU (MULPDU) leaves room
    ///   for one marker more than a segment may hold.
    /// * Where `out` ends before the segment does, the next FPDU must fit
    ///   the rest of `out` whole, as in `poll_transmit`: TCP does not cut
    ///   there, so nothing shrinks to it.
    ///
    /// To make progress the caller commits the octets written to TCP and
    /// calls again with the new room. After a 0 while a segment is open
    /// (`first` neither 0 nor `size`), the next FPDU, if there is one, does
    /// not fit it: the caller lets TCP send that segment short, so that the
    /// next octet starts a segment, and calls again with `first = size`;
    /// with `out` a segment long or more, that call writes the next FPDU if
    /// there is one. Any other 0 means there is nothing to send (or the QP
    /// may not send yet), or `out` is too short for the next FPDU. Every FPDU
    /// the engine builds fits a whole segment of
    /// [`crate::mpa::tx::EMSS_MIN`] octets, an injected ULPDU one of the
    /// connection's EMSS. All else is as in `poll_transmit`: the order of
    /// messages and responses, fencing, the RTR, Terminates, IRD and ORD.
    ///
    /// # Panics
    /// If `segments.size` is below [`crate::mpa::tx::EMSS_MIN`] or
    /// `segments.first` above `segments.size`: segments too small for a
    /// Read Request would stop the QP for good.
    pub fn poll_transmit_segments(
        &mut self,
        qp: QpHandle,
        out: &mut [u8],
        segments: Segments,
    ) -> Result<usize, VerbError> {
        assert!(
            segments.size >= crate::mpa::tx::EMSS_MIN && segments.first <= segments.size,
            "segments of at least EMSS_MIN octets, the first no larger: {segments:?}"
        );
        let (qp, mut ctx) = self.split(qp)?;
        if qp.is_message_llp() {
            // Its messages need their lengths: `poll_transmit_messages`.
            return Err(VerbError::State);
        }
        Ok(qp.poll_transmit(&mut ctx, out, segments))
    }

    /// Whether QP `qp`'s last `poll_transmit` or `poll_transmit_segments`
    /// stopped because its next FPDU did not fit the room it was given
    /// (the rest of a TCP segment, or of the buffer), rather than because
    /// it had nothing (more) to send: a caller that lets TCP send what it
    /// has and calls again will get more.
    pub fn transmit_short(&self, qp: QpHandle) -> Result<bool, VerbError> {
        self.qps
            .get(qp.index())
            .and_then(Option::as_ref)
            .filter(|q| q.handle() == qp)
            .map(Qp::transmit_short)
            .ok_or(VerbError::UnknownHandle)
    }

    /// Whether QP `qp` may have FPDUs to send: false when it surely has
    /// none, so a core with many connections can skip calling the transmit
    /// path of the idle ones (true does not promise an FPDU: a request may
    /// wait for an ORD credit).
    pub fn may_transmit(&self, qp: QpHandle) -> Result<bool, VerbError> {
        self.qps
            .get(qp.index())
            .and_then(Option::as_ref)
            .filter(|q| q.handle() == qp)
            .map(Qp::may_transmit)
            .ok_or(VerbError::UnknownHandle)
    }

    /// Sends `ulpdu` (a DDP segment: DDP header, RDMAP header, payload) as
    /// the next FPDU, before anything queued, without checking or
    /// accounting for it (MSNs are not advanced): for tests and the
    /// fault-injection suite, which need to send what a broken peer would.
    pub fn inject_ulpdu(&mut self, qp: QpHandle, ulpdu: &[u8]) -> Result<(), VerbError> {
        self.ring(qp);
        let (qp, _) = self.split(qp)?;
        qp.inject(ulpdu)
    }

    /// The next event of the QP (a Terminate sent or received).
    pub fn poll_event(&mut self, qp: QpHandle) -> Result<Option<QpEvent>, VerbError> {
        let (qp, _) = self.split(qp)?;
        Ok(qp.poll_event())
    }

    /// Moves the QP to Error: every outstanding work request completes
    /// flushed (the connection was lost or closed).
    pub fn close(&mut self, qp: QpHandle) -> Result<(), VerbError> {
        self.ring(qp);
        let (qp, mut ctx) = self.split(qp)?;
        qp.enter_error(&mut ctx);
        Ok(())
    }
}
