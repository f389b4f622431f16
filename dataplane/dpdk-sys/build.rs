//! Finds DPDK 22.11 with pkg-config, generates the bindings with bindgen and
//! compiles the C shim for DPDK's inline functions. Without DPDK (or without
//! libclang, which bindgen needs) the build stops with one line that names
//! the Debian packages to install: never a silent stub.

use std::path::PathBuf;

/// What to install, in one line.
const MISSING: &str = "apt-get install libdpdk-dev libclang-dev pkg-config";

fn fail(why: &str) -> ! {
    // cargo shows `cargo::error` as the build's error (Rust 1.84+).
    println!("cargo::error=dpdk-sys: {why}: {MISSING}");
    std::process::exit(1);
}

fn main() {
    println!("cargo:rerun-if-changed=shim/shim.h");
    println!("cargo:rerun-if-changed=shim/shim.c");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    let dpdk = match pkg_config::Config::new()
        .atleast_version("22.11")
        .cargo_metadata(true)
        .probe("libdpdk")
    {
        Ok(lib) => lib,
        Err(_) => fail("DPDK 22.11 or newer not found (pkg-config knows no libdpdk >= 22.11)"),
    };
    // Two driver libraries whose API we call are not in libdpdk.pc's list:
    // the vdev bus (rte_vdev_init/uninit) and the ring PMD
    // (rte_eth_from_rings). Every other driver loads as a plugin from
    // DPDK's driver directory when EAL starts.
    println!("cargo:rustc-link-lib=dylib=rte_bus_vdev");
    println!("cargo:rustc-link-lib=dylib=rte_net_ring");
    // pkg-config's cflags, for clang and cc alike: the include paths,
    // `-include rte_config.h` and the machine flags DPDK was built with.
    let cflags = cflags();
    let mut build = cc::Build::new();
    build.file("shim/shim.c").warnings(false).opt_level(2);
    for flag in &cflags {
        build.flag(flag);
    }
    build.compile("dpwarp_dpdk_shim");

    if std::panic::catch_unwind(bindgen::clang_version).is_err() {
        fail("libclang (for bindgen) not found");
    }
    let bindings = bindgen::Builder::default()
        .header("shim/shim.h")
        .clang_args(&cflags)
        .allowlist_function("rte_.*")
        .allowlist_function("dpw_.*")
        .allowlist_type("rte_.*")
        .allowlist_var("RTE_.*")
        .allowlist_var("SOCKET_ID_ANY|RING_F_.*")
        // A packed union of bitfields bindgen cannot lay out; unused here.
        .opaque_type("rte_l2tpv2_combined_msg_hdr")
        .derive_debug(false)
        .derive_default(true)
        .layout_tests(false)
        .generate_comments(false)
        .prepend_enum_name(false)
        // Constants DPDK defines through function-like macros
        // (`RTE_BIT64(3)`, as the offload flags are) need clang to expand.
        .clang_macro_fallback()
        .generate();
    let bindings = match bindings {
        Ok(b) => b,
        Err(e) => fail(&format!("bindgen could not read DPDK's headers ({e})")),
    };
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    if let Err(e) = bindings.write_to_file(out.join("bindings.rs")) {
        fail(&format!("cannot write the bindings ({e})"));
    }
    drop(dpdk);
}

/// `pkg-config --cflags libdpdk`, split into arguments.
fn cflags() -> Vec<String> {
    let output = std::process::Command::new("pkg-config")
        .args(["--cflags", "libdpdk"])
        .output();
    match output {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .map(str::to_string)
            .collect(),
        _ => fail("pkg-config --cflags libdpdk failed"),
    }
}
