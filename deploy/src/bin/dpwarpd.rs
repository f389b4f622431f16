//! `dpwarpd`: the dpwarp appliance's daemon. `dpwarpd --check CONFIG`
//! validates a configuration without starting; `dpwarpd CONFIG` serves
//! until SIGTERM (or `dpwarpctl drain`) has drained it.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use clap::Parser;
use deploy::config::Config;
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
    let term = Arc::new(AtomicBool::new(false));
    let hup = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, term.clone())
            .map_err(|e| format!("cannot take signal {signal}: {e}"))?;
    }
    signal_hook::flag::register(signal_hook::consts::SIGHUP, hup.clone())
        .map_err(|e| format!("cannot take SIGHUP: {e}"))?;
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
    if term.load(Ordering::SeqCst) {
        tracing::info!("SIGTERM before the start: dpwarpd exits without serving");
        return Ok(());
    }
    let shared = daemon::prepare(config, path)?;
    // The operator's endpoints first: a daemon that cannot be watched or
    // stopped does not start.
    let metrics = metrics::MetricsServer::start(shared.clone())?;
    let ctl = ctl::CtlServer::start(shared.clone())?;
    tracing::info!(metrics = %metrics.addr, control_socket = %shared.config.daemon.control_socket.display(), "operator endpoints up");
    let result = daemon::serve(&shared, |shared| {
        if term.swap(false, Ordering::SeqCst) {
            tracing::info!("SIGTERM: draining");
            shared.request_drain();
        }
        if hup.swap(false, Ordering::SeqCst) {
            reload(shared);
        }
    });
    drop(ctl);
    drop(metrics);
    if result.is_ok() {
        tracing::info!(
            served = shared.serving.stats().served,
            "drained: dpwarpd exits"
        );
    }
    result
}

/// SIGHUP: reads the configuration again ([`daemon::reload`]).
fn reload(shared: &Arc<daemon::Shared>) {
    match daemon::reload(shared) {
        Ok(done) => tracing::info!(done, "SIGHUP: configuration reloaded"),
        Err(e) => tracing::error!(
            error = e,
            "SIGHUP: the configuration cannot be applied; keeping the running one"
        ),
    }
}
