//! MPA (RFC 5044) below DDP: the CRC32c now; the framer and deframer with
//! markers come with issue 3.

pub mod crc;
