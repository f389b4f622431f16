//! `bench --transport tap`: the client RNIC on tcp-lite over a TAP device,
//! the server RNIC on Linux TCP at the device's kernel end inside a network
//! namespace the run creates. Both modes run, the JSON says `tap`, and the
//! namespace and device are gone afterwards. The same over DPDK's net_tap
//! and af_packet ports, and DDP over SCTP (`--llp sctp`) over all three, to
//! Linux UDP in the namespace.
//!
//! It needs root, `/dev/net/tun` and `ip`; where one is missing the test is
//! reported as *ignored* with the reason on stderr, never as passed.

use std::process::Command;

use libtest_mimic::{Arguments, Failed, Trial};

const BENCH: &str = env!("CARGO_BIN_EXE_bench");

fn main() {
    let mut args = Arguments::from_args();
    // One at a time: each checks that no namespace of a run is left, and
    // both sides of a run busy-poll.
    args.test_threads = Some(1);
    let skip = tcp_lite::sys::tap::namespace_unavailable();
    let trial = |name: &'static str, run: fn() -> Result<(), Failed>| match &skip {
        None => Trial::test(name, run),
        Some(why) => {
            eprintln!("{name}: SKIPPED (reported as ignored): {why}");
            Trial::test(name, || Ok(())).with_ignored_flag(true)
        }
    };
    let trials = vec![
        trial("bench_over_tap_in_a_namespace_of_its_own", over_tap),
        trial("bench_over_dpdk_net_tap_in_a_namespace_of_its_own", || {
            over_dpdk("net_tap")
        }),
        trial(
            "bench_over_dpdk_af_packet_in_a_namespace_of_its_own",
            || over_dpdk("af_packet"),
        ),
        trial(
            "a_server_on_two_cores_over_a_multi_queue_net_tap",
            two_core_server_on_net_tap,
        ),
        trial(
            "ddp_over_sctp_over_tap_net_tap_and_af_packet_to_linux_udp",
            sctp_over_namespaces,
        ),
        trial(
            "an_sctp_client_on_two_cores_over_a_multi_queue_net_tap",
            two_core_sctp_client_on_net_tap,
        ),
    ];
    libtest_mimic::run(&args, trials).exit();
}

