//! Transmit: the send queue, the IRRQ's responses and Terminates become
//! FPDUs (siw's `siw_qp_tx.c`).
//!
//! Messages are cut into DDP segments of at most MULPDU (RFC 5041 §5:
//! segmentation to what the LLP carries in one unit; the framer's
//! [`crate::mpa::tx::Framer::mulpdu`]), untagged segments numbered by MSN and MO, tagged
//! ones addressed by STag and TO, L on the last. Payloads are gathered
//! from registered memory straight into the output ([`crate::mpa::tx::Framer::frame_with`]).
//!
//! Given where TCP cuts segments ([`Segments`]), no FPDU crosses a cut
//! (RFC 5044 §5): a data segment shrinks to end at it
//! ([`crate::mpa::tx::Framer::ulpdu_len_max`]), and transmission stops before any other
//! FPDU that does not fit, until TCP has sent the short segment.

use std::ops::Range;
use std::sync::atomic::AtomicU8;

use crate::atomics;
use crate::cq::WcStatus;
use crate::mem::Access;
use crate::verbs::{RemoteAddr, SendOp, SGE_MAX};
use crate::wire::rdmap::{self, Control, Header, Opcode, ReadRequestRepr};
use crate::wire::{atomic, ddp, term};

use super::term::{TermCause, Terminate, TERMINATE_ULPDU_LEN_MAX};
use super::{
    Ctx, Inner, Irrq, LlpTx, Orq, Qp, QpEvent, QpState, Rtr, Segments, TermInfo,
    RESPONSE_BURST_FPDUS_MAX,
};

/// The longest DDP + RDMAP header: untagged DDP and an Atomic Request.
const HEADER_MAX: usize = ddp::UNTAGGED_HEADER_LEN + atomic::REQUEST_HEADER_LEN;

/// What goes out next.
#[derive(Debug, Clone, Copy)]
enum Job {
    /// The IRRQ's head.
    Response,
    /// The send request with this sequence number.
    Request(u64),
}

/// A DDP/RDMAP header built in place.
struct HeaderBuf {
    octets: [u8; HEADER_MAX],
    len: usize,
}

impl HeaderBuf {
    fn new(ddp: ddp::Repr, header: Header<'_>) -> HeaderBuf {
        let repr = rdmap::Repr {
            ddp,
            header,
            payload: &[],
        };
        let mut octets = [0u8; HEADER_MAX];
        let len = repr.buffer_len();
        repr.emit(&mut ddp::Packet::new_unchecked(&mut octets[..len]));
        HeaderBuf { octets, len }
    }

    fn octets(&self) -> &[u8] {
        &self.octets[..self.len]
    }
}

/// Frames the DDP segment of a data message (Write, Read Response, Send):
/// `ddp` and then `len` octets that `payload(offset, run)` writes. `None`
/// when the FPDU does not fit `out`.
///
/// The header is emitted straight into the output. Building it in a buffer
/// and copying it in (as the other messages do) made `memcpy` load 8 and 16
/// octets that span the header's narrow stores, which stalls on store
/// forwarding: 10% of an RDMA Write at EMSS 1448 on this machine.
fn frame_segment(
    framer: &mut LlpTx,
    ddp: &ddp::Repr,
    len: usize,
    out: &mut [u8],
    mut payload: impl FnMut(usize, &mut [u8]),
) -> Option<usize> {
    let header_len = ddp.header_len();
    if framer.wire_len(header_len + len) > out.len() {
        return None;
    }
    let ulpdu = |offset: usize, run: &mut [u8]| {
        let (mut offset, mut run) = (offset, run);
        if offset < header_len {
            let n = (header_len - offset).min(run.len());
            if offset == 0 && n == header_len {
                ddp.emit(&mut ddp::Packet::new_unchecked(&mut run[..header_len]));
            } else {
                // A marker splits the header: copy the part of this run.
                let mut octets = [0u8; ddp::UNTAGGED_HEADER_LEN];
                ddp.emit(&mut ddp::Packet::new_unchecked(&mut octets[..header_len]));
                run[..n].copy_from_slice(&octets[offset..offset + n]);
            }
            offset += n;
            run = &mut run[n..];
        }
        if !run.is_empty() {
            payload(offset - header_len, run);
        }
    };
    framer.frame_with(&[], header_len + len, out, ulpdu).ok()
}

/// [`frame_segment`] in one pass over the payload where it can: `payload`
/// is registered memory (`len` octets in all), copied and folded into the
/// CRC at once by the MPA framer's one-pass kernel (`Framer::frame_shared`)
/// instead of copied and then read again for the CRC. `None` where that
/// does not apply (DDP over SCTP, CRC off, no VPCLMULQDQ, a short FPDU, the
/// FPDU does not fit): the caller then frames with [`frame_segment`].
#[inline(always)]
fn frame_segment_shared(
    framer: &mut LlpTx,
    ddp: &ddp::Repr,
    len: usize,
    out: &mut [u8],
    payload: &[&[AtomicU8]],
) -> Option<usize> {
    let LlpTx::Mpa(framer) = framer else {
        return None;
    };
    if payload.iter().map(|p| p.len()).sum::<usize>() != len {
        return None;
    }
    framer.frame_shared(ddp.words(), payload, out)
}

