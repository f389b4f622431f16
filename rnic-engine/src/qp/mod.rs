//! Queue pairs: the RDMAP/DDP state of one connection.
//!
//! Heads up! Before working on these files you should read, at least, RFC 5040
//! §5 (RDMAP data transfer, ordering and completion) and §7 (error handling),
//! RFC 5041 §5-§7 (DDP placement and errors), draft-ietf-storm-rdmap-ext-00
//! §5-§8 (atomics, immediate data, their ordering table), and RFC 5040/5041's
//! error lists.
//!
//! The parts, after siw (STYLE.md §1.2): this file holds the state, the
//! work queues and completions; [`tx`] turns the send queue and the
//! inbound request queue into FPDUs; [`rx`] places and delivers what
//! arrives; [`term`] maps every error to its Terminate code.
//!
//! # Queues
//! * The send queue (SQ) is a ring of at most `sq_size` work requests. A
//!   request is transmitted in order; Read and atomic requests also take
//!   an ORD credit ([`Orq`]) and wait at the head of the SQ, blocking what
//!   follows, while ORD are outstanding: they never overrun the peer's IRD.
//!   Completions are reported in posting order, as the verbs require: a
//!   Send behind an unanswered Read completes after it.
//! * The inbound RDMA Read request queue (IRRQ) is a ring of exactly IRD
//!   entries, as in hardware: each inbound Read or Atomic Request waits
//!   there until its response has been sent, responses leave in request
//!   order, and a request beyond IRD is a protocol error (RFC 5040 §6.4:
//!   the peer broke the negotiated ORD).
//! * Responses and the SQ share the link fairly: at most
//!   [`RESPONSE_BURST_FPDUS_MAX`] response FPDUs in a row written while the
//!   SQ has work, as siw's `SIW_IRQ_MAXBURST_SQ_ACTIVE` does; but a message
//!   is never started in the middle of another of its kind, tagged (Writes,
//!   Read Responses) or untagged (as siw's receiver requires).

mod rx;
pub mod term;
mod tx;

pub(crate) use self::tx::NoCuts;

use std::collections::VecDeque;
use std::sync::atomic::AtomicU8;
use std::sync::Arc;

use crate::cq::{Cq, Wc, WcOpcode, WcStatus};
use crate::mem::{Access, AccessError, Grant, Pd, StagCache, StagTable};
use crate::mpa::rx::{Deframer, RxConfig};
use crate::mpa::tx::{FrameError, Framer, TxConfig};
use crate::sctp::rx::{Reorder, ReorderBudget, ReorderConfig};
use crate::sctp::tx::MessageFramer;
use crate::verbs::{
    CqHandle, QpHandle, QpInit, RecvWr, SendOp, SendWr, Sge, Srq, SrqHandle, VerbError, SGE_MAX,
};
use crate::wire::rdmap::ReadRequestRepr;
use crate::wire::{atomic, ddp, rdmap};

use self::term::TermCause;

/// Response FPDUs sent in a row before the send queue gets a turn.
pub const RESPONSE_BURST_FPDUS_MAX: u32 = 4;
/// Events a QP queues for the application (at most one of each kind).
const EVENTS_MAX: usize = 4;

/// What the connection negotiated (MPA startup, RFC 6581).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connection {
    /// CRC on (either side set C).
    pub crc: bool,
    /// The peer wants markers in what we send (it set M).
    pub markers_tx: bool,
    /// We asked for markers in what we receive (we set M).
    pub markers_rx: bool,
    /// TCP effective MSS.
    pub emss: usize,
    /// Inbound Read queue depth this side granted.
    pub ird: u16,
    /// Outbound Reads and atomics this side may have outstanding.
    pub ord: u16,
    /// The longest ULPDU this side accepts.
    pub ulpdu_max: usize,
    /// Initiator, peer-to-peer: the RTR indication to send before any other
    /// FPDU (RFC 6581 §5: "The RDMA connection initiator MUST NOT allow any
    /// later FULPDUs to be transmitted before the RTR indication"). The
    /// provider consumes it and its Read Response; no completion.
    pub rtr_send: Option<Rtr>,
    /// Responder, peer-to-peer: the RTR indications the first FPDU may be.
    /// It is consumed by the provider, never shown to the application; any
    /// other first message is TERM 2/0/7. Empty: no RTR expected.
    pub rtr_accept: RtrSet,
    /// Responder: MPA fencing (RFC 5044 §7.1): no FPDU goes out before the
    /// first FPDU from the initiator has arrived.
    pub fenced: bool,
    /// How our Terminates lay out their control word: RFC 5040's (the
    /// default), or Linux siw's little-endian bitfield, which siw (6.1)
    /// reads ours with, so that a siw peer reports the layer, type and
    /// code we sent (it reads RFC 5040's with layer and type swapped).
    /// Received Terminates are read in either layout regardless.
    pub terminate_layout: crate::wire::term::Encoding,
}

/// What a DDP stream over SCTP negotiated (RFC 5043 §6 session control,
/// with RFC 6581 §7's IRD/ORD): the QP's lower layer is then one SCTP
/// user message per DDP segment ([`crate::sctp`]) instead of MPA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageConnection {
    /// The largest user message the association carries in one packet
    /// ([`crate::sctp::message_max`] of its path MTU): the DDP-SSN and a
    /// DDP segment of at most this less 2 octets.
    pub message_max: usize,
    /// Inbound Read queue depth this side granted.
    pub ird: u16,
    /// Outbound Reads and atomics this side may have outstanding.
    pub ord: u16,
    /// How many messages may arrive ahead of their turn, and how many
    /// octets of them this side holds.
    pub reorder: ReorderConfig,
    /// How our Terminates lay out their control word (see
    /// [`Connection::terminate_layout`]).
    pub terminate_layout: crate::wire::term::Encoding,
}

