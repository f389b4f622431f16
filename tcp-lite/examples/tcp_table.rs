//! tcp-lite's benchmark: goodput and 64 B ping-pong of one connection over
//! the in-memory link (both stacks on this thread), the same figures for
//! plain smoltcp driven the same way (the reference), and for Linux TCP over
//! loopback through `KernelTransport` (two threads). Then one row per tuning
//! knob, and goodput under loss.
//!
//! `cargo run --release -p tcp-lite --example tcp_table [-- --json]`
//!
//! With `--json` the last line is one JSON object of every figure.
//!
//! `--linux-loss P[,P...]` (percent; repeatable) adds a section against
//! Linux on a real path, as root: for P = 0 and each P given, Linux to Linux
//! over a veth pair between two namespaces with P% lost at each end's
//! ingress (nftables), with the veth's offloads on and off, and tcp-lite to
//! Linux over a TAP device into a namespace with P% lost each way at our
//! port ([`tcp_lite::Lossy`], seeded); the ratio of the goodputs, and
//! tcp-lite's loss-recovery counters. `--linux-loss-only` skips the rest.
#![allow(clippy::disallowed_methods)] // A benchmark reads the clock; the library never does.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration as StdDuration, Instant as StdInstant};

use smoltcp::iface::{Config, Interface, SocketSet};
use smoltcp::socket::tcp;
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpAddress, IpCidr};
use tcp_lite::link::{self, Faults, LinkConfig, LinkEnd};
use tcp_lite::sys::kernel::{KernelConfig, KernelTransport};
use tcp_lite::{
    CongestionControl, ConnId, Duration, EventKind, Instant, Stack, StackConfig, TcpConfig,
    Transport,
};

const A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
/// Length of one timed goodput run; the median of [`RUNS`] is reported.
const RUN: StdDuration = StdDuration::from_millis(150);
const RUNS: usize = 9;
/// Round trips timed per ping-pong figure.
const ROUND_TRIPS: usize = 100_000;
/// What one send call hands over at most: one 64 KiB "message" of FPDUs.
const CHUNK: usize = 64 * 1024;

/// The clock both stacks read, as smoltcp time.
struct Clock(StdInstant);

impl Clock {
    fn now(&self) -> Instant {
        Instant::from_micros(self.0.elapsed().as_micros() as i64)
    }
}

/// What a measurement varies.
#[derive(Clone)]
struct Setup {
    mtu: usize,
    checksums: bool,
    tcp: TcpConfig,
    max_burst: Option<usize>,
    faults: Faults,
    latency: Duration,
    /// The DSCP the sending connection marks its segments with (0: none).
    dscp: u8,
    /// Both stacks learn each arriving SYN's class (`reflect_dscp`): every
    /// received frame's headers looked at.
    learn: bool,
}

impl Setup {
    fn new(mtu: usize) -> Setup {
        Setup {
            mtu,
            checksums: true,
            tcp: TcpConfig {
                rx_buffer: 1 << 20,
                tx_buffer: 1 << 20,
                // The in-memory link never congests; real networks use CUBIC.
                congestion: CongestionControl::None,
                ..TcpConfig::default()
            },
            max_burst: None,
            faults: Faults::NONE,
            latency: Duration::ZERO,
            dscp: 0,
            learn: false,
        }
    }

    fn link(&self) -> LinkConfig {
        let mut link = LinkConfig::ethernet(self.mtu);
        link.checksums = self.checksums;
        link.max_burst = self.max_burst;
        link.latency = self.latency;
        link
    }
}

fn stacks(setup: &Setup, clock: &Clock) -> (Stack<LinkEnd>, Stack<LinkEnd>) {
    let (end_a, end_b) = link::pair(setup.link(), 1);
    end_a.set_tx_faults(setup.faults);
    end_b.set_tx_faults(setup.faults);
    let config = |mac: u8, addr| {
        let mut c = StackConfig::new([2, 0, 0, 0, 0, mac], addr);
        c.tcp = setup.tcp.clone();
        c
    };
    let a = Stack::new(config(1, A), end_a, clock.now()).expect("config");
    let b = Stack::new(config(2, B), end_b, clock.now()).expect("config");
    (a, b)
}

/// Open one connection from `a` to `b` over any pair of transports polled
/// by `poll`.
fn open<T: Transport, U: Transport>(
    a: &mut T,
    b: &mut U,
    to: SocketAddrV4,
    clock: &Clock,
) -> (ConnId, ConnId) {
    b.listen(to.port()).expect("listen");
    let client = a.connect(to, clock.now()).expect("connect");
    let (mut connected, mut server) = (false, None);
    let deadline = StdInstant::now() + StdDuration::from_secs(5);
    while !connected || server.is_none() {
        assert!(StdInstant::now() < deadline, "no connection after 5 s");
        a.poll(clock.now());
        b.poll(clock.now());
        while let Some(e) = a.next_event() {
            connected |= e.conn == client && e.kind == EventKind::Connected;
        }
        while let Some(e) = b.next_event() {
            if let EventKind::Accepted(_) = e.kind {
                server = Some(e.conn);
            }
        }
    }
    (client, server.expect("accepted"))
}

/// A ping-pong measurement: sorted round-trip times in ns.
type Latencies = Box<dyn Fn() -> Vec<u64>>;

/// One step of a goodput loop: octets received.
type Step = Box<dyn FnMut() -> usize>;

/// Gbit/s of one run of [`RUN`].
fn run(step: &mut Step) -> f64 {
    let start = StdInstant::now();
    let mut octets = 0;
    while start.elapsed() < RUN {
        octets += step();
    }
    octets as f64 * 8.0 / start.elapsed().as_secs_f64() / 1e9
}

fn median(mut rates: Vec<f64>) -> f64 {
    rates.sort_by(f64::total_cmp);
    rates[rates.len() / 2]
}

/// The Gbit/s of every run of each loop, the runs interleaved (a, b, a,
/// b, …) so that the VM's drift from one second to the next hits both
/// alike. The sender copies from a source buffer (as a framer writes FPDUs)
/// and the receiver copies into a sink, in the tcp-lite and the plain
/// smoltcp loop.
fn goodputs(mut steps: Vec<Step>) -> Vec<Vec<f64>> {
    for step in steps.iter_mut() {
        run(step);
    }
    let mut rates = vec![Vec::new(); steps.len()];
    for _ in 0..RUNS {
        for (step, rates) in steps.iter_mut().zip(rates.iter_mut()) {
            rates.push(run(step));
        }
    }
    rates
}

/// One run after one warm-up run: for the tuning rows, where a row is
/// compared with its neighbours.
fn tcp_lite_goodput_once(setup: &Setup) -> f64 {
    let mut step = tcp_lite_step(setup);
    run(&mut step);
    run(&mut step)
}

fn tcp_lite_step(setup: &Setup) -> Step {
    let clock = Clock(StdInstant::now());
    let (mut a, mut b) = stacks(setup, &clock);
    let (tx, rx) = open(&mut a, &mut b, SocketAddrV4::new(B, 7000), &clock);
    if setup.dscp != 0 {
        a.set_dscp(tx, setup.dscp).expect("an open connection");
    }
    if setup.learn {
        a.reflect_dscp(true);
        b.reflect_dscp(true);
    }
    let source = vec![0x5a; CHUNK];
    let mut sink = vec![0; CHUNK];
    Box::new(move || {
        for _ in 0..2 {
            let _ = a.send_with(tx, CHUNK, |buf| {
                buf.copy_from_slice(&source[..buf.len()]);
                (buf.len(), ())
            });
        }
        let now = clock.now();
        a.poll(now);
        b.poll(now);
        let mut got = 0;
        loop {
            let n = b
                .recv_with(rx, |data, _| {
                    let n = data.len().min(CHUNK);
                    sink[..n].copy_from_slice(&data[..n]);
                    (n, n)
                })
                .unwrap_or(0);
            if n == 0 {
                break;
            }
            got += n;
        }
        got
    })
}

