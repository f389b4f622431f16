//! What the integration tests share: the example configuration on Linux
//! TCP over loopback, and free ports for it.

#![allow(clippy::disallowed_methods)]

use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

/// A TCP port on loopback no one listens on, and none this process handed
/// out before: below Linux's ephemeral range (32768 on), so that no connection's local
/// end (the 10,000 idle connections of one test, running beside the
/// others) takes it meanwhile, as a port the kernel gave out and took back
/// could be (two services of one test were once given the same one).
pub(crate) fn free_port() -> u16 {
    const FIRST: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    // Each process starts somewhere else in the span.
    let _ = NEXT.compare_exchange(
        u32::MAX,
        std::process::id() % SPAN,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    for _ in 0..SPAN {
        let port = (FIRST + NEXT.fetch_add(1, Ordering::SeqCst) % SPAN) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {FIRST}..{}", FIRST + SPAN)
}

/// The example configuration's text.
pub(crate) fn example() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/dpwarpd.toml"))
        .expect("the example config")
}

/// The example on Linux TCP at 127.0.0.1, MPA only, its control socket in
/// `dir`, metrics on `metrics`, the bench service on `bench`, every other
/// service on a free port, in `memory_mib` of memory. Each test file sets
/// what else it needs on the text (the MTU, the drain's deadline).
pub(crate) fn loopback(dir: &Path, bench: u16, metrics: u16, memory_mib: usize) -> String {
    let mut text = example()
        .replace("driver = \"net_tap\"", "driver = \"kernel\"")
        .replace("address = \"10.77.0.2/24\"", "address = \"127.0.0.1/8\"")
        .lines()
        // MPA only: a test that wants DDP over SCTP gives a free UDP port.
        .filter(|l| {
            !l.starts_with("iface") && !l.starts_with("host_address") && !l.starts_with("udp_port")
        })
        .collect::<Vec<_>>()
        .join("\n")
        .replace(
            "/run/dpwarpd/control.sock",
            &dir.join("control.sock").display().to_string(),
        )
        .replace("127.0.0.1:9464", &format!("127.0.0.1:{metrics}"))
        .replace("tcp_port = 18515", &format!("tcp_port = {bench}"))
        .replace("memory_mib = 256", &format!("memory_mib = {memory_mib}"));
    for port in [18516, 7174, 18521, 18522, 18523, 18524, 18525, 18526] {
        text = text.replace(
            &format!("tcp_port = {port}"),
            &format!("tcp_port = {}", free_port()),
        );
    }
    text
}
