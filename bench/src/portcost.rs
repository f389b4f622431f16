//! `bench port`: what the smoltcp device layer costs per packet, beside a
//! raw DPDK loop over the same ports in the same run.
//!
//! Two ports joined in this process (a `net_ring` pair, or a memif server
//! and client), one core. The raw loop allocates a burst of mbufs, writes
//! the frame's length, sends the burst on one port, receives it on the
//! other and frees it: DPDK's own floor. The device loop moves the same
//! frames through [`DpdkDevice`]'s `phy::Device` tokens, as smoltcp does:
//! a transmit token per frame (a spare mbuf, the frame written into its
//! data room, staged, sent in bursts of 32) and a receive token per frame
//! (checked: length, MAC, EtherType, IPv4 header, then lent in place). The
//! difference per packet is the device layer's own cost.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use dataplane::dpdk::{Eal, Mbuf, Queue, BURST_MAX};
use dataplane::ports::{self, Opened, PortOptions};
use dataplane::DpdkDevice;
use tcp_lite::smoltcp::phy::{Device, RxToken, TxToken};

use crate::link::HugepagesArg;

/// `bench port`'s command line.
#[derive(Debug, Parser)]
#[command(
    name = "bench port",
    bin_name = "bench port",
    about = "the smoltcp device layer's cost per packet beside a raw DPDK loop, same ports, same run"
)]
pub struct PortArgs {
    /// The ports: a net_ring pair or a memif server and client.
    #[arg(long, value_enum, default_value_t = PortPair::Ring)]
    pub transport: PortPair,

    /// Frame size in octets (an Ethernet + IPv4 + TCP frame, 54 or more).
    #[arg(short = 's', long = "size", default_value_t = 64)]
    pub size: usize,

    /// Seconds per loop.
    #[arg(short = 'D', long, default_value_t = 2.0)]
    pub duration: f64,

    /// DPDK: EAL's memory.
    #[arg(long, value_enum, default_value_t = HugepagesArg::Auto)]
    pub hugepages: HugepagesArg,

    /// Write the figures as JSON to this file.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
}

/// Which ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PortPair {
    /// Two net_ring ports back to back.
    Ring,
    /// A net_memif server and client on one socket.
    Memif,
}

/// Runs `bench port`; returns the exit status.
pub fn main(argv: Vec<String>, stop: &AtomicBool) -> i32 {
    let args = match PortArgs::try_parse_from(argv) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    if !(54..=1514).contains(&args.size) {
        eprintln!(
            "bench port: -s {}: give a frame of 54 to 1514 octets",
            args.size
        );
        return 2;
    }
    if !(args.duration > 0.0 && args.duration <= 60.0) {
        eprintln!(
            "bench port: -D {}: give a duration above 0 and at most 60 seconds",
            args.duration
        );
        return 2;
    }
    if let Some(path) = &args.json {
        if let Err(why) = crate::report::check_json_output(path) {
            eprintln!("bench port: {why}");
            return 2;
        }
    }
    let result = run(&args, stop);
    if let Some(eal) = Eal::running() {
        let _ = eal.cleanup();
    }
    match result {
        Ok(()) => 0,
        Err(why) => {
            eprintln!("bench port: {why}");
            1
        }
    }
}

/// A frame from `src` to `dst`: Ethernet, IPv4 (checksum right), TCP.
fn frame(size: usize, src: [u8; 6], dst: [u8; 6]) -> Vec<u8> {
    let mut f = vec![0u8; size];
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let total = (size - 14) as u16;
    let ip = &mut f[14..];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[8] = 64;
    ip[9] = 6;
    ip[12..16].copy_from_slice(&[10, 93, 0, 1]);
    ip[16..20].copy_from_slice(&[10, 93, 0, 2]);
    let mut sum = 0u32;
    for pair in ip[..20].chunks(2) {
        sum += u32::from(u16::from_be_bytes([pair[0], pair[1]]));
    }
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    ip[32] = 5 << 4;
    ip[33] = 0x10;
    f
}

