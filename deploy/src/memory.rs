//! The memory service: the configured `[[region]]`s, lent to remote
//! clients by name. A client names the region it wants in its MPA
//! Request's private data; the control-plane thread checks the name, the
//! client's network and the limits, registers the region for this
//! connection alone under a fresh STag (a new key every time, RFC 5042
//! §5: no STag a client saw before, or could guess from another's, stays
//! valid), and tells it the STag, tagged offset and length in the MPA
//! Reply's private data. When the connection ends, on whichever core owns
//! it, the STag is deregistered: nothing it carried reaches the memory
//! after that (the engine checks the STag on every DDP segment).
//!
//! Each client has a protection domain of its own: its STag is registered
//! in it, and the core makes its QP in it ([`MemoryService::pd_for`]), so
//! that an STag lent to another client, guessed or learnt, draws a
//! Terminate on its connection (STag not associated with the stream)
//! instead of reaching the other's lending, and none of the daemon's own
//! registrations (the bench service's and perftest's memory) is valid on
//! it either. The PD is freed once its QP is destroyed and its STag
//! deregistered.
//!
//! The private data (RFC 5044 §7.1, at most 512 octets each):
//!
//! ```text
//! Request:  "DPWM" | version 1 | name length (1..=64) | name
//! Reply:    "DPWM" | version 1 | 0 | STag (4) | TO (8) | length (8) | access (1)
//! Reject:   "DPWM" | version 1 | code (1..=4) | the reason, UTF-8
//! ```
//!
//! Integers big-endian; access bits 1 remote read, 2 remote write, 4
//! remote atomic; reject codes 1 malformed, 2 no such region, 3 not from
//! this network, 4 a limit (grants at once, in all or to the client's
//! host, or the service drains).

use std::collections::HashMap;
use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use control::mpa::Accept;
use control::runtime::Decision;
use dataplane::PdChoice;
use rnic_engine::mem::{Access, Pd, Region};
use rnic_engine::verbs::{QpHandle, Registry, VerbError};

use crate::config::{in_network, AccessRight, RegionConfig};

/// The private data's first octets.
pub const MAGIC: &[u8; 4] = b"DPWM";
/// The protocol's version.
pub const VERSION: u8 = 1;
/// The Reply's length.
pub const REPLY_LEN: usize = 27;

/// Why a client was refused (the Reject's code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum RejectCode {
    /// The Request's private data is not a memory request.
    Malformed = 1,
    /// No region has that name.
    NoSuchRegion = 2,
    /// The region is not lent to the client's network.
    NotAllowed = 3,
    /// Too many grants at once (in all, or to the client's host), or the
    /// service drains.
    Limit = 4,
}

/// A client's request: the region's name.
pub fn encode_request(name: &str) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.push(VERSION);
    out.push(name.len() as u8);
    out.extend_from_slice(name.as_bytes());
    out
}

/// What the Reply tells the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// The STag of this connection's registration.
    pub stag: u32,
    /// The tagged offset of the region's first octet.
    pub to: u64,
    /// The region's length.
    pub len: u64,
    /// Access bits (1 read, 2 write, 4 atomic).
    pub access: u8,
}

impl Grant {
    /// The Reply's private data.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.push(VERSION);
        out.push(0);
        out.extend_from_slice(&self.stag.to_be_bytes());
        out.extend_from_slice(&self.to.to_be_bytes());
        out.extend_from_slice(&self.len.to_be_bytes());
        out.push(self.access);
        out
    }

    /// A Reply's private data, or the Reject's code and reason.
    pub fn decode(pd: &[u8]) -> Result<Grant, (u8, String)> {
        if pd.len() < 6 || &pd[..4] != MAGIC || pd[4] != VERSION {
            return Err((0, "not a dpwarp memory service answer".into()));
        }
        if pd[5] != 0 {
            return Err((pd[5], String::from_utf8_lossy(&pd[6..]).into_owned()));
        }
        if pd.len() != REPLY_LEN {
            return Err((
                0,
                format!("a Reply of {} octets, not {REPLY_LEN}", pd.len()),
            ));
        }
        let u32_at = |i: usize| u32::from_be_bytes([pd[i], pd[i + 1], pd[i + 2], pd[i + 3]]);
        let u64_at = |i: usize| (u64::from(u32_at(i)) << 32) | u64::from(u32_at(i + 4));
        Ok(Grant {
            stag: u32_at(6),
            to: u64_at(10),
            len: u64_at(18),
            access: pd[26],
        })
    }
}

/// The name a Request's private data asks for.
fn decode_request(pd: &[u8]) -> Result<&str, String> {
    if pd.len() < 6 || &pd[..4] != MAGIC {
        return Err("not a dpwarp memory request (private data \"DPWM\" 1 LEN NAME)".into());
    }
    if pd[4] != VERSION {
        return Err(format!(
            "memory request version {}: this service speaks {VERSION}",
            pd[4]
        ));
    }
    let len = usize::from(pd[5]);
    if !(1..=64).contains(&len) || pd.len() != 6 + len {
        return Err(format!(
            "a region name of {len} octets in {} octets of private data",
            pd.len()
        ));
    }
    std::str::from_utf8(&pd[6..]).map_err(|_| "the region name is not UTF-8".into())
}

