#!/bin/bash
# Build the Linux soft-iWARP (siw) peer guest that boot.sh runs under QEMU.
#
# Usage: tests/interop/peer/build.sh [--force] [--refresh]
#   --force    rebuild siw.ko and the initramfs even if they look up to date
#   --refresh  ask apt again for the current bookworm kernel and package set
#              (normally the first run's choice is kept in the cache)
#
# Run as root on Debian 12. It installs missing host tools with apt-get
# (qemu-system-x86, build-essential, kmod, cpio, python3, ...), fetches the guest's
# Debian bookworm packages with `apt-get download` (nothing of that is
# installed on the host) and builds, in ${DPWARP_INTEROP_CACHE:-/var/cache/dpwarp-interop}:
#   out/vmlinuz            Debian's stock 6.1 kernel (linux-image-6.1.0-*-amd64)
#   out/siw.ko             siw built out of tree from linux-source-6.1 against the
#                          matching linux-headers, knobs made module parameters
#                          by siw-knobs.sh (Debian's kernel has no siw)
#   out/initramfs.cpio.gz  busybox, dash, rdma-core (libibverbs + libsiw provider,
#                          librdmacm, rping, ibv_*), perftest (ib_*), iproute2
#                          (ip, rdma, ss), tcpdump, ethtool, the RDMA modules,
#                          kernel SCTP (sctp.ko, UDP encapsulation), and
#                          guest-init as /init
#   out/manifest.txt       kernel and package versions that went in
# Every step is skipped when its inputs have not changed, so a second run only
# checks and takes seconds. The last line printed is "ARTIFACTS <dir>".
set -euo pipefail
. "$(dirname "$0")/lib.sh"

FORCE=0 REFRESH=0
while [ $# -gt 0 ]; do
    case "$1" in
        --force) FORCE=1 ;;
        --refresh) REFRESH=1 ;;
        -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
    shift
done
need_root

# Guest tools; their lib* dependencies are added by walking apt's dependency
# graph, and the initramfs gets only the ELF closure of what it ships.
GUEST_TOP="busybox-static dash libibverbs1 ibverbs-providers librdmacm1 rdmacm-utils ibverbs-utils
 perftest iproute2 tcpdump ethtool"
# Executables taken from the guest packages (path inside the package).
GUEST_BINS="usr/bin/rping usr/bin/ucmatose usr/bin/udaddy usr/bin/rdma_server usr/bin/rdma_client
 usr/bin/rstream usr/bin/riostream usr/bin/ibv_devices usr/bin/ibv_devinfo usr/bin/ibv_rc_pingpong
 bin/ip sbin/ip usr/bin/ip usr/sbin/ip bin/ss usr/bin/ss sbin/rdma usr/bin/rdma usr/sbin/rdma
 usr/bin/tcpdump usr/sbin/tcpdump sbin/ethtool usr/sbin/ethtool bin/dash usr/bin/dash"
# Kernel modules wanted in the guest (their dependencies come along).
# sctp: Linux kernel SCTP (with udp_tunnel and libcrc32c), the peer of
# DDP over SCTP (RFC 5043) for sctp-ddp-peer.c.
GUEST_MODS="virtio_pci virtio_net virtio_console virtio_rng crc32c_generic crc32c_intel
 ib_core ib_uverbs iw_cm ib_cm rdma_cm rdma_ucm siw sctp"
STEP_TIMEOUT=${DPWARP_INTEROP_STEP_TIMEOUT:-900}

T_START=$(date +%s)
host_pkgs build-essential kmod cpio xz-utils python3 iproute2 qemu-system-x86 iputils-ping tcpdump
mkdir -p "$CACHE"/{debs,stamps} "$OUT"

