//! tcp-lite on DPDK ports against Linux's TCP, in a network namespace this
//! test makes: DPDK's TAP driver (`net_tap`, its interface made in the
//! namespace) and DPDK's AF_PACKET driver (`net_af_packet`, on one end of a
//! veth pair whose other end is Linux's). Both ways, 32 MiB each, every
//! octet checked by the receiver, at MTU 1500 and (AF_PACKET) 9000; DPDK
//! 22.11's TAP driver takes no more than 1504, and a larger MTU is refused
//! with a message that says so. The
//! kernel's own chatter on the link (IPv6 neighbour discovery) is counted
//! and dropped by the device.
//!
//! Needs root, `/dev/net/tun` and `ip`; elsewhere each trial is reported
//! ignored with the reason. The namespace goes on every exit.
#![allow(clippy::disallowed_methods)] // A test on a real device reads the real clock.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::time::{Duration, Instant};

use dataplane::ports::{self, Hugepages, PortKind, PortOptions};
use libtest_mimic::{Arguments, Failed, Trial};
use tcp_lite::sys::netns::Netns;
use tcp_lite::{EventKind, Stack, StackConfig, Transport};

const KERNEL: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 1);
const OURS: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 2);
const TOTAL: usize = 32 << 20;

fn main() {
    let mut args = Arguments::from_args();
    // One at a time: each busy-polls, and the machine may have two CPUs.
    args.test_threads = Some(1);
    let skip = tcp_lite::sys::tap::namespace_unavailable();
    let trial = |name: &str, run: fn() -> Result<(), Failed>| match &skip {
        None => Trial::test(name, run),
        Some(why) => Trial::test(name, || Ok(()))
            .with_ignored_flag(true)
            .with_kind(why.clone()),
    };
    let conclusion = libtest_mimic::run(
        &args,
        vec![
            trial("net_tap_against_linux_tcp", || run(false, 1500)),
            trial(
                "net_tap_refuses_jumbo_frames_and_says_so",
                tap_refuses_jumbo,
            ),
            trial("af_packet_on_veth_mtu_9000_against_linux_tcp", || {
                run(true, 9000)
            }),
            trial("af_packet_on_veth_mtu_1500_against_linux_tcp", || {
                run(true, 1500)
            }),
        ],
    );
    if let Some(why) = skip {
        eprintln!("kernel_peer: ignored: {why}");
    }
    conclusion.exit();
}

fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(31) ^ (i >> 9)) as u8
}

/// One trial: a namespace, the port into it, Linux echoing what it gets.
fn run(af_packet: bool, mtu: u16) -> Result<(), Failed> {
    // EAL starts outside the namespace (its threads must not hold it).
    let (eal, _) = ports::start_eal(Hugepages::Auto, &[])?;
    let id = std::process::id() % 100_000;
    let tag = format!("{}{}", if af_packet { "p" } else { "t" }, mtu);
    let net = Netns::create(&format!("dpwkp{id}{tag}"))?;
    let ours = format!("dpwkd{id}{tag}");
    let theirs = format!("dpwkk{id}{tag}");
    let kernel_addr = format!("{KERNEL}/24");
    // Everything below runs on a thread inside the namespace: the port's
    // interface and sockets, and Linux's listener, are made there.
    std::thread::scope(|scope| {
        scope
            .spawn(|| -> Result<(), Failed> {
                net.enter()?;
                if af_packet {
                    net.veth(&ours, &theirs, usize::from(mtu), &kernel_addr)?;
                    ports::kernel_checksums_complete(&theirs)?;
                }
                let kind = if af_packet {
                    PortKind::AfPacket {
                        iface: ours.clone(),
                        netns: None,
                    }
                } else {
                    PortKind::Tap {
                        iface: ours.clone(),
                        netns: None,
                    }
                };
                let opened = ports::open(eal, &kind, &PortOptions::new(mtu))?;
                if !af_packet {
                    net.ip(&["addr", "add", &kernel_addr, "dev", &ours])?;
                    net.ip(&["link", "set", "dev", &ours, "up"])?;
                }
                ports::wait_link(&[&opened], Duration::from_secs(10))?;
                let listener = TcpListener::bind(SocketAddrV4::new(KERNEL, 7000))?;
                let echo = scope.spawn(move || echo(listener));
                let device = opened.device(0, None)?;
                let mut config = StackConfig::new(opened.mac(), OURS);
                config.seed = u64::from(std::process::id());
                let stack = Stack::new(config, device, dataplane::clock::now())?;
                let checked = exchange(stack);
                let echoed = echo.join().map_err(|_| "the echo thread panicked")?;
                checked?;
                echoed?;
                // The port closed (its rings gave their mbufs back): every
                // mbuf is home.
                let pools = opened.pools.clone();
                drop(opened);
                for pool in &pools {
                    if pool.available() != pool.capacity() {
                        return Err(format!(
                            "{} of {} mbufs back in {}",
                            pool.available(),
                            pool.capacity(),
                            pool.name()
                        )
                        .into());
                    }
                }
                Ok(())
            })
            .join()
            .map_err(|_| Failed::from("the trial's thread panicked"))?
    })?;
    drop(net);
    Ok(())
}

