//! `dpwarpd`'s configuration: a TOML file in which every option is
//! explicit (no defaults hide in the code: a missing key is an error that
//! names it). A wrong key, type or value is refused with the file, the
//! line and column, the key and what is allowed; [`Config::load`] either
//! returns a whole, checked configuration or nothing, so a bad file never
//! starts a half-configured daemon.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use serde::de::{Deserializer, Error as _};
use serde::Deserialize;
use toml::Spanned;

/// The whole configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The daemon itself: its control socket, metrics, drain and logs.
    pub daemon: Daemon,
    /// DPDK's environment: memory, cores and pools.
    pub dpdk: Dpdk,
    /// The RNIC: MPA policy and the limits a client cannot push past.
    pub rnic: Rnic,
    /// The port the services listen on (`[[port]]`; one for now).
    pub port: Vec<Spanned<Port>>,
    /// The services (`[[service]]`).
    pub service: Vec<Spanned<Service>>,
    /// The memory service's named regions (`[[region]]`; none without
    /// it).
    #[serde(default)]
    pub region: Vec<Spanned<RegionConfig>>,
}

/// `[[region]]`: memory the `memory` service lends by name.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegionConfig {
    /// What clients ask for: 1 to 64 of `A-Z a-z 0-9 . _ -`.
    #[serde(deserialize_with = "region_name")]
    pub name: String,
    /// Its size in MiB (1 to 65536).
    #[serde(deserialize_with = "memory")]
    pub size_mib: usize,
    /// What a client may do with it: any of `remote_read`, `remote_write`,
    /// `remote_atomic` (RFC 5040 §5, RFC 7306), at least one.
    #[serde(deserialize_with = "access")]
    pub access: Vec<AccessRight>,
    /// The client networks allowed, as `A.B.C.D/P` (at least one;
    /// `0.0.0.0/0` for every client).
    #[serde(deserialize_with = "networks")]
    pub allow: Vec<(Ipv4Addr, u8)>,
}

/// `[[region]] access`.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum AccessRight {
    RemoteRead,
    RemoteWrite,
    RemoteAtomic,
}

fn region_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let name = String::deserialize(d)?;
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !ok {
        return Err(D::Error::custom(format!(
            "{name:?}: give 1 to 64 of A-Z a-z 0-9 . _ -"
        )));
    }
    Ok(name)
}

fn access<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<AccessRight>, D::Error> {
    let mut rights = Vec::<AccessRight>::deserialize(d)?;
    if rights.is_empty() {
        return Err(D::Error::custom(
            "no rights: give any of \"remote_read\", \"remote_write\", \"remote_atomic\"",
        ));
    }
    rights.sort_unstable();
    rights.dedup();
    Ok(rights)
}

fn networks<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(Ipv4Addr, u8)>, D::Error> {
    let list = Vec::<String>::deserialize(d)?;
    if list.is_empty() {
        return Err(D::Error::custom(
            "no network allowed: give at least one, e.g. [\"10.77.0.0/24\"] (\"0.0.0.0/0\": every client)",
        ));
    }
    list.iter()
        .map(|n| {
            parse_address(n).ok_or_else(|| {
                D::Error::custom(format!(
                    "{n:?}: give a network as A.B.C.D/P, e.g. \"10.77.0.0/24\""
                ))
            })
        })
        .collect()
}

/// Whether `ip` is in the network `net`.
pub fn in_network(ip: Ipv4Addr, net: (Ipv4Addr, u8)) -> bool {
    let mask = if net.1 == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(net.1))
    };
    u32::from(ip) & mask == u32::from(net.0) & mask
}

/// `[daemon]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Daemon {
    /// The Unix socket `dpwarpctl` talks to (made with permissions 0600).
    pub control_socket: PathBuf,
    /// Where the Prometheus endpoint listens (`GET /metrics`), e.g.
    /// `127.0.0.1:9464`.
    pub metrics_listen: SocketAddr,
    /// SIGTERM or `dpwarpctl drain`: how long running connections may go
    /// on before the rest are ended (milliseconds, 0 to 600000).
    #[serde(deserialize_with = "drain_deadline")]
    pub drain_deadline_ms: u64,
    /// A client run with no connection open for this long (its client went
    /// away) gives its memory back (milliseconds, 100 to 3600000).
    #[serde(deserialize_with = "idle_limit")]
    pub client_idle_ms: u64,
    /// The log level: `error`, `warn`, `info`, `debug` or `trace`.
    pub log: LogLevel,
    /// What a poll-mode core does with no work: `spin` (poll without rest,
    /// a CPU per core always busy, the least latency) or `nap` (a core with
    /// no connection or association open sleeps 50 us after each turn once
    /// nothing has moved for 200 us, so an idle daemon leaves a shared
    /// machine its CPUs; a client's first packets then wait up to a nap).
    pub idle: IdlePolicy,
    /// The DSCP (RFC 2474, 0 to 63) the segments of urgent services'
    /// connections carry, the class switches queue them in: 46, Expedited
    /// Forwarding (RFC 3246), when left out; 0 leaves them unmarked.
    #[serde(default = "expedited_forwarding", deserialize_with = "dscp")]
    pub urgent_dscp: u8,
    /// Give each accepted connection the class its client's SYN carried
    /// (false when left out): its segments carry that DSCP, and one of
    /// `urgent_dscp`'s class is urgent, whatever its service, as a
    /// hardware iWARP RNIC takes the TOS of the SYN
    /// (`dataplane::CoreConfig::reflect_dscp`). With the `kernel` driver,
    /// Linux reflects the class and tells it only with
    /// `net.ipv4.tcp_reflect_tos = 1` in dpwarpd's network namespace
    /// (dpwarpd refuses to start without it). Clients then choose their
    /// own precedence: for networks whose clients are trusted with it.
    #[serde(default)]
    pub reflect_dscp: bool,
}

/// Why `reflect_dscp = true` cannot be served with driver `kernel` here.
pub const REFLECT_DSCP_UNHONOURED: &str = "`reflect_dscp = true` with driver \"kernel\": Linux \
     tells a listener its client's class only while it reflects each SYN's TOS; set \
     net.ipv4.tcp_reflect_tos = 1 in dpwarpd's network namespace (sysctl -w \
     net.ipv4.tcp_reflect_tos=1), or use a DPDK port";

fn expedited_forwarding() -> u8 {
    46
}

fn dscp<'de, D: Deserializer<'de>>(d: D) -> Result<u8, D::Error> {
    ranged(d, 0, 63, " (a DSCP, not a TOS octet: EF is 46)")
}

/// `[daemon] idle`.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
#[allow(missing_docs)]
pub enum IdlePolicy {
    Spin,
    Nap,
}

/// `[daemon] log`.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
#[allow(missing_docs)]
pub enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

impl LogLevel {
    /// Its name, as `tracing` filters spell it.
    pub fn name(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        }
    }
}

/// `[dpdk]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dpdk {
    /// `auto` (2 MiB hugepages when enough are free, else ordinary pages),
    /// `on` (hugepages or fail), `off` (`--no-huge`).
    pub hugepages: HugepagesPolicy,
    /// The CPUs of the poll-mode cores, one pinned core each (DPDK's
    /// `-l`); each core gets its own queue pair of the port.
    #[serde(deserialize_with = "lcores")]
    pub lcores: Vec<usize>,
    /// Mbufs in each queue pair's pool (512 to 1048576).
    #[serde(deserialize_with = "mbufs")]
    pub mbufs_per_queue: u32,
}

/// `[dpdk] hugepages`.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
#[allow(missing_docs)]
pub enum HugepagesPolicy {
    Auto,
    On,
    Off,
}

/// `[rnic]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rnic {
    /// MPA CRC (RFC 5044 §7.1, C bit): `on` asks every peer for it (it is
    /// used if either side asks), `off` uses it only if the peer asks.
    pub crc: OnOff,
    /// MPA markers in what we receive (RFC 5044 §7.1, M bit).
    pub markers: OnOff,
    /// The most inbound RDMA Reads a QP queues (IRD, RFC 6581 §5): an
    /// enhanced client asking for more is granted this many (1 to 128).
    #[serde(deserialize_with = "ird_ord")]
    pub ird_max: u16,
    /// The ORD granted by default (1 to 128).
    #[serde(deserialize_with = "ird_ord")]
    pub ord: u16,
    /// Connections in MPA startup at once, over all cores (beyond it a SYN
    /// is refused at once): 1 to 65536.
    #[serde(deserialize_with = "connections")]
    pub startups_max: usize,
    /// Of those, how many one client address may hold (1 to 65536): a
    /// client that opens connections and never sends its MPA Request
    /// holds at most this many until the Request timeout (5 s), and the
    /// rest of its connections are refused at once, so others still get
    /// in. At least the connections one client opens at once (a bench
    /// client's `-q`).
    #[serde(deserialize_with = "connections")]
    pub startups_per_client_max: usize,
    /// Registered memory the services lease to clients, in MiB (1 to
    /// 65536).
    #[serde(deserialize_with = "memory")]
    pub memory_mib: usize,
    /// Client runs served at once (1 to 65536); the next is refused with
    /// the reason.
    #[serde(deserialize_with = "connections")]
    pub clients_max: usize,
}

/// `on` or `off`.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
#[allow(missing_docs)]
pub enum OnOff {
    On,
    Off,
}

impl OnOff {
    /// Whether it is `on`.
    pub fn on(self) -> bool {
        self == OnOff::On
    }
}

