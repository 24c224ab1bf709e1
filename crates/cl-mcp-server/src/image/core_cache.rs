//! The core cache: an SBCL core with Swank, its contribs, the helpers and
//! the boot code preloaded, so a start is mapping a file instead of loading
//! and compiling Lisp (tens of milliseconds instead of seconds).
//!
//! Layout under the cache directory (`$XDG_CACHE_HOME/cl-mcp-server` or
//! `~/.cache/cl-mcp-server`):
//! - `src-<key>/`: the helper sources, `boot.lisp` and the load scripts;
//! - `swank-fasl-<swank key>/`: Swank's compiled files, when the loader
//!   honours `swank-loader:*fasl-directory*` (Debian's puts them where ASDF's
//!   output translations say, `~/.cache/common-lisp/`);
//! - `sbcl-<key>.core` (+ `.home`, the `SBCL_HOME` it needs);
//! - `build.lock`: held while building, so concurrent servers build once.
//!
//! `<key>` hashes the Lisp binary (path, size, mtime), Swank (path, version,
//! size, mtime), the helper sources and the boot code; any change makes a
//! new key, so a stale core is never used. Builds write a temporary file and
//! rename it into place, so a reader never sees a half-written core. Entries
//! of other keys are removed after a successful build once a day old.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::helpers::{self, fnv1a};
use super::locate::{file_stamp, SwankSource};
use lisp_syntax::data::lisp_string;

/// Bumped when the shape of the scripts below changes.
const SCRIPT_VERSION: &str = "1";

/// The cache directory for this user.
pub fn default_cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("cl-mcp-server")
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
    /// The cached core used, or `None` when loading from source.
    pub core: Option<PathBuf>,
}

/// Keys and paths for one Lisp + Swank + helpers combination.
pub struct CoreCache {
    dir: PathBuf,
    lisp: PathBuf,
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
        swank: SwankSource,
        quicklisp: Option<PathBuf>,
    ) -> CoreCache {
        let lisp_id = format!("{}:{}", lisp.display(), file_stamp(&lisp));
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
            swank,
            quicklisp,
            swank_key,
            key,
        }
    }

    /// The cached core's path (it may not exist yet).
    pub fn core_path(&self) -> PathBuf {
        self.dir.join(format!("sbcl-{}.core", self.key))
    }

    fn home_path(&self) -> PathBuf {
        self.dir.join(format!("sbcl-{}.home", self.key))
    }

    fn src_dir(&self) -> PathBuf {
        self.dir.join(format!("src-{}", self.key))
    }

    /// Runtime options shared by every start: no interactive low-level
    /// debugger (a dead heap must exit, not wait on stdin).
    fn runtime_args(core: Option<&Path>) -> Vec<OsString> {
        let mut a: Vec<OsString> = Vec::new();
        if let Some(c) = core {
            a.push("--core".into());
            a.push(c.into());
        }
        for s in [
            "--noinform",
            "--disable-ldb",
            // No --lose-on-corruption: it makes control stack exhaustion
            // (deep recursion) fatal, and evaluate-lisp must return it as an
            // error with the image alive (CONTRACT §5).
            "--end-runtime-options",
            "--no-sysinit",
            "--no-userinit",
        ] {
            a.push(s.into());
        }
        a
    }

    /// The plan to start from the cached core, if it exists.
    pub fn cached_plan(&self) -> Option<LaunchPlan> {
        let core = self.core_path();
        if !core.is_file() {
            return None;
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
        let mut args = Self::runtime_args(Some(&core));
        args.push("--eval".into());
        args.push("(cl-mcp-boot:main)".into());
        Some(LaunchPlan {
            lisp: self.lisp.clone(),
            args,
            env,
            core: Some(core),
        })
    }

    /// Writes the helper sources, boot code and scripts; returns the script
    /// that loads everything (and, when `save_to` is given, saves a core).
    fn write_sources(&self, save_to: Option<&Path>) -> std::io::Result<PathBuf> {
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
        let fasl = self.dir.join(format!("swank-fasl-{}/", self.swank_key));
        let script = load_script(
            &self.swank,
            self.quicklisp.as_deref(),
            &fasl,
            &helper_paths,
            &boot,
            save_to,
        );
        let name = if save_to.is_some() {
            format!("build-{}.lisp", std::process::id())
        } else {
            "start.lisp".to_string()
        };
        let path = src.join(name);
        write_if_changed(&path, &script)?;
        Ok(path)
    }

    /// The plan to start by loading Swank and the helpers from source.
    pub fn source_plan(&self) -> std::io::Result<LaunchPlan> {
        let script = self.write_sources(None)?;
        let mut args = Self::runtime_args(None);
        args.push("--load".into());
        args.push(script.into());
        Ok(LaunchPlan {
            lisp: self.lisp.clone(),
            args,
            env: Vec::new(),
            core: None,
        })
    }

    /// Builds the core (blocking: run it off the async runtime). Safe when
    /// several servers do it at once: a lock file makes the others wait and
    /// then find the finished core.
    pub fn build(&self) -> Result<PathBuf, String> {
        let core = self.core_path();
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| format!("cannot create cache dir {}: {e}", self.dir.display()))?;
        let lock = std::fs::File::create(self.dir.join("build.lock"))
            .map_err(|e| format!("cannot create lock file: {e}"))?;
        // Without the lock (e.g. a filesystem without locks) we only risk
        // duplicate work: the rename below is atomic either way.
        let _locked = lock.lock().is_ok();
        if core.is_file() {
            return Ok(core);
        }
        let tmp = self
            .dir
            .join(format!("sbcl-{}.core.tmp-{}", self.key, std::process::id()));
        let script = self
            .write_sources(Some(&tmp))
            .map_err(|e| format!("cannot write build files: {e}"))?;
        let started = Instant::now();
        let out = std::process::Command::new(&self.lisp)
            .args(Self::runtime_args(None))
            .arg("--non-interactive")
            .arg("--load")
            .arg(&script)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", self.lisp.display()))?;
        let _ = std::fs::remove_file(&script);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        for line in stderr.lines().chain(stdout.lines()) {
            if line.contains("cl-mcp:") {
                tracing::warn!(target: "lisp", "{line}");
            }
        }
        if !out.status.success() || !tmp.is_file() {
            let _ = std::fs::remove_file(&tmp);
            let tail: Vec<&str> = stderr.lines().rev().take(15).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            return Err(format!(
                "core build exited with {}: {}",
                out.status,
                tail.join("\n")
            ));
        }
        if let Some(home) = stdout
            .lines()
            .find_map(|l| l.strip_prefix("CL-MCP-SBCL-HOME "))
        {
            let _ = std::fs::write(self.home_path(), home.trim());
        }
        std::fs::rename(&tmp, &core)
            .map_err(|e| format!("cannot move the core into place: {e}"))?;
        self.prune_stale();
        tracing::info!(
            core = %core.display(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "built the Lisp core cache"
        );
        Ok(core)
    }
}