fn reject(code: RejectCode, why: &str) -> Decision {
    let mut pd = MAGIC.to_vec();
    pd.push(VERSION);
    pd.push(code as u8);
    // The whole Reject stays within RFC 5044's 512 octets.
    pd.extend_from_slice(&why.as_bytes()[..why.len().min(400)]);
    Decision::Reject(pd)
}

/// One region the service lends.
struct Lent {
    config: RegionConfig,
    region: Arc<Region>,
    access: Access,
    bits: u8,
}

/// One client's connection, as the service knows it from its Request on:
/// our TCP port and the client's address and port (its four-tuple: the
/// daemon has one address). The client's address and port alone name no
/// connection: once a reload has moved the service to another port, a
/// client may open a connection from the same address and port to the new
/// port while its first runs on the old one, and the two are two clients
/// (a review found the new one's Request revoked the running one's grant).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Conn {
    /// Our TCP port it reached.
    port: u16,
    /// The client's address and port.
    peer: SocketAddrV4,
}

/// A registration made for one client's connection.
#[derive(Debug, Clone)]
struct Registration {
    /// Which grant this is: the token of the accept that made it
    /// (control's `Accept::ulp_token`), which its startup's handoff and
    /// failure report carry back. A four-tuple names a connection only
    /// while it lives: a client that reconnects from the same port once
    /// its first startup failed gets a grant of its own under the same
    /// four-tuple, and the first one's failure, reported later, must not
    /// revoke it (found by a review).
    id: u64,
    stag: u32,
    /// The client's own protection domain: its STag's and its QP's.
    pd: Pd,
    region: usize,
    since: Instant,
    /// The core and QP once the connection reached a core.
    qp: Option<(usize, QpHandle)>,
}

/// The memory service's ports.
#[derive(Debug, Default)]
struct Ports {
    /// The one it listens on now, 0 before (or once a reload removed it).
    now: u16,
    /// Every one it has listened on (a reload moves it; a startup under
    /// way on the old port keeps it), the latest last; a few.
    ever: Vec<u16>,
}

/// A connection the memory service serves, for operators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lending {
    /// The client.
    pub peer: SocketAddrV4,
    /// The region's name.
    pub region: String,
    /// The core and its QP.
    pub core: usize,
    /// The QP.
    pub qp: QpHandle,
}

/// The memory service, shared by the control-plane thread (which decides
/// and registers) and every core (which deregisters when a connection
/// ends).
pub struct MemoryService {
    regions: Vec<Lent>,
    registry: Arc<Registry>,
    /// Registrations by the client's connection (one per live connection).
    grants: Mutex<HashMap<Conn, Registration>>,
    /// The next grant's id (from 1: a token of 0 names no grant).
    next_id: AtomicU64,
    /// Ended clients' PDs not yet freed: a QP still in one (its core has
    /// not yet destroyed it) keeps it until a later try.
    retired: Mutex<Vec<Pd>>,
    /// The ports it listens on ([`MemoryService::listen_on`]).
    ports: Mutex<Ports>,
    grants_max: usize,
    /// Of those, how many one client host may hold.
    per_host: usize,
    /// A grant whose connection never reached a core is revoked after this
    /// long (the startup gave up).
    unclaimed_after: Duration,
    draining: AtomicBool,
    /// Connections accepted, refused and ended.
    pub accepted: AtomicU64,
    /// Refused.
    pub refused: AtomicU64,
    /// Ended, or granted and given up (their STag deregistered): with
    /// `accepted`, `accepted - closed` grants are live.
    pub closed: AtomicU64,
}

impl MemoryService {
    /// The service lending `regions` (allocated here, zeroed), registering
    /// them in `registry`, each connection's in a PD of its own; at most
    /// `grants_max` connections at once (the registry needs as many PDs
    /// free), `per_host` of them from one client host.
    pub fn new(
        regions: impl IntoIterator<Item = RegionConfig>,
        registry: Arc<Registry>,
        grants_max: usize,
        per_host: usize,
        unclaimed_after: Duration,
    ) -> MemoryService {
        let regions = regions
            .into_iter()
            .map(|config| {
                let (mut access, mut bits) = (Access::LOCAL_READ, 0u8);
                for right in &config.access {
                    let (a, b) = match right {
                        AccessRight::RemoteRead => (Access::REMOTE_READ, 1),
                        AccessRight::RemoteWrite => (Access::REMOTE_WRITE | Access::LOCAL_WRITE, 2),
                        AccessRight::RemoteAtomic => {
                            (Access::REMOTE_ATOMIC | Access::LOCAL_WRITE, 4)
                        }
                    };
                    access = access | a;
                    bits |= b;
                }
                Lent {
                    region: Region::new(config.size_mib << 20),
                    config,
                    access,
                    bits,
                }
            })
            .collect();
        MemoryService {
            regions,
            registry,
            grants: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            retired: Mutex::new(Vec::new()),
            ports: Mutex::new(Ports::default()),
            grants_max,
            per_host: per_host.clamp(1, grants_max.max(1)),
            unclaimed_after,
            draining: AtomicBool::new(false),
            accepted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            closed: AtomicU64::new(0),
        }
    }