/// Where TCP will cut segments in the room handed to
/// [`crate::verbs::Rnic::poll_transmit_segments`], counted from the room's
/// first octet: segment 0 is `[0, first)`, the rest of the segment TCP is
/// filling, and segment k is `[first + (k - 1) * size, first + k * size)`.
/// smoltcp cuts segments of EMSS octets from an anchor this way (tcp-lite's
/// `Transport::segment_room` says how many octets the current one still
/// takes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Segments {
    /// Octets the current segment still takes, at most `size`: 0 when it
    /// is full (the room starts a segment), `size` when none is open.
    pub first: usize,
    /// Octets of every following segment (TCP's EMSS), at least
    /// [`crate::mpa::tx::EMSS_MIN`].
    pub size: usize,
}

impl Segments {
    /// Where the segment holding octet `at` of the room ends (when `at` is
    /// a boundary, the end of the segment it starts).
    fn end(self, at: usize) -> usize {
        if at < self.first {
            self.first
        } else {
            // Saturating: a caller may spell "no cut" with a huge size.
            let segments = (at - self.first) / self.size + 1;
            self.first
                .saturating_add(segments.saturating_mul(self.size))
        }
    }
}

/// An RTR indication (RFC 6581 §9.2): the initiator's first FPDU in the
/// peer-to-peer model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rtr {
    /// B: a zero-length Send (QN 0).
    Send,
    /// C: a zero-length RDMA Write (STag 1, TO 0, as siw sends it).
    Write,
    /// D: a zero-length RDMA Read Request (sink STag 0, source STag 1, size
    /// 0, as siw sends it), answered by a zero-length Read Response.
    Read,
}

/// A set of RTR indications (RFC 6581's B, C and D flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RtrSet {
    /// B: zero-length Send.
    pub send: bool,
    /// C: zero-length RDMA Write.
    pub write: bool,
    /// D: zero-length RDMA Read.
    pub read: bool,
}

impl RtrSet {
    /// No RTR indication.
    pub const NONE: RtrSet = RtrSet {
        send: false,
        write: false,
        read: false,
    };
    /// Every RTR indication.
    pub const ALL: RtrSet = RtrSet {
        send: true,
        write: true,
        read: true,
    };

    /// Whether no flag is set.
    pub fn is_empty(self) -> bool {
        !(self.send || self.write || self.read)
    }

    /// The flags set in both.
    pub fn intersect(self, other: RtrSet) -> RtrSet {
        RtrSet {
            send: self.send && other.send,
            write: self.write && other.write,
            read: self.read && other.read,
        }
    }

    /// Whether `rtr` is in the set.
    pub fn contains(self, rtr: Rtr) -> bool {
        match rtr {
            Rtr::Send => self.send,
            Rtr::Write => self.write,
            Rtr::Read => self.read,
        }
    }

    /// An initiator's pick, cheapest first: a Write needs nothing of the
    /// responder; a Send nothing either (the provider eats it); a Read an
    /// IRRQ entry and a response. Linux siw also prefers the Write.
    pub fn preferred(self) -> Option<Rtr> {
        [Rtr::Write, Rtr::Send, Rtr::Read]
            .into_iter()
            .find(|&r| self.contains(r))
    }
}

/// A QP's state (siw's `enum siw_qp_state`, without the transient ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpState {
    /// Created, not connected: receives may be posted.
    Idle,
    /// Connected: everything works.
    Rts,
    /// An error was found; the Terminate is about to be sent.
    Terminate,
    /// Dead: every work request flushes.
    Error,
}

/// A Terminate's layer/type/code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TermInfo {
    /// Layer (0 RDMAP, 1 DDP, 2 LLP).
    pub layer: u8,
    /// Error type.
    pub etype: u8,
    /// Error code.
    pub ecode: u8,
}

/// Something the application should hear about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpEvent {
    /// This side found an error and sent a Terminate.
    TerminateSent(TermInfo),
    /// The peer sent a Terminate.
    TerminateReceived(TermInfo),
}

/// Mutable parts of the RNIC a QP reaches into.
pub(crate) struct Ctx<'a> {
    pub(crate) stags: &'a Arc<StagTable>,
    pub(crate) cqs: &'a mut [Option<Cq>],
    pub(crate) srqs: &'a mut [Option<Srq>],
    /// The turn's time ([`crate::verbs::Rnic::set_now`]), in microseconds.
    pub(crate) now_us: u64,
    /// [`crate::verbs::Rnic::set_one_pass_framing`].
    pub(crate) one_pass: bool,
}

impl Ctx<'_> {
    fn complete(&mut self, cq: CqHandle, wc: Wc) {
        // A QP's CQs outlive it (`Rnic::destroy_cq` refuses a CQ a QP
        // uses), so its handles name the CQs in their slots.
        if let Some(Some(cq)) = self.cqs.get_mut(cq.index()) {
            // A full CQ loses the completion and marks itself overflowed.
            let _ = cq.push(wc);
        }
    }
}

/// A scatter/gather list, stored inline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct SgList {
    entries: [Sge; SGE_MAX],
    len: u8,
}

impl SgList {
    fn new(sgl: &[Sge]) -> Result<SgList, VerbError> {
        if sgl.len() > SGE_MAX {
            return Err(VerbError::TooManySge);
        }
        let mut list = SgList {
            len: sgl.len() as u8,
            ..SgList::default()
        };
        list.entries[..sgl.len()].copy_from_slice(sgl);
        Ok(list)
    }

    fn entries(&self) -> &[Sge] {
        &self.entries[..usize::from(self.len)]
    }

    fn total(&self) -> usize {
        self.entries().iter().map(|e| e.len as usize).sum()
    }

