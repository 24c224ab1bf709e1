//! A connection's outgoing queue, with a byte gauge.
//!
//! Senders never wait (a response is produced wherever a request finishes,
//! often in synchronous code), so the queue itself cannot refuse a message.
//! Instead it counts the bytes waiting to be written, and the transport's
//! reader stops reading input while that count is over the limit
//! ([`Outbound::wait_for_room`]): a client that never reads its answers stops
//! being read, and the memory it can pin stays bounded.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, Notify};

/// Bytes queued for a client past which its input is no longer read.
pub const OUTBOUND_QUEUE_BYTES: usize = 8 * 1024 * 1024;

#[derive(Default)]
struct Gauge {
    bytes: AtomicUsize,
    drained: Notify,
}

impl Gauge {
    fn take(&self, n: usize) {
        let before = self.bytes.fetch_sub(n, Ordering::AcqRel);
        if before.saturating_sub(n) < OUTBOUND_QUEUE_BYTES {
            self.drained.notify_waiters();
        }
    }
}

/// One outgoing message: a whole text, or the pieces of one (a batch's
/// answer, written piece after piece so it is never copied into one string).
pub enum Outgoing {
    Text(String),
    Pieces(Vec<String>),
}

impl Outgoing {
    /// Its length in bytes.
    pub fn len(&self) -> usize {
        match self {
            Outgoing::Text(t) => t.len(),
            Outgoing::Pieces(p) => p.iter().map(String::len).sum(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its pieces, in order.
    pub fn pieces(&self) -> impl Iterator<Item = &str> {
        let (one, many): (Option<&str>, &[String]) = match self {
            Outgoing::Text(t) => (Some(t.as_str()), &[]),
            Outgoing::Pieces(p) => (None, p.as_slice()),
        };
        one.into_iter().chain(many.iter().map(String::as_str))
    }

    /// The whole text.
    pub fn into_string(self) -> String {
        match self {
            Outgoing::Text(t) => t,
            Outgoing::Pieces(p) => p.concat(),
        }
    }
}

/// Where a connection's outgoing messages go: one JSON text per item, without
/// the trailing newline (the transport frames them).
#[derive(Clone)]
pub struct Outbound {
    tx: mpsc::UnboundedSender<Outgoing>,
    gauge: Arc<Gauge>,
}

/// The message could not be queued: the receiving side is gone.
#[derive(Debug)]
pub struct Closed;

impl Outbound {
    /// Queues one message; fails only when the transport stopped receiving.
    pub fn send(&self, message: String) -> Result<(), Closed> {
        self.send_outgoing(Outgoing::Text(message))
    }

    /// Queues one message given as pieces to be written back to back.
    pub fn send_pieces(&self, pieces: Vec<String>) -> Result<(), Closed> {
        self.send_outgoing(Outgoing::Pieces(pieces))
    }

    fn send_outgoing(&self, message: Outgoing) -> Result<(), Closed> {
        let n = message.len();
        self.gauge.bytes.fetch_add(n, Ordering::AcqRel);
        self.tx.send(message).map_err(|_| {
            self.gauge.take(n);
            Closed
        })
    }

    /// Bytes queued and not yet taken by the transport.
    pub fn queued_bytes(&self) -> usize {
        self.gauge.bytes.load(Ordering::Acquire)
    }

    /// Waits until the queue holds less than [`OUTBOUND_QUEUE_BYTES`] (or the
    /// receiving side is gone).
    pub async fn wait_for_room(&self) {
        loop {
            let drained = self.gauge.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.queued_bytes() < OUTBOUND_QUEUE_BYTES || self.tx.is_closed() {
                return;
            }
            tokio::select! {
                _ = drained => {}
                _ = self.tx.closed() => return,
            }
        }
    }
}

/// The receiving end: taking a message releases its bytes from the gauge.
pub struct OutboundRx {
    rx: mpsc::UnboundedReceiver<Outgoing>,
    gauge: Arc<Gauge>,
}

impl OutboundRx {
    /// The next message as one text.
    pub async fn recv(&mut self) -> Option<String> {
        self.recv_outgoing().await.map(Outgoing::into_string)
    }

    /// The next message, as queued. Its bytes leave the gauge once taken.
    pub async fn recv_outgoing(&mut self) -> Option<Outgoing> {
        let m = self.rx.recv().await?;
        self.gauge.take(m.len());
        Some(m)
    }

    pub fn try_recv_outgoing(&mut self) -> Option<Outgoing> {
        let m = self.rx.try_recv().ok()?;
        self.gauge.take(m.len());
        Some(m)
    }

    /// For a plain thread (the stdout writer).
    pub fn blocking_recv_outgoing(&mut self) -> Option<Outgoing> {
        let m = self.rx.blocking_recv()?;
        self.gauge.take(m.len());
        Some(m)
    }
}

/// A new outgoing queue.
pub fn channel() -> (Outbound, OutboundRx) {
    let (tx, rx) = mpsc::unbounded_channel();
    let gauge = Arc::new(Gauge::default());
    (
        Outbound {
            tx,
            gauge: gauge.clone(),
        },
        OutboundRx { rx, gauge },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn pieces_are_one_message() {
        let (tx, mut rx) = channel();
        tx.send_pieces(vec!["[".into(), "1".into(), ",2]".into()])
            .unwrap();
        assert_eq!(tx.queued_bytes(), 5);
        assert_eq!(rx.recv().await.unwrap(), "[1,2]");
        assert_eq!(tx.queued_bytes(), 0);
    }

    #[tokio::test]
    async fn the_gauge_counts_queued_bytes_and_wakes_the_reader() {
        let (tx, mut rx) = channel();
        tx.send("x".repeat(OUTBOUND_QUEUE_BYTES)).unwrap();
        assert_eq!(tx.queued_bytes(), OUTBOUND_QUEUE_BYTES);
        let waiter = {
            let tx = tx.clone();
            tokio::spawn(async move { tx.wait_for_room().await })
        };
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(
            !waiter.is_finished(),
            "a full queue must make the reader wait"
        );
        assert_eq!(rx.recv().await.unwrap().len(), OUTBOUND_QUEUE_BYTES);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("the reader resumes once the queue drains")
            .unwrap();
        assert_eq!(tx.queued_bytes(), 0);
        drop(rx);
        assert!(tx.send("y".into()).is_err());
        assert_eq!(tx.queued_bytes(), 0);
    }
}
