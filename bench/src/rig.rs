//! RNICs joined by a transport. Each [`Endpoint`] is a whole RNIC: its TCP
//! (a tcp-lite transport), a control-plane thread, and an RNIC engine; one
//! thread steps it, as one poll-mode core would.
//!
//! A [`Rig`] is a client endpoint and, in process, a [`Server`] endpoint;
//! for `--server`/`--client` runs the server is in another process (or
//! host) and the rig holds the client alone. Every size of a run opens its
//! own connections, announcing the workload in MPA private data
//! ([`crate::hello`]), so the in-process and the remote server are one code.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration as StdDuration, Instant as StdInstant};

use control::mpa::StartupConfig;
use control::runtime::{Handoff, StartupResult};
use dataplane::CoreTransport;
use rnic_engine::verbs::{QpHandle, RemoteAddr};
use tcp_lite::link::{self, LinkConfig, LinkEnd};
use tcp_lite::sys::kernel::{KernelConfig, KernelTransport};
use tcp_lite::sys::netns::{self, Netns};
use tcp_lite::sys::tap::TapDevice;
use tcp_lite::{CongestionControl, Stack, StackConfig, TcpConfig};

use crate::endpoint::{now, Endpoint};
use crate::hello::{self, ClientHello, ServerHello};
use crate::responder::Server;
use crate::spec::Spec;

/// How long connection set-up and teardown may take.
const SETUP_LIMIT: StdDuration = StdDuration::from_secs(10);

/// A client's QP and what it addresses on the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pair {
    /// The client's QP.
    pub qp: QpHandle,
    /// The server's memory (its first octet; slots are offsets from it).
    pub remote: RemoteAddr,
}

/// A client RNIC and, in process, its server.
pub struct Rig<C: CoreTransport, S: CoreTransport> {
    /// The side that opens connections and drives the workload.
    pub client: Endpoint<C>,
    /// The server, when it runs in this process.
    pub server: Option<Server<S>>,
    server_addr: SocketAddrV4,
    startup: StartupConfig,
    /// This run's name in the hello.
    run: u64,
}

/// A name for this process's run: its PID and the clock's nanoseconds.
fn run_id() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (u64::from(std::process::id()) << 32) ^ nanos
}

impl<C: CoreTransport, S: CoreTransport> Rig<C, S> {
    /// Steps every RNIC in this process once.
    pub fn step(&mut self) -> Result<(), String> {
        let now = now();
        self.client.step(now);
        if let Some(server) = &mut self.server {
            server.step(now)?;
        }
        Ok(())
    }

    fn wait_setup(
        &mut self,
        what: &str,
        done: &mut dyn FnMut(&mut Self) -> bool,
    ) -> Result<(), String> {
        let start = StdInstant::now();
        while !done(self) {
            if start.elapsed() > SETUP_LIMIT {
                return Err(format!("{what} took more than {} s", SETUP_LIMIT.as_secs()));
            }
            self.step()?;
        }
        Ok(())
    }