    /// Checks every entry with `access` and resolves it to memory.
    fn resolve(
        &self,
        stags: &Arc<StagTable>,
        cache: &mut StagCache,
        pd: Pd,
        access: Access,
    ) -> Result<Grants, AccessError> {
        // Before the checks: a change while they run is caught at the next
        // `recheck`.
        let mut grants = Grants {
            changes: stags.changes(),
            ..Grants::default()
        };
        for (slot, sge) in grants.entries.iter_mut().zip(self.entries()) {
            *slot = Some((
                stags.check_cached(cache, sge.stag, pd, access, sge.to, sge.len as usize)?,
                sge.len as usize,
            ));
        }
        Ok(grants)
    }
}

/// A resolved scatter/gather list: where each entry's octets live.
#[derive(Debug, Clone, Default)]
pub(crate) struct Grants {
    entries: [Option<(Grant, usize)>; SGE_MAX],
    /// [`StagTable::changes`] when every entry was last checked (see
    /// `recheck`).
    changes: u64,
}

impl Grants {
    /// Checks again the entries of `sgl` (the list these grants were
    /// resolved from, with `access`) that the list's `octets` lie in, each
    /// whole, as [`SgList::resolve`] checked it: before each segment placed
    /// into a receive buffer, and each FPDU sent from a request's list. A
    /// resolved list holds its regions' memory, not their registrations:
    /// without this, an STag invalidated (RFC 5040 §6.10, by a peer's Send
    /// with Invalidate or a local invalidate) or deregistered after the
    /// first segment kept taking or giving octets for the rest of the
    /// message, which the STag table promises no access does (RFC 5040
    /// §7.1 checks STags per DDP segment).
    ///
    /// While no STag has changed anywhere since the list was last checked
    /// whole ([`StagTable::changes`]), that is one load and a compare:
    /// a cached lookup of each entry per FPDU cost 64 KiB Writes and Sends
    /// 10-15% on `engine_table`. After a change, every entry is checked
    /// (`recheck_all`).
    #[inline]
    fn recheck(
        &mut self,
        sgl: &SgList,
        stags: &Arc<StagTable>,
        cache: &mut StagCache,
        pd: Pd,
        access: Access,
        octets: std::ops::Range<usize>,
    ) -> Result<(), AccessError> {
        let changes = stags.changes();
        if changes == self.changes {
            return Ok(());
        }
        self.recheck_all(sgl, stags, cache, pd, access, octets, changes)
    }

    /// [`Grants::recheck`] after a change: each entry again, one cached
    /// lookup each, no allocation. One that fails fails the segment if
    /// `octets` lie in it; if not, the segment goes on and the next one
    /// checks every entry again (the count is left behind). An entry whose
    /// STag was bound again meanwhile (fast registration after an
    /// invalidation) follows it to the memory it names now, as a hardware
    /// RNIC translates the STag at each DMA: no octet moves through memory
    /// the STag no longer names. Nothing is copied before every entry the
    /// segment touches has passed.
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn recheck_all(
        &mut self,
        sgl: &SgList,
        stags: &Arc<StagTable>,
        cache: &mut StagCache,
        pd: Pd,
        access: Access,
        octets: std::ops::Range<usize>,
        changes: u64,
    ) -> Result<(), AccessError> {
        let mut all_passed = true;
        let mut start = 0;
        for (slot, sge) in self.entries.iter_mut().zip(sgl.entries()) {
            // Resolved whole, so every entry of the list has its grant.
            let Some((grant, entry_len)) = slot else {
                break;
            };
            let touched = start < octets.end && octets.start < start + *entry_len;
            start += *entry_len;
            match stags.lookup_cached(cache, sge.stag, pd, access, sge.to, *entry_len) {
                Ok((region, at)) => {
                    if at != grant.offset || !Arc::ptr_eq(region, &grant.region) {
                        // Bound again: rare, so the reference count is
                        // paid here.
                        *grant = Grant {
                            region: region.clone(),
                            offset: at,
                        };
                    }
                }
                Err(e) if touched => return Err(e),
                Err(_) => all_passed = false,
            }
        }
        if all_passed {
            self.changes = changes;
        }
        Ok(())
    }

    /// Copies the list's octets from `offset` into `dst`.
    fn gather(&self, mut offset: usize, mut dst: &mut [u8]) {
        for (grant, len) in self.entries.iter().flatten() {
            if dst.is_empty() {
                return;
            }
            if offset >= *len {
                offset -= len;
                continue;
            }
            let n = (len - offset).min(dst.len());
            // Checked against the registration when resolved, and again
            // for this FPDU (`recheck`).
            let _ = grant.region.read(grant.offset + offset, &mut dst[..n]);
            dst = &mut dst[n..];
            offset = 0;
        }
    }

    /// The list's octets `offset..offset + len` where they live, one view
    /// per entry they touch, into `out`; returns how many (see
    /// `Region::shared`).
    fn shared<'g>(
        &'g self,
        mut offset: usize,
        mut len: usize,
        out: &mut [&'g [AtomicU8]; SGE_MAX],
    ) -> usize {
        let mut n = 0;
        for (grant, entry_len) in self.entries.iter().flatten() {
            if len == 0 {
                break;
            }
            if offset >= *entry_len {
                offset -= entry_len;
                continue;
            }
            let take = (entry_len - offset).min(len);
            // Checked against the registration when resolved, and again
            // for this FPDU (`recheck`).
            let Ok(octets) = grant.region.shared(grant.offset + offset, take) else {
                break;
            };
            out[n] = octets;
            n += 1;
            len -= take;
            offset = 0;
        }
        n
    }

    /// Copies `src` into the list from `offset` (checked for this segment
    /// by `recheck`, or by `resolve` just before).
    fn scatter(&self, mut offset: usize, mut src: &[u8]) {
        for (grant, len) in self.entries.iter().flatten() {
            if src.is_empty() {
                return;
            }
            if offset >= *len {
                offset -= len;
                continue;
            }
            let n = (len - offset).min(src.len());
            let _ = grant.region.write(grant.offset + offset, &src[..n]);
            src = &src[n..];
            offset = 0;
        }
    }
}

