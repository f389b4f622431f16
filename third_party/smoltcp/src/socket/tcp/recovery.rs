//! dpwarp: what a sender knows of the segments it has sent, for loss
//! recovery that retransmits only what the peer lacks.
//!
//! * A **log of sent segments** (sequence range, last transmission time,
//!   flags), in sequence order, covering `[SND.UNA, SND.NXT)`: each segment
//!   is retransmitted as it was first cut, so a sender that cut segments at
//!   record boundaries keeps them there when it repairs a loss.
//! * The **SACK scoreboard** (RFC 2018, RFC 6675 §2): the segments the
//!   peer's SACK blocks cover are marked; blocks that are not plausible (out
//!   of the window, inverted, beyond what was sent) are counted and ignored,
//!   and a D-SACK (RFC 2883) is told apart from a SACK.
//! * **RACK** (RFC 8985 §6): a segment is lost when one sent after it has
//!   been delivered and more than an RTT plus a reordering window has passed
//!   since it was sent; the reordering timer covers those still within it.
//!   Without SACK (a peer that does not permit it) the third duplicate ACK
//!   marks the first segment lost (RFC 5681's fast retransmit).
//! * **Pipe** (RFC 6675 §4, RFC 8985's inflight): octets sent and neither
//!   delivered nor lost, plus the retransmissions in flight, which the
//!   congestion window bounds.
//! * A retransmission timeout marks every segment not SACKed lost (RFC 8985
//!   §6.3): they go again, once each, and what the peer holds does not.
//!
//! Work per ACK is bounded by the log's length, which is bounded by
//! [`SEGMENTS_MAX`]: at most that many segments are in flight, whatever a
//! peer's SACK blocks say.

use alloc::collections::VecDeque;

use crate::time::{Duration, Instant};
use crate::wire::TcpSeqNumber;

/// The most segments in flight: a full log holds new data back until
/// acknowledgements make room (as a full congestion window does). 8,192
/// segments carry 11 MiB at an MSS of 1,448 octets.
pub(super) const SEGMENTS_MAX: usize = 8192;

/// RFC 8985 §6.2: the reordering window is a quarter of the minimum RTT,
/// times a multiplier that each D-SACK round raises.
const REO_WND_MULT_MAX: u16 = 64;

/// RFC 8985 §6.2 step 4: after this many recoveries without a D-SACK the
/// multiplier returns to 1.
const REO_WND_RESET_RECOVERIES: u16 = 16;

/// RFC 8985 §6.2: the minimum RTT is a windowed minimum; older samples
/// give way to newer ones after this long.
const MIN_RTT_WINDOW: Duration = Duration::from_secs(10);

/// The least probe timeout: 2 ms, as Linux (`TCP_TIMEOUT_MIN`). RFC 8985
/// §7.2's 2 SRTT on a path of tens of microseconds fired within a real
/// path's jitter: over Linux's TAP device, hundreds of probes in 3 s with
/// nothing lost, each answered with a D-SACK.
pub(super) const PTO_MIN: Duration = Duration::from_millis(2);

/// RFC 6675 §2: DupThresh.
pub(super) const DUP_THRESH: u8 = 3;

const SACKED: u8 = 1;
/// Deemed lost (RACK, a timeout, or the third duplicate ACK); stays set
/// until the segment is delivered.
const LOST: u8 = 2;
/// A retransmission of it is in flight (cleared when it is deemed lost
/// again, or delivered).
const RETRANS: u8 = 4;
/// Retransmitted at least once (its RTT is ambiguous: RFC 6298 §3).
const EVER_RETRANS: u8 = 8;
/// It carries the FIN (the last sequence number of its range).
const FIN: u8 = 16;
/// It was SACKed before the peer reneged (RFC 2018 §8): a block that
/// covers it again tells nothing new (no progress, no RTT sample).
const RESACK: u8 = 64;

/// `a - b` in sequence space, signed.
fn diff(a: TcpSeqNumber, b: TcpSeqNumber) -> i64 {
    a.0.wrapping_sub(b.0) as i64
}

/// One segment as it was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
struct Sent {
    start: TcpSeqNumber,
    /// Its length in sequence space (its data, and one for a FIN).
    len: u32,
    /// When it was last (re)transmitted.
    xmit: Instant,
    flags: u8,
}

impl Sent {
    fn end(&self) -> TcpSeqNumber {
        TcpSeqNumber(self.start.0.wrapping_add(self.len as i32))
    }

    fn is(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// A segment to retransmit: its start, its data's length, whether it
/// carries the FIN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub(super) struct Retransmit {
    pub start: TcpSeqNumber,
    pub data_len: usize,
    pub fin: bool,
}

/// What an ACK told the log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub(super) struct AckOutcome {
    /// Octets newly SACKed.
    pub sacked: usize,
    /// An RTT sample (microseconds) from the most recently sent segment
    /// this ACK delivered that was never retransmitted.
    pub rtt_sample: Option<u32>,
    /// It carried a D-SACK (RFC 2883).
    pub dsack: bool,
    /// The cumulative ACK advanced SND.UNA.
    pub advanced: bool,
    /// The loss probe's retransmission repaired a loss (RFC 8985 §7.4.2):
    /// the cumulative ACK passed the probe's end with no D-SACK saying the
    /// original had arrived too.
    pub probe_repaired: bool,
}

