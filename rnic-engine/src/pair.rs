//! Two RNICs back to back: a deterministic harness for tests, benchmarks
//! and the embedded default of the benchmark (STYLE.md §6, after quinn's
//! `Pair`).
//!
//! Each side has one RNIC, one protection domain and one CQ, and a QP (more
//! with [`RnicPair::add_qp`]). The "link" moves what
//! [`Rnic::poll_transmit`] writes, one EMSS-sized segment (or a window of
//! FPDUs) at a time, into the other side's [`Rnic::handle_stream`],
//! optionally cut into pieces of seeded random sizes (any TCP
//! segmentation must work). With [`Link::Segments`] it calls
//! [`Rnic::poll_transmit_segments`] instead and models where TCP cuts the
//! stream into segments, so that tests can check the FPDUs against them.
//! No TCP, no clock, no threads.

use crate::cq::Wc;
use crate::mem::{Access, Pd, Region};
use crate::sctp::rx::ReorderConfig;
use crate::verbs::{
    Connection, CqHandle, MessageConnection, Mr, QpHandle, QpInit, Rnic, RnicConfig, Segments,
    VerbError,
};
use std::sync::Arc;

/// How to build a pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PairConfig {
    /// MPA CRC.
    pub crc: bool,
    /// MPA markers (both directions).
    pub markers: bool,
    /// TCP effective MSS.
    pub emss: usize,
    /// IRD and ORD of both sides.
    pub ird_ord: u16,
    /// Send and receive queue depth.
    pub queue_size: usize,
    /// Completion queue depth.
    pub cq_size: usize,
    /// Octets one transfer may carry: whole FPDUs of at most an EMSS each,
    /// as many as fit, the way the data plane hands the engine the room of
    /// its TCP send window (0: one EMSS, one segment at a time).
    pub window: usize,
    /// Cut each transfer into random pieces of at most this many octets
    /// (0: deliver transfers whole).
    pub cut_max: usize,
    /// Seed of the cutting and of the STag keys.
    pub seed: u64,
    /// How the link takes FPDUs from the sender.
    pub link: Link,
}

/// How a pair's link takes FPDUs from the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Link {
    /// [`Rnic::poll_transmit`] into the transfer's room: FPDUs of MULPDU,
    /// wherever TCP's segments end.
    #[default]
    Window,
    /// [`Rnic::poll_transmit_segments`] into the same room, with TCP's
    /// segmentation modelled per direction as smoltcp's: segments of `emss`
    /// octets cut from an anchor, the first one of each direction already
    /// holding a seeded random number of octets (the MPA startup frames).
    /// After a call, the segment the FPDUs leave unfinished is sent short
    /// or kept open for the next call's FPDUs at random (as a TCP that
    /// sends at once, or one that waits for more); after a call that wrote
    /// nothing into an open segment, it is sent short and the engine is
    /// called again, as the engine's contract asks.
    Segments,
    /// As [`Link::Segments`], and each direction's octets and segments are
    /// kept ([`RnicPair::take_recordings`]) for tests to check.
    SegmentsRecorded,
    /// DDP over SCTP (RFC 5043): the QPs are connected with
    /// [`Rnic::connect_messages`] (`emss` is the largest user message) and
    /// each DDP Segment message goes from [`Rnic::poll_transmit_messages`]
    /// to [`Rnic::handle_message`] in the order it was sent.
    Messages,
    /// As [`Link::Messages`], delivered out of order, as unordered SCTP
    /// chunks may be: each transfer's messages are shuffled with the seed,
    /// and some are held back until a later transfer.
    MessagesShuffled,
}

impl Link {
    /// Whether the link carries SCTP messages rather than an MPA stream.
    pub fn is_messages(self) -> bool {
        matches!(self, Link::Messages | Link::MessagesShuffled)
    }
}

/// What one direction of a [`Link::SegmentsRecorded`] link carried.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recording {
    /// Every octet sent, from the first octet of Full Operation.
    pub stream: Vec<u8>,
    /// The TCP segments that carried them, in order, end to end.
    pub segments: Vec<TcpSegment>,
}

