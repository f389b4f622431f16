//! `dpwarpd`: the dpwarp appliance's daemon. `dpwarpd --check CONFIG`
//! validates a configuration without starting; `dpwarpd CONFIG` serves
//! until SIGTERM, SIGINT (or `dpwarpctl drain`) has drained it, or a
//! second SIGTERM or SIGINT forces its exit ([`deploy::signals`]).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use deploy::config::Config;
use deploy::signals::{self, Signals};
use deploy::{ctl, daemon, metrics};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// dpwarp's iWARP target daemon.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// The configuration file (see deploy/examples/dpwarpd.toml).
    config: PathBuf,
    /// Check the configuration and exit: 0 if it is valid, else 2 with
    /// where and why it is not.
    #[arg(long)]
    check: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let config = match Config::load(&args.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("dpwarpd: {e}");
            return ExitCode::from(2);
        }
    };
    if args.check {
        println!("dpwarpd: {}: valid", args.config.display());
        return ExitCode::SUCCESS;
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("DPWARPD_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(config.daemon.log.name())),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match run(config, args.config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            tracing::error!(why, "dpwarpd stopped");
            eprintln!("dpwarpd: {why}");
            ExitCode::FAILURE
        }
    }
}

fn run(config: Config, path: PathBuf) -> Result<(), String> {
    let mut signals = Signals::take()?;
    // A connection over Linux TCP is a socket: as many as the system allows.
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_err() {
            tracing::warn!(soft, hard, "could not raise the open-files limit");
        }
    }
    // A stop that came this early ends the daemon before its memory is
    // taken; one that comes later, before `serve`'s first tick, before its
    // port opens.
    if signals.stop_asked() {
        tracing::info!("SIGTERM or SIGINT before the start: dpwarpd exits without serving");
        return Ok(());
    }
    let shared = daemon::prepare(config, path)?;
    // The operator's endpoints first: a daemon that cannot be watched or
    // stopped does not start.
    let metrics = metrics::MetricsServer::start(shared.clone())?;
    let ctl = ctl::CtlServer::start(shared.clone())?;
    tracing::info!(metrics = %metrics.addr, control_socket = %shared.config.daemon.control_socket.display(), "operator endpoints up");
    let result = daemon::serve(&shared, |shared| {
        signals.tick(shared);
        if signals.forced_overdue() {
            // A core that does not leave (its turn stuck) does not keep
            // the process: what must go goes, the rest with the process.
            let socket = &shared.config.daemon.control_socket;
            let _ = std::fs::remove_file(socket);
            tracing::error!(
                wait_s = signals::FORCED_EXIT_WAIT.as_secs(),
                "forced exit: the cores did not leave in time; dpwarpd exits without them"
            );
            std::process::exit(1);
        }
    });
    drop(ctl);
    drop(metrics);
    if signals.forced() {
        result?;
        return Err(
            "forced exit by a second SIGTERM or SIGINT during the drain: the connections \
             left were ended"
                .into(),
        );
    }
    if result.is_ok() {
        tracing::info!(
            served = shared.serving.stats().served,
            "drained: dpwarpd exits"
        );
    }
    result
}
