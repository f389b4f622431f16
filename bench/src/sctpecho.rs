//! `bench sctp-echo`: DDP over SCTP (RFC 5043) with RFC 6581 §7's enhanced
//! session control against a foreign peer that echoes DDP segments: Linux
//! kernel SCTP in the siw guest (`tests/interop/peer/sctp-ddp-peer.c`).
//!
//! Heads up! Read RFC 5043 (§5 the PPIDs and message layouts, §5.1 the
//! adaptation code point, §6 session control and §6.1 the DDP-SSN, §8
//! unordered delivery, §9 sizes), RFC 6581 §7 and §9.1 (the enhanced
//! function codes and the IRD/ORD word), RFC 5061 §4.2.6 (the Adaptation
//! Layer Indication) and RFC 6951 (SCTP over UDP) first.
//!
//! The engine's QPs cannot be fed by a peer that speaks no RDMAP, so this
//! tool drives the layers under them directly: sctp-lite's [`Endpoint`] for
//! the association (over kernel UDP, or tcp-lite's stack on a TAP device or
//! DPDK's TAP driver) and `control`'s session machines ([`Initiator`],
//! [`Responder`]) for the DDP stream's session control. One run:
//!
//! 1. The association: `--connect ADDR` opens it (our INIT to ADDR, UDP port
//!    9899), `--listen` accepts it. Either way the peer's Adaptation Layer
//!    Indication must be 1, DDP's (RFC 5043 §7.1).
//! 2. The session on one DDP stream: as the active side we send an Enhanced
//!    Initiate (5) and expect an Enhanced Accept (6) that carries our own
//!    IRD/ORD word back (the echo peer mirrors it); as the passive side our
//!    [`Responder`] answers the peer's Enhanced Initiate with an Enhanced
//!    Accept.
//! 3. `--count` DDP segments (PPID 16), unordered, each an RDMAP Send of
//!    its own message (untagged, QN 0, MSN 1, 2, ...; RFC 5041 §4.3): the
//!    payload of segment k is `1 + k mod 1424` octets of a pattern of k, so
//!    the default count covers every segment length from 19 (the 18-octet
//!    header and one octet) to 1442, the largest that fits one packet at MTU
//!    1500 over UDP encapsulation (1500 - 20 IPv4 - 8 UDP - 12 SCTP common
//!    header - 16 DATA chunk header = 1444, less the DDP-SSN; RFC 5043 §9
//!    sends each DDP message unfragmented). Every echoed message is
//!    compared octet for octet with what was sent, DDP-SSN included; each
//!    comes back exactly once.
//! 4. A Session Terminate (4), after which the peer ends the association.
//!
//! The exit status is 0 only when all of that held; the last line is
//! `sctp-echo: PASS: ...` or `sctp-echo: FAIL: ...`.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};

use clap::Parser;
use control::mpa::PeerValues;
use control::session::{
    Accept, Established, Initiator, Input, Outcome, Responder, Session, SessionConfig,
};
use dataplane::sctp::Wire;
use dataplane::MessageTransport;
use rnic_engine::wire::ddp::{self, UNTAGGED_HEADER_LEN};
use rnic_engine::wire::ddp_session::MESSAGE_LEN_MAX;
use rnic_engine::wire::rdmap::{Control, Opcode};
use rnic_engine::wire::{DdpBuffer, DdpPacket, DdpRepr};
use sctp_lite::{
    AssocId, CloseReason, Config, Endpoint, EventKind, ADAPTATION_CODE_POINT_DDP, PPID_DDP_SEGMENT,
    UDP_ENCAPSULATION_PORT,
};
use tcp_lite::sys::udp::KernelUdp;
use tcp_lite::{Duration, Instant};

use crate::endpoint::now;
use crate::link::{self, LinkArgs, PeerTransport};

