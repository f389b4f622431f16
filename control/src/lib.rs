//! dpwarp's control plane (the slow path).
//!
//! * [`mpa`]: sans-IO state machines of the MPA startup phase (RFC 5044
//!   §7.1) with RFC 6581 enhanced connection establishment, both roles.
//!
//! Still to come (issue 6): the control-plane thread that drives them over
//! tcp-lite transports and hands established connections to the poll-mode
//! cores; later, RFC 5043 SCTP session control.
#![forbid(unsafe_code)]

pub mod mpa;
