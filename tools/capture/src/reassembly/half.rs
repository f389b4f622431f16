//! One direction of a connection: sequence unwrapping, the out-of-order buffer, delivery.

use std::collections::BTreeMap;

use super::{Ctx, Event};

/// One direction's reassembly state.
///
/// Invariants: every key of `pending` is at least `next`; pending chunks do not overlap;
/// `pending_bytes` is the sum of their `Data` lengths; `history` holds the last delivered
/// bytes, ending at `next`.
#[derive(Debug, Default)]
pub(super) struct Half {
    /// Sequence number of stream offset 0, once known.
    base_seq: Option<u32>,
    /// `base_seq` is ISN + 1 of a SYN (the handshake), not the first data seen.
    synced: bool,
    /// Stream offset of the next byte to deliver.
    next: u64,
    /// Bytes that arrived ahead of `next`, by stream offset.
    pending: BTreeMap<u64, Chunk>,
    pending_bytes: usize,
    history: Vec<u8>,
    fin: Option<FinMark>,
    fin_reported: bool,
}

/// A segment's contribution to one direction.
pub(super) struct SegmentIn<'a> {
    pub(super) frame: u64,
    pub(super) ts_ns: u64,
    /// Sequence number of the first payload byte (after the SYN, if any).
    pub(super) seq: u32,
    /// The captured payload.
    pub(super) data: &'a [u8],
    /// The payload length on the wire, at least `data.len()`.
    pub(super) wire_len: usize,
    pub(super) fin: bool,
}

/// Where the stream ends, and which frame said so.
#[derive(Debug, Clone, Copy)]
struct FinMark {
    offset: u64,
    frame: u64,
}

#[derive(Debug)]
struct Chunk {
    frame: u64,
    ts_ns: u64,
    body: Body,
}

#[derive(Debug)]
enum Body {
    Data(Vec<u8>),
    /// Bytes the snapshot length cut off: known to exist, never to be seen.
    Lost(u64),
}

/// Part of a segment about to be buffered.
#[derive(Clone, Copy)]
enum Piece<'a> {
    Data(&'a [u8]),
    Lost(u64),
}

impl Half {
    /// A SYN fixes the stream start at ISN + 1, unless data was seen first. A SYN known to
    /// be the connection's own (`own`: a SYN-ACK that acknowledges the client's SYN) also
    /// replaces a start that an earlier SYN fixed while nothing of the direction has been
    /// delivered: that SYN answered another (RFC 9293 §3.5, Figure 8: an old duplicate
    /// SYN's SYN-ACK, then the SYN-ACK of the connection, with another ISN). Found by a
    /// review: the data after the second SYN-ACK was placed behind a gap.
    ///
    /// Returns whether the stream starts after this SYN: the handshake's SYN, whose
    /// options count.
    pub(super) fn note_syn(&mut self, isn: u32, own: bool) -> bool {
        let start = isn.wrapping_add(1);
        if own && self.untouched() {
            self.base_seq = Some(start);
        } else {
            self.base_seq.get_or_insert(start);
        }
        self.synced = self.base_seq == Some(start);
        self.synced
    }

    /// Whether the stream's start is known.
    pub(super) fn has_start(&self) -> bool {
        self.base_seq.is_some()
    }

    /// Whether a SYN (the handshake) fixed the stream's start.
    pub(super) fn synced(&self) -> bool {
        self.synced
    }

    /// RFC 9293 §3.10.7.4's acceptability test, as an observer can make it: whether
    /// the `len` sequence numbers from `seq` (just `seq` if `len` is 0, as for an RST)
    /// touch the receive window, taken as `window_bytes` either side of the next octet
    /// to deliver (behind it too: a retransmission of octets the receiver has, which
    /// the observer cannot tell from one it lacks) and never before offset 0. `None`
    /// while the start is unknown.
    pub(super) fn in_window(&self, seq: u32, len: usize, window_bytes: usize) -> Option<bool> {
        let base = self.base_seq?;
        let start = self.offset_of(base, seq);
        let (low, high) = self.window(window_bytes);
        Some(if len == 0 {
            low <= start && start < high
        } else {
            start < high && start + len as i128 > low
        })
    }

