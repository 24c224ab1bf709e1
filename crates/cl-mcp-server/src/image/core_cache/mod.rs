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

mod background;
mod build;
mod check;
mod cleanup;
mod files;
mod keys;
mod lock;
mod scripts;
mod swank_fasls;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::image::helpers;
use crate::image::implementation::LispKind;
use crate::image::jail::ProcessJail;
use crate::image::locate::SwankSource;
use scripts::entry_args;

pub use background::build_in_background;
pub use build::Built;
pub use check::{check_plan, CHECK_TIMEOUT};
pub use cleanup::remove_entry;
pub use files::private_dir;
pub use keys::{coverage_dir, default_cache_dir, project_key};

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
    /// How the processes run for it besides the image (a check) are
    /// confined.
    pub jail: Arc<ProcessJail>,
}

/// Keys and paths for one Lisp + Swank + helpers combination.
#[derive(Clone)]
pub struct CoreCache {
    dir: PathBuf,
    lisp: PathBuf,
    kind: LispKind,
    swank: SwankSource,
    quicklisp: Option<PathBuf>,
    swank_key: String,
    key: String,
    /// Where its builds and checks run (`image/jail.rs`).
    jail: Arc<ProcessJail>,
}

impl CoreCache {
    /// The same cache, its builds and checks run in `jail` (by default
    /// they run unconfined, as for `doctor`).
    pub fn confined(mut self, jail: Arc<ProcessJail>) -> CoreCache {
        self.jail = jail;
        self
    }

    /// Which implementation this cache is for.
    pub fn kind(&self) -> LispKind {
        self.kind
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
                env: start_env(self.kind),
                core: Some(core),
                kind: self.kind,
                jail: self.jail.clone(),
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
            jail: self.jail.clone(),
        }
    }

    /// The plan to start by loading Swank and the helpers from source.
    pub fn source_plan(&self) -> std::io::Result<LaunchPlan> {
        let script = self.write_sources(None)?;
        self.prepare_swank_fasls().map_err(std::io::Error::other)?;
        Ok(self.plan_loading(&script))
    }

    /// The plan to start with no saved image: the prelude, then `script`
    /// (which loads Swank, the helpers and boot.lisp).
    fn plan_loading(&self, script: &Path) -> LaunchPlan {
        let mut args = self.kind.start_args(None);
        args.extend(entry_args(
            self.kind,
            &self.src_dir().join(helpers::PRELUDE.0),
            script,
        ));
        LaunchPlan {
            lisp: self.lisp.clone(),
            args,
            env: start_env(self.kind),
            core: None,
            kind: self.kind,
            jail: self.jail.clone(),
        }
    }
}

/// The JVM options an ABCL start runs with, measured on the 2-core test
/// machine (benches/README.md). A start defines about 14,000 classes (every
/// compiled Lisp function is one), looks each up through three class
/// loaders first (some 56,000 `ClassNotFoundException`s) and runs each a
/// few times:
/// - `IgnoreUnrecognizedVMOptions` first: a JDK that drops one of the
///   others (diagnostic options may go without notice) still starts;
/// - `TieredStopAtLevel=1`: the client compiler alone; `UseSerialGC`: no
///   collector threads competing on a small machine (together ~40 → ~25 s
///   under load; peak speed of long-running code is what they cost);
/// - `-BytecodeVerificationRemote`: no class outside the JDK is verified
///   as it loads — ABCL's, the user's jars', and what ABCL compiles for
///   the user (-0.6 to -1.5 s); a class ABCL's compiler got wrong then
///   misbehaves (or crashes the JVM) when it runs instead of being refused;
/// - `-StackTraceInThrowable`: each of those misses built an exception
///   whose stack trace nobody reads (-0.6 s); Java exceptions (and
///   `Thread.getStackTrace`) then carry no Java stack trace (Lisp
///   backtraces are ABCL's own, unaffected);
/// - `MetaspaceSize=256m`: no full collections for class metadata during
///   the start (three, -0.25 s).
///
/// The image's own JVMs (`run-program "java"`, Maven through `abcl-asdf`)
/// inherit them through the environment. Set `JDK_JAVA_OPTIONS` to choose
/// others: the user's replace ours (README, "Other implementations").
pub(crate) const ABCL_JVM_OPTIONS: &str = "-XX:+IgnoreUnrecognizedVMOptions \
     -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:-UsePerfData \
     -XX:+UnlockDiagnosticVMOptions -XX:-BytecodeVerificationRemote \
     -XX:-StackTraceInThrowable -XX:MetaspaceSize=256m";

/// The environment of an ABCL start: `JDK_JAVA_OPTIONS` (which the `java`
/// launcher reads) set to [`ABCL_JVM_OPTIONS`], unless the user sets it:
/// then theirs alone (a collector of their choice beside ours would stop
/// the JVM, "Multiple garbage collectors selected"). Empty for the other
/// Lisps.
pub(crate) fn start_env(kind: LispKind) -> Vec<(String, String)> {
    if kind != LispKind::Abcl {
        return Vec::new();
    }
    if std::env::var_os("JDK_JAVA_OPTIONS").is_some_and(|v| !v.is_empty()) {
        return Vec::new();
    }
    vec![("JDK_JAVA_OPTIONS".to_string(), ABCL_JVM_OPTIONS.to_string())]
}
