//! Configuration of an [`Endpoint`](crate::Endpoint) and its associations.
//!
//! Every bound is set here (STYLE.md §5): the number of associations, of
//! streams, the largest message and the send and receive buffers bound what
//! a peer or the user can make us allocate.

use core::fmt;

/// RFC 6951 §5.1 (via IANA): the registered UDP port for SCTP over UDP, 9899.
pub const UDP_ENCAPSULATION_PORT: u16 = 9899;
/// RFC 5043 §5.1: the adaptation code point of DDP, sent in the Adaptation
/// Layer Indication (RFC 5061 §4.2.6).
pub const ADAPTATION_CODE_POINT_DDP: u32 = 1;
/// An IPv4 header without options (RFC 791).
pub const IPV4_HEADER_LEN: u32 = 20;
/// A UDP header (RFC 768), the encapsulation of RFC 6951.
pub const UDP_HEADER_LEN: u32 = 8;
/// The SCTP common header (RFC 9260 §3.1).
pub const SCTP_COMMON_HEADER_LEN: u32 = 12;
/// A DATA chunk's header (RFC 9260 §3.3.1).
pub const DATA_CHUNK_HEADER_LEN: u32 = 16;

/// The smallest [`Config::path_mtu`]: the handshake's largest packet, our
/// INIT ACK (84 octets: the common header, the chunk with its 32-octet
/// State Cookie, Supported Extensions and the Adaptation Layer Indication,
/// RFC 9260 §3.3.3, RFC 5061 §4.2.6), needs 112 with IPv4 and UDP; 128
/// also carries DDP's smallest message (a DDP-SSN and the largest RDMAP
/// header, 72 octets) in one DATA chunk. Below it the INIT ACK would not
/// fit a packet and no association could come up.
pub const PATH_MTU_MIN: u32 = 128;

/// RFC 9260 §16 Valid.Cookie.Life, 60 s: the longest
/// [`Config::handshake_timeout_ms`].
const VALID_COOKIE_LIFE_MS: u64 = 60_000;
/// The longest [`Config::heartbeat_interval_ms`]: a day.
const HEARTBEAT_INTERVAL_MAX_MS: u64 = 86_400_000;

/// The largest message taken from a peer, whatever our path MTU: a peer
/// sizes its messages by its own path MTU (RFC 5043 §9), which may be
/// larger than ours (IP fragments them, or a jumbo path carries them), and
/// sctp-proto's own default.
const RECEIVE_MESSAGE_MAX: u32 = 65_536;

/// The overhead below a user message in one IPv4 packet: 1500 - 56 = 1444
/// octets of message at MTU 1500 (IPv4 20, UDP 8 as RFC 6951 encapsulates,
/// the SCTP common header 12 and the DATA chunk header 16, RFC 9260 §3).
const PER_PACKET_OVERHEAD: u32 =
    IPV4_HEADER_LEN + UDP_HEADER_LEN + SCTP_COMMON_HEADER_LEN + DATA_CHUNK_HEADER_LEN;
const _: () = assert!(1500 - PER_PACKET_OVERHEAD == 1444);

