//! The [`Image`] handle: starts the image in the background, hands out
//! Swank calls, notices deaths, restarts on the next use, and refuses to
//! restart forever.
//!
//! The rooms: [`calls`] (the handle's API), [`lifecycle`] (getting a live
//! image, stopping, idleness), [`launch_plan`] and [`start_local`] (a local
//! image), [`start_launched`] (an image `--image-launcher` starts),
//! [`launcher_groups`] (launchers end with the server), [`attach`] (the
//! user's Swank), [`live`] (one running image),
//! [`events`] (Swank events), [`death`] (deaths, crash loops),
//! [`log_pump`] (the image's output), [`reaper`] (its exit), [`channel`],
//! [`secret`], [`proc_stat`].

mod attach;
mod calls;
mod channel;
mod death;
mod events;
mod launch_plan;
mod launcher_groups;
mod lifecycle;
mod live;
mod log_pump;
mod proc_stat;
mod reaper;
mod secret;
mod start_launched;
mod start_local;

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use swank_client::{RexOutcome, SwankEvent};
use tokio::sync::broadcast;

use super::implementation::LispKind;
use super::sandbox::SandboxReport;
use super::{ImageConfig, ImageError, ImageMode};
use crate::sync::MutexExt;
pub use launcher_groups::end_launchers;
use lifecycle::reclaim_when_idle;
use live::Live;

/// The answer to a call, plus the one-time notice that the image was
/// replaced since the previous successful call (its state is gone).
#[derive(Debug, Clone, PartialEq)]
pub struct ImageReply {
    /// What Swank returned.
    pub outcome: RexOutcome,
    /// Set on the first reply after an unexpected death of the image, e.g.
    /// "The Lisp image died (killed by signal 9) and was restarted: ...".
    pub state_lost: Option<String>,
}

/// An asynchronous Swank event, tagged with the image generation (each
/// fresh image or reconnection increments it).
#[derive(Debug, Clone)]
pub struct ImageEvent {
    /// Which image (1 for the first).
    pub generation: u64,
    /// The event.
    pub event: SwankEvent,
}

/// A snapshot of the current image.
#[derive(Debug, Clone)]
pub struct ImageInfo {
    /// Local or attached.
    pub mode: ImageMode,
    /// The Lisp process id, when known and alive.
    pub pid: Option<u32>,
    /// 1 for the first image, incremented by each restart or reconnection.
    pub generation: u64,
    /// When the current image was started (or attached to).
    pub started_at: Option<SystemTime>,
    /// The cached core it was started from (`None`: from source or attached).
    pub core: Option<PathBuf>,
    /// Where its Swank listens.
    pub swank_address: Option<String>,
    /// The long-lived thread evaluations run on (local images).
    pub worker_thread: Option<i64>,
    /// The implementation of a local image (`None`: attached, or none runs).
    pub kind: Option<LispKind>,
    /// What the running local image is confined to (`None`: attached, or
    /// not started).
    pub sandbox: Option<SandboxReport>,
    /// Its resource limits in words (`None`: attached, or not started).
    pub limits: Option<String>,
    /// The `--image-launcher` that started the image (`None`: local or
    /// attached); its sandbox and limits are the launcher's.
    pub launcher: Option<String>,
    /// Whether evaluations take the evaluation channel (see `direct`);
    /// `None` when no image runs.
    pub eval_channel: Option<bool>,
    /// What the open evaluation channel runs on: "unix" (an abstract Unix
    /// socket) or "tcp" (loopback).
    pub eval_socket: Option<&'static str>,
}

/// A handle on the session's Lisp image. Cheap to clone; clones share the
/// image. Local images are killed when the last handle is dropped.
#[derive(Clone)]
pub struct Image {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Image")
            .field("mode", &self.inner.mode)
            .finish_non_exhaustive()
    }
}

/// How much a lifecycle note matters (the protocol maps it to a log level).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoteLevel {
    Info,
    Warning,
    Error,
}

/// Something in the image's life a client may want to hear of: started,
/// core cache built, unusable core, lost (and why), crash loop.
#[derive(Clone, Debug)]
pub struct ImageNote {
    pub level: NoteLevel,
    pub text: String,
}

