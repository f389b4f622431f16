//! Classic pcap and pcapng files: a bounded reader and a small classic-pcap writer.
//!
//! Reading list: the libpcap "pcap-savefile" manual page (classic format, magic numbers
//! 0xa1b2c3d4 for microsecond and 0xa1b23c4d for nanosecond time stamps) and the IETF
//! OPSAWG pcapng draft (Section Header, Interface Description, Enhanced Packet, Simple
//! Packet and the obsolete Packet Block).
//!
//! The reader trusts no length field. Before any buffer grows, a record's captured length
//! is checked against [`CAPTURED_LEN_MAX`] and a block's total length against
//! [`BLOCK_LEN_MAX`]; and even within those limits the buffer only grows as bytes
//! actually arrive, so a 100-byte file that claims a 16 MiB block costs no 16 MiB. The
//! first error ends the stream: a reader that has lost its framing cannot resynchronise
//! reliably, and guessing would make the decoder print plausible nonsense.

mod classic;
mod error;
mod ng;
mod writer;

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;

pub use self::error::{Error, Part};
pub use self::writer::Writer;

/// Largest captured length accepted for one packet record, in bytes.
///
/// 262144 is tcpdump's default snapshot length since 4.0 (libpcap's `MAXIMUM_SNAPLEN`),
/// so no capture taken with default settings exceeds it, while a corrupt length field
/// cannot make us allocate more than this per record.
pub const CAPTURED_LEN_MAX: u32 = 262_144;

/// Largest pcapng block accepted, in bytes (the block's total length field).
///
/// A packet block needs at most [`CAPTURED_LEN_MAX`] plus its header and options; 16 MiB
/// leaves room for large name-resolution or statistics blocks, which we skip but must
/// still read past.
pub const BLOCK_LEN_MAX: u32 = 16 << 20;

/// Largest number of Interface Description Blocks accepted in one pcapng section.
///
/// Each costs a few bytes of state; the limit keeps a file made of nothing but interface
/// descriptions from growing that table without bound.
pub const INTERFACES_MAX: usize = 1024;

const _: () = assert!(CAPTURED_LEN_MAX < BLOCK_LEN_MAX);
const _: () = assert!(BLOCK_LEN_MAX.is_multiple_of(4));

/// Link-layer header type numbers used in capture files (tcpdump.org "LINKTYPE_" list).
pub mod linktype {
    /// BSD loopback: a 4-byte address family in the byte order of the capturing host.
    pub const NULL: u32 = 0;
    /// Ethernet II, possibly with 802.1Q / 802.1ad tags.
    pub const ETHERNET: u32 = 1;
    /// Raw IPv4 or IPv6, as the `DLT_RAW` value of most BSDs and Linux writes it.
    pub const RAW_DLT_12: u32 = 12;
    /// Raw IPv4 or IPv6, as OpenBSD's `DLT_RAW` value writes it.
    pub const RAW_DLT_14: u32 = 14;
    /// Raw IPv4 or IPv6 (`LINKTYPE_RAW`).
    pub const RAW: u32 = 101;
    /// OpenBSD loopback: like [`NULL`] but the family is in network byte order.
    pub const LOOP: u32 = 108;
    /// Linux "cooked" capture, version 1 (`tcpdump -i any` before libpcap 1.10).
    pub const LINUX_SLL: u32 = 113;
    /// Raw IPv4 only.
    pub const IPV4: u32 = 228;
    /// Raw IPv6 only.
    pub const IPV6: u32 = 229;
    /// Linux "cooked" capture, version 2 (`tcpdump -i any` since libpcap 1.10).
    pub const LINUX_SLL2: u32 = 276;
}

/// One captured packet.
///
/// `data` borrows the reader's buffer, which is reused for the next record; copy it out
/// if it must outlive the next call to [`Reader::next_record`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// 1-based position of this packet among the packet records of the file, counted as
    /// Wireshark counts its frame numbers (non-packet pcapng blocks are not counted).
    pub frame: u64,
    /// Capture time in nanoseconds since the Unix epoch. Zero for pcapng Simple Packet
    /// Blocks, which carry no time stamp.
    pub ts_ns: u64,
    /// Link-layer header type of `data`, see [`linktype`].
    pub linktype: u32,
    /// Length of the packet on the wire; `data` is shorter if the snapshot length cut it.
    pub orig_len: u32,
    /// The captured bytes, starting with the link-layer header.
    pub data: &'a [u8],
}