/// One TCP segment of a [`Recording`], in stream positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TcpSegment {
    /// Its first octet of Full Operation (the first segment may hold MPA
    /// startup octets before position 0).
    pub start: u64,
    /// One past its last octet.
    pub end: u64,
    /// Where it would have ended had TCP filled it: `end`, unless it was
    /// sent short.
    pub full_end: u64,
}

impl Default for PairConfig {
    fn default() -> PairConfig {
        PairConfig {
            crc: true,
            markers: false,
            emss: 1448,
            ird_ord: 16,
            queue_size: 256,
            cq_size: 1024,
            window: 0,
            cut_max: 0,
            seed: 1,
            link: Link::Window,
        }
    }
}

/// One end of the pair.
#[derive(Debug)]
pub struct Side {
    /// The RNIC.
    pub rnic: Rnic,
    /// Its protection domain.
    pub pd: Pd,
    /// The first QP.
    pub qp: QpHandle,
    /// The CQ of all its queues.
    pub cq: CqHandle,
}

impl Side {
    fn new(config: &PairConfig, seed: u64) -> Result<Side, VerbError> {
        let mut rnic = Rnic::new(RnicConfig {
            stag_seed: seed,
            ..RnicConfig::default()
        });
        let pd = rnic.alloc_pd()?;
        let cq = rnic.create_cq(config.cq_size)?;
        let mut side = Side {
            rnic,
            pd,
            qp: QpHandle(0),
            cq,
        };
        side.qp = side.add_qp(config)?;
        Ok(side)
    }

    fn add_qp(&mut self, config: &PairConfig) -> Result<QpHandle, VerbError> {
        let qp = self.rnic.create_qp(QpInit {
            pd: self.pd,
            send_cq: self.cq,
            recv_cq: self.cq,
            srq: None,
            sq_size: config.queue_size,
            rq_size: config.queue_size,
        })?;
        if config.link.is_messages() {
            self.rnic.connect_messages(qp, message_connection(config))?;
        } else {
            self.rnic.connect(qp, connection(config))?;
        }
        Ok(qp)
    }

    /// Registers a new zeroed region of `len` octets with `access`.
    pub fn region(&mut self, len: usize, access: Access) -> Result<(Arc<Region>, Mr), VerbError> {
        let region = Region::new(len);
        let mr = self.rnic.reg_region(self.pd, region.clone(), access)?;
        Ok((region, mr))
    }

    /// Takes every completion waiting.
    pub fn completions(&mut self) -> Vec<Wc> {
        let mut out = Vec::new();
        let mut batch = [Wc::EMPTY; 32];
        loop {
            let n = self.rnic.poll_cq(self.cq, &mut batch).unwrap_or(0);
            out.extend_from_slice(&batch[..n]);
            if n < batch.len() {
                return out;
            }
        }
    }
}

/// The connection parameters both sides of a pair negotiated.
pub fn connection(config: &PairConfig) -> Connection {
    Connection {
        crc: config.crc,
        markers_tx: config.markers,
        markers_rx: config.markers,
        emss: config.emss,
        ird: config.ird_ord,
        ord: config.ird_ord,
        ulpdu_max: 65535,
        rtr_send: None,
        rtr_accept: super::qp::RtrSet::NONE,
        fenced: false,
        terminate_layout: crate::wire::term::Encoding::Rfc5040,
    }
}

/// The parameters both sides of a [`Link::Messages`] pair negotiated.
pub fn message_connection(config: &PairConfig) -> MessageConnection {
    MessageConnection {
        message_max: config.emss,
        ird: config.ird_ord,
        ord: config.ird_ord,
        reorder: ReorderConfig::default(),
        terminate_layout: crate::wire::term::Encoding::Rfc5040,
    }
}

