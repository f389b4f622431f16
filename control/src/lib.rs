//! dpwarp's control plane (the slow path).
//!
//! * [`mpa`]: sans-IO state machines of the MPA startup phase (RFC 5044
//!   §7.1) with RFC 6581 enhanced connection establishment, both roles.
//! * [`negotiate`]: RFC 6581 §9.1-§9.2 IRD/ORD and connection model
//!   negotiation, one set of rules for MPA and for SCTP session control.
//! * [`runtime`]: the control-plane thread that owns listeners and runs the
//!   startups for the poll-mode cores, which own TCP (any tcp-lite
//!   transport), and hands established connections to them over
//!   crossbeam channels. The crate's one module with a thread and a clock.
//! * [`session`]: sans-IO DDP stream session control over SCTP (RFC 5043
//!   §6) with RFC 6581 §7's enhanced function codes, both roles.
#![forbid(unsafe_code)]

pub mod mpa;
pub mod negotiate;
pub mod runtime;
pub mod session;
