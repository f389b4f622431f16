//! `bench rping`: rping's data and advertisement formats against siw's
//! captures, and dpwarp's rping client and server as two processes over
//! kernel TCP on loopback: every MPA option, and a persistent server that
//! outlives misbehaving clients. (Against Linux siw itself: tests/interop.)

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use bench::rping::{ping_data, Info};

mod common;
use common::serial;

const BENCH: &str = env!("CARGO_BIN_EXE_bench");
const LIMIT: Duration = Duration::from_secs(60);

/// The client's output in siw's capture is rping's own: our data must be
/// the same octets.
#[test]
fn ping_data_is_rpings() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/data/golden/rping_v2_crc.txt"
    ))
    .unwrap();
    let pings: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("ping data: "))
        .collect();
    assert_eq!(pings.len(), 3);
    for (i, line) in pings.iter().enumerate() {
        let data = ping_data(i as u64, 64);
        assert_eq!(data.len(), 64);
        assert_eq!(data[63], 0);
        assert_eq!(&data[..63], line.as_bytes(), "iteration {i}");
    }
    // The alphabet wraps from 'z' to 'A', and the start moves each time.
    let d = ping_data(57, 80);
    assert!(d.starts_with(b"rdma-ping-57: z"));
    assert_eq!(d[b"rdma-ping-57: ".len() + 1], b'A');
    // A size with room for the prefix only.
    assert_eq!(ping_data(0, 26).len(), 26);
}

/// The advertisement of siw's rping client in rping_v2_crc.pcap (frame 8)
/// and the Read Request siw's server built from it (frame 9).
#[test]
fn the_advertisement_is_rpings() {
    let captured = [
        0x00, 0x00, 0x55, 0x73, 0x01, 0x29, 0x63, 0x70, 0x4c, 0x1b, 0x05, 0x00, 0x00, 0x00, 0x00,
        0x40,
    ];
    let info = Info::decode(&captured);
    assert_eq!(
        info,
        Info {
            buf: 0x0000_5573_0129_6370,
            rkey: 0x4c1b_0500,
            size: 64
        }
    );
    assert_eq!(info.encode(), captured);
}

/// A listening port below Linux's ephemeral range (32768-60999 by default):
/// a port inside it can be taken at any moment as the local end of some
/// other connection, and the server's bind then fails (CI saw it). The
/// tests here take about 20 ports, well inside this process's 64.
fn port() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    24_000 + (std::process::id() % 120) as u16 * 64 + NEXT.fetch_add(1, Ordering::SeqCst) % 64
}

/// A child whose output goes to files (a pipe nobody reads could fill and
/// stop it), killed by its PID if a test fails before it ends.
struct Proc {
    child: Child,
    out: std::path::PathBuf,
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_file(&self.out);
    }
}

