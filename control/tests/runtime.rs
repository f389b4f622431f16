//! The control-plane runtime with several cores: each core a [`CoreLink`]
//! over a tcp-lite [`Stack`] on an in-memory link, stepped by the test's
//! thread against the real control-plane thread.
//!
//! * a core that stops polling is reported stalled, and recovers; the
//!   other core never is;
//! * a flood of connections that never send their MPA Request is refused
//!   beyond the per-core limit on the flooded core, while another core
//!   completes RFC 6581 enhanced startups; the startups held never exceed
//!   the limit;
//! * the all-cores limit is enforced by the control plane;
//! * held startups end at the responder's request timeout, and the room
//!   they held is given again;
//! * a startup whose peer resets hands off its connection's addresses, as
//!   does one that times out (so the application can forget what its
//!   accept prepared for it);
//! * the token of the application's accept comes back with the handoff,
//!   established or failed (so that it forgets what it prepared for that
//!   startup and not for a later one with the same addresses);
//! * with channels four messages deep, many startups at once all complete;
//! * configurations that cannot work are refused.
//!
//! Every test runs under a watchdog: a call that blocked would fail it
//! instead of hanging it.
// The tests pace themselves by the real clock, as the control thread does.
#![allow(clippy::disallowed_methods)]

use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::mpsc;
use std::time::{Duration, Instant as StdInstant};

use control::mpa::{Accept, FailReason, StartupConfig};
use control::runtime::{
    ControlConfig, ControlPlane, CoreHealth, CoreLink, Decision, Handoff, StartupResult,
    DRAIN_LIMIT,
};
use tcp_lite::link::{self, LinkConfig, LinkEnd};
use tcp_lite::{CongestionControl, ConnId, EventKind, Instant, Stack, StackConfig, Transport};

/// The longest any test may run before the watchdog fails it.
const WATCHDOG: Duration = Duration::from_secs(60);

/// One clock for every stack and step of the process.
fn now() -> Instant {
    static EPOCH: std::sync::OnceLock<StdInstant> = std::sync::OnceLock::new();
    let epoch = EPOCH.get_or_init(StdInstant::now);
    Instant::from_micros(epoch.elapsed().as_micros() as i64 + 1)
}

/// Runs `test` on a thread of its own and fails if it has not ended within
/// `limit` (a blocked channel would otherwise hang the test).
fn watchdog(limit: Duration, test: impl FnOnce() + Send + 'static) {
    let (done, ended) = mpsc::channel();
    let thread = std::thread::spawn(move || {
        test();
        let _ = done.send(());
    });
    match ended.recv_timeout(limit) {
        Ok(()) => thread.join().expect("the test thread ended"),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            // The test panicked: report its panic.
            if let Err(panic) = thread.join() {
                std::panic::resume_unwind(panic);
            }
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("still running after {limit:?}: something blocked")
        }
    }
}

/// A stack on `end` with small buffers (MPA frames are at most 536
/// octets), room for `connections`, and no congestion control (the
/// in-memory link drops nothing).
fn stack(end: LinkEnd, host: u8, net: u8, connections: usize) -> Stack<LinkEnd> {
    let mut config = StackConfig::new([2, 0, 0, 0, net, host], Ipv4Addr::new(10, 0, net, host));
    config.max_connections = connections;
    config.tcp.rx_buffer = 4096;
    config.tcp.tx_buffer = 4096;
    config.tcp.congestion = CongestionControl::None;
    config.seed = u64::from(net) << 8 | u64::from(host);
    Stack::new(config, end, now()).expect("stack configuration")
}

/// Two stacks on one in-memory link: hosts 1 and 2 of 10.0.`net`.0/24.
fn pair(net: u8, connections: usize) -> (Stack<LinkEnd>, Stack<LinkEnd>) {
    let mut config = LinkConfig::ethernet(1500);
    config.queue_frames = 1 << 14;
    let (a, b) = link::pair(config, u64::from(net));
    (stack(a, 1, net, connections), stack(b, 2, net, connections))
}

/// A poll-mode core as far as the control plane sees it: a transport and
/// its link, stepped as the data plane's cores step them.
struct Core {
    stack: Stack<LinkEnd>,
    link: CoreLink,
    handoffs: Vec<Handoff>,
}

impl Core {
    fn new(stack: Stack<LinkEnd>, link: CoreLink) -> Core {
        Core {
            stack,
            link,
            handoffs: Vec::new(),
        }
    }

    /// One turn: TCP, its events (the link's first), the link, TCP again.
    fn step(&mut self) {
        let now = now();
        self.stack.poll(now);
        while let Some(event) = self.stack.next_event() {
            // The others are a handed-off connection's: nobody runs FPDUs here.
            self.link.handle_event(&mut self.stack, event);
        }
        self.link.poll(&mut self.stack, now);
        while let Some(handoff) = self.link.next_handoff() {
            self.handoffs.push(handoff);
        }
        self.stack.poll(now);
    }

    fn wait_listening(&mut self, port: u16) {
        let start = StdInstant::now();
        while self.link.listen_status(port).is_none() {
            assert!(start.elapsed() < Duration::from_secs(5), "no listener");
            self.step();
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(self.link.listen_status(port), Some(Ok(())));
    }
}

/// Peers that open TCP connections and never send an MPA Request.
struct Flood {
    stack: Stack<LinkEnd>,
    target: SocketAddrV4,
    opened: usize,
    /// Connections the target reset (refused).
    reset: usize,
}

impl Flood {
    fn new(stack: Stack<LinkEnd>, target: SocketAddrV4) -> Flood {
        Flood {
            stack,
            target,
            opened: 0,
            reset: 0,
        }
    }

    /// Opens up to `batch` more connections, `total` in all.
    fn open(&mut self, batch: usize, total: usize) {
        for _ in 0..batch.min(total - self.opened) {
            self.stack
                .connect(self.target, now())
                .expect("room for the flood's connections");
            self.opened += 1;
        }
    }

    fn step(&mut self) {
        self.stack.poll(now());
        while let Some(event) = self.stack.next_event() {
            if matches!(
                event.kind,
                EventKind::Reset | EventKind::Closed | EventKind::TimedOut
            ) {
                self.stack.release(event.conn);
                self.reset += 1;
            }
        }
        self.stack.poll(now());
    }
}

fn accept_all(control: &ControlPlane, core: u16, port: u16, config: StartupConfig) {
    control.listen(
        core,
        port,
        config,
        Box::new(|_, _| Decision::Accept(Accept::default())),
    );
}

/// Steps until `done`, failing after `limit`.
fn until(limit: Duration, what: &str, mut step: impl FnMut() -> bool) {
    let start = StdInstant::now();
    while !step() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
    }
}