# ------------------------------------------------------------------ kernel choice
# bookworm's linux-image-amd64 names the current ABI (6.1.0-NN-amd64). The
# choice is cached so that later runs stay on the same kernel, offline.
apt_update() { say "apt-get update"; timeout "$APT_TIMEOUT" apt-get update -q > /dev/null || die "apt-get update failed"; }
# The kernel packages the peer needs for the image of ABI $1 (6.1.0-NN-amd64).
kernel_pkgs() { echo "linux-image-$1 linux-headers-$1 linux-headers-${1%-amd64}-common linux-kbuild-6.1 linux-source-6.1"; }
# The newest linux-image-amd64 whose kernel packages can all be downloaded
# at its version: the security archive keeps one version of each package
# name, so while a new upload moves linux-kbuild-6.1 ahead of the image
# that the metapackage still names (6.1.192-3 beside 6.1.192-2), that
# image cannot be built against and an older one (bookworm's own) is.
resolve_kernel() {
    local v kver p ok
    for v in $(apt-cache madison linux-image-amd64 2> /dev/null |
               awk -F' [|] ' '$3 ~ /Packages$/ {gsub(/ /, "", $2); print $2}'); do
        kver=$(apt-cache show "linux-image-amd64=$v" 2> /dev/null |
               sed -n 's/^Depends:.*linux-image-\(6\.1\.[0-9-]*-amd64\) .*/\1/p' | head -n1)
        [ -n "$kver" ] || continue
        ok=1
        for p in $(kernel_pkgs "$kver"); do
            apt-cache madison "$p" 2> /dev/null |
                awk -F' [|] ' -v v="$v" '$3 ~ /Packages$/ {gsub(/ /, "", $2); if ($2 == v) f=1} END {exit !f}' ||
                { ok=0; break; }
        done
        if [ "$ok" = 1 ]; then
            printf 'KVER=%s\nKPKGVER=%s\n' "$kver" "$v" > "$CACHE/kernel.env"
            return
        fi
        say "linux-image-amd64 $v ($kver): not every kernel package is downloadable at $v; trying an older one"
    done
    die "no bookworm kernel whose image, headers, kbuild and source are all downloadable (check /etc/apt/sources.list*)"
}
UPDATED=0
if [ "$REFRESH" = 1 ] || [ ! -s "$CACHE/kernel.env" ]; then
    apt_update; UPDATED=1
    resolve_kernel
fi
. "$CACHE/kernel.env"
say "guest kernel $KVER ($KPKGVER)"

# ------------------------------------------------------------------ package set
# Shared-library packages are followed (zlib1g is the one without "lib" in front).
LIBPKG_RE='^(lib.*|zlib1g)$' LIBPKG_SKIP_RE='(-dev|-bin|-common)$|^libc-bin$|^libpam'
top_sum=$(echo "$GUEST_TOP $LIBPKG_RE $LIBPKG_SKIP_RE" | sha256sum | cut -c1-16)
if [ "$REFRESH" = 1 ] || [ "$(head -n1 "$CACHE/guest-pkgs.list" 2>/dev/null)" != "# $top_sum" ]; then
    say "resolving the guest package set"
    declare -A seen=()
    level=$GUEST_TOP
    for p in $level; do seen[$p]=1; done
    while [ -n "$level" ]; do
        # shellcheck disable=SC2086
        next=$(apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks \
                   --no-replaces --no-enhances $level 2>/dev/null |
               sed -n -E 's/^ *\|?(Pre)?Depends: ([a-z0-9][a-z0-9.+-]*)(:[a-z0-9]+)?$/\2/p' | sort -u)
        level=
        for d in $next; do
            [[ $d =~ $LIBPKG_RE ]] && ! [[ $d =~ $LIBPKG_SKIP_RE ]] || continue
            [ -n "${seen[$d]:-}" ] && continue
            seen[$d]=1; level="$level $d"
        done
    done
    { echo "# $top_sum"; printf '%s\n' "${!seen[@]}" | sort; } > "$CACHE/guest-pkgs.list.new"
    mv "$CACHE/guest-pkgs.list.new" "$CACHE/guest-pkgs.list"
