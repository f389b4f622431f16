//! dpwarp's data plane: DPDK ports and the poll-mode cores that run the
//! RNIC over them.
//!
//! * [`dpdk`]: the safe wrapper over DPDK 22.11 (EAL, mbuf pools, ports,
//!   queues): the crate's only `unsafe`.
//! * [`device`]: smoltcp's `phy::Device` over one DPDK queue pair, lending
//!   mbufs to smoltcp in place both ways.
//! * [`core`]: the poll-mode core's turn ([`Core`]): TCP, the control
//!   plane's link and the engine, generic over tcp-lite's transports.
//! * [`sctp`]: the poll-mode core of DDP over SCTP ([`SctpCore`]): UDP
//!   datagrams, SCTP associations, session control and the engine's message
//!   layer, over the same transports.
//! * [`steer`]: which core of a port owns a received frame, and the
//!   handoff of frames that arrived at another.
//! * [`lcore`]: pinned threads for cores, and the loop that runs a core
//!   with its application; [`clock`]: the time a turn is given.
#![deny(unsafe_code)]

mod checksum;
pub mod clock;
pub mod core;
pub mod device;
pub mod dpdk;
pub mod lcore;
pub mod ports;
pub mod sctp;
pub mod steer;
mod transport;

pub use checksum::{RxChecksum, TxChecksum};
pub use core::{Budgets, Core, CoreConfig, CoreCounters, PdChoice, PdFor};
pub use device::{DeviceConfig, DeviceCounters, DpdkDevice};
pub use sctp::{
    SctpCore, SctpCoreConfig, SctpCounters, SctpEvent, SctpUnit, StreamPdFor, UdpCarrier,
};
pub use transport::{CoreTransport, MessageTransport, Segmenting};
