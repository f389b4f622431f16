//! A TAP device for running the stack without DPDK: smoltcp's
//! `TunTapInterface` (Ethernet medium) under a name of ours.
//!
//! The device is created when opened and vanishes when dropped (not
//! persistent). The caller configures the kernel side (`ip link`, `ip addr`),
//! or moves the device into a network namespace; the file stays attached
//! across the move, which is how the tests reach a kernel listener inside a
//! namespace they create.

use std::io;
use std::os::fd::{AsRawFd, RawFd};

use smoltcp::phy::{self, Device, DeviceCapabilities, Medium, TunTapInterface};
use smoltcp::time::{Duration, Instant};

/// A TAP device (Ethernet frames to and from the kernel).
pub struct TapDevice {
    inner: TunTapInterface,
    name: String,
}

impl TapDevice {
    /// Create TAP device `name` (at most 15 octets) through `/dev/net/tun`.
    /// Needs CAP_NET_ADMIN.
    pub fn open(name: &str) -> io::Result<TapDevice> {
        if name.is_empty() || name.len() > 15 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("TAP device name {name:?} must be 1 to 15 octets"),
            ));
        }
        let inner = TunTapInterface::new(name, Medium::Ethernet).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot open TAP device {name} through /dev/net/tun: {e}"),
            )
        })?;
        Ok(TapDevice {
            inner,
            name: name.to_string(),
        })
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Block until the device is readable or `timeout` passes (`None`:
    /// forever). For callers without a poll-mode core to spin.
    pub fn wait(&self, timeout: Option<Duration>) -> io::Result<()> {
        phy::wait(self.inner.as_raw_fd(), timeout)
    }
}

impl AsRawFd for TapDevice {
    fn as_raw_fd(&self) -> RawFd {
        self.inner.as_raw_fd()
    }
}

impl Device for TapDevice {
    type RxToken<'a> = <TunTapInterface as Device>::RxToken<'a>;
    type TxToken<'a> = <TunTapInterface as Device>::TxToken<'a>;

    fn receive(&mut self, now: Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        self.inner.receive(now)
    }

    fn transmit(&mut self, now: Instant) -> Option<Self::TxToken<'_>> {
        self.inner.transmit(now)
    }

    fn capabilities(&self) -> DeviceCapabilities {
        self.inner.capabilities()
    }
}

/// Why TAP devices in network namespaces cannot be set up here, if they
/// cannot: no `/dev/net/tun`, no `ip` command (iproute2), or neither
/// CAP_NET_ADMIN nor CAP_SYS_ADMIN (TAP devices and namespaces need both).
/// For tests and tools that skip, or refuse with a clear message, instead
/// of failing halfway.
pub fn namespace_unavailable() -> Option<String> {
    if !std::path::Path::new("/dev/net/tun").exists() {
        return Some("/dev/net/tun does not exist".into());
    }
    match std::process::Command::new("ip").arg("-V").output() {
        Ok(out) if out.status.success() => {}
        _ => return Some("the `ip` command (iproute2) is missing".into()),
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let cap_eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    const CAP_NET_ADMIN: u64 = 1 << 12;
    const CAP_SYS_ADMIN: u64 = 1 << 21;
    if cap_eff & CAP_NET_ADMIN == 0 || cap_eff & CAP_SYS_ADMIN == 0 {
        return Some(
            "needs CAP_NET_ADMIN and CAP_SYS_ADMIN (run as root) for TAP and namespaces".into(),
        );
    }
    None
}
