//! The evaluation channel: `evaluate-lisp`'s requests straight to the
//! image's persistent evaluation thread, on a second loopback socket
//! (`lisp/direct.lisp`).
//!
//! Through Swank a request to a worker thread is handed from Swank's reader
//! thread to its control thread to the worker and back to the control
//! thread, and on this side from the client's reader task to the caller:
//! most of a warm round trip. Here the evaluation thread reads its own
//! requests and writes its replies, and the calling task writes the request
//! and reads the reply itself. The framing is Swank's (6 hex digits of
//! UTF-8 length), the reply is what Swank's `:return` carries.
//!
//! The channel is opened once per image (local images with threads only)
//! and guarded by a one-time token, sent first. A call owns the channel
//! while it runs ([`Image::eval`](super::Image::eval) takes it out of its
//! slot); a call that is abandoned midway drops it, and later evaluations go
//! back to a Swank worker thread.

use lisp_syntax::data::{self, Value};
use swank_client::{encode_frame, RexOutcome, SwankError};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// An open evaluation channel.
pub(super) struct DirectChannel {
    io: BufReader<TcpStream>,
}

impl DirectChannel {
    /// Connects to the channel the image opened on `port` and proves the
    /// token; returns once the thread serving it said it is ready.
    pub(super) async fn connect(port: u16, token: &str) -> Result<DirectChannel, SwankError> {
        let stream = TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| SwankError::Io(format!("connect to the evaluation channel: {e}")))?;
        let _ = stream.set_nodelay(true);
        let mut ch = DirectChannel {
            io: BufReader::with_capacity(64 * 1024, stream),
        };
        ch.write(token).await?;
        let ready = ch.read().await?;
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
        let reply = self.read().await?;
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
        self.io
            .get_mut()
            .write_all(&frame)
            .await
            .map_err(|e| SwankError::Disconnected(format!("evaluation channel: {e}")))
    }

    async fn read(&mut self) -> Result<String, SwankError> {
        let gone = |e: std::io::Error| SwankError::Disconnected(format!("evaluation channel: {e}"));
        let mut header = [0u8; 6];
        self.io.read_exact(&mut header).await.map_err(gone)?;
        let len = std::str::from_utf8(&header)
            .ok()
            .and_then(|h| usize::from_str_radix(h, 16).ok())
            .ok_or_else(|| {
                SwankError::Protocol(format!(
                    "bad message header {:?} on the evaluation channel",
                    String::from_utf8_lossy(&header)
                ))
            })?;
        let mut buf = vec![0u8; len];
        self.io.read_exact(&mut buf).await.map_err(gone)?;
        String::from_utf8(buf).map_err(|e| SwankError::Protocol(format!("reply is not UTF-8: {e}")))
    }
}
