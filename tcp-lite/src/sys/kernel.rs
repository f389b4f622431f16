//! [`KernelTransport`]: the [`Transport`] interface over Linux TCP sockets.
//!
//! The interop path (talk to any TCP peer through the host's stack) and the
//! same-run baseline of the benchmarks. Every socket is non-blocking and
//! [`poll`](Transport::poll) does the work, like [`Stack`](crate::Stack): no
//! thread, no blocking call, no clock (time is an argument). Handles,
//! generations, events and their meaning are the ones of `Stack`.
//!
//! What differs from `Stack`:
//!
//! * One copy on each side: [`send_with`](Transport::send_with) fills a
//!   per-connection staging ring (`tx_buffer` octets), which is written to
//!   the kernel at once and again by every poll; received octets are read
//!   into a ring of `rx_buffer` octets, which
//!   [`recv_with`](Transport::recv_with) lends out. The kernel's socket
//!   buffers come on top of these (`SO_SNDBUF`/`SO_RCVBUF` are set to the
//!   same sizes).
//! * The kernel segments the stream, so
//!   [`segment_room`](Transport::segment_room) is `None`: MPA falls back to
//!   FPDUs that may straddle segments (RFC 5044 makes alignment a SHOULD).
//! * The kernel's state is not visible. A connect completes when
//!   `getsockopt(SO_ERROR)` and `getpeername` say so; a connection is
//!   `Closed` once we sent FIN (`shutdown(Write)` after the staging ring
//!   drained) and read the peer's FIN, without waiting for our FIN to be
//!   acknowledged: the kernel finishes that after the socket is dropped.
//! * The user timeout runs while connecting, while octets are staged but not
//!   taken by the kernel, and after our close until the peer's FIN is read;
//!   reads and writes count as progress. Octets the kernel holds
//!   unacknowledged are covered by `TCP_USER_TIMEOUT`, set to the same value
//!   (an `ETIMEDOUT` from the socket is reported as `TimedOut`).
//! * Nothing tells [`poll_at`](Transport::poll_at) that the kernel has input:
//!   it gives the user-timeout deadlines (or `now` while octets are staged),
//!   and the caller polls on its own schedule (busy-polling, or a tick).
//! * Listeners take the connections the kernel completed, at most
//!   [`ACCEPT_BURST_MAX`] per listener and poll; one arriving while
//!   `max_connections` are open is reset at once.
//!
//! Linux only: `TCP_USER_TIMEOUT`, `accept4` and `MSG_NOSIGNAL`.

use core::fmt;
use std::io::{self, ErrorKind, Read};
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4};

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use smoltcp::time::{Duration, Instant};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::config::ConfigError;
use crate::event::{ConnId, Event, EventKind, EventQueue, ListenerId};
use crate::stack::LISTENERS_MAX;
use crate::transport::{ConnectError, ListenError, RecvError, SendError, Transport};

/// Connections a listener takes from the kernel per [`poll`](Transport::poll)
/// (STYLE.md §5: every poller has a named budget).
pub const ACCEPT_BURST_MAX: usize = 64;
/// `read` calls per connection per poll (each fills at most the free part of
/// the receive ring).
pub const RX_READS_MAX: usize = 4;
/// `send` calls per flush of a staging ring: two cover a wrapped ring, the
/// rest retry interrupted calls.
const TX_WRITES_MAX: usize = 4;

/// `MSG_NOSIGNAL`: a write to a reset connection fails with `EPIPE`
/// instead of raising `SIGPIPE`, whatever the host does with that signal.
const MSG_NOSIGNAL: i32 = libc::MSG_NOSIGNAL;

/// `EINPROGRESS`: the answer of a non-blocking connect. Stable Rust has no
/// `ErrorKind` for it.
const EINPROGRESS: i32 = libc::EINPROGRESS;

/// Configuration of a [`KernelTransport`].
#[derive(Debug, Clone, PartialEq)]
pub struct KernelConfig {
    /// Local address of listeners and of active opens; `0.0.0.0` for every
    /// address (listeners) and the kernel's choice (active opens).
    pub bind: Ipv4Addr,
    /// Most connections open at once (active and accepted, until released).
    pub max_connections: usize,
    /// Receive ring per connection in octets, and its `SO_RCVBUF`.
    pub rx_buffer: usize,
    /// Staging ring per connection in octets (how much can be queued ahead
    /// of the kernel), and its `SO_SNDBUF`.
    pub tx_buffer: usize,
    /// `TCP_NODELAY`: Nagle's algorithm off (RFC 9293). On by default
    /// for FPDUs, as [`TcpConfig::nagle`](crate::TcpConfig::nagle) is off.
    pub nodelay: bool,
    /// A connection that makes no progress for this long is aborted with
    /// [`EventKind::TimedOut`]; also its `TCP_USER_TIMEOUT`.
    pub user_timeout: Duration,
    /// TCP keep-alive (`SO_KEEPALIVE`, probes this often when idle; at
    /// most half the user timeout), `None` for off: Linux ends an idle
    /// connection whose peer has not answered its probes for the user
    /// timeout (`TCP_USER_TIMEOUT` bounds keep-alive too), as
    /// [`TcpConfig::keep_alive`](crate::TcpConfig::keep_alive) does.
    pub keep_alive: Option<Duration>,
    /// `SO_REUSEPORT` on listeners: several transports (one per core) may
    /// listen on one port, and the kernel spreads the connections it
    /// accepts over them by a hash of the addresses and ports (off by
    /// default: a second listener on a port is refused).
    pub reuse_port: bool,
    /// Ports whose listeners (with `reuse_port`) take connections by client
    /// host, and how many listeners their group has: each connection goes
    /// to the group's listener that the client's address and the port pick,
    /// whatever its source port, so that all of one host's connections to
    /// the port reach one transport ([`reuse_port_program`], attached with
    /// `SO_ATTACH_REUSEPORT_CBPF`). A host whose index is past the
    /// listeners joined so far (before the group has them all) is placed by
    /// Linux's own hash; a listener that leaves the group (unlisten) moves
    /// the last one into its place, so the hosts are placed afresh. Only
    /// with `reuse_port` (without it a port has one listener: nothing to
    /// choose).
    pub by_host: Vec<(u16, u16)>,
}

