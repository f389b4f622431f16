//! TCP stream reassembly: Wireshark's "Follow TCP Stream", streaming and bounded.
//!
//! Reading list: RFC 9293 (sequence space; SYN and FIN each occupy one sequence number),
//! RFC 7323 §2 (window scaling), RFC 5961 §3 (which RST to believe).
//!
//! Segments go in with [`Reassembler::push`] in capture order; [`Event`]s come out as soon
//! as they are known. Each connection is keyed by its unordered address pair, and each of
//! its two directions is reassembled on its own:
//!
//! * Stream offset 0 is the byte after the SYN (ISN + 1), or, if no SYN was captured for
//!   that direction, the sequence number of the first segment seen in it that carries
//!   data or a FIN: a bare ACK or RST occupies no sequence number and may come from an
//!   older connection (a challenge ACK, RFC 5961 §4). A SYN-ACK that acknowledges the
//!   client's SYN replaces the start an earlier SYN-ACK (one that answered an old
//!   duplicate SYN, RFC 9293 §3.5) fixed, as long as nothing of the direction has been
//!   delivered. Bytes before the start cannot be placed and are counted in
//!   [`Stats::dropped_bytes`].
//! * Once the handshake fixed a direction's start, only it does: a segment of the
//!   address pair's previous connection, captured after the new SYN, must not. A segment
//!   with data or a FIN is stray, counted in [`Stats::stray_segments`] and otherwise
//!   ignored, if its sequence numbers lie outside the direction's receive window (RFC
//!   9293 §3.10.7.4) or before its start, or, while the direction's start is not known
//!   yet, if it does not acknowledge the other direction's SYN within that direction's
//!   window (RFC 9293 §3.10.7.3: in SYN-SENT "If SND.UNA < SEG.ACK =< SND.NXT, then the
//!   ACK is acceptable"; the old connection's segments acknowledge its own sequence
//!   numbers). The window is what the receiver advertised, scaled as its SYN said
//!   (RFC 7323 §2.2), times [`KNOWN_WINDOW_MARGIN`], either side of the next byte to
//!   deliver, when the capture holds both SYNs; without them the window scale is not
//!   known, and it is [`WINDOW_BYTES_MAX`]. A segment outside it that
//!   acknowledges the other direction inside that one's window is taken all the same:
//!   the capture lost more than a window of the direction. So is the fourth of stray
//!   data segments in a row that each start where the last ended
//!   ([`STRAY_RUN_RESYNC`]): the capture lost more than a window of both directions (or
//!   of one whose other side's SYN-ACK it lacks); what lies before is a gap at once. A
//!   direction whose start the first data fixed (no SYN captured) takes every segment,
//!   as before.
//! * An RST resets the connection only if it is acceptable (RFC 5961 §3.2, RFC 9293
//!   §3.10.7.4): its sequence number inside the window of a direction whose start is
//!   known, or, while it is not, with an ACK of the other side's SYN (§3.10.7.3). A late
//!   RST of the address pair's previous connection is stray, like its data.
//! * Offsets are `u64`; sequence numbers are unwrapped relative to the next expected
//!   byte, so wrap-around at 2^32 is seamless as long as no segment lands more than 2 GiB
//!   from where the stream is, which TCP's window rules out.
//! * The first copy of every byte wins. A later copy (a retransmission or overlapping
//!   segment) is trimmed; if it differs from the copy kept, that is counted in
//!   [`Stats::conflicting_bytes`]. Delivered bytes are remembered for comparison up to
//!   [`Limits::history_bytes_max`] per direction.
//! * Out-of-order data waits in a per-direction buffer. When a limit in [`Limits`] is
//!   exceeded, the hole in front of the buffer is declared lost with an [`Event::Gap`] and
//!   delivery resumes after it; [`Reassembler::finish`] does the same for every buffer.
//! * An RST aborts the connection (RFC 9293 §3.10.7.4): no retransmission will fill a
//!   hole in either direction any more, so both buffers are delivered, holes as gaps,
//!   before the [`Event::Rst`].
//! * A connection that ended (both FINs delivered, or reset) stays tracked, so that
//!   segments captured after the end (the last ACK, a retransmitted FIN, data the
//!   capture reordered behind the RST) still belong to it, but only until its place is
//!   needed: when [`Limits::connections_max`] are tracked, the one that ended first is
//!   flushed and forgotten to make room. Only open connections can fill the table.
//!
//! # Which frame an event names
//!
//! A [`Event::Data`] names the frame that carried its bytes, so one segment that fills a
//! hole and thereby releases buffered segments yields one `Data` for its own bytes and one
//! for each released segment, in stream order, each with its own frame and time stamp.
//! Contiguous bytes are never merged across frames: a decoder that reports "this FPDU
//! came in frames 17-19" needs that attribution. A [`Event::Gap`] names the frame of the
//! first bytes after the gap (or, for bytes a snapshot length cut off, the frame that was
//! cut; or, for a gap before a FIN, the frame with the FIN).