/// Plain smoltcp, driven the same way: the reference tcp-lite is held to.
struct Raw {
    iface: Interface,
    sockets: SocketSet<'static>,
    handle: smoltcp::iface::SocketHandle,
    device: LinkEnd,
}

fn raw_pair(setup: &Setup, clock: &Clock) -> (Raw, Raw) {
    let (end_a, end_b) = link::pair(setup.link(), 1);
    let make = |mut device: LinkEnd, mac: u8, addr: Ipv4Addr| {
        let config = Config::new(HardwareAddress::Ethernet(EthernetAddress([
            2, 0, 0, 0, 0, mac,
        ])));
        let mut iface = Interface::new(config, &mut device, clock.now());
        iface.update_ip_addrs(|a| {
            a.push(IpCidr::new(IpAddress::Ipv4(addr), 24))
                .expect("one address");
        });
        let mut socket = tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0; setup.tcp.rx_buffer]),
            tcp::SocketBuffer::new(vec![0; setup.tcp.tx_buffer]),
        );
        socket.set_nagle_enabled(setup.tcp.nagle);
        socket.set_ack_delay(setup.tcp.ack_delay);
        socket.set_congestion_control(tcp::CongestionControl::None);
        let mut sockets = SocketSet::new(Vec::new());
        let handle = sockets.add(socket);
        Raw {
            iface,
            sockets,
            handle,
            device,
        }
    };
    let mut a = make(end_a, 1, A);
    let mut b = make(end_b, 2, B);
    b.sockets
        .get_mut::<tcp::Socket>(b.handle)
        .listen(7000)
        .expect("listen");
    let cx = a.iface.context();
    a.sockets
        .get_mut::<tcp::Socket>(a.handle)
        .connect(cx, (IpAddress::Ipv4(B), 7000), 49152)
        .expect("connect");
    let deadline = StdInstant::now() + StdDuration::from_secs(5);
    while !a.sockets.get::<tcp::Socket>(a.handle).may_send()
        || !b.sockets.get::<tcp::Socket>(b.handle).may_recv()
    {
        assert!(
            StdInstant::now() < deadline,
            "plain smoltcp did not connect"
        );
        a.poll(clock.now());
        b.poll(clock.now());
    }
    (a, b)
}

impl Raw {
    fn poll(&mut self, now: Instant) {
        self.iface.poll(now, &mut self.device, &mut self.sockets);
    }

    fn socket(&mut self) -> &mut tcp::Socket<'static> {
        self.sockets.get_mut::<tcp::Socket>(self.handle)
    }
}

fn raw_step(setup: &Setup) -> Step {
    let clock = Clock(StdInstant::now());
    let (mut a, mut b) = raw_pair(setup, &clock);
    let source = vec![0x5a; CHUNK];
    let mut sink = vec![0; CHUNK];
    Box::new(move || {
        for _ in 0..2 {
            let _ = a.socket().send(|buf| {
                let n = buf.len().min(CHUNK);
                buf[..n].copy_from_slice(&source[..n]);
                (n, ())
            });
        }
        let now = clock.now();
        a.poll(now);
        b.poll(now);
        let mut got = 0;
        loop {
            let n = b
                .socket()
                .recv(|data| {
                    let n = data.len().min(CHUNK);
                    sink[..n].copy_from_slice(&data[..n]);
                    (n, n)
                })
                .unwrap_or(0);
            if n == 0 {
                break;
            }
            got += n;
        }
        got
    })
}

/// Round-trip times in ns, sorted.
fn sorted(mut samples: Vec<u64>) -> Vec<u64> {
    samples.sort_unstable();
    samples
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)] as f64 / 1000.0
}

/// 64 B from `a` to `b` and back, both stacks polled on this thread.
/// `writes` 2 sends the request as two 32 B writes with a poll between
/// (two small FPDUs back to back): what Nagle's algorithm holds back.
fn tcp_lite_pingpong(setup: &Setup, writes: usize, round_trips: usize) -> Vec<u64> {
    let clock = Clock(StdInstant::now());
    let (mut a, mut b) = stacks(setup, &clock);
    let (ca, cb) = open(&mut a, &mut b, SocketAddrV4::new(B, 7001), &clock);
    let msg = [0x42u8; 64];
    let mut samples = Vec::with_capacity(round_trips);
    for i in 0..round_trips + round_trips / 10 {
        let start = StdInstant::now();
        for w in 0..writes {
            if w > 0 {
                a.poll(clock.now());
            }
            a.send_with(ca, 64 / writes, |buf| {
                buf.copy_from_slice(&msg[..buf.len()]);
                (buf.len(), ())
            })
            .expect("send");
        }
        let mut got = 0;
        while got < 64 {
            let now = clock.now();
            a.poll(now);
            b.poll(now);
            got += b.recv_with(cb, |d, _| (d.len(), d.len())).expect("recv");
        }
        b.send_with(cb, 64, |buf| {
            buf.copy_from_slice(&msg[..buf.len()]);
            (buf.len(), ())
        })
        .expect("send");
        let mut back = 0;
        while back < 64 {
            let now = clock.now();
            b.poll(now);
            a.poll(now);
            back += a.recv_with(ca, |d, _| (d.len(), d.len())).expect("recv");
        }
        if i >= round_trips / 10 {
            samples.push(start.elapsed().as_nanos() as u64);
        }
    }
    sorted(samples)
}

fn raw_pingpong(setup: &Setup) -> Vec<u64> {
    let clock = Clock(StdInstant::now());
    let (mut a, mut b) = raw_pair(setup, &clock);
    let msg = [0x42u8; 64];
    let mut samples = Vec::with_capacity(ROUND_TRIPS);
    for i in 0..ROUND_TRIPS + ROUND_TRIPS / 10 {
        let start = StdInstant::now();
        a.socket().send_slice(&msg).expect("send");
        let mut got = 0;
        while got < 64 {
            let now = clock.now();
            a.poll(now);
            b.poll(now);
            got += b.socket().recv(|d| (d.len(), d.len())).expect("recv");
        }
        b.socket().send_slice(&msg).expect("send");
        let mut back = 0;
        while back < 64 {
            let now = clock.now();
            b.poll(now);
            a.poll(now);
            back += a.socket().recv(|d| (d.len(), d.len())).expect("recv");
        }
        if i >= ROUND_TRIPS / 10 {
            samples.push(start.elapsed().as_nanos() as u64);
        }
    }
    sorted(samples)
}

fn kernel_config() -> KernelConfig {
    KernelConfig {
        bind: Ipv4Addr::LOCALHOST,
        rx_buffer: 4 << 20,
        tx_buffer: 4 << 20,
        ..KernelConfig::default()
    }
}

fn kernel_port(offset: u16) -> u16 {
    20_000 + (std::process::id() % 5_000) as u16 * 2 + offset
}