/// The SCTP port of both ends by default (sctp-lite's).
pub const SCTP_PORT: u16 = 5000;
/// The largest DDP segment in one SCTP packet at MTU 1500 over UDP
/// encapsulation: 1444 octets of user message less the DDP-SSN (RFC 5043 §9).
pub const SEGMENT_LEN_MAX: usize = 1442;
/// The DDP-SSN in front of every DDP message on SCTP (RFC 5043 §5).
const SSN_LEN: usize = 2;
/// The largest payload of one of our segments.
pub const PAYLOAD_MAX: usize = SEGMENT_LEN_MAX - UNTAGGED_HEADER_LEN;
const _: () = assert!(PAYLOAD_MAX == 1424);
/// Messages in one run at most: the DDP-SSN names one of them unambiguously
/// only while fewer than 2^15 are in flight (RFC 5043 §6.1: sequence arithmetic mod 2^16).
pub const COUNT_MAX: u32 = 32_768;
/// How long the peer has to end the association after our Terminate.
const CLOSE_LIMIT: Duration = Duration::from_secs(5);
/// The TAP interface made when --tap is not given.
const DEFAULT_TAP: &str = "dpwsctp0";
/// The IP MTU of every link here.
const MTU: usize = 1500;
/// Datagrams taken from the transport per round (a bounded burst).
const RX_BURST: usize = 64;

/// `bench sctp-echo`'s command line.
#[derive(Debug, Parser)]
#[command(
    name = "bench sctp-echo",
    bin_name = "bench sctp-echo",
    about = "DDP over SCTP (RFC 5043, RFC 6581 §7) against a peer that echoes DDP segments: \
             association with DDP's adaptation code point, Enhanced Initiate/Accept, N \
             segments echoed and checked octet for octet, Session Terminate"
)]
pub struct EchoArgs {
    /// Open the association to this address (the peer listens on --port).
    #[arg(long, conflicts_with = "listen", required_unless_present = "listen")]
    pub connect: Option<Ipv4Addr>,
    /// Accept the peer's association on --port.
    #[arg(long)]
    pub listen: bool,
    /// The SCTP port (inside UDP): the peer's when connecting, ours when
    /// listening.
    #[arg(long, default_value_t = SCTP_PORT)]
    pub port: u16,
    /// The UDP port of SCTP over UDP (RFC 6951), ours and the peer's.
    #[arg(long = "udp-port", default_value_t = UDP_ENCAPSULATION_PORT)]
    pub udp_port: u16,
    /// kernel: the local address of the UDP socket.
    #[arg(long, default_value_t = Ipv4Addr::UNSPECIFIED)]
    pub bind: Ipv4Addr,
    /// DDP segments to send and check (the default covers every length
    /// from 19 to 1442 octets once).
    #[arg(long, default_value_t = PAYLOAD_MAX as u32)]
    pub count: u32,
    /// The DDP stream (a pair of like-numbered SCTP streams).
    #[arg(long, default_value_t = 0)]
    pub stream: u16,
    /// The IRD we offer or grant (RFC 6581 §9.1).
    #[arg(long, default_value_t = 16)]
    pub ird: u16,
    /// The ORD we want (RFC 6581 §9.1).
    #[arg(long, default_value_t = 16)]
    pub ord: u16,
    /// Seconds the whole run may take.
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
    /// What carries UDP: `kernel` (Linux UDP sockets), `tap` (tcp-lite on a
    /// TAP device's fd) or `net_tap` (tcp-lite on DPDK's TAP driver); the
    /// last two need --ip and root. (The other transports are refused:
    /// their possible values are not listed.)
    #[arg(long, value_enum, default_value_t = PeerTransport::Kernel, hide_possible_values = true)]
    pub transport: PeerTransport,
    /// The link (TAP and DPDK options; the TAP interface defaults to
    /// dpwsctp0).
    #[command(flatten)]
    pub link: LinkArgs,
}

impl EchoArgs {
    fn check(&self) -> Result<(), String> {
        if self.count == 0 || self.count > COUNT_MAX {
            return Err(format!("--count must be 1 to {COUNT_MAX}"));
        }
        // Both ends use the same UDP port, so an ephemeral one (0) is
        // no port the peer could know, and was printed as 0 (found by a
        // review); SCTP's port 0 is not used (RFC 9260 §3.1).
        if self.udp_port == 0 {
            return Err("--udp-port 0: give the UDP port both ends use, 1 to 65535".into());
        }
        if self.port == 0 {
            return Err("--port 0: give an SCTP port, 1 to 65535".into());
        }
        // A day at most: larger overflowed the clock.
        if !(1..=86_400).contains(&self.timeout) {
            return Err(format!(
                "--timeout {}: give 1 to 86400 seconds",
                self.timeout
            ));
        }
        if self.transport != PeerTransport::Kernel && self.link.ip.is_none() {
            return Err(format!("--transport {} needs --ip", self.transport.name()));
        }
        if matches!(
            self.transport,
            PeerTransport::Memif | PeerTransport::Pci | PeerTransport::AfPacket
        ) {
            return Err("sctp-echo runs on kernel, tap and net_tap".into());
        }
        Ok(())
    }
}