/// A posted receive.
#[derive(Debug, Clone)]
pub(crate) struct RecvWqe {
    wr_id: u64,
    sgl: SgList,
}

impl RecvWqe {
    /// Refuses a list of more than `u32::MAX` octets, as `post_send`
    /// does: the Message Offset is 32 bits (RFC 5041 §4.3), and so is a
    /// completion's length, so a Send running past 2^32 octets of such a
    /// buffer would complete with its length cut to 32 bits.
    pub(crate) fn new(wr: &RecvWr<'_>) -> Result<RecvWqe, VerbError> {
        let sgl = SgList::new(wr.sgl)?;
        // Message offsets and completion lengths are 32 bits.
        if sgl.total() > u32::MAX as usize {
            return Err(VerbError::Invalid);
        }
        Ok(RecvWqe {
            wr_id: wr.wr_id,
            sgl,
        })
    }
}

/// A posted send work request and its progress.
#[derive(Debug, Clone)]
struct SqWqe {
    wr_id: u64,
    op: SendOp,
    sgl: SgList,
    signaled: bool,
    solicited: bool,
    fence: bool,
    /// Octets of the message already framed.
    sent: usize,
    /// The Write part of a Write with Immediate is framed (the Immediate
    /// Data goes next).
    write_done: bool,
    /// How it ended, once it has.
    done: Option<WcStatus>,
    /// Octets transferred (for Reads).
    byte_len: u32,
}

impl Orq {
    /// The SQ sequence number and MSN of a request with a work request.
    fn seq_msn(&self) -> Option<(u64, u32)> {
        match *self {
            Orq::Read { seq, msn, .. } | Orq::Atomic { seq, msn, .. } => Some((seq, msn)),
            Orq::Rtr => None,
        }
    }
}

impl SqWqe {
    fn opcode(&self) -> WcOpcode {
        match self.op {
            SendOp::Send | SendOp::SendWithInvalidate(_) => WcOpcode::Send,
            SendOp::Write(_) => WcOpcode::Write,
            SendOp::WriteWithImmediate(..) => WcOpcode::WriteWithImmediate,
            SendOp::Immediate(_) => WcOpcode::Immediate,
            SendOp::Read(_) => WcOpcode::Read,
            SendOp::FetchAdd { .. } => WcOpcode::FetchAdd,
            SendOp::CmpSwap { .. } => WcOpcode::CmpSwap,
            SendOp::Swap { .. } => WcOpcode::Swap,
            SendOp::LocalInvalidate(_) => WcOpcode::LocalInvalidate,
            SendOp::FastRegister(_) => WcOpcode::FastRegister,
        }
    }

    /// Reads and atomics wait for a response and take an ORD credit.
    fn needs_ord(&self) -> bool {
        matches!(
            self.op,
            SendOp::Read(_)
                | SendOp::FetchAdd { .. }
                | SendOp::CmpSwap { .. }
                | SendOp::Swap { .. }
        )
    }
}

/// An outstanding Read or atomic request (the ORD side).
#[derive(Debug, Clone)]
enum Orq {
    Read {
        /// The SQ sequence number of the request.
        seq: u64,
        /// Its MSN on queue 1 (a Terminate's echoed DDP header names it).
        msn: u32,
        sink_stag: u32,
        sink_to: u64,
        len: usize,
        placed: usize,
    },
    Atomic {
        seq: u64,
        msn: u32,
        id: u32,
        /// Where the original value goes: its STag is looked up again when
        /// the response arrives (it may have been invalidated or
        /// deregistered meanwhile), as a Read's sink is for each segment.
        result: Sge,
    },
    /// The Read RTR: its zero-length response is the provider's.
    Rtr,
}

/// An inbound request waiting for its response (the IRRQ).
#[derive(Debug, Clone)]
///
/// Entries hold the request, not a reference to memory: the source STag is
/// checked again for every response FPDU (and the atomic's target when it
/// executes), so an STag invalidated or deregistered meanwhile stops the
/// response with a protection Terminate instead of leaking or changing
/// memory it no longer names.
enum Irrq {
    Read {
        /// The request's MSN on queue 1 (echoed if it fails later).
        msn: u32,
        request: ReadRequestRepr,
        sent: usize,
        /// When it arrived ([`Ctx::now_us`]); `None` for the Read RTR,
        /// which the provider answers and the ULP never sees (neither
        /// counted as a received Read Request nor timed).
        arrived: Option<u64>,
    },
    Atomic {
        msn: u32,
        request: atomic::RequestRepr,
        arrived: u64,
    },
}

/// The Terminate this side owes the peer.
#[derive(Debug, Clone)]
struct PendingTerm {
    cause: TermCause,
    /// Length of the DDP segment that failed (0 if none).
    segment_len: u16,
    /// Its DDP header, and RDMAP header if the error is about it.
    ddp_header: Option<([u8; ddp::UNTAGGED_HEADER_LEN], usize)>,
    rdma_header: Option<([u8; atomic::REQUEST_HEADER_LEN], usize)>,
}

/// The receive in progress on queue 0.
#[derive(Debug, Clone)]
struct Receiving {
    wqe: RecvWqe,
    /// Its list, resolved at the first segment and checked again for
    /// every later one (`Grants::recheck`).
    grants: Grants,
    capacity: usize,
    /// Octets placed (the highest MO + length seen).
    len: usize,
}

/// The lower layer a QP's DDP segments leave through: MPA FPDUs on a TCP
/// stream, or messages on an SCTP stream. The transmit path is written
/// once against this (one code path for DDP/RDMAP, two adapters).
#[derive(Debug)]
pub(crate) enum LlpTx {
    Mpa(Framer),
    Sctp(MessageFramer),
}

impl LlpTx {
    #[inline(always)]
    fn mulpdu(&self) -> usize {
        match self {
            LlpTx::Mpa(f) => f.mulpdu(),
            LlpTx::Sctp(f) => f.mulpdu(),
        }
    }

