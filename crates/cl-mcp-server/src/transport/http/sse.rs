//! A POST's answer as an SSE stream, and `CancelOnDrop`: the cancellation
//! of a POST's requests when its handler or stream is dropped before the
//! answer.

use std::time::Duration;

use axum::http::HeaderValue;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::stream;
use tokio_util::sync::CancellationToken;

use super::responses::is_final;
use crate::protocol::outbound::OutboundRx;

/// Cancels the requests of one POST unless disarmed: dropped with the
/// response (the client went away) before the final answer was sent.
pub(super) struct CancelOnDrop(pub(super) Vec<CancellationToken>);

impl CancelOnDrop {
    pub(super) fn disarm(&mut self) {
        self.0.clear();
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let running: Vec<_> = self.0.drain(..).filter(|c| !c.is_cancelled()).collect();
        if !running.is_empty() {
            tracing::info!(
                requests = running.len(),
                "client closed the request's stream; cancelling it"
            );
            for c in running {
                c.cancel();
            }
        }
    }
}

/// An SSE response: `first`, then messages from `rx`, ending after the
/// final answer; `guard` cancels the request if the stream is dropped early.
pub(super) fn sse_until_final(first: String, rx: OutboundRx, guard: CancelOnDrop) -> Response {
    struct StreamState {
        pending: Option<String>,
        rx: OutboundRx,
        guard: CancelOnDrop,
        done: bool,
    }
    let state = StreamState {
        pending: Some(first),
        rx,
        guard,
        done: false,
    };
    let events = stream::unfold(state, |mut st| async move {
        if st.done {
            return None;
        }
        let message = match st.pending.take() {
            Some(m) => m,
            None => match st.rx.recv().await {
                Some(m) => m,
                None => {
                    st.guard.disarm();
                    return None;
                }
            },
        };
        if is_final(&message) {
            st.done = true;
            st.guard.disarm();
        }
        let event = Event::default().event("message").data(message);
        Some((Ok::<_, std::convert::Infallible>(event), st))
    });
    let mut response = Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response();
    response
        .headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}