impl CoreCache {
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
            let ours = ["sbcl-", "src-"].iter().any(|p| name.starts_with(p));
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

/// The Lisp script that loads Swank, the helpers and the boot code, then
/// either saves a core to `save_to` or starts Swank.
fn load_script(
    swank: &SwankSource,
    quicklisp: Option<&Path>,
    fasl_dir: &Path,
    helpers: &[PathBuf],
    boot: &Path,
    save_to: Option<&Path>,
) -> String {
    let mut s = String::from(
        ";;;; Generated by cl-mcp-server (src/image/core_cache.rs). Do not edit.\n\
         (setf *compile-verbose* nil *compile-print* nil *load-verbose* nil)\n",
    );
    match swank {
        SwankSource::Loader(loader) => {
            s += &format!("(load {})\n", path_lit(loader));
            s += &format!(
                "(setf swank-loader:*fasl-directory* {})\n",
                path_lit(fasl_dir)
            );
            s += "(swank-loader:init :load-contribs t :quiet t)\n";
        }
        SwankSource::Asdf => {
            s += "(require :asdf)\n(asdf:load-system \"swank\")\n";
        }
        SwankSource::Quicklisp(setup) => {
            s += &format!("(load {})\n", path_lit(setup));
            s += "(funcall (intern \"QUICKLOAD\" \"QL\") \"swank\" :silent t)\n";
        }
    }
    if let Some(setup) = quicklisp.filter(|_| !matches!(swank, SwankSource::Quicklisp(_))) {
        s += &format!(
            "(handler-case (load {})\n  (error (e) (format *error-output* \"~&cl-mcp: Quicklisp failed to load: ~A~%\" e)))\n",
            path_lit(setup)
        );
    }
    // A broken helper must not keep the image from starting: report it
    // (the server logs the image's stderr) and go on.
    s += "(dolist (f (list";
    for h in helpers {
        s += " ";
        s += &path_lit(h);
    }
    s += "))\n  (handler-case (load f)\n    (error (e) (format *error-output* \"~&cl-mcp: helper ~A failed to load: ~A~%\" f e))))\n";
    s += &format!("(load {})\n", path_lit(boot));
    match save_to {
        Some(core) => {
            s +=
                "(format t \"~&CL-MCP-SBCL-HOME ~A~%\" (or (sb-int:sbcl-homedir-pathname) \"\"))\n";
            s += "(finish-output)\n";
            s += &format!(
                "(sb-ext:save-lisp-and-die {} :executable nil)\n",
                path_lit(core)
            );
        }
        None => s += "(cl-mcp-boot:main)\n",
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_changes_with_inputs() {
        let a = CoreCache::new("/c".into(), "/bin/sh".into(), SwankSource::Asdf, None);
        let b = CoreCache::new("/c".into(), "/bin/ls".into(), SwankSource::Asdf, None);
        let c = CoreCache::new("/c".into(), "/bin/sh".into(), SwankSource::Asdf, None);
        let d = CoreCache::new(
            "/c".into(),
            "/bin/sh".into(),
            SwankSource::Asdf,
            Some("/etc/hostname".into()),
        );
        assert_ne!(a.core_path(), d.core_path());
        assert_ne!(a.core_path(), b.core_path());
        assert_eq!(a.core_path(), c.core_path());
    }

    #[test]
    fn script_quotes_paths() {
        let s = load_script(
            &SwankSource::Loader("/a \"b\"/swank-loader.lisp".into()),
            None,
            Path::new("/f/"),
            &["/h/x.lisp".into()],
            Path::new("/h/boot.lisp"),
            None,
        );
        assert!(s.contains(r#"(load "/a \"b\"/swank-loader.lisp")"#), "{s}");
        assert!(s.trim_end().ends_with("(cl-mcp-boot:main)"));
    }
}