    /// Whether `ack` acknowledges octets of this direction inside its window: RFC
    /// 9293 §3.10.7.3 (SYN-SENT) accepts an ACK only if "SND.UNA < SEG.ACK =<
    /// SND.NXT", so nothing before ISN + 1; the window is `window_bytes` either side
    /// of the next octet to deliver, as for [`Half::in_window`]. `None` unless a SYN
    /// fixed the start: an ACK can then be judged against it.
    pub(super) fn acknowledges(&self, ack: u32, window_bytes: usize) -> Option<bool> {
        let base = self.base_seq.filter(|_| self.synced)?;
        let offset = self.offset_of(base, ack);
        let (low, high) = self.window(window_bytes);
        // A FIN occupies the sequence number after the last octet: its ACK is one more.
        Some(low <= offset && offset <= high)
    }

    /// The stream offsets an observer takes as inside a receive window of
    /// `window_bytes`.
    fn window(&self, window_bytes: usize) -> (i128, i128) {
        let next = i128::from(self.next);
        let window = window_bytes as i128;
        ((next - window).max(0), next + window)
    }

    /// Takes in a segment and delivers whatever became contiguous.
    pub(super) fn segment(&mut self, seg: &SegmentIn<'_>, ctx: &mut Ctx<'_>) {
        // A segment with neither data nor FIN occupies no sequence number (RFC 9293
        // §3.4), so it need not fix where the stream starts, and it may come from
        // another sequence space: RFC 5961 §4 answers a SYN for a connection the
        // receiver thinks established with a challenge ACK from the old connection, and
        // the sender of the SYN resets that one (RFC 9293 §3.10.7.3) before its SYN is
        // answered. Found by a review: such an ACK, captured before the SYN-ACK, fixed
        // the start of the new connection's stream, which then began with a gap of
        // millions of octets that took its MPA Reply and FPDUs.
        if self.base_seq.is_none() && seg.wire_len == 0 && !seg.fin {
            return;
        }
        let base = *self.base_seq.get_or_insert(seg.seq);
        let start = self.offset_of(base, seg.seq);
        let end = start + seg.wire_len as i128;
        if seg.fin && self.fin.is_none() {
            if let Ok(offset) = u64::try_from(end) {
                self.fin = Some(FinMark {
                    offset,
                    frame: seg.frame,
                });
            }
        }
        if seg.wire_len > 0 {
            self.place(start, seg, ctx);
        }
        self.deliver(ctx);
        self.enforce_limits(ctx);
    }

    /// Delivers everything buffered, declaring each hole a gap, then the FIN if one came.
    pub(super) fn flush(&mut self, ctx: &mut Ctx<'_>) {
        self.give_up_holes(ctx);
        if let Some(fin) = self.fin {
            if fin.offset > self.next && !self.fin_reported {
                self.report_gap(fin.frame, fin.offset - self.next, ctx);
            }
            self.report_fin(ctx);
        }
    }

    /// Delivers everything buffered now, declaring each hole a gap (the FIN, if one
    /// came, waits for [`Half::flush`]).
    pub(super) fn give_up_holes(&mut self, ctx: &mut Ctx<'_>) {
        while !self.pending.is_empty() {
            self.skip_hole(ctx);
            self.deliver(ctx);
        }
    }

    /// Whether nothing of the direction has been delivered or buffered, nor its end
    /// seen: its start may still move.
    fn untouched(&self) -> bool {
        self.next == 0 && self.pending.is_empty() && self.fin.is_none()
    }

    /// Whether the stream's FIN has been delivered.
    pub(super) fn fin_delivered(&self) -> bool {
        self.fin_reported
    }

    /// Frees the delivered bytes kept for comparison: retransmissions after this are
    /// only counted as duplicates, not checked.
    pub(super) fn release(&mut self) {
        self.history = Vec::new();
    }

