//! dpwarp's benchmark.
//!
//! Not built yet (issue 7): a perftest-style tool (write, read, send,
//! atomics; bandwidth and latency modes) with HDR latency histograms,
//! plots and a same-run kernel-TCP baseline. Until it exists, the main
//! job in the README is the `dpwarp-pcap` decoder over a bundled capture.
#![forbid(unsafe_code)]