/// Two connected RNICs.
#[derive(Debug)]
pub struct RnicPair {
    /// The first side.
    pub a: Side,
    /// The second side.
    pub b: Side,
    config: PairConfig,
    /// Connected QPs: `a`'s and `b`'s handle of each.
    links: Vec<(QpHandle, QpHandle)>,
    segment: Vec<u8>,
    rng: u64,
    /// Octets moved from `a` to `b` and back.
    pub moved: [u64; 2],
    /// Calls of the engine's transmit function from `a` and from `b`.
    pub calls: [u64; 2],
    /// [`Link::MessagesShuffled`]: messages delivered before one sent
    /// earlier on the same link and direction.
    pub reordered: u64,
    /// Per link, TCP's segmentation from `a` and from `b` ([`Link::Segments`]).
    tcp: Vec<[Tcp; 2]>,
    /// Message links: the lengths of the messages one transfer wrote.
    lengths: Vec<u16>,
    /// [`Link::MessagesShuffled`]: per link and direction, the messages
    /// sent and not yet delivered.
    in_flight: Vec<[Vec<Vec<u8>>; 2]>,
    /// Buffers of delivered messages, reused (steady transfers allocate
    /// nothing, as `engine_alloc` checks).
    spare: Vec<Vec<u8>>,
}

impl RnicPair {
    /// Two sides, connected with the configuration's parameters.
    pub fn new(config: PairConfig) -> Result<RnicPair, VerbError> {
        let a = Side::new(&config, config.seed)?;
        let b = Side::new(&config, config.seed.wrapping_mul(31).wrapping_add(7))?;
        // Allocated in this order (the links, then the link's buffer) as
        // before there were TCP models: see `add_tcp`.
        let mut pair = RnicPair {
            links: vec![(a.qp, b.qp)],
            a,
            b,
            segment: vec![
                0u8;
                if config.window == 0 {
                    config.emss
                } else {
                    config.window.max(config.emss)
                }
            ],
            rng: config.seed | 1,
            config,
            moved: [0, 0],
            calls: [0, 0],
            reordered: 0,
            tcp: Vec::new(),
            lengths: Vec::new(),
            in_flight: Vec::new(),
            spare: Vec::new(),
        };
        pair.add_tcp();
        Ok(pair)
    }

    /// The configuration.
    pub fn config(&self) -> &PairConfig {
        &self.config
    }

    /// Connects one more QP on each side (same PD and CQ); returns `a`'s
    /// and `b`'s handle.
    pub fn add_qp(&mut self) -> Result<(QpHandle, QpHandle), VerbError> {
        let link = (self.a.add_qp(&self.config)?, self.b.add_qp(&self.config)?);
        self.link(link.0, link.1);
        Ok(link)
    }

    /// Joins a QP of `a` and a QP of `b` (created and connected by the
    /// caller, for QPs the pair's defaults do not fit, such as SRQ users).
    pub fn link(&mut self, a: QpHandle, b: QpHandle) {
        self.links.push((a, b));
        self.add_tcp();
    }

    /// The TCP models of the last link's two directions. A window link has
    /// none: it draws nothing from the seed (it cuts its transfers as it
    /// always did) and allocates nothing (the link buffer's cache-line
    /// offset, which follows from earlier allocations, moved engine_table's
    /// rows by up to 5%).
    fn add_tcp(&mut self) {
        if self.config.link.is_messages() {
            self.in_flight.push([Vec::new(), Vec::new()]);
            return;
        }
        if self.config.link == Link::Window {
            return;
        }
        let (size, record) = (self.config.emss, self.config.link == Link::SegmentsRecorded);
        let startup = [self.next() as usize % size, self.next() as usize % size];
        self.tcp
            .push(startup.map(|startup| Tcp::new(size, startup, record)));
    }

    /// Each direction's recording of every link (`a`'s, then `b`'s), taken
    /// out of the pair (later transfers are not recorded), with the segment
    /// still open ended where the stream is. Recordings are empty unless
    /// the link is [`Link::SegmentsRecorded`], and there are none for a
    /// [`Link::Window`].
    pub fn take_recordings(&mut self) -> Vec<[Recording; 2]> {
        self.tcp
            .iter_mut()
            .map(|directions| directions.each_mut().map(Tcp::take_recording))
            .collect()
    }