    /// Whether an FPDU carrying `ulpdu_len` octets is framed in one pass
    /// from registered memory (`tx::frame_segment_shared`).
    #[inline(always)]
    fn one_pass(&self, ulpdu_len: usize) -> bool {
        match self {
            LlpTx::Mpa(f) => f.one_pass(ulpdu_len),
            LlpTx::Sctp(_) => false,
        }
    }

    #[inline(always)]
    fn wire_len(&self, ulpdu_len: usize) -> usize {
        match self {
            LlpTx::Mpa(f) => f.wire_len(ulpdu_len),
            LlpTx::Sctp(f) => f.wire_len(ulpdu_len),
        }
    }

    #[inline(always)]
    fn ulpdu_len_max(&self, room: usize) -> Option<usize> {
        match self {
            LlpTx::Mpa(f) => f.ulpdu_len_max(room),
            LlpTx::Sctp(f) => f.ulpdu_len_max(room),
        }
    }

    #[inline(always)]
    fn frame(&mut self, pieces: &[&[u8]], out: &mut [u8]) -> Result<usize, FrameError> {
        match self {
            LlpTx::Mpa(f) => f.frame(pieces, out),
            LlpTx::Sctp(f) => f.frame(pieces, out),
        }
    }

    #[inline(always)]
    fn frame_with(
        &mut self,
        header: &[u8],
        payload_len: usize,
        out: &mut [u8],
        fill: impl FnMut(usize, &mut [u8]),
    ) -> Result<usize, FrameError> {
        match self {
            LlpTx::Mpa(f) => f.frame_with(header, payload_len, out, fill),
            LlpTx::Sctp(f) => f.frame_with(header, payload_len, out, fill),
        }
    }
}

/// The lower layer a QP's DDP segments arrive through.
///
/// Not boxed although the deframer is larger (its frame buffer): one per
/// QP, read on every received segment, where a pointer chase would cost
/// more than the octets an SCTP QP leaves unused.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub(crate) enum LlpRx {
    Mpa(Deframer),
    Sctp(Reorder),
}

/// A queue pair.
#[derive(Debug)]
pub(crate) struct Qp {
    framer: Option<LlpTx>,
    deframer: Option<LlpRx>,
    /// ULPDUs to send as they are, before anything else (fault injection).
    injected: VecDeque<Vec<u8>>,
    /// The last transmit stopped because the next FPDU did not fit the room
    /// it had (not for want of something to send).
    tx_short: bool,
    inner: Inner,
}

/// Injected ULPDUs a QP holds at most.
const INJECTED_MAX: usize = 8;

/// Messages and payload octets of one RDMAP opcode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpCount {
    /// Messages (counted at their last DDP segment).
    pub messages: u64,
    /// Their DDP payload octets (RDMAP headers included, DDP's not).
    pub octets: u64,
}

/// Buckets of [`ResponseTimes`]: bucket `k` (0..=22) holds the responses
/// that took at most 2^k microseconds and more than the bucket before's
/// bound, bucket 23 the slower ones (over 4.2 s): Prometheus's `le`
/// buckets, on powers of two.
pub const RESPONSE_BUCKETS: usize = 24;

/// How long the responder took over inbound Read and Atomic Requests, from
/// the turn a request arrived to the turn its last response segment was
/// written (its time in the IRRQ, RFC 5040 §6.4, behind earlier responses,
/// and its own transmission), in power-of-two microsecond buckets: a
/// target's service time, as an operator's latency histograms show it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResponseTimes {
    /// Responses per bucket (see [`RESPONSE_BUCKETS`]).
    pub buckets: [u64; RESPONSE_BUCKETS],
    /// Their sum, in microseconds.
    pub sum_us: u64,
}

impl ResponseTimes {
    /// The bucket of a response that took `us` microseconds.
    pub fn bucket(us: u64) -> usize {
        ((u64::BITS - us.saturating_sub(1).leading_zeros()) as usize).min(RESPONSE_BUCKETS - 1)
    }

    /// The upper bound of bucket `k` in microseconds (inclusive), `None`
    /// for the last.
    pub fn bound_us(k: usize) -> Option<u64> {
        (k + 1 < RESPONSE_BUCKETS).then(|| 1u64 << k)
    }

    /// Responses counted.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    #[inline(always)]
    fn record(&mut self, us: u64) {
        self.buckets[ResponseTimes::bucket(us)] += 1;
        self.sum_us += us;
    }
}

/// A QP's traffic by RDMAP opcode (RFC 5040 §4.3, RFC 7306 §4), each way,
/// and its responses' times: what an operator's per-service counters and
/// histograms are made of.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpStats {
    /// What arrived, by opcode (the 4-bit field's value).
    pub rx: [OpCount; 16],
    /// What was sent, by opcode.
    pub tx: [OpCount; 16],
    /// Its Read Responses' times (request to last segment).
    pub read_responses: ResponseTimes,
    /// Its Atomic Responses' times.
    pub atomic_responses: ResponseTimes,
}