fn run(args: &PortArgs, stop: &AtomicBool) -> Result<(), String> {
    let hugepages = match args.hugepages {
        HugepagesArg::Auto => ports::Hugepages::Auto,
        HugepagesArg::On => ports::Hugepages::On,
        HugepagesArg::Off => ports::Hugepages::Off,
    };
    let (eal, memory) = ports::start_eal(hugepages, &[])?;
    let options = PortOptions::new(1500);
    let (a, b) = match args.transport {
        PortPair::Ring => ports::ring_pair(eal, &options)?,
        PortPair::Memif => {
            let socket = format!("/run/dpwarp/bench-port-{}.sock", std::process::id());
            let (server, client) = ports::memif_pair(eal, &socket, &options)?;
            ports::wait_link(&[&server, &client], Duration::from_secs(10))?;
            (client, server)
        }
    };
    let _pinned = dataplane::lcore::enter(dataplane::lcore::cpus().first().copied(), Some(eal))?;
    let limit = Duration::from_secs_f64(args.duration);
    let template = frame(args.size, a.mac(), b.mac());
    let (qa, qb) = (queue(&a)?, queue(&b)?);
    let (raw, qa, qb) = raw_loop(qa, qb, &a, &template, limit, stop);
    let device = device_loop(&a, &b, qa, qb, &template, limit, stop);
    let name = match args.transport {
        PortPair::Ring => "net_ring pair",
        PortPair::Memif => "net_memif server and client",
    };
    println!(
        "port layer cost | {name}, {} B frames, one core | {memory}",
        args.size
    );
    println!();
    println!(" {:<10} {:>10} {:>12}", "loop", "Mpps", "ns/packet");
    let row = |what: &str, (packets, took): (u64, Duration)| {
        let ns = took.as_nanos() as f64 / packets.max(1) as f64;
        println!(" {what:<10} {:>10.2} {ns:>12.1}", 1e3 / ns);
        ns
    };
    let raw_ns = row("raw DPDK", raw);
    let device_ns = row("Device", device);
    println!();
    println!(
        " the device layer's own cost: {:.1} ns per packet (a transmit and a receive token, \
         the frame written into its mbuf and checked on arrival)",
        device_ns - raw_ns
    );
    if let Some(path) = &args.json {
        let doc = serde_json::json!({
            "ports": name,
            "frame_size": args.size,
            "raw_ns_per_packet": raw_ns,
            "device_ns_per_packet": device_ns,
            "device_layer_ns_per_packet": device_ns - raw_ns,
        });
        std::fs::write(
            path,
            serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?,
        )
        .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

fn queue(o: &Opened) -> Result<Queue, String> {
    o.port
        .queue(0)
        .ok_or_else(|| format!("{}: queue 0 is taken", o.describe))
}

/// DPDK alone: bursts allocated, sized, sent, received and freed.
fn raw_loop(
    mut qa: Queue,
    mut qb: Queue,
    a: &Opened,
    template: &[u8],
    limit: Duration,
    stop: &AtomicBool,
) -> ((u64, Duration), Queue, Queue) {
    let pool = a.pools[0].clone();
    let mut tx: [Option<Mbuf>; BURST_MAX] = Default::default();
    let mut rx: [Option<Mbuf>; BURST_MAX] = Default::default();
    let (mut packets, start) = (0u64, Instant::now());
    while start.elapsed() < limit && !stop.load(Ordering::Relaxed) {
        for _ in 0..64 {
            if tx.iter().all(Option::is_none) && !pool.alloc_bulk(&mut tx) {
                break;
            }
            for m in tx.iter_mut().flatten() {
                if let Some(room) = m.set_len(template.len()) {
                    room[..14].copy_from_slice(&template[..14]);
                }
            }
            let sent = qa.tx_burst(&mut tx);
            // Unsent ones stay for the next burst (the ring was full).
            let _ = sent;
            let got = qb.rx_burst(&mut rx);
            packets += got as u64;
            for slot in &mut rx[..got] {
                black_box(slot.take());
            }
        }
    }
    let took = start.elapsed();
    drop(tx);
    // Drain what is still on the wire.
    loop {
        let got = qb.rx_burst(&mut rx);
        if got == 0 {
            break;
        }
        for slot in &mut rx[..got] {
            slot.take();
        }
    }
    ((packets, took), qa, qb)
}

/// The same frames through the smoltcp device: a token per frame each way.
fn device_loop(
    a: &Opened,
    b: &Opened,
    qa: Queue,
    qb: Queue,
    template: &[u8],
    limit: Duration,
    stop: &AtomicBool,
) -> (u64, Duration) {
    let mut da = device(a, qa);
    let mut db = device(b, qb);
    let now = dataplane::clock::now();
    let (mut packets, start) = (0u64, Instant::now());
    while start.elapsed() < limit && !stop.load(Ordering::Relaxed) {
        for _ in 0..64 {
            for _ in 0..BURST_MAX {
                let Some(token) = da.transmit(now) else { break };
                token.consume(template.len(), |buf| buf.copy_from_slice(template));
            }
            da.flush();
            while let Some((rx, _)) = db.receive(now) {
                rx.consume(|f| black_box(f.len()));
                packets += 1;
            }
        }
    }
    (packets, start.elapsed())
}

fn device(o: &Opened, queue: Queue) -> DpdkDevice {
    DpdkDevice::new(
        queue,
        dataplane::DeviceConfig {
            mac: o.mac(),
            mtu: 1500,
            tx_checksum: dataplane::TxChecksum::Trusted,
            rx_checksum: dataplane::RxChecksum::Trusted,
        },
    )
}
