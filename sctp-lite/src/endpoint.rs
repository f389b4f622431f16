//! The sans-IO endpoint: sctp-proto's associations behind DDP's needs.
//!
//! An [`Endpoint`] takes SCTP packets as received from UDP (RFC 6951: one
//! SCTP packet per UDP datagram) with the remote address, and gives back SCTP
//! packets to send to a remote address. It owns one sctp-proto endpoint and
//! its associations, and adds what DDP over SCTP needs (RFC 5043): the
//! adaptation check, unordered messages of at most one packet, and bounds.

use core::fmt;
use std::collections::{HashSet, VecDeque};

use rustc_hash::FxHashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant as StdInstant};

use bytes::Bytes;
use sctp_proto as proto;
use smoltcp::time::Instant;

use crate::config::{Config, ConfigError, ADAPTATION_CODE_POINT_DDP};
use crate::event::{AssocId, CloseReason, Event, EventKind};

/// RFC 5043 (IANA SCTP PPID registry): a DDP Segment.
pub const PPID_DDP_SEGMENT: u32 = 16;
/// RFC 5043 (IANA SCTP PPID registry): a DDP Stream Session Control message.
pub const PPID_DDP_STREAM_SESSION_CONTROL: u32 = 17;

/// The Upper Layer Abort Reason (RFC 9260 §3.3.10.12) of the ABORT that
/// refuses an association without DDP's adaptation indication.
const ABORT_REASON_NO_DDP: &[u8] = b"no DDP adaptation indication (RFC 5043 7.1)";
/// The reason of the ABORT of an incoming association beyond `associations_max`.
const ABORT_REASON_FULL: &[u8] = b"too many associations";
/// The reason of the ABORT of an incoming association whose COOKIE ECHO did
/// not come within `handshake_timeout_ms` (sent only if the association had
/// left CLOSED, which the fork's server side does not before the COOKIE
/// ECHO).
const ABORT_REASON_HANDSHAKE_EXPIRED: &[u8] = b"no COOKIE ECHO in time";

/// The most answers to packets for no association (RFC 9260 §8.4), and
/// ABORTs to INITs beyond `associations_max`, waiting to be sent: a flood
/// of such packets between two calls of [`Endpoint::poll_transmit`] makes
/// at most this many. The rest go unanswered (packets for no association
/// are still counted, [`Endpoint::out_of_the_blue`]), which §8.4 allows:
/// its answers are SHOULDs; the peer of an unanswered INIT retransmits it,
/// as when it is lost.
const OUT_OF_THE_BLUE_ANSWERS_MAX: usize = 64;
/// RFC 9260 §3.3.10.4: the "Out of Resource" error cause.
const CAUSE_OUT_OF_RESOURCE: u16 = 4;

/// An SCTP packet [`Endpoint::poll_transmit`] wrote into the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Where to send it (the UDP destination).
    pub remote: SocketAddr,
    /// Its length: `buf[..len]`.
    pub len: usize,
}

/// A message [`Endpoint::recv`] wrote into the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// The association it came on.
    pub assoc: AssocId,
    /// Its SCTP stream.
    pub stream: u16,
    /// Its Payload Protocol Identifier (RFC 9260 §3.3.1), e.g. 16 or 17.
    pub ppid: u32,
    /// Its length: `buf[..len]`.
    pub len: usize,
}

/// Where an association is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// INIT to COOKIE ACK (RFC 9260 §5.1).
    Handshaking,
    /// Up: messages flow.
    Up,
    /// Shutting down at our request ([`Endpoint::shutdown`]): what was
    /// queued still goes out and messages still come in; nothing new is
    /// sent.
    Closing,
    /// Closed gracefully (RFC 9260 §9.2, begun by either side) with
    /// messages received and not read yet: they stay readable, and its
    /// `Closed` event, held here, follows the last of them.
    Draining(CloseReason),
    /// Refused or closed and reported: its last packets (an ABORT) go out,
    /// then the slot is freed.
    Gone,
}

/// One association in a slot.
struct Live {
    handle: proto::AssociationHandle,
    assoc: proto::Association,
    remote: SocketAddr,
    outbound: bool,
    state: State,
    /// An incoming association's deadline for its handshake: its first
    /// INIT's arrival plus [`Config::handshake_timeout_ms`]. Past it, still
    /// `Handshaking`, it is dropped (see `expire_handshake`). `None` for
    /// ours, which T1-init and T1-cookie end (RFC 9260 §5.1).
    handshake_deadline: Option<Instant>,
    /// Streams in the endpoint's readable queue.
    queued: HashSet<u16>,
    /// The peer's verification tag, once known and entered in
    /// `Endpoint::by_peer_tag`.
    peer_tag: Option<u32>,
}

struct Slot {
    generation: u32,
    live: Option<Live>,
}

/// Associations over one UDP port, sans-IO.
///
/// Call, in a loop: [`handle_datagram`](Endpoint::handle_datagram) for each
/// received datagram, [`handle_timeout`](Endpoint::handle_timeout) when
/// [`poll_timeout`](Endpoint::poll_timeout) is due, then
/// [`poll_transmit`](Endpoint::poll_transmit) until `None`, and read
/// [`poll_event`](Endpoint::poll_event) and [`recv`](Endpoint::recv).
pub struct Endpoint {
    config: Config,
    /// The `std::time::Instant` that stands for [`Instant::ZERO`]: sctp-proto
    /// counts time in `std::time::Instant`s, which only a clock can make.
    epoch: StdInstant,
    inner: proto::Endpoint,
    client_config: proto::ClientConfig,
    slots: Vec<Slot>,
    /// The slots holding an association: what the timers and transmits
    /// walk (not every slot of `associations_max`, which cost a 64 B
    /// message's round trip 10 us of scanning at 1,024 slots).
    occupied: Vec<u32>,
    free: Vec<u32>,
    by_handle: FxHashMap<proto::AssociationHandle, u32>,
    /// The datagrams of one sctp-proto transmit after the first.
    pending: VecDeque<(SocketAddr, Bytes)>,
    events: VecDeque<Event>,
    readable: VecDeque<(AssocId, u16)>,
    /// The slot [`poll_transmit`](Endpoint::poll_transmit) looks at first.
    transmit_next: usize,
    /// Incoming associations dropped at their handshake deadline.
    handshakes_expired: u64,
    /// The associations by their peer's address and verification tag: where
    /// a packet with the T bit set goes (RFC 9260 §8.5.1 (B), (C)), which
    /// carries the tag the peer received from us, not its own.
    by_peer_tag: FxHashMap<(IpAddr, u32), u32>,
    /// Packets for no association (RFC 9260 §8.4), answered or not.
    out_of_the_blue: u64,
}

