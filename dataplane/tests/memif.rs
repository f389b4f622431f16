//! DPDK memif between two processes, as two hosts joined by a wire: this
//! test binary runs itself a second time as the memif server (a tcp-lite
//! stack that checks every octet it receives and answers with the count),
//! and as the client connects, sends 64 MiB, reads the answer and closes.
//! Both tear down in the order DPDK 22.11's memif needs: a process whose
//! peer leaves must not be inside a burst then (the driver unmaps the
//! shared memory under it), so each stops polling before the other goes.
//! Also: a second server on a socket that is in use is refused, with a
//! message that says so; and a server that never stops polling outlives
//! clients that come and go (the driver unmaps a leaving client's rings
//! under a burst unless `dataplane`'s memif gate holds the bursts off);
//! and a port opened while another closes is not refused (the trials run
//! at once, in one process, as they did on CI when that was found); and a
//! client whose socket nobody serves is refused with what to do.
//!
//! Uses hugepages when enough are reserved, ordinary pages otherwise.
#![allow(clippy::disallowed_methods)] // The test paces itself by the clock.

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use dataplane::ports::{self, Hugepages, Opened, PortKind, PortOptions};
use libtest_mimic::{Arguments, Failed, Trial};
use tcp_lite::{EventKind, Stack, StackConfig, TcpConfig, Transport};

const SERVER: Ipv4Addr = Ipv4Addr::new(10, 90, 0, 2);
const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 90, 0, 1);
const PORT: u16 = 5555;
const TOTAL: u64 = 64 << 20;
const ROLE: &str = "DPWARP_MEMIF_TEST_ROLE";
const SOCKET: &str = "DPWARP_MEMIF_TEST_SOCKET";

fn main() {
    if let Ok(role) = std::env::var(ROLE) {
        let socket = std::env::var(SOCKET).expect("the socket name");
        let run: fn(&str) -> Result<(), String> = match role.as_str() {
            "server" => server,
            "poller" => poller,
            _ => std::process::exit(2),
        };
        let code = run(&socket).map_or_else(
            |e| {
                eprintln!("memif {role}: {e}");
                1
            },
            |()| 0,
        );
        std::process::exit(code);
    }
    let args = Arguments::from_args();
    libtest_mimic::run(
        &args,
        vec![
            Trial::test(
                "two_processes_over_memif_move_every_octet_and_part_cleanly",
                two_processes,
            ),
            Trial::test(
                "a_server_that_never_stops_polling_outlives_clients_that_come_and_go",
                churn,
            ),
            Trial::test(
                "a_port_opened_while_another_closes_is_not_refused",
                open_while_closing,
            ),
            Trial::test(
                "a_client_with_no_server_is_told_to_start_the_server_first",
                no_server,
            ),
        ],
    )
    .exit();
}

fn pattern(i: u64) -> u8 {
    (i.wrapping_mul(0x9E37_79B1) >> 11) as u8
}

fn stack(opened: &Opened, addr: Ipv4Addr) -> Result<Stack<dataplane::DpdkDevice>, String> {
    let device = opened.device(0, None)?;
    let mut config = StackConfig::new(opened.mac(), addr);
    config.tcp = TcpConfig {
        congestion: tcp_lite::CongestionControl::None,
        ..TcpConfig::default()
    };
    Stack::new(config, device, dataplane::clock::now()).map_err(|e| e.to_string())
}

fn open(socket: &str, server: bool) -> Result<Opened, String> {
    let (eal, _) = ports::start_eal(Hugepages::Auto, &[])?;
    let kind = PortKind::Memif {
        socket: socket.into(),
        server,
    };
    ports::open(eal, &kind, &PortOptions::new(9000))
}

/// The child: serve one connection, then stop polling and say so; leave
/// when the parent (which stopped polling too) closes our stdin.
fn server(socket: &str) -> Result<(), String> {
    let opened = open(socket, true)?;
    let mut s = stack(&opened, SERVER)?;
    s.listen(PORT).map_err(|e| e.to_string())?;
    println!("listening");
    let start = Instant::now();
    let (mut conn, mut received, mut answered) = (None, 0u64, false);
    loop {
        if start.elapsed() > Duration::from_secs(60) {
            return Err("not done in 60 s".into());
        }
        s.poll(dataplane::clock::now());
        s.device_mut().flush();
        while let Some(e) = s.next_event() {
            match e.kind {
                EventKind::Accepted(_) => conn = Some(e.conn),
                EventKind::Closed | EventKind::Reset => {
                    if answered {
                        // Done: no burst on this port from here on.
                        println!("quiet {received}");
                        let mut line = String::new();
                        let _ = std::io::stdin().read_line(&mut line);
                        return Ok(());
                    }
                    return Err(format!("the connection ended after {received} octets"));
                }
                EventKind::PeerClosed => {
                    let c = e.conn;
                    let _ = s.close(c);
                }
                _ => {}
            }
        }
        let Some(c) = conn else { continue };
        while let Ok(n) = s.recv_with(c, |data, at| {
            let bad = data
                .iter()
                .enumerate()
                .find(|(i, &o)| o != pattern(at + *i as u64));
            (data.len(), (data.len(), bad.map(|(i, _)| at + i as u64)))
        }) {
            if let (_, Some(at)) = n {
                return Err(format!("octet {at} differs"));
            }
            received += n.0 as u64;
            if n.0 == 0 {
                break;
            }
        }
        if received == TOTAL && !answered {
            let answer = received.to_be_bytes();
            s.send_with(c, 8, |space| {
                space[..8].copy_from_slice(&answer);
                (8, ())
            })
            .map_err(|e| e.to_string())?;
            answered = true;
        }
    }
}

