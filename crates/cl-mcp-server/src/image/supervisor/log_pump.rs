//! The image's stdout and stderr: read line by line (lines capped), the
//! Swank port picked out, the rest logged under a rate limit and kept as
//! the Lisp's last words.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::BufReader;
use tokio::sync::oneshot;

use crate::image::last_words::LastWords;

const PORT_MARKER: &str = "CL-MCP-SWANK-PORT ";

/// Longest line of image output the log keeps (bytes; the rest is cut).
pub(super) const LOG_LINE_CAP: usize = 4096;
/// Lines of image output logged per [`LOG_INTERVAL`]; the rest are counted
/// and reported as one "[N lines suppressed]" line.
const LOG_LINES_PER_INTERVAL: u32 = 100;
const LOG_INTERVAL: Duration = Duration::from_secs(1);

/// Reads one line of at most `cap` bytes (the rest of a longer line is
/// skipped, never buffered); `None` at end of stream.
pub(super) async fn next_capped_line<R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
    cap: usize,
) -> std::io::Result<Option<String>> {
    use tokio::io::AsyncBufReadExt;
    let mut line = Vec::new();
    let mut dropped = 0usize;
    let mut any = false;
    loop {
        let buf = r.fill_buf().await?;
        if buf.is_empty() {
            if !any {
                return Ok(None);
            }
            break;
        }
        any = true;
        let end = buf.iter().position(|&b| b == b'\n');
        let chunk = &buf[..end.unwrap_or(buf.len())];
        let take = cap.saturating_sub(line.len()).min(chunk.len());
        line.extend_from_slice(&chunk[..take]);
        dropped += chunk.len() - take;
        let used = end.map_or(buf.len(), |i| i + 1);
        r.consume(used);
        if end.is_some() {
            break;
        }
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    let mut text = String::from_utf8_lossy(&line).into_owned();
    if dropped > 0 {
        text.push_str(&format!(" [line cut: {dropped} more bytes]"));
    }
    Ok(Some(text))
}

/// Rate limit for image output in the log: the first lines of each
/// interval, then a count of what was left out.
struct LogLimit {
    since: Instant,
    logged: u32,
    suppressed: u64,
}

impl LogLimit {
    fn new() -> LogLimit {
        LogLimit {
            since: Instant::now(),
            logged: 0,
            suppressed: 0,
        }
    }

    /// Whether to log the next line; reports the lines suppressed in the
    /// interval that just ended through `flush`.
    fn admit(&mut self, flush: impl FnOnce(u64)) -> bool {
        if self.since.elapsed() >= LOG_INTERVAL {
            if self.suppressed > 0 {
                flush(self.suppressed);
            }
            *self = LogLimit::new();
        }
        if self.logged < LOG_LINES_PER_INTERVAL {
            self.logged += 1;
            true
        } else {
            self.suppressed += 1;
            false
        }
    }

    fn finish(&mut self, flush: impl FnOnce(u64)) {
        if self.suppressed > 0 {
            flush(self.suppressed);
        }
        self.suppressed = 0;
    }
}

fn log_suppressed(pid: Option<u32>, stream: &'static str, n: u64) {
    tracing::warn!(target: "lisp", pid, stream, "[{n} lines suppressed]");
}

pub(super) async fn log_stdout<R: tokio::io::AsyncRead + Unpin>(
    out: R,
    pid: Option<u32>,
    port: oneshot::Sender<u16>,
    tail: Arc<LastWords>,
) {
    let mut port = Some(port);
    let mut out = BufReader::new(out);
    let mut limit = LogLimit::new();
    while let Ok(Some(line)) = next_capped_line(&mut out, LOG_LINE_CAP).await {
        if let Some(p) = line
            .strip_prefix(PORT_MARKER)
            .and_then(|p| p.trim().parse().ok())
        {
            if let Some(tx) = port.take() {
                let _ = tx.send(p);
                continue;
            }
        }
        if limit.admit(|n| log_suppressed(pid, "stdout", n)) {
            tracing::info!(target: "lisp", pid, stream = "stdout", "{line}");
        }
        tail.push_stdout(&line);
    }
    limit.finish(|n| log_suppressed(pid, "stdout", n));
}

pub(super) async fn log_stderr(
    err: tokio::process::ChildStderr,
    pid: Option<u32>,
    tail: Arc<LastWords>,
) {
    let mut err = BufReader::new(err);
    let mut limit = LogLimit::new();
    while let Ok(Some(line)) = next_capped_line(&mut err, LOG_LINE_CAP).await {
        let log = limit.admit(|n| log_suppressed(pid, "stderr", n));
        if log {
            tracing::info!(target: "lisp", pid, stream = "stderr", "{line}");
        }
        tail.push_stderr(&line);
    }
    limit.finish(|n| log_suppressed(pid, "stderr", n));
}
