//! `dpwarpctl`: asks a running dpwarpd over its control socket.

use std::path::PathBuf;
use std::process::ExitCode;

use std::io::Write;

use clap::Parser;

/// Ask a running dpwarpd: status, stats, listeners, connections, drain.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// The daemon's control socket (its config's `control_socket`).
    #[arg(short, long, default_value = "/run/dpwarpd/control.sock")]
    socket: PathBuf,
    /// status, stats, listeners, connections or drain.
    command: String,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if !deploy::ctl::COMMANDS.contains(&args.command.as_str()) {
        eprintln!(
            "dpwarpctl: unknown command {:?}: give one of {}",
            args.command,
            deploy::ctl::COMMANDS.join(", ")
        );
        return ExitCode::from(2);
    }
    match deploy::ctl::request(&args.socket, &args.command) {
        Ok(answer) => {
            if let Some(e) = answer.get("error") {
                eprintln!("dpwarpctl: {}", e.as_str().unwrap_or_default());
                return ExitCode::FAILURE;
            }
            // A closed pipe (`dpwarpctl stats | head`) is the reader's
            // choice, not an error worth a panic.
            let text = serde_json::to_string_pretty(&answer).unwrap_or_default();
            let _ = writeln!(std::io::stdout(), "{text}");
            ExitCode::SUCCESS
        }
        Err(why) => {
            eprintln!("dpwarpctl: {why}");
            ExitCode::FAILURE
        }
    }
}
