//! `bench --transport tap`: the client RNIC on tcp-lite over a TAP device,
//! the server RNIC on Linux TCP at the device's kernel end inside a network
//! namespace the run creates. Both modes run, the JSON says `tap`, and the
//! namespace and device are gone afterwards.
//!
//! It needs root, `/dev/net/tun` and `ip`; where one is missing the test is
//! reported as *ignored* with the reason on stderr, never as passed.

use std::process::Command;
use std::time::Duration;

use libtest_mimic::{Arguments, Failed, Trial};

const BENCH: &str = env!("CARGO_BIN_EXE_bench");

fn main() {
    let args = Arguments::from_args();
    let name = "bench_over_tap_in_a_namespace_of_its_own";
    let trial = match tcp_lite::sys::tap::namespace_unavailable() {
        None => Trial::test(name, over_tap),
        Some(why) => {
            eprintln!("{name}: SKIPPED (reported as ignored): {why}");
            Trial::test(name, || Ok(())).with_ignored_flag(true)
        }
    };
    libtest_mimic::run(&args, vec![trial]).exit();
}

fn run(args: &[&str]) -> Result<String, Failed> {
    // Bounded: `timeout` ends a stuck run (and its namespace goes with the
    // process's cleanup below).
    let out = Command::new("timeout")
        .arg("60")
        .arg(BENCH)
        .args(args)
        .output()
        .map_err(|e| format!("bench: {e}"))?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        return Err(format!("bench {args:?} failed: {said}").into());
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
    std::thread::sleep(Duration::from_millis(100));
    let left = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .map_err(|e| e.to_string())?;
    let left = String::from_utf8_lossy(&left.stdout);
    if left.contains("dpwbench") {
        return Err(format!("a namespace was left behind: {left}").into());
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
