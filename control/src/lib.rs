//! dpwarp's control plane (the slow path).
//!
//! Not built yet: this crate will hold the sans-IO state machines of the MPA
//! startup phase (RFC 5044 §7.1) with RFC 6581 enhanced connection
//! establishment, RFC 5043 SCTP session control, and the control-plane
//! thread that hands established connections to the poll-mode cores.
//! See issue 6. It builds on `rnic_engine::wire::mpa_rr` for the frames.
#![forbid(unsafe_code)]
