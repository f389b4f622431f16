//! dpwarp's TCP under MPA.
//!
//! Not built yet: this crate will wrap smoltcp's TCP socket for the RNIC
//! (segment-aligned FPDUs, stream positions for markers) over an in-memory
//! link with fault injection, a TAP device and kernel sockets. See issue 5.
#![forbid(unsafe_code)]
