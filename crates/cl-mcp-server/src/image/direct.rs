//! The evaluation channel: `evaluate-lisp`'s requests straight to the
//! image's persistent evaluation thread, on a second socket
//! (`lisp/direct.lisp`): an abstract Unix socket where the image can open
//! one (SBCL on Linux), else loopback TCP.
//!
//! Through Swank a request to a worker thread is handed from Swank's reader
//! thread to its control thread to the worker and back to the control
//! thread, and on this side from the client's reader task to the caller:
//! most of a warm round trip. Here the evaluation thread reads its own
//! requests and writes its replies, and the calling task writes the request
//! and reads the reply itself, first by reading the socket in a loop for a
//! short while ([`SPIN`]), since a reply usually comes sooner than a
//! sleeping thread is woken. The framing is Swank's (6 hex digits of UTF-8
//! length), the reply is what Swank's `:return` carries.
//!
//! The channel is opened once per image (local images with threads only)
//! and guarded by a one-time token, sent first. A call owns the channel
//! while it runs ([`Image::eval`](super::Image::eval) takes it out of its
//! slot); a call that is abandoned midway drops it, and later evaluations go
//! back to a Swank worker thread.

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use lisp_syntax::data::{self, Value};
use swank_client::{encode_frame, RexOutcome, SwankError};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpStream, UnixStream};

/// How long a call reads the socket in a loop for its reply before it
/// waits for the runtime to wake it. On a virtual machine whose idle cores
/// halt, waking a sleeping thread costs 30–80 µs, as much as a short
/// evaluation takes in the image; most replies (an expression, a `defun`)
/// arrive within this window, and a longer evaluation pays at most this
/// much of a core once. The loop yields the core at each turn, so a thread
/// the scheduler put on it (the image's own, on a small machine) runs.
/// Meanwhile this runtime worker runs nothing else; the others steal its
/// queued tasks.
const SPIN: Duration = Duration::from_micros(500);

/// Where the image listens for the channel: an abstract Unix socket
/// (SBCL on Linux), else a loopback TCP port.
pub(super) enum Address {
    Local(String),
    Port(u16),
}

enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    async fn connect(address: &Address) -> std::io::Result<Stream> {
        match address {
            Address::Local(name) => {
                // A Unix connect blocks while the listener's backlog is
                // full (another local process may have filled it): off the
                // runtime's workers, so the caller's timeout still holds.
                let name = name.clone();
                let s = tokio::task::spawn_blocking(move || {
                    use std::os::linux::net::SocketAddrExt;
                    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
                    let s = std::os::unix::net::UnixStream::connect_addr(&addr)?;
                    s.set_nonblocking(true)?;
                    Ok::<_, std::io::Error>(s)
                })
                .await
                .map_err(std::io::Error::other)??;
                Ok(Stream::Unix(UnixStream::from_std(s)?))
            }
            Address::Port(port) => {
                let s = TcpStream::connect(("127.0.0.1", *port)).await?;
                let _ = s.set_nodelay(true);
                Ok(Stream::Tcp(s))
            }
        }
    }

    async fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Stream::Unix(s) => s.write_all(bytes).await,
            Stream::Tcp(s) => s.write_all(bytes).await,
        }
    }

    async fn readable(&self) -> std::io::Result<()> {
        match self {
            Stream::Unix(s) => s.readable().await,
            Stream::Tcp(s) => s.readable().await,
        }
    }

    fn try_read(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Unix(s) => s.try_read(buf),
            Stream::Tcp(s) => s.try_read(buf),
        }
    }

    fn fd(&self) -> std::os::fd::RawFd {
        match self {
            Stream::Unix(s) => s.as_raw_fd(),
            Stream::Tcp(s) => s.as_raw_fd(),
        }
    }
}

/// An open evaluation channel.
pub(super) struct DirectChannel {
    stream: Stream,
    /// Bytes read and not yet taken; `taken` of them were taken.
    buf: Vec<u8>,
    taken: usize,
}

