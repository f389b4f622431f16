//! One connection's decoder: the per-direction state machine of the
//! startup phase and Full Operation.

use std::collections::{BTreeSet, VecDeque};
use std::net::SocketAddr;

use dpwarp_capture::packet::TcpSegment;
use dpwarp_capture::reassembly::{ConnInfo, Dir};
use rnic_engine::wire::{mpa_marker, mpa_rr};

use super::fpdu::{is_terminate, is_zero_length_rtr, plausible_fpdu, CrcMode, Cut, Params};
use super::{
    Body, CrcVerdict, Message, MpaFrame, Progress, Sink, TcpEvent, BAD_CRC_RESYNC, HELD_MAX,
    PENDING_BYTES_MAX,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing seen yet.
    Start,
    /// Collecting the startup frame.
    Startup,
    /// Full Operation: FPDUs.
    Fpdu,
    /// Full Operation after losing sync: looking for an FPDU at a segment start.
    Resync,
    /// After an MPA reject: ULP bytes.
    Raw,
    /// Not iWARP, or nothing more can be decoded.
    Ignore,
}

/// Where a run of buffered octets came from.
#[derive(Debug, Clone, Copy)]
pub(super) struct Span {
    pub(super) offset: u64,
    pub(super) len: u64,
    pub(super) frame: u64,
    pub(super) ts_ns: u64,
    pub(super) seq: u32,
}

#[derive(Debug)]
struct Direction {
    state: State,
    /// `buf[start..]` holds the octets not yet consumed. Consuming moves `start`
    /// only; the consumed front is dropped when more octets arrive, so cutting many
    /// small FPDUs out of a large buffer costs no more than its length.
    buf: Vec<u8>,
    start: usize,
    /// Stream offset of `buf[start]`.
    base: u64,
    spans: VecDeque<Span>,
    /// Stream offset of the first octet of Full Operation.
    fpdu_base: Option<u64>,
    params: Option<Params>,
    frame: Option<MpaFrame>,
    fpdus: u64,
    /// The most recent span, kept after its octets are consumed so that a
    /// FIN or gap after them still has a sequence number.
    last: Option<Span>,
    /// Looking for the first FPDU of a direction whose capture starts in Full
    /// Operation (`--port`): octets skipped before it were cut off by the
    /// start of the capture, not lost.
    seeking: bool,
    /// Octets skipped while looking for an FPDU since the last one found.
    skipped: u64,
    /// While resynchronising: segment starts at or above this offset have
    /// not been looked at yet.
    resync_scanned: u64,
    /// While resynchronising: the segment starts that could not be judged
    /// yet, as (the stream offset the buffer must reach to judge it, its
    /// offset). A start judged not to begin an FPDU is never looked at
    /// again, and one not judged only once the buffer reaches what it
    /// needs, so that finding the next FPDU costs each start a judgement
    /// or two, not one per segment that arrives (found by a review: 64,000
    /// one-octet segments took 31 s).
    resync_undecided: BTreeSet<(u64, u64)>,
    /// The same starts by offset, for the first of them.
    resync_offsets: BTreeSet<u64>,
    /// Segment starts judged while resynchronising, in all (what a test
    /// checks grows with the starts, not with their square).
    resync_judged: u64,
}

impl Direction {
    pub(super) fn new() -> Direction {
        Direction {
            state: State::Start,
            buf: Vec::new(),
            start: 0,
            base: 0,
            spans: VecDeque::new(),
            fpdu_base: None,
            params: None,
            frame: None,
            fpdus: 0,
            last: None,
            seeking: false,
            skipped: 0,
            resync_scanned: 0,
            resync_undecided: BTreeSet::new(),
            resync_offsets: BTreeSet::new(),
            resync_judged: 0,
        }
    }