/// A TAP port asked for MTU 9000 is refused, naming the limit.
fn tap_refuses_jumbo() -> Result<(), Failed> {
    let (eal, _) = ports::start_eal(Hugepages::Auto, &[])?;
    let net = Netns::create(&format!("dpwkj{}", std::process::id() % 100_000))?;
    let kind = PortKind::Tap {
        iface: format!("dpwkj{}", std::process::id() % 100_000),
        netns: Some(net.name().to_string()),
    };
    match ports::open(eal, &kind, &PortOptions::new(9000)) {
        Ok(_) => Err("net_tap took MTU 9000".into()),
        Err(why) if why.contains("at most 1504") && why.contains("9000") => Ok(()),
        Err(why) => Err(format!("the refusal does not name the limit: {why}").into()),
    }
}

/// Linux's side: read everything (checking it), write it back, close.
fn echo(listener: TcpListener) -> Result<(), String> {
    // Never wait for ever: a connection that does not come is a failure.
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let start = Instant::now();
    let mut s = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if start.elapsed() > Duration::from_secs(30) {
                    return Err("no connection reached Linux in 30 s".into());
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(e.to_string()),
        }
    };
    s.set_nonblocking(false).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    let mut got = vec![0u8; TOTAL];
    s.read_exact(&mut got)
        .map_err(|e| format!("Linux read: {e}"))?;
    if let Some(i) = (0..TOTAL).find(|&i| got[i] != pattern(i)) {
        return Err(format!("Linux got octet {i} wrong"));
    }
    s.write_all(&got).map_err(|e| format!("Linux write: {e}"))?;
    Ok(())
}

/// Our side: send `TOTAL` octets, read them back, check every one.
fn exchange(mut s: Stack<dataplane::DpdkDevice>) -> Result<(), String> {
    let conn = s
        .connect(SocketAddrV4::new(KERNEL, 7000), dataplane::clock::now())
        .map_err(|e| e.to_string())?;
    let start = Instant::now();
    let (mut sent, mut back) = (0usize, 0usize);
    while back < TOTAL {
        if start.elapsed() > Duration::from_secs(60) {
            return Err(format!(
                "sent {sent}, got {back} back in 60 s: {:?}",
                s.device().counters()
            ));
        }
        s.poll(dataplane::clock::now());
        s.device_mut().flush();
        while let Some(e) = s.next_event() {
            if matches!(e.kind, EventKind::Reset | EventKind::TimedOut) {
                return Err(format!(
                    "the connection ended ({:?}) after {sent} octets sent, {back} back: {:?}",
                    e.kind,
                    s.device().counters()
                ));
            }
        }
        if sent < TOTAL {
            let _ = s.send_with(conn, TOTAL - sent, |space| {
                for (i, o) in space.iter_mut().enumerate() {
                    *o = pattern(sent + i);
                }
                (space.len(), ())
            });
            sent = s.send_position(conn).map(|p| p as usize).unwrap_or(sent);
        }
        let got = s.recv_with(conn, |data, at| {
            let bad = data
                .iter()
                .enumerate()
                .find(|&(i, &o)| o != pattern(at as usize + i));
            (data.len(), (data.len(), bad.map(|(i, _)| at as usize + i)))
        });
        match got {
            Ok((_, Some(at))) => return Err(format!("octet {at} came back wrong")),
            Ok((n, None)) => back += n,
            Err(_) => {}
        }
    }
    let c = s.device().counters();
    if c.rx_bad_checksum + c.rx_malformed + c.rx_runt + c.rx_oversized != 0 {
        return Err(format!("bad frames from Linux: {c:?}"));
    }
    eprintln!("device counters: {c:?}");
    Ok(())
}
