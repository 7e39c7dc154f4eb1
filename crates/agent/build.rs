//! Compiles `bpf/sockops.c` into `$OUT_DIR/sockops.o` with clang (`-O2 -g -target bpf`),
//! against the UAPI headers and libbpf-dev's `bpf/bpf_helpers.h`.
//!
//! Without clang or libbpf-dev the crate still builds: a warning names the Debian packages and
//! the object is left empty, so that the loader fails with one line naming them (every other
//! part of tcptune keeps working).

use std::path::{Path, PathBuf};
use std::process::Command;

const SOURCE: &str = "bpf/sockops.c";

fn main() {
    println!("cargo:rerun-if-changed={SOURCE}");
    println!("cargo:rerun-if-env-changed=CLANG");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let object = out.join("sockops.o");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".to_string());
    let found = Command::new(&clang)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let helpers = Path::new("/usr/include/bpf/bpf_helpers.h");
    let missing = match (found, helpers.exists()) {
        (true, true) => None,
        (false, true) => Some("clang is not installed"),
        (true, false) => Some("libbpf-dev is not installed (no /usr/include/bpf/bpf_helpers.h)"),
        (false, false) => Some("clang and libbpf-dev are not installed"),
    };
    if let Some(why) = missing {
        println!(
            "cargo:warning=tcptune-agent: {why}; the agent's BPF program is not built \
             (apt-get install clang libbpf-dev, then rebuild)"
        );
        std::fs::write(&object, b"").expect("writing an empty BPF object");
        return;
    }
    // The UAPI's asm/ headers live under the multiarch directory.
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let multiarch = match arch.as_str() {
        "x86_64" => "x86_64-linux-gnu",
        "aarch64" => "aarch64-linux-gnu",
        "arm" => "arm-linux-gnueabihf",
        "riscv64" => "riscv64-linux-gnu",
        "powerpc64" => "powerpc64le-linux-gnu",
        "s390x" => "s390x-linux-gnu",
        other => other,
    };
    let status = Command::new(&clang)
        .args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"])
        .arg(format!("-I/usr/include/{multiarch}"))
        .args(["-c", SOURCE, "-o"])
        .arg(&object)
        .status()
        .unwrap_or_else(|e| panic!("running {clang} on {SOURCE}: {e}"));
    assert!(status.success(), "{clang} failed to compile {SOURCE}");
}
