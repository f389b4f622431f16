#!/usr/bin/env bash
# Fuzz smoke test for CI: build every cargo-fuzz target, replay the inputs
# in regressions/<target>/, then replay each target's corpus (the tracked
# seed-* files and whatever is there locally) and fuzz it for SECONDS more.
# Exits non-zero on any crash, panic, leak, timeout or build failure; a
# failing input found by fuzzing is left in artifacts/<target>/.
#
#   ./smoke.sh [SECONDS]        # default 10 seconds per target
#
# Environment:
#   SANITIZER   address (default) or none: `none` if ASan is unavailable.
#   TARGETS     space-separated subset of targets (default: all).
#   JOBS        targets fuzzed at once (default 1).
#
# Runs on the stable toolchain: cargo-fuzz passes -Zsanitizer=address, which
# stable rustc accepts with RUSTC_BOOTSTRAP=1. Everything is bounded by
# `timeout`.
set -euo pipefail

seconds="${1:-10}"
sanitizer="${SANITIZER:-address}"
jobs="${JOBS:-1}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
export RUSTC_BOOTSTRAP=1

if ! command -v cargo-fuzz >/dev/null 2>&1; then
    echo "smoke.sh: cargo-fuzz not installed (cargo install cargo-fuzz)" >&2
    exit 2
fi

features=()

targets="${TARGETS:-$(timeout 60 cargo fuzz list)}"
# The default build (no -O) has optimisations and debug assertions, so
# integer overflow panics are found too.
timeout 1800 cargo fuzz build -s "$sanitizer" "${features[@]}"

log_dir="$(mktemp -d)"
trap 'rm -rf "$log_dir"' EXIT

run_one() {
    local target="$1"
    local corpus="corpus/$target"
    mkdir -p "$corpus" "artifacts/$target"
    local regressions=()
    if [ -d "regressions/$target" ]; then
        mapfile -t regressions < <(find "regressions/$target" -type f | sort)
    fi
    if [ "${#regressions[@]}" -gt 0 ]; then
        # Files (not directories) make libFuzzer run each input once.
        if ! timeout 300 cargo fuzz run -s "$sanitizer" "${features[@]}" "$target" \
            "${regressions[@]}" -- -timeout=10 -rss_limit_mb=2048 >"$log_dir/$target.reg.log" 2>&1; then
            echo "FAIL  $target: a regression input fails"
            grep -A2 -e 'panicked at' -e 'ERROR: ' -e 'Running: ' "$log_dir/$target.reg.log" | head -20
            return 1
        fi
    fi
    # Per-input limit 10 s; whole run: corpus replay plus $seconds, plus
    # slack for start-up and the final merge.
    if timeout $((seconds + 300)) cargo fuzz run -s "$sanitizer" "${features[@]}" "$target" "$corpus" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 >"$log_dir/$target.log" 2>&1; then
        local stats
        stats="$(grep -E '^stat::(number_of_executed_units|average_exec_per_sec):' "$log_dir/$target.log" |
            sed 's/^stat:://' | tr '\n' ' ')"
        echo "ok    $target  $stats"
    else
        echo "FAIL  $target (see below)"
        grep -A2 -e 'panicked at' -e 'ERROR: ' -e 'Test unit written' "$log_dir/$target.log" | head -20
        return 1
    fi
}

failed=0
running=0
for target in $targets; do
    run_one "$target" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait -n || failed=1
        running=$((running - 1))
    fi
done
while [ "$running" -gt 0 ]; do
    wait -n || failed=1
    running=$((running - 1))
done

if [ "$failed" -ne 0 ]; then
    echo "smoke.sh: a fuzz target failed; inputs are in $here/artifacts/" >&2
    exit 1
fi
echo "smoke.sh: all targets passed ($seconds s each)"
