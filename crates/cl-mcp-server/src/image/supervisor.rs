//! The [`Image`] handle: starts the image in the background, hands out
//! Swank calls, notices deaths, restarts on the next use, and refuses to
//! restart forever.

use std::collections::VecDeque;
use std::io::Read;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

use lisp_syntax::data::Value;
use swank_client::{lisp_string, RexOutcome, SwankClient, SwankError, SwankEvent, Thread};
use tokio::io::BufReader;
use tokio::sync::{broadcast, oneshot, watch};

use super::core_cache::{self, default_cache_dir, CoreCache, LaunchPlan};
use super::direct::{Address, DirectChannel};
use super::implementation::LispKind;
use super::last_words::{describe_exit, lisp_words, LastWords};
use super::limits;
use super::sandbox::{self, SandboxReport};
use super::{helpers, locate, ImageConfig, ImageError, ImageMode};

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
        *inner.last_used.lock().unwrap() = Instant::now();
        Busy(inner)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        *self.0.last_used.lock().unwrap() = Instant::now();
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
        self.inner.debuggable.lock().unwrap().remove(&self.id);
    }
}

struct Live {
    generation: u64,
    mode: ImageMode,
    client: SwankClient,
    pid: Option<u32>,
    worker: Mutex<Option<i64>>,
    /// The evaluation channel (`direct.rs`) and the Swank id of the thread
    /// serving it (then also `worker`). Empty while a call owns the channel,
    /// and for good once a call was abandoned midway.
    direct: tokio::sync::Mutex<Option<DirectChannel>>,
    direct_thread: Option<i64>,
    /// What the channel runs on (`DirectChannel::socket_kind`).
    direct_socket: Option<&'static str>,
    started_at: SystemTime,
    core: Option<PathBuf>,
    address: String,
    dead: AtomicBool,
    stopped_on_purpose: AtomicBool,
    /// How the process ended, once it has ("exit status 3", "signal 9").
    exit: watch::Receiver<Option<String>>,
    kill: Mutex<Option<oneshot::Sender<()>>>,
    /// The last lines the process wrote on stdout and stderr (local images).
    last_words: Arc<LastWords>,
    /// The implementation (local images).
    kind: Option<LispKind>,
    /// Its sandbox (local images).
    sandbox: Option<SandboxReport>,
    /// Its resource limits in words (local images).
    limits: Option<String>,
}

impl Live {
    /// Whether the evaluation channel is open (held while a request uses
    /// it: then it is).
    /// Whether this image is gone: `dead` is set by the connection's end
    /// handler, which may not have run yet, and a closed connection or an
    /// exited process is just as dead; a call must not be sent to it.
    fn gone(&self) -> bool {
        self.dead.load(Ordering::SeqCst) || self.client.is_closed() || self.exit.borrow().is_some()
    }

    fn channel_open(&self) -> bool {
        self.direct.try_lock().map_or(true, |d| d.is_some())
    }

    /// After the evaluation channel is gone, `worker` no longer names a
    /// Swank worker: the next evaluation starts one.
    fn drop_direct_worker(&self) {
        let mut w = self.worker.lock().unwrap();
        if w.is_some() && *w == self.direct_thread {
            *w = None;
        }
    }

    /// Whether Swank runs requests on threads here: without them (CLISP)
    /// every request runs in turn on the image's one thread, and an
    /// interrupt is a signal to the process.
    fn threads(&self) -> bool {
        self.kind.is_none_or(LispKind::has_threads)
    }
}

impl Live {
    /// Why the process probably died, in a few words, from its last words.
    fn death_cause(&self) -> Option<String> {
        let hint = self.kind.map_or("", LispKind::heap_hint);
        self.last_words.death().cause.map(|c| c.text(hint))
    }

    fn request_kill(&self) {
        if let Some(k) = self.kill.lock().unwrap().take() {
            let _ = k.send(());
        }
    }

    async fn exit_status(&self, wait: Duration) -> Option<String> {
        let mut rx = self.exit.clone();
        let _ = tokio::time::timeout(wait, rx.wait_for(|s| s.is_some())).await;
        let s = rx.borrow().clone();
        s
    }
}

/// CPU time (user + system, in clock ticks) of each thread of `pid`.
fn thread_cpu_ticks(pid: u32) -> Vec<(u32, u64)> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let tid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
        // Fields after the command name: state is the 3rd field of the
        // whole line, utime the 14th and stime the 15th.
        let rest: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let utime: u64 = rest.get(11)?.parse().ok()?;
        let stime: u64 = rest.get(12)?.parse().ok()?;
        Some((tid, utime + stime))
    })
    .collect()
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

impl Drop for Live {
    fn drop(&mut self) {
        // Nobody can reach this image any more: stop it.
        self.request_kill();
    }
}

