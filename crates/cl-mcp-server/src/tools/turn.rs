//! The evaluation turn of an image: its evaluations (`evaluate-lisp`,
//! `inspect-object`, `profile-code`) run one at a time, in arrival order.
//! The turn knows which evaluation holds it and since when, so a call that
//! has to wait can say what it waits behind, and the wait counts against
//! the call's own timeout. Builds (compiling, ASDF loads and tests) queue
//! the same way on a build turn of their own ([`EvalTurn::for_builds`]).

use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::ToolError;
use crate::sync::MutexExt;

/// How often a waiting call's status line is refreshed.
const WAITING_REFRESH: Duration = Duration::from_millis(500);
/// A wait shorter than this is not worth a word in the result.
pub const QUEUE_NOTE_AFTER: Duration = Duration::from_millis(250);
/// How much of the holder's code a waiting call quotes.
const CODE_HEAD_CHARS: usize = 40;

/// One image's evaluation turn (shared by the sessions of a shared image).
#[derive(Default)]
pub struct EvalTurn {
    /// Tokio's mutex is fair: waiters get the turn in arrival order.
    queue: tokio::sync::Mutex<()>,
    holder: Mutex<Option<Holder>>,
    /// The build turn rather than the evaluation turn (only the wording
    /// differs).
    builds: bool,
}

/// The evaluation holding the turn.
#[derive(Clone, Debug)]
pub struct Holder {
    /// The evaluation's id (as `image-info` and the logs know it).
    pub id: u64,
    /// The start of its code, on one line.
    pub code: String,
    /// When it took the turn.
    pub since: Instant,
    /// A build (its `code` says what it builds; its id means nothing to
    /// the user).
    pub build: bool,
}

impl Holder {
    /// "evaluation 12 `(sleep 70)`, running 12 s", or "the build
    /// `lisp-compile-file a.lisp`, running 3 s".
    pub fn describe(&self) -> String {
        let code = if self.code.is_empty() {
            String::new()
        } else {
            format!(" `{}`", self.code)
        };
        let what = if self.build {
            "the build".to_string()
        } else {
            format!("evaluation {}", self.id)
        };
        format!("{what}{code}, running {} s", self.since.elapsed().as_secs())
    }
}

/// The turn, held until dropped.
pub struct Turn<'a> {
    _queue: tokio::sync::MutexGuard<'a, ()>,
    turn: &'a EvalTurn,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        // Cleared before the queue's guard is released (fields drop after
        // this), so the next holder's entry is never overwritten.
        *self.turn.holder.guard() = None;
    }
}

/// A turn that was taken, and how long the call queued for it.
pub struct Taken<'a> {
    pub turn: Turn<'a>,
    /// The part of the wait that counts against the call's timeout (from
    /// when the image was ready).
    pub counted: Duration,
    /// Set when the call waited longer than [`QUEUE_NOTE_AFTER`].
    pub queued: Option<Queued>,
}

/// What a call waited for before it ran.
#[derive(Clone, Debug)]
pub struct Queued {
    pub waited: Duration,
    /// The evaluation it first found holding the turn, described.
    pub behind: Option<String>,
}

impl Queued {
    /// The line a result gets: "[QUEUED] Started after waiting 4.9 s ...".
    pub fn note(&self) -> String {
        format!(
            "[QUEUED] Started after waiting {:.1} s for the image's evaluation turn{} (evaluations \
             of an image run one at a time, in arrival order).",
            self.waited.as_secs_f64(),
            self.behind
                .as_ref()
                .map(|b| format!(", behind {b} when this call arrived"))
                .unwrap_or_default()
        )
    }

    /// `queuedMs` of a structured result.
    pub fn millis(&self) -> i64 {
        self.waited.as_millis().min(i64::MAX as u128) as i64
    }
}

/// Why a call did not get the turn.
pub enum NotTaken {
    /// Its time ran out while it waited: nothing of it ran.
    TimedOut {
        behind: Option<Holder>,
        /// It waited for the build turn.
        build: bool,
    },
    Cancelled,
    /// The image it waited for could not be made ready.
    NotReady(ToolError),
}