struct Inner {
    config: ImageConfig,
    /// Lifecycle notes, for whoever listens (see [`Image::notes`]).
    notes: broadcast::Sender<ImageNote>,
    mode: ImageMode,
    /// Held while starting, so concurrent callers share one start.
    slot: tokio::sync::Mutex<Option<Arc<Live>>>,
    /// The live image for synchronous queries (pid, info).
    current: Mutex<Option<Arc<Live>>>,
    events: broadcast::Sender<ImageEvent>,
    /// (generation that died, notice) until a newer image answers a call.
    state_lost: Mutex<Option<(u64, String)>>,
    /// What the next reply tells its caller once about how the image was
    /// started (a damaged cache discarded and rebuilt), beside the log and
    /// the `lisp-image` notification a client hears only with a log level.
    start_notice: Mutex<Option<String>>,
    deaths: Mutex<VecDeque<(Instant, String)>>,
    /// Starts that have ended, failed or not: a caller that waited for one
    /// (see [`Image::live`]) knows whether it ended while it waited.
    starts_ended: AtomicU64,
    /// The last start that failed (its number in `starts_ended`, and why):
    /// the answer of every caller that waited for it, instead of a start
    /// of its own that would double the wait.
    failed_start: Mutex<Option<(u64, ImageError)>>,
    generation: AtomicU64,
    core_build_failed: AtomicBool,
    /// Set when a start from the cached core failed and the core failed its
    /// check, so was discarded: `live` then starts once more at once.
    cache_discarded: AtomicBool,
    /// Request ids of calls whose debugger entries are answered by their
    /// caller (see [`Image::eval_debuggable`]), not aborted.
    debuggable: Mutex<std::collections::HashSet<u64>>,
    /// (Swank thread, level) of the debugger levels one of our requests
    /// claimed (a `debug: true` evaluation or a take-over, of any session
    /// sharing the image): never taken over by another session.
    claimed_threads: Mutex<std::collections::HashSet<(i64, i64)>>,
    /// When the last call began or ended (`--image-idle-secs`).
    last_used: Mutex<Instant>,
    /// Calls running now (an image with one is never idle: a long
    /// evaluation, a debugger waiting for its client).
    in_flight: AtomicUsize,
}

/// Marks a call in flight until dropped.
struct Busy<'a>(&'a Inner);

impl<'a> Busy<'a> {
    fn new(inner: &'a Inner) -> Busy<'a> {
        inner.in_flight.fetch_add(1, Ordering::SeqCst);
        *inner.last_used.guard() = Instant::now();
        Busy(inner)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        *self.0.last_used.guard() = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// See [`Image::claim_debugger`]; released when dropped.
pub struct DebuggerClaim {
    inner: Arc<Inner>,
    pub id: u64,
}

impl Drop for DebuggerClaim {
    fn drop(&mut self) {
        self.inner.debuggable.guard().remove(&self.id);
    }
}

impl Inner {
    fn note(&self, level: NoteLevel, text: String) {
        send_note(&self.notes, level, text);
    }
}

/// Sends a note if anyone listens (no listener is no error).
fn send_note(notes: &broadcast::Sender<ImageNote>, level: NoteLevel, text: String) {
    let _ = notes.send(ImageNote { level, text });
}

impl Image {
    /// Creates the handle and starts the image in the background (a local
    /// image, or the connection to `config.attach`). Never waits for it:
    /// the first call does. Must be called inside a Tokio runtime.
    pub fn new(config: ImageConfig) -> Image {
        let image = Image::new_idle(config);
        let bg = image.clone();
        tokio::spawn(async move {
            if let Err(e) = bg.live().await {
                tracing::warn!(error = %e, "background start of the Lisp image failed");
            }
        });
        image
    }

    /// Like [`Image::new`] but starts nothing until the first call.
    pub fn new_idle(config: ImageConfig) -> Image {
        let mode = if config.attach.is_some() {
            ImageMode::Attached
        } else if config.launcher.is_some() {
            ImageMode::Launched
        } else {
            ImageMode::Local
        };
        let (events, _) = broadcast::channel(1024);
        let (notes, _) = broadcast::channel(64);
        let idle = config.idle_timeout.filter(|_| mode.owned());
        let image = Image {
            inner: Arc::new(Inner {
                config,
                notes,
                mode,
                slot: tokio::sync::Mutex::new(None),
                current: Mutex::new(None),
                events,
                state_lost: Mutex::new(None),
                start_notice: Mutex::new(None),
                deaths: Mutex::new(VecDeque::new()),
                starts_ended: AtomicU64::new(0),
                failed_start: Mutex::new(None),
                generation: AtomicU64::new(0),
                core_build_failed: AtomicBool::new(false),
                cache_discarded: AtomicBool::new(false),
                debuggable: Mutex::new(Default::default()),
                claimed_threads: Mutex::new(Default::default()),
                last_used: Mutex::new(Instant::now()),
                in_flight: AtomicUsize::new(0),
            }),
        };
        if let (Some(idle), Ok(rt)) = (idle, tokio::runtime::Handle::try_current()) {
            rt.spawn(reclaim_when_idle(Arc::downgrade(&image.inner), idle));
        }
        image
    }

    /// Lifecycle notes from now on (the image's start, death and why,
    /// crash loops). Notes sent before subscribing are not replayed.
    pub fn notes(&self) -> broadcast::Receiver<ImageNote> {
        self.inner.notes.subscribe()
    }

    /// Local or attached.
    pub fn mode(&self) -> ImageMode {
        self.inner.mode
    }
    /// Waits until the image is up (starting it if needed).
    pub async fn ready(&self) -> Result<(), ImageError> {
        self.live().await.map(|_| ())
    }
}