/// Settings of an endpoint. [`Config::default`] is DDP over SCTP over UDP on
/// an IPv4 path of MTU 1500.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The code point of the Adaptation Layer Indication we send in our INIT
    /// and INIT ACK (RFC 5061 §4.2.6), `None` for none. Default 1, DDP
    /// (RFC 5043 §5.1).
    pub adaptation_code_point: Option<u32>,
    /// Refuse (ABORT) an association whose peer sent no Adaptation Layer
    /// Indication or one other than 1 (RFC 5043 §7.1, §11.1). Default true.
    pub require_ddp: bool,
    /// Whether incoming associations are accepted (a server). Default true.
    pub accept: bool,
    /// Most associations open at once, connected or accepted; an incoming one
    /// beyond it is aborted. Default 1,024.
    pub associations_max: usize,
    /// Outbound and inbound streams we offer (RFC 9260 §5.1: the association
    /// uses the smaller of each side's offer). Default 64.
    pub streams: u16,
    /// The IP path MTU. A user message is at most this minus 56 octets (IPv4,
    /// UDP, SCTP common header, DATA chunk header), so that one message is one
    /// DATA chunk and SCTP never fragments it (RFC 5043 §9). Over IPv6, give
    /// the MTU less 20 (its header is 40 octets). Default 1500.
    pub path_mtu: u32,
    /// Our receive window (a_rwnd, RFC 9260 §6.1) in octets: the most the
    /// peer may have in flight to us, and the most received data held here
    /// before the user reads it. Default 256 KiB.
    pub receive_window: u32,
    /// Most octets queued but not yet acknowledged per stream; a send beyond
    /// it fails with [`SendError::Full`](crate::SendError::Full). Default
    /// 256 KiB.
    pub send_buffer_max: usize,
    /// The SCTP port of both ends inside the UDP datagram (RFC 6951 §5: the
    /// UDP ports are separate). Default 5000, sctp-proto's.
    pub sctp_port: u16,
    /// RFC 9260 §16 RTO.Initial, RTO.Min and RTO.Max in milliseconds, as
    /// sctp-proto uses them (its own defaults are 3,000, 1,000 and 60,000).
    /// Defaults 1,000, 200 and 10,000: a data centre, not RFC 9260's
    /// 1 s/1 s/60 s for the Internet. sctp-proto measures RTTs in whole
    /// milliseconds, so on a link of microseconds the RTO is RTO.Min.
    pub rto_initial_ms: u64,
    /// See [`rto_initial_ms`](Config::rto_initial_ms).
    pub rto_min_ms: u64,
    /// See [`rto_initial_ms`](Config::rto_initial_ms).
    pub rto_max_ms: u64,
    /// Consecutive T3-rtx expiries (retransmissions of outstanding DATA with
    /// nothing new acknowledged) before the peer is unreachable and the
    /// association ends in [`CloseReason::TimedOut`](crate::CloseReason::TimedOut)
    /// (RFC 9260 §8.1 Association.Max.Retrans), `None` for no limit (a dead
    /// peer is then never detected). Default 10, RFC 9260 §16's: with the RTO
    /// defaults above a dead peer is declared 62.6 s after the first lost
    /// packet (0.2 + 0.4 + ... + 6.4 + 5 × 10 s of backed-off RTO, §6.3.3
    /// E2), 85 s if it died before any RTT was measured (RTO.Initial 1 s).
    pub data_retransmits_max: Option<usize>,
    /// Milliseconds an incoming association may take from its peer's first
    /// INIT to the COOKIE ECHO that brings it up; past it the association
    /// is dropped without a word and its slot freed (counted in
    /// [`Endpoint::handshakes_expired`](crate::Endpoint::handshakes_expired)).
    /// RFC 9260 §5.1 keeps a server stateless until the COOKIE ECHO; the
    /// fork holds an association (a slot of `associations_max`) from the
    /// INIT on, and nothing else would ever end one whose peer never
    /// answers our INIT ACK: a burst of INITs would hold every slot for
    /// good. Must be above [`rto_initial_ms`](Config::rto_initial_ms) and
    /// at most 60,000 (RFC 9260 §16 Valid.Cookie.Life: a COOKIE ECHO later
    /// than that is stale anyway, §5.1.5).
    ///
    /// Default 4,000. The peer retransmits its INIT (T1-init) or COOKIE
    /// ECHO (T1-cookie) after RTO.Initial, doubling each time (RFC 9260
    /// §5.1, §6.3.3 E2): with dpwarp's 1 s at both ends its copies reach
    /// us about 1 s and 3 s after the first, so 4 s lets a handshake lose
    /// two packets and still come up, where 3 s would cut the second
    /// retransmission by a round trip. Shorter would not stop a flood
    /// anyway: `associations_max` INITs per timeout keep the table full,
    /// 256 a second at the defaults; the timeout only ends each burst's
    /// hold.
    pub handshake_timeout_ms: u64,
    /// RFC 9260 §8.3 HB.interval in milliseconds: an association that has
    /// sent no DATA for this long plus one RTO (jittered by ±50%, and
    /// doubled for each HEARTBEAT before the last left unanswered, up to
    /// [`rto_max_ms`](Config::rto_max_ms)) sends the peer a HEARTBEAT;
    /// after [`data_retransmits_max`](Config::data_retransmits_max)
    /// HEARTBEATs in a row unanswered (with no DATA acknowledged) the peer
    /// is unreachable and the association ends in
    /// [`CloseReason::TimedOut`](crate::CloseReason::TimedOut). Without
    /// them an idle association whose peer vanished was never ended (only
    /// a send would have found it dead). `None` sends none. 1 to
    /// 86,400,000. Default 30,000, RFC 9260 §16's (Linux's too): with the
    /// defaults a vanished idle peer is found 11 × 30 s plus the RTOs after
    /// its last answer, 6 to 7.5 minutes where no RTT was measured
    /// (RTO.Initial 1 s, doubled to RTO.Max 10 s).
    pub heartbeat_interval_ms: Option<u64>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            adaptation_code_point: Some(ADAPTATION_CODE_POINT_DDP),
            require_ddp: true,
            accept: true,
            associations_max: 1024,
            streams: 64,
            path_mtu: 1500,
            receive_window: 256 * 1024,
            send_buffer_max: 256 * 1024,
            sctp_port: sctp_proto::DEFAULT_SCTP_PORT,
            rto_initial_ms: 1000,
            rto_min_ms: 200,
            rto_max_ms: 10_000,
            data_retransmits_max: Some(10),
            handshake_timeout_ms: 4000,
            heartbeat_interval_ms: Some(30_000),
        }
    }
}