fn untagged(opcode: Opcode, qn: u32, msn: u32, mo: u32, last: bool, rsvd_ulp: u32) -> ddp::Repr {
    ddp::Repr {
        last,
        reserved: 0,
        version: ddp::VERSION,
        rsvd_ulp: Control::new(opcode).to_octet(),
        buffer: ddp::Buffer::Untagged {
            rsvd_ulp,
            qn,
            msn,
            mo,
        },
    }
}

fn tagged(opcode: Opcode, stag: u32, to: u64, last: bool) -> ddp::Repr {
    ddp::Repr {
        last,
        reserved: 0,
        version: ddp::VERSION,
        rsvd_ulp: Control::new(opcode).to_octet(),
        buffer: ddp::Buffer::Tagged { stag, to },
    }
}

impl Qp {
    /// Writes FPDUs back to back into `out` and returns the octets written.
    /// With [`Segments`], no FPDU crosses a TCP segment boundary: a data FPDU
    /// that would cross one shrinks to end at it, and the call stops before
    /// any other FPDU that does not fit the rest of its segment (the
    /// contract is [`crate::verbs::Rnic::poll_transmit_segments`]'s).
    /// Without ([`NoCuts`]), an FPDU only has to fit the rest of `out`.
    pub(crate) fn poll_transmit<C: Cuts>(
        &mut self,
        ctx: &mut Ctx<'_>,
        out: &mut [u8],
        cuts: C,
    ) -> usize {
        let (written, short) = self.transmit(ctx, out, cuts);
        self.tx_short = short;
        written
    }

    /// Whether the last transmit stopped for want of room (the next FPDU
    /// did not fit), rather than for want of something to send.
    pub(crate) fn transmit_short(&self) -> bool {
        self.tx_short
    }

    /// Whether a transmit may write something: false when there is surely
    /// nothing to send (no injected ULPDU, Terminate, RTR, response, or
    /// request not yet sent). True does not promise an FPDU (a request may
    /// wait for an ORD credit or a fence, a responder for its first FPDU).
    pub(crate) fn may_transmit(&self) -> bool {
        let i = &self.inner;
        match i.state {
            QpState::Terminate => true,
            QpState::Rts => {
                !self.injected.is_empty()
                    || i.rtr_tx.is_some()
                    || !i.irrq.is_empty()
                    || i.tx_next < i.sq_base + i.sq.len() as u64
            }
            QpState::Idle | QpState::Error => false,
        }
    }

    /// The transmit path: octets written, and whether it stopped because
    /// the next FPDU did not fit.
    #[inline(always)]
    fn transmit<C: Cuts>(&mut self, ctx: &mut Ctx<'_>, out: &mut [u8], cuts: C) -> (usize, bool) {
        let Some(framer) = self.framer.as_mut() else {
            return (0, false);
        };
        let inner = &mut self.inner;
        let mut at = 0;
        // Injected ULPDUs go first, while the QP may still send.
        let injecting = inner.state == QpState::Rts;
        while let Some(ulpdu) = self.injected.front().filter(|_| injecting) {
            let (end, _) = cuts.room(at, out.len());
            if framer.wire_len(ulpdu.len()) > end - at {
                return (at, true);
            }
            match framer.frame(&[ulpdu], &mut out[at..end]) {
                Ok(n) => at += n,
                Err(_) => return (at, true),
            }
            self.injected.pop_front();
        }
        loop {
            let (end, cut) = cuts.room(at, out.len());
            let room = &mut out[at..end];
            match inner.state {
                QpState::Rts => {}
                QpState::Terminate => {
                    let n = inner.emit_terminate(ctx, framer, room);
                    // A Terminate that did not fit is still to go.
                    return (at + n, inner.state == QpState::Terminate);
                }
                QpState::Idle | QpState::Error => return (at, false),
            }
            if inner.fenced {
                // RFC 5044 §7.1: the responder sends no FPDU before the
                // initiator's first has arrived.
                return (at, false);
            }
            if let Some(rtr) = inner.rtr_tx {
                match inner.emit_rtr(framer, rtr, room) {
                    Some(n) => {
                        at += n;
                        inner.rtr_tx = None;
                        continue;
                    }
                    None => return (at, true),
                }
            }
            let Some(job) = inner.next_job(ctx) else {
                return (at, false);
            };
            let written = match job {
                Job::Response => inner.emit_response::<C>(ctx, framer, room, cut),
                Job::Request(seq) => inner.emit_request::<C>(ctx, framer, seq, room, cut),
            };
            match written {
                Some(n) => {
                    at += n;
                    // Counted when written: a job whose FPDU did not fit
                    // took no turn (found by a review: counted when
                    // picked, a send queue whose FPDU never fitted the rest
                    // of the room lost its turn to every response burst).
                    inner.burst = match job {
                        Job::Response => inner.burst.saturating_add(1),
                        Job::Request(_) => 0,
                    };
                }
                None => return (at, true),
            }
        }
    }
}