/// Counts of what loss recovery did, for the user (public:
/// `Socket::recovery_stats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct RecoveryStats {
    /// SACK blocks received and used (RFC 2018).
    pub sack_blocks: u64,
    /// SACK blocks ignored: not within `(SND.UNA, SND.NXT]` (a block that
    /// starts at SND.UNA included), inverted, or past the fourth of an
    /// option.
    pub sack_blocks_ignored: u64,
    /// D-SACK blocks received (RFC 2883): a segment arrived twice.
    pub dsacks: u64,
    /// Segments deemed lost by RACK (RFC 8985 §6.2), whether the reordering
    /// timer or an ACK found them.
    pub lost_rack: u64,
    /// Segments deemed lost by the third duplicate ACK, or by a partial
    /// ACK in the episode it began (no SACK: RFC 5681 §3.2, RFC 6582).
    pub lost_dupack: u64,
    /// Segments deemed lost by a retransmission timeout.
    pub lost_timeout: u64,
    /// Segments retransmitted.
    pub retransmits: u64,
    /// Their octets.
    pub retransmitted_octets: u64,
    /// Loss probes sent (RFC 8985 §7).
    pub probes: u64,
    /// Retransmission timeouts (RFC 6298).
    pub timeouts: u64,
    /// Recovery episodes: congestion responses, one per window of losses
    /// (RFC 6675 §5, RFC 5681 §3.2).
    pub recoveries: u64,
    /// Times the peer reneged: its cumulative ACK stopped at a segment it
    /// had SACKed (RFC 2018 §8: a receiver may discard what it SACKed), so
    /// every SACK mark was dropped and the segment went again.
    pub reneged: u64,
}

/// The log, the scoreboard and RACK's state.
#[derive(Debug)]
pub(super) struct Recovery {
    segs: VecDeque<Sent>,
    /// Octets of segments SACKed.
    sacked_out: usize,
    /// Octets of segments deemed lost.
    lost_out: usize,
    /// Octets of retransmissions in flight.
    retrans_out: usize,
    /// Segments SACKed.
    sacked_segments: usize,
    /// Segments deemed lost whose retransmission has not gone.
    waiting: usize,
    /// Below this, no segment waits for its retransmission (RFC 6675's
    /// HighRxt, as a hint: every lost segment at or above it is found).
    retransmit_hint: TcpSeqNumber,
    /// RFC 8985 §6.1: the most recently sent segment delivered.
    rack_xmit: Option<Instant>,
    rack_end: TcpSeqNumber,
    /// Its RTT, microseconds.
    rack_rtt: u32,
    /// RACK.fack: the highest sequence delivered.
    fack: TcpSeqNumber,
    /// RFC 8985 §6.2 step 3.
    reordering_seen: bool,
    reo_wnd_mult: u16,
    recoveries_without_dsack: u16,
    /// The end of the window a D-SACK last raised the multiplier in (once
    /// per round trip).
    dsack_round_end: Option<TcpSeqNumber>,
    /// Windowed minimum RTT, microseconds, and when it was taken.
    min_rtt: Option<(u32, Instant)>,
    /// The end of the current recovery episode (RFC 6675's RecoveryPoint):
    /// losses below it are of the same window and cost no second
    /// congestion response.
    recovery_point: Option<TcpSeqNumber>,
    /// The third-duplicate-ACK rule has marked the first segment (no SACK).
    dupack_marked: bool,
    /// RFC 8985 §7: a loss probe is outstanding (SND.NXT when it was sent,
    /// TLP.end_seq).
    probe_end: Option<TcpSeqNumber>,
    /// It was a retransmission (TLP.is_retrans), not new data.
    probe_retrans: bool,
    stats: RecoveryStats,
}

impl Default for Recovery {
    fn default() -> Self {
        Recovery::new()
    }
}

impl Recovery {
    pub fn new() -> Recovery {
        Recovery {
            segs: VecDeque::new(),
            sacked_out: 0,
            lost_out: 0,
            retrans_out: 0,
            sacked_segments: 0,
            waiting: 0,
            retransmit_hint: TcpSeqNumber(0),
            rack_xmit: None,
            rack_end: TcpSeqNumber(0),
            rack_rtt: 0,
            fack: TcpSeqNumber(0),
            reordering_seen: false,
            reo_wnd_mult: 1,
            recoveries_without_dsack: 0,
            dsack_round_end: None,
            min_rtt: None,
            recovery_point: None,
            dupack_marked: false,
            probe_end: None,
            probe_retrans: false,
            stats: RecoveryStats::default(),
        }
    }

    /// Forgets every segment (the connection was reset); keeps the counts.
    pub fn clear(&mut self) {
        let stats = self.stats;
        *self = Recovery::new();
        self.stats = stats;
    }

    pub fn stats(&self) -> RecoveryStats {
        self.stats
    }

    /// Segments in the log.
    pub fn len(&self) -> usize {
        self.segs.len()
    }

    /// The log can take another segment.
    pub fn has_room(&self) -> bool {
        self.segs.len() < SEGMENTS_MAX
    }

    /// RFC 6675 §4 pipe, given the octets sent and not cumulatively
    /// acknowledged: those neither SACKed nor lost, and the retransmissions
    /// in flight.
    pub fn pipe(&self, flight: usize) -> usize {
        (flight + self.retrans_out).saturating_sub(self.sacked_out + self.lost_out)
    }

    /// Octets SACKed above SND.UNA.
    pub fn sacked_out(&self) -> usize {
        self.sacked_out
    }

    /// In a recovery episode.
    pub fn in_recovery(&self) -> bool {
        self.recovery_point.is_some()
    }

    /// A loss probe is outstanding.
    pub fn probe_outstanding(&self) -> bool {
        self.probe_end.is_some()
    }

