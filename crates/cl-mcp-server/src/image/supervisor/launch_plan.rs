//! How the next local image starts: from the cached core (built when
//! missing or damaged) or from source, with the notes that say which.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::image::core_cache::{build_in_background, CoreCache, LaunchPlan};
use crate::image::{locate, places, ImageError};

use super::{send_note, Image, ImageNote, NoteLevel};
use crate::sync::MutexExt;
use tokio::sync::broadcast;

static SOURCE_FALLBACK_LOGGED: AtomicBool = AtomicBool::new(false);

impl Image {
    pub(super) async fn launch_plan(&self) -> Result<LaunchPlan, ImageError> {
        let config = self.inner.config.clone();
        let try_core =
            config.use_core_cache && !self.inner.core_build_failed.load(Ordering::SeqCst);
        let notes = self.inner.notes.clone();
        let (plan, build_error, repaired) = tokio::task::spawn_blocking(move || {
            // Every process run for the image, from the first `--version`
            // on, runs confined as the image will be, and only a Lisp no
            // agent could have written runs at all.
            let (lisp, places, jail) = places::confined_lisp(&config)?;
            let jail = Arc::new(jail);
            let kind = locate::lisp_kind(&lisp, &jail)?;
            let swank =
                locate::find_swank(&config, || locate::asdf_finds_swank(&lisp, kind, &jail))?;
            let quicklisp = config.load_quicklisp.then(locate::find_quicklisp).flatten();
            let cache = CoreCache::new(places.cache, lisp, kind, swank, quicklisp).confined(jail);
            let mut build_error = None;
            let mut repaired = None;
            if try_core {
                match cache.cached_plan() {
                    Ok(Some(plan)) => return Ok((plan, None, None)),
                    Ok(None) => {}
                    // Discarded and built again below, under the build lock.
                    Err(why) => tracing::warn!(core = %cache.core_path().display(), "the cached core does not match what the server built: {why}"),
                }
                if cache.builds_in_background() {
                    start_background_build(&cache, &notes);
                    let plan = cache.interpreted_plan().map_err(start_files_error)?;
                    return Ok((plan, None, None));
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
            let plan = cache.source_plan().map_err(start_files_error)?;
            Ok::<_, ImageError>((plan, build_error, repaired))
        })
        .await
        .map_err(|e| ImageError::StartFailed(format!("start task failed: {e}")))??;
        if let Some(text) = repaired {
            *self.inner.start_notice.guard() = Some(text);
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
}

/// Builds `cache`'s entry in the background (ECL: the image meanwhile
/// starts from source), saying so in a note, and again when it is done.
fn start_background_build(cache: &CoreCache, notes: &broadcast::Sender<ImageNote>) {
    let building = Instant::now();
    let core = cache.core_path();
    let done_notes = notes.clone();
    let started = build_in_background(cache.clone(), move |result| match result {
        Ok(_) => {
            tracing::info!(core = %core.display(), elapsed_ms = building.elapsed().as_millis() as u64, "built the Lisp cache in the background");
            send_note(
                &done_notes,
                NoteLevel::Info,
                format!(
                    "built the compiled Lisp cache {} in {} s (the next start loads it)",
                    core.display(),
                    building.elapsed().as_secs()
                ),
            );
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not build the Lisp cache in the background; starts load from source");
            send_note(
                &done_notes,
                NoteLevel::Warning,
                format!("could not build the compiled Lisp cache ({e}); starts load Swank and the helpers from source"),
            );
        }
    });
    if started {
        send_note(
            notes,
            NoteLevel::Info,
            format!(
                "no compiled cache for {} yet: this image loads Swank and the helpers from source; \
                 compiling them into the cache in the background for the next start",
                cache.kind()
            ),
        );
    }
}

/// The start files could not be written: `e` says why; at the process
/// limit the Lisp that builds them says only that it could not make a
/// thread, so the cause is named.
fn start_files_error(e: impl std::fmt::Display) -> ImageError {
    let text = e.to_string();
    let at_limit = super::start_local::at_a_limit(&text);
    ImageError::StartFailed(super::start_local::with_limit_hint(
        format!("cannot write the image's start files: {text}"),
        at_limit,
    ))
}
