//! The control-plane thread and its link to the poll-mode cores.
//!
//! The cores own TCP (a tcp-lite [`Transport`] each); the control plane owns
//! listeners and every MPA startup. A core's [`CoreLink`] forwards the
//! octets of connections in startup to the control plane and carries out
//! what it answers (send these octets, consume the frame, close), without
//! ever blocking: channels are bounded and polled with `try_*`. When a
//! startup ends, the core gets a [`Handoff`]: the negotiated parameters (ready
//! for `Established::connection`) of a connection whose TCP stream now
//! starts at its first FPDU. Octets past the frame are never consumed by the
//! startup: the core forwards at most one frame's worth it has not consumed,
//! and consumes only what a state machine took.
//!
//! This module is the crate's one exception to sans-IO (STYLE.md §1.1): it
//! starts a thread and reads the clock. The state machines it drives are in
//! [`crate::mpa`].

use std::collections::HashMap;
use std::net::SocketAddrV4;
use std::thread::JoinHandle;
use std::time::Instant as StdInstant;

use crossbeam_channel::{
    bounded, unbounded, Receiver, RecvTimeoutError, Sender, TryRecvError, TrySendError,
};
use rnic_engine::wire::mpa_rr::{HEADER_LEN, PRIVATE_DATA_LEN_MAX};
use tcp_lite::{ConnId, Event, EventKind, Instant, ListenError, ListenerId, Transport};

use crate::mpa::{
    Accept, Established, FailReason, Failure, Initiator, Outcome, Rejected, Request, Responder,
    StartupConfig,
};

/// Which poll-mode core.
pub type CoreId = u16;

/// Messages in flight from the cores to the control plane. Beyond this a
/// core keeps its messages, in order, and retries at its next poll; it
/// stops forwarding octets meanwhile. (Each connection owes at most a few
/// messages, so what a core keeps is bounded by its connections.) The
/// other way the channels are unbounded, so the control plane never waits
/// for a core either; what it sends is bounded by the startups in flight.
pub const CHANNEL_DEPTH: usize = 1024;

/// Octets a core forwards without the control plane having consumed them:
/// one frame at most, so nothing past a frame ever leaves TCP for it.
pub const FORWARD_MAX: usize = HEADER_LEN + PRIVATE_DATA_LEN_MAX;

/// What the ULP answers to an MPA Request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Accept with these values.
    Accept(Accept),
    /// Reject with this private data (TCP stays open for the ULP).
    Reject(Vec<u8>),
}

/// The ULP's accept/reject callback of a listener: the Request (with the
/// peer's private data and, if enhanced, its IRD/ORD) and the peer's address.
pub type OnRequest = Box<dyn FnMut(&Request, SocketAddrV4) -> Decision + Send>;

/// From a core to the control plane.
#[derive(Debug)]
enum ToControl {
    Accepted {
        core: CoreId,
        conn: ConnId,
        listener: ListenerId,
        peer: SocketAddrV4,
    },
    Connected {
        core: CoreId,
        conn: ConnId,
        token: u64,
    },
    ConnectFailed {
        core: CoreId,
        token: u64,
    },
    Input {
        core: CoreId,
        conn: ConnId,
        octets: Vec<u8>,
    },
    Closed {
        core: CoreId,
        conn: ConnId,
    },
}

/// From the control plane to a core.
#[derive(Debug)]
enum ToCore {
    Listen {
        port: u16,
    },
    Connect {
        remote: SocketAddrV4,
        token: u64,
    },
    Send {
        conn: ConnId,
        octets: Vec<u8>,
    },
    Consume {
        conn: ConnId,
        octets: usize,
    },
    Done {
        conn: Option<ConnId>,
        token: u64,
        result: StartupResult,
    },
}

/// How a startup ended, as the core hears it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartupResult {
    /// Full Operation: run a QP with these parameters.
    Established(Established),
    /// Rejected: MPA is left, TCP stays open (the core may hand the
    /// connection to the ULP or close it).
    Rejected(Rejected),
    /// Failed: the core closes the connection once the queued octets (a
    /// Terminate, if any) are sent.
    Failed(Failure),
}

