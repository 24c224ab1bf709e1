//! Getting a live image: reuse the running one or start (or attach) anew
//! under the slot's lock; `--max-images` permits; stopping; and stopping
//! an idle image (`--image-idle-secs`).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::image::{ImageError, ImageMode};

use super::live::Live;
use super::{Image, Inner, NoteLevel};
use crate::sync::MutexExt;

impl Image {
    pub(super) fn refuse_attached(&self, what: &str) -> Result<(), ImageError> {
        if self.inner.mode == ImageMode::Attached {
            return Err(ImageError::Attached(format!(
                "cannot {what} an attached image: it belongs to the user's own Lisp session \
                 (--swank); restart it from there"
            )));
        }
        Ok(())
    }

    pub(super) async fn stop(&self) {
        let mut slot = self.inner.slot.lock().await;
        if let Some(live) = slot.take() {
            live.stopped_on_purpose.store(true, Ordering::SeqCst);
            live.dead.store(true, Ordering::SeqCst);
            live.request_kill();
            if live.mode.owned() {
                // A launcher may take a moment to clean up (a namespace,
                // a pod): its exit is the image's.
                live.exit_status(Duration::from_secs(if live.mode == ImageMode::Local {
                    5
                } else {
                    15
                }))
                .await;
            }
        }
        *self.inner.current.guard() = None;
    }
}

impl Image {
    /// The running image, starting one if there is none (or it died).
    pub(super) async fn live(&self) -> Result<Arc<Live>, ImageError> {
        // Read before waiting for the lock: a start that fails while this
        // caller waits is its answer (see `live_or_start`).
        let seen = self.inner.starts_ended.load(Ordering::SeqCst);
        {
            let slot = self.inner.slot.lock().await;
            *self.inner.last_used.guard() = Instant::now();
            if let Some(l) = slot.as_ref().filter(|l| !l.gone()) {
                return Ok(l.clone());
            }
        }
        // A start runs in a task of its own: a caller given up midway (a
        // call's timeout, a cancelled request, a queued call that got its
        // turn first) must not drop a start half done, killing the new
        // image and spending a generation, so the next caller starts yet
        // another.
        let this = self.clone();
        tokio::spawn(async move { this.live_or_start(seen).await })
            .await
            .unwrap_or_else(|e| {
                Err(ImageError::StartFailed(format!(
                    "the start task failed: {e}"
                )))
            })
    }

    /// `seen`: how many starts had ended when the caller came; a start
    /// that failed since (one it waited for under the lock, the background
    /// start at the handshake say) is its answer too: a launcher that hangs
    /// costs one start timeout, not one per waiting caller.
    pub(super) async fn live_or_start(&self, seen: u64) -> Result<Arc<Live>, ImageError> {
        let mut slot = self.inner.slot.lock().await;
        // Under the slot's lock, so the idle reaper (which holds it while it
        // decides) never stops an image a call is about to use.
        *self.inner.last_used.guard() = Instant::now();
        if let Some(l) = slot.as_ref().filter(|l| !l.gone()) {
            return Ok(l.clone());
        }
        if let Some((_, why)) = self
            .inner
            .failed_start
            .guard()
            .as_ref()
            .filter(|(n, _)| *n > seen)
        {
            return Err(why.clone());
        }
        let result = self.start_under_lock().await;
        let ended = self.inner.starts_ended.fetch_add(1, Ordering::SeqCst) + 1;
        let live = match result {
            Ok(live) => live,
            Err(e) => {
                *self.inner.failed_start.guard() = Some((ended, e.clone()));
                return Err(e);
            }
        };
        *slot = Some(live.clone());
        *self.inner.current.guard() = Some(live.clone());
        *self.inner.last_used.guard() = Instant::now();
        Ok(live)
    }