    /// Unwraps `seq` to a stream offset: the one within 2^31 of `next` that is congruent
    /// to it modulo 2^32. Negative if it lies before the start of the stream.
    fn offset_of(&self, base: u32, seq: u32) -> i128 {
        let relative = seq.wrapping_sub(base);
        // Truncating `next` is the point: the distance is taken modulo 2^32.
        let distance = relative.wrapping_sub(self.next as u32) as i32;
        i128::from(self.next) + i128::from(distance)
    }

    /// Buffers the new bytes of a segment covering `[start, start + wire_len)`, after
    /// trimming (and checking) what was delivered already.
    fn place(&mut self, start: i128, seg: &SegmentIn<'_>, ctx: &mut Ctx<'_>) {
        let next = i128::from(self.next);
        let end = start + seg.wire_len as i128;
        if start < 0 {
            // Before offset 0: not part of this stream as we know it.
            let before = (-start).min(seg.wire_len as i128);
            ctx.stats.dropped_bytes = ctx.stats.dropped_bytes.saturating_add(count(before));
        }
        let old_end = end.min(next);
        if old_end > start.max(0) {
            ctx.stats.duplicate_bytes += count(old_end - start.max(0));
            self.compare_with_history(start, seg, ctx);
        }
        let from = start.max(next);
        if from >= end {
            return;
        }
        // `from` and `end` are at most 2^31 beyond `next`, so they fit a u64 and the
        // differences below fit a usize.
        let Ok(at) = u64::try_from(from) else { return };
        let skip = usize::try_from(from - start).unwrap_or(usize::MAX);
        if let Some(data) = seg.data.get(skip..).filter(|data| !data.is_empty()) {
            self.insert(at, Piece::Data(data), seg, ctx);
        }
        let lost_from = from.max(start + seg.data.len() as i128);
        if let (Ok(lost_at), true) = (u64::try_from(lost_from), lost_from < end) {
            self.insert(lost_at, Piece::Lost(count(end - lost_from)), seg, ctx);
        }
    }

    /// Adds `piece` at stream offset `at`, keeping every byte some earlier chunk already
    /// holds (first copy wins) and buffering only the uncovered parts.
    fn insert(&mut self, at: u64, piece: Piece<'_>, seg: &SegmentIn<'_>, ctx: &mut Ctx<'_>) {
        let end = at + piece.len();
        let mut cur = at;
        // A chunk that starts before `at` may reach into it.
        if let Some((start, chunk_end)) = self.chunk_before(at).filter(|&(_, e)| e > at) {
            self.compare_with_chunk(start, at, chunk_end.min(end), at, piece, seg.frame, ctx);
            cur = chunk_end;
        }
        // Each pass moves `cur` past one existing chunk or ends, so the loop ends.
        while cur < end {
            let Some((start, chunk_end)) = self.chunk_from(cur, end) else {
                self.put(cur, piece.slice(cur - at, end - at), seg, ctx);
                break;
            };
            if start > cur {
                self.put(cur, piece.slice(cur - at, start - at), seg, ctx);
            }
            self.compare_with_chunk(start, start, chunk_end.min(end), at, piece, seg.frame, ctx);
            cur = chunk_end;
        }
    }

    /// The last buffered chunk starting before `at`, as `(start, end)`.
    fn chunk_before(&self, at: u64) -> Option<(u64, u64)> {
        let (&start, chunk) = self.pending.range(..at).next_back()?;
        Some((start, start + chunk.body.len()))
    }

    /// The first buffered chunk starting in `[from, to)`, as `(start, end)`.
    fn chunk_from(&self, from: u64, to: u64) -> Option<(u64, u64)> {
        let (&start, chunk) = self.pending.range(from..to).next()?;
        Some((start, start + chunk.body.len()))
    }

    /// Buffers a piece of `seg` at `at`; the range is known to be free.
    fn put(&mut self, at: u64, piece: Piece<'_>, seg: &SegmentIn<'_>, ctx: &mut Ctx<'_>) {
        let body = match piece {
            Piece::Data(data) => {
                self.pending_bytes += data.len();
                *ctx.buffered_total += data.len();
                Body::Data(data.to_vec())
            }
            Piece::Lost(len) => Body::Lost(len),
        };
        self.pending.insert(
            at,
            Chunk {
                frame: seg.frame,
                ts_ns: seg.ts_ns,
                body,
            },
        );
    }