    fn grants(&self) -> std::sync::MutexGuard<'_, HashMap<Conn, Registration>> {
        self.grants.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Refuses every request from now on.
    pub fn drain(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// The control-plane thread's decision on a Request from `peer` to our
    /// TCP port `port` (one the service listens on: each listener's
    /// callback knows its own). An accept's `ulp_token` is its grant's id
    /// (never 0): the connection's handoff names it to
    /// [`MemoryService::pd_for`], [`MemoryService::established`] and
    /// [`MemoryService::unclaimed`].
    pub fn decide(&self, private_data: &[u8], port: u16, peer: SocketAddrV4) -> Decision {
        let decision = self.try_grant(private_data, Conn { port, peer });
        match &decision {
            Ok(_) => {
                self.accepted.fetch_add(1, Ordering::Relaxed);
            }
            Err((code, why)) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(service = "memory", %peer, code = *code as u8, why, "connection refused");
            }
        }
        match decision {
            Ok((grant, name, id)) => {
                tracing::info!(
                    service = "memory",
                    %peer,
                    region = name,
                    grant = id,
                    "connection accepted"
                );
                Decision::Accept(Accept {
                    private_data: grant.encode(),
                    ulp_token: id,
                    ..Accept::default()
                })
            }
            Err((code, why)) => reject(code, &why),
        }
    }