fi
mapfile -t GUEST_PKGS < <(grep -v '^#' "$CACHE/guest-pkgs.list")

# ------------------------------------------------------------------ downloads
# Every package is fetched at the newest version the archive offers
# (apt-cache madison), never at the host's installed one, which may not be
# downloadable. Kernel packages are pinned to the version of the chosen image.
deb_of() { ls -1v "$CACHE/debs/$1"_*.deb 2>/dev/null | tail -n1; }
kdeb_of() { ls -1 "$CACHE/debs/$1_${KPKGVER//:/%3a}"_*.deb 2>/dev/null | head -n1; }
missing_debs() {
    KABI=${KVER%-amd64}
    read -r -a KPKGS <<< "$(kernel_pkgs "$KVER")"
    MISSING=()
    local p
    for p in "${GUEST_PKGS[@]}"; do [ -n "$(deb_of "$p")" ] || MISSING+=("$p"); done
    for p in "${KPKGS[@]}"; do [ -n "$(kdeb_of "$p")" ] || MISSING+=("$p=$KPKGVER"); done
}
download_missing() {
    local plain=() specs=() p
    for p in "${MISSING[@]}"; do case "$p" in *=*) specs+=("$p") ;; *) plain+=("$p") ;; esac; done
    if [ ${#plain[@]} -gt 0 ]; then
        mapfile -t -O "${#specs[@]}" specs < <(apt-cache madison "${plain[@]}" 2> /dev/null |
            awk -F' [|] ' '$3 ~ /Packages$/ {gsub(/ /, "", $1); gsub(/ /, "", $2); if (!seen[$1]++) print $1 "=" $2}')
        [ ${#specs[@]} -eq ${#MISSING[@]} ] || return 1
    fi
    (cd "$CACHE/debs" && timeout "$APT_TIMEOUT" apt-get -o APT::Sandbox::User=root -q download "${specs[@]}" \
        > "$CACHE/download.log" 2>&1)
}
missing_debs
if [ ${#MISSING[@]} -gt 0 ]; then
    say "apt-get download: ${#MISSING[@]} packages"
    t0=$(date +%s)
    if ! download_missing; then
        [ "$UPDATED" = 1 ] && { cat "$CACHE/download.log" >&2; die "apt-get download failed"; }
        apt_update
        # the archive may have moved on to a newer kernel ABI in the meantime
        if [ -z "$(kdeb_of "linux-image-$KVER")" ]; then resolve_kernel; . "$CACHE/kernel.env"; fi
        missing_debs
        download_missing || { cat "$CACHE/download.log" >&2; die "apt-get download failed"; }
    fi
    say "downloaded in $(( $(date +%s) - t0 )) s"
fi
missing_debs
[ ${#MISSING[@]} -eq 0 ] || die "debs still missing: ${MISSING[*]}"

# stamp NAME KEY: true when step NAME last completed with the same KEY.
stamp_ok() { [ "$FORCE" = 0 ] && [ "$(cat "$CACHE/stamps/$1" 2>/dev/null)" = "$2" ]; }
stamp_set() { echo "$2" > "$CACHE/stamps/$1"; }
key_of() { sha256sum "$@" | sha256sum | cut -c1-32; }
file_key() { for f in "$@"; do printf '%s %s\n' "$(basename "$f")" "$(stat -c %s "$f")"; done | sha256sum | cut -c1-32; }

# ------------------------------------------------------------------ kernel build tree
KB=$CACHE/kbuild
KDIR=$KB/usr/src/linux-headers-$KVER
kb_key=$(file_key "$(kdeb_of "linux-headers-$KVER")" "$(kdeb_of "linux-headers-$KABI-common")" "$(kdeb_of linux-kbuild-6.1)")
if ! stamp_ok kbuild "$kb_key" || [ ! -f "$KDIR/Makefile" ]; then
    say "unpacking kernel headers"
    rm -rf "$KB"; mkdir -p "$KB"
    for p in "linux-headers-$KVER" "linux-headers-$KABI-common" linux-kbuild-6.1; do
        timeout "$STEP_TIMEOUT" dpkg-deb -x "$(kdeb_of "$p")" "$KB"
    done
    # The flavour tree refers to the common tree by absolute path: point it here.
    grep -rl --include=Makefile '/usr/src/linux-headers-' "$KDIR" | while read -r f; do
        sed -i "s#\([ =]\)/usr/src/linux-headers-#\1$KB/usr/src/linux-headers-#g" "$f"
    done
    stamp_set kbuild "$kb_key"
fi

# ------------------------------------------------------------------ siw.ko
SIWSRC=$CACHE/src/siw-$KPKGVER
if [ ! -f "$SIWSRC/siw_main.c" ]; then
    say "extracting drivers/infiniband/sw/siw from linux-source-6.1 (decompresses the whole tarball)"
    rm -rf "$CACHE/src"; mkdir -p "$CACHE/src/x"
    timeout "$STEP_TIMEOUT" dpkg-deb --fsys-tarfile "$(kdeb_of linux-source-6.1)" |
        timeout "$STEP_TIMEOUT" tar -xO ./usr/src/linux-source-6.1.tar.xz |
        timeout "$STEP_TIMEOUT" tar -xJ -C "$CACHE/src/x" linux-source-6.1/drivers/infiniband/sw/siw
    mv "$CACHE/src/x/linux-source-6.1/drivers/infiniband/sw/siw" "$SIWSRC"
    rm -rf "$CACHE/src/x"
fi
siw_key=$(key_of "$PEER_DIR/siw-knobs.sh" "$SIWSRC/siw_main.c" "$KDIR/Makefile")
if ! stamp_ok siw "$siw_key" || [ ! -f "$OUT/siw.ko" ]; then
    say "building siw.ko"
    t0=$(date +%s)
    SB=$CACHE/siw-build
    rm -rf "$SB"; cp -r "$SIWSRC" "$SB"
    "$PEER_DIR/siw-knobs.sh" "$SB"
    timeout "$STEP_TIMEOUT" make -s -C "$KDIR" M="$SB" CONFIG_RDMA_SIW=m -j"$(nproc)" modules \
        > "$CACHE/siw-build.log" 2>&1 || { tail -n 30 "$CACHE/siw-build.log" >&2; die "siw.ko build failed"; }
    modinfo -F parm "$SB/siw.ko" | grep -q '^mpa_crc_strict:' || die "siw.ko lacks the knob parameters"
    strip --strip-debug -o "$OUT/siw.ko" "$SB/siw.ko"
    stamp_set siw "$siw_key"
    say "siw.ko built in $(( $(date +%s) - t0 )) s"
fi

# ------------------------------------------------------------------ package trees
# Guest packages and the kernel image are unpacked (not installed) into pkgroot.
PR=$CACHE/pkgroot
pr_debs=()
for p in "${GUEST_PKGS[@]}"; do pr_debs+=("$(deb_of "$p")"); done
pr_debs+=("$(kdeb_of "linux-image-$KVER")")
pr_key=$(file_key "${pr_debs[@]}")
if ! stamp_ok pkgroot "$pr_key" || [ ! -d "$PR" ]; then
    say "unpacking ${#pr_debs[@]} packages"
    rm -rf "$PR"; mkdir -p "$PR"
    for d in "${pr_debs[@]}"; do timeout "$STEP_TIMEOUT" dpkg-deb -x "$d" "$PR"; done
    stamp_set pkgroot "$pr_key"
fi

# ------------------------------------------------------------------ initramfs
ir_key=$(key_of "$0" "$PEER_DIR/lib.sh" "$PEER_DIR/guest-init" "$OUT/siw.ko" "$CACHE/stamps/pkgroot")
if stamp_ok initramfs "$ir_key" && [ -f "$OUT/initramfs.cpio.gz" ] && [ -f "$OUT/vmlinuz" ]; then
    say "initramfs up to date"
else
    say "assembling the initramfs"
    IR=$CACHE/initramfs
    rm -rf "$IR"
    mkdir -p "$IR"/{bin,sbin,dev,proc,sys,tmp,run,root,mnt,etc/dpw,usr/bin,usr/sbin,usr/lib/x86_64-linux-gnu,usr/lib64,var/tmp}
    ln -s usr/lib "$IR/lib"; ln -s usr/lib64 "$IR/lib64"
    LIBDIR=$IR/usr/lib/x86_64-linux-gnu

    bb=$PR/bin/busybox; [ -x "$bb" ] || bb=$PR/usr/bin/busybox
    cp "$bb" "$IR/bin/busybox"
    ln -s busybox "$IR/bin/sh"

    for b in $GUEST_BINS; do
        [ -f "$PR/$b" ] || continue
        n=$(basename "$b")
        [ -e "$IR/usr/bin/$n" ] || cp -L "$PR/$b" "$IR/usr/bin/$n"
    done
    # all of perftest's tools (ib_write_bw, ib_read_lat, ...)
    for f in "$PR"/usr/bin/ib_*; do
        [ -f "$f" ] && head -c4 "$f" | grep -q ELF && cp -L "$f" "$IR/usr/bin/"
    done
    for n in dash rping ibv_devices ip rdma ib_write_bw; do
        [ -x "$IR/usr/bin/$n" ] || die "$n not found in the guest packages"
    done

    # libibverbs finds its providers through /etc/libibverbs.d/*.driver; ship siw's.
    mkdir -p "$IR/etc/libibverbs.d" "$LIBDIR/libibverbs"
    cp "$PR/etc/libibverbs.d/siw.driver" "$IR/etc/libibverbs.d/"
    cp -L "$PR"/usr/lib/x86_64-linux-gnu/libibverbs/libsiw-rdmav*.so "$LIBDIR/libibverbs/"

    # Shared libraries: follow DT_NEEDED through the unpacked packages only.
    find_lib() {
        local d
        for d in usr/lib/x86_64-linux-gnu lib/x86_64-linux-gnu usr/lib lib; do
            [ -e "$PR/$d/$1" ] && { echo "$PR/$d/$1"; return 0; }
        done
        return 1
    }
    declare -A have=()
    todo=$(find "$IR/usr" -type f \( -perm -u+x -o -name '*.so*' \))
    unresolved=
    while [ -n "$todo" ]; do
        more=
        for f in $todo; do
            for n in $(readelf -d "$f" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
                [ -n "${have[$n]:-}" ] && continue
                have[$n]=1
                if src=$(find_lib "$n"); then
                    cp -L "$src" "$LIBDIR/$n"; more="$more $LIBDIR/$n"
                else
                    unresolved="$unresolved $n"
                fi
            done
        done
        todo=$more
    done
    [ -z "$unresolved" ] || die "libraries not found in the guest packages:$unresolved"
    # glibc dlopen()s libgcc_s for thread cancellation/unwinding.
    cp -L "$(find_lib libgcc_s.so.1)" "$LIBDIR/"
    cp -L "$(find_lib ld-linux-x86-64.so.2)" "$IR/usr/lib64/ld-linux-x86-64.so.2"

    # Minimal /etc for libc lookups and tcpdump's privilege drop.
    printf 'root:x:0:0:root:/root:/bin/sh\ntcpdump:x:0:0:tcpdump:/tmp:/bin/false\n' > "$IR/etc/passwd"
    printf 'root:x:0:\ntcpdump:x:0:\n' > "$IR/etc/group"
    printf 'hosts: files\nprotocols: files\nservices: files\n' > "$IR/etc/nsswitch.conf"
    printf '127.0.0.1 localhost\n%s ns\n%s peer\n' "$NS_ADDR" "$GUEST_ADDR" > "$IR/etc/hosts"
    printf 'ip 0 IP\nicmp 1 ICMP\ntcp 6 TCP\nudp 17 UDP\n' > "$IR/etc/protocols"
    [ -d "$PR/etc/iproute2" ] && cp -a "$PR/etc/iproute2" "$IR/etc/"

    # Kernel modules: resolve dependencies with kmod on a scratch module tree.
    MT=$CACHE/modtree
    rm -rf "$MT"; mkdir -p "$MT/lib/modules"
    kmods=$PR/lib/modules/$KVER; [ -d "$kmods" ] || kmods=$PR/usr/lib/modules/$KVER
    cp -a "$kmods" "$MT/lib/modules/"
    mkdir -p "$MT/lib/modules/$KVER/updates"
    cp "$OUT/siw.ko" "$MT/lib/modules/$KVER/updates/siw.ko"
    timeout "$STEP_TIMEOUT" depmod -b "$MT" "$KVER"
    : > "$IR/etc/dpw/modules"
    declare -A listed=()
    for m in $GUEST_MODS; do
        deps=$(modprobe -d "$MT" -S "$KVER" --show-depends "$m" 2>/dev/null) || {
            case "$m" in crc32c_intel) continue ;; esac; die "module $m not found"; }
        while read -r verb path _; do
            [ "$verb" = insmod ] || continue
            rel=${path#"$MT/lib/modules/$KVER/"}
            [ -n "${listed[$rel]:-}" ] && continue
            listed[$rel]=1
            mkdir -p "$IR/lib/modules/$KVER/$(dirname "$rel")"
            cp "$path" "$IR/lib/modules/$KVER/$rel"
            echo "$rel" >> "$IR/etc/dpw/modules"
        done <<< "$deps"
    done
    rm -rf "$MT"
    # modules.dep for the shipped modules, so that `modprobe NAME` works in
    # the guest too (busybox's modprobe reads it; built-ins are listed in
    # modules.builtin).
    for f in modules.builtin modules.order; do
        [ -f "$kmods/$f" ] && cp "$kmods/$f" "$IR/lib/modules/$KVER/"
    done
    timeout "$STEP_TIMEOUT" depmod -b "$IR" "$KVER" 2> /dev/null || die "depmod on the initramfs failed"
    echo "$KVER" > "$IR/etc/dpw/kver"

    install -m 0755 "$PEER_DIR/guest-init" "$IR/init"

    (cd "$IR" && find . | LC_ALL=C sort | timeout "$STEP_TIMEOUT" cpio -o -H newc -R 0:0 --quiet) |
        timeout "$STEP_TIMEOUT" gzip -6 > "$OUT/initramfs.cpio.gz.tmp"
    mv "$OUT/initramfs.cpio.gz.tmp" "$OUT/initramfs.cpio.gz"
    cp "$PR/boot/vmlinuz-$KVER" "$OUT/vmlinuz"
    {
        echo "kernel $KVER ($KPKGVER)"
        echo "siw.ko parameters:"; modinfo -F parm "$OUT/siw.ko" | sed 's/^/  /'
        echo "modules (load order):"; sed 's/^/  /' "$IR/etc/dpw/modules"
        echo "guest packages:"
        for d in "${pr_debs[@]}"; do echo "  $(basename "$d")"; done
    } > "$OUT/manifest.txt"
    stamp_set initramfs "$ir_key"
    say "initramfs $(du -h "$OUT/initramfs.cpio.gz" | cut -f1), $(wc -l < "$IR/etc/dpw/modules") modules"
fi

say "done in $(( $(date +%s) - T_START )) s"
echo "ARTIFACTS $OUT"
