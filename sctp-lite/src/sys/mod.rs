//! The operating-system edge of sctp-lite (STYLE.md §1.1): a kernel UDP
//! socket under an [`Endpoint`](crate::Endpoint). Nothing else in the crate
//! opens a socket.

pub mod udp;