    fn try_grant(
        &self,
        private_data: &[u8],
        conn: Conn,
    ) -> Result<(Grant, String, u64), (RejectCode, String)> {
        let peer = conn.peer;
        if self.draining.load(Ordering::SeqCst) {
            return Err((RejectCode::Limit, "the service is draining".into()));
        }
        let name = decode_request(private_data).map_err(|e| (RejectCode::Malformed, e))?;
        let (index, lent) = self
            .regions
            .iter()
            .enumerate()
            .find(|(_, l)| l.config.name == name)
            .ok_or_else(|| {
                (
                    RejectCode::NoSuchRegion,
                    format!("no region named {name:?}"),
                )
            })?;
        if !lent
            .config
            .allow
            .iter()
            .any(|&net| in_network(*peer.ip(), net))
        {
            return Err((
                RejectCode::NotAllowed,
                format!("region {name:?} is not lent to {}", peer.ip()),
            ));
        }
        let mut grants = self.grants();
        if let Some(old) = grants.remove(&conn) {
            // The same four-tuple again: the old connection is gone (and
            // its grant does not count against the limit).
            self.revoke(&old);
        }
        // One host's share, as the perftest services' `clients_per_host`:
        // a host that opens connections from many source ports and keeps
        // them (or never finishes their startups) held every grant, and
        // every other host was refused (found by a review).
        let ip = *peer.ip();
        let held = grants.keys().filter(|c| *c.peer.ip() == ip).count();
        if held >= self.per_host {
            return Err((
                RejectCode::Limit,
                format!(
                    "{ip} holds {held} regions lent at once, as many as one client host may \
                     (clients_per_host): try again later"
                ),
            ));
        }
        if grants.len() >= self.grants_max {
            return Err((
                RejectCode::Limit,
                format!(
                    "{} regions lent at once, the limit: try again later",
                    self.grants_max
                ),
            ));
        }
        self.free_retired();
        let pd = self
            .registry
            .alloc_pd()
            .map_err(|e| (RejectCode::Limit, format!("no protection domain left: {e}")))?;
        let mr = match self
            .registry
            .reg_region(pd, lent.region.clone(), lent.access)
        {
            Ok(mr) => mr,
            Err(e) => {
                let _ = self.registry.dealloc_pd(pd);
                return Err((RejectCode::Limit, format!("no STag left: {e}")));
            }
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        grants.insert(
            conn,
            Registration {
                id,
                stag: mr.stag,
                pd,
                region: index,
                since: Instant::now(),
                qp: None,
            },
        );
        Ok((
            Grant {
                stag: mr.stag,
                to: mr.base_to,
                len: lent.region.len() as u64,
                access: lent.bits,
            },
            name.to_string(),
            id,
        ))
    }

    /// The STag goes; the PD is freed once nothing is in it (now, or at a
    /// later [`MemoryService::free_retired`]).
    fn revoke(&self, g: &Registration) {
        self.closed.fetch_add(1, Ordering::Relaxed);
        let _ = self.registry.dereg_mr(g.stag);
        self.retired().push(g.pd);
        self.free_retired();
    }

    fn retired(&self) -> std::sync::MutexGuard<'_, Vec<Pd>> {
        self.retired.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Frees the retired PDs that nothing is in any more.
    pub fn free_retired(&self) {
        self.retired()
            .retain(|&pd| self.registry.dealloc_pd(pd) == Err(VerbError::InUse));
    }

    /// The port the service listens on now (at start, and after each
    /// move by a reload).
    pub fn listen_on(&self, port: u16) {
        let mut ports = self.ports();
        ports.now = port;
        if port != 0 {
            ports.ever.retain(|&p| p != port);
            ports.ever.push(port);
            // Startups outlive a few moves at most.
            if ports.ever.len() > 8 {
                ports.ever.remove(0);
            }
        }
    }

    fn ports(&self) -> std::sync::MutexGuard<'_, Ports> {
        self.ports.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The PD a core makes the QP of a connection from `peer` to `local`,
    /// whose accept named `grant` (its handoff's ULP token), in: that
    /// grant's, if the service granted it to this four-tuple, no
    /// connection has claimed it yet and `local` is a port the service
    /// listens or listened on. Another connection to the service's port
    /// (its grant revoked, or never made) is refused, so that no QP of
    /// this service joins the daemon's own PD; a connection to another
    /// service stays in the daemon's PD (one from a grant's address and
    /// port too: it must not hold the grant's PD, which it could keep
    /// from being freed for as long as it stays open).
    pub fn pd_for(&self, local: SocketAddrV4, peer: SocketAddrV4, grant: u64) -> PdChoice {
        let (ours, now) = {
            let ports = self.ports();
            (
                ports.ever.contains(&local.port()),
                local.port() == ports.now,
            )
        };
        let conn = Conn {
            port: local.port(),
            peer,
        };
        match self.grants().get(&conn) {
            Some(g) if ours && g.id == grant && g.qp.is_none() => PdChoice::In(g.pd),
            _ if now => PdChoice::Refuse,
            _ => PdChoice::Default,
        }
    }

    /// PDs of clients allocated now (live, or retired and not yet freed).
    pub fn pds_live(&self) -> usize {
        self.grants().len() + self.retired().len()
    }

    /// Core `core` runs the connection from `peer` to `local` as QP `qp`,
    /// whose accept named `grant` (its handoff's ULP token): whether it is
    /// one the service granted, that grant still live for this four-tuple
    /// (on the port it listens on, or one it listened on before a
    /// reload). A connection without its grant (revoked meanwhile, or
    /// none) is the caller's to end.
    pub fn established(
        &self,
        core: usize,
        qp: QpHandle,
        local: SocketAddrV4,
        peer: SocketAddrV4,
        grant: u64,
    ) -> bool {
        let conn = Conn {
            port: local.port(),
            peer,
        };
        match self.grants().get_mut(&conn) {
            Some(g) if g.id == grant && g.qp.is_none() => {
                g.qp = Some((core, qp));
                true
            }
            _ => false,
        }
    }

    /// QP `qp` of core `core` ended: its STag is deregistered.
    pub fn ended(&self, core: usize, qp: QpHandle) {
        let mut grants = self.grants();
        let conn = grants
            .iter()
            .find(|(_, g)| g.qp == Some((core, qp)))
            .map(|(&c, _)| c);
        if let Some((conn, g)) = conn.and_then(|c| Some((c, grants.remove(&c)?))) {
            self.revoke(&g);
            drop(grants);
            tracing::info!(service = "memory", peer = %conn.peer, tcp_port = conn.port, core, qp = qp.index(), "connection closed");
        }
    }

    /// A startup from `peer` to `local`, whose accept named `grant` (its
    /// handoff's ULP token), ended without a QP (it failed after the
    /// accept, or its core had no room): if that grant is still this
    /// four-tuple's and no connection claimed it, it goes now rather than
    /// at [`MemoryService::reap`], so that clients that reset right after
    /// their Request cannot hold the service's grants. A later grant to
    /// the same four-tuple (the client reconnected from the same port
    /// before this report came) is another's and stays. Returns whether
    /// one went.
    pub fn unclaimed(&self, local: SocketAddrV4, peer: SocketAddrV4, grant: u64) -> bool {
        if !self.ports().ever.contains(&local.port()) {
            return false;
        }
        let conn = Conn {
            port: local.port(),
            peer,
        };
        let mut grants = self.grants();
        if grants
            .get(&conn)
            .is_none_or(|g| g.id != grant || g.qp.is_some())
        {
            return false;
        }
        if let Some(g) = grants.remove(&conn) {
            self.revoke(&g);
        }
        drop(grants);
        tracing::info!(service = "memory", %peer, grant, "startup failed after its grant: revoked");
        true
    }

    /// Revokes grants whose connection never reached a core; returns how
    /// many.
    pub fn reap(&self) -> usize {
        let mut grants = self.grants();
        let stale: Vec<Conn> = grants
            .iter()
            .filter(|(_, g)| g.qp.is_none() && g.since.elapsed() >= self.unclaimed_after)
            .map(|(&c, _)| c)
            .collect();
        for c in &stale {
            if let Some(g) = grants.remove(c) {
                self.revoke(&g);
            }
        }
        drop(grants);
        self.free_retired();
        stale.len()
    }

    /// The connections it serves now.
    pub fn lendings(&self) -> Vec<Lending> {
        self.grants()
            .iter()
            .filter_map(|(conn, g)| {
                let (core, qp) = g.qp?;
                Some(Lending {
                    peer: conn.peer,
                    region: self.regions[g.region].config.name.clone(),
                    core,
                    qp,
                })
            })
            .collect()
    }

    /// STags registered now (lent, or granted and not yet on a core).
    pub fn grants_live(&self) -> usize {
        self.grants().len()
    }

    /// The regions: name and size.
    pub fn regions(&self) -> impl Iterator<Item = (&str, usize)> {
        self.regions
            .iter()
            .map(|l| (l.config.name.as_str(), l.region.len()))
    }

    /// The QPs of core `core` it serves (to end them at a drain's
    /// deadline).
    pub fn qps_of(&self, core: usize) -> Vec<QpHandle> {
        self.grants()
            .values()
            .filter_map(|g| g.qp.filter(|&(c, _)| c == core).map(|(_, qp)| qp))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    /// The service's address and port in the tests.
    const LOCAL: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 9), 7000);