/// A startup that ended, for the core that owns the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handoff {
    /// The TCP connection; on `Established` its next octets are FPDUs. On
    /// `Failed` it is closed (or closing) and released by the link; on
    /// `Rejected` it is the core's to close. `None` when an active open
    /// never connected, or when a rejected connection had already closed
    /// (and was released) by the time the startup ended.
    pub conn: Option<ConnId>,
    /// The `connect` token for active opens, 0 for accepted connections.
    pub token: u64,
    /// How it ended.
    pub result: StartupResult,
}

/// A request to the control plane from the application.
enum Command {
    Listen {
        core: CoreId,
        port: u16,
        config: StartupConfig,
        on_request: OnRequest,
    },
    Connect {
        core: CoreId,
        remote: SocketAddrV4,
        config: StartupConfig,
        private_data: Vec<u8>,
        token: u64,
    },
    Stop,
}

/// Counters of the control plane.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ControlStats {
    /// Startups that reached Full Operation.
    pub established: u64,
    /// Startups rejected (either way).
    pub rejected: u64,
    /// Startups that failed (timeouts, bad frames, closes, Terminates).
    pub failed: u64,
}

/// The control plane: a thread that runs MPA startups for the cores.
pub struct ControlPlane {
    commands: Sender<Command>,
    thread: Option<JoinHandle<ControlStats>>,
    next_token: u64,
}

/// A core's end of the control plane. Give it to the core's thread.
pub struct CoreLink {
    core: CoreId,
    to_control: Sender<ToControl>,
    from_control: Receiver<ToCore>,
    /// Connections in startup: octets forwarded but not consumed, and the
    /// octets still to send.
    starting: HashMap<ConnId, Starting>,
    /// Connect tokens of active opens in progress.
    connecting: HashMap<ConnId, u64>,
    /// Ports the control plane listens on through this core.
    listening: std::collections::HashSet<u16>,
    /// How each listen command ended, for [`CoreLink::listen_status`].
    listen_results: HashMap<u16, Result<(), ListenError>>,
    /// Connections closing after a failed startup: released once the
    /// transport reports their end (so a Terminate queued before the close
    /// still goes out).
    draining: std::collections::HashSet<ConnId>,
    /// Messages the channel had no room for, retried first, in order.
    backlog: std::collections::VecDeque<ToControl>,
    /// The control plane is gone: no more startups.
    dead: bool,
    handoffs: std::collections::VecDeque<Handoff>,
}

#[derive(Debug, Default)]
struct Starting {
    forwarded: usize,
    outgoing: Vec<u8>,
    /// Close after `outgoing` is sent.
    closing: bool,
    /// The peer sent FIN: forward what is left, then tell the control plane.
    peer_closed: bool,
}

impl ControlPlane {
    /// Starts the control-plane thread for `cores` cores; returns it and
    /// one [`CoreLink`] per core, in order.
    pub fn start(cores: u16) -> (ControlPlane, Vec<CoreLink>) {
        let (commands, command_rx) = bounded(CHANNEL_DEPTH);
        let (to_control, control_rx) = bounded(CHANNEL_DEPTH);
        let mut core_txs = Vec::new();
        let mut links = Vec::new();
        for core in 0..cores {
            let (tx, rx) = unbounded();
            core_txs.push(tx);
            links.push(CoreLink {
                core,
                to_control: to_control.clone(),
                from_control: rx,
                starting: HashMap::new(),
                connecting: HashMap::new(),
                listening: Default::default(),
                listen_results: Default::default(),
                draining: Default::default(),
                backlog: Default::default(),
                dead: false,
                handoffs: Default::default(),
            });
        }
        let thread = std::thread::Builder::new()
            .name("dpwarp-control".into())
            .spawn(move || Worker::new(command_rx, control_rx, core_txs).run())
            .expect("spawn the control-plane thread");
        (
            ControlPlane {
                commands,
                thread: Some(thread),
                next_token: 1,
            },
            links,
        )
    }