    /// Counts the bytes `[lo, hi)` of a new piece (which starts at `piece_at`) that an
    /// existing chunk (which starts at `chunk_at`) already holds, and whether they differ.
    #[allow(clippy::too_many_arguments)]
    fn compare_with_chunk(
        &self,
        chunk_at: u64,
        lo: u64,
        hi: u64,
        piece_at: u64,
        piece: Piece<'_>,
        frame: u64,
        ctx: &mut Ctx<'_>,
    ) {
        if hi <= lo {
            return;
        }
        ctx.stats.duplicate_bytes += hi - lo;
        let Some(Chunk {
            body: Body::Data(kept),
            ..
        }) = self.pending.get(&chunk_at)
        else {
            return;
        };
        let Piece::Data(new) = piece else { return };
        let kept = sub(kept, lo - chunk_at, hi - chunk_at);
        let new = sub(new, lo - piece_at, hi - piece_at);
        note_conflicts(kept, new, frame, ctx);
    }

    /// Compares the part of `seg` that lies before `next` with the delivered bytes still
    /// in `history`.
    fn compare_with_history(&self, start: i128, seg: &SegmentIn<'_>, ctx: &mut Ctx<'_>) {
        let next = i128::from(self.next);
        // A keep-alive: one octet just below what was delivered, which RFC
        // 9293 §3.8.4 lets a sender fill with garbage (smoltcp sends 0, BSD
        // stacks did too), so it differs from the first copy by design.
        if seg.data.len() == 1 && start + 1 == next {
            return;
        }
        let history_start = next - self.history.len() as i128;
        let lo = start.max(history_start);
        let hi = (start + seg.data.len() as i128).min(next);
        if hi <= lo {
            return;
        }
        let offset = |x: i128, origin: i128| u64::try_from(x - origin).unwrap_or(u64::MAX);
        let kept = sub(
            &self.history,
            offset(lo, history_start),
            offset(hi, history_start),
        );
        let new = sub(seg.data, offset(lo, start), offset(hi, start));
        note_conflicts(kept, new, seg.frame, ctx);
    }

    /// Delivers buffered chunks while the first one starts at `next`, then the FIN if
    /// the stream has reached it.
    fn deliver(&mut self, ctx: &mut Ctx<'_>) {
        while let Some(entry) = self.pending.first_entry() {
            let start = *entry.key();
            debug_assert!(
                start >= self.next,
                "chunk at {start} behind the stream at {}",
                self.next
            );
            if start > self.next {
                break;
            }
            let chunk = entry.remove();
            // Unreachable while the invariant holds. In a release build a stale chunk is
            // dropped rather than left to stall `flush`, which would then never end.
            if start == self.next {
                self.emit(chunk, ctx);
            } else if let Body::Data(data) = chunk.body {
                self.pending_bytes -= data.len();
                *ctx.buffered_total -= data.len();
            }
        }
        self.report_fin(ctx);
    }

    fn emit(&mut self, chunk: Chunk, ctx: &mut Ctx<'_>) {
        let data = match chunk.body {
            Body::Lost(len) => return self.report_gap(chunk.frame, len, ctx),
            Body::Data(data) => data,
        };
        self.pending_bytes -= data.len();
        *ctx.buffered_total -= data.len();
        let offset = self.next;
        self.next += data.len() as u64;
        self.remember(&data, ctx.limits.history_bytes_max);
        let base = self.base_seq.unwrap_or_default();
        ctx.out.push(Event::Data {
            conn: ctx.conn,
            dir: ctx.dir,
            frame: chunk.frame,
            ts_ns: chunk.ts_ns,
            // Sequence numbers are offsets modulo 2^32.
            seq: base.wrapping_add(offset as u32),
            offset,
            data,
        });
    }