/// Where TCP cuts the buffer the transmit path fills.
///
/// The path is generic over it so that
/// [`crate::verbs::Rnic::poll_transmit`]'s copy ([`NoCuts`]) has no segment
/// arithmetic left and compiles as it did before segments: one function
/// with the whole path inlined. To keep it so, the helpers both copies
/// call are `#[inline(always)]` (called from two places, the compiler calls
/// them out of line and then leaves the framer out of line in the Read
/// Response path), and the two that run once per connection (`emit_rtr`,
/// `emit_terminate`) `#[inline(never)]`. Measured on this machine: one
/// path testing an `Option<Segments>` cost 3.5% per segment-sized Write,
/// shared helpers out of line 3-5% on Reads (engine_table, and each
/// workload alone).
pub(crate) trait Cuts: Copy {
    /// Whether a data FPDU may shrink to end at a cut.
    const SHRINKS: bool;

    /// Where the room for the FPDU at octet `at` of a buffer of `len`
    /// octets ends, and whether that end is a TCP segment boundary (a cut),
    /// to which a data FPDU shrinks.
    fn room(self, at: usize, len: usize) -> (usize, bool);
}

/// No cuts: the room is the rest of the buffer ([`crate::verbs::Rnic::poll_transmit`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct NoCuts;

impl Cuts for NoCuts {
    const SHRINKS: bool = false;

    fn room(self, _at: usize, len: usize) -> (usize, bool) {
        (len, false)
    }
}

impl Cuts for Segments {
    const SHRINKS: bool = true;

    /// Where the buffer ends before the segment does, the room is the rest
    /// of the buffer and nothing shrinks: TCP does not cut there, so a
    /// shorter FPDU would gain no alignment, only one more header (the next
    /// call fills that segment on).
    fn room(self, at: usize, len: usize) -> (usize, bool) {
        let end = self.end(at);
        if end <= len {
            (end, true)
        } else {
            (len, false)
        }
    }
}

/// Payload octets of a data FPDU (Write, Send, Read Response) whose DDP
/// header is `header_len` octets and whose message has `rest` octets to
/// go: as many as MULPDU allows; when `out` ends at a TCP segment boundary
/// (`cut`) and that FPDU does not fit, the most whose FPDU does, so that
/// it ends at the boundary (RFC 5044 §5: whole FPDUs in TCP segments). A
/// receiver takes FPDUs of any length up to MULPDU. At least one octet:
/// when not even that fits, the full size is returned, which does not fit
/// either, and the caller stops there.
fn payload_len<C: Cuts>(
    framer: &LlpTx,
    header_len: usize,
    rest: usize,
    out: &[u8],
    cut: bool,
) -> usize {
    let n = rest.min(framer.mulpdu() - header_len);
    if !C::SHRINKS || !cut {
        return n;
    }
    match framer.ulpdu_len_max(out.len()) {
        Some(fits) if fits > header_len => n.min(fits - header_len),
        _ => n,
    }
}

impl Inner {
    /// Runs local operations at the head of transmission and picks what
    /// sends next, giving the send queue a turn after at most
    /// [`RESPONSE_BURST_FPDUS_MAX`] responses, but never starting a message
    /// in the middle of another of its kind (tagged or untagged).
    ///
    /// A tagged DDP message is its segments up to the one with L (RFC 5041
    /// §4: no MSN names it), so a Write's segments between a Read
    /// Response's leave the receiver two tagged messages open at once;
    /// Linux siw refuses that as an intersection and terminates (found by
    /// a review). siw takes one tagged and one untagged message under way
    /// together, each finished before the next of its kind: so a Send may
    /// still go between a Read Response's segments, and a Read Response
    /// between a Send's.
    #[inline(always)] // Into both copies of the path: see `Cuts`.
    fn next_job(&mut self, ctx: &mut Ctx<'_>) -> Option<Job> {
        let request = self.next_request(ctx);
        let response = self.irrq.front().map(|r| match r {
            // (tagged, under way)
            Irrq::Read { sent, .. } => (true, *sent > 0),
            // One segment.
            Irrq::Atomic { .. } => (false, false),
        });
        let job = match (response, request) {
            (Some((tagged, open)), Some(seq)) => {
                let wqe = &self.sq[(seq - self.sq_base) as usize];
                let (request_tagged, request_open) = match wqe.op {
                    SendOp::Write(_) => (true, wqe.sent > 0),
                    SendOp::WriteWithImmediate(..) if !wqe.write_done => (true, wqe.sent > 0),
                    SendOp::Send | SendOp::SendWithInvalidate(_) => (false, wqe.sent > 0),
                    // Immediate Data, the Immediate after a Write, Read and
                    // atomic requests: one segment each.
                    _ => (false, false),
                };
                let same_kind = tagged == request_tagged;
                if same_kind && request_open {
                    Job::Request(seq)
                } else if same_kind && open {
                    Job::Response
                } else if self.burst >= RESPONSE_BURST_FPDUS_MAX {
                    Job::Request(seq)
                } else {
                    Job::Response
                }
            }
            (Some(_), None) => Job::Response,
            (None, Some(seq)) => Job::Request(seq),
            (None, None) => return None,
        };
        Some(job)
    }

