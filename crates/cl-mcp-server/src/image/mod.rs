//! The Lisp image: finding Lisp and Swank, the core cache, starting and
//! supervising a local image, or attaching to one the user runs.
//!
//! This module knows Swank (through `swank-client`) but nothing of MCP: it
//! hands out an [`Image`] handle whose calls return Lisp data or an
//! [`ImageError`] that says what happened in words a user can act on.
//!
//! How a local image is started (see `boot.lisp` for the Lisp side):
//! 1. [`locate`] finds the Lisp and Swank;
//! 2. [`core_cache`] builds (once) or reuses a core with Swank, its
//!    contribs, the helpers (`lisp/`, embedded by [`helpers`]) and
//!    `boot.lisp` preloaded; when that fails, the image loads from source and
//!    the log says so once;
//! 3. the Lisp runs `(cl-mcp-boot:main)` with `CL_MCP_SWANK_SECRET` in its
//!    environment: Swank listens on 127.0.0.1, a port the OS picks, printed
//!    on stdout as `CL-MCP-SWANK-PORT n`; the image's stdout and stderr are
//!    otherwise only logged (never our stdout);
//! 4. the supervisor connects with the secret and starts a persistent worker
//!    thread that serves evaluations ([`Image::eval`]).

mod cache_manifest;
pub mod core_cache;
mod direct;
mod error;
pub mod helpers;
pub mod implementation;
pub mod jail;
mod last_words;
pub mod limits;
pub mod locate;
pub mod places;
pub mod sandbox;
mod stamp;
mod supervisor;

use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

pub use error::ImageError;
pub use supervisor::{
    end_launchers, DebuggerClaim, Image, ImageEvent, ImageInfo, ImageNote, ImageReply, NoteLevel,
};
pub use swank_client::{RexOutcome, SwankEvent, Thread};

/// Where the image comes from and how to start it. The binary fills this
/// from its command line; [`ImageConfig::from_env`] reads the environment
/// variables the README names.
#[derive(Debug, Clone)]
pub struct ImageConfig {
    /// `--lisp PATH|NAME` / `CL_MCP_LISP` (a path, or `sbcl`, `ecl`, `clisp`,
    /// `abcl`, `ccl`); `None`: `sbcl` on `PATH`.
    pub lisp: Option<PathBuf>,
    /// `--allow-lisp PATH` (repeatable, canonical): further Lisp executables
    /// `image-start` and `lisps` may run by path, besides `--lisp`.
    pub allowed_lisps: Vec<PathBuf>,
    /// `--swank-loader PATH` / `SWANK_LOADER`; `None`: search (see [`locate`]).
    pub swank_loader: Option<PathBuf>,
    /// `--swank HOST:PORT`: attach to this Swank instead of starting an image.
    pub attach: Option<String>,
    /// `--swank-secret-file F`: the attached Swank's secret (first line).
    pub attach_secret_file: Option<PathBuf>,
    /// `--image-launcher CMD`: an executable that starts each image and
    /// prints its Swank endpoint (see `supervisor/start_launched.rs`);
    /// `None`: the built-in local launcher.
    pub launcher: Option<PathBuf>,
    /// Core cache directory; `None`: `$XDG_CACHE_HOME/cl-mcp-server` or
    /// `~/.cache/cl-mcp-server`.
    pub cache_dir: Option<PathBuf>,
    /// Build and use the core cache (otherwise always load from source).
    pub use_core_cache: bool,
    /// Load Quicklisp (`~/quicklisp/setup.lisp`) into the image when it is
    /// installed, as a user's init file would (the image itself starts with
    /// `--no-userinit`); it is baked into the cached core.
    pub load_quicklisp: bool,
    /// Extra arguments for the Lisp's runtime (e.g. `--dynamic-space-size 4096`).
    pub lisp_runtime_args: Vec<String>,
    /// How long a start may take before it is given up.
    pub start_timeout: Duration,
    /// Deaths within [`ImageConfig::crash_window`] that stop automatic restarts.
    pub crash_limit: usize,
    /// See [`ImageConfig::crash_limit`].
    pub crash_window: Duration,
    /// `--sandbox` and its allowances (local images only).
    pub sandbox: sandbox::SandboxConfig,
    /// `--memory-limit`: the local image's heap, in MiB (`None`: the
    /// implementation's default).
    pub memory_limit_mb: Option<u64>,
    /// `--max-processes`: processes and threads of the local image and
    /// everything it starts (`None`: no cap). See [`limits`].
    pub max_processes: Option<u32>,
    /// `--image-idle-secs`: stop a local image after this long without a
    /// call (`None`: never); the next call starts a fresh one.
    pub idle_timeout: Option<Duration>,
    /// `--max-images`: the server-wide count of running local images
    /// (shared by every session's configuration; `None`: no limit).
    pub image_quota: Option<Arc<limits::ImageQuota>>,
    /// The project root a local image may write under (read at each start,
    /// so a restart follows `fs-set-project-root`); `None`: the working
    /// directory.
    pub project_root: Option<Arc<RwLock<PathBuf>>>,
}

/// `--max-processes` unless told otherwise: room for any build or test run,
/// far below what would hurt the host.
pub const DEFAULT_MAX_PROCESSES: u32 = 1024;

impl Default for ImageConfig {
    fn default() -> Self {
        ImageConfig {
            lisp: None,
            allowed_lisps: Vec::new(),
            swank_loader: None,
            attach: None,
            attach_secret_file: None,
            launcher: None,
            cache_dir: None,
            use_core_cache: true,
            load_quicklisp: true,
            lisp_runtime_args: Vec::new(),
            start_timeout: Duration::from_secs(120),
            crash_limit: 3,
            crash_window: Duration::from_secs(300),
            sandbox: sandbox::SandboxConfig::default(),
            memory_limit_mb: None,
            max_processes: Some(DEFAULT_MAX_PROCESSES),
            idle_timeout: None,
            image_quota: None,
            project_root: None,
        }
    }
}

impl ImageConfig {
    /// Defaults plus `CL_MCP_LISP` and `SWANK_LOADER` from the environment.
    pub fn from_env() -> Self {
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        ImageConfig {
            lisp: var("CL_MCP_LISP"),
            swank_loader: var("SWANK_LOADER"),
            ..ImageConfig::default()
        }
    }
}

/// Local (started and supervised by us), launched (started by
/// `--image-launcher` and supervised through it) or attached (the user's
/// image).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageMode {
    /// An image this server started; it may be killed and restarted.
    Local,
    /// An image `--image-launcher` started for us, possibly on another host;
    /// stopped, restarted and watched through the launcher, like a local one.
    Launched,
    /// A Swank the user runs; never killed, quit or restarted by us.
    Attached,
}

impl ImageMode {
    /// Whether the server owns the image's life (starts, stops, restarts
    /// it, counts its deaths): local and launched images.
    pub fn owned(self) -> bool {
        self != ImageMode::Attached
    }
}

impl fmt::Display for ImageMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ImageMode::Local => "local",
            ImageMode::Launched => "launched",
            ImageMode::Attached => "attached",
        })
    }
}
