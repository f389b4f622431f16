//! dpwarp's SCTP for DDP: sctp-proto's associations carried in UDP.
//!
//! Heads up! Before working on this crate read RFC 9260 (SCTP), RFC 6951 (SCTP
//! over UDP), RFC 5061 §4.2.6 (the Adaptation Layer Indication), RFC 5043 (DDP
//! over SCTP: §5 its messages, §7.1 the adaptation check) and the fork's
//! changes in `third_party/sctp-proto/DPWARP.md`.
//!
//! Everything here is sans-IO: no socket, clock or thread. Time
//! is an argument ([`Instant`], the same type as tcp-lite's), and datagrams go
//! in and out as (remote [`SocketAddr`](std::net::SocketAddr), SCTP packet)
//! pairs: the UDP header of RFC 6951's encapsulation is the carrier's job.
//!
//! * [`Endpoint`]: associations to and from many peers over one UDP port
//!   ([`UDP_ENCAPSULATION_PORT`] by default): connect and accept, the DDP
//!   check of the peer's adaptation code point (RFC 5043 §7.1), messages on
//!   (association, stream, PPID, ordered or not), events, timers.
//!
//! The carrier of the datagrams is the caller's: `dataplane::sctp::Wire`
//! moves them between an endpoint and tcp-lite's UDP (a `Stack`'s device or
//! the kernel's sockets).
#![forbid(unsafe_code)]

mod config;
mod endpoint;
mod event;

pub use config::{
    Config, ConfigError, ADAPTATION_CODE_POINT_DDP, DATA_CHUNK_HEADER_LEN, IPV4_HEADER_LEN,
    PATH_MTU_MIN, SCTP_COMMON_HEADER_LEN, UDP_ENCAPSULATION_PORT, UDP_HEADER_LEN,
};
pub use endpoint::{
    ConnectError, Endpoint, Received, SendError, Transmit, PPID_DDP_SEGMENT,
    PPID_DDP_STREAM_SESSION_CONTROL,
};
pub use event::{AssocId, CloseReason, Event, EventKind};
pub use smoltcp::time::{Duration, Instant};

/// Makes `f` the CRC32c (RFC 9260 Appendix A) of every SCTP packet this
/// process writes or checks, once per process (`false`, and no change,
/// after the first): for a caller with a faster one than the `crc32c`
/// crate's. `dataplane::SctpCore` sets the engine's VPCLMULQDQ kernel
/// (`rnic_engine::mpa::crc::append`), the workspace's one CRC32c.
pub fn use_crc32c(f: fn(u32, &[u8]) -> u32) -> bool {
    sctp_proto::set_crc32c_append(f)
}
