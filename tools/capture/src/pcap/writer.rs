//! A classic pcap writer, for tests and tools that synthesise captures.

use std::io::{self, Write};

use super::CAPTURED_LEN_MAX;

/// The nanosecond-resolution magic, written little-endian. Nanoseconds let a record's
/// `ts_ns` survive a write and read unchanged, which round-trip tests rely on.
const MAGIC_NANOS: u32 = 0xa1b2_3c4d;
const VERSION_MAJOR: u16 = 2;
const VERSION_MINOR: u16 = 4;
const NS_PER_S: u64 = 1_000_000_000;

/// Writes a classic pcap file: little-endian, nanosecond time stamps, one link type.
///
/// The snapshot length in the header is [`CAPTURED_LEN_MAX`], and records longer than
/// that are refused, so everything written here can be read back by [`super::Reader`].
#[derive(Debug)]
pub struct Writer<W: Write> {
    out: W,
}

impl<W: Write> Writer<W> {
    /// Writes the file header for packets of link-layer type `linktype` (see
    /// [`super::linktype`]).
    ///
    /// Fails with [`io::ErrorKind::InvalidInput`] if `linktype` does not fit the 16 bits
    /// the format has for it.
    pub fn new(mut out: W, linktype: u32) -> io::Result<Self> {
        let linktype = u16::try_from(linktype)
            .map_err(|_| invalid_input(format!("link type {linktype} does not fit 16 bits")))?;
        let mut header = [0u8; 24];
        header[0..4].copy_from_slice(&MAGIC_NANOS.to_le_bytes());
        header[4..6].copy_from_slice(&VERSION_MAJOR.to_le_bytes());
        header[6..8].copy_from_slice(&VERSION_MINOR.to_le_bytes());
        // Bytes 8..16 (time zone, accuracy) stay zero, as the format asks of writers.
        header[16..20].copy_from_slice(&CAPTURED_LEN_MAX.to_le_bytes());
        header[20..24].copy_from_slice(&u32::from(linktype).to_le_bytes());
        out.write_all(&header)?;
        Ok(Writer { out })
    }

    /// Writes one record captured at `ts_ns` nanoseconds after the epoch, with its
    /// original length equal to `data.len()`.
    ///
    /// Fails with [`io::ErrorKind::InvalidInput`] if `data` is longer than
    /// [`CAPTURED_LEN_MAX`] or `ts_ns` is past the year 2106, where the 32-bit seconds
    /// field of the format ends.
    pub fn write_record(&mut self, ts_ns: u64, data: &[u8]) -> io::Result<()> {
        let len = u32::try_from(data.len())
            .ok()
            .filter(|&len| len <= CAPTURED_LEN_MAX)
            .ok_or_else(|| invalid_input(format!("record of {} bytes is too long", data.len())))?;
        let seconds = u32::try_from(ts_ns / NS_PER_S)
            .map_err(|_| invalid_input(format!("time stamp {ts_ns} ns does not fit pcap")))?;
        // Below NS_PER_S, so it fits.
        let fraction = (ts_ns % NS_PER_S) as u32;
        let mut header = [0u8; 16];
        header[0..4].copy_from_slice(&seconds.to_le_bytes());
        header[4..8].copy_from_slice(&fraction.to_le_bytes());
        header[8..12].copy_from_slice(&len.to_le_bytes());
        header[12..16].copy_from_slice(&len.to_le_bytes());
        self.out.write_all(&header)?;
        self.out.write_all(data)
    }

    /// Flushes and returns the underlying writer.
    pub fn into_inner(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

fn invalid_input(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}