    /// The next send request that puts something on the wire, executing
    /// local ones (invalidation, fast registration) on the way. `None`
    /// when the queue is empty or its head waits for an ORD credit.
    #[inline(always)] // Into both copies of the path: see `Cuts`.
    fn next_request(&mut self, ctx: &mut Ctx<'_>) -> Option<u64> {
        while self.tx_next < self.sq_base + self.sq.len() as u64 {
            let seq = self.tx_next;
            let wqe = &self.sq[(seq - self.sq_base) as usize];
            if wqe.fence && !self.orq.is_empty() {
                return None;
            }
            let status = match &wqe.op {
                SendOp::LocalInvalidate(stag) => {
                    self.status(ctx.stags.invalidate(*stag, self.pd, false))
                }
                SendOp::FastRegister(fr) => {
                    let registration = crate::mem::Registration {
                        pd: self.pd,
                        region: fr.region.clone(),
                        offset: fr.offset,
                        len: fr.len,
                        base_to: fr.base_to,
                        access: fr.access,
                    };
                    // As `reg_mr` checks: inside the region, Tagged
                    // Offsets that do not wrap, and aligned TOs on
                    // aligned words if it allows remote atomics.
                    if registration.is_valid() {
                        self.status(ctx.stags.bind(fr.stag, registration))
                    } else {
                        WcStatus::LocalProtection
                    }
                }
                _ if wqe.needs_ord() => {
                    let ord = self.connection.map_or(0, |c| usize::from(c.ord));
                    if ord == 0 {
                        // Nothing can carry it: RFC 6581 negotiated no ORD.
                        WcStatus::LocalQpOperation
                    } else if self.orq.len() >= ord {
                        return None;
                    } else {
                        return Some(seq);
                    }
                }
                _ => return Some(seq),
            };
            self.tx_next += 1;
            self.finish_wqe(ctx, seq, status, 0);
        }
        None
    }

    #[inline(always)] // Into both copies of the path: see `Cuts`.
    fn status(&self, result: Result<(), crate::mem::AccessError>) -> WcStatus {
        match result {
            Ok(()) => WcStatus::Success,
            Err(_) => WcStatus::LocalProtection,
        }
    }

    /// Frames the next segment of request `seq`; `None` when it does not
    /// fit `out`, `Some(0)` when the request failed locally.
    fn emit_request<C: Cuts>(
        &mut self,
        ctx: &mut Ctx<'_>,
        framer: &mut LlpTx,
        seq: u64,
        out: &mut [u8],
        cut: bool,
    ) -> Option<usize> {
        // The list is checked whole at the request's first FPDU, and again
        // for the entries each later FPDU reads (`source_checked`).
        if self.tx_grants.is_none() {
            let wqe = &self.sq[(seq - self.sq_base) as usize];
            let access = if wqe.needs_ord() {
                Access::LOCAL_WRITE
            } else {
                Access::LOCAL_READ
            };
            match wqe
                .sgl
                .resolve(ctx.stags, &mut self.tx_stag, self.pd, access)
            {
                Ok(grants) => self.tx_grants = Some(grants),
                Err(_) => {
                    self.source_failed(ctx, seq);
                    return Some(0);
                }
            }
        }
        // Copy out what the emitters need instead of cloning the operation
        // (a FastRegister holds an `Arc`; this runs once per FPDU).
        let wqe = &self.sq[(seq - self.sq_base) as usize];
        enum Next {
            Send,
            Write(RemoteAddr),
            Immediate([u8; 8]),
            Read(RemoteAddr),
            Atomic,
        }
        let next = match wqe.op {
            SendOp::Send | SendOp::SendWithInvalidate(_) => Next::Send,
            SendOp::Write(remote) => Next::Write(remote),
            SendOp::WriteWithImmediate(_, data) if wqe.write_done => Next::Immediate(data),
            SendOp::WriteWithImmediate(remote, _) => Next::Write(remote),
            SendOp::Immediate(data) => Next::Immediate(data),
            SendOp::Read(remote) => Next::Read(remote),
            SendOp::FetchAdd { .. } | SendOp::CmpSwap { .. } | SendOp::Swap { .. } => Next::Atomic,
            SendOp::LocalInvalidate(_) | SendOp::FastRegister(_) => {
                unreachable!("run by next_request")
            }
        };
        match next {
            Next::Send => self.emit_send::<C>(ctx, framer, seq, out, cut),
            Next::Write(remote) => self.emit_write::<C>(ctx, framer, seq, remote, out, cut),
            Next::Immediate(data) => self.emit_immediate(ctx, framer, seq, data, out),
            Next::Read(remote) => self.emit_read_request(framer, seq, remote, out),
            Next::Atomic => self.emit_atomic_request(framer, seq, out),
        }
    }

    /// A request whose list failed its STag check, at its first FPDU or a
    /// later one: it completes with Local Protection and the QP fails with
    /// RDMAP's local catastrophic Terminate (0/0/0, RFC 5040 §4.8), one
    /// path for both so that a source gone before the first FPDU and one
    /// gone after it end the same way.
    #[inline(never)] // Off the data path.
    fn source_failed(&mut self, ctx: &mut Ctx<'_>, seq: u64) {
        self.tx_grants = None;
        self.tx_next += 1;
        self.finish_wqe(ctx, seq, WcStatus::LocalProtection, 0);
        self.fail(TermCause::LocalCatastrophic, None, false);
    }

