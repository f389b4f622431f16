//! dpwarp's benchmark: two whole software RNICs (engine, tcp-lite TCP and
//! the control plane's MPA/RFC 6581 startup) joined by a transport, driven
//! perftest-style, with HDR latency histograms, plots and a same-run
//! baseline.
//!
//! * [`args`]: the command line, in perftest's vocabulary.
//! * [`rig`]: the RNICs and their transport (embedded, kernel TCP, TAP, or
//!   a server in another process).
//! * [`hello`]: the workload each connection announces in MPA private data.
//! * [`responder`]: the server's side of every workload.
//! * [`workload`]: the client's bandwidth and latency loops.
//! * [`rping`]: `bench rping`, rdma-core's rping over dpwarp, both roles.
//! * [`perftest`]: `bench perftest`, perftest's six RC tests over dpwarp,
//!   both roles.
//! * [`report`]: tables, `.hgrm`, `.hlog`, SVG plots and the JSON report.
//!
//! A benchmark reads the clock; the sans-IO crates it drives never do.
#![allow(clippy::disallowed_methods)]

pub mod args;
pub mod hello;
pub mod perftest;
pub mod report;
pub mod responder;
pub mod rig;
pub mod rping;
pub mod workload;