fn established(handoff: &Handoff) -> &control::mpa::Established {
    match &handoff.result {
        StartupResult::Established(e) => e,
        other => panic!("not established: {other:?}"),
    }
}

#[test]
fn a_core_that_stops_polling_is_reported_stalled_and_recovers() {
    watchdog(WATCHDOG, || {
        let heartbeat = Duration::from_millis(20);
        let stall_after = Duration::from_millis(200);
        let config = ControlConfig {
            heartbeat,
            stall_after,
            ..ControlConfig::default()
        };
        let (control, links) = ControlPlane::start_with(config, 2).unwrap();
        let (s0, s1) = pair(1, 16);
        let mut cores: Vec<Core> = [s0, s1]
            .into_iter()
            .zip(links)
            .map(|(s, l)| Core::new(s, l))
            .collect();
        let healthy = |h: &CoreHealth| !h.stalled && h.stalls == 0;
        // Both poll: neither is stalled.
        let start = StdInstant::now();
        while start.elapsed() < Duration::from_millis(300) {
            cores.iter_mut().for_each(Core::step);
            std::thread::sleep(Duration::from_millis(1));
        }
        let health = control.health();
        assert!(health.iter().all(healthy), "{health:?}");
        assert!(health[0].since_answer < stall_after, "{health:?}");

        // Core 0 stops polling; core 1 goes on.
        let stopped = StdInstant::now();
        let detected = loop {
            cores[1].step();
            let health = control.health();
            assert!(healthy(&health[1]), "core 1 reported: {health:?}");
            if health[0].stalled {
                break stopped.elapsed();
            }
            assert!(
                stopped.elapsed() < Duration::from_secs(3),
                "no stall reported"
            );
            std::thread::sleep(Duration::from_millis(1));
        };
        // Its last answer came at most about a heartbeat before it stopped:
        // reported after stall_after less a heartbeat, within stall_after and
        // a heartbeat (and the scheduler's slack).
        assert!(detected >= stall_after - 2 * heartbeat, "{detected:?}");
        assert!(
            detected <= stall_after + heartbeat + Duration::from_millis(300),
            "{detected:?}"
        );
        let health = control.health();
        assert_eq!(health[0].stalls, 1);
        assert!(health[0].since_answer >= stall_after, "{health:?}");

        // Still silent: still stalled, counted once.
        let start = StdInstant::now();
        while start.elapsed() < Duration::from_millis(300) {
            cores[1].step();
            std::thread::sleep(Duration::from_millis(1));
        }
        let health = control.health();
        assert!(health[0].stalled && health[0].stalls == 1, "{health:?}");
        assert!(healthy(&health[1]), "{health:?}");

        // Core 0 polls again: the heartbeat waiting for it is answered.
        let resumed = StdInstant::now();
        loop {
            cores.iter_mut().for_each(Core::step);
            let health = control.health();
            assert!(healthy(&health[1]), "core 1 reported: {health:?}");
            if !health[0].stalled {
                break;
            }
            assert!(
                resumed.elapsed() < heartbeat + Duration::from_millis(500),
                "still stalled after polling again"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let health = control.health();
        assert_eq!(health[0].stalls, 1);
        assert!(health[0].since_answer < stall_after, "{health:?}");
        assert_eq!(control.stats().stalls, 1);
        assert_eq!(control.stop().stalls, 1);
    });
}

#[test]
fn a_dropped_link_is_detached_not_stalled() {
    watchdog(WATCHDOG, || {
        // Long enough past `stall_after` that a dropped link would have
        // been called stalled, which a loaded machine's scheduling delays
        // (tens of ms) do not reach for the live one.
        let config = ControlConfig {
            heartbeat: Duration::from_millis(10),
            stall_after: Duration::from_millis(300),
            ..ControlConfig::default()
        };
        let (control, mut links) = ControlPlane::start_with(config, 2).unwrap();
        drop(links.pop());
        let (s0, _) = pair(2, 4);
        let mut core = Core::new(s0, links.pop().unwrap());
        let start = StdInstant::now();
        while start.elapsed() < Duration::from_millis(900) {
            core.step();
            std::thread::sleep(Duration::from_millis(1));
        }
        let health = control.health();
        assert!(health[1].detached && !health[1].stalled, "{health:?}");
        assert!(!health[0].detached && !health[0].stalled, "{health:?}");
        assert_eq!(control.stop().stalls, 0);
    });
}

#[test]
fn a_flood_of_silent_peers_is_refused_on_its_core_while_another_core_completes_startups() {
    const FLOOD: usize = 2_000;
    const LIMIT: usize = 500;
    const STARTUPS: usize = 50;
    watchdog(WATCHDOG, || {
        let config = ControlConfig {
            heartbeat: Duration::from_millis(20),
            startups_max_per_core: LIMIT,
            ..ControlConfig::default()
        };
        let (control, links) = ControlPlane::start_with(config, 2).unwrap();
        let mut links = links.into_iter();
        // Core 0 and its flood, core 1 and a host that starts MPA with it.
        let (flood_stack, s0) = pair(10, FLOOD + 100);
        let (c1, s1) = pair(11, 256);
        let mut core0 = Core::new(s0, links.next().unwrap());
        let mut core1 = Core::new(s1, links.next().unwrap());
        let (mut client_control, mut client_links) = ControlPlane::start(1);
        let mut client = Core::new(c1, client_links.remove(0));
        // The silent peers would be held for 5 s by default; longer here,
        // so none ends (and frees room) before the flood is counted.
        let patient = StartupConfig {
            request_timeout: tcp_lite::Duration::from_secs(60),
            startup_timeout: tcp_lite::Duration::from_secs(120),
            ..StartupConfig::default()
        };
        accept_all(&control, 0, 5000, patient);
        accept_all(&control, 1, 5001, StartupConfig::default());
        core0.wait_listening(5000);
        core1.wait_listening(5001);

        let mut flood = Flood::new(
            flood_stack,
            SocketAddrV4::new(Ipv4Addr::new(10, 0, 10, 2), 5000),
        );
        // RFC 6581 enhanced startups (the default configuration: revision
        // 2, enhanced) from the client to core 1, during the flood.
        let remote = SocketAddrV4::new(Ipv4Addr::new(10, 0, 11, 2), 5001);
        let tokens: HashSet<u64> = (0..STARTUPS)
            .map(|_| client_control.connect(0, remote, StartupConfig::default(), b"core 1"))
            .collect();
        until(Duration::from_secs(15), "flood and startups", || {
            flood.open(100, FLOOD);
            flood.step();
            core0.step();
            core1.step();
            client.step();
            // The startups held never exceed the limit, on the link or on
            // the control plane.
            assert!(
                core0.link.in_startup() <= LIMIT,
                "{}",
                core0.link.in_startup()
            );
            let health = control.health();
            assert!(health[0].startups <= LIMIT, "{health:?}");
            let seen = core0.link.refused_startups() as usize + core0.link.in_startup();
            seen == FLOOD && core1.handoffs.len() == STARTUPS && client.handoffs.len() == STARTUPS
        });

        // Core 0: the limit held, the rest refused (and reset) at once.
        assert_eq!(core0.link.in_startup(), LIMIT);
        assert_eq!(core0.link.refused_startups(), (FLOOD - LIMIT) as u64);
        until(Duration::from_secs(2), "the refusals reported", || {
            flood.step();
            core0.step();
            core1.step();
            control.health()[0].refused_startups == (FLOOD - LIMIT) as u64
                && flood.reset == FLOOD - LIMIT
        });
        let health = control.health();
        assert_eq!(health[0].startups, LIMIT);
        assert!(core0.handoffs.is_empty(), "{:?}", core0.handoffs.first());
        // Core 1: every startup to the end, enhanced, nothing refused.
        assert_eq!(health[1].refused_startups, 0);
        assert_eq!(health[1].startups, 0);
        assert!(health.iter().all(|h| h.stalls == 0), "{health:?}");
        for handoff in &core1.handoffs {
            let e = established(handoff);
            assert!(e.enhanced && e.revision == 2, "{e:?}");
            assert_eq!(e.peer_private_data, b"core 1");
        }
        let mut seen = HashSet::new();
        for handoff in &client.handoffs {
            let e = established(handoff);
            assert!(e.enhanced && e.revision == 2, "{e:?}");
            assert!(seen.insert(handoff.token));
        }
        assert_eq!(seen, tokens);
        let stats = control.stats();
        assert_eq!(stats.refused_startups, (FLOOD - LIMIT) as u64);
        assert_eq!(stats.established, STARTUPS as u64);
        assert_eq!(stats.failed, 0);
        // Stopping fails the startups still held.
        assert_eq!(control.stop().failed, LIMIT as u64);
        assert_eq!(client_control.stop().established, STARTUPS as u64);
    });
}

#[test]
fn the_all_cores_limit_is_enforced_by_the_control_plane() {
    const HELD: usize = 50;
    const PEERS: usize = 80;
    watchdog(WATCHDOG, || {
        let config = ControlConfig {
            startups_max_per_core: 100,
            startups_max: HELD,
            heartbeat: Duration::from_millis(20),
            ..ControlConfig::default()
        };
        let (control, mut links) = ControlPlane::start_with(config, 1).unwrap();
        let (flood_stack, s0) = pair(20, 256);
        let mut core = Core::new(s0, links.remove(0));
        accept_all(&control, 0, 5000, StartupConfig::default());
        core.wait_listening(5000);
        let mut flood = Flood::new(
            flood_stack,
            SocketAddrV4::new(Ipv4Addr::new(10, 0, 20, 2), 5000),
        );
        until(Duration::from_secs(10), "the refusals", || {
            flood.open(PEERS, PEERS);
            flood.step();
            core.step();
            let health = control.health();
            assert!(health[0].startups <= HELD, "{health:?}");
            flood.reset == PEERS - HELD
                && health[0].refused_startups == (PEERS - HELD) as u64
                && core.link.in_startup() == HELD
        });
        // The control plane refused them: the link's own count is zero.
        assert_eq!(core.link.refused_startups(), 0);
        assert_eq!(control.health()[0].startups, HELD);
        assert_eq!(control.stats().refused_startups, (PEERS - HELD) as u64);
        drop(control);
    });
}

#[test]
fn held_startups_end_at_the_request_timeout_and_their_room_is_given_again() {
    const LIMIT: usize = 20;
    watchdog(WATCHDOG, || {
        let config = ControlConfig {
            startups_max_per_core: LIMIT,
            heartbeat: Duration::from_millis(20),
            ..ControlConfig::default()
        };
        let (control, mut links) = ControlPlane::start_with(config, 1).unwrap();
        let (flood_stack, s0) = pair(30, 256);
        let mut core = Core::new(s0, links.remove(0));
        let request_timeout = Duration::from_millis(300);
        let impatient = StartupConfig {
            request_timeout: request_timeout.into(),
            ..StartupConfig::default()
        };
        accept_all(&control, 0, 5000, impatient);
        core.wait_listening(5000);
        let mut flood = Flood::new(
            flood_stack,
            SocketAddrV4::new(Ipv4Addr::new(10, 0, 30, 2), 5000),
        );
        let start = StdInstant::now();
        until(Duration::from_secs(5), "a flood of 30", || {
            flood.open(30, 30);
            flood.step();
            core.step();
            core.link.refused_startups() == 10
                && flood.reset == 10
                && control.health()[0].startups == LIMIT
        });
        assert!(start.elapsed() < request_timeout, "too slow to count");
        assert_eq!(core.link.in_startup(), LIMIT);
        // RFC 5044 §7.1: the responder times out waiting for the Request.
        until(Duration::from_secs(5), "the request timeouts", || {
            flood.step();
            core.step();
            std::thread::sleep(Duration::from_millis(1));
            core.handoffs.len() == LIMIT && control.health()[0].startups == 0
        });
        assert!(start.elapsed() >= request_timeout);
        for handoff in &core.handoffs {
            match &handoff.result {
                StartupResult::Failed(f) => assert_eq!(f.reason, FailReason::RequestTimeout),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(control.stats().failed, LIMIT as u64);
        // Each names its connection: our address and port, the peer's.
        let target = SocketAddrV4::new(Ipv4Addr::new(10, 0, 30, 2), 5000);
        let peers: HashSet<SocketAddrV4> = core
            .handoffs
            .iter()
            .map(|h| {
                let (local, peer) = h.ends.expect("an accepted startup's addresses");
                assert_eq!(local, target);
                assert_eq!(*peer.ip(), Ipv4Addr::new(10, 0, 30, 1));
                peer
            })
            .collect();
        assert_eq!(peers.len(), LIMIT, "one peer port each");
        // We closed them, but the flood never closes its side: each keeps
        // its room until it is reset, DRAIN_LIMIT after its close (before,
        // a peer trickling octets held it for ever, outside every limit).
        assert_eq!(core.link.in_startup(), LIMIT);
        until(
            DRAIN_LIMIT + Duration::from_secs(5),
            "the drains' end",
            || {
                flood.step();
                core.step();
                std::thread::sleep(Duration::from_millis(1));
                core.link.in_startup() == 0 && flood.reset == 10 + LIMIT
            },
        );
        assert!(start.elapsed() >= request_timeout + DRAIN_LIMIT);
        // The room is there again: as many new peers are held.
        until(Duration::from_secs(5), "a second flood", || {
            flood.open(LIMIT, 30 + LIMIT);
            flood.step();
            core.step();
            control.health()[0].startups == LIMIT
        });
        assert_eq!(core.link.refused_startups(), 10);
        drop(control);
    });
}

#[test]
fn a_startup_whose_peer_resets_hands_off_its_addresses() {
    const PEERS: usize = 3;
    watchdog(WATCHDOG, || {
        let (control, mut links) = ControlPlane::start(1);
        let (mut client, s0) = pair(31, 16);
        let mut core = Core::new(s0, links.remove(0));
        accept_all(&control, 0, 5000, StartupConfig::default());
        core.wait_listening(5000);
        let target = SocketAddrV4::new(Ipv4Addr::new(10, 0, 31, 2), 5000);
        let conns: Vec<ConnId> = (0..PEERS)
            .map(|_| client.connect(target, now()).expect("room"))
            .collect();
        until(Duration::from_secs(5), "the accepts", || {
            client_turn(&mut client);
            core.step();
            control.health()[0].startups == PEERS
        });
        // No MPA Request: the peers reset their connections mid-startup.
        let ours: HashSet<SocketAddrV4> = conns
            .iter()
            .map(|&c| client.endpoints(c).expect("connected").0)
            .collect();
        for &conn in &conns {
            client.abort(conn).expect("abort");
        }
        until(Duration::from_secs(5), "the handoffs", || {
            client_turn(&mut client);
            core.step();
            core.handoffs.len() == PEERS
        });
        let mut named = HashSet::new();
        for handoff in &core.handoffs {
            assert!(
                matches!(handoff.result, StartupResult::Failed(_)),
                "{:?}",
                handoff.result
            );
            let (local, peer) = handoff.ends.expect("the reset connection's addresses");
            assert_eq!(local, target);
            named.insert(peer);
        }
        assert_eq!(named, ours, "each reset connection named by its peer");
        assert_eq!(control.health()[0].startups, 0);
        drop(control);
    });
}

/// Steps a client stack: its events read, the ends released.
fn client_turn(client: &mut Stack<LinkEnd>) -> Vec<(ConnId, EventKind)> {
    client.poll(now());
    let mut seen = Vec::new();
    while let Some(event) = client.next_event() {
        if matches!(
            event.kind,
            EventKind::Reset | EventKind::Closed | EventKind::TimedOut
        ) {
            client.release(event.conn);
        }
        seen.push((event.conn, event.kind));
    }
    client.poll(now());
    seen
}

/// A connection from `client` to `target` (port 5000 of `core`, which
/// accepts every Request), accepted: a startup on the control plane.
fn accepted_connection(
    control: &ControlPlane,
    core: &mut Core,
    client: &mut Stack<LinkEnd>,
    target: SocketAddrV4,
) -> ConnId {
    accept_all(control, 0, target.port(), StartupConfig::default());
    core.wait_listening(target.port());
    let c = client.connect(target, now()).expect("room");
    until(Duration::from_secs(5), "the accept", || {
        client_turn(client);
        core.step();
        control.health()[0].startups == 1
    });
    c
}

/// Sends an MPA Request (revision 2, enhanced, IRD and ORD 1) on `c`.
fn send_request(client: &mut Stack<LinkEnd>, c: ConnId) {
    let request: [u8; 24] = [
        0x4d, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52, 0x65, 0x71, 0x20, 0x46, 0x72, 0x61, 0x6d,
        0x65, 0x50, 0x02, 0x00, 0x04, 0x00, 0x01, 0x00, 0x01,
    ];
    client
        .send_with(c, request.len(), |space| {
            space.copy_from_slice(&request[..space.len()]);
            (space.len(), ())
        })
        .expect("room to send");
}

/// A Reply the link cannot hand over whole (the peer reset, and the core
/// had not read the reset yet: its event budget ran out) makes the link
/// abort the connection. An abort reports nothing more, so the link
/// releases it at once; it used to wait in `draining` for an end that
/// never came, holding the transport's slot for good (found by a review).
#[test]
fn a_reply_that_cannot_be_sent_frees_its_connection() {
    watchdog(WATCHDOG, || {
        let (control, mut links) = ControlPlane::start(1);
        // Room for one connection on the server.
        let (mut client, s0) = pair(42, 1);
        let mut core = Core::new(s0, links.remove(0));
        let target = SocketAddrV4::new(Ipv4Addr::new(10, 0, 42, 2), 5000);
        let c = accepted_connection(&control, &mut core, &mut client, target);
        send_request(&mut client, c);
        client.poll(now());
        // The Request goes to the control plane; then the peer resets.
        core.step();
        client.abort(c).expect("abort");
        client.poll(now());
        client.release(c);
        // Server turns whose event budget ran out before the reset: TCP
        // and the link, no events, until the control plane's answer (its
        // Reply, then the handoff) has come.
        until(Duration::from_secs(5), "the control plane's answer", || {
            let t = now();
            core.stack.poll(t);
            core.link.poll(&mut core.stack, t);
            while let Some(handoff) = core.link.next_handoff() {
                core.handoffs.push(handoff);
            }
            !core.handoffs.is_empty()
        });
        assert_eq!(core.handoffs.len(), 1);
        assert!(
            matches!(core.handoffs[0].result, StartupResult::Failed(_)),
            "{:?}",
            core.handoffs[0].result
        );
        assert_eq!(core.handoffs[0].conn, None, "released, not handed over");
        assert_eq!(core.link.in_startup(), 0);
        // The one slot is free: a new client gets in (once the aborted
        // connection's reset has gone out and both ends forgot it).
        let start = StdInstant::now();
        while start.elapsed() < Duration::from_millis(500) {
            client_turn(&mut client);
            core.step();
            std::thread::sleep(Duration::from_millis(1));
        }
        let again = client.connect(target, now()).expect("room");
        let mut connected = false;
        until(Duration::from_secs(5), "a new connection", || {
            connected |= client_turn(&mut client)
                .iter()
                .any(|&(conn, kind)| conn == again && kind == EventKind::Connected);
            core.step();
            connected
        });
        drop(control);
    });
}

/// A peer's FIN that the link reads before the control plane's answer is
/// applied (a Request and FIN sent at once, the Consume and the Done
/// arriving together) reaches the core with the handoff: the transport
/// tells of a FIN once, the link heard it, and without `peer_closed` the
/// core never closed its side and its QP lived for ever (found by a
/// review).
#[test]
fn a_fin_the_link_heard_during_the_startup_goes_with_the_handoff() {
    watchdog(WATCHDOG, || {
        let (control, mut links) = ControlPlane::start(1);
        let (mut client, s0) = pair(43, 4);
        let mut core = Core::new(s0, links.remove(0));
        let target = SocketAddrV4::new(Ipv4Addr::new(10, 0, 43, 2), 5000);
        let c = accepted_connection(&control, &mut core, &mut client, target);
        send_request(&mut client, c);
        client.close(c).expect("close");
        client.poll(now());
        // One turn reads both (the FIN's event goes to the link) and
        // forwards the Request; the control plane answers meanwhile, and
        // the next turn applies the whole answer at once.
        core.step();
        assert!(core.handoffs.is_empty());
        std::thread::sleep(Duration::from_millis(300));
        core.step();
        assert_eq!(core.handoffs.len(), 1, "answered in one poll");
        let h = &core.handoffs[0];
        assert!(
            matches!(h.result, StartupResult::Established(_)),
            "{:?}",
            h.result
        );
        assert!(h.conn.is_some());
        assert!(h.peer_closed, "the FIN goes with the handoff");
        drop(control);
    });
}

/// The same with channels one message deep: the Consume of the Request
/// and the Reply come in messages of their own, and the link, reading the
/// Consume first, had everything before the FIN taken: it closed the
/// connection then, dropped the Reply that came next, and the startup the
/// ULP accepted ended Failed (found by a review). The connection now
/// waits for the control plane's answer.
#[test]
fn a_fin_after_the_request_does_not_lose_the_reply_with_shallow_channels() {
    watchdog(WATCHDOG, || {
        let config = ControlConfig {
            channel_depth: 1,
            heartbeat: Duration::from_secs(10),
            stall_after: Duration::from_secs(20),
            ..ControlConfig::default()
        };
        let (control, mut links) = ControlPlane::start_with(config, 1).unwrap();
        let (mut client, s0) = pair(46, 4);
        let mut core = Core::new(s0, links.remove(0));
        let target = SocketAddrV4::new(Ipv4Addr::new(10, 0, 46, 2), 5000);
        let c = accepted_connection(&control, &mut core, &mut client, target);
        send_request(&mut client, c);
        client.close(c).expect("close");
        client.poll(now());
        let mut reply = 0;
        until(Duration::from_secs(10), "a handoff", || {
            client.poll(now());
            while let Ok(n) = client.recv_with(c, |data, _| (data.len(), data.len())) {
                if n == 0 {
                    break;
                }
                reply += n;
            }
            while client.next_event().is_some() {}
            core.step();
            std::thread::sleep(Duration::from_millis(1));
            !core.handoffs.is_empty()
        });
        let h = &core.handoffs[0];
        assert!(
            matches!(h.result, StartupResult::Established(_)),
            "{:?}, stats {:?}",
            h.result,
            control.stats()
        );
        assert!(h.conn.is_some());
        assert!(h.peer_closed, "the FIN goes with the handoff");
        // The Reply reached the client (an enhanced Reply: 24 octets).
        until(Duration::from_secs(5), "the Reply", || {
            client.poll(now());
            core.step();
            while let Ok(n) = client.recv_with(c, |data, _| (data.len(), data.len())) {
                if n == 0 {
                    break;
                }
                reply += n;
            }
            reply >= 24
        });
        assert_eq!(reply, 24);
        drop(control);
    });
}

/// A connection that ends while the control plane is refusing it (its
/// all-cores limit) leaves nothing behind: the link kept its addresses for
/// an answer, and the Refuse is that answer (found by a review: one entry
/// stayed for good per such connection).
#[test]
fn an_accept_refused_after_its_connection_ended_keeps_nothing() {
    watchdog(WATCHDOG, || {
        let config = ControlConfig {
            startups_max: 1,
            startups_max_per_core: 64,
            ..ControlConfig::default()
        };
        let (control, mut links) = ControlPlane::start_with(config, 1).unwrap();
        let (mut client, s0) = pair(41, 256);
        let mut core = Core::new(s0, links.remove(0));
        let patient = StartupConfig {
            request_timeout: Duration::from_secs(30).into(),
            startup_timeout: Duration::from_secs(60).into(),
            ..StartupConfig::default()
        };
        accept_all(&control, 0, 5000, patient);
        core.wait_listening(5000);
        let target = SocketAddrV4::new(Ipv4Addr::new(10, 0, 41, 2), 5000);
        // One idle startup holds the control plane's one place.
        let _held = client.connect(target, now()).expect("room");
        until(Duration::from_secs(5), "the place held", || {
            client_turn(&mut client);
            core.step();
            control.health()[0].startups == 1
        });
        // Then connections that close as soon as they are up: the link
        // has room, the control plane refuses them, and each may end
        // before the refusal arrives.
        for _ in 0..50 {
            let b = client.connect(target, now()).expect("room");
            let mut connected = false;
            until(Duration::from_secs(5), "connected", || {
                connected |= client_turn(&mut client)
                    .iter()
                    .any(|&(conn, kind)| conn == b && kind == EventKind::Connected);
                if connected {
                    let _ = client.close(b);
                    client.poll(now());
                } else {
                    core.step();
                }
                connected
            });
        }
        let start = StdInstant::now();
        while start.elapsed() < Duration::from_secs(1) {
            client_turn(&mut client);
            core.step();
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            control.stats().refused_startups > 0,
            "{:?}",
            control.stats()
        );
        assert_eq!(core.link.ends_kept(), 0, "nothing kept for good");
        assert_eq!(core.link.in_startup(), 1, "the idle one only");
        drop(control);
    });
}

#[test]
fn with_channels_four_deep_many_startups_at_once_all_complete() {
    const STARTUPS: usize = 200;
    watchdog(WATCHDOG, || {
        let config = ControlConfig {
            channel_depth: 4,
            stall_after: Duration::from_secs(2),
            ..ControlConfig::default()
        };
        // Core 0 connects to core 1 through the same control plane: every
        // startup crosses both cores' channels twice over.
        let (mut control, links) = ControlPlane::start_with(config, 2).unwrap();
        let (a, b) = pair(40, 512);
        let mut links = links.into_iter();
        let mut core0 = Core::new(a, links.next().unwrap());
        let mut core1 = Core::new(b, links.next().unwrap());
        accept_all(&control, 1, 6000, StartupConfig::default());
        core1.wait_listening(6000);
        let remote = SocketAddrV4::new(Ipv4Addr::new(10, 0, 40, 2), 6000);
        let tokens: HashSet<u64> = (0..STARTUPS)
            .map(|_| control.connect(0, remote, StartupConfig::default(), b"deep"))
            .collect();
        until(Duration::from_secs(15), "every startup", || {
            core0.step();
            core1.step();
            core0.handoffs.len() == STARTUPS && core1.handoffs.len() == STARTUPS
        });
        let initiated: HashSet<u64> = core0.handoffs.iter().map(|h| h.token).collect();
        assert_eq!(initiated, tokens);
        let accepted: HashSet<ConnId> = core1.handoffs.iter().map(|h| h.conn.unwrap()).collect();
        assert_eq!(accepted.len(), STARTUPS);
        for handoff in core0.handoffs.iter().chain(&core1.handoffs) {
            let e = established(handoff);
            assert!(e.enhanced, "{e:?}");
        }
        // The channels were full and the backlogs carried the rest.
        let health = control.health();
        assert!(health[0].backlog_max > 0, "{health:?}");
        assert!(health.iter().all(|h| h.backlog == 0), "{health:?}");
        let stats = control.stop();
        assert_eq!(stats.established, 2 * STARTUPS as u64);
        assert_eq!(
            (stats.failed, stats.rejected, stats.refused_startups),
            (0, 0, 0)
        );
        assert_eq!(stats.stalls, 0);
    });
}

#[test]
fn configurations_that_cannot_work_are_refused() {
    let base = ControlConfig::default();
    assert_eq!(base.validate(), Ok(()));
    let bad = [
        ControlConfig {
            channel_depth: 0,
            ..base.clone()
        },
        ControlConfig {
            heartbeat: Duration::ZERO,
            ..base.clone()
        },
        ControlConfig {
            stall_after: base.heartbeat,
            ..base.clone()
        },
        ControlConfig {
            startups_max_per_core: 0,
            ..base.clone()
        },
        ControlConfig {
            startups_max: 0,
            ..base.clone()
        },
        ControlConfig {
            stall_after: Duration::from_secs(u64::MAX),
            ..base.clone()
        },
    ];
    for config in bad {
        assert!(config.validate().is_err(), "{config:?}");
        assert!(ControlPlane::start_with(config, 1).is_err());
    }
}

#[test]
fn unlistening_refuses_new_connections_and_keeps_established_ones() {
    watchdog(WATCHDOG, || {
        let (mut control, mut links) = ControlPlane::start(2);
        let (s0, s1) = pair(31, 16);
        let mut server = Core::new(s0, links.remove(0));
        let mut client = Core::new(s1, links.remove(0));
        let addr = SocketAddrV4::new(Ipv4Addr::new(10, 0, 31, 1), 5100);
        accept_all(&control, 0, 5100, StartupConfig::default());
        server.wait_listening(5100);
        assert_eq!(server.stack.listening_sockets(), 1);
        let connect =
            |control: &mut ControlPlane, server: &mut Core, client: &mut Core| -> Handoff {
                let token = control.connect(1, addr, StartupConfig::default(), b"");
                let mut out = None;
                until(Duration::from_secs(10), "the client's handoff", || {
                    server.step();
                    client.step();
                    if let Some(i) = client.handoffs.iter().position(|h| h.token == token) {
                        out = Some(client.handoffs.remove(i));
                    }
                    out.is_some()
                });
                out.unwrap()
            };
        let first = connect(&mut control, &mut server, &mut client);
        established(&first);
        until(Duration::from_secs(10), "the server's handoff", || {
            server.step();
            client.step();
            !server.handoffs.is_empty()
        });
        let kept = server
            .handoffs
            .remove(0)
            .conn
            .expect("the server's connection");

        control.unlisten(0, 5100);
        until(Duration::from_secs(10), "the listener gone", || {
            server.step();
            server.link.listen_status(5100).is_none() && server.stack.listening_sockets() == 0
        });
        // A new connection is refused (TCP reset: no listener) ...
        let refused = connect(&mut control, &mut server, &mut client);
        assert!(
            matches!(refused.result, StartupResult::Failed(_)),
            "{refused:?}"
        );
        // ... while the established one stays up.
        assert_eq!(
            server
                .stack
                .tcp_state(kept)
                .map(|s| s.to_string())
                .as_deref(),
            Some("ESTABLISHED")
        );

        // Listening again on the port starts afresh.
        accept_all(&control, 0, 5100, StartupConfig::default());
        server.wait_listening(5100);
        let again = connect(&mut control, &mut server, &mut client);
        established(&again);
        drop(control);
    });
}

/// A connection in its MPA startup when its listener is unlistened, and
/// a new listen made on the port, is not decided by the new listener: the
/// old one's decision is gone and the startup fails (found by a review: the
/// new listener decided it, with the old one's configuration).
#[test]
fn a_startup_of_an_unlistened_listener_is_not_decided_by_its_successor() {
    watchdog(WATCHDOG, || {
        let (control, mut links) = ControlPlane::start(1);
        let (mut client, s0) = pair(44, 4);
        let mut core = Core::new(s0, links.remove(0));
        let target = SocketAddrV4::new(Ipv4Addr::new(10, 0, 44, 2), 5000);
        let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::<&str>::new()));
        let ask = |name: &'static str| -> control::runtime::OnRequest {
            let asked = asked.clone();
            Box::new(move |_, _| {
                asked.lock().unwrap().push(name);
                Decision::Accept(Accept::default())
            })
        };
        control.listen(0, 5000, StartupConfig::default(), ask("old"));
        core.wait_listening(5000);
        let c = client.connect(target, now()).expect("room");
        until(Duration::from_secs(5), "the accept", || {
            client_turn(&mut client);
            core.step();
            control.health()[0].startups == 1
        });
        control.unlisten(0, 5000);
        core.link.forget_listen_status(5000);
        control.listen(0, 5000, StartupConfig::default(), ask("new"));
        core.wait_listening(5000);
        send_request(&mut client, c);
        until(Duration::from_secs(5), "a handoff", || {
            client_turn(&mut client);
            core.step();
            !core.handoffs.is_empty()
        });
        assert_eq!(
            *asked.lock().unwrap(),
            Vec::<&str>::new(),
            "nobody decided it"
        );
        assert!(
            matches!(core.handoffs[0].result, StartupResult::Failed(_)),
            "{:?}",
            core.handoffs[0].result
        );
        drop(control);
    });
}

/// A listener's Accept that breaks a rule (509 octets of private data to
/// an enhanced Request: the Reply's 512 octets of private data hold the 4
/// of its IRD/ORD and 508 of the ULP's) fails the startup with the rule it
/// broke, so that the ULP learns what to fix (it was a bare local
/// failure).
#[test]
fn an_invalid_accept_fails_the_startup_with_what_was_wrong() {
    watchdog(WATCHDOG, || {
        let (control, mut links) = ControlPlane::start(1);
        let (mut client, s0) = pair(47, 4);
        let mut core = Core::new(s0, links.remove(0));
        let target = SocketAddrV4::new(Ipv4Addr::new(10, 0, 47, 2), 5000);
        let accept = Accept {
            private_data: vec![7; 509],
            ..Accept::default()
        };
        control.listen(
            0,
            5000,
            StartupConfig::default(),
            Box::new(move |_, _| Decision::Accept(accept.clone())),
        );
        core.wait_listening(5000);
        let c = client.connect(target, now()).expect("room");
        until(Duration::from_secs(5), "the accept", || {
            client_turn(&mut client);
            core.step();
            control.health()[0].startups == 1
        });
        send_request(&mut client, c);
        until(Duration::from_secs(5), "a handoff", || {
            client_turn(&mut client);
            core.step();
            !core.handoffs.is_empty()
        });
        let StartupResult::Failed(failure) = &core.handoffs[0].result else {
            panic!("{:?}", core.handoffs[0].result)
        };
        let FailReason::InvalidDecision(error) = failure.reason else {
            panic!("{failure:?}")
        };
        assert!(error.0.contains("508"), "{error}");
        assert!(failure.reason.to_string().contains("508"));
        assert_eq!(failure.term, None, "no Reply went out, so no Terminate");
        drop(control);
    });
}

/// The same with no listener on the port any more: the startup fails (no
/// Reply), rather than an MPA Reject going out in the ULP's name.
#[test]
fn a_startup_of_an_unlistened_listener_fails_rather_than_being_rejected() {
    watchdog(WATCHDOG, || {
        let (control, mut links) = ControlPlane::start(1);
        let (mut client, s0) = pair(45, 4);
        let mut core = Core::new(s0, links.remove(0));
        let target = SocketAddrV4::new(Ipv4Addr::new(10, 0, 45, 2), 5000);
        let c = accepted_connection(&control, &mut core, &mut client, target);
        control.unlisten(0, 5000);
        until(Duration::from_secs(5), "the listener gone", || {
            core.step();
            core.stack.listening_sockets() == 0
        });
        send_request(&mut client, c);
        until(Duration::from_secs(5), "a handoff", || {
            client_turn(&mut client);
            core.step();
            !core.handoffs.is_empty()
        });
        assert!(
            matches!(core.handoffs[0].result, StartupResult::Failed(_)),
            "{:?}",
            core.handoffs[0].result
        );
        drop(control);
    });
}

#[test]
fn one_peer_holds_at_most_its_share_of_startups_and_gets_it_back() {
    const PER_PEER: usize = 12;
    const PEERS: usize = 40;
    watchdog(WATCHDOG, || {
        let config = ControlConfig {
            startups_per_peer_max: PER_PEER,
            heartbeat: Duration::from_millis(20),
            ..ControlConfig::default()
        };
        let (control, mut links) = ControlPlane::start_with(config, 1).unwrap();
        let (flood_stack, s0) = pair(32, 256);
        let mut core = Core::new(s0, links.remove(0));
        let request_timeout = Duration::from_millis(300);
        let impatient = StartupConfig {
            request_timeout: request_timeout.into(),
            ..StartupConfig::default()
        };
        accept_all(&control, 0, 5000, impatient);
        core.wait_listening(5000);
        let mut flood = Flood::new(
            flood_stack,
            SocketAddrV4::new(Ipv4Addr::new(10, 0, 32, 2), 5000),
        );
        // Far below the per-core and all-cores limits: the peer's own limit
        // refuses the rest at once, at the core's link (a flood never
        // reaches the control plane's channel; the link's refusals reach
        // its counters with the next heartbeat).
        until(Duration::from_secs(5), "the peer's share", || {
            flood.open(PEERS, PEERS);
            flood.step();
            core.step();
            flood.reset == PEERS - PER_PEER
                && control.health()[0].startups == PER_PEER
                && control.stats().refused_startups == (PEERS - PER_PEER) as u64
        });
        assert_eq!(core.link.refused_startups(), (PEERS - PER_PEER) as u64);
        assert_eq!(core.link.in_startup(), PER_PEER);
        // Its held startups time out (RFC 5044 §7.1) and its share is free.
        until(Duration::from_secs(5), "the request timeouts", || {
            flood.step();
            core.step();
            std::thread::sleep(Duration::from_millis(1));
            control.health()[0].startups == 0
        });
        // Closed on our side, never on the flood's: the share is its own
        // until they are reset (DRAIN_LIMIT), whatever it sends meanwhile.
        let closed = StdInstant::now();
        until(
            DRAIN_LIMIT + Duration::from_secs(5),
            "the drains' end",
            || {
                flood.open(1, PEERS + 1);
                flood.step();
                core.step();
                std::thread::sleep(Duration::from_millis(1));
                core.link.in_startup() == 0
            },
        );
        assert!(closed.elapsed() >= DRAIN_LIMIT - Duration::from_millis(500));
        assert_eq!(
            core.link.refused_startups(),
            (PEERS - PER_PEER + 1) as u64,
            "a new startup of its while they drained was refused"
        );
        let total = PEERS + 1 + PER_PEER;
        until(Duration::from_secs(5), "the share again", || {
            flood.open(PER_PEER, total);
            flood.step();
            core.step();
            control.health()[0].startups == PER_PEER
                && control.stats().refused_startups == (PEERS - PER_PEER + 1) as u64
        });
        drop(control);
    });
}

/// A second listen on a port replaces the first's decision and reports
/// success (found by a review: the core's transport refused a second
/// listener, so the status said `PortInUse` while the listen went on
/// working with the new decision).
#[test]
fn a_second_listen_on_a_port_replaces_the_decision_and_reports_success() {
    watchdog(WATCHDOG, || {
        let (mut control, mut links) = ControlPlane::start(2);
        let (s0, s1) = pair(33, 16);
        let mut server = Core::new(s0, links.remove(0));
        let mut client = Core::new(s1, links.remove(0));
        let addr = SocketAddrV4::new(Ipv4Addr::new(10, 0, 33, 1), 5102);
        accept_all(&control, 0, 5102, StartupConfig::default());
        server.wait_listening(5102);
        server.link.forget_listen_status(5102);
        control.listen(
            0,
            5102,
            StartupConfig::default(),
            Box::new(|_, _| Decision::Reject(b"replaced".to_vec())),
        );
        // Asserts the status is `Ok`.
        server.wait_listening(5102);
        assert_eq!(server.stack.listening_sockets(), 1);
        let token = control.connect(1, addr, StartupConfig::default(), b"");
        let mut out = None;
        until(Duration::from_secs(10), "the client's handoff", || {
            server.step();
            client.step();
            if let Some(i) = client.handoffs.iter().position(|h| h.token == token) {
                out = Some(client.handoffs.remove(i));
            }
            out.is_some()
        });
        let handoff = out.unwrap();
        match &handoff.result {
            StartupResult::Rejected(r) => assert_eq!(r.private_data, b"replaced"),
            other => panic!("not rejected by the second listen: {other:?}"),
        }
    });
}

/// A command for a core the control plane does not serve is refused at
/// once with a message naming it (found by a review: a connect's result
/// was handed to no one and the application waited forever).
#[test]
fn a_connect_from_a_core_that_does_not_exist_is_refused() {
    let (mut control, _links) = ControlPlane::start(2);
    assert_eq!(control.cores(), 2);
    let remote = SocketAddrV4::new(Ipv4Addr::new(10, 0, 34, 1), 5103);
    let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        control.connect(2, remote, StartupConfig::default(), b"")
    }))
    .expect_err("a connect from core 2 of two");
    let message = refused
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(
        message.contains("core 2 is not served") && message.contains("0..2"),
        "{message}"
    );
    let listen = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        accept_all(&control, 7, 5103, StartupConfig::default())
    }));
    assert!(listen.is_err(), "a listen on core 7 of two");
    // The plane still serves its own cores.
    control.connect(1, remote, StartupConfig::default(), b"");
}

