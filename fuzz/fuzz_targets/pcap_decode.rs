//! The whole `dpwarp-pcap` tool: `dpwarp_pcap::run` over a capture file.
//!
//! Asserts (besides terminating without panic): the run never fails on
//! output (it writes to `io::sink()`); text, JSON, `--all` and `--payload`
//! runs decode the same thing (equal `Summary`s, equal outcome); a `--port`
//! run (which reads connections without MPA startup as FPDUs) completes.
//!
//! It covers DDP over SCTP too (UDP port 9899 and IP protocol 132): the
//! `seed-synthetic-sctp-*` seeds are an association with INIT/INIT ACK
//! (Adaptation Layer Indication), bundled SACK and DATA chunks of PPID 16 and
//! 17, and ABORT, written by `tools/pcap/tests/sctp.rs`.
#![no_main]

use std::io;

use dpwarp_pcap::decode::Options;
use dpwarp_pcap::render::Style;
use dpwarp_pcap::{run, Config, RunError};
use libfuzzer_sys::fuzz_target;

fn decode(data: &[u8], config: &Config) -> Result<dpwarp_pcap::decode::Summary, String> {
    match run(data, &mut io::sink(), config) {
        Ok(summary) => Ok(summary),
        Err(RunError::Capture(e)) => Err(e.to_string()),
        Err(RunError::Output(e)) => panic!("writing to io::sink() failed: {e}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let text = Config {
        summary: true,
        ..Config::default()
    };
    let json = Config {
        json: true,
        ..Config::default()
    };
    let all = Config {
        summary: true,
        options: Options {
            ports: Vec::new(),
            all: true,
        },
        style: Style { payload: true },
        ..Config::default()
    };
    let a = decode(data, &text);
    assert_eq!(decode(data, &json), a, "text and JSON decode alike");
    assert_eq!(
        decode(data, &all),
        a,
        "--all and --payload change only what is printed"
    );
    // Naming the rping port reads connections without MPA startup as
    // iWARP; most fuzz inputs carry none, so just require no panic.
    let forced = Config {
        json: true,
        options: Options {
            ports: vec![7174, 7999],
            all: false,
        },
        style: Style { payload: true },
        ..Config::default()
    };
    let _ = decode(data, &forced);
});
