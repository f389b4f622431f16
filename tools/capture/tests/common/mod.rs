//! Helpers shared by the integration tests: golden files and a pcapng byte builder.
//!
//! Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use std::path::PathBuf;

use dpwarp_capture::packet;
use dpwarp_capture::pcap::{self, Error, Reader};
use dpwarp_capture::reassembly::{Event, Limits, Reassembler, Stats};

/// The directory of the real Linux siw captures.
pub(crate) fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/golden")
}

/// Every golden capture, sorted by name.
pub(crate) fn golden_pcaps() -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(golden_dir())
        .expect("golden directory exists")
        .map(|entry| entry.expect("readable directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "pcap"))
        .collect();
    paths.sort();
    paths
}

/// The bytes of one golden capture, by file name.
pub(crate) fn golden_bytes(name: &str) -> Vec<u8> {
    std::fs::read(golden_dir().join(name)).expect("golden capture is readable")
}

/// A record copied out of the reader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owned {
    pub(crate) frame: u64,
    pub(crate) ts_ns: u64,
    pub(crate) linktype: u32,
    pub(crate) orig_len: u32,
    pub(crate) data: Vec<u8>,
}

/// Reads every record of `bytes`; returns them and the error that ended reading, if any.
/// Asserts that the reader stays finished after its end or its error.
pub(crate) fn read_all(bytes: &[u8]) -> (Vec<Owned>, Option<Error>) {
    let mut reader = match Reader::new(bytes) {
        Ok(reader) => reader,
        Err(error) => return (Vec::new(), Some(error)),
    };
    let mut records = Vec::new();
    let mut error = None;
    while let Some(record) = reader.next_record() {
        match record {
            Ok(record) => records.push(Owned {
                frame: record.frame,
                ts_ns: record.ts_ns,
                linktype: record.linktype,
                orig_len: record.orig_len,
                data: record.data.to_vec(),
            }),
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    assert!(
        reader.next_record().is_none(),
        "reader yields nothing after the end or an error"
    );
    (records, error)
}

/// Runs bytes through reader, TCP parser and reassembler, as the decoder tool does.
pub(crate) fn pipeline(bytes: &[u8], limits: Limits) -> (Vec<Event>, Stats, Option<Error>) {
    let (records, error) = read_all(bytes);
    let mut reassembler = Reassembler::new(limits);
    let mut events = Vec::new();
    for record in &records {
        if let Ok(segment) = packet::parse_tcp(record.linktype, &record.data) {
            reassembler.push(record.frame, record.ts_ns, &segment, &mut events);
        }
    }
    reassembler.finish(&mut events);
    (events, reassembler.stats(), error)
}

/// Builds pcapng files block by block, in either byte order.
pub(crate) struct NgBuilder {
    pub(crate) big_endian: bool,
    pub(crate) bytes: Vec<u8>,
    /// Offsets where each block ends, i.e. where a clean cut leaves a valid file.
    pub(crate) block_ends: Vec<usize>,
}

pub(crate) const SHB: u32 = 0x0a0d_0d0a;
pub(crate) const IDB: u32 = 1;
pub(crate) const PB: u32 = 2;
pub(crate) const SPB: u32 = 3;
pub(crate) const EPB: u32 = 6;

impl NgBuilder {
    pub(crate) fn new(big_endian: bool) -> Self {
        NgBuilder {
            big_endian,
            bytes: Vec::new(),
            block_ends: Vec::new(),
        }
    }

    pub(crate) fn u16(&self, value: u16) -> [u8; 2] {
        if self.big_endian {
            value.to_be_bytes()
        } else {
            value.to_le_bytes()
        }
    }

    pub(crate) fn u32(&self, value: u32) -> [u8; 4] {
        if self.big_endian {
            value.to_be_bytes()
        } else {
            value.to_le_bytes()
        }
    }

    /// Appends a block with the given body, padded to 4 bytes.
    pub(crate) fn block(&mut self, block_type: u32, body: &[u8]) -> &mut Self {
        let padded = body.len().next_multiple_of(4);
        let len = u32::try_from(12 + padded).unwrap();
        let mut block = Vec::new();
        block.extend_from_slice(&self.u32(block_type));
        block.extend_from_slice(&self.u32(len));
        block.extend_from_slice(body);
        block.resize(8 + padded, 0);
        block.extend_from_slice(&self.u32(len));
        self.bytes.extend_from_slice(&block);
        self.block_ends.push(self.bytes.len());
        self
    }

    /// A Section Header Block, version 1.0, unknown section length.
    pub(crate) fn section(&mut self) -> &mut Self {
        let mut body = Vec::new();
        body.extend_from_slice(&self.u32(0x1a2b_3c4d));
        body.extend_from_slice(&self.u16(1));
        body.extend_from_slice(&self.u16(0));
        body.extend_from_slice(&[0xff; 8]);
        self.block(SHB, &body)
    }

    /// An Interface Description Block, with an if_tsresol option if given, plus an
    /// unrelated option (if_name) that must be skipped.
    pub(crate) fn interface(
        &mut self,
        linktype: u16,
        snaplen: u32,
        tsresol: Option<u8>,
    ) -> &mut Self {
        let mut body = Vec::new();
        body.extend_from_slice(&self.u16(linktype));
        body.extend_from_slice(&[0, 0]);
        body.extend_from_slice(&self.u32(snaplen));
        body.extend_from_slice(&self.u16(2));
        body.extend_from_slice(&self.u16(5));
        body.extend_from_slice(b"eth0\0\0\0\0");
        if let Some(tsresol) = tsresol {
            body.extend_from_slice(&self.u16(9));
            body.extend_from_slice(&self.u16(1));
            body.extend_from_slice(&[tsresol, 0, 0, 0]);
        }
        body.extend_from_slice(&[0, 0, 0, 0]);
        self.block(IDB, &body)
    }

    pub(crate) fn enhanced(
        &mut self,
        interface: u32,
        ts: u64,
        data: &[u8],
        orig_len: u32,
    ) -> &mut Self {
        let mut body = Vec::new();
        body.extend_from_slice(&self.u32(interface));
        body.extend_from_slice(&self.u32((ts >> 32) as u32));
        body.extend_from_slice(&self.u32(ts as u32));
        body.extend_from_slice(&self.u32(data.len() as u32));
        body.extend_from_slice(&self.u32(orig_len));
        body.extend_from_slice(data);
        self.block(EPB, &body)
    }

    pub(crate) fn simple(&mut self, orig_len: u32, data: &[u8]) -> &mut Self {
        let mut body = Vec::new();
        body.extend_from_slice(&self.u32(orig_len));
        body.extend_from_slice(data);
        self.block(SPB, &body)
    }

    pub(crate) fn obsolete(&mut self, interface: u16, ts: u64, data: &[u8]) -> &mut Self {
        let mut body = Vec::new();
        body.extend_from_slice(&self.u16(interface));
        body.extend_from_slice(&self.u16(0));
        body.extend_from_slice(&self.u32((ts >> 32) as u32));
        body.extend_from_slice(&self.u32(ts as u32));
        body.extend_from_slice(&self.u32(data.len() as u32));
        body.extend_from_slice(&self.u32(data.len() as u32));
        body.extend_from_slice(data);
        self.block(PB, &body)
    }
}

/// Shorthand used in assertions about messages.
pub(crate) fn message(error: &Option<Error>) -> String {
    error.as_ref().map(ToString::to_string).unwrap_or_default()
}

/// The classic-pcap link type of the golden files.
pub(crate) const ETHERNET: u32 = pcap::linktype::ETHERNET;