/// Linux TCP over loopback: the receiver runs on a second thread.
fn kernel_goodput() -> f64 {
    let clock = Clock(StdInstant::now());
    let port = kernel_port(0);
    let mut server = KernelTransport::new(kernel_config()).expect("kernel transport");
    server.listen(port).expect("listen");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop_rx = stop.clone();
    let start_time = clock.0;
    let receiver = std::thread::spawn(move || {
        let clock = Clock(start_time);
        let mut conn = None;
        let mut sink = vec![0; CHUNK];
        while !stop_rx.load(std::sync::atomic::Ordering::Relaxed) {
            server.poll(clock.now());
            while let Some(e) = server.next_event() {
                if let EventKind::Accepted(_) = e.kind {
                    conn = Some(e.conn);
                }
            }
            if let Some(conn) = conn {
                while let Ok(n) = server.recv_with(conn, |data, _| {
                    let n = data.len().min(CHUNK);
                    sink[..n].copy_from_slice(&data[..n]);
                    (n, n)
                }) {
                    if n == 0 {
                        break;
                    }
                }
            }
        }
    });
    let mut client = KernelTransport::new(kernel_config()).expect("kernel transport");
    let conn = client
        .connect(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port), clock.now())
        .expect("connect");
    let deadline = StdInstant::now() + StdDuration::from_secs(5);
    let mut connected = false;
    while !connected {
        assert!(
            StdInstant::now() < deadline,
            "kernel connect did not complete"
        );
        client.poll(clock.now());
        while let Some(e) = client.next_event() {
            connected |= e.kind == EventKind::Connected;
        }
    }
    let source = vec![0x5a; CHUNK];
    let mut step: Step = Box::new(move || {
        let n = client
            .send_with(conn, CHUNK, |buf| {
                buf.copy_from_slice(&source[..buf.len()]);
                (buf.len(), buf.len())
            })
            .unwrap_or(0);
        client.poll(clock.now());
        n
    });
    run(&mut step);
    let rate = median((0..RUNS).map(|_| run(&mut step)).collect());
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    receiver.join().expect("receiver thread");
    rate
}

/// Linux TCP over loopback: 64 B ping-pong, the echo on a second thread.
fn kernel_pingpong() -> Vec<u64> {
    let clock = Clock(StdInstant::now());
    let port = kernel_port(1);
    let mut server = KernelTransport::new(kernel_config()).expect("kernel transport");
    server.listen(port).expect("listen");
    let start_time = clock.0;
    let total = ROUND_TRIPS + ROUND_TRIPS / 10;
    let echo = std::thread::spawn(move || {
        let clock = Clock(start_time);
        let mut conn = None;
        let mut echoed = 0;
        let deadline = StdInstant::now() + StdDuration::from_secs(60);
        while echoed < total * 64 && StdInstant::now() < deadline {
            server.poll(clock.now());
            while let Some(e) = server.next_event() {
                if let EventKind::Accepted(_) = e.kind {
                    conn = Some(e.conn);
                }
            }
            let Some(conn) = conn else { continue };
            let mut buf = [0u8; 64];
            let n = server
                .recv_with(conn, |d, _| {
                    let n = d.len().min(64);
                    buf[..n].copy_from_slice(&d[..n]);
                    (n, n)
                })
                .unwrap_or(0);
            if n > 0 {
                let sent = server
                    .send_with(conn, n, |out| {
                        out.copy_from_slice(&buf[..out.len()]);
                        (out.len(), out.len())
                    })
                    .unwrap_or(0);
                assert_eq!(sent, n, "the echo's buffer is never full");
                echoed += n;
            }
        }
    });
    let mut client = KernelTransport::new(kernel_config()).expect("kernel transport");
    let conn = client
        .connect(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port), clock.now())
        .expect("connect");
    let mut connected = false;
    while !connected {
        client.poll(clock.now());
        while let Some(e) = client.next_event() {
            connected |= e.kind == EventKind::Connected;
        }
    }
    let msg = [0x42u8; 64];
    let mut samples = Vec::with_capacity(ROUND_TRIPS);
    for i in 0..total {
        let start = StdInstant::now();
        client
            .send_with(conn, 64, |buf| {
                buf.copy_from_slice(&msg[..buf.len()]);
                (buf.len(), ())
            })
            .expect("send");
        let mut back = 0;
        while back < 64 {
            back += client
                .recv_with(conn, |d, _| (d.len(), d.len()))
                .expect("recv");
            if back < 64 {
                client.poll(clock.now());
            }
        }
        if i >= ROUND_TRIPS / 10 {
            samples.push(start.elapsed().as_nanos() as u64);
        }
    }
    echo.join().expect("echo thread");
    sorted(samples)
}

/// Goodput in virtual time over a lossy link with latency (50 us each way,
/// 256 KiB buffers): what loss costs with loss recovery (SACK, RACK-TLP,
/// the RTO floor of `TcpConfig::rto_min`) and `congestion`.
fn lossy_goodput(loss: f64, congestion: CongestionControl) -> (f64, tcp_lite::RecoveryStats) {
    let mut setup = Setup::new(1500);
    setup.faults = Faults {
        drop: loss,
        ..Faults::NONE
    };
    setup.latency = Duration::from_micros(50);
    setup.tcp.congestion = congestion;
    setup.tcp.rx_buffer = 256 * 1024;
    setup.tcp.tx_buffer = 256 * 1024;
    let mut now = Instant::ZERO;
    let (end_a, end_b) = link::pair(setup.link(), 99);
    end_a.set_tx_faults(setup.faults);
    end_b.set_tx_faults(setup.faults);
    let config = |mac: u8, addr| {
        let mut c = StackConfig::new([2, 0, 0, 0, 0, mac], addr);
        c.tcp = setup.tcp.clone();
        c.tcp.user_timeout = Duration::from_secs(3600);
        c
    };
    let mut a = Stack::new(config(1, A), end_a, now).expect("config");
    let mut b = Stack::new(config(2, B), end_b, now).expect("config");
    b.listen(7002).expect("listen");
    let tx = a.connect(SocketAddrV4::new(B, 7002), now).expect("connect");
    let mut rx = None;
    let total: u64 = 64 << 20;
    let (mut received, mut start) = (0u64, None);
    while received < total {
        let moved = a.poll(now) | b.poll(now);
        while let Some(e) = b.next_event() {
            if let EventKind::Accepted(_) = e.kind {
                rx = Some(e.conn);
                start = Some(now);
            }
        }
        while a.next_event().is_some() {}
        let _ = a.send_with(tx, CHUNK, |buf| (buf.len(), ()));
        if let Some(rx) = rx {
            while let Ok(n) = b.recv_with(rx, |d, _| (d.len(), d.len())) {
                if n == 0 {
                    break;
                }
                received += n as u64;
            }
        }
        if !moved {
            let next = [
                a.poll_at(now),
                b.poll_at(now),
                a.device().rx_due(),
                b.device().rx_due(),
            ]
            .into_iter()
            .flatten()
            .min();
            now = next
                .unwrap_or(now + Duration::from_micros(10))
                .max(now + Duration::from_micros(1));
        }
    }
    let took = now - start.unwrap_or(Instant::ZERO);
    let stats = a.recovery_stats(tx).unwrap_or_default();
    (
        total as f64 * 8.0 / (took.total_micros() as f64 / 1e6) / 1e9,
        stats,
    )
}