    /// A fresh image (or connection), the slot's lock held by the caller.
    async fn start_under_lock(&self) -> Result<Arc<Live>, ImageError> {
        self.check_crash_loop()?;
        // Before a generation is counted: a refused call starts nothing.
        let permit = match self.inner.mode {
            ImageMode::Local | ImageMode::Launched => self.image_permit()?,
            ImageMode::Attached => None,
        };
        let generation = self.inner.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let live = match self.inner.mode {
            ImageMode::Local | ImageMode::Launched => {
                match self.start_owned(generation, permit).await {
                    Ok(live) => live,
                    Err(e) => {
                        // Failed starts count like deaths: a Lisp that cannot
                        // start is not retried on every call forever.
                        if let ImageError::StartFailed(why) = &e {
                            self.inner
                                .deaths
                                .guard()
                                .push_back((Instant::now(), format!("failed to start: {why}")));
                        }
                        return Err(e);
                    }
                }
            }
            ImageMode::Attached => self.attach(generation).await?,
        };
        Ok(live)
    }
}

impl Image {
    /// A permit of `--max-images` for a new local image, or the error that
    /// says the limit is reached and how to raise it.
    pub(super) fn image_permit(
        &self,
    ) -> Result<Option<tokio::sync::OwnedSemaphorePermit>, ImageError> {
        let Some(quota) = &self.inner.config.image_quota else {
            return Ok(None);
        };
        match quota.try_take() {
            Some(p) => Ok(Some(p)),
            None => {
                let max = quota.max();
                let idle = match self.inner.config.idle_timeout {
                    Some(d) => format!(
                        "another session's image is stopped after {} s without a call \
                         (--image-idle-secs)",
                        d.as_secs()
                    ),
                    None => "idle images are not reclaimed (start the server with \
                             --image-idle-secs S to reclaim them)"
                        .to_string(),
                };
                Err(ImageError::Limit(format!(
                    "No Lisp image for this session: the server already runs its limit of {max} \
                     image{} (--max-images {max}, env CL_MCP_MAX_IMAGES). This session gets one \
                     on a later call once another session ends or {idle}. To raise the limit, \
                     restart the server with --max-images N (or CL_MCP_MAX_IMAGES=N). File and \
                     source tools work meanwhile.",
                    if max == 1 { "" } else { "s" }
                )))
            }
        }
    }
}

/// `--image-idle-secs`: stops the local image once no call has used it for
/// `idle` (none running, none begun or ended since). The handle stays; the
/// next call starts a fresh image and hears that the state is gone.
pub(super) async fn reclaim_when_idle(inner: Weak<Inner>, idle: Duration) {
    let tick = (idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(5));
    loop {
        tokio::time::sleep(tick).await;
        let Some(inner) = inner.upgrade() else { return };
        let mut slot = inner.slot.lock().await;
        let Some(live) = slot.as_ref() else { continue };
        let idle_for = inner.last_used.guard().elapsed();
        if live.dead.load(Ordering::SeqCst)
            || inner.in_flight.load(Ordering::SeqCst) > 0
            || idle_for < idle
            || !live.mode.owned()
        {
            continue;
        }
        let live = slot.take().expect("checked above");
        live.stopped_on_purpose.store(true, Ordering::SeqCst);
        live.dead.store(true, Ordering::SeqCst);
        live.request_kill();
        *inner.current.guard() = None;
        drop(slot);
        let secs = idle.as_secs();
        tracing::info!(
            generation = live.generation,
            pid = live.pid,
            idle_secs = secs,
            "Lisp image stopped for idleness (--image-idle-secs)"
        );
        inner.note(
            NoteLevel::Warning,
            format!(
                "Lisp image (generation {}) stopped after {secs} s without a call \
                 (--image-idle-secs); its state is gone and the next call starts a fresh one",
                live.generation
            ),
        );
        *inner.state_lost.guard() = Some((
            live.generation,
            format!(
                "The Lisp image was stopped after {secs} s without a call (--image-idle-secs \
                 {secs}) and a fresh one was started: everything defined or loaded before \
                 (functions, variables, systems, the current package) is gone."
            ),
        ));
    }
}
