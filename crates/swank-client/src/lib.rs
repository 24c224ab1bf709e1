//! Async Swank client: framing, request ids, events, interrupts. Knows nothing about MCP.
//!
//! Swank (the server half of SLIME) speaks length-prefixed S-expressions over
//! TCP. Each message is six lowercase hex digits giving the payload length,
//! then the payload. The length counts UTF-8 **bytes**: SLIME 2.27's
//! `swank/rpc.lisp` converts the printed message with `string-to-utf8` before
//! measuring it and reads exactly that many octets back (`read-chunk`), so
//! this client measures and reads bytes too.
//!
//! Requests are `(:emacs-rex FORM PACKAGE THREAD ID)`; the answer is
//! `(:return (:ok VALUE) ID)` or `(:return (:abort REASON) ID)`. Everything
//! else Swank sends is an asynchronous event, delivered on the channel
//! returned by [`SwankClient::connect`]. Flow control is answered here:
//! Swank sends `(:ping THREAD TAG)` every 100 messages and blocks that thread
//! until `(:emacs-pong THREAD TAG)` comes back, so the reader task answers
//! it immediately (a caller that stopped reading events must not stall Swank).

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use lisp_syntax::data::{self, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpStream, ToSocketAddrs};
use tokio::sync::{mpsc, oneshot};

pub use lisp_syntax::data::lisp_string;

/// Prefix of the `:background-message` a worker thread sends when it exits.
const WORKER_EXIT: &str = "swank-client: worker exited ";

/// Largest payload the six-hex-digit header can describe.
pub const MAX_MESSAGE_BYTES: usize = 0xFF_FFFF;

/// Which Swank thread evaluates a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Thread {
    /// `t`: Swank spawns a fresh worker thread for this request.
    T,
    /// `:repl-thread`: the connection's REPL thread (needs the `swank-repl` contrib).
    ReplThread,
    /// A specific thread by its Swank thread id (e.g. a long-lived worker).
    Id(i64),
}

impl fmt::Display for Thread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Thread::T => f.write_str("t"),
            Thread::ReplThread => f.write_str(":repl-thread"),
            Thread::Id(n) => write!(f, "{n}"),
        }
    }
}

/// How a request ended.
#[derive(Debug, Clone, PartialEq)]
pub enum RexOutcome {
    /// `(:ok VALUE)`: the form returned `VALUE`.
    Ok(Value),
    /// `(:abort REASON)`: evaluation was aborted (an error left through the
    /// debugger's abort restart, or an interrupt); `REASON` is Swank's text
    /// for the condition when it gave one.
    Abort(Option<String>),
}

/// Errors of the client itself (not of the evaluated Lisp code).
///
/// `Clone`, because one connection failure ends every pending request with
/// the same error.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SwankError {
    /// Could not connect, or an I/O error on the socket.
    #[error("Swank connection I/O error: {0}")]
    Io(String),
    /// The connection is closed; pending and later requests fail with this.
    #[error("Swank connection closed: {0}")]
    Disconnected(String),
    /// Swank sent something this client cannot understand, or refused a
    /// request (`:invalid-rpc`, `:reader-error`).
    #[error("Swank protocol error: {0}")]
    Protocol(String),
    /// The message would not fit in Swank's 24-bit length header.
    #[error("message of {0} bytes exceeds Swank's limit of {MAX_MESSAGE_BYTES} bytes")]
    MessageTooLarge(usize),
    /// The worker thread with this id has exited; its requests end here.
    #[error("Swank worker thread {0} has exited; its requests cannot be answered")]
    ThreadGone(i64),
}

/// Result type of this crate.
pub type Result<T> = std::result::Result<T, SwankError>;

