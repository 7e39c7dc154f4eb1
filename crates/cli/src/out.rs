//! Writing to stdout so that a closed pipe (`tcptune ... | head`) ends the program quietly
//! with status 0 instead of a panic.

use serde::Serialize;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once a JSON document went to stdout (`main` then prints no error document).
static JSON_PRINTED: AtomicBool = AtomicBool::new(false);

fn handle(r: io::Result<()>) {
    if let Err(e) = r {
        if e.kind() == io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("tcptune: writing to stdout: {e}");
        std::process::exit(1);
    }
}

/// Print `text` followed by a newline.
pub(crate) fn line(text: &str) {
    let mut out = io::stdout().lock();
    handle(writeln!(out, "{text}").and_then(|_| out.flush()));
}

/// Print `text` as is (no newline added).
pub(crate) fn text(text: &str) {
    let mut out = io::stdout().lock();
    handle(out.write_all(text.as_bytes()).and_then(|_| out.flush()));
}

/// Print a value as pretty JSON followed by a newline.
pub(crate) fn json<T: Serialize>(value: &T) -> anyhow::Result<()> {
    let s = serde_json::to_string_pretty(value)?;
    JSON_PRINTED.store(true, Ordering::Relaxed);
    line(&s);
    Ok(())
}

/// Whether a JSON document was printed.
pub(crate) fn json_printed() -> bool {
    JSON_PRINTED.load(Ordering::Relaxed)
}

/// Prints a client's place in a server's queue on stderr, whenever it changes.
pub(crate) fn queued_notice() -> tcptune_transfer::client::OnQueued {
    tcptune_transfer::client::OnQueued(std::sync::Arc::new(|place, expected| {
        let when = expected.map_or(String::new(), |s| {
            format!(", a slot is expected to free in about {s} s")
        });
        eprintln!("tcptune: the server has no free session slot: waiting in its queue, place {place}{when}");
    }))
}
