//! The core cache: an SBCL core with Swank, its contribs, the helpers and
//! the boot code preloaded, so a start is mapping a file instead of loading
//! and compiling Lisp (tens of milliseconds instead of seconds). CLISP gets
//! the same from a saved memory image (`saveinitmem`), Clozure CL from
//! `save-application`; ECL and ABCL cannot save an image, so their cache is
//! a directory of compiled helper and boot fasls (Swank's own fasls are
//! cached by its loader), loaded at each start.
//!
//! Layout under the cache directory (`$XDG_CACHE_HOME/cl-mcp-server` or
//! `~/.cache/cl-mcp-server`):
//! - `src-<key>/`: the helper sources, `boot.lisp` and the load scripts;
//! - `swank-fasl-<swank key>/`: Swank's compiled files, when the loader
//!   honours `swank-loader:*fasl-directory*` (Debian's puts them where ASDF's
//!   output translations say, `~/.cache/common-lisp/`);
//! - `sbcl-<key>.core` (+ `.home`, the `SBCL_HOME` it needs),
//!   `clisp-<key>.mem`, `ccl-<key>.image`, or `ecl-<key>/` / `abcl-<key>/`
//!   (fasls and the start script);
//! - `<entry>.manifest`: the SHA-256 of every file an image started from
//!   the entry loads (see `cache_manifest`), written by the build before
//!   the entry is renamed into place and checked before every start; an
//!   entry that does not match is discarded and built again;
//! - `fasl/<project>/`: the one place an image may write (its project's
//!   `lisp-compile-file` and ASDF fasls), one directory per project root;
//! - `build.lock`: held while building, so concurrent servers build once
//!   (waited for at most `BUILD_LOCK_WAIT`: anyone who can read the cache
//!   can hold it, a confined image too).
//!
//! `<key>` hashes the implementation, the Lisp binary (path, size, mtime), Swank (path, version,
//! size, mtime), the helper sources and the boot code; any change makes a
//! new key, so a stale core is never used. Builds write a temporary file and
//! rename it into place, so a reader never sees a half-written core. Entries
//! of other keys are removed after a successful build once a day old.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::cache_manifest;
use super::helpers::{self, fnv1a};
use super::implementation::LispKind;
use super::locate::{file_stamp, SwankSource};
use lisp_syntax::data::lisp_string;

/// Bumped when the shape of the scripts below changes.
const SCRIPT_VERSION: &str = "4";

/// The cache directory for this user.
pub fn default_cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("cl-mcp-server")
}

/// The name of a project's fasl directory under `<cache>/fasl/`: the
/// root's last component and a hash of its whole path. Each project's
/// image may write its own directory and no other.
pub fn project_key(root: &Path) -> String {
    let name: String = root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    let hash = fnv1a(0, root.as_os_str().as_encoded_bytes());
    format!("{name}-{hash:016x}")
}

/// What to run to start an image.
#[derive(Debug, Clone)]
pub struct LaunchPlan {
    /// The Lisp executable.
    pub lisp: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Extra environment (besides the secret).
    pub env: Vec<(String, String)>,
    /// The cached core (or fasl directory) used, or `None` when loading
    /// from source.
    pub core: Option<PathBuf>,
    /// Which implementation runs.
    pub kind: LispKind,
}

/// Keys and paths for one Lisp + Swank + helpers combination.
pub struct CoreCache {
    dir: PathBuf,
    lisp: PathBuf,
    kind: LispKind,
    swank: SwankSource,
    quicklisp: Option<PathBuf>,
    swank_key: String,
    key: String,
}

impl CoreCache {
    /// Computes the keys (no files are touched). `quicklisp` is a
    /// `setup.lisp` to load before the helpers.
    pub fn new(
        dir: PathBuf,
        lisp: PathBuf,
        kind: LispKind,
        swank: SwankSource,
        quicklisp: Option<PathBuf>,
    ) -> CoreCache {
        let lisp_id = format!("{kind}:{}:{}", lisp.display(), file_stamp(&lisp));
        let swank_id = swank.fingerprint();
        let swank_key = format!(
            "{:016x}",
            fnv1a(fnv1a(0, lisp_id.as_bytes()), swank_id.as_bytes())
        );
        let ql_id = quicklisp
            .as_deref()
            .map(|p| format!("{}:{}", p.display(), file_stamp(p)))
            .unwrap_or_default();
        let all = format!(
            "{swank_key}:{}:{SCRIPT_VERSION}:{ql_id}",
            helpers::sources_hash()
        );
        let key = format!("{:016x}", fnv1a(7, all.as_bytes()));
        CoreCache {
            dir,
            lisp,
            kind,
            swank,
            quicklisp,
            swank_key,
            key,
        }
    }

