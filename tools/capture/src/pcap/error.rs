//! What can go wrong while reading a capture file.

use core::fmt;
use std::io;

/// The part of a capture file that was being read when an [`Error`] occurred.
///
/// It is named in error messages so that "truncated record header" and "truncated record
/// data" tell the reader which length field to distrust.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The magic number and, for classic pcap, the 24-byte file header.
    FileHeader,
    /// The 16-byte header in front of every classic pcap record.
    RecordHeader,
    /// The captured bytes of a classic pcap record.
    RecordData,
    /// The type and length words that open every pcapng block.
    BlockHeader,
    /// The body of a pcapng block, including its trailing length word.
    BlockBody,
}

/// Why a capture file could not be read (further).
///
/// Every variant that refers to a place in the file carries `offset`, the byte offset
/// from the start of the file of the header, record or block concerned, so that the
/// problem can be found with a hex dump. `frame` is the 1-based number the packet record
/// would have had, as in [`super::Record::frame`].
///
/// Unlike the wire errors elsewhere in the workspace, this type is not `Copy`: it has to
/// carry the [`io::Error`] of the underlying reader.
#[derive(Debug)]
pub enum Error {
    /// The underlying reader failed.
    Io {
        /// Bytes successfully consumed before the failure.
        offset: u64,
        /// The error the reader returned.
        source: io::Error,
    },
    /// The file starts with neither a classic pcap magic number nor a pcapng Section
    /// Header Block.
    BadMagic {
        /// The first four bytes of the file, read big-endian (as a hex dump shows them).
        magic: u32,
    },
    /// The file declares a format version this reader does not understand.
    UnsupportedVersion {
        /// Offset of the file header or Section Header Block.
        offset: u64,
        /// Declared major version.
        major: u16,
        /// Declared minor version.
        minor: u16,
    },
    /// The file ended in the middle of a header, record or block.
    Truncated {
        /// What was being read.
        part: Part,
        /// Offset where that part starts.
        offset: u64,
        /// The packet record being read, if the part belongs to one.
        frame: Option<u64>,
    },
    /// A record claims more captured bytes than [`super::CAPTURED_LEN_MAX`].
    RecordTooLong {
        /// Offset of the record header or block.
        offset: u64,
        /// The frame number the record would have had.
        frame: u64,
        /// The captured length the file claims.
        len: u32,
        /// The limit it exceeds.
        limit: u32,
    },
    /// A pcapng block claims more bytes than [`super::BLOCK_LEN_MAX`].
    BlockTooLong {
        /// Offset of the block.
        offset: u64,
        /// The block total length the file claims.
        len: u32,
        /// The limit it exceeds.
        limit: u32,
    },
    /// A pcapng block length is not a multiple of 4 or is below the minimum for its type.
    BadBlockLength {
        /// Offset of the block.
        offset: u64,
        /// The block type as read.
        block_type: u32,
        /// The block total length as read.
        len: u32,
    },
    /// The length word that closes a pcapng block differs from the one that opens it.
    BlockLengthMismatch {
        /// Offset of the block.
        offset: u64,
        /// The length in the block header.
        header: u32,
        /// The length in the block trailer.
        trailer: u32,
    },
    /// A Section Header Block has a byte-order magic that is neither 0x1A2B3C4D nor its
    /// byte swap.
    BadByteOrderMagic {
        /// Offset of the Section Header Block.
        offset: u64,
        /// The four bytes read, big-endian.
        magic: u32,
    },
    /// A packet block's captured length does not fit inside the block.
    PacketExceedsBlock {
        /// Offset of the block.
        offset: u64,
        /// The frame number the packet would have had.
        frame: u64,
        /// The captured length the block claims.
        len: u32,
    },
    /// A packet block refers to an interface the section has not described.
    UnknownInterface {
        /// Offset of the block.
        offset: u64,
        /// The frame number the packet would have had.
        frame: u64,
        /// The interface id the block names.
        interface: u32,
    },
    /// A section describes more interfaces than [`super::INTERFACES_MAX`].
    TooManyInterfaces {
        /// Offset of the Interface Description Block that crossed the limit.
        offset: u64,
        /// The limit.
        limit: usize,
    },
    /// The option list of an Interface Description Block runs past the end of the block.
    BadOptions {
        /// Offset of the block.
        offset: u64,
    },
}