    /// Checks again the source entries that `octets` of request `seq` (a
    /// Send or Write: its list is read) come from, before the FPDU that
    /// carries them is framed (`Grants::recheck`). The request's grants
    /// keep its regions' memory, not their registrations: without this an
    /// STag invalidated or deregistered after the first FPDU left was read
    /// for the rest of the message, though `dereg_mr` promises that
    /// nothing reads from it once it returns (RFC 5040 §7.1 checks every
    /// DDP segment's STag; a Read Response's source is checked per segment
    /// in `emit_response` likewise). A compare while no STag changed
    /// anywhere, no allocation. `false` when one fails: the request has then
    /// failed (`source_failed`).
    #[inline(always)] // Into both copies of the path: see `Cuts`.
    fn source_checked(&mut self, ctx: &mut Ctx<'_>, seq: u64, octets: Range<usize>) -> bool {
        let sgl = &self.sq[(seq - self.sq_base) as usize].sgl;
        let grants = self.tx_grants.as_mut().expect("resolved before framing");
        let checked = grants.recheck(
            sgl,
            ctx.stags,
            &mut self.tx_stag,
            self.pd,
            Access::LOCAL_READ,
            octets,
        );
        if checked.is_err() {
            self.source_failed(ctx, seq);
        }
        checked.is_ok()
    }

    /// Frames a DDP header and `len` payload octets of the current request
    /// from offset `from`, in one pass where `one_pass` lets it and the
    /// framer can; `None` when it does not fit.
    fn frame_payload(
        &self,
        framer: &mut LlpTx,
        ddp: &ddp::Repr,
        from: usize,
        len: usize,
        out: &mut [u8],
        one_pass: bool,
    ) -> Option<usize> {
        let grants = self.tx_grants.as_ref().expect("resolved before framing");
        if one_pass && framer.one_pass(ddp.header_len() + len) {
            let mut pieces: [&[AtomicU8]; SGE_MAX] = [&[]; SGE_MAX];
            let n = grants.shared(from, len, &mut pieces);
            if let Some(written) = frame_segment_shared(framer, ddp, len, out, &pieces[..n]) {
                return Some(written);
            }
        }
        frame_segment(framer, ddp, len, out, |offset, dst| {
            grants.gather(from + offset, dst)
        })
    }

    fn emit_send<C: Cuts>(
        &mut self,
        ctx: &mut Ctx<'_>,
        framer: &mut LlpTx,
        seq: u64,
        out: &mut [u8],
        cut: bool,
    ) -> Option<usize> {
        let wqe = &self.sq[(seq - self.sq_base) as usize];
        let (total, sent) = (wqe.sgl.total(), wqe.sent);
        let (opcode, invalidate) = match (&wqe.op, wqe.solicited) {
            (SendOp::SendWithInvalidate(stag), false) => (Opcode::SendWithInvalidate, *stag),
            (SendOp::SendWithInvalidate(stag), true) => (Opcode::SendWithSeAndInvalidate, *stag),
            (_, false) => (Opcode::Send, 0),
            (_, true) => (Opcode::SendWithSe, 0),
        };
        let n = payload_len::<C>(framer, ddp::UNTAGGED_HEADER_LEN, total - sent, out, cut);
        let last = sent + n == total;
        let ddp = untagged(
            opcode,
            ddp::qn::SEND,
            self.tx_msn[0],
            sent as u32,
            last,
            invalidate,
        );
        if !self.source_checked(ctx, seq, sent..sent + n) {
            return Some(0);
        }
        let written = self.frame_payload(framer, &ddp, sent, n, out, ctx.one_pass)?;
        self.stats.sent(opcode, n, last);
        self.sq[(seq - self.sq_base) as usize].sent += n;
        if last {
            self.tx_msn[0] = self.tx_msn[0].wrapping_add(1);
            self.request_sent(ctx, seq, total as u32);
        }
        Some(written)
    }

    fn emit_write<C: Cuts>(
        &mut self,
        ctx: &mut Ctx<'_>,
        framer: &mut LlpTx,
        seq: u64,
        remote: RemoteAddr,
        out: &mut [u8],
        cut: bool,
    ) -> Option<usize> {
        let wqe = &self.sq[(seq - self.sq_base) as usize];
        let (total, sent) = (wqe.sgl.total(), wqe.sent);
        let n = payload_len::<C>(framer, ddp::TAGGED_HEADER_LEN, total - sent, out, cut);
        let last = sent + n == total;
        let ddp = tagged(
            Opcode::RdmaWrite,
            remote.stag,
            remote.to.wrapping_add(sent as u64),
            last,
        );
        if !self.source_checked(ctx, seq, sent..sent + n) {
            return Some(0);
        }
        let written = self.frame_payload(framer, &ddp, sent, n, out, ctx.one_pass)?;
        self.stats.sent(Opcode::RdmaWrite, n, last);
        let wqe = &mut self.sq[(seq - self.sq_base) as usize];
        wqe.sent += n;
        if last {
            if matches!(wqe.op, SendOp::WriteWithImmediate(..)) {
                // The Immediate Data follows; the request completes after it.
                wqe.write_done = true;
            } else {
                self.request_sent(ctx, seq, total as u32);
            }
        }
        Some(written)
    }