    /// The cached core's path (it may not exist yet): a saved image, or
    /// for ECL and ABCL the directory of compiled fasls.
    pub fn core_path(&self) -> PathBuf {
        let name = match self.kind {
            LispKind::Sbcl => format!("sbcl-{}.core", self.key),
            LispKind::Clisp => format!("clisp-{}.mem", self.key),
            LispKind::Ccl => format!("ccl-{}.image", self.key),
            LispKind::Ecl | LispKind::Abcl => format!("{}-{}", self.kind, self.key),
        };
        self.dir.join(name)
    }

    /// Whether the cache entry is complete (a fasl directory is complete
    /// once its start script is in place, the last thing a build writes).
    pub fn cached(&self) -> bool {
        let core = self.core_path();
        if self.kind.saves_images() {
            core.is_file()
        } else {
            core.join("start.lisp").is_file()
        }
    }

    fn swank_fasl_dir(&self) -> PathBuf {
        self.dir.join(format!("swank-fasl-{}/", self.swank_key))
    }

    /// The manifest of Swank's compiled files for starts from source.
    fn swank_manifest_path(&self) -> PathBuf {
        self.dir
            .join(format!("swank-fasl-{}.manifest", self.swank_key))
    }

    /// Before a start from source: Swank's compiled files, compiled by the
    /// server itself (an image may not write the cache) and checked against
    /// the hashes recorded then; compiled again when they do not match.
    fn prepare_swank_fasls(&self) -> Result<(), String> {
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
            .map_err(|e| format!("cannot create the Swank fasl dir: {e}"))?;
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
            .map_err(|e| format!("cannot write {}: {e}", script.display()))?;
        let out = self.run_script(&script)?;
        if !out.status.success() {
            return Err(format!(
                "compiling Swank exited with {}: {}",
                out.status,
                last_words(
                    &String::from_utf8_lossy(&out.stderr),
                    &String::from_utf8_lossy(&out.stdout)
                )
            ));
        }
        let mut files = Vec::new();
        self.push_swank_fasls(&mut files);
        cache_manifest::write(&manifest, &files)
            .map_err(|e| format!("cannot record Swank's hashes: {e}"))
    }

    fn home_path(&self) -> PathBuf {
        self.dir.join(format!("sbcl-{}.home", self.key))
    }

    fn src_dir(&self) -> PathBuf {
        self.dir.join(format!("src-{}", self.key))
    }

    /// Which implementation this cache is for.
    pub fn kind(&self) -> LispKind {
        self.kind
    }

    /// The manifest of the entry: the hashes of what an image loads from it.
    fn manifest_path(&self) -> PathBuf {
        let mut name = self
            .core_path()
            .file_name()
            .unwrap_or_default()
            .to_os_string();
        name.push(".manifest");
        self.dir.join(name)
    }

    /// The plan to start from the cached core, if it exists and every file
    /// of it is as the build recorded. `Err`: it exists but does not match
    /// (changed after the build: by an image under `--sandbox off`, say),
    /// in words; the caller discards it by building again ([`Self::build`]).
    pub fn cached_plan(&self) -> Result<Option<LaunchPlan>, String> {
        if !self.cached() {
            return Ok(None);
        }
        self.verify()?;
        Ok(Some(self.plan_from(&self.core_path())))
    }

    /// Checks the entry against its manifest.
    pub fn verify(&self) -> Result<(), String> {
        let started = Instant::now();
        let cpu = thread_cpu_us();
        let result = cache_manifest::verify(&self.manifest_path(), &self.dir);
        tracing::debug!(
            core = %self.core_path().display(),
            elapsed_us = started.elapsed().as_micros() as u64,
            cpu_us = thread_cpu_us().saturating_sub(cpu),
            ok = result.is_ok(),
            "checked the cache entry against its manifest"
        );
        result
    }

