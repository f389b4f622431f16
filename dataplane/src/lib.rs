//! dpwarp's data plane: DPDK ports and the poll-mode cores that run the
//! RNIC over them.
//!
//! * [`dpdk`]: the safe wrapper over DPDK 22.11 (EAL, mbuf pools, ports,
//!   queues): the crate's only `unsafe`.
//! * [`device`]: smoltcp's `phy::Device` over one DPDK queue pair, lending
//!   mbufs to smoltcp in place both ways.
#![deny(unsafe_code)]

mod checksum;
pub mod device;
pub mod dpdk;

pub use checksum::{RxChecksum, TxChecksum};
pub use device::{DeviceConfig, DeviceCounters, DpdkDevice};