    /// Records a transmission of `[start, start + len)` (`fin`: its last
    /// sequence number is the FIN) at `now`: a new segment at the end of the
    /// log, or a retransmission of the one that starts at `start`.
    pub fn on_transmit(&mut self, start: TcpSeqNumber, len: usize, fin: bool, now: Instant) {
        if len == 0 {
            return;
        }
        let end = self.segs.back().map(Sent::end);
        if end.is_none_or(|end| diff(start, end) >= 0) {
            // New data (after a gap only if the log was emptied by an ACK
            // beyond it, which cannot leave a gap: SND.UNA <= start).
            if !self.has_room() {
                return;
            }
            self.segs.push_back(Sent {
                start,
                len: len as u32,
                xmit: now,
                flags: if fin { FIN } else { 0 },
            });
            return;
        }
        let Some(i) = self.find(start) else {
            return;
        };
        let seg = self.segs[i];
        if seg.start != start || seg.is(SACKED) {
            return;
        }
        // Sent again: a SACK of it from now on is of this transmission, the
        // repair of a loss, not the renege's old news (`RESACK`).
        self.set_flags(i, (seg.flags | RETRANS | EVER_RETRANS) & !RESACK);
        self.segs[i].xmit = now;
        self.stats.retransmits += 1;
        self.stats.retransmitted_octets += seg.len as u64 - u64::from(seg.is(FIN));
        if diff(self.retransmit_hint, seg.end()) < 0 {
            self.retransmit_hint = seg.end();
        }
    }

    /// Adds what segment `s` counts for.
    fn count(&mut self, s: &Sent) {
        let len = s.len as usize;
        if s.is(SACKED) {
            self.sacked_out += len;
            self.sacked_segments += 1;
        }
        if s.is(LOST) {
            self.lost_out += len;
        }
        if s.is(RETRANS) {
            self.retrans_out += len;
        }
        if s.is(LOST) && !s.is(RETRANS) && !s.is(SACKED) {
            self.waiting += 1;
        }
    }

    /// Takes back what segment `s` counted for.
    fn uncount(&mut self, s: &Sent) {
        let len = s.len as usize;
        if s.is(SACKED) {
            self.sacked_out -= len;
            self.sacked_segments -= 1;
        }
        if s.is(LOST) {
            self.lost_out -= len;
        }
        if s.is(RETRANS) {
            self.retrans_out -= len;
        }
        if s.is(LOST) && !s.is(RETRANS) && !s.is(SACKED) {
            self.waiting -= 1;
        }
    }

    fn set_flags(&mut self, i: usize, flags: u8) {
        let old = self.segs[i];
        self.uncount(&old);
        self.segs[i].flags = flags;
        let new = self.segs[i];
        self.count(&new);
    }

    /// The index of the segment that holds `seq`.
    fn find(&self, seq: TcpSeqNumber) -> Option<usize> {
        let first = self.segs.front()?;
        if diff(seq, first.start) < 0 {
            return None;
        }
        let i = self.segs.partition_point(|s| diff(s.end(), seq) <= 0);
        (i < self.segs.len() && diff(self.segs[i].start, seq) <= 0).then_some(i)
    }

    /// The next segment to retransmit: the first deemed lost whose
    /// retransmission is not in flight (RFC 6675 NextSeg rule 1).
    pub fn next_retransmit(&mut self) -> Option<Retransmit> {
        if self.waiting == 0 {
            return None;
        }
        let from = self.find(self.retransmit_hint).unwrap_or(0);
        let at = self
            .segs
            .iter()
            .skip(from)
            .position(|s| s.is(LOST) && !s.is(RETRANS) && !s.is(SACKED))
            .map(|p| p + from)
            .or_else(|| {
                // The hint only ever moves forward between losses; a loss
                // below it (a retransmission lost again) is found here.
                self.segs
                    .iter()
                    .take(from)
                    .position(|s| s.is(LOST) && !s.is(RETRANS) && !s.is(SACKED))
            })?;
        let s = self.segs[at];
        self.retransmit_hint = s.start;
        Some(Retransmit {
            start: s.start,
            data_len: s.len as usize - usize::from(s.is(FIN)),
            fin: s.is(FIN),
        })
    }

    /// The last segment sent that the peer does not hold: what a loss probe
    /// retransmits when there is no new data (RFC 8985 §7.3).
    pub fn probe_segment(&self) -> Option<Retransmit> {
        let s = self.segs.iter().rev().find(|s| !s.is(SACKED))?;
        Some(Retransmit {
            start: s.start,
            data_len: s.len as usize - usize::from(s.is(FIN)),
            fin: s.is(FIN),
        })
    }

    /// The loss probe retransmitted a segment; SND.NXT is `snd_nxt`.
    pub fn on_probe(&mut self, snd_nxt: TcpSeqNumber) {
        self.probe_end = Some(snd_nxt);
        self.probe_retrans = true;
        self.stats.probes += 1;
    }

    /// A loss probe of new data was sent; it ends at `snd_nxt`.
    pub fn on_probe_new_data(&mut self, snd_nxt: TcpSeqNumber) {
        self.probe_end = Some(snd_nxt);
        self.probe_retrans = false;
        self.stats.probes += 1;
    }

    /// Deems segment `i` lost; a retransmission of it in flight is lost
    /// too, so it may go again.
    fn mark_lost(&mut self, i: usize) {
        let s = self.segs[i];
        if s.is(SACKED) {
            return;
        }
        self.set_flags(i, (s.flags | LOST) & !RETRANS);
        if diff(s.start, self.retransmit_hint) < 0 {
            self.retransmit_hint = s.start;
        }
    }

