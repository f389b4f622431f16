//! Both roles over a TAP device: host A runs tcp-lite's stack on a TAP
//! device that this test moves into a network namespace it creates; host B
//! runs Linux TCP (`KernelTransport`) on a thread inside that namespace.
//! A connects to B (peer-to-peer, Write RTR) and B connects to A
//! (client-server); each initiator then Sends (echoed by the responder),
//! RDMA-Writes into the responder's memory and Reads it back. Each side
//! learns the other's STag from the MPA private data.
//!
//! Needs root, `/dev/net/tun` and `ip`; elsewhere it is reported *ignored*
//! with the reason, not passed. The namespace is deleted on every exit.
#![allow(clippy::disallowed_methods)] // A test on a real device reads the real clock.

mod support;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant as StdInstant};

use control::mpa::{Accept, Rtr, RtrSet, StartupConfig};
use control::runtime::{Decision, StartupResult};
use dataplane::CoreTransport;
use libtest_mimic::{Arguments, Failed, Trial};
use rnic_engine::cq::{WcOpcode, WcStatus};
use rnic_engine::verbs::{QpHandle, RecvWr, RemoteAddr, SendOp, SendWr};
use support::{now, Host};
use tcp_lite::sys::kernel::{KernelConfig, KernelTransport};
use tcp_lite::sys::netns::tap_in_netns;
use tcp_lite::{Stack, StackConfig};

const KERNEL_ADDR: Ipv4Addr = Ipv4Addr::new(10, 98, 0, 1);
const STACK_ADDR: Ipv4Addr = Ipv4Addr::new(10, 98, 0, 2);
const B_PORT: u16 = 7174;
const A_PORT: u16 = 7175;
const DEADLINE: StdDuration = StdDuration::from_secs(30);

fn main() {
    let args = Arguments::from_args();
    let name = "rnic_over_tap_both_roles";
    let trial = match tcp_lite::sys::tap::namespace_unavailable() {
        None => Trial::test(name, both_roles_over_tap),
        Some(why) => {
            eprintln!("{name}: SKIPPED (reported as ignored): {why}");
            Trial::test(name, || Ok(())).with_ignored_flag(true)
        }
    };
    libtest_mimic::run(&args, vec![trial]).exit();
}

/// The application on each host: an initiator drives (Send and wait for the
/// echo, Write into the peer, Read it back); a responder echoes Sends.
#[derive(Default)]
struct App {
    /// Initiator: its QP, the peer's memory, and how far it got.
    driving: Option<(QpHandle, RemoteAddr, u8)>,
    /// Responder QPs, echoing.
    serving: Vec<QpHandle>,
    done: bool,
    error: Option<String>,
}

const PING: &[u8] = b"ping over TAP and Linux TCP, through MPA and DDP";

/// Our memory, for the peer: STag and TO in the private data.
fn memory_pd<T: CoreTransport>(host: &Host<T>) -> Vec<u8> {
    let mut pd = host.mr.stag.to_be_bytes().to_vec();
    pd.extend_from_slice(&host.mr.base_to.to_be_bytes());
    pd
}

fn peer_memory(pd: &[u8]) -> Option<RemoteAddr> {
    let stag = u32::from_be_bytes(pd.get(..4)?.try_into().ok()?);
    let to = u64::from_be_bytes(pd.get(4..12)?.try_into().ok()?);
    Some(RemoteAddr { stag, to })
}

/// One turn of a host's application.
fn serve<T: CoreTransport>(host: &mut Host<T>, app: &mut App) {
    for handoff in std::mem::take(&mut host.handoffs) {
        let StartupResult::Established(e) = &handoff.result else {
            app.error = Some(format!("startup ended {:?}", handoff.result));
            continue;
        };
        let qp = host.qps[&handoff.conn.expect("established")];
        if handoff.token != 0 {
            let Some(remote) = peer_memory(&e.peer_private_data) else {
                app.error = Some("no memory in the peer's private data".into());
                continue;
            };
            host.region.write(0, PING).unwrap();
            let sge = host.sge(1000, 256);
            host.rnic()
                .post_recv(
                    qp,
                    &RecvWr {
                        wr_id: 1,
                        sgl: &[sge],
                    },
                )
                .unwrap();
            let sgl = [host.sge(0, PING.len() as u32)];
            host.rnic()
                .post_send(qp, &SendWr::signaled(2, SendOp::Send, &sgl))
                .unwrap();
            app.driving = Some((qp, remote, 0));
        } else {
            for id in 0..4 {
                let sge = host.sge(4096 * (1 + id), 4096);
                host.rnic()
                    .post_recv(
                        qp,
                        &RecvWr {
                            wr_id: 100 + id,
                            sgl: &[sge],
                        },
                    )
                    .unwrap();
            }
            app.serving.push(qp);
        }
    }
    for wc in host.completions() {
        if wc.status != WcStatus::Success {
            app.error = Some(format!("{wc:?}"));
            continue;
        }
        match (wc.wr_id, wc.opcode) {
            // Responder: echo what came, then repost the receive.
            (100..=103, WcOpcode::Recv) => {
                let at = 4096 * (1 + wc.wr_id - 100);
                let sgl = [host.sge(at, wc.byte_len)];
                let _ = host
                    .rnic()
                    .post_send(wc.qp, &SendWr::signaled(200, SendOp::Send, &sgl));
                let sge = host.sge(at, 4096);
                let _ = host.rnic().post_recv(
                    wc.qp,
                    &RecvWr {
                        wr_id: wc.wr_id,
                        sgl: &[sge],
                    },
                );
            }
            (200, _) => {}
            // Initiator: the echo is back; write it into the peer, read it back.
            (1, WcOpcode::Recv) => {
                let mut echo = vec![0; wc.byte_len as usize];
                host.region.read(1000, &mut echo).unwrap();
                if echo != PING {
                    app.error = Some("the echo differs".into());
                }
                if let Some((qp, remote, _)) = app.driving {
                    let write = [host.sge(0, PING.len() as u32)];
                    let peer = RemoteAddr {
                        stag: remote.stag,
                        to: remote.to + 60_000,
                    };
                    host.rnic()
                        .post_send(qp, &SendWr::signaled(3, SendOp::Write(peer), &write))
                        .unwrap();
                    let read = [host.sge(2000, PING.len() as u32)];
                    host.rnic()
                        .post_send(qp, &SendWr::signaled(4, SendOp::Read(peer), &read))
                        .unwrap();
                }
            }
            (2 | 3, _) => {}
            (4, WcOpcode::Read) => {
                let mut back = vec![0; PING.len()];
                host.region.read(2000, &mut back).unwrap();
                if back != PING {
                    app.error = Some("the Read returned other octets".into());
                }
                app.done = true;
            }
            other => app.error = Some(format!("unexpected completion {other:?}")),
        }
    }
}

