//! The iWARP stream decoder: reassembled TCP bytes in, MPA frames and
//! FPDUs out.
//!
//! Per connection it follows RFC 5044's two phases in each direction:
//!
//! 1. **Startup.** A direction whose first octets are an MPA key carries an
//!    MPA Request or Reply ([`rnic_engine::wire::mpa_rr`]). The frame is
//!    consumed exactly (never an octet past `PD_Length`), and Full Operation
//!    starts at the next octet. A direction whose first octets are not a key
//!    is not iWARP, unless the user named the port with `--port`, in which
//!    case its bytes are read as FPDUs from the first captured octet.
//! 2. **Full Operation.** Once both frames are known the direction's
//!    parameters follow: CRC if either frame set C; markers towards a side
//!    that set M in its own frame. FPDUs are then cut by ULPDU_Length,
//!    markers are stripped and each FPDUPTR checked, and the CRC is checked
//!    over the stream octets the FPDU occupies, markers included
//!    ([`rnic_engine::wire::mpa_marker`] states the layout this project
//!    reads). A Reply with R=1 ends MPA: later bytes belong to the ULP.
//!
//! Losing sync: a gap in the capture, or a bad CRC on a connection that
//! negotiated CRC, makes the direction resynchronise at the start of a later
//! TCP segment whose octets look like an FPDU (Linux siw and dpwarp align
//! FPDUs to segments, as RFC 5044 asks senders to).
//!
//! Every buffer is bounded: a direction buffers at most one FPDU (64 KiB
//! plus markers) or one startup frame, plus [`PENDING_BYTES_MAX`] while it
//! waits for the other side's frame.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;

use dpwarp_capture::packet::TcpSegment;
use dpwarp_capture::reassembly::{ConnId, ConnInfo, Dir, Event};
use rnic_engine::mpa::crc;
use rnic_engine::wire::{ddp, mpa_fpdu, mpa_marker, mpa_rr, rdmap};

/// Octets of Full Operation a direction buffers while the other side's
/// startup frame (which fixes CRC and markers) has not been seen. Beyond
/// this the direction is decoded without knowing: CRC "auto", no markers.
pub const PENDING_BYTES_MAX: usize = 256 << 10;
/// Largest stream extent of one FPDU: the longest ULPDU, PAD, CRC and the
/// markers that can fall inside it.
pub const FPDU_STREAM_LEN_MAX: usize = 70_000;

const _: () = assert!(
    FPDU_STREAM_LEN_MAX
        >= mpa_fpdu::fpdu_len(u16::MAX as usize)
            + mpa_marker::MARKER_LEN
                * (mpa_fpdu::fpdu_len(u16::MAX as usize) / mpa_marker::RUN_LEN + 2)
);

/// What the user told the decoder.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// TCP ports whose connections are iWARP even without an MPA startup
    /// in the capture.
    pub ports: Vec<u16>,
    /// Report TCP events of every connection, not only of iWARP ones.
    pub all: bool,
}

/// How the CRC of an FPDU was judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrcVerdict {
    /// CRC negotiated (or guessed) and correct.
    Good,
    /// CRC negotiated (or guessed) and wrong.
    Bad,
    /// CRC not negotiated: the field is not checked.
    Off,
}

/// One marker found inside an FPDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MarkerCheck {
    /// Stream position in Full Operation (a multiple of 512).
    pub position: u64,
    /// The FPDUPTR it carries.
    pub fpduptr: u16,
    /// The FPDUPTR it should carry: octets back to the FPDU's start (above
    /// 65535 only in an FPDU too long for markers to point into).
    pub expected: u64,
    /// Its reserved half.
    pub reserved: u16,
}

impl MarkerCheck {
    /// Whether the marker points at its FPDU.
    pub fn ok(&self) -> bool {
        u64::from(self.fpduptr) == self.expected
    }
}