    /// Listens on `port` of `core`'s transport: every accepted connection
    /// runs a responder with `config`, and `on_request` decides.
    pub fn listen(&self, core: CoreId, port: u16, config: StartupConfig, on_request: OnRequest) {
        let _ = self.commands.send(Command::Listen {
            core,
            port,
            config,
            on_request,
        });
    }

    /// Opens a connection from `core` to `remote` and runs an initiator with
    /// `config` and `private_data`; the handoff carries the returned token.
    pub fn connect(
        &mut self,
        core: CoreId,
        remote: SocketAddrV4,
        config: StartupConfig,
        private_data: &[u8],
    ) -> u64 {
        let token = self.next_token;
        self.next_token += 1;
        let _ = self.commands.send(Command::Connect {
            core,
            remote,
            config,
            private_data: private_data.to_vec(),
            token,
        });
        token
    }

    /// Stops the thread and returns its counters.
    pub fn stop(mut self) -> ControlStats {
        self.halt()
    }

    fn halt(&mut self) -> ControlStats {
        let _ = self.commands.send(Command::Stop);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.halt();
        }
    }
}

impl CoreLink {
    /// This core's id.
    pub fn core(&self) -> CoreId {
        self.core
    }

    /// Whether the listen command for `port` has reached this core, and
    /// how it went: `None` until it has (the control plane forwards it),
    /// then the transport's answer, so an application can say "port in
    /// use" instead of waiting for connections that never come.
    pub fn listen_status(&self, port: u16) -> Option<Result<(), ListenError>> {
        self.listen_results.get(&port).copied()
    }

    /// Connections of this core in startup, connecting, or closing after a
    /// failed startup.
    pub fn in_startup(&self) -> usize {
        self.starting.len() + self.connecting.len() + self.draining.len()
    }

    /// Whether `conn` is the link's (in startup, connecting, or closing).
    pub fn owns(&self, conn: ConnId) -> bool {
        self.starting.contains_key(&conn)
            || self.connecting.contains_key(&conn)
            || self.draining.contains(&conn)
    }

    /// Offers a transport event. Returns `true` if the link took it (a
    /// connection it owns, or an accept on a port the control plane listens
    /// on); other events are the core's.
    pub fn handle_event<T: Transport>(&mut self, transport: &mut T, event: Event) -> bool {
        let conn = event.conn;
        match event.kind {
            EventKind::Accepted(listener) => {
                if !self.listening.contains(&listener.0) {
                    return false;
                }
                let peer = transport.endpoints(conn).map(|(_, p)| p);
                match peer {
                    Ok(peer) if !self.dead => {
                        self.starting.insert(conn, Starting::default());
                        self.send(ToControl::Accepted {
                            core: self.core,
                            conn,
                            listener,
                            peer,
                        });
                    }
                    // No control plane, or no peer address: refuse.
                    _ => {
                        let _ = transport.abort(conn);
                        transport.release(conn);
                    }
                }
                true
            }
            EventKind::Connected => match self.connecting.remove(&conn) {
                Some(token) => {
                    self.starting.insert(conn, Starting::default());
                    self.send(ToControl::Connected {
                        core: self.core,
                        conn,
                        token,
                    });
                    true
                }
                None => false,
            },
            EventKind::Readable | EventKind::Writable => self.owns(conn),
            EventKind::PeerClosed => {
                if let Some(state) = self.starting.get_mut(&conn) {
                    // Octets before the FIN (a Reply, a reject) still count:
                    // `poll` forwards them first.
                    state.peer_closed = true;
                    return true;
                }
                self.owns(conn)
            }
            EventKind::Closed | EventKind::Reset | EventKind::TimedOut => {
                if self.draining.remove(&conn) {
                    transport.release(conn);
                    return true;
                }
                if let Some(token) = self.connecting.remove(&conn) {
                    transport.release(conn);
                    self.send(ToControl::ConnectFailed {
                        core: self.core,
                        token,
                    });
                    return true;
                }
                if self.starting.remove(&conn).is_some() {
                    transport.release(conn);
                    self.send(ToControl::Closed {
                        core: self.core,
                        conn,
                    });
                    return true;
                }
                false
            }
        }
    }