impl Config {
    /// The largest user message: [`path_mtu`](Config::path_mtu) less the IPv4,
    /// UDP, SCTP common and DATA chunk headers (1444 at MTU 1500).
    pub fn message_size_max(&self) -> usize {
        self.path_mtu.saturating_sub(PER_PACKET_OVERHEAD) as usize
    }

    /// The largest user message taken from a peer: 64 KiB, or the receive
    /// window if smaller, and at least
    /// [`message_size_max`](Config::message_size_max). A peer whose path MTU is larger than
    /// ours sends larger messages (each sizes its own, RFC 5043 §9); taking
    /// only what we send, an association to a peer at MTU 9000 from one at
    /// 1500 stalled on its first full message (found by a review). The
    /// receive window still bounds what an association holds.
    pub fn receive_message_max(&self) -> usize {
        (self.receive_window.min(RECEIVE_MESSAGE_MAX) as usize).max(self.message_size_max())
    }

    /// The largest SCTP packet (UDP payload) we send: the path MTU less the
    /// IPv4 and UDP headers (1472 at MTU 1500). A transmit buffer of this size
    /// always suffices.
    pub fn packet_size_max(&self) -> usize {
        self.path_mtu
            .saturating_sub(IPV4_HEADER_LEN + UDP_HEADER_LEN) as usize
    }

    /// Check the settings: every bound non-zero, a message of at least one
    /// octet, a window that holds one message.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.associations_max == 0 {
            return Err(ConfigError::NoAssociations);
        }
        if self.streams == 0 {
            return Err(ConfigError::NoStreams);
        }
        if self.path_mtu < PATH_MTU_MIN {
            return Err(ConfigError::PathMtuTooSmall);
        }
        if (self.receive_window as usize) < self.message_size_max()
            || self.send_buffer_max < self.message_size_max()
        {
            return Err(ConfigError::BufferTooSmall);
        }
        if self.sctp_port == 0 {
            return Err(ConfigError::NoPort);
        }
        if self.rto_min_ms == 0 || self.rto_min_ms > self.rto_initial_ms {
            return Err(ConfigError::BadRto);
        }
        if self.rto_initial_ms > self.rto_max_ms {
            return Err(ConfigError::BadRto);
        }
        if self.handshake_timeout_ms <= self.rto_initial_ms
            || self.handshake_timeout_ms > VALID_COOKIE_LIFE_MS
        {
            return Err(ConfigError::BadHandshakeTimeout);
        }
        if self
            .heartbeat_interval_ms
            .is_some_and(|ms| ms == 0 || ms > HEARTBEAT_INTERVAL_MAX_MS)
        {
            return Err(ConfigError::BadHeartbeatInterval);
        }
        Ok(())
    }
}