/// An asynchronous message from Swank (anything that is not a `:return`).
#[derive(Debug, Clone, PartialEq)]
pub enum SwankEvent {
    /// `(:write-string TEXT [TARGET [THREAD]])`: output from the image.
    WriteString {
        /// The text.
        text: String,
        /// Where it goes (e.g. `:repl-result`), when given.
        target: Option<Value>,
    },
    /// `(:debug THREAD LEVEL CONDITION RESTARTS FRAMES CONTINUATIONS)`: a
    /// thread entered the debugger and waits for an `sldb` request.
    Debug {
        /// Swank thread id.
        thread: i64,
        /// Debugger nesting level (1 for the first).
        level: i64,
        /// `(DESCRIPTION TYPE EXTRAS)`.
        condition: Value,
        /// `((NAME DESCRIPTION) ...)`.
        restarts: Value,
        /// `((INDEX TEXT [PLIST]) ...)`.
        frames: Value,
        /// Request ids waiting on this thread.
        continuations: Value,
    },
    /// `(:debug-activate THREAD LEVEL SELECT)`.
    DebugActivate {
        /// Swank thread id.
        thread: i64,
        /// Debugger level.
        level: i64,
    },
    /// `(:debug-return THREAD LEVEL STEPPING)`: the thread left that level.
    DebugReturn {
        /// Swank thread id.
        thread: i64,
        /// Debugger level.
        level: i64,
    },
    /// `(:new-package NAME PROMPT)`.
    NewPackage {
        /// Package name.
        name: String,
        /// Prompt string.
        prompt: String,
    },
    /// `(:read-string THREAD TAG)`: a thread reads from its standard input.
    /// Answer with `(:emacs-return-string THREAD TAG STRING)` or
    /// `(:emacs-return THREAD TAG NIL)` (see [`SwankClient::send_raw`]).
    ReadString {
        /// Swank thread id.
        thread: i64,
        /// Tag to echo in the answer.
        tag: Value,
    },
    /// `(:y-or-n-p THREAD TAG QUESTION)`: answer `(:emacs-return THREAD TAG T|NIL)`.
    YOrNP {
        /// Swank thread id.
        thread: i64,
        /// Tag to echo in the answer.
        tag: Value,
        /// The question text.
        question: String,
    },
    /// `(:reader-error PACKET MESSAGE)`: Swank could not read a message we sent.
    ReaderError {
        /// The text Swank failed to read.
        packet: String,
        /// Why.
        message: String,
    },
    /// `(:invalid-rpc ID MESSAGE)`.
    InvalidRpc {
        /// The request id.
        id: i64,
        /// Why.
        message: String,
    },
    /// `(:new-features FEATURES)`.
    NewFeatures(Value),
    /// `(:indentation-update INFO)`.
    IndentationUpdate(Value),
    /// A worker thread started by [`SwankClient::spawn_worker_thread`]
    /// exited (e.g. its code called `abort-thread`). Requests sent to it
    /// have failed with [`SwankError::ThreadGone`].
    WorkerExited {
        /// Swank thread id.
        thread: i64,
    },
    /// Any other message, as read.
    Raw(Value),
    /// The connection ended (EOF or error); no more events follow.
    Disconnected(String),
}

struct Pending {
    calls: HashMap<u64, (Thread, oneshot::Sender<Result<RexOutcome>>)>,
    /// Worker threads (from [`SwankClient::spawn_worker_thread`]) known to
    /// have exited: requests to them would never be answered.
    gone_threads: std::collections::HashSet<i64>,
    /// Set once the connection is gone, so later calls fail at once.
    closed: Option<String>,
}

/// `Mutex::lock` that takes a poisoned lock as it is: the guarded state
/// (the pending map, the reader's handle) is replaced or appended to whole,
/// so a panic elsewhere leaves nothing half-updated to trip on.
trait MutexExt<T> {
    fn guard(&self) -> MutexGuard<'_, T>;
}

impl<T> MutexExt<T> for Mutex<T> {
    fn guard(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(|e| e.into_inner())
    }
}

struct Shared {
    writer: tokio::sync::Mutex<OwnedWriteHalf>,
    pending: Mutex<Pending>,
    next_id: AtomicU64,
    reader: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The last client handle is gone: stop reading so the socket closes.
        if let Some(h) = self.reader.guard().take() {
            h.abort();
        }
    }
}