mod half;

use core::fmt;
use std::collections::BTreeMap;
use std::net::SocketAddr;

use self::half::{Half, SegmentIn};
use crate::packet::{TcpSegment, WindowScale};

/// Default for [`Limits::buffered_bytes_max`]: 16 MiB, several times the largest TCP
/// window Linux autotunes to by default (`tcp_rmem` max 6 MiB), so reordering within a
/// window never produces a false gap.
pub const BUFFERED_BYTES_MAX: usize = 16 << 20;
/// Default for [`Limits::buffered_segments_max`]: enough 1448-byte segments to fill
/// [`BUFFERED_BYTES_MAX`], so the byte limit is normally the one that acts.
pub const BUFFERED_SEGMENTS_MAX: usize = 16_384;
/// Default for [`Limits::buffered_bytes_total_max`]: 256 MiB over all connections.
pub const BUFFERED_BYTES_TOTAL_MAX: usize = 256 << 20;
/// Default for [`Limits::connections_max`]: connections tracked at once.
pub const CONNECTIONS_MAX: usize = 65_536;
/// Default for [`Limits::history_bytes_max`]: 64 KiB, an unscaled TCP window.
pub const HISTORY_BYTES_MAX: usize = 64 << 10;
/// The receive window an observer assumes when it judges whether a segment belongs to
/// a connection (RFC 9293 §3.10.7.4, RFC 5961 §3) and the capture lacks a SYN of it,
/// so the window scale is not known: octets this far either side of the next octet to
/// deliver. Not an advertised window but a bound above what Linux autotunes to by
/// default, as for [`BUFFERED_BYTES_MAX`]: a segment of an older connection on the
/// same address pair, whose sequence numbers are unrelated to this one's, lands inside
/// it with a probability of 2 * 16 MiB / 4 GiB, under 1%.
pub const WINDOW_BYTES_MAX: usize = BUFFERED_BYTES_MAX;
/// With both SYNs captured, the observer's window is the largest window the receiver
/// advertised (scaled, RFC 7323 §2.2) times this: the capture may have missed the
/// window updates that let the sender go further (a receiver that autotunes its buffer
/// can double its window in a round trip), and the observer's next octet to deliver
/// may lag behind the receiver's while a hole waits.
pub const KNOWN_WINDOW_MARGIN: usize = 4;
/// The smallest window the observer assumes with both SYNs captured: 64 KiB, about
/// the largest window without scaling, so that a zero window (RFC 9293 §3.8.6.1: the
/// sender probes it with new octets) or a tiny one does not make the connection's own
/// segments stray; an older connection's lands inside with a probability of
/// 2 * 64 KiB / 4 GiB.
pub const KNOWN_WINDOW_BYTES_MIN: usize = 64 << 10;
/// The largest window the observer assumes with both SYNs captured: RFC 7323 §2.3,
/// "the shift count MUST be limited to 14 (which allows windows of 2^30 = 1 GiB)". It
/// keeps the window within the 2^31 octets either side of the next one that sequence
/// numbers unwrap to.
pub const KNOWN_WINDOW_BYTES_MAX: usize = 1 << 30;
/// RFC 7323 §2.3: "If a Window Scale option is received with a shift.cnt value larger
/// than 14, the TCP SHOULD log the error but MUST use 14 instead of the specified
/// value."
pub const WINDOW_SCALE_SHIFT_MAX: u8 = 14;

