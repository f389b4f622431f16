//! dpwarp's data plane.
//!
//! Not built yet: this crate will own DPDK (through its own bindgen
//! `dpdk-sys` crate against DPDK 22.11), the poll-mode lcores and the
//! control-plane thread runtime, gluing `rnic-engine`, `tcp-lite` and
//! `control` together. It is the only crate allowed to depend on DPDK.
#![forbid(unsafe_code)]
