//! Two whole RNICs joined by a transport: each endpoint has its TCP (a
//! tcp-lite transport), a control-plane thread, and an RNIC engine; one
//! thread steps both, as one poll-mode core would.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant as StdInstant};

use control::mpa::{Accept, StartupConfig};
use control::runtime::{ControlPlane, CoreLink, Decision, Handoff, StartupResult};
use rnic_engine::cq::{Wc, WcOpcode, WcStatus};
use rnic_engine::mem::{Access, Pd, Region};
use rnic_engine::verbs::{CqHandle, Mr, QpHandle, QpInit, RemoteAddr, Rnic, RnicConfig, Sge};
use tcp_lite::link::{self, LinkConfig, LinkEnd};
use tcp_lite::sys::kernel::{KernelConfig, KernelTransport};
use tcp_lite::{CongestionControl, ConnId, Instant, Stack, StackConfig, TcpConfig, Transport};

/// Send and receive queue depth of every QP.
pub const QUEUE_DEPTH: usize = 512;
/// Completions per CQ.
const CQ_DEPTH: usize = 8192;

/// The process's clock as tcp-lite time.
pub fn now() -> Instant {
    static EPOCH: std::sync::OnceLock<StdInstant> = std::sync::OnceLock::new();
    let epoch = EPOCH.get_or_init(StdInstant::now);
    Instant::from_micros(epoch.elapsed().as_micros() as i64 + 1)
}

/// One RNIC: its transport, its control plane, its engine and memory.
pub struct Endpoint<T: Transport> {
    /// TCP.
    pub transport: T,
    control: ControlPlane,
    link: CoreLink,
    /// The engine.
    pub rnic: Rnic,
    pd: Pd,
    /// The CQ of every QP.
    pub cq: CqHandle,
    emss: usize,
    /// Registered memory, remotely readable, writable and atomic.
    pub region: Arc<Region>,
    /// Its registration.
    pub mr: Mr,
    /// Connections handed over, with their QPs.
    pub qps: Vec<(ConnId, QpHandle)>,
    handoffs: Vec<Handoff>,
    wcs: Vec<Wc>,
}

impl<T: Transport> Endpoint<T> {
    fn new(transport: T, emss: usize, seed: u64, memory: usize) -> Endpoint<T> {
        let (control, mut links) = ControlPlane::start(1);
        let mut rnic = Rnic::new(RnicConfig {
            stag_seed: seed,
            ..RnicConfig::default()
        });
        let pd = rnic.alloc_pd().expect("a fresh RNIC has room for a PD");
        let cq = rnic
            .create_cq(CQ_DEPTH)
            .expect("a fresh RNIC has room for a CQ");
        let region = Region::new(memory);
        let access = Access::LOCAL_WRITE
            | Access::REMOTE_WRITE
            | Access::REMOTE_READ
            | Access::REMOTE_ATOMIC;
        let mr = rnic
            .reg_region(pd, region.clone(), access)
            .expect("registration");
        let blank = Wc {
            wr_id: 0,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            qp: QpHandle(0),
            byte_len: 0,
            imm: None,
            invalidated: None,
            solicited: false,
        };
        Endpoint {
            transport,
            control,
            link: links.remove(0),
            rnic,
            pd,
            cq,
            emss,
            region,
            mr,
            qps: Vec::new(),
            handoffs: Vec::new(),
            wcs: vec![blank; 256],
        }
    }