/// This binary again, as `role` on `socket`, once it says it listens: the
/// child and what it says on its stdout.
fn spawn(role: &str, socket: &str) -> Result<(Child, BufReader<ChildStdout>), Failed> {
    let mut child = Command::new(std::env::current_exe()?)
        .env(ROLE, role)
        .env(SOCKET, socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let mut said = BufReader::new(child.stdout.take().expect("piped"));
    let mut line = String::new();
    said.read_line(&mut line)?;
    if line.trim() != "listening" {
        let _ = child.kill();
        let _ = child.wait();
        return Err(format!("the {role} said {line:?}").into());
    }
    Ok((child, said))
}

fn two_processes() -> Result<(), Failed> {
    let socket = format!("/run/dpwarp/test-memif-{}.sock", std::process::id());
    let (mut child, mut said) = spawn("server", &socket)?;
    let outcome = client(&socket, &mut said);
    // The server is quiet (or gone): leave it our stdin's end.
    drop(child.stdin.take());
    let status = child.wait()?;
    outcome?;
    if !status.success() {
        return Err(format!("the server process ended {status}").into());
    }
    Ok(())
}

fn client(socket: &str, said: &mut impl BufRead) -> Result<(), Failed> {
    // A second server on the socket in use is refused, and says why.
    match open(socket, true) {
        Ok(_) => return Err("a second memif server on a socket in use was accepted".into()),
        Err(why) => {
            if !why.contains("memif") || !why.contains("socket") {
                return Err(format!("the refusal does not say what to fix: {why}").into());
            }
        }
    }
    let opened = open(socket, false)?;
    ports::wait_link(&[&opened], Duration::from_secs(10))?;
    let mut s = stack(&opened, CLIENT)?;
    let conn = s.connect(SocketAddrV4::new(SERVER, PORT), dataplane::clock::now())?;
    let start = Instant::now();
    let (mut sent, mut answer, mut closed) = (0u64, Vec::new(), false);
    while !closed {
        if start.elapsed() > Duration::from_secs(60) {
            return Err(format!("sent {sent}, answer {answer:?} after 60 s").into());
        }
        s.poll(dataplane::clock::now());
        s.device_mut().flush();
        while let Some(e) = s.next_event() {
            closed |= e.conn == conn && e.kind == EventKind::Closed;
            if e.kind == EventKind::Reset {
                return Err("the server reset the connection".into());
            }
        }
        if sent < TOTAL {
            let _ = s.send_with(conn, (TOTAL - sent) as usize, |space| {
                for (i, o) in space.iter_mut().enumerate() {
                    *o = pattern(sent + i as u64);
                }
                (space.len(), ())
            });
            sent = s.send_position(conn).unwrap_or(sent);
        }
        let _ = s.recv_with(conn, |data, _| {
            answer.extend_from_slice(data);
            (data.len(), ())
        });
        if answer.len() == 8 && !closed {
            let _ = s.close(conn);
        }
    }
    let count = u64::from_be_bytes(answer[..8].try_into()?);
    if count != TOTAL {
        return Err(format!("the server counted {count} octets of {TOTAL}").into());
    }
    // We stopped polling; wait until the server has too, then go.
    let mut line = String::new();
    said.read_line(&mut line)?;
    if line.trim() != format!("quiet {TOTAL}") {
        return Err(format!("the server said {line:?}").into());
    }
    let counters = s.device().counters();
    if counters.rx_dropped() != 0 {
        return Err(format!("frames dropped: {counters:?}").into());
    }
    drop(s);
    let pools = opened.pools.clone();
    drop(opened);
    for pool in &pools {
        if pool.available() != pool.capacity() {
            return Err(format!("{} of {} mbufs back", pool.available(), pool.capacity()).into());
        }
    }
    Ok(())
}

/// Clients that come and go while the server polls.
const CLIENTS: usize = 60;

/// The child of [`churn`]: a memif server that polls without pause (a
/// listening tcp-lite stack, as dpwarpd's cores) until its stdin closes,
/// then says how often its memif gate closed.
fn poller(socket: &str) -> Result<(), String> {
    let opened = open(socket, true)?;
    let mut s = stack(&opened, SERVER)?;
    s.listen(PORT).map_err(|e| e.to_string())?;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = done.clone();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
        seen.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    println!("listening");
    let (mut accepted, start) = (0u64, Instant::now());
    while !done.load(std::sync::atomic::Ordering::SeqCst) {
        if start.elapsed() > Duration::from_secs(120) {
            return Err("not told to stop in 120 s".into());
        }
        s.poll(dataplane::clock::now());
        s.device_mut().flush();
        while let Some(e) = s.next_event() {
            match e.kind {
                EventKind::Accepted(_) => {
                    accepted += 1;
                    println!("accepted");
                }
                EventKind::PeerClosed => {
                    let _ = s.close(e.conn);
                }
                _ => {}
            }
        }
    }
    let (closings, given_up) = dataplane::dpdk::memif_gate_counters();
    println!("accepted {accepted} gate {closings} given_up {given_up}");
    Ok(())
}

/// A server on a core that never stops polling, and clients that connect
/// and leave, one after another (each port's close is a disconnect the
/// server's interrupt thread handles while its core bursts); then one
/// more that opens a TCP connection through the port. The server must
/// live through all of it, its gate must have closed at least once per
/// client (as it connected or as it left: the count does not tell which),
/// and no wait for a burst may have given up.
fn churn() -> Result<(), Failed> {
    let socket = format!("/run/dpwarp/test-churn-{}.sock", std::process::id());
    let (mut child, mut said) = spawn("poller", &socket)?;
    let outcome = (|| -> Result<(), Failed> {
        for i in 0..CLIENTS {
            let opened = open(&socket, false)?;
            ports::wait_link(&[&opened], Duration::from_secs(10))
                .map_err(|e| format!("client {i}: {e}"))?;
            drop(opened);
            if let Some(status) = child.try_wait()? {
                return Err(format!("the server ended ({status}) after client {i} left").into());
            }
        }
        // The port still carries traffic: a TCP handshake through it.
        let opened = open(&socket, false)?;
        ports::wait_link(&[&opened], Duration::from_secs(10))?;
        let mut s = stack(&opened, CLIENT)?;
        let conn = s.connect(SocketAddrV4::new(SERVER, PORT), dataplane::clock::now())?;
        let start = Instant::now();
        let mut up = false;
        while !up {
            if start.elapsed() > Duration::from_secs(10) {
                return Err("no TCP connection through the port after the clients".into());
            }
            s.poll(dataplane::clock::now());
            s.device_mut().flush();
            while let Some(e) = s.next_event() {
                up |= e.conn == conn && matches!(e.kind, EventKind::Connected);
            }
        }
        // Our ACK is on its way; the server says when it has it.
        let mut accepted = String::new();
        said.read_line(&mut accepted)?;
        if accepted.trim() != "accepted" {
            return Err(format!("the server said {accepted:?}").into());
        }
        Ok(())
    })();
    drop(child.stdin.take());
    let mut last = String::new();
    said.read_line(&mut last)?;
    let status = child.wait()?;
    outcome?;
    if !status.success() {
        return Err(format!("the server process ended {status}").into());
    }
    // "accepted N gate N given_up N"
    let words: Vec<&str> = last.split_whitespace().collect();
    let count = |name: &str| -> Option<u64> {
        let at = words.iter().position(|w| *w == name)?;
        words.get(at + 1)?.parse().ok()
    };
    let (Some(accepted), Some(gate), Some(given_up)) =
        (count("accepted"), count("gate"), count("given_up"))
    else {
        return Err(format!("the server said {last:?}").into());
    };
    if accepted != 1 || gate < CLIENTS as u64 || given_up != 0 {
        return Err(format!(
            "after {CLIENTS} clients and a connection: accepted {accepted}, the gate closed \
             {gate} times, {given_up} waits gave up"
        )
        .into());
    }
    Ok(())
}

/// A memif port closing on one thread (its close waits 50 ms before the
/// device goes, for DPDK's deferred release) while another thread opens
/// one: DPDK may give the new port the id the closing one just released,
/// which must not be refused as a port "open already" (it was, while the
/// closing port kept its claim through the wait).
fn open_while_closing() -> Result<(), Failed> {
    let base = format!("/run/dpwarp/test-reuse-{}", std::process::id());
    for round in 0..3 {
        let old = open(&format!("{base}-{round}a.sock"), true)?;
        let closing = std::thread::spawn(move || drop(old));
        // Inside the closing port's wait.
        std::thread::sleep(Duration::from_millis(10));
        let new = open(&format!("{base}-{round}b.sock"), true);
        closing.join().map_err(|_| "the closing thread panicked")?;
        new.map_err(|e| format!("round {round}: a port opened while another closed: {e}"))?;
    }
    Ok(())
}

/// A memif client connects to its server's socket when its port starts;
/// with nothing serving the socket the start fails, and the message says
/// to start the server first (DPDK's own says only "Operation not
/// permitted").
fn no_server() -> Result<(), Failed> {
    let socket = format!("/run/dpwarp/test-memif-none-{}.sock", std::process::id());
    match open(&socket, false) {
        Ok(_) => Err(format!("a memif client of {socket}, which nothing serves, started").into()),
        Err(why) if why.contains("start the server first") => Ok(()),
        Err(why) => Err(format!("the refusal does not say what to fix: {why}").into()),
    }
}