impl Error {
    /// The byte offset in the file that the error refers to.
    pub fn offset(&self) -> u64 {
        match self {
            Error::BadMagic { .. } => 0,
            Error::Io { offset, .. }
            | Error::UnsupportedVersion { offset, .. }
            | Error::Truncated { offset, .. }
            | Error::RecordTooLong { offset, .. }
            | Error::BlockTooLong { offset, .. }
            | Error::BadBlockLength { offset, .. }
            | Error::BlockLengthMismatch { offset, .. }
            | Error::BadByteOrderMagic { offset, .. }
            | Error::PacketExceedsBlock { offset, .. }
            | Error::UnknownInterface { offset, .. }
            | Error::TooManyInterfaces { offset, .. }
            | Error::BadOptions { offset } => *offset,
        }
    }
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Part::FileHeader => "file header",
            Part::RecordHeader => "record header",
            Part::RecordData => "record data",
            Part::BlockHeader => "block header",
            Part::BlockBody => "block body",
        })
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { offset, source } => write!(f, "read error at byte {offset}: {source}"),
            Error::BadMagic { magic } => {
                write!(f, "not a pcap or pcapng file: magic 0x{magic:08x}")
            }
            Error::UnsupportedVersion {
                offset,
                major,
                minor,
            } => {
                write!(
                    f,
                    "unsupported file format version {major}.{minor} at byte {offset}"
                )
            }
            Error::Truncated {
                part,
                offset,
                frame,
            } => {
                write!(f, "truncated {part} at byte {offset}")?;
                write_frame(f, *frame)
            }
            Error::RecordTooLong {
                offset,
                frame,
                len,
                limit,
            } => write!(
                f,
                "record length {len} exceeds limit {limit} at byte {offset} (frame {frame})"
            ),
            Error::BlockTooLong { .. }
            | Error::BadBlockLength { .. }
            | Error::BlockLengthMismatch { .. }
            | Error::BadByteOrderMagic { .. }
            | Error::PacketExceedsBlock { .. }
            | Error::UnknownInterface { .. }
            | Error::TooManyInterfaces { .. }
            | Error::BadOptions { .. } => self.fmt_pcapng(f),
        }
    }
}

impl Error {
    /// Messages for the errors only pcapng framing produces; split from `fmt` to keep
    /// both short.
    fn fmt_pcapng(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::BlockTooLong { offset, len, limit } => {
                write!(
                    f,
                    "block length {len} exceeds limit {limit} at byte {offset}"
                )
            }
            Error::BadBlockLength {
                offset,
                block_type,
                len,
            } => write!(
                f,
                "invalid length {len} for block type 0x{block_type:08x} at byte {offset}"
            ),
            Error::BlockLengthMismatch {
                offset,
                header,
                trailer,
            } => write!(
                f,
                "block at byte {offset} opens with length {header} but closes with {trailer}"
            ),
            Error::BadByteOrderMagic { offset, magic } => write!(
                f,
                "section header at byte {offset} has byte-order magic 0x{magic:08x}, \
                 expected 0x1a2b3c4d"
            ),
            Error::PacketExceedsBlock { offset, frame, len } => write!(
                f,
                "captured length {len} does not fit in the block at byte {offset} (frame {frame})"
            ),
            Error::UnknownInterface {
                offset,
                frame,
                interface,
            } => write!(
                f,
                "packet block at byte {offset} (frame {frame}) names undescribed interface \
                 {interface}"
            ),
            Error::TooManyInterfaces { offset, limit } => write!(
                f,
                "more than {limit} interfaces in one section (block at byte {offset})"
            ),
            Error::BadOptions { offset } => write!(
                f,
                "options of the interface description block at byte {offset} overrun the block"
            ),
            // Formatted by `Display::fmt` itself.
            Error::Io { .. }
            | Error::BadMagic { .. }
            | Error::UnsupportedVersion { .. }
            | Error::Truncated { .. }
            | Error::RecordTooLong { .. } => Ok(()),
        }
    }
}

fn write_frame(f: &mut fmt::Formatter<'_>, frame: Option<u64>) -> fmt::Result {
    match frame {
        Some(frame) => write!(f, " (frame {frame})"),
        None => Ok(()),
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
