//! The dpwarp appliance.
//!
//! Not built yet: configuration (hugepages, lcore map, ring sizes, CRC and
//! marker policy, every option explicit), systemd units and metrics.
#![forbid(unsafe_code)]
