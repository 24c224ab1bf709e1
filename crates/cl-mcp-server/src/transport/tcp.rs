//! The stdio framing over loopback TCP: one MCP session per TCP connection.

use std::net::SocketAddr;
use std::sync::Arc;

use serde_json::Value;
use tokio::io::BufReader;
use tokio::net::TcpListener;

use super::lines::{serve_lines, write_lines};
use super::listen::{accept, refuse, ConnectionLimit};
use crate::protocol::{jsonrpc, Engine};

/// Accepts connections forever, each served as its own MCP session; at most
/// `--max-connections` at once (the one over is sent an error line and
/// closed). Running out of file descriptors pauses accepting, never ends it.
pub async fn serve(engine: Arc<Engine>, listener: TcpListener) -> std::io::Result<()> {
    let limit = ConnectionLimit::new(engine.config.max_connections);
    loop {
        let (stream, peer) = accept(&listener, "tcp").await;
        let Some(slot) = limit.try_acquire() else {
            tracing::warn!(%peer, limit = limit.max, "tcp connection refused: connection limit reached");
            refuse(stream, refusal_line(limit.max).into_bytes());
            continue;
        };
        let _ = stream.set_nodelay(true);
        let engine = engine.clone();
        tokio::spawn(async move {
            let _slot = slot;
            tracing::info!(%peer, "tcp connection");
            let (read, write) = stream.into_split();
            let (tx, rx) = crate::protocol::outbound::channel();
            let writer = tokio::spawn(write_lines(tokio::io::BufWriter::new(write), rx));
            let conn = engine.connect(tx.clone());
            serve_lines(
                BufReader::new(read),
                &conn,
                &tx,
                engine.config.max_message_bytes,
            )
            .await;
            // The peer hung up: nobody will read answers, so stop the work.
            conn.cancel_all();
            conn.drain().await;
            conn.session().end().await;
            drop(conn);
            drop(tx);
            let _ = writer.await;
            tracing::info!(%peer, "tcp connection closed");
        });
    }
}

/// The one line a connection over the cap receives before it is closed.
fn refusal_line(max: usize) -> String {
    let mut line = jsonrpc::error(
        None,
        jsonrpc::LIMIT_EXCEEDED,
        "Limit exceeded",
        &Value::String(format!(
            "The server already serves {max} connections (--max-connections); \
             this one is closed. Close another connection or try again later."
        )),
    );
    line.push('\n');
    line
}

/// Binds the TCP transport (loopback unless the address says otherwise).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}