/// A connection to Swank. Cheap to clone; clones share the connection and
/// may issue requests concurrently.
#[derive(Clone)]
pub struct SwankClient {
    shared: Arc<Shared>,
}

impl fmt::Debug for SwankClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SwankClient").finish_non_exhaustive()
    }
}

/// Encodes one message: header plus UTF-8 payload, in one buffer so it
/// leaves in one write.
pub fn encode_frame(payload: &str) -> Result<Vec<u8>> {
    let n = payload.len();
    if n > MAX_MESSAGE_BYTES {
        return Err(SwankError::MessageTooLarge(n));
    }
    let mut buf = Vec::with_capacity(6 + n);
    buf.extend_from_slice(format!("{n:06x}").as_bytes());
    buf.extend_from_slice(payload.as_bytes());
    Ok(buf)
}

impl SwankClient {
    /// Connects to Swank at `addr`. When `secret` is given it is sent first,
    /// as Swank's `authenticate-client` expects (the contents of
    /// `~/.slime-secret`, or whatever the image's `slime-secret` returns).
    ///
    /// Returns the client and the receiver of asynchronous events. The
    /// receiver may be dropped; events are then discarded.
    pub async fn connect(
        addr: impl ToSocketAddrs,
        secret: Option<String>,
    ) -> Result<(SwankClient, mpsc::UnboundedReceiver<SwankEvent>)> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| SwankError::Io(format!("connect: {e}")))?;
        // Every request is one small write followed by waiting for the
        // answer: Nagle's algorithm would add up to 40 ms per round trip.
        stream
            .set_nodelay(true)
            .map_err(|e| SwankError::Io(format!("set TCP_NODELAY: {e}")))?;
        let (rd, mut wr) = stream.into_split();
        if let Some(secret) = secret {
            // `authenticate-client` compares the raw packet text (not a
            // read Lisp string) with the secret, so it goes unquoted.
            let frame = encode_frame(&secret)?;
            wr.write_all(&frame)
                .await
                .map_err(|e| SwankError::Io(format!("sending secret: {e}")))?;
        }
        let shared = Arc::new(Shared {
            writer: tokio::sync::Mutex::new(wr),
            pending: Mutex::new(Pending {
                calls: HashMap::new(),
                gone_threads: Default::default(),
                closed: None,
            }),
            next_id: AtomicU64::new(1),
            reader: Mutex::new(None),
        });
        let (tx, rx) = mpsc::unbounded_channel();
        // The reader task holds only a weak reference so that dropping every
        // client closes the connection.
        let weak = Arc::downgrade(&shared);
        let handle = tokio::spawn(read_loop(rd, weak, tx));
        *shared.reader.guard() = Some(handle);
        Ok((SwankClient { shared }, rx))
    }

    /// Sends `(:emacs-rex FORM PACKAGE THREAD ID)` and waits for its `:return`.
    ///
    /// `form` is Lisp text read by Swank in its I/O package, so qualify
    /// symbols (`swank:connection-info`) and build string arguments with
    /// [`lisp_string`]. `package` is the buffer package name (e.g. `"CL-USER"`).
    pub async fn rex(&self, form: &str, package: &str, thread: Thread) -> Result<RexOutcome> {
        let id = self.new_request_id();
        self.rex_with_id(id, form, package, thread).await
    }

    /// A fresh request id for [`SwankClient::rex_with_id`]: a caller that
    /// knows its request's id can recognise it among the continuations of
    /// a [`SwankEvent::Debug`].
    pub fn new_request_id(&self) -> u64 {
        self.shared.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// [`SwankClient::rex`] with an id from [`SwankClient::new_request_id`].
    pub async fn rex_with_id(
        &self,
        id: u64,
        form: &str,
        package: &str,
        thread: Thread,
    ) -> Result<RexOutcome> {
        let (tx, rx) = oneshot::channel();
        {
            let mut p = self.shared.pending.guard();
            if let Some(why) = &p.closed {
                return Err(SwankError::Disconnected(why.clone()));
            }
            if let Thread::Id(n) = thread {
                if p.gone_threads.contains(&n) {
                    return Err(SwankError::ThreadGone(n));
                }
            }
            p.calls.insert(id, (thread, tx));
        }
        let msg = format!("(:emacs-rex {form} {} {thread} {id})", lisp_string(package));
        if let Err(e) = self.send_raw(&msg).await {
            self.shared.pending.guard().calls.remove(&id);
            return Err(e);
        }
        // If the caller drops this future, remove its entry so the map does not grow.
        let guard = RemoveOnDrop {
            shared: &self.shared,
            id,
        };
        let res = rx.await;
        std::mem::forget(guard);
        match res {
            Ok(r) => r,
            Err(_) => Err(SwankError::Disconnected("connection dropped".into())),
        }
    }

    /// Interrupts `thread` (`(:emacs-interrupt THREAD)`): Swank makes it enter
    /// the debugger, which shows up as a [`SwankEvent::Debug`].
    pub async fn interrupt(&self, thread: Thread) -> Result<()> {
        self.send_raw(&format!("(:emacs-interrupt {thread})")).await
    }

    /// Sends one message as given, e.g. `(:emacs-return 3 1 nil)` or
    /// `(:emacs-return-string 3 1 "text")`.
    pub async fn send_raw(&self, message: &str) -> Result<()> {
        if let Some(why) = &self.shared.pending.guard().closed {
            return Err(SwankError::Disconnected(why.clone()));
        }
        write_frame(&self.shared, message).await
    }

    /// Starts a long-lived Swank worker thread in the image that serves
    /// requests sent to it with [`Thread::Id`], and returns its id.
    ///
    /// Swank normally spawns a new thread for every `t` request; a
    /// persistent thread avoids that cost and keeps thread-local state
    /// between requests. It runs Swank's own request loop
    /// (`handle-requests`), the way the `swank-repl` contrib runs its REPL
    /// thread, so debugger, interrupts and output behave as on any worker.
    pub async fn spawn_worker_thread(&self, name: &str) -> Result<i64> {
        // Swank reads requests in its I/O package, which uses no other
        // package: every symbol is qualified. When the thread ends, it says
        // so through a message Swank passes on verbatim
        // (`:background-message`), so its requests can be failed.
        let form = format!(
            "(swank/backend:thread-id (cl:let ((c swank::*emacs-connection*)) \
             (swank/backend:spawn (cl:lambda () (cl:unwind-protect \
             (swank::with-bindings swank::*default-worker-thread-bindings* \
             (swank::handle-requests c)) \
             (cl:ignore-errors (swank::with-connection (c) (swank::send-to-emacs \
             (cl:list :background-message (cl:format cl:nil \"{WORKER_EXIT}~D\" \
             (swank::current-thread-id)))))))) \
             :name {})))",
            lisp_string(name)
        );
        match self.rex(&form, "COMMON-LISP-USER", Thread::T).await? {
            RexOutcome::Ok(v) => v.as_i64().ok_or_else(|| {
                SwankError::Protocol(format!("worker thread id is not an integer: {v}"))
            }),
            RexOutcome::Abort(why) => Err(SwankError::Protocol(format!(
                "could not start a worker thread: {}",
                why.unwrap_or_default()
            ))),
        }
    }

    /// True once the connection has ended.
    pub fn is_closed(&self) -> bool {
        self.shared.pending.guard().closed.is_some()
    }

    /// Number of requests waiting for their `:return`.
    pub fn pending_requests(&self) -> usize {
        self.shared.pending.guard().calls.len()
    }
}