/// Bounds on the memory a [`Reassembler`] uses, whatever the capture holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Out-of-order payload bytes buffered per direction.
    pub buffered_bytes_max: usize,
    /// Out-of-order pieces buffered per direction; bounds the per-piece overhead that a
    /// flood of tiny segments would otherwise cost.
    pub buffered_segments_max: usize,
    /// Out-of-order payload bytes buffered over all connections. When it is exceeded, the
    /// direction that just received data gives up its holes.
    pub buffered_bytes_total_max: usize,
    /// Connections tracked at once. Connections that ended make room for new ones;
    /// segments that would open another while this many are open are ignored and
    /// counted in [`Stats::ignored_segments`].
    pub connections_max: usize,
    /// Delivered bytes remembered per direction to check retransmissions against. 0
    /// turns the check off for data already delivered.
    pub history_bytes_max: usize,
}

/// Identifies a connection: 0 for the first seen in the capture, then counting up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(pub u32);

/// Who is who in a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnInfo {
    /// The connection's identifier.
    pub id: ConnId,
    /// The side that sent the SYN; with no SYN captured, the sender of the first segment.
    pub client: SocketAddr,
    /// The other side.
    pub server: SocketAddr,
}

/// A direction of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Dir {
    /// From [`ConnInfo::client`] to [`ConnInfo::server`].
    ClientToServer,
    /// From [`ConnInfo::server`] to [`ConnInfo::client`].
    ServerToClient,
}

/// What reassembly found out, in the order it found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A new connection; always precedes its other events.
    Open {
        /// The new connection.
        conn: ConnId,
        /// Its endpoints.
        info: ConnInfo,
    },
    /// The next bytes of a direction's stream.
    Data {
        /// The connection.
        conn: ConnId,
        /// The direction.
        dir: Dir,
        /// The frame that carried these bytes.
        frame: u64,
        /// That frame's capture time.
        ts_ns: u64,
        /// TCP sequence number of the first byte.
        seq: u32,
        /// Stream offset of the first byte; 0 is the first data byte of the direction.
        offset: u64,
        /// The bytes; never empty.
        data: Vec<u8>,
    },
    /// Bytes of a direction's stream that are not in the capture. The stream continues at
    /// `offset + len`.
    Gap {
        /// The connection.
        conn: ConnId,
        /// The direction.
        dir: Dir,
        /// The frame that revealed the gap (see the module documentation).
        frame: u64,
        /// Stream offset of the first missing byte.
        offset: u64,
        /// Number of missing bytes; never 0.
        len: u64,
    },
    /// The direction's stream ended with a FIN; emitted once all bytes before the FIN
    /// have been delivered or declared lost.
    Fin {
        /// The connection.
        conn: ConnId,
        /// The direction whose sender closed.
        dir: Dir,
        /// The frame with the first FIN.
        frame: u64,
    },
    /// The sender in `dir` reset the connection; emitted once per direction, as soon as
    /// the RST is seen, after everything either direction had buffered (holes as gaps).
    /// Segments captured after it may still deliver bytes of the connection.
    Rst {
        /// The connection.
        conn: ConnId,
        /// The direction the RST travelled in.
        dir: Dir,
        /// The frame with the RST.
        frame: u64,
    },
}

/// Counters over everything a [`Reassembler`] has seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Segments pushed.
    pub segments: u64,
    /// Payload bytes trimmed because an earlier copy of them was kept.
    pub duplicate_bytes: u64,
    /// Of `duplicate_bytes`, those whose value differed from the copy kept. Non-zero
    /// means a retransmission carried different data, which a correct sender never does.
    pub conflicting_bytes: u64,
    /// The frame of the first segment with conflicting bytes.
    pub first_conflict_frame: Option<u64>,
    /// Bytes reported in [`Event::Gap`]s.
    pub gap_bytes: u64,
    /// Payload bytes before the start of their stream, which cannot be placed.
    pub dropped_bytes: u64,
    /// Segments outside the connection's windows, taken to be an older connection's on
    /// the same address pair, and ignored (see the module documentation).
    pub stray_segments: u64,
    /// Directions taken back after [`STRAY_RUN_RESYNC`] stray data segments in a
    /// row that followed on from each other: the capture had lost more than a
    /// window of them (what was lost shows as a gap).
    pub resynced: u64,
    /// Segments ignored because [`Limits::connections_max`] connections were open, or
    /// because 2^32 - 1 connection ids had been handed out.
    pub ignored_segments: u64,
}