/// The multiplier of [`by_host_index`] (2^32 over the golden ratio, odd):
/// addresses a common stride apart still spread over the listeners.
const BY_HOST_MIX: u32 = 0x9E37_79B1;

/// The listener of a group of `listeners` that [`reuse_port_program`]
/// gives a client at `client` connecting to `port`.
pub fn by_host_index(client: Ipv4Addr, port: u16, listeners: u16) -> u16 {
    let mixed = u32::from(client)
        .wrapping_add(u32::from(port))
        .wrapping_mul(BY_HOST_MIX)
        >> 16;
    (mixed % u32::from(listeners.max(1))) as u16
}

/// The classic BPF program of a reuseport group of `listeners` sockets on
/// `port` that spreads connections by client host: the socket at index
/// [`by_host_index`] (the source address plus the port, mixed by a
/// multiplication, mod `listeners`). Linux runs it on a SYN with the
/// packet's data past the TCP header; the source address is read relative
/// to the network header (`SKF_NET_OFF`). An index past the group's
/// sockets makes Linux choose by its hash.
pub fn reuse_port_program(port: u16, listeners: u16) -> [libc::sock_filter; 6] {
    let op = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    [
        // A = the IPv4 source address (offset 12 of the IP header).
        op(
            libc::BPF_LD | libc::BPF_W | libc::BPF_ABS,
            (libc::SKF_NET_OFF + 12) as u32,
        ),
        // A += port: one host's clients of different services may reach
        // different sockets.
        op(libc::BPF_ALU | libc::BPF_ADD | libc::BPF_K, u32::from(port)),
        // Mixed: the upper bits of the product depend on every lower one.
        op(libc::BPF_ALU | libc::BPF_MUL | libc::BPF_K, BY_HOST_MIX),
        op(libc::BPF_ALU | libc::BPF_RSH | libc::BPF_K, 16),
        op(
            libc::BPF_ALU | libc::BPF_MOD | libc::BPF_K,
            u32::from(listeners.max(1)),
        ),
        op(libc::BPF_RET | libc::BPF_A, 0),
    ]
}

impl Default for KernelConfig {
    fn default() -> Self {
        KernelConfig {
            bind: Ipv4Addr::UNSPECIFIED,
            max_connections: 1024,
            rx_buffer: 256 * 1024,
            tx_buffer: 256 * 1024,
            nodelay: true,
            user_timeout: Duration::from_secs(30),
            keep_alive: None,
            reuse_port: false,
            by_host: Vec::new(),
        }
    }
}

impl KernelConfig {
    /// Check the configuration, saying what to fix.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.bind.is_multicast() || self.bind.is_broadcast() {
            return Err(ConfigError("bind must be a unicast address or 0.0.0.0"));
        }
        if self.max_connections == 0 {
            return Err(ConfigError("max_connections must be at least 1"));
        }
        if self.max_connections > crate::MAX_CONNECTIONS_LIMIT {
            return Err(ConfigError("max_connections must be at most 1048576"));
        }
        if !(1024..=1 << 30).contains(&self.rx_buffer) {
            return Err(ConfigError("rx_buffer must be 1 KiB..=1 GiB"));
        }
        if !(1024..=1 << 30).contains(&self.tx_buffer) {
            return Err(ConfigError("tx_buffer must be 1 KiB..=1 GiB"));
        }
        if self.user_timeout == Duration::ZERO || self.user_timeout > crate::USER_TIMEOUT_LIMIT {
            return Err(ConfigError(
                "user_timeout must be above zero and at most 24 hours",
            ));
        }
        if let Some(k) = self.keep_alive {
            if k < Duration::from_secs(1) || k > self.user_timeout / 2 {
                return Err(ConfigError(
                    "keep_alive must be at least 1 s and at most half of user_timeout",
                ));
            }
        }
        Ok(())
    }
}

/// Counters of a [`KernelTransport`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelStats {
    /// Active opens that completed.
    pub connected: u64,
    /// Connections accepted by listeners.
    pub accepted: u64,
    /// Connections reset at once because `max_connections` were open (or
    /// their socket options could not be set).
    pub refused: u64,
    /// `accept` failures other than "nothing pending" (e.g. `EMFILE`).
    pub accept_errors: u64,
    /// Connections that ended with [`EventKind::Closed`].
    pub closed: u64,
    /// Connections reset or refused by the peer, or failed with another
    /// socket error.
    pub reset: u64,
    /// Connections aborted by the user timeout.
    pub timed_out: u64,
}

/// A byte ring of fixed size: the staging or receive buffer of a connection.
struct Ring {
    buf: Box<[u8]>,
    /// Offset of the first octet held.
    start: usize,
    /// Octets held.
    len: usize,
}

impl fmt::Debug for Ring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Ring({}/{})", self.len, self.buf.len())
    }
}