/// A streaming reader of classic pcap or pcapng records.
///
/// Memory use is bounded by one block ([`BLOCK_LEN_MAX`]) plus the interface table of the
/// current section ([`INTERFACES_MAX`] entries), whatever the input.
#[derive(Debug)]
pub struct Reader<R: Read> {
    source: Source<R>,
    format: Format,
    /// Packet records yielded so far.
    frames: u64,
    /// Set by the first error or the end of input; after it we yield only `None`.
    done: bool,
}

#[derive(Debug)]
enum Format {
    Classic(classic::Header),
    Ng(ng::Section),
}

/// The input plus the buffer and file offset that every format shares.
#[derive(Debug)]
struct Source<R> {
    input: R,
    /// Holds the current record's data; [`Record::data`] borrows all of it.
    buf: Vec<u8>,
    /// Bytes consumed from `input` so far, for error messages.
    offset: u64,
}

/// Byte order of the multi-byte fields of a file or pcapng section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endian {
    Little,
    Big,
}

/// What a format reader learned about the record it left in [`Source::buf`].
struct RecordMeta {
    ts_ns: u64,
    linktype: u32,
    orig_len: u32,
}

/// Opens a capture file for reading, buffered.
pub fn open(path: impl AsRef<Path>) -> Result<Reader<BufReader<File>>, Error> {
    let file = File::open(path).map_err(|source| Error::Io { offset: 0, source })?;
    Reader::new(BufReader::new(file))
}

impl<R: Read> Reader<R> {
    /// Reads the file header (classic) or first Section Header Block (pcapng).
    pub fn new(input: R) -> Result<Self, Error> {
        let mut source = Source {
            input,
            buf: Vec::new(),
            offset: 0,
        };
        let magic: [u8; 4] = source.read_array(Part::FileHeader, 0, None)?;
        let format = if magic == ng::SHB_TYPE {
            Format::Ng(ng::Section::read_first(&mut source)?)
        } else {
            Format::Classic(classic::Header::read(&mut source, magic)?)
        };
        Ok(Reader {
            source,
            format,
            frames: 0,
            done: false,
        })
    }

    /// Returns the next packet record, `None` at the end of the file, or the error that
    /// stopped reading. After an error or the end, every call returns `None`.
    pub fn next_record(&mut self) -> Option<Result<Record<'_>, Error>> {
        if self.done {
            return None;
        }
        let frame = self.frames.saturating_add(1);
        let meta = match &mut self.format {
            Format::Classic(header) => header.next(&mut self.source, frame),
            Format::Ng(section) => section.next(&mut self.source, frame),
        };
        match meta {
            Ok(Some(meta)) => {
                self.frames = frame;
                Some(Ok(Record {
                    frame,
                    ts_ns: meta.ts_ns,
                    linktype: meta.linktype,
                    orig_len: meta.orig_len,
                    data: &self.source.buf,
                }))
            }
            Ok(None) => {
                self.done = true;
                None
            }
            Err(error) => {
                self.done = true;
                Some(Err(error))
            }
        }
    }

    /// The number of bytes consumed from the input so far.
    pub fn offset(&self) -> u64 {
        self.source.offset
    }
}