    /// Takes an acceptable ACK of `ack` (SND.UNA <= ack <= SND.NXT) with
    /// the SACK blocks `sack` (as the option carried them), at `now`;
    /// `snd_nxt` is the highest sequence number sent.
    pub fn on_ack(
        &mut self,
        ack: TcpSeqNumber,
        sack: &[Option<(u32, u32)>],
        snd_nxt: TcpSeqNumber,
        now: Instant,
    ) -> AckOutcome {
        let mut out = AckOutcome::default();
        // The most recently sent segment delivered by this ACK.
        let mut newest: Option<Sent> = None;
        let note = |s: &Sent, newest: &mut Option<Sent>| {
            if newest
                .is_none_or(|n| s.xmit > n.xmit || (s.xmit == n.xmit && diff(s.end(), n.end()) > 0))
            {
                *newest = Some(*s);
            }
        };

        // RFC 2883 §4: the first block is a D-SACK when it lies below the
        // cumulative ACK or within the second block.
        let blocks: [Option<(TcpSeqNumber, TcpSeqNumber)>; 4] = {
            let mut b = [None; 4];
            for (slot, r) in b.iter_mut().zip(sack.iter()) {
                *slot = r.map(|(l, r)| (TcpSeqNumber(l as i32), TcpSeqNumber(r as i32)));
            }
            b
        };
        let mut first_is_dsack = false;
        if let Some((l, r)) = blocks[0] {
            let below = diff(r, ack) <= 0 && diff(l, r) < 0;
            let within = blocks[1]
                .is_some_and(|(l2, r2)| diff(l, l2) >= 0 && diff(r, r2) <= 0 && diff(l, r) < 0);
            if below || within {
                first_is_dsack = true;
                out.dsack = true;
                self.stats.dsacks += 1;
                // RFC 8985 §6.2 step 4: once per round trip.
                if self.dsack_round_end.is_none_or(|end| diff(ack, end) >= 0) {
                    self.reo_wnd_mult = (self.reo_wnd_mult + 1).min(REO_WND_MULT_MAX);
                    self.dsack_round_end = Some(snd_nxt);
                    self.recoveries_without_dsack = 0;
                }
            }
        }

        // The cumulative ACK.
        let mut advanced = false;
        while let Some(front) = self.segs.front().copied() {
            if diff(front.end(), ack) <= 0 {
                self.segs.pop_front();
                self.uncount(&front);
                advanced = true;
                if !front.is(SACKED) {
                    note(&front, &mut newest);
                }
                continue;
            }
            if diff(front.start, ack) < 0 {
                advanced = true;
                // Part of it: the peer took fewer octets than were sent
                // (an MSS or window cut on its side, or a probe). The rest
                // stays, with its flags.
                let cut = diff(ack, front.start) as u32;
                self.uncount(&front);
                let seg = self.segs.front_mut().expect("front");
                seg.start = ack;
                seg.len -= cut;
                let trimmed = *seg;
                self.count(&trimmed);
                note(&front, &mut newest);
            }
            break;
        }
        debug_assert!(
            !self.segs.is_empty()
                || (
                    self.lost_out,
                    self.retrans_out,
                    self.sacked_out,
                    self.waiting
                ) == (0, 0, 0, 0)
        );

        // RFC 2018 §8: a receiver may discard data it SACKed. A cumulative
        // ACK that stops at a SACKed segment says it did (it would otherwise
        // have acknowledged past it): the marks are not to be trusted; the
        // segment goes again, and the blocks below re-mark what it holds.
        // The segments it had SACKed are remembered (`RESACK`): the blocks
        // that cover them again are no progress and no RTT sample, so a peer
        // that reneges on every ACK cannot pass for one making progress.
        if self
            .segs
            .front()
            .is_some_and(|f| f.start == ack && f.is(SACKED))
        {
            self.stats.reneged += 1;
            for i in 0..self.segs.len() {
                let flags = self.segs[i].flags;
                if flags & SACKED != 0 {
                    self.set_flags(i, (flags & !SACKED) | RESACK);
                }
            }
            self.mark_lost(0);
        }

        // The SACK blocks (RFC 2018 §3), each within (ACK, SND.NXT]: a block
        // that starts at the cumulative ACK is not plausible either (the
        // receiver would have acknowledged what it holds there; RFC 2883
        // §4's D-SACK, told apart above, is the only block that may report
        // octets at or below it), and honouring one would mark SACKed the
        // segment at SND.UNA, which a timeout then never resends (RFC 6675
        // §5.1, RFC 8985 §6.3 skip SACKed segments).
        for (k, block) in blocks.iter().enumerate() {
            let Some((l, r)) = *block else { continue };
            if k == 0 && first_is_dsack {
                continue;
            }
            if diff(l, r) >= 0 || diff(l, ack) <= 0 || diff(r, snd_nxt) > 0 {
                self.stats.sack_blocks_ignored += 1;
                continue;
            }
            self.stats.sack_blocks += 1;
            let Some(mut i) = self.find(l) else { continue };
            while i < self.segs.len() {
                let s = self.segs[i];
                if diff(s.end(), r) > 0 {
                    break;
                }
                // Only segments the block covers whole (we never cut a
                // segment anew, so a peer's blocks end where ours do).
                if diff(s.start, l) >= 0 && !s.is(SACKED) {
                    self.set_flags(i, (s.flags | SACKED) & !(LOST | RETRANS | RESACK));
                    if s.is(RESACK) {
                        i += 1;
                        continue;
                    }
                    out.sacked += s.len as usize;
                    note(&s, &mut newest);
                }
                i += 1;
            }
        }
        if blocks.len() < sack.len() {
            self.stats.sack_blocks_ignored += (sack.len() - blocks.len()) as u64;
        }

        // RACK's state (RFC 8985 §6.2 steps 1-3).
        if let Some(n) = newest {
            let rtt = (now - n.xmit).total_micros().min(u32::MAX as u64) as u32;
            let ambiguous = n.is(EVER_RETRANS) && self.min_rtt.is_some_and(|(min, _)| rtt < min);
            if !ambiguous {
                if self
                    .rack_xmit
                    .is_none_or(|x| n.xmit > x || (n.xmit == x && diff(n.end(), self.rack_end) > 0))
                {
                    self.rack_xmit = Some(n.xmit);
                    self.rack_end = n.end();
                }
                self.rack_rtt = rtt;
                if !n.is(EVER_RETRANS) {
                    out.rtt_sample = Some(rtt);
                    match self.min_rtt {
                        Some((min, at)) if rtt >= min && now - at < MIN_RTT_WINDOW => {}
                        _ => self.min_rtt = Some((rtt, now)),
                    }
                }
            }
            if !n.is(EVER_RETRANS) && diff(n.end(), self.fack) < 0 {
                self.reordering_seen = true;
            }
            if diff(n.end(), self.fack) > 0 {
                self.fack = n.end();
            }
        }
        if diff(ack, self.fack) > 0 {
            self.fack = ack;
        }

        // The episode ends once its window is acknowledged.
        if let Some(point) = self.recovery_point {
            if diff(ack, point) >= 0 {
                self.recovery_point = None;
                self.dupack_marked = false;
            }
        }
        out.advanced = advanced;
        // RFC 8985 §7.4.2 (as Linux's `tcp_process_tlp_ack`): whether the
        // probe repaired a loss. An ACK at its end does not tell: it may be
        // the original's, late (a delayed ACK, jitter past the probe
        // timeout), so the probe's own ACK, a D-SACK or a duplicate, is
        // waited for; an ACK beyond the end says the peer lacked what the
        // probe resent (found by a review: the late original's ACK cut the
        // congestion window for no loss). SACK feedback below the end hands
        // the losses to RACK.
        if let Some(end) = self.probe_end {
            let past = diff(ack, end);
            let over = if !self.probe_retrans {
                past >= 0 || out.sacked > 0
            } else if out.dsack {
                true
            } else if past > 0 {
                out.probe_repaired = true;
                true
            } else if past == 0 {
                !advanced && out.sacked == 0
            } else {
                out.sacked > 0
            };
            if over {
                self.probe_end = None;
            }
        }
        if diff(ack, self.retransmit_hint) > 0 {
            self.retransmit_hint = ack;
        }
        out
    }