    /// Moves startup octets both ways and carries out the control plane's
    /// answers; never blocks. Call it every loop, after handling events.
    pub fn poll<T: Transport>(&mut self, transport: &mut T, now: Instant) {
        while let Some(message) = self.backlog.pop_front() {
            match self.to_control.try_send(message) {
                Ok(()) => {}
                Err(TrySendError::Full(message)) => {
                    self.backlog.push_front(message);
                    break;
                }
                Err(TrySendError::Disconnected(_)) => {
                    self.backlog.clear();
                    self.dead = true;
                }
            }
        }
        loop {
            match self.from_control.try_recv() {
                Ok(message) => self.apply(transport, message, now),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    self.dead = true;
                    break;
                }
            }
        }
        if self.dead {
            self.abandon(transport);
            return;
        }
        // A connection closing after a failed startup: what the peer still
        // sends is dropped (a bounded amount per poll), so its FIN, and with
        // it the end of the connection, is seen.
        for &conn in &self.draining {
            for _ in 0..4 {
                match transport.recv_with(conn, |data, _| (data.len(), data.len())) {
                    Ok(n) if n > 0 => {}
                    _ => break,
                }
            }
        }
        let conns: Vec<ConnId> = self.starting.keys().copied().collect();
        for conn in conns {
            self.flush(transport, conn);
            if !self.backlog.is_empty() {
                continue;
            }
            let Some(state) = self.starting.get_mut(&conn) else {
                continue;
            };
            if state.closing {
                continue;
            }
            // Peek: forward what the control plane has not seen, consume
            // nothing (it says how much its frame took).
            let skip = state.forwarded;
            let room = FORWARD_MAX.saturating_sub(skip);
            let peeked = transport.recv_with(conn, |data, _| {
                let fresh = data.get(skip..).unwrap_or(&[]);
                (0, fresh[..fresh.len().min(room)].to_vec())
            });
            match peeked {
                Ok(octets) if !octets.is_empty() => {
                    state.forwarded += octets.len();
                    self.send(ToControl::Input {
                        core: self.core,
                        conn,
                        octets,
                    });
                }
                // Everything before the peer's FIN was forwarded and taken
                // by the state machine (what it has not taken is past its
                // frame: its outcome is on the way): now the close. Our side
                // closes too.
                _ if state.peer_closed && state.forwarded == 0 => {
                    self.starting.remove(&conn);
                    let _ = transport.close(conn);
                    self.draining.insert(conn);
                    self.send(ToControl::Closed {
                        core: self.core,
                        conn,
                    });
                }
                _ => {}
            }
        }
    }

    /// The next startup that ended.
    pub fn next_handoff(&mut self) -> Option<Handoff> {
        self.handoffs.pop_front()
    }

    fn send(&mut self, message: ToControl) {
        if !self.backlog.is_empty() {
            self.backlog.push_back(message);
            return;
        }
        match self.to_control.try_send(message) {
            Ok(()) => {}
            // Full: keep it, in order; `poll` retries and holds back octets.
            Err(TrySendError::Full(message)) => self.backlog.push_back(message),
            Err(TrySendError::Disconnected(_)) => self.dead = true,
        }
    }

    /// The control plane is gone: every startup of this core fails.
    fn abandon<T: Transport>(&mut self, transport: &mut T) {
        let failed = || {
            StartupResult::Failed(Failure {
                reason: FailReason::Local,
                term: None,
                peer: None,
                retry_unenhanced: false,
            })
        };
        for (conn, _) in self.starting.drain() {
            let _ = transport.abort(conn);
            transport.release(conn);
            self.handoffs.push_back(Handoff {
                conn: Some(conn),
                token: 0,
                result: failed(),
            });
        }
        for (conn, token) in self.connecting.drain() {
            let _ = transport.abort(conn);
            transport.release(conn);
            self.handoffs.push_back(Handoff {
                conn: Some(conn),
                token,
                result: failed(),
            });
        }
    }

    fn flush<T: Transport>(&mut self, transport: &mut T, conn: ConnId) {
        let Some(state) = self.starting.get_mut(&conn) else {
            return;
        };
        while !state.outgoing.is_empty() {
            let pending = &state.outgoing;
            let sent = transport.send_with(conn, pending.len(), |space| {
                space.copy_from_slice(&pending[..space.len()]);
                (space.len(), space.len())
            });
            match sent {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    state.outgoing.drain(..n);
                }
            }
        }
        if state.closing && state.outgoing.is_empty() {
            // An orderly close: what was queued (a Terminate, a Reject) goes
            // out before the FIN; the slot is released when the transport
            // reports the end.
            let _ = transport.close(conn);
            self.starting.remove(&conn);
            self.draining.insert(conn);
        }
    }

    fn apply<T: Transport>(&mut self, transport: &mut T, message: ToCore, now: Instant) {
        match message {
            ToCore::Listen { port } => {
                let result = transport.listen(port).map(|_| ());
                if result.is_ok() {
                    self.listening.insert(port);
                }
                self.listen_results.insert(port, result);
            }
            ToCore::Connect { remote, token } => match transport.connect(remote, now) {
                Ok(conn) => {
                    self.connecting.insert(conn, token);
                }
                Err(_) => self.send(ToControl::ConnectFailed {
                    core: self.core,
                    token,
                }),
            },
            ToCore::Send { conn, octets } => {
                if let Some(state) = self.starting.get_mut(&conn) {
                    state.outgoing.extend_from_slice(&octets);
                    self.flush(transport, conn);
                }
            }
            ToCore::Consume { conn, octets } => {
                if let Some(state) = self.starting.get_mut(&conn) {
                    let mut left = octets;
                    while left > 0 {
                        match transport.recv_with(conn, |data, _| {
                            let n = data.len().min(left);
                            (n, n)
                        }) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => left -= n,
                        }
                    }
                    state.forwarded = state.forwarded.saturating_sub(octets);
                }
            }
            ToCore::Done {
                conn: None,
                token,
                result,
            } => {
                self.handoffs.push_back(Handoff {
                    conn: None,
                    token,
                    result,
                });
            }
            ToCore::Done {
                conn: Some(conn),
                token,
                result,
            } => {
                let mut result = result;
                let mut handed = Some(conn);
                match &result {
                    StartupResult::Failed(_) => {
                        if let Some(state) = self.starting.get_mut(&conn) {
                            state.closing = true;
                        }
                        self.flush(transport, conn);
                    }
                    StartupResult::Established(_) | StartupResult::Rejected(_) => {
                        // The frame still queued goes out first; then the
                        // connection is the core's.
                        self.flush(transport, conn);
                        match self.starting.remove(&conn) {
                            Some(state) if state.outgoing.is_empty() => {}
                            // No room in TCP for the frame: the core cannot
                            // take over a half-sent frame.
                            Some(_) => {
                                let _ = transport.abort(conn);
                                self.draining.insert(conn);
                                result = StartupResult::Failed(Failure {
                                    reason: FailReason::Local,
                                    term: None,
                                    peer: None,
                                    retry_unenhanced: false,
                                });
                            }
                            // Closed (and released) meanwhile: a reject
                            // stands (the ULP gets its private data) without
                            // a connection; a connection to run is gone.
                            None if matches!(result, StartupResult::Rejected(_)) => handed = None,
                            None => {
                                result = StartupResult::Failed(Failure {
                                    reason: FailReason::PeerClosed,
                                    term: None,
                                    peer: None,
                                    retry_unenhanced: false,
                                });
                            }
                        }
                    }
                }
                self.handoffs.push_back(Handoff {
                    conn: handed,
                    token,
                    result,
                });
            }
        }
    }
}