/// An FPDU as found in the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fpdu {
    /// ULPDU_Length.
    pub ulpdu_len: u16,
    /// The ULPDU (one DDP segment), markers removed.
    pub ulpdu: Vec<u8>,
    /// The CRC field as on the wire.
    pub crc_field: [u8; 4],
    /// The CRC32c computed over the FPDU's covered octets.
    pub crc_computed: u32,
    /// The verdict.
    pub crc: CrcVerdict,
    /// Markers inside the FPDU's extent.
    pub markers: Vec<MarkerCheck>,
    /// Octets the FPDU occupies in the stream (markers included).
    pub stream_len: usize,
    /// The initiator's first FPDU on a peer-to-peer connection (RFC 6581
    /// §9.2): the Ready-to-Receive indication.
    pub rtr: bool,
}

/// A TCP event worth a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpEvent {
    /// SYN.
    Syn,
    /// SYN with ACK.
    SynAck,
    /// FIN.
    Fin,
    /// RST.
    Rst,
}

/// What a [`Message`] is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// An MPA Request or Reply.
    Mpa(MpaFrame),
    /// An FPDU.
    Fpdu(Fpdu),
    /// Octets after an MPA reject (they belong to the ULP, not to MPA).
    NonMpa {
        /// Octets in this piece.
        len: usize,
    },
    /// A TCP event.
    Tcp(TcpEvent),
    /// Octets missing from the capture.
    Gap {
        /// How many.
        len: u64,
    },
    /// Something the decoder noticed: an invalid startup frame, lost sync,
    /// an incomplete FPDU at the end.
    Problem(String),
}

/// An MPA Request or Reply, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MpaFrame {
    /// Request or Reply.
    pub kind: mpa_rr::FrameKind,
    /// M.
    pub markers: bool,
    /// C.
    pub crc: bool,
    /// R.
    pub reject: bool,
    /// Reserved flag bits.
    pub reserved: u8,
    /// Rev.
    pub revision: u8,
    /// PD_Length.
    pub pd_len: u16,
    /// RFC 6581 enhanced data, when S=1.
    pub enhanced: Option<mpa_rr::EnhancedRepr>,
    /// The ULP's private data.
    pub private_data: Vec<u8>,
}

impl MpaFrame {
    fn from_repr(repr: &mpa_rr::Repr<'_>) -> MpaFrame {
        MpaFrame {
            kind: repr.kind,
            markers: repr.markers,
            crc: repr.crc,
            reject: repr.reject,
            reserved: repr.reserved,
            revision: repr.revision,
            pd_len: repr.pd_length() as u16,
            enhanced: repr.enhanced,
            private_data: repr.private_data.to_vec(),
        }
    }
}

/// One line of output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The frame where the message's last octet arrived (pcap frame number,
    /// from 1).
    pub frame: u64,
    /// The frame where its first octet arrived.
    pub first_frame: u64,
    /// Capture time of `frame`, in ns.
    pub ts_ns: u64,
    /// The connection.
    pub conn: ConnId,
    /// Direction within the connection.
    pub dir: Dir,
    /// Sender.
    pub src: SocketAddr,
    /// Receiver.
    pub dst: SocketAddr,
    /// Stream offset of the first octet (0 = first data octet).
    pub offset: u64,
    /// TCP sequence number of the first octet.
    pub tcp_seq: u32,
    /// The first octet was the first octet of a TCP segment's payload.
    pub segment_start: bool,
    /// What it is.
    pub body: Body,
}

impl Message {
    /// Relative sequence number, as Wireshark shows it (1 = first octet).
    pub fn seq_rel(&self) -> u64 {
        self.offset + 1
    }
}