fn main() {
    let json = std::env::args().any(|a| a == "--json");
    let linux_loss = linux_loss_args().unwrap_or_else(|why| {
        eprintln!("tcp_table: {why}");
        std::process::exit(2);
    });
    let began = StdInstant::now();
    // Figures whose keys are made at run time (`--linux-loss`).
    let mut more_figures: Vec<(String, f64)> = Vec::new();
    if let Some(rates) = &linux_loss {
        if std::env::args().any(|a| a == "--linux-loss-only") {
            linux_loss_section(rates, &mut more_figures);
            let took = began.elapsed().as_secs_f64();
            println!("\nwhole run: {took:.1} s");
            more_figures.push(("run_s".into(), took));
            if json {
                print_json(more_figures.iter().map(|(k, v)| (k.as_str(), *v)));
            }
            return;
        }
    }
    let mut figures: Vec<(&str, f64)> = Vec::new();
    println!("tcp-lite: one connection, both ends on this thread, in-memory Ethernet link");
    println!("(goodput: median of {RUNS} runs of {RUN:?}; ping-pong: {ROUND_TRIPS} round trips of 64 B)\n");

    println!("{:<52} {:>10}", "goodput, checksums on", "Gbit/s");
    for mtu in [1500, 9000] {
        let setup = Setup::new(mtu);
        let runs = goodputs(vec![tcp_lite_step(&setup), raw_step(&setup)]);
        // The ratio of each pair of neighbouring runs, then the median.
        let ratio = median(runs[0].iter().zip(&runs[1]).map(|(t, r)| t / r).collect());
        let rates = [median(runs[0].clone()), median(runs[1].clone())];
        let keys = if mtu == 1500 {
            [
                "tcp_mtu1500_gbit_s",
                "raw_smoltcp_mtu1500_gbit_s",
                "ratio_mtu1500",
            ]
        } else {
            [
                "tcp_mtu9000_gbit_s",
                "raw_smoltcp_mtu9000_gbit_s",
                "ratio_mtu9000",
            ]
        };
        println!("{:<52} {:>10.1}", format!("tcp-lite, MTU {mtu}"), rates[0]);
        println!(
            "{:<52} {:>10.1}",
            format!("plain smoltcp, MTU {mtu}"),
            rates[1]
        );
        figures.push((keys[0], rates[0]));
        figures.push((keys[1], rates[1]));
        figures.push((keys[2], ratio));
    }
    let value = kernel_goodput();
    println!(
        "{:<52} {value:>10.1}",
        "Linux TCP over loopback (KernelTransport, 2 threads)"
    );
    figures.push(("kernel_gbit_s", value));
    let get = |figures: &[(&str, f64)], key: &str| {
        figures.iter().find(|f| f.0 == key).map_or(0.0, |f| f.1)
    };
    println!(
        "tcp-lite / plain smoltcp, median of {RUNS} ratios of neighbouring runs: {:.3} at MTU 1500, {:.3} at MTU 9000 (goal >= 0.9)\n",
        get(&figures, "ratio_mtu1500"),
        get(&figures, "ratio_mtu9000")
    );

    println!("{:<52} {:>8} {:>8}", "64 B ping-pong", "p50 us", "p99 us");
    let rows: [(&str, &str, Latencies); 3] = [
        (
            "pingpong",
            "tcp-lite, MTU 1500",
            Box::new(|| tcp_lite_pingpong(&Setup::new(1500), 1, ROUND_TRIPS)),
        ),
        (
            "raw_pingpong",
            "plain smoltcp, MTU 1500",
            Box::new(|| raw_pingpong(&Setup::new(1500))),
        ),
        (
            "kernel_pingpong",
            "Linux TCP over loopback (2 threads)",
            Box::new(kernel_pingpong),
        ),
    ];
    let keys = [
        ("pingpong_p50_us", "pingpong_p99_us"),
        ("raw_pingpong_p50_us", "raw_pingpong_p99_us"),
        ("kernel_pingpong_p50_us", "kernel_pingpong_p99_us"),
    ];
    for ((_, name, measure), (p50_key, p99_key)) in rows.into_iter().zip(keys) {
        let samples = measure();
        let (p50, p99) = (percentile(&samples, 0.5), percentile(&samples, 0.99));
        println!("{name:<52} {p50:>8.2} {p99:>8.2}");
        figures.push((p50_key, p50));
        figures.push((p99_key, p99));
    }

    println!("\ntuning (tcp-lite, MTU 1500 unless said; defaults: 1 MiB buffers, Nagle off, delayed ACK 1 ms)");
    let tuned = |f: &dyn Fn(&mut Setup)| {
        let mut s = Setup::new(1500);
        f(&mut s);
        s
    };
    let rows: [(&str, &str, Setup); 12] = [
        (
            "tune_buffers_64k_gbit_s",
            "buffers 64 KiB (no window scaling)",
            tuned(&|s| {
                s.tcp.rx_buffer = 64 * 1024;
                s.tcp.tx_buffer = 64 * 1024;
            }),
        ),
        (
            "tune_buffers_256k_gbit_s",
            "buffers 256 KiB (window scale 2)",
            tuned(&|s| {
                s.tcp.rx_buffer = 256 * 1024;
                s.tcp.tx_buffer = 256 * 1024;
            }),
        ),
        (
            "tune_buffers_4m_gbit_s",
            "buffers 4 MiB (window scale 6)",
            tuned(&|s| {
                s.tcp.rx_buffer = 4 << 20;
                s.tcp.tx_buffer = 4 << 20;
            }),
        ),
        (
            "tune_reno_gbit_s",
            "congestion control Reno",
            tuned(&|s| s.tcp.congestion = CongestionControl::Reno),
        ),
        (
            "tune_cubic_gbit_s",
            "congestion control CUBIC",
            tuned(&|s| s.tcp.congestion = CongestionControl::Cubic),
        ),
        (
            "tune_ack_delay_none_gbit_s",
            "no delayed ACK",
            tuned(&|s| s.tcp.ack_delay = None),
        ),
        (
            "tune_ack_delay_10ms_gbit_s",
            "delayed ACK 10 ms (smoltcp's default)",
            tuned(&|s| s.tcp.ack_delay = Some(Duration::from_millis(10))),
        ),
        (
            "tune_max_burst_16_gbit_s",
            "max_burst_size 16 (window capped at 16 segments)",
            tuned(&|s| s.max_burst = Some(16)),
        ),
        (
            "tune_checksums_off_mtu9000_gbit_s",
            "checksums off, MTU 9000",
            tuned(&|s| {
                s.checksums = false;
                s.mtu = 9000;
            }),
        ),
        (
            "tune_nagle_on_gbit_s",
            "Nagle on",
            tuned(&|s| s.tcp.nagle = true),
        ),
        (
            "tune_dscp_marked_gbit_s",
            "DSCP 46 on the sender's segments (each marked)",
            tuned(&|s| s.dscp = 46),
        ),
        (
            "tune_reflect_dscp_gbit_s",
            "SYN classes reflected (each received frame looked at)",
            tuned(&|s| s.learn = true),
        ),
    ];
    println!("{:<52} {:>10}", "goodput", "Gbit/s");
    for (key, name, setup) in rows {
        let value = median((0..3).map(|_| tcp_lite_goodput_once(&setup)).collect());
        println!("{name:<52} {value:>10.1}");
        figures.push((key, value));
    }
    println!("{:<52} {:>8} {:>8}", "64 B ping-pong", "p50 us", "p99 us");
    let no_delay = |s: &mut Setup| s.tcp.ack_delay = None;
    let rows: [(&str, &str, Setup, usize, usize); 6] = [
        (
            "tune_pingpong_ack_delay_none",
            "no delayed ACK",
            tuned(&no_delay),
            1,
            ROUND_TRIPS,
        ),
        (
            "tune_pingpong_ack_delay_10ms",
            "delayed ACK 10 ms",
            tuned(&|s| s.tcp.ack_delay = Some(Duration::from_millis(10))),
            1,
            ROUND_TRIPS,
        ),
        (
            "tune_pingpong_2writes",
            "request as 2 writes, Nagle off",
            tuned(&|_| {}),
            2,
            ROUND_TRIPS,
        ),
        (
            "tune_pingpong_2writes_nagle_on",
            "request as 2 writes, Nagle on, no delayed ACK",
            tuned(&|s| {
                s.tcp.nagle = true;
                s.tcp.ack_delay = None;
            }),
            2,
            ROUND_TRIPS,
        ),
        (
            "tune_pingpong_2writes_nagle_on_ack_delay_1ms",
            "request as 2 writes, Nagle on, delayed ACK 1 ms",
            tuned(&|s| {
                s.tcp.nagle = true;
            }),
            2,
            300,
        ),
        (
            "tune_pingpong_2writes_nagle_on_ack_delay_10ms",
            "request as 2 writes, Nagle on, delayed ACK 10 ms",
            tuned(&|s| {
                s.tcp.nagle = true;
                s.tcp.ack_delay = Some(Duration::from_millis(10));
            }),
            2,
            100,
        ),
    ];
    for (key, name, setup, writes, round_trips) in rows {
        let samples = tcp_lite_pingpong(&setup, writes, round_trips);
        let (p50, p99) = (percentile(&samples, 0.5), percentile(&samples, 0.99));
        println!("{name:<52} {p50:>8.2} {p99:>8.2}");
        figures.push((key, p50));
    }

    println!("\nloss (virtual time, 50 us one-way latency, 256 KiB buffers, 64 MiB per figure)");
    println!(
        "{:<52} {:>10} {:>9} {:>7} {:>9}",
        "goodput", "Gbit/s", "episodes", "probes", "timeouts"
    );
    let rows: [(&str, &str, f64, CongestionControl); 6] = [
        (
            "loss_0_cubic_gbit_s",
            "no loss, CUBIC",
            0.0,
            CongestionControl::Cubic,
        ),
        (
            "loss_0.1pct_cubic_gbit_s",
            "0.1% loss each way, CUBIC",
            0.001,
            CongestionControl::Cubic,
        ),
        (
            "loss_1pct_cubic_gbit_s",
            "1% loss each way, CUBIC",
            0.01,
            CongestionControl::Cubic,
        ),
        (
            "loss_0_none_gbit_s",
            "no loss, no congestion control",
            0.0,
            CongestionControl::None,
        ),
        (
            "loss_0.1pct_none_gbit_s",
            "0.1% loss each way, no congestion control",
            0.001,
            CongestionControl::None,
        ),
        (
            "loss_1pct_none_gbit_s",
            "1% loss each way, no congestion control",
            0.01,
            CongestionControl::None,
        ),
    ];
    for (key, name, loss, congestion) in rows {
        let (value, stats) = lossy_goodput(loss, congestion);
        println!(
            "{name:<52} {value:>10.3} {:>9} {:>7} {:>9}",
            stats.recoveries, stats.probes, stats.timeouts
        );
        figures.push((key, value));
        let row = key.trim_end_matches("_gbit_s");
        more_figures.push((format!("{row}_episodes"), stats.recoveries as f64));
        more_figures.push((format!("{row}_timeouts"), stats.timeouts as f64));
    }
    let kept = |figures: &[(&str, f64)], lossy: &str, lossless: &str| {
        get(figures, lossy) / get(figures, lossless)
    };
    println!(
        "of its lossless goodput, CUBIC keeps {:.2}x at 0.1% (goal >= 0.8x) and {:.2}x at 1% (goal >= 0.5x); no congestion control keeps {:.2}x and {:.2}x",
        kept(&figures, "loss_0.1pct_cubic_gbit_s", "loss_0_cubic_gbit_s"),
        kept(&figures, "loss_1pct_cubic_gbit_s", "loss_0_cubic_gbit_s"),
        kept(&figures, "loss_0.1pct_none_gbit_s", "loss_0_none_gbit_s"),
        kept(&figures, "loss_1pct_none_gbit_s", "loss_0_none_gbit_s"),
    );

    if let Some(rates) = &linux_loss {
        linux_loss_section(rates, &mut more_figures);
    }

    let took = began.elapsed().as_secs_f64();
    println!("\nwhole run: {took:.1} s");
    figures.push(("run_s", took));
    if json {
        print_json(
            figures
                .iter()
                .copied()
                .chain(more_figures.iter().map(|(k, v)| (k.as_str(), *v))),
        );
    }
}