    /// The files of a finished build in `tmp` that an image loads, each
    /// with the name it will have in the cache: the saved image (and
    /// SBCL's home file), or every file of the fasl directory and Swank's
    /// compiled files.
    fn manifest_files(&self, tmp: &Path) -> Vec<(PathBuf, PathBuf)> {
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
    fn push_swank_fasls(&self, files: &mut Vec<(PathBuf, PathBuf)>) {
        for f in cache_manifest::files_under(&self.swank_fasl_dir()) {
            let rel = f.strip_prefix(&self.dir).unwrap_or(&f).to_path_buf();
            files.push((f, rel));
        }
    }

    /// The plan to start from the saved image or fasl directory `core`
    /// (this cache's entry, or a build's temporary one being checked).
    fn plan_from(&self, core: &Path) -> LaunchPlan {
        let core = core.to_path_buf();
        if !self.kind.saves_images() {
            let mut args = self.kind.start_args(None);
            args.extend(entry_args(
                self.kind,
                &core.join(helpers::PRELUDE.0),
                &core.join("start.lisp"),
            ));
            return LaunchPlan {
                lisp: self.lisp.clone(),
                args,
                env: Vec::new(),
                core: Some(core),
                kind: self.kind,
            };
        }
        let mut env = Vec::new();
        // A core outside SBCL's own directory would make SBCL look for its
        // contribs (REQUIRE) next to the core; point it at the real home.
        if std::env::var_os("SBCL_HOME").is_none() {
            if let Ok(home) = std::fs::read_to_string(self.home_path()) {
                if !home.trim().is_empty() {
                    env.push(("SBCL_HOME".to_string(), home.trim().to_string()));
                }
            }
        }
        let mut args = self.kind.start_args(Some(&core));
        args.push(self.kind.eval_flag().into());
        args.push("(cl-mcp-boot:main)".into());
        LaunchPlan {
            lisp: self.lisp.clone(),
            args,
            env,
            core: Some(core),
            kind: self.kind,
        }
    }

    /// Writes the helper sources, boot code and scripts; returns the script
    /// that loads everything (and, when `save_to` is given, saves a core or
    /// compiles the fasls into that directory).
    fn write_sources(&self, save_to: Option<&Path>) -> std::io::Result<PathBuf> {
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
        let script = load_script(self.kind, &self.start(&fasl), &helper_paths, &boot, save_to);
        let name = if save_to.is_some() {
            format!("build-{}.lisp", std::process::id())
        } else {
            "start.lisp".to_string()
        };
        let path = src.join(name);
        write_if_changed(&path, &script)?;
        Ok(path)
    }

    /// What each script starts with: this cache's prelude, Swank, Quicklisp.
    fn start<'a>(&'a self, fasl_dir: &'a Path) -> ScriptStart<'a> {
        ScriptStart {
            swank: &self.swank,
            quicklisp: self.quicklisp.as_deref(),
            fasl_dir,
        }
    }

    /// The plan to start by loading Swank and the helpers from source.
    pub fn source_plan(&self) -> std::io::Result<LaunchPlan> {
        let script = self.write_sources(None)?;
        self.prepare_swank_fasls().map_err(std::io::Error::other)?;
        let mut args = self.kind.start_args(None);
        args.extend(entry_args(
            self.kind,
            &self.src_dir().join(helpers::PRELUDE.0),
            &script,
        ));
        Ok(LaunchPlan {
            lisp: self.lisp.clone(),
            args,
            env: Vec::new(),
            core: None,
            kind: self.kind,
        })
    }

    /// Builds the cache entry (blocking: run it off the async runtime).
    /// Safe when several servers do it at once: a lock file makes the
    /// others wait and then find the finished entry. Self-healing: when the
    /// build fails on a file of this cache (a damaged Swank fasl, say), the
    /// cache is discarded and built once more; only a second failure is an
    /// error. A saved image or fasl directory is moved into place only after
    /// an image started from it has passed the cache check.
    pub fn build(&self) -> Result<Built, String> {
        let core = self.core_path();
        private_dir(&self.dir)
            .map_err(|e| format!("cannot create cache dir {}: {e}", self.dir.display()))?;
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
            Err(first) if self.blames_cache(&first) => {
                tracing::warn!(error = %first, "a file of the Lisp cache failed to load; discarding the cache and building it again");
                self.discard();
                self.build_once().map_err(|again| {
                    format!(
                        "{again}\n(the same build failed before the cache was discarded: {first})"
                    )
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
    fn blames_cache(&self, error: &str) -> bool {
        let dir = self.dir.to_string_lossy();
        error
            .lines()
            .any(|l| l.contains("cl-mcp-boot:") && (l.contains(dir.as_ref()) || l.contains("fasl")))
    }

    /// Removes this key's entries: the saved image or fasl directory, the
    /// sources and scripts, and Swank's compiled files.
    pub fn discard(&self) {
        for p in [
            self.manifest_path(),
            self.swank_manifest_path(),
            self.core_path(),
            self.home_path(),
            self.src_dir(),
            self.swank_fasl_dir(),
        ] {
            remove_entry(&p);
        }
    }

    /// One build: compile and save into a temporary entry, check an image
    /// started from it, then rename it into place.
    fn build_once(&self) -> Result<(), String> {
        let core = self.core_path();
        let mut tmp_name = core.file_name().unwrap_or_default().to_os_string();
        tmp_name.push(format!(".tmp-{}", std::process::id()));
        let tmp = self.dir.join(tmp_name);
        remove_entry(&tmp);
        if !self.kind.saves_images() {
            std::fs::create_dir_all(&tmp)
                .map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
        }
        // The hashes are recorded before the entry is in place, so whoever
        // finds the entry finds its manifest.
        let result = self.build_into(&tmp).and_then(|()| {
            cache_manifest::write(&self.manifest_path(), &self.manifest_files(&tmp))
                .map_err(|e| format!("cannot record the cache's hashes: {e}"))
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
        std::fs::rename(&tmp, &core).map_err(|e| format!("cannot move the core into place: {e}"))
    }

    /// Runs the generated `script` with the Lisp (after the prelude, no
    /// input, dying with the server), removes it, and returns what it did.
    fn run_script(&self, script: &Path) -> Result<std::process::Output, String> {
        let mut cmd = std::process::Command::new(&self.lisp);
        cmd.args(self.kind.start_args(None))
            .args(entry_args(
                self.kind,
                &self.src_dir().join(helpers::PRELUDE.0),
                script,
            ))
            .stdin(std::process::Stdio::null());
        dies_with_parent(&mut cmd);
        let out = cmd
            .output()
            .map_err(|e| format!("cannot run {}: {e}", self.lisp.display()));
        let _ = std::fs::remove_file(script);
        out
    }

    fn build_into(&self, tmp: &Path) -> Result<(), String> {
        let script = self
            .write_sources(Some(tmp))
            .map_err(|e| format!("cannot write build files: {e}"))?;
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
            return Err(format!(
                "core build exited with {}: {}",
                out.status,
                last_words(&stderr, &stdout)
            ));
        }
        if let Some(home) = stdout
            .lines()
            .find_map(|l| l.strip_prefix("CL-MCP-SBCL-HOME "))
        {
            let _ = std::fs::write(self.home_path(), home.trim());
        }
        let plan = self.plan_from(tmp);
        check_plan(&plan, CHECK_TIMEOUT)
            .map(|_| ())
            .map_err(|e| format!("the freshly built cache does not start: {e}"))
    }
}

/// What a successful [`CoreCache::build`] made.
#[derive(Debug)]
pub struct Built {
    /// The cache entry now in place.
    pub core: PathBuf,
    /// When the first build failed on a damaged file of the cache, which
    /// was then discarded and built again: that first failure.
    pub repaired: Option<String>,
    /// When the entry in place did not match the hashes its build recorded
    /// (it was changed after the build), so was discarded: what differed.
    pub tampered: Option<String>,
}

/// How long a cache check may take (ABCL's JVM and ECL's fasl loading
/// take seconds; a hung check is a failed one).
pub const CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Starts an image from `plan` in check mode (`CL_MCP_CACHE_CHECK=1`: it
/// checks that Swank, the helpers and the boot code are in place, prints
/// `CL-MCP-CACHE-OK` and exits). Returns how long it took, or the Lisp's
/// own words when it failed.
pub fn check_plan(
    plan: &LaunchPlan,
    timeout: std::time::Duration,
) -> Result<std::time::Duration, String> {
    let started = Instant::now();
    let mut cmd = std::process::Command::new(&plan.lisp);
    cmd.args(&plan.args)
        .envs(plan.env.iter().map(|(k, v)| (k, v)))
        .env("CL_MCP_CACHE_CHECK", "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    dies_with_parent(&mut cmd);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", plan.lisp.display()))?;
    // Read both pipes on their own threads, so a chatty Lisp never blocks.
    let stdout = child.stdout.take().map(read_capped);
    let stderr = child.stderr.take().map(read_capped);
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if started.elapsed() < timeout => {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let stdout = stdout.and_then(|t| t.join().ok()).unwrap_or_default();
    let stderr = stderr.and_then(|t| t.join().ok()).unwrap_or_default();
    match status {
        Some(s) if s.success() && stdout.lines().any(|l| l.trim() == "CL-MCP-CACHE-OK") => {
            Ok(started.elapsed())
        }
        Some(s) => Err(format!(
            "{} exited with {s}: {}",
            plan.lisp.display(),
            last_words(&stderr, &stdout)
        )),
        None => Err(format!(
            "{} did not finish its start within {} s: {}",
            plan.lisp.display(),
            timeout.as_secs(),
            last_words(&stderr, &stdout)
        )),
    }
}

/// Reads a child's pipe to its end on a thread of its own (the first MiB
/// kept).
fn read_capped<R: std::io::Read + Send + 'static>(pipe: R) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = Vec::new();
        let mut pipe = pipe;
        let mut buf = [0u8; 8192];
        loop {
            match pipe.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) if text.len() < 1 << 20 => text.extend_from_slice(&buf[..n]),
                Ok(_) => {}
            }
        }
        String::from_utf8_lossy(&text).into_owned()
    })
}

/// The last lines a Lisp printed (standard error, else standard output),
/// the boot guard's report first when there is one.
fn last_words(stderr: &str, stdout: &str) -> String {
    let text = if stderr.trim().is_empty() {
        stdout
    } else {
        stderr
    };
    let lines: Vec<&str> = text.lines().collect();
    super::last_words::lisp_words(&lines)
}

/// `dir`, created (with its parents) if missing, as a directory only we can
/// enter: compiled fasls are loaded back, so no other user may plant a file
/// or a symbolic link there. Refuses a symbolic link or a directory owned by
/// someone else; tightens our own directory's mode to 0700.
pub fn private_dir(dir: &std::path::Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(dir)?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if !meta.is_dir() || meta.uid() != me {
        return Err(std::io::Error::other(format!(
            "{} is not a directory of ours (a symbolic link, or owned by another user)",
            dir.display()
        )));
    }
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(dir.to_path_buf())
}

/// Removes the temporary fasls (`NAME-tmpXXXX.TYPE`, see prelude.lisp's
/// COMPILE-ATOMICALLY) that killed compilations left under `dir`, once
/// they are ten minutes old: a start from source (which holds no lock) may
/// be writing a young one.
fn remove_dead_fasls(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let old = std::time::Duration::from_secs(600);
    for e in entries.flatten() {
        let p = e.path();
        let Ok(meta) = e.metadata() else { continue };
        if meta.is_dir() {
            remove_dead_fasls(&p);
        } else if e.file_name().to_string_lossy().contains("-tmp")
            && meta
                .modified()
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > old)
        {
            let _ = std::fs::remove_file(&p);
        }
    }
}

/// Removes the build scripts (`build-<pid>.lisp`) of builds whose server
/// is gone (a killed build leaves its script behind).
fn remove_dead_scripts(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("build-")
            .and_then(|n| n.strip_suffix(".lisp"))
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: kill(2) with signal 0 only checks that the process exists.
        let gone = unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Removes a file or directory, whichever `p` is (nothing when absent).
pub fn remove_entry(p: &Path) {
    let _ = if p.is_dir() {
        std::fs::remove_dir_all(p)
    } else {
        std::fs::remove_file(p)
    };
}

/// How long a build waits for another's `build.lock` before it builds
/// without it: longer than any build takes (ECL compiles Swank through gcc
/// in minutes), short of forever — anyone who can open the file can hold
/// the lock (a confined image can read the cache).
const BUILD_LOCK_WAIT: Duration = Duration::from_secs(600);

/// The cache's build lock, taken within `wait`: the open file (the lock
/// lives as long as it) and whether it is held. Past `wait`, or where the
/// filesystem has no locks, the build goes on without it, said in the log.
fn take_build_lock(dir: &Path, wait: Duration) -> Result<(std::fs::File, bool), String> {
    let lock = std::fs::File::create(dir.join("build.lock"))
        .map_err(|e| format!("cannot create lock file: {e}"))?;
    let since = Instant::now();
    let mut said = false;
    loop {
        match lock.try_lock() {
            Ok(()) => return Ok((lock, true)),
            Err(std::fs::TryLockError::WouldBlock) if since.elapsed() < wait => {
                if !said && since.elapsed() > Duration::from_secs(5) {
                    tracing::info!(dir = %dir.display(), "waiting for another build of the Lisp cache to finish");
                    said = true;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                tracing::warn!(dir = %dir.display(), waited_s = since.elapsed().as_secs(), "the cache's build lock is still held; building without it");
                return Ok((lock, false));
            }
            Err(std::fs::TryLockError::Error(_)) => return Ok((lock, false)),
        }
    }
}

/// A build or check process must not outlive the server that waits for it
/// (a killed server would leave it writing into the cache unlocked).
fn dies_with_parent(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl(2) is async-signal-safe and allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

impl CoreCache {
    /// Removes the temporary cores and fasl directories of builds that
    /// were killed (the caller holds the build lock).
    fn remove_dead_builds(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let ours = ["sbcl-", "clisp-", "ccl-", "ecl-", "abcl-"]
                .iter()
                .any(|p| name.starts_with(p));
            if name.starts_with("swank-fasl-") {
                remove_dead_fasls(&e.path());
                continue;
            }
            if name.starts_with("src-") {
                remove_dead_scripts(&e.path());
                continue;
            }
            if ours && name.contains(".tmp-") {
                let p = e.path();
                let _ = if p.is_dir() {
                    std::fs::remove_dir_all(&p)
                } else {
                    std::fs::remove_file(&p)
                };
            }
        }
    }

    /// Removes cores and source dirs of other keys (older Lisp, Swank or
    /// helper versions) not touched for a day: a server of another version
    /// may still run, and a fresh core of theirs must not vanish under them.
    fn prune_stale(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let day = std::time::Duration::from_secs(24 * 3600);
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let ours = ["sbcl-", "src-", "clisp-", "ccl-", "ecl-", "abcl-"]
                .iter()
                .any(|p| name.starts_with(p));
            if !ours || name.contains(&self.key) {
                continue;
            }
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > day);
            if old {
                let p = e.path();
                let _ = if p.is_dir() {
                    std::fs::remove_dir_all(&p)
                } else {
                    std::fs::remove_file(&p)
                };
                tracing::info!(path = %p.display(), "removed a stale core cache entry");
            }
        }
    }
}

/// The calling thread's CPU time in µs (what the hash check costs, apart
/// from waiting for a core on a busy machine).
fn thread_cpu_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime(2) fills the struct it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000
}