    /// Opens the connections of one workload (`spec.qps` of them); `last`
    /// tells a remote server this is the client's last size.
    pub fn open(&mut self, spec: &Spec, last: bool) -> Result<Vec<Pair>, String> {
        let mut tokens = Vec::with_capacity(spec.qps);
        for qi in 0..spec.qps {
            let h = ClientHello {
                op: spec.op,
                mode: spec.mode,
                size: spec.size as u32,
                depth: spec.depth as u16,
                qi: qi as u16,
                qps: spec.qps as u16,
                last,
                stag: self.client.mr.stag,
                to: self.client.mr.base_to,
                run: self.run,
            };
            let token =
                self.client
                    .control
                    .connect(0, self.server_addr, self.startup.clone(), &h.encode());
            tokens.push(token);
        }
        let mut ended: Vec<(Handoff, Option<QpHandle>)> = Vec::new();
        let want = spec.qps;
        let addr = self.server_addr;
        let waited = self.wait_setup(&format!("connecting {want} QP(s) to {addr}"), &mut |rig| {
            ended.extend(rig.client.take_handoffs());
            ended.len() >= want
        });
        if let Err(why) = waited {
            // Those that did connect go again.
            for qp in ended.iter().filter_map(|(_, qp)| *qp) {
                self.client.close(qp);
            }
            return Err(why);
        }
        let mut pairs = Vec::with_capacity(want);
        let mut failure = None;
        for token in tokens {
            let Some((handoff, qp)) = ended.iter().find(|(h, _)| h.token == token) else {
                failure.get_or_insert_with(|| "a connection never ended its startup".to_string());
                continue;
            };
            match (&handoff.result, qp) {
                (StartupResult::Established(e), Some(qp)) => {
                    match ServerHello::decode(&e.peer_private_data) {
                        Ok(s) => pairs.push(Pair {
                            qp: *qp,
                            remote: RemoteAddr {
                                stag: s.stag,
                                to: s.to,
                            },
                        }),
                        Err(why) => {
                            failure.get_or_insert(why);
                            self.client.close(*qp);
                        }
                    }
                }
                (StartupResult::Established(_), None) => {
                    failure.get_or_insert_with(|| "no QP for a connection".into());
                }
                (StartupResult::Rejected(r), _) => {
                    failure.get_or_insert_with(|| {
                        format!(
                            "the server refused: {}",
                            hello::decode_reject(&r.private_data)
                        )
                    });
                }
                (StartupResult::Failed(f), _) => {
                    failure.get_or_insert_with(|| {
                        format!("connecting to {addr} failed: {}", f.reason)
                    });
                }
            }
        }
        if let Some(why) = failure {
            let _ = self.close(&pairs);
            return Err(why);
        }
        Ok(pairs)
    }

    /// Closes the connections of `pairs` in order and waits until they are
    /// gone on this side (and on the in-process server).
    pub fn close(&mut self, pairs: &[Pair]) -> Result<(), String> {
        for p in pairs {
            self.client.close(p.qp);
        }
        self.wait_setup("closing the connections", &mut |rig| {
            let _ = rig.client.take_ended();
            rig.client.open_connections() == 0
                && rig
                    .server
                    .as_ref()
                    .is_none_or(|s| s.endpoint.open_connections() == 0)
        })
    }
}

/// Which transport joins the two RNICs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportKind {
    /// tcp-lite over the in-memory link: no NIC, no root, no DPDK.
    Embedded,
    /// Linux TCP over loopback.
    Kernel,
    /// tcp-lite over a TAP device, to Linux TCP in a network namespace.
    Tap,
    /// Linux TCP to a `bench --server` in another process or host.
    Remote,
}

impl TransportKind {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            TransportKind::Embedded => "embedded",
            TransportKind::Kernel => "kernel",
            TransportKind::Tap => "tap",
            TransportKind::Remote => "remote",
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
    /// IP MTU of the link.
    pub mtu: usize,
    /// Octets of registered memory on each side.
    pub memory: usize,
    /// Port of the server's listener.
    pub port: u16,
    /// Embedded link: smoltcp computes and checks TCP/IP checksums in
    /// software, instead of the link offloading them as a NIC does.
    pub sw_checksums: bool,
}

impl RigConfig {
    /// The MPA start-up both sides use.
    pub fn startup(&self) -> StartupConfig {
        StartupConfig {
            crc: self.crc,
            markers: self.markers,
            ..StartupConfig::default()
        }
    }
}

/// A client RNIC on `client` and an in-process server RNIC on `server`
/// listening at `server_addr`, ready once the listener is up.
fn in_process<C: CoreTransport, S: CoreTransport>(
    client: C,
    client_emss: usize,
    server: S,
    server_emss: usize,
    server_addr: Ipv4Addr,
    config: &RigConfig,
) -> Result<Rig<C, S>, String> {
    let mut rig = Rig {
        client: Endpoint::new(client, client_emss, 1, config.memory),
        server: Some(Server::new(
            server,
            server_emss,
            config.memory,
            config.port,
            config.startup(),
        )),
        server_addr: SocketAddrV4::new(server_addr, config.port),
        startup: config.startup(),
        run: run_id(),
    };
    settle(&mut rig)?;
    Ok(rig)
}

