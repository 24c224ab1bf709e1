//! Newline-delimited JSON framing, shared by stdio and TCP: one message per
//! line, a cap on line length that skips (and reports) an oversized line
//! without losing the next one, and back-pressure: no line is handed to the
//! engine while the connection is at capacity (answers piling up unread, or
//! too many requests running), so an unread client stops being read.

use crate::protocol::outbound::{OutboundRx, Outgoing};
use crate::protocol::{Connection, Outbound};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};

/// Reads lines from `input` and hands each to `conn` until the input ends.
/// The caller decides what happens to requests still running then.
pub async fn serve_lines<R>(mut input: R, conn: &Connection, out: &Outbound, max_bytes: usize)
where
    R: AsyncBufRead + Unpin,
{
    let mut line: Vec<u8> = Vec::with_capacity(8 * 1024);
    let mut oversized = false;
    // The first bytes of an oversized line, to find its id for the error.
    let mut prefix: Vec<u8> = Vec::new();
    let too_long = format!("Message exceeds the {max_bytes}-byte line limit; it was skipped");
    loop {
        let buf = match input.fill_buf().await {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %e, "input error; closing");
                break;
            }
        };
        if buf.is_empty() {
            // End of input: a last line without newline still counts.
            if oversized {
                conn.reject_unreadable(&too_long, &prefix, out);
            } else if !line.is_empty() {
                deliver(&line, conn, out);
            }
            break;
        }
        let (chunk, found_newline) = match memchr(b'\n', buf) {
            Some(i) => (&buf[..i], true),
            None => (buf, false),
        };
        let consumed = chunk.len() + usize::from(found_newline);
        if !oversized {
            if line.len() + chunk.len() > max_bytes {
                oversized = true;
                line.extend_from_slice(&chunk[..chunk.len().min(4096)]);
                prefix = line[..line.len().min(4096)].to_vec();
                line.clear();
                line.shrink_to(8 * 1024);
            } else {
                line.extend_from_slice(chunk);
            }
        }
        input.consume(consumed);
        if found_newline {
            conn.wait_for_capacity(out).await;
            if oversized {
                conn.reject_unreadable(&too_long, &prefix, out);
                oversized = false;
                prefix.clear();
            } else {
                deliver(&line, conn, out);
            }
            line.clear();
        }
    }
}

fn memchr(needle: u8, hay: &[u8]) -> Option<usize> {
    hay.iter().position(|&b| b == needle)
}

fn deliver(line: &[u8], conn: &Connection, out: &Outbound) {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    match std::str::from_utf8(line) {
        Ok(text) => conn.handle_text(text, out),
        Err(e) => conn.reject_unreadable(&format!("Message is not valid UTF-8: {e}"), &[], out),
    }
}

/// Writes each outgoing message as one line, flushing when no more are queued.
pub async fn write_lines<W>(mut output: W, mut rx: OutboundRx)
where
    W: AsyncWrite + Unpin,
{
    while let Some(msg) = rx.recv_outgoing().await {
        let mut ok = write_one(&mut output, msg).await;
        while ok {
            match rx.try_recv_outgoing() {
                Some(m) => ok = write_one(&mut output, m).await,
                None => break,
            }
        }
        if !ok || output.flush().await.is_err() {
            tracing::warn!("output closed; dropping further messages");
            break;
        }
    }
}

async fn write_one<W: AsyncWrite + Unpin>(output: &mut W, msg: Outgoing) -> bool {
    for piece in msg.pieces() {
        debug_assert!(!piece.contains('\n'));
        if output.write_all(piece.as_bytes()).await.is_err() {
            return false;
        }
    }
    output.write_all(b"\n").await.is_ok()
}