impl Ring {
    fn new(size: usize) -> Self {
        // Zeroed allocation: the pages are only touched as the ring fills.
        Ring {
            buf: vec![0; size].into_boxed_slice(),
            start: 0,
            len: 0,
        }
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Empty, for another connection (the octets stay, unreadable).
    fn clear(&mut self) {
        self.start = 0;
        self.len = 0;
    }

    fn free(&self) -> usize {
        self.buf.len() - self.len
    }

    /// The octets held from the start on, up to the end of the buffer.
    fn data(&self) -> &[u8] {
        let end = (self.start + self.len).min(self.buf.len());
        &self.buf[self.start..end]
    }

    /// Drop `n` octets (at most `data().len()`) from the start.
    fn consume(&mut self, n: usize) {
        let n = n.min(self.len);
        self.len -= n;
        self.start += n;
        if self.len == 0 {
            // An empty ring starts over, so its free space is contiguous.
            self.start = 0;
        } else if self.start >= self.buf.len() {
            self.start -= self.buf.len();
        }
    }

    /// The free space after the octets held, up to the end of the buffer
    /// or to the start of the octets.
    fn space(&mut self) -> &mut [u8] {
        let end = self.start + self.len;
        if end >= self.buf.len() {
            let end = end - self.buf.len();
            &mut self.buf[end..self.start]
        } else {
            &mut self.buf[end..]
        }
    }

    /// Add `n` octets (at most `space().len()`) written into the space.
    fn commit(&mut self, n: usize) {
        self.len = (self.len + n).min(self.buf.len());
    }
}

/// Socket errors that end nothing: try again at the next poll (the user
/// timeout ends a connection that never gets past them).
fn transient(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        ErrorKind::WouldBlock | ErrorKind::Interrupted | ErrorKind::OutOfMemory
    )
}

/// How a socket error ends a connection.
fn failure(error: &io::Error) -> EventKind {
    match error.kind() {
        ErrorKind::TimedOut => EventKind::TimedOut,
        _ => EventKind::Reset,
    }
}

/// The socket options of every connection (a listener's are inherited by
/// the connections it accepts; `TCP_NODELAY` and the user timeout are set
/// again on those). Buffer sizes must be set before the handshake, which
/// announces the window scale (RFC 7323).
fn set_options(socket: &Socket, config: &KernelConfig) -> io::Result<()> {
    socket.set_tcp_nodelay(config.nodelay)?;
    socket.set_recv_buffer_size(config.rx_buffer)?;
    socket.set_send_buffer_size(config.tx_buffer)?;
    set_user_timeout(socket, config)
}

fn set_user_timeout(socket: &Socket, config: &KernelConfig) -> io::Result<()> {
    let timeout = std::time::Duration::from_micros(config.user_timeout.total_micros());
    socket.set_tcp_user_timeout(Some(timeout))?;
    if let Some(k) = config.keep_alive {
        // Linux counts keep-alive in whole seconds.
        let every = std::time::Duration::from_secs(k.total_millis().div_ceil(1000).max(1));
        let probes = timeout.as_secs().div_ceil(every.as_secs()).clamp(1, 127) as u32;
        let keepalive = socket2::TcpKeepalive::new()
            .with_time(every)
            .with_interval(every)
            .with_retries(probes);
        socket.set_tcp_keepalive(&keepalive)?;
    }
    Ok(())
}

/// One connection and what the transport knows about it.
#[derive(Debug)]
struct Conn {
    generation: u32,
    /// `None` once the connection ended (final event or abort): the fd is
    /// closed, what was received stays readable.
    socket: Option<Socket>,
    /// The listener that accepted it; `None` for an active open.
    listener: Option<u16>,
    /// The handshake completed.
    connected: bool,
    /// Staged octets not yet taken by the kernel.
    tx: Ring,
    /// Octets read from the kernel, not yet taken by the user.
    rx: Ring,
    /// Octets queued for sending since the handshake.
    tx_pos: u64,
    /// Octets received by the user since the handshake.
    rx_pos: u64,
    /// Received octets already announced by [`EventKind::Readable`] (or
    /// handed to the user before that).
    rx_announced: u64,
    progress_at: Instant,
    /// Octets moved since the last poll, which stamps `progress_at`.
    progressed: bool,
    open_reported: bool,
    /// The peer's FIN was read.
    peer_fin: bool,
    peer_fin_reported: bool,
    closed_by_us: bool,
    /// `shutdown(Write)` sent our FIN.
    shutdown_sent: bool,
    tx_blocked: bool,
    /// A socket error seen outside poll, which reports it.
    error: Option<EventKind>,
    /// A final event was reported, or the user aborted: no more events.
    finished: bool,
}

impl Conn {
    fn new(
        generation: u32,
        socket: Socket,
        listener: Option<u16>,
        (tx, rx): (Ring, Ring),
        now: Instant,
    ) -> Self {
        Conn {
            generation,
            socket: Some(socket),
            listener,
            connected: listener.is_some(),
            tx,
            rx,
            tx_pos: 0,
            rx_pos: 0,
            rx_announced: 0,
            progress_at: now,
            progressed: false,
            open_reported: false,
            peer_fin: false,
            peer_fin_reported: false,
            closed_by_us: false,
            shutdown_sent: false,
            tx_blocked: false,
            error: None,
            finished: false,
        }
    }

    /// The socket of an established connection without a pending error.
    fn live_socket(&self) -> Option<&Socket> {
        match &self.socket {
            Some(socket) if self.connected && self.error.is_none() => Some(socket),
            _ => None,
        }
    }

    fn may_send(&self) -> bool {
        self.live_socket().is_some() && !self.closed_by_us
    }