/// The `--json` line: one object of every figure.
fn print_json<'a>(figures: impl Iterator<Item = (&'a str, f64)>) {
    let body: Vec<String> = figures.map(|(k, v)| format!("\"{k}\":{v:.4}")).collect();
    println!("{{{}}}", body.join(","));
}

// ---------------------------------------------------------------------------
// `--linux-loss P[,P...]`: against Linux on a real path, with loss.

/// How long each run of the `--linux-loss` section sends.
const LL_RUN: StdDuration = StdDuration::from_secs(3);
/// A run whose receiver counts nothing new for this long is reported as
/// stalled, and the section goes on.
const LL_STALL: StdDuration = StdDuration::from_secs(30);
/// IP MTU of every path of the section.
const LL_MTU: usize = 1500;
/// tcp-lite's buffers in the section (and the Linux variant that matches).
const LL_BUFFERS: usize = 256 * 1024;
/// Seed of [`Lossy`]'s streams (each run: this plus the run's index).
const LL_SEED: u64 = 0x6c6f_7373;
/// Linux's addresses on the veth pair, and the TAP path's.
const LL_VETH_A: Ipv4Addr = Ipv4Addr::new(10, 98, 0, 1);
const LL_VETH_B: Ipv4Addr = Ipv4Addr::new(10, 98, 0, 2);
const LL_TAP_LINUX: Ipv4Addr = Ipv4Addr::new(10, 97, 0, 1);
const LL_TAP_OURS: Ipv4Addr = Ipv4Addr::new(10, 97, 0, 2);
const LL_PORT: u16 = 5201;

/// The loss rates (percent) of every `--linux-loss` (repeated, or comma
/// lists), P = 0 first; `None` without the option.
fn linux_loss_args() -> Result<Option<Vec<f64>>, String> {
    let args: Vec<String> = std::env::args().collect();
    let mut values: Vec<String> = Vec::new();
    let mut i = 1;
    while i < args.len() {
        if args[i] == "--linux-loss" {
            let v = args
                .get(i + 1)
                .ok_or("--linux-loss needs a value: loss in percent, e.g. --linux-loss 0.1,1")?;
            values.push(v.clone());
            i += 1;
        } else if let Some(v) = args[i].strip_prefix("--linux-loss=") {
            values.push(v.to_string());
        }
        i += 1;
    }
    if values.is_empty() {
        return Ok(None);
    }
    let mut rates = vec![0.0];
    for v in values.iter().flat_map(|v| v.split(',')) {
        let p: f64 = v
            .trim()
            .parse()
            .map_err(|_| format!("--linux-loss: {v:?} is not a number (loss in percent)"))?;
        if !(0.0..=100.0).contains(&p) {
            return Err(format!("--linux-loss: {p} is not a percentage in 0..=100"));
        }
        if !rates.contains(&p) {
            rates.push(p);
        }
    }
    Ok(Some(rates))
}

/// A percentage as a JSON key part: 0.1 -> "0.1", 1 -> "1".
fn pct_key(p: f64) -> String {
    format!("{p}")
}

/// One transfer's result, as its receiver saw it.
#[derive(Debug, Clone, Copy)]
struct Transfer {
    octets: u64,
    /// From the accept to the end of the stream (or to the stall).
    secs: f64,
    /// The receiver saw nothing new for [`LL_STALL`].
    stalled: bool,
}

impl Transfer {
    fn gbit_s(&self) -> f64 {
        self.octets as f64 * 8.0 / self.secs.max(1e-9) / 1e9
    }
}