struct RemoveOnDrop<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Drop for RemoveOnDrop<'_> {
    fn drop(&mut self) {
        self.shared.pending.guard().calls.remove(&self.id);
    }
}

async fn write_frame(shared: &Shared, message: &str) -> Result<()> {
    let frame = encode_frame(message)?;
    let mut w = shared.writer.lock().await;
    w.write_all(&frame)
        .await
        .map_err(|e| SwankError::Io(format!("write: {e}")))
}

async fn read_frame(rd: &mut BufReader<OwnedReadHalf>) -> std::io::Result<Option<String>> {
    let mut header = [0u8; 6];
    match rd.read_exact(&mut header).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = std::str::from_utf8(&header)
        .ok()
        .and_then(|h| usize::from_str_radix(h, 16).ok())
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("bad message header {:?}", String::from_utf8_lossy(&header)),
            )
        })?;
    let mut buf = vec![0u8; len];
    rd.read_exact(&mut buf).await?;
    String::from_utf8(buf)
        .map(Some)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

async fn read_loop(
    rd: OwnedReadHalf,
    shared: std::sync::Weak<Shared>,
    events: mpsc::UnboundedSender<SwankEvent>,
) {
    let mut rd = BufReader::with_capacity(64 * 1024, rd);
    let why = loop {
        let text = match read_frame(&mut rd).await {
            Ok(Some(t)) => t,
            Ok(None) => break "Swank closed the connection (EOF)".to_string(),
            Err(e) => break format!("read error: {e}"),
        };
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let msg = match data::read(&text) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = %e, message = %text, "unreadable Swank message");
                // A reply we cannot read must still end its request, or
                // the caller would wait forever.
                if let Some(id) = text
                    .trim_start()
                    .starts_with("(:return")
                    .then(|| trailing_id(&text))
                    .flatten()
                {
                    complete(
                        &shared,
                        id,
                        Err(SwankError::Protocol(format!(
                            "unreadable reply from Swank: {e}"
                        ))),
                    );
                }
                continue;
            }
        };
        handle_message(&shared, msg, &events).await;
    };
    tracing::debug!(reason = %why, "Swank connection ended");
    if let Some(shared) = shared.upgrade() {
        let calls = {
            let mut p = shared.pending.guard();
            p.closed = Some(why.clone());
            std::mem::take(&mut p.calls)
        };
        for (_, (_, tx)) in calls {
            let _ = tx.send(Err(SwankError::Disconnected(why.clone())));
        }
    }
    let _ = events.send(SwankEvent::Disconnected(why));
}