    #[inline(always)] // Into both copies of the path: see `Cuts`.
    fn emit_immediate(
        &mut self,
        ctx: &mut Ctx<'_>,
        framer: &mut LlpTx,
        seq: u64,
        data: [u8; 8],
        out: &mut [u8],
    ) -> Option<usize> {
        let wqe = &self.sq[(seq - self.sq_base) as usize];
        let opcode = if wqe.solicited {
            Opcode::ImmediateDataWithSe
        } else {
            Opcode::ImmediateData
        };
        let ddp = untagged(opcode, ddp::qn::SEND, self.tx_msn[0], 0, true, 0);
        let header = HeaderBuf::new(ddp, Header::Immediate(data));
        if framer.wire_len(header.len) > out.len() {
            return None;
        }
        let written = framer.frame(&[header.octets()], out).ok()?;
        self.stats
            .sent(opcode, header.len - ddp::UNTAGGED_HEADER_LEN, true);
        self.tx_msn[0] = self.tx_msn[0].wrapping_add(1);
        let total = self.sq[(seq - self.sq_base) as usize].sgl.total() as u32;
        self.request_sent(ctx, seq, total);
        Some(written)
    }

    /// A Send, Write or Immediate Data is on its way: it completes now (a
    /// software RNIC hands it to TCP, which delivers it reliably), in
    /// posting order.
    #[inline(always)] // Into both copies of the path: see `Cuts`.
    fn request_sent(&mut self, ctx: &mut Ctx<'_>, seq: u64, byte_len: u32) {
        self.tx_next += 1;
        self.tx_grants = None;
        self.finish_wqe(ctx, seq, WcStatus::Success, byte_len);
    }

    /// The RTR indication (RFC 6581 §9.2), in the form Linux siw sends it:
    /// a zero-length Write to STag 1, TO 0; a zero-length Read Request from
    /// source STag 1 to sink STag 0; a zero-length Send. It uses the
    /// queues' first MSNs like any message.
    #[inline(never)] // Once per connection: see `Cuts`.
    fn emit_rtr(&mut self, framer: &mut LlpTx, rtr: Rtr, out: &mut [u8]) -> Option<usize> {
        let header = match rtr {
            Rtr::Write => {
                let ddp = tagged(Opcode::RdmaWrite, 1, 0, true);
                return frame_segment(framer, &ddp, 0, out, |_, _| {});
            }
            Rtr::Send => {
                let ddp = untagged(Opcode::Send, ddp::qn::SEND, self.tx_msn[0], 0, true, 0);
                let written = frame_segment(framer, &ddp, 0, out, |_, _| {})?;
                self.tx_msn[0] = self.tx_msn[0].wrapping_add(1);
                return Some(written);
            }
            Rtr::Read => {
                let request = ReadRequestRepr {
                    sink_stag: 0,
                    sink_to: 0,
                    read_size: 0,
                    source_stag: 1,
                    source_to: 0,
                };
                let ddp = untagged(
                    Opcode::RdmaReadRequest,
                    ddp::qn::READ_REQUEST,
                    self.tx_msn[1],
                    0,
                    true,
                    0,
                );
                HeaderBuf::new(ddp, Header::ReadRequest(request))
            }
        };
        if framer.wire_len(header.len) > out.len() {
            return None;
        }
        let written = framer.frame(&[header.octets()], out).ok()?;
        self.orq.push_back(Orq::Rtr);
        self.tx_msn[1] = self.tx_msn[1].wrapping_add(1);
        Some(written)
    }

    #[inline(always)] // Into both copies of the path: see `Cuts`.
    fn emit_read_request(
        &mut self,
        framer: &mut LlpTx,
        seq: u64,
        remote: RemoteAddr,
        out: &mut [u8],
    ) -> Option<usize> {
        let sink = self.sq[(seq - self.sq_base) as usize].sgl.entries()[0];
        let request = ReadRequestRepr {
            sink_stag: sink.stag,
            sink_to: sink.to,
            read_size: sink.len,
            source_stag: remote.stag,
            source_to: remote.to,
        };
        let ddp = untagged(
            Opcode::RdmaReadRequest,
            ddp::qn::READ_REQUEST,
            self.tx_msn[1],
            0,
            true,
            0,
        );
        let header = HeaderBuf::new(ddp, Header::ReadRequest(request));
        if framer.wire_len(header.len) > out.len() {
            return None;
        }
        let written = framer.frame(&[header.octets()], out).ok()?;
        self.stats.sent(
            Opcode::RdmaReadRequest,
            header.len - ddp::UNTAGGED_HEADER_LEN,
            true,
        );
        // The sink was checked at posting; each response segment checks
        // its STag again (`place_read_response`).
        self.tx_grants = None;
        self.orq.push_back(Orq::Read {
            seq,
            msn: self.tx_msn[1],
            sink_stag: sink.stag,
            sink_to: sink.to,
            len: sink.len as usize,
            placed: 0,
        });
        self.tx_msn[1] = self.tx_msn[1].wrapping_add(1);
        self.tx_next += 1;
        Some(written)
    }