impl<R: Read> Source<R> {
    /// Reads up to `buf.len()` bytes, stopping early only at the end of input.
    fn read_up_to(&mut self, buf: &mut [u8]) -> Result<usize, Error> {
        let mut filled = 0;
        while filled < buf.len() {
            match self.input.read(&mut buf[filled..]) {
                Ok(0) => break,
                // `min` guards against a reader that reports more than it was given.
                Ok(n) => filled += n.min(buf.len() - filled),
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(Error::Io {
                        offset: self.offset + filled as u64,
                        source,
                    })
                }
            }
        }
        self.offset += filled as u64;
        Ok(filled)
    }

    /// Reads exactly `N` bytes of `part`, which starts at `start`.
    fn read_array<const N: usize>(
        &mut self,
        part: Part,
        start: u64,
        frame: Option<u64>,
    ) -> Result<[u8; N], Error> {
        let mut bytes = [0; N];
        match self.read_up_to(&mut bytes)? {
            n if n == N => Ok(bytes),
            _ => Err(Error::Truncated {
                part,
                offset: start,
                frame,
            }),
        }
    }

    /// Like [`Self::read_array`] for a part starting here, but a clean end of input
    /// before its first byte is `Ok(None)`: that is where a well-formed file ends.
    fn read_array_or_eof<const N: usize>(
        &mut self,
        part: Part,
        frame: Option<u64>,
    ) -> Result<Option<[u8; N]>, Error> {
        let start = self.offset;
        let mut bytes = [0; N];
        match self.read_up_to(&mut bytes)? {
            0 => Ok(None),
            n if n == N => Ok(Some(bytes)),
            _ => Err(Error::Truncated {
                part,
                offset: start,
                frame,
            }),
        }
    }

    /// Replaces `buf` with exactly `len` bytes of `part`, which starts at `start`.
    ///
    /// The caller has checked `len` against a limit. `read_to_end` on a `take` grows the
    /// buffer only as data arrives, so a truncated file never costs the claimed length.
    fn read_into_buf(
        &mut self,
        len: u32,
        part: Part,
        start: u64,
        frame: Option<u64>,
    ) -> Result<(), Error> {
        self.buf.clear();
        let result = (&mut self.input)
            .take(u64::from(len))
            .read_to_end(&mut self.buf);
        let got = self.buf.len() as u64;
        self.offset += got;
        match result {
            Err(source) => Err(Error::Io {
                offset: self.offset,
                source,
            }),
            Ok(_) if got == u64::from(len) => Ok(()),
            Ok(_) => Err(Error::Truncated {
                part,
                offset: start,
                frame,
            }),
        }
    }
}

impl Endian {
    fn u16(self, bytes: [u8; 2]) -> u16 {
        match self {
            Endian::Little => u16::from_le_bytes(bytes),
            Endian::Big => u16::from_be_bytes(bytes),
        }
    }

    fn u32(self, bytes: [u8; 4]) -> u32 {
        match self {
            Endian::Little => u32::from_le_bytes(bytes),
            Endian::Big => u32::from_be_bytes(bytes),
        }
    }

    fn u64(self, bytes: [u8; 8]) -> u64 {
        match self {
            Endian::Little => u64::from_le_bytes(bytes),
            Endian::Big => u64::from_be_bytes(bytes),
        }
    }

    /// Reads a `u16` at `at`, or `None` if `bytes` is too short.
    fn u16_at(self, bytes: &[u8], at: usize) -> Option<u16> {
        let field = bytes.get(at..at.checked_add(2)?)?;
        Some(self.u16(field.try_into().ok()?))
    }

    /// Reads a `u32` at `at`, or `None` if `bytes` is too short.
    fn u32_at(self, bytes: &[u8], at: usize) -> Option<u32> {
        let field = bytes.get(at..at.checked_add(4)?)?;
        Some(self.u32(field.try_into().ok()?))
    }

    /// Reads a `u64` at `at`, or `None` if `bytes` is too short.
    fn u64_at(self, bytes: &[u8], at: usize) -> Option<u64> {
        let field = bytes.get(at..at.checked_add(8)?)?;
        Some(self.u64(field.try_into().ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_input_is_a_truncated_file_header() {
        let error = Reader::new(&[][..]).unwrap_err();
        assert!(matches!(
            error,
            Error::Truncated {
                part: Part::FileHeader,
                offset: 0,
                ..
            }
        ));
        assert_eq!(error.to_string(), "truncated file header at byte 0");
    }

    #[test]
    fn unknown_magic_is_named() {
        let error = Reader::new(&[0x12, 0x34, 0x56, 0x78, 0, 0, 0, 0][..]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "not a pcap or pcapng file: magic 0x12345678"
        );
    }

    #[test]
    fn endian_reads_are_bounded() {
        assert_eq!(Endian::Little.u32_at(&[1, 0, 0, 0], 0), Some(1));
        assert_eq!(Endian::Big.u32_at(&[0, 0, 0, 1], 0), Some(1));
        assert_eq!(Endian::Big.u32_at(&[0, 0, 0], 0), None);
        assert_eq!(Endian::Big.u16_at(&[0, 0, 0], usize::MAX), None);
        assert_eq!(Endian::Little.u64_at(&[0; 9], 2), None);
    }
}
