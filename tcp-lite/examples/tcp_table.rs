//! tcp-lite's benchmark: goodput and 64 B ping-pong of one connection over
//! the in-memory link (both stacks on this thread), the same figures for
//! plain smoltcp driven the same way (the reference), and for Linux TCP over
//! loopback through `KernelTransport` (two threads). Then one row per tuning
//! knob, and goodput under loss.
//!
//! `cargo run --release -p tcp-lite --example tcp_table [-- --json]`
//!
//! With `--json` the last line is one JSON object of every figure.
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

/// Goodput in virtual time over a lossy link with latency: what smoltcp's
/// loss recovery (no SACK-based retransmission, 1 s minimum RTO) costs.
fn lossy_goodput(loss: f64, congestion: CongestionControl) -> f64 {
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
    if std::env::var_os("TCP_TABLE_DEBUG").is_some() {
        eprintln!(
            "loss {loss} {congestion:?}: {took} {:?}",
            a.recovery_stats(tx)
        );
    }
    total as f64 * 8.0 / (took.total_micros() as f64 / 1e6) / 1e9
}

fn main() {
    let json = std::env::args().any(|a| a == "--json");
    let began = StdInstant::now();
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
    let rows: [(&str, &str, Setup); 10] = [
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
    println!("{:<52} {:>10}", "goodput", "Gbit/s");
    let rows: [(&str, &str, f64, CongestionControl); 4] = [
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
            "loss_1pct_none_gbit_s",
            "1% loss each way, no congestion control",
            0.01,
            CongestionControl::None,
        ),
    ];
    for (key, name, loss, congestion) in rows {
        let value = lossy_goodput(loss, congestion);
        println!("{name:<52} {value:>10.3}");
        figures.push((key, value));
    }

    let took = began.elapsed().as_secs_f64();
    println!("\nwhole run: {took:.1} s");
    figures.push(("run_s", took));
    if json {
        let body: Vec<String> = figures
            .iter()
            .map(|(k, v)| format!("\"{k}\":{v:.4}"))
            .collect();
        println!("{{{}}}", body.join(","));
    }
}