    #[inline(always)] // Into both copies of the path: see `Cuts`.
    fn emit_atomic_request(
        &mut self,
        framer: &mut LlpTx,
        seq: u64,
        out: &mut [u8],
    ) -> Option<usize> {
        let id = self.next_atomic_id;
        let request = match self.sq[(seq - self.sq_base) as usize].op {
            SendOp::FetchAdd { remote, add, mask } => {
                atomic::RequestRepr::fetch_add(id, remote.stag, remote.to, add, mask)
            }
            SendOp::CmpSwap {
                remote,
                compare,
                compare_mask,
                swap,
                swap_mask,
            } => atomic::RequestRepr::cmp_swap(
                id,
                remote.stag,
                remote.to,
                (swap, swap_mask),
                (compare, compare_mask),
            ),
            SendOp::Swap { remote, swap } => {
                atomic::RequestRepr::swap(id, remote.stag, remote.to, swap)
            }
            _ => unreachable!("an atomic request"),
        };
        let ddp = untagged(
            Opcode::AtomicRequest,
            ddp::qn::READ_REQUEST,
            self.tx_msn[1],
            0,
            true,
            0,
        );
        let header = HeaderBuf::new(ddp, Header::AtomicRequest(request));
        if framer.wire_len(header.len) > out.len() {
            return None;
        }
        let written = framer.frame(&[header.octets()], out).ok()?;
        self.stats.sent(
            Opcode::AtomicRequest,
            header.len - ddp::UNTAGGED_HEADER_LEN,
            true,
        );
        self.next_atomic_id = id.wrapping_add(1);
        // Checked when resolved, and again when the response arrives.
        self.tx_grants = None;
        let result = self.sq[(seq - self.sq_base) as usize].sgl.entries()[0];
        self.orq.push_back(Orq::Atomic {
            seq,
            msn: self.tx_msn[1],
            id,
            result,
        });
        self.tx_msn[1] = self.tx_msn[1].wrapping_add(1);
        self.tx_next += 1;
        Some(written)
    }

    /// Frames the next FPDU of the IRRQ's head: a Read Response segment,
    /// or an Atomic Response (the atomic executes only once there is room
    /// to answer it, after every earlier response: a Read before it never
    /// sees its effect). The source or target STag is checked again first;
    /// if it was invalidated or deregistered since the request arrived, the
    /// request fails with a protection Terminate echoing its headers.
    /// `Some(0)` then.
    fn emit_response<C: Cuts>(
        &mut self,
        ctx: &mut Ctx<'_>,
        framer: &mut LlpTx,
        out: &mut [u8],
        cut: bool,
    ) -> Option<usize> {
        match *self.irrq.front()? {
            Irrq::Read {
                msn,
                request,
                sent,
                arrived,
            } => {
                let len = request.read_size as usize;
                let n = payload_len::<C>(framer, ddp::TAGGED_HEADER_LEN, len - sent, out, cut);
                let last = sent + n == len;
                let ddp = tagged(
                    Opcode::RdmaReadResponse,
                    request.sink_stag,
                    request.sink_to.wrapping_add(sent as u64),
                    last,
                );
                if framer.wire_len(ddp.header_len() + n) > out.len() {
                    return None;
                }
                let source = if n == 0 {
                    None
                } else {
                    let to = request.source_to.wrapping_add(sent as u64);
                    match ctx
                        .stags
                        .lookup(request.source_stag, self.pd, Access::REMOTE_READ, to, n)
                    {
                        Ok(source) => Some(source),
                        Err(error) => {
                            let header = Header::ReadRequest(request);
                            self.fail_request(TermCause::protection(error), msn, header);
                            return Some(0);
                        }
                    }
                };
                // In bounds: checked just above.
                let shared = source
                    .as_ref()
                    .filter(|_| ctx.one_pass && framer.one_pass(ddp.header_len() + n))
                    .and_then(|lease| lease.region().shared(lease.offset, n).ok());
                let one_pass =
                    shared.and_then(|octets| frame_segment_shared(framer, &ddp, n, out, &[octets]));
                let written = match one_pass {
                    Some(written) => written,
                    None => frame_segment(framer, &ddp, n, out, |offset, dst| {
                        if let Some(lease) = &source {
                            let _ = lease.region().read(lease.offset + offset, dst);
                        }
                    })?,
                };
                // The Read RTR's response is the provider's, as the RTR
                // itself: neither counted nor timed.
                if arrived.is_some() {
                    self.stats.sent(Opcode::RdmaReadResponse, n, last);
                }
                if last {
                    if let Some(arrived) = arrived {
                        self.stats
                            .read_responded(ctx.now_us.saturating_sub(arrived));
                    }
                    self.irrq.pop_front();
                } else if let Some(Irrq::Read { sent, .. }) = self.irrq.front_mut() {
                    *sent += n;
                }
                Some(written)
            }
            Irrq::Atomic {
                msn,
                request,
                arrived,
            } => {
                let ddp = untagged(
                    Opcode::AtomicResponse,
                    ddp::qn::ATOMIC_RESPONSE,
                    self.tx_msn[3],
                    0,
                    true,
                    0,
                );
                let len = ddp::UNTAGGED_HEADER_LEN + atomic::RESPONSE_HEADER_LEN;
                if framer.wire_len(len) > out.len() {
                    return None;
                }
                let target = ctx
                    .stags
                    .lookup(
                        request.remote_stag,
                        self.pd,
                        Access::REMOTE_ATOMIC,
                        request.remote_to,
                        8,
                    )
                    .map_err(TermCause::protection)
                    .and_then(|lease| match lease.region().word(lease.offset) {
                        Ok(_) => Ok(lease),
                        Err(_) => Err(TermCause::Operation(
                            super::term::OperationError::Unspecified,
                        )),
                    });
                let lease = match target {
                    Ok(lease) => lease,
                    Err(cause) => {
                        self.fail_request(cause, msn, Header::AtomicRequest(request));
                        return Some(0);
                    }
                };
                let word = lease
                    .region()
                    .word(lease.offset)
                    .expect("checked aligned and in bounds above");
                let original = execute(&request, word);
                let response = atomic::ResponseRepr {
                    original_request_id: request.request_id,
                    original_remote_value: original,
                };
                let header = HeaderBuf::new(ddp, Header::AtomicResponse(response));
                debug_assert_eq!(header.len, len);
                let written = framer.frame(&[header.octets()], out).ok()?;
                self.stats
                    .sent(Opcode::AtomicResponse, atomic::RESPONSE_HEADER_LEN, true);
                self.stats
                    .atomic_responded(ctx.now_us.saturating_sub(arrived));
                self.tx_msn[3] = self.tx_msn[3].wrapping_add(1);
                self.irrq.pop_front();
                Some(written)
            }
        }
    }