    /// RFC 8985 §6.2 step 4: the reordering window, given the smoothed RTT.
    fn reo_wnd(&self, srtt: u32) -> u32 {
        if !self.reordering_seen
            && (self.in_recovery() || self.sacked_segments >= usize::from(DUP_THRESH))
        {
            return 0;
        }
        let min = self.min_rtt.map_or(0, |(m, _)| m);
        let wnd = u32::from(self.reo_wnd_mult).saturating_mul(min) / 4;
        // Capped at SRTT once there is one (the estimator's first sample
        // may come after RACK's).
        if srtt == 0 { wnd } else { wnd.min(srtt) }
    }

    /// RACK's loss detection (RFC 8985 §6.2 step 5) at `now`: marks the
    /// segments sent before the most recently delivered one whose time has
    /// run out; returns when the next one's will (the reordering timer), if
    /// any waits. `srtt` is the smoothed RTT in microseconds. Returns also
    /// how many it marked.
    pub fn detect_loss(&mut self, now: Instant, srtt: u32) -> (Option<Instant>, usize) {
        let Some(rack_xmit) = self.rack_xmit else {
            return (None, 0);
        };
        // Nothing was delivered out of order and nothing is retransmitted:
        // every segment was sent after the last one delivered.
        if self.sacked_out == 0 && self.retrans_out == 0 && self.lost_out == 0 {
            return (None, 0);
        }
        let reo_wnd = Duration::from_micros(u64::from(self.reo_wnd(srtt)));
        let rtt = Duration::from_micros(u64::from(self.rack_rtt));
        let mut timer: Option<Instant> = None;
        let mut marked = 0;
        for i in 0..self.segs.len() {
            let s = self.segs[i];
            if s.is(SACKED) || (s.is(LOST) && !s.is(RETRANS)) {
                continue;
            }
            let before =
                s.xmit < rack_xmit || (s.xmit == rack_xmit && diff(s.end(), self.rack_end) < 0);
            if !before {
                continue;
            }
            let deadline = s.xmit + rtt + reo_wnd;
            if deadline <= now {
                self.mark_lost(i);
                self.stats.lost_rack += 1;
                marked += 1;
            } else {
                timer = Some(timer.map_or(deadline, |t| t.min(deadline)));
            }
        }
        (timer, marked)
    }

    /// Without SACK: the third duplicate ACK marks the first segment lost
    /// (RFC 5681 §3.2), once per episode. Returns whether it did.
    pub fn on_third_dupack(&mut self) -> bool {
        if self.dupack_marked || self.segs.is_empty() {
            return false;
        }
        self.dupack_marked = true;
        if self.segs[0].is(LOST) && !self.segs[0].is(RETRANS) {
            return false;
        }
        self.mark_lost(0);
        self.stats.lost_dupack += 1;
        true
    }

    /// Without SACK, in an episode the third duplicate ACK began: an ACK
    /// that advanced SND.UNA (`advanced`) to `ack`, short of the episode's
    /// end, is a partial ACK (RFC 6582 §3.2 step 5, NewReno): the segment it
    /// stops at was lost too, and goes at once. Returns whether it marked
    /// it. (Without it, a second loss in the window waited for the RTO:
    /// RACK has nothing to compare without SACK, the third-duplicate-ACK
    /// rule fires once an episode, and the probe needs SACK. Found by a
    /// review.)
    pub fn on_partial_ack(&mut self, ack: TcpSeqNumber, advanced: bool) -> bool {
        let Some(point) = self.recovery_point else {
            return false;
        };
        let Some(front) = self.segs.front() else {
            return false;
        };
        if !advanced || !self.dupack_marked || diff(ack, point) >= 0 {
            return false;
        }
        // Already lost and waiting, or resent in this episode (RACK or the
        // RTO repair a retransmission that is lost again).
        if front.is(LOST) || front.is(RETRANS) {
            return false;
        }
        self.mark_lost(0);
        self.stats.lost_dupack += 1;
        true
    }