/// Counters over a whole decode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    /// Connections that carried iWARP.
    pub iwarp_connections: u64,
    /// Connections that did not.
    pub other_connections: u64,
    /// MPA Requests and Replies.
    pub mpa_frames: u64,
    /// FPDUs.
    pub fpdus: u64,
    /// FPDUs with a good CRC.
    pub crc_good: u64,
    /// FPDUs with a bad CRC.
    pub crc_bad: u64,
    /// Markers seen.
    pub markers: u64,
    /// Markers whose FPDUPTR is wrong.
    pub markers_bad: u64,
    /// Problems reported (invalid frames, lost sync, gaps).
    pub problems: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CrcMode {
    On,
    Off,
    Auto,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Params {
    crc: CrcMode,
    markers: bool,
}

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
struct Span {
    offset: u64,
    len: u64,
    frame: u64,
    ts_ns: u64,
    seq: u32,
}

#[derive(Debug)]
struct Direction {
    state: State,
    buf: Vec<u8>,
    /// Stream offset of `buf[0]`.
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
}

impl Direction {
    fn new() -> Direction {
        Direction {
            state: State::Start,
            buf: Vec::new(),
            base: 0,
            spans: VecDeque::new(),
            fpdu_base: None,
            params: None,
            frame: None,
            fpdus: 0,
            last: None,
        }
    }

    fn end(&self) -> u64 {
        self.base + self.buf.len() as u64
    }

    fn span_at(&self, offset: u64) -> Option<&Span> {
        self.spans
            .iter()
            .find(|s| s.offset <= offset && offset < s.offset + s.len)
    }

    /// Drops `n` octets from the front of the buffer.
    fn consume(&mut self, n: usize) {
        self.buf.drain(..n);
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
        let n = self.buf.len();
        self.consume(n);
    }
}

#[derive(Debug)]
struct Conn {
    info: ConnInfo,
    forced: bool,
    /// `Some(true)` once a direction began with an MPA key (or the port was
    /// named), `Some(false)` once one began with anything else.
    iwarp: Option<bool>,
    dirs: [Direction; 2],
    held: Vec<Message>,
    /// Consecutive FPDUs with a bad CRC, per direction.
    bad_crc_run: [u32; 2],
    /// The direction's first FPDU must be an RFC 6581 RTR (the initiator of
    /// a connection both sides agreed to run peer-to-peer).
    rtr_expected: [bool; 2],
}

fn index(dir: Dir) -> usize {
    match dir {
        Dir::ClientToServer => 0,
        Dir::ServerToClient => 1,
    }
}

/// Decodes the events of one capture into [`Message`]s.
#[derive(Debug)]
pub struct Decoder {
    options: Options,
    conns: HashMap<ConnId, Conn>,
    /// The latest connection of each address pair (smaller address first).
    by_addr: HashMap<(SocketAddr, SocketAddr), ConnId>,
    out: Vec<Message>,
    summary: Summary,
    /// Capture time of the record being read.
    now_ns: u64,
}

impl Decoder {
    /// A decoder for one capture.
    pub fn new(options: Options) -> Decoder {
        Decoder {
            options,
            conns: HashMap::new(),
            by_addr: HashMap::new(),
            out: Vec::new(),
            summary: Summary::default(),
            now_ns: 0,
        }
    }

    /// Counters so far.
    pub fn summary(&self) -> Summary {
        self.summary
    }

    /// Sets the time of the record whose events come next: FIN, RST and gap
    /// events carry no time of their own and take this one.
    pub fn begin_record(&mut self, ts_ns: u64) {
        self.now_ns = ts_ns;
    }

    /// Takes the messages decoded so far, in capture order.
    pub fn drain(&mut self) -> std::vec::Drain<'_, Message> {
        self.out.drain(..)
    }

    /// Reports the SYN of a segment. Call it after the reassembly events of
    /// the segment, so that its connection exists. (Reassembly reports FIN
    /// and RST itself, in stream order.)
    pub fn handle_segment(&mut self, frame: u64, ts_ns: u64, seg: &TcpSegment<'_>) {
        if !seg.syn {
            return;
        }
        let Some(&id) = self.by_addr.get(&addr_key(seg.src, seg.dst)) else {
            return;
        };
        let Some(conn) = self.conns.get(&id) else {
            return;
        };
        let dir = if seg.src == conn.info.client {
            Dir::ClientToServer
        } else {
            Dir::ServerToClient
        };
        let event = if seg.ack_flag {
            TcpEvent::SynAck
        } else {
            TcpEvent::Syn
        };
        let message = Message {
            frame,
            first_frame: frame,
            ts_ns,
            conn: id,
            dir,
            src: seg.src,
            dst: seg.dst,
            offset: 0,
            tcp_seq: seg.seq,
            segment_start: true,
            body: Body::Tcp(event),
        };
        self.emit_tcp(id, message);
    }

    /// Feeds one reassembly event.
    pub fn handle_event(&mut self, event: &Event) {
        let mut sink = Sink {
            out: &mut self.out,
            summary: &mut self.summary,
            all: self.options.all,
            now_ns: self.now_ns,
        };
        match event {
            Event::Open { conn, info } => {
                let forced = self
                    .options
                    .ports
                    .iter()
                    .any(|p| *p == info.client.port() || *p == info.server.port());
                self.by_addr
                    .insert(addr_key(info.client, info.server), *conn);
                self.conns.insert(*conn, Conn::new(*info, forced));
            }
            Event::Data {
                conn,
                dir,
                frame,
                ts_ns,
                seq,
                offset,
                data,
            } => {
                if let Some(c) = self.conns.get_mut(conn) {
                    let span = Span {
                        offset: *offset,
                        len: data.len() as u64,
                        frame: *frame,
                        ts_ns: *ts_ns,
                        seq: *seq,
                    };
                    c.data(*dir, span, data, &mut sink);
                }
            }
            Event::Gap {
                conn,
                dir,
                frame,
                offset,
                len,
            } => {
                if let Some(c) = self.conns.get_mut(conn) {
                    c.gap(*dir, *frame, *offset, *len, &mut sink);
                }
            }
            Event::Fin { conn, dir, frame } => {
                if let Some(c) = self.conns.get_mut(conn) {
                    c.tcp_end(*dir, *frame, TcpEvent::Fin, &mut sink);
                }
            }
            Event::Rst { conn, dir, frame } => {
                if let Some(c) = self.conns.get_mut(conn) {
                    c.tcp_end(*dir, *frame, TcpEvent::Rst, &mut sink);
                }
            }
        }
    }

    /// Ends the capture: reports what is left incomplete, in connection order.
    pub fn finish(&mut self) {
        let mut sink = Sink {
            out: &mut self.out,
            summary: &mut self.summary,
            all: self.options.all,
            now_ns: self.now_ns,
        };
        let mut ids: Vec<ConnId> = self.conns.keys().copied().collect();
        ids.sort();
        for id in ids {
            let Some(conn) = self.conns.get_mut(&id) else {
                continue;
            };
            for dir in [Dir::ClientToServer, Dir::ServerToClient] {
                conn.flush_incomplete(dir, None, &mut sink);
            }
            if conn.iwarp != Some(true) {
                sink.summary.other_connections += 1;
            }
        }
    }

    fn emit_tcp(&mut self, id: ConnId, message: Message) {
        let mut sink = Sink {
            out: &mut self.out,
            summary: &mut self.summary,
            all: self.options.all,
            now_ns: self.now_ns,
        };
        if let Some(conn) = self.conns.get_mut(&id) {
            conn.emit_tcp(message, &mut sink);
        }
    }
}

