//! Puts the git commit of the checkout into `tcptune --version` (`TCPTUNE_GIT_COMMIT`):
//! `0.1.0 (commit abc123def456)`, or `(commit unknown)` outside a git checkout (a crates.io
//! package, a tarball). A binary built from sources that differ from that commit says so:
//! `(commit abc123def456-modified)`, so that a benchmark's raw rows (which name the
//! binary's commit) cannot claim a commit whose code they did not run. Only what builds the
//! binary counts (`crates/`, `Cargo.toml`, `Cargo.lock`), and the check reruns when those
//! change or HEAD moves, not on every `git add`.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]);
    // `git diff --quiet` exits 1 when the working tree differs from HEAD in these paths.
    let modified = Command::new("git")
        .args([
            "diff",
            "--quiet",
            "HEAD",
            "--",
            ":/crates",
            ":/Cargo.toml",
            ":/Cargo.lock",
        ])
        .status()
        .is_ok_and(|s| s.code() == Some(1));
    let text = match commit {
        Some(c) if modified => format!("commit {c}-modified"),
        Some(c) => format!("commit {c}"),
        None => "commit unknown".to_string(),
    };
    println!("cargo:rustc-env=TCPTUNE_GIT_COMMIT={text}");
    // Rebuild when HEAD moves: a checkout, or a commit on the current branch.
    if let Some(p) = git(&["rev-parse", "--git-path", "HEAD"]) {
        println!("cargo:rerun-if-changed={p}");
    }
    if let Some(head) = git(&["symbolic-ref", "-q", "HEAD"]) {
        if let Some(p) = git(&["rev-parse", "--git-path", &head]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    // And when what builds the binary changes (a directory is scanned whole).
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for p in ["crates", "Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", root.join(p).display());
    }
    println!("cargo:rerun-if-changed=build.rs");
}
