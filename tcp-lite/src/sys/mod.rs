//! The operating-system edge of tcp-lite (STYLE.md §1.1): the TAP device,
//! the kernel-TCP transport, kernel UDP sockets ([`udp`]), and network
//! namespaces for a kernel peer behind a TAP device. Nothing else in the crate opens a file or a
//! socket.

pub mod kernel;
pub mod netns;
pub mod tap;
pub mod udp;