    /// A retransmission timeout (RFC 8985 §6.3): every segment not SACKed
    /// is lost.
    pub fn on_timeout(&mut self, snd_nxt: TcpSeqNumber) {
        self.stats.timeouts += 1;
        for i in 0..self.segs.len() {
            if !self.segs[i].is(SACKED) {
                if !(self.segs[i].is(LOST) && !self.segs[i].is(RETRANS)) {
                    self.stats.lost_timeout += 1;
                }
                self.mark_lost(i);
            }
        }
        self.probe_end = None;
        // The timeout is its own congestion response (RFC 5681 §3.1):
        // losses of this window start no episode.
        self.recovery_point = Some(snd_nxt);
    }

    /// Losses were found: whether they start an episode (the congestion
    /// response is due), which then lasts until `snd_nxt` is acknowledged.
    pub fn start_episode(&mut self, snd_nxt: TcpSeqNumber) -> bool {
        if self.recovery_point.is_some() {
            return false;
        }
        self.recovery_point = Some(snd_nxt);
        self.stats.recoveries += 1;
        self.recoveries_without_dsack = self.recoveries_without_dsack.saturating_add(1);
        if self.recoveries_without_dsack >= REO_WND_RESET_RECOVERIES {
            self.reo_wnd_mult = 1;
            self.recoveries_without_dsack = 0;
        }
        true
    }

    /// Segments deemed lost whose retransmission has not gone.
    pub fn has_lost(&self) -> bool {
        self.waiting > 0
    }

    /// RFC 8985 §7.2: the probe timeout, given the smoothed RTT
    /// (microseconds, 0 before a sample), the worst peer delayed ACK to
    /// allow for a single segment in flight, and the RTO.
    pub fn pto(&self, srtt: u32, delayed_ack: Duration, rto: Duration) -> Option<Duration> {
        if srtt == 0 {
            return None;
        }
        // At least PTO_MIN: two SRTTs of a few microseconds are less than
        // a real path's jitter (a probe per window where nothing was lost).
        let mut pto = Duration::from_micros(2 * u64::from(srtt)).max(PTO_MIN);
        if self.segs.len() == 1 {
            pto += delayed_ack;
        }
        Some(pto.min(rto))
    }

    #[cfg(test)]
    fn flags_of(&self, start: u32) -> u8 {
        self.segs
            .iter()
            .find(|s| s.start == TcpSeqNumber(start as i32))
            .map_or(0xff, |s| s.flags)
    }
}

#[cfg(test)]
mod test {
    use super::*;

    const MSS: usize = 100;

    fn seq(n: u32) -> TcpSeqNumber {
        TcpSeqNumber(n as i32)
    }

    fn at(ms: i64) -> Instant {
        Instant::from_millis(ms)
    }

    /// `n` segments of MSS octets from 1000, one per millisecond from t=0.
    fn sent(n: usize) -> Recovery {
        let mut r = Recovery::new();
        for i in 0..n {
            r.on_transmit(seq(1000 + (i * MSS) as u32), MSS, false, at(i as i64));
        }
        r
    }

    fn block(l: u32, r: u32) -> Option<(u32, u32)> {
        Some((l, r))
    }

    #[test]
    fn cumulative_acks_pop_segments_and_pipe_is_the_flight() {
        let mut r = sent(4);
        assert_eq!(r.len(), 4);
        assert_eq!(r.pipe(400), 400);
        let out = r.on_ack(seq(1200), &[], seq(1400), at(10));
        assert_eq!(r.len(), 2);
        assert_eq!(
            out.rtt_sample,
            Some(9_000),
            "the newest delivered: sent at 1 ms"
        );
        assert_eq!(r.pipe(200), 200);
        // A partial ACK inside a segment keeps the rest.
        r.on_ack(seq(1250), &[], seq(1400), at(11));
        assert_eq!(r.len(), 2);
        assert_eq!(r.segs[0].start, seq(1250));
        assert_eq!(r.segs[0].len, 50);
        r.on_ack(seq(1400), &[], seq(1400), at(12));
        assert_eq!(r.len(), 0);
    }

    /// RFC 6675's example shape: segments 1-10 sent, 3 and 5 lost; the
    /// SACK blocks mark the rest, RACK finds the holes once their time
    /// has run out, and only the holes go again.
    #[test]
    fn sacked_segments_are_not_retransmitted_holes_are() {
        let mut r = sent(10);
        let nxt = seq(2000);
        // ACK 1200 (segments 1, 2) with SACK of 4 (1300..1400), then of
        // 4 and 6..10.
        r.on_ack(seq(1200), &[block(1300, 1400)], nxt, at(20));
        assert_eq!(r.sacked_out(), 100);
        r.on_ack(
            seq(1200),
            &[block(1500, 2000), block(1300, 1400)],
            nxt,
            at(21),
        );
        assert_eq!(r.sacked_out(), 600);
        assert_eq!(r.stats().sack_blocks, 3);
        // The newest delivered was sent at 9 ms and took 12 ms: 3 (sent at
        // 2 ms) and 5 (4 ms) went more than that RTT before it, with no
        // reordering window (3 or more segments SACKed, no reordering
        // seen): lost at once.
        let (timer, marked) = r.detect_loss(at(21), 12_000);
        assert_eq!((timer, marked), (None, 2), "{:?}", r.segs);
        assert_eq!(r.pipe(800), 0, "800 out: 600 SACKed, 200 lost");
        let first = r.next_retransmit().unwrap();
        assert_eq!(
            first,
            Retransmit {
                start: seq(1200),
                data_len: 100,
                fin: false
            }
        );
        r.on_transmit(first.start, first.data_len, false, at(31));
        assert_eq!(r.pipe(800), 100, "its retransmission is in flight");
        let second = r.next_retransmit().unwrap();
        assert_eq!(second.start, seq(1400));
        r.on_transmit(second.start, second.data_len, false, at(31));
        assert_eq!(r.next_retransmit(), None, "SACKed segments do not go again");
        assert_eq!(r.stats().retransmits, 2);
        // The retransmissions arrive: everything is acknowledged.
        r.on_ack(seq(2000), &[], nxt, at(40));
        assert_eq!((r.len(), r.pipe(0)), (0, 0));
    }