fn complete(shared: &Shared, id: u64, r: Result<RexOutcome>) {
    let tx = shared.pending.guard().calls.remove(&id).map(|(_, tx)| tx);
    match tx {
        Some(tx) => {
            let _ = tx.send(r);
        }
        None => tracing::debug!(id, "reply for a request nobody waits for"),
    }
}

fn int(v: Option<&Value>) -> i64 {
    v.and_then(Value::as_i64).unwrap_or(0)
}

fn text(v: Option<&Value>) -> String {
    v.and_then(Value::as_str).unwrap_or_default().to_string()
}

/// Dispatches one message from Swank by its family: a reply completes its
/// request, a ping or output is answered, a failure of a request fails it,
/// the exit of a worker thread fails its calls; everything becomes an event
/// but replies and pings.
async fn handle_message(shared: &Shared, msg: Value, events: &mpsc::UnboundedSender<SwankEvent>) {
    let Some(items) = msg.as_list().filter(|l| !l.is_empty()) else {
        let _ = events.send(SwankEvent::Raw(msg));
        return;
    };
    let Some(head) = items[0].as_symbol().filter(|s| s.is_keyword()) else {
        let _ = events.send(SwankEvent::Raw(msg.clone()));
        return;
    };
    let event = match head.name.as_str() {
        "RETURN" if items.len() == 3 => return complete_return(shared, items, &msg),
        "PING" if items.len() == 3 => return answer_ping(shared, items).await,
        "WRITE-STRING" => write_string(shared, items).await,
        "READER-ERROR" => reader_error(shared, items),
        "INVALID-RPC" => invalid_rpc(shared, items),
        "BACKGROUND-MESSAGE" if text(items.get(1)).starts_with(WORKER_EXIT) => {
            match worker_exited(shared, items) {
                Some(event) => event,
                None => SwankEvent::Raw(msg.clone()),
            }
        }
        name => plain_event(name, items).unwrap_or_else(|| SwankEvent::Raw(msg.clone())),
    };
    let _ = events.send(event);
}