impl Endpoint {
    /// An endpoint with `config`. `epoch` is any `std::time::Instant` (read
    /// once from a clock by the caller): sctp-proto's time is `epoch` plus
    /// the `now` given here, so only differences of `now` matter.
    pub fn new(config: Config, epoch: StdInstant) -> Result<Self, ConfigError> {
        config.validate()?;
        let transport = Arc::new(transport_config(&config));
        let mut endpoint_config = proto::EndpointConfig::new();
        // sctp-proto's "max payload size" is a DATA chunk's user data: the
        // packet MTU less the common and DATA chunk headers.
        endpoint_config.max_payload_size(config.message_size_max() as u32);
        let server_config = config.accept.then(|| {
            let mut server = proto::ServerConfig::new();
            server.transport = transport.clone();
            Arc::new(server)
        });
        let mut client_config = proto::ClientConfig::new();
        client_config.transport = transport;
        let slots = (0..config.associations_max)
            .map(|_| Slot {
                generation: 0,
                live: None,
            })
            .collect();
        let free = (0..config.associations_max as u32).rev().collect();
        Ok(Endpoint {
            inner: proto::Endpoint::new(Arc::new(endpoint_config), server_config),
            client_config,
            slots,
            occupied: Vec::with_capacity(config.associations_max),
            free,
            by_handle: FxHashMap::with_capacity_and_hasher(
                config.associations_max,
                Default::default(),
            ),
            pending: VecDeque::new(),
            events: VecDeque::new(),
            readable: VecDeque::new(),
            transmit_next: 0,
            handshakes_expired: 0,
            by_peer_tag: FxHashMap::with_capacity_and_hasher(
                config.associations_max,
                Default::default(),
            ),
            out_of_the_blue: 0,
            epoch,
            config,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Open an association to `remote` (RFC 9260 §5.1: our INIT goes out at
    /// the next [`poll_transmit`](Endpoint::poll_transmit)). `Up`, `Refused`
    /// or `Closed` follows.
    pub fn connect(&mut self, now: Instant, remote: SocketAddr) -> Result<AssocId, ConnectError> {
        let _ = now; // sctp-proto starts the T1-init timer at its first poll.
        if remote.port() == 0 || remote.ip().is_unspecified() {
            return Err(ConnectError::Unaddressable);
        }
        let Some(&index) = self.free.last() else {
            return Err(ConnectError::TooManyAssociations);
        };
        let (handle, assoc) = self
            .inner
            .connect(self.client_config.clone(), remote)
            .map_err(|_| ConnectError::Refused)?;
        self.free.pop();
        Ok(self.install(index, handle, assoc, remote, true, None))
    }

    /// Handle one received SCTP packet (a UDP datagram's payload) from
    /// `remote`. A malformed packet, or one for an association with another
    /// peer address, is dropped. One for no association is answered as RFC
    /// 9260 §8.4 says (see [`out_of_the_blue`](Self::out_of_the_blue)).
    pub fn handle_datagram(&mut self, now: Instant, remote: SocketAddr, datagram: &[u8]) {
        let at = now;
        let now = self.std_instant(now);
        // sctp-proto keeps slices of the packet (its DATA chunks' user data)
        // until they are read: one copy into a reference-counted buffer.
        let data = Bytes::copy_from_slice(datagram);
        let mut routed = self.inner.handle(now, remote, None, None, data);
        if routed.is_none() {
            match out_of_the_blue(datagram) {
                OutOfTheBlue::Drop => self.out_of_the_blue += 1,
                OutOfTheBlue::Answer(answer) => {
                    self.out_of_the_blue += 1;
                    if self.pending.len() < OUT_OF_THE_BLUE_ANSWERS_MAX {
                        self.pending.push_back((remote, answer));
                    }
                }
                OutOfTheBlue::Reflected(tag) => {
                    // sctp-proto finds associations by our tag only: the
                    // packet goes to it again with our tag in place of the
                    // peer's, which it carried (the T bit) instead.
                    match self.reflected_to(remote, tag, datagram) {
                        Some(packet) => routed = self.inner.handle(now, remote, None, None, packet),
                        None => self.out_of_the_blue += 1,
                    }
                }
            }
        }
        match routed {
            None => {}
            Some((handle, proto::DatagramEvent::AssociationEvent(event))) => {
                if let Some(&index) = self.by_handle.get(&handle) {
                    if let Some(live) = self.slots[index as usize].live.as_mut() {
                        // sctp-proto finds the association by the
                        // verification tag alone; a packet from another
                        // address is not its peer's (single-homed), and one
                        // that guessed the tag could end it with an ABORT
                        // (found by a review). The UDP port may differ: a
                        // NAT may have moved it (RFC 6951 §5.4).
                        if live.remote.ip() != remote.ip() {
                            return;
                        }
                        live.assoc.handle_event(event);
                    }
                    self.service(index);
                }
            }
            Some((handle, proto::DatagramEvent::NewAssociation(assoc))) => {
                if let Some(index) = self.free.pop() {
                    // Its slot is held from this INIT on (the fork keeps
                    // state where RFC 9260 §5.1 keeps none until the
                    // COOKIE ECHO): only until the deadline.
                    let deadline = self.handshake_deadline(at);
                    self.install(index, handle, assoc, remote, false, Some(deadline));
                } else {
                    self.refuse_beyond_max(now, handle, assoc, remote, datagram);
                }
            }
        }
    }

    /// Run the timers due at `now` (retransmissions, delayed SACKs, and
    /// the deadlines of incoming handshakes, [`Config::handshake_timeout_ms`]).
    pub fn handle_timeout(&mut self, now: Instant) {
        let at = now;
        let now = self.std_instant(now);
        for k in 0..self.occupied.len() {
            let index = self.occupied[k] as usize;
            let Some(live) = self.slots[index].live.as_mut() else {
                continue;
            };
            if live.handshake_due().is_some_and(|t| t <= at) {
                self.expire_handshake(index as u32);
                continue;
            }
            if live.assoc.poll_timeout().is_some_and(|t| t <= now) {
                live.assoc.handle_timeout(now);
                self.service(index as u32);
            }
        }
    }

    /// When [`handle_timeout`](Endpoint::handle_timeout) is due next (`None`:
    /// only on input). It may change after any other call.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.occupied
            .iter()
            .filter_map(|&index| self.slots[index as usize].live.as_ref())
            .filter_map(|live| {
                let timer = live.assoc.poll_timeout().map(|t| self.instant(t));
                // A half-open association has no sctp-proto timer (the
                // fork's server side starts none before the COOKIE ECHO):
                // its deadline is the only thing that wakes a caller.
                match (timer, live.handshake_due()) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
            })
            .min()
    }

    /// Write the next SCTP packet to send into `buf` and say where it goes.
    /// Call until `None` after any other call.
    ///
    /// A packet longer than [`Config::packet_size_max`] is dropped, never
    /// written: the only such packets are HEARTBEAT ACKs answering a peer's
    /// HEARTBEAT that was itself longer than our packets (RFC 9260 §3.3.6:
    /// the acknowledgement carries the request's Heartbeat Information
    /// back unchanged, so a peer picks its size). They would not fit our
    /// path MTU, and writing them would break the promise below.
    ///
    /// # Panics
    ///
    /// If `buf` is shorter than the packet; a buffer of
    /// [`Config::packet_size_max`] octets always suffices.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let (remote, packet) = self.poll_transmit_bytes(now)?;
        Some(copy_out(remote, &packet, buf))
    }

    /// [`poll_transmit`](Endpoint::poll_transmit) without the copy: the
    /// next SCTP packet as sctp-proto wrote it, and where it goes. At most
    /// [`Config::packet_size_max`] octets.
    pub fn poll_transmit_bytes(&mut self, now: Instant) -> Option<(SocketAddr, Bytes)> {
        if let Some(transmit) = self.poll_pending() {
            return Some(transmit);
        }
        if let Some(transmit) = self.inner.poll_transmit() {
            self.queue_transmit(transmit);
            if let Some(transmit) = self.poll_pending() {
                return Some(transmit);
            }
        }
        let now = self.std_instant(now);
        let mut k = 0;
        while k < self.occupied.len() {
            let at = (self.transmit_next + k) % self.occupied.len();
            let index = self.occupied[at] as usize;
            k += 1;
            let Some(live) = self.slots[index].live.as_mut() else {
                continue;
            };
            match live.assoc.poll_transmit(now) {
                Some(transmit) => {
                    // Start at the next association next time: every one gets
                    // its turn.
                    self.transmit_next = at + 1;
                    self.queue_transmit(transmit);
                    if let Some(transmit) = self.poll_pending() {
                        return Some(transmit);
                    }
                }
                None if live.state == State::Gone => {
                    // `occupied` loses this entry (the last takes its
                    // place): look at position `at` again.
                    self.free_slot(index as u32);
                    k -= 1;
                    if self.occupied.is_empty() {
                        break;
                    }
                }
                None => {}
            }
        }
        None
    }

    /// The next queued packet that fits [`Config::packet_size_max`]; longer
    /// ones are dropped (see `poll_transmit`).
    fn poll_pending(&mut self) -> Option<(SocketAddr, Bytes)> {
        while let Some((remote, packet)) = self.pending.pop_front() {
            if packet.len() <= self.config.packet_size_max() {
                return Some((remote, packet));
            }
        }
        None
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Queue a message of 1 to [`Config::message_size_max`] octets on
    /// `stream` of `assoc`, with Payload Protocol Identifier `ppid`, ordered
    /// or not (RFC 9260 §6.6; DDP sends every message unordered, RFC 5043
    /// §8). It goes out in one DATA chunk: never fragmented (RFC 5043 §9).
    pub fn send(
        &mut self,
        assoc: AssocId,
        stream: u16,
        ppid: u32,
        unordered: bool,
        message: &[u8],
    ) -> Result<(), SendError> {
        self.send_with(assoc, stream, ppid, unordered, message.len(), |s, ppi| {
            s.write_with_ppi(message, ppi)
        })
    }

    /// [`send`](Endpoint::send) without the copy: sctp-proto keeps
    /// `message` itself until the peer has acknowledged it.
    pub fn send_bytes(
        &mut self,
        assoc: AssocId,
        stream: u16,
        ppid: u32,
        unordered: bool,
        message: Bytes,
    ) -> Result<(), SendError> {
        let len = message.len();
        self.send_with(assoc, stream, ppid, unordered, len, |s, ppi| {
            s.write_bytes_with_ppi(message, ppi)
        })
    }

    fn send_with(
        &mut self,
        assoc: AssocId,
        stream: u16,
        ppid: u32,
        unordered: bool,
        len: usize,
        write: impl FnOnce(
            &mut proto::Stream<'_>,
            proto::PayloadProtocolIdentifier,
        ) -> Result<usize, proto::Error>,
    ) -> Result<(), SendError> {
        if len == 0 {
            // RFC 9260 §6.1 (A): DATA chunks carry at least one octet.
            return Err(SendError::Empty);
        }
        if len > self.config.message_size_max() {
            return Err(SendError::TooLarge);
        }
        if stream >= self.config.streams {
            return Err(SendError::InvalidStream);
        }
        let send_buffer_max = self.config.send_buffer_max;
        let live = self.live_mut(assoc).ok_or(SendError::InvalidAssociation)?;
        if live.state != State::Up {
            return Err(SendError::InvalidState);
        }
        if stream >= live.assoc.num_outbound_streams() {
            // The peer offered fewer inbound streams than we have (RFC
            // 9260 §5.1.1): it would discard the message (§6.5).
            return Err(SendError::InvalidStream);
        }
        let ppi = proto::PayloadProtocolIdentifier::from(ppid);
        if live.assoc.stream(stream).is_err() {
            live.assoc
                .open_stream(stream, ppi)
                .map_err(|_| SendError::InvalidState)?;
        }
        let mut s = live
            .assoc
            .stream(stream)
            .map_err(|_| SendError::InvalidState)?;
        let buffered = s.buffered_amount().map_err(|_| SendError::InvalidState)?;
        if buffered + len > send_buffer_max {
            return Err(SendError::Full);
        }
        s.set_reliability_params(unordered, proto::ReliabilityType::Reliable, 0)
            .map_err(|_| SendError::InvalidState)?;
        write(&mut s, ppi).map_err(|_| SendError::InvalidState)?;
        Ok(())
    }

    /// Octets [`send`](Endpoint::send) takes now on `stream` of `assoc`
    /// (its send buffer's free room, RFC 9260's sender-side buffering): a
    /// caller that makes messages only while they fit never sees
    /// [`SendError::Full`]. 0 while the association is not up.
    pub fn send_space(&mut self, assoc: AssocId, stream: u16) -> usize {
        let send_buffer_max = self.config.send_buffer_max;
        if stream >= self.config.streams {
            return 0;
        }
        let Some(live) = self.live_mut(assoc) else {
            return 0;
        };
        if live.state != State::Up || stream >= live.assoc.num_outbound_streams() {
            return 0;
        }
        let buffered = match live.assoc.stream(stream) {
            Ok(s) => s.buffered_amount().unwrap_or(send_buffer_max),
            // A stream not opened yet holds nothing.
            Err(_) => 0,
        };
        send_buffer_max.saturating_sub(buffered)
    }

    /// Copy the next received message into `buf`. Messages of one stream
    /// come in the order SCTP delivers them (arrival order for unordered
    /// ones); streams take turns. Data stays in the association's receive
    /// window until read here, so a slow reader closes the window. After a
    /// graceful close (RFC 9260 §9.2, either side's) the messages received
    /// before it are still given out here, and the association's `Closed`
    /// event comes after the last of them (queued by the call that finds no
    /// more: read until `None`, then poll the events); it holds its slot
    /// until then.
    ///
    /// # Panics
    ///
    /// If `buf` is shorter than [`Config::receive_message_max`].
    pub fn recv(&mut self, buf: &mut [u8]) -> Option<Received> {
        assert!(
            buf.len() >= self.config.receive_message_max(),
            "recv: a buffer of {} octets is below receive_message_max {}",
            buf.len(),
            self.config.receive_message_max()
        );
        let (received, message) = self.recv_bytes()?;
        buf[..received.len].copy_from_slice(&message);
        Some(received)
    }

    /// [`recv`](Endpoint::recv) without the copy: the next received message
    /// and its octets, which are the DATA chunk's own (a slice of the
    /// packet it came in) when it came in one chunk, as DDP's messages do
    /// (RFC 5043 §9). At most [`Config::receive_message_max`] octets.
    pub fn recv_bytes(&mut self) -> Option<(Received, Bytes)> {
        while let Some((assoc, stream)) = self.readable.pop_front() {
            let Some(live) = self.live_mut(assoc) else {
                continue;
            };
            let message = match live.assoc.stream(stream) {
                Ok(mut s) => s.read_sctp().ok().flatten(),
                Err(_) => None,
            };
            let Some(chunks) = message else {
                live.queued.remove(&stream);
                if let State::Draining(why) = live.state {
                    if live.queued.is_empty() {
                        // The last message read: now the held `Closed`.
                        live.state = State::Gone;
                        let remote = live.remote;
                        self.events.push_back(Event {
                            assoc,
                            remote,
                            kind: EventKind::Closed(why),
                        });
                    }
                }
                continue;
            };
            // At most message_size_max: sctp-proto refuses larger messages
            // (its max_receive_message_size).
            let message = chunks.to_bytes();
            // More may wait on this stream: it goes to the back.
            self.readable.push_back((assoc, stream));
            let received = Received {
                assoc,
                stream,
                ppid: chunks.ppi.into(),
                len: message.len(),
            };
            return Some((received, message));
        }
        None
    }

    /// Abort `assoc`: ABORT to the peer (RFC 9260 §9.1), then
    /// [`CloseReason::Local`]. Queued and unread messages are dropped.
    pub fn abort(&mut self, assoc: AssocId) -> Result<(), SendError> {
        let live = self.live_mut(assoc).ok_or(SendError::InvalidAssociation)?;
        // Unread messages go too: no `Draining` after an abort.
        live.queued.clear();
        if live.state == State::Closing {
            // An abort ends the shutdown too: the close is ours, `Local`,
            // not the shutdown's (the fork reports both as locally closed;
            // found by a review: queued data thrown away was reported
            // acknowledged).
            live.state = State::Up;
        }
        if let State::Draining(_) = live.state {
            // Closed already (nothing goes to the peer); its held event
            // becomes ours.
            live.state = State::Gone;
            let remote = live.remote;
            self.events.push_back(Event {
                assoc,
                remote,
                kind: EventKind::Closed(CloseReason::Local),
            });
            return Ok(());
        }
        live.assoc.abort(b"");
        self.service(assoc.index);
        Ok(())
    }

    /// Shut `assoc` down gracefully (RFC 9260 §9.2): the messages already
    /// queued are still sent, then SHUTDOWN; once the peer has acknowledged
    /// them all, [`CloseReason::Shutdown`]. Messages that arrive meanwhile
    /// are read as usual (and stay readable after the close). Nothing new
    /// can be sent from now on ([`SendError::InvalidState`]).
    pub fn shutdown(&mut self, assoc: AssocId) -> Result<(), SendError> {
        let live = self.live_mut(assoc).ok_or(SendError::InvalidAssociation)?;
        if live.state != State::Up {
            return Err(SendError::InvalidState);
        }
        live.assoc.shutdown().map_err(|_| SendError::InvalidState)?;
        live.state = State::Closing;
        self.service(assoc.index);
        Ok(())
    }

    /// The code point of the peer's Adaptation Layer Indication, once its
    /// INIT or INIT ACK arrived (`None` also when it sent none).
    pub fn peer_adaptation(&self, assoc: AssocId) -> Option<u32> {
        self.live(assoc)
            .and_then(|live| live.assoc.peer_adaptation_layer_indication())
    }

    /// The peer's address, while the association exists.
    pub fn remote(&self, assoc: AssocId) -> Option<SocketAddr> {
        self.live(assoc).map(|live| live.remote)
    }

    /// The streams [`send`](Endpoint::send) takes on `assoc`: `0..` this,
    /// the smaller of [`Config::streams`] and the inbound streams the peer
    /// offered (RFC 9260 §5.1.1); 0 while it is not up.
    pub fn outbound_streams(&self, assoc: AssocId) -> u16 {
        self.live(assoc)
            .filter(|live| live.state == State::Up)
            .map_or(0, |live| {
                live.assoc.num_outbound_streams().min(self.config.streams)
            })
    }

    /// Whether `assoc` is up (its `Up` event was reported and no `Closed`).
    pub fn is_up(&self, assoc: AssocId) -> bool {
        self.live(assoc).is_some_and(|live| live.state == State::Up)
    }

    /// Associations holding a slot (including closed ones whose last packets
    /// have not been polled yet).
    pub fn associations(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Incoming associations dropped so far because no COOKIE ECHO brought
    /// them up within [`Config::handshake_timeout_ms`] of their INIT (a
    /// peer that went away mid-handshake, or a flood of INITs).
    pub fn handshakes_expired(&self) -> u64 {
        self.handshakes_expired
    }

    /// Packets received for no association (RFC 9260 §8.4: each was
    /// dropped or answered as that section says: a SHUTDOWN ACK with a
    /// SHUTDOWN COMPLETE, most others with an ABORT, both with the packet's
    /// own tag reflected and the T bit set, so that a peer whose
    /// association we no longer have ends its own at once), and packets
    /// with the T bit set for no association of ours.
    pub fn out_of_the_blue(&self) -> u64 {
        self.out_of_the_blue
    }

    /// `packet`, an ABORT or SHUTDOWN COMPLETE with the T bit from
    /// `remote` carrying `tag` (RFC 9260 §8.5.1 (B), (C)), with our tag in
    /// place of `tag` if `tag` is the peer's tag of an association with
    /// `remote`: its first chunk alone (nothing may come before either, and
    /// nothing after an ABORT is acted on), under a new CRC32c. `None` if
    /// there is no such association.
    fn reflected_to(&self, remote: SocketAddr, tag: u32, packet: &[u8]) -> Option<Bytes> {
        let &index = self.by_peer_tag.get(&(remote.ip(), tag))?;
        let live = self.slots[index as usize].live.as_ref()?;
        let (ours, _) = live.assoc.verification_tags();
        let chunk_len = usize::from(u16::from_be_bytes([packet[14], packet[15]]));
        let mut out = packet[..12 + chunk_len].to_vec();
        out[4..8].copy_from_slice(&ours.to_be_bytes());
        Some(sealed(out))
    }

    fn install(
        &mut self,
        index: u32,
        handle: proto::AssociationHandle,
        assoc: proto::Association,
        remote: SocketAddr,
        outbound: bool,
        handshake_deadline: Option<Instant>,
    ) -> AssocId {
        let slot = &mut self.slots[index as usize];
        debug_assert!(slot.live.is_none());
        slot.live = Some(Live {
            handle,
            assoc,
            remote,
            outbound,
            state: State::Handshaking,
            handshake_deadline,
            queued: HashSet::new(),
            peer_tag: None,
        });
        self.occupied.push(index);
        self.by_handle.insert(handle, index);
        self.service(index);
        AssocId {
            index,
            generation: self.slots[index as usize].generation,
        }
    }

    /// An incoming association with every slot taken: abort it at once and
    /// answer its INIT (`init`, from `remote`) with an ABORT; it never gets
    /// a handle. Before its COOKIE ECHO the fork's association is still
    /// CLOSED, so its own abort sends nothing, and what it queued is its
    /// INIT ACK, which only drew a COOKIE ECHO we drop: the peer waited out
    /// its T1-cookie instead of hearing no (found by a review). The ABORT
    /// is queued only while fewer than [`OUT_OF_THE_BLUE_ANSWERS_MAX`]
    /// packets wait, as an answer to a packet for no association is: a
    /// flood of INITs queued one each, without bound (found by an audit).
    fn refuse_beyond_max(
        &mut self,
        now: StdInstant,
        handle: proto::AssociationHandle,
        mut assoc: proto::Association,
        remote: SocketAddr,
        init: &[u8],
    ) {
        assoc.abort(ABORT_REASON_FULL);
        while let Some(event) = assoc.poll_endpoint_event() {
            let _ = self.inner.handle_event(handle, event);
        }
        while assoc.poll_transmit(now).is_some() {}
        if self.pending.len() >= OUT_OF_THE_BLUE_ANSWERS_MAX {
            return;
        }
        if let Some(abort) = abort_for_init(init, Some(CAUSE_OUT_OF_RESOURCE)) {
            self.pending.push_back((remote, abort));
        }
    }

    /// Drop the incoming association at `index`, still without its COOKIE
    /// ECHO at its deadline, as [`refuse_beyond_max`](Self::refuse_beyond_max)
    /// drops one: `abort` releases it from the sctp-proto endpoint, and
    /// sends nothing (before the COOKIE ECHO the fork's association is
    /// still CLOSED, RFC 9260 §4: the state a stateless server would be
    /// in). A COOKIE ECHO arriving later is out of the blue and answered
    /// with an ABORT (§8.4 (8)), which ends the peer's side. No event: the user
    /// never heard of an association before its `Up`. The slot goes back
    /// to the free list at the next [`poll_transmit`](Self::poll_transmit),
    /// as every `Gone` association's does.
    fn expire_handshake(&mut self, index: u32) {
        let Some(live) = self.slots[index as usize].live.as_mut() else {
            return;
        };
        live.state = State::Gone;
        live.handshake_deadline = None;
        live.assoc.abort(ABORT_REASON_HANDSHAKE_EXPIRED);
        self.handshakes_expired += 1;
        self.service(index);
    }

    /// `now` plus [`Config::handshake_timeout_ms`] (at most 60 s, so this
    /// saturates only at the end of time).
    fn handshake_deadline(&self, now: Instant) -> Instant {
        let timeout = self.config.handshake_timeout_ms.saturating_mul(1000);
        let timeout = i64::try_from(timeout).unwrap_or(i64::MAX);
        Instant::from_micros(now.total_micros().saturating_add(timeout))
    }

    /// Take what the association at `index` has to say: its events (the DDP
    /// check happens at `Connected`), readable streams, and its events for
    /// the sctp-proto endpoint.
    fn service(&mut self, index: u32) {
        let slot = &mut self.slots[index as usize];
        let id = AssocId {
            index,
            generation: slot.generation,
        };
        let Some(live) = slot.live.as_mut() else {
            return;
        };
        while let Some(event) = live.assoc.poll() {
            match event {
                proto::Event::Connected => {
                    let kind = self.config.check_peer(live);
                    self.events.push_back(Event {
                        assoc: id,
                        remote: live.remote,
                        kind,
                    });
                    if live.state == State::Up {
                        // Messages that came before: readable now, after
                        // the Up event (in stream order, for determinism).
                        let mut early: Vec<u16> = live.queued.iter().copied().collect();
                        early.sort_unstable();
                        self.readable
                            .extend(early.into_iter().map(|stream| (id, stream)));
                    }
                }
                proto::Event::HandshakeFailed { reason }
                | proto::Event::AssociationLost { reason } => {
                    // RFC 9260 §9.2: a graceful end, begun by the peer or
                    // by our `shutdown`, follows the acknowledgement of
                    // every DATA chunk; the fork keeps the messages not
                    // read yet (its change 19), and so do we: `Closed`
                    // waits for the last of them.
                    let graceful = match (&reason, live.state) {
                        (
                            proto::AssociationError::ApplicationClosed,
                            State::Up | State::Closing,
                        ) => Some(CloseReason::ShutdownByPeer),
                        (proto::AssociationError::LocallyClosed, State::Closing) => {
                            Some(CloseReason::Shutdown)
                        }
                        _ => None,
                    };
                    match graceful {
                        Some(why) if !live.queued.is_empty() => live.state = State::Draining(why),
                        _ if matches!(live.state, State::Gone | State::Draining(_)) => {}
                        _ => {
                            live.state = State::Gone;
                            self.events.push_back(Event {
                                assoc: id,
                                remote: live.remote,
                                kind: EventKind::Closed(
                                    graceful.unwrap_or_else(|| CloseReason::from_sctp(&reason)),
                                ),
                            });
                        }
                    }
                    // Releases it from the sctp-proto endpoint (fork change
                    // 3); sends ABORT only if it was not closed already.
                    live.assoc.abort(b"");
                }
                proto::Event::Stream(proto::StreamEvent::Opened { .. }) => {
                    // The peer's first message on a stream opened it here:
                    // take it off sctp-proto's accept queue, which would
                    // otherwise grow with every stream.
                    let _ = live.assoc.accept_stream();
                }
                proto::Event::Stream(proto::StreamEvent::Readable { id: stream }) => {
                    // DATA may reach the active side before the COOKIE ACK
                    // (the passive side is ESTABLISHED once it has the
                    // COOKIE ECHO and may send at once, RFC 9260 §5.1 D;
                    // a lost COOKIE ACK leaves us in COOKIE-ECHOED). Such
                    // messages wait for `Up` in `queued`: no message comes
                    // from an association before its `Up` event, nor from
                    // one the DDP check refuses.
                    let fresh = live.state != State::Gone && live.queued.insert(stream);
                    // Draining too: a stream in `queued` is one `recv`
                    // will look at, or `Closed` would never come (the fork
                    // takes no DATA once closed; this is the second lock).
                    if fresh
                        && matches!(live.state, State::Up | State::Closing | State::Draining(_))
                    {
                        self.readable.push_back((id, stream));
                    }
                }
                _ => {}
            }
        }
        while let Some(event) = live.assoc.poll_endpoint_event() {
            if let Some(event) = self.inner.handle_event(live.handle, event) {
                live.assoc.handle_event(event);
            }
        }
        // The peer's tag is known from its INIT (incoming) or INIT ACK
        // (ours) on, and does not change (the fork restarts no association).
        if live.peer_tag.is_none() {
            let (_, peer) = live.assoc.verification_tags();
            if peer != 0 {
                live.peer_tag = Some(peer);
                self.by_peer_tag.insert((live.remote.ip(), peer), index);
            }
        }
    }

    fn free_slot(&mut self, index: u32) {
        let slot = &mut self.slots[index as usize];
        if let Some(live) = slot.live.take() {
            // sctp-proto may have let this handle go already (its slab
            // reuses keys) and given it to a newer association: that
            // association's mapping stays.
            if self.by_handle.get(&live.handle) == Some(&index) {
                self.by_handle.remove(&live.handle);
            }
            // Another association of the same peer may have the same tag
            // (unlikely, but a peer picks its tags): its mapping stays.
            if let Some(peer) = live.peer_tag {
                let key = (live.remote.ip(), peer);
                if self.by_peer_tag.get(&key) == Some(&index) {
                    self.by_peer_tag.remove(&key);
                }
            }
            slot.generation = slot.generation.wrapping_add(1);
            self.free.push(index);
            if let Some(at) = self.occupied.iter().position(|&i| i == index) {
                self.occupied.swap_remove(at);
            }
        }
    }

    fn queue_transmit(&mut self, transmit: proto::Transmit) {
        if let proto::Payload::RawEncode(packets) = transmit.payload {
            self.pending
                .extend(packets.into_iter().map(|packet| (transmit.remote, packet)));
        }
    }

    fn live(&self, assoc: AssocId) -> Option<&Live> {
        let slot = self.slots.get(assoc.index as usize)?;
        if slot.generation != assoc.generation {
            return None;
        }
        slot.live.as_ref().filter(|live| live.state != State::Gone)
    }

    fn live_mut(&mut self, assoc: AssocId) -> Option<&mut Live> {
        let slot = self.slots.get_mut(assoc.index as usize)?;
        if slot.generation != assoc.generation {
            return None;
        }
        slot.live.as_mut().filter(|live| live.state != State::Gone)
    }

    fn std_instant(&self, now: Instant) -> StdInstant {
        assert!(now >= Instant::ZERO, "time runs from Instant::ZERO");
        self.epoch + StdDuration::from_micros(now.total_micros() as u64)
    }

    /// Back to our time, rounded up to the microsecond so that a timer is
    /// never reported before it is due.
    fn instant(&self, t: StdInstant) -> Instant {
        let nanos = t.saturating_duration_since(self.epoch).as_nanos();
        Instant::from_micros(nanos.div_ceil(1000).min(i64::MAX as u128) as i64)
    }
}

impl Live {
    /// The handshake deadline while it still applies: an incoming
    /// association not up yet.
    fn handshake_due(&self) -> Option<Instant> {
        self.handshake_deadline
            .filter(|_| self.state == State::Handshaking)
    }
}

impl Config {
    /// RFC 5043 §7.1: an association whose peer did not indicate DDP carries
    /// no DDP; with `require_ddp` we refuse it with an ABORT.
    fn check_peer(&self, live: &mut Live) -> EventKind {
        let peer_adaptation = live.assoc.peer_adaptation_layer_indication();
        if self.require_ddp && peer_adaptation != Some(ADAPTATION_CODE_POINT_DDP) {
            live.assoc.abort(ABORT_REASON_NO_DDP);
            live.state = State::Gone;
            EventKind::Refused { peer_adaptation }
        } else {
            live.state = State::Up;
            EventKind::Up {
                outbound: live.outbound,
                peer_adaptation,
            }
        }
    }
}

fn transport_config(config: &Config) -> proto::TransportConfig {
    let message_size_max = config.message_size_max() as u32;
    proto::TransportConfig::default()
        .with_adaptation_layer_indication(config.adaptation_code_point)
        .with_max_receive_buffer_size(config.receive_window)
        .with_max_send_message_size(message_size_max)
        .with_max_receive_message_size(config.receive_message_max() as u32)
        .with_max_num_outbound_streams(config.streams)
        .with_max_num_inbound_streams(config.streams)
        .with_max_data_retransmits(config.data_retransmits_max)
        .with_heartbeat_interval_ms(config.heartbeat_interval_ms)
        .with_rto_initial_ms(config.rto_initial_ms)
        .with_rto_min_ms(config.rto_min_ms)
        .with_rto_max_ms(config.rto_max_ms)
        .with_local_port(config.sctp_port)
        .with_remote_port(config.sctp_port)
}

fn copy_out(remote: SocketAddr, packet: &[u8], buf: &mut [u8]) -> Transmit {
    assert!(
        packet.len() <= buf.len(),
        "poll_transmit: a packet of {} octets does not fit a buffer of {}",
        packet.len(),
        buf.len()
    );
    buf[..packet.len()].copy_from_slice(packet);
    Transmit {
        remote,
        len: packet.len(),
    }
}

macro_rules! errors {
    ($(#[$meta:meta])* $name:ident { $($variant:ident => $text:literal,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name {
            $(#[doc = $text] $variant,)*
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(match self { $($name::$variant => $text,)* })
            }
        }

        impl std::error::Error for $name {}
    };
}

errors! {
    /// Why [`Endpoint::connect`] failed.
    ConnectError {
        TooManyAssociations => "associations_max associations are open already",
        Unaddressable => "the remote address or port is unspecified",
        Refused => "sctp-proto refused the association",
    }
}

errors! {
    /// Why [`Endpoint::send`] or [`Endpoint::abort`] failed. Nothing was queued.
    SendError {
        InvalidAssociation => "the association handle is stale or never existed",
        InvalidState => "the association is not up",
        InvalidStream => "the stream is beyond the configured number of streams, or the number the peer takes",
        Empty => "a message has at least one octet",
        TooLarge => "the message is above message_size_max",
        Full => "the stream's send buffer would pass send_buffer_max",
    }
}

/// What to do with an SCTP packet sctp-proto found no association for.
#[derive(Debug, PartialEq, Eq)]
enum OutOfTheBlue {
    /// Nothing: malformed, a wrong CRC32c, or a packet RFC 9260 §8.4 says to
    /// discard.
    Drop,
    /// Send this back.
    Answer(Bytes),
    /// An ABORT or SHUTDOWN COMPLETE with the T bit set, carrying this tag:
    /// for the association whose peer's tag it is, if any (§8.5.1 (B),
    /// (C)).
    Reflected(u32),
}

/// RFC 9260 §8.4, for `packet`, an SCTP packet for no association of ours
/// (its Verification Tag is none of ours, and it is no INIT sctp-proto
/// took), in the section's order:
/// - (2) one holding an ABORT is discarded, (6) one holding a SHUTDOWN
///   COMPLETE likewise, unless the chunk is the first and has the T bit
///   set: then the tag is the peer's of an association of ours (§8.5.1);
/// - (3) an INIT sctp-proto did not take (the endpoint takes no
///   associations) is answered with an ABORT whose tag is the INIT's
///   Initiate Tag, T bit clear, so the peer gives up at once rather than
///   retransmitting its INIT until it fails, as Linux answers an INIT to a
///   port without a listener (found by a review: it was dropped); an INIT
///   not alone in its packet (§6.10), with a tag, or with Initiate Tag 0
///   (§3.3.2) is dropped;
/// - (5) one holding a SHUTDOWN ACK (the peer's SHUTDOWN COMPLETE to it was
///   lost, and ours is closed) is answered with a SHUTDOWN COMPLETE, or the
///   peer resends it until it gives up (found by a review);
/// - (7) one holding a COOKIE ACK or an ERROR with a Stale Cookie cause is
///   discarded;
/// - (8) anything else, a COOKIE ECHO included ((4): sctp-proto keeps
///   state from the INIT on, so a COOKIE ECHO it does not know is one whose
///   handshake we dropped), is answered with an ABORT, so that a peer whose
///   association we lost (restarted, or ended it) ends its own at once
///   instead of retransmitting until it gives up.
///
/// Both answers carry the packet's own Verification Tag with the T bit set
/// (reflected), the ports swapped; a packet with tag 0 (only an INIT may
/// have it) gets none, as no peer could take it.
fn out_of_the_blue(packet: &[u8]) -> OutOfTheBlue {
    const INIT: u8 = 1;
    const ABORT: u8 = 6;
    const ERROR: u8 = 9;
    const COOKIE_ACK: u8 = 11;
    const SHUTDOWN_ACK: u8 = 8;
    const SHUTDOWN_COMPLETE: u8 = 14;
    const T_BIT: u8 = 1;
    /// §3.3.10.3: the Stale Cookie error cause.
    const STALE_COOKIE: u16 = 3;
    if packet.len() < 16 {
        return OutOfTheBlue::Drop;
    }
    if checksum(packet).to_le_bytes() != packet[8..12] {
        return OutOfTheBlue::Drop;
    }
    let be16 = |at: usize| u16::from_be_bytes([packet[at], packet[at + 1]]);
    // The chunks (§3.2), each at least its 4-octet header and within the
    // packet, padded to 4 octets (the last one's padding may be absent).
    let mut types = Vec::new();
    let mut stale_cookie = false;
    let mut at = 12;
    while at < packet.len() {
        if packet.len() - at < 4 {
            return OutOfTheBlue::Drop;
        }
        let (typ, len) = (packet[at], usize::from(be16(at + 2)));
        if len < 4 || len > packet.len() - at {
            return OutOfTheBlue::Drop;
        }
        if typ == ERROR {
            // Its causes (§3.3.10): code, length, value padded.
            let mut c = at + 4;
            while c + 4 <= at + len {
                let cause_len = usize::from(be16(c + 2));
                stale_cookie |= be16(c) == STALE_COOKIE;
                if cause_len < 4 {
                    break;
                }
                c += cause_len.next_multiple_of(4);
            }
        }
        types.push(typ);
        at += len.next_multiple_of(4);
    }
    let (first, first_flags) = (packet[12], packet[13]);
    let tag = u32::from_be_bytes([packet[4], packet[5], packet[6], packet[7]]);
    let has = |t: u8| types.contains(&t);
    if (first == ABORT || first == SHUTDOWN_COMPLETE) && first_flags & T_BIT != 0 {
        return OutOfTheBlue::Reflected(tag);
    }
    if first == INIT {
        let lone = types.len() == 1 && tag == 0;
        return match abort_for_init(packet, None) {
            Some(abort) if lone && abort[4..8] != [0; 4] => OutOfTheBlue::Answer(abort),
            _ => OutOfTheBlue::Drop,
        };
    }
    if has(ABORT) || has(SHUTDOWN_COMPLETE) || tag == 0 {
        return OutOfTheBlue::Drop;
    }
    let answer = if has(SHUTDOWN_ACK) {
        SHUTDOWN_COMPLETE
    } else if has(COOKIE_ACK) || stale_cookie {
        return OutOfTheBlue::Drop;
    } else {
        ABORT
    };
    let mut out = Vec::with_capacity(16);
    out.extend_from_slice(&packet[2..4]);
    out.extend_from_slice(&packet[0..2]);
    out.extend_from_slice(&packet[4..8]);
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&[answer, T_BIT, 0, 4]);
    OutOfTheBlue::Answer(sealed(out))
}

/// RFC 9260 §6.8: the CRC32c of `packet` (at least its 12-octet common
/// header) with its checksum field taken as zero.
fn checksum(packet: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&packet[..8]);
    let crc = crc32c::crc32c_append(crc, &[0; 4]);
    crc32c::crc32c_append(crc, &packet[12..])
}

/// `packet` with its checksum field filled in, stored least significant
/// octet first (as the fork stores it).
fn sealed(mut packet: Vec<u8>) -> Bytes {
    let crc = checksum(&packet);
    packet[8..12].copy_from_slice(&crc.to_le_bytes());
    Bytes::from(packet)
}

/// The ABORT that answers `init`, an SCTP packet whose first chunk is an
/// INIT that cannot be processed: RFC 9260 §8.4 (3), its Verification Tag
/// the INIT's Initiate Tag and its T bit 0, the ports swapped, with an
/// error cause of code `cause` (length 4) if given, e.g. 4 "Out of
/// Resource" (§3.3.10.4). `None` if `init` is not that.
fn abort_for_init(init: &[u8], cause: Option<u16>) -> Option<Bytes> {
    const INIT: u8 = 1;
    let (ports, tag) = (init.get(0..4)?, init.get(16..20)?);
    if init.get(12) != Some(&INIT) {
        return None;
    }
    let mut packet = Vec::with_capacity(24);
    packet.extend_from_slice(&ports[2..4]);
    packet.extend_from_slice(&ports[0..2]);
    packet.extend_from_slice(tag);
    packet.extend_from_slice(&[0; 4]);
    // ABORT (6), flags 0 (T clear), its length; the cause: code, length 4.
    match cause {
        Some(code) => {
            packet.extend_from_slice(&[6, 0, 0, 8]);
            packet.extend_from_slice(&code.to_be_bytes());
            packet.extend_from_slice(&[0, 4]);
        }
        None => packet.extend_from_slice(&[6, 0, 0, 4]),
    }
    Some(sealed(packet))
}
