//! MCP over stdin/stdout.

use std::sync::Arc;

use tokio::io::BufReader;
use tokio::sync::mpsc;

use super::lines::{serve_lines, write_lines};
use crate::protocol::Engine;

/// Serves one MCP session on stdin/stdout until stdin closes. `stdout` is the
/// protocol's private handle (fd 1 itself is pointed at stderr at start, so
/// nothing else can write protocol-breaking text there).
pub async fn serve(engine: Arc<Engine>, stdout: tokio::fs::File) {
    let (tx, rx) = mpsc::unbounded_channel();
    let writer = tokio::spawn(write_lines(tokio::io::BufWriter::new(stdout), rx));
    let conn = engine.connect(tx.clone());
    let input = BufReader::with_capacity(256 * 1024, tokio::io::stdin());
    serve_lines(input, &conn, &tx, engine.config.max_message_bytes).await;
    // stdin closed: answer what is in flight, then exit.
    conn.drain().await;
    drop(conn);
    drop(tx);
    let _ = writer.await;
}