/// A goodput cell: the figure, or what went wrong.
fn cell(r: &Result<Transfer, String>) -> String {
    match r {
        Ok(t) if t.stalled => "stalled".into(),
        Ok(t) => format!("{:.3}", t.gbit_s()),
        Err(_) => "failed".into(),
    }
}

/// Runs `cmd ARGS` in namespace `ns` (`ip netns exec`), `stdin` piped in.
fn ns_run(ns: &str, cmd: &[&str], stdin: Option<&str>) -> Result<String, String> {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns])
        .args(cmd)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run `{}` in {ns}: {e}", cmd.join(" ")))?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())
            .map_err(|e| format!("{}: {e}", cmd.join(" ")))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("{}: {e}", cmd.join(" ")))?;
    if !out.status.success() {
        return Err(format!(
            "`{}` in {ns} failed: {}",
            cmd.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Loss `p` percent on frames arriving at `iface` in `ns`: an nftables
/// netdev table whose ingress chain counts every packet and drops those
/// whose `numgen random mod 10000` falls below `p` * 100. Ingress, not the
/// IP output hook: TCP hands the output hook 64 KiB GSO units whatever the
/// device's offloads, while ingress sees what crossed the wire (MTU frames
/// when the sender segments, GSO units when the veth passes them whole).
fn set_ingress_loss(ns: &str, iface: &str, p: f64) -> Result<(), String> {
    let _ = ns_run(ns, &["nft", "delete", "table", "netdev", "dpwloss"], None);
    let threshold = (p * 100.0).round() as u32;
    let script = format!(
        "table netdev dpwloss {{\n chain in {{\n  type filter hook ingress device \"{iface}\" priority 0;\n  counter\n  numgen random mod 10000 < {threshold} counter drop\n }}\n}}\n"
    );
    ns_run(ns, &["nft", "-f", "-"], Some(&script)).map(|_| ())
}

/// The ingress chain's counters: (packets seen, octets seen, packets
/// dropped), zeroed by the reading.
fn take_ingress_counters(ns: &str) -> (u64, u64, u64) {
    let text = ns_run(ns, &["nft", "list", "table", "netdev", "dpwloss"], None).unwrap_or_default();
    let _ = ns_run(
        ns,
        &["nft", "reset", "counters", "table", "netdev", "dpwloss"],
        None,
    );
    let mut counters = text.lines().filter_map(|l| {
        let mut words = l.split_whitespace();
        let packets = words
            .by_ref()
            .skip_while(|w| *w != "packets")
            .nth(1)?
            .parse::<u64>()
            .ok()?;
        let bytes = words.nth(1)?.parse::<u64>().ok()?;
        Some((packets, bytes))
    });
    let seen = counters.next().unwrap_or((0, 0));
    let dropped = counters.next().unwrap_or((0, 0));
    (seen.0, seen.1, dropped.0)
}

/// Two namespaces joined by a veth pair, Linux on both ends; deleted (with
/// the pair) on drop.
struct VethPair {
    a: tcp_lite::sys::netns::Netns,
    b: tcp_lite::sys::netns::Netns,
    if_a: String,
    if_b: String,
}

impl VethPair {
    fn new(tag: &str, offloads: bool) -> Result<VethPair, String> {
        use tcp_lite::sys::netns::{self, Netns};
        let pid = std::process::id();
        let e = |e: std::io::Error| e.to_string();
        let a = Netns::create(&format!("dpwbench{pid}{tag}a")).map_err(e)?;
        let b = Netns::create(&format!("dpwbench{pid}{tag}b")).map_err(e)?;
        let (if_a, if_b) = (format!("dpw{tag}a{pid}"), format!("dpw{tag}b{pid}"));
        let mtu = LL_MTU.to_string();
        netns::ip(&[
            "link",
            "add",
            &if_a,
            "netns",
            a.name(),
            "mtu",
            &mtu,
            "type",
            "veth",
            "peer",
            "name",
            &if_b,
            "netns",
            b.name(),
            "mtu",
            &mtu,
        ])
        .map_err(e)?;
        for (ns, iface, addr) in [(&a, &if_a, LL_VETH_A), (&b, &if_b, LL_VETH_B)] {
            ns.ip(&["addr", "add", &format!("{addr}/24"), "dev", iface])
                .map_err(e)?;
            ns.ip(&["link", "set", "dev", iface, "up"]).map_err(e)?;
            if !offloads {
                ns_run(
                    ns.name(),
                    &[
                        "ethtool", "-K", iface, "gso", "off", "tso", "off", "gro", "off",
                    ],
                    None,
                )?;
            }
        }
        Ok(VethPair { a, b, if_a, if_b })
    }

    fn set_loss(&self, p: f64) -> Result<(), String> {
        set_ingress_loss(self.a.name(), &self.if_a, p)?;
        set_ingress_loss(self.b.name(), &self.if_b, p)
    }

    /// The sending end's TSO, GSO and GRO as `ethtool -k` shows them.
    fn offloads(&self) -> String {
        let text = ns_run(self.a.name(), &["ethtool", "-k", &self.if_a], None).unwrap_or_default();
        [
            "tcp-segmentation-offload",
            "generic-segmentation-offload",
            "generic-receive-offload",
        ]
        .iter()
        .zip(["TSO", "GSO", "GRO"])
        .map(|(feature, short)| {
            let state = text
                .lines()
                .find_map(|l| l.trim().strip_prefix(feature)?.strip_prefix(':'))
                .map_or("?", str::trim);
            format!("{short} {state}")
        })
        .collect::<Vec<_>>()
        .join(", ")
    }
}

/// A socket2 TCP socket with SO_SNDBUF and SO_RCVBUF set to `buffers` (if
/// given) before it connects or listens, so the window scale follows.
fn ll_socket(buffers: Option<usize>) -> std::io::Result<socket2::Socket> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    if let Some(size) = buffers {
        socket.set_send_buffer_size(size)?;
        socket.set_recv_buffer_size(size)?;
    }
    Ok(socket)
}

/// The receiving half of every run: in namespace `ns`, listen on `at`
/// (buffers as [`ll_socket`]), accept one connection within `accept_within`,
/// read and count until the end of the stream or a stall. `progress` counts
/// octets as they come; `ready` is told once listening, with the buffer
/// sizes Linux reports.
fn ll_receiver(
    ns: String,
    at: SocketAddrV4,
    buffers: Option<usize>,
    accept_within: StdDuration,
    progress: std::sync::Arc<std::sync::atomic::AtomicU64>,
    ready: std::sync::mpsc::Sender<(usize, usize)>,
) -> std::thread::JoinHandle<Result<Transfer, String>> {
    std::thread::spawn(move || {
        use std::io::Read as _;
        tcp_lite::sys::netns::enter(&ns).map_err(|e| e.to_string())?;
        let socket = ll_socket(buffers).map_err(|e| format!("socket: {e}"))?;
        socket
            .bind(&std::net::SocketAddr::V4(at).into())
            .map_err(|e| format!("bind {at}: {e}"))?;
        socket.listen(1).map_err(|e| format!("listen: {e}"))?;
        let sizes = (
            socket.send_buffer_size().unwrap_or(0),
            socket.recv_buffer_size().unwrap_or(0),
        );
        socket.set_nonblocking(true).map_err(|e| e.to_string())?;
        let _ = ready.send(sizes);
        let deadline = StdInstant::now() + accept_within;
        let stream = loop {
            match socket.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if StdInstant::now() > deadline {
                        return Err(format!("no connection within {accept_within:?}"));
                    }
                    std::thread::sleep(StdDuration::from_millis(1));
                }
                Err(e) => return Err(format!("accept: {e}")),
            }
        };
        let began = StdInstant::now();
        let mut stream: std::net::TcpStream = stream.into();
        stream.set_nonblocking(false).map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(LL_STALL))
            .map_err(|e| e.to_string())?;
        let mut buf = vec![0u8; 1 << 20];
        let mut octets = 0u64;
        loop {
            match stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    octets += n as u64;
                    progress.store(octets, std::sync::atomic::Ordering::Relaxed);
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(Transfer {
                        octets,
                        secs: (began.elapsed() - LL_STALL).as_secs_f64(),
                        stalled: true,
                    });
                }
                Err(e) => return Err(format!("read after {octets} octets: {e}")),
            }
        }
        let secs = began.elapsed().as_secs_f64();
        Ok(Transfer {
            octets,
            secs,
            stalled: false,
        })
    })
}

