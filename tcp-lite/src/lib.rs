//! dpwarp's TCP under MPA: smoltcp's TCP behind one connection interface.
//!
//! Heads up! Before working on this crate read RFC 9293 (TCP), RFC 7323
//! (window scaling), RFC 5044 (how MPA wants FPDUs placed in segments)
//! and smoltcp's `socket/tcp.rs`, whose behaviour this crate inherits.
//!
//! Everything here is sans-IO except [`sys`]: no socket, clock or thread. Time
//! is an argument ([`Instant`]), and a [`Stack`] owns a smoltcp
//! [`phy::Device`](smoltcp::phy::Device), the boundary the DPDK port in
//! `dataplane` implements as well.
//!
//! * [`Stack`]: many TCP connections on one interface (active open,
//!   listen/accept, zero-copy send into the socket's transmit ring, borrowed
//!   receive slices with their stream position, close, abort, events).
//! * [`link`]: an in-memory link pair with seeded fault injection, for tests
//!   and the embedded benchmark.
//! * [`fault`]: [`Lossy`], seeded loss each way at any device (a TAP device,
//!   a DPDK port), for runs against real peers.
//! * [`rss`]: the Toeplitz hash and redirection table of receive-side
//!   scaling, and the [`Steering`] that makes a stack on one queue of a
//!   multi-queue port pick local ports whose replies reach that queue.
//! * [`sys::tap`]: a TAP device, for running without DPDK.
//! * [`sys::kernel`]: the same [`Transport`] interface over Linux TCP sockets.
//! * [`Datagrams`]: UDP sockets beside the TCP connections ([`Stack`] on its
//!   device, [`sys::udp`] over Linux), for SCTP over UDP encapsulation.
#![forbid(unsafe_code)]

mod config;
mod event;
pub mod fault;
pub mod link;
mod mark;
pub mod rss;
mod stack;
pub mod sys;
mod transport;

pub use config::{
    ConfigError, CongestionControl, StackConfig, TcpConfig, BACKLOG_LIMIT, MAX_CONNECTIONS_LIMIT,
    UDP_DATAGRAMS_LIMIT, USER_TIMEOUT_LIMIT,
};
pub use event::{ConnId, Event, EventKind, ListenerId};
pub use fault::{Lossy, LossyStats};
pub use rss::{Reta, RetaError, Steering, Toeplitz};
pub use smoltcp;
pub use smoltcp::socket::tcp::RecoveryStats;
pub use smoltcp::time::{Duration, Instant};
pub use stack::{Stack, StackStats, LISTENERS_MAX, RX_BURST_PACKETS_MAX, TX_BURST_ROUNDS_MAX};
pub use transport::{
    ConnectError, Datagrams, DirectReceive, ListenError, RecvError, SendError, Transport, UdpError,
    UdpId,
};