impl OpStats {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &OpStats) {
        for (a, b) in self.rx.iter_mut().zip(&other.rx) {
            a.messages += b.messages;
            a.octets += b.octets;
        }
        for (a, b) in self.tx.iter_mut().zip(&other.tx) {
            a.messages += b.messages;
            a.octets += b.octets;
        }
        for (a, b) in [
            (&mut self.read_responses, &other.read_responses),
            (&mut self.atomic_responses, &other.atomic_responses),
        ] {
            for (x, y) in a.buckets.iter_mut().zip(&b.buckets) {
                *x += y;
            }
            a.sum_us += b.sum_us;
        }
    }

    /// A Read Response's last segment was written `us` microseconds after
    /// its request arrived.
    #[inline(always)]
    pub(crate) fn read_responded(&mut self, us: u64) {
        self.read_responses.record(us);
    }

    /// An Atomic Response was written `us` microseconds after its request.
    #[inline(always)]
    pub(crate) fn atomic_responded(&mut self, us: u64) {
        self.atomic_responses.record(us);
    }

    /// Counts a segment of `opcode` with `octets` of payload, the last of
    /// its message if `last`, one way.
    #[inline(always)]
    fn count(
        way: &mut [OpCount; 16],
        opcode: crate::wire::rdmap::Opcode,
        octets: usize,
        last: bool,
    ) {
        let c = &mut way[usize::from(u8::from(opcode) & 0x0F)];
        c.octets += octets as u64;
        c.messages += u64::from(last);
    }

    #[inline(always)]
    pub(crate) fn received(
        &mut self,
        opcode: crate::wire::rdmap::Opcode,
        octets: usize,
        last: bool,
    ) {
        OpStats::count(&mut self.rx, opcode, octets, last);
    }

    #[inline(always)]
    pub(crate) fn sent(&mut self, opcode: crate::wire::rdmap::Opcode, octets: usize, last: bool) {
        OpStats::count(&mut self.tx, opcode, octets, last);
    }
}

/// Everything of a QP but its MPA framer and deframer, so that a ULPDU
/// borrowed from the deframer can be processed against the rest.
#[derive(Debug)]
pub(crate) struct Inner {
    handle: QpHandle,
    pd: Pd,
    /// The STags this QP checked last: for placement of what it receives,
    /// and for the SGLs of its work requests.
    rx_stag: StagCache,
    tx_stag: StagCache,
    send_cq: CqHandle,
    recv_cq: CqHandle,
    srq: Option<SrqHandle>,
    state: QpState,
    connection: Option<Connection>,
    sq: VecDeque<SqWqe>,
    sq_size: usize,
    /// Sequence number of `sq[0]`.
    sq_base: u64,
    /// Sequence number of the next request to transmit.
    tx_next: u64,
    /// The resolved SGL of the request being transmitted, checked again
    /// for every FPDU after the first (`Grants::recheck`).
    tx_grants: Option<Grants>,
    rq: VecDeque<RecvWqe>,
    rq_size: usize,
    orq: VecDeque<Orq>,
    irrq: VecDeque<Irrq>,
    /// Next MSN to send, per queue (0 Send, 1 Read/atomic request, 2
    /// Terminate, 3 atomic response).
    tx_msn: [u32; 4],
    /// Next MSN expected, per queue.
    rx_msn: [u32; 4],
    receiving: Option<Receiving>,
    /// Response FPDUs sent in a row.
    burst: u32,
    next_atomic_id: u32,
    term: Option<PendingTerm>,
    events: VecDeque<QpEvent>,
    /// The RTR still to send (initiator).
    rtr_tx: Option<Rtr>,
    /// The RTRs the first message may be, until it arrived (responder).
    rtr_rx: RtrSet,
    /// Nothing is sent until a first FPDU arrived (responder).
    fenced: bool,
    /// Octets of Full Operation have arrived.
    #[cfg_attr(fuzzing, allow(dead_code))]
    rx_started: bool,
    /// The Terminate being read is siw's startup one (CRC field 0).
    siw_startup_term: bool,
    /// Its traffic by opcode (last: 512 octets the hot fields above need
    /// not share cache lines with).
    stats: OpStats,
}

impl Qp {
    /// The protection domain it was made in.
    pub(crate) fn pd(&self) -> Pd {
        self.inner.pd
    }

    /// Its handle.
    pub(crate) fn handle(&self) -> QpHandle {
        self.inner.handle
    }

    /// Whether it completes work to `cq` (as its send or receive CQ).
    pub(crate) fn uses_cq(&self, cq: CqHandle) -> bool {
        self.inner.send_cq == cq || self.inner.recv_cq == cq
    }

    /// Whether it receives from `srq`.
    pub(crate) fn uses_srq(&self, srq: SrqHandle) -> bool {
        self.inner.srq == Some(srq)
    }

    /// Joins `pd` instead (see `Rnic::move_qp_to_pd`): only while Idle,
    /// with nothing posted and no SRQ. The caller holds `pd` and releases
    /// the old one.
    pub(crate) fn move_to_pd(&mut self, pd: Pd) -> Result<(), VerbError> {
        let i = &mut self.inner;
        if i.srq.is_some() {
            return Err(VerbError::Invalid);
        }
        if i.state != QpState::Idle || !i.sq.is_empty() || !i.rq.is_empty() {
            return Err(VerbError::State);
        }
        i.pd = pd;
        // Nothing was checked yet; and no STag checked in the old PD may
        // stand for the new one.
        i.rx_stag = StagCache::default();
        i.tx_stag = StagCache::default();
        Ok(())
    }
}

impl Qp {
    pub(crate) fn new(handle: QpHandle, init: QpInit) -> Qp {
        let inner = Inner {
            handle,
            stats: OpStats::default(),
            pd: init.pd,
            rx_stag: StagCache::default(),
            tx_stag: StagCache::default(),
            send_cq: init.send_cq,
            recv_cq: init.recv_cq,
            srq: init.srq,
            state: QpState::Idle,
            connection: None,
            sq: VecDeque::with_capacity(init.sq_size),
            sq_size: init.sq_size,
            sq_base: 0,
            tx_next: 0,
            tx_grants: None,
            rq: VecDeque::with_capacity(if init.srq.is_some() { 0 } else { init.rq_size }),
            rq_size: init.rq_size,
            orq: VecDeque::new(),
            irrq: VecDeque::new(),
            tx_msn: [1; 4],
            rx_msn: [1; 4],
            receiving: None,
            burst: 0,
            next_atomic_id: 1,
            term: None,
            events: VecDeque::with_capacity(EVENTS_MAX),
            rtr_tx: None,
            rtr_rx: RtrSet::NONE,
            fenced: false,
            rx_started: false,
            siw_startup_term: false,
        };
        Qp {
            framer: None,
            deframer: None,
            injected: VecDeque::new(),
            tx_short: false,
            inner,
        }
    }