/// A startup the control plane runs.
enum Machine {
    Initiator(Initiator),
    Responder(Responder),
}

struct Startup {
    machine: Machine,
    token: u64,
    peer: SocketAddrV4,
    /// The listener's port (responders).
    port: u16,
    /// Initiators: the configuration and private data, for an unenhanced
    /// retry (RFC 6581 §10).
    retry: Option<(StartupConfig, Vec<u8>)>,
}

struct Listener {
    core: CoreId,
    port: u16,
    config: StartupConfig,
    on_request: OnRequest,
}

struct Worker {
    commands: Receiver<Command>,
    inbox: Receiver<ToControl>,
    cores: Vec<Sender<ToCore>>,
    listeners: Vec<Listener>,
    pending_connects: HashMap<u64, (StartupConfig, Vec<u8>, SocketAddrV4)>,
    startups: HashMap<(CoreId, ConnId), Startup>,
    epoch: StdInstant,
    stats: ControlStats,
}

impl Worker {
    // The runtime is the crate's clock (STYLE.md §1.1's exception).
    #[allow(clippy::disallowed_methods)]
    fn new(
        commands: Receiver<Command>,
        inbox: Receiver<ToControl>,
        cores: Vec<Sender<ToCore>>,
    ) -> Worker {
        Worker {
            commands,
            inbox,
            cores,
            listeners: Vec::new(),
            pending_connects: HashMap::new(),
            startups: HashMap::new(),
            epoch: StdInstant::now(),
            stats: ControlStats::default(),
        }
    }

