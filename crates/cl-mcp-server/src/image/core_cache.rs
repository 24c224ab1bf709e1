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
//! - `build.lock`: held while building, so concurrent servers build once.
//!
//! `<key>` hashes the implementation, the Lisp binary (path, size, mtime), Swank (path, version,
//! size, mtime), the helper sources and the boot code; any change makes a
//! new key, so a stale core is never used. Builds write a temporary file and
//! rename it into place, so a reader never sees a half-written core. Entries
//! of other keys are removed after a successful build once a day old.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::helpers::{self, fnv1a};
use super::implementation::LispKind;
use super::locate::{file_stamp, SwankSource};
use lisp_syntax::data::lisp_string;

/// Bumped when the shape of the scripts below changes.
const SCRIPT_VERSION: &str = "3";

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

    /// The plan to start from the cached core, if it exists.
    pub fn cached_plan(&self) -> Option<LaunchPlan> {
        let core = self.core_path();
        if !self.cached() {
            return None;
        }
        if !self.kind.saves_images() {
            let mut args = self.kind.start_args(None);
            args.push(self.kind.load_flag().into());
            args.push(core.join("start.lisp").into());
            return Some(LaunchPlan {
                lisp: self.lisp.clone(),
                args,
                env: Vec::new(),
                core: Some(core),
                kind: self.kind,
            });
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
        Some(LaunchPlan {
            lisp: self.lisp.clone(),
            args,
            env,
            core: Some(core),
            kind: self.kind,
        })
    }

    /// Writes the helper sources, boot code and scripts; returns the script
    /// that loads everything (and, when `save_to` is given, saves a core or
    /// compiles the fasls into that directory).
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
        let fasl = self.swank_fasl_dir();
        let script = load_script(
            self.kind,
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
        let mut args = self.kind.start_args(None);
        args.push(self.kind.load_flag().into());
        args.push(script.into());
        Ok(LaunchPlan {
            lisp: self.lisp.clone(),
            args,
            env: Vec::new(),
            core: None,
            kind: self.kind,
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
        let locked = lock.lock().is_ok();
        if self.cached() {
            return Ok(core);
        }
        if locked {
            // Holding the lock, any temporary entry is a killed build's.
            self.remove_dead_builds();
        }
        let mut tmp_name = core.file_name().unwrap_or_default().to_os_string();
        tmp_name.push(format!(".tmp-{}", std::process::id()));
        let tmp = self.dir.join(tmp_name);
        if !self.kind.saves_images() {
            let _ = std::fs::remove_dir_all(&tmp);
            std::fs::create_dir_all(&tmp)
                .map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
        }
        let script = self
            .write_sources(Some(&tmp))
            .map_err(|e| format!("cannot write build files: {e}"))?;
        let started = Instant::now();
        let mut cmd = std::process::Command::new(&self.lisp);
        cmd.args(self.kind.start_args(None));
        if self.kind == LispKind::Sbcl {
            cmd.arg("--non-interactive");
        }
        let out = cmd
            .arg(self.kind.load_flag())
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
        let built = if self.kind.saves_images() {
            tmp.is_file()
        } else {
            // The compiled files are in place: the start script is written
            // last, so its presence marks a complete entry.
            let mut names: Vec<&str> = helpers::sources().iter().map(|(n, _)| *n).collect();
            names.push(helpers::BOOT.0);
            let text = fasl_start_script(
                self.kind,
                &self.swank,
                self.quicklisp.as_deref(),
                &self.swank_fasl_dir(),
                &names,
            );
            out.status.success() && std::fs::write(tmp.join("start.lisp"), text).is_ok()
        };
        if !out.status.success() || !built {
            let _ = std::fs::remove_file(&tmp);
            let _ = std::fs::remove_dir_all(&tmp);
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
        if !self.kind.saves_images() {
            // A directory cannot replace another by rename: clear a
            // half-built one a killed build may have left.
            let _ = std::fs::remove_dir_all(&core);
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

/// The start of every script: quiet compilation, then Swank (and
/// Quicklisp when asked).
fn prelude(swank: &SwankSource, quicklisp: Option<&Path>, fasl_dir: &Path) -> String {
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
            s += "(require \"asdf\")\n(funcall (intern \"LOAD-SYSTEM\" \"ASDF\") \"swank\")\n";
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
    s
}

/// The Lisp script that loads Swank, the helpers and the boot code, then
/// either saves a core to `save_to` (ECL, ABCL: compiles the fasls into
/// that directory) or starts Swank.
fn load_script(
    kind: LispKind,
    swank: &SwankSource,
    quicklisp: Option<&Path>,
    fasl_dir: &Path,
    helpers: &[PathBuf],
    boot: &Path,
    save_to: Option<&Path>,
) -> String {
    let mut s = prelude(swank, quicklisp, fasl_dir);
    let mut files = helpers.to_vec();
    files.push(boot.to_path_buf());
    let list = files
        .iter()
        .map(|h| path_lit(h))
        .collect::<Vec<_>>()
        .join(" ");
    match (save_to, kind) {
        (Some(out), LispKind::Ecl | LispKind::Abcl) => {
            // Compile each file into OUT and load it (later files use the
            // earlier ones' packages and macros). A file that does not
            // compile fails the build: the start then loads from source,
            // which reports the broken helper and goes on.
            s += &format!(
                "(handler-case\n  (dolist (f (list {list}))\n    \
                 (let ((fasl (compile-file f :output-file (compile-file-pathname (merge-pathnames (file-namestring f) {out})))))\n      \
                 (unless fasl (error \"~A does not compile\" f))\n      (load fasl)))\n  \
                 (error (e) (format *error-output* \"~&cl-mcp: ~A~%\" e) (finish-output *error-output*) {}))\n{}\n",
                kind.exit_form(1),
                kind.exit_form(0),
                out = path_lit(&dir_path(out)),
            );
            return s;
        }
        (Some(_), LispKind::Clisp | LispKind::Ccl) => {
            // Their LOAD of a source file interprets it (CLISP) or is
            // slower than a fasl: compile the helpers (next to their
            // sources) into the saved image; one that does not compile is
            // loaded as source.
            s += &format!(
                "(dolist (f (list {list}))\n  \
                 (handler-case (load (or (compile-file f) f))\n    \
                 (error (e) (format *error-output* \"~&cl-mcp: helper ~A failed to load: ~A~%\" f e))))\n"
            );
        }
        _ => {
            // A broken helper must not keep the image from starting:
            // report it (the server logs the image's stderr) and go on.
            s += "(dolist (f (list";
            for h in helpers {
                s += " ";
                s += &path_lit(h);
            }
            s += "))\n  (handler-case (load f)\n    (error (e) (format *error-output* \"~&cl-mcp: helper ~A failed to load: ~A~%\" f e))))\n";
            s += &format!("(load {})\n", path_lit(boot));
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

/// The start script of a fasl cache (ECL, ABCL): Swank, then the compiled
/// helpers and boot code next to the script, then Swank's start.
fn fasl_start_script(
    kind: LispKind,
    swank: &SwankSource,
    quicklisp: Option<&Path>,
    fasl_dir: &Path,
    names: &[&str],
) -> String {
    let mut s = prelude(swank, quicklisp, fasl_dir);
    let names = names
        .iter()
        .map(|n| lisp_string(n.trim_end_matches(".lisp")))
        .collect::<Vec<_>>()
        .join(" ");
    s += &format!(
        "(let ((dir (make-pathname :name nil :type nil :version nil :defaults *load-truename*))\n      \
         (type (pathname-type (compile-file-pathname \"x.lisp\"))))\n  \
         (dolist (f (list {names}))\n    \
         (handler-case (load (make-pathname :name f :type type :defaults dir))\n      \
         (error (e) (format *error-output* \"~&cl-mcp: helper ~A failed to load: ~A~%\" f e) (finish-output *error-output*) {}))))\n\
         (cl-mcp-boot:main)\n",
        kind.exit_form(3)
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

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
        c.remove_dead_builds();
        let mut left: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["clisp-k.mem", "src-k"]);
    }

    #[test]
    fn script_quotes_paths() {
        let s = load_script(
            LispKind::Sbcl,
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

    #[test]
    fn fasl_caches_compile_then_start_from_their_own_directory() {
        let build = load_script(
            LispKind::Ecl,
            &SwankSource::Asdf,
            None,
            Path::new("/f/"),
            &["/h/x.lisp".into()],
            Path::new("/h/boot.lisp"),
            Some(Path::new("/c/ecl-k.tmp-1")),
        );
        assert!(build.contains("(compile-file f"), "{build}");
        assert!(build.contains(r#""/c/ecl-k.tmp-1/""#), "{build}");
        assert!(build.trim_end().ends_with("(ext:quit 0 nil)"), "{build}");
        let start = fasl_start_script(
            LispKind::Ecl,
            &SwankSource::Asdf,
            None,
            Path::new("/f/"),
            &["x.lisp", "boot.lisp"],
        );
        assert!(start.contains(r#"(list "x" "boot")"#), "{start}");
        assert!(start.contains("*load-truename*"), "{start}");
        assert!(start.trim_end().ends_with("(cl-mcp-boot:main)"));
    }
}
