//! Accepting connections without dying of it: a cap on open connections
//! (the one over it is told why and closed) and a back-off when the process
//! runs out of file descriptors or memory (log, wait, keep serving).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Open connections, at most `max` at a time.
#[derive(Clone)]
pub struct ConnectionLimit {
    slots: Arc<Semaphore>,
    pub max: usize,
}

impl ConnectionLimit {
    pub fn new(max: usize) -> ConnectionLimit {
        ConnectionLimit {
            slots: Arc::new(Semaphore::new(max)),
            max,
        }
    }

    /// A slot for one connection, held until dropped; `None` at the cap.
    pub fn try_acquire(&self) -> Option<OwnedSemaphorePermit> {
        self.slots.clone().try_acquire_owned().ok()
    }
}

/// Waits for the next connection. Errors never end the loop: a resource
/// shortage (`EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM`) is logged and waited
/// out with a growing pause (up to a second), since accepting again at once
/// would fail again at once; other errors concern one connection only.
pub async fn accept(listener: &TcpListener, what: &str) -> (TcpStream, SocketAddr) {
    let mut pause = Duration::from_millis(10);
    let mut failures: u64 = 0;
    loop {
        match listener.accept().await {
            Ok(conn) => {
                if failures > 0 {
                    tracing::info!(transport = what, failures, "accepting connections again");
                }
                return conn;
            }
            Err(e) if is_resource_shortage(&e) => {
                failures += 1;
                if failures == 1 || failures.is_power_of_two() {
                    tracing::warn!(
                        transport = what,
                        error = %e,
                        failures,
                        "cannot accept a connection (out of resources); waiting and retrying"
                    );
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            Err(e) => {
                tracing::debug!(transport = what, error = %e, "accept failed for one connection");
            }
        }
    }
}

fn is_resource_shortage(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// Writes `reply` to a connection refused at the cap, then closes it. Runs
/// as its own task, bounded in time, so a refused client cannot stall the
/// accept loop; its unread input is drained briefly so the close does not
/// turn into a reset that would hide the reply.
pub fn refuse(mut stream: TcpStream, reply: Vec<u8>) {
    tokio::spawn(async move {
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            if stream.write_all(&reply).await.is_err() {
                return;
            }
            let _ = stream.shutdown().await;
            let mut sink = [0u8; 4096];
            while let Ok(n) = stream.read(&mut sink).await {
                if n == 0 {
                    break;
                }
            }
        })
        .await;
    });
}
