//! Decode iWARP traffic (MPA with RFC 6581 enhanced data and markers, DDP,
//! RDMAP with RFC 7306 atomics and immediate data, Terminate in RFC 5040's
//! and Linux siw's layouts) from packet captures, over TCP and over SCTP
//! (RFC 5043 and RFC 6581 §7: SCTP directly over IP, or over UDP port 9899
//! per RFC 6951).
//!
//! [`decode::Decoder`] turns reassembled TCP streams, and the chunks of
//! SCTP packets, into [`decode::Message`]s;
//! [`render`] prints them as text lines or JSON objects; [`run`] is the
//! whole `dpwarp-pcap` tool over any reader.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod decode;
pub mod render;

use std::fmt;
use std::io::{self, Read, Write};

use dpwarp_capture::packet::defrag::{Defrag, Defragmenter};
use dpwarp_capture::reassembly::{Limits, Reassembler};
use dpwarp_capture::{packet, pcap};

/// IP protocols whose IPv4 fragments are reassembled, and whose fragments
/// not reassembled are counted as not decoded ([`decode::Summary::fragments`]):
/// TCP, UDP (SCTP over UDP, RFC 6951) and SCTP. Fragments of others (ICMP,
/// say) carry nothing this tool decodes.
const FRAGMENTED_PROTOCOLS: [u8; 3] = [6, 17, packet::IP_PROTOCOL_SCTP];

/// What `dpwarp-pcap` was asked to do.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// One JSON object per line instead of text.
    pub json: bool,
    /// Decoder options.
    pub options: decode::Options,
    /// Output style.
    pub style: render::Style,
    /// Print the closing summary line (text output only).
    pub summary: bool,
}

/// Why a run stopped early.
#[derive(Debug)]
pub enum RunError {
    /// The capture file is unreadable, truncated or not a capture.
    Capture(pcap::Error),
    /// Writing the output failed.
    Output(io::Error),
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Capture(e) => write!(f, "{e}"),
            RunError::Output(e) => write!(f, "cannot write output: {e}"),
        }
    }
}

impl std::error::Error for RunError {}

/// A capture being decoded record by record.
pub struct Session<R: Read> {
    reader: pcap::Reader<R>,
    defragmenter: Defragmenter,
    /// The defragmenter's dropped fragments already told to the decoder.
    fragments_dropped: u64,
    reassembler: Reassembler,
    decoder: decode::Decoder,
    events: Vec<dpwarp_capture::reassembly::Event>,
    t0_ns: Option<u64>,
    finished: bool,
    failure: Option<pcap::Error>,
}

impl<R: Read> Session<R> {
    /// Reads the capture's file header.
    pub fn new(input: R, options: decode::Options) -> Result<Self, pcap::Error> {
        Ok(Session {
            reader: pcap::Reader::new(input)?,
            defragmenter: Defragmenter::new(&FRAGMENTED_PROTOCOLS),
            fragments_dropped: 0,
            reassembler: Reassembler::new(Limits::default()),
            decoder: decode::Decoder::new(options),
            events: Vec::new(),
            t0_ns: None,
            finished: false,
            failure: None,
        })
    }

