//! The stdio framing over loopback TCP: one MCP session per TCP connection.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::BufReader;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::lines::{serve_lines, write_lines};
use crate::protocol::Engine;

/// Accepts connections forever, each served as its own MCP session.
pub async fn serve(engine: Arc<Engine>, listener: TcpListener) -> std::io::Result<()> {
    loop {
        let (stream, peer) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let engine = engine.clone();
        tokio::spawn(async move {
            tracing::info!(%peer, "tcp connection");
            let (read, write) = stream.into_split();
            let (tx, rx) = mpsc::unbounded_channel();
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
            drop(conn);
            drop(tx);
            let _ = writer.await;
            tracing::info!(%peer, "tcp connection closed");
        });
    }
}

/// Binds the TCP transport (loopback unless the address says otherwise).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}
