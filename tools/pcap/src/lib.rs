//! Decode iWARP traffic (MPA with RFC 6581 enhanced data and markers, DDP,
//! RDMAP with RFC 7306 atomics and immediate data, Terminate in RFC 5040's
//! and Linux siw's layouts) from packet captures.
//!
//! [`decode::Decoder`] turns reassembled TCP streams into [`decode::Message`]s;
//! [`render`] prints them as text lines or JSON objects; [`run`] is the
//! whole `dpwarp-pcap` tool over any reader.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod decode;
pub mod render;

use std::fmt;
use std::io::{self, Read, Write};

use dpwarp_capture::reassembly::{Limits, Reassembler};
use dpwarp_capture::{packet, pcap};

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

/// Decodes a whole capture from `input` and prints every message to `out`.
///
/// On a capture error everything decoded before it is printed first (and
/// incomplete messages are flushed as problems), then the error returns.
pub fn run<R: Read, W: Write>(input: R, out: &mut W, config: &Config) -> Result<decode::Summary, RunError> {
    let mut reader = pcap::Reader::new(input).map_err(RunError::Capture)?;
    let mut reassembler = Reassembler::new(Limits::default());
    let mut decoder = decode::Decoder::new(config.options.clone());
    let mut events = Vec::new();
    let mut t0_ns = None;
    let mut failure = None;
    loop {
        let record = match reader.next_record() {
            None => break,
            Some(Err(e)) => {
                failure = Some(e);
                break;
            }
            Some(Ok(record)) => record,
        };
        let t0 = *t0_ns.get_or_insert(record.ts_ns);
        if let Ok(segment) = packet::parse_tcp(record.linktype, record.data) {
            decoder.begin_record(record.ts_ns);
            reassembler.push(record.frame, record.ts_ns, &segment, &mut events);
            events.drain(..).for_each(|e| decoder.handle_event(&e));
            decoder.handle_segment(record.frame, record.ts_ns, &segment);
        }
        print(&mut decoder, out, config, t0)?;
    }
    reassembler.finish(&mut events);
    events.drain(..).for_each(|e| decoder.handle_event(&e));
    decoder.finish();
    print(&mut decoder, out, config, t0_ns.unwrap_or(0))?;
    let summary = decoder.summary();
    if config.summary && !config.json {
        writeln!(out, "{}", render::summary(&summary)).map_err(RunError::Output)?;
    }
    match failure {
        Some(e) => Err(RunError::Capture(e)),
        None => Ok(summary),
    }
}

fn print<W: Write>(
    decoder: &mut decode::Decoder,
    out: &mut W,
    config: &Config,
    t0_ns: u64,
) -> Result<(), RunError> {
    for message in decoder.drain() {
        let line = if config.json {
            render::json(&message, t0_ns, config.style).to_string()
        } else {
            render::text(&message, t0_ns, config.style)
        };
        writeln!(out, "{line}").map_err(RunError::Output)?;
    }
    Ok(())
}