/// Runs `bench sctp-echo`; returns the process's exit status.
pub fn main(argv: Vec<String>, stop: &AtomicBool) -> i32 {
    let args = match EchoArgs::try_parse_from(argv) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    if let Err(why) = args.check() {
        eprintln!("bench sctp-echo: {why}");
        return 2;
    }
    let result = match args.transport {
        PeerTransport::Kernel => run(KernelUdp::new(args.bind, 4 << 20), &args, stop),
        PeerTransport::Tap => link::tap_stack(
            args.link.tap.as_deref().unwrap_or(DEFAULT_TAP),
            args.link.ip.as_deref().unwrap_or_default(),
            args.link.netns.as_deref(),
            args.link.bridge.as_deref(),
        )
        .and_then(|stack| run(stack, &args, stop)),
        dpdk => link::run_on_dpdk(dpdk, &args.link, MTU, args.listen, DEFAULT_TAP, |stack| {
            run(stack, &args, stop)
        }),
    };
    match result {
        Ok(summary) => {
            println!("sctp-echo: PASS: {summary}");
            0
        }
        Err(why) => {
            println!("sctp-echo: FAIL: {why}");
            1
        }
    }
}

/// One run over `transport`: the summary, or what went wrong.
fn run<T: MessageTransport>(
    transport: T,
    args: &EchoArgs,
    stop: &AtomicBool,
) -> Result<String, String> {
    let mut wire = Wire::bind(transport, args.udp_port)?;
    let config = Config {
        accept: args.listen,
        associations_max: 4,
        sctp_port: args.port,
        ..Config::default()
    };
    let endpoint = Endpoint::new(config, std::time::Instant::now()).map_err(|e| e.to_string())?;
    let mut echo = Echo::new(args, endpoint);
    let started = now();
    let deadline = started + Duration::from_secs(args.timeout);
    if let Some(addr) = args.connect {
        let remote = SocketAddr::V4(SocketAddrV4::new(addr, args.udp_port));
        echo.assoc = Some(
            echo.endpoint
                .connect(started, remote)
                .map_err(|e| e.to_string())?,
        );
        println!(
            "sctp-echo: connecting to {addr} (SCTP port {}, UDP {}) over {}",
            args.port,
            args.udp_port,
            args.transport.name()
        );
    } else {
        println!(
            "sctp-echo: listening on SCTP port {} (UDP {}) over {}",
            args.port,
            args.udp_port,
            args.transport.name()
        );
    }
    loop {
        let now = now();
        if stop.load(Ordering::SeqCst) {
            return Err(format!("stopped; {}", echo.progress()));
        }
        if now >= deadline {
            return Err(format!(
                "no end within {} s; {}",
                args.timeout,
                echo.progress()
            ));
        }
        let mut busy = wire.transport_mut().poll(now);
        busy |= wire.receive(&mut echo.endpoint, now, RX_BURST) > 0;
        if echo.endpoint.poll_timeout().is_some_and(|t| t <= now) {
            echo.endpoint.handle_timeout(now);
        }
        busy |= echo.step(now)?;
        if wire.transmit(&mut echo.endpoint, now) {
            busy = true;
            wire.transport_mut().poll(now);
        }
        wire.transport_mut().flush();
        if let Some(summary) = echo.finished(now)? {
            return Ok(summary);
        }
        if !busy {
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    }
}

/// The run's state above the carrier.
struct Echo<'a> {
    args: &'a EchoArgs,
    endpoint: Endpoint,
    assoc: Option<AssocId>,
    remote: Option<SocketAddr>,
    session: Option<Session>,
    established: Option<Established>,
    /// Segments sent (the next one's index).
    sent: u32,
    /// Which segments came back.
    seen: Vec<bool>,
    echoed: u32,
    echoed_octets: u64,
    /// When our Session Terminate was queued.
    terminated: Option<Instant>,
    closed: Option<CloseReason>,
    message: Vec<u8>,
    expected: Vec<u8>,
}

