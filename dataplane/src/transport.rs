//! What a [`Core`](crate::Core) needs of its transport beyond tcp-lite's
//! [`Transport`]: the device's counters and its transmit flush, for the
//! transports that have a device; and how FPDUs are cut to TCP segments.

use rnic_engine::verbs::{QpHandle, Rnic, Segments};
use tcp_lite::link::LinkEnd;
use tcp_lite::sys::kernel::KernelTransport;
use tcp_lite::sys::tap::TapDevice;
use tcp_lite::sys::udp::KernelUdp;
use tcp_lite::{Datagrams, Instant, Stack, Transport};

use crate::device::{DeviceCounters, DpdkDevice};

/// A transport a core can run: tcp-lite's interface, and the device's
/// counters and end-of-turn flush where there is a device.
pub trait CoreTransport: Transport {
    /// The device's counters (zeros where there is no device of ours).
    fn device_counters(&self) -> DeviceCounters {
        DeviceCounters::default()
    }

    /// Sends what the device staged in this turn (the tx burst).
    fn flush(&mut self) {}

    /// Updates the device's mbuf pool low-water mark.
    fn sample_pool(&mut self) {}

    /// Whether the device's link is up, where there is a device with a
    /// link of its own (a DPDK port).
    fn link_up(&self) -> Option<bool> {
        None
    }
}

impl CoreTransport for Stack<DpdkDevice> {
    fn device_counters(&self) -> DeviceCounters {
        self.device().counters()
    }

    fn flush(&mut self) {
        self.device_mut().flush();
    }

    fn sample_pool(&mut self) {
        self.device_mut().sample_pool();
    }

    fn link_up(&self) -> Option<bool> {
        Some(self.device().link_up())
    }
}

impl CoreTransport for Stack<LinkEnd> {
    fn device_counters(&self) -> DeviceCounters {
        let (tx, rx) = (self.device().tx_stats(), self.device().rx_stats());
        DeviceCounters {
            rx_packets: rx.delivered,
            tx_packets: tx.frames,
            tx_octets: tx.octets,
            ..DeviceCounters::default()
        }
    }
}

impl CoreTransport for Stack<TapDevice> {}

impl CoreTransport for KernelTransport {}

/// A transport an [`SctpCore`](crate::SctpCore) runs on: UDP datagrams
/// (tcp-lite's [`Datagrams`]), which move when it is polled, and the
/// device's flush and counters where there is a device: a [`Stack`] on any
/// device a [`Core`](crate::Core) runs on, or the kernel's UDP sockets.
pub trait MessageTransport: Datagrams {
    /// Moves packets and runs timers (the rx and tx bursts); whether
    /// anything happened.
    fn poll(&mut self, now: Instant) -> bool;

    /// Sends what the device staged in this turn.
    fn flush(&mut self) {}

    /// The device's counters (zeros where there is no device of ours).
    fn device_counters(&self) -> DeviceCounters {
        DeviceCounters::default()
    }
}

impl<D: smoltcp::phy::Device> MessageTransport for Stack<D>
where
    Stack<D>: CoreTransport,
{
    fn poll(&mut self, now: Instant) -> bool {
        Transport::poll(self, now)
    }

    fn flush(&mut self) {
        CoreTransport::flush(self);
    }

    fn device_counters(&self) -> DeviceCounters {
        CoreTransport::device_counters(self)
    }
}

/// The kernel sends and receives at once: nothing to poll.
impl MessageTransport for KernelUdp {
    fn poll(&mut self, _now: Instant) -> bool {
        false
    }
}

/// How FPDUs meet TCP segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segmenting {
    /// Ask the transport where its next segment ends
    /// ([`Transport::segment_room`]) and size FPDUs so that each starts a
    /// segment (RFC 5044 §5); transports that do not say (kernel TCP) get
    /// EMSS-sized FPDUs back to back.
    Transport,
    /// EMSS-sized FPDUs back to back, whatever the transport says.
    Off,
}

/// The engine's FPDUs for `qp` into `space`: cut so that none straddles a
/// TCP segment when `segments` is `(first, size)` (the current segment has
/// `first` octets left, the next ones `size`), back to back otherwise.
/// Returns the octets written.
pub(crate) fn fill(
    rnic: &mut Rnic,
    qp: QpHandle,
    space: &mut [u8],
    segments: Option<(usize, usize)>,
) -> usize {
    match segments {
        Some((first, size)) => rnic
            .poll_transmit_segments(qp, space, Segments { first, size })
            .unwrap_or(0),
        None => rnic.poll_transmit(qp, space).unwrap_or(0),
    }
}
