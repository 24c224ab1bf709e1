//! Deaths: noticing that an image is gone, what a call it ended says,
//! the lost-state notice, and the crash-loop guard.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::image::implementation::LispKind;
use crate::image::{ImageError, ImageMode};

use super::live::Live;
use super::{send_note, Image, Inner, NoteLevel};
use crate::sync::MutexExt;

impl Image {
    /// After an abort, whether the connection ends within a moment.
    pub(super) async fn dies_soon(&self, live: &Live) -> bool {
        if live.mode == ImageMode::Attached {
            return false;
        }
        for _ in 0..20 {
            if live.client.is_closed() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        live.client.is_closed()
    }

    pub(super) async fn death_error(&self, live: &Live) -> ImageError {
        if live.stopped_on_purpose.load(Ordering::SeqCst) {
            return ImageError::Died(
                "the Lisp image was stopped on request (restart or shutdown) while this call \
                 ran; the next call starts a fresh image"
                    .into(),
            );
        }
        match live.mode {
            ImageMode::Local | ImageMode::Launched => {
                let status = live
                    .exit_status(Duration::from_secs(2))
                    .await
                    .unwrap_or_else(|| "connection lost".into());
                ImageError::Died(death_text(live, &status))
            }
            ImageMode::Attached => ImageError::Died(format!(
                "lost the connection to the attached Swank at {} while running this call; \
                 the next call reconnects",
                live.address
            )),
        }
    }
}

impl Image {
    pub(super) fn check_crash_loop(&self) -> Result<(), ImageError> {
        let cfg = &self.inner.config;
        let mut deaths = self.inner.deaths.guard();
        while deaths
            .front()
            .is_some_and(|(t, _)| t.elapsed() > cfg.crash_window)
        {
            deaths.pop_front();
        }
        if self.inner.mode.owned() && deaths.len() >= cfg.crash_limit {
            let last = deaths
                .back()
                .map(|(_, why)| why.clone())
                .unwrap_or_default();
            self.inner.note(
                NoteLevel::Error,
                format!(
                    "Lisp image crash loop: it died {} times in {} minutes (last: {last}); \
                     not restarting it until image-restart",
                    deaths.len(),
                    cfg.crash_window.as_secs().div_ceil(60)
                ),
            );
            return Err(ImageError::CrashLoop(format!(
                "the Lisp image died {} times in the last {} minutes (last: {last}); not \
                 restarting it automatically. Look at the log for the cause (e.g. heap \
                 exhaustion, a form that exits), then restart it explicitly with the image-restart tool.",
                deaths.len(),
                cfg.crash_window.as_secs().div_ceil(60)
            )));
        }
        Ok(())
    }
}

/// What a call that the local image's death ended says: the cause (from
/// the Lisp's last words) before the exit status, the fatal lines the Lisp
/// printed, and the first frames of the user's code in its backtrace.
fn death_text(live: &Live, status: &str) -> String {
    let death = live.last_words.death();
    let hint = live.kind.map_or("", LispKind::heap_hint);
    let headline = match death.cause {
        Some(c) => format!("{}; {status}", c.text(hint)),
        None => status.to_string(),
    };
    let mut text = format!(
        "the Lisp image died ({headline}) while running this call: its state (definitions, \
         loaded systems, variables) is lost. The next call starts a fresh image."
    );
    if !death.fatal.is_empty() {
        text.push_str("\nThe Lisp's last words:");
        for line in &death.fatal {
            text.push_str("\n  ");
            text.push_str(line);
        }
    }
    if !death.frames.is_empty() {
        text.push_str(&format!(
            "\nIn your code (innermost first): {}",
            death.frames.join(" <- ")
        ));
    }
    text
}

pub(super) fn on_connection_end(inner: &Inner, live: &Arc<Live>, why: &str) {
    live.dead.store(true, Ordering::SeqCst);
    if live.stopped_on_purpose.load(Ordering::SeqCst) {
        return;
    }
    // A local image whose connection is gone is unusable even if the
    // process still runs: make sure it does not linger.
    live.request_kill();
    let status = live
        .exit
        .borrow()
        .clone()
        .unwrap_or_else(|| why.to_string());
    tracing::warn!(generation = live.generation, status = %status, mode = %live.mode, "Lisp image lost");
    // The socket usually closes before the process is reaped: give the exit
    // status a moment, so the note says how the image ended.
    let (notes, dead, why) = (inner.notes.clone(), live.clone(), why.to_string());
    tokio::spawn(async move {
        let status = dead
            .exit_status(Duration::from_secs(2))
            .await
            .unwrap_or(why);
        let cause = dead
            .death_cause()
            .map(|c| format!(": {c}"))
            .unwrap_or_default();
        let next = if dead.mode.owned() {
            " and the next call starts a fresh one"
        } else {
            ""
        };
        send_note(
            &notes,
            NoteLevel::Error,
            format!(
                "Lisp image lost (generation {}, {status}{cause}); its state is gone{next}",
                dead.generation
            ),
        );
    });
    if live.mode.owned() {
        inner
            .deaths
            .guard()
            .push_back((Instant::now(), status.clone()));
        *inner.state_lost.guard() = Some((
            live.generation,
            "The Lisp image died and a fresh one was started: everything defined or loaded \
             before (functions, variables, systems, the current package) is gone."
                .to_string(),
        ));
    }
}