fn write_if_changed(path: &Path, text: &str) -> std::io::Result<()> {
    if std::fs::read_to_string(path).is_ok_and(|old| old == text) {
        return Ok(());
    }
    // Write then rename, so a concurrent reader never loads half a file.
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

fn path_lit(p: &Path) -> String {
    lisp_string(&p.to_string_lossy())
}

/// What starts every generated script (run after the prelude: boot guard,
/// UTF-8, private Swank fasls): Swank from its source, then Quicklisp.
struct ScriptStart<'a> {
    swank: &'a SwankSource,
    quicklisp: Option<&'a Path>,
    /// Where swank-loader compiles Swank (the server's own cache).
    fasl_dir: &'a Path,
}

/// The command-line arguments that run a generated `script`: load the
/// prelude, then the script through the prelude's guarded load (an error
/// nothing handles ends the process with a report on standard error).
fn entry_args(kind: LispKind, prelude: &Path, script: &Path) -> Vec<OsString> {
    vec![
        kind.load_flag().into(),
        prelude.into(),
        kind.eval_flag().into(),
        format!("(cl-mcp-boot::guarded-load {})", path_lit(script)).into(),
    ]
}

/// The start of every script: quiet compilation, then Swank (and
/// Quicklisp when asked).
fn prelude(start: &ScriptStart) -> String {
    let mut s = String::from(
        ";;;; Generated by cl-mcp-server (src/image/core_cache.rs). Do not edit.\n\
         ;;;; Loaded by CL-MCP-BOOT::GUARDED-LOAD, after prelude.lisp.\n\
         (setf *compile-verbose* nil *compile-print* nil *load-verbose* nil)\n",
    );
    match start.swank {
        SwankSource::Loader(loader) => {
            s += &format!(
                "(load {} :external-format cl-mcp-boot:*utf-8*)\n",
                path_lit(loader)
            );
            s += &format!(
                "(cl-mcp-boot:use-private-swank-fasls (pathname {}))\n",
                path_lit(&dir_path(start.fasl_dir))
            );
            s += "(swank-loader:init :load-contribs t :quiet t)\n";
        }
        SwankSource::Asdf => {
            s += "(require \"asdf\")\n(funcall (intern \"LOAD-SYSTEM\" \"ASDF\") \"swank\")\n";
        }
        SwankSource::Quicklisp(setup) => {
            s += &format!("(load {})\n", path_lit(setup));
            s += "(funcall (intern \"QUICKLOAD\" \"QL\") \"swank\" :silent t)\n";
        }
    }
    if let Some(setup) = start
        .quicklisp
        .filter(|_| !matches!(start.swank, SwankSource::Quicklisp(_)))
    {
        s += &format!(
            "(handler-case (load {})\n  (error (e) (format *error-output* \"~&cl-mcp: Quicklisp failed to load: ~A~%\" e)))\n",
            path_lit(setup)
        );
    }
    s
}