    #[test]
    fn requests_and_replies_round_trip_and_bad_ones_are_named() {
        assert_eq!(decode_request(&encode_request("shared")), Ok("shared"));
        assert!(decode_request(b"DPWM").is_err());
        assert!(decode_request(b"XXXX\x01\x01a").is_err());
        assert!(decode_request(b"DPWM\x02\x01a")
            .unwrap_err()
            .contains("version 2"));
        assert!(decode_request(b"DPWM\x01\x05ab").is_err());
        assert!(decode_request(b"DPWM\x01\x00").is_err());
        let g = Grant {
            stag: 0x1234_5678,
            to: 0x1122_3344_5566_7788,
            len: 16 << 20,
            access: 7,
        };
        assert_eq!(g.encode().len(), REPLY_LEN);
        assert_eq!(Grant::decode(&g.encode()), Ok(g));
        let Decision::Reject(pd) = reject(RejectCode::NotAllowed, "no") else {
            panic!("a reject");
        };
        assert_eq!(Grant::decode(&pd), Err((3, "no".into())));
        let long = "x".repeat(600);
        let Decision::Reject(pd) = reject(RejectCode::Limit, &long) else {
            panic!("a reject");
        };
        assert!(pd.len() <= 512);
    }

    fn service() -> MemoryService {
        let registry = Registry::new(&rnic_engine::verbs::RnicConfig::default());
        // The daemon's own PD.
        registry.alloc_pd().unwrap();
        let region = |name: &str, access, allow| RegionConfig {
            name: name.into(),
            size_mib: 1,
            access,
            allow,
        };
        MemoryService::new(
            [
                region(
                    "shared",
                    vec![AccessRight::RemoteRead, AccessRight::RemoteWrite],
                    vec![(Ipv4Addr::new(10, 0, 0, 0), 8)],
                ),
                region(
                    "ro",
                    vec![AccessRight::RemoteRead],
                    vec![(Ipv4Addr::UNSPECIFIED, 0)],
                ),
            ],
            registry,
            2,
            1,
            Duration::from_secs(10),
        )
    }

    /// One region `r` of 1 MiB, readable by anyone, four grants (four a
    /// host), never-claimed grants reaped after `unclaimed`.
    fn open_region(unclaimed: Duration) -> MemoryService {
        let registry = Registry::new(&rnic_engine::verbs::RnicConfig::default());
        MemoryService::new(
            [RegionConfig {
                name: "r".into(),
                size_mib: 1,
                access: vec![AccessRight::RemoteRead],
                allow: vec![(Ipv4Addr::UNSPECIFIED, 0)],
            }],
            registry,
            4,
            4,
            unclaimed,
        )
    }

    fn granted(d: Decision) -> Grant {
        accepted(d).0
    }

    /// The grant an accept tells the client, and the token (the grant's
    /// id) its handoff carries back.
    fn accepted(d: Decision) -> (Grant, u64) {
        match d {
            Decision::Accept(a) => {
                assert_ne!(a.ulp_token, 0, "an accept names its grant");
                (Grant::decode(&a.private_data).unwrap(), a.ulp_token)
            }
            Decision::Reject(pd) => panic!("refused: {:?}", Grant::decode(&pd)),
        }
    }

    fn refused(d: Decision) -> u8 {
        match d {
            Decision::Accept(_) => panic!("accepted"),
            Decision::Reject(pd) => Grant::decode(&pd).unwrap_err().0,
        }
    }