    pub(crate) fn state(&self) -> QpState {
        self.inner.state
    }

    pub(crate) fn op_stats(&self) -> OpStats {
        self.inner.stats
    }

    pub(crate) fn connect(&mut self, c: Connection) -> Result<(), VerbError> {
        if self.inner.state != QpState::Idle {
            return Err(VerbError::State);
        }
        let framer = Framer::new(TxConfig {
            crc: c.crc,
            markers: c.markers_tx,
            emss: c.emss,
        })
        .map_err(|_| VerbError::Invalid)?;
        self.deframer = Some(LlpRx::Mpa(Deframer::new(RxConfig {
            crc: c.crc,
            markers: c.markers_rx,
            ulpdu_max: c.ulpdu_max,
        })));
        self.framer = Some(LlpTx::Mpa(framer));
        self.inner.connected(c);
        Ok(())
    }

    /// Connects the QP to a DDP stream over SCTP (RFC 5043): no RTR (either
    /// side may send first, RFC 6581 §7), no fencing, no CRC or markers
    /// (SCTP checks its packets with its own CRC32c).
    pub(crate) fn connect_messages(
        &mut self,
        c: MessageConnection,
        budget: Option<Arc<ReorderBudget>>,
    ) -> Result<(), VerbError> {
        if self.inner.state != QpState::Idle {
            return Err(VerbError::State);
        }
        let framer = MessageFramer::new(c.message_max).ok_or(VerbError::Invalid)?;
        self.framer = Some(LlpTx::Sctp(framer));
        self.deframer = Some(LlpRx::Sctp(Reorder::with_budget(c.reorder, budget)));
        self.inner.connected(Connection {
            crc: false,
            markers_tx: false,
            markers_rx: false,
            emss: c.message_max,
            ird: c.ird,
            ord: c.ord,
            ulpdu_max: c.message_max - crate::sctp::SSN_LEN,
            rtr_send: None,
            rtr_accept: RtrSet::NONE,
            fenced: false,
            terminate_layout: c.terminate_layout,
        });
        Ok(())
    }

    /// Whether the QP's lower layer is SCTP messages.
    pub(crate) fn is_message_llp(&self) -> bool {
        matches!(self.framer, Some(LlpTx::Sctp(_)))
    }

    /// The lengths of the messages the last transmits wrote, appended to
    /// `out` (nothing for an MPA QP).
    pub(crate) fn take_message_lengths(&mut self, out: &mut Vec<u16>) {
        if let Some(LlpTx::Sctp(framer)) = &mut self.framer {
            framer.take_lengths(out);
        }
    }
}

impl Inner {
    fn connected(&mut self, c: Connection) {
        let inner = self;
        inner.orq = VecDeque::with_capacity(usize::from(c.ord));
        inner.irrq = VecDeque::with_capacity(usize::from(c.ird));
        inner.rtr_tx = c.rtr_send;
        inner.rtr_rx = c.rtr_accept;
        inner.fenced = c.fenced;
        inner.connection = Some(c);
        inner.state = QpState::Rts;
    }
}

impl Qp {
    pub(crate) fn post_send(&mut self, wr: &SendWr<'_>) -> Result<(), VerbError> {
        self.inner.post_send(wr)
    }

    pub(crate) fn post_recv(&mut self, wr: &RecvWr<'_>) -> Result<(), VerbError> {
        let inner = &mut self.inner;
        if inner.srq.is_some() || inner.state == QpState::Error {
            return Err(VerbError::State);
        }
        if inner.rq.len() == inner.rq_size {
            return Err(VerbError::Full);
        }
        inner.rq.push_back(RecvWqe::new(wr)?);
        Ok(())
    }

    /// Queues a ULPDU to send verbatim (see
    /// [`crate::verbs::Rnic::inject_ulpdu`]).
    pub(crate) fn inject(&mut self, ulpdu: &[u8]) -> Result<(), VerbError> {
        let Some(framer) = self.framer.as_ref() else {
            return Err(VerbError::State);
        };
        if self.inner.state != QpState::Rts {
            return Err(VerbError::State);
        }
        if ulpdu.len() > framer.mulpdu() {
            return Err(VerbError::Invalid);
        }
        if self.injected.len() == INJECTED_MAX {
            return Err(VerbError::Full);
        }
        self.injected.push_back(ulpdu.to_vec());
        Ok(())
    }

    pub(crate) fn poll_event(&mut self) -> Option<QpEvent> {
        self.inner.events.pop_front()
    }

    pub(crate) fn enter_error(&mut self, ctx: &mut Ctx<'_>) {
        self.inner.enter_error(ctx);
    }
}

impl Inner {
    fn post_send(&mut self, wr: &SendWr<'_>) -> Result<(), VerbError> {
        if self.state == QpState::Error || self.state == QpState::Terminate {
            return Err(VerbError::State);
        }
        if self.sq.len() == self.sq_size {
            return Err(VerbError::Full);
        }
        let sgl = SgList::new(wr.sgl)?;
        let sink_ok = match wr.op {
            SendOp::Read(_) => sgl.len == 1,
            // RFC 7306 (draft-ietf-storm-rdmap-ext-00 §5.1.1-§5.1.3):
            // the target is a naturally aligned 8-octet word, and on the
            // wire its address is the Remote Tagged Offset, which the
            // responder checks; a misaligned one could only end in the
            // peer's Terminate and the connection with it (found by a
            // review).
            SendOp::FetchAdd { remote, .. }
            | SendOp::CmpSwap { remote, .. }
            | SendOp::Swap { remote, .. } => {
                sgl.len == 1 && sgl.entries[0].len == 8 && remote.to % 8 == 0
            }
            _ => true,
        };
        // Message offsets and completion lengths are 32 bits.
        if !sink_ok || sgl.total() > u32::MAX as usize {
            return Err(VerbError::Invalid);
        }
        self.sq.push_back(SqWqe {
            wr_id: wr.wr_id,
            op: wr.op.clone(),
            sgl,
            signaled: wr.signaled,
            solicited: wr.solicited,
            fence: wr.fence,
            sent: 0,
            write_done: false,
            done: None,
            byte_len: 0,
        });
        Ok(())
    }

