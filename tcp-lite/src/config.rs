//! Configuration of a [`Stack`](crate::Stack) and of its TCP connections.
//!
//! Every arena is sized from here at start-up (STYLE.md §5): the number of
//! connections, the listen backlog and the socket buffers bound what a peer
//! can make us allocate.

use core::fmt;
use core::ops::RangeInclusive;
use std::net::Ipv4Addr;

use smoltcp::time::Duration;

use crate::rss::Steering;

/// Most connections a stack may be configured for.
pub const MAX_CONNECTIONS_LIMIT: usize = 1 << 20;
/// Most datagrams a UDP socket may be configured to hold per direction.
pub const UDP_DATAGRAMS_LIMIT: usize = 1 << 20;
/// Most listening sockets per listener.
pub const BACKLOG_LIMIT: usize = 64;
/// Longest user timeout (smoltcp's time arithmetic wraps beyond `i64` µs;
/// a day is longer than any peer should be waited for).
pub const USER_TIMEOUT_LIMIT: Duration = Duration::from_secs(24 * 3600);

/// Congestion control for a connection (smoltcp's `socket-tcp-reno` and
/// `socket-tcp-cubic` features).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CongestionControl {
    /// No congestion window: send whatever the peer's window allows. Only for
    /// links that never drop for congestion (the in-memory link).
    None,
    /// RFC 5681 NewReno-style slow start and congestion avoidance.
    Reno,
    /// RFC 9438 CUBIC, the Linux default and ours for real networks.
    Cubic,
}

impl CongestionControl {
    pub(crate) fn to_smoltcp(self) -> smoltcp::socket::tcp::CongestionControl {
        use smoltcp::socket::tcp::CongestionControl as C;
        match self {
            CongestionControl::None => C::None,
            CongestionControl::Reno => C::Reno,
            CongestionControl::Cubic => C::Cubic,
        }
    }
}

/// [`TcpConfig::rto_min`]'s default, in milliseconds.
pub(crate) const RTO_MIN_DEFAULT_MS: u64 = 5;

/// Per-connection TCP settings. The defaults are the ones `tcp_table`
/// measured best for FPDUs (see the crate README).
#[derive(Debug, Clone, PartialEq)]
pub struct TcpConfig {
    /// Receive buffer in octets. Above 64 KiB smoltcp offers window scaling
    /// (RFC 7323), with the shift taken from this size.
    pub rx_buffer: usize,
    /// Transmit buffer in octets: how much the framer can queue ahead of
    /// the peer's acknowledgements.
    pub tx_buffer: usize,
    /// Nagle's algorithm (RFC 9293). Off for FPDUs: MPA sends whole
    /// messages and a held-back small FPDU is pure latency.
    pub nagle: bool,
    /// Delayed-ACK timer (RFC 9293). smoltcp still ACKs at once
    /// when a full segment is unacknowledged; `None` ACKs everything at once.
    /// 1 ms lets a reply carry the ACK of its request (a third off the
    /// ping-pong in `tcp_table`) while bounding what a peer that runs
    /// Nagle's algorithm waits.
    pub ack_delay: Option<Duration>,
    /// Congestion control.
    pub congestion: CongestionControl,
    /// The least retransmission timeout (RFC 6298 §2.4, which says 1 s;
    /// Linux uses 200 ms). With SACK and RACK-TLP the timeout repairs only
    /// what they cannot (a retransmission lost while the window is full,
    /// a whole window lost), so on a short path it is what such a loss
    /// costs: `tcp_table`'s 1% loss each way without congestion control
    /// (the full window in flight, 50 us each way) ran at 0.82 Gbit/s with
    /// 200 ms, 4.6 with 20 ms, 7.5 with 5 ms and 8.9 with 1 ms; with CUBIC
    /// no timeout fired at all. 5 ms by default: above tcp-lite's own
    /// delayed ACK (1 ms) with room for a queue. Against a peer that
    /// delays an ACK longer (Linux: 40 ms), a lone segment's loss probe
    /// goes in the timeout's place (one duplicate segment, no collapse of
    /// the congestion window), and the estimator's RTTVAR raises the
    /// timeout where round trips vary.
    pub rto_min: Duration,
    /// Records whole in segments (RFC 5044 §5, "MPA-aware TCP"): writes
    /// sized with [`Transport::segment_room`](crate::Transport::segment_room)
    /// are never split between segments; a segment the peer's window would
    /// cut short waits for the window (unless nothing is in flight), and the
    /// congestion window admits a whole segment whenever it has room. On
    /// for MPA; off sends as plain smoltcp does.
    pub whole_records: bool,
    /// TCP keep-alive interval, `None` for off. On, an idle connection
    /// probes its peer at this interval, and one whose peer has sent
    /// nothing, not even the answer to a probe, for `user_timeout` is
    /// aborted (reported as
    /// [`EventKind::TimedOut`](crate::EventKind::TimedOut)): a peer that vanished
    /// (its host lost, a cable pulled) while nothing of ours waited for its
    /// acknowledgement held the connection for ever. At most half the user
    /// timeout, so that a peer has two probes to answer.
    pub keep_alive: Option<Duration>,
    /// A connection that makes no progress for this long (a connect that is
    /// not answered, or queued data that is not acknowledged) is aborted
    /// with [`EventKind::TimedOut`](crate::EventKind::TimedOut). Data
    /// received counts as progress only while nothing of ours awaits an
    /// acknowledgement (RFC 5482).
    pub user_timeout: Duration,
    /// A passive open whose handshake has not completed this long after
    /// its SYN (SYN-RECEIVED: our SYN-ACK unanswered) is dropped silently,
    /// at most `user_timeout`. Half-open connections hold slots: with the
    /// user timeout alone, 36 spoofed SYNs a second held 1,088 slots for
    /// good. Default 3 s: a SYN-ACK sent again after 1 s and 2 s (RFC 6298
    /// §5's doubling from its 1 s initial RTO) has had its chance.
    pub handshake_timeout: Duration,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            rx_buffer: 256 * 1024,
            tx_buffer: 256 * 1024,
            nagle: false,
            ack_delay: Some(Duration::from_millis(1)),
            congestion: CongestionControl::Cubic,
            rto_min: Duration::from_millis(RTO_MIN_DEFAULT_MS),
            whole_records: true,
            keep_alive: None,
            user_timeout: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(3),
        }
    }
}