/// Reassembles the TCP streams of a capture. See the module documentation.
#[derive(Debug)]
pub struct Reassembler {
    limits: Limits,
    /// Open connections by address pair, the smaller address first.
    conns: BTreeMap<(SocketAddr, SocketAddr), Conn>,
    next_id: u32,
    /// Connections that ended, by when they ended: the first to go when the table is
    /// full.
    ended: BTreeMap<u64, (SocketAddr, SocketAddr)>,
    /// Connections that ended so far; orders `ended`.
    ended_count: u64,
    /// Out-of-order payload bytes buffered over all connections.
    buffered_total: usize,
    stats: Stats,
}

/// One connection: both directions and what decides when a new one begins.
#[derive(Debug)]
struct Conn {
    info: ConnInfo,
    halves: [Half; 2],
    /// The client's initial sequence number, if its SYN was seen.
    client_isn: Option<u32>,
    /// A FIN or RST was seen in either direction.
    closed: bool,
    /// An RST was seen: both directions have been flushed once.
    reset: bool,
    rst_reported: [bool; 2],
    /// Its key in [`Reassembler::ended`], once it ended.
    ended_at: Option<u64>,
    /// Per direction, the stray data segments in a row that followed on from
    /// each other: the sequence number the next would start at, and how many
    /// ([`STRAY_RUN_RESYNC`]).
    stray_runs: [Option<(u32, u8)>; 2],
    /// Per direction, what its sender advertised of its own receive window.
    advertised: [Advertised; 2],
}

/// What the sender of one direction advertised of its receive window (the window of
/// the other direction), as far as the capture shows.
#[derive(Debug, Clone, Copy, Default)]
struct Advertised {
    /// The Window Scale option of the SYN after which the direction's stream starts,
    /// once captured.
    syn_scale: Option<WindowScale>,
    /// That SYN's window field: RFC 7323 §2.2, "The window field in a segment where
    /// the SYN bit is set (i.e., a <SYN> or <SYN,ACK>) MUST NOT be scaled."
    syn_window: u16,
    /// The largest window field of the direction's other segments taken, unscaled.
    window_max: u16,
}

/// Stray data segments in a row, each starting where the last ended, after
/// which a direction is taken to have lost more than a window from the capture
/// and the next such segment is taken (a gap, then its octets). An older
/// connection that still sends new data after the new connection's SYN does
/// not happen (its four-tuple is the new one's); the capture losing more than
/// the window of both directions at once, or of one whose other side's
/// SYN-ACK was not captured, does (found by a review: the rest of such a
/// connection was left out as stray, without a gap or a problem).
pub const STRAY_RUN_RESYNC: u8 = 3;

/// What a direction needs to report events and keep within limits.
struct Ctx<'a> {
    conn: ConnId,
    dir: Dir,
    out: &'a mut Vec<Event>,
    stats: &'a mut Stats,
    buffered_total: &'a mut usize,
    limits: &'a Limits,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            buffered_bytes_max: BUFFERED_BYTES_MAX,
            buffered_segments_max: BUFFERED_SEGMENTS_MAX,
            buffered_bytes_total_max: BUFFERED_BYTES_TOTAL_MAX,
            connections_max: CONNECTIONS_MAX,
            history_bytes_max: HISTORY_BYTES_MAX,
        }
    }
}

impl Dir {
    /// The opposite direction.
    pub const fn reverse(self) -> Dir {
        match self {
            Dir::ClientToServer => Dir::ServerToClient,
            Dir::ServerToClient => Dir::ClientToServer,
        }
    }

    const fn index(self) -> usize {
        match self {
            Dir::ClientToServer => 0,
            Dir::ServerToClient => 1,
        }
    }
}

impl Reassembler {
    /// Creates a reassembler that stays within `limits`.
    pub fn new(limits: Limits) -> Self {
        Reassembler {
            limits,
            conns: BTreeMap::new(),
            next_id: 0,
            ended: BTreeMap::new(),
            ended_count: 0,
            buffered_total: 0,
            stats: Stats::default(),
        }
    }