impl NotTaken {
    /// The message for the call's result. `limit` is its timeout.
    pub fn message(&self, limit: Duration) -> String {
        match self {
            NotTaken::TimedOut {
                behind,
                build: true,
            } => format!(
                "[TIMEOUT] This call never started: it waited its whole timeout ({}) queued for \
                 the image's build turn{}, and nothing of it ran. Builds of an image (compiling, \
                 loading and testing systems) run one at a time, in arrival order. Call again \
                 once that build has finished, or give a longer timeoutSeconds.",
                super::eval::seconds_text(limit.as_secs_f64()),
                behind
                    .as_ref()
                    .map(|h| format!(", behind {}", h.describe()))
                    .unwrap_or_default()
            ),
            NotTaken::TimedOut { behind, .. } => format!(
                "[TIMEOUT] This call never started: it waited its whole timeout ({}) for the \
                 image's evaluation turn{}, and nothing of it ran. Evaluations of an image run \
                 one at a time, in arrival order. Call again once that evaluation has finished, \
                 stop it with image-interrupt, or give a longer timeoutSeconds.",
                super::eval::seconds_text(limit.as_secs_f64()),
                behind
                    .as_ref()
                    .map(|h| format!(", behind {}", h.describe()))
                    .unwrap_or_default()
            ),
            NotTaken::Cancelled => "Cancelled before the evaluation started (an earlier \
                                    evaluation of this image was still running)."
                .to_string(),
            NotTaken::NotReady(why) => why.to_string(),
        }
    }

    /// The call's error: why the image was not ready, or that the call
    /// never ran (see [`NotTaken::message`]).
    pub fn into_error(self, limit: Duration) -> ToolError {
        match self {
            NotTaken::NotReady(why) => why,
            other => ToolError::NotRun(other.message(limit)),
        }
    }
}

impl EvalTurn {
    /// An image's build turn.
    pub fn for_builds() -> EvalTurn {
        EvalTurn {
            builds: true,
            ..EvalTurn::default()
        }
    }

    /// The evaluation holding the turn now, if any.
    pub fn holder(&self) -> Option<Holder> {
        self.holder.guard().clone()
    }