/// Most TCP lines held back while a connection is not yet known to be
/// iWARP (its SYN, SYN-ACK and a FIN or RST at most).
const HELD_MAX: usize = 8;
/// Consecutive bad CRCs on a CRC connection after which the decoder stops
/// trusting ULPDU_Length and resynchronises.
const BAD_CRC_RESYNC: u32 = 2;

fn addr_key(a: SocketAddr, b: SocketAddr) -> (SocketAddr, SocketAddr) {
    if a <= b {
        (a, b)
    } else {
        (b, a)
    }
}

/// Where decoded messages and counters go.
struct Sink<'a> {
    out: &'a mut Vec<Message>,
    summary: &'a mut Summary,
    all: bool,
    now_ns: u64,
}

impl Sink<'_> {
    fn push(&mut self, message: Message) {
        match &message.body {
            Body::Mpa(_) => self.summary.mpa_frames += 1,
            Body::Fpdu(f) => {
                self.summary.fpdus += 1;
                match f.crc {
                    CrcVerdict::Good => self.summary.crc_good += 1,
                    CrcVerdict::Bad => self.summary.crc_bad += 1,
                    CrcVerdict::Off => {}
                }
                self.summary.markers += f.markers.len() as u64;
                self.summary.markers_bad += f.markers.iter().filter(|m| !m.ok()).count() as u64;
            }
            Body::Problem(_) | Body::Gap { .. } => self.summary.problems += 1,
            Body::NonMpa { .. } | Body::Tcp(_) => {}
        }
        self.out.push(message);
    }
}