    /// The octets not yet consumed.
    fn bytes(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    fn len(&self) -> usize {
        self.buf.len() - self.start
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends octets, first dropping the consumed front: at most once per
    /// appended run, which is what keeps consuming linear.
    fn append(&mut self, data: &[u8]) {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(data);
    }

    fn end(&self) -> u64 {
        self.base + self.len() as u64
    }

    fn span_at(&self, offset: u64) -> Option<&Span> {
        self.spans
            .iter()
            .find(|s| s.offset <= offset && offset < s.offset + s.len)
    }

    /// Drops `n` octets from the front of the buffer.
    fn consume(&mut self, n: usize) {
        let n = n.min(self.len());
        self.start += n;
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        self.base += n as u64;
        while self
            .spans
            .front()
            .is_some_and(|s| s.offset + s.len <= self.base)
        {
            self.spans.pop_front();
        }
    }

    fn clear(&mut self) {
        let n = self.len();
        self.consume(n);
    }
}

#[derive(Debug)]
pub(super) struct Conn {
    pub(super) info: ConnInfo,
    pub(super) forced: bool,
    /// `Some(true)` once a direction began with an MPA key (or the port was
    /// named), `Some(false)` once one began with anything else.
    pub(super) iwarp: Option<bool>,
    dirs: [Direction; 2],
    pub(super) held: Vec<Message>,
    /// Consecutive FPDUs with a bad CRC, per direction.
    pub(super) bad_crc_run: [u32; 2],
    /// The direction's sender closed (FIN) or the connection was reset.
    pub(super) ended: [bool; 2],
    /// The frame of the first RST. A reset connection is kept (see
    /// `Decoder::end`) and what it leaves unfinished is cut, not a problem.
    pub(super) reset: Option<u64>,
    /// Its key in `Decoder::reset_conns`.
    pub(super) reset_key: Option<u64>,
    /// The direction's first FPDU must be an RFC 6581 RTR (the initiator of
    /// a connection both sides agreed to run peer-to-peer).
    pub(super) rtr_expected: [bool; 2],
}

pub(super) fn index(dir: Dir) -> usize {
    match dir {
        Dir::ClientToServer => 0,
        Dir::ServerToClient => 1,
    }
}

impl Conn {
    pub(super) fn new(info: ConnInfo, forced: bool) -> Conn {
        Conn {
            info,
            forced,
            iwarp: None,
            dirs: [Direction::new(), Direction::new()],
            held: Vec::new(),
            bad_crc_run: [0, 0],
            ended: [false, false],
            reset: None,
            reset_key: None,
            rtr_expected: [false, false],
        }
    }

    fn endpoints(&self, dir: Dir) -> (SocketAddr, SocketAddr) {
        match dir {
            Dir::ClientToServer => (self.info.client, self.info.server),
            Dir::ServerToClient => (self.info.server, self.info.client),
        }
    }

    /// A message about octets `first..=last` of `dir`'s stream.
    fn message(&self, dir: Dir, first: u64, last: u64, body: Body) -> Message {
        let d = &self.dirs[index(dir)];
        let first_span = d
            .span_at(first)
            .or_else(|| d.spans.back())
            .copied()
            .or(d.last);
        let last_span = d.span_at(last).copied().or(first_span);
        let (src, dst) = self.endpoints(dir);
        let seq = first_span.map_or(0, |s| {
            s.seq.wrapping_add(first.wrapping_sub(s.offset) as u32)
        });
        Message {
            frame: last_span.map_or(0, |s| s.frame),
            first_frame: first_span.map_or(0, |s| s.frame),
            ts_ns: last_span.map_or(0, |s| s.ts_ns),
            conn: self.info.id,
            dir,
            src,
            dst,
            offset: first,
            tcp_seq: seq,
            segment_start: first_span.is_some_and(|s| s.offset == first),
            body,
        }
    }

    fn problem(&self, dir: Dir, at: u64, text: String, sink: &mut Sink<'_>) {
        sink.push(self.message(dir, at, at, Body::Problem(text)));
    }

    fn decide(&mut self, iwarp: bool, sink: &mut Sink<'_>) {
        match (self.iwarp, iwarp) {
            (Some(true), _) | (Some(false), false) => return,
            (None | Some(false), true) => sink.summary.iwarp_connections += 1,
            (None, false) => {}
        }
        self.iwarp = Some(iwarp);
        let held = std::mem::take(&mut self.held);
        if iwarp || sink.all {
            held.into_iter().for_each(|m| sink.push(m));
        } else {
            held.iter().for_each(|m| not_shown(m, sink));
        }
    }

    pub(super) fn emit_tcp(&mut self, message: Message, sink: &mut Sink<'_>) {
        match self.iwarp {
            Some(true) => sink.push(message),
            Some(false) if sink.all => sink.push(message),
            None if self.held.len() < HELD_MAX => self.held.push(message),
            Some(false) | None => not_shown(&message, sink),
        }
    }

    /// A problem with the segment `seg` of this connection, which reassembly
    /// found in `frame`: a retransmission that disagrees with the first copy,
    /// or octets before the start of the stream.
    pub(super) fn segment_problem(
        &mut self,
        frame: u64,
        seg: &TcpSegment<'_>,
        text: String,
        sink: &mut Sink<'_>,
    ) {
        let dir = if seg.src == self.info.client {
            Dir::ClientToServer
        } else {
            Dir::ServerToClient
        };
        // Its stream offset, from the latest span's: a retransmission lies
        // behind it.
        let offset = self.dirs[index(dir)].last.map_or(0, |s| {
            let behind = i64::from(seg.seq.wrapping_sub(s.seq) as i32);
            s.offset.saturating_add_signed(behind)
        });
        let (src, dst) = self.endpoints(dir);
        let message = Message {
            frame,
            first_frame: frame,
            ts_ns: sink.now_ns,
            conn: self.info.id,
            dir,
            src,
            dst,
            offset,
            tcp_seq: seg.seq,
            segment_start: true,
            body: Body::Problem(text),
        };
        // Like a TCP line: shown with the connection, if it is iWARP.
        self.emit_tcp(message, sink);
    }

    pub(super) fn data(&mut self, dir: Dir, span: Span, data: &[u8], sink: &mut Sink<'_>) {
        let d = &mut self.dirs[index(dir)];
        if d.state == State::Ignore {
            // Nothing to decode, but keep the stream position: a FIN or
            // RST line still says where the stream ended.
            d.base = span.offset + span.len;
            d.last = Some(span);
            return;
        }
        if d.is_empty() {
            d.base = span.offset;
        }
        if span.offset != d.end() {
            // Reassembly delivers in order and reports gaps; anything else
            // is a bug there, handled as a gap here rather than a panic.
            let (offset, len) = (d.end(), span.offset.saturating_sub(d.end()));
            self.gap(dir, span.frame, offset, len, sink);
        }
        let d = &mut self.dirs[index(dir)];
        d.append(data);
        d.spans.push_back(span);
        d.last = Some(span);
        while let Progress::Again = self.step(dir, sink) {}
    }

    fn step(&mut self, dir: Dir, sink: &mut Sink<'_>) -> Progress {
        let d = &mut self.dirs[index(dir)];
        if d.is_empty() {
            return Progress::NeedMore;
        }
        match d.state {
            State::Start => self.step_start(dir, sink),
            State::Startup => self.step_startup(dir, sink),
            State::Fpdu => self.step_fpdu(dir, sink),
            State::Resync => self.step_resync(dir, sink),
            State::Raw => {
                let (first, last) = (d.base, d.end() - 1);
                let len = d.len();
                sink.push(self.message(dir, first, last, Body::NonMpa { len }));
                self.dirs[index(dir)].clear();
                Progress::NeedMore
            }
            State::Ignore => {
                d.clear();
                Progress::NeedMore
            }
        }
    }

    fn step_start(&mut self, dir: Dir, sink: &mut Sink<'_>) -> Progress {
        let d = &self.dirs[index(dir)];
        let bytes = d.bytes();
        let prefix = &bytes[..bytes.len().min(mpa_rr::KEY_REQUEST.len())];
        let keyish =
            mpa_rr::KEY_REQUEST.starts_with(prefix) || mpa_rr::KEY_REPLY.starts_with(prefix);
        let whole = prefix.len() == mpa_rr::KEY_REQUEST.len();
        if keyish && !whole {
            return Progress::NeedMore;
        }
        if keyish {
            self.decide(true, sink);
            self.dirs[index(dir)].state = State::Startup;
        } else if self.forced {
            self.decide(true, sink);
            let d = &mut self.dirs[index(dir)];
            d.fpdu_base = Some(d.base);
            d.params = Some(Params {
                crc: CrcMode::Auto,
                markers: false,
            });
            // A capture that starts while traffic flows may start inside an
            // FPDU: its first octets are then no ULPDU_Length. Look for a
            // plausible FPDU at a segment start, as after lost sync.
            d.state = State::Resync;
            d.seeking = true;
        } else {
            self.decide(false, sink);
            self.dirs[index(dir)].state = State::Ignore;
            self.wake(dir.reverse(), sink);
        }
        Progress::Again
    }

    /// Lets `dir` decode what it holds after something changed elsewhere
    /// (the other direction ended or can no longer send its startup frame).
    pub(super) fn wake(&mut self, dir: Dir, sink: &mut Sink<'_>) {
        while let Progress::Again = self.step(dir, sink) {}
    }

    fn step_startup(&mut self, dir: Dir, sink: &mut Sink<'_>) -> Progress {
        let d = &self.dirs[index(dir)];
        if d.len() < mpa_rr::HEADER_LEN {
            return Progress::NeedMore;
        }
        let header = mpa_rr::Packet::new_unchecked(d.bytes());
        let at = d.base;
        if usize::from(header.pd_length()) > mpa_rr::PRIVATE_DATA_LEN_MAX {
            let text = format!(
                "invalid MPA frame: PD_Length {} exceeds 512 (RFC 5044 §7.1: improperly \
                 formatted, the receiver closes the connection)",
                header.pd_length()
            );
            self.problem(dir, at, text, sink);
            self.dirs[index(dir)].state = State::Ignore;
            self.wake(dir.reverse(), sink);
            return Progress::Again;
        }
        let frame_len = header.frame_len();
        if d.len() < frame_len {
            return Progress::NeedMore;
        }
        let packet = mpa_rr::Packet::new_unchecked(&d.bytes()[..frame_len]);
        let Ok(repr) = mpa_rr::Repr::parse(&packet) else {
            let text = format!(
                "invalid MPA frame: S=1 (enhanced) with PD_Length {} (< 4 octets of enhanced data)",
                packet.pd_length()
            );
            self.problem(dir, at, text, sink);
            self.dirs[index(dir)].state = State::Ignore;
            self.wake(dir.reverse(), sink);
            return Progress::Again;
        };
        let frame = MpaFrame::from_repr(&repr);
        sink.push(self.message(dir, at, at + frame_len as u64 - 1, Body::Mpa(frame.clone())));
        let d = &mut self.dirs[index(dir)];
        d.consume(frame_len);
        d.fpdu_base = Some(d.base);
        d.state = State::Fpdu;
        d.frame = Some(frame);
        self.startup_done(dir, sink);
        // The other direction may hold octets that waited for this frame.
        let other = dir.reverse();
        while let Progress::Again = self.step(other, sink) {}
        Progress::Again
    }

    /// After a startup frame: a reject ends MPA; two known frames fix the
    /// parameters of both directions.
    fn startup_done(&mut self, dir: Dir, sink: &mut Sink<'_>) {
        let [a, b] = [&self.dirs[0].frame, &self.dirs[1].frame];
        let reject = [a, b].iter().any(|f| f.as_ref().is_some_and(|f| f.reject));
        if reject {
            for d in &mut self.dirs {
                if matches!(d.state, State::Fpdu | State::Start) {
                    d.state = State::Raw;
                }
            }
            return;
        }
        let (Some(a), Some(b)) = (a, b) else { return };
        if a.kind == b.kind {
            let text = match a.kind {
                mpa_rr::FrameKind::Request => {
                    "both sides sent an MPA Request (initiator/initiator)"
                }
                mpa_rr::FrameKind::Reply => "both sides sent an MPA Reply",
            };
            let at = self.dirs[index(dir)].base;
            self.problem(dir, at, text.to_string(), sink);
        }
        let crc = if a.crc || b.crc {
            CrcMode::On
        } else {
            CrcMode::Off
        };
        // M in a frame: its sender wants markers in what it receives.
        let params = [
            Params {
                crc,
                markers: b.markers,
            },
            Params {
                crc,
                markers: a.markers,
            },
        ];
        let p2p = |f: &MpaFrame| f.enhanced.is_some_and(|e| e.peer_to_peer);
        let p2p_agreed = p2p(a) && p2p(b);
        let kinds = [a.kind, b.kind];
        for (i, d) in self.dirs.iter_mut().enumerate() {
            d.params = Some(params[i]);
            self.rtr_expected[i] = p2p_agreed && kinds[i] == mpa_rr::FrameKind::Request;
        }
    }
}

impl Conn {
    /// The parameters of `dir`, or `None` while they are still unknown and
    /// the direction may wait for the other side's startup frame: until it
    /// holds more than [`PENDING_BYTES_MAX`], or the frame can no longer come.
    fn params(&mut self, dir: Dir, sink: &mut Sink<'_>) -> Option<Params> {
        let d = &self.dirs[index(dir)];
        if let Some(params) = d.params {
            return Some(params);
        }
        if d.len() <= PENDING_BYTES_MAX && !self.other_frame_lost(dir) {
            return None;
        }
        Some(self.fall_back(dir, sink))
    }

    /// Whether the other direction's startup frame, not seen yet, can no
    /// longer arrive: that direction is not decoded (not MPA, an invalid
    /// frame, a gap before its frame), it ended, or the connection was reset.
    fn other_frame_lost(&self, dir: Dir) -> bool {
        let o = index(dir.reverse());
        let other = &self.dirs[o];
        other.frame.is_none()
            && (other.state == State::Ignore || self.ended[o] || self.reset.is_some())
    }

    /// Stops waiting for the other side's frame: CRC auto-detected, no
    /// markers, as for a capture that starts after the startup.
    fn fall_back(&mut self, dir: Dir, sink: &mut Sink<'_>) -> Params {
        let at = self.dirs[index(dir)].base;
        let text = "the other side's MPA frame is not in the capture: decoding with CRC \
                    auto-detected and no markers"
            .to_string();
        self.problem(dir, at, text, sink);
        let params = Params {
            crc: CrcMode::Auto,
            markers: false,
        };
        self.dirs[index(dir)].params = Some(params);
        params
    }

    /// Before a direction's buffered octets are given up: if they wait for
    /// the other side's frame, decode them without it, since the frame will
    /// not come in time (one-sided captures, a lost Reply).
    fn settle(&mut self, dir: Dir, sink: &mut Sink<'_>) {
        let d = &self.dirs[index(dir)];
        if d.state == State::Fpdu && d.params.is_none() && !d.is_empty() {
            self.fall_back(dir, sink);
            self.wake(dir, sink);
        }
    }

    fn step_fpdu(&mut self, dir: Dir, sink: &mut Sink<'_>) -> Progress {
        let Some(params) = self.params(dir, sink) else {
            return Progress::NeedMore;
        };
        let d = &self.dirs[index(dir)];
        let start = d.base;
        let position = start - d.fpdu_base.unwrap_or(start);
        if params.markers && !mpa_marker::is_fpdu_start(position) {
            let text = format!("an FPDU cannot start inside a marker (position {position})");
            self.problem(dir, start, text, sink);
            self.dirs[index(dir)].state = State::Resync;
            return Progress::Again;
        }
        let Some(cut) = Cut::measure(position, d.bytes(), params.markers) else {
            return Progress::NeedMore;
        };
        if d.len() < cut.stream_len {
            return Progress::NeedMore;
        }
        let mut fpdu = cut.decode(position, &d.bytes()[..cut.stream_len], params.crc);
        let i = index(dir);
        if self.rtr_expected[i] && d.fpdus == 0 {
            fpdu.rtr = is_zero_length_rtr(&fpdu.ulpdu);
            // An initiator that cannot send any RTR the Reply allows
            // terminates instead (RFC 6581 §9.2: No matching RTR option).
            if !fpdu.rtr && !is_terminate(&fpdu.ulpdu) {
                let text = "peer-to-peer initiator's first FPDU is not a zero-length \
                            Send/Write/Read RTR (RFC 6581 §9.2)";
                self.problem(dir, start, text.to_string(), sink);
            }
        }
        // Auto-detected CRCs count too: with `--port` or without the other
        // side's frame a misread ULPDU_Length shows only as bad CRCs.
        let bad = fpdu.crc == CrcVerdict::Bad;
        let end = start + cut.stream_len as u64 - 1;
        sink.push(self.message(dir, start, end, Body::Fpdu(fpdu)));
        let d = &mut self.dirs[i];
        d.consume(cut.stream_len);
        d.fpdus += 1;
        self.bad_crc_run[i] = if bad { self.bad_crc_run[i] + 1 } else { 0 };
        if self.bad_crc_run[i] >= BAD_CRC_RESYNC {
            self.bad_crc_run[i] = 0;
            let at = self.dirs[i].base;
            let text = format!(
                "{BAD_CRC_RESYNC} bad CRCs in a row: ULPDU_Length is not trusted, \
                 resynchronising at a TCP segment start"
            );
            self.problem(dir, at, text, sink);
            self.dirs[i].state = State::Resync;
        }
        Progress::Again
    }

    /// Looks for an FPDU at a TCP segment start. A candidate whose
    /// ULPDU_Length points past the octets held cannot be judged yet; it is
    /// passed over for a later segment start that holds a whole plausible
    /// FPDU (a CRC, or DDP and RDMAP versions and a zero CRC field, in
    /// octets that would be the middle of the candidate's ULPDU is too
    /// unlikely to be chance), so that a capture starting inside a long
    /// FPDU, whose first octets read as a long length, does not wait for
    /// octets that never come.
    fn step_resync(&mut self, dir: Dir, sink: &mut Sink<'_>) -> Progress {
        let i = index(dir);
        let d = &mut self.dirs[i];
        let params = d.params.unwrap_or(Params {
            crc: CrcMode::Auto,
            markers: false,
        });
        let fpdu_base = d.fpdu_base.unwrap_or(d.base);
        let (base, end) = (d.base, d.end());
        // A start's verdict: Some(true) begins an FPDU, Some(false) never
        // will, None not yet, with the offset the buffer must reach.
        let judge = |d: &Direction, offset: u64| -> Result<bool, u64> {
            let position = offset - fpdu_base;
            let octets = &d.bytes()[(offset - base) as usize..];
            if params.markers && !mpa_marker::is_fpdu_start(position) {
                return Ok(false);
            }
            plausible_fpdu(position, octets, params).ok_or_else(|| {
                Cut::measure(position, octets, params.markers)
                    .map_or(end + 1, |cut| offset + cut.stream_len as u64)
            })
        };
        let mut found: Option<u64> = None;
        // Judges the start at `offset`: the earliest FPDU found is kept,
        // one not judgeable yet waits for what it needs.
        let file = |d: &mut Direction, found: &mut Option<u64>, offset: u64| {
            d.resync_judged += 1;
            match judge(d, offset) {
                Ok(true) if found.is_none_or(|f| offset < f) => *found = Some(offset),
                Ok(_) => {}
                Err(need) => {
                    d.resync_undecided.insert((need, offset));
                    d.resync_offsets.insert(offset);
                }
            }
        };
        // Starts that could not be judged before and now can; those the
        // buffer no longer holds (skipped, or lost to a gap) go.
        while let Some(&(need, offset)) = d.resync_undecided.first() {
            if need > end && offset >= base {
                break;
            }
            d.resync_undecided.pop_first();
            d.resync_offsets.remove(&offset);
            if offset < base {
                continue;
            }
            file(d, &mut found, offset);
        }
        // Starts not looked at yet.
        let from = d.resync_scanned.max(base);
        let first_new = d.spans.partition_point(|s| s.offset < from);
        for k in first_new..d.spans.len() {
            let offset = d.spans[k].offset;
            file(d, &mut found, offset);
        }
        d.resync_scanned = end;
        // The first start that may yet begin one (a later episode's
        // leftovers below the buffer do not count).
        let undecided = d.resync_offsets.range(base..).next().copied();
        let found = found.and_then(|f| d.span_at(f).copied());
        let Some(next) = found else {
            // Skip the segment starts known not to start an FPDU; wait at
            // the first that may.
            let skip = undecided.map_or(d.len(), |u| (u - d.base) as usize);
            d.consume(skip);
            d.skipped += skip as u64;
            return Progress::NeedMore;
        };
        let skip = (next.offset - d.base) as usize;
        d.consume(skip);
        d.resync_undecided.clear();
        d.resync_offsets.clear();
        d.resync_scanned = 0;
        let skipped = d.skipped + skip as u64;
        let seeking = d.seeking;
        d.seeking = false;
        d.skipped = 0;
        d.state = State::Fpdu;
        if !seeking {
            let text = format!("resynchronised: FPDUs again from frame {}", next.frame);
            self.problem(dir, next.offset, text, sink);
        } else if skipped > 0 {
            // Like an FPDU the capture ends inside: octets it cannot decode.
            let text = format!(
                "the capture starts inside an FPDU: {skipped} octets skipped to the first \
                 FPDU, in frame {}",
                next.frame
            );
            self.problem(dir, next.offset, text, sink);
        }
        Progress::Again
    }

    pub(super) fn gap(&mut self, dir: Dir, frame: u64, offset: u64, len: u64, sink: &mut Sink<'_>) {
        let i = index(dir);
        let state = self.dirs[i].state;
        if state == State::Ignore {
            self.dirs[i].base = offset + len;
            return;
        }
        self.flush_incomplete(dir, Some(frame), false, sink);
        let mut message = self.message(dir, offset, offset, Body::Gap { len });
        message.ts_ns = sink.now_ns;
        message.frame = frame;
        message.first_frame = frame;
        message.segment_start = false;
        if self.iwarp == Some(true) {
            sink.push(message);
        }
        let d = &mut self.dirs[i];
        d.base = offset + len;
        d.state = match state {
            State::Start | State::Startup => State::Ignore,
            State::Fpdu | State::Resync => State::Resync,
            other => other,
        };
        if d.state == State::Ignore {
            self.wake(dir.reverse(), sink);
        }
    }

    /// A FIN ends `dir`: what it leaves unfinished is a problem. An RST
    /// ends both directions, but octets may still arrive for them (see
    /// `Decoder::end`); what they leave unfinished is cut later.
    pub(super) fn tcp_end(&mut self, dir: Dir, frame: u64, event: TcpEvent, sink: &mut Sink<'_>) {
        if event == TcpEvent::Rst {
            self.reset.get_or_insert(frame);
        } else if self.reset.is_none() {
            self.flush_incomplete(dir, Some(frame), false, sink);
        }
        let end = self.dirs[index(dir)].end();
        let mut message = self.message(dir, end, end, Body::Tcp(event));
        message.ts_ns = sink.now_ns;
        message.frame = frame;
        message.first_frame = frame;
        message.segment_start = false;
        self.emit_tcp(message, sink);
    }

    /// Reports octets left over in a direction that cannot complete any
    /// more: a problem, or, when a reset ended the connection (`reset`),
    /// what the reset discarded. Octets that only waited for the other
    /// side's startup frame are decoded first.
    pub(super) fn flush_incomplete(
        &mut self,
        dir: Dir,
        frame: Option<u64>,
        reset: bool,
        sink: &mut Sink<'_>,
    ) {
        self.settle(dir, sink);
        let i = index(dir);
        let d = &self.dirs[i];
        if d.seeking && d.skipped + d.len() as u64 > 0 && !reset {
            let text = format!(
                "no FPDU found at any segment start: {} octets not decoded",
                d.skipped + d.len() as u64
            );
            let at = d.base;
            self.problem(dir, at, text, sink);
            let d = &mut self.dirs[i];
            d.skipped = 0;
            d.clear();
            return;
        }
        if d.is_empty() {
            return;
        }
        let what = match d.state {
            State::Startup => Some("an MPA startup frame"),
            State::Fpdu => Some("an FPDU"),
            // The undecided prefix of a key, or junk while resynchronising.
            State::Start | State::Resync | State::Raw | State::Ignore => None,
        };
        if let Some(what) = what {
            let body = if reset {
                Body::Cut { what, len: d.len() }
            } else {
                Body::Problem(format!(
                    "stream ends inside {what}: {} octets cannot complete",
                    d.len()
                ))
            };
            let mut message = self.message(dir, d.base, d.end() - 1, body);
            if let Some(frame) = frame {
                // The frame that ended the stream, unless octets the capture
                // held after it (after an RST) came later.
                message.frame = message.frame.max(frame);
            }
            sink.push(message);
        }
        self.dirs[i].clear();
    }
}

/// A line of a connection that is not shown (not iWARP, without `--all`): a
/// problem in it (a retransmission that differs) still counts, so that
/// `--all` changes only what is printed, and `--strict` sees it.
pub(super) fn not_shown(message: &Message, sink: &mut Sink<'_>) {
    if matches!(message.body, Body::Problem(_)) {
        sink.summary.problems += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::super::Summary;
    use super::*;
    use dpwarp_capture::reassembly::ConnId;

    /// Cutting FPDUs out of a buffer moves none of the octets left behind:
    /// with a move per FPDU, 256 KiB of 8-octet FPDUs waiting for the other
    /// side's frame cost 4 GiB of copying.
    #[test]
    fn consuming_moves_nothing() {
        let mut d = Direction::new();
        d.append(&vec![7; PENDING_BYTES_MAX]);
        let rest = d.bytes().as_ptr();
        for k in 1..=1000 {
            d.consume(8);
            assert_eq!(d.bytes().as_ptr(), rest.wrapping_add(8 * k), "moved at {k}");
        }
        assert_eq!(d.len(), PENDING_BYTES_MAX - 8000);
        assert_eq!(d.base, 8000);
        // More octets: the consumed front goes, once.
        d.append(&[1, 2]);
        assert_eq!(d.len(), PENDING_BYTES_MAX - 7998);
        assert_eq!(&d.bytes()[d.len() - 2..], &[1, 2]);
        d.clear();
        assert!(d.is_empty() && d.buf.is_empty());
    }

    /// Looking for an FPDU (`--port`) over one-octet segments whose octets
    /// read as the longest ULPDU_Length: every start stays undecided until
    /// about 64 KiB follow it. Each start is judged a bounded number of
    /// times, not once per segment that arrives after it: 20,000 segments
    /// made 200 million judgements, 64,000 took 31 s (found by a review).
    #[test]
    fn resynchronising_judges_each_start_a_few_times() {
        let info = ConnInfo {
            id: ConnId(0),
            client: "10.0.0.1:50000".parse().unwrap(),
            server: "10.0.0.2:7174".parse().unwrap(),
        };
        let mut conn = Conn::new(info, true);
        let (mut out, mut summary) = (Vec::new(), Summary::default());
        let mut sink = Sink {
            out: &mut out,
            summary: &mut summary,
            all: false,
            now_ns: 0,
        };
        let n = 20_000u64;
        for k in 0..n {
            let span = Span {
                offset: k,
                len: 1,
                frame: k + 1,
                ts_ns: 0,
                seq: k as u32,
            };
            conn.data(Dir::ClientToServer, span, &[0xff], &mut sink);
        }
        let d = &conn.dirs[index(Dir::ClientToServer)];
        assert_eq!(d.state, State::Resync);
        assert!(
            d.resync_judged <= 3 * n,
            "{} judgements for {n} segment starts",
            d.resync_judged
        );
        assert!(d.resync_judged >= n, "every start judged");
    }
}