/// Linux to Linux across `pair`: a sender thread in its first namespace
/// writes for [`LL_RUN`], a receiver in the second counts. The Linux
/// buffer sizes read back (send, receive) come with the result.
fn linux_to_linux(
    pair: &VethPair,
    buffers: Option<usize>,
) -> (Result<Transfer, String>, (usize, usize)) {
    let to = SocketAddrV4::new(LL_VETH_B, LL_PORT);
    let progress = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let receiver = ll_receiver(
        pair.b.name().to_string(),
        to,
        buffers,
        StdDuration::from_secs(20),
        progress,
        ready_tx,
    );
    let Ok(sizes) = ready_rx.recv_timeout(StdDuration::from_secs(10)) else {
        let why = match receiver.join() {
            Ok(Err(e)) => e,
            _ => "the receiver did not start".into(),
        };
        return (Err(why), (0, 0));
    };
    let ns = pair.a.name().to_string();
    let sender = std::thread::spawn(move || -> Result<(), String> {
        use std::io::Write as _;
        tcp_lite::sys::netns::enter(&ns).map_err(|e| e.to_string())?;
        let socket = ll_socket(buffers).map_err(|e| format!("socket: {e}"))?;
        socket
            .connect_timeout(
                &std::net::SocketAddr::V4(to).into(),
                StdDuration::from_secs(10),
            )
            .map_err(|e| format!("connect {to}: {e}"))?;
        let mut stream: std::net::TcpStream = socket.into();
        stream
            .set_write_timeout(Some(LL_STALL))
            .map_err(|e| e.to_string())?;
        let chunk = vec![0u8; 1 << 20];
        let began = StdInstant::now();
        while began.elapsed() < LL_RUN {
            // A write blocked for LL_STALL fails: the receiver reports it.
            if stream.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = stream.shutdown(std::net::Shutdown::Write);
        Ok(())
    });
    let sent = sender.join().unwrap_or(Err("the sender panicked".into()));
    let received = receiver
        .join()
        .unwrap_or(Err("the receiver panicked".into()));
    (
        match (sent, received) {
            (Err(e), _) => Err(e),
            (_, r) => r,
        },
        sizes,
    )
}

/// tcp-lite to Linux: our [`Stack`] over [`Lossy`]`<TapDevice>` (`p`
/// percent lost each way at our port, seed `seed`), CUBIC, 256 KiB buffers,
/// the default `rto_min`, polled on this thread with the real clock; a Linux
/// receiver in the TAP device's namespace counts. The recovery and loss
/// counters come with the result.
fn tcp_lite_to_linux(
    p: f64,
    seed: u64,
) -> Result<(Transfer, tcp_lite::RecoveryStats, tcp_lite::LossyStats), String> {
    use std::sync::atomic::Ordering;
    use tcp_lite::sys::netns::tap_in_netns;
    use tcp_lite::Lossy;
    let pid = std::process::id();
    let (tap, ns) = tap_in_netns(
        &format!("dpwbench{pid}t"),
        &format!("dpwlt{pid}"),
        LL_MTU,
        LL_TAP_LINUX,
        24,
    )
    .map_err(|e| e.to_string())?;
    let progress = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let to = SocketAddrV4::new(LL_TAP_LINUX, LL_PORT);
    let receiver = ll_receiver(
        ns.name().to_string(),
        to,
        None,
        StdDuration::from_secs(20),
        progress.clone(),
        ready_tx,
    );
    if ready_rx.recv_timeout(StdDuration::from_secs(10)).is_err() {
        return Err(match receiver.join() {
            Ok(Err(e)) => e,
            _ => "the receiver did not start".into(),
        });
    }
    let start = StdInstant::now();
    let clock = || Instant::from_micros(start.elapsed().as_micros() as i64);
    let mut config = StackConfig::new([0x02, 0x64, 0x70, 0x77, 0, 3], LL_TAP_OURS);
    config.seed = seed ^ u64::from(pid);
    config.tcp = TcpConfig {
        rx_buffer: LL_BUFFERS,
        tx_buffer: LL_BUFFERS,
        congestion: CongestionControl::Cubic,
        ..TcpConfig::default()
    };
    let device = Lossy::symmetric(tap, p / 100.0, seed);
    let mut stack = Stack::new(config, device, clock()).map_err(|e| e.to_string())?;
    let conn = stack.connect(to, clock()).map_err(|e| e.to_string())?;
    let mut recovery = tcp_lite::RecoveryStats::default();
    let (mut sending_since, mut closing, mut failed) = (None, false, None);
    let (mut seen, mut seen_at) = (0, StdInstant::now());
    loop {
        let now = clock();
        let mut busy = stack.poll(now);
        let mut closed = false;
        while let Some(e) = stack.next_event() {
            match e.kind {
                EventKind::Connected => sending_since = Some(StdInstant::now()),
                EventKind::Reset | EventKind::TimedOut => {
                    failed = Some(format!("our connection ended with {:?}", e.kind));
                }
                EventKind::Closed => closed = true,
                _ => {}
            }
        }
        if let Ok(stats) = stack.recovery_stats(conn) {
            recovery = stats;
        }
        if closed || failed.is_some() {
            break;
        }
        match sending_since {
            Some(since) if !closing && since.elapsed() < LL_RUN => {
                let n = stack
                    .send_with(conn, CHUNK, |buf| (buf.len(), buf.len()))
                    .unwrap_or(0);
                busy |= n > 0;
            }
            Some(_) if !closing => {
                let _ = stack.close(conn);
                closing = true;
            }
            Some(_) => {}
            None if start.elapsed() > StdDuration::from_secs(20) => {
                failed = Some("no connection within 20 s".into());
                break;
            }
            None => {}
        }
        let got = progress.load(Ordering::Relaxed);
        if got != seen {
            (seen, seen_at) = (got, StdInstant::now());
        } else if seen_at.elapsed() > LL_STALL + StdDuration::from_secs(5) {
            // The receiver reports the stall itself (after LL_STALL).
            break;
        }
        if !busy {
            let now = clock();
            // smoltcp's `Instant - Instant` is the distance, whichever is
            // later: a deadline already past waits not at all.
            let wait = match stack.poll_at(now) {
                Some(at) if at <= now => Duration::ZERO,
                Some(at) => (at - now).min(Duration::from_millis(1)),
                None => Duration::from_millis(1),
            };
            let _ = stack.device().inner().wait(Some(wait));
        }
    }
    let _ = stack.abort(conn);
    stack.release(conn);
    stack.poll(clock());
    let lossy = stack.device().stats();
    let result = receiver
        .join()
        .unwrap_or(Err("the receiver panicked".into()));
    drop(stack);
    drop(ns);
    match (failed, result) {
        (Some(why), Ok(t)) if !t.stalled => Err(format!("{why} after {} octets", t.octets)),
        (_, r) => r.map(|t| (t, recovery, lossy)),
    }
}

/// Why the section cannot run here, if it cannot.
fn linux_loss_unavailable() -> Option<String> {
    if let Some(why) = tcp_lite::sys::tap::namespace_unavailable() {
        return Some(why);
    }
    for (cmd, package) in [("nft", "nftables"), ("ethtool", "ethtool")] {
        let found = std::process::Command::new(cmd)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Some(format!(
                "the `{cmd}` command is missing (apt-get install {package})"
            ));
        }
    }
    None
}