static SOURCE_FALLBACK_LOGGED: AtomicBool = AtomicBool::new(false);
/// The sandbox's weakness on this kernel is logged once per process.
static SANDBOX_WARNING_LOGGED: AtomicBool = AtomicBool::new(false);
/// So is a process cap that cannot be enforced.
static CAP_WARNING_LOGGED: AtomicBool = AtomicBool::new(false);

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
        } else {
            ImageMode::Local
        };
        let (events, _) = broadcast::channel(1024);
        let (notes, _) = broadcast::channel(64);
        let idle = config.idle_timeout.filter(|_| mode == ImageMode::Local);
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

    /// Runs `form` (Lisp text read in Swank's I/O package: qualify every
    /// symbol) with `package` as the buffer package, on `thread`.
    pub async fn rex(
        &self,
        form: &str,
        package: &str,
        thread: Thread,
    ) -> Result<ImageReply, ImageError> {
        let live = self.live().await?;
        self.rex_on(&live, form, package, thread).await
    }

    /// Sends `form` to `live` (counted busy while it runs) and reads the
    /// reply.
    async fn rex_on(
        &self,
        live: &Arc<Live>,
        form: &str,
        package: &str,
        thread: Thread,
    ) -> Result<ImageReply, ImageError> {
        let _busy = Busy::new(&self.inner);
        let r = live.client.rex(form, package, thread).await;
        self.reply(live, r).await
    }

    /// [`Image::rex`] on the image that runs now, never starting one: for
    /// the status polls and interrupts of a running evaluation, which must
    /// not start a fresh image when that evaluation's image died (a poll
    /// given up midway would then leave a start half done).
    pub async fn rex_running(
        &self,
        form: &str,
        package: &str,
        thread: Thread,
    ) -> Result<ImageReply, ImageError> {
        let live = self
            .current_live()
            .filter(|l| !l.gone())
            .ok_or_else(|| ImageError::Died("no Lisp image is running".into()))?;
        self.rex_on(&live, form, package, thread).await
    }

    /// Runs `form` where evaluations run: the image's long-lived worker
    /// thread (local images; requests queue there in arrival order and
    /// keep thread-local state), or a fresh Swank thread (attached images,
    /// so the user's own threads are never borrowed).
    pub async fn eval(&self, form: &str, package: &str) -> Result<ImageReply, ImageError> {
        let live = self.live().await?;
        let _busy = Busy::new(&self.inner);
        if live.direct_thread.is_some() {
            // The evaluation channel: one request at a time, in arrival
            // order (the mutex is fair), like the Swank worker's queue.
            let mut slot = live.direct.lock().await;
            if let Some(mut ch) = slot.take() {
                // Dropped midway (an abandoned call), `ch` goes with the
                // future and the slot stays empty.
                let r = ch.call(form, package).await;
                let gone = matches!(r, Err(SwankError::Disconnected(_)));
                if r.is_ok() {
                    *slot = Some(ch);
                } else {
                    live.drop_direct_worker();
                }
                drop(slot);
                // The channel's thread ended (killed, or its abort restart
                // left the loop) while the image lives on: like a lost Swank
                // worker, the request runs again on a new worker below.
                if !gone || self.dies_soon(&live).await {
                    return self.reply(&live, r).await;
                }
            } else {
                live.drop_direct_worker();
            }
        }
        let thread = self.worker_of(&live).await?;
        let r = live.client.rex(form, package, thread).await;
        let gone = match &r {
            Err(SwankError::ThreadGone(_)) => true,
            Err(SwankError::Protocol(m)) => m.contains("Thread not found"),
            _ => false,
        };
        if let (true, Thread::Id(_)) = (gone, thread) {
            {
                // Someone ended the worker (e.g. its thread's abort restart):
                // start another and run the request there.
                *live.worker.lock().unwrap() = None;
                let thread = self.worker_of(&live).await?;
                let r = live.client.rex(form, package, thread).await;
                return self.reply(&live, r).await;
            }
        }
        self.reply(&live, r).await
    }

    /// Runs `form` on a fresh Swank thread whose debugger entries are left
    /// waiting for the caller: a [`SwankEvent::Debug`] whose continuations
    /// hold this call's request id (stored in `request_id` before the
    /// request leaves) is not aborted, and the thread serves requests sent
    /// to it ([`Thread::Id`]) until a restart lets the call finish.
    pub async fn eval_debuggable(
        &self,
        form: &str,
        package: &str,
        request_id: &AtomicU64,
    ) -> Result<ImageReply, ImageError> {
        let live = self.live().await?;
        let _busy = Busy::new(&self.inner);
        let id = live.client.new_request_id();
        request_id.store(id, Ordering::SeqCst);
        self.inner.debuggable.lock().unwrap().insert(id);
        struct Forget<'a>(&'a Inner, u64);
        impl Drop for Forget<'_> {
            fn drop(&mut self) {
                self.0.debuggable.lock().unwrap().remove(&self.1);
            }
        }
        let _forget = Forget(&self.inner, id);
        let r = live.client.rex_with_id(id, form, package, Thread::T).await;
        self.reply(&live, r).await
    }

    /// Whether Swank thread `thread` waits in a debugger claimed by one of
    /// our requests (an evaluation of some session sharing this image).
    pub fn debugger_claimed(&self, thread: i64) -> bool {
        self.inner
            .claimed_threads
            .lock()
            .unwrap()
            .iter()
            .any(|(t, _)| *t == thread)
    }

    /// Claims the debugger entries of a thread the caller will make enter
    /// the debugger with the returned id among its continuations (a thread
    /// taken over, `tools::debug`): they are not aborted while the claim
    /// lives.
    pub async fn claim_debugger(&self) -> Result<DebuggerClaim, ImageError> {
        let live = self.live().await?;
        let id = live.client.new_request_id();
        self.inner.debuggable.lock().unwrap().insert(id);
        Ok(DebuggerClaim {
            inner: self.inner.clone(),
            id,
        })
    }

    /// The thread [`Image::eval`] runs on (to interrupt it).
    pub async fn eval_thread(&self) -> Result<Thread, ImageError> {
        let live = self.live().await?;
        self.worker_of(&live).await
    }

    /// Gives up on the evaluation thread (stuck in code that cannot be
    /// interrupted): the next [`Image::eval`] runs on a fresh thread, and
    /// the old one is left running in the image. Returns the old thread's
    /// id, if there was one.
    pub fn abandon_eval_thread(&self) -> Option<i64> {
        let live = self.current_live()?;
        let old = live.worker.lock().unwrap().take();
        old
    }

    /// The local image's busiest thread over `sample`: its OS thread id and
    /// the share of one core it used (100.0 = a whole core). For telling
    /// the user what a stuck evaluation costs.
    pub async fn busiest_thread(&self, sample: Duration) -> Option<(u32, f64)> {
        let pid = self.pid()?;
        let before = thread_cpu_ticks(pid);
        tokio::time::sleep(sample).await;
        let after = thread_cpu_ticks(pid);
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        after
            .iter()
            .filter_map(|(tid, t1)| {
                let t0 = before.iter().find(|(b, _)| b == tid).map_or(0, |(_, t)| *t);
                Some((
                    *tid,
                    (t1.checked_sub(t0)? as f64 / hz) / sample.as_secs_f64() * 100.0,
                ))
            })
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// Whether the local image's process is stopped (SIGSTOP, a debugger):
    /// state `T` or `t` in `/proc/<pid>/stat`.
    pub fn process_stopped(&self) -> bool {
        let Some(pid) = self.pid() else { return false };
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                let after = s.rsplit_once(')')?.1.trim_start().chars().next()?;
                Some(matches!(after, 'T' | 't'))
            })
            .unwrap_or(false)
    }

    /// Interrupts `thread` (`:emacs-interrupt`): it enters the debugger and a
    /// [`SwankEvent::Debug`] follows. Does nothing when no image runs.
    pub async fn interrupt(&self, thread: Thread) -> Result<(), ImageError> {
        let Some(live) = self.current_live() else {
            return Ok(());
        };
        live.client
            .interrupt(thread)
            .await
            .map_err(|e| ImageError::Protocol(e.to_string()))
    }

    /// Whether the image runs requests on threads (see [`LispKind::has_threads`]);
    /// true when none runs yet.
    pub fn has_threads(&self) -> bool {
        self.current_live().is_none_or(|l| l.threads())
    }

    /// Interrupts a local image without threads the only way it can be:
    /// SIGINT to the process, which its Swank backend turns into a break in
    /// whatever runs. Returns whether a signal was sent.
    pub fn interrupt_process(&self) -> bool {
        let Some(live) = self.current_live() else {
            return false;
        };
        match (live.mode, live.pid) {
            (ImageMode::Local, Some(pid)) => {
                let Ok(pid) = i32::try_from(pid) else {
                    return false;
                };
                // SAFETY: kill(2) with a pid we started and still watch.
                unsafe { libc::kill(pid, libc::SIGINT) == 0 }
            }
            _ => false,
        }
    }

    /// Sends a raw Swank message to the running image (e.g.
    /// `(:emacs-return-string THREAD TAG "text")`).
    pub async fn send_raw(&self, message: &str) -> Result<(), ImageError> {
        let live = self.live().await?;
        let _busy = Busy::new(&self.inner);
        live.client
            .send_raw(message)
            .await
            .map_err(|e| ImageError::Protocol(e.to_string()))
    }

    /// Receives every Swank event of this image and its successors.
    /// Debugger entries are aborted by the supervisor unless they belong
    /// to a call of [`Image::eval_debuggable`], whose caller answers them.
    pub fn subscribe(&self) -> broadcast::Receiver<ImageEvent> {
        self.inner.events.subscribe()
    }

    /// The Lisp process id, while an image runs.
    pub fn pid(&self) -> Option<u32> {
        self.current_live().and_then(|l| l.pid)
    }

    /// A snapshot of the current image.
    pub fn info(&self) -> ImageInfo {
        let live = self.current_live();
        // Checked once, so the two fields below agree.
        let channel_open = live.as_ref().map(|l| l.channel_open());
        ImageInfo {
            mode: self.inner.mode,
            pid: live.as_ref().and_then(|l| l.pid),
            generation: live.as_ref().map_or(0, |l| l.generation),
            started_at: live.as_ref().map(|l| l.started_at),
            core: live.as_ref().and_then(|l| l.core.clone()),
            swank_address: live.as_ref().map(|l| l.address.clone()),
            worker_thread: live.as_ref().and_then(|l| *l.worker.lock().unwrap()),
            kind: live.as_ref().and_then(|l| l.kind),
            sandbox: live.as_ref().and_then(|l| l.sandbox.clone()),
            limits: live.as_ref().and_then(|l| l.limits.clone()),
            eval_channel: channel_open,
            eval_socket: live
                .as_ref()
                .filter(|_| channel_open == Some(true))
                .and_then(|l| l.direct_socket),
        }
    }

    /// Kills the local image (calls in flight fail, saying so). The next
    /// call starts a fresh one. Refused for attached images.
    pub async fn kill(&self) -> Result<(), ImageError> {
        self.refuse_attached("kill")?;
        self.stop().await;
        Ok(())
    }

    /// Kills the local image and starts a fresh one, waiting until it is
    /// up. Also clears the crash-loop history: this is the explicit way out.
    pub async fn restart(&self) -> Result<ImageInfo, ImageError> {
        self.refuse_attached("restart")?;
        self.stop().await;
        self.inner.deaths.lock().unwrap().clear();
        *self.inner.state_lost.lock().unwrap() = None;
        self.live().await?;
        Ok(self.info())
    }

    /// Ends this handle's use of the image: kills a local image, closes the
    /// connection to an attached one (which keeps running).
    pub async fn shutdown(&self) {
        self.stop().await;
    }

    fn refuse_attached(&self, what: &str) -> Result<(), ImageError> {
        if self.inner.mode == ImageMode::Attached {
            return Err(ImageError::Attached(format!(
                "cannot {what} an attached image: it belongs to the user's own Lisp session \
                 (--swank); restart it from there"
            )));
        }
        Ok(())
    }

    async fn stop(&self) {
        let mut slot = self.inner.slot.lock().await;
        if let Some(live) = slot.take() {
            live.stopped_on_purpose.store(true, Ordering::SeqCst);
            live.dead.store(true, Ordering::SeqCst);
            live.request_kill();
            if live.mode == ImageMode::Local {
                live.exit_status(Duration::from_secs(5)).await;
            }
        }
        *self.inner.current.lock().unwrap() = None;
    }

    fn current_live(&self) -> Option<Arc<Live>> {
        self.inner
            .current
            .lock()
            .unwrap()
            .clone()
            .filter(|l| !l.dead.load(Ordering::SeqCst))
    }

    async fn worker_of(&self, live: &Live) -> Result<Thread, ImageError> {
        if live.mode == ImageMode::Attached || !live.threads() {
            return Ok(Thread::T);
        }
        if let Some(id) = *live.worker.lock().unwrap() {
            return Ok(Thread::Id(id));
        }
        match live.client.spawn_worker_thread("cl-mcp-eval").await {
            Ok(id) => {
                *live.worker.lock().unwrap() = Some(id);
                Ok(Thread::Id(id))
            }
            Err(SwankError::Disconnected(_)) => Err(self.death_error(live).await),
            Err(e) => Err(ImageError::Protocol(e.to_string())),
        }
    }

    async fn reply(
        &self,
        live: &Live,
        r: Result<RexOutcome, SwankError>,
    ) -> Result<ImageReply, ImageError> {
        match r {
            Ok(RexOutcome::Abort(_)) if self.dies_soon(live).await => {
                // `(sb-ext:exit)` unwinds the calling thread (an abort) just
                // before the process goes: report the death, not the abort.
                Err(self.death_error(live).await)
            }
            Ok(outcome) => {
                let state_lost = {
                    let mut s = self.inner.state_lost.lock().unwrap();
                    match &*s {
                        Some((died, _)) if *died < live.generation => s.take().map(|(_, m)| m),
                        _ => None,
                    }
                };
                let started = self.inner.start_notice.lock().unwrap().take();
                let state_lost = match (state_lost, started) {
                    (Some(lost), Some(started)) => Some(format!("{lost}\n[NOTICE] {started}")),
                    (lost, started) => lost.or(started),
                };
                Ok(ImageReply {
                    outcome,
                    state_lost,
                })
            }
            Err(SwankError::Disconnected(_)) => Err(self.death_error(live).await),
            Err(e) => Err(ImageError::Protocol(e.to_string())),
        }
    }

    /// After an abort, whether the connection ends within a moment.
    async fn dies_soon(&self, live: &Live) -> bool {
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

    async fn death_error(&self, live: &Live) -> ImageError {
        if live.stopped_on_purpose.load(Ordering::SeqCst) {
            return ImageError::Died(
                "the Lisp image was stopped on request (restart or shutdown) while this call \
                 ran; the next call starts a fresh image"
                    .into(),
            );
        }
        match live.mode {
            ImageMode::Local => {
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

    /// The running image, starting one if there is none (or it died).
    async fn live(&self) -> Result<Arc<Live>, ImageError> {
        {
            let slot = self.inner.slot.lock().await;
            *self.inner.last_used.lock().unwrap() = Instant::now();
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
        tokio::spawn(async move { this.live_or_start().await })
            .await
            .unwrap_or_else(|e| {
                Err(ImageError::StartFailed(format!(
                    "the start task failed: {e}"
                )))
            })
    }

    async fn live_or_start(&self) -> Result<Arc<Live>, ImageError> {
        let mut slot = self.inner.slot.lock().await;
        // Under the slot's lock, so the idle reaper (which holds it while it
        // decides) never stops an image a call is about to use.
        *self.inner.last_used.lock().unwrap() = Instant::now();
        if let Some(l) = slot.as_ref().filter(|l| !l.gone()) {
            return Ok(l.clone());
        }
        self.check_crash_loop()?;
        // Before a generation is counted: a refused call starts nothing.
        let permit = match self.inner.mode {
            ImageMode::Local => self.image_permit()?,
            ImageMode::Attached => None,
        };
        let generation = self.inner.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let live = match self.inner.mode {
            ImageMode::Local => match self.start_local_healing(generation, permit).await {
                Ok(live) => live,
                Err(e) => {
                    // Failed starts count like deaths: a Lisp that cannot
                    // start is not retried on every call forever.
                    if let ImageError::StartFailed(why) = &e {
                        self.inner
                            .deaths
                            .lock()
                            .unwrap()
                            .push_back((Instant::now(), format!("failed to start: {why}")));
                    }
                    return Err(e);
                }
            },
            ImageMode::Attached => self.attach(generation).await?,
        };
        *slot = Some(live.clone());
        *self.inner.current.lock().unwrap() = Some(live.clone());
        *self.inner.last_used.lock().unwrap() = Instant::now();
        Ok(live)
    }

    /// The local image's limits in words, for `image-info` and `doctor`.
    fn limits_text(&self, plan: &LaunchPlan, caps: &[String]) -> String {
        let cfg = &self.inner.config;
        let heap = match cfg.memory_limit_mb {
            Some(mb) => match plan.kind.address_space_cap(mb) {
                Some(bytes) => format!(
                    "heap: at most {mb} MiB (--memory-limit; address space capped at {} MiB)",
                    bytes / (1024 * 1024)
                ),
                None if plan.kind.soft_memory_limit() => format!(
                    "heap: an evaluation keeping more than {mb} MiB alive is stopped, the image \
                     kept (--memory-limit; the runtime's heap is {} MiB)",
                    plan.kind.heap_mb(mb)
                ),
                None => format!("heap: at most {mb} MiB (--memory-limit)"),
            },
            None => "heap: the implementation's default (--memory-limit MB caps it)".into(),
        };
        let idle = match cfg.idle_timeout {
            Some(d) => format!(
                "idle: stopped after {} s without a call (--image-idle-secs)",
                d.as_secs()
            ),
            None => "idle: never stopped for idleness (--image-idle-secs S would)".into(),
        };
        let mut s = format!("limits:\n  {}\n  {heap}\n  {idle}", caps.join("\n  "));
        if let Some(q) = &cfg.image_quota {
            s.push_str(&format!(
                "\n  images: {} running of at most {} on this server (--max-images)",
                q.in_use(),
                q.max()
            ));
        }
        s
    }

    /// A permit of `--max-images` for a new local image, or the error that
    /// says the limit is reached and how to raise it.
    fn image_permit(&self) -> Result<Option<tokio::sync::OwnedSemaphorePermit>, ImageError> {
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

    fn check_crash_loop(&self) -> Result<(), ImageError> {
        let cfg = &self.inner.config;
        let mut deaths = self.inner.deaths.lock().unwrap();
        while deaths
            .front()
            .is_some_and(|(t, _)| t.elapsed() > cfg.crash_window)
        {
            deaths.pop_front();
        }
        if self.inner.mode == ImageMode::Local && deaths.len() >= cfg.crash_limit {
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

    async fn launch_plan(&self) -> Result<LaunchPlan, ImageError> {
        let config = self.inner.config.clone();
        let try_core =
            config.use_core_cache && !self.inner.core_build_failed.load(Ordering::SeqCst);
        let notes = self.inner.notes.clone();
        let (plan, build_error, repaired) = tokio::task::spawn_blocking(move || {
            let (lisp, kind) = locate::find_lisp_kind(&config)?;
            let swank = locate::find_swank(&config, || locate::asdf_finds_swank(&lisp, kind))?;
            let dir = config.cache_dir.clone().unwrap_or_else(default_cache_dir);
            let quicklisp = config.load_quicklisp.then(locate::find_quicklisp).flatten();
            let cache = CoreCache::new(dir, lisp, kind, swank, quicklisp);
            let mut build_error = None;
            let mut repaired = None;
            if try_core {
                match cache.cached_plan() {
                    Ok(Some(plan)) => return Ok((plan, None, None)),
                    Ok(None) => {}
                    // Discarded and built again below, under the build lock.
                    Err(why) => tracing::warn!(core = %cache.core_path().display(), "the cached core does not match what the server built: {why}"),
                }
                let building = Instant::now();
                match cache.build() {
                    Ok(built) => {
                        if let Some(why) = &built.tampered {
                            let text = format!(
                                "the cached core {} was changed after the server built it \
                                 ({why}); discarded it and built it again in {} s",
                                built.core.display(),
                                building.elapsed().as_secs()
                            );
                            send_note(&notes, NoteLevel::Warning, text.clone());
                            repaired = Some(text);
                        }
                        if let Some(first) = &built.repaired {
                            let text = format!(
                                "a file of the Lisp cache failed to load ({first}); discarded \
                                 the cache and built it again in {} s",
                                building.elapsed().as_secs()
                            );
                            send_note(&notes, NoteLevel::Warning, text.clone());
                            repaired = Some(text);
                        }
                        send_note(
                            &notes,
                            NoteLevel::Info,
                            format!(
                                "built the Lisp core cache {} in {} ms (later starts take it)",
                                built.core.display(),
                                building.elapsed().as_millis()
                            ),
                        );
                        match cache.cached_plan() {
                            Ok(Some(plan)) => return Ok((plan, None, repaired)),
                            Ok(None) => {}
                            Err(e) => build_error = Some(e),
                        }
                    }
                    Err(e) => build_error = Some(e),
                }
            }
            let plan = cache.source_plan().map_err(|e| {
                ImageError::StartFailed(format!("cannot write the image's start files: {e}"))
            })?;
            Ok::<_, ImageError>((plan, build_error, repaired))
        })
        .await
        .map_err(|e| ImageError::StartFailed(format!("start task failed: {e}")))??;
        if let Some(text) = repaired {
            *self.inner.start_notice.lock().unwrap() = Some(text);
        }
        if let Some(e) = build_error {
            self.inner.core_build_failed.store(true, Ordering::SeqCst);
            self.inner.note(
                NoteLevel::Warning,
                format!("could not build the Lisp core cache ({e}); loading from source (slower)"),
            );
            if !SOURCE_FALLBACK_LOGGED.swap(true, Ordering::SeqCst) {
                tracing::warn!(
                    error = %e,
                    "could not build the Lisp core cache; loading Swank and the helpers from \
                     source at each start (slower)"
                );
            }
        }
        Ok(plan)
    }

    /// `start_local`, once more when the first start failed on a cached
    /// core that was found broken and discarded (that start rebuilds it).
    async fn start_local_healing(
        &self,
        generation: u64,
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> Result<Arc<Live>, ImageError> {
        self.inner.cache_discarded.store(false, Ordering::SeqCst);
        let first = self.start_local(generation, permit).await;
        if first.is_ok() || !self.inner.cache_discarded.swap(false, Ordering::SeqCst) {
            return first;
        }
        // The failed image's place (--max-images) frees when its process
        // has been reaped: wait a moment for it.
        let mut permit = self.image_permit();
        for _ in 0..100 {
            if permit.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            permit = self.image_permit();
        }
        self.start_local(generation, permit?).await
    }

    async fn start_local(
        &self,
        generation: u64,
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> Result<Arc<Live>, ImageError> {
        let started = Instant::now();
        let plan = self.launch_plan().await?;
        let secret = random_secret()?;
        let cache = self
            .inner
            .config
            .cache_dir
            .clone()
            .unwrap_or_else(default_cache_dir);
        let root = match &self.inner.config.project_root {
            Some(r) => r.read().unwrap().clone(),
            None => std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
        };
        let fasl_dir = core_cache::private_dir(&cache.join("fasl"))
            .and_then(|dir| core_cache::private_dir(&dir.join(core_cache::project_key(&root))))
            .map_err(|e| {
                ImageError::StartFailed(format!(
                    "cannot prepare the private fasl directory under {}: {e}",
                    cache.display()
                ))
            })?;
        let debian_loader = std::path::Path::new(super::locate::DEBIAN_SWANK_LOADER);
        let places = sandbox::Places {
            root: &root,
            cache: &cache,
            fasl: &fasl_dir,
            lisp: &plan.lisp,
            swank_loader: self
                .inner
                .config
                .swank_loader
                .as_deref()
                .or_else(|| debian_loader.is_file().then_some(debian_loader)),
        };
        let confinement = sandbox::prepare(&self.inner.config.sandbox, &places)
            .map_err(ImageError::StartFailed)?;
        if let Some(w) = &confinement.report.warning {
            if !SANDBOX_WARNING_LOGGED.swap(true, Ordering::SeqCst) {
                tracing::warn!(mode = confinement.report.mode.as_str(), "sandbox: {w}");
            }
            self.inner.note(NoteLevel::Warning, format!("sandbox: {w}"));
        }
        let mut cmd = tokio::process::Command::new(&plan.lisp);
        let mut memory_env = Vec::new();
        // The image's own heap, plus room for what it starts.
        let memory_cap = self
            .inner
            .config
            .memory_limit_mb
            .map(|mb| (plan.kind.heap_mb(mb) + (mb / 2).max(512)) * 1024 * 1024);
        let cap = limits::prepare_caps(self.inner.config.max_processes, memory_cap);
        if let Some(w) = &cap.warning {
            if !CAP_WARNING_LOGGED.swap(true, Ordering::SeqCst) {
                tracing::warn!("{w}");
            }
            self.inner.note(NoteLevel::Warning, w.clone());
        }
        for step in cap.child_steps() {
            // SAFETY: one system call (write or setrlimit), no allocation;
            // registered before the sandbox, which would refuse the write.
            unsafe {
                cmd.pre_exec(move || step.apply_in_child());
            }
        }
        if let Some(fd) = confinement.raw_fd() {
            let own_proc = confinement.own_proc();
            // SAFETY: the closure makes only system calls and allocates
            // nothing (async-signal-safe, as required after fork).
            unsafe {
                cmd.pre_exec(move || sandbox::restrict_in_child(fd, own_proc));
            }
        }
        if let Some(env) = sandbox::image_environment(confinement.report.mode) {
            cmd.env_clear().envs(env);
        }
        if let Some(mb) = self.inner.config.memory_limit_mb {
            cmd.args(plan.kind.memory_args(mb));
            let current = plan
                .env
                .iter()
                .find(|(k, _)| k == "JDK_JAVA_OPTIONS")
                .map(|(_, v)| v.to_string())
                .or_else(|| std::env::var("JDK_JAVA_OPTIONS").ok());
            // Set after `plan.env`, which would otherwise override it.
            memory_env = plan.kind.memory_env(mb, current.as_deref());
            if plan.kind.soft_memory_limit() {
                memory_env.push(("CL_MCP_MEMORY_LIMIT_MB".into(), mb.to_string()));
            }
            if let Some(bytes) = plan.kind.address_space_cap(mb) {
                // SAFETY: one setrlimit(2) call, no allocation.
                unsafe {
                    cmd.pre_exec(move || {
                        let lim = libc::rlimit {
                            rlim_cur: bytes as libc::rlim_t,
                            rlim_max: bytes as libc::rlim_t,
                        };
                        if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        Ok(())
                    });
                }
            }
        }
        cmd.args(&self.inner.config.lisp_runtime_args)
            .args(&plan.args)
            .envs(plan.env.iter().map(|(k, v)| (k, v)))
            .env("CL_MCP_SWANK_SECRET", &secret)
            .env("CL_MCP_FASL_DIR", &fasl_dir)
            .envs(memory_env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let cgroups = cap.dirs();
        let limits_text = self.limits_text(&plan, &cap.lines);
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                for dir in cgroups {
                    tokio::spawn(limits::release_cgroup(dir));
                }
                return Err(ImageError::StartFailed(format!(
                    "cannot run {}: {e}",
                    plan.lisp.display()
                )));
            }
        };
        // The child holds the ruleset now; ours closes here.
        let sandbox_report = confinement.report.clone();
        drop(confinement);
        // The cgroups' descriptors were needed only by the child.
        drop(cap);
        let pid = child.id();
        let mut limits_text = limits_text;
        for dir in cgroups.iter().filter(|_| pid.is_some()) {
            if !limits::in_cgroup(dir, pid.unwrap_or_default()) {
                let w = format!(
                    "the image's cgroup caps (--max-processes, --memory-limit) are NOT \
                     enforced: it could not join its cgroup {}",
                    dir.display()
                );
                tracing::warn!("{w}");
                self.inner.note(NoteLevel::Warning, w.clone());
                limits_text =
                    limits_text.replace("(cgroup ", "(NOT enforced: could not join cgroup ");
            }
        }
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        let tail = Arc::new(LastWords::default());

        let (port_tx, port_rx) = oneshot::channel::<u16>();
        let out_done = tokio::spawn(log_stdout(stdout, pid, port_tx, tail.clone()));
        let err_done = tokio::spawn(log_stderr(stderr, pid, tail.clone()));

        let (exit_tx, exit_rx) = watch::channel(None);
        let cgroups_at_exit = cgroups;
        let memory_limit_mb = self.inner.config.memory_limit_mb;
        let (kill_tx, kill_rx) = oneshot::channel::<()>();
        tokio::spawn(async move {
            // Holding stdin keeps the image alive; it exits at EOF.
            let _stdin = stdin;
            let (status, killed) = tokio::select! {
                s = child.wait() => (s, false),
                // It may be ending on its own (killed from outside, say):
                // a dying process's socket closes before its exit status
                // can be collected, so give it a moment before killing it.
                _ = kill_rx => match tokio::time::timeout(
                    Duration::from_millis(250),
                    child.wait(),
                )
                .await
                {
                    Ok(s) => (s, false),
                    Err(_) => {
                        let _ = child.start_kill();
                        (child.wait().await, true)
                    }
                },
            };
            let text = match status {
                // Asked for when the image is stopped on purpose, or when
                // its connection is gone (the process could still run).
                Ok(s) if killed && s.code().is_none() => {
                    "killed by the server (SIGKILL) once its Swank connection was gone".into()
                }
                Ok(s) => {
                    use std::os::unix::process::ExitStatusExt;
                    let mut text = describe_exit(s);
                    // A SIGKILL from the memory cgroup's OOM killer is the
                    // --memory-limit cap (ECL reports nothing itself).
                    if s.signal() == Some(libc::SIGKILL)
                        && cgroups_at_exit.iter().any(|d| limits::oom_killed(d))
                    {
                        text.push_str(&format!(
                            ": the kernel's OOM killer, at the image's memory cap (--memory-limit \
                             {} MB: the image and what it starts)",
                            memory_limit_mb.unwrap_or_default()
                        ));
                    }
                    text
                }
                Err(e) => format!("wait failed: {e}"),
            };
            // The Lisp's last words (SBCL's backtrace is flushed at exit)
            // are read before the death is reported; a child the image left
            // running may hold the pipes open, so not for long.
            let _ = tokio::time::timeout(Duration::from_secs(1), async {
                let _ = out_done.await;
                let _ = err_done.await;
            })
            .await;
            tracing::info!(pid, status = %text, "Lisp image exited");
            // What it left running dies with it; its place (--max-images)
            // is free once it is gone.
            for dir in cgroups_at_exit {
                limits::release_cgroup(dir).await;
            }
            drop(permit);
            let _ = exit_tx.send(Some(text));
        });

        let fail = |msg: String, kill: oneshot::Sender<()>| {
            let _ = kill.send(());
            let tail = tail.stderr();
            let lines: Vec<&str> = tail.iter().map(String::as_str).collect();
            ImageError::StartFailed(if lines.iter().all(|l| l.trim().is_empty()) {
                msg
            } else {
                format!("{msg}; the Lisp said:\n{}", lisp_words(&lines))
            })
        };
        let port = match tokio::time::timeout(self.inner.config.start_timeout, port_rx).await {
            Ok(Ok(p)) => p,
            Ok(Err(_)) => {
                // Give stderr a moment to deliver the last lines.
                tokio::time::sleep(Duration::from_millis(50)).await;
                if let Some(core) = &plan.core {
                    // Is the cache to blame? Start it once more in check
                    // mode: a cache that fails its check is discarded, and
                    // `live` starts once more, building it anew; one that
                    // passes points at something transient (process or
                    // memory limits), and the next start tries it again.
                    let check = plan.clone();
                    let checked = tokio::task::spawn_blocking(move || {
                        core_cache::check_plan(&check, core_cache::CHECK_TIMEOUT)
                    })
                    .await;
                    if let Ok(Err(why)) = checked {
                        core_cache::remove_entry(core);
                        let text = format!(
                            "the cached core {} does not start ({why}); discarded it and \
                             building it again",
                            core.display()
                        );
                        tracing::warn!("{text}");
                        self.inner.note(NoteLevel::Warning, text.clone());
                        *self.inner.start_notice.lock().unwrap() = Some(format!(
                            "the cached core {} did not start ({why}); it was discarded and \
                             built again for this call",
                            core.display()
                        ));
                        self.inner.cache_discarded.store(true, Ordering::SeqCst);
                    } else {
                        tracing::warn!(core = %core.display(), "the Lisp exited while starting from the cached core, which passes its check; the next start retries it");
                    }
                }
                return Err(fail("the Lisp image exited while starting".into(), kill_tx));
            }
            Err(_) => {
                return Err(fail(
                    format!(
                        "the Lisp image did not start Swank within {} s",
                        self.inner.config.start_timeout.as_secs()
                    ),
                    kill_tx,
                ))
            }
        };
        let address = format!("127.0.0.1:{port}");
        let (client, events) = match SwankClient::connect(address.as_str(), Some(secret)).await {
            Ok(c) => c,
            Err(e) => {
                return Err(fail(
                    format!("cannot connect to the image's Swank: {e}"),
                    kill_tx,
                ))
            }
        };
        let direct = if plan.kind.has_threads() {
            open_direct(&client).await
        } else {
            None
        };
        let direct_thread = direct.as_ref().map(|(_, id)| *id);
        let direct_socket = direct.as_ref().map(|(ch, _)| ch.socket_kind());
        let worker = if direct_thread.is_some() {
            direct_thread
        } else if plan.kind.has_threads() {
            match client.spawn_worker_thread("cl-mcp-eval").await {
                Ok(id) => Some(id),
                Err(e) => {
                    return Err(fail(
                        format!("cannot start the evaluation thread: {e}"),
                        kill_tx,
                    ))
                }
            }
        } else {
            None
        };
        let live = Arc::new(Live {
            generation,
            mode: ImageMode::Local,
            client,
            pid,
            worker: Mutex::new(worker),
            direct: tokio::sync::Mutex::new(direct.map(|(ch, _)| ch)),
            direct_thread,
            direct_socket,
            started_at: SystemTime::now(),
            core: plan.core.clone(),
            address,
            dead: AtomicBool::new(false),
            stopped_on_purpose: AtomicBool::new(false),
            exit: exit_rx,
            kill: Mutex::new(Some(kill_tx)),
            last_words: tail.clone(),
            kind: Some(plan.kind),
            sandbox: Some(sandbox_report),
            limits: Some(limits_text),
        });
        self.spawn_monitor(&live, events);
        tracing::info!(
            pid,
            generation,
            from_core = plan.core.is_some(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "Lisp image ready"
        );
        self.inner.note(
            NoteLevel::Info,
            format!(
                "Lisp image started (generation {generation}, pid {}, {}, {} ms)",
                pid.map_or_else(|| "?".to_string(), |p| p.to_string()),
                if plan.core.is_some() {
                    "from the cached core"
                } else {
                    "from source"
                },
                started.elapsed().as_millis()
            ),
        );
        Ok(live)
    }

    async fn attach(&self, generation: u64) -> Result<Arc<Live>, ImageError> {
        let address = self.inner.config.attach.clone().unwrap_or_default();
        let secret = match &self.inner.config.attach_secret_file {
            Some(f) => Some(
                std::fs::read_to_string(f)
                    .map_err(|e| {
                        ImageError::StartFailed(format!(
                            "cannot read the Swank secret file {}: {e}",
                            f.display()
                        ))
                    })?
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .to_string(),
            ),
            None => None,
        };
        let (client, events) = SwankClient::connect(address.as_str(), secret)
            .await
            .map_err(|e| {
                ImageError::StartFailed(format!(
                    "cannot connect to Swank at {address}: {e}. Is it running? In your Lisp: \
                     (swank:create-server :port PORT :dont-close t)"
                ))
            })?;
        // A Swank that wants a secret we lack never answers: don't wait forever.
        let probe = client.rex("(swank/backend:getpid)", "COMMON-LISP-USER", Thread::T);
        let pid = match tokio::time::timeout(Duration::from_secs(10), probe).await {
            Ok(Ok(RexOutcome::Ok(v))) => v.as_i64().and_then(|n| u32::try_from(n).ok()),
            Ok(Ok(RexOutcome::Abort(_))) => None,
            Ok(Err(e)) => {
                return Err(ImageError::StartFailed(format!(
                    "Swank at {address} accepted the connection but then failed: {e}"
                )))
            }
            Err(_) => {
                return Err(ImageError::StartFailed(format!(
                    "Swank at {address} accepted the connection but does not answer; if it \
                     uses a secret (~/.slime-secret), pass --swank-secret-file"
                )))
            }
        };
        // No process of ours to watch: the exit status stays unknown.
        let (_, exit_rx) = watch::channel(None);
        let live = Arc::new(Live {
            generation,
            mode: ImageMode::Attached,
            client,
            pid,
            worker: Mutex::new(None),
            direct: tokio::sync::Mutex::new(None),
            direct_thread: None,
            direct_socket: None,
            started_at: SystemTime::now(),
            core: None,
            address: address.clone(),
            dead: AtomicBool::new(false),
            stopped_on_purpose: AtomicBool::new(false),
            exit: exit_rx,
            kill: Mutex::new(None),
            last_words: Default::default(),
            kind: None,
            sandbox: None,
            limits: None,
        });
        self.spawn_monitor(&live, events);
        load_helpers_into(&live.client).await?;
        tracing::info!(%address, ?pid, "attached to Swank");
        self.inner.note(
            NoteLevel::Info,
            format!("attached to the Lisp image's Swank at {address} (generation {generation})"),
        );
        Ok(live)
    }

    /// Forwards events to subscribers, answers what nobody else can, and
    /// notices the end of the connection.
    fn spawn_monitor(
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

/// `--image-idle-secs`: stops the local image once no call has used it for
/// `idle` (none running, none begun or ended since). The handle stays; the
/// next call starts a fresh image and hears that the state is gone.
async fn reclaim_when_idle(inner: Weak<Inner>, idle: Duration) {
    let tick = (idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(5));
    loop {
        tokio::time::sleep(tick).await;
        let Some(inner) = inner.upgrade() else { return };
        let mut slot = inner.slot.lock().await;
        let Some(live) = slot.as_ref() else { continue };
        let idle_for = inner.last_used.lock().unwrap().elapsed();
        if live.dead.load(Ordering::SeqCst)
            || inner.in_flight.load(Ordering::SeqCst) > 0
            || idle_for < idle
            || live.mode != ImageMode::Local
        {
            continue;
        }
        let live = slot.take().expect("checked above");
        live.stopped_on_purpose.store(true, Ordering::SeqCst);
        live.dead.store(true, Ordering::SeqCst);
        live.request_kill();
        *inner.current.lock().unwrap() = None;
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
        *inner.state_lost.lock().unwrap() = Some((
            live.generation,
            format!(
                "The Lisp image was stopped after {secs} s without a call (--image-idle-secs \
                 {secs}) and a fresh one was started: everything defined or loaded before \
                 (functions, variables, systems, the current package) is gone."
            ),
        ));
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
                let ids = inner.debuggable.lock().unwrap();
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
                inner
                    .claimed_threads
                    .lock()
                    .unwrap()
                    .insert((*thread, *level));
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
                .lock()
                .unwrap()
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

fn on_connection_end(inner: &Inner, live: &Arc<Live>, why: &str) {
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
        let next = if dead.mode == ImageMode::Local {
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
    if live.mode == ImageMode::Local {
        inner
            .deaths
            .lock()
            .unwrap()
            .push_back((Instant::now(), status.clone()));
        *inner.state_lost.lock().unwrap() = Some((
            live.generation,
            "The Lisp image died and a fresh one was started: everything defined or loaded \
             before (functions, variables, systems, the current package) is gone."
                .to_string(),
        ));
    }
}

/// Loads the embedded helpers into an attached image, unless it already
/// has this exact version (marked on the symbol plist of `:cl-mcp-server`).
async fn load_helpers_into(client: &SwankClient) -> Result<(), ImageError> {
    let hash = helpers::sources_hash();
    let check = format!(
        "(cl:equal (cl:get :cl-mcp-server :helpers-hash) {})",
        lisp_string(&hash)
    );
    let rex = |form: String| async move {
        client
            .rex(&form, "COMMON-LISP-USER", Thread::T)
            .await
            .map_err(|e| ImageError::StartFailed(format!("loading the helpers: {e}")))
    };
    if !matches!(rex(check).await?, RexOutcome::Ok(v) if v.is_t()) {
        for (name, text) in helpers::sources() {
            let form = format!(
                "(cl:let ((cl:*package* (cl:find-package \"CL-USER\")) (cl:*read-eval* cl:t)) \
                 (cl:load (cl:make-string-input-stream {})) t)",
                lisp_string(text)
            );
            if let RexOutcome::Abort(why) = rex(form).await? {
                tracing::warn!(file = name, reason = ?why, "helper failed to load into the attached image");
            }
        }
        rex(format!(
            "(cl:setf (cl:get :cl-mcp-server :helpers-hash) {})",
            lisp_string(&hash)
        ))
        .await?;
    }
    // Swank's default connection (where a thread outside any request sends
    // its debugger) stays the user's SLIME, not ours.
    rex("(cl-mcp-server::yield-default-connection)".into()).await?;
    Ok(())
}

/// Opens the evaluation channel (`lisp/direct.lisp`) of a freshly started
/// image: its serving thread's id and the connected channel, or `None`
/// (logged) when this Lisp cannot, so evaluations use a Swank worker.
async fn open_direct(client: &SwankClient) -> Option<(DirectChannel, i64)> {
    let token = random_secret().ok()?;
    // The abstract socket's name is public (/proc/net/unix); the token is
    // what proves the server.
    let local = format!(
        "cl-mcp-eval-{}-{}",
        std::process::id(),
        &random_secret().ok()?[..12]
    );
    let form = format!(
        "(cl-mcp-server::start-direct-channel {} :local {})",
        lisp_string(&token),
        lisp_string(&local)
    );
    let opened = async {
        let v = match client.rex(&form, "COMMON-LISP-USER", Thread::T).await? {
            RexOutcome::Ok(v) => v,
            RexOutcome::Abort(why) => {
                return Err(SwankError::Protocol(
                    why.unwrap_or_else(|| "aborted".into()),
                ))
            }
        };
        let (address, thread) = match v.as_list() {
            Some([a, t]) => (
                match (a.as_str(), a.as_i64().and_then(|p| u16::try_from(p).ok())) {
                    (Some(name), _) if name == local => Some(Address::Local(local.clone())),
                    (_, Some(port)) => Some(Address::Port(port)),
                    _ => None,
                },
                t.as_i64(),
            ),
            _ => (None, None),
        };
        let (Some(address), Some(thread)) = (address, thread) else {
            return Err(SwankError::Protocol(format!("unexpected answer {v}")));
        };
        let ch = DirectChannel::connect(&address, &token).await?;
        Ok::<_, SwankError>((ch, thread))
    };
    match tokio::time::timeout(Duration::from_secs(10), opened).await {
        Ok(Ok(r)) => Some(r),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "no evaluation channel; evaluations go through Swank");
            None
        }
        Err(_) => {
            tracing::warn!(
                "the evaluation channel did not open within 10 s; evaluations go through Swank"
            );
            None
        }
    }
}

fn random_secret() -> Result<String, ImageError> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| ImageError::StartFailed(format!("cannot read /dev/urandom: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

const PORT_MARKER: &str = "CL-MCP-SWANK-PORT ";

/// Longest line of image output the log keeps (bytes; the rest is cut).
const LOG_LINE_CAP: usize = 4096;
/// Lines of image output logged per [`LOG_INTERVAL`]; the rest are counted
/// and reported as one "[N lines suppressed]" line.
const LOG_LINES_PER_INTERVAL: u32 = 100;
const LOG_INTERVAL: Duration = Duration::from_secs(1);

/// Reads one line of at most `cap` bytes (the rest of a longer line is
/// skipped, never buffered); `None` at end of stream.
async fn next_capped_line<R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
    cap: usize,
) -> std::io::Result<Option<String>> {
    use tokio::io::AsyncBufReadExt;
    let mut line = Vec::new();
    let mut dropped = 0usize;
    let mut any = false;
    loop {
        let buf = r.fill_buf().await?;
        if buf.is_empty() {
            if !any {
                return Ok(None);
            }
            break;
        }
        any = true;
        let end = buf.iter().position(|&b| b == b'\n');
        let chunk = &buf[..end.unwrap_or(buf.len())];
        let take = cap.saturating_sub(line.len()).min(chunk.len());
        line.extend_from_slice(&chunk[..take]);
        dropped += chunk.len() - take;
        let used = end.map_or(buf.len(), |i| i + 1);
        r.consume(used);
        if end.is_some() {
            break;
        }
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    let mut text = String::from_utf8_lossy(&line).into_owned();
    if dropped > 0 {
        text.push_str(&format!(" [line cut: {dropped} more bytes]"));
    }
    Ok(Some(text))
}

/// Rate limit for image output in the log: the first lines of each
/// interval, then a count of what was left out.
struct LogLimit {
    since: Instant,
    logged: u32,
    suppressed: u64,
}

impl LogLimit {
    fn new() -> LogLimit {
        LogLimit {
            since: Instant::now(),
            logged: 0,
            suppressed: 0,
        }
    }

    /// Whether to log the next line; reports the lines suppressed in the
    /// interval that just ended through `flush`.
    fn admit(&mut self, flush: impl FnOnce(u64)) -> bool {
        if self.since.elapsed() >= LOG_INTERVAL {
            if self.suppressed > 0 {
                flush(self.suppressed);
            }
            *self = LogLimit::new();
        }
        if self.logged < LOG_LINES_PER_INTERVAL {
            self.logged += 1;
            true
        } else {
            self.suppressed += 1;
            false
        }
    }

    fn finish(&mut self, flush: impl FnOnce(u64)) {
        if self.suppressed > 0 {
            flush(self.suppressed);
        }
        self.suppressed = 0;
    }
}

fn log_suppressed(pid: Option<u32>, stream: &'static str, n: u64) {
    tracing::warn!(target: "lisp", pid, stream, "[{n} lines suppressed]");
}

async fn log_stdout(
    out: tokio::process::ChildStdout,
    pid: Option<u32>,
    port: oneshot::Sender<u16>,
    tail: Arc<LastWords>,
) {
    let mut port = Some(port);
    let mut out = BufReader::new(out);
    let mut limit = LogLimit::new();
    while let Ok(Some(line)) = next_capped_line(&mut out, LOG_LINE_CAP).await {
        if let Some(p) = line
            .strip_prefix(PORT_MARKER)
            .and_then(|p| p.trim().parse().ok())
        {
            if let Some(tx) = port.take() {
                let _ = tx.send(p);
                continue;
            }
        }
        if limit.admit(|n| log_suppressed(pid, "stdout", n)) {
            tracing::info!(target: "lisp", pid, stream = "stdout", "{line}");
        }
        tail.push_stdout(&line);
    }
    limit.finish(|n| log_suppressed(pid, "stdout", n));
}

async fn log_stderr(err: tokio::process::ChildStderr, pid: Option<u32>, tail: Arc<LastWords>) {
    let mut err = BufReader::new(err);
    let mut limit = LogLimit::new();
    while let Ok(Some(line)) = next_capped_line(&mut err, LOG_LINE_CAP).await {
        let log = limit.admit(|n| log_suppressed(pid, "stderr", n));
        if log {
            tracing::info!(target: "lisp", pid, stream = "stderr", "{line}");
        }
        tail.push_stderr(&line);
    }
    limit.finish(|n| log_suppressed(pid, "stderr", n));
}
