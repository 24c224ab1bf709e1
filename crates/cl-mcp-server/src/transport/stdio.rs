//! MCP over stdin/stdout.
//!
//! Where stdin and stdout are pipes or sockets (what an MCP client gives its
//! server) both are served on the runtime itself: each is opened again as a
//! private non-blocking descriptor registered with the runtime's poller, so
//! a request is read on the worker that then runs it and its answer is
//! written by a task woken on the worker that produced it, with no thread
//! in between. Anything else (a terminal, a file) is served by plain threads
//! doing blocking I/O. (Tokio's own stdin/stdout pay a blocking-pool
//! hand-off per read and per write, which showed up in every round trip.)

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
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
    let writer = match PipeEnd::open(stdout.as_raw_fd(), libc::O_WRONLY) {
        Some(end) => {
            let task = tokio::spawn(super::lines::write_lines(end, rx));
            Writer::Task(task)
        }
        None => Writer::Thread(
            std::thread::Builder::new()
                .name("stdout".into())
                .spawn(move || write_lines(stdout, rx))
                .expect("spawn the stdout thread"),
        ),
    };
    let conn = engine.connect(tx.clone());
    // Read on a runtime worker, not on the thread that blocks on the whole
    // server: a request task spawned from a worker starts on that worker as
    // soon as the reader waits again (no wake-up of another thread).
    let reading = {
        let (conn, tx, max) = (conn.clone(), tx.clone(), engine.config.max_message_bytes);
        tokio::spawn(async move {
            match PipeEnd::open(libc::STDIN_FILENO, libc::O_RDONLY) {
                Some(end) => {
                    let input = tokio::io::BufReader::with_capacity(256 * 1024, end);
                    serve_lines(input, &conn, &tx, max).await
                }
                None => serve_lines(stdin_reader(), &conn, &tx, max).await,
            }
        })
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
    conn.session().end().await;
    drop(conn);
    drop(tx);
    match writer {
        Writer::Task(task) => {
            let _ = task.await;
        }
        Writer::Thread(thread) => {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }
}

enum Writer {
    Task(tokio::task::JoinHandle<()>),
    Thread(std::thread::JoinHandle<()>),
}

/// One end of the client's pipe or socket, served on the runtime's poller.
struct PipeEnd(AsyncFd<OwnedFd>);

impl PipeEnd {
    /// `fd` opened again for this process alone, non-blocking, when it is a
    /// pipe or a socket; `None` otherwise (a terminal, a file, or a
    /// descriptor that cannot be opened again), for the threads to serve.
    ///
    /// A pipe is opened anew through /proc, so the non-blocking flag lives
    /// on a description of its own (fd 0 and a parent's copy keep theirs).
    /// A socket cannot be opened that way; its duplicate shares fd 0's or
    /// fd 1's description, which no other process holds: a client hands the
    /// server its own end of a socket pair, and every process this server
    /// starts gets stdin and stdout of its own.
    fn open(fd: RawFd, access: libc::c_int) -> Option<PipeEnd> {
        // SAFETY: fstat on a descriptor number into a zeroed stat buffer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat(2) fills the live stat buffer it is given.
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            return None;
        }
        let kind = st.st_mode & libc::S_IFMT;
        let own = match kind {
            libc::S_IFIFO => {
                let path = std::ffi::CString::new(format!("/proc/self/fd/{fd}")).ok()?;
                // SAFETY: open(2) with a valid C string; the result is checked.
                let new = unsafe {
                    libc::open(path.as_ptr(), access | libc::O_NONBLOCK | libc::O_CLOEXEC)
                };
                (new >= 0).then_some(new)?
            }
            libc::S_IFSOCK => {
                // SAFETY: fcntl(2) duplication and flag setting on an fd we
                // own; every result is checked.
                let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
                if new < 0 {
                    return None;
                }
                // SAFETY: fcntl(2) on the descriptor just duplicated.
                let flags = unsafe { libc::fcntl(new, libc::F_GETFL) };
                if flags < 0
                    // SAFETY: as above; only the status flags change.
                    || unsafe { libc::fcntl(new, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0
                {
                    // SAFETY: close(2) of our own duplicate, used nowhere else.
                    unsafe { libc::close(new) };
                    return None;
                }
                new
            }
            _ => return None,
        };
        // SAFETY: `own` is a fresh descriptor nothing else owns.
        let own = unsafe { OwnedFd::from_raw_fd(own) };
        let interest = if access == libc::O_RDONLY {
            tokio::io::Interest::READABLE
        } else {
            tokio::io::Interest::WRITABLE
        };
        // SAFETY: an OwnedFd keeps its one descriptor open until dropped.
        match unsafe { AsyncFd::register_with_interest(own, interest) } {
            Ok(fd) => Some(PipeEnd(fd)),
            Err(e) => {
                tracing::debug!(error = %e, fd, "stdio not pollable; serving it on a thread");
                None
            }
        }
    }
}

impl AsyncRead for PipeEnd {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        loop {
            let mut guard = ready!(self.0.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            let got = guard.try_io(|fd| {
                // SAFETY: read(2) into the initialized, unfilled part of `buf`.
                let n = unsafe {
                    libc::read(fd.as_raw_fd(), unfilled.as_mut_ptr().cast(), unfilled.len())
                };
                if n < 0 {
                    Err(std::io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            });
            match got {
                Ok(Ok(n)) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => {}
            }
        }
    }
}

impl AsyncWrite for PipeEnd {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        loop {
            let mut guard = ready!(self.0.poll_write_ready(cx))?;
            let put = guard.try_io(|fd| {
                // SAFETY: write(2) from a live slice.
                let n = unsafe { libc::write(fd.as_raw_fd(), data.as_ptr().cast(), data.len()) };
                if n < 0 {
                    Err(std::io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            });
            match put {
                Ok(Ok(n)) => return Poll::Ready(Ok(n)),
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => {}
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
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
