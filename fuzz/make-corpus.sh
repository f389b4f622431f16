#!/usr/bin/env bash
# Regenerates the seed corpus (fuzz/corpus/<target>/seed-*) from the golden
# Linux siw captures in tests/data/golden/. Deterministic: re-running writes
# the same files. See README.md ("Seed corpus").
#
#   ./make-corpus.sh            # from the fuzz/ directory or anywhere
#
# Needs: cargo; editcap (Wireshark) for the pcapng seeds, skipped without it.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
golden="$here/../tests/data/golden"
corpus="$here/corpus"

# Only seed-* files are ours (and tracked); anything else in corpus/ is what
# libFuzzer found and is left alone.
find "$corpus" -type f -name 'seed-*' -delete 2>/dev/null || true

timeout 900 cargo run --quiet --release \
    --manifest-path "$here/corpus-tool/Cargo.toml" -- "$golden" "$corpus"

if command -v editcap >/dev/null 2>&1; then
    # pcapng versions of two small captures, for the pcapng reader.
    for name in rping_v2_crc term_bad_write; do
        for target in pcap_reader pcap_decode; do
            timeout 60 editcap -F pcapng "$golden/$name.pcap" "$corpus/$target/seed-$name-pcapng"
        done
    done
else
    echo "make-corpus.sh: editcap not found, no pcapng seeds" >&2
fi

echo "make-corpus.sh: $(find "$corpus" -type f -name 'seed-*' | wc -l) seed files," \
    "$(find "$corpus" -type f -name 'seed-*' -printf '%s\n' | awk '{s += $1} END {print s}') octets"