    /// One client host opens connections from as many source ports as
    /// there are grants and never finishes them (or keeps them open): it
    /// held every grant, and every other host was refused "a limit" until
    /// its startups timed out, when it opened them again (found by a
    /// review: the perftest services bound a host's share,
    /// `clients_per_host`, the memory service did not, and
    /// startups_per_client_max, 128 in the example, is above its
    /// clients_max, 64). A host now holds at most `per_host` grants: its
    /// next connection is refused as a limit, naming the host.
    #[test]
    fn one_client_host_cannot_hold_every_grant() {
        let s = service();
        let hog = |port| SocketAddrV4::new(Ipv4Addr::new(10, 1, 1, 1), port);
        granted(s.decide(&encode_request("shared"), 7000, hog(4000)));
        // `service()`'s host holds one of its two.
        let Decision::Reject(pd) = s.decide(&encode_request("shared"), 7000, hog(4001)) else {
            panic!("one host granted every region lent at once");
        };
        let (code, why) = Grant::decode(&pd).unwrap_err();
        assert_eq!(code, RejectCode::Limit as u8, "{why}");
        assert!(why.contains("10.1.1.1"), "the host is named: {why}");
        let other = SocketAddrV4::new(Ipv4Addr::new(10, 1, 1, 2), 4000);
        match s.decide(&encode_request("shared"), 7000, other) {
            Decision::Accept(_) => {}
            Decision::Reject(pd) => panic!(
                "another host refused while one host holds every grant: {:?}",
                Grant::decode(&pd)
            ),
        }
    }

    #[test]
    fn each_connection_gets_its_own_stag_revoked_when_it_ends() {
        let s = service();
        let a = SocketAddrV4::new(Ipv4Addr::new(10, 1, 1, 1), 4000);
        let b = SocketAddrV4::new(Ipv4Addr::new(10, 1, 1, 2), 4000);
        let (ga, ta) = accepted(s.decide(&encode_request("shared"), 7000, a));
        let (gb, tb) = accepted(s.decide(&encode_request("shared"), 7000, b));
        assert_ne!(ga.stag, gb.stag);
        assert_ne!(ta, tb);
        assert_eq!((ga.len, ga.access), (1 << 20, 3));
        // The limit: two at once.
        let c = SocketAddrV4::new(Ipv4Addr::new(10, 1, 1, 3), 4000);
        assert_eq!(refused(s.decide(&encode_request("ro"), 7000, c)), 4);
        assert!(!s.established(0, QpHandle(7), LOCAL, a, tb), "b's grant");
        assert!(s.established(0, QpHandle(7), LOCAL, a, ta));
        s.ended(0, QpHandle(7));
        assert_eq!(s.grants_live(), 1);
        assert_eq!(s.closed.load(Ordering::Relaxed), 1);
        // Deregistered once: a's is gone, b's was still live.
        assert!(s.registry.dereg_mr(ga.stag).is_err(), "revoked");
        assert!(s.registry.dereg_mr(gb.stag).is_ok());
    }

