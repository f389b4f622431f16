//! Network namespaces, for tests and tools that put a kernel TCP peer behind
//! a TAP device on one host: a namespace this process creates (and deletes
//! on drop), a TAP device moved into it with an address, and a way for one
//! thread to enter it.
//!
//! Everything goes through the `ip` command (iproute2), as a user would type
//! it; [`namespace_unavailable`](super::tap::namespace_unavailable) says
//! beforehand whether that can work here.

use std::fs::File;
use std::io;
use std::net::Ipv4Addr;
use std::process::Command;

use super::tap::TapDevice;

/// Runs `ip ARGS`, turning a failure into an error that quotes the command
/// and what `ip` said.
pub fn ip(args: &[&str]) -> io::Result<()> {
    let out = Command::new("ip").args(args).output().map_err(|e| {
        io::Error::new(e.kind(), format!("cannot run `ip {}`: {e}", args.join(" ")))
    })?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// A network namespace this process created; deleted on drop (with every
/// virtual device in it).
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates namespace `name` (`ip netns add`), deleting a stale one of
    /// that name first (left by a killed run of the same tool).
    pub fn create(name: &str) -> io::Result<Netns> {
        let _ = Command::new("ip").args(["netns", "del", name]).output();
        ip(&["netns", "add", name])?;
        let ns = Netns {
            name: name.to_string(),
        };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `ip -n NAME ARGS`.
    pub fn ip(&self, args: &[&str]) -> io::Result<()> {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// A veth pair inside the namespace, both ends up with IP MTU `mtu`:
    /// `theirs` has address `their_addr` (`A/P`) and is Linux's host,
    /// `ours` has none (a user-space stack runs on it, e.g. over
    /// AF_PACKET). They go with the namespace.
    pub fn veth(&self, ours: &str, theirs: &str, mtu: usize, their_addr: &str) -> io::Result<()> {
        let mtu = mtu.to_string();
        self.ip(&[
            "link", "add", theirs, "mtu", &mtu, "type", "veth", "peer", "name", ours, "mtu", &mtu,
        ])?;
        self.ip(&["addr", "add", their_addr, "dev", theirs])?;
        self.ip(&["link", "set", "dev", theirs, "up"])?;
        self.ip(&["link", "set", "dev", ours, "up"])
    }

    /// Moves the calling thread (only it) into the namespace: sockets it
    /// opens from now on live there. Other threads are not affected.
    pub fn enter(&self) -> io::Result<()> {
        enter(&self.name)
    }
}

/// Moves the calling thread (only it) into namespace `name` (one `ip netns`
/// knows, under `/run/netns`).
pub fn enter(name: &str) -> io::Result<()> {
    let path = format!("/run/netns/{name}");
    let file = File::open(&path).map_err(|e| io::Error::new(e.kind(), format!("{path}: {e}")))?;
    nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
        .map_err(|e| io::Error::other(format!("setns {path}: {e}")))
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// Creates namespace `ns`, then TAP device `tap` with IP MTU `mtu`, moves
/// the device into `ns` and gives its kernel end `kernel_addr/prefix`. The
/// file end (returned) is ours to run a stack on; the kernel end is a Linux
/// host in the namespace. Dropping the [`Netns`] deletes the device too.
///
/// Call it from a thread that has not entered another namespace. Needs root.
pub fn tap_in_netns(
    ns: &str,
    tap: &str,
    mtu: usize,
    kernel_addr: Ipv4Addr,
    prefix: u8,
) -> io::Result<(TapDevice, Netns)> {
    let netns = Netns::create(ns)?;
    // The MTU is set before the device is opened: smoltcp's TAP interface
    // sizes its frames from the MTU it finds when it opens. A persistent
    // device lets us set it first; it dies with the namespace.
    let _ = Command::new("ip").args(["link", "del", tap]).output();
    ip(&["tuntap", "add", "dev", tap, "mode", "tap"])?;
    let mtu_text = mtu.to_string();
    let addr = format!("{kernel_addr}/{prefix}");
    let opened = ip(&["link", "set", "dev", tap, "mtu", &mtu_text])
        .and_then(|()| TapDevice::open(tap))
        .and_then(|device| {
            ip(&["link", "set", "dev", tap, "netns", ns])?;
            netns.ip(&["addr", "add", &addr, "dev", tap])?;
            netns.ip(&["link", "set", "dev", tap, "up"])?;
            Ok(device)
        });
    match opened {
        Ok(device) => Ok((device, netns)),
        Err(e) => {
            // Still in our namespace if the move failed.
            let _ = Command::new("ip").args(["link", "del", tap]).output();
            Err(e)
        }
    }
}