/// `(:return (:ok value) id)`, `(:return (:abort [condition]) id)`: the
/// reply to a request, which completes it.
fn complete_return(shared: &Shared, items: &[Value], msg: &Value) {
    let Some(id) = items[2].as_i64().and_then(|n| u64::try_from(n).ok()) else {
        tracing::warn!(message = %msg, "`:return` without an id");
        return;
    };
    let outcome = match items[1].as_list() {
        Some([k, v]) if k.is_keyword("ok") => Ok(RexOutcome::Ok(v.clone())),
        Some([k, v]) if k.is_keyword("abort") => {
            Ok(RexOutcome::Abort(v.as_str().map(str::to_string)))
        }
        Some([k]) if k.is_keyword("abort") => Ok(RexOutcome::Abort(None)),
        _ => Err(SwankError::Protocol(format!("unexpected :return {msg}"))),
    };
    complete(shared, id, outcome);
}

/// `(:ping thread tag)`: answered with `:emacs-pong`.
async fn answer_ping(shared: &Shared, items: &[Value]) {
    // Swank blocks the pinging thread until this arrives.
    let pong = format!("(:emacs-pong {} {})", items[1], items[2]);
    if let Err(e) = write_frame(shared, &pong).await {
        tracing::warn!(error = %e, "could not answer Swank's ping");
    }
}

/// `(:write-string text [target [thread]])`: output, acknowledged where
/// Swank waits for it.
async fn write_string(shared: &Shared, items: &[Value]) -> SwankEvent {
    // Newer Swank (2.28+) names the writing thread and waits for
    // `:write-done`; 2.27 sends no thread and expects nothing.
    if let Some(thread) = items.get(3).filter(|t| t.as_i64().is_some()) {
        let done = format!("(:write-done {thread})");
        if let Err(e) = write_frame(shared, &done).await {
            tracing::warn!(error = %e, "could not acknowledge output");
        }
    }
    SwankEvent::WriteString {
        text: text(items.get(1)),
        target: items.get(2).filter(|t| !t.is_nil()).cloned(),
    }
}

/// `(:reader-error packet message)`: Swank could not read a request we
/// sent, which fails it.
fn reader_error(shared: &Shared, items: &[Value]) -> SwankEvent {
    let packet = text(items.get(1));
    let message = text(items.get(2));
    // The request that failed to read never gets a `:return`; its id
    // is the last element of the packet we sent, so fail it here.
    if let Some(id) = trailing_request_id(&packet) {
        complete(
            shared,
            id,
            Err(SwankError::Protocol(format!(
                "Swank could not read the request: {message}"
            ))),
        );
    }
    SwankEvent::ReaderError { packet, message }
}

/// `(:invalid-rpc id message)`: a request Swank refused, which fails it.
fn invalid_rpc(shared: &Shared, items: &[Value]) -> SwankEvent {
    let id = int(items.get(1));
    let message = text(items.get(2));
    if let Ok(uid) = u64::try_from(id) {
        complete(
            shared,
            uid,
            Err(SwankError::Protocol(format!("invalid request: {message}"))),
        );
    }
    SwankEvent::InvalidRpc { id, message }
}

/// A `:background-message` telling that a worker thread exited: the calls
/// on that thread fail, and later ones on it fail at once. None when the
/// thread's number does not read (the message is then passed on raw).
fn worker_exited(shared: &Shared, items: &[Value]) -> Option<SwankEvent> {
    let note = text(items.get(1));
    let thread = note[WORKER_EXIT.len()..].trim().parse::<i64>().ok()?;
    let failed: Vec<_> = {
        let mut p = shared.pending.guard();
        p.gone_threads.insert(thread);
        let ids: Vec<u64> = p
            .calls
            .iter()
            .filter(|(_, (t, _))| *t == Thread::Id(thread))
            .map(|(id, _)| *id)
            .collect();
        ids.into_iter()
            .filter_map(|id| p.calls.remove(&id))
            .collect()
    };
    for (_, tx) in failed {
        let _ = tx.send(Err(SwankError::ThreadGone(thread)));
    }
    Some(SwankEvent::WorkerExited { thread })
}

