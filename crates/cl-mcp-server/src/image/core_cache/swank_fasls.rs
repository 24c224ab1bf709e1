//! Swank's compiled files for starts from source, compiled by the server
//! and checked against the hashes recorded then.

use super::check::last_words;
use super::cleanup::remove_entry;
use super::files::{private_dir, write_if_changed};
use super::lock::{take_build_lock, BUILD_LOCK_WAIT};
use super::scripts::prelude;
use super::CoreCache;
use crate::image::cache_manifest;
use crate::image::locate::SwankSource;
use crate::image::ImageError;

impl CoreCache {
    /// Before a start from source: Swank's compiled files, compiled by the
    /// server itself (an image may not write the cache) and checked against
    /// the hashes recorded then; compiled again when they do not match.
    pub(super) fn prepare_swank_fasls(&self) -> Result<(), ImageError> {
        if !matches!(self.swank, SwankSource::Loader(_)) {
            return Ok(());
        }
        let manifest = self.swank_manifest_path();
        if cache_manifest::verify(&manifest, &self.dir).is_ok() {
            return Ok(());
        }
        let _lock = take_build_lock(&self.dir, BUILD_LOCK_WAIT)?;
        let why = match cache_manifest::verify(&manifest, &self.dir) {
            Ok(()) => return Ok(()),
            Err(why) => why,
        };
        if manifest.exists() {
            tracing::warn!("Swank's compiled files in the cache do not match what the server compiled ({why}); compiling them again");
        }
        remove_entry(&manifest);
        remove_entry(&self.swank_fasl_dir());
        private_dir(&self.swank_fasl_dir())
            .map_err(|e| ImageError::Cache(format!("cannot create the Swank fasl dir: {e}")))?;
        let fasl = self.swank_fasl_dir();
        let script = self
            .src_dir()
            .join(format!("swank-{}.lisp", std::process::id()));
        let text = format!(
            "{}{}\n",
            prelude(&self.start(&fasl)),
            self.kind.exit_form(0)
        );
        write_if_changed(&script, &text)
            .map_err(|e| ImageError::Cache(format!("cannot write {}: {e}", script.display())))?;
        let out = self.run_script(&script)?;
        if !out.status.success() {
            return Err(ImageError::Cache(format!(
                "compiling Swank exited with {}: {}",
                out.status,
                last_words(
                    &String::from_utf8_lossy(&out.stderr),
                    &String::from_utf8_lossy(&out.stdout)
                )
            )));
        }
        let mut files = Vec::new();
        self.push_swank_fasls(&mut files);
        cache_manifest::write(&manifest, &files)
            .map_err(|e| ImageError::Cache(format!("cannot record Swank's hashes: {e}")))
    }
}
