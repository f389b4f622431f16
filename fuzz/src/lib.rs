//! Helpers shared by the fuzz targets and by `corpus-tool`.
//!
//! Most targets take raw octets and need nothing from here. The exception is
//! `decode_stream`, which drives `dpwarp_pcap::decode::Decoder` with the
//! events TCP reassembly would produce. Its input is a small byte-oriented
//! script ([`stream`]) rather than an `arbitrary` structure, so that seeds
//! can be cut from real captures (`corpus-tool` writes them) and libFuzzer's
//! byte mutations stay meaningful.

pub mod stream;