/// By default one peer address holds at most 2048 startups, half of a
/// core's places (found by a review: the default was every place there
/// is, so one silent peer could hold them all).
#[test]
fn by_default_one_peer_holds_half_of_a_cores_startups() {
    const OPENED: usize = 2054;
    watchdog(WATCHDOG, || {
        let config = ControlConfig::default();
        let share = config.startups_per_peer_max;
        assert_eq!(share, 2048);
        assert!(share * 2 <= config.startups_max_per_core);
        let (control, mut links) = ControlPlane::start_with(config, 1).unwrap();
        let (flood_stack, s0) = pair(35, OPENED + 8);
        let mut core = Core::new(s0, links.remove(0));
        accept_all(&control, 0, 5104, StartupConfig::default());
        core.wait_listening(5104);
        let mut flood = Flood::new(
            flood_stack,
            SocketAddrV4::new(Ipv4Addr::new(10, 0, 35, 2), 5104),
        );
        until(Duration::from_secs(20), "the peer's share", || {
            flood.open(OPENED, OPENED);
            flood.step();
            core.step();
            flood.reset == OPENED - share && core.link.in_startup() == share
        });
        assert_eq!(core.link.refused_startups(), (OPENED - share) as u64);
        drop(control);
    });
}

/// The token a ULP's accept carries comes back in its startup's handoff,
/// whether the startup reached Full Operation or failed after the accept
/// (its peer reset while the Reply was on its way): a ULP that prepared
/// something for the accept (a grant of its memory) must let go of that
/// one only, not of what it prepared for a later connection with the same
/// four-tuple (a client reconnecting from the same port), whose accept
/// may come before the first one's failure is handed over.
#[test]
fn an_accepts_ulp_token_comes_back_with_its_handoff_established_or_failed() {
    watchdog(WATCHDOG, || {
        let (control, mut links) = ControlPlane::start(1);
        let (mut client, s0) = pair(47, 4);
        let mut core = Core::new(s0, links.remove(0));
        let mut next = 100;
        control.listen(
            0,
            5000,
            StartupConfig::default(),
            Box::new(move |_, _| {
                next += 1;
                Decision::Accept(Accept {
                    ulp_token: next,
                    ..Accept::default()
                })
            }),
        );
        core.wait_listening(5000);
        let target = SocketAddrV4::new(Ipv4Addr::new(10, 0, 47, 2), 5000);
        let started = |client: &mut Stack<LinkEnd>, core: &mut Core| {
            let c = client.connect(target, now()).expect("room");
            until(Duration::from_secs(5), "the accept", || {
                client_turn(client);
                core.step();
                control.health()[0].startups == 1
            });
            send_request(client, c);
            client.poll(now());
            c
        };
        // The first reaches Full Operation: the accept's token comes back.
        started(&mut client, &mut core);
        until(Duration::from_secs(5), "the first handoff", || {
            client_turn(&mut client);
            core.step();
            !core.handoffs.is_empty()
        });
        established(&core.handoffs[0]);
        assert_eq!(core.handoffs[0].ulp_token, 101);
        // The second's peer resets once its Request has gone to the
        // control plane; the core reads no event until the answer has
        // come, so the Reply finds the connection gone and it fails.
        let b = started(&mut client, &mut core);
        core.step();
        client.abort(b).expect("abort");
        client.poll(now());
        client.release(b);
        until(Duration::from_secs(5), "the second handoff", || {
            let t = now();
            core.stack.poll(t);
            core.link.poll(&mut core.stack, t);
            while let Some(handoff) = core.link.next_handoff() {
                core.handoffs.push(handoff);
            }
            core.handoffs.len() == 2
        });
        let failed = &core.handoffs[1];
        assert!(
            matches!(failed.result, StartupResult::Failed(_)),
            "{:?}",
            failed.result
        );
        assert_eq!(failed.ulp_token, 102, "the failed accept's own token");
        assert_eq!((failed.token, core.handoffs[0].token), (0, 0));
        drop(control);
    });
}
