//! The safe wrapper over DPDK (`dpdk-sys`): EAL ([`Eal`]), mbuf pools and
//! mbufs ([`Pool`], [`Mbuf`]), ports and their queues ([`Port`], [`Queue`]).
//!
//! This module holds all of the crate's `unsafe` (STYLE.md §1.1: the thin
//! wrapper over `dpdk-sys` is one of the workspace's three places for it),
//! each block with its `SAFETY` comment; everything it exports is safe to
//! use. Ownership carries DPDK's rules: an [`Mbuf`] frees itself, a pool
//! outlives its mbufs (a dropped pool's memory goes to EAL, which frees it
//! once every mbuf is provably home, at the latest at [`Eal::cleanup`]),
//! a port keeps its pools, a [`Queue`] is taken once and bursts only through
//! `&mut`, and the last handle of a port stops, closes and removes it.
#![allow(unsafe_code)]

mod eal;
mod mbuf;
mod memif_gate;
mod port;
mod rss;

pub use eal::{
    current_lcore, register_thread, Eal, EalConfig, EalError, Memory, PoolCounts,
    ThreadRegistration,
};
pub use mbuf::{
    check_layout, ChecksumOffloadError, ChecksumVerdict, Mbuf, Pool, HEADROOM, RX_IP_CHECKSUM,
    RX_L4_CHECKSUM,
};
pub use memif_gate::counters as memif_gate_counters;
pub use port::{Link, Port, PortConfig, PortInfo, PortStats, Queue, BURST_MAX};
pub use rss::{Rss, RssCaps};