    /// Reads one record and decodes what it completes. At the end of the
    /// capture, or at its first error, flushes what is incomplete and
    /// returns `false`; the error is then in [`Session::failure`].
    pub fn advance(&mut self) -> bool {
        if self.finished {
            return false;
        }
        match self.reader.next_record() {
            Some(Ok(record)) => {
                self.t0_ns.get_or_insert(record.ts_ns);
                // IPv4 fragments (RFC 791 §3.2) wait for the rest of their
                // datagram; the frame that completes it carries it whole.
                let defrag = self.defragmenter.push(
                    record.frame,
                    record.ts_ns,
                    record.linktype,
                    record.data,
                );
                Self::note_fragments_dropped(
                    &self.defragmenter,
                    &mut self.fragments_dropped,
                    &mut self.decoder,
                );
                let datagram;
                let (linktype, data) = match defrag {
                    Defrag::Whole => (record.linktype, record.data),
                    Defrag::Held => return true,
                    Defrag::Complete(whole) => {
                        datagram = whole;
                        (pcap::linktype::RAW, &datagram[..])
                    }
                };
                let parsed = packet::parse_tcp(linktype, data);
                if let Err(packet::Skip::UnsupportedLinktype(linktype)) = parsed {
                    self.decoder
                        .note_unsupported_linktype(record.frame, record.ts_ns, linktype);
                } else if let Err(packet::Skip::Fragment { protocol }) = parsed {
                    // An IPv6 fragment, or an IPv4 one the capture cut. Only
                    // the first fragment holds the TCP or UDP header, so a
                    // UDP fragment may be SCTP over UDP or not: it counts
                    // all the same.
                    if FRAGMENTED_PROTOCOLS.contains(&protocol) {
                        self.decoder.note_fragments(1, record.frame, record.ts_ns);
                    }
                } else if let Ok(segment) = parsed {
                    self.decoder.begin_record(record.ts_ns);
                    self.reassembler
                        .push(record.frame, record.ts_ns, &segment, &mut self.events);
                    self.events
                        .drain(..)
                        .for_each(|e| self.decoder.handle_event(&e));
                    self.decoder.note_reassembly(
                        record.frame,
                        &segment,
                        self.reassembler.stats(),
                        &self.reassembler.limits(),
                    );
                    self.decoder
                        .handle_segment(record.frame, record.ts_ns, &segment);
                } else if let Ok(packet) = packet::parse_sctp(linktype, data) {
                    self.decoder.begin_record(record.ts_ns);
                    self.decoder
                        .handle_sctp(record.frame, record.ts_ns, &packet);
                }
                true
            }
            end => {
                self.failure = end.and_then(Result::err);
                self.defragmenter.finish();
                Self::note_fragments_dropped(
                    &self.defragmenter,
                    &mut self.fragments_dropped,
                    &mut self.decoder,
                );
                self.reassembler.finish(&mut self.events);
                self.events
                    .drain(..)
                    .for_each(|e| self.decoder.handle_event(&e));
                self.decoder.finish();
                self.finished = true;
                false
            }
        }
    }

    /// Tells the decoder of the fragments the defragmenter gave up since it
    /// last did, and how many datagrams it reassembled.
    fn note_fragments_dropped(
        defragmenter: &Defragmenter,
        told: &mut u64,
        decoder: &mut decode::Decoder,
    ) {
        let stats = defragmenter.stats();
        decoder.note_datagrams_reassembled(stats.datagrams);
        let dropped = stats.fragments_dropped - *told;
        if let (true, Some((frame, ts_ns))) = (dropped > 0, stats.first_dropped) {
            decoder.note_fragments(dropped, frame, ts_ns);
        }
        *told = stats.fragments_dropped;
    }

    /// Takes the messages decoded so far.
    pub fn messages(&mut self) -> std::vec::Drain<'_, decode::Message> {
        self.decoder.drain()
    }

    /// Time of the first record (times print relative to it).
    pub fn t0_ns(&self) -> u64 {
        self.t0_ns.unwrap_or(0)
    }

    /// Counters so far.
    pub fn summary(&self) -> decode::Summary {
        self.decoder.summary()
    }

    /// The capture error that ended the session early, if any.
    pub fn failure(&self) -> Option<&pcap::Error> {
        self.failure.as_ref()
    }

    fn take_failure(&mut self) -> Option<pcap::Error> {
        self.failure.take()
    }
}

/// Decodes a whole capture from `input` and prints every message to `out`.
///
/// On a capture error everything decoded before it is printed first (and
/// incomplete messages are flushed as problems), then the error returns.
pub fn run<R: Read, W: Write>(
    input: R,
    out: &mut W,
    config: &Config,
) -> Result<decode::Summary, RunError> {
    let mut session = Session::new(input, config.options.clone()).map_err(RunError::Capture)?;
    loop {
        let more = session.advance();
        let t0_ns = session.t0_ns();
        for message in session.messages() {
            let line = if config.json {
                render::json(&message, t0_ns, config.style).to_string()
            } else {
                render::text(&message, t0_ns, config.style)
            };
            writeln!(out, "{line}").map_err(RunError::Output)?;
        }
        if !more {
            break;
        }
    }
    let summary = session.summary();
    if config.summary && !config.json {
        writeln!(out, "{}", render::summary(&summary)).map_err(RunError::Output)?;
    }
    match session.take_failure() {
        Some(e) => Err(RunError::Capture(e)),
        None => Ok(summary),
    }
}

/// Decodes a whole capture into memory: every message, the counters, and
/// the capture error that stopped reading early, if any. For tests and
/// tools that inspect messages rather than print them.
pub fn decode_capture<R: Read>(
    input: R,
    options: decode::Options,
) -> (Vec<decode::Message>, decode::Summary, Option<pcap::Error>) {
    let mut session = match Session::new(input, options) {
        Ok(session) => session,
        Err(e) => return (Vec::new(), decode::Summary::default(), Some(e)),
    };
    let mut messages = Vec::new();
    loop {
        let more = session.advance();
        messages.extend(session.messages());
        if !more {
            break;
        }
    }
    let summary = session.summary();
    (messages, summary, session.take_failure())
}