fn spawn(args: &[&str]) -> Proc {
    static N: AtomicU16 = AtomicU16::new(0);
    let out = std::env::temp_dir().join(format!(
        "dpwarp-rping-{}-{}.log",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let file = std::fs::File::create(&out).unwrap();
    let child = Command::new(BENCH)
        .arg("rping")
        .args(args)
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .stdin(Stdio::null())
        .spawn()
        .expect("bench runs");
    Proc { child, out }
}

/// What a finished child did: its status and its output.
struct Done {
    status: std::process::ExitStatus,
    said: String,
}

fn finish(mut p: Proc, what: &str) -> Done {
    #[allow(clippy::disallowed_methods)] // Child processes run on real time.
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = p.child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > LIMIT {
            let _ = p.child.kill();
            let said = std::fs::read_to_string(&p.out).unwrap_or_default();
            let tail: String = said
                .chars()
                .rev()
                .take(2000)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            panic!("{what} ran past {LIMIT:?}; its output ends: {tail}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let said = std::fs::read_to_string(&p.out).unwrap_or_default();
    Done { status, said }
}

fn text(o: &Done) -> String {
    let tail: String = o
        .said
        .chars()
        .rev()
        .take(2000)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    tail
}

/// Waits until `server` listens on `port` (without connecting to it).
fn listening(port: u16, server: &mut Proc) {
    #[allow(clippy::disallowed_methods)]
    let start = std::time::Instant::now();
    loop {
        let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
        // State 0A is LISTEN; the local port is hex after the colon.
        let needle = format!(":{port:04X} ");
        if table
            .lines()
            .any(|l| l.contains(&needle) && l.split_whitespace().nth(3) == Some("0A"))
        {
            return;
        }
        let exited = server.child.try_wait().unwrap();
        if exited.is_some() || start.elapsed() > LIMIT {
            panic!(
                "nothing listens on {port} (server: {exited:?}): {}",
                std::fs::read_to_string(&server.out).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn client_and_server_with_every_mpa_option() {
    let _serial = serial();
    for extra in [
        &[][..],
        &["--crc"],
        &["--mpa-rev", "1"],
        &["--p2p", "write"],
        &["--p2p", "read"],
        &["--p2p", "send"],
        &["-S", "65535", "--crc"],
        &["-S", "26"],
    ] {
        let p = port().to_string();
        let mut server_args = vec!["-s", "-a", "127.0.0.1", "-p", &p, "-v"];
        let size = extra.windows(2).find(|w| w[0] == "-S").map(|w| w[1]);
        if let Some(s) = size {
            server_args.extend(["-S", s]);
        }
        let mut server = spawn(&server_args);
        listening(p.parse().unwrap(), &mut server);
        let mut client_args = vec!["-c", "-a", "127.0.0.1", "-p", &p, "-C", "20", "-v"];
        client_args.extend_from_slice(extra);
        let client = finish(spawn(&client_args), "the client");
        let served = finish(server, "the server");
        assert!(client.status.success(), "{extra:?}: {}", text(&client));
        assert!(
            served.status.success(),
            "{extra:?}: server: {}",
            text(&served)
        );
        assert_eq!(
            client.said.matches("ping data: rdma-ping-").count(),
            20,
            "{extra:?}: {}",
            text(&client)
        );
        assert_eq!(
            served.said.matches("server ping data: rdma-ping-").count(),
            20
        );
        assert!(
            served.said.contains("after 20 iteration(s)"),
            "{}",
            text(&served)
        );
    }
}

#[test]
fn a_persistent_server_outlives_bad_clients() {
    let _serial = serial();
    let p = port();
    let ps = p.to_string();
    let mut server = spawn(&["-s", "-a", "127.0.0.1", "-p", &ps, "-P", "-v"]);
    listening(p, &mut server);
    let addr = format!("127.0.0.1:{p}");
    // 1. Not MPA at all.
    let mut s = TcpStream::connect(&addr).unwrap();
    s.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut sink = Vec::new();
    let _ = s.read_to_end(&mut sink);
    // 2. Connect and vanish mid-handshake (a reset).
    let s = TcpStream::connect(&addr).unwrap();
    socket2::SockRef::from(&s)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(s);
    // 3. A client whose buffer is larger than the server's: refused by the
    //    server, which closes that connection.
    let big = finish(
        spawn(&["-c", "-a", "127.0.0.1", "-p", &ps, "-C", "2", "-S", "4096"]),
        "the oversized client",
    );
    assert!(!big.status.success(), "{}", text(&big));
    // 4. A client whose first FPDU has a bad CRC: the server terminates
    //    that connection (and closes it) and serves the next.
    assert!(
        bad_crc_client(&addr),
        "the server closed the bad-CRC connection"
    );
    // RFC 5044 §8: a CRC error is reported with Layer LLP (2), Error Type
    // MPA (0), Error Code 2 (CRC error); the server says so.
    // (It may print a moment after its FIN reached us.)
    let said = eventually(|| {
        let said = std::fs::read_to_string(&server.out).unwrap_or_default();
        said.contains("sent a Terminate: layer 2 type 0 code 0x02")
            .then_some(said)
    });
    assert!(said.is_some(), "no Terminate reported");
    // 5. A client that advertises an empty buffer: refused, connection
    //    reset, the server (with -v, which prints the data) unharmed.
    assert!(
        raw_client(&addr, false, 0),
        "the server ended the empty-buffer connection"
    );
    let said = eventually(|| {
        let said = std::fs::read_to_string(&server.out).unwrap_or_default();
        said.contains("advertised an empty buffer").then_some(said)
    });
    assert!(said.is_some(), "the empty buffer was not reported");
    // 6. A silent TCP client, left open while a good client runs.
    let _silent = TcpStream::connect(&addr).unwrap();
    // 7. Good clients, one after the other, still served.
    for _ in 0..3 {
        let good = finish(
            spawn(&["-c", "-a", "127.0.0.1", "-p", &ps, "-C", "10", "--crc"]),
            "a good client",
        );
        assert!(good.status.success(), "{}", text(&good));
    }
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "the persistent server is still running: {}",
        std::fs::read_to_string(&server.out).unwrap_or_default()
    );
}

/// `f`'s answer once it has one, trying for up to 5 s.
fn eventually<T>(mut f: impl FnMut() -> Option<T>) -> Option<T> {
    for _ in 0..500 {
        if let Some(t) = f() {
            return Some(t);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// An MPA initiator that asks for CRC, then sends an rping advertisement
/// whose CRC is wrong. Whether the server closed the connection (after its
/// Terminate) within 10 s.
fn bad_crc_client(addr: &str) -> bool {
    raw_client(addr, true, 64)
}

/// A TCP connection to `addr` through an MPA revision 2 startup as the
/// initiator (enhanced, IRD and ORD 1, CRC if `crc`): the Request sent, the
/// Reply (its 20-octet header and 4 octets of enhanced data) read and
/// checked. Reads time out after 10 s.
fn mpa_connect(addr: &str, crc: bool) -> TcpStream {
    use rnic_engine::wire::mpa_rr::{EnhancedRepr, FrameKind, Packet, Repr};
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let request = Repr {
        kind: FrameKind::Request,
        markers: false,
        crc,
        reject: false,
        reserved: 0,
        revision: 2,
        enhanced: Some(EnhancedRepr {
            peer_to_peer: false,
            rtr_send: false,
            rtr_write: false,
            rtr_read: false,
            ird: 1,
            ord: 1,
        }),
        private_data: b"",
    };
    let mut frame = vec![0; request.buffer_len()];
    request.emit(&mut Packet::new_unchecked(&mut frame[..]));
    s.write_all(&frame).unwrap();
    let mut reply = [0; 24];
    s.read_exact(&mut reply).unwrap();
    assert_eq!(&reply[..16], b"MPA ID Rep Frame");
    s
}

/// An MPA initiator (asking for CRC or not) that sends one rping
/// advertisement of a buffer of `size` octets; with `crc`, its CRC is
/// wrong. Whether the server ended the connection within 10 s.
fn raw_client(addr: &str, crc: bool, size: u32) -> bool {
    let mut s = mpa_connect(addr, crc);
    // An untagged Send (RFC 5041 §4.3: L=1, DV=1; RFC 5040 §4.2: RV=1,
    // opcode 3), QN 0, MSN 1, MO 0, 16 octets, and a CRC that is wrong.
    let mut fpdu = vec![0x00, 34, 0x41, 0x43];
    fpdu.extend_from_slice(&[0; 4]); // Invalidate STag
    fpdu.extend_from_slice(&0u32.to_be_bytes()); // QN
    fpdu.extend_from_slice(&1u32.to_be_bytes()); // MSN
    fpdu.extend_from_slice(&0u32.to_be_bytes()); // MO
    fpdu.extend_from_slice(
        &Info {
            buf: 0,
            rkey: 7,
            size,
        }
        .encode(),
    );
    // Wrong if CRC was asked for; not looked at otherwise.
    fpdu.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    s.write_all(&fpdu).unwrap();
    let mut rest = Vec::new();
    // Ended: a FIN (end of stream) or a reset; not a read timeout.
    match s.read_to_end(&mut rest) {
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}

/// A server with --reject refuses with its text as private data; the
/// client reports it (exit 1) and the server ends cleanly.
#[test]
fn a_reject_carries_its_private_data() {
    let _serial = serial();
    let p = port();
    let ps = p.to_string();
    let mut server = spawn(&[
        "-s",
        "-a",
        "127.0.0.1",
        "-p",
        &ps,
        "-v",
        "--reject",
        "not today",
    ]);
    listening(p, &mut server);
    let client = finish(
        spawn(&["-c", "-a", "127.0.0.1", "-p", &ps, "-C", "1"]),
        "the client",
    );
    assert_eq!(client.status.code(), Some(1), "{}", text(&client));
    assert!(
        client.said.contains("R=1, private data \"not today\""),
        "{}",
        text(&client)
    );
    let served = finish(server, "the server");
    assert!(served.status.success(), "{}", text(&served));
}

/// Each deliberate fault makes one side terminate with the specified
/// layer/type/code, and the other side reports the same, in either layout.
#[test]
fn every_fault_is_one_terminate_both_sides_agree_on() {
    let _serial = serial();
    // (server args, client args, layer/type/code, whether the server is
    // the one that detects the fault and sends the Terminate)
    let cases: [(&[&str], &[&str], &str, bool); 5] = [
        // The server Reads under the client's bad STag: the client objects.
        (
            &[],
            &["--fault", "bad-stag"],
            "layer 0 type 1 code 0x00",
            false,
        ),
        // The server Writes past the client's memory: the client objects.
        (
            &[],
            &["--fault", "bounds"],
            "layer 1 type 1 code 0x01",
            false,
        ),
        // The client Sends into no receive: the server objects.
        (
            &["--fault", "no-recv"],
            &[],
            "layer 1 type 2 code 0x02",
            true,
        ),
        // The server Writes, or Reads, under an STag the client never gave.
        (
            &["--fault", "bad-stag"],
            &[],
            "layer 1 type 1 code 0x00",
            false,
        ),
        (
            &["--fault", "bad-read-stag"],
            &[],
            "layer 0 type 1 code 0x00",
            false,
        ),
    ];
    for layout in ["rfc5040", "siw"] {
        for (server_extra, client_extra, code, server_sends) in cases {
            let p = port();
            let ps = p.to_string();
            let mut args = vec!["-s", "-a", "127.0.0.1", "-p", &ps, "--term-layout", layout];
            args.extend_from_slice(server_extra);
            let mut server = spawn(&args);
            listening(p, &mut server);
            let mut args = vec![
                "-c",
                "-a",
                "127.0.0.1",
                "-p",
                &ps,
                "-C",
                "2",
                "--term-layout",
                layout,
            ];
            args.extend_from_slice(client_extra);
            let client = finish(spawn(&args), "the client");
            let served = finish(server, "the server");
            let what = format!("{layout} {server_extra:?} {client_extra:?}");
            let both = format!("{}\n--\n{}", client.said, served.said);
            assert_eq!(client.status.code(), Some(1), "{what}: {both}");
            assert_eq!(served.status.code(), Some(1), "{what}: {both}");
            let (sender, receiver) = if server_sends {
                (&served.said, &client.said)
            } else {
                (&client.said, &served.said)
            };
            // ("sent a Terminate" is also inside "the peer sent a Terminate":
            // the sender must not have heard one, nor the receiver sent one.)
            assert!(
                sender.contains(&format!("sent a Terminate: {code}"))
                    && !sender.contains("the peer sent a Terminate"),
                "{what}: {both}"
            );
            assert!(
                receiver.contains(&format!("the peer sent a Terminate: {code}"))
                    && receiver.matches("sent a Terminate").count()
                        == receiver.matches("the peer sent a Terminate").count(),
                "{what}: {both}"
            );
        }
    }
}

#[test]
fn bad_arguments_say_what_to_fix() {
    for (args, want) in [
        (&["-c", "-a", "127.0.0.1", "-S", "10"][..], "-S 10"),
        (&["-c", "-a", "127.0.0.1", "--mpa-rev", "3"], "--mpa-rev 3"),
        (&["-c", "-a", "127.0.0.1", "-C", "0"], "-C 0"),
        (&["-s", "-a", "127.0.0.1", "--p2p", "write"], "--p2p"),
        (
            &["-c", "-a", "127.0.0.1", "--mpa-rev", "1", "--p2p", "read"],
            "--mpa-rev 2",
        ),
        (&["-c", "-a", "127.0.0.1", "--transport", "tap"], "--ip"),
        (&["-a", "127.0.0.1"], "-s"),
        (&["-c", "-a", "127.0.0.1", "--reject", "no"], "--reject"),
        (&["-c", "-a", "127.0.0.1", "-P"], "-P is the server's"),
    ] {
        let out = finish(spawn(args), "bench rping");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(text(&out).contains(want), "{args:?}: {}", text(&out));
    }
    // A huge -l range is refused before it is expanded (the run is held
    // to 4 GB of address space, should that regress).
    common::assert_refused(
        BENCH,
        &["rping", "-s", "-a", "127.0.0.1", "-l", "0-3000000000"],
        &["-l 0-3000000000"],
    );
    // Nobody to talk to: exit 1, saying so.
    let p = port().to_string();
    let out = finish(
        spawn(&["-c", "-a", "127.0.0.1", "-p", &p, "-C", "1"]),
        "the client",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("failed"), "{}", text(&out));
}

/// A persistent server's memory is for its own work only: a client that
/// names the server's STag (predictable: the registry's first, from a fixed
/// seed) in a Read Request for another client's slot gets RDMAP's remote
/// protection error for access rights (RFC 5040 §7.2: layer 0, type 1,
/// code 2) and none of the other client's octets (before, the registration
/// allowed remote Reads, and this read the running client's ping data).
#[test]
fn no_client_reads_another_clients_slot() {
    let _serial = serial();
    let p = port();
    let ps = p.to_string();
    let mut server = spawn(&["-s", "-a", "127.0.0.1", "-p", &ps, "-P", "-v"]);
    listening(p, &mut server);
    let _good = spawn(&["-c", "-a", "127.0.0.1", "-p", &ps, "-C", "1000000"]);
    // The good client is being served: its slot holds its ping data.
    let served = eventually(|| {
        let said = std::fs::read_to_string(&server.out).unwrap_or_default();
        said.contains("server ping data: rdma-ping-").then_some(())
    });
    assert!(served.is_some(), "the good client was not served");
    let host = bench::endpoint::Host::new(1, 7);
    let (_, mr) = host.register(bench::rping::RpingService::memory(64, 64));
    let mut s = mpa_connect(&format!("127.0.0.1:{p}"), false);
    // A Read Request (RFC 5040 §4.4: untagged, queue 1, MSN 1): 64 octets
    // from the server's STag at slot 0, the good client's.
    let mut u = vec![0x41, 0x41, 0, 0, 0, 0];
    u.extend_from_slice(&1u32.to_be_bytes()); // QN
    u.extend_from_slice(&1u32.to_be_bytes()); // MSN
    u.extend_from_slice(&0u32.to_be_bytes()); // MO
    u.extend_from_slice(&0x1234_5600u32.to_be_bytes()); // sink STag
    u.extend_from_slice(&0u64.to_be_bytes()); // sink TO
    u.extend_from_slice(&64u32.to_be_bytes()); // size
    u.extend_from_slice(&mr.stag.to_be_bytes()); // source STag
    u.extend_from_slice(&mr.base_to.to_be_bytes()); // source TO
    let mut fpdu = (u.len() as u16).to_be_bytes().to_vec();
    fpdu.extend_from_slice(&u);
    while !fpdu.len().is_multiple_of(4) {
        fpdu.push(0);
    }
    fpdu.extend_from_slice(&[0; 4]); // no CRC negotiated
    s.write_all(&fpdu).unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    assert!(
        !got.windows(10).any(|w| w == b"rdma-ping-"),
        "another client's data was read"
    );
    // The first FPDU is the Terminate: MPA length, DDP's untagged header
    // (RDMAP opcode 7), then the Terminate Control's layer, type, code.
    assert!(got.len() >= 22, "no Terminate: {got:?}");
    assert_eq!(got[3] & 0x0f, 7, "a Terminate: {got:?}");
    assert_eq!(
        (got[20] >> 4, got[20] & 0x0f, got[21]),
        (0, 1, 2),
        "{got:?}"
    );
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "the server runs on"
    );
}