/// `[[port]]`: what carries the services' TCP.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Port {
    /// The name services use for it.
    pub name: String,
    /// `kernel` (Linux TCP sockets: no DPDK), `net_tap` (a TAP interface
    /// DPDK makes, the kernel side being the clients' host), `memif` (a
    /// dpwarp peer process), `af_packet` (an existing interface), `pci` (a
    /// NIC bound to vfio-pci).
    pub driver: Driver,
    /// Our IPv4 address and prefix on the link, e.g. `10.77.0.2/24`;
    /// `kernel`: the address listeners bind (`0.0.0.0/0`: every address).
    #[serde(deserialize_with = "address")]
    pub address: (Ipv4Addr, u8),
    /// The IP MTU (1280 to 9000).
    #[serde(deserialize_with = "mtu")]
    pub mtu: u16,
    /// `net_tap`: the interface to make; `af_packet`: the one to run on.
    pub iface: Option<String>,
    /// `net_tap`, `af_packet`: the network namespace the interface is in.
    pub netns: Option<String>,
    /// `net_tap`: the address and prefix the kernel side of the TAP
    /// interface gets: the clients' host on the link, e.g. `10.77.0.1/24`
    /// (not with `bridge`).
    pub host_address: Option<String>,
    /// `net_tap` with `netns`: make the TAP interface a port of this bridge
    /// in the namespace (the clients are on the bridge, as in a test bed of
    /// virtual machines) instead of giving it `host_address`.
    pub bridge: Option<String>,
    /// `pci`: the NIC's PCI address.
    pub pci: Option<String>,
    /// `memif`: the control socket's name.
    pub memif_socket: Option<String>,
}

/// `[[port]] driver`.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum Driver {
    Kernel,
    NetTap,
    Memif,
    AfPacket,
    Pci,
}

impl Driver {
    /// Its name in the file.
    pub fn name(self) -> &'static str {
        match self {
            Driver::Kernel => "kernel",
            Driver::NetTap => "net_tap",
            Driver::Memif => "memif",
            Driver::AfPacket => "af_packet",
            Driver::Pci => "pci",
        }
    }
}

/// `[[service]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Service {
    /// What it serves: `bench`, the responder of dpwarp's `bench` clients
    /// (any number at once, each in memory of its own); `memory`, the
    /// `[[region]]`s lent by name (see `deploy::memory`); `rping`, rdma-core
    /// rping's server (`rping -s -P`: any number of clients, buffers up to
    /// 65535 octets, every iteration's data verified); `perftest`,
    /// perftest's server for one of its RC tests (`[service.perftest]`;
    /// several such services, each on its own TCP port).
    pub kind: ServiceKind,
    /// The `[[port]]` it listens on, by name.
    pub port: String,
    /// The TCP port it listens on (1 to 65535).
    #[serde(deserialize_with = "tcp_port")]
    pub tcp_port: u16,
    /// A `bench` service's UDP port for DDP over SCTP (RFC 5043) over UDP
    /// (RFC 6951; 9899 is its registered port), beside MPA over TCP on
    /// `tcp_port`: `bench OP HOST -p UDP_PORT --llp sctp` clients, in the
    /// same leases, limits and drain (only there; on every driver, an SCTP
    /// endpoint on every core).
    #[serde(default, deserialize_with = "udp_port")]
    pub udp_port: Option<u16>,
    /// A `perftest` service's test (only there).
    #[serde(default)]
    pub perftest: Option<PerftestConfig>,
    /// A `memory`, `bench` or `rping` service: how many of `[rnic]
    /// clients_max` one client host may hold at once (the memory service's
    /// grants, the bench service's client runs, rping's connections over
    /// all cores; 1 to `clients_max`; half of `clients_max`, rounded up,
    /// when left out), so that a host that opens connections and keeps
    /// them cannot hold every one. Its next client is refused at its MPA
    /// Request, saying so (rping's, from the count of its established
    /// connections: of a burst of startups that all pass, those beyond are
    /// reset by their core, counted in `dpwarpctl stats`). A benchmark that
    /// runs many clients from one host needs it as large as they are. (A
    /// perftest service's is in its `[service.perftest]`.)
    #[serde(default, deserialize_with = "clients_per_host")]
    pub clients_per_host: Option<usize>,
    /// Its connections are urgent on their core (false by default): each
    /// turn looks at them first, TCP sends their segments first, and while
    /// one lives a turn looks at one other connection only, so that a
    /// latency-sensitive service (`ib_write_lat`, rping) beside bulk ones
    /// waits for no other connection's work; the others' throughput pays
    /// for it (the README's "Many cores"). Changed by a restart only.
    #[serde(default)]
    pub urgent: bool,
}

/// `[service.perftest]`: what a perftest service's clients run.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PerftestConfig {
    /// The command its clients run, less the server's address and port:
    /// a test (`ib_write_bw`, `ib_read_bw`, `ib_send_bw`, `ib_write_lat`,
    /// `ib_read_lat`, `ib_send_lat`) and its options (`-s`, `-n`, `-a`,
    /// `-D`, `-q`, `-b`, `-t`, `-r`, `-o`; `-R` and `-F` taken and
    /// ignored). perftest's client tells the server none of them, so its
    /// server must be given the same ("Please run the same command").
    #[serde(deserialize_with = "perftest_command")]
    pub command: PerftestCommand,
    /// ib_write_lat: write first without the client's RFC 6581 RTR, as
    /// Linux siw does (RFC 5044 §7.1 forbids it; false refuses such a
    /// client with the reason).
    pub unfenced: bool,
    /// Clients served at once (1 to 64); each takes its test's buffers.
    #[serde(deserialize_with = "perftest_clients")]
    pub clients_max: usize,
    /// Clients one host may have served at once (1 to `clients_max`; by
    /// default `clients_max`): a host whose sessions trickle their work
    /// cannot hold every slot. Its next client's MPA Request is rejected,
    /// saying so. A benchmark that runs many clients from one host needs
    /// it as large as they are.
    #[serde(default, deserialize_with = "perftest_clients_per_host")]
    pub clients_per_host: Option<usize>,
    /// Serve its clients on every core, each client host's on one (the
    /// core its address, ours and the service's port hash to; a DPDK port
    /// steers them there; over Linux TCP every core listens and the
    /// listeners' reuseport group picks one by the client's address),
    /// instead of every client on one core (the services take the cores in
    /// turn). Its `clients_max` slots are shared by the cores. Changed by
    /// a restart only.
    #[serde(default)]
    pub spread: bool,
}

/// A perftest command line and the server's parameters it gives.
#[derive(Debug, Clone, PartialEq)]
pub struct PerftestCommand {
    /// As written.
    pub text: String,
    /// The server's parameters.
    pub params: bench::perftest::Params,
}

/// perftest's options a service takes (and whether each takes a value).
const PERFTEST_OPTIONS: &[(&str, &str, bool)] = &[
    ("-s", "--size", true),
    ("-n", "--iters", true),
    ("-a", "--all", false),
    ("-D", "--duration", true),
    ("-q", "--qp", true),
    ("-b", "--bidirectional", false),
    ("-t", "--tx-depth", true),
    ("-r", "--rx-depth", true),
    ("-o", "--outs", true),
    ("-R", "--rdma_cm", false),
    ("-F", "--CPU-freq", false),
];

fn perftest_command<'de, D: Deserializer<'de>>(d: D) -> Result<PerftestCommand, D::Error> {
    let text = String::deserialize(d)?;
    parse_perftest(&text).map_err(D::Error::custom)
}

/// `text` as a perftest service's command (see [`PerftestConfig`]).
pub fn parse_perftest(text: &str) -> Result<PerftestCommand, String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.is_empty() {
        return Err(
            "an empty command: give a test and its options, e.g. \"ib_write_bw -s 65536\"".into(),
        );
    }
    let mut expect_value = false;
    for w in &words[1..] {
        if expect_value {
            expect_value = false;
            continue;
        }
        if !w.starts_with('-') {
            return Err(format!(
                "{w:?}: no server address here (the service is the server); give only the \
                 test's options"
            ));
        }
        let name = w.split_once('=').map_or(*w, |(n, _)| n);
        match PERFTEST_OPTIONS
            .iter()
            .find(|(short, long, _)| *short == name || *long == name)
        {
            Some((_, _, takes)) => expect_value = *takes && !w.contains('='),
            None if matches!(name, "-p" | "--port") => {
                return Err(format!("{w}: the port is the service's tcp_port"))
            }
            None => {
                return Err(format!(
                    "{w}: not one of the test options a perftest service takes ({})",
                    PERFTEST_OPTIONS
                        .iter()
                        .map(|(s, _, _)| *s)
                        .collect::<Vec<_>>()
                        .join(" ")
                ))
            }
        }
    }
    let test = words[0];
    if <bench::perftest::Test as clap::ValueEnum>::from_str(test, false).is_err() {
        return Err(format!(
            "{test:?}: not one of perftest's RC tests (ib_write_bw, ib_read_bw, ib_send_bw, \
             ib_write_lat, ib_read_lat, ib_send_lat)"
        ));
    }
    let argv = std::iter::once("perftest").chain(words.iter().copied());
    let args =
        <bench::perftest::PerftestArgs as clap::Parser>::try_parse_from(argv).map_err(|e| {
            let full = e.to_string();
            let first = full
                .lines()
                .next()
                .unwrap_or("")
                .trim_start_matches("error: ");
            format!("{text:?}: {first}")
        })?;
    let params = args.params().map_err(|why| format!("{text:?}: {why}"))?;
    Ok(PerftestCommand {
        text: text.to_string(),
        params,
    })
}

fn perftest_clients<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    ranged(d, 1, 64, "")
}

fn perftest_clients_per_host<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    ranged(d, 1, 64, " (and at most clients_max)").map(Some)
}

