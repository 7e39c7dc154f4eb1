//! Reading what `tcptune paths import FILE` adds: a host's SQLite path database, or the
//! JSON Lines `tcptune paths export` writes. Every line and entry is checked against named
//! budgets before it is used: a file is as untrusted as a peer.

use anyhow::{anyhow, bail, Context};
use serde::Deserialize;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use tcptune_core::pathdb::{Direction, PathEntry};
use tcptune_pathdb::{check_entry, Host, Source, SqliteStore, StoredEntry, MAX_ROWS_READ};

/// Longest line of JSON accepted.
pub(crate) const MAX_LINE_BYTES: usize = 64 * 1024;
/// Most entries one import reads.
pub(crate) const MAX_ENTRIES: usize = MAX_ROWS_READ;
/// The newest export format this build reads (`paths export`'s `schema_version`).
const MAX_SCHEMA_VERSION: u32 = 1;

/// One line of `paths export`: the fields an entry needs (the others are ignored).
#[derive(Debug, Deserialize)]
struct Line {
    schema_version: u32,
    peer: String,
    direction: Direction,
    rtt_bucket: i32,
    min_rtt_us: u64,
    rate_bps: u64,
    full_pipe: bool,
    samples: u32,
    first_seen_unix_s: f64,
    updated_unix_s: f64,
    source: String,
    last_source: String,
    last_measured_unix_s: f64,
    #[serde(default)]
    measured_by: Option<LineHost>,
}

#[derive(Debug, Deserialize)]
struct LineHost {
    name: String,
    addr: String,
}

/// The entries of `file`; those that name no measuring host get `fallback`.
pub(crate) fn read(file: &Path, fallback: &Host) -> anyhow::Result<Vec<StoredEntry>> {
    let mut head = [0u8; 16];
    let n = std::fs::File::open(file)
        .and_then(|mut f| f.read(&mut head))
        .with_context(|| format!("reading {}", file.display()))?;
    let mut entries = if head[..n].starts_with(b"SQLite format 3\0") {
        let mut s = SqliteStore::open_existing(file)?
            .ok_or_else(|| anyhow!("{}: no path database there", file.display()))?;
        for w in s.take_warnings() {
            eprintln!("tcptune: warning: {w}");
        }
        s.entries()?
    } else {
        read_lines(file)?
    };
    for e in &mut entries {
        if e.measured_by.name.is_empty() {
            e.measured_by = fallback.clone();
        }
        check_entry(e).map_err(|why| anyhow!("{}: an entry with {why}", file.display()))?;
    }
    Ok(entries)
}

fn read_lines(file: &Path) -> anyhow::Result<Vec<StoredEntry>> {
    let f = std::fs::File::open(file).with_context(|| format!("reading {}", file.display()))?;
    let mut r = BufReader::new(f);
    let mut out = Vec::new();
    let mut buf = Vec::new();
    for number in 1.. {
        buf.clear();
        let got = r
            .by_ref()
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut buf)
            .with_context(|| format!("reading {}", file.display()))?;
        if got == 0 {
            break;
        }
        if buf.len() > MAX_LINE_BYTES {
            bail!(
                "{} line {number}: longer than {MAX_LINE_BYTES} bytes",
                file.display()
            );
        }
        if buf.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if out.len() >= MAX_ENTRIES {
            bail!("{}: over {MAX_ENTRIES} entries", file.display());
        }
        let l: Line = serde_json::from_slice(&buf).with_context(|| {
            format!(
                "{} line {number}: neither a SQLite path database nor `tcptune paths export` \
                 output",
                file.display()
            )
        })?;
        if l.schema_version > MAX_SCHEMA_VERSION {
            bail!(
                "{} line {number}: schema_version {} is newer than this tcptune's \
                 {MAX_SCHEMA_VERSION}",
                file.display(),
                l.schema_version
            );
        }
        let measured_by = match l.measured_by {
            Some(h) => Host::checked(h.name, h.addr)
                .map_err(|why| anyhow!("{} line {number}: {why}", file.display()))?,
            None => Host::default(),
        };
        out.push(StoredEntry {
            entry: PathEntry {
                peer: l.peer,
                direction: l.direction,
                rtt_bucket: l.rtt_bucket,
                rate_bps: l.rate_bps,
                full_pipe: l.full_pipe,
                min_rtt_us: l.min_rtt_us,
                first_seen_unix_s: l.first_seen_unix_s,
                updated_unix_s: l.updated_unix_s,
                samples: l.samples,
            },
            source: Source::from_name(&l.source),
            last_source: Source::from_name(&l.last_source),
            last_measured_unix_s: l.last_measured_unix_s,
            measured_by,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(tag: &str, text: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("tcptune-import-{tag}-{}", std::process::id()));
        std::fs::write(&p, text).expect("write");
        p
    }

    const LINE: &str = r#"{"schema_version":1,"peer":"10.0.0.2","direction":"send","rtt_bucket":33,"rtt_low_us":1,"rtt_high_us":2,"min_rtt_us":100000,"rate_bps":1000000,"full_pipe":true,"samples":2,"first_seen_unix_s":1.0,"updated_unix_s":2.0,"age_s":3.0,"fresh":false,"source":"probe","last_source":"transfer","last_measured_unix_s":2.0,"measured_by":{"name":"dtn1","addr":"10.0.0.1"}}"#;

    #[test]
    fn export_lines_are_read_back_with_their_host_or_the_fallback() {
        let no_host = LINE.replace(r#","measured_by":{"name":"dtn1","addr":"10.0.0.1"}"#, "");
        let p = write("ok", &format!("{LINE}\n\n{no_host}\n"));
        let fallback = Host {
            name: "here".into(),
            addr: String::new(),
        };
        let e = read(&p, &fallback).expect("read");
        let _ = std::fs::remove_file(&p);
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].measured_by.name, "dtn1");
        assert_eq!(e[1].measured_by, fallback);
        assert_eq!(e[0].last_source, Source::Transfer);
    }

    #[test]
    fn oversized_or_impossible_input_is_refused_with_its_line() {
        let fallback = Host::default();
        let long = format!("{}\n", " ".repeat(MAX_LINE_BYTES + 1));
        let zero = LINE.replace(r#""rate_bps":1000000"#, r#""rate_bps":0"#);
        let newer = LINE.replace(r#""schema_version":1"#, r#""schema_version":9"#);
        let big_peer = LINE.replace("10.0.0.2", &"p".repeat(300));
        for (tag, text, says) in [
            ("long", long.as_str(), "longer than"),
            ("zero", zero.as_str(), "rate 0"),
            ("newer", newer.as_str(), "newer"),
            ("peer", big_peer.as_str(), "a peer of 300 bytes"),
            ("junk", "hello\n", "neither a SQLite"),
        ] {
            let p = write(tag, text);
            let e = read(&p, &fallback).expect_err(tag);
            let _ = std::fs::remove_file(&p);
            assert!(format!("{e:#}").contains(says), "{tag}: {e:#}");
        }
    }
}