/// Why a [`Config`] was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigError {
    /// `associations_max` is 0.
    NoAssociations,
    /// `streams` is 0.
    NoStreams,
    /// `path_mtu` is below [`PATH_MTU_MIN`].
    PathMtuTooSmall,
    /// `receive_window` or `send_buffer_max` is below one message.
    BufferTooSmall,
    /// `sctp_port` is 0 (RFC 9260 §3.1: port 0 MUST NOT be used).
    NoPort,
    /// The RTOs are not 0 < min <= initial <= max.
    BadRto,
    /// `handshake_timeout_ms` is not above `rto_initial_ms`, or above
    /// 60,000 (RFC 9260 §16 Valid.Cookie.Life).
    BadHandshakeTimeout,
    /// `heartbeat_interval_ms` is 0 or above a day.
    BadHeartbeatInterval,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConfigError::NoAssociations => "associations_max is 0",
            ConfigError::NoStreams => "streams is 0",
            ConfigError::PathMtuTooSmall => "path_mtu is below PATH_MTU_MIN (128)",
            ConfigError::BufferTooSmall => "receive_window or send_buffer_max is below one message",
            ConfigError::NoPort => "sctp_port is 0",
            ConfigError::BadRto => "RTOs must satisfy 0 < min <= initial <= max",
            ConfigError::BadHandshakeTimeout => {
                "handshake_timeout_ms must be above rto_initial_ms and at most 60000"
            }
            ConfigError::BadHeartbeatInterval => {
                "heartbeat_interval_ms must be 1 to 86400000 (a day), or none"
            }
        })
    }
}

impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_ddp_over_udp_at_mtu_1500() {
        let config = Config::default();
        assert_eq!(config.validate(), Ok(()));
        assert_eq!(config.message_size_max(), 1444);
        assert_eq!(config.packet_size_max(), 1472);
        assert_eq!(config.adaptation_code_point, Some(1));
        assert!(config.require_ddp);
        // RFC 9260 §16: Association.Max.Retrans 10.
        assert_eq!(config.data_retransmits_max, Some(10));
        // Above RTO.Initial: two lost handshake packets are repaired.
        assert_eq!(config.handshake_timeout_ms, 4000);
        // RFC 9260 §16: HB.interval 30 s.
        assert_eq!(config.heartbeat_interval_ms, Some(30_000));
    }

    #[test]
    fn bad_settings_are_refused() {
        let bad = [
            (
                Config {
                    streams: 0,
                    ..Config::default()
                },
                ConfigError::NoStreams,
            ),
            (
                Config {
                    path_mtu: 56,
                    ..Config::default()
                },
                ConfigError::PathMtuTooSmall,
            ),
            (
                Config {
                    path_mtu: PATH_MTU_MIN - 1,
                    receive_window: 1000,
                    send_buffer_max: 1000,
                    ..Config::default()
                },
                ConfigError::PathMtuTooSmall,
            ),
            (
                Config {
                    receive_window: 1000,
                    ..Config::default()
                },
                ConfigError::BufferTooSmall,
            ),
            (
                Config {
                    sctp_port: 0,
                    ..Config::default()
                },
                ConfigError::NoPort,
            ),
            (
                Config {
                    rto_min_ms: 0,
                    ..Config::default()
                },
                ConfigError::BadRto,
            ),
            (
                Config {
                    handshake_timeout_ms: 0,
                    ..Config::default()
                },
                ConfigError::BadHandshakeTimeout,
            ),
            (
                Config {
                    // Not above RTO.Initial (1,000).
                    handshake_timeout_ms: 1000,
                    ..Config::default()
                },
                ConfigError::BadHandshakeTimeout,
            ),
            (
                Config {
                    handshake_timeout_ms: 60_001,
                    ..Config::default()
                },
                ConfigError::BadHandshakeTimeout,
            ),
            (
                Config {
                    associations_max: 0,
                    ..Config::default()
                },
                ConfigError::NoAssociations,
            ),
            (
                Config {
                    heartbeat_interval_ms: Some(0),
                    ..Config::default()
                },
                ConfigError::BadHeartbeatInterval,
            ),
            (
                Config {
                    heartbeat_interval_ms: Some(86_400_001),
                    ..Config::default()
                },
                ConfigError::BadHeartbeatInterval,
            ),
        ];
        for (config, error) in bad {
            assert_eq!(config.validate(), Err(error));
        }
    }
}