/// Configuration of a [`Stack`](crate::Stack): one interface with one IPv4
/// address.
#[derive(Debug, Clone, PartialEq)]
pub struct StackConfig {
    /// The interface's Ethernet address; `None` for an IP-medium device.
    pub mac: Option<[u8; 6]>,
    /// The interface's IPv4 address.
    pub addr: Ipv4Addr,
    /// Its prefix length.
    pub prefix_len: u8,
    /// Default gateway, if any.
    pub gateway: Option<Ipv4Addr>,
    /// Most connections open at once (active, accepted and in handshake).
    pub max_connections: usize,
    /// Sockets kept listening per listener. smoltcp has no SYN queue: a
    /// listening socket becomes the connection, and the stack puts a fresh
    /// one in its place after every packet it takes in, so one is enough.
    /// Every listening socket costs a look at each incoming packet.
    pub backlog: usize,
    /// Local ports for active opens.
    pub ephemeral_ports: RangeInclusive<u16>,
    /// Seed of smoltcp's initial sequence numbers and of where in
    /// `ephemeral_ports` active opens start (RFC 6056 §3.2: a port picked
    /// from a fixed start would reuse the last run's four-tuple, which a
    /// peer in TIME-WAIT may answer with a challenge ACK instead of a
    /// SYN-ACK). Give each run its own for connections to real peers.
    pub seed: u64,
    /// Settings of every connection.
    pub tcp: TcpConfig,
    /// The receive queue this stack owns on a port shared by several
    /// stacks (one per core, all with `addr`), if any. Active opens then
    /// take only local ports whose reply traffic hashes to that queue, so
    /// every packet of the connection reaches this stack; stacks on the
    /// same address with different queues never pick the same four-tuple.
    /// `None`: the stack has the port to itself and takes any free port.
    pub steering: Option<Steering>,
    /// Octets each UDP socket ([`Datagrams`](crate::Datagrams)) buffers per
    /// direction, and the datagrams it holds at most (their metadata).
    pub udp_buffer: usize,
    /// See [`StackConfig::udp_buffer`].
    pub udp_datagrams: usize,
}

impl StackConfig {
    /// A configuration for `addr`/24 on an Ethernet device with address
    /// `mac`, with the default TCP settings.
    pub fn new(mac: [u8; 6], addr: Ipv4Addr) -> Self {
        StackConfig {
            mac: Some(mac),
            addr,
            prefix_len: 24,
            gateway: None,
            max_connections: 1024,
            backlog: 1,
            ephemeral_ports: 49152..=65535,
            seed: 0x6470_7761_7270,
            tcp: TcpConfig::default(),
            steering: None,
            // An SCTP association's whole window of 4 MiB (sctp-lite's
            // receive window in `bench`) with room to spare: a UDP socket
            // that overflows drops, and SCTP then retransmits.
            udp_buffer: 8 << 20,
            udp_datagrams: 16384,
        }
    }

