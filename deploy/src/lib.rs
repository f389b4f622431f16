//! The dpwarp appliance: `dpwarpd`, an iWARP target that runs as a service
//! on dpwarp's poll-mode cores, and `dpwarpctl`, its operator's tool.
//!
//! * [`config`]: the TOML configuration, every option explicit, refused
//!   with file, line, key and what is allowed.
//! * [`daemon`]: the port, the pinned cores serving, the drain.
//! * [`memory`]: the memory service: named regions lent by name.
//! * [`metrics`]: the Prometheus endpoint; [`histogram`], the histograms
//!   the cores write into for it.
//! * [`ctl`]: the control socket (`status`, `stats`, `listeners`,
//!   `connections`, `drain`).
//! * [`bounded`]: how those two serve their clients: a few at once, each
//!   within a deadline, none holding up the daemon's stop.
//! * [`signals`]: SIGTERM and SIGINT drain, a second one forces the exit;
//!   SIGHUP reloads.
//!
//! The daemon reads the clock and owns threads; the sans-IO crates it
//! drives never do.
#![forbid(unsafe_code)]
#![allow(clippy::disallowed_methods)]

pub mod bounded;
pub mod config;
pub mod ctl;
pub mod daemon;
pub mod histogram;
pub mod memory;
pub mod metrics;
pub mod signals;
