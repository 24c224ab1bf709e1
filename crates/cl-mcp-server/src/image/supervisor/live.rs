//! [`Live`]: one running image, what the supervisor knows of it, and how
//! it is asked to stop.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use swank_client::SwankClient;
use tokio::sync::{oneshot, watch};

use super::ImageMode;
use crate::image::direct::DirectChannel;
use crate::image::implementation::LispKind;
use crate::image::last_words::LastWords;
use crate::image::sandbox::SandboxReport;
use crate::sync::MutexExt;

/// One running image (or one connection to an attached Swank): replaced
/// whole by the next start.
pub(super) struct Live {
    pub(super) generation: u64,
    pub(super) mode: ImageMode,
    pub(super) client: SwankClient,
    pub(super) pid: Option<u32>,
    pub(super) worker: Mutex<Option<i64>>,
    /// The evaluation channel (`direct.rs`) and the Swank id of the thread
    /// serving it (then also `worker`). Empty while a call owns the channel,
    /// and for good once a call was abandoned midway.
    pub(super) direct: tokio::sync::Mutex<Option<DirectChannel>>,
    pub(super) direct_thread: Option<i64>,
    /// What the channel runs on (`DirectChannel::socket_kind`).
    pub(super) direct_socket: Option<&'static str>,
    pub(super) started_at: SystemTime,
    pub(super) core: Option<PathBuf>,
    pub(super) address: String,
    pub(super) dead: AtomicBool,
    pub(super) stopped_on_purpose: AtomicBool,
    /// How the process ended, once it has ("exit status 3", "signal 9").
    pub(super) exit: watch::Receiver<Option<String>>,
    pub(super) kill: Mutex<Option<oneshot::Sender<()>>>,
    /// The last lines the process wrote on stdout and stderr (local images).
    pub(super) last_words: Arc<LastWords>,
    /// The implementation (local images).
    pub(super) kind: Option<LispKind>,
    /// Its sandbox (local images).
    pub(super) sandbox: Option<SandboxReport>,
    /// Its resource limits in words (local images).
    pub(super) limits: Option<String>,
}

impl Live {
    /// Whether the evaluation channel is open (held while a request uses
    /// it: then it is).
    /// Whether this image is gone: `dead` is set by the connection's end
    /// handler, which may not have run yet, and a closed connection or an
    /// exited process is just as dead; a call must not be sent to it.
    pub(super) fn gone(&self) -> bool {
        self.dead.load(Ordering::SeqCst) || self.client.is_closed() || self.exit.borrow().is_some()
    }

    pub(super) fn channel_open(&self) -> bool {
        self.direct.try_lock().map_or(true, |d| d.is_some())
    }

    /// After the evaluation channel is gone, `worker` no longer names a
    /// Swank worker: the next evaluation starts one.
    pub(super) fn drop_direct_worker(&self) {
        let mut w = self.worker.guard();
        if w.is_some() && *w == self.direct_thread {
            *w = None;
        }
    }

    /// Whether Swank runs requests on threads here: without them (CLISP)
    /// every request runs in turn on the image's one thread, and an
    /// interrupt is a signal to the process.
    pub(super) fn threads(&self) -> bool {
        self.kind.is_none_or(LispKind::has_threads)
    }
}

impl Live {
    /// Why the process probably died, in a few words, from its last words.
    pub(super) fn death_cause(&self) -> Option<String> {
        let hint = self.kind.map_or("", LispKind::heap_hint);
        self.last_words.death().cause.map(|c| c.text(hint))
    }

    pub(super) fn request_kill(&self) {
        if let Some(k) = self.kill.guard().take() {
            let _ = k.send(());
        }
    }

    pub(super) async fn exit_status(&self, wait: Duration) -> Option<String> {
        let mut rx = self.exit.clone();
        let _ = tokio::time::timeout(wait, rx.wait_for(|s| s.is_some())).await;
        let s = rx.borrow().clone();
        s
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        // Nobody can reach this image any more: stop it.
        self.request_kill();
    }
}