/// The messages that only become events (the debugger's, prompts, new
/// packages and features); None for any other (passed on raw).
fn plain_event(head: &str, items: &[Value]) -> Option<SwankEvent> {
    Some(match head {
        "DEBUG" if items.len() >= 7 => SwankEvent::Debug {
            thread: int(items.get(1)),
            level: int(items.get(2)),
            condition: items[3].clone(),
            restarts: items[4].clone(),
            frames: items[5].clone(),
            continuations: items[6].clone(),
        },
        "DEBUG-ACTIVATE" => SwankEvent::DebugActivate {
            thread: int(items.get(1)),
            level: int(items.get(2)),
        },
        "DEBUG-RETURN" => SwankEvent::DebugReturn {
            thread: int(items.get(1)),
            level: int(items.get(2)),
        },
        "NEW-PACKAGE" => SwankEvent::NewPackage {
            name: text(items.get(1)),
            prompt: text(items.get(2)),
        },
        "READ-STRING" => SwankEvent::ReadString {
            thread: int(items.get(1)),
            tag: items.get(2).cloned().unwrap_or_else(Value::nil),
        },
        "Y-OR-N-P" => SwankEvent::YOrNP {
            thread: int(items.get(1)),
            tag: items.get(2).cloned().unwrap_or_else(Value::nil),
            question: text(items.get(3)),
        },
        "NEW-FEATURES" => SwankEvent::NewFeatures(items.get(1).cloned().unwrap_or_else(Value::nil)),
        "INDENTATION-UPDATE" => {
            SwankEvent::IndentationUpdate(items.get(1).cloned().unwrap_or_else(Value::nil))
        }
        _ => return None,
    })
}

/// The id at the end of an `(:emacs-rex ... ID)` text, if it looks like one.
fn trailing_request_id(packet: &str) -> Option<u64> {
    if !packet.trim_start().starts_with("(:emacs-rex") {
        return None;
    }
    trailing_id(packet)
}

/// The integer just before the final `)` of a message.
fn trailing_id(packet: &str) -> Option<u64> {
    let body = packet.trim_end().strip_suffix(')')?;
    let start = body.rfind(|c: char| !c.is_ascii_digit())? + 1;
    body[start..].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_length_counts_bytes() {
        let f = encode_frame("(\"é😀\")").unwrap();
        assert_eq!(&f[..6], b"00000a");
        assert_eq!(f.len(), 16);
        assert!(matches!(
            encode_frame(&"x".repeat(MAX_MESSAGE_BYTES + 1)),
            Err(SwankError::MessageTooLarge(_))
        ));
    }

    #[test]
    fn thread_designators() {
        assert_eq!(Thread::T.to_string(), "t");
        assert_eq!(Thread::ReplThread.to_string(), ":repl-thread");
        assert_eq!(Thread::Id(7).to_string(), "7");
    }

    #[test]
    fn request_id_from_reader_error_packet() {
        assert_eq!(
            trailing_request_id("(:emacs-rex (foo \"CL-USER\" t 42)"),
            Some(42)
        );
        assert_eq!(trailing_request_id("(:emacs-rex (#<) \"X\" t 7)"), Some(7));
        assert_eq!(trailing_request_id("(:emacs-pong 1 2)"), None);
        assert_eq!(trailing_id("(:return (:ok #<weird) 9)"), Some(9));
    }

    #[test]
    fn errors_keep_their_words() {
        let cases = [
            (
                SwankError::Io("connect: refused".into()),
                "Swank connection I/O error: connect: refused",
            ),
            (
                SwankError::Disconnected("EOF".into()),
                "Swank connection closed: EOF",
            ),
            (
                SwankError::Protocol("bad".into()),
                "Swank protocol error: bad",
            ),
            (
                SwankError::ThreadGone(7),
                "Swank worker thread 7 has exited; its requests cannot be answered",
            ),
            (
                SwankError::MessageTooLarge(16777216),
                "message of 16777216 bytes exceeds Swank's limit of 16777215 bytes",
            ),
        ];
        for (e, words) in cases {
            assert_eq!(e.to_string(), words);
        }
    }
}