/// Waits for the in-process server's listener before anyone connects.
fn settle<C: CoreTransport, S: CoreTransport>(rig: &mut Rig<C, S>) -> Result<(), String> {
    match &mut rig.server {
        Some(server) => server.wait_listening(),
        None => Ok(()),
    }
}

/// Two RNICs on tcp-lite over the in-memory link.
pub fn embedded(config: &RigConfig) -> Result<Rig<Stack<LinkEnd>, Stack<LinkEnd>>, String> {
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
    in_process(client, ce, server, se, s_addr, config)
}

/// Two RNICs on Linux TCP over loopback.
pub fn kernel(config: &RigConfig) -> Result<Rig<KernelTransport, KernelTransport>, String> {
    let kc = KernelConfig {
        bind: Ipv4Addr::LOCALHOST,
        rx_buffer: 4 << 20,
        tx_buffer: 4 << 20,
        ..KernelConfig::default()
    };
    let client = KernelTransport::new(kc.clone()).map_err(|e| e.to_string())?;
    let server = KernelTransport::new(kc).map_err(|e| e.to_string())?;
    // The loopback MTU is 65536; FPDUs are sized for the configured path,
    // as on the embedded link.
    let emss = config.mtu - 40;
    in_process(client, emss, server, emss, Ipv4Addr::LOCALHOST, config)
}

/// Addresses of the TAP rig: the kernel end (in the namespace) and ours.
pub const TAP_KERNEL_ADDR: Ipv4Addr = Ipv4Addr::new(10, 211, 0, 1);
/// Our (tcp-lite's) address on the TAP link.
pub const TAP_STACK_ADDR: Ipv4Addr = Ipv4Addr::new(10, 211, 0, 2);

/// The client on tcp-lite over a TAP device, the server on Linux TCP at the
/// device's kernel end, inside a namespace made for the run. The calling
/// thread enters the namespace (so the server's sockets live there); the
/// returned [`Netns`] deletes both when dropped, and must outlive the rig.
pub fn tap(config: &RigConfig) -> Result<(Rig<Stack<TapDevice>, KernelTransport>, Netns), String> {
    if let Some(why) = tcp_lite::sys::tap::namespace_unavailable() {
        return Err(format!("the TAP transport cannot run here: {why}"));
    }
    let pid = std::process::id();
    let (device, net) = netns::tap_in_netns(
        &format!("dpwbench{pid}"),
        &format!("dpwb{}", pid % 100_000_000),
        config.mtu,
        TAP_KERNEL_ADDR,
        24,
    )
    .map_err(|e| format!("setting up the TAP device: {e}"))?;
    net.enter()
        .map_err(|e| format!("entering the namespace: {e}"))?;
    let tcp = TcpConfig {
        rx_buffer: 256 * 1024,
        tx_buffer: 256 * 1024,
        ..TcpConfig::default()
    };
    let mut c = StackConfig::new([2, 0, 0, 0, 0, 1], TAP_STACK_ADDR);
    c.tcp = tcp;
    let client = Stack::new(c, device, now()).map_err(|e| e.to_string())?;
    let kc = KernelConfig {
        bind: TAP_KERNEL_ADDR,
        rx_buffer: 4 << 20,
        tx_buffer: 4 << 20,
        ..KernelConfig::default()
    };
    let server = KernelTransport::new(kc).map_err(|e| e.to_string())?;
    let emss = client.emss();
    Ok((
        in_process(client, emss, server, emss, TAP_KERNEL_ADDR, config)?,
        net,
    ))
}

/// A client on Linux TCP whose server is a `bench --server` at `server`.
pub fn remote(
    config: &RigConfig,
    server: SocketAddrV4,
) -> Result<Rig<KernelTransport, KernelTransport>, String> {
    let kc = KernelConfig {
        rx_buffer: 4 << 20,
        tx_buffer: 4 << 20,
        ..KernelConfig::default()
    };
    let client = KernelTransport::new(kc).map_err(|e| e.to_string())?;
    let emss = config.mtu - 40;
    Ok(Rig {
        client: Endpoint::new(client, emss, 1, config.memory),
        server: None,
        server_addr: server,
        startup: config.startup(),
        run: run_id(),
    })
}
