//! ECL's first start: its cache build compiles Swank, its contribs and the
//! helpers through a C compiler (a minute and more), so the first image
//! loads them from source instead (ECL's bytecode compiler: about a second)
//! while the build runs beside it for the next start.
//!
//! The build is [`CoreCache::build`] as ever: under `build.lock`, into a
//! temporary entry renamed into place once checked, its Lisp dying with the
//! thread that waits for it. A server killed mid-build leaves a temporary
//! entry the next build removes; two servers starting at once both start
//! from source and the second build finds the first's entry when it gets
//! the lock.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use super::{Built, CoreCache, LaunchPlan};
use crate::image::implementation::LispKind;
use crate::image::locate::SwankSource;
use crate::image::ImageError;
use crate::sync::MutexExt;

/// Entries (by path) whose background build runs, or failed, in this
/// process: each is tried once per process, so image restarts neither
/// stack builds nor retry one that fails.
fn tried() -> &'static Mutex<HashSet<PathBuf>> {
    static TRIED: OnceLock<Mutex<HashSet<PathBuf>>> = OnceLock::new();
    TRIED.get_or_init(Default::default)
}

impl CoreCache {
    /// Whether a missing entry is built in the background while the image
    /// starts from source: ECL with SLIME's loader, whose build goes
    /// through a C compiler and whose LOAD of a source file is quick. (With
    /// Swank from ASDF or Quicklisp, loading it compiles it anyway.)
    pub fn builds_in_background(&self) -> bool {
        self.kind == LispKind::Ecl && matches!(self.swank, SwankSource::Loader(_))
    }

    /// The plan to start by loading Swank, its contribs and the helpers
    /// from source, compiling and writing nothing.
    pub fn interpreted_plan(&self) -> std::io::Result<LaunchPlan> {
        let script = self.write_sources_as(None, true)?;
        Ok(self.plan_loading(&script))
    }
}

/// Builds `cache`'s entry on a thread of its own, then
/// calls `done` with the outcome. `false` (and nothing runs) when this
/// process already builds that entry or tried and failed.
pub fn build_in_background(
    cache: CoreCache,
    done: impl FnOnce(Result<Built, ImageError>) + Send + 'static,
) -> bool {
    let entry = cache.core_path();
    if !tried().guard().insert(entry.clone()) {
        return false;
    }
    let spawned = std::thread::Builder::new()
        .name("lisp-cache-build".into())
        .spawn(move || {
            // Not niced: on a busy machine a niced C compiler starves for
            // many minutes (the image beside it needs a core for the
            // second or two of its start, then idles).
            let result = cache.build();
            if result.is_ok() {
                tried().guard().remove(&entry);
            }
            done(result);
        });
    spawned.is_ok()
}