fn both_roles_over_tap() -> Result<(), Failed> {
    let pid = std::process::id();
    let (tap, netns) = tap_in_netns(
        &format!("dpwtap{pid}"),
        &format!("dpwc{}", pid % 100_000_000),
        1500,
        KERNEL_ADDR,
        24,
    )?;

    // Host B: Linux TCP inside the namespace, on its own thread.
    let b_done = Arc::new(AtomicBool::new(false));
    let a_done = Arc::new(AtomicBool::new(false));
    let (b_flag, a_flag) = (b_done.clone(), a_done.clone());
    let ns = netns.name().to_string();
    let b = std::thread::spawn(move || -> Result<(), String> {
        tcp_lite::sys::netns::enter(&ns).map_err(|e| e.to_string())?;
        let config = KernelConfig {
            bind: KERNEL_ADDR,
            ..KernelConfig::default()
        };
        let transport = KernelTransport::new(config).map_err(|e| e.to_string())?;
        let mut host = Host::new(transport, 1448, 2);
        let pd = memory_pd(&host);
        host.control.listen(
            0,
            B_PORT,
            StartupConfig::default(),
            Box::new(move |_, _| {
                Decision::Accept(Accept {
                    private_data: pd.clone(),
                    ..Accept::default()
                })
            }),
        );
        let mut app = App::default();
        let start = StdInstant::now();
        let mut connected = false;
        while !(app.done && a_flag.load(Ordering::SeqCst)) {
            if start.elapsed() > DEADLINE {
                return Err(format!(
                    "host B not done: driving {:?}, error {:?}",
                    app.driving.map(|d| d.2),
                    app.error
                ));
            }
            // B connects back to A's listener once A has been served.
            if !connected && !app.serving.is_empty() {
                let pd = memory_pd(&host);
                host.control.connect(
                    0,
                    SocketAddrV4::new(STACK_ADDR, A_PORT),
                    StartupConfig::default(),
                    &pd,
                );
                connected = true;
            }
            host.step(now());
            serve(&mut host, &mut app);
            if let Some(error) = app.error.take() {
                return Err(format!("host B: {error}"));
            }
            std::thread::sleep(StdDuration::from_micros(100));
        }
        b_flag.store(true, Ordering::SeqCst);
        Ok(())
    });

    // Host A: tcp-lite's stack on the TAP device.
    let stack = Stack::new(
        StackConfig::new([0x02, 0x64, 0x70, 0x77, 0, 3], STACK_ADDR),
        tap,
        now(),
    )?;
    let emss = stack.emss();
    let mut host = Host::new(stack, emss, 1);
    let pd = memory_pd(&host);
    host.control.listen(
        0,
        A_PORT,
        StartupConfig::default(),
        Box::new(move |_, _| {
            Decision::Accept(Accept {
                private_data: pd.clone(),
                ..Accept::default()
            })
        }),
    );
    std::thread::sleep(StdDuration::from_millis(50));
    let p2p = StartupConfig {
        peer_to_peer: true,
        rtr: RtrSet {
            write: true,
            ..RtrSet::NONE
        },
        ..StartupConfig::default()
    };
    let pd = memory_pd(&host);
    host.control
        .connect(0, SocketAddrV4::new(KERNEL_ADDR, B_PORT), p2p, &pd);
    let mut app = App::default();
    let start = StdInstant::now();
    let mut rtr_checked = false;
    while !(app.done && !app.serving.is_empty() && b_done.load(Ordering::SeqCst)) {
        if start.elapsed() > DEADLINE {
            return Err(format!(
                "host A not done: done {} serving {}",
                app.done,
                app.serving.len()
            )
            .into());
        }
        host.step(now());
        for h in &host.handoffs {
            if let (StartupResult::Established(e), true) = (&h.result, h.token != 0) {
                if e.rtr != Some(Rtr::Write) {
                    return Err(format!("the initiator chose {:?}", e.rtr).into());
                }
                rtr_checked = true;
            }
        }
        serve(&mut host, &mut app);
        if let Some(error) = app.error.take() {
            return Err(format!("host A: {error}").into());
        }
        a_done.store(app.done && !app.serving.is_empty(), Ordering::SeqCst);
        let _ = host
            .core
            .transport()
            .device()
            .wait(Some(tcp_lite::Duration::from_millis(1)));
    }
    b.join().map_err(|_| "host B panicked")??;
    assert!(rtr_checked);
    drop(netns);
    Ok(())
}
