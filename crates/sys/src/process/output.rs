//! A child's output copied to this process's stderr, each line prefixed, so that it can be
//! told apart from (and never mixes into) another program's stdout.

use std::io::{BufRead, BufReader, Read, Write};
use std::thread::JoinHandle;

/// Lines longer than this are split (a program that never writes a newline does not make
/// the copy grow without bound).
const MAX_LINE: u64 = 64 * 1024;

/// Copy `src` to `dst` line by line, each line starting with `prefix`; a last line without
/// a newline gets one. Returns the number of lines written.
pub fn copy_prefixed(src: impl Read, prefix: &str, dst: &mut impl Write) -> std::io::Result<u64> {
    let mut reader = BufReader::new(src);
    let mut line = Vec::new();
    let mut lines = 0;
    loop {
        line.clear();
        let n = (&mut reader).take(MAX_LINE).read_until(b'\n', &mut line)?;
        if n == 0 {
            return Ok(lines);
        }
        if line.last() != Some(&b'\n') {
            line.push(b'\n');
        }
        // One write per line, so that lines of several copiers do not interleave.
        let mut out = Vec::with_capacity(prefix.len() + line.len());
        out.extend_from_slice(prefix.as_bytes());
        out.extend_from_slice(&line);
        dst.write_all(&out)?;
        dst.flush()?;
        lines += 1;
    }
}

/// Copy `src` to this process's stderr on a thread of its own, each line prefixed with
/// `prefix` (for example `[server] `). The thread ends at the end of `src` (when every
/// process holding the pipe's other end has exited); join it to be sure every line is out.
pub fn prefix_to_stderr(
    src: impl Read + Send + 'static,
    prefix: &str,
) -> std::io::Result<JoinHandle<()>> {
    let prefix = prefix.to_string();
    std::thread::Builder::new()
        .name("tt-prefix".into())
        .spawn(move || {
            let _ = copy_prefixed(src, &prefix, &mut StderrLines);
        })
}

/// Our stderr, locked for each write.
struct StderrLines;

impl Write for StderrLines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        std::io::stderr().lock().write_all(buf).map(|()| buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_gets_the_prefix_and_a_newline() {
        let mut out = Vec::new();
        let n = copy_prefixed(&b"one\ntwo\n\nlast"[..], "[server] ", &mut out);
        assert_eq!(n.ok(), Some(4));
        assert_eq!(
            String::from_utf8_lossy(&out),
            "[server] one\n[server] two\n[server] \n[server] last\n"
        );
    }

    #[test]
    fn long_lines_are_split_and_binary_passes_through() {
        let mut src = vec![b'x'; MAX_LINE as usize + 10];
        src.extend_from_slice(&[0xff, b'\n']);
        let mut out = Vec::new();
        assert_eq!(copy_prefixed(&src[..], "> ", &mut out).ok(), Some(2));
        assert_eq!(out.len(), src.len() + 2 * 2 + 1);
        assert!(out.ends_with(&[b'x', 0xff, b'\n']));
    }

    #[test]
    fn empty_input_writes_nothing() {
        let mut out = Vec::new();
        assert_eq!(copy_prefixed(&b""[..], "> ", &mut out).ok(), Some(0));
        assert!(out.is_empty());
    }
}