impl DirectChannel {
    /// "unix" or "tcp": what the channel runs on, for `image-info`.
    pub(super) fn socket_kind(&self) -> &'static str {
        match self.stream {
            Stream::Unix(_) => "unix",
            Stream::Tcp(_) => "tcp",
        }
    }

    /// Connects to the channel the image opened at `address` and proves
    /// the token; returns once the thread serving it said it is ready.
    pub(super) async fn connect(
        address: &Address,
        token: &str,
    ) -> Result<DirectChannel, SwankError> {
        let stream = Stream::connect(address)
            .await
            .map_err(|e| SwankError::Io(format!("connect to the evaluation channel: {e}")))?;
        let mut ch = DirectChannel {
            stream,
            buf: Vec::with_capacity(64 * 1024),
            taken: 0,
        };
        ch.write(token).await?;
        let ready = ch.read(None).await?;
        if !ready.trim().eq_ignore_ascii_case("(:ready)") {
            return Err(SwankError::Protocol(format!(
                "unexpected greeting on the evaluation channel: {ready}"
            )));
        }
        Ok(ch)
    }

    /// Evaluates `form` (read in Swank's I/O package: every symbol
    /// qualified) with `package` as `*package*`.
    pub(super) async fn call(
        &mut self,
        form: &str,
        package: &str,
    ) -> Result<RexOutcome, SwankError> {
        self.write(&format!("({} {form})", swank_client::lisp_string(package)))
            .await?;
        let reply = self.read(Some(Instant::now() + SPIN)).await?;
        let v = data::read(&reply)
            .map_err(|e| SwankError::Protocol(format!("unreadable reply ({e}): {reply}")))?;
        match v.as_list() {
            Some([k, v]) if k.is_keyword("ok") => Ok(RexOutcome::Ok(v.clone())),
            Some([k, v]) if k.is_keyword("abort") => {
                Ok(RexOutcome::Abort(v.as_str().map(str::to_string)))
            }
            _ => Err(SwankError::Protocol(format!(
                "unexpected reply on the evaluation channel: {}",
                Value::clone(&v)
            ))),
        }
    }

    async fn write(&mut self, payload: &str) -> Result<(), SwankError> {
        let frame = encode_frame(payload)?;
        self.stream
            .write_all(&frame)
            .await
            .map_err(|e| SwankError::Disconnected(format!("evaluation channel: {e}")))
    }

    /// Reads one message; until `spin` (if given) it reads the socket in a
    /// loop instead of waiting to be woken.
    async fn read(&mut self, mut spin: Option<Instant>) -> Result<String, SwankError> {
        self.fill(6, &mut spin).await?;
        let header = &self.buf[self.taken..self.taken + 6];
        let len = std::str::from_utf8(header)
            .ok()
            .and_then(|h| usize::from_str_radix(h, 16).ok())
            .ok_or_else(|| {
                SwankError::Protocol(format!(
                    "bad message header {:?} on the evaluation channel",
                    String::from_utf8_lossy(header)
                ))
            })?;
        self.fill(6 + len, &mut spin).await?;
        let start = self.taken + 6;
        let message = String::from_utf8(self.buf[start..start + len].to_vec())
            .map_err(|e| SwankError::Protocol(format!("reply is not UTF-8: {e}")));
        self.taken = start + len;
        if self.taken == self.buf.len() {
            self.buf.clear();
            self.taken = 0;
            // A large reply's buffer is not kept for the image's lifetime.
            if self.buf.capacity() > 1 << 20 {
                self.buf = Vec::with_capacity(64 * 1024);
            }
        }
        message
    }

    /// Reads until `n` bytes are buffered.
    async fn fill(&mut self, n: usize, spin: &mut Option<Instant>) -> Result<(), SwankError> {
        let gone = |e: std::io::Error| SwankError::Disconnected(format!("evaluation channel: {e}"));
        while self.buf.len() - self.taken < n {
            if self.taken > 0 {
                self.buf.drain(..self.taken);
                self.taken = 0;
            }
            let had = self.buf.len();
            let want = (n - had).max(16 * 1024);
            self.buf.resize(had + want, 0);
            let got = loop {
                if let Some(until) = *spin {
                    match recv_now(&self.stream, &mut self.buf[had..]) {
                        Ok(got) => break Ok(got),
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            if Instant::now() < until {
                                std::thread::yield_now();
                                continue;
                            }
                            *spin = None;
                        }
                        Err(e) => break Err(e),
                    }
                }
                if let Err(e) = self.stream.readable().await {
                    break Err(e);
                }
                match self.stream.try_read(&mut self.buf[had..]) {
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                    r => break r,
                }
            };
            match got {
                Ok(0) => {
                    self.buf.truncate(had);
                    return Err(gone(std::io::ErrorKind::UnexpectedEof.into()));
                }
                Ok(got) => self.buf.truncate(had + got),
                Err(e) => {
                    self.buf.truncate(had);
                    return Err(gone(e));
                }
            }
        }
        Ok(())
    }
}

/// One non-blocking read straight from the socket, not through the
/// runtime's record of its readiness (which only changes when the runtime
/// polls): what lets a call see its reply while it spins.
fn recv_now(stream: &Stream, buf: &mut [u8]) -> std::io::Result<usize> {
    // SAFETY: the descriptor is the stream's, open for as long as the
    // borrow; `buf` is valid for writes of its length.
    let n = unsafe {
        libc::recv(
            stream.fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}