    /// Fails an inbound Read or Atomic Request while answering it: the
    /// Terminate echoes the request as if it had failed on arrival, so that
    /// the requester can tell which request failed. The request's segment
    /// is rebuilt whole, its DDP header (queue 1, its MSN) and its RDMAP
    /// header (`header`): the request arrived as exactly that segment
    /// (`rdmap::Repr::parse` takes no other length), so the Terminate's
    /// DDP Segment Length, which M says is valid (RFC 5040 §4.8), is the
    /// one the segment had: 18 + 28 octets for a Read, 18 + 52 for an
    /// atomic, not its DDP header's 18. The DDP header is echoed, and a
    /// Read's RDMA header; an atomic's is not (draft-ietf-storm-rdmap-ext-00
    /// §8.1, RFC 7306: for an incoming Atomic Request "the Terminated RDMA
    /// Header field is set to zero"), as on arrival.
    fn fail_request(&mut self, cause: TermCause, msn: u32, header: Header<'_>) {
        let read = matches!(header, Header::ReadRequest(_));
        debug_assert!(
            read || matches!(header, Header::AtomicRequest(_)),
            "only Read and Atomic Requests wait in the IRRQ: {header:?}"
        );
        let opcode = if read {
            Opcode::RdmaReadRequest
        } else {
            Opcode::AtomicRequest
        };
        let ddp = untagged(opcode, ddp::qn::READ_REQUEST, msn, 0, true, 0);
        let segment = HeaderBuf::new(ddp, header);
        self.fail(cause, Some(segment.octets()), read);
    }

    /// Sends the Terminate this side owes, then moves to Error. Returns the
    /// octets written (0 while there is no room).
    #[inline(never)] // Once per connection: see `Cuts`.
    fn emit_terminate(&mut self, ctx: &mut Ctx<'_>, framer: &mut LlpTx, out: &mut [u8]) -> usize {
        let Some(pending) = self.term.clone() else {
            self.enter_error(ctx);
            return 0;
        };
        let (layer, etype, ecode) = pending.cause.code();
        let terminate = Terminate {
            cause: pending.cause,
            msn: self.tx_msn[2],
            encoding: self
                .connection
                .map_or(term::Encoding::Rfc5040, |c| c.terminate_layout),
            segment_len: pending.segment_len,
            ddp_header: pending.ddp_header.as_ref().map(|(h, n)| &h[..*n]),
            rdma_header: pending.rdma_header.as_ref().map(|(h, n)| &h[..*n]),
        };
        let mut octets = [0u8; TERMINATE_ULPDU_LEN_MAX];
        let len = terminate.emit_ulpdu(&mut octets);
        if framer.wire_len(len) > out.len() {
            return 0;
        }
        let Ok(written) = framer.frame(&[&octets[..len]], out) else {
            return 0;
        };
        self.tx_msn[2] = self.tx_msn[2].wrapping_add(1);
        self.stats
            .sent(Opcode::Terminate, len - ddp::UNTAGGED_HEADER_LEN, true);
        self.push_event(QpEvent::TerminateSent(TermInfo {
            layer,
            etype,
            ecode,
        }));
        self.enter_error(ctx);
        written
    }
}

/// Executes an atomic request on its target word and returns the
/// original value.
fn execute(request: &atomic::RequestRepr, word: &std::sync::atomic::AtomicU64) -> u64 {
    match request.opcode {
        atomic::AtomicOpcode::FetchAdd => {
            atomics::fetch_add(word, request.add_or_swap_data, request.add_or_swap_mask)
        }
        atomic::AtomicOpcode::CmpSwap => atomics::cmp_swap(
            word,
            request.compare_data,
            request.compare_mask,
            request.add_or_swap_data,
            request.add_or_swap_mask,
        ),
        atomic::AtomicOpcode::Swap => atomics::swap(word, request.add_or_swap_data),
        // Refused when the request arrived.
        atomic::AtomicOpcode::Unknown(_) => word.load(std::sync::atomic::Ordering::Acquire),
    }
}
