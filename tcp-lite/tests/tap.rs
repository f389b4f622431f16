//! The stack over a TAP device, against Linux TCP inside a network namespace
//! this test creates: our stack connects to a kernel listener there, and a
//! kernel client there connects to our listener; 1 MiB goes each way and
//! comes back, checked octet by octet.
//!
//! It needs root (CAP_NET_ADMIN), `/dev/net/tun` and the `ip` command. Where
//! one is missing the test is reported as *ignored*, with the reason on
//! stderr, never as passed. The namespace (and with it the TAP device) is
//! deleted on every exit path; threads are bounded by socket timeouts.
#![allow(clippy::disallowed_methods)] // A test on a real device reads the real clock.

mod support;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::time::Duration as StdDuration;

use libtest_mimic::{Arguments, Failed, Trial};
use support::{check, fill};
use tcp_lite::sys::netns::{self, tap_in_netns, Netns};
use tcp_lite::sys::tap::TapDevice;
use tcp_lite::{ConnId, Duration, EventKind, Instant, Stack, StackConfig, Transport};

const KERNEL_ADDR: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);
const STACK_ADDR: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 2);
const KERNEL_PORT: u16 = 5001;
const STACK_PORT: u16 = 6001;
const TOTAL: usize = 1 << 20;
const DEADLINE: StdDuration = StdDuration::from_secs(30);

fn main() {
    let args = Arguments::from_args();
    let trial = match tcp_lite::sys::tap::namespace_unavailable() {
        None => Trial::test("tap_to_kernel_in_netns_and_back", tap_to_kernel_and_back),
        Some(why) => {
            eprintln!("tap_to_kernel_in_netns_and_back: SKIPPED (reported as ignored): {why}");
            Trial::test("tap_to_kernel_in_netns_and_back", || Ok(())).with_ignored_flag(true)
        }
    };
    libtest_mimic::run(&args, vec![trial]).exit();
}

/// Run `f` on a thread that has entered namespace `ns`.
fn in_netns<T: Send + 'static>(
    ns: &Netns,
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> std::thread::JoinHandle<Result<T, String>> {
    let name = ns.name().to_string();
    std::thread::spawn(move || {
        netns::enter(&name).map_err(|e| e.to_string())?;
        f()
    })
}

/// The kernel's side: echo everything one accepted connection sends.
fn kernel_echo_server(listener: TcpListener) -> Result<usize, String> {
    let (mut stream, _) = listener.accept().map_err(|e| format!("accept: {e}"))?;
    stream
        .set_read_timeout(Some(DEADLINE))
        .map_err(|e| e.to_string())?;
    let mut buf = vec![0; 64 * 1024];
    let mut echoed = 0;
    loop {
        let n = stream
            .read(&mut buf)
            .map_err(|e| format!("kernel echo read: {e}"))?;
        if n == 0 {
            return Ok(echoed);
        }
        stream
            .write_all(&buf[..n])
            .map_err(|e| format!("kernel echo write: {e}"))?;
        echoed += n;
    }
}