/// The Lisp script that loads Swank, the helpers and the boot code, then
/// either saves a core to `save_to` (ECL, ABCL: compiles the fasls into
/// that directory) or starts Swank. A build (`save_to`) fails on the first
/// helper that does not load or compile, and checks the helpers before it
/// saves anything: a broken helper is never cached. A start from source
/// reports a broken helper and goes on.
fn load_script(
    kind: LispKind,
    start: &ScriptStart,
    helpers: &[PathBuf],
    boot: &Path,
    save_to: Option<&Path>,
) -> String {
    let mut s = prelude(start);
    let mut files = helpers.to_vec();
    files.push(boot.to_path_buf());
    let list = files
        .iter()
        .map(|h| path_lit(h))
        .collect::<Vec<_>>()
        .join(" ");
    let check = "(cl-mcp-boot:check-cache)\n";
    match (save_to, kind) {
        (Some(out), LispKind::Ecl | LispKind::Abcl) => {
            // Compile each file into OUT and load it (later files use the
            // earlier ones' packages and macros).
            s += &format!(
                "(dolist (f (list {list}))\n  \
                 (cl-mcp-boot:compile-and-load f (compile-file-pathname (merge-pathnames (file-namestring f) {out}))))\n\
                 {check}{}\n",
                kind.exit_form(0),
                out = path_lit(&dir_path(out)),
            );
            return s;
        }
        (Some(_), LispKind::Clisp | LispKind::Ccl) => {
            // Their LOAD of a source file interprets it (CLISP) or is
            // slower than a fasl: compile the helpers (next to their
            // sources) into the saved image.
            s += &format!(
                "(dolist (f (list {list}))\n  \
                 (cl-mcp-boot:compile-and-load f (compile-file-pathname f)))\n{check}"
            );
        }
        (Some(_), _) => {
            s += &format!(
                "(dolist (f (list {list}))\n  (cl-mcp-boot:load-helper f :strict t))\n{check}"
            );
        }
        (None, _) => {
            // A broken helper must not keep the image from starting:
            // report it (the server logs the image's stderr) and go on.
            s += "(dolist (f (list";
            for h in helpers {
                s += " ";
                s += &path_lit(h);
            }
            s += "))\n  (cl-mcp-boot:load-helper f))\n";
            s += &format!(
                "(load {} :external-format cl-mcp-boot:*utf-8*)\n",
                path_lit(boot)
            );
        }
    }
    match (save_to, kind) {
        (Some(core), LispKind::Sbcl) => {
            s +=
                "(format t \"~&CL-MCP-SBCL-HOME ~A~%\" (or (sb-int:sbcl-homedir-pathname) \"\"))\n";
            s += "(finish-output)\n";
            s += &format!(
                "(sb-ext:save-lisp-and-die {} :executable nil)\n",
                path_lit(core)
            );
        }
        (Some(mem), LispKind::Clisp) => {
            s += &format!(
                "(ext:saveinitmem {} :quiet t :norc t :executable nil)\n(ext:quit 0)\n",
                path_lit(mem)
            );
        }
        (Some(image), _) => {
            s += &format!(
                "(ccl:save-application {} :prepend-kernel nil)\n",
                path_lit(image)
            );
        }
        (None, _) => s += "(cl-mcp-boot:main)\n",
    }
    s
}