/// The `--linux-loss` section: the table, and its figures for `--json`.
fn linux_loss_section(rates: &[f64], figures: &mut Vec<(String, f64)>) {
    println!(
        "\nloss against Linux on a real path (MTU {LL_MTU}; each run sends for {LL_RUN:?}; goodput: octets the receiver read, over the time from its accept to the end of the stream)"
    );
    if let Some(why) = linux_loss_unavailable() {
        println!("linux-loss: cannot run here: {why}");
        return;
    }
    println!(
        " Linux -> Linux: two namespaces joined by a veth pair, P% lost at each end's ingress (nftables `numgen random mod 10000 < P*100 drop`), CUBIC, Linux's default (autotuned) buffers;"
    );
    println!(
        "   offloads on: the veth's defaults (TSO/GSO/GRO: 64 KiB units cross it whole, so P% is per unit, not per segment); off: `ethtool -K gso off tso off gro off` at both ends (P% per segment)"
    );
    println!(
        " tcp-lite -> Linux: Stack over Lossy<TapDevice> (P% lost each way at our port, ChaCha8 seed {LL_SEED:#x} + run), CUBIC, {} KiB buffers, rto_min {}; Linux receiver in the TAP's namespace",
        LL_BUFFERS / 1024,
        TcpConfig::default().rto_min
    );
    let pairs = VethPair::new("n", true).and_then(|on| Ok((on, VethPair::new("f", false)?)));
    let (on, off) = match pairs {
        Ok(pairs) => pairs,
        Err(why) => {
            println!("linux-loss: cannot set up the veth pairs: {why}");
            return;
        }
    };
    println!(
        " offloads here: on: {}; off: {}",
        on.offloads(),
        off.offloads()
    );
    println!(
        "\n{:>7} {:>12} {:>12} {:>14} {:>12} {:>9} {:>9}",
        "loss %", "Linux on", "Linux off", "Linux off 256K", "tcp-lite", "tl/off", "tl/on"
    );
    let mut notes = Vec::new();
    // Each run's goodputs (Linux on, off, off 256K, tcp-lite), by P.
    let mut rows: Vec<(f64, [Option<f64>; 4])> = Vec::new();
    for (run, &p) in rates.iter().enumerate() {
        let mut linux = Vec::new();
        for (pair, buffers) in [(&on, None), (&off, None), (&off, Some(LL_BUFFERS))] {
            let r = match pair.set_loss(p) {
                Ok(()) => {
                    let (r, sizes) = linux_to_linux(pair, buffers);
                    let (seen, octets, dropped) = take_ingress_counters(pair.b.name());
                    let (ack_seen, _, ack_dropped) = take_ingress_counters(pair.a.name());
                    let what = match (pair.if_a == on.if_a, buffers) {
                        (true, _) => "Linux on".to_string(),
                        (false, None) => "Linux off".to_string(),
                        (false, Some(b)) => format!(
                            "Linux off, SO_SNDBUF=SO_RCVBUF={} KiB asked (Linux reports snd {} KiB, rcv {} KiB)",
                            b / 1024,
                            sizes.0 / 1024,
                            sizes.1 / 1024
                        ),
                    };
                    notes.push(format!(
                        "  {p}%: {what}: data side ingress {seen} packets (mean {} octets), {dropped} dropped; ACK side {ack_seen}, {ack_dropped} dropped{}",
                        octets.checked_div(seen).unwrap_or(0),
                        match &r {
                            Err(e) => format!("; failed: {e}"),
                            Ok(t) if t.stalled => format!("; stalled after {} octets", t.octets),
                            Ok(_) => String::new(),
                        }
                    ));
                    r
                }
                Err(e) => Err(e),
            };
            if let Err(e) = &r {
                notes.push(format!("  {p}%: Linux run failed: {e}"));
            }
            linux.push(r);
        }
        let ours = tcp_lite_to_linux(p, LL_SEED + run as u64);
        let ours_transfer = ours.as_ref().map(|o| o.0).map_err(Clone::clone);
        match &ours {
            Ok((t, recovery, lossy)) => notes.push(format!(
                "  {p}%: tcp-lite {}{}: {recovery:?}; port: {lossy:?}",
                if t.stalled { "stalled, " } else { "" },
                format_args!("{} octets in {:.2} s", t.octets, t.secs),
            )),
            Err(e) => notes.push(format!("  {p}%: tcp-lite run failed: {e}")),
        }
        let rate = |r: &Result<Transfer, String>| match r {
            Ok(t) if !t.stalled => Some(t.gbit_s()),
            _ => None,
        };
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        };
        let tl = rate(&ours_transfer);
        let (r_off, r_on) = (ratio(tl, rate(&linux[1])), ratio(tl, rate(&linux[0])));
        let show = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{r:.2}"));
        println!(
            "{:>7} {:>12} {:>12} {:>14} {:>12} {:>9} {:>9}",
            pct_key(p),
            cell(&linux[0]),
            cell(&linux[1]),
            cell(&linux[2]),
            cell(&ours_transfer),
            show(r_off),
            show(r_on)
        );
        rows.push((p, [rate(&linux[0]), rate(&linux[1]), rate(&linux[2]), tl]));
        let key = |what: &str| format!("linux_loss_{}pct_{what}", pct_key(p));
        for (what, value) in [
            ("linux_gbit_s", rate(&linux[0])),
            ("linux_nooffload_gbit_s", rate(&linux[1])),
            ("linux_nooffload_256k_gbit_s", rate(&linux[2])),
            ("tcplite_gbit_s", tl),
            ("ratio_nooffload", r_off),
            ("ratio_offload", r_on),
        ] {
            if let Some(value) = value {
                figures.push((key(what), value));
            }
        }
    }
    println!("(Gbit/s; tl/off and tl/on: tcp-lite over Linux with offloads off and on; goal tcp-lite >= 0.5x Linux at the same loss)");
    // The paths differ before any loss (a TAP device costs a system call
    // per frame): what each keeps of its own lossless goodput separates
    // loss recovery from the path.
    if let Some((_, lossless)) = rows.iter().find(|(p, _)| *p == 0.0).cloned() {
        for (p, row) in rows.iter().filter(|(p, _)| *p > 0.0) {
            let kept: Vec<Option<f64>> = row
                .iter()
                .zip(lossless)
                .map(|(r, l)| match (r, l) {
                    (Some(r), Some(l)) if l > 0.0 => Some(r / l),
                    _ => None,
                })
                .collect();
            let show = |k: Option<f64>| k.map_or("-".to_string(), |k| format!("{k:.2}"));
            println!(
                "{p}% keeps of its lossless goodput: Linux on {}, Linux off {}, Linux off 256K {}, tcp-lite {}",
                show(kept[0]),
                show(kept[1]),
                show(kept[2]),
                show(kept[3])
            );
            for (what, value) in [("linux_nooffload_kept", kept[1]), ("tcplite_kept", kept[3])] {
                if let Some(value) = value {
                    figures.push((format!("linux_loss_{}pct_{what}", pct_key(*p)), value));
                }
            }
        }
    }
    for note in notes {
        println!("{note}");
    }
}
