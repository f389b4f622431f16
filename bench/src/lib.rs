//! dpwarp's benchmark: two whole software RNICs (engine, tcp-lite TCP and
//! the control plane's MPA/RFC 6581 startup) joined by a transport, driven
//! perftest-style, with HDR latency histograms, plots and a same-run
//! baseline.
//!
//! * [`args`]: the command line, in perftest's vocabulary.
//! * [`spec`]: the vocabulary (operations, workloads, what was measured),
//!   a leaf every other module uses.
//! * [`endpoint`]: one whole RNIC: a poll-mode core, its control plane and
//!   registered memory.
//! * [`hello`]: the workload each connection announces in MPA private data.
//! * [`lease`]: ranges of a server's memory, one per client run it serves.
//! * [`link`]: the link options every tool shares (TAP, DPDK ports, CPUs).
//! * [`responder`]: the server: its side of every workload.
//! * [`rig`]: the RNICs and their transport (embedded, kernel TCP, TAP, or
//!   a server in another process).
//! * [`workload`]: the client's bandwidth and latency loops.
//! * [`cores`]: `--cores`, the workload on several pinned cores at once,
//!   each with its own port pair, and the scaling.
//! * [`rping`]: `bench rping`, rdma-core's rping over dpwarp, both roles.
//! * [`perftest`]: `bench perftest`, perftest's six RC tests over dpwarp,
//!   both roles.
//! * [`connect`]: `bench connect`, connection establishment (TCP and
//!   RFC 6581's enhanced MPA startup) per second and its latency;
//!   [`connect_report`], its settings and report, shared with the DDP over
//!   SCTP loop in [`sctp`].
//! * [`sctpecho`]: `bench sctp-echo`, DDP over SCTP with enhanced session
//!   control against a peer that echoes DDP segments (Linux kernel SCTP).
//! * [`portcost`]: `bench port`, the smoltcp device layer's cost per
//!   packet beside a raw DPDK loop on the same ports.
//! * [`report`]: tables, `.hgrm`, `.hlog`, SVG plots and the JSON report.
//!
//! A benchmark reads the clock; the sans-IO crates it drives never do.
#![allow(clippy::disallowed_methods)]

pub mod args;
pub mod connect;
pub mod connect_report;
pub mod cores;
pub mod endpoint;
pub mod hello;
pub mod lease;
pub mod link;
pub mod pace;
pub mod perftest;
pub mod portcost;
pub mod report;
pub mod responder;
pub mod rig;
pub mod rping;
pub mod sctp;
pub mod sctpecho;
pub mod spec;
pub mod workload;