    /// Check a connect in progress: the pending socket error, then whether
    /// the socket has a peer.
    fn check_connect(&mut self) {
        let Some(socket) = &self.socket else {
            return;
        };
        match socket.take_error() {
            Ok(Some(e)) | Err(e) => self.error = Some(failure(&e)),
            // ENOTCONN: still in the handshake.
            Ok(None) => {
                if socket.peer_addr().is_ok() {
                    self.connected = true;
                    self.progressed = true;
                }
            }
        }
    }

    /// Write staged octets until the kernel takes no more, then send our
    /// FIN if the user closed and nothing is staged.
    fn flush(&mut self) {
        let socket = match &self.socket {
            Some(socket) if self.connected && self.error.is_none() => socket,
            _ => return,
        };
        let mut error = None;
        let mut wrote = false;
        for _ in 0..TX_WRITES_MAX {
            let data = self.tx.data();
            if data.is_empty() {
                break;
            }
            let offered = data.len();
            match socket.send_with_flags(data, MSG_NOSIGNAL) {
                Ok(n) => {
                    self.tx.consume(n);
                    wrote |= n > 0;
                    if n < offered {
                        break; // The kernel's buffer is full.
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if transient(&e) => break,
                Err(e) => {
                    error = Some(failure(&e));
                    break;
                }
            }
        }
        if error.is_none() && self.closed_by_us && !self.shutdown_sent && self.tx.is_empty() {
            match socket.shutdown(Shutdown::Write) {
                Ok(()) => {
                    self.shutdown_sent = true;
                    wrote = true;
                }
                Err(e) => error = Some(failure(&e)),
            }
        }
        self.progressed |= wrote;
        self.error = self.error.or(error);
    }

    /// Read from the kernel into the receive ring, at most `reads` calls,
    /// until it has nothing more, the ring is full or the peer's FIN came.
    fn fill(&mut self, reads: usize) {
        if self.peer_fin {
            return;
        }
        let mut socket = match &self.socket {
            Some(socket) if self.connected && self.error.is_none() => socket,
            _ => return,
        };
        let mut error = None;
        let mut read = false;
        for _ in 0..reads {
            let space = self.rx.space();
            let room = space.len();
            if room == 0 {
                break;
            }
            match socket.read(space) {
                Ok(0) => {
                    self.peer_fin = true;
                    read = true;
                    break;
                }
                Ok(n) => {
                    self.rx.commit(n);
                    read = true;
                    if n < room {
                        break; // The kernel had no more.
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if transient(&e) => break,
                Err(e) => {
                    error = Some(failure(&e));
                    break;
                }
            }
        }
        // A full ring stops the reads that would see a reset: ask for it.
        if !read && error.is_none() && self.rx.free() == 0 {
            if let Ok(Some(e)) = socket.take_error() {
                error = Some(failure(&e));
            }
        }
        self.progressed |= read;
        self.error = self.error.or(error);
    }

    /// Mark the connection ended by `kind` and close its socket: orderly
    /// after `Closed` (the kernel finishes our FIN on its own), with RST
    /// otherwise (a timeout, or an error the peer may not know of).
    fn finish(&mut self, kind: EventKind) {
        self.finished = true;
        if let Some(socket) = self.socket.take() {
            if kind != EventKind::Closed {
                abort_socket(socket);
            }
        }
    }
}

/// Drop a socket with RST: `SO_LINGER` 0, then close.
fn abort_socket(socket: Socket) {
    // If the option cannot be set the close is orderly instead: still no
    // blocking, and the peer sees the connection end.
    let _ = socket.set_linger(Some(std::time::Duration::ZERO));
}

#[derive(Debug)]
struct Listener {
    port: u16,
    socket: Socket,
}

/// TCP connections over the host's Linux TCP stack, behind [`Transport`].
#[derive(Debug)]
pub struct KernelTransport {
    config: KernelConfig,
    listeners: Vec<Listener>,
    /// The listeners, level-triggered on readability (made at the first
    /// listen): a turn asks once which have connections waiting, and
    /// calls accept4 on those only. Linux's accept allocates a socket
    /// (an inode and a dentry) before it finds the queue empty, so an
    /// accept4 per listener per turn cost a poll-mode core about 2 us per
    /// listener: 9 listeners took a 64 B Write's round trip through
    /// dpwarpd from 5.4 to 22 us.
    epoll: Option<Epoll>,
    /// What the last wait found (one event per listener at most).
    ready: Vec<EpollEvent>,
    slots: Vec<Option<Conn>>,
    /// Generation of each slot index, kept while it is free.
    generations: Vec<u32>,
    free: Vec<u32>,
    /// Rings of released connections, emptied and kept for the next ones:
    /// a new ring is a zero-filled allocation (4 MiB each way in
    /// `bench`), which costs more than a connection's whole setup.
    spare: Vec<(Ring, Ring)>,
    events: EventQueue,
    connections: usize,
    stats: KernelStats,
    /// Accepted connections' classes are told ([`Transport::peer_dscp`]):
    /// asked for ([`Transport::reflect_dscp`]) where Linux reflects them
    /// ([`linux_reflects_tos`]).
    reflect: bool,
}

/// Whether Linux, in the calling thread's network namespace, gives each
/// TCP connection a listener accepts the TOS of the SYN that opened it
/// (on its segments from the SYN-ACK on, and as its IP_TOS):
/// `net.ipv4.tcp_reflect_tos = 1` (Linux 5.10 on; 0, or missing, by
/// default). Without it a listener cannot tell a client's class.
pub fn linux_reflects_tos() -> bool {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_reflect_tos").is_ok_and(|v| v.trim() == "1")
}

impl KernelTransport {
    /// The TOS octet the kernel puts in the connection's segments (ip(7)'s
    /// IP_TOS): its DSCP ([`Transport::set_dscp`]) shifted up by two.
    pub fn tos(&self, conn: ConnId) -> io::Result<u8> {
        let socket = self
            .conn(conn)
            .ok()
            .and_then(|c| c.socket.as_ref())
            .ok_or_else(|| io::Error::new(ErrorKind::NotFound, "no such connection"))?;
        Ok(socket.tos_v4()? as u8)
    }

    /// A transport configured by `config`. Opens nothing yet.
    pub fn new(config: KernelConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(KernelTransport {
            listeners: Vec::new(),
            epoll: None,
            ready: vec![EpollEvent::empty(); LISTENERS_MAX],
            slots: Vec::with_capacity(config.max_connections),
            generations: Vec::with_capacity(config.max_connections),
            free: Vec::new(),
            spare: Vec::new(),
            events: EventQueue::with_capacity(config.max_connections),
            connections: 0,
            stats: KernelStats::default(),
            reflect: false,
            config,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &KernelConfig {
        &self.config
    }

    /// Counters.
    pub fn stats(&self) -> KernelStats {
        self.stats
    }

    /// The local address of a connection's socket, while it is open.
    pub fn local_addr(&self, conn: ConnId) -> Option<SocketAddrV4> {
        let socket = self.conn(conn).ok()?.socket.as_ref()?;
        socket.local_addr().ok()?.as_socket_ipv4()
    }

    fn conn(&self, conn: ConnId) -> Result<&Conn, SendError> {
        match self.slots.get(conn.index as usize) {
            Some(Some(c)) if c.generation == conn.generation => Ok(c),
            _ => Err(SendError::InvalidConnection),
        }
    }

    fn conn_mut(&mut self, conn: ConnId) -> Result<&mut Conn, SendError> {
        match self.slots.get_mut(conn.index as usize) {
            Some(Some(c)) if c.generation == conn.generation => Ok(c),
            _ => Err(SendError::InvalidConnection),
        }
    }

    /// A slot for `socket`, or `None` when `max_connections` are open.
    fn open_slot(
        &mut self,
        socket: Socket,
        listener: Option<u16>,
        now: Instant,
    ) -> Option<(ConnId, &mut Conn)> {
        if self.connections >= self.config.max_connections {
            return None;
        }
        let index = match self.free.pop() {
            Some(index) => index,
            None if self.slots.len() < self.config.max_connections => {
                self.slots.push(None);
                self.generations.push(0);
                (self.slots.len() - 1) as u32
            }
            None => return None,
        };
        let generation = self.generations[index as usize].wrapping_add(1);
        self.generations[index as usize] = generation;
        self.connections += 1;
        let rings = self.spare.pop().unwrap_or_else(|| {
            (
                Ring::new(self.config.tx_buffer),
                Ring::new(self.config.rx_buffer),
            )
        });
        let slot = &mut self.slots[index as usize];
        let conn = slot.insert(Conn::new(generation, socket, listener, rings, now));
        Some((ConnId { index, generation }, conn))
    }

    /// Take the connections the kernel completed on every listener.
    fn accept(&mut self, now: Instant) -> bool {
        // accept4's flags are socket type flags: derive them from socket2's.
        let flags = i32::from(Type::STREAM.nonblocking().cloexec()) & !i32::from(Type::STREAM);
        let Some(epoll) = &self.epoll else {
            return false;
        };
        // Which listeners have connections waiting: one system call.
        let ready = match epoll.wait(&mut self.ready, EpollTimeout::ZERO) {
            Ok(n) => n,
            Err(_) => {
                // EINTR: the next turn asks again.
                return false;
            }
        };
        let mut moved = false;
        for r in 0..ready {
            let port = self.ready[r].data() as u16;
            let Some(l) = self.listeners.iter().position(|l| l.port == port) else {
                continue;
            };
            for _ in 0..ACCEPT_BURST_MAX {
                let socket = match self.listeners[l].socket.accept4(flags) {
                    Ok((socket, _)) => socket,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    // Interrupted, or a connection reset while queued.
                    Err(e)
                        if matches!(
                            e.kind(),
                            ErrorKind::Interrupted | ErrorKind::ConnectionAborted
                        ) =>
                    {
                        continue
                    }
                    Err(_) => {
                        self.stats.accept_errors += 1;
                        break;
                    }
                };
                moved = true;
                let port = self.listeners[l].port;
                let configured = socket.set_tcp_nodelay(self.config.nodelay).is_ok()
                    && set_user_timeout(&socket, &self.config).is_ok();
                if !configured || self.connections >= self.config.max_connections {
                    self.stats.refused += 1;
                    abort_socket(socket);
                    continue;
                }
                if self.open_slot(socket, Some(port), now).is_none() {
                    self.stats.refused += 1;
                }
            }
        }
        moved
    }

    /// Move a connection's octets, turn what happened into events and run
    /// its user timeout.
    fn service(&mut self, index: u32, now: Instant) -> bool {
        let timeout = self.config.user_timeout;
        let Some(Some(c)) = self.slots.get_mut(index as usize) else {
            return false;
        };
        if c.finished {
            return false;
        }
        let conn = ConnId {
            index,
            generation: c.generation,
        };
        if !c.connected && c.error.is_none() {
            c.check_connect();
        }
        if c.connected && !c.open_reported && c.error.is_none() {
            c.open_reported = true;
            match c.listener {
                Some(port) => {
                    self.stats.accepted += 1;
                    self.events
                        .push(conn, EventKind::Accepted(ListenerId(port)));
                }
                None => {
                    self.stats.connected += 1;
                    self.events.push(conn, EventKind::Connected);
                }
            }
        }
        c.flush();
        c.fill(RX_READS_MAX);
        let moved = c.progressed;
        if c.progressed {
            c.progressed = false;
            c.progress_at = now;
        }
        let received = c.rx_pos + c.rx.len as u64;
        if received > c.rx_announced {
            c.rx_announced = received;
            self.events.push(conn, EventKind::Readable);
        }
        if c.tx_blocked && c.may_send() && c.tx.free() > 0 {
            c.tx_blocked = false;
            self.events.push(conn, EventKind::Writable);
        }
        if c.peer_fin && !c.peer_fin_reported {
            c.peer_fin_reported = true;
            self.events.push(conn, EventKind::PeerClosed);
        }
        let ended = match c.error {
            Some(kind) => Some(kind),
            None if c.shutdown_sent && c.peer_fin => Some(EventKind::Closed),
            None => None,
        };
        if let Some(kind) = ended {
            self.end(index, kind);
            return true;
        }
        // The user timeout: waiting for a handshake, for the kernel to take
        // staged octets, or for the peer's FIN after ours; the clock only
        // runs while waiting.
        let waiting = !c.connected || !c.tx.is_empty() || (c.closed_by_us && !c.peer_fin);
        if !waiting {
            c.progress_at = now;
        } else if now >= c.progress_at + timeout {
            self.end(index, EventKind::TimedOut);
            return true;
        }
        moved
    }

    /// Report a connection's final event and close its socket.
    fn end(&mut self, index: u32, kind: EventKind) {
        if let Some(Some(c)) = self.slots.get_mut(index as usize) {
            c.finish(kind);
            match kind {
                EventKind::Closed => self.stats.closed += 1,
                EventKind::TimedOut => self.stats.timed_out += 1,
                _ => self.stats.reset += 1,
            }
            self.events.push(
                ConnId {
                    index,
                    generation: c.generation,
                },
                kind,
            );
        }
    }
}

impl Transport for KernelTransport {
    fn listen(&mut self, port: u16) -> Result<ListenerId, ListenError> {
        if port == 0 {
            return Err(ListenError::Unaddressable);
        }
        if self.listeners.iter().any(|l| l.port == port) {
            return Err(ListenError::PortInUse);
        }
        if self.listeners.len() >= LISTENERS_MAX {
            return Err(ListenError::Io);
        }
        let socket = Socket::new(
            Domain::IPV4,
            Type::STREAM.nonblocking(),
            Some(Protocol::TCP),
        )
        .map_err(|_| ListenError::Io)?;
        socket
            .set_reuse_address(true)
            .map_err(|_| ListenError::Io)?;
        if self.config.reuse_port {
            socket.set_reuse_port(true).map_err(|_| ListenError::Io)?;
        }
        set_options(&socket, &self.config).map_err(|_| ListenError::Io)?;
        let local = SockAddr::from(SocketAddrV4::new(self.config.bind, port));
        // The OS's reason where it is the operator's to fix (found by a
        // review: a port below 1024 without CAP_NET_BIND_SERVICE said only
        // that the socket was refused).
        socket.bind(&local).map_err(|e| match e.kind() {
            ErrorKind::AddrInUse => ListenError::PortInUse,
            ErrorKind::PermissionDenied => ListenError::Denied,
            _ => ListenError::Io,
        })?;
        // The kernel caps the backlog at net.core.somaxconn.
        let backlog = i32::try_from(self.config.max_connections).unwrap_or(i32::MAX);
        socket.listen(backlog).map_err(|e| match e.kind() {
            ErrorKind::AddrInUse => ListenError::PortInUse,
            _ => ListenError::Io,
        })?;
        if let Some(&(_, listeners)) = self
            .config
            .by_host
            .iter()
            .find(|(p, _)| self.config.reuse_port && *p == port)
        {
            // The group's program (each listener attaches the same one).
            let mut program = reuse_port_program(port, listeners);
            let fprog = libc::sock_fprog {
                len: program.len() as u16,
                filter: program.as_mut_ptr(),
            };
            nix::sys::socket::setsockopt(
                &socket,
                nix::sys::socket::sockopt::AttachReusePortCbpf,
                &fprog,
            )
            .map_err(|_| ListenError::Io)?;
        }
        if self.epoll.is_none() {
            self.epoll =
                Some(Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(|_| ListenError::Io)?);
        }
        if let Some(epoll) = &self.epoll {
            epoll
                .add(
                    &socket,
                    EpollEvent::new(EpollFlags::EPOLLIN, u64::from(port)),
                )
                .map_err(|_| ListenError::Io)?;
        }
        self.listeners.push(Listener { port, socket });
        Ok(ListenerId(port))
    }

    fn unlisten(&mut self, listener: ListenerId) {
        if let (Some(epoll), Some(l)) = (
            &self.epoll,
            self.listeners.iter().find(|l| l.port == listener.0),
        ) {
            let _ = epoll.delete(&l.socket);
        }
        // Dropping the socket resets the connections it had not accepted.
        self.listeners.retain(|l| l.port != listener.0);
    }

    fn connect(&mut self, remote: SocketAddrV4, now: Instant) -> Result<ConnId, ConnectError> {
        self.connect_marked(remote, now, 0)
    }

    /// IP_TOS is set before connect(2), so the SYN carries the class.
    fn connect_marked(
        &mut self,
        remote: SocketAddrV4,
        now: Instant,
        dscp: u8,
    ) -> Result<ConnId, ConnectError> {
        assert!(dscp < 64, "a DSCP is six bits: {dscp}");
        if remote.ip().is_unspecified() || remote.port() == 0 {
            return Err(ConnectError::Unaddressable);
        }
        if self.connections >= self.config.max_connections {
            return Err(ConnectError::TooManyConnections);
        }
        let socket = Socket::new(
            Domain::IPV4,
            Type::STREAM.nonblocking(),
            Some(Protocol::TCP),
        )
        .map_err(|_| ConnectError::Io)?;
        set_options(&socket, &self.config).map_err(|_| ConnectError::Io)?;
        if dscp != 0 {
            socket
                .set_tos_v4(u32::from(dscp) << 2)
                .map_err(|_| ConnectError::Io)?;
        }
        if !self.config.bind.is_unspecified() {
            socket
                .bind(&SockAddr::from(SocketAddrV4::new(self.config.bind, 0)))
                .map_err(|e| match e.kind() {
                    ErrorKind::AddrInUse => ConnectError::NoPort,
                    _ => ConnectError::Io,
                })?;
        }
        let (connected, error) = match socket.connect(&SockAddr::from(remote)) {
            Ok(()) => (true, None),
            // The usual answer of a non-blocking connect: poll finds out.
            Err(e) if e.raw_os_error() == Some(EINPROGRESS) => (false, None),
            Err(e) => match e.kind() {
                ErrorKind::WouldBlock | ErrorKind::Interrupted => (false, None),
                // No local port left for this remote address.
                ErrorKind::AddrNotAvailable | ErrorKind::AddrInUse => {
                    return Err(ConnectError::NoPort)
                }
                ErrorKind::NetworkUnreachable => return Err(ConnectError::Unaddressable),
                // Refused (or failed) at once, as loopback can: reported by
                // the next poll, as for any other refusal.
                ErrorKind::ConnectionRefused
                | ErrorKind::ConnectionReset
                | ErrorKind::HostUnreachable
                | ErrorKind::TimedOut => (false, Some(failure(&e))),
                _ => return Err(ConnectError::Io),
            },
        };
        let (id, conn) = self
            .open_slot(socket, None, now)
            .ok_or(ConnectError::TooManyConnections)?;
        conn.connected = connected;
        conn.error = error;
        Ok(id)
    }

    fn send_with<R>(
        &mut self,
        conn: ConnId,
        max: usize,
        fill: impl FnOnce(&mut [u8]) -> (usize, R),
    ) -> Result<R, SendError> {
        let c = self.conn_mut(conn)?;
        if !c.may_send() {
            return Err(SendError::InvalidState);
        }
        let space = c.tx.space();
        let offered = space.len().min(max);
        let (written, result) = fill(&mut space[..offered]);
        let written = written.min(offered);
        c.tx.commit(written);
        c.tx_pos += written as u64;
        // Blocked: the caller wanted more than the space and filled all of it.
        if offered < max && written == offered {
            c.tx_blocked = true;
        }
        if written > 0 {
            // Out at once, not at the next poll: latency.
            c.flush();
        }
        Ok(result)
    }

    fn send_space(&self, conn: ConnId) -> Result<usize, SendError> {
        let c = self.conn(conn)?;
        if !c.may_send() {
            return Err(SendError::InvalidState);
        }
        Ok(c.tx.free())
    }

    fn segment_room(&mut self, conn: ConnId) -> Result<Option<usize>, SendError> {
        self.conn(conn)?;
        Ok(None)
    }

    fn endpoints(&self, conn: ConnId) -> Result<(SocketAddrV4, SocketAddrV4), SendError> {
        let socket = self
            .conn(conn)?
            .socket
            .as_ref()
            .ok_or(SendError::InvalidState)?;
        let local = socket.local_addr().ok().and_then(|a| a.as_socket_ipv4());
        let peer = socket.peer_addr().ok().and_then(|a| a.as_socket_ipv4());
        match (local, peer) {
            (Some(local), Some(peer)) => Ok((local, peer)),
            _ => Err(SendError::InvalidState),
        }
    }

    fn send_position(&self, conn: ConnId) -> Result<u64, SendError> {
        Ok(self.conn(conn)?.tx_pos)
    }

    fn recv_with<R>(
        &mut self,
        conn: ConnId,
        take: impl FnOnce(&[u8], u64) -> (usize, R),
    ) -> Result<R, RecvError> {
        let c = self
            .conn_mut(conn)
            .map_err(|_| RecvError::InvalidConnection)?;
        if c.rx.is_empty() {
            // One read now, so a reply does not wait for the next poll.
            c.fill(1);
        }
        let data = c.rx.data();
        if data.is_empty() {
            if c.peer_fin {
                return Err(RecvError::Finished);
            }
            if c.live_socket().is_none() {
                return Err(RecvError::InvalidState);
            }
        }
        let position = c.rx_pos;
        let (taken, result) = take(data, position);
        let seen = position + data.len() as u64;
        let taken = taken.min(data.len());
        c.rx.consume(taken);
        c.rx_pos += taken as u64;
        // Octets the user has seen need no Readable.
        c.rx_announced = c.rx_announced.max(seen);
        Ok(result)
    }

    fn recv_queue(&self, conn: ConnId) -> Result<usize, RecvError> {
        let c = self.conn(conn).map_err(|_| RecvError::InvalidConnection)?;
        Ok(c.rx.len)
    }

    fn close(&mut self, conn: ConnId) -> Result<(), SendError> {
        let c = self.conn_mut(conn)?;
        if !c.closed_by_us {
            c.closed_by_us = true;
            // FIN now if nothing is staged (and the handshake is done).
            c.flush();
        }
        Ok(())
    }

    fn abort(&mut self, conn: ConnId) -> Result<(), SendError> {
        let c = self.conn_mut(conn)?;
        c.finished = true;
        if let Some(socket) = c.socket.take() {
            abort_socket(socket);
        }
        self.events.forget(conn.index);
        Ok(())
    }

    fn set_dscp(&mut self, conn: ConnId, dscp: u8) -> Result<(), SendError> {
        assert!(dscp < 64, "a DSCP is six bits: {dscp}");
        let socket = self
            .conn(conn)?
            .socket
            .as_ref()
            .ok_or(SendError::InvalidState)?;
        // IP_TOS (ip(7)): the kernel keeps the ECN bits it manages.
        socket
            .set_tos_v4(u32::from(dscp) << 2)
            .map_err(|_| SendError::InvalidState)
    }

    fn dscp(&self, conn: ConnId) -> u8 {
        self.tos(conn).map_or(0, |tos| tos >> 2)
    }

    /// Linux's own reflection (`net.ipv4.tcp_reflect_tos`, host-wide in
    /// the namespace): asked for, it is told where Linux does it
    /// ([`linux_reflects_tos`], read now), and nothing is told where it
    /// does not.
    fn reflect_dscp(&mut self, on: bool) {
        self.reflect = on && linux_reflects_tos();
    }

    /// An accepted connection's class: the TOS Linux gave it from its SYN
    /// (its IP_TOS), while reflecting ([`Transport::reflect_dscp`]).
    fn peer_dscp(&self, conn: ConnId) -> Option<u8> {
        let c = self.conn(conn).ok()?;
        (self.reflect && c.listener.is_some()).then(|| self.dscp(conn))
    }

    fn release(&mut self, conn: ConnId) {
        if self.conn(conn).is_err() {
            return;
        }
        if let Some(c) = self.slots[conn.index as usize].take() {
            if let Some(socket) = c.socket {
                abort_socket(socket);
            }
            let (mut tx, mut rx) = (c.tx, c.rx);
            tx.clear();
            rx.clear();
            self.spare.push((tx, rx));
            self.connections -= 1;
            self.events.forget(conn.index);
            self.free.push(conn.index);
        }
    }

    fn poll(&mut self, now: Instant) -> bool {
        let mut moved = self.accept(now);
        for index in 0..self.slots.len() as u32 {
            moved |= self.service(index, now);
        }
        moved
    }

    fn poll_at(&mut self, now: Instant) -> Option<Instant> {
        let timeout = self.config.user_timeout;
        let mut at: Option<Instant> = None;
        for c in self.slots.iter().flatten() {
            if c.finished || c.socket.is_none() {
                continue;
            }
            if !c.tx.is_empty() && c.live_socket().is_some() {
                return Some(now);
            }
            if !c.connected || (c.closed_by_us && !c.peer_fin) {
                let deadline = c.progress_at + timeout;
                at = Some(at.map_or(deadline, |at| at.min(deadline)));
            }
        }
        at
    }

    fn next_event(&mut self) -> Option<Event> {
        self.events.pop()
    }

    fn connections(&self) -> usize {
        self.connections
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_wraps_and_starts_over() {
        let mut ring = Ring::new(8);
        assert_eq!(ring.space().len(), 8);
        ring.space()[..6].copy_from_slice(b"abcdef");
        ring.commit(6);
        assert_eq!(ring.data(), b"abcdef");
        ring.consume(4);
        assert_eq!(ring.data(), b"ef");
        // Free space: 2 at the end, then 4 at the front.
        assert_eq!(ring.space().len(), 2);
        ring.space().copy_from_slice(b"gh");
        ring.commit(2);
        assert_eq!(ring.space().len(), 4);
        ring.space()[..3].copy_from_slice(b"ijk");
        ring.commit(3);
        assert_eq!(ring.free(), 1);
        assert_eq!(ring.data(), b"efgh");
        ring.consume(4);
        assert_eq!(ring.data(), b"ijk");
        ring.consume(3);
        assert!(ring.is_empty());
        assert_eq!(ring.space().len(), 8);
    }

    #[test]
    fn config_is_checked() {
        assert_eq!(KernelConfig::default().validate(), Ok(()));
        let bad = [
            KernelConfig {
                max_connections: 0,
                ..KernelConfig::default()
            },
            KernelConfig {
                rx_buffer: 100,
                ..KernelConfig::default()
            },
            KernelConfig {
                tx_buffer: 2 << 30,
                ..KernelConfig::default()
            },
            KernelConfig {
                user_timeout: Duration::ZERO,
                ..KernelConfig::default()
            },
            KernelConfig {
                bind: Ipv4Addr::BROADCAST,
                ..KernelConfig::default()
            },
        ];
        for config in bad {
            assert!(KernelTransport::new(config).is_err());
        }
    }

    /// Keep-alive on: every connection's socket probes at the interval
    /// (Linux ends it once the user timeout passes unanswered); off, none.
    #[test]
    fn keep_alive_is_set_on_each_socket() {
        let on = KernelConfig {
            keep_alive: Some(Duration::from_secs(10)),
            ..KernelConfig::default()
        };
        assert_eq!(on.validate(), Ok(()));
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        set_user_timeout(&socket, &on).unwrap();
        assert!(socket.keepalive().unwrap());
        assert_eq!(
            socket.tcp_keepalive_time().unwrap(),
            std::time::Duration::from_secs(10)
        );
        assert_eq!(
            socket.tcp_keepalive_interval().unwrap(),
            std::time::Duration::from_secs(10)
        );
        assert_eq!(socket.tcp_keepalive_retries().unwrap(), 3);
        let off = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        set_user_timeout(&off, &KernelConfig::default()).unwrap();
        assert!(!off.keepalive().unwrap());
        for k in [0, 16] {
            let bad = KernelConfig {
                keep_alive: Some(Duration::from_secs(k)),
                ..KernelConfig::default()
            };
            assert!(bad.validate().is_err(), "{k} s");
        }
    }
}