    fn now(&self) -> Instant {
        Instant::from_micros(self.epoch.elapsed().as_micros() as i64)
    }

    fn to_core(&self, core: CoreId, message: ToCore) {
        if let Some(tx) = self.cores.get(usize::from(core)) {
            // Unbounded: the control plane never waits for a core either.
            let _ = tx.send(message);
        }
    }

    fn run(mut self) -> ControlStats {
        loop {
            loop {
                match self.commands.try_recv() {
                    Ok(Command::Stop) | Err(TryRecvError::Disconnected) => return self.stop(),
                    Ok(command) => self.command(command),
                    Err(TryRecvError::Empty) => break,
                }
            }
            let now = self.now();
            let next = self
                .startups
                .values()
                .filter_map(|s| match &s.machine {
                    Machine::Initiator(m) => m.poll_timeout(),
                    Machine::Responder(m) => m.poll_timeout(),
                })
                .min();
            // Wake for commands at least every 10 ms; not at all for a
            // deadline already due.
            let wait = match next {
                Some(at) if at <= now => 0,
                Some(at) => (at - now).total_micros().min(10_000),
                None => 10_000,
            };
            match self
                .inbox
                .recv_timeout(std::time::Duration::from_micros(wait))
            {
                Ok(message) => {
                    self.message(message);
                    // Drain what else is there before looking at timers.
                    while let Ok(message) = self.inbox.try_recv() {
                        self.message(message);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return self.stop(),
            }
            // Timers, only when one is due (not once per message).
            let now = self.now();
            if next.is_some_and(|at| at <= now) {
                let due: Vec<_> = self
                    .startups
                    .iter()
                    .filter(|(_, s)| {
                        match &s.machine {
                            Machine::Initiator(m) => m.poll_timeout(),
                            Machine::Responder(m) => m.poll_timeout(),
                        }
                        .is_some_and(|at| at <= now)
                    })
                    .map(|(k, _)| *k)
                    .collect();
                for key in due {
                    if let Some(s) = self.startups.get_mut(&key) {
                        match &mut s.machine {
                            Machine::Initiator(m) => m.handle_timeout(now),
                            Machine::Responder(m) => m.handle_timeout(now),
                        }
                    }
                    self.progress(key);
                }
            }
        }
    }

    /// Ends every startup in flight (the cores close them) and the thread.
    fn stop(mut self) -> ControlStats {
        let keys: Vec<_> = self.startups.keys().copied().collect();
        for (core, conn) in keys {
            if let Some(s) = self.startups.remove(&(core, conn)) {
                self.done(
                    core,
                    Some(conn),
                    s.token,
                    StartupResult::Failed(local_failure()),
                );
            }
        }
        self.stats
    }

    fn command(&mut self, command: Command) {
        match command {
            Command::Listen {
                core,
                port,
                config,
                on_request,
            } => {
                self.to_core(core, ToCore::Listen { port });
                self.listeners.push(Listener {
                    core,
                    port,
                    config,
                    on_request,
                });
            }
            Command::Connect {
                core,
                remote,
                config,
                private_data,
                token,
            } => {
                self.pending_connects
                    .insert(token, (config, private_data, remote));
                self.to_core(core, ToCore::Connect { remote, token });
            }
            Command::Stop => {}
        }
    }

    fn message(&mut self, message: ToControl) {
        let now = self.now();
        match message {
            ToControl::Accepted {
                core,
                conn,
                listener,
                peer,
            } => {
                let config = self
                    .listeners
                    .iter()
                    .find(|l| l.core == core && l.port == listener.0)
                    .map(|l| l.config.clone());
                let machine = config.and_then(|c| Responder::new(c, now).ok());
                match machine {
                    Some(m) => {
                        let startup = Startup {
                            machine: Machine::Responder(m),
                            token: 0,
                            peer,
                            port: listener.0,
                            retry: None,
                        };
                        self.startups.insert((core, conn), startup);
                    }
                    None => self.done(core, Some(conn), 0, StartupResult::Failed(local_failure())),
                }
            }
            ToControl::Connected { core, conn, token } => {
                let Some((config, private_data, remote)) = self.pending_connects.remove(&token)
                else {
                    return self.done(
                        core,
                        Some(conn),
                        token,
                        StartupResult::Failed(local_failure()),
                    );
                };
                let retry = (config.retry_unenhanced && config.enhanced)
                    .then(|| (config.clone(), private_data.clone()));
                match Initiator::new(config, &private_data, now) {
                    Ok(m) => {
                        let startup = Startup {
                            machine: Machine::Initiator(m),
                            token,
                            peer: remote,
                            port: 0,
                            retry,
                        };
                        self.startups.insert((core, conn), startup);
                        self.progress((core, conn));
                    }
                    Err(_) => self.done(
                        core,
                        Some(conn),
                        token,
                        StartupResult::Failed(local_failure()),
                    ),
                }
            }
            ToControl::ConnectFailed { core, token } => {
                self.pending_connects.remove(&token);
                let failure = Failure {
                    reason: FailReason::Unreachable,
                    term: None,
                    peer: None,
                    retry_unenhanced: false,
                };
                self.done(core, None, token, StartupResult::Failed(failure));
            }
            ToControl::Input { core, conn, octets } => {
                let Some(s) = self.startups.get_mut(&(core, conn)) else {
                    return;
                };
                let taken = match &mut s.machine {
                    Machine::Initiator(m) => m.handle_input(&octets, now),
                    Machine::Responder(m) => m.handle_input(&octets, now),
                };
                if taken > 0 {
                    self.to_core(
                        core,
                        ToCore::Consume {
                            conn,
                            octets: taken,
                        },
                    );
                }
                self.progress((core, conn));
            }
            ToControl::Closed { core, conn } => {
                if let Some(mut s) = self.startups.remove(&(core, conn)) {
                    let outcome = match &mut s.machine {
                        Machine::Initiator(m) => {
                            m.handle_peer_closed();
                            m.outcome().cloned()
                        }
                        Machine::Responder(m) => {
                            m.handle_peer_closed();
                            m.outcome().cloned()
                        }
                    };
                    // RFC 6581 §10: an enhanced Request closed unanswered may
                    // be retried unenhanced, if the application allows it.
                    if let (Some(Outcome::Failed(f)), Some((config, pd))) = (&outcome, &s.retry) {
                        if f.retry_unenhanced {
                            let config = StartupConfig {
                                revision: 1,
                                enhanced: false,
                                peer_to_peer: false,
                                retry_unenhanced: false,
                                ..config.clone()
                            };
                            self.pending_connects
                                .insert(s.token, (config, pd.clone(), s.peer));
                            self.to_core(
                                core,
                                ToCore::Connect {
                                    remote: s.peer,
                                    token: s.token,
                                },
                            );
                            return;
                        }
                    }
                    // The ULP hears how it ended, with RFC 6581 §10's hint
                    // that an unenhanced retry may work.
                    let result = match outcome {
                        Some(Outcome::Failed(f)) => StartupResult::Failed(f),
                        Some(Outcome::Rejected(r)) => StartupResult::Rejected(r),
                        _ => StartupResult::Failed(Failure {
                            reason: FailReason::PeerClosed,
                            term: None,
                            peer: None,
                            retry_unenhanced: false,
                        }),
                    };
                    self.done(core, Some(conn), s.token, result);
                }
            }
        }
    }

    /// Sends what a machine has, asks the ULP about a Request, and ends
    /// finished startups.
    fn progress(&mut self, key: (CoreId, ConnId)) {
        let (core, conn) = key;
        let Some(s) = self.startups.get_mut(&key) else {
            return;
        };
        // The ULP's decision on a Request.
        if let Machine::Responder(m) = &mut s.machine {
            if let Some(request) = m.request().cloned() {
                let (peer, port) = (s.peer, s.port);
                let decision = self
                    .listeners
                    .iter_mut()
                    .find(|l| l.core == core && l.port == port)
                    .map(|l| (l.on_request)(&request, peer))
                    .unwrap_or(Decision::Reject(Vec::new()));
                let ok = match decision {
                    Decision::Accept(accept) => m.accept(&accept),
                    Decision::Reject(pd) => m.reject(&pd),
                };
                if ok.is_err() {
                    m.fail_local();
                }
            }
        }
        let mut out = Vec::new();
        let mut buf = [0u8; 1024];
        loop {
            let n = match &mut s.machine {
                Machine::Initiator(m) => m.poll_transmit(&mut buf),
                Machine::Responder(m) => m.poll_transmit(&mut buf),
            };
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        if !out.is_empty() {
            self.to_core(core, ToCore::Send { conn, octets: out });
        }
        let Some(s) = self.startups.get_mut(&key) else {
            return;
        };
        let outcome = match &s.machine {
            Machine::Initiator(m) => m.outcome().cloned(),
            Machine::Responder(m) => m.outcome().cloned(),
        };
        if let Some(outcome) = outcome {
            let token = s.token;
            self.startups.remove(&key);
            let result = match outcome {
                Outcome::Established(e) => StartupResult::Established(e),
                Outcome::Rejected(r) => StartupResult::Rejected(r),
                Outcome::Failed(f) => StartupResult::Failed(f),
            };
            self.done(core, Some(conn), token, result);
        }
    }

    fn done(&mut self, core: CoreId, conn: Option<ConnId>, token: u64, result: StartupResult) {
        match &result {
            StartupResult::Established(_) => self.stats.established += 1,
            StartupResult::Rejected(_) => self.stats.rejected += 1,
            StartupResult::Failed(_) => self.stats.failed += 1,
        }
        self.to_core(
            core,
            ToCore::Done {
                conn,
                token,
                result,
            },
        );
    }
}

fn local_failure() -> Failure {
    Failure {
        reason: FailReason::Local,
        term: None,
        peer: None,
        retry_unenhanced: false,
    }
}
