//! The calls the [`Image`] handle offers: evaluations, raw Swank
//! requests, interrupts, debugger claims, snapshots, kill and restart.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use swank_client::{RexOutcome, SwankError, Thread};
use tokio::sync::broadcast;

use crate::image::{ImageError, ImageMode};

use super::live::Live;
use super::proc_stat::{opening_a_pipe, process_stopped, thread_cpu_ticks};
use super::{Busy, DebuggerClaim, Image, ImageEvent, ImageInfo, ImageReply, Inner};
use crate::sync::MutexExt;

impl Image {
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
    pub(super) async fn rex_on(
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
                *live.worker.guard() = None;
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
        self.inner.debuggable.guard().insert(id);
        struct Forget<'a>(&'a Inner, u64);
        impl Drop for Forget<'_> {
            fn drop(&mut self) {
                self.0.debuggable.guard().remove(&self.1);
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
            .guard()
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
        self.inner.debuggable.guard().insert(id);
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
        let old = live.worker.guard().take();
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

    /// Whether a thread of the local image waits in the kernel opening a
    /// named pipe (for a writer that may never come).
    pub fn opening_a_pipe(&self) -> bool {
        self.pid().is_some_and(opening_a_pipe)
    }

    /// Whether the local image's process is stopped (SIGSTOP, a debugger):
    /// state `T` or `t` in `/proc/<pid>/stat`.
    pub fn process_stopped(&self) -> bool {
        self.pid().is_some_and(process_stopped)
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
            // A launched image's pid is set only when its launcher says it
            // runs on this host.
            (ImageMode::Local | ImageMode::Launched, Some(pid)) => {
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
            worker_thread: live.as_ref().and_then(|l| *l.worker.guard()),
            kind: live.as_ref().and_then(|l| l.kind),
            sandbox: live.as_ref().and_then(|l| l.sandbox.clone()),
            limits: live.as_ref().and_then(|l| l.limits.clone()),
            launcher: self
                .inner
                .config
                .launcher
                .as_ref()
                .map(|p| p.display().to_string()),
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
        self.inner.deaths.guard().clear();
        *self.inner.state_lost.guard() = None;
        self.live().await?;
        Ok(self.info())
    }

    /// Ends this handle's use of the image: kills a local image, closes the
    /// connection to an attached one (which keeps running).
    pub async fn shutdown(&self) {
        self.stop().await;
    }
}

impl Image {
    pub(super) fn current_live(&self) -> Option<Arc<Live>> {
        self.inner
            .current
            .guard()
            .clone()
            .filter(|l| !l.dead.load(Ordering::SeqCst))
    }

    pub(super) async fn worker_of(&self, live: &Live) -> Result<Thread, ImageError> {
        if live.mode == ImageMode::Attached || !live.threads() {
            return Ok(Thread::T);
        }
        if let Some(id) = *live.worker.guard() {
            return Ok(Thread::Id(id));
        }
        match live.client.spawn_worker_thread("cl-mcp-eval").await {
            Ok(id) => {
                *live.worker.guard() = Some(id);
                Ok(Thread::Id(id))
            }
            Err(SwankError::Disconnected(_)) => Err(self.death_error(live).await),
            Err(e) => Err(ImageError::Protocol(e.to_string())),
        }
    }

    pub(super) async fn reply(
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
                    let mut s = self.inner.state_lost.guard();
                    match &*s {
                        Some((died, _)) if *died < live.generation => s.take().map(|(_, m)| m),
                        _ => None,
                    }
                };
                let started = self.inner.start_notice.guard().take();
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
}
