//! Attach mode: connecting to a Swank the user runs, and loading the
//! helpers into it.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use swank_client::{lisp_string, RexOutcome, SwankClient, Thread};
use tokio::sync::watch;

use crate::image::{helpers, ImageError, ImageMode};

use super::live::Live;
use super::{Image, NoteLevel};

impl Image {
    pub(super) async fn attach(&self, generation: u64) -> Result<Arc<Live>, ImageError> {
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
