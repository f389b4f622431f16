#!/bin/bash
# Turn Linux soft-iWARP's compile-time knobs into writable module parameters.
#
# Usage: siw-knobs.sh SIW_SOURCE_DIR
#   SIW_SOURCE_DIR is a copy of drivers/infiniband/sw/siw (Linux 6.1); it is
#   edited in place. build.sh calls this on a scratch copy before compiling.
#
# Upstream siw keeps its protocol switches in `const bool` globals (and
# mpa_version in a plain u_char), so they cannot be changed without a rebuild.
# This drops the `const` and registers each one with module_param(..., 0644):
# the upstream default values stay exactly as they are, and every knob can be
# set at insmod time (`siw mpa_crc_required=1`) or later through
# /sys/module/siw/parameters/<name>. siw reads them when a connection is set
# up, so a change applies to the next connect/accept.
#
# Exposed (default in brackets = upstream value):
#   mpa_version      [2]  MPA revision siw uses when it initiates (1 or 2; other
#                         values are put on the wire as they are)
#   peer_to_peer     [N]  initiator asks for MPA v2 peer-to-peer mode (RTR)
#   mpa_crc_required [N]  ask for the MPA CRC (C flag)
#   mpa_crc_strict   [N]  reject a peer whose CRC wish differs from ours
#   try_gso          [N]  siw-private "GSO" FPDUs (reserved MPA flag 0x0800)
#   zcopy_tx         [Y]  transmit from user buffers (sendpage)
#   loopback_enabled [Y]  allow siw links on loopback devices
#   siw_tcp_nagle    [N]  leave Nagle on (N = TCP_NODELAY)
#   p2p_rtr          [3]  RTR types a P2P initiator offers: 1 = zero-length
#                         RDMA Write, 2 = zero-length RDMA Read, 3 = both
set -euo pipefail

src=${1:?usage: siw-knobs.sh SIW_SOURCE_DIR}
hdr=$src/siw.h main=$src/siw_main.c cm=$src/siw_cm.c
for f in "$hdr" "$main" "$cm"; do [ -f "$f" ] || { echo "siw-knobs: $f missing" >&2; exit 1; }; done
if grep -q 'dpwarp interop knobs' "$main"; then exit 0; fi   # already done

bools="zcopy_tx try_gso loopback_enabled mpa_crc_required mpa_crc_strict siw_tcp_nagle peer_to_peer"
for k in $bools; do
    # Each knob must be found exactly where 6.1 has it; fail loudly otherwise.
    grep -q "^extern const bool $k;" "$hdr" || { echo "siw-knobs: no 'extern const bool $k' in siw.h" >&2; exit 1; }
    grep -Eq "^const bool $k( = [a-z]+)?;" "$main" || { echo "siw-knobs: no 'const bool $k' in siw_main.c" >&2; exit 1; }
    sed -i "s/^extern const bool $k;/extern bool $k;/" "$hdr"
    sed -i -E "s/^const bool $k( = [a-z]+)?;/bool $k\\1;/" "$main"
done
grep -q '^u_char mpa_version = MPA_REVISION_2;' "$main" || { echo "siw-knobs: mpa_version not found" >&2; exit 1; }

# The P2P RTR offer is a static __be16 in siw_cm.c; replace it with a mask
# parameter and derive the wire bits from it where rtr_type was read.
rtr_line='static __be16 rtr_type = MPA_V2_RDMA_READ_RTR | MPA_V2_RDMA_WRITE_RTR;'
grep -qxF "$rtr_line" "$cm" || { echo "siw-knobs: rtr_type definition not found in siw_cm.c" >&2; exit 1; }
if grep -v -xF "$rtr_line" "$cm" | grep -Eq 'rtr_type[[:space:]]*[|&^]?=[^=]'; then
    echo "siw-knobs: rtr_type is assigned somewhere; this edit assumes it is only read" >&2; exit 1
fi
awk -v line="$rtr_line" '
    $0 == line {
        print "/* dpwarp interop: offered RTR types, bit 0 = RDMA Write, bit 1 = RDMA Read */"
        print "static unsigned int p2p_rtr = 3;"
        print "module_param(p2p_rtr, uint, 0644);"
        print "MODULE_PARM_DESC(p2p_rtr, \"RTR types offered by a P2P initiator: 1=write 2=read 3=both\");"
        print "#define rtr_type ((__be16)(((p2p_rtr & 1) ? MPA_V2_RDMA_WRITE_RTR : 0) | \\"
        print "                       ((p2p_rtr & 2) ? MPA_V2_RDMA_READ_RTR : 0)))"
        next
    }
    { print }' "$cm" > "$cm.new" && mv "$cm.new" "$cm"

cat >> "$main" <<'C'

/* dpwarp interop knobs: the globals above as writable module parameters. */
module_param(mpa_version, byte, 0644);
MODULE_PARM_DESC(mpa_version, "MPA revision used when initiating (1 or 2)");
module_param(peer_to_peer, bool, 0644);
MODULE_PARM_DESC(peer_to_peer, "initiator requests MPA v2 peer-to-peer mode (RTR)");
module_param(mpa_crc_required, bool, 0644);
MODULE_PARM_DESC(mpa_crc_required, "request the MPA CRC (C flag)");
module_param(mpa_crc_strict, bool, 0644);
MODULE_PARM_DESC(mpa_crc_strict, "reject peers whose CRC setting differs from ours");
module_param(try_gso, bool, 0644);
MODULE_PARM_DESC(try_gso, "offer/accept siw-private GSO FPDUs (MPA flag 0x0800)");
module_param(zcopy_tx, bool, 0644);
MODULE_PARM_DESC(zcopy_tx, "transmit from user buffers when possible");
module_param(loopback_enabled, bool, 0644);
MODULE_PARM_DESC(loopback_enabled, "allow siw links on loopback devices");
module_param(siw_tcp_nagle, bool, 0644);
MODULE_PARM_DESC(siw_tcp_nagle, "leave Nagle on (no TCP_NODELAY)");
C