/// The kernel's client: send the pattern, read it back, check it.
fn kernel_client() -> Result<(), String> {
    let addr = SocketAddrV4::new(STACK_ADDR, STACK_PORT);
    let mut stream = TcpStream::connect_timeout(&addr.into(), DEADLINE)
        .map_err(|e| format!("connect {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(DEADLINE))
        .map_err(|e| e.to_string())?;
    let mut out = vec![0; TOTAL];
    fill(11, 0, &mut out);
    let mut writer = stream.try_clone().map_err(|e| e.to_string())?;
    let sender = std::thread::spawn(move || writer.write_all(&out).map(|_| writer));
    let mut back = vec![0; TOTAL];
    stream
        .read_exact(&mut back)
        .map_err(|e| format!("kernel client read: {e}"))?;
    let writer = sender
        .join()
        .map_err(|_| "sender panicked")?
        .map_err(|e| e.to_string())?;
    check(11, 0, &back).map_err(|at| format!("octet {at} came back wrong"))?;
    writer
        .shutdown(std::net::Shutdown::Both)
        .map_err(|e| e.to_string())?;
    Ok(())
}

fn tap_to_kernel_and_back() -> Result<(), Failed> {
    let pid = std::process::id();
    let (tap, ns) = tap_in_netns(
        &format!("dpwtap{pid}"),
        &format!("dpwt{}", pid % 100_000_000),
        1500,
        KERNEL_ADDR,
        24,
    )?;

    // The kernel listener exists before our SYN leaves.
    let (bound_tx, bound_rx) = std::sync::mpsc::channel();
    let echo = in_netns(&ns, move || {
        let listener = TcpListener::bind(SocketAddrV4::new(KERNEL_ADDR, KERNEL_PORT))
            .map_err(|e| format!("bind: {e}"))?;
        let _ = bound_tx.send(());
        kernel_echo_server(listener)
    });
    bound_rx
        .recv_timeout(DEADLINE)
        .map_err(|_| "the kernel listener did not start")?;

    let start = std::time::Instant::now();
    let clock = || Instant::from_micros(start.elapsed().as_micros() as i64);
    let mut config = StackConfig::new([0x02, 0x64, 0x70, 0x77, 0, 2], STACK_ADDR);
    config.tcp.rx_buffer = 256 * 1024;
    config.tcp.tx_buffer = 256 * 1024;
    let mut stack = Stack::new(config, tap, clock())?;
    stack.listen(STACK_PORT)?;
    let client = in_netns(&ns, kernel_client);

    // Our active open to the kernel listener: send the pattern, check the echo.
    let active = stack.connect(SocketAddrV4::new(KERNEL_ADDR, KERNEL_PORT), clock())?;
    let mut out = Flow::new(active, 7);
    let mut accepted: Option<Flow> = None;
    let mut closed = 0;
    let mut connected = false;
    while closed < 2 {
        if start.elapsed() > DEADLINE {
            return Err(format!(
                "not done after {DEADLINE:?}: active {:?} accepted {:?}",
                out.progress(),
                accepted.as_ref().map(Flow::progress)
            )
            .into());
        }
        stack.poll(clock());
        while let Some(event) = stack.next_event() {
            match event.kind {
                EventKind::Accepted(_) => accepted = Some(Flow::new(event.conn, 11)),
                EventKind::Connected => connected = true,
                EventKind::Reset | EventKind::TimedOut => {
                    return Err(format!("{} ended with {:?}", event.conn, event.kind).into());
                }
                EventKind::Closed => {
                    stack.release(event.conn);
                    closed += 1;
                }
                _ => {}
            }
        }
        if connected {
            out.pump(&mut stack, true)?;
        }
        if let Some(flow) = accepted.as_mut() {
            flow.pump(&mut stack, false)?;
        }
        stack.poll(clock());
        let _ = stack.device().wait(Some(Duration::from_millis(1)));
    }
    let echoed = echo.join().map_err(|_| "echo thread panicked")??;
    assert_eq!(echoed, TOTAL, "the kernel echoed all we sent");
    client.join().map_err(|_| "client thread panicked")??;
    assert_eq!(stack.connections(), 0);
    Ok(())
}

/// One connection's progress: the pattern out (if we originate) and back.
struct Flow {
    conn: ConnId,
    seed: u64,
    sent: usize,
    received: usize,
    /// Echoed data waiting to go back (accepting side).
    echo: Vec<u8>,
    closing: bool,
}

impl Flow {
    fn new(conn: ConnId, seed: u64) -> Flow {
        Flow {
            conn,
            seed,
            sent: 0,
            received: 0,
            echo: Vec::new(),
            closing: false,
        }
    }

    fn progress(&self) -> (usize, usize) {
        (self.sent, self.received)
    }

    /// Originating side: send the pattern, check what comes back, close.
    /// Echoing side: send back what arrives, close once all of it is echoed.
    fn pump(&mut self, stack: &mut Stack<TapDevice>, originate: bool) -> Result<(), Failed> {
        let conn = self.conn;
        if stack.tcp_state(conn).is_none() || self.closing {
            return Ok(());
        }
        if originate && self.sent < TOTAL {
            let (seed, sent) = (self.seed, self.sent);
            let n = stack.send_with(conn, TOTAL - sent, |buf| {
                fill(seed, sent as u64, buf);
                (buf.len(), buf.len())
            });
            self.sent += n.unwrap_or(0);
        }
        if !originate && !self.echo.is_empty() {
            let echo = &mut self.echo;
            let n = stack.send_with(conn, echo.len(), |buf| {
                buf.copy_from_slice(&echo[..buf.len()]);
                (buf.len(), buf.len())
            })?;
            echo.drain(..n);
        }
        loop {
            let (seed, echo) = (self.seed, &mut self.echo);
            let got = stack.recv_with(conn, |data, pos| {
                if originate {
                    if let Err(at) = check(seed, pos, data) {
                        return (0, Err(format!("octet {at} came back wrong")));
                    }
                } else {
                    echo.extend_from_slice(data);
                }
                (data.len(), Ok(data.len()))
            });
            match got {
                Ok(Ok(0)) => break,
                Ok(Ok(n)) => self.received += n,
                Ok(Err(e)) => return Err(e.into()),
                Err(tcp_lite::RecvError::Finished) => break,
                Err(e) => return Err(format!("receive: {e}").into()),
            }
        }
        let done = if originate {
            self.received == TOTAL
        } else {
            self.echo.is_empty() && self.received == TOTAL
        };
        if done {
            stack.close(conn)?;
            self.closing = true;
        }
        Ok(())
    }
}
