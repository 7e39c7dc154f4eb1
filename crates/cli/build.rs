//! Puts the git commit of the checkout into `tcptune --version` (`TCPTUNE_GIT_COMMIT`):
//! `0.1.0 (commit abc123def456)`, or `(commit unknown)` outside a git checkout (a crates.io
//! package, a tarball). Uncommitted changes are not flagged: that would rebuild the binary on
//! every `git add`.

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
    let text = match commit {
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
    println!("cargo:rerun-if-changed=build.rs");
}
