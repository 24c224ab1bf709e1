//! Swank events: forwarded to subscribers; what nobody else answers
//! (debugger entries nobody claimed, reads of standard input, y-or-n-p)
//! is answered here.

use std::sync::{Arc, Weak};

use lisp_syntax::data::Value;
use swank_client::{SwankEvent, Thread};

use crate::image::ImageMode;

use super::death::on_connection_end;
use super::live::Live;
use super::{Image, ImageEvent, Inner};
use crate::sync::MutexExt;

impl Image {
    /// Forwards events to subscribers, answers what nobody else can, and
    /// notices the end of the connection.
    pub(super) fn spawn_monitor(
        &self,
        live: &Arc<Live>,
        mut events: tokio::sync::mpsc::UnboundedReceiver<SwankEvent>,
    ) {
        let inner: Weak<Inner> = Arc::downgrade(&self.inner);
        let weak_live = Arc::downgrade(live);
        let generation = live.generation;
        tokio::spawn(async move {
            while let Some(event) = events.recv().await {
                let Some(inner) = inner.upgrade() else { return };
                let Some(live) = weak_live.upgrade() else {
                    return;
                };
                handle_event(&inner, &live, &event);
                let _ = inner.events.send(ImageEvent { generation, event });
            }
        });
    }
}

fn handle_event(inner: &Inner, live: &Arc<Live>, event: &SwankEvent) {
    match event {
        SwankEvent::Debug {
            thread,
            level,
            condition,
            continuations,
            ..
        } => {
            let claimed = continuations.as_list().is_some_and(|l| {
                let ids = inner.debuggable.guard();
                l.iter()
                    .filter_map(Value::as_i64)
                    .any(|id| ids.contains(&(id as u64)))
            });
            // In an attached image, a thread that is not serving one of
            // our requests is the user's: its debugger waits for them (or
            // for the agent to take it over), never aborted by us.
            let users = inner.mode == ImageMode::Attached
                && continuations.as_list().is_none_or(|l| l.is_empty());
            if claimed {
                inner.claimed_threads.guard().insert((*thread, *level));
            }
            if users {
                tracing::info!(
                    thread,
                    level,
                    "a thread of the user's image waits in the debugger"
                );
            } else if !claimed {
                let text = condition
                    .as_list()
                    .and_then(|l| l.first())
                    .and_then(|c| c.as_str())
                    .unwrap_or("?")
                    .to_string();
                tracing::warn!(
                    thread,
                    level,
                    condition = %text,
                    "a Lisp thread entered the debugger with nobody to answer; aborting it"
                );
                let client = live.client.clone();
                let thread = *thread;
                tokio::spawn(async move {
                    let _ = client
                        .rex(
                            "(swank:throw-to-toplevel)",
                            "COMMON-LISP-USER",
                            Thread::Id(thread),
                        )
                        .await;
                });
            }
        }
        SwankEvent::DebugReturn { thread, level } => {
            // Leaving a level leaves every level above it.
            inner
                .claimed_threads
                .guard()
                .retain(|(t, l)| t != thread || l < level);
        }
        SwankEvent::ReadString { thread, tag } => {
            // No terminal behind us: reading standard input gets end-of-file
            // (an empty answer is end-of-file for Swank's input stream).
            let msg = format!("(:emacs-return-string {thread} {tag} \"\")");
            answer(live, msg);
        }
        SwankEvent::YOrNP {
            thread,
            tag,
            question,
        } => {
            tracing::info!(%question, "answered the image's y-or-n-p with NIL");
            answer(live, format!("(:emacs-return {thread} {tag} nil)"));
        }
        SwankEvent::WriteString { text, .. } => {
            tracing::debug!(target: "lisp", output = %text, "image output");
        }
        SwankEvent::Disconnected(why) => on_connection_end(inner, live, why),
        _ => {}
    }
}

fn answer(live: &Arc<Live>, message: String) {
    let client = live.client.clone();
    tokio::spawn(async move {
        if let Err(e) = client.send_raw(&message).await {
            tracing::debug!(error = %e, "could not answer the image");
        }
    });
}