    #[test]
    fn a_lost_retransmission_is_found_and_sent_again() {
        let mut r = sent(6);
        let nxt = seq(1600);
        r.on_ack(seq(1100), &[block(1200, 1600)], nxt, at(10));
        r.detect_loss(at(20), 5_000);
        let s = r.next_retransmit().unwrap();
        assert_eq!(s.start, seq(1100));
        r.on_transmit(s.start, s.data_len, false, at(20));
        // A new segment sent after the retransmission is delivered, the
        // retransmission is not: it is lost again once its time runs out.
        r.on_transmit(seq(1600), MSS, false, at(21));
        r.on_ack(
            seq(1100),
            &[block(1600, 1700), block(1200, 1600)],
            seq(1700),
            at(30),
        );
        assert_eq!(r.next_retransmit(), None, "its retransmission is in flight");
        // Sent 1 ms before the newest delivered, which took 9 ms: lost at 29.
        assert_eq!(r.detect_loss(at(30), 5_000).1, 1);
        assert_eq!(r.next_retransmit().unwrap().start, seq(1100));
    }

    /// A segment delivered out of order inside the reordering window is not
    /// lost; the reordering timer says when to look again.
    #[test]
    fn reordering_within_the_window_waits_for_the_timer() {
        let mut r = Recovery::new();
        // One segment per 0.1 ms: the one at 1000 is overtaken by the next.
        for i in 0..4u32 {
            let t = Instant::from_micros(i64::from(i) * 100);
            r.on_transmit(seq(1000 + i * 100), MSS, false, t);
        }
        // The first ACK: 1000's successor SACKed after 1 ms (min RTT 1 ms).
        r.on_ack(
            seq(1000),
            &[block(1100, 1200)],
            seq(1400),
            Instant::from_micros(1_100),
        );
        // 1000 was sent 0.1 ms before it: due at 0 + 1 ms + reo_wnd (min RTT
        // / 4 = 250 us, one SACKed segment is below DupThresh).
        let (timer, marked) = r.detect_loss(Instant::from_micros(1_100), 1_000);
        assert_eq!(marked, 0);
        assert_eq!(timer, Some(Instant::from_micros(1_250)));
        // It arrives in time: nothing is lost, and reordering is now known.
        r.on_ack(seq(1200), &[], seq(1400), Instant::from_micros(1_200));
        assert!(r.reordering_seen);
        assert_eq!(r.detect_loss(Instant::from_micros(1_300), 1_000), (None, 0));
        assert_eq!(r.stats().lost_rack, 0);
    }

    #[test]
    fn implausible_blocks_are_ignored_and_counted() {
        let mut r = sent(4);
        let nxt = seq(1400);
        let out = r.on_ack(
            seq(1100),
            &[
                block(1300, 1200), // inverted
                block(1300, 1500), // beyond SND.NXT
                block(900, 1000),  // below SND.UNA: a D-SACK only when first
                block(1200, 1300),
            ],
            nxt,
            at(5),
        );
        assert!(!out.dsack);
        assert_eq!(r.stats().sack_blocks_ignored, 3);
        assert_eq!(r.stats().sack_blocks, 1);
        assert_eq!(r.sacked_out(), 100);
        // Overlapping and repeated blocks mark each segment once.
        r.on_ack(
            seq(1100),
            &[block(1200, 1400), block(1200, 1300)],
            nxt,
            at(6),
        );
        assert_eq!(r.sacked_out(), 200);
        r.on_ack(seq(1100), &[block(1200, 1400)], nxt, at(7));
        assert_eq!(r.sacked_out(), 200);
        // A block that covers part of a segment marks nothing of it.
        let mut r = sent(2);
        r.on_ack(seq(1000), &[block(1150, 1200)], seq(1200), at(5));
        assert_eq!(r.sacked_out(), 0);
    }

    #[test]
    fn a_dsack_is_told_apart_and_widens_the_reordering_window() {
        let mut r = sent(4);
        let nxt = seq(1400);
        r.on_ack(seq(1200), &[], nxt, at(10));
        // Below the cumulative ACK: D-SACK.
        let out = r.on_ack(seq(1200), &[block(1000, 1100)], nxt, at(11));
        assert!(out.dsack);
        assert_eq!(r.reo_wnd_mult, 2);
        // Within the second block: D-SACK too.
        let out = r.on_ack(
            seq(1200),
            &[block(1300, 1400), block(1300, 1400)],
            nxt,
            at(12),
        );
        assert!(out.dsack);
        assert_eq!(r.stats().dsacks, 2);
        assert_eq!(r.reo_wnd_mult, 2, "once per round trip");
        assert_eq!(r.sacked_out(), 100, "the second block is an ordinary SACK");
    }

    #[test]
    fn a_receiver_that_reneges_on_its_sacks_gets_the_segment_again() {
        let mut r = sent(4);
        let nxt = seq(1400);
        r.on_ack(seq(1000), &[block(1100, 1200)], nxt, at(5));
        assert_eq!(r.sacked_out(), 100);
        // The ACK stops at the segment it SACKed: it no longer holds it.
        r.on_ack(seq(1100), &[], nxt, at(6));
        assert_eq!(r.stats().reneged, 1);
        assert_eq!(r.sacked_out(), 0);
        assert_eq!(r.next_retransmit().unwrap().start, seq(1100));
    }