/// The client on a DPDK port (`transport`) into the run's namespace, the
/// server on Linux TCP there: both modes, the JSON names the transport and
/// two cores, and the namespace is gone after.
fn over_dpdk(transport: &str) -> Result<(), Failed> {
    let dir = std::env::temp_dir().join(format!("dpwarp-bench-{transport}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    for mode in ["bw", "lat"] {
        let json = dir.join(format!("{mode}.json"));
        let mut args = vec![
            "write",
            "--transport",
            transport,
            "-n",
            "300",
            "--hugepages",
            "off",
            "--json",
        ];
        args.push(json.to_str().ok_or("path")?);
        if mode == "lat" {
            args.push("--lat");
        } else {
            args.extend(["-s", "16384"]);
        }
        run(&args)?;
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
        let r = &doc["results"][0];
        if r["transport"] != transport || r["iterations"] != 300 || r["cores"] != 2 {
            return Err(format!("{transport} {mode}: {r}").into());
        }
        // Linux's own chatter (IPv6 neighbour discovery) is dropped as
        // non-IP; a bad checksum would be ours or Linux's mistake.
        let client = &r["per_core"][0];
        if client["rx_bad_checksum"].as_u64() != Some(0) {
            return Err(format!("{transport} {mode}: bad checksums: {client}").into());
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// `--llp sctp` with the client on tcp-lite's UDP over the TAP device or a
/// DPDK port and the server on Linux UDP in the run's namespace: Writes
/// beside MPA over the same transport (`--compare mpa`) and Reads with
/// their latency; every operation completed, each JSON result names its
/// lower layer, nothing is left behind.
fn sctp_over_namespaces() -> Result<(), Failed> {
    let dir = std::env::temp_dir().join(format!("dpwarp-bench-sctp-ns-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    for transport in ["tap", "net_tap", "af_packet"] {
        for (op, extra) in [
            ("write", &["-s", "16384", "--compare", "mpa"][..]),
            ("read", &["--lat"][..]),
        ] {
            let json = dir.join(format!("{transport}-{op}.json"));
            let mut args = vec![op, "--llp", "sctp", "--transport", transport, "-n", "300"];
            args.extend(["--json", json.to_str().ok_or("path")?]);
            args.extend(["--out", dir.to_str().ok_or("path")?]);
            if transport != "tap" {
                args.extend(["--hugepages", "off"]);
            }
            args.extend_from_slice(extra);
            let said = run(&args)?;
            let doc: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&json).map_err(|e| e.to_string())?)
                    .map_err(|e| e.to_string())?;
            let r = &doc["results"][0];
            if r["transport"] != transport || r["llp"] != "sctp" || r["iterations"] != 300 {
                return Err(format!("{transport} {op}: {r}").into());
            }
            if op == "write" {
                let m = &doc["results"][1];
                if m["llp"] != "mpa" || m["iterations"] != 300 {
                    return Err(format!("{transport} {op} over MPA: {m}").into());
                }
                if !said.contains(&format!("{transport}/sctp / {transport} =")) {
                    return Err(format!("no comparison line: {said}").into());
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// `ip ARGS`, failing with them if it fails.
fn ip(args: &[&str]) -> Result<(), Failed> {
    let ok = Command::new("ip")
        .args(args)
        .status()
        .map_err(|e| e.to_string())?
        .success();
    if ok {
        Ok(())
    } else {
        Err(format!("ip {args:?} failed").into())
    }
}

fn run(args: &[&str]) -> Result<String, Failed> {
    run_for(60, args)
}

/// Runs bench (at most `secs`: `timeout` sends SIGTERM, on which bench
/// ends in order) and checks that its namespace and TAP device are gone.
fn run_for(secs: u32, args: &[&str]) -> Result<String, Failed> {
    let child = Command::new("timeout")
        .arg(secs.to_string())
        .arg(BENCH)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("bench: {e}"))?;
    // bench is timeout's child: its PID follows timeout's closely.
    let timeout_pid = child.id();
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let names = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .map_err(|e| e.to_string())?;
    let names = String::from_utf8_lossy(&names.stdout).to_string();
    let links = Command::new("ip")
        .args(["-o", "link"])
        .output()
        .map_err(|e| e.to_string())?;
    let links = String::from_utf8_lossy(&links.stdout).to_string();
    for pid in timeout_pid..timeout_pid + 64 {
        let ns = format!("dpwbench{pid}");
        let tap = format!(" dpwb{}:", pid % 100_000_000);
        if names.split_whitespace().any(|n| n == ns) || links.contains(&tap) {
            return Err(format!("{ns} or its TAP device was left behind").into());
        }
    }
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        return Err(format!("bench {args:?} failed: {said}").into());
    }
    // EAL's cleanup at the end refuses while a DPDK object lives (and
    // says so): everything the run made must be gone by then.
    if said.contains("before cleanup") {
        return Err(format!("bench {args:?} left DPDK objects at its end: {said}").into());
    }
    Ok(said)
}

fn over_tap() -> Result<(), Failed> {
    let dir = std::env::temp_dir().join(format!("dpwarp-bench-tap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    for (mode, extra) in [("bw", &["-s", "65536"][..]), ("lat", &["--lat"][..])] {
        let json = dir.join(format!("{mode}.json"));
        let mut args = vec!["write", "--transport", "tap", "-n", "500", "--json"];
        args.push(json.to_str().ok_or("path")?);
        args.extend(["--out", dir.to_str().ok_or("path")?]);
        args.extend_from_slice(extra);
        run(&args)?;
        let text = std::fs::read_to_string(&json).map_err(|e| e.to_string())?;
        let doc: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
        let r = &doc["results"][0];
        if r["transport"] != "tap" || r["iterations"] != 500 {
            return Err(format!("{mode}: {r}").into());
        }
    }
    // Send is credit-controlled (a TAP link and a kernel peer do not run in
    // lockstep): many small Sends must not outrun the server's receives.
    run(&[
        "send",
        "--transport",
        "tap",
        "-s",
        "64",
        "-n",
        "20000",
        "-t",
        "16",
    ])?;
    // Stopped by SIGTERM mid-run (its exit status aside), bench still
    // removes what it made.
    if let Err(e) = run_for(2, &["write", "--transport", "tap", "-D", "30", "--no-crc"]) {
        if e.message().is_some_and(|m| m.contains("left behind")) {
            return Err(e);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// `bench --server --cores 2` on a DPDK net_tap port with two queue pairs
/// (a multi-queue TAP device in a namespace made here), and a client of
/// two cores on Linux TCP inside the namespace. The kernel picks the TAP
/// queue of a flow's first frames by its own hash, which knows nothing of
/// ours, so a SYN may reach the wrong core; that core hands it to its
/// owner over the steering ring (counted, none dropped). Every connection
/// is served and the server's run ends with its client.
fn two_core_server_on_net_tap() -> Result<(), Failed> {
    let pid = std::process::id();
    let ns = format!("dpwmq{pid}");
    let tap = format!("dpwmq{}", pid % 1_000_000);
    ip(&["netns", "add", &ns])?;
    let result = (|| -> Result<(), Failed> {
        let log = std::env::temp_dir().join(format!("dpwarp-mq-server-{pid}.log"));
        let file = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        let mut server = Command::new("timeout")
            .args([
                "60",
                BENCH,
                "--server",
                "--cores",
                "2",
                "--transport",
                "net_tap",
            ])
            .args(["--tap", &tap, "--netns", &ns, "--ip", "10.214.0.2/24"])
            .args(["-q", "8", "-p", "18650", "--hugepages", "off"])
            .stdout(file.try_clone().map_err(|e| e.to_string())?)
            .stderr(file)
            .spawn()
            .map_err(|e| e.to_string())?;
        let said = || std::fs::read_to_string(&log).unwrap_or_default();
        let mut waited = 0;
        while !said().contains("listening on port") {
            if waited > 3000 || server.try_wait().ok().flatten().is_some() {
                let _ = server.kill();
                let _ = server.wait();
                return Err(format!("the server never listened: {}", said()).into());
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
            waited += 1;
        }
        ip(&["-n", &ns, "addr", "add", "10.214.0.1/24", "dev", &tap])?;
        let client = Command::new("timeout")
            .args([
                "60",
                "ip",
                "netns",
                "exec",
                &ns,
                BENCH,
                "send",
                "10.214.0.2",
            ])
            .args([
                "--cores", "2", "-q", "8", "-p", "18650", "-n", "4000", "-s", "4096",
            ])
            .output()
            .map_err(|e| e.to_string())?;
        let status = server.wait().map_err(|e| e.to_string())?;
        let served = said();
        let _ = std::fs::remove_file(&log);
        let client_said = format!(
            "{}{}",
            String::from_utf8_lossy(&client.stdout),
            String::from_utf8_lossy(&client.stderr)
        );
        if !client.status.success() {
            return Err(format!("the client failed: {client_said}\nserver: {served}").into());
        }
        if !status.success()
            || !served.contains("2 queue pairs, steered in software (net_tap: the port has no RSS)")
            || !served.contains("client done after 8 connection(s)")
        {
            return Err(format!("server: {served}").into());
        }
        for k in 0..2 {
            let line = served
                .lines()
                .find(|l| l.contains(&format!("core {k} (CPU")))
                .ok_or_else(|| format!("no line for core {k}: {served}"))?;
            if !line.contains("(0 dropped)") {
                return Err(format!("core {k} dropped frames: {line}").into());
            }
        }
        Ok(())
    })();
    ip(&["netns", "del", &ns])?;
    result
}

/// `bench write HOST --llp sctp --cores 2` on a DPDK net_tap port with two
/// queue pairs, its TAP device on a bridge in a namespace made here, and
/// `bench --server --llp sctp --cores 2` on Linux UDP in that namespace
/// (each server core's socket on the port with `SO_REUSEPORT`). Each
/// client core opens its association from a UDP port that hashes to it;
/// the kernel picks the TAP queue of each reply (Linux's TAP driver
/// remembers the queue that last sent a flow's packets and answers on it:
/// no datagram was handed over in runs by hand), and should one reach the
/// other client core, that core hands it over (the client steers its
/// chosen UDP ports: counted, none dropped). Both client
/// cores complete their Writes, the server serves the four streams, and
/// nothing is left.
fn two_core_sctp_client_on_net_tap() -> Result<(), Failed> {
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        println!("an_sctp_client_on_two_cores_over_a_multi_queue_net_tap: one CPU here");
        return Ok(());
    }
    let pid = std::process::id();
    let ns = format!("dpwsq{pid}");
    let tap = format!("dpwsq{}", pid % 1_000_000);
    ip(&["netns", "add", &ns])?;
    let result = (|| -> Result<(), Failed> {
        ip(&["-n", &ns, "link", "add", "dpwsqbr", "type", "bridge"])?;
        ip(&["-n", &ns, "addr", "add", "10.216.0.1/24", "dev", "dpwsqbr"])?;
        ip(&["-n", &ns, "link", "set", "dpwsqbr", "up"])?;
        let log = std::env::temp_dir().join(format!("dpwarp-sq-server-{pid}.log"));
        let file = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        let mut server = Command::new("timeout")
            .args(["60", "ip", "netns", "exec", &ns, BENCH, "--server"])
            .args(["--llp", "sctp", "--cores", "2", "-p", "18660"])
            .stdout(file.try_clone().map_err(|e| e.to_string())?)
            .stderr(file)
            .spawn()
            .map_err(|e| e.to_string())?;
        let said = || std::fs::read_to_string(&log).unwrap_or_default();
        let mut waited = 0;
        while !said().contains("listening on port") {
            if waited > 3000 || server.try_wait().ok().flatten().is_some() {
                let _ = server.kill();
                let _ = server.wait();
                return Err(format!("the server never listened: {}", said()).into());
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
            waited += 1;
        }
        let json = std::env::temp_dir().join(format!("dpwarp-sq-client-{pid}.json"));
        let client = run(&[
            "write",
            "10.216.0.1",
            "--llp",
            "sctp",
            "--cores",
            "2",
            "-q",
            "4",
            "-p",
            "18660",
            "-n",
            "2000",
            "-s",
            "4096",
            "--transport",
            "net_tap",
            "--netns",
            &ns,
            "--bridge",
            "dpwsqbr",
            "--tap",
            &tap,
            "--ip",
            "10.216.0.2/24",
            "--hugepages",
            "off",
            "--json",
            json.to_str().ok_or("path")?,
        ]);
        let status = server.wait().map_err(|e| e.to_string())?;
        let served = said();
        let _ = std::fs::remove_file(&log);
        let client = client.map_err(|e| format!("{e:?}\nserver: {served}"))?;
        if !client.contains("2 queue pairs, steered in software")
            || !client.contains("2/2 QP(s) each")
        {
            return Err(format!("the client: {client}").into());
        }
        for k in 0..2 {
            let line = client
                .lines()
                .find(|l| l.contains(&format!("core {k} (CPU")))
                .ok_or_else(|| format!("no line for client core {k}: {client}"))?;
            if !line.contains("2000 messages") {
                return Err(format!("client core {k}: {line}").into());
            }
        }
        // Each client core's device: whatever reached it for the other
        // core was handed over, none dropped.
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
        let _ = std::fs::remove_file(&json);
        let cores = doc["results"][0]["per_core"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if cores.len() != 2
            || cores
                .iter()
                .any(|c| c["rx_steer_dropped"].as_u64() != Some(0))
        {
            return Err(format!("the client's cores: {cores:?}").into());
        }
        if !status.success() || !served.contains("client done after 4 stream(s)") {
            return Err(format!("server: {served}").into());
        }
        Ok(())
    })();
    ip(&["netns", "del", &ns])?;
    result
}