    /// Feeds one segment, captured in `frame` at `ts_ns`, and appends the resulting
    /// events to `out`.
    ///
    /// A pure SYN (no ACK) on an address pair whose connection has seen a FIN or RST, or
    /// whose client SYN had a different initial sequence number, ends that connection
    /// (as [`Self::finish`] would) and opens a new one. A repeated SYN with the same
    /// initial sequence number is a retransmission and opens nothing.
    pub fn push(&mut self, frame: u64, ts_ns: u64, seg: &TcpSegment<'_>, out: &mut Vec<Event>) {
        self.stats.segments += 1;
        let key = if seg.src <= seg.dst {
            (seg.src, seg.dst)
        } else {
            (seg.dst, seg.src)
        };
        if !self.admit(key, seg, out) {
            self.stats.ignored_segments += 1;
            return;
        }
        let Some(conn) = self.conns.get_mut(&key) else {
            return;
        };
        let dir = if seg.src == conn.info.client {
            Dir::ClientToServer
        } else {
            Dir::ServerToClient
        };
        let mut ctx = Ctx {
            conn: conn.info.id,
            dir,
            out: &mut *out,
            stats: &mut self.stats,
            buffered_total: &mut self.buffered_total,
            limits: &self.limits,
        };
        let accepted = conn.segment(frame, ts_ns, seg, &mut ctx);
        if seg.rst && accepted {
            if !conn.reset {
                conn.reset = true;
                flush_halves(
                    conn,
                    out,
                    &mut self.stats,
                    &mut self.buffered_total,
                    &self.limits,
                );
            }
            let reported = &mut conn.rst_reported[dir.index()];
            if !*reported {
                *reported = true;
                out.push(Event::Rst {
                    conn: conn.info.id,
                    dir,
                    frame,
                });
            }
        }
        if conn.ended_at.is_none() && conn.ended() {
            conn.ended_at = Some(self.ended_count);
            self.ended.insert(self.ended_count, key);
            self.ended_count += 1;
            // Nothing will be delivered any more that a retransmission could be checked
            // against; an ended connection holds its place cheaply.
            conn.halves.iter_mut().for_each(Half::release);
        }
    }