    /// Waits for the turn for evaluation `id` running `code`, unless
    /// `cancel` fires first. Waiters get the turn in arrival order. `ready`
    /// resolves once the image is up: the wait counts against `limit` only
    /// from then on (a cold start, which the holder may be waiting for,
    /// is nobody's timeout). While it waits, `waiting` gets a status line
    /// ("waiting behind evaluation 12 `(sleep 70)`, running 12 s; queued
    /// 3 s") at once and every half second.
    pub async fn take(
        &self,
        (id, code): (u64, &str),
        limit: Duration,
        cancel: &CancellationToken,
        ready: impl Future<Output = Result<(), ToolError>>,
        waiting: impl Fn(String),
    ) -> Result<Taken<'_>, NotTaken> {
        let arrived = Instant::now();
        if let Ok(guard) = self.queue.try_lock() {
            return Ok(Taken {
                turn: self.hold(guard, id, code),
                counted: Duration::ZERO,
                queued: None,
            });
        }
        // Described now: "running N s" as the call found it.
        let first = self.holder().as_ref().map(Holder::describe);
        // Polled first in the loop below, so the call joins the queue now.
        let lock = self.queue.lock();
        tokio::pin!(lock);
        tokio::pin!(ready);
        let mut clock: Option<Instant> = None;
        let mut refresh = tokio::time::interval(WAITING_REFRESH);
        loop {
            let deadline = clock.map(|c| c + limit);
            tokio::select! {
                biased;
                guard = &mut lock => {
                    let waited = arrived.elapsed();
                    return Ok(Taken {
                        turn: self.hold(guard, id, code),
                        counted: clock.map_or(Duration::ZERO, |c| c.elapsed()),
                        queued: (waited >= QUEUE_NOTE_AFTER).then(|| Queued {
                            waited,
                            behind: first.clone(),
                        }),
                    });
                }
                _ = cancel.cancelled() => return Err(NotTaken::Cancelled),
                r = &mut ready, if clock.is_none() => match r {
                    Ok(()) => clock = Some(Instant::now()),
                    Err(why) => return Err(NotTaken::NotReady(why)),
                },
                _ = sleep_until_opt(deadline) => {
                    return Err(NotTaken::TimedOut { behind: self.holder(), build: self.builds })
                }
                _ = refresh.tick() => {
                    let queued = arrived.elapsed().as_secs();
                    waiting(match self.holder() {
                        Some(h) => format!("waiting behind {}; queued {queued} s", h.describe()),
                        None => format!(
                            "waiting for the image's {} turn; queued {queued} s",
                            if self.builds { "build" } else { "evaluation" }
                        ),
                    });
                }
            }
        }
    }

    fn hold<'a>(&'a self, guard: tokio::sync::MutexGuard<'a, ()>, id: u64, code: &str) -> Turn<'a> {
        *self.holder.guard() = Some(Holder {
            id,
            code: code_head(code),
            since: Instant::now(),
            build: self.builds,
        });
        Turn {
            _queue: guard,
            turn: self,
        }
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// The first [`CODE_HEAD_CHARS`] characters of `code`, its whitespace runs
/// made single spaces, with `…` when cut.
fn code_head(code: &str) -> String {
    let mut words = code
        .split_whitespace()
        .flat_map(|w| " ".chars().chain(w.chars()));
    words.next(); // the space before the first word
    let head: String = words.by_ref().take(CODE_HEAD_CHARS).collect();
    if words.next().is_some() {
        format!("{head}…")
    } else {
        head
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn ready() -> Result<(), ToolError> {
        Ok(())
    }

    #[test]
    fn code_heads_are_one_short_line() {
        assert_eq!(code_head("  (sleep\n\t 70) "), "(sleep 70)");
        assert_eq!(code_head(""), "");
        let long = format!("(progn {})", "(f) ".repeat(30));
        let head = code_head(&long);
        assert!(
            head.ends_with('…') && head.chars().count() == CODE_HEAD_CHARS + 1,
            "{head}"
        );
    }

    #[tokio::test]
    async fn a_waiting_call_hears_what_it_waits_behind_and_times_out_in_the_queue() {
        let turn = EvalTurn::default();
        let cancel = CancellationToken::new();
        let first = turn
            .take(
                (1, "(sleep 70)"),
                Duration::from_secs(1),
                &cancel,
                ready(),
                |_| {},
            )
            .await
            .ok()
            .unwrap();
        assert!(first.queued.is_none());
        assert_eq!(turn.holder().unwrap().id, 1);
        let heard = Mutex::new(Vec::new());
        let second = turn
            .take(
                (2, "(+ 1 2)"),
                Duration::from_millis(700),
                &cancel,
                ready(),
                |l| heard.guard().push(l),
            )
            .await;
        let Err(NotTaken::TimedOut {
            behind: Some(h),
            build: false,
        }) = second
        else {
            panic!("the second call got the turn");
        };
        assert_eq!(h.id, 1);
        let heard = heard.into_inner().unwrap();
        assert!(heard.len() >= 2, "{heard:?}");
        assert!(
            heard[0].starts_with("waiting behind evaluation 1 `(sleep 70)`, running 0 s"),
            "{heard:?}"
        );
        let message = NotTaken::TimedOut {
            behind: Some(h),
            build: false,
        }
        .message(Duration::from_millis(700));
        assert!(message.contains("never started"), "{message}");
        // Released: the next call takes it at once, and the holder is its.
        drop(first);
        assert!(turn.holder().is_none());
        let third = turn
            .take((3, "x"), Duration::from_secs(1), &cancel, ready(), |_| {})
            .await
            .ok()
            .unwrap();
        assert!(third.queued.is_none());
        assert_eq!(turn.holder().unwrap().code, "x");
    }

    #[tokio::test]
    async fn the_wait_counts_against_the_timeout_once_the_image_is_ready() {
        let turn = std::sync::Arc::new(EvalTurn::default());
        let cancel = CancellationToken::new();
        let first = turn
            .take(
                (1, "(start)"),
                Duration::from_secs(5),
                &cancel,
                ready(),
                |_| {},
            )
            .await
            .ok()
            .unwrap();
        let waiter = {
            let turn = turn.clone();
            let cancel = cancel.clone();
            tokio::spawn(async move {
                // The image is ready after 500 ms; the timeout is 600 ms,
                // less than the whole wait (650 ms).
                let starting = async {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    Ok(())
                };
                let t = turn
                    .take(
                        (2, "x"),
                        Duration::from_millis(600),
                        &cancel,
                        starting,
                        |_| {},
                    )
                    .await;
                t.ok().map(|t| (t.counted, t.queued.unwrap().waited))
            })
        };
        tokio::time::sleep(Duration::from_millis(650)).await;
        drop(first);
        let (counted, waited) = waiter.await.unwrap().expect("not timed out");
        assert!(counted < Duration::from_millis(600), "{counted:?}");
        assert!(waited >= Duration::from_millis(600), "{waited:?}");
    }

    #[tokio::test]
    async fn a_call_that_waited_says_how_long_and_behind_what() {
        let turn = std::sync::Arc::new(EvalTurn::default());
        let cancel = CancellationToken::new();
        let first = turn
            .take(
                (1, "(sleep 1)"),
                Duration::from_secs(5),
                &cancel,
                ready(),
                |_| {},
            )
            .await
            .ok()
            .unwrap();
        let waiter = {
            let turn = turn.clone();
            let cancel = cancel.clone();
            tokio::spawn(async move {
                let t = turn
                    .take(
                        (2, "(+ 1 2)"),
                        Duration::from_secs(5),
                        &cancel,
                        ready(),
                        |_| {},
                    )
                    .await
                    .ok()
                    .unwrap();
                t.queued.unwrap()
            })
        };
        tokio::time::sleep(Duration::from_millis(400)).await;
        drop(first);
        let queued = waiter.await.unwrap();
        assert!(queued.waited >= Duration::from_millis(350), "{queued:?}");
        let note = queued.note();
        assert!(note.contains("behind evaluation 1 `(sleep 1)`"), "{note}");
    }
}