    /// One turn of the core's loop: TCP, the control plane's link, and the
    /// engine's FPDUs both ways.
    pub fn step(&mut self, now: Instant) {
        self.transport.poll(now);
        while let Some(event) = self.transport.next_event() {
            self.link.handle_event(&mut self.transport, event);
        }
        self.link.poll(&mut self.transport, now);
        while let Some(handoff) = self.link.next_handoff() {
            if let (StartupResult::Established(e), Some(conn)) = (&handoff.result, handoff.conn) {
                let init = QpInit {
                    pd: self.pd,
                    send_cq: self.cq,
                    recv_cq: self.cq,
                    srq: None,
                    sq_size: QUEUE_DEPTH,
                    rq_size: QUEUE_DEPTH,
                };
                let qp = self.rnic.create_qp(init).expect("QP");
                self.rnic
                    .connect(qp, e.connection(self.emss, 65535))
                    .expect("connect");
                self.qps.push((conn, qp));
            }
            self.handoffs.push(handoff);
        }
        for &(conn, qp) in &self.qps {
            let rnic = &mut self.rnic;
            let _ = self.transport.send_with(conn, 1 << 20, |space| {
                let n = rnic.poll_transmit(qp, space).unwrap_or(0);
                (n, ())
            });
            loop {
                let got = self.transport.recv_with(conn, |data, _| {
                    let n = rnic.handle_stream(qp, data).unwrap_or(0);
                    (n, n)
                });
                match got {
                    Ok(n) if n > 0 => {}
                    _ => break,
                }
            }
        }
        self.transport.poll(now);
    }

    /// Completions waiting, into `out`.
    pub fn poll_cq(&mut self, out: &mut Vec<Wc>) {
        loop {
            let n = self.rnic.poll_cq(self.cq, &mut self.wcs).unwrap_or(0);
            out.extend_from_slice(&self.wcs[..n]);
            if n < self.wcs.len() {
                return;
            }
        }
    }

    /// An SGE of our memory.
    pub fn sge(&self, offset: u64, len: u32) -> Sge {
        Sge {
            stag: self.mr.stag,
            to: self.mr.base_to + offset,
            len,
        }
    }

    /// Our memory as the peer addresses it.
    pub fn remote(&self, offset: u64) -> RemoteAddr {
        RemoteAddr {
            stag: self.mr.stag,
            to: self.mr.base_to + offset,
        }
    }
}

/// Which transport joins the two RNICs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportKind {
    /// tcp-lite over the in-memory link: no NIC, no root, no DPDK.
    Embedded,
    /// Linux TCP over loopback.
    Kernel,
}

impl TransportKind {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            TransportKind::Embedded => "embedded",
            TransportKind::Kernel => "kernel",
        }
    }
}

/// How the RNICs connect.
#[derive(Debug, Clone)]
pub struct RigConfig {
    /// MPA CRC.
    pub crc: bool,
    /// MPA markers (both directions).
    pub markers: bool,
    /// IP MTU of the embedded link.
    pub mtu: usize,
    /// QPs (connections).
    pub qps: usize,
    /// Octets of registered memory on each side.
    pub memory: usize,
    /// Port of the server's listener.
    pub port: u16,
    /// Embedded link: smoltcp computes and checks TCP/IP checksums in
    /// software, instead of the link offloading them as a NIC does.
    pub sw_checksums: bool,
}

/// Two RNICs, connected by `qps` connections: `pairs[i]` is the client's and
/// the server's QP of connection `i`.
pub struct Rig<T: Transport> {
    /// The side that opens connections and drives the workload.
    pub client: Endpoint<T>,
    /// The side that listens.
    pub server: Endpoint<T>,
    /// QP pairs, client first.
    pub pairs: Vec<(QpHandle, QpHandle)>,
}

impl<T: Transport> Rig<T> {
    /// Steps both sides once.
    pub fn step(&mut self) {
        let now = now();
        self.client.step(now);
        self.server.step(now);
    }