    /// Declares the hole in front of the first buffered chunk lost.
    fn skip_hole(&mut self, ctx: &mut Ctx<'_>) {
        let Some((&start, chunk)) = self.pending.first_key_value() else {
            return;
        };
        if start > self.next {
            let frame = chunk.frame;
            self.report_gap(frame, start - self.next, ctx);
        }
    }

    /// While over a limit, gives up the hole in front of the buffer and delivers what
    /// follows it. Each pass delivers at least one chunk, so the loop ends.
    fn enforce_limits(&mut self, ctx: &mut Ctx<'_>) {
        while !self.pending.is_empty() && self.over_limits(ctx) {
            self.skip_hole(ctx);
            self.deliver(ctx);
        }
    }

    fn over_limits(&self, ctx: &Ctx<'_>) -> bool {
        self.pending_bytes > ctx.limits.buffered_bytes_max
            || self.pending.len() > ctx.limits.buffered_segments_max
            || *ctx.buffered_total > ctx.limits.buffered_bytes_total_max
    }

    /// Reports `len` missing bytes at `next` and moves past them.
    fn report_gap(&mut self, frame: u64, len: u64, ctx: &mut Ctx<'_>) {
        ctx.out.push(Event::Gap {
            conn: ctx.conn,
            dir: ctx.dir,
            frame,
            offset: self.next,
            len,
        });
        ctx.stats.gap_bytes += len;
        self.next += len;
        // History must end at `next`; across a gap it cannot.
        self.history.clear();
    }

    fn report_fin(&mut self, ctx: &mut Ctx<'_>) {
        let Some(fin) = self.fin else { return };
        if !self.fin_reported && self.next >= fin.offset {
            self.fin_reported = true;
            ctx.out.push(Event::Fin {
                conn: ctx.conn,
                dir: ctx.dir,
                frame: fin.frame,
            });
        }
    }

    /// Appends delivered bytes to the history, keeping between `max` and `2 * max` bytes
    /// so that trimming the front is amortised.
    fn remember(&mut self, data: &[u8], max: usize) {
        if max == 0 {
            return;
        }
        self.history.extend_from_slice(data);
        if self.history.len() > max.saturating_mul(2) {
            let excess = self.history.len() - max;
            self.history.drain(..excess);
        }
    }
}

impl Body {
    fn len(&self) -> u64 {
        match self {
            Body::Data(data) => data.len() as u64,
            Body::Lost(len) => *len,
        }
    }
}

impl<'a> Piece<'a> {
    fn len(self) -> u64 {
        match self {
            Piece::Data(data) => data.len() as u64,
            Piece::Lost(len) => len,
        }
    }

    /// The part `[from, to)` of this piece, in piece-relative offsets.
    fn slice(self, from: u64, to: u64) -> Piece<'a> {
        match self {
            Piece::Data(data) => Piece::Data(sub(data, from, to)),
            Piece::Lost(_) => Piece::Lost(to.saturating_sub(from)),
        }
    }
}

/// `bytes[from..to]`, or as much of it as exists; the callers' ranges are in bounds, and
/// this keeps a mistake from becoming a panic.
fn sub(bytes: &[u8], from: u64, to: u64) -> &[u8] {
    let from = usize::try_from(from).unwrap_or(usize::MAX).min(bytes.len());
    let to = usize::try_from(to)
        .unwrap_or(usize::MAX)
        .clamp(from, bytes.len());
    &bytes[from..to]
}

/// Counts bytes that differ between a kept copy and a later one.
fn note_conflicts(kept: &[u8], new: &[u8], frame: u64, ctx: &mut Ctx<'_>) {
    let differing = kept.iter().zip(new).filter(|(a, b)| a != b).count() as u64;
    if differing > 0 {
        ctx.stats.conflicting_bytes += differing;
        ctx.stats.first_conflict_frame.get_or_insert(frame);
    }
}

/// A non-negative byte count held in an `i128` as a `u64`.
fn count(bytes: i128) -> u64 {
    u64::try_from(bytes.max(0)).unwrap_or(u64::MAX)
}