    fn wqe_mut(&mut self, seq: u64) -> Option<&mut SqWqe> {
        let index = seq.checked_sub(self.sq_base)?;
        self.sq.get_mut(index as usize)
    }

    /// Marks a send request done and reports completions in posting order.
    fn finish_wqe(&mut self, ctx: &mut Ctx<'_>, seq: u64, status: WcStatus, byte_len: u32) {
        if let Some(wqe) = self.wqe_mut(seq) {
            wqe.done = Some(status);
            wqe.byte_len = byte_len;
        }
        self.retire(ctx);
    }

    fn retire(&mut self, ctx: &mut Ctx<'_>) {
        while let Some(wqe) = self.sq.front() {
            let Some(status) = wqe.done else { break };
            if wqe.signaled || status != WcStatus::Success {
                let wc = Wc {
                    wr_id: wqe.wr_id,
                    status,
                    opcode: wqe.opcode(),
                    qp: self.handle,
                    byte_len: wqe.byte_len,
                    imm: None,
                    invalidated: None,
                    solicited: false,
                };
                ctx.complete(self.send_cq, wc);
            }
            self.sq.pop_front();
            self.sq_base += 1;
        }
        self.tx_next = self.tx_next.max(self.sq_base);
    }

    fn complete_recv(&mut self, ctx: &mut Ctx<'_>, wqe: &RecvWqe, wc: RecvCompletion) {
        let wc = Wc {
            wr_id: wqe.wr_id,
            status: wc.status,
            opcode: wc.opcode,
            qp: self.handle,
            byte_len: wc.byte_len,
            imm: wc.imm,
            invalidated: wc.invalidated,
            solicited: wc.solicited,
        };
        ctx.complete(self.recv_cq, wc);
    }

    /// The next posted receive: from the SRQ or the QP's own queue.
    fn take_recv(&mut self, ctx: &mut Ctx<'_>) -> Option<RecvWqe> {
        match self.srq {
            // Its SRQ outlives it too (`Rnic::destroy_srq`).
            Some(srq) => ctx.srqs.get_mut(srq.index())?.as_mut()?.ring.pop_front(),
            None => self.rq.pop_front(),
        }
    }

    /// Records the first error (the first one wins, as siw's
    /// `siw_init_terminate` does) and stops the QP until the Terminate
    /// is sent.
    fn fail(&mut self, cause: TermCause, segment: Option<&[u8]>, rdma_header: bool) {
        if self.term.is_some() || self.state == QpState::Error {
            return;
        }
        let mut pending = PendingTerm {
            cause,
            segment_len: 0,
            ddp_header: None,
            rdma_header: None,
        };
        if let Some(segment) = segment {
            pending.segment_len = segment.len().min(usize::from(u16::MAX)) as u16;
            if let Ok(packet) = ddp::Packet::new_checked(segment) {
                let len = packet.header_len();
                let mut header = [0u8; ddp::UNTAGGED_HEADER_LEN];
                header[..len].copy_from_slice(&segment[..len]);
                pending.ddp_header = Some((header, len));
                let rest = &segment[len..];
                if rdma_header && !rest.is_empty() {
                    // The request's own header: a Read Request's 28 octets
                    // (RFC 5040 §4.8), an atomic request's (RFC 7306),
                    // whatever follows it in the segment.
                    let own = match rdmap::Control::from_octet(packet.rsvd_ulp()).opcode {
                        rdmap::Opcode::RdmaReadRequest => rdmap::READ_REQUEST_HEADER_LEN,
                        _ => atomic::REQUEST_HEADER_LEN,
                    };
                    let n = rest.len().min(own);
                    let mut header = [0u8; atomic::REQUEST_HEADER_LEN];
                    header[..n].copy_from_slice(&rest[..n]);
                    pending.rdma_header = Some((header, n));
                }
            }
        }
        self.term = Some(pending);
        self.state = QpState::Terminate;
    }

    fn push_event(&mut self, event: QpEvent) {
        if self.events.len() < EVENTS_MAX {
            self.events.push_back(event);
        }
    }

    /// Moves to Error and flushes every outstanding work request.
    fn enter_error(&mut self, ctx: &mut Ctx<'_>) {
        self.state = QpState::Error;
        self.term = None;
        self.orq.clear();
        self.irrq.clear();
        self.tx_grants = None;
        for wqe in self.sq.iter_mut().filter(|w| w.done.is_none()) {
            wqe.done = Some(WcStatus::Flushed);
        }
        self.retire(ctx);
        if let Some(receiving) = self.receiving.take() {
            let wc = RecvCompletion::flushed();
            self.complete_recv(ctx, &receiving.wqe, wc);
        }
        while let Some(wqe) = self.rq.pop_front() {
            self.complete_recv(ctx, &wqe, RecvCompletion::flushed());
        }
    }
}

/// What a receive completion says.
#[derive(Debug, Clone, Copy)]
struct RecvCompletion {
    status: WcStatus,
    opcode: WcOpcode,
    byte_len: u32,
    imm: Option<[u8; 8]>,
    invalidated: Option<u32>,
    solicited: bool,
}

impl RecvCompletion {
    fn flushed() -> RecvCompletion {
        RecvCompletion {
            status: WcStatus::Flushed,
            opcode: WcOpcode::Recv,
            byte_len: 0,
            imm: None,
            invalidated: None,
            solicited: false,
        }
    }
}