    #[test]
    fn a_grant_whose_startup_failed_goes_at_once_and_counts_as_closed() {
        let s = service();
        s.listen_on(7000);
        let memory = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 9), 7000);
        let other_port = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 9), 7001);
        let a = SocketAddrV4::new(Ipv4Addr::new(10, 1, 1, 1), 4000);
        let b = SocketAddrV4::new(Ipv4Addr::new(10, 1, 1, 2), 4000);
        let (ga, ta) = accepted(s.decide(&encode_request("shared"), 7000, a));
        let (gb, tb) = accepted(s.decide(&encode_request("shared"), 7000, b));
        // Another service's failed startup from the same address and port
        // is not this grant's.
        assert!(!s.unclaimed(other_port, a, ta));
        assert_eq!(s.grants_live(), 2);
        // a's startup failed after its accept (a reset): its grant goes
        // now, not 20 s later at `reap`, and its slot is free again.
        assert!(s.unclaimed(memory, a, ta));
        assert!(s.registry.dereg_mr(ga.stag).is_err(), "revoked");
        assert_eq!(s.grants_live(), 1);
        assert!(!s.unclaimed(memory, a, ta), "once");
        // A claimed grant stays: its connection runs.
        assert!(s.established(0, QpHandle(3), LOCAL, b, tb));
        assert!(!s.unclaimed(memory, b, tb));
        assert_eq!(s.grants_live(), 1);
        // At the limit, a client again from the same address and port
        // replaces its own grant instead of being refused.
        let c = SocketAddrV4::new(Ipv4Addr::new(10, 1, 1, 3), 4000);
        granted(s.decide(&encode_request("ro"), 7000, c));
        assert_eq!(s.grants_live(), 2);
        let gc = granted(s.decide(&encode_request("ro"), 7000, c));
        assert_eq!(s.grants_live(), 2);
        assert!(s.registry.dereg_mr(gb.stag).is_ok(), "b's still live");
        // Every grant that went counts as closed: accepted - closed live.
        let (accepted, closed) = (
            s.accepted.load(Ordering::Relaxed),
            s.closed.load(Ordering::Relaxed),
        );
        assert_eq!((accepted, closed), (4, 2));
        assert_eq!(accepted - closed, s.grants_live() as u64);
        assert_ne!(gc.stag, 0);
    }

    #[test]
    fn unknown_names_foreign_networks_and_garbage_are_refused() {
        let s = service();
        let outside = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 1);
        assert_eq!(
            refused(s.decide(&encode_request("shared"), 7000, outside)),
            3
        );
        assert_eq!(refused(s.decide(&encode_request("nope"), 7000, outside)), 2);
        assert_eq!(refused(s.decide(b"hello", 7000, outside)), 1);
        assert_eq!(
            granted(s.decide(&encode_request("ro"), 7000, outside)).access,
            1
        );
        s.drain();
        let other = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 2), 1);
        assert_eq!(refused(s.decide(&encode_request("ro"), 7000, other)), 4);
        assert_eq!(s.refused.load(Ordering::Relaxed), 4);
        assert_eq!(s.grants_live(), 1);
    }

    #[test]
    fn a_grant_never_claimed_is_revoked() {
        let s = open_region(Duration::ZERO);
        let p = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9);
        let g = granted(s.decide(&encode_request("r"), 7000, p));
        assert_eq!((s.pds_live(), s.registry.pds_in_use()), (1, 1));
        assert_eq!(s.reap(), 1);
        assert!(s.registry.dereg_mr(g.stag).is_err(), "revoked");
        assert_eq!(
            (s.pds_live(), s.registry.pds_in_use()),
            (0, 0),
            "its PD freed"
        );
        assert!(
            !s.established(0, QpHandle(1), LOCAL, p, 1),
            "a revoked grant is not claimed"
        );
    }

    /// A client's startup fails after its grant (it reset once its
    /// Request was accepted) and the client reconnects from the same port
    /// before that failure is handed to the service: the new connection's
    /// Request gets a grant of its own under the same four-tuple. The old
    /// startup's late failure names the old grant (its accept's token) and
    /// leaves the new one alone, which the new connection then claims and
    /// is lent the region by (found by a review: the failure named only the
    /// four-tuple, so it revoked the new grant, and the new connection,
    /// its STag gone, was ended as soon as it reached its core).
    #[test]
    fn a_late_failure_of_an_old_startup_leaves_the_new_grant_of_its_four_tuple() {
        let s = open_region(Duration::from_secs(10));
        s.listen_on(7000);
        let a = SocketAddrV4::new(Ipv4Addr::new(10, 1, 1, 1), 4000);
        let (old, old_token) = accepted(s.decide(&encode_request("r"), 7000, a));
        // The client reconnects from port 4000: its first grant goes (the
        // same four-tuple again), a new one comes.
        let (new, new_token) = accepted(s.decide(&encode_request("r"), 7000, a));
        assert_ne!(old_token, new_token);
        assert!(s.registry.dereg_mr(old.stag).is_err(), "the old STag went");
        // Now the first startup's failure is handed over.
        assert!(
            !s.unclaimed(LOCAL, a, old_token),
            "the old startup's failure revoked the new connection's grant"
        );
        assert_eq!(s.grants_live(), 1);
        // The new connection reaches its core: its QP in its grant's PD,
        // the grant claimed, the region lent.
        assert!(
            matches!(s.pd_for(LOCAL, a, new_token), PdChoice::In(_)),
            "{:?}",
            s.pd_for(LOCAL, a, new_token)
        );
        assert!(s.established(0, QpHandle(5), LOCAL, a, new_token));
        let lending = Lending {
            peer: a,
            region: "r".into(),
            core: 0,
            qp: QpHandle(5),
        };
        assert_eq!(s.lendings(), [lending]);
        let (accepted, closed) = (
            s.accepted.load(Ordering::Relaxed),
            s.closed.load(Ordering::Relaxed),
        );
        assert_eq!((accepted, closed), (2, 1));
        // Its own end revokes it.
        s.ended(0, QpHandle(5));
        assert_eq!(s.grants_live(), 0);
        assert!(s.registry.dereg_mr(new.stag).is_err(), "revoked at its end");
    }

    /// A reload moves the service to another port; a client's connection
    /// to the old port runs on. A new connection from the same address and
    /// port to the new port is another connection (another four-tuple):
    /// it gets a grant of its own and the running one keeps its lending
    /// until its own end (found by a review: grants were keyed by the
    /// client's address and port alone, so the new Request revoked the
    /// running connection's STag, and that connection's end then found
    /// no grant of its own to revoke).
    #[test]
    fn a_reload_leaves_a_running_lending_to_the_same_address_and_port_alone() {
        let s = open_region(Duration::from_secs(10));
        s.listen_on(7000);
        let a = SocketAddrV4::new(Ipv4Addr::new(10, 1, 1, 1), 4000);
        let (first, t1) = accepted(s.decide(&encode_request("r"), 7000, a));
        assert!(s.established(0, QpHandle(7), LOCAL, a, t1));
        // SIGHUP: the service moves to 7002; the first connection runs on.
        s.listen_on(7002);
        let (second, t2) = accepted(s.decide(&encode_request("r"), 7002, a));
        assert_ne!(first.stag, second.stag);
        assert_eq!(s.grants_live(), 2, "the running lending was revoked");
        let moved = SocketAddrV4::new(*LOCAL.ip(), 7002);
        assert!(s.established(0, QpHandle(8), moved, a, t2));
        assert_eq!(s.lendings().len(), 2);
        // The first connection ends: its grant goes, the second's stays.
        s.ended(0, QpHandle(7));
        assert_eq!(s.grants_live(), 1);
        assert!(s.registry.dereg_mr(first.stag).is_err(), "revoked");
        assert!(
            s.registry.dereg_mr(second.stag).is_ok(),
            "the second's live"
        );
        let (accepted, closed) = (
            s.accepted.load(Ordering::Relaxed),
            s.closed.load(Ordering::Relaxed),
        );
        assert_eq!((accepted, closed), (2, 1));
    }

    /// Each client's STag and QP are in a PD of its own, which goes once
    /// the QP and the STag have: a PD still holding a QP waits.
    #[test]
    fn each_client_has_a_protection_domain_of_its_own() {
        use rnic_engine::verbs::{QpInit, Rnic, RnicConfig};
        let s = service();
        s.listen_on(7000);
        let local = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 9), 7000);
        let elsewhere = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 9), 7001);
        let a = SocketAddrV4::new(Ipv4Addr::new(10, 1, 1, 1), 4000);
        let b = SocketAddrV4::new(Ipv4Addr::new(10, 1, 1, 2), 4000);
        let c = SocketAddrV4::new(Ipv4Addr::new(10, 1, 1, 3), 4000);
        let baseline = s.registry.pds_in_use();
        let (_, ta) = accepted(s.decide(&encode_request("shared"), 7000, a));
        let (_, tb) = accepted(s.decide(&encode_request("shared"), 7000, b));
        let (PdChoice::In(pa), PdChoice::In(pb)) = (s.pd_for(local, a, ta), s.pd_for(local, b, tb))
        else {
            panic!(
                "no PD of their own: {:?}",
                (s.pd_for(local, a, ta), s.pd_for(local, b, tb))
            );
        };
        assert_ne!(pa, pb);
        assert_eq!((s.pds_live(), s.registry.pds_in_use()), (2, baseline + 2));
        // No grant: refused on the service's port, the daemon's PD elsewhere.
        assert_eq!(s.pd_for(local, c, 0), PdChoice::Refuse);
        assert_eq!(s.pd_for(elsewhere, c, 0), PdChoice::Default);
        // A's address and port on another service's port: not A's PD.
        assert_eq!(s.pd_for(elsewhere, a, ta), PdChoice::Default);
        // A's four-tuple, but another accept's token: not A's PD.
        assert_eq!(s.pd_for(local, a, tb), PdChoice::Refuse);
        // The service moves (a reload): a startup on its old port keeps
        // its grant's PD; the old port, now another's, refuses nobody.
        s.listen_on(7002);
        assert_eq!(s.pd_for(local, a, ta), PdChoice::In(pa));
        assert_eq!(s.pd_for(local, c, 0), PdChoice::Default);
        let moved = SocketAddrV4::new(*local.ip(), 7002);
        assert_eq!(s.pd_for(moved, c, 0), PdChoice::Refuse);
        s.listen_on(7000);

        // a's QP on a core, in its PD; its connection ends: both go.
        let mut rnic = Rnic::with_registry(RnicConfig::default(), s.registry.clone());
        let cq = rnic.create_cq(8).unwrap();
        let init = |pd| QpInit {
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            sq_size: 4,
            rq_size: 4,
        };
        let qa = rnic.create_qp(init(pa)).unwrap();
        assert!(s.established(0, qa, LOCAL, a, ta));
        assert_eq!(s.pd_for(local, a, ta), PdChoice::Refuse, "claimed once");
        rnic.destroy_qp(qa).unwrap();
        s.ended(0, qa);
        assert_eq!((s.pds_live(), s.registry.pds_in_use()), (1, baseline + 1));

        // b's grant is revoked (a new connection from its address) while a
        // QP is still in its PD: the PD waits for the QP.
        let qb = rnic.create_qp(init(pb)).unwrap();
        granted(s.decide(&encode_request("shared"), 7000, b));
        assert_eq!(s.pds_live(), 2, "b's old PD waits, its new one lives");
        assert_eq!(s.registry.pds_in_use(), baseline + 2);
        rnic.destroy_qp(qb).unwrap();
        s.free_retired();
        assert_eq!((s.pds_live(), s.registry.pds_in_use()), (1, baseline + 1));
    }
}
