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

# pcap_decode: synthetic DDP-over-SCTP captures (over UDP 9899, over IP, and
# raw IP without Ethernet), written by a test of dpwarp-pcap.
DPWARP_SCTP_CORPUS="$corpus/pcap_decode" timeout 900 cargo test --quiet \
    --manifest-path "$here/../Cargo.toml" -p dpwarp-pcap --test sctp fuzz_corpus_captures_decode_cleanly
# pcap_decode and pcap_reader: a synthetic capture with IPv4 fragments of
# FPDUs, one datagram whole in any order and one given up (its last fragment
# missing), written by a test of dpwarp-pcap.
for target in pcap_decode pcap_reader; do
    DPWARP_FRAGMENT_CORPUS="$corpus/$target" timeout 900 cargo test --quiet \
        --manifest-path "$here/../Cargo.toml" -p dpwarp-pcap --test reassembly_and_summary \
        ip_fragments_are_reassembled_or_counted_and_said
done

# deframer: Full Operation streams of three captures (MPA frames cut off),
# behind the target's 4-octet header: CRC and marker bits, ULPDU limit
# 65535, a piece-size seed; each with markers off and on.
mkdir -p "$corpus/deframer"
timeout 60 python3 - "$golden" "$corpus/deframer" <<'PY'
import struct, sys
golden, out = sys.argv[1], sys.argv[2]
def streams(path):
    data, offset, found = open(path, "rb").read(), 24, {}
    while offset + 16 <= len(data):
        incl = struct.unpack("<I", data[offset + 8:offset + 12])[0]
        frame = data[offset + 16:offset + 16 + incl]
        offset += 16 + incl
        if frame[12:14] != b"\x08\x00" or frame[23] != 6:
            continue
        ip = frame[14:]
        ihl, total = (ip[0] & 15) * 4, struct.unpack(">H", ip[2:4])[0]
        tcp = ip[ihl:total]
        key = (ip[12:16], tcp[0:2])
        found[key] = found.get(key, b"") + tcp[(tcp[12] >> 4) * 4:]
    return found
for name, crc in [("rping_v2_crc", 1), ("ib_send_lat_nocrc", 0), ("iwprobe_ops", 1)]:
    for (addr, port), octets in streams(f"{golden}/{name}.pcap").items():
        if not octets.startswith(b"MPA ID Re"):
            continue
        full = octets[20 + struct.unpack(">H", octets[18:20])[0]:]
        if not full:
            continue
        for markers in (0, 2):
            header = bytes([crc | markers, 0xFF, 0xFF, 0x5A])
            name_port = f"{name}-{struct.unpack('>H', port)[0]}-m{markers // 2}"
            open(f"{out}/seed-{name_port}", "wb").write(header + full[:8000])
PY

echo "make-corpus.sh: $(find "$corpus" -type f -name 'seed-*' | wc -l) seed files," \
    "$(find "$corpus" -type f -name 'seed-*' -printf '%s\n' | awk '{s += $1} END {print s}') octets"