impl PerftestConfig {
    /// Clients one host may have served at once.
    pub fn per_host(&self) -> usize {
        self.clients_per_host.unwrap_or(self.clients_max)
    }
}

/// `[[service]] kind`.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum ServiceKind {
    Bench,
    Memory,
    Rping,
    Perftest,
}

impl ServiceKind {
    /// Its name in the file, logs and metrics.
    pub fn name(self) -> &'static str {
        match self {
            ServiceKind::Bench => "bench",
            ServiceKind::Memory => "memory",
            ServiceKind::Rping => "rping",
            ServiceKind::Perftest => "perftest",
        }
    }
}

fn ranged<'de, D, T>(d: D, lo: T, hi: T, unit: &str) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + PartialOrd + std::fmt::Display + Copy,
{
    let v = T::deserialize(d)?;
    if v < lo || v > hi {
        return Err(D::Error::custom(format!(
            "{v} is out of range: give {lo} to {hi}{unit}"
        )));
    }
    Ok(v)
}

/// The longest `drain_deadline_ms`: the systemd unit's stop timeout
/// (`TimeoutStopSec`) leaves room for it (a test reads the unit).
pub const DRAIN_DEADLINE_MAX_MS: u64 = 600_000;

fn drain_deadline<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    ranged(d, 0, DRAIN_DEADLINE_MAX_MS, " milliseconds")
}

fn idle_limit<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    ranged(d, 100, 3_600_000, " milliseconds")
}

fn mbufs<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    ranged(d, 512, 1 << 20, " mbufs")
}

fn ird_ord<'de, D: Deserializer<'de>>(d: D) -> Result<u16, D::Error> {
    ranged(d, 1, 128, "")
}

fn connections<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    ranged(d, 1, 65_536, "")
}

fn memory<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    ranged(d, 1, 65_536, " MiB")
}

fn mtu<'de, D: Deserializer<'de>>(d: D) -> Result<u16, D::Error> {
    ranged(d, 1280, 9000, "")
}

fn clients_per_host<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    ranged(d, 1, 65_536, " (and at most [rnic] clients_max)").map(Some)
}

fn tcp_port<'de, D: Deserializer<'de>>(d: D) -> Result<u16, D::Error> {
    ranged(d, 1, 65535, "")
}

fn udp_port<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u16>, D::Error> {
    ranged(d, 1, 65535, "").map(Some)
}

fn lcores<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<usize>, D::Error> {
    let cpus = Vec::<usize>::deserialize(d)?;
    if cpus.is_empty() {
        return Err(D::Error::custom(
            "no lcores: give the CPUs of the poll-mode cores, e.g. [0] or [0, 1]",
        ));
    }
    if cpus.len() > 64 {
        return Err(D::Error::custom("at most 64 lcores"));
    }
    let mut seen = cpus.clone();
    seen.sort_unstable();
    if let Some(w) = seen.windows(2).find(|w| w[0] == w[1]) {
        return Err(D::Error::custom(format!(
            "CPU {} is listed twice: one poll-mode core per CPU",
            w[0]
        )));
    }
    Ok(cpus)
}

fn address<'de, D: Deserializer<'de>>(d: D) -> Result<(Ipv4Addr, u8), D::Error> {
    let s = String::deserialize(d)?;
    parse_address(&s).ok_or_else(|| {
        D::Error::custom(format!(
            "{s:?}: give an IPv4 address and prefix, e.g. \"10.77.0.2/24\""
        ))
    })
}

/// `A.B.C.D/P`.
pub fn parse_address(s: &str) -> Option<(Ipv4Addr, u8)> {
    let (ip, prefix) = s.split_once('/')?;
    let prefix: u8 = prefix.parse().ok()?;
    (prefix <= 32).then_some((ip.parse().ok()?, prefix))
}

