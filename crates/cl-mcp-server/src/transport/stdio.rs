//! MCP over stdin/stdout.
//!
//! Both ends are served by plain threads doing blocking I/O: a reader that
//! hands stdin's bytes to the engine, and a writer that writes each outgoing
//! message as one line and flushes when no more are queued. (Tokio's own
//! stdin/stdout pay a blocking-pool hand-off per read and per write, which
//! showed up in every round trip.)

use std::io::{Read, Write};
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio_util::io::StreamReader;

use super::lines::serve_lines;
use crate::protocol::Engine;

/// How long in-flight requests may still run after stdin closes.
const EOF_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Serves one MCP session on stdin/stdout until stdin closes. `stdout` is the
/// protocol's private handle (fd 1 itself is pointed at stderr at start, so
/// nothing else can write protocol-breaking text there).
pub async fn serve(engine: Arc<Engine>, stdout: std::fs::File) {
    let (tx, rx) = crate::protocol::outbound::channel();
    let writer = std::thread::Builder::new()
        .name("stdout".into())
        .spawn(move || write_lines(stdout, rx))
        .expect("spawn the stdout thread");
    let conn = engine.connect(tx.clone());
    // Read on a runtime worker, not on the thread that blocks on the whole
    // server: a request task spawned from a worker starts on that worker as
    // soon as the reader waits again (no wake-up of another thread).
    let reading = {
        let (conn, tx, max) = (conn.clone(), tx.clone(), engine.config.max_message_bytes);
        tokio::spawn(async move { serve_lines(stdin_reader(), &conn, &tx, max).await })
    };
    let _ = reading.await;
    // stdin closed: answer what is in flight, then exit. The client is gone,
    // so work that outlasts a grace period (a long build, a runaway
    // evaluation) is cancelled rather than waited for.
    tokio::select! {
        _ = conn.drain() => {}
        _ = tokio::time::sleep(EOF_GRACE) => {
            tracing::info!("stdin closed; cancelling requests still running");
            conn.cancel_all();
            conn.drain().await;
        }
    }
    crate::tools::debug::end_session(conn.session()).await;
    drop(conn);
    drop(tx);
    let _ = tokio::task::spawn_blocking(move || writer.join()).await;
}

/// stdin as an async buffered reader, fed by a thread doing blocking reads.
fn stdin_reader() -> impl tokio::io::AsyncBufRead + Unpin {
    let (chunks, rx) = mpsc::channel::<std::io::Result<Bytes>>(16);
    std::thread::Builder::new()
        .name("stdin".into())
        .spawn(move || {
            let mut stdin = std::io::stdin().lock();
            let mut buf = vec![0u8; 256 * 1024];
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        if chunks
                            .blocking_send(Ok(Bytes::copy_from_slice(&buf[..n])))
                            .is_err()
                        {
                            break;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        let _ = chunks.blocking_send(Err(e));
                        break;
                    }
                }
            }
        })
        .expect("spawn the stdin thread");
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    });
    StreamReader::new(Box::pin(stream))
}

/// Writes each message as one line; flushes when the queue is empty.
fn write_lines(stdout: std::fs::File, mut rx: crate::protocol::outbound::OutboundRx) {
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, stdout);
    while let Some(msg) = rx.blocking_recv_outgoing() {
        let mut ok = write_line(&mut out, msg);
        while ok {
            match rx.try_recv_outgoing() {
                Some(m) => ok = write_line(&mut out, m),
                None => break,
            }
        }
        if !ok || out.flush().is_err() {
            tracing::warn!("stdout closed; dropping further messages");
            break;
        }
    }
}

fn write_line(out: &mut impl Write, msg: crate::protocol::outbound::Outgoing) -> bool {
    msg.pieces().all(|p| out.write_all(p.as_bytes()).is_ok()) && out.write_all(b"\n").is_ok()
}