impl<'a> Echo<'a> {
    fn new(args: &'a EchoArgs, endpoint: Endpoint) -> Echo<'a> {
        let size = endpoint.config().message_size_max();
        let inbound = endpoint.config().receive_message_max();
        Echo {
            args,
            endpoint,
            assoc: None,
            remote: None,
            session: None,
            established: None,
            sent: 0,
            seen: vec![false; args.count as usize],
            echoed: 0,
            echoed_octets: 0,
            terminated: None,
            closed: None,
            message: vec![0; inbound.max(MESSAGE_LEN_MAX)],
            expected: vec![0; size.max(MESSAGE_LEN_MAX)],
        }
    }

    /// Events, received messages, the session, and what to send; whether
    /// anything happened.
    fn step(&mut self, now: Instant) -> Result<bool, String> {
        let mut busy = self.events(now)?;
        busy |= self.receive(now)?;
        if let Some(session) = self.session.as_mut() {
            session.handle_timeout(now);
        }
        self.decide()?;
        // The Accept goes into the association before our first segment:
        // SCTP gives it the lower TSN. Every message is unordered (RFC 5043
        // §8), so a loss can still let a segment overtake it; the active
        // side holds such a segment until the Accept (control's Initiator
        // reports it as Early, sctp-ddp-peer keeps it).
        busy |= self.send_control()?;
        busy |= self.send_segments()?;
        if self.echoed == self.args.count && self.terminated.is_none() {
            // RFC 5043 §6 (RFC 6581 §7 keeps it): an established stream
            // ends with the Terminate function code.
            if let Some(session) = self.session.as_mut() {
                session.terminate();
            }
            self.terminated = Some(now);
        }
        busy |= self.send_control()?;
        Ok(busy)
    }

    fn events(&mut self, now: Instant) -> Result<bool, String> {
        let mut busy = false;
        while let Some(event) = self.endpoint.poll_event() {
            busy = true;
            if self.assoc.is_some_and(|a| a != event.assoc) {
                // A second association (a listener gets one peer per run).
                let _ = self.endpoint.abort(event.assoc);
                continue;
            }
            match event.kind {
                EventKind::Up {
                    outbound,
                    peer_adaptation,
                } => self.up(now, event.assoc, event.remote, outbound, peer_adaptation)?,
                EventKind::Refused { peer_adaptation } => {
                    return Err(format!(
                        "association with {} refused: the peer's adaptation indication is {} \
                         (RFC 5043 §7.1 wants {ADAPTATION_CODE_POINT_DDP})",
                        event.remote,
                        adaptation_name(peer_adaptation)
                    ))
                }
                EventKind::Closed(reason) if self.terminated.is_some() => {
                    self.closed = Some(reason)
                }
                EventKind::Closed(reason) => {
                    return Err(format!(
                        "the association ended early ({reason:?}); {}",
                        self.progress()
                    ))
                }
            }
        }
        Ok(busy)
    }

    fn up(
        &mut self,
        now: Instant,
        assoc: AssocId,
        remote: SocketAddr,
        outbound: bool,
        peer_adaptation: Option<u32>,
    ) -> Result<(), String> {
        // RFC 5043 §7.1: DDP runs only on an association whose peer
        // indicated DDP's code point (the endpoint refuses others; checked
        // here once more, since this run is about exactly that).
        if peer_adaptation != Some(ADAPTATION_CODE_POINT_DDP) {
            return Err(format!(
                "the peer's adaptation indication is {}",
                adaptation_name(peer_adaptation)
            ));
        }
        println!(
            "sctp-echo: association {} {remote}: peer adaptation indication {}",
            if outbound { "up to" } else { "accepted from" },
            adaptation_name(peer_adaptation)
        );
        self.assoc = Some(assoc);
        self.remote = Some(remote);
        let config = SessionConfig {
            ird: self.args.ird,
            ord: self.args.ord,
            ird_max: self.args.ird.max(64),
            ..SessionConfig::default()
        };
        let session = if outbound {
            Session::Initiator(Initiator::new(config, &[], now).map_err(|e| e.to_string())?)
        } else {
            Session::Responder(Responder::new(config, now).map_err(|e| e.to_string())?)
        };
        self.session = Some(session);
        Ok(())
    }

    fn receive(&mut self, now: Instant) -> Result<bool, String> {
        let mut busy = false;
        while let Some(r) = self.endpoint.recv(&mut self.message) {
            busy = true;
            if Some(r.assoc) != self.assoc {
                continue;
            }
            if r.stream != self.args.stream {
                return Err(format!(
                    "a message on stream {}, not {}",
                    r.stream, self.args.stream
                ));
            }
            let Some(session) = self.session.as_mut() else {
                continue;
            };
            match session.handle_message(now, r.ppid, &self.message[..r.len]) {
                Input::Segment => self.check_echo(r.len)?,
                Input::Early => {
                    return Err("a DDP segment before the session was established".into())
                }
                Input::Taken | Input::Ignored => {}
            }
        }
        Ok(busy)
    }

    /// The passive side's decision, and the session's outcome.
    fn decide(&mut self) -> Result<(), String> {
        let Some(session) = self.session.as_mut() else {
            return Ok(());
        };
        if let Session::Responder(responder) = session {
            if let Some(request) = responder.request() {
                if request.enhanced.is_none() {
                    return Err("the peer sent a plain Initiate, not an Enhanced one".into());
                }
                responder
                    .accept(&Accept::default())
                    .map_err(|e| e.to_string())?;
            }
        }
        match session.outcome() {
            Some(Outcome::Established(e)) if self.established.is_none() => {
                let e = e.clone();
                self.established_check(&e)?;
                self.established = Some(e);
            }
            Some(Outcome::Established(_)) | None => {}
            Some(Outcome::Rejected(r)) => {
                return Err(format!("the peer rejected the session: {r:?}"));
            }
            Some(Outcome::Failed(f)) if self.terminated.is_none() => {
                return Err(format!("the session failed: {} ({f:?})", f.reason));
            }
            Some(Outcome::Failed(_)) => {}
        }
        Ok(())
    }

    fn established_check(&self, e: &Established) -> Result<(), String> {
        let peer = e.peer.ok_or("the session was not established with 5/6")?;
        let initiator = matches!(self.session, Some(Session::Initiator(_)));
        // The echo peer answers our Enhanced Initiate with our own word.
        let offered = PeerValues {
            ird: self.args.ird,
            ord: self.args.ord,
        };
        if initiator && peer != offered {
            return Err(format!(
                "the Enhanced Accept carried IRD={} ORD={}, not our IRD={} ORD={}",
                peer.ird, peer.ord, offered.ird, offered.ord
            ));
        }
        println!(
            "sctp-echo: session established ({}): our IRD={} ORD={}, the peer's IRD={} ORD={}",
            if initiator {
                "our Enhanced Initiate, its Enhanced Accept"
            } else {
                "its Enhanced Initiate, our Enhanced Accept"
            },
            e.ird,
            e.ord,
            peer.ird,
            peer.ord
        );
        Ok(())
    }

    /// Our DDP segments, while the association takes them.
    fn send_segments(&mut self) -> Result<bool, String> {
        let (Some(assoc), Some(_)) = (self.assoc, self.established.as_ref()) else {
            return Ok(false);
        };
        let mut busy = false;
        while self.sent < self.args.count && self.terminated.is_none() {
            let len = build_segment(self.sent, &mut self.expected);
            if self.endpoint.send_space(assoc, self.args.stream) < len {
                break;
            }
            // RFC 5043 §8: every DDP message goes unordered.
            self.endpoint
                .send(
                    assoc,
                    self.args.stream,
                    PPID_DDP_SEGMENT,
                    true,
                    &self.expected[..len],
                )
                .map_err(|e| format!("sending segment {}: {e}", self.sent))?;
            self.sent += 1;
            busy = true;
        }
        Ok(busy)
    }

    /// The session machine's messages (PPID 17, or 16 for its Terminate).
    fn send_control(&mut self) -> Result<bool, String> {
        let (Some(assoc), Some(session)) = (self.assoc, self.session.as_mut()) else {
            return Ok(false);
        };
        let mut busy = false;
        let mut out = [0u8; MESSAGE_LEN_MAX];
        while let Some(t) = session.poll_transmit(&mut out) {
            self.endpoint
                .send(assoc, self.args.stream, t.ppid, true, &out[..t.len])
                .map_err(|e| format!("sending session control: {e}"))?;
            busy = true;
        }
        Ok(busy)
    }

    /// Checks the echo in `self.message[..len]`: a segment we sent and
    /// have not seen back, octet for octet.
    fn check_echo(&mut self, len: usize) -> Result<(), String> {
        let message = &self.message[..len];
        let index = segment_index(message)
            .filter(|&k| k < self.sent)
            .ok_or_else(|| {
                format!(
                    "an echo of {len} octets that names no segment we sent: {:02x?}",
                    &message[..len.min(24)]
                )
            })?;
        if std::mem::replace(&mut self.seen[index as usize], true) {
            return Err(format!("segment {index} came back twice"));
        }
        let expected_len = build_segment(index, &mut self.expected);
        let expected = &self.expected[..expected_len];
        if message != expected {
            let at = message
                .iter()
                .zip(expected)
                .position(|(a, b)| a != b)
                .unwrap_or(len.min(expected_len));
            return Err(format!(
                "segment {index}: the echo ({len} octets) differs from what we sent \
                 ({expected_len} octets) at octet {at}"
            ));
        }
        self.echoed += 1;
        self.echoed_octets += len as u64;
        Ok(())
    }

    /// The summary once the run is over: the peer ended the association
    /// after our Terminate.
    fn finished(&self, now: Instant) -> Result<Option<String>, String> {
        let Some(at) = self.terminated else {
            return Ok(None);
        };
        let Some(reason) = self.closed else {
            if now >= at + CLOSE_LIMIT {
                return Err(format!(
                    "the peer did not end the association within {} s of our Session Terminate",
                    CLOSE_LIMIT.secs()
                ));
            }
            return Ok(None);
        };
        if !matches!(
            reason,
            CloseReason::ShutdownByPeer | CloseReason::AbortedByPeer
        ) {
            return Err(format!(
                "after our Session Terminate the association ended by {reason:?}"
            ));
        }
        let e = self.established.as_ref().ok_or("no session")?;
        let peer = e.peer.ok_or("no peer IRD/ORD")?;
        let largest = SSN_LEN
            + UNTAGGED_HEADER_LEN
            + payload_len(self.args.count.min(PAYLOAD_MAX as u32) - 1);
        Ok(Some(format!(
            "{} {} (SCTP port {}, UDP {}, over {}): peer adaptation indication 1 (DDP); \
             Enhanced Initiate/Accept, our IRD={} ORD={}, the peer's IRD={} ORD={}; {} DDP \
             segments ({} to {} octets with the DDP-SSN) sent unordered, all echoed and checked \
             octet for octet ({} octets); Session Terminate sent; the peer ended the \
             association (sctp-lite's reason: {reason:?})",
            if self.args.listen {
                "accepted"
            } else {
                "connected to"
            },
            self.remote.map(|r| r.to_string()).unwrap_or_default(),
            self.args.port,
            self.args.udp_port,
            self.args.transport.name(),
            e.ird,
            e.ord,
            peer.ird,
            peer.ord,
            self.echoed,
            SSN_LEN + UNTAGGED_HEADER_LEN + 1,
            largest,
            self.echoed_octets
        )))
    }

    /// Where the run got to, for a failure.
    fn progress(&self) -> String {
        format!(
            "association {}, session {}, {} of {} segments sent, {} echoed",
            if self.assoc.is_some_and(|a| self.endpoint.is_up(a)) {
                "up"
            } else {
                "not up"
            },
            if self.established.is_some() {
                "established"
            } else {
                "not established"
            },
            self.sent,
            self.args.count,
            self.echoed
        )
    }
}

fn adaptation_name(code_point: Option<u32>) -> String {
    match code_point {
        Some(ADAPTATION_CODE_POINT_DDP) => "1 (DDP)".into(),
        Some(other) => other.to_string(),
        None => "none".into(),
    }
}

/// The payload length of segment `index`: 1 to [`PAYLOAD_MAX`] in turn.
fn payload_len(index: u32) -> usize {
    1 + index as usize % PAYLOAD_MAX
}

/// Writes DDP message `index` into `out` and returns its length:
/// `DDP-SSN | untagged DDP header | payload` (RFC 5043 §5), an RDMAP Send
/// (RFC 5040 §4.3) of one segment (L=1) on QN 0 with MSN `index + 1` and
/// MO 0 (RFC 5041 §4.3, §5.1: MSNs start at 1), its payload a pattern of
/// `index` and the offset.
fn build_segment(index: u32, out: &mut [u8]) -> usize {
    let payload = payload_len(index);
    let len = SSN_LEN + UNTAGGED_HEADER_LEN + payload;
    // RFC 5043 §6.1: the DDP-SSN counts the stream's DDP segments from 0.
    out[..SSN_LEN].copy_from_slice(&(index as u16).to_be_bytes());
    let repr = DdpRepr {
        last: true,
        reserved: 0,
        version: ddp::VERSION,
        rsvd_ulp: Control::new(Opcode::Send).to_octet(),
        buffer: DdpBuffer::Untagged {
            rsvd_ulp: 0,
            qn: 0,
            msn: index + 1,
            mo: 0,
        },
    };
    let mut packet = DdpPacket::new_unchecked(&mut out[SSN_LEN..len]);
    repr.emit(&mut packet);
    for (k, octet) in packet.payload_mut().iter_mut().enumerate() {
        *octet = (index.wrapping_mul(131) ^ (k as u32).wrapping_mul(7)) as u8;
    }
    len
}

/// The index of the segment an echoed message claims to be (from its MSN).
fn segment_index(message: &[u8]) -> Option<u32> {
    let packet = DdpPacket::new_checked(message.get(SSN_LEN..)?).ok()?;
    match DdpRepr::parse(&packet).ok()?.buffer {
        DdpBuffer::Untagged { msn, .. } => msn.checked_sub(1),
        DdpBuffer::Tagged { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_cover_every_length_and_parse_back() {
        let mut out = vec![0u8; 1444];
        let mut lengths = Vec::new();
        for index in 0..PAYLOAD_MAX as u32 {
            let len = build_segment(index, &mut out);
            assert_eq!(segment_index(&out[..len]), Some(index));
            assert_eq!(u16::from_be_bytes([out[0], out[1]]), index as u16);
            lengths.push(len - SSN_LEN);
        }
        assert_eq!(lengths.first(), Some(&(UNTAGGED_HEADER_LEN + 1)));
        assert_eq!(lengths.last(), Some(&SEGMENT_LEN_MAX));
        // The largest message fills one packet at MTU 1500 over UDP.
        assert_eq!(SEGMENT_LEN_MAX + SSN_LEN, 1500 - 56);
    }

    /// `--timeout` is 1 s to a day (larger overflowed the clock, 0 failed
    /// at once; found by a review).
    #[test]
    fn the_timeout_is_bounded() {
        let args = |t: &str| {
            EchoArgs::try_parse_from(["sctp-echo", "--connect", "127.0.0.2", "--timeout", t])
                .unwrap()
        };
        assert!(args("60").check().is_ok());
        for t in ["0", "86401", "18000000000000"] {
            let why = args(t).check().unwrap_err();
            assert!(why.contains("give 1 to 86400 seconds"), "{t}: {why}");
        }
    }

    #[test]
    fn a_changed_octet_names_no_other_segment() {
        let mut a = vec![0u8; 1444];
        let mut b = vec![0u8; 1444];
        let len = build_segment(7, &mut a);
        build_segment(8, &mut b);
        assert_ne!(
            a[SSN_LEN + UNTAGGED_HEADER_LEN..len],
            b[SSN_LEN + UNTAGGED_HEADER_LEN..len]
        );
    }

    /// A stand-in for sctp-ddp-peer over loopback: accepts one
    /// association, answers 5 with 6 (the same word), echoes PPID 16 and
    /// aborts the association on 4 (sctp-lite has no graceful close).
    /// With `connect`, it opens the association and sends an Enhanced
    /// Initiate (IRD = ORD = 16) first.
    fn echo_peer(addr: SocketAddrV4, connect: Option<SocketAddrV4>, stop: &AtomicBool) -> u32 {
        let udp = KernelUdp::new(*addr.ip(), 1 << 20);
        let mut wire = Wire::bind(udp, addr.port()).unwrap();
        let mut peer = Endpoint::new(Config::default(), std::time::Instant::now()).unwrap();
        let mut buf = vec![0u8; peer.config().receive_message_max()];
        let mut echoed = 0;
        if let Some(remote) = connect {
            peer.connect(now(), SocketAddr::V4(remote)).unwrap();
        }
        while !stop.load(Ordering::SeqCst) {
            wire.receive(&mut peer, now(), RX_BURST);
            if peer.poll_timeout().is_some_and(|t| t <= now()) {
                peer.handle_timeout(now());
            }
            wire.transmit(&mut peer, now());
            while let Some(event) = peer.poll_event() {
                if let (EventKind::Up { .. }, Some(_)) = (event.kind, connect) {
                    let initiate = [0, 0, 0, 5, 0, 16, 0, 16];
                    peer.send(event.assoc, 0, 17, true, &initiate).unwrap();
                }
            }
            while let Some(r) = peer.recv(&mut buf) {
                let message = buf[..r.len].to_vec();
                if r.ppid == PPID_DDP_SEGMENT {
                    echoed += 1;
                    peer.send(r.assoc, r.stream, r.ppid, true, &message)
                        .unwrap();
                } else if message[2..4] == [0, 5] {
                    let mut accept = message.clone();
                    accept[3] = 6;
                    peer.send(r.assoc, r.stream, r.ppid, true, &accept[..8])
                        .unwrap();
                } else if message[2..4] == [0, 4] {
                    peer.abort(r.assoc).unwrap();
                }
            }
            std::thread::sleep(std::time::Duration::from_micros(20));
        }
        echoed
    }

    #[test]
    fn a_run_against_an_echo_peer_on_loopback() {
        let port = 20_000 + (std::process::id() % 12_000) as u16;
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let peer = scope
                .spawn(|| echo_peer(SocketAddrV4::new([127, 0, 0, 2].into(), port), None, &stop));
            let args = EchoArgs::try_parse_from([
                "sctp-echo",
                "--connect",
                "127.0.0.2",
                "--bind",
                "127.0.0.1",
                "--udp-port",
                &port.to_string(),
                "--count",
                "300",
                "--timeout",
                "20",
            ])
            .unwrap();
            let never = AtomicBool::new(false);
            let result = run(KernelUdp::new(args.bind, 1 << 20), &args, &never);
            stop.store(true, Ordering::SeqCst);
            assert_eq!(peer.join().unwrap(), 300);
            let summary = result.unwrap();
            assert!(summary.contains("300 DDP segments"), "{summary}");
        });
    }

    #[test]
    fn a_listening_run_against_an_initiating_echo_peer() {
        let port = 20_001 + (std::process::id() % 12_000) as u16;
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let args = EchoArgs::try_parse_from([
                "sctp-echo",
                "--listen",
                "--bind",
                "127.0.0.1",
                "--udp-port",
                &port.to_string(),
                "--count",
                "200",
                "--timeout",
                "20",
            ])
            .unwrap();
            let listener = KernelUdp::new(args.bind, 1 << 20);
            let peer = scope.spawn(|| {
                let ours = SocketAddrV4::new([127, 0, 0, 1].into(), port);
                echo_peer(
                    SocketAddrV4::new([127, 0, 0, 2].into(), port),
                    Some(ours),
                    &stop,
                )
            });
            let never = AtomicBool::new(false);
            let result = run(listener, &args, &never);
            stop.store(true, Ordering::SeqCst);
            assert_eq!(peer.join().unwrap(), 200);
            let summary = result.unwrap();
            assert!(summary.starts_with("accepted 127.0.0.2"), "{summary}");
        });
    }

    #[test]
    fn arguments() {
        assert!(EchoArgs::try_parse_from(["sctp-echo"]).is_err());
        assert!(
            EchoArgs::try_parse_from(["sctp-echo", "--listen", "--connect", "10.0.0.1"]).is_err()
        );
        let a = EchoArgs::try_parse_from(["sctp-echo", "--connect", "10.77.0.2"]).unwrap();
        assert_eq!((a.port, a.udp_port, a.count), (5000, 9899, 1424));
        assert!(a.check().is_ok());
        let a = EchoArgs::try_parse_from(["sctp-echo", "--listen", "--count", "0"]).unwrap();
        assert!(a.check().is_err());
        for (option, says) in [("--udp-port", "--udp-port 0"), ("--port", "--port 0")] {
            let a = EchoArgs::try_parse_from(["sctp-echo", "--listen", option, "0"]).unwrap();
            let why = a.check().unwrap_err();
            assert!(why.contains(says), "{why}");
        }
    }
}