    /// Check the configuration, saying what to fix.
    pub fn validate(&self) -> Result<(), ConfigError> {
        // smoltcp panics on an address that is not unicast (found by a
        // review); a frame from a group or zero MAC address is one a
        // switch drops (IEEE 802: the group bit is the first octet's low
        // bit).
        let unicast = |a: Ipv4Addr| !(a.is_multicast() || a.is_broadcast() || a.is_unspecified());
        if !unicast(self.addr) {
            return Err(ConfigError(
                "addr must be a unicast address (not multicast, broadcast or 0.0.0.0)",
            ));
        }
        if self.gateway.is_some_and(|g| !unicast(g)) {
            return Err(ConfigError(
                "gateway must be a unicast address (not multicast, broadcast or 0.0.0.0)",
            ));
        }
        if let Some(mac) = self.mac {
            if mac[0] & 1 != 0 || mac == [0; 6] {
                return Err(ConfigError(
                    "mac must be a unicast Ethernet address (the first octet's low bit clear, \
                     not all zeros)",
                ));
            }
        }
        if self.prefix_len > 32 {
            return Err(ConfigError("prefix_len must be 0..=32"));
        }
        if self.max_connections == 0 {
            return Err(ConfigError("max_connections must be at least 1"));
        }
        if self.max_connections > MAX_CONNECTIONS_LIMIT {
            return Err(ConfigError("max_connections must be at most 1048576"));
        }
        if !(1..=BACKLOG_LIMIT).contains(&self.backlog) {
            return Err(ConfigError("backlog must be 1..=64"));
        }
        if self.ephemeral_ports.is_empty() || *self.ephemeral_ports.start() == 0 {
            return Err(ConfigError(
                "ephemeral_ports must be a non-empty range without port 0",
            ));
        }
        // smoltcp's window scaling needs the buffer below 2^30 (RFC 7323: shift at most 14).
        for (what, size) in [
            ("tcp.rx_buffer", self.tcp.rx_buffer),
            ("tcp.tx_buffer", self.tcp.tx_buffer),
        ] {
            if !(1024..=1 << 30).contains(&size) {
                return Err(ConfigError(match what {
                    "tcp.rx_buffer" => "tcp.rx_buffer must be 1 KiB..=1 GiB",
                    _ => "tcp.tx_buffer must be 1 KiB..=1 GiB",
                }));
            }
        }
        if self.tcp.user_timeout == Duration::ZERO || self.tcp.user_timeout > USER_TIMEOUT_LIMIT {
            return Err(ConfigError(
                "tcp.user_timeout must be above zero and at most 24 hours",
            ));
        }
        if let Some(k) = self.tcp.keep_alive {
            if k == Duration::ZERO || k > self.tcp.user_timeout / 2 {
                return Err(ConfigError(
                    "tcp.keep_alive must be above zero and at most half of tcp.user_timeout",
                ));
            }
        }
        if self.tcp.handshake_timeout == Duration::ZERO {
            return Err(ConfigError("tcp.handshake_timeout must be above zero"));
        }
        if self.tcp.rto_min < Duration::from_micros(100)
            || self.tcp.rto_min > Duration::from_secs(60)
        {
            return Err(ConfigError(
                "tcp.rto_min must be between 100 us and 60 s (RFC 6298's upper bound)",
            ));
        }
        // Each UDP socket allocates both directions' buffers at once (found
        // by a review: usize::MAX passed and `udp_bind` panicked; 0
        // datagrams passed and every send said "full" for ever).
        if !(1024..=1 << 30).contains(&self.udp_buffer) {
            return Err(ConfigError("udp_buffer must be 1 KiB..=1 GiB"));
        }
        if !(1..=UDP_DATAGRAMS_LIMIT).contains(&self.udp_datagrams) {
            return Err(ConfigError("udp_datagrams must be 1..=1048576"));
        }
        if let Some(steering) = &self.steering {
            if !steering.reta().contains(steering.queue()) {
                return Err(ConfigError(
                    "steering.queue must be one of steering.reta's entries (no packet would reach \
                     this stack): give it a queue the port's redirection table holds",
                ));
            }
        }
        Ok(())
    }
}

/// A configuration value that cannot work; the message says which and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigError(pub &'static str);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid tcp-lite configuration: {}", self.0)
    }
}

impl std::error::Error for ConfigError {}