    /// A block that starts at SND.UNA is not plausible (the peer would
    /// have acknowledged it): honoured, it marked the first segment SACKed;
    /// each repeat of it tripped the renege rule, which marked the segment
    /// lost, then SACKed it again and counted that as progress (restarting
    /// the retransmission timer), and a timeout skipped it: never resent.
    #[test]
    fn a_block_at_snd_una_is_ignored() {
        let mut r = sent(3);
        let nxt = seq(1300);
        for t in [5, 6] {
            let out = r.on_ack(seq(1000), &[block(1000, 1100)], nxt, at(t));
            assert_eq!(out.sacked, 0, "no progress");
            assert_eq!(r.sacked_out(), 0);
        }
        assert_eq!(r.stats().sack_blocks_ignored, 2);
        assert_eq!(r.stats().reneged, 0);
        r.on_timeout(nxt);
        assert_eq!(r.next_retransmit().unwrap().start, seq(1000));
    }

    /// After a renege (RFC 2018 §8) the blocks that SACK again what the
    /// peer had SACKed before are no progress; a segment never SACKed
    /// before is.
    #[test]
    fn a_sack_again_after_a_renege_is_no_progress() {
        let mut r = sent(4);
        let nxt = seq(1400);
        let out = r.on_ack(seq(1000), &[block(1100, 1300)], nxt, at(5));
        assert_eq!(out.sacked, 200);
        // The ACK stops at 1100, which it SACKed: a renege; its block SACKs
        // 1200 again.
        let out = r.on_ack(seq(1100), &[block(1200, 1300)], nxt, at(6));
        assert_eq!(r.stats().reneged, 1);
        assert_eq!(out.sacked, 0, "1200 was SACKed before");
        assert_eq!(out.rtt_sample, Some(6_000), "from 1000, not from 1200");
        assert_eq!(r.sacked_out(), 100);
        assert_eq!(r.next_retransmit().unwrap().start, seq(1100));
        let out = r.on_ack(seq(1100), &[block(1200, 1400)], nxt, at(7));
        assert_eq!(out.sacked, 100, "1300 is new");
        assert_eq!(r.stats().reneged, 1);
    }

    /// A segment SACKed before a renege, then lost and sent again: its
    /// SACK now is the repair, and counts (it counted nothing while the
    /// retransmission left the renege's mark on it).
    #[test]
    fn a_sack_of_a_segment_sent_again_after_a_renege_is_progress() {
        let mut r = sent(4);
        let nxt = seq(1400);
        r.on_ack(seq(1000), &[block(1100, 1400)], nxt, at(5));
        // The ACK stops at 1100, which it SACKed: a renege.
        r.on_ack(seq(1100), &[], nxt, at(6));
        assert_eq!(r.stats().reneged, 1);
        r.on_timeout(nxt);
        while let Some(s) = r.next_retransmit() {
            r.on_transmit(s.start, s.data_len, false, at(20));
        }
        let out = r.on_ack(seq(1100), &[block(1200, 1400)], nxt, at(30));
        assert_eq!(out.sacked, 200, "the retransmissions' SACK is progress");
    }

    #[test]
    fn a_timeout_marks_every_unsacked_segment_lost_once() {
        let mut r = sent(5);
        let nxt = seq(1500);
        r.on_ack(seq(1000), &[block(1200, 1300)], nxt, at(10));
        r.on_timeout(nxt);
        assert_eq!(r.stats().lost_timeout, 4);
        assert_eq!(r.pipe(500), 0);
        let mut order = Vec::new();
        while let Some(s) = r.next_retransmit() {
            order.push(s.start.0 as u32);
            r.on_transmit(s.start, s.data_len, false, at(20));
        }
        assert_eq!(
            order,
            [1000, 1100, 1300, 1400],
            "every hole once, in order; not 1200"
        );
        assert!(
            !r.start_episode(nxt),
            "the timeout was this window's response"
        );
    }

    #[test]
    fn without_sack_the_third_duplicate_ack_marks_the_first_segment() {
        let mut r = sent(3);
        assert!(r.on_third_dupack());
        assert!(!r.on_third_dupack(), "once per episode");
        assert_eq!(r.next_retransmit().unwrap().start, seq(1000));
        assert_eq!(r.flags_of(1000) & LOST, LOST);
    }

    #[test]
    fn episodes_start_once_per_window() {
        let mut r = sent(3);
        assert!(r.start_episode(seq(1300)));
        assert!(!r.start_episode(seq(1300)));
        r.on_ack(seq(1200), &[], seq(1300), at(5));
        assert!(r.in_recovery());
        r.on_ack(seq(1300), &[], seq(1300), at(6));
        assert!(!r.in_recovery());
        assert_eq!(r.stats().recoveries, 1);
    }

    #[test]
    fn the_fin_is_logged_and_retransmitted_with_its_segment() {
        let mut r = Recovery::new();
        r.on_transmit(seq(1000), 51, true, at(0));
        r.on_timeout(seq(1051));
        assert_eq!(
            r.next_retransmit(),
            Some(Retransmit {
                start: seq(1000),
                data_len: 50,
                fin: true
            })
        );
    }

    #[test]
    fn the_log_is_bounded() {
        let mut r = Recovery::new();
        for i in 0..SEGMENTS_MAX + 10 {
            r.on_transmit(seq(i as u32), 1, false, at(0));
        }
        assert_eq!(r.len(), SEGMENTS_MAX);
        assert!(!r.has_room());
    }

    #[test]
    fn the_probe_timeout_allows_for_a_delayed_ack_of_a_lone_segment() {
        let r = sent(1);
        let rto = Duration::from_millis(200);
        assert_eq!(r.pto(0, Duration::from_millis(40), rto), None);
        assert_eq!(
            r.pto(1_000, Duration::from_millis(40), rto),
            Some(Duration::from_millis(42))
        );
        let r = sent(2);
        assert_eq!(
            r.pto(1_000, Duration::from_millis(40), rto),
            Some(Duration::from_millis(2))
        );
    }
}