    fn connect(&mut self, server_addr: Ipv4Addr, config: &RigConfig) -> Result<(), String> {
        let startup = StartupConfig {
            crc: config.crc,
            markers: config.markers,
            ..StartupConfig::default()
        };
        self.server.control.listen(
            0,
            config.port,
            startup.clone(),
            Box::new(|_, _| Decision::Accept(Accept::default())),
        );
        // The listen command reaches the server's core first.
        let start = StdInstant::now();
        while start.elapsed() < StdDuration::from_millis(20) {
            self.step();
        }
        let remote = SocketAddrV4::new(server_addr, config.port);
        for _ in 0..config.qps {
            self.client.control.connect(0, remote, startup.clone(), b"");
        }
        let start = StdInstant::now();
        while self.client.handoffs.len() < config.qps || self.server.handoffs.len() < config.qps {
            if start.elapsed() > StdDuration::from_secs(10) {
                return Err(format!(
                    "only {} of {} connections established after 10 s",
                    self.client.qps.len(),
                    config.qps
                ));
            }
            self.step();
        }
        for h in self.client.handoffs.iter().chain(&self.server.handoffs) {
            if let StartupResult::Failed(f) = &h.result {
                return Err(format!("connection setup failed: {}", f.reason));
            }
        }
        // Connections pair up in order: the client's i-th with the server's
        // i-th (the server learns its peer's port from TCP).
        let mut server_by_peer = Vec::new();
        for &(conn, qp) in &self.server.qps {
            let peer = self
                .server
                .transport
                .endpoints(conn)
                .map(|(_, p)| p.port())
                .unwrap_or(0);
            server_by_peer.push((peer, qp));
        }
        for &(conn, qp) in &self.client.qps {
            let local = self
                .client
                .transport
                .endpoints(conn)
                .map(|(l, _)| l.port())
                .unwrap_or(0);
            let server = server_by_peer
                .iter()
                .find(|(peer, _)| *peer == local)
                .map(|(_, qp)| *qp)
                .ok_or("a connection has no server side")?;
            self.pairs.push((qp, server));
        }
        Ok(())
    }
}

/// Two RNICs on tcp-lite over the in-memory link.
pub fn embedded(config: &RigConfig) -> Result<Rig<Stack<LinkEnd>>, String> {
    let mut link_config = LinkConfig::ethernet(config.mtu);
    // A NIC offloads the TCP/IP checksums (DPDK ports will use that
    // offload); the embedded link does likewise unless asked to compute them.
    link_config.checksums = config.sw_checksums;
    let (end_c, end_s) = link::pair(link_config, 1);
    let (c_addr, s_addr) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    // 256 KiB each way: the window outruns nothing on a zero-delay link, and
    // both rings stay in this core's L2 (1 MiB measured 35 against 70
    // Gbit/s for 64 KiB Writes).
    let tcp = TcpConfig {
        rx_buffer: 256 * 1024,
        tx_buffer: 256 * 1024,
        // The in-memory link never congests.
        congestion: CongestionControl::None,
        ..TcpConfig::default()
    };
    let stack = |mac: u8, addr, end| {
        let mut c = StackConfig::new([2, 0, 0, 0, 0, mac], addr);
        c.tcp = tcp.clone();
        Stack::new(c, end, now()).map_err(|e| e.to_string())
    };
    let client = stack(1, c_addr, end_c)?;
    let server = stack(2, s_addr, end_s)?;
    let (ce, se) = (client.emss(), server.emss());
    let mut rig = Rig {
        client: Endpoint::new(client, ce, 1, config.memory),
        server: Endpoint::new(server, se, 2, config.memory),
        pairs: Vec::new(),
    };
    rig.connect(s_addr, config)?;
    Ok(rig)
}

/// Two RNICs on Linux TCP over loopback.
pub fn kernel(config: &RigConfig) -> Result<Rig<KernelTransport>, String> {
    let kc = KernelConfig {
        bind: Ipv4Addr::LOCALHOST,
        rx_buffer: 4 << 20,
        tx_buffer: 4 << 20,
        ..KernelConfig::default()
    };
    let client = KernelTransport::new(kc.clone()).map_err(|e| e.to_string())?;
    let server = KernelTransport::new(kc).map_err(|e| e.to_string())?;
    // The loopback MTU is 65536; FPDUs are sized for a 9000-octet path, as
    // on the embedded link.
    let emss = config.mtu - 40;
    let mut rig = Rig {
        client: Endpoint::new(client, emss, 1, config.memory),
        server: Endpoint::new(server, emss, 2, config.memory),
        pairs: Vec::new(),
    };
    rig.connect(Ipv4Addr::LOCALHOST, config)?;
    Ok(rig)
}