    fn next(&mut self) -> u64 {
        xorshift(&mut self.rng)
    }

    /// Moves at most one transfer (a segment, or a window) each way on
    /// every connection; returns the octets moved.
    pub fn step(&mut self) -> usize {
        let mut moved = 0;
        for index in 0..self.links.len() {
            for forward in [true, false] {
                moved += self.transfer(index, forward);
            }
        }
        moved
    }

    fn transfer(&mut self, link: usize, forward: bool) -> usize {
        if self.config.link.is_messages() {
            return self.transfer_messages(link, forward);
        }
        let (qp_a, qp_b) = self.links[link];
        let (from, from_qp, to_qp) = if forward {
            (&mut self.a, qp_a, qp_b)
        } else {
            (&mut self.b, qp_b, qp_a)
        };
        let n = if self.config.link == Link::Window {
            self.calls[usize::from(!forward)] += 1;
            from.rnic
                .poll_transmit(from_qp, &mut self.segment)
                .unwrap_or(0)
        } else {
            self.transmit_segments(link, forward)
        };
        if n == 0 {
            return 0;
        }
        let cut_max = self.config.cut_max;
        let mut at = 0;
        while at < n {
            let piece = if cut_max == 0 {
                n - at
            } else {
                (self.next() as usize % cut_max + 1).min(n - at)
            };
            let to = if forward { &mut self.b } else { &mut self.a };
            let _ = to.rnic.handle_stream(to_qp, &self.segment[at..at + piece]);
            at += piece;
        }
        self.moved[usize::from(!forward)] += n as u64;
        n
    }

    /// One transfer of SCTP messages ([`Link::Messages`]); returns the
    /// octets sent, or delivered from earlier transfers when nothing new
    /// was sent.
    #[inline(never)]
    fn transfer_messages(&mut self, link: usize, forward: bool) -> usize {
        let (qp_a, qp_b) = self.links[link];
        let (from, to, from_qp, to_qp) = if forward {
            (&mut self.a, &mut self.b, qp_a, qp_b)
        } else {
            (&mut self.b, &mut self.a, qp_b, qp_a)
        };
        let direction = usize::from(!forward);
        self.calls[direction] += 1;
        self.lengths.clear();
        let n = from
            .rnic
            .poll_transmit_messages(from_qp, &mut self.segment, &mut self.lengths)
            .unwrap_or(0);
        self.moved[direction] += n as u64;
        let mut at = 0;
        if self.config.link == Link::Messages {
            for &len in &self.lengths {
                let message = &self.segment[at..at + usize::from(len)];
                let _ = to.rnic.handle_message(to_qp, message);
                at += usize::from(len);
            }
            return n;
        }
        let flight = &mut self.in_flight[link][direction];
        for &len in &self.lengths {
            let mut message = self.spare.pop().unwrap_or_default();
            message.clear();
            message.extend_from_slice(&self.segment[at..at + usize::from(len)]);
            flight.push(message);
            at += usize::from(len);
        }
        let mut delivered = 0;
        // Deliver all but up to three at random, unless nothing new came:
        // then everything, so that a run ends.
        let keep = if n == 0 {
            0
        } else {
            (xorshift(&mut self.rng) % 4) as usize
        };
        while flight.len() > keep {
            // `flight` is in sending order: any pick but the first
            // overtakes an earlier message.
            let pick = (xorshift(&mut self.rng) % flight.len() as u64) as usize;
            self.reordered += u64::from(pick != 0);
            let message = flight.remove(pick);
            let _ = to.rnic.handle_message(to_qp, &message);
            delivered += message.len();
            self.spare.push(message);
        }
        n.max(delivered)
    }