/// A configuration that cannot be used: where and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// Reads and checks the file at `path`, and what it asks of this
    /// machine: memory it has ([`Config::check_memory`] against
    /// `MemTotal`), a control socket where nothing else is.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("{}: cannot read it: {e}", path.display())))?;
        let file = path.display().to_string();
        let config = Config::parse(&text, &file)?;
        if let Some(total) = meminfo_mib("MemTotal") {
            config.check_memory(&text, &file, total, "")?;
        }
        if let Some(why) = not_a_socket(&config.daemon.control_socket)
            .or_else(|| no_socket_there(&config.daemon.control_socket))
        {
            return Err(locate(&text, &file, key_at(&text, "control_socket"), &why));
        }
        config.check_cpus(&text, &file, &dataplane::lcore::cpus())?;
        config.check_reflect_dscp(&text, &file, tcp_lite::sys::kernel::linux_reflects_tos())?;
        Ok(config)
    }

    /// Refuses `reflect_dscp = true` on driver `kernel` where Linux does
    /// not reflect a SYN's TOS (`reflects`: `net.ipv4.tcp_reflect_tos` is
    /// 1 in this network namespace), which the daemon refuses to start
    /// with (found by a review: `--check`, the unit's ExecStartPre, passed
    /// it). The daemon checks again when it starts.
    pub fn check_reflect_dscp(
        &self,
        text: &str,
        file: &str,
        reflects: bool,
    ) -> Result<(), ConfigError> {
        if self.daemon.reflect_dscp && self.port().driver == Driver::Kernel && !reflects {
            return Err(locate(
                text,
                file,
                key_at(text, "reflect_dscp"),
                REFLECT_DSCP_UNHONOURED,
            ));
        }
        Ok(())
    }

    /// Refuses `lcores` this process may not run on (`allowed`, the CPUs
    /// of its affinity mask; found by a review: `--check` passed a CPU the
    /// machine does not have, and the daemon failed only when it pinned
    /// its cores). An empty `allowed` (the mask unreadable) checks nothing.
    pub fn check_cpus(&self, text: &str, file: &str, allowed: &[usize]) -> Result<(), ConfigError> {
        if allowed.is_empty() {
            return Ok(());
        }
        match self.dpdk.lcores.iter().find(|cpu| !allowed.contains(cpu)) {
            None => Ok(()),
            Some(cpu) => Err(locate(
                text,
                file,
                key_at(text, "lcores"),
                &format!(
                    "lcores: CPU {cpu} is not one this process may run on (it may use \
                     {allowed:?}): give those"
                ),
            )),
        }
    }

    /// Refuses memory this machine does not have: `memory_mib` and the
    /// `[[region]]`s' `size_mib`, which the daemon allocates and zeroes
    /// when it starts, against `have` MiB (`MemTotal`, or `MemAvailable`
    /// at the start, `what` then saying so: " available now").
    pub fn check_memory(
        &self,
        text: &str,
        file: &str,
        have: u64,
        what: &str,
    ) -> Result<(), ConfigError> {
        let mut total = self.rnic.memory_mib as u64;
        if total > have {
            return Err(locate(
                text,
                file,
                key_at(text, "memory_mib"),
                &format!(
                    "memory_mib = {}: this machine has {have} MiB{what}: give less",
                    self.rnic.memory_mib
                ),
            ));
        }
        for r in &self.region {
            let size = r.get_ref().size_mib;
            total += size as u64;
            if total > have {
                return Err(locate(
                    text,
                    file,
                    r.span().start,
                    &format!(
                        "region {:?}: size_mib = {size}, with memory_mib = {} and the regions \
                         before it {total} MiB in all: this machine has {have} MiB{what}: give \
                         less",
                        r.get_ref().name,
                        self.rnic.memory_mib
                    ),
                ));
            }
        }
        // The perftest services' sessions keep a timestamp per iteration
        // (iteration mode) on the heap, beside their registered memory:
        // counted here too (found by a review: `ib_write_bw -b -n
        // 10000000` for 64 clients passed, and its sessions could take
        // about 20 GB).
        for spanned in &self.service {
            let s = spanned.get_ref();
            let Some(p) = s.perftest.as_ref() else {
                continue;
            };
            let stamps = bench::perftest::PerftestService::timestamps_memory(
                &p.command.params,
                p.clients_max,
            ) as u64;
            let mib = stamps.div_ceil(1 << 20);
            total += mib;
            if total > have {
                // Its own `command` (found by a review: the first perftest
                // service's was named, whichever service it was).
                return Err(locate(
                    text,
                    file,
                    key_in_service(text, spanned.span().start, "command"),
                    &format!(
                        "the perftest service on TCP port {}: {:?} for {} clients keeps up to \
                         {mib} MiB of timestamps (16 octets an iteration), {total} MiB in all \
                         with memory_mib and the regions: this machine has {have} MiB{what}: \
                         give fewer iterations (-n) or clients, or run for a time (-D)",
                        s.tcp_port, p.command.text, p.clients_max
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Parses and checks `text`, naming it `file` in errors.
    pub fn parse(text: &str, file: &str) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| {
            let at = e.span().map(|s| s.start).unwrap_or(0);
            locate(text, file, at, e.message())
        })?;
        config.check(text, file)?;
        Ok(config)
    }

    /// What the types cannot say: one port, services on it, the drivers'
    /// own keys.
    fn check(&self, text: &str, file: &str) -> Result<(), ConfigError> {
        let err = |at: usize, why: String| Err(locate(text, file, at, &why));
        match self.port.as_slice() {
            [] => {
                return err(
                    0,
                    "no [[port]]: give the port the services listen on".into(),
                )
            }
            [_] => {}
            [_, second, ..] => {
                return err(
                    second.span().start,
                    "a second [[port]]: dpwarpd runs one port for now (its cores each take a \
                     queue pair of it)"
                        .into(),
                )
            }
        }
        let port = self.port[0].get_ref();
        let at = self.port[0].span().start;
        let needs = |key: &str, v: &Option<String>, what: &str| -> Result<(), ConfigError> {
            if v.as_deref().is_none_or(str::is_empty) {
                return err(
                    at,
                    format!("driver {} needs `{key}`: {what}", port.driver.name()),
                );
            }
            Ok(())
        };
        let forbids = |key: &str, v: &Option<String>| -> Result<(), ConfigError> {
            if v.is_some() {
                return err(
                    at,
                    format!(
                        "`{key}` means nothing to driver {}: remove it",
                        port.driver.name()
                    ),
                );
            }
            Ok(())
        };
        // Each driver's own keys: those it needs, and those that mean
        // nothing to it.
        type Needed<'a> = &'a [(&'a str, &'a Option<String>, &'a str)];
        let (need, forbid): (Needed, &[&str]) = match port.driver {
            Driver::Kernel => (
                &[],
                &[
                    "iface",
                    "netns",
                    "host_address",
                    "bridge",
                    "pci",
                    "memif_socket",
                ],
            ),
            Driver::NetTap => (
                &[(
                    "iface",
                    &port.iface,
                    "the TAP interface to make, e.g. \"dpwarp0\"",
                )],
                &["pci", "memif_socket"],
            ),
            Driver::AfPacket => (
                &[("iface", &port.iface, "the existing interface to run on")],
                &["host_address", "bridge", "pci", "memif_socket"],
            ),
            Driver::Memif => (
                &[(
                    "memif_socket",
                    &port.memif_socket,
                    "the control socket's name, e.g. \"/run/dpwarp/memif.sock\"",
                )],
                &["iface", "netns", "host_address", "bridge", "pci"],
            ),
            Driver::Pci => (
                &[(
                    "pci",
                    &port.pci,
                    "the NIC's PCI address, e.g. \"0000:01:00.0\"",
                )],
                &["iface", "netns", "host_address", "bridge", "memif_socket"],
            ),
        };
        for (key, v, what) in need {
            needs(key, v, what)?;
        }
        let given = |key: &str| match key {
            "iface" => &port.iface,
            "netns" => &port.netns,
            "host_address" => &port.host_address,
            "bridge" => &port.bridge,
            "pci" => &port.pci,
            _ => &port.memif_socket,
        };
        for key in forbid {
            forbids(key, given(key))?;
        }
        if port.driver == Driver::NetTap {
            match (&port.bridge, &port.netns) {
                (Some(_), None) => {
                    return err(
                        at,
                        "`bridge` needs `netns`: the namespace the bridge is in".into(),
                    )
                }
                (Some(_), Some(_)) => forbids("host_address", &port.host_address)?,
                (None, _) => needs(
                    "host_address",
                    &port.host_address,
                    "the kernel side's address, e.g. \"10.77.0.1/24\" (or a `bridge` to join)",
                )?,
            }
            if let Some(h) = &port.host_address {
                let Some(host) = parse_address(h) else {
                    return err(
                        at,
                        format!(
                            "host_address {h:?}: give an IPv4 address and prefix, e.g. \"10.77.0.1/24\""
                        ),
                    );
                };
                // The kernel side answers for its own address: ours there
                // took our clients, and one in another network reached
                // none of them (found by a review).
                let ours = port.address;
                if host.0 == ours.0 {
                    return err(
                        at,
                        format!(
                            "host_address {h:?} is the port's own address {}: give the kernel \
                             side another address in its network",
                            ours.0
                        ),
                    );
                }
                if !in_network(host.0, ours) || !in_network(ours.0, host) {
                    return err(
                        at,
                        format!(
                            "host_address {h:?} and address {}/{} are not in one network: give \
                             the kernel side an address in the port's (e.g. the port \
                             10.77.0.2/24, the kernel side 10.77.0.1/24)",
                            ours.0, ours.1
                        ),
                    );
                }
            }
        }
        if self.service.is_empty() {
            return err(
                text.len(),
                "no [[service]]: give at least one, e.g. kind = \"bench\"".into(),
            );
        }
        let mut ports = Vec::new();
        for s in &self.service {
            let service = s.get_ref();
            if service.port != port.name {
                return err(
                    s.span().start,
                    format!(
                        "service port {:?}: there is no such [[port]] (there is {:?})",
                        service.port, port.name
                    ),
                );
            }
            if ports.contains(&service.tcp_port) {
                return err(
                    s.span().start,
                    format!(
                        "a second service on TCP port {}: give each its own",
                        service.tcp_port
                    ),
                );
            }
            ports.push(service.tcp_port);
            if let Some(n) = service.clients_per_host {
                let why = match service.kind {
                    ServiceKind::Memory | ServiceKind::Bench | ServiceKind::Rping
                        if n > self.rnic.clients_max =>
                    {
                        Some(format!(
                            "clients_per_host = {n} is more than [rnic] clients_max = {}: give at \
                             most clients_max",
                            self.rnic.clients_max
                        ))
                    }
                    ServiceKind::Memory | ServiceKind::Bench | ServiceKind::Rping => None,
                    ServiceKind::Perftest => Some(
                        "a perftest service's `clients_per_host` is in its [service.perftest]: \
                         move it there"
                            .into(),
                    ),
                };
                if let Some(why) = why {
                    return err(
                        key_in_service(text, s.span().start, "clients_per_host"),
                        why,
                    );
                }
            }
            if service.udp_port.is_some() && service.kind != ServiceKind::Bench {
                return err(
                    s.span().start,
                    format!(
                        "`udp_port` (DDP over SCTP) means nothing to a {} service: its \
                         clients speak MPA over TCP only; remove it",
                        service.kind.name()
                    ),
                );
            }
        }
        if let Some(s) = self.metrics_on_a_service() {
            return err(
                key_at(text, "metrics_listen"),
                format!(
                    "metrics_listen {} is the {} service's TCP port on driver kernel (Linux \
                     TCP listens for both on {}): give the metrics endpoint another port",
                    self.daemon.metrics_listen,
                    s.kind.name(),
                    port.address.0
                ),
            );
        }
        let mut kinds = Vec::new();
        for s in &self.service {
            let kind = s.get_ref().kind;
            match (kind, &s.get_ref().perftest) {
                (ServiceKind::Perftest, None) => {
                    return err(
                        s.span().start,
                        "a perftest service needs [service.perftest]: its `command` (e.g. \
                         \"ib_write_bw -s 65536\"), `unfenced` and `clients_max`"
                            .into(),
                    )
                }
                (ServiceKind::Perftest, Some(p)) => {
                    if p.per_host() > p.clients_max {
                        return err(
                            s.span().start,
                            format!(
                                "[service.perftest] clients_per_host = {} is more than its \
                                 clients_max = {}: give at most clients_max",
                                p.per_host(),
                                p.clients_max
                            ),
                        );
                    }
                    continue;
                }
                (_, Some(_)) => {
                    return err(
                        s.span().start,
                        format!(
                            "[service.perftest] means nothing to a {} service: remove it",
                            kind.name()
                        ),
                    )
                }
                (_, None) => {}
            }
            if kinds.contains(&kind) {
                return err(
                    s.span().start,
                    format!("a second {} service: one of each kind", kind.name()),
                );
            }
            kinds.push(kind);
        }
        let memory = kinds.contains(&ServiceKind::Memory);
        match (memory, self.region.first()) {
            (true, None) => {
                return err(
                    text.len(),
                    "a memory service without a [[region]]: give the regions it lends".into(),
                )
            }
            (false, Some(r)) => {
                return err(
                    r.span().start,
                    "a [[region]] but no memory service to lend it: add a [[service]] of kind \"memory\""
                        .into(),
                )
            }
            _ => {}
        }
        let mut names: Vec<&str> = Vec::new();
        for r in &self.region {
            let name = r.get_ref().name.as_str();
            if names.contains(&name) {
                return err(r.span().start, format!("a second region named {name:?}"));
            }
            names.push(name);
        }
        if let Err(why) = self.budget() {
            return err(key_at(text, "memory_mib"), why);
        }
        Ok(())
    }

    /// The service whose TCP port the metrics endpoint would take from it:
    /// over Linux TCP (driver `kernel`) the endpoint and the services'
    /// listeners are sockets of one host, bound first by the endpoint, and
    /// the service's core then failed to listen (found by a review:
    /// `--check` passed it). On a DPDK port the services' TCP is not the
    /// host's.
    fn metrics_on_a_service(&self) -> Option<&Service> {
        use std::net::IpAddr;
        let port = self.port();
        let metrics = self.daemon.metrics_listen;
        if port.driver != Driver::Kernel || metrics.port() == 0 {
            return None;
        }
        // An IPv6 wildcard socket takes IPv4 too (Linux's default,
        // net.ipv6.bindv6only = 0).
        let overlaps = match metrics.ip() {
            IpAddr::V4(ip) => {
                ip.is_unspecified() || port.address.0.is_unspecified() || ip == port.address.0
            }
            IpAddr::V6(ip) => {
                ip.is_unspecified()
                    || ip.to_ipv4_mapped().is_some_and(|v4| {
                        v4.is_unspecified()
                            || port.address.0.is_unspecified()
                            || v4 == port.address.0
                    })
            }
        };
        self.services()
            .find(|s| overlaps && s.tcp_port == metrics.port())
    }

    /// Checks that `memory_mib` holds what the services take of it for
    /// good when the daemon starts (rping's buffers on every core, each
    /// perftest service's sessions), as the daemon takes it: the same
    /// leases, in the same order, the same refusal.
    fn budget(&self) -> Result<(), String> {
        let mut leases = bench::lease::Leases::new((self.rnic.memory_mib as u64) << 20);
        if self.service(ServiceKind::Rping).is_some() {
            let len = self.rping_memory();
            for _ in &self.dpdk.lcores {
                leases.take(len).ok_or_else(|| self.rping_too_little(len))?;
            }
        }
        for (port, p) in self.perftests() {
            let len = perftest_memory(p);
            leases
                .take(len)
                .ok_or_else(|| self.perftest_too_little(port, p, len))?;
        }
        Ok(())
    }

    /// rping clients each core serves at once.
    pub fn rping_slots(&self) -> usize {
        self.rnic.clients_max.min(bench::rping::CONNECTIONS_MAX)
    }

    /// Octets of `memory_mib` the rping service takes on each core.
    pub fn rping_memory(&self) -> u64 {
        bench::rping::RpingService::memory(bench::rping::SIZE_MAX, self.rping_slots()) as u64
    }

    /// Why `memory_mib` cannot hold rping's `len` octets on a core.
    pub fn rping_too_little(&self, len: u64) -> String {
        format!(
            "[rnic] memory_mib = {}: too little for the rping service's buffers ({len} octets \
             per core): give more",
            self.rnic.memory_mib
        )
    }

    /// Why `memory_mib` cannot hold the `len` octets of the perftest
    /// service `p` on TCP port `port`.
    pub fn perftest_too_little(&self, port: u16, p: &PerftestConfig, len: u64) -> String {
        format!(
            "[rnic] memory_mib = {}: too little for the perftest service on TCP port {port} \
             ({len} octets for {} clients of {:?}): give more, or fewer clients",
            self.rnic.memory_mib, p.clients_max, p.command.text
        )
    }

    /// The port.
    pub fn port(&self) -> &Port {
        self.port[0].get_ref()
    }

    /// The services.
    pub fn services(&self) -> impl Iterator<Item = &Service> {
        self.service.iter().map(Spanned::get_ref)
    }

    /// How many of `[rnic] clients_max` one client host may hold at once
    /// on the service of `kind` (memory grants, bench client runs, rping
    /// connections): its
    /// `clients_per_host`, or half of `clients_max` rounded up.
    pub fn clients_per_host(&self, kind: ServiceKind) -> usize {
        self.service(kind)
            .and_then(|s| s.clients_per_host)
            .unwrap_or(self.rnic.clients_max.div_ceil(2))
    }

    /// The bench service's UDP port for DDP over SCTP, if it has one.
    pub fn bench_udp_port(&self) -> Option<u16> {
        self.service(ServiceKind::Bench).and_then(|s| s.udp_port)
    }

    /// The perftest services: each one's TCP port and test.
    pub fn perftests(&self) -> impl Iterator<Item = (u16, &PerftestConfig)> {
        self.services()
            .filter_map(|s| s.perftest.as_ref().map(|p| (s.tcp_port, p)))
    }

    /// The service of `kind`, if configured (the first perftest one).
    pub fn service(&self, kind: ServiceKind) -> Option<&Service> {
        self.services().find(|s| s.kind == kind)
    }

    /// The memory service's regions.
    pub fn regions(&self) -> impl Iterator<Item = &RegionConfig> {
        self.region.iter().map(Spanned::get_ref)
    }
}

/// Octets of `memory_mib` the perftest service `p` takes: its sessions'
/// buffers, `clients_max` of them.
pub fn perftest_memory(p: &PerftestConfig) -> u64 {
    bench::perftest::PerftestService::memory(&p.command.params, p.clients_max) as u64
}

/// Where `key` is set in `text` (the first line that sets it), for
/// [`locate`]; the start of the file if nowhere.
fn key_at(text: &str, key: &str) -> usize {
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix(key) {
            if rest.trim_start().starts_with('=') {
                return at + (line.len() - trimmed.len());
            }
        }
        at += line.len();
    }
    0
}

/// Where `key` is set in the `[[service]]` that begins at `start` (its
/// own lines and its `[service.perftest]`'s, up to the next table of
/// another kind or the next `[[service]]`), for [`locate`]; `start` if
/// nowhere.
fn key_in_service(text: &str, start: usize, key: &str) -> usize {
    let start = start.min(text.len());
    let mut at = start;
    for (k, line) in text[start..].split_inclusive('\n').enumerate() {
        let trimmed = line.trim_start();
        if k > 0 && trimmed.starts_with('[') && !trimmed.starts_with("[service.") {
            break;
        }
        if let Some(rest) = trimmed.strip_prefix(key) {
            if rest.trim_start().starts_with('=') {
                return at + (line.len() - trimmed.len());
            }
        }
        at += line.len();
    }
    start
}

/// `key` of `/proc/meminfo` (`MemTotal`, `MemAvailable`) in MiB, if it
/// can be read.
pub fn meminfo_mib(key: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(key)?.strip_prefix(':')?;
        let kib: u64 = rest.trim().strip_suffix("kB")?.trim().parse().ok()?;
        Some(kib / 1024)
    })
}

/// Whether `path`, if something is there, is not a socket: why the daemon
/// will not take it (it replaces a stale socket only, never a file the
/// path names by mistake).
pub fn not_a_socket(path: &Path) -> Option<String> {
    use std::os::unix::fs::FileTypeExt;
    let meta = std::fs::symlink_metadata(path).ok()?;
    (!meta.file_type().is_socket())
        .then(|| format!("{} is not a socket: give another path", path.display()))
}

/// The longest path a Unix socket's address takes: `sun_path`'s 108
/// octets, less the terminating NUL (unix(7)).
pub const SOCKET_PATH_MAX: usize = 107;

/// Why no socket can be made at `path`, if none can: a path longer than a
/// Unix socket address takes, or a directory for it that is something
/// else (found by a review: `--check` passed both, then the start failed).
pub fn no_socket_there(path: &Path) -> Option<String> {
    use std::os::unix::ffi::OsStrExt;
    let len = path.as_os_str().as_bytes().len();
    if len > SOCKET_PATH_MAX {
        return Some(format!(
            "{}: {len} octets, longer than a Unix socket's address takes ({SOCKET_PATH_MAX}): \
             give a shorter path",
            path.display()
        ));
    }
    // The nearest of its directories that is there is a directory.
    let there = path
        .ancestors()
        .skip(1)
        .filter(|d| !d.as_os_str().is_empty())
        .find_map(|d| std::fs::metadata(d).ok().map(|m| (d, m)));
    match there {
        Some((dir, meta)) if !meta.is_dir() => Some(format!(
            "{}: {} is not a directory: give another path",
            path.display(),
            dir.display()
        )),
        _ => None,
    }
}

/// `why`, said of the octet at `at` of `text`: `FILE:LINE:COLUMN: `key`:
/// why`, with the line itself below.
fn locate(text: &str, file: &str, at: usize, why: &str) -> ConfigError {
    let at = at.min(text.len());
    let line_no = text[..at].matches('\n').count() + 1;
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let column = text[line_start..at].chars().count() + 1;
    let line = text[line_start..].lines().next().unwrap_or("");
    let key = line
        .split_once('=')
        .map(|(k, _)| k.trim())
        .filter(|k| !k.is_empty() && !k.starts_with('['));
    let why = why.trim();
    let mut out = match key {
        Some(key) => format!("{file}:{line_no}:{column}: `{key}`: {why}"),
        None => format!("{file}:{line_no}:{column}: {why}"),
    };
    if !line.trim().is_empty() {
        out.push_str(&format!("\n    {line_no} | {line}"));
    }
    ConfigError(out)
}

/// `text` (a configuration like the example, edited) on driver "kernel",
/// without the keys that mean nothing to it: for tests.
#[cfg(test)]
pub(crate) fn on_kernel(text: &str) -> String {
    text.replace("driver = \"net_tap\"", "driver = \"kernel\"")
        .lines()
        .filter(|l| {
            !["iface", "host_address", "netns", "bridge"]
                .iter()
                .any(|k| l.starts_with(k))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = include_str!("../examples/dpwarpd.toml");

    #[test]
    fn the_example_config_is_valid() {
        let c = Config::parse(EXAMPLE, "dpwarpd.toml").unwrap();
        assert_eq!(c.port().driver, Driver::NetTap);
        assert_eq!(c.services().count(), 9);
        assert_eq!(c.regions().count(), 2);
        assert!(!c.dpdk.lcores.is_empty());
        assert_eq!(c.daemon.idle, IdlePolicy::Nap);
        let spin = EXAMPLE.replace("idle = \"nap\"", "idle = \"spin\"");
        let c = Config::parse(&spin, "dpwarpd.toml").unwrap();
        assert_eq!(c.daemon.idle, IdlePolicy::Spin);
        // `urgent`: false unless said, the example's ib_write_lat says so.
        let urgent: Vec<u16> = c
            .services()
            .filter(|s| s.urgent)
            .map(|s| s.tcp_port)
            .collect();
        assert_eq!(urgent, [18524]);
        let e = refused(|t| t.replace("urgent = true", "urgent = 1"));
        assert!(e.contains("urgent"), "{e}");
        // Their class on the wire: EF unless said.
        let unsaid = EXAMPLE.replace("urgent_dscp = 46\n", "");
        assert_eq!(
            Config::parse(&unsaid, "x.toml").unwrap().daemon.urgent_dscp,
            46
        );
        let cs5 = EXAMPLE.replace("urgent_dscp = 46", "urgent_dscp = 40");
        assert_eq!(
            Config::parse(&cs5, "x.toml").unwrap().daemon.urgent_dscp,
            40
        );
        let e = refused(|t| t.replace("urgent_dscp = 46", "urgent_dscp = 184"));
        assert!(e.contains("184 is out of range: give 0 to 63"), "{e}");
        // Clients' classes reflected only when asked.
        let unsaid = EXAMPLE.replace("reflect_dscp = false\n", "");
        assert!(
            !Config::parse(&unsaid, "x.toml")
                .unwrap()
                .daemon
                .reflect_dscp
        );
        let on = EXAMPLE.replace("reflect_dscp = false", "reflect_dscp = true");
        assert!(Config::parse(&on, "x.toml").unwrap().daemon.reflect_dscp);
        // With the kernel driver too (dpwarpd then needs Linux's own
        // reflection, net.ipv4.tcp_reflect_tos, when it starts).
        let kernel = on_kernel(&on);
        assert!(
            Config::parse(&kernel, "k.toml")
                .unwrap()
                .daemon
                .reflect_dscp
        );
        let e = refused(|t| t.replace("reflect_dscp = false", "reflect_dscp = \"yes\""));
        assert!(e.contains("reflect_dscp"), "{e}");
    }

    /// `reflect_dscp = true` with driver "kernel" where Linux does not
    /// reflect a SYN's TOS is refused where it is set, as the daemon
    /// refuses to start with it (found by a review: `--check` passed it).
    #[test]
    fn reflect_dscp_linux_will_not_honour_is_refused() {
        let on = EXAMPLE.replace("reflect_dscp = false", "reflect_dscp = true");
        let kernel = on_kernel(&on);
        let c = Config::parse(&kernel, "k.toml").unwrap();
        let e = c
            .check_reflect_dscp(&kernel, "k.toml", false)
            .unwrap_err()
            .0;
        let line = line_of(&kernel, "reflect_dscp = true");
        assert!(
            e.starts_with(&format!("k.toml:{line}:")) && e.contains("net.ipv4.tcp_reflect_tos = 1"),
            "{e}"
        );
        assert!(c.check_reflect_dscp(&kernel, "k.toml", true).is_ok());
        // A DPDK port reflects the class itself.
        let c = Config::parse(&on, "t.toml").unwrap();
        assert!(c.check_reflect_dscp(&on, "t.toml", false).is_ok());
    }

    #[test]
    fn spread_is_taken_on_every_driver() {
        let spread = |t: &str| {
            t.replace("clients_max = 4\n", "clients_max = 4\nspread = true\n")
                .replace("lcores = [0]", "lcores = [0, 1]")
        };
        let c = Config::parse(&spread(EXAMPLE), "s.toml").unwrap();
        assert!(c.perftests().any(|(_, p)| p.spread));
        assert!(Config::parse(EXAMPLE, "e.toml")
            .unwrap()
            .perftests()
            .all(|(_, p)| !p.spread));
        // Over Linux TCP too (the listeners' reuseport group spreads by
        // client host).
        let kernel = on_kernel(&spread(EXAMPLE));
        assert!(Config::parse(&kernel, "k.toml")
            .unwrap()
            .perftests()
            .any(|(_, p)| p.spread));
        let e = refused(|t| t.replace("clients_max = 4\n", "clients_max = 4\nspread = 1\n"));
        assert!(e.contains("spread"), "{e}");
    }

    use super::on_kernel;

    fn refused(edit: impl Fn(&str) -> String) -> String {
        let text = edit(EXAMPLE);
        match Config::parse(&text, "x.toml") {
            Ok(_) => panic!("accepted:\n{text}"),
            Err(e) => e.0,
        }
    }

    fn line_of(text: &str, needle: &str) -> usize {
        text.lines().position(|l| l.contains(needle)).unwrap() + 1
    }

    #[test]
    fn an_unknown_key_is_named_with_its_line_and_the_keys_allowed() {
        let text = EXAMPLE.replace("mtu = 1500", "mtu = 1500\nmtus = 1500");
        let e = Config::parse(&text, "x.toml").unwrap_err().0;
        let line = line_of(&text, "mtus = 1500");
        assert!(e.starts_with(&format!("x.toml:{line}:")), "{e}");
        assert!(e.contains("unknown field `mtus`"), "{e}");
        assert!(e.contains("`mtu`") && e.contains("`driver`"), "{e}");
    }

    #[test]
    fn a_wrong_type_or_value_says_what_is_allowed() {
        let e = refused(|t| t.replace("mtu = 1500", "mtu = \"big\""));
        assert!(
            e.contains("`mtu`") && e.contains("invalid type: string"),
            "{e}"
        );
        let e = refused(|t| t.replace("mtu = 1500", "mtu = 100"));
        assert!(
            e.contains("`mtu`: 100 is out of range: give 1280 to 9000"),
            "{e}"
        );
        let e = refused(|t| t.replace("crc = \"on\"", "crc = \"maybe\""));
        assert!(
            e.contains("`crc`") && e.contains("expected `on` or `off`"),
            "{e}"
        );
        let e = refused(|t| t.replace("driver = \"net_tap\"", "driver = \"e1000\""));
        assert!(
            e.contains("`driver`") && e.contains("`net_tap`") && e.contains("`pci`"),
            "{e}"
        );
        let e = refused(|t| t.replace("idle = \"nap\"", "idle = \"doze\""));
        assert!(
            e.contains("`idle`") && e.contains("`spin`") && e.contains("`nap`"),
            "{e}"
        );
        let e = refused(|t| t.replace("lcores = [0]", "lcores = [1, 1]"));
        assert!(e.contains("`lcores`: CPU 1 is listed twice"), "{e}");
        // CPUs this process may not run on (found by a review: --check
        // passed them).
        let text = EXAMPLE.replace("lcores = [0]", "lcores = [0, 7]");
        let c = Config::parse(&text, "x.toml").expect("parses");
        assert!(c.check_cpus(&text, "x.toml", &[0, 7]).is_ok());
        let e = c.check_cpus(&text, "x.toml", &[0, 1]).unwrap_err().0;
        assert!(
            e.contains("x.toml:") && e.contains("CPU 7 is not one this process may run on"),
            "{e}"
        );
        assert!(e.contains("[0, 1]"), "{e}");
        let e = refused(|t| t.replace("address = \"10.77.0.2/24\"", "address = \"10.77.0.2\""));
        assert!(e.contains("`address`") && e.contains("prefix"), "{e}");
        // The TAP's kernel side: not our own address, and in our network.
        let e = refused(|t| {
            t.replace(
                "host_address = \"10.77.0.1/24\"",
                "host_address = \"10.77.0.2/24\"",
            )
        });
        assert!(e.contains("is the port's own address 10.77.0.2"), "{e}");
        for other in ["10.78.0.1/24", "10.77.1.1/16"] {
            let e = refused(|t| {
                t.replace(
                    "host_address = \"10.77.0.1/24\"",
                    &format!("host_address = {other:?}"),
                )
            });
            assert!(e.contains("are not in one network"), "{other}: {e}");
        }
        let e = refused(|t| t.replace("tcp_port = 18515", "tcp_port = 0"));
        assert!(e.contains("`tcp_port`: 0 is out of range"), "{e}");
    }

    #[test]
    fn a_missing_key_is_named() {
        let e = refused(|t| {
            t.lines()
                .filter(|l| !l.starts_with("ird_max"))
                .collect::<Vec<_>>()
                .join("\n")
        });
        assert!(e.contains("missing field `ird_max`"), "{e}");
    }

    /// A perftest service's command is perftest's own, checked as
    /// perftest checks it; what is not the test's (the port, a server, MPA
    /// options) is refused with the reason, as is a section where it means
    /// nothing or its absence where it is needed.
    #[test]
    fn perftest_commands_are_perftests_and_only_the_tests() {
        let c = Config::parse(EXAMPLE, "x.toml").unwrap();
        let tests: Vec<_> = c
            .perftests()
            .map(|(port, p)| (port, p.command.params.test))
            .collect();
        assert_eq!(tests.len(), 6, "{tests:?}");
        let p = parse_perftest("ib_write_bw -a -q 4 -b -R -F")
            .unwrap()
            .params;
        assert!(p.all_sizes && p.duplex && !p.client, "{p:?}");
        assert_eq!((p.qps, p.size), (4, 8 << 20));
        let p = parse_perftest("send_lat -D 3 -s 128").unwrap().params;
        assert_eq!(p.duration, Some(std::time::Duration::from_secs(3)));
        for (command, why) in [
            ("ib_write_bw -p 5", "the port is the service's tcp_port"),
            ("ib_write_bw 10.0.0.1", "no server address here"),
            (
                "ib_write_lat -q 2",
                "multiple QPs are for the bandwidth tests",
            ),
            (
                "ib_read_lat -b",
                "both directions are for the bandwidth tests",
            ),
            ("ib_foo", "not one of perftest's RC tests"),
            ("ib_write_bw -a -D 3", "cannot be used with"),
            ("ib_write_bw --crc", "not one of the test options"),
            ("ib_send_bw -s 0", "-s 0: give 1 to"),
            ("", "an empty command"),
        ] {
            let e = refused(|t| {
                t.replace(
                    "command = \"ib_write_bw\"",
                    &format!("command = {command:?}"),
                )
            });
            assert!(
                e.contains("`command`") && e.contains(why),
                "{command:?}: {e}"
            );
        }
        let e = refused(|t| t.replace("clients_max = 4\n", "clients_max = 0\n"));
        assert!(e.contains("`clients_max`"), "{e}");
        let e = refused(|t| {
            t.replacen(
                "clients_max = 4\n",
                "clients_max = 4\nclients_per_host = 5\n",
                1,
            )
        });
        assert!(
            e.contains("clients_per_host = 5 is more than its clients_max = 4"),
            "{e}"
        );
        let e = refused(|t| {
            t.replacen(
                "clients_max = 4\n",
                "clients_max = 4\nclients_per_host = 0\n",
                1,
            )
        });
        assert!(
            e.contains("`clients_per_host`") && e.contains("give 1 to 64"),
            "{e}"
        );
        let e = refused(|t| t.replace("unfenced = false\n", ""));
        assert!(e.contains("missing field `unfenced`"), "{e}");
        let e = refused(|t| {
            t.replacen(
                "[service.perftest]\ncommand = \"ib_write_bw\"\nunfenced = false\nclients_max = 4\n",
                "",
                1,
            )
        });
        assert!(
            e.contains("a perftest service needs [service.perftest]"),
            "{e}"
        );
        let e = refused(|t| {
            t.replace(
                "kind = \"rping\"\nport = \"dpw0\"\ntcp_port = 7174\n",
                "kind = \"rping\"\nport = \"dpw0\"\ntcp_port = 7174\n[service.perftest]\n\
                 command = \"ib_send_bw\"\nunfenced = false\nclients_max = 1\n",
            )
        });
        assert!(e.contains("means nothing to a rping service"), "{e}");
    }

    /// The memory, bench and rping services' `clients_per_host`: half of
    /// `[rnic] clients_max` by default, at most all of it, refused where it
    /// means nothing (found by a review: one host could hold every memory
    /// grant).
    #[test]
    fn clients_per_host_is_the_memory_bench_and_rping_services() {
        let c = Config::parse(EXAMPLE, "x.toml").unwrap();
        assert_eq!(c.clients_per_host(ServiceKind::Memory), 32);
        assert_eq!(c.clients_per_host(ServiceKind::Bench), 32);
        let odd = EXAMPLE.replace("clients_max = 64", "clients_max = 1");
        let c = Config::parse(&odd, "x.toml").unwrap();
        assert_eq!(c.clients_per_host(ServiceKind::Memory), 1);
        let memory = "kind = \"memory\"\nport = \"dpw0\"\ntcp_port = 18516\n";
        let with = |n: &str| EXAMPLE.replace(memory, &format!("{memory}clients_per_host = {n}\n"));
        let c = Config::parse(&with("64"), "x.toml").unwrap();
        assert_eq!(c.clients_per_host(ServiceKind::Memory), 64);
        assert_eq!(c.clients_per_host(ServiceKind::Bench), 32);
        let text = with("65");
        let e = Config::parse(&text, "x.toml").unwrap_err().0;
        let line = line_of(&text, "clients_per_host = 65");
        assert!(
            e.starts_with(&format!("x.toml:{line}:"))
                && e.contains("clients_per_host = 65 is more than [rnic] clients_max = 64"),
            "{e}"
        );
        let e = refused(|_| with("0"));
        assert!(e.contains("`clients_per_host`: 0 is out of range"), "{e}");
        // rping's: its connections over every core (a later session).
        assert_eq!(c.clients_per_host(ServiceKind::Rping), 32);
        let rping = "kind = \"rping\"\nport = \"dpw0\"\ntcp_port = 7174\n";
        let c = Config::parse(
            &EXAMPLE.replace(rping, &format!("{rping}clients_per_host = 2\n")),
            "x.toml",
        )
        .unwrap();
        assert_eq!(c.clients_per_host(ServiceKind::Rping), 2);
        let e = refused(|t| t.replace(rping, &format!("{rping}clients_per_host = 65\n")));
        assert!(e.contains("is more than [rnic] clients_max"), "{e}");
        let e = refused(|t| {
            t.replacen(
                "tcp_port = 18521\n",
                "tcp_port = 18521\nclients_per_host = 2\n",
                1,
            )
        });
        assert!(e.contains("is in its [service.perftest]"), "{e}");
    }

    #[test]
    fn udp_port_is_the_bench_services_only() {
        let udp = "udp_port = 9899\n";
        // The example's (net_tap), and on Linux UDP.
        assert_eq!(
            Config::parse(EXAMPLE, "e.toml").unwrap().bench_udp_port(),
            Some(9899)
        );
        assert_eq!(
            Config::parse(&on_kernel(EXAMPLE), "k.toml")
                .unwrap()
                .bench_udp_port(),
            Some(9899)
        );
        let without = on_kernel(EXAMPLE).replace(udp, "");
        assert_eq!(
            Config::parse(&without, "k.toml").unwrap().bench_udp_port(),
            None
        );
        let e = Config::parse(&on_kernel(EXAMPLE).replace(udp, "udp_port = 0\n"), "k.toml")
            .unwrap_err()
            .0;
        assert!(e.contains("`udp_port`: 0 is out of range"), "{e}");
        // Never on a service whose clients speak MPA only.
        let rping = "kind = \"rping\"\nport = \"dpw0\"\ntcp_port = 7174\n";
        let text = without.replace(rping, &format!("{rping}{udp}"));
        let e = Config::parse(&text, "k.toml").unwrap_err().0;
        assert!(e.contains("means nothing to a rping service"), "{e}");
    }

    #[test]
    fn cross_checks_name_the_table() {
        let e = refused(|t| t.replace("port = \"dpw0\"", "port = \"eth9\""));
        assert!(
            e.contains("no such [[port]]") && e.contains("\"dpw0\""),
            "{e}"
        );
        let e = refused(|t| t.replace("iface = \"dpwarp0\"", "pci = \"0000:01:00.0\""));
        assert!(e.contains("driver net_tap needs `iface`"), "{e}");
        let e = refused(|t| {
            t.replace(
                "iface = \"dpwarp0\"",
                "iface = \"dpwarp0\"\nbridge = \"br0\"",
            )
        });
        assert!(e.contains("`bridge` needs `netns`"), "{e}");
        let e = refused(|t| {
            t.replace(
                "iface = \"dpwarp0\"",
                "iface = \"dpwarp0\"\nbridge = \"br0\"\nnetns = \"tb\"",
            )
        });
        assert!(
            e.contains("`host_address` means nothing to driver net_tap"),
            "{e}"
        );
        let bridged = EXAMPLE
            .replace(
                "iface = \"dpwarp0\"",
                "iface = \"dpwarp0\"\nbridge = \"br0\"\nnetns = \"tb\"",
            )
            .replace("host_address = \"10.77.0.1/24\"\n", "");
        let c = Config::parse(&bridged, "x.toml").unwrap();
        assert_eq!(c.port().bridge.as_deref(), Some("br0"));
        let e = refused(|t| t.replace("driver = \"net_tap\"", "driver = \"kernel\""));
        assert!(e.contains("`iface` means nothing to driver kernel"), "{e}");
        let e = refused(|t| {
            format!("{t}\n[[service]]\nkind = \"bench\"\nport = \"dpw0\"\ntcp_port = 18515\n")
        });
        assert!(e.contains("a second service on TCP port 18515"), "{e}");
        let e = refused(|t| t.replacen("[[service]]", "[[services]]", 1));
        assert!(e.contains("unknown field `services`"), "{e}");
    }

    /// The metrics endpoint on a service's TCP port over Linux TCP is
    /// refused (the service's core could not listen); on a DPDK port, or
    /// on another address, it is not (found by a review).
    #[test]
    fn metrics_on_a_services_port_is_refused_over_linux_tcp() {
        let kernel =
            on_kernel(EXAMPLE).replace("address = \"10.77.0.2/24\"", "address = \"127.0.0.1/8\"");
        for metrics in ["127.0.0.1:18516", "0.0.0.0:18516", "[::]:18516"] {
            let text = kernel.replace("127.0.0.1:9464", metrics);
            let e = Config::parse(&text, "k.toml").unwrap_err().0;
            let line = line_of(&text, "metrics_listen =");
            assert!(
                e.starts_with(&format!("k.toml:{line}:"))
                    && e.contains("is the memory service's TCP port"),
                "{metrics}: {e}"
            );
        }
        for (text, why) in [
            (
                kernel.replace("127.0.0.1:9464", "127.0.0.2:18516"),
                "another address",
            ),
            (
                EXAMPLE.replace("127.0.0.1:9464", "127.0.0.1:18516"),
                "a DPDK port",
            ),
        ] {
            assert!(Config::parse(&text, "x.toml").is_ok(), "{why}");
        }
    }

    #[test]
    fn networks_match_by_prefix() {
        let net = (Ipv4Addr::new(10, 77, 0, 0), 24);
        assert!(in_network(Ipv4Addr::new(10, 77, 0, 9), net));
        assert!(!in_network(Ipv4Addr::new(10, 77, 1, 9), net));
        assert!(in_network(
            Ipv4Addr::new(192, 0, 2, 1),
            (Ipv4Addr::UNSPECIFIED, 0)
        ));
        assert!(in_network(
            Ipv4Addr::new(10, 0, 0, 1),
            (Ipv4Addr::new(10, 0, 0, 1), 32)
        ));
        assert!(!in_network(
            Ipv4Addr::new(10, 0, 0, 2),
            (Ipv4Addr::new(10, 0, 0, 1), 32)
        ));
    }

    /// `--check` refuses memory that cannot hold what the services take
    /// of it at the start, with the daemon's own words (found by a review:
    /// it said "valid", and the daemon then failed to start every 2 s
    /// under systemd).
    #[test]
    fn the_memory_budget_is_checked_as_the_daemon_takes_it() {
        let e = refused(|t| t.replace("memory_mib = 256", "memory_mib = 1"));
        let line = line_of(EXAMPLE, "memory_mib = 256");
        assert!(e.starts_with(&format!("x.toml:{line}:")), "{e}");
        assert!(
            e.contains("memory_mib = 1: too little for the rping service's buffers"),
            "{e}"
        );
        // The review's case: no rping, a perftest service of every size on
        // 16 QPs for 64 clients.
        let e = refused(|t| {
            t.replace("memory_mib = 256", "memory_mib = 1")
                .replace("kind = \"rping\"\nport = \"dpw0\"\ntcp_port = 7174\n", "")
                .replace(
                    "# clients_per_host: as the bench service's (here rping connections one\n\
                     # client host has at once over all cores; half of clients_max by default).\n",
                    "",
                )
                .replace("[[service]]\n# rping: rdma-core rping's server (rping -s -P), any number of clients.\n\n", "")
                .replace(
                    "command = \"ib_write_bw\"\nunfenced = false\nclients_max = 4",
                    "command = \"ib_write_bw -a -q 16\"\nunfenced = false\nclients_max = 64",
                )
        });
        assert!(
            e.contains("memory_mib = 1: too little for the perftest service on TCP port 18521")
                && e.contains("give more, or fewer clients"),
            "{e}"
        );
        // Enough for every service: valid.
        let c =
            Config::parse(&EXAMPLE.replace("memory_mib = 256", "memory_mib = 64"), "x").unwrap();
        assert!(c.budget().is_ok());
    }

    /// Memory the machine does not have is refused before the daemon
    /// allocates it (found by a review: 65536 MiB passed `--check`, then
    /// the allocation aborted the process).
    #[test]
    fn memory_the_machine_lacks_is_refused() {
        let c = Config::parse(EXAMPLE, "x.toml").unwrap();
        let e = c.check_memory(EXAMPLE, "x.toml", 100, "").unwrap_err().0;
        let line = line_of(EXAMPLE, "memory_mib = 256");
        assert!(e.starts_with(&format!("x.toml:{line}:")), "{e}");
        assert!(
            e.contains("memory_mib = 256: this machine has 100 MiB: give less"),
            "{e}"
        );
        // 256 MiB and the 16 MiB region "shared" do not fit in 270.
        let e = c
            .check_memory(EXAMPLE, "x.toml", 270, " available now")
            .unwrap_err()
            .0;
        assert!(
            e.contains("region \"shared\": size_mib = 16")
                && e.contains("272 MiB in all: this machine has 270 MiB available now"),
            "{e}"
        );
        // With the perftest services' timestamps (a MiB each, rounded up,
        // for the example's iteration counts) beside 256 and two regions of
        // 16 and 4.
        let stamps: u64 = c
            .perftests()
            .map(|(_, p)| {
                (bench::perftest::PerftestService::timestamps_memory(
                    &p.command.params,
                    p.clients_max,
                ) as u64)
                    .div_ceil(1 << 20)
            })
            .sum();
        assert!(stamps > 0);
        assert!(c.check_memory(EXAMPLE, "x.toml", 276 + stamps, "").is_ok());
        assert!(c
            .check_memory(EXAMPLE, "x.toml", 276 + stamps - 1, "")
            .unwrap_err()
            .0
            .contains("timestamps"));
        // A service whose sessions' timestamps the machine cannot hold
        // (found by a review: `ib_write_bw -b -n 10000000` for 64 clients,
        // about 20 GB, passed).
        let big = EXAMPLE.replacen(
            "command = \"ib_write_bw\"",
            "command = \"ib_write_bw -b -n 10000000\"",
            1,
        );
        let c = Config::parse(&big, "x.toml").unwrap();
        // 4 clients of 320 MB (two kinds of 10 million), beside 276 MiB.
        let e = c.check_memory(&big, "x.toml", 1024, "").unwrap_err().0;
        assert!(
            e.contains("the perftest service on TCP port")
                && e.contains("timestamps")
                && e.contains("give fewer iterations (-n) or clients"),
            "{e}"
        );
        // This machine's own (MemTotal) is read.
        assert!(meminfo_mib("MemTotal").is_some_and(|m| m > 0));
    }

    /// A perftest service whose timestamps the machine cannot hold is
    /// pointed at by its own `command` line, not the first perftest
    /// service's (found by a review: `key_at(text, "command")` found the
    /// first).
    #[test]
    fn a_perftest_services_timestamps_point_at_its_own_command() {
        // The third perftest service (ib_send_bw, TCP port 18523) too big.
        let big = EXAMPLE.replace(
            "command = \"ib_send_bw\"",
            "command = \"ib_send_bw -n 10000000\"",
        );
        let c = Config::parse(&big, "x.toml").unwrap();
        // 276 MiB, a MiB of timestamps for each of the first two services:
        // the third's 611 MiB do not fit in 800.
        let e = c.check_memory(&big, "x.toml", 800, "").unwrap_err().0;
        assert!(e.contains("TCP port 18523"), "{e}");
        let line = line_of(&big, "command = \"ib_send_bw -n 10000000\"");
        assert!(
            e.starts_with(&format!("x.toml:{line}:")),
            "want line {line} (the service's own command): {e}"
        );
    }

    /// A control socket path that names anything but a socket is refused
    /// by `--check` (found by a review: the daemon deleted the file).
    #[test]
    fn a_control_socket_on_a_file_is_refused() {
        let dir = std::env::temp_dir().join(format!("dpwarpd-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("precious.txt");
        std::fs::write(&file, "keep me").unwrap();
        let why = not_a_socket(&file).expect("a file is no socket");
        assert_eq!(
            why,
            format!("{} is not a socket: give another path", file.display())
        );
        assert_eq!(not_a_socket(&dir.join("nothing.sock")), None);
        let sock = dir.join("live.sock");
        let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        assert_eq!(not_a_socket(&sock), None);
        let text = on_kernel(EXAMPLE)
            .replace("/run/dpwarpd/control.sock", &file.display().to_string())
            .replace("memory_mib = 256", "memory_mib = 16")
            .replace("size_mib = 16", "size_mib = 1");
        let path = dir.join("d.toml");
        std::fs::write(&path, &text).unwrap();
        let e = Config::load(&path).unwrap_err().0;
        let line = line_of(&text, "control_socket =");
        assert!(
            e.contains(&format!(":{line}:")) && e.contains("is not a socket: give another path"),
            "{e}"
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A control socket path no socket can be made at is refused where it
    /// is set: longer than a Unix socket's address takes, or under a file
    /// (found by a review: `--check` passed them).
    #[test]
    fn a_control_socket_no_socket_can_be_made_at_is_refused() {
        let dir = std::env::temp_dir().join(format!("dpwarpd-config-path-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("plain.txt");
        std::fs::write(&file, "not a directory").unwrap();
        // 107 octets is the most.
        let fits = dir.join("x".repeat(SOCKET_PATH_MAX - dir.as_os_str().len() - 1));
        assert_eq!(fits.as_os_str().len(), SOCKET_PATH_MAX);
        assert_eq!(no_socket_there(&fits), None);
        let long = dir.join("x".repeat(SOCKET_PATH_MAX - dir.as_os_str().len()));
        let why = no_socket_there(&long).expect("108 octets");
        assert!(why.contains("108 octets, longer than"), "{why}");
        let why = no_socket_there(&file.join("sub").join("control.sock")).expect("under a file");
        assert!(
            why.contains(&format!("{} is not a directory", file.display())),
            "{why}"
        );
        assert_eq!(no_socket_there(&dir.join("new").join("control.sock")), None);
        for (path, what) in [
            (long, "longer than a Unix socket's address takes"),
            (file.join("control.sock"), "is not a directory"),
        ] {
            let text = on_kernel(EXAMPLE)
                .replace("/run/dpwarpd/control.sock", &path.display().to_string())
                .replace("memory_mib = 256", "memory_mib = 16")
                .replace("size_mib = 16", "size_mib = 1");
            let conf = dir.join("d.toml");
            std::fs::write(&conf, &text).unwrap();
            let e = Config::load(&conf).unwrap_err().0;
            let line = line_of(&text, "control_socket =");
            assert!(e.contains(&format!(":{line}:")) && e.contains(what), "{e}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The systemd unit's stop timeout leaves room for the longest drain
    /// the file allows and a little more (found by a review: 600 s allowed,
    /// 30 s before systemd's SIGKILL).
    #[test]
    fn the_units_stop_timeout_outlasts_the_longest_drain() {
        let unit = include_str!("../debian/dpwarpd.service");
        let secs: u64 = unit
            .lines()
            .find_map(|l| l.strip_prefix("TimeoutStopSec="))
            .expect("TimeoutStopSec in the unit")
            .trim()
            .parse()
            .expect("seconds");
        assert!(
            secs * 1000 >= DRAIN_DEADLINE_MAX_MS + 10_000,
            "TimeoutStopSec={secs} against drain_deadline_ms up to {DRAIN_DEADLINE_MAX_MS}"
        );
        let e = refused(|t| {
            t.replace(
                "drain_deadline_ms = 5000",
                &format!("drain_deadline_ms = {}", DRAIN_DEADLINE_MAX_MS + 1),
            )
        });
        assert!(e.contains("out of range: give 0 to 600000"), "{e}");
    }

    /// `systemctl reload` checks the file before it sends SIGHUP, so a
    /// reload of a file the daemon would refuse fails and says why (from a
    /// review: it sent SIGHUP alone and reported success).
    #[test]
    fn the_units_reload_checks_the_file_first() {
        let unit = include_str!("../debian/dpwarpd.service");
        let reload: Vec<&str> = unit
            .lines()
            .filter_map(|l| l.strip_prefix("ExecReload="))
            .collect();
        assert_eq!(
            reload,
            [
                "/usr/bin/dpwarpd --check /etc/dpwarp/dpwarpd.toml",
                "/bin/kill -HUP $MAINPID"
            ]
        );
    }

    #[test]
    fn broken_toml_points_at_the_line() {
        let e = refused(|t| t.replace("memory_mib = 256", "memory_mib = = 256"));
        let line = line_of(EXAMPLE, "memory_mib = 256");
        assert!(e.starts_with(&format!("x.toml:{line}:")), "{e}");
    }
}