/// Whether a step made progress.
enum Progress {
    Again,
    NeedMore,
}

impl Conn {
    fn new(info: ConnInfo, forced: bool) -> Conn {
        Conn {
            info,
            forced,
            iwarp: None,
            dirs: [Direction::new(), Direction::new()],
            held: Vec::new(),
            bad_crc_run: [0, 0],
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
        }
    }

    fn emit_tcp(&mut self, message: Message, sink: &mut Sink<'_>) {
        match self.iwarp {
            Some(true) => sink.push(message),
            Some(false) if sink.all => sink.push(message),
            Some(false) => {}
            None if self.held.len() < HELD_MAX => self.held.push(message),
            None => {}
        }
    }

    fn data(&mut self, dir: Dir, span: Span, data: &[u8], sink: &mut Sink<'_>) {
        let d = &mut self.dirs[index(dir)];
        if d.state == State::Ignore {
            return;
        }
        if d.buf.is_empty() {
            d.base = span.offset;
        }
        if span.offset != d.end() {
            // Reassembly delivers in order and reports gaps; anything else
            // is a bug there, handled as a gap here rather than a panic.
            let (offset, len) = (d.end(), span.offset.saturating_sub(d.end()));
            self.gap(dir, span.frame, offset, len, sink);
        }
        let d = &mut self.dirs[index(dir)];
        d.buf.extend_from_slice(data);
        d.spans.push_back(span);
        d.last = Some(span);
        while let Progress::Again = self.step(dir, sink) {}
    }