    /// Ends the capture: every buffered byte is delivered, with a [`Event::Gap`] for
    /// each hole, and a [`Event::Fin`] follows for each direction that sent one.
    /// Connections are flushed in [`ConnId`] order, client-to-server first.
    ///
    /// The reassembler is empty afterwards; segments pushed later start new connections,
    /// whose ids continue the count.
    pub fn finish(&mut self, out: &mut Vec<Event>) {
        let mut conns: Vec<Conn> = core::mem::take(&mut self.conns).into_values().collect();
        self.ended.clear();
        conns.sort_by_key(|conn| conn.info.id);
        for conn in conns {
            self.close(conn, out);
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The limits this reassembler was created with.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Makes sure the connection for `key` exists, replacing it if `seg` starts a new
    /// one; `false` if no connection may be opened.
    fn admit(
        &mut self,
        key: (SocketAddr, SocketAddr),
        seg: &TcpSegment<'_>,
        out: &mut Vec<Event>,
    ) -> bool {
        if let Some(conn) = self.conns.get(&key) {
            if !conn.starts_new(seg) {
                return true;
            }
            if let Some(old) = self.conns.remove(&key) {
                self.close(old, out);
            }
        }
        if self.conns.len() >= self.limits.connections_max {
            // An ended connection only waits for stragglers; a new one matters more.
            if let Some((_, oldest)) = self.ended.pop_first() {
                if let Some(old) = self.conns.remove(&oldest) {
                    self.close(old, out);
                }
            }
        }
        if self.conns.len() >= self.limits.connections_max || self.next_id == u32::MAX {
            return false;
        }
        let id = ConnId(self.next_id);
        self.next_id += 1;
        // The sender of a SYN-ACK is the server; otherwise the first sender is taken to
        // be the client, which is right whenever the SYN was captured.
        let (client, server) = if seg.syn && seg.ack_flag {
            (seg.dst, seg.src)
        } else {
            (seg.src, seg.dst)
        };
        let info = ConnInfo { id, client, server };
        out.push(Event::Open { conn: id, info });
        self.conns.insert(key, Conn::new(info));
        true
    }

    /// Flushes both directions of a connection that is going away.
    fn close(&mut self, mut conn: Conn, out: &mut Vec<Event>) {
        if let Some(at) = conn.ended_at {
            self.ended.remove(&at);
        }
        flush_halves(
            &mut conn,
            out,
            &mut self.stats,
            &mut self.buffered_total,
            &self.limits,
        );
    }
}

/// Delivers everything both directions of `conn` buffered, declaring each hole a gap.
fn flush_halves(
    conn: &mut Conn,
    out: &mut Vec<Event>,
    stats: &mut Stats,
    buffered_total: &mut usize,
    limits: &Limits,
) {
    for dir in [Dir::ClientToServer, Dir::ServerToClient] {
        let mut ctx = Ctx {
            conn: conn.info.id,
            dir,
            out: &mut *out,
            stats: &mut *stats,
            buffered_total: &mut *buffered_total,
            limits,
        };
        conn.halves[dir.index()].flush(&mut ctx);
    }
}

impl Conn {
    fn new(info: ConnInfo) -> Self {
        Conn {
            info,
            halves: [Half::default(), Half::default()],
            client_isn: None,
            closed: false,
            reset: false,
            rst_reported: [false; 2],
            ended_at: None,
            stray_runs: [None; 2],
            advertised: [Advertised::default(); 2],
        }
    }

    /// The receive window an observer assumes for the receiver of `dir`: what it
    /// advertised, scaled, with a margin ([`KNOWN_WINDOW_MARGIN`], between
    /// [`KNOWN_WINDOW_BYTES_MIN`] and [`KNOWN_WINDOW_BYTES_MAX`]) if the capture holds
    /// both SYNs, and [`WINDOW_BYTES_MAX`] if not. RFC 7323 §2.2: "This option is an
    /// offer, not a promise; both sides MUST send Window Scale options in their <SYN>
    /// segments to enable window scaling in either direction." The scale of the
    /// receiver's windows is the shift count of its own SYN.
    fn window_bytes(&self, dir: Dir) -> usize {
        let sender = &self.advertised[dir.index()];
        let receiver = &self.advertised[dir.reverse().index()];
        let shift = match (sender.syn_scale, receiver.syn_scale) {
            (Some(WindowScale::Shift(_)), Some(WindowScale::Shift(shift))) => {
                shift.min(WINDOW_SCALE_SHIFT_MAX)
            }
            (Some(WindowScale::Absent), Some(WindowScale::Absent | WindowScale::Shift(_)))
            | (Some(WindowScale::Shift(_)), Some(WindowScale::Absent)) => 0,
            // A SYN not captured, or whose options could not be read: the scale is
            // not known.
            (None | Some(WindowScale::Unknown), _) | (_, None | Some(WindowScale::Unknown)) => {
                return WINDOW_BYTES_MAX
            }
        };
        let advertised =
            (usize::from(receiver.window_max) << shift).max(usize::from(receiver.syn_window));
        advertised
            .saturating_mul(KNOWN_WINDOW_MARGIN)
            .clamp(KNOWN_WINDOW_BYTES_MIN, KNOWN_WINDOW_BYTES_MAX)
    }

    /// Notes the window `seg`, taken in direction `dir`, advertises; `own_syn` if it
    /// is the SYN after which the direction's stream starts.
    fn note_window(&mut self, seg: &TcpSegment<'_>, dir: Dir, own_syn: bool) {
        let advertised = &mut self.advertised[dir.index()];
        if own_syn {
            advertised.syn_scale = Some(seg.window_scale);
            advertised.syn_window = seg.window;
        } else if !seg.syn {
            advertised.window_max = advertised.window_max.max(seg.window);
        }
    }

    /// Whether the connection is over: reset, or both FINs delivered.
    fn ended(&self) -> bool {
        self.reset || self.halves.iter().all(Half::fin_delivered)
    }

    /// Whether `seg` is the SYN of a new connection on this address pair.
    fn starts_new(&self, seg: &TcpSegment<'_>) -> bool {
        if !seg.syn || seg.ack_flag {
            return false;
        }
        match self.client_isn {
            Some(isn) => isn != seg.seq,
            None => self.closed,
        }
    }

    /// Whether `seg`, in direction `dir`, may belong to this connection: the
    /// acceptability tests of RFC 9293 §3.10.7.4 and RFC 5961 §3, as an observer can
    /// make them (see the module documentation). A SYN is judged by
    /// [`Conn::starts_new`]; a bare ACK changes nothing, so it is taken.
    fn acceptable(&self, seg: &TcpSegment<'_>, dir: Dir) -> bool {
        if seg.syn {
            return true;
        }
        let half = &self.halves[dir.index()];
        let other = &self.halves[dir.reverse().index()];
        let occupied = seg.payload_wire_len.max(seg.payload.len()) + usize::from(seg.fin);
        if seg.rst {
            // RFC 5961 §3.2: "If the RST bit is set and the sequence number is outside
            // the current receive window, silently drop the segment." Inside it, an RST
            // that is not exactly RCV.NXT draws a challenge ACK; the observer cannot tell
            // RCV.NXT (what the receiver has), so it takes every RST inside.
            if let Some(inside) = half.in_window(seg.seq, 0, self.window_bytes(dir)) {
                return inside;
            }
        } else if occupied == 0 {
            return true;
        } else if half.synced() {
            // Only the handshake fixes where the stream starts once it has been seen.
            if half.in_window(seg.seq, occupied, self.window_bytes(dir)) != Some(false) {
                return true;
            }
            // Outside the window as the observer knows it, but acknowledging the other
            // side inside its window: this connection's all the same, after the capture
            // lost more than a window of the direction. (Found in review of the window
            // test: the rest of such a connection was all stray.) An older
            // connection's segment acknowledges its own sequence numbers.
            let other_window = self.window_bytes(dir.reverse());
            return seg.ack_flag && other.acknowledges(seg.ack, other_window) == Some(true);
        } else if half.has_start() {
            return true;
        }
        // The start is unknown. After the other side's SYN only a segment that
        // acknowledges it may fix the start or reset: RFC 9293 §3.10.7.3 (SYN-SENT)
        // drops a segment without an acceptable ACK, and "If the RST bit is set [...]
        // If the ACK was acceptable, then signal to the user "error: connection reset",
        // drop the segment, enter CLOSED state [...] Otherwise (no ACK), drop the
        // segment and return."
        match other.acknowledges(seg.ack, self.window_bytes(dir.reverse())) {
            None => true,
            Some(inside) => seg.ack_flag && inside,
        }
    }

    /// Takes in a segment; `false` if it was judged stray ([`Conn::acceptable`]) and
    /// ignored.
    fn segment(&mut self, frame: u64, ts_ns: u64, seg: &TcpSegment<'_>, ctx: &mut Ctx<'_>) -> bool {
        let occupied = seg.payload_wire_len.max(seg.payload.len()) + usize::from(seg.fin);
        let acceptable = self.acceptable(seg, ctx.dir);
        let run = &mut self.stray_runs[ctx.dir.index()];
        let mut resync = false;
        if acceptable {
            *run = None;
        } else if seg.rst || seg.syn || occupied == 0 {
            ctx.stats.stray_segments += 1;
            return false;
        } else {
            let follows = run.is_some_and(|(next, _)| next == seg.seq);
            let count = if follows {
                run.map_or(1, |(_, n)| n + 1)
            } else {
                1
            };
            let next = seg.seq.wrapping_add(occupied as u32);
            if count <= STRAY_RUN_RESYNC {
                *run = Some((next, count));
                ctx.stats.stray_segments += 1;
                return false;
            }
            // The capture lost more than a window of this direction: take it.
            *run = None;
            ctx.stats.resynced += 1;
            resync = true;
        }
        let half = &mut self.halves[ctx.dir.index()];
        let mut own_syn = false;
        if seg.syn {
            // The SYN-ACK of this connection acknowledges the client's SYN (RFC 9293 §3.5).
            let own = seg.ack_flag
                && self
                    .client_isn
                    .is_some_and(|isn| seg.ack == isn.wrapping_add(1));
            own_syn = half.note_syn(seg.seq, own);
            if ctx.dir == Dir::ClientToServer && !seg.ack_flag {
                self.client_isn.get_or_insert(seg.seq);
            }
        }
        // The SYN occupies the first sequence number; any data follows it.
        let input = SegmentIn {
            frame,
            ts_ns,
            seq: seg.seq.wrapping_add(u32::from(seg.syn)),
            data: seg.payload,
            wire_len: seg.payload_wire_len.max(seg.payload.len()),
            fin: seg.fin,
        };
        half.segment(&input, ctx);
        if resync {
            // What lay between is not coming: the gap now, so that the window follows
            // the direction from here.
            half.give_up_holes(ctx);
        }
        self.note_window(seg, ctx.dir, own_syn);
        self.closed |= seg.fin || seg.rst;
        true
    }
}

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "conn {}", self.0)
    }
}

impl fmt::Display for Dir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dir::ClientToServer => "client->server",
            Dir::ServerToClient => "server->client",
        })
    }
}

#[cfg(test)]
mod tests;
