//! Building a cache entry: write the sources and scripts, run the Lisp,
//! check an image started from the result, record its hashes, rename it
//! into place; once more after discarding a cache a build blames.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::check::{check_plan, last_words, CHECK_TIMEOUT};
use super::cleanup::remove_entry;
use super::files::{private_dir, write_if_changed};
use super::lock::{take_build_lock, BUILD_LOCK_WAIT};
use super::scripts::{dies_with_parent, entry_args, fasl_start_script, load_script};
use super::CoreCache;
use crate::image::cache_manifest;
use crate::image::helpers;
use crate::image::jail::Purpose;
use crate::image::ImageError;

impl CoreCache {
    /// Builds the cache entry (blocking: run it off the async runtime).
    /// Safe when several servers do it at once: a lock file makes the
    /// others wait and then find the finished entry. Self-healing: when the
    /// build fails on a file of this cache (a damaged Swank fasl, say), the
    /// cache is discarded and built once more; only a second failure is an
    /// error. A saved image or fasl directory is moved into place only after
    /// an image started from it has passed the cache check.
    pub fn build(&self) -> Result<Built, ImageError> {
        let core = self.core_path();
        private_dir(&self.dir).map_err(|e| {
            ImageError::Cache(format!(
                "cannot create cache dir {}: {e}",
                self.dir.display()
            ))
        })?;
        // Without the lock (a filesystem without locks, or a holder that
        // never lets go) we only risk duplicate work: the rename below is
        // atomic either way.
        let (_lock, locked) = take_build_lock(&self.dir, BUILD_LOCK_WAIT)?;
        let mut tampered = None;
        if self.cached() {
            match self.verify() {
                Ok(()) => {
                    return Ok(Built {
                        core,
                        repaired: None,
                        tampered: None,
                    })
                }
                Err(why) => {
                    tracing::warn!(core = %core.display(), "the cached core does not match what the server built ({why}); discarding it and building it again");
                    self.discard();
                    tampered = Some(why);
                }
            }
        }
        if locked {
            // Holding the lock, any temporary entry is a killed build's.
            self.remove_dead_builds();
        }
        let started = Instant::now();
        let repaired = match self.build_once() {
            Ok(()) => None,
            Err(first) if self.blames_cache(&first.to_string()) => {
                tracing::warn!(error = %first, "a file of the Lisp cache failed to load; discarding the cache and building it again");
                self.discard();
                self.build_once().map_err(|again| {
                    ImageError::Cache(format!(
                        "{again}\n(the same build failed before the cache was discarded: {first})"
                    ))
                })?;
                Some(first)
            }
            Err(e) => return Err(e),
        };
        self.prune_stale();
        tracing::info!(
            core = %core.display(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            repaired = repaired.is_some(),
            "built the Lisp core cache"
        );
        Ok(Built {
            core,
            repaired,
            tampered,
        })
    }

    /// Whether a build's error names a file of this cache (the boot guard
    /// says which file it was loading or compiling).
    pub(super) fn blames_cache(&self, error: &str) -> bool {
        let dir = self.dir.to_string_lossy();
        error
            .lines()
            .any(|l| l.contains("cl-mcp-boot:") && (l.contains(dir.as_ref()) || l.contains("fasl")))
    }

    /// One build: compile and save into a temporary entry, check an image
    /// started from it, then rename it into place.
    pub(super) fn build_once(&self) -> Result<(), ImageError> {
        let core = self.core_path();
        let mut tmp_name = core.file_name().unwrap_or_default().to_os_string();
        tmp_name.push(format!(".tmp-{}", std::process::id()));
        let tmp = self.dir.join(tmp_name);
        remove_entry(&tmp);
        if !self.kind.saves_images() {
            std::fs::create_dir_all(&tmp)
                .map_err(|e| ImageError::Cache(format!("cannot create {}: {e}", tmp.display())))?;
        }
        // The hashes are recorded before the entry is in place, so whoever
        // finds the entry finds its manifest.
        let result = self.build_into(&tmp).and_then(|()| {
            cache_manifest::write(&self.manifest_path(), &self.manifest_files(&tmp))
                .map_err(|e| ImageError::Cache(format!("cannot record the cache's hashes: {e}")))
        });
        if result.is_err() {
            remove_entry(&tmp);
        }
        result?;
        if !self.kind.saves_images() {
            // A directory cannot replace another by rename: clear a
            // half-built one a killed build may have left.
            remove_entry(&core);
        }
        std::fs::rename(&tmp, &core)
            .map_err(|e| ImageError::Cache(format!("cannot move the core into place: {e}")))
    }

    /// Runs the generated `script` with the Lisp (after the prelude, no
    /// input, dying with the server), removes it, and returns what it did.
    pub(super) fn run_script(&self, script: &Path) -> Result<std::process::Output, ImageError> {
        let mut cmd = std::process::Command::new(&self.lisp);
        cmd.args(self.kind.start_args(None))
            .args(entry_args(
                self.kind,
                &self.src_dir().join(helpers::PRELUDE.0),
                script,
            ))
            .envs(super::start_env(self.kind))
            .stdin(std::process::Stdio::null());
        dies_with_parent(&mut cmd);
        let out = self
            .jail
            .run(Purpose::Build, &mut cmd, |cmd| cmd.output())
            .map_err(|e| ImageError::Cache(format!("cannot run {}: {e}", self.lisp.display())));
        let _ = std::fs::remove_file(script);
        out
    }

    pub(super) fn build_into(&self, tmp: &Path) -> Result<(), ImageError> {
        let script = self
            .write_sources(Some(tmp))
            .map_err(|e| ImageError::Cache(format!("cannot write build files: {e}")))?;
        let out = self.run_script(&script)?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        for line in stderr.lines().chain(stdout.lines()) {
            if line.contains("cl-mcp:") || line.contains("cl-mcp-boot:") {
                tracing::warn!(target: "lisp", "{line}");
            }
        }
        let built = if self.kind.saves_images() {
            tmp.is_file()
        } else {
            // The compiled files are in place: the start script is written
            // last, so its presence marks a complete entry.
            let mut names: Vec<&str> = helpers::sources().iter().map(|(n, _)| *n).collect();
            names.push(helpers::BOOT.0);
            let fasl = self.swank_fasl_dir();
            let text = fasl_start_script(&self.start(&fasl), &names);
            out.status.success()
                && std::fs::write(tmp.join(helpers::PRELUDE.0), helpers::PRELUDE.1).is_ok()
                && std::fs::write(tmp.join("start.lisp"), text).is_ok()
        };
        if !out.status.success() || !built {
            return Err(ImageError::Cache(format!(
                "core build exited with {}: {}",
                out.status,
                last_words(&stderr, &stdout)
            )));
        }
        if let Some(home) = stdout
            .lines()
            .find_map(|l| l.strip_prefix("CL-MCP-SBCL-HOME "))
        {
            let _ = std::fs::write(self.home_path(), home.trim());
        }
        let plan = self.plan_from(tmp);
        check_plan(&plan, CHECK_TIMEOUT, Purpose::Build)
            .map(|_| ())
            .map_err(|e| ImageError::Cache(format!("the freshly built cache does not start: {e}")))
    }

    /// Writes the helper sources, boot code and scripts; returns the script
    /// that loads everything (and, when `save_to` is given, saves a core or
    /// compiles the fasls into that directory).
    pub(super) fn write_sources(&self, save_to: Option<&Path>) -> std::io::Result<PathBuf> {
        self.write_sources_as(save_to, false)
    }

    /// [`Self::write_sources`]; when `interpret`, the start script loads
    /// Swank's sources without compiling them (`start-interpreted.lisp`).
    pub(super) fn write_sources_as(
        &self,
        save_to: Option<&Path>,
        interpret: bool,
    ) -> std::io::Result<PathBuf> {
        // Private (0700, ours): what is compiled here is loaded back.
        private_dir(&self.dir)?;
        private_dir(&self.swank_fasl_dir())?;
        let src = self.src_dir();
        std::fs::create_dir_all(&src)?;
        let mut helper_paths = Vec::new();
        for (name, text) in helpers::sources() {
            let p = src.join(name);
            write_if_changed(&p, text)?;
            helper_paths.push(p);
        }
        let boot = src.join(helpers::BOOT.0);
        write_if_changed(&boot, helpers::BOOT.1)?;
        let prelude = src.join(helpers::PRELUDE.0);
        write_if_changed(&prelude, helpers::PRELUDE.1)?;
        let fasl = self.swank_fasl_dir();
        let start = self.start(&fasl).interpreted(interpret);
        let script = load_script(self.kind, &start, &helper_paths, &boot, save_to);
        let name = match (save_to, interpret) {
            (Some(_), _) => format!("build-{}.lisp", std::process::id()),
            (None, false) => "start.lisp".to_string(),
            (None, true) => "start-interpreted.lisp".to_string(),
        };
        let path = src.join(name);
        write_if_changed(&path, &script)?;
        Ok(path)
    }

    /// The files of a finished build in `tmp` that an image loads, each
    /// with the name it will have in the cache: the saved image (and
    /// SBCL's home file), or every file of the fasl directory and Swank's
    /// compiled files.
    pub(super) fn manifest_files(&self, tmp: &Path) -> Vec<(PathBuf, PathBuf)> {
        let entry = PathBuf::from(self.core_path().file_name().unwrap_or_default());
        let mut files = Vec::new();
        if self.kind.saves_images() {
            files.push((tmp.to_path_buf(), entry));
            let home = self.home_path();
            if home.is_file() {
                files.push((
                    home.clone(),
                    home.strip_prefix(&self.dir).unwrap_or(&home).into(),
                ));
            }
            return files;
        }
        for f in cache_manifest::files_under(tmp) {
            let rel = f.strip_prefix(tmp).unwrap_or(&f).to_path_buf();
            files.push((f, entry.join(rel)));
        }
        self.push_swank_fasls(&mut files);
        files
    }

    /// Swank's compiled files (in this cache's Swank fasl directory).
    pub(super) fn push_swank_fasls(&self, files: &mut Vec<(PathBuf, PathBuf)>) {
        for f in cache_manifest::files_under(&self.swank_fasl_dir()) {
            let rel = f.strip_prefix(&self.dir).unwrap_or(&f).to_path_buf();
            files.push((f, rel));
        }
    }
}

/// What a successful [`CoreCache::build`] made.
#[derive(Debug)]
pub struct Built {
    /// The cache entry now in place.
    pub core: PathBuf,
    /// When the first build failed on a damaged file of the cache, which
    /// was then discarded and built again: that first failure.
    pub repaired: Option<ImageError>,
    /// When the entry in place did not match the hashes its build recorded
    /// (it was changed after the build), so was discarded: what differed.
    pub tampered: Option<ImageError>,
}