    fn step(&mut self, dir: Dir, sink: &mut Sink<'_>) -> Progress {
        let d = &mut self.dirs[index(dir)];
        if d.buf.is_empty() {
            return Progress::NeedMore;
        }
        match d.state {
            State::Start => self.step_start(dir, sink),
            State::Startup => self.step_startup(dir, sink),
            State::Fpdu => self.step_fpdu(dir, sink),
            State::Resync => self.step_resync(dir, sink),
            State::Raw => {
                let (first, last) = (d.base, d.end() - 1);
                let len = d.buf.len();
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
        let prefix = &d.buf[..d.buf.len().min(mpa_rr::KEY_REQUEST.len())];
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
            d.state = State::Fpdu;
        } else {
            self.decide(false, sink);
            self.dirs[index(dir)].state = State::Ignore;
        }
        Progress::Again
    }

    fn step_startup(&mut self, dir: Dir, sink: &mut Sink<'_>) -> Progress {
        let d = &self.dirs[index(dir)];
        if d.buf.len() < mpa_rr::HEADER_LEN {
            return Progress::NeedMore;
        }
        let header = mpa_rr::Packet::new_unchecked(&d.buf[..]);
        let at = d.base;
        if usize::from(header.pd_length()) > mpa_rr::PRIVATE_DATA_LEN_MAX {
            let text = format!(
                "invalid MPA frame: PD_Length {} exceeds 512 (RFC 5044 §7.1: improperly \
                 formatted, the receiver closes the connection)",
                header.pd_length()
            );
            self.problem(dir, at, text, sink);
            self.dirs[index(dir)].state = State::Ignore;
            return Progress::Again;
        }
        let frame_len = header.frame_len();
        if d.buf.len() < frame_len {
            return Progress::NeedMore;
        }
        let packet = mpa_rr::Packet::new_unchecked(&d.buf[..frame_len]);
        let Ok(repr) = mpa_rr::Repr::parse(&packet) else {
            let text = format!(
                "invalid MPA frame: S=1 (enhanced) with PD_Length {} (< 4 octets of enhanced data)",
                packet.pd_length()
            );
            self.problem(dir, at, text, sink);
            self.dirs[index(dir)].state = State::Ignore;
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
    /// the direction may wait for the other side's startup frame.
    fn params(&mut self, dir: Dir, sink: &mut Sink<'_>) -> Option<Params> {
        let d = &self.dirs[index(dir)];
        if let Some(params) = d.params {
            return Some(params);
        }
        if d.buf.len() <= PENDING_BYTES_MAX {
            return None;
        }
        let at = d.base;
        let text = "the other side's MPA frame is not in the capture: decoding with CRC \
                    auto-detected and no markers"
            .to_string();
        self.problem(dir, at, text, sink);
        let params = Params {
            crc: CrcMode::Auto,
            markers: false,
        };
        self.dirs[index(dir)].params = Some(params);
        Some(params)
    }

    fn step_fpdu(&mut self, dir: Dir, sink: &mut Sink<'_>) -> Progress {
        let Some(params) = self.params(dir, sink) else {
            return Progress::NeedMore;
        };
        let d = &self.dirs[index(dir)];
        let start = d.base;
        let position = start - d.fpdu_base.unwrap_or(start);
        let Some(cut) = Cut::measure(position, &d.buf, params.markers) else {
            return Progress::NeedMore;
        };
        if d.buf.len() < cut.stream_len {
            return Progress::NeedMore;
        }
        let mut fpdu = cut.decode(position, &d.buf[..cut.stream_len], params.crc);
        let i = index(dir);
        if self.rtr_expected[i] && d.fpdus == 0 {
            fpdu.rtr = is_zero_length_rtr(&fpdu.ulpdu);
            if !fpdu.rtr {
                let text = "peer-to-peer initiator's first FPDU is not a zero-length \
                            Send/Write/Read RTR (RFC 6581 §9.2)";
                self.problem(dir, start, text.to_string(), sink);
            }
        }
        let bad = fpdu.crc == CrcVerdict::Bad && params.crc == CrcMode::On;
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

    fn step_resync(&mut self, dir: Dir, sink: &mut Sink<'_>) -> Progress {
        let i = index(dir);
        let d = &self.dirs[i];
        let Some(next) = d.spans.iter().find(|s| s.offset >= d.base).copied() else {
            self.dirs[i].clear();
            return Progress::NeedMore;
        };
        let skip = (next.offset - d.base) as usize;
        self.dirs[i].consume(skip);
        let d = &self.dirs[i];
        let params = d.params.unwrap_or(Params {
            crc: CrcMode::Auto,
            markers: false,
        });
        let position = d.base - d.fpdu_base.unwrap_or(d.base);
        let plausible = if params.markers && !mpa_marker::is_fpdu_start(position) {
            Some(false)
        } else {
            plausible_fpdu(position, &d.buf, params)
        };
        match plausible {
            None => Progress::NeedMore,
            Some(true) => {
                let text = format!("resynchronised: FPDUs again from frame {}", next.frame);
                self.problem(dir, next.offset, text, sink);
                self.dirs[i].state = State::Fpdu;
                Progress::Again
            }
            Some(false) => {
                self.dirs[i].consume((next.len as usize).min(self.dirs[i].buf.len()));
                Progress::Again
            }
        }
    }

    fn gap(&mut self, dir: Dir, frame: u64, offset: u64, len: u64, sink: &mut Sink<'_>) {
        let i = index(dir);
        let state = self.dirs[i].state;
        if state == State::Ignore {
            return;
        }
        self.flush_incomplete(dir, Some(frame), sink);
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
    }

    fn tcp_end(&mut self, dir: Dir, frame: u64, event: TcpEvent, sink: &mut Sink<'_>) {
        self.flush_incomplete(dir, Some(frame), sink);
        let end = self.dirs[index(dir)].end();
        let mut message = self.message(dir, end, end, Body::Tcp(event));
        message.ts_ns = sink.now_ns;
        message.frame = frame;
        message.first_frame = frame;
        message.segment_start = false;
        self.emit_tcp(message, sink);
    }

    /// Reports octets left over in a direction that cannot complete any more.
    fn flush_incomplete(&mut self, dir: Dir, frame: Option<u64>, sink: &mut Sink<'_>) {
        let i = index(dir);
        let d = &self.dirs[i];
        if d.buf.is_empty() {
            return;
        }
        let what = match d.state {
            State::Startup => Some("an MPA startup frame"),
            State::Fpdu => Some("an FPDU"),
            // The undecided prefix of a key, or junk while resynchronising.
            State::Start | State::Resync | State::Raw | State::Ignore => None,
        };
        if let Some(what) = what {
            let text = format!(
                "stream ends inside {what}: {} octets cannot complete",
                d.buf.len()
            );
            let mut message = self.message(dir, d.base, d.end() - 1, Body::Problem(text));
            if let Some(frame) = frame {
                message.frame = frame;
            }
            sink.push(message);
        }
        self.dirs[i].clear();
    }
}

/// Where the next FPDU ends, before its octets are all there.
#[derive(Debug, Clone, Copy)]
struct Cut {
    ulpdu_len: u16,
    /// Octets without markers.
    content_len: usize,
    /// Octets in the stream, markers included.
    stream_len: usize,
    markers: bool,
}

impl Cut {
    /// Reads ULPDU_Length (which a marker may split) at stream position
    /// `position`, the first octet of `buf`.
    fn measure(position: u64, buf: &[u8], markers: bool) -> Option<Cut> {
        let mut length = [0u8; 2];
        let mut have = 0;
        if markers {
            for piece in mpa_marker::Pieces::new(position, buf) {
                if let mpa_marker::Piece::Data(data) = piece {
                    let take = data.len().min(2 - have);
                    length[have..have + take].copy_from_slice(&data[..take]);
                    have += take;
                }
                if have == 2 {
                    break;
                }
            }
        } else if buf.len() >= 2 {
            length.copy_from_slice(&buf[..2]);
            have = 2;
        }
        if have < 2 {
            return None;
        }
        let ulpdu_len = u16::from_be_bytes(length);
        let content_len = mpa_fpdu::fpdu_len(usize::from(ulpdu_len));
        let stream_len = if markers {
            mpa_marker::stream_len(position, content_len)
        } else {
            content_len
        };
        Some(Cut {
            ulpdu_len,
            content_len,
            stream_len,
            markers,
        })
    }

    /// Strips markers, checks them and the CRC, and returns the FPDU.
    fn decode(&self, position: u64, raw: &[u8], crc_mode: CrcMode) -> Fpdu {
        debug_assert_eq!(raw.len(), self.stream_len);
        let covered_len = self.content_len - mpa_fpdu::CRC_LEN;
        let mut content = Vec::with_capacity(self.content_len);
        let mut markers = Vec::new();
        let mut crc_state = 0u32;
        let pieces: Box<dyn Iterator<Item = mpa_marker::Piece<'_>>> = if self.markers {
            Box::new(mpa_marker::Pieces::new(position, raw))
        } else {
            Box::new(std::iter::once(mpa_marker::Piece::Data(raw)))
        };
        for piece in pieces {
            match piece {
                mpa_marker::Piece::Data(data) => {
                    let covered = data.len().min(covered_len.saturating_sub(content.len()));
                    crc_state = crc::append(crc_state, &data[..covered]);
                    content.extend_from_slice(data);
                }
                mpa_marker::Piece::Marker {
                    position: at,
                    octets,
                } => {
                    crc_state = crc::append(crc_state, octets);
                    let marker = mpa_marker::Packet::new_unchecked(octets);
                    markers.push(MarkerCheck {
                        position: at,
                        fpduptr: marker.fpduptr(),
                        expected: at - position,
                        reserved: marker.reserved(),
                    });
                }
            }
        }
        let packet = mpa_fpdu::Packet::new_unchecked(&content[..]);
        let crc_field = packet.crc_field();
        let carried = crc::from_wire(crc_field);
        let crc = match crc_mode {
            CrcMode::On if carried == crc_state || cfg!(fuzzing) => CrcVerdict::Good,
            CrcMode::On => CrcVerdict::Bad,
            CrcMode::Off => CrcVerdict::Off,
            CrcMode::Auto if carried == crc_state => CrcVerdict::Good,
            CrcMode::Auto if carried == 0 => CrcVerdict::Off,
            CrcMode::Auto => CrcVerdict::Bad,
        };
        Fpdu {
            ulpdu_len: self.ulpdu_len,
            ulpdu: packet.ulpdu().to_vec(),
            crc_field,
            crc_computed: crc_state,
            crc,
            markers,
            stream_len: self.stream_len,
            rtr: false,
        }
    }
}

/// Whether the octets at `position` start a believable FPDU: a DDP segment
/// long enough for its header, DDP and RDMAP version 1, and (with CRC) a
/// good CRC. `None` while too few octets are there to tell.
fn plausible_fpdu(position: u64, buf: &[u8], params: Params) -> Option<bool> {
    let cut = Cut::measure(position, buf, params.markers)?;
    if usize::from(cut.ulpdu_len) < ddp::TAGGED_HEADER_LEN {
        return Some(false);
    }
    if buf.len() < cut.stream_len {
        return if cut.stream_len > FPDU_STREAM_LEN_MAX {
            Some(false)
        } else {
            None
        };
    }
    let fpdu = cut.decode(position, &buf[..cut.stream_len], params.crc);
    if fpdu.crc == CrcVerdict::Bad || fpdu.markers.iter().any(|m| !m.ok()) {
        return Some(false);
    }
    let Ok(segment) = ddp::Packet::new_checked(&fpdu.ulpdu[..]) else {
        return Some(false);
    };
    let rdmap_version = rdmap::Control::from_octet(segment.rsvd_ulp()).version;
    Some(segment.version() == ddp::VERSION && rdmap_version == rdmap::VERSION)
}

/// Whether a ULPDU is one of RFC 6581's RTR indications: a zero-length
/// Send, RDMA Write or RDMA Read (Read Request of size 0).
fn is_zero_length_rtr(ulpdu: &[u8]) -> bool {
    let Ok(packet) = ddp::Packet::new_checked(ulpdu) else {
        return false;
    };
    let Ok(repr) = rdmap::Repr::parse(&packet) else {
        return false;
    };
    match (repr.opcode(), repr.header) {
        (rdmap::Opcode::Send | rdmap::Opcode::RdmaWrite, _) => repr.payload.is_empty(),
        (rdmap::Opcode::RdmaReadRequest, rdmap::Header::ReadRequest(r)) => r.read_size == 0,
        _ => false,
    }
}