    /// One transfer's [`Rnic::poll_transmit_segments`] with the direction's
    /// TCP segments (see [`Link::Segments`]); returns the octets written.
    /// Kept out of `step`: inlined there, it slowed the window link's
    /// transfers by 7% (engine_table's per-segment row).
    #[inline(never)]
    fn transmit_segments(&mut self, link: usize, forward: bool) -> usize {
        let size = self.config.emss;
        // Random choices first: the at-a-boundary spelling (0 or a whole
        // segment) and whether TCP sends the unfinished segment at once.
        let (whole, send_short) = (self.next() & 1 == 0, self.next() & 2 == 0);
        let (from, qp) = if forward {
            (&mut self.a, self.links[link].0)
        } else {
            (&mut self.b, self.links[link].1)
        };
        let direction = usize::from(!forward);
        let tcp = &mut self.tcp[link][direction];
        let mut segments = tcp.segments(size);
        if segments.first == 0 && whole {
            segments.first = size;
        }
        self.calls[direction] += 1;
        let rnic = &mut from.rnic;
        let mut n = rnic
            .poll_transmit_segments(qp, &mut self.segment, segments)
            .unwrap_or(0);
        if n == 0 && 0 < segments.first && segments.first < size {
            // The next FPDU does not fit the open segment: TCP sends it
            // short, and the next one has room for any FPDU.
            tcp.send_short();
            segments.first = size;
            self.calls[direction] += 1;
            n = rnic
                .poll_transmit_segments(qp, &mut self.segment, segments)
                .unwrap_or(0);
        }
        tcp.take(&self.segment[..n], size);
        if send_short {
            tcp.send_short();
        }
        n
    }

    /// Steps until nothing moves, at most `steps_max` times; returns the
    /// steps taken.
    pub fn run(&mut self, steps_max: usize) -> usize {
        for step in 0..steps_max {
            if self.step() == 0 {
                return step;
            }
        }
        steps_max
    }
}

fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// One direction's TCP segmentation for [`Link::Segments`]: segments of
/// `size` octets from an anchor, as smoltcp cuts them, and short ones where
/// the sender ends them.
#[derive(Debug, Clone)]
struct Tcp {
    /// Stream position of the next octet.
    position: u64,
    /// Where the open segment began.
    start: u64,
    /// Where the open segment ends when full; `position` when none is open.
    full_end: u64,
    recording: Option<Recording>,
}

impl Tcp {
    /// The first segment already holds `startup` octets (`0..size`) that
    /// came before Full Operation.
    fn new(size: usize, startup: usize, record: bool) -> Tcp {
        Tcp {
            position: 0,
            start: 0,
            full_end: if startup == 0 {
                0
            } else {
                (size - startup) as u64
            },
            recording: record.then(Recording::default),
        }
    }

    /// Where the segments fall in the next call's room.
    fn segments(&self, size: usize) -> Segments {
        Segments {
            first: (self.full_end - self.position) as usize,
            size,
        }
    }

    /// Takes the octets a call wrote: the segments they fill are cut, the
    /// last one they leave unfinished stays open.
    fn take(&mut self, octets: &[u8], size: usize) {
        if let Some(recording) = &mut self.recording {
            recording.stream.extend_from_slice(octets);
        }
        let end = self.position + octets.len() as u64;
        while self.position < end {
            if self.full_end == self.position {
                self.start = self.position;
                self.full_end = self.position + size as u64;
            }
            self.position = self.full_end.min(end);
            if self.position == self.full_end {
                self.record();
            }
        }
    }

    /// Sends the open segment as it is: the next octet starts a segment.
    fn send_short(&mut self) {
        if self.full_end > self.position {
            if self.position > self.start {
                self.record();
            }
            self.full_end = self.position;
        }
    }

    /// Records the segment from `start` to the current position.
    fn record(&mut self) {
        if let Some(recording) = &mut self.recording {
            recording.segments.push(TcpSegment {
                start: self.start,
                end: self.position,
                full_end: self.full_end,
            });
        }
    }

    fn take_recording(&mut self) -> Recording {
        if self.full_end > self.position && self.position > self.start {
            self.record();
            self.start = self.position;
        }
        self.recording.take().unwrap_or_default()
    }
}