/// `p` as a directory pathname (a trailing slash).
fn dir_path(p: &Path) -> PathBuf {
    let mut s = p.as_os_str().to_os_string();
    if !s.to_string_lossy().ends_with('/') {
        s.push("/");
    }
    PathBuf::from(s)
}

/// The start script of a fasl cache (ECL, ABCL): the prelude and Swank,
/// then the compiled helpers and boot code next to the script, then
/// Swank's start. A helper fasl that does not load ends the start with the
/// boot guard's report (the server then checks and rebuilds the cache).
fn fasl_start_script(start: &ScriptStart, names: &[&str]) -> String {
    let mut s = prelude(start);
    let names = names
        .iter()
        .map(|n| lisp_string(n.trim_end_matches(".lisp")))
        .collect::<Vec<_>>()
        .join(" ");
    s += &format!(
        "(let ((dir (make-pathname :name nil :type nil :version nil :defaults *load-truename*))\n      \
         (type (pathname-type (compile-file-pathname \"x.lisp\"))))\n  \
         (dolist (f (list {names}))\n    \
         (load (make-pathname :name f :type type :defaults dir))))\n\
         (cl-mcp-boot:main)\n"
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A holder of `build.lock` that never lets go (anyone who can open the
    /// file can hold it, a confined image too) delays a build by the wait,
    /// not forever; a free lock is taken at once.
    #[test]
    fn a_held_build_lock_is_waited_for_within_a_bound() {
        let dir = tempfile::tempdir().unwrap();
        let (first, held) = take_build_lock(dir.path(), Duration::from_secs(1)).unwrap();
        assert!(held);
        let t = Instant::now();
        let (_second, held) = take_build_lock(dir.path(), Duration::from_millis(300)).unwrap();
        assert!(!held, "the lock was taken twice");
        assert!(
            t.elapsed() >= Duration::from_millis(300),
            "{:?}",
            t.elapsed()
        );
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        drop(first);
        let (_third, held) = take_build_lock(dir.path(), Duration::from_millis(300)).unwrap();
        assert!(held);
    }

    #[test]
    fn key_changes_with_inputs() {
        let a = CoreCache::new(
            "/c".into(),
            "/bin/sh".into(),
            LispKind::Sbcl,
            SwankSource::Asdf,
            None,
        );
        let b = CoreCache::new(
            "/c".into(),
            "/bin/ls".into(),
            LispKind::Sbcl,
            SwankSource::Asdf,
            None,
        );
        let c = CoreCache::new(
            "/c".into(),
            "/bin/sh".into(),
            LispKind::Sbcl,
            SwankSource::Asdf,
            None,
        );
        let d = CoreCache::new(
            "/c".into(),
            "/bin/sh".into(),
            LispKind::Sbcl,
            SwankSource::Asdf,
            Some("/etc/hostname".into()),
        );
        let e = CoreCache::new(
            "/c".into(),
            "/bin/sh".into(),
            LispKind::Ecl,
            SwankSource::Asdf,
            None,
        );
        assert_ne!(a.core_path(), d.core_path());
        assert!(e
            .core_path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("ecl-"));
        assert_ne!(a.core_path(), b.core_path());
        assert_eq!(a.core_path(), c.core_path());
    }

    #[test]
    fn killed_builds_are_cleared() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("ecl-k.tmp-1")).unwrap();
        std::fs::write(d.join("ecl-k.tmp-1/a.fas"), "").unwrap();
        std::fs::write(d.join("sbcl-k.core.tmp-2"), "").unwrap();
        std::fs::create_dir(d.join("src-k")).unwrap();
        std::fs::write(d.join("clisp-k.mem"), "").unwrap();
        let c = CoreCache::new(
            d.into(),
            "/bin/sh".into(),
            LispKind::Ecl,
            SwankSource::Asdf,
            None,
        );
        // A killed build's script (its pid is no process: above pid_max).
        std::fs::write(d.join("src-k/build-2147483000.lisp"), "").unwrap();
        std::fs::write(
            d.join("src-k")
                .join(format!("build-{}.lisp", std::process::id())),
            "",
        )
        .unwrap();
        c.remove_dead_builds();
        let scripts: Vec<String> = std::fs::read_dir(d.join("src-k"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(scripts, [format!("build-{}.lisp", std::process::id())]);
        let mut left: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["clisp-k.mem", "src-k"]);
    }

    fn start<'a>(swank: &'a SwankSource) -> ScriptStart<'a> {
        ScriptStart {
            swank,
            quicklisp: None,
            fasl_dir: Path::new("/f"),
        }
    }

    #[test]
    fn script_quotes_paths() {
        let swank = SwankSource::Loader("/a \"b\"/swank-loader.lisp".into());
        let s = load_script(
            LispKind::Sbcl,
            &start(&swank),
            &["/h/x.lisp".into()],
            Path::new("/h/boot.lisp"),
            None,
        );
        assert!(
            s.contains(r#"(load "/a \"b\"/swank-loader.lisp" :external-format"#),
            "{s}"
        );
        assert!(s.trim_end().ends_with("(cl-mcp-boot:main)"));
    }

    #[test]
    fn scripts_run_after_the_prelude_and_swank_fasls_go_to_the_cache() {
        let swank = SwankSource::Loader("/l/swank-loader.lisp".into());
        let s = load_script(
            LispKind::Sbcl,
            &start(&swank),
            &["/h/x.lisp".into()],
            Path::new("/h/boot.lisp"),
            Some(Path::new("/c/sbcl-k.core.tmp-1")),
        );
        let args = entry_args(
            LispKind::Sbcl,
            Path::new("/s/prelude.lisp"),
            Path::new("/s/build.lisp"),
        );
        assert_eq!(
            args,
            [
                "--load",
                "/s/prelude.lisp",
                "--eval",
                r#"(cl-mcp-boot::guarded-load "/s/build.lisp")"#
            ]
        );
        assert!(
            s.contains(r#"(cl-mcp-boot:use-private-swank-fasls (pathname "/f/"))"#),
            "{s}"
        );
        // A build loads helpers strictly and checks them before saving.
        assert!(s.contains(":strict t"), "{s}");
        let check = s.find("(cl-mcp-boot:check-cache)").expect("check");
        let save = s.find("save-lisp-and-die").expect("save");
        assert!(check < save, "{s}");
        let fasl = fasl_start_script(&start(&swank), &["x.lisp"]);
        assert!(fasl.contains("(swank-loader:init"), "{fasl}");
    }

    #[test]
    fn fasl_caches_compile_then_start_from_their_own_directory() {
        let build = load_script(
            LispKind::Ecl,
            &start(&SwankSource::Asdf),
            &["/h/x.lisp".into()],
            Path::new("/h/boot.lisp"),
            Some(Path::new("/c/ecl-k.tmp-1")),
        );
        assert!(build.contains("(cl-mcp-boot:compile-and-load f"), "{build}");
        assert!(build.contains(r#""/c/ecl-k.tmp-1/""#), "{build}");
        assert!(build.trim_end().ends_with("(ext:quit 0 nil)"), "{build}");
        let start = fasl_start_script(&start(&SwankSource::Asdf), &["x.lisp", "boot.lisp"]);
        assert!(start.contains(r#"(list "x" "boot")"#), "{start}");
        assert!(start.contains("*load-truename*"), "{start}");
        assert!(start.trim_end().ends_with("(cl-mcp-boot:main)"));
    }

    #[test]
    fn last_words_prefer_the_boot_guards_report() {
        let err = "; some noise\ncl-mcp-boot: END-OF-FILE: end of file on #<stream> (while loading /c/swank-fasl-1/swank.fasl)\nmore\n";
        assert!(last_words(err, "").starts_with("cl-mcp-boot: END-OF-FILE"));
        assert_eq!(last_words("", ""), "(it printed nothing)");
        assert_eq!(last_words("", "a\nb"), "a\nb");
    }
}
